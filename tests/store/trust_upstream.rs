//! Every wait on an upstream is bounded (`--upstream-timeout`,
//! `--upstream-min-rate`): an upstream that accepts and never answers, one
//! that stalls half-way, one that trickles. Clients that got no byte get a
//! 504 naming the step and the URL; clients mid-stream are cut (never a
//! clean end); nothing is stored; the fill slot is freed at once; `mirror
//! sync` names the item, goes on with the others and exits 1.

use crate::support;

use std::process::Command;
use std::time::Duration;

use crate::support::bad_upstream::BadUpstream;
use crate::support::{Service, curl};

const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

/// The fault a request gets, by the Talos version in its path.
use crate::support::bad_upstream::by_version as fault;

fn image(v: &str) -> String {
    format!("/image/{S}/{v}/openstack-amd64.raw.xz")
}

/// Objects in a local store's directory (none before its first commit).
fn stored_objects(cache: &std::path::Path) -> usize {
    std::fs::read_dir(cache.join("objects/sha256"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn good_artifact() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    support::xz_disk(dir.path(), 1, 1).1
}

#[test]
fn serve_bounds_every_upstream_wait_and_frees_the_slot() {
    let good = good_artifact();
    let up = BadUpstream::start(good.clone(), Duration::from_millis(300), fault);
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap();
    let svc = Service::start(&[
        "--cache-dir",
        cache_dir,
        "--factory-url",
        &up.url(),
        "--upstream-timeout",
        "1s",
        "--max-concurrent-fills",
        "1",
    ]);

    // Accepts, never answers: 504 with one line naming the step and URL.
    let r = curl(&[&format!("{}{}", svc.url(), image("v1.13.1"))]);
    assert_eq!(r.status, 504, "{r:?}");
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(
        text.trim(),
        format!(
            "timed out after 1s waiting for response headers from {}{}",
            up.url(),
            image("v1.13.1")
        )
    );
    assert!(r.took < Duration::from_secs(5), "{:?}", r.took);
    // The slot (only one) was freed at once: the next request starts a new
    // fill, and a good artifact still comes through the single slot.
    let r = curl(&[&format!("{}{}", svc.url(), image("v1.13.1"))]);
    assert_eq!(r.status, 504);
    assert_eq!(up.count("v1.13.1/"), 2, "a new fill for the second request");
    let r = curl(&[&format!("{}{}", svc.url(), image("v1.13.6"))]);
    assert_eq!((r.exit, r.status), (0, 200), "{:?}", r.exit);
    assert_eq!(r.body, good);

    // Stalls after half the body: the client is cut, never a clean end.
    let r = curl(&[&format!("{}{}", svc.url(), image("v1.13.2"))]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.exit, 18,
        "cut short (curl: transfer closed with data outstanding)"
    );
    assert!(r.body.len() < good.len());
    assert!(r.took < Duration::from_secs(6), "{:?}", r.took);

    // Trickles a byte every 300 ms (never silent for a whole second, far
    // below 1 KiB/s): cut by the minimum rate.
    let r = curl(&[&format!("{}{}", svc.url(), image("v1.13.3"))]);
    assert_eq!((r.status, r.exit), (200, 18), "{r:?}");
    assert!(r.took < Duration::from_secs(6), "{:?}", r.took);

    // Nothing was stored; nothing is left filling; the log says why.
    let m = curl(&[&format!("{}/metrics", svc.url())]);
    let m = String::from_utf8_lossy(&m.body);
    assert!(m.contains("talos_gen_fills_in_flight 0"), "{m}");
    for v in ["v1.13.1", "v1.13.2", "v1.13.3"] {
        let key = format!("image/{S}/{v}/openstack-amd64.raw.xz");
        let idx = std::fs::read_dir(cache.path().join("index")).unwrap();
        for e in idx {
            let body = std::fs::read_to_string(e.unwrap().path()).unwrap();
            assert!(!body.contains(&key), "{key} was stored");
        }
    }
    assert_eq!(
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count(),
        0,
        "no temp file left"
    );
    let log = svc.log_text();
    assert!(log.contains("waiting for the next body byte"), "{log}");
    assert!(log.contains("below the minimum rate"), "{log}");
}

#[test]
fn mirror_sync_names_the_item_that_timed_out_and_goes_on() {
    let good = good_artifact();
    let up = BadUpstream::start(good, Duration::from_millis(300), fault);
    let cache = tempfile::tempdir().unwrap();
    let cfg = cache.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [v1.13.1, v1.13.6]\nimages: [openstack-amd64.raw.xz]\ninstallers: []\n"),
    )
    .unwrap();
    let store = cache.path().join("store");
    let t = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "sync", "--config"])
        .arg(&cfg)
        .arg("--cache-dir")
        .arg(&store)
        .args(["--factory-url", &up.url(), "--upstream-timeout", "1s"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let line = format!(
        "timed out after 1s waiting for response headers from {}{}",
        up.url(),
        image("v1.13.1")
    );
    assert!(stderr.contains(&line), "{stderr}");
    assert!(stderr.contains("v1.13.1"), "{stderr}");
    assert!(stdout.contains("2 items, 1 ok, 1 failed"), "{stdout}");
    // The good item was stored.
    assert_eq!(up.count(&image("v1.13.6")), 1);
}

/// Issue 20 item 4: only a 200 is a whole artifact. nginx, as the factory
/// and the registry, answers a plain GET (no `Range`) with a 206 and part
/// of a body, or a 204: the client gets a 502, nothing is stored (the next
/// GET asks the upstream again). Before, any 2xx was committed as the whole
/// artifact (a kernel has no decode check to catch it).
#[test]
fn only_a_200_is_a_whole_artifact() {
    let root = tempfile::tempdir().unwrap();
    let blob = b"the first bytes of a layer, and no more";
    let digest = support::sha256_digest(blob);
    let nginx = support::Nginx::start(
        root.path(),
        support::NginxOpts {
            server_extra: format!(
                "location ^~ /image/ {{ add_header Content-Range \"bytes 0-6/100\"; return 206 \"partial\"; }}\n\
                 location ^~ /talosctl/ {{ return 204; }}\n\
                 location ^~ /v2/ {{ default_type application/octet-stream; return 206 \"{}\"; }}\n",
                std::str::from_utf8(blob).unwrap()
            ),
            ..Default::default()
        },
    );
    let cache = tempfile::tempdir().unwrap();
    let svc = Service::start(&[
        "--cache-dir",
        cache.path().to_str().unwrap(),
        "--factory-url",
        &nginx.url(),
        "--registry-url",
        &nginx.url(),
    ]);
    let paths = [
        format!("/image/{S}/v1.13.0/kernel-amd64"),
        "/talosctl/v1.13.0/talosctl-linux-amd64".to_string(),
        format!("/v2/installer/{S}/blobs/{digest}"),
    ];
    for p in &paths {
        for round in 0..2 {
            let r = curl(&[&format!("{}{p}", svc.url())]);
            assert_eq!(
                r.status,
                502,
                "{p} (round {round}): {}",
                String::from_utf8_lossy(&r.body)
            );
        }
        let asked = nginx
            .access_log()
            .lines()
            .filter(|l| l.contains(p.as_str()))
            .count();
        assert_eq!(asked, 2, "{p}: nothing stored, the upstream asked again");
    }
    assert_eq!(stored_objects(cache.path()), 0, "nothing stored");
}

/// A body whose end is not framed (HTTP/1.1 without `Content-Length` or
/// chunks, ended by closing the connection) cannot be told from a cut: a
/// cut at the end of an xz stream of a multi-stream file decodes whole.
/// Such an answer is a 502, never stored; a chunked body, whose end is
/// framed, is whole. The upstream is the tests' fake (nginx frames every
/// answer, `support::bad_upstream`).
#[test]
fn an_unframed_body_is_never_a_whole_artifact() {
    // Any artifact: whole or cut, an unframed body looks the same.
    let good = good_artifact();
    let up = BadUpstream::start(good.clone(), Duration::from_millis(300), fault);
    let cache = tempfile::tempdir().unwrap();
    let svc = serve_from(&up, cache.path());
    refused_as_unframed(&svc, &up, &image("v1.13.4"), "v1.13.4/", cache.path());

    let chunked = image("v1.13.5");
    for round in 0..2 {
        let r = curl(&[&format!("{}{chunked}", svc.url())]);
        assert_eq!(r.status, 200, "round {round}");
        assert!(r.body == good, "round {round}: the chunked body whole");
    }
    assert_eq!(up.count("v1.13.5/"), 1, "the chunked body stored once");
}

/// A factory document is read whole before it is parsed and kept, so an
/// unframed answer could end at a cut that still parses (a PEM file cut
/// after its first block): it is refused as an artifact is, nothing kept,
/// and the factory asked again the next time.
#[test]
fn an_unframed_document_is_never_kept() {
    fn versions_unframed(path: &str) -> &'static str {
        if path.starts_with("/versions") {
            "unframed"
        } else {
            "good"
        }
    }
    let up = BadUpstream::start(
        br#"["v1.13.0","v1.13.1"]"#.to_vec(),
        Duration::from_millis(300),
        versions_unframed,
    );
    let cache = tempfile::tempdir().unwrap();
    let svc = serve_from(&up, cache.path());
    refused_as_unframed(&svc, &up, "/versions", "/versions", cache.path());
}

/// `serve` on `cache` with `up` as the factory (`--upstream-timeout 3s`).
fn serve_from(up: &BadUpstream, cache: &std::path::Path) -> Service {
    Service::start(&[
        "--cache-dir",
        cache.to_str().unwrap(),
        "--factory-url",
        &up.url(),
        "--upstream-timeout",
        "3s",
    ])
}

/// `path`, asked twice, is a 502 naming the unframed answer both times:
/// the upstream asked twice (`needle` in its request lines), nothing stored.
fn refused_as_unframed(
    svc: &Service,
    up: &BadUpstream,
    path: &str,
    needle: &str,
    cache: &std::path::Path,
) {
    for round in 0..2 {
        let r = curl(&[&format!("{}{path}", svc.url())]);
        let text: String = String::from_utf8_lossy(&r.body).chars().take(300).collect();
        assert_eq!(r.status, 502, "{path}, round {round}: {text}");
        assert!(
            text.contains("without Content-Length or chunked encoding"),
            "{path}, round {round}: {text}"
        );
    }
    assert_eq!(up.count(needle), 2, "{path}: nothing stored, asked again");
    assert_eq!(stored_objects(cache), 0, "{path}: nothing stored");
}
