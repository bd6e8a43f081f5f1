//! The registry side of the mirror job: `mirror::sync` puts an installer
//! (every platform of its index) and an extra image into the store, pinned,
//! also what the proxy had already stored unpinned; then `serve --offline` on that cache dir, with no upstream and no
//! `--mirror-upstream`, answers skopeo and containerd-style `?ns=` requests.

use crate::support::registry::*;
use crate::support::{Service, send, sha256_digest};
use talos_gen::registry::{Reference, UpstreamId};

const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

/// `mirror sync` of the config `text` into `cache`, every item synced.
async fn mirror(text: &str, cache: &std::path::Path, up: &Registry) -> talos_gen::mirror::Config {
    let cfg = talos_gen::mirror::Config::parse(text, cache, "test config").unwrap();
    let report = talos_gen::mirror::sync(&cfg, cache, &sync_options(up, 4))
        .await
        .unwrap();
    assert!(report.failed().is_empty(), "{}", report.summary());
    cfg
}

/// Whether the store at `cache` holds `digest` (`sha256:<hex>`) under a
/// pinned key.
fn pinned_in(cache: &std::path::Path) -> impl Fn(&str) -> bool {
    let entries = talos_gen::store::Store::open(cache, None)
        .unwrap()
        .entries();
    move |d: &str| {
        let hex = d.trim_start_matches("sha256:");
        entries.iter().any(|e| e.digest == hex && e.pinned)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mirrored_images_are_pinned_and_served_offline() {
    let mut up = Registry::start();
    let repo = format!("installer/{SCHEMATIC}");
    let installer = push_factory_image(&up.url(), &repo, "v1.13.6", &[2 << 20, 1 << 20], 31).await;
    let kubelet =
        push_factory_image(&up.url(), "siderolabs/kubelet", "v1.35.6", &[1 << 20], 32).await;
    let cache = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();

    let direct = out.path().join("direct");
    skopeo_copy_ok(&up.host(), &repo, "v1.13.6", &direct, "direct");
    {
        let reg = talos_gen::compose::Service::build(&talos_gen::compose::ServiceConfig {
            factory_url: up.url(),
            mirror_upstreams: talos_gen::registry::MirrorTable::parse(&[format!(
                "ghcr.io={}",
                up.url()
            )])
            .unwrap(),
            ..talos_gen::compose::ServiceConfig::new(cache.path())
        })
        .await
        .unwrap()
        .registry;
        // Some of it was served (unpinned) before the mirror ran.
        let first_layer = talos_gen::registry::Digest::parse(&installer.blobs[0].digest).unwrap();
        reg.blob(&UpstreamId::Installer, &repo, &first_layer)
            .await
            .unwrap()
            .complete()
            .await
            .unwrap();
        let child = talos_gen::registry::Digest::parse(&installer.manifests[0].2).unwrap();
        reg.manifest(&UpstreamId::Installer, &repo, &Reference::Digest(child))
            .await
            .unwrap();
    }
    // The mirror job, as a library call: the installer (every platform of
    // its index) and an extra image through its `--mirror-upstream`.
    let cfg = mirror(
        &format!(
            "schematics: [{SCHEMATIC}]\ntalosVersions: [v1.13.6]\ninstallers: [installer]\n\
             extraImages: [ghcr.io/siderolabs/kubelet:v1.35.6]\n"
        ),
        cache.path(),
        &up,
    )
    .await;
    {
        // Every object is named by a pinned key, also those stored
        // (unpinned) before the mirror ran.
        let pinned = pinned_in(cache.path());
        for b in installer.blobs.iter().chain(kubelet.blobs.iter()) {
            assert!(pinned(&b.digest), "blob {} not pinned", b.digest);
        }
        for (_, _, d) in installer.manifests.iter().chain(kubelet.manifests.iter()) {
            assert!(pinned(d), "manifest {d} not pinned");
        }
        assert!(pinned(&installer.index_digest) && pinned(&kubelet.index_digest));
    }
    // Idempotent: a second run fetches no blob again.
    let before = up.count_gets("/blobs/");
    let again = talos_gen::mirror::sync(&cfg, cache.path(), &sync_options(&up, 4))
        .await
        .unwrap();
    assert!(again.failed().is_empty(), "{}", again.summary());
    assert_eq!(again.items.iter().map(|i| i.fetched).sum::<usize>(), 0);
    assert_eq!(up.count_gets("/blobs/"), before);
    up.stop();
    // A 1-byte size limit evicts everything that is not pinned, nothing mirrored.
    {
        let store = talos_gen::store::Store::open(cache.path(), Some(1)).unwrap();
        store.evict(None);
    }

    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("--offline")
        .start();
    let via = out.path().join("offline");
    skopeo_copy_ok(&svc.host(), &repo, "v1.13.6", &via, "offline copy");
    assert_eq!(dir_contents(&direct), dir_contents(&via));
    let http = reqwest::Client::new();
    let r = send(http.get(format!(
        "{}/v2/siderolabs/kubelet/manifests/v1.35.6?ns=ghcr.io",
        svc.url()
    )))
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, kubelet.index.as_slice());
    // Issue 20 item 7: a host name is case-insensitive (`?ns=GHCR.IO` was 403).
    for ns in ["GHCR.IO", "GhCr.Io"] {
        let r = send(http.get(format!(
            "{}/v2/siderolabs/kubelet/manifests/v1.35.6?ns={ns}",
            svc.url()
        )))
        .await;
        assert_eq!(r.status, 200, "ns={ns}");
        assert_eq!(r.body, kubelet.index.as_slice(), "ns={ns}");
    }
    for b in &kubelet.blobs {
        assert_ns_blob(&http, &svc.url(), "siderolabs/kubelet", "ghcr.io", b).await;
    }
    // Offline, something never mirrored is simply unknown.
    let r = send(http.get(format!(
        "{}/v2/library/nginx/manifests/latest?ns=docker.io",
        svc.url()
    )))
    .await;
    assert_eq!(r.status, 404);
}

/// A foreign layer (a descriptor with `urls`) is left to its URLs, as
/// containerd and skopeo treat it: the upstream does not have it, and
/// `mirror sync` and `mirror export --config` still carry the rest of the
/// image, without ever asking the upstream for that blob.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_layer_is_left_to_its_urls() {
    const FOREIGN: &str = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
    // distribution accepts foreign-layer URLs only when allowed.
    let up = Registry::start_custom(
        None,
        "validation:\n  manifests:\n    urls:\n      allow:\n        - ^https://\n",
    );
    let repo = "windows/app";
    let client = reqwest::Client::new();
    let layer = b"a distributable layer".to_vec();
    let layer_digest = push_blob(&client, &up.url(), repo, &layer).await;
    // Never pushed: only its URL would have it.
    let foreign = b"a foreign base layer".to_vec();
    let foreign_digest = sha256_digest(&foreign);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [foreign_digest, layer_digest]}
    }))
    .unwrap();
    let config_digest = push_blob(&client, &up.url(), repo, &config).await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG, "size": config.len(), "digest": config_digest},
        "layers": [
            {"mediaType": FOREIGN, "size": foreign.len(), "digest": foreign_digest,
             "urls": [format!("https://foreign.invalid/blobs/{foreign_digest}")]},
            {"mediaType": DOCKER_LAYER, "size": layer.len(), "digest": layer_digest},
        ],
    }))
    .unwrap();
    let manifest_digest = sha256_digest(&manifest);
    push_manifest(&client, &up.url(), repo, "v1", DOCKER_MANIFEST, &manifest).await;

    let cache = tempfile::tempdir().unwrap();
    let cfg = mirror("extraImages: [ghcr.io/windows/app:v1]\n", cache.path(), &up).await;
    assert_eq!(
        up.count_gets(&foreign_digest),
        0,
        "the foreign layer was asked for"
    );
    let pinned = pinned_in(cache.path());
    for d in [&manifest_digest, &config_digest, &layer_digest] {
        assert!(pinned(d), "{d} not pinned");
    }
    let hex = foreign_digest.trim_start_matches("sha256:");
    let entries = talos_gen::store::Store::open(cache.path(), None)
        .unwrap()
        .entries();
    assert!(!entries.iter().any(|e| e.digest == hex));
    // The export walks the same way: nothing is missing.
    let out = tempfile::tempdir().unwrap();
    let tar = out.path().join("mirror.tar");
    let exported = talos_gen::mirror::export(cache.path(), &tar, Some(&cfg)).unwrap();
    // The tag, the manifest, the config and the one layer stored, and the
    // referrers index (empty: docker-registry has no referrers API).
    assert_eq!((exported.keys, exported.objects), (5, 4), "{exported:?}");
    assert!(tar.is_file());
}
