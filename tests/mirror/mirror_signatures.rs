//! `mirror sync --cosign-key`: against a real docker-registry on loopback,
//! an image signed with the key is mirrored with its signature (pinned, and
//! exported with `--config`), one signed with another key and one without a
//! signature fail by name, and nothing of them is pinned.

use crate::support;

use crate::support::registry::*;
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, SigningKey};

#[tokio::test(flavor = "multi_thread")]
async fn signatures_are_verified_before_mirroring() {
    let mut up = Registry::start();
    let good_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let other_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let good = push_factory_image(&up.url(), "siderolabs/kubelet", "v1.35.6", &[4096], 41).await;
    let forged = push_factory_image(&up.url(), "siderolabs/forged", "v1", &[4096], 42).await;
    let unsigned = push_factory_image(&up.url(), "siderolabs/unsigned", "v1", &[4096], 43).await;
    let sig_tag = push_cosign_signature(
        &up.url(),
        "siderolabs/kubelet",
        "ghcr.io/siderolabs/kubelet",
        &good.index_digest,
        |p| good_key.sign(p).unwrap(),
    )
    .await;
    push_cosign_signature(
        &up.url(),
        "siderolabs/forged",
        "ghcr.io/siderolabs/forged",
        &forged.index_digest,
        |p| other_key.sign(p).unwrap(),
    )
    .await;

    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg_text = "extraImages: [ghcr.io/siderolabs/kubelet:v1.35.6, ghcr.io/siderolabs/forged:v1, ghcr.io/siderolabs/unsigned:v1]\n";
    let mut cfg = talos_gen::mirror::Config::parse(cfg_text, dir.path(), "cfg").unwrap();
    cfg.cosign_keys.push(
        talos_gen::cosign::PublicKey::from_pem(&good_key.public_key_pem(), "--cosign-key good.pub")
            .unwrap(),
    );
    let opts = support::registry::sync_options(&up, 2);
    let report = talos_gen::mirror::sync(&cfg, cache.path(), &opts)
        .await
        .unwrap();
    let failed: Vec<(String, String)> = report
        .failed()
        .iter()
        .map(|f| (f.name.clone(), f.error.clone().unwrap_or_default()))
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    let why = |name: &str| {
        failed
            .iter()
            .find(|(n, _)| n.contains(name))
            .map(|(_, e)| e.clone())
            .unwrap_or_else(|| panic!("{name} did not fail: {failed:?}"))
    };
    assert!(
        why("forged").contains("does not verify with --cosign-key good.pub"),
        "{}",
        why("forged")
    );
    assert!(
        why("unsigned").contains("no cosign signature"),
        "{}",
        why("unsigned")
    );

    let store = talos_gen::store::Store::open(cache.path(), None).unwrap();
    let entries = store.entries();
    let pinned = |d: &str| {
        let hex = d.trim_start_matches("sha256:");
        entries.iter().any(|e| e.digest == hex && e.pinned)
    };
    // The signed image and its signature are pinned...
    assert!(pinned(&good.index_digest));
    for b in &good.blobs {
        assert!(pinned(&b.digest));
    }
    assert!(
        entries.iter().any(|e| e
            .key
            .as_str()
            .ends_with(&format!("siderolabs/kubelet:{sig_tag}"))
            && e.pinned),
        "signature tag not pinned"
    );
    // ...nothing of the refused ones is.
    for img in [&forged, &unsigned] {
        assert!(!pinned(&img.index_digest), "{} pinned", img.repo);
        for b in &img.blobs {
            assert!(!pinned(&b.digest), "{} blob pinned", img.repo);
        }
    }
    drop(store);

    // The export of the good item carries its signature.
    let only_good = talos_gen::mirror::Config::parse(
        "extraImages: [ghcr.io/siderolabs/kubelet:v1.35.6]\n",
        dir.path(),
        "cfg",
    )
    .unwrap();
    let (keys, missing) = talos_gen::mirror::reachable_keys(
        &talos_gen::store::Store::open(cache.path(), None).unwrap(),
        &only_good,
    );
    assert!(missing.is_empty(), "{missing:?}");
    assert!(
        keys.iter().any(|k| k.as_str().ends_with(&sig_tag)),
        "{keys:?}"
    );

    // Without keys the same config mirrors all three (signatures are only
    // fetched for workers: entries then).
    let plain = talos_gen::mirror::Config::parse(cfg_text, dir.path(), "cfg").unwrap();
    let report = talos_gen::mirror::sync(&plain, cache.path(), &opts)
        .await
        .unwrap();
    assert!(report.failed().is_empty(), "{}", report.summary());
    up.stop();
}
