//! The factory's source image proxy (Image Factory 1.5): `talosctl image
//! cache-create` and the imager pull `<factory>/siderolabs/imager:<v>`
//! and its siblings with no `?ns=`. A docker-registry on loopback stands in
//! for ghcr.io (`--mirror-upstream ghcr.io=...`); skopeo and containerd
//! (`ctr --plain-http`, no mirror, the service's own host in the
//! reference) pull through `serve`, online, with the upstream gone
//! (stale answers, `Warning: 110`, counted), and `--offline` over the same
//! store with no `--mirror-upstream`. Other `siderolabs/` names stay refused.

use crate::support;

use crate::support::containerd::Containerd;
use crate::support::registry::*;
use crate::support::{Service, send};

const V: &str = "v1.13.6";
const STALE: &str = "110 - \"stale\"";

/// `ctr content fetch --plain-http --all-platforms <reference>` (the
/// service as the registry itself, so containerd sends no `ns`).
fn ctr_fetch(cd: &Containerd, reference: &str) {
    cd.fetch(&["--plain-http", "--all-platforms"], reference);
}

fn stale_count(metrics: &str, kind: &str) -> u64 {
    let prefix = format!("talos_gen_stale_answers_total{{kind=\"{kind}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn source_images_through_the_service_online_stale_and_offline() {
    let work = tempfile::tempdir().unwrap();
    let mut up = Registry::start();
    let imager = push_factory_image(&up.url(), "siderolabs/imager", V, &[1 << 20], 41).await;
    let base = push_factory_image(
        &up.url(),
        "siderolabs/installer-base",
        V,
        &[512 << 10, 64 << 10],
        42,
    )
    .await;
    let sig = push_cosign_signature(
        &up.url(),
        "siderolabs/imager",
        &format!("ghcr.io/siderolabs/imager:{V}"),
        &imager.index_digest,
        |p| support::sha256_hex(p).into_bytes(),
    )
    .await;
    // Not a source image: refused without ?ns= although ghcr.io has it.
    push_factory_image(&up.url(), "siderolabs/kubelet", "v1.35.6", &[4096], 43).await;

    let cache = work.path().join("cache");
    let mut svc = Service::builder()
        .arg("--cache-dir")
        .arg(&cache)
        .args(["--mirror-upstream", &format!("ghcr.io={}", up.url())])
        // Every tag asked again, so a failing upstream shows at once.
        .args(["--tag-revalidate", "0"])
        .start();
    let http = reqwest::Client::new();
    let v2 = |path: &str| format!("{}/v2/{path}", svc.url());

    // Online: skopeo and containerd, with the service's own host.
    for img in [&imager, &base] {
        let dest = work
            .path()
            .join(format!("online-{}", img.repo.replace('/', "_")));
        let files = skopeo_copy_ok(&svc.host(), &img.repo, V, &dest, "online");
        img.assert_copied(&files, "online");
    }
    let cd_dir = work.path().join("cd-online");
    std::fs::create_dir_all(&cd_dir).unwrap();
    if let Some(cd) = Containerd::start(&cd_dir) {
        let r = format!("{}/siderolabs/imager:{V}", svc.host());
        ctr_fetch(&cd, &r);
        cd.assert_holds(&r, &imager);
    }
    // Manifests, tags and referrers, fresh: no Warning.
    let m = send(http.get(v2(&format!("siderolabs/imager/manifests/{V}")))).await;
    assert_eq!(m.status, 200);
    assert_eq!(m.body, imager.index);
    assert!(m.headers.get("warning").is_none(), "{:?}", m.headers);
    let h = send(http.head(v2(&format!("siderolabs/imager/manifests/{V}")))).await;
    assert_eq!(h.header("docker-content-digest"), imager.index_digest);
    let t = send(http.get(v2("siderolabs/imager/tags/list"))).await;
    assert_eq!(t.status, 200, "{}", t.text());
    let tags = t.json()["tags"].clone();
    assert!(tags.as_array().unwrap().contains(&V.into()), "{tags}");
    assert!(
        tags.as_array().unwrap().contains(&sig.clone().into()),
        "{tags}"
    );
    assert!(t.headers.get("warning").is_none());
    let s = send(http.get(v2(&format!("siderolabs/imager/manifests/{sig}")))).await;
    assert_eq!(s.status, 200, "the signature: {}", s.text());
    let r = send(http.get(v2(&format!(
        "siderolabs/imager/referrers/{}",
        imager.index_digest
    ))))
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.headers.get("warning").is_none());
    // Other siderolabs/ names without ?ns= are refused as before.
    for repo in [
        "siderolabs/kubelet",
        "siderolabs/talosctl",
        "siderolabs/imager/x",
    ] {
        let d = send(http.get(v2(&format!("{repo}/manifests/v1.35.6")))).await;
        assert_eq!(d.status, 403, "{repo}: {}", d.text());
        assert!(d.text().contains("DENIED"), "{}", d.text());
    }
    let metrics = send(http.get(format!("{}/metrics", svc.url())))
        .await
        .text();
    assert_eq!(stale_count(&metrics, "manifest"), 0);
    assert_eq!(stale_count(&metrics, "tags"), 0);

    // The upstream gone: the stored tag answers, and says it is stale.
    up.stop();
    let m = send(http.get(v2(&format!("siderolabs/imager/manifests/{V}")))).await;
    assert_eq!(m.status, 200, "{}", m.text());
    assert_eq!(m.body, imager.index);
    assert_eq!(m.header("warning"), STALE);
    let t = send(http.get(v2("siderolabs/imager/tags/list"))).await;
    assert_eq!(t.status, 200, "{}", t.text());
    assert_eq!(t.header("warning"), STALE);
    // A manifest by digest is never stale.
    let d = send(http.get(v2(&format!(
        "siderolabs/imager/manifests/{}",
        imager.index_digest
    ))))
    .await;
    assert_eq!(d.status, 200);
    assert!(d.headers.get("warning").is_none());
    let dest = work.path().join("stale-imager");
    let files = skopeo_copy_ok(&svc.host(), &imager.repo, V, &dest, "upstream gone");
    imager.assert_copied(&files, "upstream gone");
    let metrics = send(http.get(format!("{}/metrics", svc.url())))
        .await
        .text();
    assert!(stale_count(&metrics, "manifest") >= 2, "{metrics}");
    assert_eq!(stale_count(&metrics, "tags"), 1);
    svc.stop();

    // Offline over the same store, no --mirror-upstream: the same images.
    let off = Service::builder()
        .arg("--offline")
        .arg("--cache-dir")
        .arg(&cache)
        .start();
    for img in [&imager, &base] {
        let dest = work
            .path()
            .join(format!("offline-{}", img.repo.replace('/', "_")));
        let files = skopeo_copy_ok(&off.host(), &img.repo, V, &dest, "offline");
        img.assert_copied(&files, "offline");
    }
    let cd_dir = work.path().join("cd-offline");
    std::fs::create_dir_all(&cd_dir).unwrap();
    if let Some(cd) = Containerd::start(&cd_dir) {
        let r = format!("{}/siderolabs/installer-base:{V}", off.host());
        ctr_fetch(&cd, &r);
        cd.assert_holds(&r, &base);
    }
    let m = send(http.get(format!("{}/v2/siderolabs/imager/manifests/{V}", off.url()))).await;
    assert_eq!(m.status, 200);
    assert!(m.headers.get("warning").is_none(), "offline is no fallback");
    let d = send(http.get(format!(
        "{}/v2/siderolabs/kubelet/manifests/v1.35.6",
        off.url()
    )))
    .await;
    assert_eq!(d.status, 403, "{}", d.text());
}
