//! The bucket behind HTTPS, as most buckets are reached: nginx terminating
//! TLS before a real Garage node, its certificate from `talos-gen mirror
//! cert` (a private CA the replica trusts through `SSL_CERT_FILE`). The
//! span GETs to an HTTPS endpoint go through reqwest, not the client that
//! marks plain-HTTP sockets (`store/s3/conn.rs`): the same bytes, the same
//! bounds. A certificate the replica does not trust is one line that names
//! the endpoint.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::factory::{A, Factory, image_path};
use crate::support::garage::Garage;
use crate::support::{Nginx, NginxOpts, Service, curl, eventually};

const PREFIX: &str = "https";

/// nginx on a TLS port before Garage's S3 port (bodies streamed both ways,
/// no size limit; idle connections closed after 1 s): the HTTPS endpoint.
fn tls_front(f: &Factory, g: &Garage, certs: &Path) -> (Nginx, String) {
    let port = support::free_port();
    let upstream = g.endpoint(0);
    let upstream = upstream.trim_start_matches("http://");
    let ng = Nginx::start(
        f.dir.path(),
        NginxOpts {
            http_extra: format!(
                "server {{ listen 127.0.0.1:{port} ssl; \
                 ssl_certificate {crt}; ssl_certificate_key {key}; \
                 client_max_body_size 0; keepalive_timeout 1s; \
                 location / {{ proxy_pass http://{upstream}; proxy_http_version 1.1; \
                 proxy_set_header Connection \"\"; proxy_set_header Host $http_host; \
                 proxy_request_buffering off; proxy_buffering off; }} }}",
                crt = certs.join("tls.crt").display(),
                key = certs.join("tls.key").display(),
            ),
            ..Default::default()
        },
    );
    (ng, format!("https://127.0.0.1:{port}"))
}

/// Sockets on this machine in CLOSE-WAIT (the peer closed, this side has
/// not) whose remote port is `port` (`/proc/net/tcp`: state 08).
fn close_wait_to(port: u16) -> usize {
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3
                && f[3] == "08"
                && f[2]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
        })
        .count()
}

fn replica(f: &Factory, g: &Garage, endpoint: &str, ca: &Path, name: &str) -> Service {
    let spool = f.dir.path().join(format!("spool-{name}"));
    std::fs::create_dir_all(&spool).unwrap();
    Service::builder()
        .arg("--cache-dir")
        .arg(&spool)
        .args(["--factory-url", &f.nginx.url()])
        .args(["--store", &format!("s3://{}/{PREFIX}", g.bucket)])
        .args(["--s3-endpoint", endpoint])
        .args(["--upstream-timeout", "2s"])
        .args(["--local-cache-max-size", "0"])
        .env("AWS_ACCESS_KEY_ID", &g.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &g.secret)
        .env("SSL_CERT_FILE", &ca.display().to_string())
        .start()
}

/// A fill through one replica commits into the bucket over HTTPS; a second
/// replica (no local tier) serves the object whole and ranges of every
/// length around the mark's bounds from the bucket, at once, without
/// asking the upstream; the connections it kept, once the TLS front closes
/// them, are let go within seconds; with Garage frozen behind the
/// TLS front, `/healthz` answers at once and the object is a 503 in
/// bounded time; after SIGCONT it is served whole again, no restart.
#[test]
fn a_bucket_behind_https_serves_whole_and_within_its_bounds() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(5, 0, &[A], None);
    let certs = f.dir.path().join("certs");
    support::mirror_cert(&certs);
    let (_front, endpoint) = tls_front(&f, &g, &certs);
    let ca = certs.join("ca.crt");

    let one = replica(&f, &g, &endpoint, &ca, "one");
    let r = curl(&[&format!("{}{}", one.url(), image_path(A))]);
    assert_eq!((r.exit, r.status), (0, 200), "{}", one.log_text());
    assert!(r.body == f.xz, "the fill's bytes");
    let key = format!("{PREFIX}/objects/sha256/{}", support::sha256_hex(&f.xz));
    eventually("the commit", Duration::from_secs(30), || {
        g.list(0, &key).len() == 1
    });
    assert!(g.get(0, &key) == f.xz, "the bucket's object");
    let fetched = f.nginx.count(&format!("GET {}", image_path(A)));
    assert_eq!(fetched, 1, "{}", f.nginx.access_log());

    let two = replica(&f, &g, &endpoint, &ca, "two");
    let url = format!("{}{}", two.url(), image_path(A));
    let r = curl(&[&url]);
    assert_eq!((r.exit, r.status), (0, 200), "{}", two.log_text());
    assert!(r.body == f.xz, "whole from the bucket over HTTPS");
    // Ranges of every length around the mark's bounds, in TLS: the socket
    // brings more bytes than the body, never fewer.
    crate::s3_store::every_span_whole(&f, &two, &url);
    // The connections kept for the next GET, closed by the TLS front after
    // 1 s idle, are let go, not left in CLOSE-WAIT until the next GET.
    let port: u16 = endpoint.rsplit(':').next().unwrap().parse().unwrap();
    // The point of the sleep: the front's keepalive_timeout runs out.
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    eventually(
        "kept connections the server closed let go",
        Duration::from_secs(20),
        || close_wait_to(port) == 0,
    );
    eprintln!(
        "https: kept connections let go {:?} after the front closed them",
        t.elapsed()
    );
    assert_eq!(
        f.nginx.count(&format!("GET {}", image_path(A))),
        fetched,
        "served from the bucket, not the upstream"
    );

    g.freeze(0);
    let t = Instant::now();
    let probe = std::thread::spawn({
        let health = format!("{}/healthz", two.url());
        move || {
            let mut worst = Duration::ZERO;
            while t.elapsed() < Duration::from_secs(4) {
                let t0 = Instant::now();
                let r = curl(&["--max-time", "5", &health]);
                assert_eq!(r.status, 200, "/healthz while the bucket is frozen");
                worst = worst.max(t0.elapsed());
                std::thread::sleep(Duration::from_millis(100));
            }
            worst
        }
    });
    let r = curl(&["--max-time", "30", &url]);
    let took = t.elapsed();
    let worst = probe.join().unwrap();
    g.thaw(0);
    assert_eq!(
        r.status,
        503,
        "a frozen bucket over HTTPS: {}",
        two.log_text()
    );
    assert!(
        took < Duration::from_secs(7),
        "the 503 took {took:?} with --upstream-timeout 2s"
    );
    assert!(
        worst < Duration::from_millis(500),
        "/healthz took {worst:?}"
    );
    eprintln!("https: frozen bucket 503 in {took:?}, /healthz at most {worst:?}");

    let thawed = Instant::now();
    eventually("serving after SIGCONT", Duration::from_secs(15), || {
        let r = curl(&["--max-time", "10", &url]);
        r.status == 200 && r.body == f.xz
    });
    eprintln!(
        "https: served whole again {:?} after SIGCONT",
        thawed.elapsed()
    );
    assert_eq!(
        f.nginx.count(&format!("GET {}", image_path(A))),
        fetched,
        "the frozen bucket sent no request to the upstream"
    );
}

/// A bucket whose certificate the job does not trust (the system's roots
/// only): a non-zero exit and one line that names the endpoint and says
/// what is wrong with its certificate, never a stack of causes.
#[test]
fn an_untrusted_bucket_certificate_is_one_line() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(1, 0, &[A], None);
    let certs = f.dir.path().join("certs");
    support::mirror_cert(&certs);
    let (_front, endpoint) = tls_front(&f, &g, &certs);
    let spool = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "verify", "--store"])
        .arg(format!("s3://{}/{PREFIX}", g.bucket))
        .args(["--s3-endpoint", &endpoint])
        .arg("--cache-dir")
        .arg(spool.path())
        .env("AWS_ACCESS_KEY_ID", &g.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &g.secret)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains(&endpoint) || err.contains("127.0.0.1"),
        "{err}"
    );
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(err.len() < 600, "{} bytes: {err}", err.len());
    eprintln!("https: {}", err.trim());
}

/// Slow readers of an object in the bucket over HTTPS: each GET from the
/// bucket goes through the span client in TLS (`store/s3/conn.rs`, hyper's
/// read buffer capped at 256 KiB), not reqwest, whose buffer held about
/// 1 MB a slow reader (53-59 MB for 50 in a hostile pass); 50 readers stay
/// under 40 MiB of anonymous memory above the idle service's, and the
/// object is whole afterwards.
#[test]
fn slow_readers_of_a_bucket_behind_https_hold_little_memory() {
    use std::io::{Read, Write};
    const READERS: usize = 50;
    const LIMIT_KIB: u64 = 40 * 1024;
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(24, 0, &[A], None);
    let certs = f.dir.path().join("certs");
    support::mirror_cert(&certs);
    let (_front, endpoint) = tls_front(&f, &g, &certs);
    let ca = certs.join("ca.crt");
    let one = replica(&f, &g, &endpoint, &ca, "one");
    let r = curl(&[&format!("{}{}", one.url(), image_path(A))]);
    assert_eq!((r.exit, r.status), (0, 200), "{}", one.log_text());
    let key = format!("{PREFIX}/objects/sha256/{}", support::sha256_hex(&f.xz));
    eventually("the commit", Duration::from_secs(30), || {
        g.list(0, &key).len() == 1
    });
    let two = replica(&f, &g, &endpoint, &ca, "two");
    let url = format!("{}{}", two.url(), image_path(A));
    assert!(curl(&[&url]).body == f.xz, "whole from the bucket");
    let base = support::rss_anon_kib(two.pid());
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let mut s = support::small_window_client(two.port);
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
    // A KiB each, round after round, for five seconds.
    let mut peak = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        for s in &mut readers {
            let _ = s.read(&mut buf);
        }
        peak = peak.max(support::rss_anon_kib(two.pid()));
    }
    let held = peak.saturating_sub(base);
    eprintln!(
        "https: {READERS} slow readers of the bucket: anonymous memory {base} KiB idle, peak {peak} KiB ({} KiB a reader)",
        held / READERS as u64
    );
    assert!(
        held < LIMIT_KIB,
        "{READERS} slow readers over HTTPS took {held} KiB above the idle {base} KiB (limit {LIMIT_KIB} KiB)"
    );
    drop(readers);
    assert!(curl(&[&url]).body == f.xz, "whole after the slow readers");
}
