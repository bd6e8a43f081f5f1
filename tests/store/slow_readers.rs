//! Memory under slow readers: 400 clients join one fill (nginx as the
//! factory, rate-limited so the fill lasts seconds) and read a KiB now and
//! then; the service's anonymous memory stays under 96 MiB in total,
//! because a reader of a growing file reads the spool in small windows and
//! hyper queues little per connection (before: about 1 MiB each).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::support::factory::{A, Factory, image_path};
use crate::support::{curl, rss_anon_kib, small_window_client};

const READERS: usize = 400;
const LIMIT_KIB: u64 = 96 * 1024;

/// Bytes of the fill's spool file so far (the one `tmp/fill-*`).
fn spooled(cache: &std::path::Path) -> u64 {
    std::fs::read_dir(cache.join("tmp"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("fill-"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// `n` clients with a small receive window, each with its answer to a GET
/// of artifact A started (its head read).
pub(crate) fn slow_readers(port: u16, n: usize) -> Vec<std::net::TcpStream> {
    let mut readers = Vec::new();
    for _ in 0..n {
        let mut s = small_window_client(port);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET {} HTTP/1.1\r\nHost: x\r\n\r\n", image_path(A)).unwrap();
        readers.push(s);
    }
    let mut buf = [0u8; 1024];
    for s in &mut readers {
        let n = s.read(&mut buf).unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    readers
}

/// The readers read a KiB each, round after round, for five seconds: the
/// peak of `pid`'s anonymous memory meanwhile (KiB).
pub(crate) fn read_slowly(readers: &mut [std::net::TcpStream], pid: u32) -> u64 {
    let mut buf = [0u8; 1024];
    let mut peak = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        for s in readers.iter_mut() {
            let _ = s.read(&mut buf);
        }
        peak = peak.max(rss_anon_kib(pid));
    }
    peak
}

#[test]
fn four_hundred_slow_readers_of_one_fill_hold_little_memory() {
    // 40 MiB at 8 MiB/s: the fill lasts about five seconds.
    let up = Factory::new(40, 0, &[A], Some("8m"));
    let svc = up.serve(&["--write-timeout", "120"]);
    let base = rss_anon_kib(svc.pid());
    // Every reader has its answer started (it joined the fill).
    let mut readers = slow_readers(svc.port, READERS);
    let mut buf = [0u8; 1024];
    // Slow readers: a KiB each, round after round, while the fill grows;
    // the peak of anonymous memory is kept.
    let total = up.xz.len() as u64;
    let mut peak = 0;
    let t = Instant::now();
    loop {
        for s in &mut readers {
            let _ = s.read(&mut buf);
        }
        peak = peak.max(rss_anon_kib(svc.pid()));
        let at = spooled(&up.cache());
        if at == 0 || at >= total * 9 / 10 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the fill did not progress"
        );
    }
    peak = peak.max(rss_anon_kib(svc.pid()));
    eprintln!(
        "{READERS} slow readers: anonymous memory {base} KiB before, peak {peak} KiB ({} KiB a reader)",
        peak.saturating_sub(base) / READERS as u64
    );
    assert!(
        peak < LIMIT_KIB,
        "{READERS} slow readers of one fill took {peak} KiB of anonymous memory (limit {LIMIT_KIB} KiB, {base} KiB before)"
    );
    drop(readers);
    // The fill was not disturbed: the artifact is whole.
    let got = curl(&[&format!("{}{}", svc.url(), image_path(A))]);
    assert_eq!(got.status, 200);
    assert!(got.body == up.xz, "wrong bytes");
}

/// 400 slow readers of a stored artifact (every piece read into a buffer
/// of the stream's own, checked there and sent from there): a slow
/// client's pieces stay small, so the service's anonymous memory stays
/// under 96 MiB in total (with 256 KiB pieces each it would be about
/// 100 MiB for the pieces alone).
#[test]
fn four_hundred_slow_readers_of_a_stored_artifact_hold_little_memory() {
    let up = Factory::new(40, 0, &[A], None);
    let svc = up.serve(&["--write-timeout", "120"]);
    let url = format!("{}{}", svc.url(), image_path(A));
    let got = curl(&[&url]);
    assert_eq!((got.exit, got.status), (0, 200));
    // stored: the next GET is served from the store
    let t = Instant::now();
    while spooled(&up.cache()) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the fill did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(curl(&[&url]).body == up.xz);
    let base = rss_anon_kib(svc.pid());
    let mut readers = slow_readers(svc.port, READERS);
    let peak = read_slowly(&mut readers, svc.pid());
    eprintln!(
        "{READERS} slow readers of a stored artifact: anonymous memory {base} KiB before, peak {peak} KiB ({} KiB a reader)",
        peak.saturating_sub(base) / READERS as u64
    );
    assert!(
        peak < LIMIT_KIB,
        "{READERS} slow readers of a stored artifact took {peak} KiB of anonymous memory (limit {LIMIT_KIB} KiB, {base} KiB before)"
    );
    drop(readers);
    assert!(curl(&[&url]).body == up.xz, "wrong bytes");
}
