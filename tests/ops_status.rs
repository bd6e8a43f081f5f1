//! The status page at `/` in a real browser (Debian's headless Chromium),
//! `/metrics` after real traffic, and the cap on concurrent upstream fills
//! as both show it. Upstream: nginx on loopback serving a generated artifact.

mod ops_common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ops_common::*;

fn artifacts_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn metric(text: &str, line_prefix: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line_prefix))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn status_page_in_chromium_and_metrics() {
    let up = Upstream::new(3, None);
    // Nothing listens on the discard port: an upstream that does not answer.
    let svc = up.serve(&["--registry-url", "http://127.0.0.1:9"]);
    // Fill the cache, then hit it, then a range.
    let url = format!("{}{}", svc.url(), image_path(A));
    let (code, body) = curl(&url, &[]);
    assert_eq!(code, 200);
    assert_eq!(sha256_hex(&body), sha256_hex(&up.xz));
    let (code, body) = curl(&url, &[]);
    assert_eq!(code, 200);
    assert_eq!(body.len(), up.xz.len());
    let (code, body) = curl(&url, &["-r", "0-99"]);
    assert_eq!(code, 206);
    assert_eq!(body.len(), 100);

    // The page in a real browser: DOM and a screenshot kept as a test artifact.
    let profile = tempfile::tempdir().unwrap();
    let out = chromium(&["--dump-dom", &format!("{}/", svc.url())], profile.path());
    assert!(out.status.success(), "chromium --dump-dom failed: {out:?}");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(artifacts_dir().join("status.dom.html"), &dom).unwrap();
    assert!(
        dom.contains(&format!(
            "<span id=\"version\">{}</span>",
            env!("CARGO_PKG_VERSION")
        )),
        "{dom}"
    );
    // The artifact row: name, sha256 of the stored bytes, a last-use time.
    let row = dom
        .split("<tr>")
        .find(|r| r.contains(&format!("{S}/{V}/{A}")))
        .unwrap_or_else(|| panic!("no artifact row in {dom}"));
    assert!(row.contains(&sha256_hex(&up.xz)), "{row}");
    assert!(row.contains(" GMT"), "no fetch/last-use time: {row}");
    assert!(row.contains("MiB"), "no size: {row}");
    // Upstreams: the factory answers, the registry on the discard port does not.
    assert!(dom.contains("Image Factory"), "{dom}");
    assert!(dom.contains("answers (HTTP"), "{dom}");
    assert!(dom.contains("does not answer"), "{dom}");
    // The support matrix.
    assert!(dom.contains("<td>v1.13</td>"), "{dom}");
    assert!(!dom.contains("<script"), "the page carries no JavaScript");

    let shot = artifacts_dir().join("status.png");
    let _ = std::fs::remove_file(&shot);
    let profile = tempfile::tempdir().unwrap();
    let out = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1400",
            &format!("{}/", svc.url()),
        ],
        profile.path(),
    );
    assert!(
        out.status.success(),
        "chromium --screenshot failed: {out:?}"
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 10_000, "suspiciously small screenshot");

    // Metrics after that traffic.
    let (code, m) = curl(&format!("{}/metrics", svc.url()), &[]);
    assert_eq!(code, 200);
    let m = String::from_utf8(m).unwrap();
    let r = "route=\"/image/{schematic}/{version}/{asset}\"";
    assert_eq!(
        metric(
            &m,
            &format!("talos_gen_http_requests_total{{{r},status=\"200\"}} ")
        ),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            &format!("talos_gen_http_requests_total{{{r},status=\"206\"}} ")
        ),
        Some(1.0),
        "{m}"
    );
    assert!(
        m.contains("talos_gen_http_requests_total{route=\"/\",status=\"200\"} 2"),
        "{m}"
    );
    assert!(
        m.contains(&format!(
            "talos_gen_http_request_duration_seconds_count{{{r}}} 3"
        )),
        "{m}"
    );
    let served = metric(&m, "talos_gen_bytes_served_total{kind=\"image\"} ").unwrap_or(0.0);
    assert!(
        served >= (2 * up.xz.len() + 100) as f64,
        "bytes served {served}: {m}"
    );
    assert!(metric(&m, "talos_gen_cache_hits_total{kind=\"image\"} ").unwrap_or(0.0) >= 2.0);
    assert!(metric(&m, "talos_gen_cache_misses_total{kind=\"image\"} ").unwrap_or(0.0) >= 1.0);
    assert!(
        m.contains("talos_gen_upstream_fetches_total{kind=\"image\",result=\"ok\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("talos_gen_upstream_fetch_duration_seconds_count{kind=\"image\"} 1"),
        "{m}"
    );
    assert_eq!(metric(&m, "talos_gen_store_objects "), Some(1.0), "{m}");
    assert_eq!(
        metric(&m, "talos_gen_store_bytes "),
        Some(up.xz.len() as f64),
        "{m}"
    );
    assert_eq!(metric(&m, "talos_gen_fills_in_flight "), Some(0.0), "{m}");
    assert_eq!(metric(&m, "talos_gen_mirror_pins "), Some(0.0), "{m}");
    assert!(m.ends_with("# EOF\n"));
}

fn background_get(url: &str) -> Child {
    Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "60", url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

struct KillChild(Child);
impl Drop for KillChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn fills_in_progress_and_the_fill_cap() {
    // ~2.1 MB of xz at 512 KiB/s: each fill takes several seconds.
    let up = Upstream::new(2, Some("512k"));
    let svc = up.serve(&["--max-concurrent-fills", "1"]);
    let _a = KillChild(background_get(&format!("{}{}", svc.url(), image_path(A))));
    std::thread::sleep(Duration::from_millis(300));
    let _b = KillChild(background_get(&format!("{}{}", svc.url(), image_path(A2))));
    // Wait until both fills are known: one streams, one waits for the slot.
    let start = Instant::now();
    let m = loop {
        let (_, m) = curl(&format!("{}/metrics", svc.url()), &[]);
        let m = String::from_utf8(m).unwrap();
        if metric(&m, "talos_gen_fills_waiting ") == Some(1.0) {
            break m;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no fill waiting for a slot: {m}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(metric(&m, "talos_gen_fills_in_flight "), Some(1.0), "{m}");

    let profile = tempfile::tempdir().unwrap();
    let out = chromium(&["--dump-dom", &format!("{}/", svc.url())], profile.path());
    assert!(out.status.success(), "{out:?}");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let fills = dom
        .split("id=\"fills\"")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no fills table: {dom}"));
    assert!(fills.contains(&format!("image/{S}/{V}/{A}")), "{fills}");
    assert!(fills.contains(&format!("image/{S}/{V}/{A2}")), "{fills}");
    assert!(fills.contains("streaming"), "{fills}");
    assert!(fills.contains("waiting"), "{fills}");
}
