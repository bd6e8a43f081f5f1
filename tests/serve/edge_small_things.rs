//! Issue 50: inputs that cannot silently mean something else on the API,
//! and an edge that follows RFC 9110/9112 in the small things. Every
//! request is written as a person (or curl) would send it.

use crate::support::factory::{A, Factory, image_path};
use crate::support::{Curl, Nginx, NginxOpts, Service, curl, raw_request, run_text, xz_disk};

const TOKEN: &str = "tg-issue-50-token";

fn api_error(r: &Curl) -> String {
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json"),
        "{} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    j["error"].as_str().unwrap_or_default().to_string()
}

fn offline() -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let svc = Service::builder()
        .args(["--cache-dir", cache.to_str().unwrap(), "--offline"])
        .api_token(dir.path(), TOKEN)
        .start();
    (dir, svc)
}

/// Items 5 and 6: one boolean grammar (`replace=1`, `replace=TRUE` as
/// the CLI's `--replace=true`), a repeated parameter 400 naming it, an
/// unknown one 400 with the nearest known name, on every `/api/v1/` route.
#[test]
fn api_queries_take_one_boolean_grammar_and_refuse_repeats_and_typos() {
    let (_dir, svc) = offline();
    let u = svc.url();
    let plan = "fromTalos=v1.13.9&fromKubernetes=1.35.6&toTalos=v1.14&toKubernetes=1.35";
    let get = |q: &str| curl(&[&format!("{u}/api/v1/upgrade-plan?{q}")]);
    let base = get(plan);
    assert_eq!(base.status, 200, "{}", String::from_utf8_lossy(&base.body));
    for (v, replace) in [
        ("1", true),
        ("TRUE", true),
        ("true", true),
        ("0", false),
        ("False", false),
    ] {
        let r = get(&format!("{plan}&replace={v}"));
        assert_eq!(
            r.status,
            200,
            "replace={v}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        let cli = run_text(
            &[
                "upgrade",
                "plan",
                "--from-talos",
                "v1.13.9",
                "--from-kubernetes",
                "1.35.6",
                "--to-talos",
                "v1.14",
                "--to-kubernetes",
                "1.35",
                &format!("--replace={v}"),
                "--json",
            ],
            None,
        );
        assert_eq!(cli.0, 0, "--replace={v}: {}", cli.2);
        let c: serde_json::Value = serde_json::from_str(&cli.1).unwrap();
        assert_eq!(j, c, "replace={v}: the API and the CLI plan alike");
        assert_eq!(j["replace"].as_bool(), Some(replace), "{j}");
    }
    let r = get(&format!("{plan}&replace=yes"));
    assert_eq!(r.status, 400);
    assert!(
        api_error(&r).starts_with("replace: \"yes\" is not a boolean"),
        "{}",
        api_error(&r)
    );

    // A repeated parameter: 400 naming it (the last one never wins).
    let r = get(&format!("{plan}&toTalos=v1.13"));
    assert_eq!(r.status, 400);
    assert!(
        api_error(&r).starts_with("toTalos: given 2 times"),
        "{}",
        api_error(&r)
    );
    // A typo: the nearest known name, on every route.
    for (path, typo, nearest) in [
        (
            "/api/v1/upgrade-plan",
            "fromKubernets=1.35",
            "fromKubernetes",
        ),
        (
            "/api/v1/matrix/check",
            "kubernets=1.35&talos=v1.13",
            "kubernetes",
        ),
        ("/api/v1/datavolume", "talosVerison=v1.13", "talosVersion"),
    ] {
        let r = curl(&[&format!("{u}{path}?{typo}")]);
        assert_eq!(r.status, 400, "{path}");
        let e = api_error(&r);
        assert!(
            e.contains(&format!("(nearest known: \"{nearest}\")")),
            "{path}: {e}"
        );
    }
    let r = curl(&[&format!(
        "{u}/api/v1/matrix/check?talos=v1.13&talos=v1.14&kubernetes=1.35"
    )]);
    assert_eq!(r.status, 400);
    assert!(
        api_error(&r).starts_with("talos: given 2 times"),
        "{}",
        api_error(&r)
    );
    let r = curl(&[&format!("{u}/api/v1/matrix?json=1")]);
    assert_eq!(r.status, 400);
    assert!(
        api_error(&r).contains("unknown query parameter \"json\""),
        "{}",
        api_error(&r)
    );
    let r = curl(&[
        "-X",
        "POST",
        "-H",
        &format!("Authorization: Bearer {TOKEN}"),
        "--data-binary",
        "{}",
        &format!("{u}/api/v1/machineconfig?clusterName=a&clusterName=b&endpoint=https://a:6443"),
    ]);
    assert_eq!(r.status, 400);
    assert!(
        api_error(&r).starts_with("clusterName: given 2 times"),
        "{}",
        api_error(&r)
    );
    // The datavolume's booleans too.
    let r = curl(&[&format!(
        "{u}/api/v1/datavolume?golden=yes&namespace=n&schematic=cozystack&talosVersion=v1.13.9&name=w&size=1Gi"
    )]);
    assert_eq!(r.status, 400);
    assert!(
        api_error(&r).starts_with("golden: \"yes\""),
        "{}",
        api_error(&r)
    );
}

/// Item 7: `/api/v1/datavolume` answers its errors as JSON like every
/// `/api/v1/` route, with or without `format=json` (its documents stay
/// YAML unless asked). Item 9: build metadata is no version here either.
#[test]
fn datavolume_errors_are_json_on_every_format() {
    let (_dir, svc) = offline();
    let u = svc.url();
    let q = "schematic=cozystack&name=w&size=20Gi";
    for fmt in ["", "&format=yaml", "&format=json"] {
        let r = curl(&[&format!(
            "{u}/api/v1/datavolume?{q}&talosVersion=v1.13.9{fmt}"
        )]);
        assert_eq!(r.status, 404, "{fmt}");
        assert!(
            api_error(&r).contains("not in the cache"),
            "{fmt}: {}",
            api_error(&r)
        );
        let r = curl(&[&format!(
            "{u}/api/v1/datavolume?{q}&talosVersion=v1.13.6%2Bbuild{fmt}"
        )]);
        assert_eq!(r.status, 400, "{fmt}");
        assert!(
            api_error(&r).contains("build metadata"),
            "{fmt}: {}",
            api_error(&r)
        );
    }
    let r = curl(&[&format!("{u}/api/v1/datavolume?format=xml")]);
    assert_eq!(r.status, 400);
    assert!(
        api_error(&r).starts_with("format: \"xml\""),
        "{}",
        api_error(&r)
    );
}

/// Item 9: `--talos-version v1.13` (and `talosVersion=v1.13`) is the
/// newest v1.13 release the support matrix knows, as for `machineconfig`;
/// stderr (the API: a `Warning: 299`) says which.
#[test]
fn datavolume_resolves_a_bare_minor_through_the_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let (_, xz) = xz_disk(dir.path(), 1, 1);
    let (code, out, err) = run_text(
        &[
            "images",
            "--talos",
            "v1.13",
            "--kubernetes",
            "1.35",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let newest = serde_json::from_str::<serde_json::Value>(&out).unwrap()["talos"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(newest.starts_with("v1.13."), "{newest}");
    let root = dir.path().join("root");
    let d = root.join(format!("image/{}/{newest}", crate::support::factory::S));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(A), &xz).unwrap();
    let ng = Nginx::start(&root, NginxOpts::default());
    let svc = Service::builder()
        .args(["--cache-dir", dir.path().join("cache").to_str().unwrap()])
        .args(["--factory-url", &ng.url()])
        .start();
    let (code, out, err) = run_text(
        &[
            "datavolume",
            "--base-url",
            &svc.url(),
            "--schematic",
            crate::support::factory::S,
            "--talos-version",
            "v1.13",
            "--name",
            "md0",
            "--size",
            "2Gi",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("/{newest}/{A}")), "{out}");
    assert!(err.contains(&format!("using {newest}")), "{err}");
    let r = curl(&[&format!(
        "{}/api/v1/datavolume?schematic={}&talosVersion=v1.13&name=md0&size=2Gi",
        svc.url(),
        crate::support::factory::S
    )]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains(&format!("/{newest}/{A}")));
    assert!(
        r.header("warning").is_some_and(|w| w.contains(&newest)),
        "{}",
        r.headers
    );
}

/// Item 11: a request without a Host header (HTTP/1.1), or with two, is
/// 400 in its route family's shape (RFC 9112 3.2); HTTP/1.0 may omit it.
#[test]
fn a_request_names_exactly_one_host() {
    let (_dir, svc) = offline();
    let p: u16 = svc.host().rsplit(':').next().unwrap().parse().unwrap();
    let t = std::time::Duration::from_secs(5);
    for (path, ctype) in [
        ("/healthz", "text/plain"),
        ("/api/v1/matrix", "application/json"),
        ("/v2/", "application/json"),
        ("/pxe/x/v1.13.9/metal-amd64", "text/plain"),
    ] {
        let none = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n");
        let two = format!(
            "GET {path} HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n"
        );
        for req in [none, two] {
            let (code, head, body) = raw_request(p, req.as_bytes(), t);
            assert_eq!(code, 400, "{req:?}: {head}");
            assert!(
                head.to_ascii_lowercase()
                    .contains(&format!("content-type: {ctype}")),
                "{head}"
            );
            assert!(
                String::from_utf8_lossy(&body).contains("Host header"),
                "{path}"
            );
        }
    }
    let (code, _, body) = raw_request(p, b"GET /healthz HTTP/1.0\r\n\r\n", t);
    assert_eq!((code, body.as_slice()), (200, b"ok\n".as_slice()));
}

/// Item 12: Range applies to GET only: a HEAD with Range gets the 200's
/// headers (RFC 9110 14.2), the whole length and no Content-Range.
#[test]
fn a_head_with_range_gets_the_whole_answers_head() {
    let fx = Factory::new(1, 1, &[A], None);
    let svc = fx.serve(&[]);
    let url = format!("{}{}", svc.url(), image_path(A));
    let g = curl(&[&url]);
    assert_eq!((g.status, g.body.len()), (200, fx.xz.len()));
    let h = curl(&["-I", "-r", "0-9", &url]);
    assert_eq!(h.status, 200, "{}", h.headers);
    assert_eq!(h.header("content-length"), Some(fx.xz.len().to_string()));
    assert!(h.header("content-range").is_none(), "{}", h.headers);
    let r = curl(&["-r", "0-9", &url]);
    assert_eq!((r.status, r.body.len()), (206, 10));
}

/// Item 13 (in part): a HEAD answered with an error carries the head its
/// GET would, its Content-Length the GET's (not 0).
#[test]
fn a_head_refused_carries_its_gets_head() {
    let (_dir, svc) = offline();
    let u = svc.url();
    for path in [
        "/v2/siderolabs/installer/manifests/v1.13.9",
        "/v2/UPPER/manifests/v1",
        "/api/v1/upgrade-plan?fromKubernets=1",
        "/image/x/v1.13.9/metal-amd64.iso",
    ] {
        let g = curl(&[&format!("{u}{path}")]);
        let h = curl(&["-I", &format!("{u}{path}")]);
        assert!(g.status >= 400, "{path}");
        assert_eq!(h.status, g.status, "{path}");
        assert_eq!(
            h.header("content-length"),
            Some(g.body.len().to_string()),
            "{path}"
        );
        assert_eq!(h.header("content-type"), g.header("content-type"), "{path}");
    }
}

/// Item 16: the 405s of `/image` and `/healthz` carry their one line; the
/// 401 of `/api/v1` shows its `Bearer <token>` form.
#[test]
fn refusals_say_what_they_refuse() {
    let (_dir, svc) = offline();
    let u = svc.url();
    for path in ["/healthz", &image_path(A)] {
        let r = curl(&["-X", "POST", &format!("{u}{path}")]);
        assert_eq!(r.status, 405, "{path}");
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert!(body.starts_with("Method Not Allowed"), "{path}: {body:?}");
        assert!(
            body.ends_with('\n') && body.lines().count() == 1,
            "{body:?}"
        );
    }
    let r = curl(&[
        "-X",
        "POST",
        "--data-binary",
        "{}",
        &format!("{u}/api/v1/machineconfig"),
    ]);
    assert_eq!(r.status, 401);
    assert_eq!(
        api_error(&r),
        "this endpoint requires Authorization: Bearer <token> (--api-token-file)"
    );
    assert_eq!(
        r.header("www-authenticate").as_deref(),
        Some("Bearer realm=\"talos-gen\"")
    );
}

/// Item 14: an upstream's 429 passes its `Retry-After` on, on `/v2/`
/// (manifests, blobs, tags) and on `/image/` (nginx as the upstream,
/// answering 429 to everything).
#[test]
fn an_upstreams_429_passes_its_retry_after_on() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let ng = Nginx::start(
        &root,
        NginxOpts {
            server_extra: "location ^~ /v2/ { add_header Retry-After 17 always; return 429 '{\"errors\":[{\"code\":\"TOOMANYREQUESTS\",\"message\":\"slow down\"}]}'; }\n    location ^~ /image/ { add_header Retry-After 17 always; return 429 'slow down'; }".into(),
            ..Default::default()
        },
    );
    let svc = Service::builder()
        .args(["--cache-dir", dir.path().join("cache").to_str().unwrap()])
        .args(["--factory-url", &ng.url(), "--registry-url", &ng.url()])
        .start();
    let u = svc.url();
    let blob = format!("sha256:{}", "a".repeat(64));
    let repo = format!("installer/{}", crate::support::factory::S);
    for path in [
        format!("/v2/{repo}/manifests/v1.13.9"),
        format!("/v2/{repo}/blobs/{blob}"),
        format!("/v2/{repo}/tags/list"),
        image_path(A),
    ] {
        let r = curl(&[&format!("{u}{path}")]);
        assert_eq!(
            r.status,
            429,
            "{path}: {} {}",
            String::from_utf8_lossy(&r.body),
            ng.access_log()
        );
        assert_eq!(
            r.header("retry-after").as_deref(),
            Some("17"),
            "{path}: {}",
            r.headers
        );
    }
}

/// Item 8: where the README says "the same JSON", the CLI's `--json` and
/// the API's answer are the same bytes.
#[test]
fn the_cli_and_the_api_give_the_same_bytes() {
    let (_dir, svc) = offline();
    let u = svc.url();
    for (query, args) in [
        (
            "/api/v1/upgrade-plan?fromTalos=v1.11.6&fromKubernetes=1.31.4&toTalos=v1.14.6&toKubernetes=1.36.3",
            &[
                "upgrade",
                "plan",
                "--from-talos",
                "v1.11.6",
                "--from-kubernetes",
                "1.31.4",
                "--to-talos",
                "v1.14.6",
                "--to-kubernetes",
                "1.36.3",
                "--json",
            ][..],
        ),
        (
            "/api/v1/upgrade-plan?fromTalos=v1.11.6&fromKubernetes=1.31.4&toTalos=v1.14.6&toKubernetes=1.36.3&replace=true",
            &[
                "upgrade",
                "plan",
                "--from-talos",
                "v1.11.6",
                "--from-kubernetes",
                "1.31.4",
                "--to-talos",
                "v1.14.6",
                "--to-kubernetes",
                "1.36.3",
                "--replace",
                "--json",
            ][..],
        ),
        ("/api/v1/matrix", &["matrix", "--json"][..]),
        (
            "/api/v1/matrix/check?talos=v1.13.6&kubernetes=1.30",
            &[
                "matrix",
                "check",
                "--talos",
                "v1.13.6",
                "--kubernetes",
                "1.30",
                "--json",
            ][..],
        ),
    ] {
        let r = curl(&[&format!("{u}{query}")]);
        assert_eq!(r.status, 200, "{query}");
        let (_, out, err) = run_text(args, None);
        assert!(
            r.body == out.as_bytes(),
            "{query}: the API's bytes differ from `{}`'s: {err}\n{}\n---\n{out}",
            args.join(" "),
            String::from_utf8_lossy(&r.body)
        );
    }
}

/// Item 13: a 64 KiB URI is 414 (not 431), as is one past 32 KiB; header
/// fields past 32 KiB stay 431; an 8 KiB URI is served.
#[test]
fn a_long_uri_is_414_and_large_fields_431() {
    let (_dir, svc) = offline();
    let p: u16 = svc.host().rsplit(':').next().unwrap().parse().unwrap();
    let t = std::time::Duration::from_secs(5);
    let get = |target: &str, extra: &str| {
        raw_request(
            p,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n")
                .as_bytes(),
            t,
        )
    };
    for (n, want) in [(64 << 10, 414), (40 << 10, 414), (8 << 10, 200)] {
        let (code, head, body) = get(&format!("/healthz?{}", "a".repeat(n)), "");
        assert_eq!(code, want, "{n}: {head}");
        if want == 414 && n < (64 << 10) {
            assert!(
                String::from_utf8_lossy(&body).contains("request target"),
                "{n}"
            );
        }
    }
    let (code, _, body) = get(
        "/api/v1/matrix?x",
        &format!("X-Big: {}\r\n", "a".repeat(40 << 10)),
    );
    assert_eq!(code, 431);
    let j: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert!(
        j["error"].as_str().unwrap().contains("header fields"),
        "{j}"
    );
}
