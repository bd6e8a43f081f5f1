//! End-to-end tests of the `/v2/` pull-through with real parts: Debian's
//! distribution registry as the upstream (an image shaped like the Image
//! Factory's installer pushed to it), `talos-gen serve` in front, and skopeo
//! as the client.

use crate::support;

use crate::support::registry::*;
use crate::support::{Service, send, sha256_digest};

const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
const MIB: usize = 1024 * 1024;

fn repo() -> String {
    format!("installer/{SCHEMATIC}")
}

#[tokio::test(flavor = "multi_thread")]
async fn harness_upstream_serves_factory_shaped_image_to_skopeo() {
    let up = Registry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.6", &[3 * MIB, MIB], 1).await;
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("direct");
    let files = skopeo_copy_ok(&up.host(), &repo(), "v1.13.6", &dest, "direct");
    img.assert_copied(&files, "direct");
}

/// `<svc>/v2/<installer repo>/<path>`.
fn installer_url(svc: &Service, path: &str) -> String {
    format!("{}/v2/{}/{path}", svc.url(), repo())
}

fn service(up: &Registry, cache: &std::path::Path, extra: &[&str]) -> Service {
    Service::builder()
        .arg("--cache-dir")
        .arg(cache)
        .args(["--registry-url", &up.url()])
        .args(extra)
        .start()
}

fn assert_same_dir(a: &std::path::Path, b: &std::path::Path) {
    let (x, y) = (dir_contents(a), dir_contents(b));
    assert_eq!(
        x.keys().collect::<Vec<_>>(),
        y.keys().collect::<Vec<_>>(),
        "file names differ"
    );
    for (k, v) in &x {
        assert!(y[k] == *v, "file {k} differs");
    }
}

/// GET `url`: its status and the code of its OCI error body.
async fn oci_error(http: &reqwest::Client, url: &str) -> (u16, String) {
    let r = send(http.get(url)).await;
    let status = r.status.as_u16();
    let body = r.body;
    let v: serde_json::Value = serde_json::from_slice(&body).expect("OCI error body is JSON");
    let code = v["errors"][0]["code"]
        .as_str()
        .expect("errors[0].code")
        .to_string();
    (status, code)
}

const ACCEPT_ALL: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

#[tokio::test(flavor = "multi_thread")]
async fn pull_through_copy_equals_direct_and_survives_upstream_loss() {
    let mut up = Registry::start();
    let img = push_factory_image(
        &up.url(),
        &repo(),
        "v1.13.6",
        &[5 * MIB, 2 * MIB, 300_000],
        2,
    )
    .await;
    let cache = tempfile::tempdir().unwrap();
    let svc = service(&up, cache.path(), &["--tag-revalidate", "1"]);
    let out = tempfile::tempdir().unwrap();

    // The direct copy and the copy through the service are the same files.
    let direct = out.path().join("direct");
    skopeo_copy_ok(&up.host(), &repo(), "v1.13.6", &direct, "direct");
    let via = out.path().join("via");
    skopeo_copy_ok(&svc.host(), &repo(), "v1.13.6", &via, "via the service");
    assert_same_dir(&direct, &via);

    // skopeo inspect --raw through the service hashes to the index digest.
    let o = std::process::Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false"])
        .arg(format!("docker://{}/{}:v1.13.6", svc.host(), repo()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "inspect: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(sha256_digest(&o.stdout), img.index_digest);

    let http = reqwest::Client::new();
    // HEAD on the tag: digest and media type.
    let r = send(
        http.head(installer_url(&svc, "manifests/v1.13.6"))
            .header("accept", ACCEPT_ALL),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["docker-content-digest"],
        img.index_digest.as_str()
    );
    assert_eq!(r.headers["content-type"], INDEX_TYPE);
    assert_eq!(
        r.headers["content-length"],
        img.index.len().to_string().as_str()
    );
    // A per-arch manifest by digest: Docker schema 2, byte for byte.
    let (_, mbytes, mdigest) = &img.manifests[1];
    let r = send(http.get(installer_url(&svc, &format!("manifests/{mdigest}")))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], DOCKER_MANIFEST);
    assert_eq!(r.body, mbytes.as_slice());
    // GET /v2/
    let r = send(http.get(format!("{}/v2/", svc.url()))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["docker-distribution-api-version"], "registry/2.0");

    // Blob ranges.
    let b = &img.blobs[0];
    for (range, lo, hi) in [
        ("bytes=0-99", 0usize, 99usize),
        ("bytes=1000000-1999999", 1_000_000, 1_999_999),
        ("bytes=-10", b.data.len() - 10, b.data.len() - 1),
        ("bytes=5000000-", 5_000_000, b.data.len() - 1),
    ] {
        let r = send(
            http.get(installer_url(&svc, &format!("blobs/{}", b.digest)))
                .header("range", range),
        )
        .await;
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(
            r.headers["content-range"],
            format!("bytes {lo}-{hi}/{}", b.data.len()).as_str()
        );
        assert_eq!(r.body, &b.data[lo..=hi], "{range}");
    }
    let r = send(
        http.get(installer_url(&svc, &format!("blobs/{}", b.digest)))
            .header("range", format!("bytes={}-", b.data.len())),
    )
    .await;
    assert_eq!(r.status, 416);

    // Unknown tag and blob: 404 with OCI error bodies.
    let missing = format!("sha256:{}", "0".repeat(64));
    for (what, code) in [
        ("manifests/v9.9.9".to_string(), "MANIFEST_UNKNOWN"),
        (format!("blobs/{missing}"), "BLOB_UNKNOWN"),
        (format!("manifests/{missing}"), "MANIFEST_UNKNOWN"),
    ] {
        let url = installer_url(&svc, &what);
        assert_eq!(
            oci_error(&http, &url).await,
            (404, code.to_string()),
            "{what}"
        );
    }

    // Upstream gone, tag mapping past its revalidation time: the whole copy
    // still succeeds from the store.
    up.stop();
    // The sleep is the point: the tag mapping must be past its
    // `--tag-revalidate 1` before the copy, so it is answered stale.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let offline = out.path().join("offline");
    skopeo_copy_ok(&svc.host(), &repo(), "v1.13.6", &offline, "upstream down");
    assert_same_dir(&direct, &offline);
    // Unknown things with the upstream down fail fast with 5xx, not 404 lies.
    let t0 = std::time::Instant::now();
    let r = send(http.get(installer_url(&svc, "manifests/v0.0.1"))).await;
    assert!(r.status.is_server_error(), "{}", r.status);
    assert!(t0.elapsed() < std::time::Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread")]
async fn ns_mirror_served_only_for_configured_registries() {
    let up = Registry::start();
    let img = push_factory_image(&up.url(), "siderolabs/kubelet", "v1.35.6", &[MIB], 3).await;
    let cache = tempfile::tempdir().unwrap();
    let svc = service(
        &up,
        cache.path(),
        &["--mirror-upstream", &format!("ghcr.io={}", up.url())],
    );
    let http = reqwest::Client::new();
    let before = up.count_gets("siderolabs/kubelet");
    // As containerd asks a mirror: HEAD then GET with ?ns=.
    let url = format!(
        "{}/v2/siderolabs/kubelet/manifests/v1.35.6?ns=ghcr.io",
        svc.url()
    );
    let r = send(http.head(&url).header("accept", ACCEPT_ALL)).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["docker-content-digest"],
        img.index_digest.as_str()
    );
    let r = send(http.get(&url).header("accept", ACCEPT_ALL)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], INDEX_TYPE);
    assert_eq!(r.body, img.index.as_slice());
    let kubelet = "siderolabs/kubelet";
    assert_ns_blob(&http, &svc.url(), kubelet, "ghcr.io", &img.blobs[0]).await;
    // A cold blob: HEAD gives its size; a range is served from the fill.
    let cold = &img.blobs[2];
    let burl = ns_url(
        &svc.url(),
        kubelet,
        &format!("blobs/{}", cold.digest),
        "ghcr.io",
    );
    let r = send(http.head(&burl)).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["content-length"],
        cold.data.len().to_string().as_str()
    );
    assert_eq!(r.headers["docker-content-digest"], cold.digest.as_str());
    // HEAD asks the conditionals as GET does (a hostile pass found HEAD
    // answering 200 where GET answered 412 or 304).
    let tag = format!("\"{}\"", cold.digest);
    for (h, v, want) in [
        ("if-match", "\"nope\"", 412),
        ("if-match", tag.as_str(), 200),
        ("if-none-match", tag.as_str(), 304),
        ("if-none-match", "\"nope\"", 200),
    ] {
        let r = send(http.head(&burl).header(h, v)).await;
        assert_eq!(r.status, want, "HEAD {h}: {v}");
    }
    let r = send(http.get(&burl).header("range", "bytes=1000-2999")).await;
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &cold.data[1000..3000]);
    let r = send(http.get(&burl)).await;
    assert_eq!(r.body, cold.data.as_slice());
    assert_eq!(up.count_gets(&format!("/blobs/{}", cold.digest)), 1);
    let served = up.count_gets("siderolabs/kubelet");
    assert!(served > before);

    // Unconfigured ns, no ns for a non-installer repository, malformed ns:
    // refused, and the upstream never hears of it.
    for (q, status, code) in [
        ("?ns=docker.io", 403, "DENIED"),
        ("", 403, "DENIED"),
        ("?ns=ghcr.io%2F..", 400, "NAME_INVALID"),
        ("?ns=evil/x", 400, "NAME_INVALID"),
        ("?ns=ghcr.io&ns=docker.io", 400, "UNSUPPORTED"),
    ] {
        let url = format!("{}/v2/siderolabs/kubelet/manifests/v1.35.6{q}", svc.url());
        assert_eq!(
            oci_error(&http, &url).await,
            (status, code.to_string()),
            "{q}"
        );
    }
    assert_eq!(
        up.count_gets("siderolabs/kubelet"),
        served,
        "refused requests reached the upstream"
    );
    assert_eq!(up.count_gets("docker.io"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_names_and_digests_are_refused_and_touch_nothing() {
    let up = Registry::start();
    push_factory_image(&up.url(), &repo(), "v1.13.6", &[100_000], 4).await;
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let sentinel = root.path().join("sentinel");
    std::fs::write(&sentinel, b"keep").unwrap();
    let svc = service(
        &up,
        &cache,
        &["--mirror-upstream", &format!("ghcr.io={}", up.url())],
    );
    // Every request the upstream saw (its access line: each request has
    // exactly one, beside the structured `response completed` line that
    // named no path to filter on) but the status prober's own `GET /v2/`
    // (whatever the clients do; two roles on one URL ask it in turn).
    let asked = || {
        std::fs::read_to_string(&up.log)
            .unwrap()
            .lines()
            .filter(|l| l.contains(" HTTP/1.1\"") && !l.contains("\"GET /v2/ HTTP"))
            .count()
    };
    let gets_before = asked();
    let h = SCHEMATIC;
    let long = "a".repeat(300);
    let paths = [
        "/v2/../../etc/passwd/manifests/latest".to_string(),
        format!("/v2/installer/../{h}/manifests/latest"),
        "/v2/installer/%2e%2e/manifests/latest".to_string(),
        format!("/v2/installer%2F{h}/manifests/latest"),
        format!("/v2/installer/{h}/manifests/..%2F..%2Fsentinel"),
        format!("/v2/installer/{h}/manifests/sha256:..%2f..%2fsentinel"),
        format!("/v2/installer/{h}/blobs/sha256:../../sentinel"),
        format!("/v2/installer/{h}/blobs/sha256:{}", "Z".repeat(64)),
        format!("/v2/installer/{h}/blobs/sha512:{}", "0".repeat(128)),
        format!("/v2/installer/{h}/blobs/{}", "0".repeat(64)),
        format!("/v2/installer/{h}/manifests/{}", "v".repeat(200)),
        format!("/v2/installer/{h}/manifests/.hidden"),
        format!("/v2/installer/{}/manifests/latest", &h[..63]),
        format!("/v2/installer/{}/manifests/latest", h.to_uppercase()),
        format!("/v2/installer//{h}/manifests/latest"),
        format!("/v2/Installer/{h}/manifests/latest"),
        format!("/v2/evil-installer-x/{h}/manifests/latest"),
        format!("/v2/{long}/{h}/manifests/latest"),
        format!("/v2/{long}/manifests/latest?ns=ghcr.io"),
        "/v2/library/nginx/manifests/latest".to_string(),
        "/v2/library/nginx/manifests/latest?ns=..".to_string(),
        "/v2/library/nginx/blobs/sha256:x?ns=ghcr.io".to_string(),
        // tags/list and referrers are served, but not for hostile asks.
        format!("/v2/installer/{h}/tags/list?n=x"),
        format!("/v2/installer/{h}/tags/list?last=..%2Fx"),
        format!("/v2/installer/{h}/tags/list?n=1&n=2"),
        format!("/v2/installer/{h}/tags/other"),
        format!("/v2/installer/{h}/referrers/sha256:..%2f..%2fsentinel"),
        format!("/v2/installer/{h}/referrers/sha256:../../sentinel"),
        format!("/v2/installer/{h}/referrers/latest"),
        format!(
            "/v2/installer/{h}/referrers/sha256:{}?artifactType=%zz",
            "0".repeat(64)
        ),
        "/v2/library/nginx/tags/list".to_string(),
        format!("/v2/library/nginx/referrers/sha256:{}", "0".repeat(64)),
        "/v2/library/nginx/tags/list?ns=..".to_string(),
    ];
    for p in &paths {
        let o = std::process::Command::new("curl")
            .args([
                "-s",
                "--path-as-is",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
            ])
            .arg(format!("{}{p}", svc.url()))
            .output()
            .unwrap();
        let code: u16 = String::from_utf8_lossy(&o.stdout).parse().unwrap_or(0);
        assert!((400..500).contains(&code), "{p}: {code}");
    }
    // Writes are refused too.
    let r = reqwest::Client::new()
        .put(format!("{}/v2/installer/{h}/manifests/latest", svc.url()))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert!(r.status().is_client_error(), "{}", r.status());

    // Nothing reached the upstream, nothing appeared beside the cache dir.
    let gets_after = asked();
    assert_eq!(
        gets_before, gets_after,
        "hostile requests reached the upstream"
    );
    let mut names: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["cache", "sentinel"]);
    assert_eq!(std::fs::read(&sentinel).unwrap(), b"keep");
    drop(svc);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_cold_copies_fetch_each_blob_once() {
    let up = Registry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.6", &[4 * MIB, MIB], 5).await;
    let cache = tempfile::tempdir().unwrap();
    let svc = service(&up, cache.path(), &[]);
    let out = tempfile::tempdir().unwrap();
    let host = svc.host();
    let mut handles = Vec::new();
    for i in 0..8 {
        let dest = out.path().join(format!("c{i}"));
        let host = host.clone();
        handles.push(std::thread::spawn(move || {
            skopeo_copy_ok(&host, &repo(), "v1.13.6", &dest, &format!("copy {i}"));
            dest
        }));
    }
    let dests: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for d in &dests[1..] {
        assert_same_dir(&dests[0], d);
    }
    for b in &img.blobs {
        let n = up.count_gets(&format!("/blobs/{}", b.digest));
        assert_eq!(n, 1, "blob {} fetched {n} times from upstream", b.digest);
    }
    for (_, _, d) in &img.manifests {
        assert_eq!(up.count_gets(&format!("/manifests/{d}")), 1, "manifest {d}");
    }
    // The tag too: eight cold lookups of it, one upstream GET (the others
    // waited for it in the one table of keys in flight, `cache::revalidate`).
    assert_eq!(up.count_gets("/manifests/v1.13.6"), 1, "the tag's manifest");
    // The metrics agree: one blob fill per blob, the rest joined or hit.
    let m = reqwest::get(format!("{}/metrics", svc.url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let want = format!(
        "talos_gen_upstream_fetches_total{{kind=\"blob\",result=\"ok\"}} {}",
        img.blobs.len()
    );
    assert!(m.contains(&want), "{want} not in:\n{m}");
    assert!(
        m.contains("talos_gen_cache_misses_total{kind=\"blob\"}"),
        "{m}"
    );
    assert!(
        m.contains("talos_gen_upstream_fetches_total{kind=\"manifest\",result=\"ok\"} 3"),
        "{m}"
    );
}

/// Flip one byte of the object docker-registry keeps for `digest` (same
/// length), so the real upstream serves bytes that do not match their digest.
fn corrupt_upstream_object(up: &Registry, digest: &str) {
    let hex = digest.trim_start_matches("sha256:");
    let p = up
        .storage()
        .join("docker/registry/v2/blobs/sha256")
        .join(&hex[..2])
        .join(hex)
        .join("data");
    support::flip_middle_byte(&p, 0x20);
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupted_upstream_bytes_are_never_served_whole_or_stored() {
    let up = Registry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.6", &[2 * MIB], 6).await;
    let layer = img.blobs[0].clone();
    let (_, _, mdigest) = img.manifests[1].clone();
    corrupt_upstream_object(&up, &layer.digest);
    corrupt_upstream_object(&up, &mdigest);
    let cache = tempfile::tempdir().unwrap();
    let svc = service(&up, cache.path(), &[]);
    let http = reqwest::Client::new();
    for _ in 0..2 {
        let r = http
            .get(format!(
                "{}/v2/{}/blobs/{}",
                svc.url(),
                repo(),
                layer.digest
            ))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            // Headers may already be out; the body must then end early.
            let body = r.bytes().await;
            assert!(body.is_err() || body.unwrap().len() < layer.data.len());
        } else {
            assert!(r.status().is_server_error(), "{}", r.status());
        }
        let r = send(http.get(installer_url(&svc, &format!("manifests/{mdigest}")))).await;
        assert_eq!(r.status, 502);
    }
    let objects = cache.path().join("objects/sha256");
    for d in [&layer.digest, &mdigest] {
        assert!(
            !objects.join(d.trim_start_matches("sha256:")).exists(),
            "{d} stored"
        );
    }
    // Each attempt went upstream again (nothing bad was cached).
    assert_eq!(up.count_gets(&format!("/blobs/{}", layer.digest)), 2);
}

/// A stored blob whose first block rotted on disk: nothing of it goes out
/// (no head); the copy is dropped and the blob answered from the upstream
/// again, whole and right (containerd sees a plain 200).
#[tokio::test(flavor = "multi_thread")]
async fn a_stored_blob_rotten_at_its_start_is_fetched_again() {
    let up = Registry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.6", &[2 * MIB], 8).await;
    let layer = img.blobs[0].clone();
    let cache = tempfile::tempdir().unwrap();
    let svc = service(&up, cache.path(), &[]);
    let http = reqwest::Client::new();
    let url = format!("{}/v2/{}/blobs/{}", svc.url(), repo(), layer.digest);
    let r = send(http.get(&url)).await;
    assert_eq!(r.status, 200);
    let stored = cache
        .path()
        .join("objects/sha256")
        .join(layer.digest.trim_start_matches("sha256:"));
    // The object and the blob's own entry (the index write follows the
    // object's; a byte flipped before it would rot the fill's file under
    // its readers, another test).
    let hex = layer.digest.trim_start_matches("sha256:").to_string();
    support::eventually("the commit", std::time::Duration::from_secs(10), || {
        stored.exists()
            && std::fs::read_dir(cache.path().join("index")).is_ok_and(|d| {
                d.filter_map(|e| e.ok())
                    .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(&hex)))
            })
    });
    support::flip_byte(&stored, 100, 0x20);
    let r = send(http.get(&url)).await;
    assert_eq!(r.status, 200, "{}", svc.log_text());
    assert!(r.body[..] == layer.data[..], "the blob, fetched again");
    assert_eq!(up.count_gets(&format!("/blobs/{}", layer.digest)), 2);
    assert!(svc.log_text().contains("corrupt object in the store"));
}

#[tokio::test(flavor = "multi_thread")]
async fn moving_tags_are_revalidated_and_offline_serves_the_store() {
    let up = Registry::start();
    let a = push_factory_image(&up.url(), &repo(), "latest", &[MIB], 7).await;
    let cache = tempfile::tempdir().unwrap();
    let mut svc = service(&up, cache.path(), &["--tag-revalidate", "2"]);
    let http = reqwest::Client::new();
    let head = |url: String| {
        let http = http.clone();
        async move {
            let r = send(http.head(url).header("accept", ACCEPT_ALL)).await;
            assert_eq!(r.status, 200);
            r.headers["docker-content-digest"]
                .to_str()
                .unwrap()
                .to_string()
        }
    };
    let url = installer_url(&svc, "manifests/latest");
    assert_eq!(head(url.clone()).await, a.index_digest);
    // `latest` moves upstream: the old mapping holds within the interval,
    // the new one is served after it.
    let b = push_factory_image(&up.url(), &repo(), "latest", &[MIB], 8).await;
    assert_ne!(a.index_digest, b.index_digest);
    assert_eq!(head(url.clone()).await, a.index_digest);
    // The sleep is the point: the `--tag-revalidate 2` interval passes.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert_eq!(head(url.clone()).await, b.index_digest);
    let out = tempfile::tempdir().unwrap();
    let first = out.path().join("first");
    skopeo_copy_ok(&svc.host(), &repo(), "latest", &first, "first");
    // A fill hands out its last byte once verified, then commits durably:
    // wait for the commits before killing the service.
    let index = cache.path().join("index");
    let committed = |d: &str| {
        let key = format!("oci/blob/{d}");
        let name = format!("{}.json", &sha256_digest(key.as_bytes())["sha256:".len()..]);
        index.join(name).exists()
    };
    support::eventually(
        "the blobs' commits",
        std::time::Duration::from_secs(10),
        || b.blobs.iter().all(|x| committed(&x.digest)),
    );
    svc.stop();

    // `serve --offline` on the same cache dir answers it all, no upstream.
    let gets = up.count_gets("/v2/");
    let svc = service(&up, cache.path(), &["--offline"]);
    let again = out.path().join("again");
    skopeo_copy_ok(&svc.host(), &repo(), "latest", &again, "offline");
    assert_same_dir(&first, &again);
    let r = send(http.get(installer_url(&svc, "manifests/v0.0.0"))).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        up.count_gets("/v2/"),
        gets,
        "--offline contacted the upstream"
    );
}

/// A referrers index the upstream answers in pages (`Link: <...>;
/// rel="next"`, absolute and relative, as Harbor and zot paginate): followed
/// to its last page, merged, filtered and kept whole. A next link off the
/// upstream's origin is an error (502), and nothing partial is answered or
/// kept. nginx plays the paginating registry (docker-registry 2.8 has no
/// referrers API).
#[tokio::test(flavor = "multi_thread")]
async fn a_paginated_referrers_index_is_followed_to_its_end() {
    const SBOM: &str = "application/spdx+json";
    const SIG: &str = "application/vnd.dev.cosign.artifact.sig.v1+json";
    let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let desc = |c: char, t: &str| {
        serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(c), "size": 100, "artifactType": t,
        })
    };
    let page = |m: Vec<serde_json::Value>| {
        serde_json::json!({"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": m}).to_string()
    };
    let (paged, off, circle) = (digest('1'), digest('2'), digest('3'));
    let path = |d: &str| format!("/v2/a/b/referrers/{d}");
    let root = tempfile::tempdir().unwrap();
    let front = support::Nginx::start(
        root.path(),
        support::NginxOpts {
            server_extra: format!(
                "location = {p} {{ default_type {INDEX_TYPE};
      if ($arg_last = \"\") {{ add_header Link '<{p}?n=2&last=b>; rel=\"next\"' always; return 200 '{p1}'; }}
      if ($arg_last = \"b\") {{ add_header Link '<?n=2&last=c>; rel=\"next\"' always; return 200 '{p2}'; }}
      return 200 '{p3}'; }}
    location = {o} {{ default_type {INDEX_TYPE};
      add_header Link '<http://127.0.0.1:9/v2/a/b/referrers/{off}?last=x>; rel=\"next\"' always; return 200 '{p1}'; }}
    location = {c} {{ default_type {INDEX_TYPE};
      add_header Link '<{c}>; rel=\"next\"' always; return 200 '{p1}'; }}",
                p = path(&paged),
                o = path(&off),
                c = path(&circle),
                p1 = page(vec![desc('a', SBOM), desc('b', SIG)]),
                p2 = page(vec![desc('c', SBOM)]),
                p3 = page(vec![desc('d', SIG)]),
            ),
            ..Default::default()
        },
    );
    let cache = tempfile::tempdir().unwrap();
    let start = |extra: &[&str]| {
        Service::builder()
            .arg("--cache-dir")
            .arg(cache.path())
            .args([
                "--mirror-upstream",
                &format!("registry.test={}", front.url()),
            ])
            .args(extra)
            .start()
    };
    let digests = |body: &[u8]| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(body).expect("an index");
        v["manifests"]
            .as_array()
            .expect("manifests")
            .iter()
            .map(|m| m["digest"].as_str().unwrap().to_string())
            .collect()
    };
    let http = reqwest::Client::new();
    let url =
        |svc: &Service, d: &str, q: &str| format!("{}{}?ns=registry.test{q}", svc.url(), path(d));

    let svc = start(&[]);
    let r = send(http.get(url(&svc, &paged, ""))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], INDEX_TYPE);
    assert_eq!(
        digests(&r.body),
        [digest('a'), digest('b'), digest('c'), digest('d')],
        "every page, in order"
    );
    assert_eq!(
        front.count(&format!("GET {}", path(&paged))),
        3,
        "three pages"
    );
    let r = send(http.get(url(&svc, &paged, &format!("&artifactType={SBOM}")))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["oci-filters-applied"], "artifactType");
    assert_eq!(digests(&r.body), [digest('a'), digest('c')]);
    // A next page on another origin: refused, never followed.
    let (status, code) = oci_error(&http, &url(&svc, &off, "")).await;
    assert_eq!((status, code.as_str()), (502, "UNAVAILABLE"));
    let r = send(http.get(url(&svc, &off, ""))).await;
    let msg = String::from_utf8_lossy(&r.body);
    assert!(msg.contains("another origin"), "{msg}");
    // A next page that is the page itself: read once, then refused.
    let r = send(http.get(url(&svc, &circle, ""))).await;
    assert_eq!(r.status, 502);
    let msg = String::from_utf8_lossy(&r.body);
    assert!(msg.contains("was read already"), "{msg}");
    assert_eq!(front.count(&format!("GET {}", path(&circle))), 1);
    drop(svc);

    // Offline: the merged index as kept; nothing kept of the refused one.
    let svc = start(&["--offline"]);
    let r = send(http.get(url(&svc, &paged, ""))).await;
    assert_eq!(r.status, 200);
    assert_eq!(digests(&r.body).len(), 4, "kept whole");
    for d in [&off, &circle] {
        let r = send(http.get(url(&svc, d, ""))).await;
        assert_eq!(r.status, 200);
        assert!(digests(&r.body).is_empty(), "{d}: nothing partial kept");
    }
}

/// The `cache` fields of the access lines whose path holds `needle`.
fn logged_cache(svc: &Service, needle: &str) -> Vec<String> {
    svc.log_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| {
            v["target"] == "access"
                && v["fields"]["path"]
                    .as_str()
                    .is_some_and(|p| p.contains(needle))
        })
        .map(|v| v["fields"]["cache"].as_str().unwrap_or("-").to_string())
        .collect()
}

/// `Cache-Status` (RFC 9211) on `/v2/` answers, and the access log's
/// `cache` field: a first pull through the service fetches (manifests
/// kept before they answer: `fwd=miss; stored`; blobs streamed from their
/// fill: `fwd=miss`), a second pull is all hits, a tag list passed on from
/// the upstream is a miss, and with the upstream gone a tag past its
/// revalidation is answered stale (`fwd=stale`, with its `Warning`).
#[tokio::test(flavor = "multi_thread")]
async fn cache_status_on_a_pull_hit_miss_and_stale() {
    let mut up = Registry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.6", &[MIB, 300_000], 1).await;
    let cache = tempfile::tempdir().unwrap();
    let svc = service(
        &up,
        cache.path(),
        &["--tag-revalidate", "1", "--log-format", "json"],
    );
    let out = tempfile::tempdir().unwrap();
    skopeo_copy_ok(
        &svc.host(),
        &repo(),
        "v1.13.6",
        &out.path().join("a"),
        "first pull",
    );
    let tag_path = "/manifests/v1.13.6";
    let first_tag = logged_cache(&svc, tag_path);
    assert_eq!(first_tag[0], "talos-gen; fwd=miss; stored", "{first_tag:?}");
    let blob = &img.blobs[0];
    let blob_lines = logged_cache(&svc, &format!("/blobs/{}", blob.digest));
    assert_eq!(
        blob_lines,
        ["talos-gen; fwd=miss"],
        "one GET, from its fill"
    );

    let http = reqwest::Client::new();
    let burl = installer_url(&svc, &format!("blobs/{}", blob.digest));
    for r in [send(http.head(&burl)).await, send(http.get(&burl)).await] {
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["cache-status"], "talos-gen; hit");
    }
    let (_, _, mdigest) = &img.manifests[0];
    let r = send(
        http.get(installer_url(&svc, &format!("manifests/{mdigest}")))
            .header("accept", ACCEPT_ALL),
    )
    .await;
    assert_eq!(r.headers["cache-status"], "talos-gen; hit");
    let r = send(http.get(installer_url(&svc, "tags/list"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers["cache-status"], "talos-gen; fwd=miss; stored",
        "the upstream's whole list, kept"
    );
    // Asked again, the same list: the upstream confirmed the kept one.
    let r = send(http.get(installer_url(&svc, "tags/list"))).await;
    assert_eq!(r.headers["cache-status"], "talos-gen; fwd=revalidated");
    // No lookup behind it: never went upstream, so no fwd.
    let r = send(http.get(format!("{}/v2/", svc.url()))).await;
    assert_eq!(r.headers["cache-status"], "talos-gen");

    // The upstream gone: the tag, once past --tag-revalidate 1, is stale.
    up.stop();
    let turl = installer_url(&svc, "manifests/v1.13.6");
    let r = crate::support::wait::eventually_some(
        "the tag answered stale",
        std::time::Duration::from_secs(15),
        || {
            let r = std::process::Command::new("curl")
                .args(["-sS", "-o", "/dev/null", "-D", "-", "-H"])
                .arg(format!("accept: {ACCEPT_ALL}"))
                .arg(&turl)
                .output()
                .unwrap();
            let head = String::from_utf8_lossy(&r.stdout).to_ascii_lowercase();
            if head.contains("cache-status: talos-gen; fwd=stale") {
                Ok(head)
            } else {
                Err(head)
            }
        },
    );
    assert!(r.contains("warning: 110"), "{r}");
    let r = send(http.get(installer_url(&svc, "tags/list"))).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["cache-status"], "talos-gen; fwd=stale");
    let tag_lines = logged_cache(&svc, tag_path);
    assert!(
        tag_lines.iter().any(|c| c == "talos-gen; fwd=stale"),
        "{tag_lines:?}"
    );
}

/// Manifests ask the conditionals blobs ask (RFC 9110 13.2.2: `If-Match`,
/// then `If-None-Match`), GET and HEAD, by tag and by digest: the digest is
/// the entity tag. A 304 or 412 carries the validators and no body.
/// Without `Last-Modified` the date conditionals are ignored, as a blob's.
#[tokio::test(flavor = "multi_thread")]
async fn manifests_answer_304_and_412_as_blobs_do() {
    let up = Registry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.7", &[MIB], 9).await;
    let cache = tempfile::tempdir().unwrap();
    let svc = service(&up, cache.path(), &[]);
    let http = reqwest::Client::new();
    let etag = format!("\"{}\"", img.index_digest);
    let old_date = "Sat, 01 Jan 2000 00:00:00 GMT";
    for path in [
        "manifests/v1.13.7".to_string(),
        format!("manifests/{}", img.index_digest),
    ] {
        let url = installer_url(&svc, &path);
        let r = send(http.get(&url).header("accept", ACCEPT_ALL)).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["etag"], etag.as_str());
        for (h, v, want) in [
            ("if-none-match", etag.as_str(), 304),
            ("if-none-match", "*", 304),
            ("if-none-match", "\"nope\"", 200),
            ("if-match", "\"nope\"", 412),
            ("if-match", etag.as_str(), 200),
            ("if-match", "*", 200),
            ("if-modified-since", "Fri, 01 Jan 2100 00:00:00 GMT", 200),
            ("if-unmodified-since", old_date, 200),
        ] {
            for head in [false, true] {
                let req = if head {
                    http.head(&url)
                } else {
                    http.get(&url)
                };
                let r = send(req.header("accept", ACCEPT_ALL).header(h, v)).await;
                let m = if head { "HEAD" } else { "GET" };
                assert_eq!(r.status, want, "{m} {path} {h}: {v}");
                assert_eq!(r.headers["etag"], etag.as_str(), "{m} {path} {h}: {v}");
                assert_eq!(
                    r.headers["docker-content-digest"],
                    img.index_digest.as_str(),
                    "{m} {path} {h}: {v}"
                );
                if want == 200 && !head {
                    assert_eq!(r.body, img.index.as_slice(), "{m} {path} {h}: {v}");
                } else {
                    assert!(r.body.is_empty(), "{m} {path} {h}: {v}");
                }
            }
        }
        // If-Match fails first (412), whatever If-None-Match says.
        let r = send(
            http.get(&url)
                .header("accept", ACCEPT_ALL)
                .header("if-match", "\"nope\"")
                .header("if-none-match", etag.as_str()),
        )
        .await;
        assert_eq!(r.status, 412);
    }
}

/// Issue 50 item 15: a client that accepts only Docker v2 single-platform
/// manifests is never sent an index: 404 `MANIFEST_UNKNOWN`, as
/// distribution answers (a GET and a HEAD alike); the platform manifests
/// are served to it, and the index to a client that names its type, asks
/// `*/*`, or sends no Accept. A HEAD refused carries its GET's head.
#[tokio::test(flavor = "multi_thread")]
async fn an_index_goes_only_to_a_client_that_accepts_one() {
    let up = Registry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.8", &[MIB], 11).await;
    let cache = tempfile::tempdir().unwrap();
    let svc = service(&up, cache.path(), &[]);
    let http = reqwest::Client::new();
    let url = installer_url(&svc, "manifests/v1.13.8");
    for head in [false, true] {
        let req = if head {
            http.head(&url)
        } else {
            http.get(&url)
        };
        let r = send(req.header("accept", DOCKER_MANIFEST)).await;
        assert_eq!(r.status, 404, "head={head}");
        if !head {
            let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(j["errors"][0]["code"], "MANIFEST_UNKNOWN", "{j}");
            assert!(
                j["errors"][0]["message"]
                    .as_str()
                    .unwrap()
                    .contains("is an index"),
                "{j}"
            );
            let h = send(http.head(&url).header("accept", DOCKER_MANIFEST)).await;
            assert_eq!(
                h.headers["content-length"],
                r.body.len().to_string().as_str()
            );
        }
    }
    for accept in [Some(ACCEPT_ALL), Some("*/*"), Some(INDEX_TYPE), None] {
        let mut req = http.get(&url);
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let r = send(req).await;
        assert_eq!(r.status, 200, "{accept:?}");
        assert_eq!(r.body, img.index.as_slice(), "{accept:?}");
    }
    for (_, bytes, digest) in &img.manifests {
        let r = send(
            http.get(installer_url(&svc, &format!("manifests/{digest}")))
                .header("accept", DOCKER_MANIFEST),
        )
        .await;
        assert_eq!(r.status, 200, "{digest}");
        assert_eq!(&r.body, bytes, "{digest}");
    }
}
