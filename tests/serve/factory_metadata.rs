//! The factory's keys and lists (`/oci/cosign/signing-key.pub`,
//! `/secureboot/signing-cert.pem`, `/version/{v}/extensions/official`,
//! `/version/{v}/overlays/official`, and `/versions`) with a real nginx as
//! the factory on loopback: `serve` answers them online within
//! `--metadata-ttl` from the store, asks again after it, keeps only what is
//! the document, answers from the store when the factory is down and when
//! `--offline`; `mirror sync` keeps them for each Talos release of its
//! config (a 404 noted, not a failure) and `mirror export --config`
//! carries them.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::{Nginx, NginxOpts, Service, curl, eventually, talos_gen, xz_bytes};

const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
const V: &str = "v1.13.6";
const KEY: &str = "/oci/cosign/signing-key.pub";
const CERT: &str = "/secureboot/signing-cert.pem";

fn ext_path(v: &str) -> String {
    format!("/version/{v}/extensions/official")
}

fn overlay_path(v: &str) -> String {
    format!("/version/{v}/overlays/official")
}

struct Docs {
    key: String,
    cert: String,
    extensions: String,
    versions: String,
}

fn docs() -> Docs {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let ck = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["Talos SecureBoot".to_string()])
        .unwrap()
        .self_signed(&ck)
        .unwrap();
    Docs {
        key: kp.public_key_pem(),
        cert: cert.pem(),
        extensions: r#"[{"name":"siderolabs/qemu-guest-agent","ref":"ghcr.io/siderolabs/qemu-guest-agent:10.0.2","digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","author":"Sidero Labs","description":"QEMU guest agent"}]"#.into(),
        versions: format!("[\"v1.13.5\",\"{V}\"]"),
    }
}

fn write(root: &Path, path: &str, body: &[u8]) {
    let p = root.join(path.trim_start_matches('/'));
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

/// nginx as the factory: the documents under `root` (PEM files with the
/// factory's content type).
fn factory(root: &Path) -> Nginx {
    Nginx::start(
        root,
        NginxOpts {
            server_extra: format!(
                "location = {KEY} {{ default_type application/x-pem-file; }}\n    location = {CERT} {{ default_type application/x-pem-file; }}\n    location /version/ {{ default_type application/json; }}"
            ),
            ..Default::default()
        },
    )
}

fn get(svc: &Service, path: &str) -> support::Curl {
    curl(&[&format!("{}{path}", svc.url())])
}

fn content_type(svc: &Service, path: &str) -> String {
    let o = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{content_type}"])
        .arg(format!("{}{path}", svc.url()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `Warning` header of an answer, if any.
fn warning(r: &support::Curl) -> Option<String> {
    r.headers.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("warning")
            .then(|| v.trim().to_string())
    })
}

/// `talos_gen_stale_answers_total{kind="document"}` of `/metrics`.
fn stale_count(svc: &Service) -> u64 {
    let m = String::from_utf8(get(svc, "/metrics").body).unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix("talos_gen_stale_answers_total{kind=\"document\"} "))
        .unwrap_or_else(|| panic!("no stale document counter in {m}"))
        .parse()
        .unwrap()
}

fn gets(ng: &Nginx, path: &str) -> usize {
    ng.count(&format!("\"GET {path} "))
}

#[test]
fn serve_answers_them_within_the_ttl_asks_again_after_and_falls_back_to_the_store() {
    let d = docs();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write(&root, KEY, d.key.as_bytes());
    write(&root, &ext_path(V), d.extensions.as_bytes());
    write(&root, "/versions", d.versions.as_bytes());
    // A captive portal's page where the certificate should be.
    write(&root, CERT, b"<html><body>Please log in</body></html>\n");
    let mut ng = factory(&root);
    let cache = dir.path().join("cache");
    let cache_s = cache.to_str().unwrap();
    let mut svc = Service::start(&[
        "--cache-dir",
        cache_s,
        "--factory-url",
        &ng.url(),
        "--metadata-ttl",
        "2",
    ]);

    // Online: the factory's bytes and content type; within the TTL the
    // store answers (one upstream GET for three client GETs).
    for _ in 0..3 {
        let r = get(&svc, KEY);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, d.key.as_bytes());
        // A version without its `v`, as the factory accepts it.
        let r = get(&svc, "/version/1.13.6/extensions/official");
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, d.extensions.as_bytes());
    }
    assert_eq!(content_type(&svc, KEY), "application/x-pem-file");
    // Fresh answers, from the factory or the store within the TTL, say
    // nothing of staleness.
    for p in [KEY, "/versions"] {
        let r = get(&svc, p);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(warning(&r), None, "{p}: {}", r.headers);
    }
    assert_eq!(gets(&ng, KEY), 1);
    assert_eq!(gets(&ng, &ext_path(V)), 1);

    // Not the document: 502 naming it, nothing kept (asked again next time).
    let r = get(&svc, CERT);
    assert_eq!(r.status, 502, "{r:?}");
    let msg = String::from_utf8_lossy(&r.body);
    assert!(msg.contains("not a PEM certificate"), "{msg}");
    write(&root, CERT, d.cert.as_bytes());
    let r = get(&svc, CERT);
    assert_eq!((r.status, r.body.as_slice()), (200, d.cert.as_bytes()));
    assert_eq!(gets(&ng, CERT), 2);

    // The factory's 404 passes through and is not kept.
    let r = get(&svc, &overlay_path(V));
    assert_eq!(r.status, 404, "{r:?}");
    // A version that is none: 400 naming it, the factory not asked.
    let r = get(&svc, "/version/latest/extensions/official");
    assert_eq!(r.status, 400, "{r:?}");
    assert!(String::from_utf8_lossy(&r.body).contains("version"));
    assert_eq!(ng.count("latest"), 0);

    // After the TTL the factory is asked again and its new list answers.
    let newer = d.extensions.replace("10.0.2", "10.0.3");
    write(&root, &ext_path(V), newer.as_bytes());
    // Polled rather than slept past the TTL: every answer is the stored or
    // the factory's new list, never anything else, and until the TTL is
    // over it is the stored one without asking the factory (the count below
    // is exactly one more GET, however many polls it took).
    eventually(
        "the factory's new list once the TTL is over",
        Duration::from_secs(20),
        || {
            let r = get(&svc, &ext_path(V));
            assert_eq!(r.status, 200, "{r:?}");
            assert!(
                r.body == newer.as_bytes() || r.body == d.extensions.as_bytes(),
                "{r:?}"
            );
            assert_eq!(warning(&r), None, "{}", r.headers);
            r.body == newer.as_bytes()
        },
    );
    assert_eq!(gets(&ng, &ext_path(V)), 2);
    assert_eq!(stale_count(&svc), 0);

    // The factory down, the TTL over: the stored copies answer.
    ng.stop();
    // Polled until each answer is the fallback itself (the service logs
    // `serving the stored copy` for it once the TTL is over and the factory
    // cannot be asked), not slept past the TTL; every answer meanwhile is
    // the stored copy, and each one given as the fallback says it is stale
    // (Warning: 110) and is counted, once.
    let mut stale_seen = 0;
    for (p, want) in [
        (KEY, &d.key),
        (CERT, &d.cert),
        (&ext_path(V)[..], &newer),
        ("/versions", &d.versions),
    ] {
        let fallbacks = |svc: &Service| {
            svc.log_text()
                .lines()
                .filter(|l| l.contains("serving the stored copy") && l.contains(p))
                .count()
        };
        let before = fallbacks(&svc);
        let mut last_warning = None;
        eventually(
            &format!("the stored copy of {p} served as the fallback"),
            Duration::from_secs(20),
            || {
                let r = get(&svc, p);
                assert_eq!((r.status, r.body.as_slice()), (200, want.as_bytes()), "{p}");
                last_warning = warning(&r);
                if last_warning.is_some() {
                    stale_seen += 1;
                }
                fallbacks(&svc) > before
            },
        );
        assert_eq!(
            last_warning.as_deref(),
            Some("110 - \"stale\""),
            "{p}: the fallback answer says it is stale"
        );
    }
    assert_eq!(stale_count(&svc), stale_seen);
    let r = get(&svc, &overlay_path(V));
    assert_eq!(r.status, 502, "{r:?}");
    svc.proc.kill();

    // Offline over the same store: the same bytes, and a 404 for what the
    // store does not hold.
    let off = Service::start(&["--offline", "--cache-dir", cache_s]);
    for (p, want) in [(KEY, &d.key), (CERT, &d.cert), (&ext_path(V)[..], &newer)] {
        let r = get(&off, p);
        assert_eq!((r.status, r.body.as_slice()), (200, want.as_bytes()), "{p}");
        // Offline the store is the answer, not a fallback.
        assert_eq!(warning(&r), None, "{p}: {}", r.headers);
    }
    assert_eq!(content_type(&off, CERT), "application/x-pem-file");
    let r = get(&off, &overlay_path(V));
    assert_eq!(r.status, 404);
    let msg = String::from_utf8_lossy(&r.body);
    assert!(
        msg.contains(
            "/version/v1.13.6/overlays/official is not in the cache and the service is offline"
        ),
        "{msg}"
    );
}

#[test]
fn mirror_sync_keeps_them_per_release_notes_a_404_and_export_carries_them() {
    let d = docs();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write(&root, KEY, d.key.as_bytes());
    write(&root, CERT, d.cert.as_bytes());
    write(&root, "/versions", d.versions.as_bytes());
    write(&root, &ext_path(V), d.extensions.as_bytes());
    // No overlays list for the release: a 404.
    let disk = xz_bytes(&[7u8; 4096]);
    write(
        &root,
        &format!("/image/{S}/{V}/openstack-amd64.raw.xz"),
        &disk,
    );
    let ng = factory(&root);
    let cfg = dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [openstack-amd64.raw.xz]\n"),
    )
    .unwrap();
    // `mirror plan` names them (no network).
    let o = talos_gen(&["mirror", "plan", "--config", cfg.to_str().unwrap()]);
    let plan = String::from_utf8_lossy(&o.stdout);
    for p in ["/versions", KEY, CERT, &ext_path(V), &overlay_path(V)] {
        assert!(plan.lines().any(|l| l == format!("  {p}")), "{p}: {plan}");
    }
    let cache = dir.path().join("cache");
    let sync = || support::mirror_sync(&cfg, &cache, &["--factory-url", &ng.url()]);
    let o = sync();
    let err = String::from_utf8_lossy(&o.stderr);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    for p in ["/versions", KEY, CERT, &ext_path(V)] {
        assert!(
            err.contains(&format!("ok     factory {p}: fetched 1 object (")),
            "{p}: {err}"
        );
    }
    assert!(
        err.contains(&format!(
            "note   factory {}: the factory does not offer it (404); noted, nothing kept",
            overlay_path(V)
        )),
        "{err}"
    );
    assert!(!err.contains("FAILED"), "{err}");
    assert!(
        out.contains(
            "1 item, 1 ok, 0 failed; factory documents: 4 kept, 1 not offered (404), 0 failed;"
        ),
        "{out}"
    );
    // Again: nothing new, all already stored.
    let o = sync();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("ok     factory {KEY}: already stored")),
        "{err}"
    );

    // Carried by an export limited to the config, into an empty store.
    let other = dir.path().join("other");
    support::carry(&cache, &dir.path().join("mirror.tar"), &other, Some(&cfg));
    let off = Service::start(&["--offline", "--cache-dir", other.to_str().unwrap()]);
    for (p, want) in [
        ("/versions", &d.versions),
        (KEY, &d.key),
        (CERT, &d.cert),
        (&ext_path(V)[..], &d.extensions),
    ] {
        let r = get(&off, p);
        assert_eq!((r.status, r.body.as_slice()), (200, want.as_bytes()), "{p}");
    }
    assert_eq!(get(&off, &overlay_path(V)).status, 404);
}

/// Issue 20 item 7: factory documents are coalesced like artifacts: 30
/// concurrent cold GETs of a slow `/versions` make one factory request
/// (50 used to make 12), and every client gets the whole document. And the
/// iPXE script built from the request's `X-Forwarded-Host` says so
/// (`Vary`, `Cache-Control: private`), so a shared cache in front never
/// hands one client's host to another.
#[test]
fn documents_are_coalesced_and_a_script_built_from_headers_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    // ~120 KiB of releases at 100 KiB/s: the first request is still
    // running when the others arrive.
    let list: Vec<String> = (0..12000)
        .map(|i| format!("\"v1.{}.{}\"", i / 100, i % 100))
        .collect();
    let versions = format!("[{}]", list.join(","));
    write(&root, "/versions", versions.as_bytes());
    let script = format!(
        "#!ipxe\nkernel https://pxe.factory.talos.dev/image/{S}/{V}/kernel-amd64 talos.platform=metal\ninitrd https://pxe.factory.talos.dev/image/{S}/{V}/initramfs-amd64.xz\nboot\n"
    );
    write(
        &root,
        &format!("/pxe/{S}/{V}/metal-amd64"),
        script.as_bytes(),
    );
    let ng = Nginx::start(
        &root,
        NginxOpts {
            limit_rate: Some("100k".into()),
            server_extra: "location = /versions { default_type application/json; }".into(),
            ..Default::default()
        },
    );
    let cache = dir.path().join("cache");
    let svc = Service::start(&[
        "--cache-dir",
        cache.to_str().unwrap(),
        "--factory-url",
        &ng.url(),
    ]);
    let url = format!("{}/versions", svc.url());
    let clients: Vec<_> = (0..30).map(|_| support::curl_spawn(&[&url])).collect();
    for c in clients {
        let r = c.wait();
        assert_eq!(r.status, 200, "{}", r.stderr);
        assert_eq!(r.body, versions.as_bytes());
    }
    assert_eq!(gets(&ng, "/versions"), 1, "{}", ng.access_log());

    let pxe = format!("{}/pxe/{S}/{V}/metal-amd64", svc.url());
    let r = curl(&["-H", "X-Forwarded-Host: talos-gen.example", &pxe]);
    assert_eq!(r.status, 200);
    let body = String::from_utf8_lossy(&r.body);
    assert!(body.contains("http://talos-gen.example/image/"), "{body}");
    let vary = r.header("vary").unwrap_or_default().to_ascii_lowercase();
    assert!(
        vary.contains("x-forwarded-host") && vary.contains("host"),
        "vary: {vary}"
    );
    assert_eq!(r.header("cache-control").as_deref(), Some("private"));
}
