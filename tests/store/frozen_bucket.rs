//! A frozen bucket (a real Garage node stopped with SIGSTOP: connections
//! accepted, nothing answered) under `serve --store s3://...`: the probes,
//! `/metrics` and the status page keep answering at once, `/readyz` turns
//! 503, an object in the local tier is served whole, one only in the
//! bucket fails in bounded time with 503 (never fetched again from the
//! upstream), and serving resumes within seconds of SIGCONT, no restart.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::factory::{A, A2, Factory, image_path};
use crate::support::garage::Garage;
use crate::support::{Service, curl, curl_spawn, sha256_hex};

const PREFIX: &str = "frozen";

fn replica(f: &Factory, g: &Garage, name: &str, extra: &[&str]) -> (Service, PathBuf) {
    let spool = f.dir.path().join(format!("spool-{name}"));
    std::fs::create_dir_all(&spool).unwrap();
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(&spool)
        .args(["--factory-url", &f.nginx.url()])
        .args(["--store", &format!("s3://{}/{PREFIX}", g.bucket)])
        .args(["--s3-endpoint", &g.endpoint(0)])
        .args(["--upstream-timeout", "2s"])
        .env("AWS_ACCESS_KEY_ID", &g.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &g.secret)
        .args(extra)
        .start();
    (svc, spool)
}

fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
    t.elapsed()
}

/// One GET: (status, body, how long).
fn timed(url: &str) -> (u16, Vec<u8>, Duration) {
    let t = Instant::now();
    let r = curl(&["--max-time", "30", url]);
    (r.status, r.body, t.elapsed())
}

#[test]
fn a_frozen_bucket_leaves_the_service_answering() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(3, 1, &[A, A2], None);
    // A2 of other bytes than A (one object each).
    let a2 = support::xz_bytes(&support::random_bytes(2 << 20, 7));
    std::fs::write(f.root().join(&image_path(A2)[1..]), &a2).unwrap();

    // Replica `two` (no local tier) fills both artifacts into the bucket.
    let (two, _) = replica(&f, &g, "two", &["--local-cache-max-size", "0"]);
    for a in [A, A2] {
        let r = curl(&[&format!("{}{}", two.url(), image_path(a))]);
        assert_eq!(r.status, 200, "{}", two.log_text());
    }
    eventually("both commits", Duration::from_secs(20), || {
        g.list(0, &format!("{PREFIX}/index/")).len() == 2
    });
    drop(two);

    // Replica `one` knows both from the bucket; A is read once, so it is
    // copied into its local tier; A2 is not.
    let (one, spool) = replica(&f, &g, "one", &[]);
    let a_url = format!("{}{}", one.url(), image_path(A));
    let a2_url = format!("{}{}", one.url(), image_path(A2));
    let (st, body, _) = timed(&a_url);
    assert_eq!(st, 200);
    assert!(body == f.xz);
    let copy = spool.join("tier").join(sha256_hex(&f.xz));
    eventually(
        "the local tier's copy of A",
        Duration::from_secs(20),
        || std::fs::metadata(&copy).is_ok_and(|m| m.len() == f.xz.len() as u64),
    );
    let gets_before = (f.gets(A), f.gets(A2));

    g.freeze(0);
    // A request stuck on the frozen bucket meanwhile.
    let stuck = curl_spawn(&["--max-time", "30", &a2_url]);

    for path in ["/healthz", "/metrics", "/"] {
        for _ in 0..5 {
            let (st, _, took) = timed(&format!("{}{path}", one.url()));
            assert_eq!(st, 200, "{path} while the bucket is frozen");
            eprintln!("frozen: {path} in {took:?}");
            // 100 ms is the bar; the margin is for a loaded machine.
            assert!(took < Duration::from_millis(750), "{path} took {took:?}");
        }
    }
    let t = Instant::now();
    let r = curl(&["--max-time", "30", &format!("{}/readyz", one.url())]);
    eprintln!("frozen: /readyz {} in {:?}", r.status, t.elapsed());
    assert_eq!(r.status, 503);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());

    // The local tier serves A whole; A2 fails, bounded, with 503.
    let (st, body, took) = timed(&a_url);
    eprintln!("frozen: A (local tier) {st} in {took:?}");
    assert_eq!(st, 200);
    assert!(body == f.xz, "A whole from the local tier");
    let (st, _, took) = timed(&a2_url);
    eprintln!("frozen: A2 (bucket only) {st} in {took:?}");
    assert_eq!(st, 503);
    assert!(took < Duration::from_secs(12), "{took:?}");
    let stuck = stuck.wait();
    eprintln!(
        "frozen: the request stuck on the bucket ended: {}",
        stuck.status
    );
    assert_ne!(
        stuck.status, 200,
        "A2 cannot have come from the frozen bucket"
    );
    assert_eq!(
        (f.gets(A), f.gets(A2)),
        gets_before,
        "nothing the store holds was fetched again upstream"
    );

    g.thaw(0);
    let back = eventually("A2 served again", Duration::from_secs(15), || {
        curl(&["--max-time", "10", &a2_url]).status == 200
    });
    eprintln!("thawed: A2 served again after {back:?}");
    assert!(back < Duration::from_secs(8), "{back:?}");
    let (st, body, _) = timed(&a2_url);
    assert_eq!(st, 200);
    assert!(body == a2, "A2 whole");
    let r = curl(&[&format!("{}/readyz", one.url())]);
    assert_eq!(r.status, 200);
    assert_eq!((f.gets(A), f.gets(A2)), gets_before);
}
