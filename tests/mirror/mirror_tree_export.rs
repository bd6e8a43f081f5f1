//! `mirror export --format http|oci` with real parts: a store filled by
//! `mirror sync` (nginx as the factory, Debian's docker-registry as the
//! installer and kubelet registry), then
//! - `http`: the tree served by nginx, checked with `sha256sum -c`, and
//!   pulled through `talos-gen serve --factory-url <that nginx>`; a second
//!   export copies nothing, a smaller config removes what it no longer
//!   names, a foreign directory is refused;
//! - `oci`: the layout read by `skopeo inspect` and `skopeo copy --all
//!   oci:PATH:REF dir:...` (byte for byte what was pushed), and loaded into
//!   another registry with `skopeo copy --all oci:... docker://...`.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::mirror_site::{KUBELET, MirrorSite, SiteSpec, V};
use crate::support::registry::{Registry, dir_contents};
use crate::support::{Nginx, NginxOpts, Service, curl, ok, require_tool, sha256_hex};

const MIB: usize = 1 << 20;
const SCHEMATIC_YAML: &str = "customization:\n  extraKernelArgs:\n    - carriers-test\n";

/// The mirror site, synced into `cache`.
struct Fixture(MirrorSite);

impl std::ops::Deref for Fixture {
    type Target = MirrorSite;
    fn deref(&self) -> &MirrorSite {
        &self.0
    }
}

impl Fixture {
    /// A synced store (`cache`) of two disk images, a two-platform
    /// installer, a kubelet image and the factory's `/versions`.
    async fn synced() -> Fixture {
        require_tool("sha256sum");
        let site = MirrorSite::start(SiteSpec {
            xz_len: 2 * MIB,
            iso_len: MIB + 77,
            installer_layers: vec![MIB, MIB / 2],
            seeds: [3, 4, 5, 6],
            versions: true,
            ..SiteSpec::new(SCHEMATIC_YAML)
        })
        .await;
        let cfg = site.config("mirror.yaml", &site.asset_names());
        let o = site.sync_cmd(&cfg, &site.path("cache")).output().unwrap();
        ok(&o, "mirror sync");
        Fixture(site)
    }

    fn export(&self, format: &str, config: Option<&Path>, out: &Path) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
        c.args(["mirror", "export", "--cache-dir"])
            .arg(self.path("cache"))
            .args(["--format", format, "--output"])
            .arg(out);
        if let Some(cfg) = config {
            c.arg("--config").arg(cfg);
        }
        c.env("RUST_LOG", "warn").output().unwrap()
    }
}

/// Every file under `dir`, relative path -> bytes.
/// `sha256sum -c <asset>.sha256` in `dir` succeeds.
fn sha256sum_checks(dir: &Path, asset: &str) {
    let c = Command::new("sha256sum")
        .args(["-c", &format!("{asset}.sha256")])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(c.status.success(), "{c:?}");
}

fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn http_tree_serves_the_artifacts_with_their_sha256_and_is_updated_in_place() {
    let fx = Fixture::synced().await;
    let out = fx.path("www");
    let all = fx.path("mirror.yaml");
    let o = fx.export("http", Some(&all), &out);
    let (stdout, _) = ok(&o, "export --format http");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stdout.contains("mirror export --format http: 2 artifacts, "),
        "{stdout}"
    );
    // The OCI items are named as left out, not silently dropped.
    assert!(
        stderr.contains("2 installer and image references (OCI) are not part of an http tree"),
        "{stderr}"
    );
    let files = tree(&out);
    for (a, bytes) in &fx.assets {
        let rel = format!("image/{}/{V}/{a}", fx.id);
        assert!(files.get(&rel) == Some(bytes), "{rel}");
        assert_eq!(
            String::from_utf8_lossy(&files[&format!("{rel}.sha256")]),
            format!("{}  {a}\n", sha256_hex(bytes))
        );
        // The format sha256sum reads.
        sha256sum_checks(&out.join(format!("image/{}/{V}", fx.id)), a);
    }
    assert_eq!(files["versions"], format!("[\"{V}\"]").into_bytes());
    let (_, canonical) = talos_gen::schematic::id_and_canonical(SCHEMATIC_YAML).unwrap();
    assert_eq!(
        files[&format!("schematics/{}", fx.id)],
        canonical.as_bytes()
    );
    assert!(files.contains_key("talos-gen-export.json"));
    assert!(
        !files.keys().any(|k| k.ends_with(".partial")),
        "{:?}",
        files.keys()
    );

    // Served by a plain file server: `.sha256` as serve answers it, and
    // serve pulls through it as it would from the factory.
    let www = Nginx::start(&out, NginxOpts::default());
    let cache = fx.path("site-cache");
    let svc = Service::start(&[
        "--cache-dir",
        cache.to_str().unwrap(),
        "--factory-url",
        &www.url(),
    ]);
    for (a, bytes) in &fx.assets {
        let p = format!("/image/{}/{V}/{a}", fx.id);
        let direct = curl(&[&format!("{}{p}", www.url())]);
        assert!(direct.status == 200 && direct.body == *bytes, "{a}");
        let got = curl(&[&format!("{}{p}", svc.url())]);
        assert_eq!(got.status, 200, "{a}");
        assert!(got.body == *bytes, "{a}: bytes differ");
        let ours = curl(&[&format!("{}{p}.sha256", svc.url())]);
        let theirs = curl(&[&format!("{}{p}.sha256", www.url())]);
        assert_eq!(ours.body, theirs.body, "{a}.sha256");
    }
    let v = curl(&[&format!("{}/versions", svc.url())]);
    assert_eq!(v.body, format!("[\"{V}\"]").into_bytes());

    // Again: nothing copied but the marker.
    let (stdout, _) = ok(&fx.export("http", Some(&all), &out), "second export");
    assert!(stdout.contains("; 0 copied (0 B), "), "{stdout}");

    // A config naming one artifact: the other (and its .sha256) removed,
    // a file the export did not write left alone.
    std::fs::write(out.join("README.site"), "ours").unwrap();
    let one = fx.config("one.yaml", &[fx.assets[0].0.clone()]);
    let (stdout, _) = ok(&fx.export("http", Some(&one), &out), "smaller export");
    assert!(stdout.contains(", 2 removed"), "{stdout}");
    let files = tree(&out);
    assert!(files.contains_key(&format!("image/{}/{V}/{}", fx.id, fx.assets[0].0)));
    assert!(
        !files.keys().any(|k| k.contains(&fx.assets[1].0)),
        "{:?}",
        files.keys()
    );
    assert_eq!(files["README.site"], b"ours");

    // Never into a directory it did not write, nor onto a file.
    let foreign = fx.path("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("index.html"), "site").unwrap();
    let o = fx.export("http", None, &foreign);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "--output {}: not empty and not a talos-gen export (it has no talos-gen-export.json); refusing to write into it",
            foreign.display()
        )),
        "{err}"
    );
    assert_eq!(tree(&foreign).len(), 1);
    let o = fx.export("oci", None, &out);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds a --format http export"));
    let file = fx.path("file.txt");
    std::fs::write(&file, "x").unwrap();
    let o = fx.export("http", None, &file);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = fx.export("zip", None, &fx.path("z"));
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

fn skopeo(args: &[&str]) -> Output {
    Command::new("skopeo").args(args).output().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn oci_layout_is_read_by_skopeo_byte_for_byte_and_loads_into_a_registry() {
    let fx = Fixture::synced().await;
    let out = fx.path("layout");
    let o = fx.export("oci", Some(&fx.path("mirror.yaml")), &out);
    let (stdout, _) = ok(&o, "export --format oci");
    assert!(
        stdout.contains("mirror export --format oci: 2 image references, "),
        "{stdout}"
    );
    // The layout: oci-layout, index.json naming each reference, blobs.
    let layout: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("oci-layout")).unwrap()).unwrap();
    assert_eq!(layout["imageLayoutVersion"], "1.0.0");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    let names: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["annotations"]["org.opencontainers.image.ref.name"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(names, [fx.installer_ref().as_str(), KUBELET]);
    let top = &index["manifests"][0];
    assert_eq!(top["digest"], fx.installer.index_digest);
    assert_eq!(top["mediaType"], "application/vnd.oci.image.index.v1+json");
    assert_eq!(top["size"], fx.installer.index.len());

    for (reference, img) in [
        (fx.installer_ref(), &fx.installer),
        (KUBELET.to_string(), &fx.kubelet),
    ] {
        let src = format!("oci:{}:{reference}", out.display());
        let raw = skopeo(&["inspect", "--raw", &src]);
        assert!(raw.status.success(), "{raw:?}");
        assert_eq!(raw.stdout, img.index, "{reference}: index bytes");
        let info = skopeo(&["inspect", &src]);
        assert!(info.status.success(), "{info:?}");
        let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
        assert_eq!(info["Digest"], img.index_digest, "{reference}");

        // skopeo copy --all to dir: every platform, byte for byte.
        let dest = tempfile::tempdir().unwrap();
        let o = skopeo(&[
            "copy",
            "--all",
            &src,
            &format!("dir:{}", dest.path().display()),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        img.assert_copied(&dir_contents(dest.path()), &reference);
    }

    // A site's own registry loads it with its tools; the digests hold.
    let site = Registry::start();
    let src = format!("oci:{}:{KUBELET}", out.display());
    let dst = format!("docker://{}/siderolabs/kubelet:v1.35.6", site.host());
    let o = skopeo(&[
        "copy",
        "--all",
        "--preserve-digests",
        "--dest-tls-verify=false",
        &src,
        &dst,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = Command::new("curl")
        .args(["-sS", "--fail", "-H"])
        .arg("Accept: application/vnd.oci.image.index.v1+json")
        .arg(format!(
            "{}/v2/siderolabs/kubelet/manifests/v1.35.6",
            site.url()
        ))
        .output()
        .unwrap();
    assert_eq!(got.stdout, fx.kubelet.index);

    // Again: nothing copied.
    let (stdout, _) = ok(
        &fx.export("oci", Some(&fx.path("mirror.yaml")), &out),
        "second export",
    );
    assert!(stdout.contains("; 0 copied (0 B), "), "{stdout}");

    // Without --config: every complete tag of the store.
    let all = fx.path("layout-all");
    let (stdout, _) = ok(&fx.export("oci", None, &all), "export all");
    assert!(stdout.contains(": 2 image references, "), "{stdout}");
}

/// Two exports into one directory at once (each file used to go through
/// one fixed `<path>.partial`, so two exports wrote one temp file): every
/// one succeeds, the tree is whole (`sha256sum -c`), no temp file is left.
#[tokio::test(flavor = "multi_thread")]
async fn two_http_exports_at_once_never_collide() {
    let fx = Fixture::synced().await;
    let out = fx.path("www");
    let all = fx.path("mirror.yaml");
    for round in 0..3 {
        let runs: Vec<_> = (0..3)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_talos-gen"))
                    .args(["mirror", "export", "--cache-dir"])
                    .arg(fx.path("cache"))
                    .args(["--format", "http", "--output"])
                    .arg(&out)
                    .arg("--config")
                    .arg(&all)
                    .env("RUST_LOG", "warn")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for r in runs {
            let o = r.wait_with_output().unwrap();
            assert!(
                o.status.success(),
                "round {round}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let files = tree(&out);
        for (a, bytes) in &fx.assets {
            let rel = format!("image/{}/{V}/{a}", fx.id);
            assert!(files.get(&rel) == Some(bytes), "round {round}: {rel}");
            sha256sum_checks(&out.join(format!("image/{}/{V}", fx.id)), a);
        }
        assert!(
            !files.keys().any(|k| k.ends_with(".partial")),
            "round {round}: {:?}",
            files.keys()
        );
        // Removed between rounds: each round writes every file anew.
        if round < 2 {
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
}
