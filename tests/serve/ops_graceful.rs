//! Graceful stop: SIGTERM during a slow download stops accepting, lets the
//! download finish, and exits 0; with a short `--shutdown-timeout` the
//! process still exits 0, on time, cutting what is left.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::factory::{A, A2, Factory, image_path};
use crate::support::{CurlChild, curl_spawn, eventually, sha256_hex};

fn wait_started(dl: &CurlChild) {
    eventually(
        "the download to start (64 KiB in)",
        Duration::from_secs(15),
        || dl.body_len() >= 64 << 10,
    );
}

#[test]
fn sigterm_lets_a_slow_download_finish_then_exits_0() {
    // ~2.1 MB at 1 MiB/s from nginx: the download (a cold fill streamed
    // through) takes about two seconds.
    let up = Factory::new(2, 1, &[A, A2], Some("1m"));
    let mut svc = up.serve(&["--shutdown-timeout", "30"]);
    let dl = curl_spawn(&[&format!("{}{}", svc.url(), image_path(A))]);
    wait_started(&dl);
    let t = Instant::now();
    svc.term();
    // New connections are refused once it stops accepting (waited for:
    // SIGTERM is handled asynchronously; the download still runs after).
    eventually(
        "serve to stop accepting after SIGTERM",
        Duration::from_secs(5),
        || TcpStream::connect(("127.0.0.1", svc.port)).is_err(),
    );
    let o = dl.wait();
    assert_eq!(o.status, 200);
    let got = o.body;
    assert_eq!(got.len(), up.xz.len(), "the download was cut");
    assert_eq!(sha256_hex(&got), sha256_hex(&up.xz));
    let st = svc
        .wait_exit(Duration::from_secs(20))
        .expect("serve did not exit after the download finished");
    assert_eq!(st.code(), Some(0), "{}", svc.log_text());
    assert!(t.elapsed() < Duration::from_secs(20));
    let log = svc.log_text();
    assert!(log.contains("draining"), "{log}");
    assert!(log.contains("stopped"), "{log}");
}

#[test]
fn shutdown_timeout_bounds_the_drain() {
    // ~5.2 MB at 256 KiB/s: twenty seconds; the drain is cut at 1 s.
    let up = Factory::new(5, 1, &[A, A2], Some("256k"));
    let mut svc = up.serve(&["--shutdown-timeout", "1"]);
    let dl = curl_spawn(&[&format!("{}{}", svc.url(), image_path(A))]);
    wait_started(&dl);
    let t = Instant::now();
    svc.term();
    let st = svc
        .wait_exit(Duration::from_secs(10))
        .expect("serve did not exit after --shutdown-timeout");
    assert_eq!(st.code(), Some(0), "{}", svc.log_text());
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "exit after {took:?}"
    );
    let got = dl.wait().body;
    assert!((got.len() as u64) < up.xz.len() as u64);
    assert!(svc.log_text().contains("--shutdown-timeout"));
}
