//! The status page at `/` in a real browser (Debian's headless Chromium),
//! `/metrics` after real traffic, and the cap on concurrent upstream fills
//! as both show it. Upstream: nginx on loopback serving a generated artifact.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::factory::{A, A2, Factory, S, V, image_path};
use crate::support::{Curl, Service, chromium, curl, curl_spawn, eventually, sha256_hex};

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
    let up = Factory::new(3, 1, &[A, A2], None);
    // Nothing listens on the discard port: an upstream that does not answer.
    let svc = up.serve(&["--registry-url", "http://127.0.0.1:9"]);
    // Fill the cache, then hit it, then a range.
    let url = format!("{}{}", svc.url(), image_path(A));
    let Curl {
        status: code, body, ..
    } = curl(&[&url]);
    assert_eq!(code, 200);
    assert_eq!(sha256_hex(&body), sha256_hex(&up.xz));
    let Curl {
        status: code, body, ..
    } = curl(&[&url]);
    assert_eq!(code, 200);
    assert_eq!(body.len(), up.xz.len());
    let Curl {
        status: code, body, ..
    } = curl(&["-r", "0-99", &url]);
    assert_eq!(code, 206);
    assert_eq!(body.len(), 100);

    // An installer pull the unreachable registry cannot answer: a 5xx, listed
    // under the last errors.
    let code = curl(&[&format!("{}/v2/installer/{S}/manifests/{V}", svc.url())]).status;
    assert!(code >= 500, "{code}");

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
    let errors = dom
        .split("id=\"errors\"")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no errors table: {dom}"));
    assert!(
        errors.contains(&format!("GET /v2/installer/{S}/manifests/{V}: HTTP {code}")),
        "{errors}"
    );

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
    let Curl {
        status: code,
        body: m,
        ..
    } = curl(&[&format!("{}/metrics", svc.url())]);
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

#[test]
fn fills_in_progress_and_the_fill_cap() {
    // ~2.1 MB of xz at 512 KiB/s: each fill takes several seconds.
    let up = Factory::new(2, 1, &[A, A2], Some("512k"));
    let svc = up.serve(&["--max-concurrent-fills", "1"]);
    let _a = curl_spawn(&[&format!("{}{}", svc.url(), image_path(A))]);
    // A's fill holds the one slot before B asks (waited for, not slept).
    eventually("A's fill to take the slot", Duration::from_secs(10), || {
        let m = String::from_utf8(curl(&[&format!("{}/metrics", svc.url())]).body).unwrap();
        metric(&m, "talos_gen_fills_in_flight ") == Some(1.0)
    });
    let _b = curl_spawn(&[&format!("{}{}", svc.url(), image_path(A2))]);
    // Wait until both fills are known: one streams, one waits for the slot.
    let m = support::eventually_some("a fill waiting for a slot", Duration::from_secs(10), || {
        let m = String::from_utf8(curl(&[&format!("{}/metrics", svc.url())]).body).unwrap();
        if metric(&m, "talos_gen_fills_waiting ") == Some(1.0) {
            Ok(m)
        } else {
            Err(m)
        }
    });
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

/// Issue 14 item 7: what is happening, visible. The status page (in
/// Chromium, screenshot kept) shows uptime, the effective settings (two
/// upstreams from one comma-separated environment variable, offline), hit /
/// miss / offline counts, the last `mirror sync` result the job wrote to the
/// store, schematic names next to IDs and a compact matrix; `/metrics` has
/// every counter from the start and does not count an offline 404 as a
/// miss; the access log has a line per request; unknown `/api/v1/` paths
/// answer JSON.
#[test]
fn status_page_shows_what_is_happening() {
    let up = Factory::new(1, 1, &[A, A2], None);
    // The mirror job: one item stored, one the upstream lacks.
    let cfg = up.dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}, nope-amd64.raw.xz]\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "sync", "--config", cfg.to_str().unwrap()])
        .args(["--cache-dir", up.cache().to_str().unwrap()])
        .args(["--factory-url", &up.nginx.url()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Each failed item once.
    assert_eq!(err.matches("FAILED").count(), 1, "{err}");
    assert_eq!(err.matches("nope-amd64.raw.xz").count(), 1, "{err}");

    let svc = Service::builder()
        .args(["--offline", "--log-format", "json"])
        .listen_prefix(":")
        .arg("--cache-dir")
        .arg(up.cache())
        .env(
            "TALOS_GEN_MIRROR_UPSTREAM",
            "ghcr.io=https://a.example,docker.io=https://b.example",
        )
        .start();
    let base = svc.url();

    // Every counter from the start.
    let m = curl(&[&format!("{base}/metrics")]).body;
    let m = String::from_utf8(m).unwrap();
    for l in [
        "talos_gen_cache_misses_total{kind=\"image\"} 0",
        "talos_gen_offline_misses_total{kind=\"image\"} 0",
        "talos_gen_upstream_fetches_total{kind=\"blob\",result=\"error\"} 0",
    ] {
        assert!(m.contains(l), "{l}:\n{m}");
    }
    // A hit, and an offline 404 that is not a miss.
    assert_eq!(curl(&[&format!("{base}{}", image_path(A))]).status, 200);
    assert_eq!(curl(&[&format!("{base}{}", image_path(A2))]).status, 404);
    let m = curl(&[&format!("{base}/metrics")]).body;
    let m = String::from_utf8(m).unwrap();
    assert!(
        m.contains("talos_gen_cache_misses_total{kind=\"image\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("talos_gen_offline_misses_total{kind=\"image\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("talos_gen_cache_hits_total{kind=\"image\"} 1"),
        "{m}"
    );
    // Unknown API paths: a JSON error.
    let Curl {
        status: code, body, ..
    } = curl(&[&format!("{base}/api/v1/nope?token=s3cret")]);
    assert_eq!(code, 404);
    let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON body");
    assert!(v["error"].as_str().unwrap().contains("/api/v1/nope"), "{v}");

    let profile = tempfile::tempdir().unwrap();
    let out = chromium(&["--dump-dom", &format!("{base}/")], profile.path());
    assert!(out.status.success(), "{out:?}");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    std::fs::write(artifacts_dir().join("status-offline.dom.html"), &dom).unwrap();
    let section = |id: &str| -> String {
        dom.split(&format!("id=\"{id}\""))
            .nth(1)
            .and_then(|t| t.split("</table>").next())
            .unwrap_or_else(|| panic!("no {id} in {dom}"))
            .to_string()
    };
    assert!(dom.contains("id=\"uptime\""), "{dom}");
    let settings = section("settings");
    assert!(
        settings.contains("yes: no upstream is ever contacted"),
        "{settings}"
    );
    assert!(
        settings.contains("ghcr.io=https://a.example/")
            && settings.contains("docker.io=https://b.example/"),
        "{settings}"
    );
    let counts = section("counts");
    assert!(counts.contains("<td>image</td>"), "{counts}");
    let sync = section("mirror-sync");
    assert!(sync.contains("1 failed"), "{sync}");
    assert!(sync.contains("nope-amd64.raw.xz"), "{sync}");
    let artifacts = section("artifacts");
    assert!(artifacts.contains("<td>vanilla</td>"), "{artifacts}");
    let matrix = section("matrix");
    assert!(matrix.contains("v1.31 – v1.36"), "{matrix}");
    assert!(!matrix.contains("v1.32, v1.33"), "compact: {matrix}");

    let shot = artifacts_dir().join("status-offline.png");
    let _ = std::fs::remove_file(&shot);
    let profile = tempfile::tempdir().unwrap();
    let out = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1800",
            &format!("{base}/"),
        ],
        profile.path(),
    );
    assert!(out.status.success(), "{out:?}");
    assert!(std::fs::read(&shot).unwrap().starts_with(b"\x89PNG"));

    // The access log: one JSON line per request, no query string.
    let text = svc.log_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["target"] == "access")
        .collect();
    let img = lines
        .iter()
        .find(|v| v["fields"]["path"].as_str() == Some(image_path(A).as_str()))
        .unwrap_or_else(|| panic!("no access line for the image in {text}"));
    assert_eq!(img["fields"]["method"], "GET");
    assert_eq!(img["fields"]["status"], 200);
    assert_eq!(img["fields"]["bytes"], up.xz.len() as u64);
    assert_eq!(img["fields"]["complete"], true, "a whole answer: {img}");
    assert!(img["fields"]["duration_ms"].is_number(), "{img}");
    assert!(lines.iter().any(|v| v["fields"]["status"] == 404), "{text}");
    assert!(
        !text.contains("s3cret"),
        "the query never reaches the log: {text}"
    );
}

/// `/metrics` on a fresh `serve` (nothing fetched, nothing stored) lists
/// every metric family with a sample, and every route template of the
/// router in `http_requests` and `http_request_duration_seconds`.
#[test]
fn fresh_metrics_have_every_family_and_route() {
    let cache = tempfile::tempdir().unwrap();
    let svc = Service::builder()
        .args(["--offline", "--cache-dir", cache.path().to_str().unwrap()])
        .rust_log("warn")
        .start();
    let r = curl(&[&format!("{}/metrics", svc.url())]);
    assert_eq!(r.status, 200);
    let m = String::from_utf8(r.body).unwrap();
    let families: Vec<(&str, &str)> = m
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert!(families.len() >= 17, "{m}");
    for (name, kind) in &families {
        let suffixes: &[&str] = match *kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_count", "_sum"],
            _ => &[""],
        };
        let has_sample = m.lines().filter(|l| !l.starts_with('#')).any(|l| {
            suffixes.iter().any(|s| {
                l.strip_prefix(&format!("{name}{s}"))
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
        });
        assert!(has_sample, "{name} ({kind}) has no sample at start:\n{m}");
    }
    for talos_gen::http::Route {
        path: route,
        ok: statuses,
        ..
    } in talos_gen::http::ROUTES
    {
        for status in *statuses {
            let line =
                format!("talos_gen_http_requests_total{{route=\"{route}\",status=\"{status}\"}} ");
            assert!(m.contains(&line), "{line} in\n{m}");
        }
        let line = format!("talos_gen_http_request_duration_seconds_count{{route=\"{route}\"}} ");
        assert!(m.contains(&line), "{line} in\n{m}");
    }
    // Untouched routes are at zero; the probe serve was waited on counted.
    assert!(
        m.contains("talos_gen_http_requests_total{route=\"/versions\",status=\"200\"} 0\n"),
        "{m}"
    );
    assert!(
        m.contains("talos_gen_upstream_fetch_duration_seconds_count{kind=\"blob\"} 0\n"),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "talos_gen_http_requests_total{route=\"/healthz\",status=\"200\"} "
        ),
        Some(1.0),
        "{m}"
    );
}

/// The status page renders from state the service keeps: viewing it sends
/// no request upstream (the background prober asks each upstream every
/// 15 s), and it says what each state means for readiness: the factory
/// (here: nothing listens) does not answer, `/readyz` is 200 all the same,
/// and the page says the factory is not needed for it rather than painting
/// it as down. The start-up log line names the listen address, the store
/// and the upstreams.
#[test]
fn status_page_renders_from_state_and_says_what_readiness_needs() {
    let up = Factory::new(1, 1, &[A], None);
    let svc = Service::builder()
        .args(["--log-format", "json"])
        .arg("--cache-dir")
        .arg(up.cache())
        .args(["--factory-url", "http://127.0.0.1:9"])
        .args(["--registry-url", &up.nginx.url()])
        .args(["--mirror-upstream", "ghcr.io=http://user:pw@127.0.0.1:9/"])
        .start();
    let base = svc.url();
    let asks = || up.nginx.count("\"GET /v2/ ");
    // The prober's first round.
    let page = support::eventually_some("the first probe round", Duration::from_secs(20), || {
        let p = String::from_utf8_lossy(&curl(&[&format!("{base}/")]).body).into_owned();
        if p.contains("answers (HTTP") && p.contains("does not answer") {
            Ok(p)
        } else {
            Err(p)
        }
    });
    let before = asks();
    assert!(before >= 1, "the registry was asked once");
    for _ in 0..5 {
        assert_eq!(curl(&[&format!("{base}/")]).status, 200);
    }
    // At most one more: the prober's own round, if its 15 s came meanwhile.
    assert!(
        asks() <= before + 1,
        "{} asks after 5 page views (before: {before})",
        asks()
    );

    assert_eq!(curl(&[&format!("{base}/readyz")]).status, 200);
    let table = page
        .split("id=\"upstreams\"")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no upstreams table: {page}"));
    let row = |role: &str| -> String {
        table
            .split("<tr>")
            .find(|r| r.contains(&format!("<td>{role}</td>")))
            .unwrap_or_else(|| panic!("no {role} row: {table}"))
            .to_string()
    };
    let factory = row("Image Factory");
    assert!(factory.contains("does not answer"), "{factory}");
    assert!(
        !factory.contains("class=\"down\""),
        "not painted down: {factory}"
    );
    assert!(factory.contains("not needed for /readyz"), "{factory}");
    let store = row("store");
    assert!(store.contains("answers"), "{store}");
    assert!(store.contains("needed for /readyz: ready"), "{store}");
    let mirror = row("mirror ghcr.io");
    assert!(!mirror.contains("pw"), "no credentials: {mirror}");

    // The start-up line: where it listens, the store, the upstreams.
    let log = svc.log_text();
    let line: serde_json::Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["fields"]["message"] == "listening")
        .unwrap_or_else(|| panic!("no start-up line: {log}"));
    let f = &line["fields"];
    assert_eq!(
        f["local"].as_str().unwrap(),
        base.trim_start_matches("http://"),
        "{line}"
    );
    assert_eq!(f["store"], up.cache().display().to_string(), "{line}");
    let ups = f["upstreams"].as_str().unwrap();
    assert!(ups.contains("factory=http://127.0.0.1:9/"), "{ups}");
    assert!(
        ups.contains(&format!("registry={}", up.nginx.url())),
        "{ups}"
    );
    assert!(ups.contains("ghcr.io=http://127.0.0.1:9/"), "{ups}");
    assert!(!ups.contains("pw"), "no credentials: {ups}");
}
