//! Retention that follows the config, with real parts: nginx as the
//! factory (disk images, talosctl binaries, iPXE scripts and what they
//! boot), docker-registry for the installers (two releases sharing a
//! layer). Two releases are synced, one is dropped from the config, and
//! `mirror prune` / `mirror sync --prune` remove exactly what only it
//! named; the other still serves offline (curl, skopeo) and `mirror verify`
//! is clean. A failed sync never prunes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::registry::{
    PushedImage, Registry, push_factory_image, skopeo_copy, skopeo_copy_ok,
};
use crate::support::{
    Nginx, NginxOpts, Service, curl, random_bytes, require_tool, sha256_hex, xz_bytes,
};

const OLD: &str = "v1.12.0";
const NEW: &str = "v1.13.6";
const ID: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
const MIB: usize = 1 << 20;

struct Fx {
    dir: tempfile::TempDir,
    nginx: Nginx,
    reg: Registry,
    /// (store key, bytes) of each release's factory files.
    files: Vec<(String, String, Vec<u8>)>,
    installers: Vec<PushedImage>,
}

impl Fx {
    async fn new() -> Fx {
        require_tool("curl");
        require_tool("skopeo");
        require_tool("docker-registry");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let mut files = Vec::new();
        for (i, v) in [OLD, NEW].iter().enumerate() {
            let s = 10 * i as u64;
            let pxe = format!(
                "#!ipxe\n\nimgfree\nkernel https://pxe.factory.talos.dev/image/{ID}/{v}/kernel-amd64 talos.platform=metal console=tty0\ninitrd https://pxe.factory.talos.dev/image/{ID}/{v}/initramfs-amd64.xz\nboot\n"
            );
            for (path, body) in [
                (
                    format!("image/{ID}/{v}/metal-amd64.iso"),
                    random_bytes(MIB + 11, s + 1),
                ),
                (
                    format!("image/{ID}/{v}/kernel-amd64"),
                    random_bytes(MIB / 2, s + 2),
                ),
                (
                    format!("image/{ID}/{v}/initramfs-amd64.xz"),
                    xz_bytes(&random_bytes(MIB, s + 3)),
                ),
                (
                    format!("talosctl/{v}/talosctl-linux-amd64"),
                    random_bytes(MIB + 5, s + 4),
                ),
                (format!("pxe/{ID}/{v}/metal-amd64"), pxe.into_bytes()),
            ] {
                let p = root.join(&path);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, &body).unwrap();
                files.push((v.to_string(), path, body));
            }
        }
        let nginx = Nginx::start(&root, NginxOpts::default());
        let reg = Registry::start();
        // Same seed, same first layer size: the two installers share their
        // first layer (per architecture) and differ in the second.
        let repo = format!("installer/{ID}");
        let installers = vec![
            push_factory_image(&reg.url(), &repo, OLD, &[MIB, 3 * MIB], 7).await,
            push_factory_image(&reg.url(), &repo, NEW, &[MIB, 2 * MIB], 7).await,
        ];
        Fx {
            dir,
            nginx,
            reg,
            files,
            installers,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn config(&self, name: &str, versions: &[&str], images: &[&str]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(
            &p,
            format!(
                "schematics: [{ID}]\ntalosVersions: [{}]\nimages: [{}]\ninstallers: [installer]\ntalosctl: [linux-amd64]\npxe: [metal-amd64]\n",
                versions.join(", "),
                images.join(", ")
            ),
        )
        .unwrap();
        p
    }

    fn talos_gen(&self, args: &[&str], config: &Path) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
        c.arg("mirror").args(args).arg("--config").arg(config);
        c.arg("--cache-dir").arg(self.path("cache"));
        if args[0] == "sync" {
            c.args(["--factory-url", &self.nginx.url()])
                .args(["--registry-url", &self.reg.url()]);
        }
        c.env("RUST_LOG", "warn").output().unwrap()
    }

    fn has_object(&self, digest: &str) -> bool {
        self.path("cache/objects/sha256")
            .join(digest.trim_start_matches("sha256:"))
            .exists()
    }

    /// What opening the store sweeps (paths and bytes): a spool file no
    /// process holds, an index entry that does not parse, an orphan
    /// object older than the store's grace.
    fn plant_leftovers(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let orphan = b"an object no key names".to_vec();
        let v = vec![
            (
                self.path("cache/tmp/fill-1-00000000deadbeef"),
                b"half a fill".to_vec(),
            ),
            (
                self.path("cache/index")
                    .join(format!("{}.json", sha256_hex(b"no key"))),
                b"{ not json".to_vec(),
            ),
            (
                self.path("cache/objects/sha256").join(sha256_hex(&orphan)),
                orphan,
            ),
        ];
        for (p, body) in &v {
            std::fs::write(p, body).unwrap();
        }
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        std::fs::File::options()
            .write(true)
            .open(&v[2].0)
            .unwrap()
            .set_modified(old)
            .unwrap();
        v
    }

    fn key_count(&self) -> usize {
        std::fs::read_dir(self.path("cache/index")).unwrap().count()
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_release_prunes_only_what_it_alone_named() {
    let fx = Fx::new().await;
    let both = fx.config("both.yaml", &[OLD, NEW], &["metal-amd64.iso"]);
    let o = fx.talos_gen(&["sync"], &both);
    assert!(o.status.success(), "sync: {}", text(&o));
    let (old_inst, new_inst) = (&fx.installers[0], &fx.installers[1]);
    let shared: Vec<&str> = new_inst
        .blobs
        .iter()
        .filter(|b| old_inst.blobs.iter().any(|o| o.digest == b.digest))
        .map(|b| b.digest.as_str())
        .collect();
    assert_eq!(shared.len(), 2, "one shared layer per architecture");
    let old_only: Vec<&str> = old_inst
        .blobs
        .iter()
        .map(|b| b.digest.as_str())
        .filter(|d| !shared.contains(d))
        .collect();
    for d in &old_only {
        assert!(fx.has_object(d), "{d} synced");
    }

    // The old release dropped. A sync that fails (an asset the factory
    // does not have) never prunes, whatever --prune says.
    let failing = fx.config(
        "failing.yaml",
        &[NEW],
        &["metal-amd64.iso", "openstack-amd64.raw.xz"],
    );
    let keys = fx.key_count();
    let o = fx.talos_gen(&["sync", "--prune"], &failing);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("the sync failed; nothing pruned"),
        "{}",
        text(&o)
    );
    assert!(fx.key_count() >= keys, "nothing removed");
    // Nor does prune while the store lacks part of the config.
    let o = fx.talos_gen(&["prune"], &failing);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("run mirror sync first"), "{}", text(&o));

    // The dry run lists what would go and its bytes, and removes nothing:
    // not even what opening the store sweeps (a killed import's spool
    // file, an index entry that does not parse, an old orphan object).
    let leftovers = fx.plant_leftovers();
    let new_cfg = fx.config("new.yaml", &[NEW], &["metal-amd64.iso"]);
    let keys = fx.key_count();
    let o = fx.talos_gen(&["prune", "--dry-run"], &new_cfg);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(fx.key_count(), keys, "a dry run removes nothing");
    for (p, body) in &leftovers {
        assert_eq!(
            std::fs::read(p).ok().as_ref(),
            Some(body),
            "a dry run left {} as it was",
            p.display()
        );
    }
    for (v, path, _) in &fx.files {
        let key = if let Some(p) = path.strip_prefix("pxe/") {
            format!("factory/pxe/{p}")
        } else {
            path.clone()
        };
        assert_eq!(
            out.contains(&format!("would remove {key} (")),
            v == OLD,
            "{key}:\n{out}"
        );
    }
    assert!(
        out.contains(&format!(
            "would remove oci/tag/installer/installer/{ID}:{OLD}"
        )),
        "{out}"
    );
    for d in &old_only {
        assert!(
            out.contains(&format!("would remove oci/blob/{d}")),
            "{d}:\n{out}"
        );
    }
    for d in &shared {
        assert!(!out.contains(d), "shared blob {d} must stay:\n{out}");
    }
    let old_bytes: usize = fx
        .files
        .iter()
        .filter(|f| f.0 == OLD)
        .map(|f| f.2.len())
        .sum::<usize>()
        + old_inst
            .blobs
            .iter()
            .filter(|b| !shared.contains(&b.digest.as_str()))
            .map(|b| b.data.len())
            .sum::<usize>()
        + old_inst.index.len()
        + old_inst.manifests.iter().map(|m| m.1.len()).sum::<usize>();
    let summary = out.lines().last().unwrap().to_string();
    assert!(summary.starts_with("mirror prune --dry-run: "), "{summary}");
    let human = talos_gen::text::human_size(old_bytes as u64);
    assert!(
        summary.contains(&format!("({human}) would be freed")),
        "{summary} vs {human}"
    );

    // Now for real, through sync --prune (the sync succeeds first).
    let o = fx.talos_gen(&["sync", "--prune"], &new_cfg);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("({human}) freed")),
        "{}",
        text(&o)
    );
    for d in &old_only {
        assert!(!fx.has_object(d), "{d} removed");
    }
    for d in &shared {
        assert!(fx.has_object(d), "shared {d} kept");
    }
    // The run that changes the store recovers it as any open does.
    for (p, _) in &leftovers {
        assert!(!p.exists(), "{} swept by the real run", p.display());
    }
    for (v, path, body) in &fx.files {
        let _ = path;
        assert_eq!(fx.has_object(&sha256_hex(body)), v == NEW, "{path}");
    }
    // Again: nothing left to prune.
    let o = fx.talos_gen(&["prune"], &new_cfg);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("mirror prune: 0 keys removed"),
        "{}",
        text(&o)
    );

    // verify is clean.
    let o = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "verify", "--cache-dir"])
        .arg(fx.path("cache"))
        .output()
        .unwrap();
    assert!(o.status.success(), "verify: {}", text(&o));
    assert!(
        text(&o).contains(" 0 bad, 0 entries dropped"),
        "{}",
        text(&o)
    );

    // The kept release serves offline; the dropped one is gone.
    let svc = Service::builder()
        .arg("--offline")
        .arg("--cache-dir")
        .arg(fx.path("cache"))
        .start();
    for (v, path, body) in &fx.files {
        let url = format!("{}/{path}", svc.url());
        let r = curl(&[&url]);
        if v == NEW && !path.starts_with("pxe/") {
            assert_eq!(r.status, 200, "{url}");
            assert_eq!(sha256_hex(&r.body), sha256_hex(body), "{url}");
        } else if v == OLD {
            assert_eq!(r.status, 404, "{url}");
        }
    }
    // The iPXE script points back at the service (its Host), or at the
    // proxy a client came through.
    let pxe = format!("{}/pxe/{ID}/{NEW}/metal-amd64", svc.url());
    let r = curl(&[&pxe]);
    assert_eq!(r.status, 200);
    let script = String::from_utf8_lossy(&r.body);
    assert!(
        script.contains(&format!(
            "kernel {}/image/{ID}/{NEW}/kernel-amd64 talos.platform=metal",
            svc.url()
        )),
        "{script}"
    );
    assert!(!script.contains("pxe.factory.talos.dev"), "{script}");
    let r = curl(&[
        "-H",
        "X-Forwarded-Proto: https",
        "-H",
        "X-Forwarded-Host: talos-gen.example",
        &pxe,
    ]);
    let script = String::from_utf8_lossy(&r.body);
    assert!(
        script.contains(&format!(
            "initrd https://talos-gen.example/image/{ID}/{NEW}/initramfs-amd64.xz\n"
        )),
        "{script}"
    );
    // HEAD of a talosctl binary; ?filename= names an image download.
    let r = curl(&[
        "-I",
        &format!("{}/talosctl/{NEW}/talosctl-linux-amd64", svc.url()),
    ]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-length").as_deref(),
        Some(&*(MIB + 5).to_string())
    );
    let r = curl(&[&format!(
        "{}/image/{ID}/{NEW}/metal-amd64.iso?filename=talos.iso",
        svc.url()
    )]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-disposition").as_deref(),
        Some("attachment; filename=\"talos.iso\"")
    );
    let r = curl(&[&format!(
        "{}/image/{ID}/{NEW}/metal-amd64.iso?filename=a%22b",
        svc.url()
    )]);
    assert_eq!(r.status, 400);
    // The installer of the kept release, every platform, through skopeo.
    let dest = fx.path("skopeo");
    let repo = format!("installer/{ID}");
    let got = skopeo_copy_ok(&svc.host(), &repo, NEW, &dest, "the kept installer");
    new_inst.assert_copied(&got, "the kept installer");
    let o = skopeo_copy(&svc.host(), &repo, OLD, &fx.path("skopeo-old"));
    assert!(!o.status.success(), "the dropped installer is gone");
    // The status page: per release what is held.
    let r = curl(&[&format!("{}/", svc.url())]);
    let page = String::from_utf8_lossy(&r.body);
    assert!(page.contains("id=\"mirror-releases\""), "{page}");
    assert!(
        page.contains(&format!("<td><code>{NEW}</code></td><td>5 of 5 items</td>")),
        "{page}"
    );
    assert!(!page.contains(&format!("<code>{OLD}</code>")), "{page}");
}

/// A config that names nothing (an empty ConfigMap, `{}`, a comment,
/// `talosVersions: []`) is refused by `mirror prune`, dry or not, exit 2,
/// and nothing is removed (it used to remove every mirrored key).
#[tokio::test(flavor = "multi_thread")]
async fn prune_refuses_a_config_that_names_nothing() {
    require_tool("curl");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let path = root.join(format!("image/{ID}/{NEW}/metal-amd64.iso"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let body = random_bytes(MIB + 3, 41);
    std::fs::write(&path, &body).unwrap();
    let nginx = Nginx::start(&root, NginxOpts::default());
    let cache = dir.path().join("cache");
    let run = |args: &[&str], config: &Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
        c.arg("mirror").args(args).arg("--config").arg(config);
        c.arg("--cache-dir").arg(&cache);
        if args[0] == "sync" {
            c.args(["--factory-url", &nginx.url()]);
        }
        c.env("RUST_LOG", "warn").output().unwrap()
    };
    let cfg = dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{ID}]\ntalosVersions: [{NEW}]\nimages: [metal-amd64.iso]\n"),
    )
    .unwrap();
    let o = run(&["sync"], &cfg);
    assert!(o.status.success(), "sync: {}", text(&o));
    let keys = || std::fs::read_dir(cache.join("index")).unwrap().count();
    let before = keys();
    assert!(before >= 1);
    let object = cache.join("objects/sha256").join(sha256_hex(&body));
    assert!(object.exists());
    for (name, content) in [
        ("empty.yaml", ""),
        ("braces.yaml", "{}\n"),
        ("comment.yaml", "# nothing here yet\n"),
        ("no-releases.yaml", "talosVersions: []\n"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        for args in [&["prune"][..], &["prune", "--dry-run"][..]] {
            let o = run(args, &p);
            assert_eq!(o.status.code(), Some(2), "{name} {args:?}: {}", text(&o));
            assert!(
                text(&o).contains("names nothing") || text(&o).contains("nothing to"),
                "{name} {args:?}: {}",
                text(&o)
            );
            assert_eq!(keys(), before, "{name} {args:?}: nothing removed");
            assert!(object.exists(), "{name} {args:?}: the image stays");
        }
    }
    // The real config still prunes normally (nothing to remove).
    let o = run(&["prune"], &cfg);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(keys(), before);
}

/// `mirror verify` refuses a directory that is not a store as `mirror
/// export` and `mirror prune` do (exit 2, the directory named), and none
/// of them makes anything in it (verify used to make the store's folders
/// in any directory it was pointed at). A path that does not exist is
/// refused too, and not made.
#[test]
fn verify_export_and_prune_refuse_a_directory_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let photos = dir.path().join("photos");
    std::fs::create_dir(&photos).unwrap();
    std::fs::write(photos.join("cat.jpg"), b"a cat").unwrap();
    let cfg = dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{ID}]\ntalosVersions: [{NEW}]\nimages: [metal-amd64.iso]\n"),
    )
    .unwrap();
    let out = dir.path().join("out.tar");
    let listing = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let c = cfg.to_str().unwrap();
    let o = out.to_str().unwrap();
    for args in [
        vec!["verify"],
        vec!["export", "--output", o],
        vec!["export", "--format", "http", "--output", o],
        vec!["prune", "--config", c],
        vec!["prune", "--config", c, "--dry-run"],
    ] {
        let r = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
            .arg("mirror")
            .args(&args)
            .arg("--cache-dir")
            .arg(&photos)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", text(&r));
        assert!(
            String::from_utf8_lossy(&r.stderr).contains(&format!(
                "--cache-dir {}: not a talos-gen store",
                photos.display()
            )),
            "{args:?}: {}",
            text(&r)
        );
        assert_eq!(listing(&photos), ["cat.jpg"], "{args:?}");
        assert!(!out.exists(), "{args:?}");
    }
    let missing = dir.path().join("missing");
    let r = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "verify", "--cache-dir"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2), "{}", text(&r));
    assert!(!missing.exists());
}
