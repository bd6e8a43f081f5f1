//! The service as a whole process on loopback: schematics survive a restart,
//! limits and errors are answered as the contract says, SIGTERM stops it
//! cleanly.

use crate::support;

use std::path::Path;
use std::time::Duration;

use crate::support::{Service, send, sha256_hex};

/// `serve --offline` on `cache` with JSON logs, on the port it picks itself
/// (`--listen 127.0.0.1:0`, read back from its `listening` line).
fn server(cache: &Path, extra: &[&str]) -> Service {
    Service::builder()
        .listen_port_zero()
        .args(["--log-format", "json", "--offline", "--cache-dir"])
        .arg(cache)
        .args(extra)
        .start()
}

/// SIGTERM and wait up to 10 s; the exit code.
fn stop(srv: Service) -> Option<i32> {
    srv.terminate(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schematics_matrix_limits_and_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let http = reqwest::Client::new();

    let srv = server(&cache, &[]);
    let base = srv.url();

    let r = send(http.get(format!("{base}/healthz"))).await;
    assert_eq!(r.status, 200);

    // The embedded named schematics are known without any POST.
    let cozy = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
    let r = send(http.get(format!("{base}/schematics/{cozy}"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(sha256_hex(&r.body), cozy);

    // POST a new one (JSON body), then read it back.
    let body = r#"{"customization":{"extraKernelArgs":["console=ttyS0"],"systemExtensions":{"officialExtensions":["siderolabs/qemu-guest-agent","siderolabs/iscsi-tools"]}}}"#;
    let r = send(
        http.post(format!("{base}/schematics"))
            .header("content-type", "application/json")
            .body(body),
    )
    .await;
    assert_eq!(r.status, 201);
    let v = r.json();
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 64);
    assert_eq!(sha256_hex(v["schematic"].as_str().unwrap().as_bytes()), id);
    let r = send(http.get(format!("{base}/schematics/{id}"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["content-type"].to_str().unwrap(),
        "application/yaml"
    );
    assert_eq!(sha256_hex(&r.body), id);

    // The same schematic as YAML gets the same ID.
    let yaml = "customization:\n  systemExtensions:\n    officialExtensions: [siderolabs/qemu-guest-agent, siderolabs/iscsi-tools]\n  extraKernelArgs: [console=ttyS0]\n";
    let r = send(http.post(format!("{base}/schematics")).body(yaml)).await;
    assert_eq!(r.status, 201);
    let v = r.json();
    assert_eq!(v["id"], id.as_str());

    // Bad schematics: 400 with the reason.
    for (bad, word) in [
        ("customization: {nope: 1}", "nope"),
        ("owner: alice", "owner"),
        ("customization: {meta: [{key: 300, value: x}]}", "0..255"),
    ] {
        let r = send(http.post(format!("{base}/schematics")).body(bad)).await;
        assert_eq!(r.status, 400, "{bad}");
        let text = r.text();
        assert!(text.contains(word), "{bad}: {text}");
    }
    // Over 1 MiB: 413. The server stops reading and closes the connection,
    // so these go through a client that keeps no idle connections.
    let one_shot = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let big = format!(
        "customization: {{extraKernelArgs: [{}]}}",
        "a".repeat(1024 * 1024 + 10)
    );
    let r = one_shot
        .post(format!("{base}/schematics"))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    // The same without a Content-Length (chunked): cut off at 1 MiB.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..17).map(|_| Ok(vec![b'a'; 64 * 1024])).collect();
    let r = one_shot
        .post(format!("{base}/schematics"))
        .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);

    // Unknown and malformed IDs.
    let r = send(http.get(format!("{base}/schematics/{}", "0".repeat(64)))).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.text().trim(), "schematic not found");
    for bad in ["abc", "..%2F..%2Fetc%2Fpasswd", &"A".repeat(64)] {
        let r = send(http.get(format!("{base}/schematics/{bad}"))).await;
        assert_eq!(r.status, 400, "{bad}");
    }

    // The matrix API.
    let check = |q: &str| send(http.get(format!("{base}/api/v1/matrix/check?{q}")));
    let r = check("talos=v1.13.6&kubernetes=v1.35").await;
    assert_eq!(
        (r.status.as_u16(), r.json()["supported"].as_bool()),
        (200, Some(true))
    );
    let r = check("talos=v1.13.6&kubernetes=1.30").await;
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["supported"], false);
    assert_eq!(
        v["message"],
        "Kubernetes v1.30 is not supported by Talos v1.13.6. Supported versions: v1.31, v1.32, v1.33, v1.34, v1.35, v1.36"
    );
    for q in ["talos=v1.x&kubernetes=1.30", "talos=1.13", ""] {
        let r = check(q).await;
        assert_eq!(r.status, 400, "{q}");
    }
    let r = send(http.get(format!("{base}/api/v1/matrix"))).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    // Talos 1.0 to 1.15 (1.15 before its tag, marked pending).
    assert_eq!(v["talos"].as_array().unwrap().len(), 16);
    assert!(
        v["talos"][15]["pending"]
            .as_str()
            .unwrap()
            .contains("ad8823176e75")
    );

    assert_eq!(stop(srv), Some(0));

    // Restart on the same cache dir: the POSTed schematic is still there.
    let srv = server(&cache, &[]);
    let r = send(http.get(format!("{}/schematics/{id}", srv.url()))).await;
    assert_eq!(r.status, 200);
    assert_eq!(sha256_hex(&r.body), id);
    assert_eq!(stop(srv), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schematics_dir_and_matrix_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("named");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("mine.yaml"),
        "customization: {extraKernelArgs: [mine]}\n",
    )
    .unwrap();
    let mine = talos_gen::schematic::id_and_canonical("customization: {extraKernelArgs: [mine]}")
        .unwrap()
        .0;
    let matrix = tmp.path().join("matrix.yaml");
    std::fs::write(
        &matrix,
        "talos:\n  - talos: \"1.99\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.1\"}\n",
    )
    .unwrap();
    let srv = server(
        &tmp.path().join("cache"),
        &[
            "--schematics-dir",
            dir.to_str().unwrap(),
            "--matrix",
            matrix.to_str().unwrap(),
        ],
    );
    let http = reqwest::Client::new();
    let r = send(http.get(format!("{}/schematics/{mine}", srv.url()))).await;
    assert_eq!(r.status, 200);
    // The embedded ones are replaced by the directory.
    let cozy = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
    let r = send(http.get(format!("{}/schematics/{cozy}", srv.url()))).await;
    assert_eq!(r.status, 404);
    // Once POSTed, it is known whatever the named set.
    let r = send(
        http.post(format!("{}/schematics", srv.url()))
            .body(include_str!("../../schematics/cozystack.yaml")),
    )
    .await;
    assert_eq!(r.status, 201);
    let r = send(http.get(format!("{}/schematics/{cozy}", srv.url()))).await;
    assert_eq!(r.status, 200);
    let r = send(http.get(format!(
        "{}/api/v1/matrix/check?talos=1.99.0&kubernetes=1.41",
        srv.url()
    )))
    .await;
    let v = r.json();
    assert_eq!(v["supported"], true);
    assert_eq!(stop(srv), Some(0));
}

#[test]
fn bad_matrix_file_or_schematics_dir_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(&bad, "talos: nope\n").unwrap();
    let cache = tmp.path().join("cache");
    let missing = tmp.path().join("missing");
    for (flag, path) in [("--matrix", &bad), ("--schematics-dir", &missing)] {
        let serve = ["serve", "--listen", "127.0.0.1:0", "--cache-dir"];
        let (c, p) = (cache.to_str().unwrap(), path.to_str().unwrap());
        let o = support::run(&[&serve[..], &[c, flag, p]].concat(), None);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", support::stderr(&o));
    }
}
