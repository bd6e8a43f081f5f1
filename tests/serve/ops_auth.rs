//! `--api-token-file`: `/api/v1/` writes need `Authorization: Bearer
//! <token>` (401 otherwise), reads and the factory routes stay open, and
//! neither the token, nor request bodies, nor the secrets in responses
//! appear in the service's logs (even at debug level).

use std::process::Command;

use crate::support::{Service, curl};

const TOKEN: &str = "tg-3f9c1e2a7b-very-secret-token";
const MARKER: &str = "body-marker-5d1e8c2b";

fn post(url: &str, auth: Option<&str>, body: &str) -> (u16, String) {
    let auth = auth.map(|a| format!("Authorization: {a}"));
    let mut args = vec![
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        body,
    ];
    if let Some(a) = &auth {
        args.extend(["-H", a]);
    }
    args.push(url);
    let r = curl(&args);
    (r.status, String::from_utf8_lossy(&r.body).into_owned())
}

#[test]
fn api_writes_need_the_token_and_logs_keep_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let svc = Service::builder()
        .args(["--cache-dir", cache.to_str().unwrap(), "--offline"])
        .api_token(dir.path(), &format!("{TOKEN}\n"))
        .rust_log("debug,hyper=trace,talos_gen=trace")
        .start();
    let mc = format!("{}/api/v1/machineconfig", svc.url());
    let body = format!(
        r#"{{"clusterName": "{MARKER}", "endpoint": "https://{MARKER}.example:6443", "instanceType": "u1.medium"}}"#
    );
    // No token, a wrong one, another scheme, the token with one byte off: 401.
    for auth in [
        None,
        Some("Bearer wrong".to_string()),
        Some(format!("Basic {TOKEN}")),
        Some(format!("Bearer {}x", TOKEN)),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
    ] {
        let (code, text) = post(&mc, auth.as_deref(), &body);
        assert_eq!(code, 401, "{auth:?}: {text}");
        assert!(!text.contains("secret"), "{text}");
    }
    let (code, _) = post(
        &format!("{}/api/v1/kubelet-reservations", svc.url()),
        None,
        r#"{"instanceType": "u1.medium"}"#,
    );
    assert_eq!(code, 401);
    // With the token: the config, secrets and all.
    let (code, yaml) = post(&mc, Some(&format!("Bearer {TOKEN}")), &body);
    assert_eq!(code, 200, "{yaml}");
    assert!(yaml.contains(MARKER));
    let (code, _) = post(
        &format!("{}/api/v1/kubelet-reservations", svc.url()),
        Some(&format!("Bearer {TOKEN}")),
        r#"{"instanceType": "u1.medium"}"#,
    );
    assert_eq!(code, 200);
    // Reads and the factory-compatible routes need no token.
    let code = curl(&[&format!("{}/api/v1/matrix", svc.url())]).status;
    assert_eq!(code, 200);
    let code = curl(&[&format!(
        "{}/api/v1/matrix/check?talos=v1.13&kubernetes=v1.35",
        svc.url()
    )])
    .status;
    assert_eq!(code, 200);
    let (code, _) = post(
        &format!("{}/schematics", svc.url()),
        None,
        r#"{"customization": {"extraKernelArgs": ["net.ifnames=0"]}}"#,
    );
    assert_eq!(code, 201);
    // An invalid body sent with the token: refused, and not echoed to the log.
    let (code, _) = post(
        &mc,
        Some(&format!("Bearer {TOKEN}")),
        &format!(r#"{{"clusterName": "{MARKER}", "bogus{MARKER}": 1}}"#),
    );
    assert_eq!(code, 400);

    let metrics = curl(&[&format!("{}/metrics", svc.url())]).body;
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("talos_gen_auth_failures_total 6"),
        "{metrics}"
    );

    // The secrets of the answer: every long value in the config.
    let secrets: Vec<&str> = yaml
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(": ")?;
            let k = k.trim().trim_start_matches("- ");
            let v = v.trim();
            (matches!(
                k,
                "token"
                    | "key"
                    | "crt"
                    | "secret"
                    | "id"
                    | "aescbcEncryptionSecret"
                    | "secretboxEncryptionSecret"
            ) && v.len() >= 16)
                .then_some(v)
        })
        .collect();
    assert!(secrets.len() >= 4, "no secrets found in the answer: {yaml}");
    let log = svc.log_text();
    assert!(log.contains("listening"), "the log is empty? {log}");
    assert!(!log.contains(TOKEN), "the token is in the log");
    assert!(
        !log.contains(&TOKEN[..12]),
        "part of the token is in the log"
    );
    assert!(!log.contains(MARKER), "the request body is in the log");
    for s in &secrets {
        let probe = &s[..s.len().min(24)];
        assert!(
            !log.contains(probe),
            "a secret from the answer is in the log: {probe}"
        );
    }
}

#[test]
fn unusable_token_file_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    // A FIFO nobody writes to and a device: refused at once (a FIFO used
    // to hang the start, /dev/zero to be read without end).
    let fifo = dir.path().join("fifo");
    crate::support::mkfifo(&fifo);
    for f in [
        empty,
        dir.path().join("missing"),
        fifo,
        std::path::PathBuf::from("/dev/zero"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--offline",
                "--cache-dir",
            ])
            .arg(dir.path().join("cache"))
            .arg("--api-token-file")
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{o:?}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--api-token-file"),
            "{o:?}"
        );
    }
}

fn dir_bytes(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .map(|rd| rd.flatten().map(|e| e.metadata().unwrap().len()).sum())
        .unwrap_or(0)
}

/// Issue 20 item 1: with `--api-token-file`, `POST /schematics` without the
/// token is still answered (factory clients send none), but what it stores
/// is cache: unpinned, counted in `--cache-max-size`, evicted. A flood of
/// distinct 32 KiB schematics from one unauthenticated client keeps the
/// store within its limit (it used to pin every one: 9.8 MB in a 2 MiB
/// store). One POSTed with the token is pinned and survives the flood.
#[test]
fn unauthenticated_schematics_cannot_grow_the_store_past_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let limit: u64 = 256 << 10;
    let svc = Service::builder()
        .args([
            "--cache-dir",
            cache.to_str().unwrap(),
            "--offline",
            "--cache-max-size",
            "256Ki",
        ])
        .api_token(dir.path(), &format!("{TOKEN}\n"))
        .start();
    let url = format!("{}/schematics", svc.url());
    let schematic = |i: usize| {
        format!(
            r#"{{"customization": {{"extraKernelArgs": ["flood.{i}={}"]}}}}"#,
            "x".repeat(32 << 10)
        )
    };
    let id_of = |text: &str| -> String {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let (code, text) = post(&url, Some(&format!("Bearer {TOKEN}")), &schematic(0));
    assert_eq!(code, 201, "{text}");
    let kept = id_of(&text);
    let mut first = None;
    for i in 1..=40 {
        let (code, text) = post(&url, None, &schematic(i));
        assert_eq!(code, 201, "{text}");
        first.get_or_insert_with(|| id_of(&text));
        let bytes = dir_bytes(&cache.join("objects/sha256"));
        // The pinned one, and the limit (the newest object is kept while
        // it is committed).
        assert!(
            bytes <= limit + (2 * (33 << 10)),
            "after {i} uploads the store holds {bytes} bytes (limit {limit})"
        );
    }
    // An unauthenticated POST of the pinned one leaves its pin.
    let (code, _) = post(&url, None, &schematic(0));
    assert_eq!(code, 201);
    let get = |id: &str| curl(&[&format!("{url}/{id}")]).status;
    assert_eq!(get(&kept), 200, "the token's schematic is pinned");
    assert_eq!(
        get(first.as_ref().unwrap()),
        404,
        "the first unauthenticated one was evicted"
    );
    // A wrong token is no token: not pinned, not refused.
    let (code, text) = post(&url, Some("Bearer wrong"), &schematic(999));
    assert_eq!(code, 201, "{text}");
}
