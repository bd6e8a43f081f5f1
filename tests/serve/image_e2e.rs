//! End-to-end tests of the `/image` cache with real parts: nginx (Debian's
//! nginx-light) as the upstream factory on loopback, `talos-gen serve`,
//! curl, xz, nbdkit's curl plugin and qemu-img. Test data is generated.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::factory::{A, Factory, S, V, image_path};
use crate::support::{Curl, Service, curl, curl_spawn, require_tool, sha256_hex};

/// A generated raw image (`random_mib` random, then 4 MiB of zeros)
/// compressed with xz, published as `/image/S/V/A` by nginx limited to
/// `rate` (other assets only when a test writes them).
fn fixture(random_mib: usize, rate: Option<&str>) -> Factory {
    require_tool("curl");
    Factory::new(random_mib, 4, &[A], rate)
}

fn path() -> String {
    image_path(A)
}

/// Wait until the artifact is committed (HEAD shows an ETag).
fn wait_committed(svc: &Service, p: &str) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        let g = curl(&["-I", &format!("{}{p}", svc.url())]);
        if g.header("etag").is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("artifact {p} was never committed; log:\n{}", svc.log_text());
}

#[test]
fn sixteen_cold_clients_share_one_upstream_get() {
    // ~3 MiB of xz at 1 MiB/s: a fill takes ~3 s.
    let fx = fixture(3, Some("1m"));
    let svc = fx.serve(&[]);
    let url = format!("{}{}", svc.url(), path());
    let started = Instant::now();
    let children: Vec<_> = (0..16).map(|_| curl_spawn(&[&url])).collect();
    let gots: Vec<Curl> = children.into_iter().map(|c| c.wait()).collect();
    let wall = started.elapsed().as_secs_f64();
    assert_eq!(fx.gets(A), 1, "exactly one upstream GET");
    for (i, g) in gots.iter().enumerate() {
        assert_eq!(g.status, 200, "client {i}");
        assert!(
            g.body == fx.xz,
            "client {i}: body differs ({} bytes)",
            g.body.len()
        );
        // The upstream transfer takes seconds; every client must get its
        // first bytes long before it ends.
        assert!(
            g.ttfb < 1.0 && g.ttfb < g.total / 2.0,
            "client {i}: first byte at {:.3}s, done at {:.3}s",
            g.ttfb,
            g.total
        );
    }
    assert!(
        wall > 2.0,
        "the limited upstream should take seconds ({wall:.2}s)"
    );
    // One started the fill; who joined it says so (RFC 9211 `collapsed`).
    let statuses: Vec<String> = gots
        .iter()
        .map(|g| g.header("cache-status").unwrap_or_default())
        .collect();
    let started_it = statuses
        .iter()
        .filter(|c| *c == "talos-gen; fwd=miss")
        .count();
    let joined = statuses
        .iter()
        .filter(|c| *c == "talos-gen; fwd=miss; collapsed")
        .count();
    assert_eq!((started_it, joined), (1, 15), "{statuses:?}");
    // Served from the store afterwards, still one upstream GET.
    let g = curl(&[&url]);
    assert_eq!(g.body, fx.xz);
    assert_eq!(fx.gets(A), 1);
}

#[test]
fn streaming_import_ranges_head_sha256_and_nbd_probe() {
    let fx = fixture(2, Some("4m"));
    let svc = fx.serve(&[]);
    let url = format!("{}{}", svc.url(), path());
    let len = fx.xz.len();

    // HEAD on a cold key: fills first, answers the length.
    let h = curl(&["-I", "-A", "cdi-golang-importer", &url]);
    assert_eq!(h.status, 200, "{}", h.headers);
    assert_eq!(h.header("content-length"), Some(len.to_string()));
    assert_eq!(h.header("accept-ranges").as_deref(), Some("bytes"));
    assert_eq!(
        h.header("content-type").as_deref(),
        Some("application/x-xz")
    );
    assert_eq!(
        h.header("content-disposition").as_deref(),
        Some("attachment; filename=openstack-amd64.raw.xz")
    );

    // Streaming import as CDI does it: curl | xz -d.
    let sh = format!("curl -sf -H 'Accept-Encoding: gzip' '{url}' | xz -d");
    let out = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert!(out.status.success());
    assert!(
        out.stdout == fx.raw,
        "decompressed stream differs from the raw image"
    );
    wait_committed(&svc, &path());

    // Warm HEAD and GET: strong ETag, Last-Modified, never compressed.
    let g = curl(&["-H", "Accept-Encoding: gzip", &url]);
    assert_eq!(g.status, 200);
    assert!(g.header("content-encoding").is_none());
    let etag = g.header("etag").expect("etag");
    assert_eq!(etag, format!("\"{}\"", sha256_hex(&fx.xz)));
    assert!(g.header("last-modified").is_some());
    assert_eq!(g.body, fx.xz);

    // Ranges.
    let r = curl(&["-r", "0-99", &url]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, fx.xz[..100]);
    assert_eq!(r.header("content-range"), Some(format!("bytes 0-99/{len}")));
    let r = curl(&["-r", "-10", &url]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, fx.xz[len - 10..]);
    let r = curl(&["-r", &format!("{len}-"), &url]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some(format!("bytes */{len}")));
    // If-Range with a stale validator: the whole body.
    let r = curl(&["-r", "0-9", "-H", "If-Range: \"stale\"", &url]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), len);
    // If-Range with the entity tag or exactly Last-Modified: the range. A
    // later (or earlier) date: the whole body (RFC 9110 13.1.5 allows a
    // range only on an exact match of a date).
    let lm = g.header("last-modified").unwrap();
    let at = httpdate::parse_http_date(&lm).unwrap();
    let later = httpdate::fmt_http_date(at + std::time::Duration::from_secs(3600));
    let earlier = httpdate::fmt_http_date(at - std::time::Duration::from_secs(3600));
    for (v, want) in [
        (etag.clone(), 206),
        (lm.clone(), 206),
        (later, 200),
        (earlier, 200),
    ] {
        let r = curl(&["-r", "0-9", "-H", &format!("If-Range: {v}"), &url]);
        let n = if want == 206 { 10 } else { len };
        assert_eq!((r.status, r.body.len()), (want, n), "If-Range: {v}");
    }
    // Conditionals.
    let r = curl(&["-H", &format!("If-None-Match: {etag}"), &url]);
    assert_eq!(r.status, 304);
    let r = curl(&["-H", &format!("If-Modified-Since: {lm}"), &url]);
    assert_eq!(r.status, 304);
    // If-Match and If-Unmodified-Since (a hostile pass found them ignored).
    let r = curl(&["-r", "0-9", "-H", &format!("If-Match: {etag}"), &url]);
    assert_eq!((r.status, r.body.len()), (206, 10));
    let r = curl(&["-r", "0-9", "-H", "If-Match: \"nope\"", &url]);
    assert_eq!((r.status, r.body.len()), (412, 0));
    let r = curl(&[
        "-H",
        "If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT",
        &url,
    ]);
    assert_eq!((r.status, r.body.len()), (412, 0));
    let r = curl(&["-H", &format!("If-Unmodified-Since: {lm}"), &url]);
    assert_eq!((r.status, r.body.len()), (200, len));
    // ?filename= is a plain ASCII name, never `..` or a spoofing character.
    for bad in ["..", ".", "%E2%80%AEosi.exe", "caf%C3%A9.iso", "%FF"] {
        let r = curl(&[&format!("{url}?filename={bad}")]);
        assert_eq!(r.status, 400, "{bad}");
        assert!(
            String::from_utf8_lossy(&r.body).contains("not a plain file name"),
            "{bad}"
        );
    }

    // .sha256, usable as CDI's checksum.
    let s = curl(&[&format!("{url}.sha256")]);
    assert_eq!(s.status, 200);
    // Its tag is asked by the conditionals like any answer's.
    let stag = s.header("etag").unwrap();
    for (h, want) in [
        (format!("If-Match: {stag}"), 200),
        ("If-Match: \"x\"".to_string(), 412),
        (format!("If-None-Match: {stag}"), 304),
    ] {
        let r = curl(&["-H", &h, &format!("{url}.sha256")]);
        assert_eq!((r.status, r.body.is_empty()), (want, want != 200), "{h}");
    }
    assert_eq!(
        String::from_utf8(s.body).unwrap(),
        format!("{}  {A}\n", sha256_hex(&fx.xz))
    );

    // CDI's probe: nbdkit curl (readahead, retry) + qemu-img info over NBD.
    let info = crate::support::nbd::NbdCurl::start(&url).info();
    // NBD sizes are whole 512-byte sectors.
    assert_eq!(
        info["virtual-size"].as_u64(),
        Some(len.div_ceil(512) as u64 * 512),
        "{info}"
    );
    assert_eq!(fx.gets(A), 1);
}

#[test]
fn client_hanging_up_early_does_not_cancel_the_fill() {
    let fx = fixture(3, Some("2m"));
    let svc = fx.serve(&[]);
    let url = format!("{}{}", svc.url(), path());
    // Read 100 KB and hang up (CDI's first importer pod does this).
    let sh = format!("curl -s '{url}' | head -c 102400 | wc -c");
    let out = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "102400");
    wait_committed(&svc, &path());
    let g = curl(&[&url]);
    assert!(g.body == fx.xz);
    assert_eq!(fx.gets(A), 1, "no second upstream GET");
    let m = String::from_utf8(curl(&[&format!("{}/metrics", svc.url())]).body).unwrap();
    for line in [
        "talos_gen_upstream_fetches_total{kind=\"image\",result=\"ok\"} 1",
        "talos_gen_cache_misses_total{kind=\"image\"}",
        "talos_gen_cache_hits_total{kind=\"image\"}",
        "talos_gen_bytes_served_total{kind=\"image\"}",
        "talos_gen_upstream_fetch_duration_seconds_count{kind=\"image\"} 1",
    ] {
        assert!(m.contains(line), "{line} missing from /metrics:\n{m}");
    }
}

#[test]
fn cache_max_size_evicts_least_recently_used() {
    let fx = fixture(1, None);
    let other = "metal-amd64.raw.xz";
    // A second artifact: two concatenated xz streams (valid xz, other bytes).
    let mut b = fx.xz.clone();
    b.extend_from_slice(&fx.xz);
    std::fs::write(fx.root().join(format!("image/{S}/{V}/{other}")), &b).unwrap();
    // Room for one artifact, not both.
    let max = (fx.xz.len() + b.len() - 1).to_string();
    let svc = fx.serve(&["--cache-max-size", &max]);
    let ua = format!("{}{}", svc.url(), path());
    let ub = format!("{}/image/{S}/{V}/{other}", svc.url());
    assert!(curl(&[&ua]).body == fx.xz);
    wait_committed(&svc, &path());
    assert!(curl(&[&ub]).body == b);
    wait_committed(&svc, &format!("/image/{S}/{V}/{other}"));
    // A was least recently used: evicted; fetching it again goes upstream.
    assert!(curl(&[&ua]).body == fx.xz);
    assert_eq!(fx.gets(A), 2, "evicted artifact fetched again");
    // The last byte reaches the client before the durable commit, and the
    // eviction runs just after it: wait for both, then count.
    wait_committed(&svc, &path());
    let count = || {
        std::fs::read_dir(fx.cache().join("objects/sha256"))
            .unwrap()
            .count()
    };
    let start = Instant::now();
    while count() != 1 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(count(), 1, "only one object fits");
}

#[test]
fn kill_9_mid_fill_then_restart_is_always_right() {
    let fx = fixture(3, Some("1m"));
    let mut svc = fx.serve(&[]);
    let url = format!("{}{}", svc.url(), path());
    let child = curl_spawn(&[&url]);
    let t = Instant::now();
    while child.body_len() < 500_000 {
        assert!(t.elapsed() < Duration::from_secs(20), "no bytes arrived");
        std::thread::sleep(Duration::from_millis(20));
    }
    svc.proc.kill(); // SIGKILL
    let g = child.wait();
    assert_ne!(
        g.exit, 0,
        "the interrupted client must see a failed transfer"
    );
    assert!(g.body.len() < fx.xz.len());

    let svc = fx.serve(&[]);
    assert_eq!(
        std::fs::read_dir(fx.cache().join("tmp")).unwrap().count(),
        0,
        "partial fills are cleaned on start"
    );
    assert_eq!(
        std::fs::read_dir(fx.cache().join("index")).unwrap().count(),
        0
    );
    let url = format!("{}{}", svc.url(), path());
    let h = curl(&["-I", &url]);
    assert_eq!(h.header("content-length"), Some(fx.xz.len().to_string()));
    let g = curl(&[&url]);
    assert_eq!(g.status, 200);
    assert!(g.body == fx.xz);
    let s = curl(&[&format!("{url}.sha256")]);
    assert!(String::from_utf8_lossy(&s.body).starts_with(&sha256_hex(&fx.xz)));
    let g = curl(&["-r", "1000-1999", &url]);
    assert_eq!(g.body, fx.xz[1000..2000]);
}

#[test]
fn upstream_down_serves_cache_and_fails_fast_otherwise() {
    let mut fx = fixture(1, None);
    let versions = b"[\"v1.13.5\",\"v1.13.6\"]";
    std::fs::write(fx.root().join("versions"), versions).unwrap();
    let svc = fx.serve(&[]);
    let url = format!("{}{}", svc.url(), path());
    assert_eq!(curl(&[&url]).body, fx.xz);
    wait_committed(&svc, &path());
    assert_eq!(curl(&[&format!("{}/versions", svc.url())]).body, versions);
    fx.nginx.stop();
    // /versions: the kept copy.
    let g = curl(&[&format!("{}/versions", svc.url())]);
    assert_eq!(g.status, 200);
    assert_eq!(g.body, versions);
    let g = curl(&[&url]);
    assert_eq!(g.status, 200);
    assert!(g.body == fx.xz);
    let t = Instant::now();
    let other = format!("{}/image/{S}/{V}/metal-amd64.raw.xz", svc.url());
    let g = curl(&[&other]);
    assert!(
        matches!(g.status, 502..=504),
        "uncached with upstream down: {}",
        g.status
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(svc);

    // Offline: the store only; nothing is asked upstream.
    let svc = fx.serve(&["--offline"]);
    let g = curl(&[&format!("{}{}", svc.url(), path())]);
    assert_eq!(g.status, 200);
    assert!(g.body == fx.xz);
    let g = curl(&[&format!("{}/image/{S}/{V}/metal-amd64.raw.xz", svc.url())]);
    assert_eq!(g.status, 404);
}

#[test]
fn upstream_errors_pass_through_uncached_and_bad_bytes_never_look_complete() {
    let fx = fixture(1, Some("4m"));
    let svc = fx.serve(&[]);
    // 404 passes through, is not cached; nginx's HTML error page comes as
    // plain text (an upstream's page never runs on our origin).
    let missing = format!("/image/{S}/{V}/nocloud-amd64.raw.xz");
    for _ in 0..2 {
        let g = curl(&[&format!("{}{missing}", svc.url())]);
        assert_eq!(g.status, 404);
        assert!(String::from_utf8_lossy(&g.body).contains("<html>"));
        assert_eq!(
            g.header("content-type").as_deref(),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(
            g.header("x-content-type-options").as_deref(),
            Some("nosniff")
        );
    }
    assert_eq!(fx.nginx.count(&format!("GET {missing} ")), 2);

    // A corrupt xz of the right length: the client gets an early end, never
    // the whole body, and nothing is stored.
    let mut bad = fx.xz.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0xff;
    let asset = "metal-amd64.raw.xz";
    std::fs::write(fx.root().join(format!("image/{S}/{V}/{asset}")), &bad).unwrap();
    let url = format!("{}/image/{S}/{V}/{asset}", svc.url());
    let g = curl(&[&url]);
    assert_ne!(g.exit, 0, "curl must report a short transfer");
    assert!(g.body.len() < bad.len());
    let g = curl(&["-I", &url]);
    assert!(
        g.header("etag").is_none(),
        "a corrupt artifact must not be stored"
    );
    assert!(fx.nginx.count(&format!("GET /image/{S}/{V}/{asset} ")) >= 2);

    // The same for the other compressed forms the factory serves: a zstd
    // stream cut short (nginx sends its full length, so only decoding can
    // tell) and a gzip stream with a flipped byte. Their whole forms are
    // served and stored.
    use std::io::Write;
    let zst = {
        let mut e = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        e.include_checksum(true).unwrap();
        e.write_all(&fx.raw).unwrap();
        e.finish().unwrap()
    };
    let gz = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(&fx.raw).unwrap();
        e.finish().unwrap()
    };
    let mut bad_gz = gz.clone();
    let mid = bad_gz.len() / 2;
    bad_gz[mid] ^= 0xff;
    for (asset, bad, good) in [
        (
            "metal-amd64.raw.zst",
            zst[..zst.len() - 7].to_vec(),
            zst.clone(),
        ),
        ("metal-amd64.raw.gz", bad_gz, gz.clone()),
    ] {
        let file = fx.root().join(format!("image/{S}/{V}/{asset}"));
        std::fs::write(&file, &bad).unwrap();
        let url = format!("{}/image/{S}/{V}/{asset}", svc.url());
        let g = curl(&[&url]);
        assert_ne!(g.exit, 0, "{asset}: curl must report a short transfer");
        assert!(g.body.len() < bad.len(), "{asset}");
        let g = curl(&["-I", &url]);
        assert!(g.header("etag").is_none(), "{asset}: bad bytes stored");
        // Fixed upstream: a fill still running over the bad bytes (the HEAD
        // above may have joined one) ends early; the next one is whole.
        std::fs::write(&file, &good).unwrap();
        let mut whole = false;
        for _ in 0..10 {
            let g = curl(&[&url]);
            if g.exit == 0 {
                assert_eq!(g.status, 200, "{asset}");
                assert!(g.body == good, "{asset}: a complete-looking wrong body");
                whole = true;
                break;
            }
            assert!(g.body.len() < good.len(), "{asset}");
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            whole,
            "{asset}: never served whole after the upstream was fixed"
        );
        wait_committed(&svc, &format!("/image/{S}/{V}/{asset}"));
    }
}

#[test]
fn hostile_paths_are_refused_and_touch_nothing() {
    let fx = fixture(1, None);
    let svc = fx.serve(&[]);
    let long = "a".repeat(5000);
    let upper = S.to_uppercase();
    let nonhex = "g".repeat(64);
    let paths = [
        "/image/../../../etc/passwd".to_string(),
        format!("/image/{S}/{V}/..%2F..%2F..%2Fetc%2Fpasswd"),
        format!("/image/{S}/{V}/..%2f..%2fcache"),
        format!("/image/%2e%2e/{V}/{A}"),
        format!("/image/{S}/%2e%2e/{A}"),
        format!("/image/{S}%2F..%2F/{V}/{A}"),
        format!("/image/{S}/{V}/{A}%00"),
        format!("/image/{S}/{V}/{long}"),
        format!("/image/{long}/{V}/{A}"),
        format!("/image/{S}/{long}/{A}"),
        format!("/image/{upper}/{V}/{A}"),
        format!("/image/{nonhex}/{V}/{A}"),
        format!("/image/{S}/not-a-version/{A}"),
        format!("/image/{S}/{V}/.."),
        format!("/image/{S}/{V}/openstack-amd64.raw.xz/extra"),
    ];
    for p in &paths {
        let g = curl(&[&format!("{}{p}", svc.url())]);
        assert!((400..500).contains(&g.status), "{p}: answered {}", g.status);
    }
    assert_eq!(fx.nginx.count("/image/"), 0, "nothing reached the upstream");
    // The cache dir holds only its empty skeleton.
    for sub in ["objects/sha256", "index", "tmp"] {
        assert_eq!(
            std::fs::read_dir(fx.cache().join(sub)).unwrap().count(),
            0,
            "{sub}"
        );
    }
    let mut top: Vec<String> = std::fs::read_dir(fx.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    top.sort();
    assert_eq!(top, ["cache", "disk.raw", "root"]);
}

/// The access log's lines (JSON) for `path`, in order.
fn access_lines(svc: &Service, path: &str) -> Vec<serde_json::Value> {
    svc.log_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "access" && v["fields"]["path"] == path)
        .collect()
}

/// `Cache-Status` (RFC 9211) on every `/image/` and `/talosctl/` answer, and
/// the same value in the access log's `cache` field: the first GET is a miss
/// (the fill's bytes, not kept yet), HEAD and GET once stored are hits, a
/// `.sha256` of a cold artifact is a miss kept before it answers, and an
/// answer no lookup stands behind (a refused path) says plain `talos-gen`
/// (it never went upstream: no `fwd`).
#[test]
fn cache_status_says_hit_or_miss_and_the_log_repeats_it() {
    let fx = Factory::new(1, 1, &[A, "metal-amd64.iso"], None);
    let svc = fx.serve(&["--log-format", "json"]);
    let url = format!("{}{}", svc.url(), path());
    let first = curl(&[&url]);
    assert_eq!(first.status, 200);
    assert_eq!(first.body, fx.xz);
    assert_eq!(
        first.header("cache-status").as_deref(),
        Some("talos-gen; fwd=miss"),
        "{}",
        first.headers
    );
    wait_committed(&svc, &path());
    for args in [vec!["-I", url.as_str()], vec![url.as_str()]] {
        let g = curl(&args);
        assert_eq!(g.status, 200);
        assert_eq!(
            g.header("cache-status").as_deref(),
            Some("talos-gen; hit"),
            "{args:?}: {}",
            g.headers
        );
    }
    // A conditional answer carries it too.
    let etag = curl(&["-I", &url]).header("etag").unwrap();
    let g = curl(&["-H", &format!("If-None-Match: {etag}"), &url]);
    assert_eq!(g.status, 304);
    assert_eq!(g.header("cache-status").as_deref(), Some("talos-gen; hit"));
    // A cold artifact's checksum line: fetched, kept, then answered.
    let iso = format!("{}{}.sha256", svc.url(), image_path("metal-amd64.iso"));
    let g = curl(&[&iso]);
    assert_eq!(g.status, 200, "{}", g.headers);
    assert_eq!(
        g.header("cache-status").as_deref(),
        Some("talos-gen; fwd=miss; stored")
    );
    // No lookup behind it (a schematic that is no ID): it never went
    // upstream, so no fwd.
    let bad = format!("{}/image/nope/{V}/{A}", svc.url());
    let g = curl(&[&bad]);
    assert_eq!(g.status, 400);
    assert_eq!(g.header("cache-status").as_deref(), Some("talos-gen"));
    // Not on other routes.
    assert_eq!(
        curl(&[&format!("{}/healthz", svc.url())]).header("cache-status"),
        None
    );

    // The access log says the same, line by line.
    let log = crate::support::wait::eventually_some(
        "the access lines of the image",
        Duration::from_secs(10),
        || {
            let l = access_lines(&svc, &path());
            if l.last().is_some_and(|v| v["fields"]["status"] == 304) {
                Ok(l)
            } else {
                Err(format!("{l:?}"))
            }
        },
    );
    let cache: Vec<&str> = log
        .iter()
        .map(|v| v["fields"]["cache"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(cache[0], "talos-gen; fwd=miss", "{log:?}");
    // The last four (HEAD, GET, HEAD for the tag, 304): hits; the waits
    // for the commit before them say what each found.
    assert!(
        cache[cache.len() - 4..]
            .iter()
            .all(|c| *c == "talos-gen; hit"),
        "{log:?}"
    );
    // (A wait for the commit that joined the first GET's fill says so:
    // `collapsed`.)
    assert!(
        cache.iter().all(|c| [
            "talos-gen; hit",
            "talos-gen; fwd=miss",
            "talos-gen; fwd=miss; collapsed"
        ]
        .contains(c)),
        "{log:?}"
    );
    let sha = access_lines(&svc, &format!("{}.sha256", image_path("metal-amd64.iso")));
    assert_eq!(sha[0]["fields"]["cache"], "talos-gen; fwd=miss; stored");
    let health = access_lines(&svc, "/healthz");
    assert!(health[0]["fields"].get("cache").is_none(), "{health:?}");
}
