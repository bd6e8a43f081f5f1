//! Every refusal, from any layer, in its route family's shape (issue 39):
//! `/v2/` the OCI error body `{"errors":[{"code","message"}]}`, `/api/`
//! the JSON `{"error": ...}`, every other route one line of plain text.
//! The layers: the token check (401), the body limit (413), axum's own
//! method and path refusals (405, 404), the handlers' errors, the
//! datavolume fill. (The store gate's 503 on `/v2/` and `/api/v1/` is in
//! `tests/store/frozen_bucket.rs`.)

use crate::support::{Curl, Service, curl};

const TOKEN: &str = "tg-refusals-token";

fn json(r: &Curl) -> serde_json::Value {
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json"),
        "{} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    serde_json::from_slice(&r.body).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&r.body));
    })
}

/// The OCI body's one error: (code, message).
fn oci(r: &Curl) -> (String, String) {
    let j = json(r);
    let e = &j["errors"][0];
    assert_eq!(j["errors"].as_array().map(Vec::len), Some(1), "{j}");
    (
        e["code"].as_str().unwrap().to_string(),
        e["message"].as_str().unwrap().to_string(),
    )
}

/// The API body's message.
fn api(r: &Curl) -> String {
    let j = json(r);
    j["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no \"error\" in {j}"))
        .to_string()
}

fn text(r: &Curl) -> String {
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/plain")),
        "{:?}",
        r.header("content-type")
    );
    String::from_utf8(r.body.clone()).unwrap()
}

#[test]
fn every_refusal_in_its_route_family_shape() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let svc = Service::builder()
        .args(["--cache-dir", cache.to_str().unwrap(), "--offline"])
        .api_token(dir.path(), TOKEN)
        .start();
    let u = svc.url();
    let bearer = format!("Authorization: Bearer {TOKEN}");
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'x'; (1 << 20) + 10]).unwrap();
    let big = format!("@{}", big.display());

    // The API: the token check (401, its challenge kept), the body limit
    // (413), a handler's bad input (400), an unknown path (404).
    let r = curl(&[
        "-X",
        "POST",
        "--data-binary",
        "{}",
        &format!("{u}/api/v1/machineconfig"),
    ]);
    assert_eq!(r.status, 401);
    assert!(api(&r).contains("Authorization: Bearer"), "{}", api(&r));
    assert!(r.header("www-authenticate").is_some());
    let r = curl(&[
        "-X",
        "POST",
        "-H",
        &bearer,
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &big,
        &format!("{u}/api/v1/kubelet-reservations"),
    ]);
    assert_eq!(r.status, 413);
    assert!(!api(&r).is_empty());
    let r = curl(&[&format!(
        "{u}/api/v1/matrix/check?talos=x&kubernetes=1.33.0"
    )]);
    assert_eq!(r.status, 400);
    assert!(api(&r).contains("talos"), "{}", api(&r));
    let r = curl(&["-X", "PUT", "-H", &bearer, &format!("{u}/api/v1/matrix")]);
    assert_eq!(r.status, 405);
    assert!(!api(&r).is_empty());
    let r = curl(&[&format!("{u}/api/v1/nothing")]);
    assert_eq!(r.status, 404);
    assert!(api(&r).contains("no such API endpoint"));
    // The datavolume's fill (offline, not stored: 404): JSON whatever the
    // format asked (issue 50 item 7: JSON errors on every `/api/v1/` route).
    let q = "schematic=376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba&talosVersion=v1.11.5&name=w&size=20Gi";
    let r = curl(&[&format!("{u}/api/v1/datavolume?{q}&format=json")]);
    assert_eq!(r.status, 404);
    assert!(api(&r).contains("not in the cache"), "{}", api(&r));
    let r = curl(&[&format!("{u}/api/v1/datavolume?{q}")]);
    assert_eq!(r.status, 404);
    assert!(api(&r).contains("not in the cache"), "{}", api(&r));
    let r = curl(&[&format!("{u}/api/v1/datavolume?bogus=1&format=json")]);
    assert_eq!(r.status, 400);
    assert!(api(&r).contains("bogus"), "{}", api(&r));

    // The registry: a write (405, axum's own and the handler's), a path
    // no route has (404), a bad name (400): all OCI bodies.
    for (method, path, status) in [
        ("POST", "/v2/", 405),
        ("DELETE", "/v2/siderolabs/installer/manifests/v1", 405),
        ("GET", "/v2", 404),
        ("GET", "/v2/x", 404),
        ("GET", "/v2/UPPER/manifests/v1", 400),
    ] {
        let r = curl(&["-X", method, &format!("{u}{path}")]);
        assert_eq!(r.status, status, "{method} {path}");
        let (code, message) = oci(&r);
        assert!(!code.is_empty() && !message.is_empty(), "{method} {path}");
        assert_eq!(
            r.header("docker-distribution-api-version").as_deref(),
            Some("registry/2.0"),
            "{method} {path}"
        );
    }
    // A HEAD's refusal has the status, under the same type.
    let r = curl(&["-I", &format!("{u}/v2/UPPER/manifests/v1")]);
    assert_eq!(r.status, 400);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );

    // Every other route: one line of text (an image not stored offline,
    // an oversized schematic, a write to a read route).
    let r = curl(&[&format!(
        "{u}/image/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba/v1.11.5/metal-amd64.raw.xz"
    )]);
    assert!(r.status >= 400, "{}", r.status);
    assert_eq!(text(&r).trim_end().lines().count(), 1, "{}", text(&r));
    let r = curl(&[
        "-X",
        "POST",
        "--data-binary",
        &big,
        &format!("{u}/schematics"),
    ]);
    assert_eq!(r.status, 413);
    text(&r);
    let r = curl(&["-X", "POST", &format!("{u}/versions")]);
    assert_eq!(r.status, 405);
    assert!(
        r.header("content-type")
            .is_none_or(|c| c.starts_with("text/plain")),
        "{:?}",
        r.header("content-type")
    );
}
