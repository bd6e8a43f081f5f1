//! One flight, one outcome: sixteen clients (curl) at once ask for one
//! thing while its upstream accepts connections and never answers, or
//! answers in a second. Each burst asserts how many requests the upstream
//! saw and the slowest answer: one `--upstream-timeout` (3 s here) plus a
//! second at most, one upstream request (two at most), where the service
//! used to ask sixteen times one after the other (49 s).
//!
//! The stored copies are put there by the service itself from real
//! upstreams (nginx as the factory, docker-registry), then the service is
//! started again on the same store against the faulty one. The faulty
//! upstreams are `support::bad_upstream`'s fakes: nginx has no way to
//! accept a request and never answer it, nor to answer after a set delay.

use std::process::Command;
use std::time::Duration;

use crate::support::bad_upstream::BadUpstream;
use crate::support::registry::{Registry, push_factory_image};
use crate::support::{Curl, Nginx, NginxOpts, Service, curl};

/// `--upstream-timeout` of these tests.
const TIMEOUT: &str = "3s";
/// The issue's bound on the slowest answer: one timeout plus a second.
const BOUND: Duration = Duration::from_secs(4);
/// Clients at once.
const CLIENTS: usize = 16;

/// `CLIENTS` curls of `url` at once; their answers.
fn burst(url: &str) -> Vec<Curl> {
    let all: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let url = url.to_string();
            std::thread::spawn(move || curl(&[&url]))
        })
        .collect();
    all.into_iter().map(|t| t.join().unwrap()).collect()
}

/// The slowest answer of a burst, printed with what the upstream saw (the
/// figures of the issue's closing note).
fn slowest(what: &str, answers: &[Curl], upstream_requests: usize) -> Duration {
    let max = answers.iter().map(|c| c.took).max().unwrap_or_default();
    eprintln!("{what}: {upstream_requests} upstream requests, slowest answer {max:?}");
    max
}

/// An upstream that accepts every request and never answers.
fn hanging() -> BadUpstream {
    BadUpstream::start(Vec::new(), Duration::from_secs(1), |_| "hang")
}

fn serve(cache: &std::path::Path, extra: &[&str]) -> Service {
    let mut args = vec![
        "--cache-dir",
        cache.to_str().unwrap(),
        "--upstream-timeout",
        TIMEOUT,
    ];
    args.extend_from_slice(extra);
    Service::start(&args)
}

/// A stored factory document past `--metadata-ttl`, the factory hanging:
/// every client gets the stored copy (stale, `Warning: 110`) within one
/// timeout plus a second, and the factory was asked once.
#[test]
fn a_burst_of_a_stale_document_asks_a_hanging_factory_once() {
    let root = tempfile::tempdir().unwrap();
    let versions = br#"["v1.13.5","v1.13.6"]"#;
    std::fs::write(root.path().join("versions"), versions).unwrap();
    let nginx = Nginx::start(root.path(), NginxOpts::default());
    let cache = tempfile::tempdir().unwrap();
    {
        // Kept fresh for 0 s: the record says so, whatever the next reader's TTL.
        let url = nginx.url();
        let svc = serve(
            cache.path(),
            &["--factory-url", &url, "--metadata-ttl", "0s"],
        );
        let r = curl(&[&format!("{}/versions", svc.url())]);
        assert_eq!((r.status, &r.body[..]), (200, &versions[..]), "{r:?}");
    }
    let up = hanging();
    let svc = serve(
        cache.path(),
        &["--factory-url", &up.url(), "--metadata-ttl", "0s"],
    );
    let answers = burst(&format!("{}/versions", svc.url()));
    let asked = up.count("/versions");
    let max = slowest("stale document", &answers, asked);
    for r in &answers {
        assert_eq!((r.status, &r.body[..]), (200, &versions[..]), "{r:?}");
        assert_eq!(r.header("warning").as_deref(), Some("110 - \"stale\""));
        assert_eq!(
            r.header("cache-status").as_deref(),
            Some("talos-gen; fwd=stale")
        );
    }
    assert!(asked <= 2, "{asked} factory requests");
    assert!(max <= BOUND, "{max:?}");
}

/// The registry of these tests behind `--mirror-upstream docker.io=`.
const NS: &str = "docker.io";
const REPO: &str = "library/demo";

fn tag_url(svc: &Service, tag: &str) -> String {
    format!("{}/v2/{REPO}/manifests/{tag}?ns={NS}", svc.url())
}

/// A stored tag past `--tag-revalidate`, the registry hanging: the stored
/// manifest for all, stale, within one timeout plus a second, the
/// registry asked once. A tag never stored (a new process, nothing
/// remembered of the upstream): 504 naming the upstream for all, as fast,
/// the registry asked once.
#[test]
fn bursts_of_a_stale_tag_and_a_cold_tag_ask_a_hanging_registry_once() {
    let reg = Registry::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let img = rt.block_on(push_factory_image(&reg.url(), REPO, "v1", &[1024], 7));
    let cache = tempfile::tempdir().unwrap();
    {
        let mirror = format!("{NS}={}", reg.url());
        let svc = serve(
            cache.path(),
            &["--mirror-upstream", &mirror, "--tag-revalidate", "0s"],
        );
        let r = curl(&[&tag_url(&svc, "v1")]);
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, img.index);
    }
    let up = hanging();
    let mirror = format!("{NS}={}", up.url());
    let svc = serve(
        cache.path(),
        &["--mirror-upstream", &mirror, "--tag-revalidate", "0s"],
    );
    let answers = burst(&tag_url(&svc, "v1"));
    let asked = up.count("/manifests/v1");
    let max = slowest("stale tag", &answers, asked);
    // Known down now: a stored tag answers at once (well within one
    // timeout), one request at a time asking the upstream again; a cold
    // tag fails at once but for the one request that asks.
    let again = burst(&tag_url(&svc, "v1"));
    let retried = up.count("/manifests/v1") - asked;
    let quick = slowest("stale tag, known down", &again, retried);
    assert!(again.iter().all(|r| r.status == 200 && r.body == img.index));
    assert!(retried <= 1, "{retried}");
    assert!(quick < Duration::from_secs(3), "{quick:?}");
    let down = burst(&tag_url(&svc, "v8"));
    let tried = up.count("/manifests/v8");
    slowest("cold tag, known down", &down, tried);
    assert!(down.iter().all(|r| r.status == 504), "{down:?}");
    let fast = down
        .iter()
        .filter(|r| r.took < Duration::from_secs(3))
        .count();
    assert!(
        tried <= 1 && fast >= CLIENTS - 1,
        "{tried} asked, {fast} at once"
    );
    // A new process (no memory of the upstream's failure) for the cold tag.
    drop(svc);
    let svc = serve(cache.path(), &["--mirror-upstream", &mirror]);
    let cold = burst(&tag_url(&svc, "v9"));
    let cold_asked = up.count("/manifests/v9");
    let cold_max = slowest("cold tag", &cold, cold_asked);
    for r in &answers {
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.body, img.index);
        assert_eq!(r.header("warning").as_deref(), Some("110 - \"stale\""));
    }
    assert!(asked <= 2, "{asked} registry requests");
    assert!(max <= BOUND, "{max:?}");

    let (answers, asked, max) = (cold, cold_asked, cold_max);
    for r in &answers {
        assert_eq!(r.status, 504, "{r:?}");
        let body = String::from_utf8_lossy(&r.body);
        assert!(body.contains(&up.url()), "names the upstream: {body}");
    }
    assert!(asked <= 2, "{asked} registry requests");
    assert!(max <= BOUND, "{max:?}");
}

/// The referrers index of a manifest, the registry healthy but answering
/// in a second: referrers are never fresh, yet sixteen clients at once
/// share one upstream request and its answer.
#[test]
fn a_burst_of_one_referrers_list_asks_a_slow_registry_once() {
    let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
    let up = BadUpstream::start(index.to_vec(), Duration::from_secs(1), |_| "slow");
    let cache = tempfile::tempdir().unwrap();
    let mirror = format!("{NS}={}", up.url());
    let svc = serve(cache.path(), &["--mirror-upstream", &mirror]);
    let d = format!("sha256:{}", "a".repeat(64));
    let url = format!("{}/v2/{REPO}/referrers/{d}?ns={NS}", svc.url());
    let answers = burst(&url);
    let asked = up.count("/referrers/");
    let max = slowest("referrers", &answers, asked);
    for r in &answers {
        assert_eq!((r.status, &r.body[..]), (200, &index[..]), "{r:?}");
    }
    let collapsed = answers
        .iter()
        .filter(|r| {
            r.header("cache-status")
                .is_some_and(|c| c.ends_with("; collapsed"))
        })
        .count();
    assert!(asked <= 2, "{asked} registry requests");
    assert!(
        collapsed >= CLIENTS - asked,
        "{collapsed} collapsed answers"
    );
    assert!(max <= BOUND, "{max:?}");
}

/// `serve --stale-while-revalidate`: a stored document past its
/// freshness but within the grace answers at once (stale) while one
/// background fetch refreshes it; the next answer is the new copy.
#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes_in_the_background() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("versions"), br#"["v1"]"#).unwrap();
    let nginx = Nginx::start(root.path(), NginxOpts::default());
    let cache = tempfile::tempdir().unwrap();
    let svc = serve(
        cache.path(),
        &[
            "--factory-url",
            &nginx.url(),
            "--metadata-ttl",
            "0s",
            "--stale-while-revalidate",
            "1h",
        ],
    );
    let url = format!("{}/versions", svc.url());
    assert_eq!(curl(&[&url]).body, br#"["v1"]"#);
    std::fs::write(root.path().join("versions"), br#"["v1","v2"]"#).unwrap();
    let r = curl(&[&url]);
    assert_eq!(r.body, br#"["v1"]"#, "the stored copy at once");
    assert_eq!(r.header("warning").as_deref(), Some("110 - \"stale\""));
    // Each answer is the stored copy, refreshed in the background.
    crate::support::eventually("the background refresh", Duration::from_secs(10), || {
        curl(&[&url]).body == br#"["v1","v2"]"#
    });
    let o = Command::new(crate::support::cli::bin())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(help.contains("--stale-while-revalidate"), "{help}");
}
