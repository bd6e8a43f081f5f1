//! `sourceImages:` in the mirror config: `mirror plan` lists
//! `ghcr.io/siderolabs/<name>:<v>` for each `talosVersions` entry with its
//! signature, `mirror sync` (a docker-registry on loopback as ghcr.io)
//! keeps them and their cosign signatures pinned, and then, every upstream
//! stopped, `serve --offline` answers `/v2/siderolabs/<name>/...` (no
//! `?ns=`) to skopeo and containerd; `serve` online with the upstream gone
//! answers the kept referrers index and tag list as stale.

use crate::support;

use crate::support::containerd::Containerd;
use crate::support::registry::*;
use crate::support::{Service, send, talos_gen};

const V: &str = "v1.13.6";
const STALE: &str = "110 - \"stale\"";

#[tokio::test(flavor = "multi_thread")]
async fn source_images_mirrored_with_signatures_and_served_offline() {
    let work = tempfile::tempdir().unwrap();
    let mut up = Registry::start();
    let imager = push_factory_image(&up.url(), "siderolabs/imager", V, &[1 << 20], 51).await;
    let talosctl = push_factory_image(
        &up.url(),
        "siderolabs/talosctl-all",
        V,
        &[256 << 10, 4096],
        52,
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

    let cfg = work.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("talosVersions: [{V}]\nsourceImages: [imager, talosctl-all]\n"),
    )
    .unwrap();
    let cfg_s = cfg.to_str().unwrap();

    // The plan names them, each with its signature.
    let (plan, _) = support::ok(&talos_gen(&["mirror", "plan", "--config", cfg_s]), "plan");
    for name in ["imager", "talosctl-all"] {
        let line = format!(
            "  image ghcr.io/siderolabs/{name}:{V}\n    + cosign signature ghcr.io/siderolabs/{name}:sha256-<manifest digest>.sig (where the upstream has it)\n"
        );
        assert!(plan.contains(&line), "{name}: {plan}");
    }
    let (json, _) = support::ok(
        &talos_gen(&["mirror", "plan", "--config", cfg_s, "--json"]),
        "plan --json",
    );
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    let refs: Vec<&str> = json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["reference"].as_str().unwrap())
        .collect();
    assert_eq!(
        refs,
        [
            format!("ghcr.io/siderolabs/imager:{V}"),
            format!("ghcr.io/siderolabs/talosctl-all:{V}")
        ]
    );
    // A name the factory does not proxy: exit 2 naming it.
    let bad = work.path().join("bad.yaml");
    std::fs::write(
        &bad,
        format!("talosVersions: [{V}]\nsourceImages: [kubelet]\n"),
    )
    .unwrap();
    let o = talos_gen(&["mirror", "plan", "--config", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("sourceImages[0]: \"kubelet\" is not a source image of the factory"),
        "{err}"
    );

    // Sync them (the factory's documents asked of the registry: 404s, noted).
    let cache = work.path().join("cache");
    let cache_s = cache.to_str().unwrap();
    let o = talos_gen(&[
        "mirror",
        "sync",
        "--config",
        cfg_s,
        "--cache-dir",
        cache_s,
        "--factory-url",
        &up.url(),
        "--mirror-upstream",
        &format!("ghcr.io={}", up.url()),
    ]);
    support::ok(&o, "mirror sync");

    // Online with the upstream gone: the kept referrers index answers,
    // marked stale; the tag list is the upstream's last whole list or an
    // error, and the upstream never gave one here (the sync keeps tags,
    // not lists): 502 naming the upstream, never the stored tags passed
    // off as its list.
    let http = reqwest::Client::new();
    up.stop();
    {
        let svc = Service::builder()
            .args(["--cache-dir", cache_s])
            .args(["--mirror-upstream", &format!("ghcr.io={}", up.url())])
            .args(["--tag-revalidate", "0"])
            .start();
        let r = send(http.get(format!(
            "{}/v2/siderolabs/imager/referrers/{}",
            svc.url(),
            imager.index_digest
        )))
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("warning"), STALE);
        let t = send(http.get(format!("{}/v2/siderolabs/imager/tags/list", svc.url()))).await;
        // 502 when this request found the upstream gone, 504 when the
        // prober had already found it not answering (issue 47: a cold key
        // fails at once while its upstream is known down): either way an
        // error naming the upstream.
        assert!(
            matches!(t.status.as_u16(), 502 | 504),
            "{}: {}",
            t.status,
            t.text()
        );
        assert!(t.text().contains(&up.url()), "{}", t.text());
        let m = send(http.get(format!("{}/metrics", svc.url())))
            .await
            .text();
        for (kind, n) in [("referrers", 1), ("tags", 0)] {
            let line = format!("talos_gen_stale_answers_total{{kind=\"{kind}\"}} {n}");
            assert!(m.lines().any(|l| l == line), "{line}: {m}");
        }
    }

    // Offline, no --mirror-upstream: skopeo and containerd, the signature too.
    let off = Service::builder()
        .args(["--offline", "--cache-dir", cache_s])
        .start();
    for img in [&imager, &talosctl] {
        let dest = work.path().join(img.repo.replace('/', "_"));
        let files = skopeo_copy_ok(&off.host(), &img.repo, V, &dest, "offline");
        img.assert_copied(&files, "offline");
    }
    let s = send(http.get(format!(
        "{}/v2/siderolabs/imager/manifests/{sig}",
        off.url()
    )))
    .await;
    assert_eq!(s.status, 200, "the signature: {}", s.text());
    assert!(s.headers.get("warning").is_none());
    let cd_dir = work.path().join("cd");
    std::fs::create_dir_all(&cd_dir).unwrap();
    if let Some(cd) = Containerd::start(&cd_dir) {
        for img in [&imager, &talosctl] {
            let r = format!("{}/{}:{V}", off.host(), img.repo);
            let o = cd.ctr(&["content", "fetch", "--plain-http", "--all-platforms", &r]);
            assert!(
                o.status.success(),
                "ctr content fetch {r}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            cd.assert_holds(&r, img);
        }
    }
}
