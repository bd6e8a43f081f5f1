//! Issue 21 items 1 and 3: what the store holds for a registry answers
//! online whatever `--mirror-upstream` names; the operator sees what failed
//! (the last errors with path, upstream URL and reason; offline misses by
//! path; an import shown like a sync; the mirror gauges in `/metrics`; the
//! access log's query, client and durations). Real parts: nginx as the
//! factory (answering 500 for one artifact), docker-registry as
//! registry.k8s.io, headless Chromium for the screenshots kept in
//! `tests/artifacts/` (`status-failed-fill.png`, `status-import.png`).

use std::path::PathBuf;

use crate::support::factory::{A, A2, Factory, S, V, image_path};
use crate::support::registry::{Registry, push_factory_image};
use crate::support::{Nginx, NginxOpts, Service, carry, chromium, curl, mirror_sync};

fn artifacts_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn screenshot(url: &str, name: &str) {
    let shot = artifacts_dir().join(name);
    let _ = std::fs::remove_file(&shot);
    let profile = tempfile::tempdir().unwrap();
    let out = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600",
            url,
        ],
        profile.path(),
    );
    assert!(out.status.success(), "chromium --screenshot: {out:?}");
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000);
}

/// The `<table id="...">` (or `<p id=...>`) section of the page.
fn section<'a>(page: &'a str, id: &str) -> &'a str {
    let at = page
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in {page}"));
    let rest = &page[at..];
    let end = rest.find("<h2>").unwrap_or(rest.len());
    &rest[..end]
}

/// Item 1: a registry the store holds (a sync put `registry.k8s.io/pause`
/// there) answers online with no `--mirror-upstream` for it, the upstream
/// gone; what the store lacks of it, and a registry it never held, stay
/// 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_registry_answers_online_without_its_upstream() {
    let mut k8s = Registry::start();
    let pause = push_factory_image(&k8s.url(), "pause", "3.10.1", &[4096], 9).await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(&cfg, "extraImages: [registry.k8s.io/pause:3.10.1]\n").unwrap();
    let cache = dir.path().join("cache");
    let upstream = format!("registry.k8s.io={}", k8s.url());
    let o = mirror_sync(&cfg, &cache, &["--mirror-upstream", &upstream]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    k8s.stop();
    // Online, as the old manifests ran it: only ghcr.io has an upstream.
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(&cache)
        .args(["--mirror-upstream", "ghcr.io=http://127.0.0.1:9"])
        .start();
    let base = svc.url();
    let accept = "Accept: application/vnd.oci.image.index.v1+json";
    let m = curl(&[
        "-H",
        accept,
        &format!("{base}/v2/pause/manifests/3.10.1?ns=registry.k8s.io"),
    ]);
    assert_eq!(m.status, 200, "{}", String::from_utf8_lossy(&m.body));
    assert_eq!(m.body, pause.index);
    for b in &pause.blobs {
        let g = curl(&[&format!(
            "{base}/v2/pause/blobs/{}?ns=registry.k8s.io",
            b.digest
        )]);
        assert_eq!(
            (g.status, g.body.len()),
            (200, b.data.len()),
            "{}",
            b.digest
        );
    }
    // What the store lacks of that registry: 403, no upstream asked.
    let miss = curl(&[&format!("{base}/v2/pause/manifests/3.9?ns=registry.k8s.io")]);
    assert_eq!(miss.status, 403, "{}", String::from_utf8_lossy(&miss.body));
    assert!(String::from_utf8_lossy(&miss.body).contains("DENIED"));
    // A registry the store never held: 403 as before.
    let other = curl(&[&format!(
        "{base}/v2/coredns/coredns/manifests/v1.11.3?ns=quay.io"
    )]);
    assert_eq!(other.status, 403);
    // The store-only miss is listed by path on the status page.
    let page = String::from_utf8_lossy(&curl(&[&format!("{base}/")]).body).into_owned();
    assert!(
        section(&page, "misses").contains("/v2/pause/manifests/3.9?ns=registry.k8s.io"),
        "{page}"
    );
}

/// Item 3: a failed fill in "Last errors" with the path asked, the
/// upstream URL and its answer; the access log with the query, the client
/// (`X-Forwarded-For` under `--trust-forwarded-for`) and microsecond
/// durations. Screenshot: `status-failed-fill.png`.
#[test]
fn last_errors_name_path_upstream_url_and_reason() {
    let root = tempfile::tempdir().unwrap();
    let nginx = Nginx::start(
        root.path(),
        NginxOpts {
            server_extra: "location ^~ /image/ { return 500; }".into(),
            ..Default::default()
        },
    );
    let cache = tempfile::tempdir().unwrap();
    let svc = Service::builder()
        .args(["--log-format", "json", "--trust-forwarded-for"])
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["--factory-url", &nginx.url()])
        .start();
    let base = svc.url();
    let path = image_path(A);
    let g = curl(&[
        "-H",
        "X-Forwarded-For: 203.0.113.7, 198.51.100.23",
        &format!("{base}{path}?filename=disk.raw.xz"),
    ]);
    assert_eq!(g.status, 502, "{}", String::from_utf8_lossy(&g.body));
    let page = String::from_utf8_lossy(&curl(&[&format!("{base}/")]).body).into_owned();
    let errors = section(&page, "errors");
    let upstream_url = format!("{}{path}", nginx.url());
    for want in [path.as_str(), upstream_url.as_str(), "answered 500"] {
        assert!(
            errors.contains(want),
            "{want:?} not in the last errors:\n{errors}"
        );
    }
    assert!(
        !errors.contains("fill failed after 0.") || errors.contains(&upstream_url),
        "{errors}"
    );
    screenshot(&format!("{base}/"), "status-failed-fill.png");

    // The access line: query, client (the proxy's last hop) and peer.
    let log = svc.log_text();
    let line: serde_json::Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["target"] == "access" && v["fields"]["path"] == path.as_str())
        .unwrap_or_else(|| panic!("no access line in {log}"));
    let f = &line["fields"];
    assert_eq!(f["query"], "filename=disk.raw.xz", "{line}");
    assert_eq!(f["client"], "198.51.100.23", "{line}");
    assert_eq!(f["peer"], "127.0.0.1", "{line}");
    let ms = f["duration_ms"].as_f64().unwrap();
    assert!((ms * 1000.0 - (ms * 1000.0).round()).abs() < 1e-6, "{ms}");
    let raw = log
        .lines()
        .find(|l| l.contains("\"duration_ms\":") && l.contains(&path))
        .unwrap();
    let text = raw.split("\"duration_ms\":").nth(1).unwrap();
    let num: String = text
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let decimals = num.split('.').nth(1).map_or(0, str::len);
    assert!(decimals <= 3, "{num}: rounded to microseconds");
}

/// Item 3: an import shown like a sync (when, what, from which bundle),
/// `/metrics` with the mirror gauges, offline misses listed by path.
/// Screenshot: `status-import.png`.
#[test]
fn an_import_is_shown_like_a_sync() {
    let up = Factory::new(1, 1, &[A], None);
    let cfg = up.dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}]\n"),
    )
    .unwrap();
    let a = up.cache();
    let o = mirror_sync(&cfg, &a, &["--factory-url", &up.nginx.url()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tar = up.dir.path().join("site-bundle.tar");
    let b = up.dir.path().join("other-site");
    carry(&a, &tar, &b, None);

    let svc = Service::builder()
        .arg("--offline")
        .arg("--cache-dir")
        .arg(&b)
        .start();
    let base = svc.url();
    // Fresh metrics: the import's time and result.
    let m = String::from_utf8(curl(&[&format!("{base}/metrics")]).body).unwrap();
    assert!(m.contains("talos_gen_mirror_last_run_ok 1\n"), "{m}");
    let ts: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("talos_gen_mirror_last_run_timestamp_seconds "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(ts > now - 600.0 && ts <= now + 1.0, "{ts} vs {now}");
    // Offline misses by path, newest first.
    for asset in [A2, "nope-amd64.iso"] {
        assert_eq!(curl(&[&format!("{base}{}", image_path(asset))]).status, 404);
    }
    assert_eq!(curl(&[&format!("{base}{}", image_path(A))]).status, 200);
    let page = String::from_utf8_lossy(&curl(&[&format!("{base}/")]).body).into_owned();
    let sync = section(&page, "mirror-sync");
    assert!(sync.contains("mirror import of"), "{sync}");
    assert!(sync.contains(tar.to_str().unwrap()), "the bundle: {sync}");
    assert!(sync.contains("carrying the sync of"), "{sync}");
    assert!(sync.contains("imported"), "what: {sync}");
    let misses = section(&page, "misses");
    let first = misses.find(&image_path("nope-amd64.iso")).expect(misses);
    let second = misses.find(&image_path(A2)).expect(misses);
    assert!(first < second, "newest first: {misses}");
    assert!(
        !misses.contains(&image_path(A)),
        "a hit is no miss: {misses}"
    );
    screenshot(&format!("{base}/"), "status-import.png");
}
