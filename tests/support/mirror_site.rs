//! A site to mirror from, for the `mirror` tests: nginx as the factory
//! publishing two disk images of a schematic given as a file (and answering
//! `POST /schematics` with its ID), Debian's docker-registry with a
//! two-platform installer and a `siderolabs/kubelet` image, and mirror
//! configs naming them.
//!
//! ```ignore
//! let site = MirrorSite::start(SiteSpec { xz_len: 2 << 20, ..SiteSpec::new(YAML) }).await;
//! let cfg = site.config("mirror.yaml", &site.asset_names());
//! ok(&site.sync_cmd(&cfg, &site.path("cache")).output().unwrap(), "sync");
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;

use super::registry::{PushedImage, Registry, push_factory_image};
use super::{Nginx, NginxOpts, random_bytes, require_tool, xz_bytes};

/// The one Talos release of the site.
pub const V: &str = "v1.13.6";
/// The extra image the configs name.
pub const KUBELET: &str = "ghcr.io/siderolabs/kubelet:v1.35.6";

/// What the site publishes.
#[derive(Debug, Clone)]
pub struct SiteSpec {
    /// The schematic, written as `schematic.yaml` beside the configs.
    pub schematic_yaml: &'static str,
    /// Random bytes in `openstack-amd64.raw.xz` (before xz).
    pub xz_len: usize,
    /// Bytes of `metal-amd64.iso`.
    pub iso_len: usize,
    /// The installer's layer sizes (per platform).
    pub installer_layers: Vec<usize>,
    /// Seeds of the xz data, the ISO, the installer and the kubelet image.
    pub seeds: [u64; 4],
    /// nginx's `limit_rate` (e.g. `1m`).
    pub rate: Option<String>,
    /// Also publish the factory's `/versions` (`["V"]`).
    pub versions: bool,
}

impl SiteSpec {
    /// 1 MiB of xz data, a 1 MiB ISO, a (1 MiB, 512 KiB) installer, no rate
    /// limit, no `/versions`.
    pub fn new(schematic_yaml: &'static str) -> SiteSpec {
        SiteSpec {
            schematic_yaml,
            xz_len: 1 << 20,
            iso_len: 1 << 20,
            installer_layers: vec![1 << 20, 1 << 19],
            seeds: [1, 2, 3, 4],
            rate: None,
            versions: false,
        }
    }
}

/// The running site; its files under `dir` (the factory's tree in
/// `dir/factory`, configs and `schematic.yaml` at the top).
pub struct MirrorSite {
    pub dir: tempfile::TempDir,
    /// The schematic's ID.
    pub id: String,
    /// (asset name, bytes) published by nginx.
    pub assets: Vec<(String, Vec<u8>)>,
    pub nginx: Nginx,
    pub reg: Registry,
    pub installer: PushedImage,
    pub kubelet: PushedImage,
}

impl MirrorSite {
    pub async fn start(spec: SiteSpec) -> MirrorSite {
        for t in ["curl", "skopeo", "docker-registry"] {
            require_tool(t);
        }
        let [xz_seed, iso_seed, installer_seed, kubelet_seed] = spec.seeds;
        let dir = tempfile::tempdir().unwrap();
        let (id, _) = talos_gen::schematic::id_and_canonical(spec.schematic_yaml).unwrap();
        let assets = vec![
            (
                "openstack-amd64.raw.xz".to_string(),
                xz_bytes(&random_bytes(spec.xz_len, xz_seed)),
            ),
            (
                "metal-amd64.iso".to_string(),
                random_bytes(spec.iso_len, iso_seed),
            ),
        ];
        let root = dir.path().join("factory");
        let d = root.join(format!("image/{id}/{V}"));
        std::fs::create_dir_all(&d).unwrap();
        for (a, b) in &assets {
            std::fs::write(d.join(a), b).unwrap();
        }
        if spec.versions {
            std::fs::write(root.join("versions"), format!("[\"{V}\"]")).unwrap();
        }
        std::fs::write(dir.path().join("schematic.yaml"), spec.schematic_yaml).unwrap();
        let nginx = Nginx::start(
            &root,
            NginxOpts {
                limit_rate: spec.rate.clone(),
                server_extra: format!(
                    "location = /schematics {{ default_type application/json; return 201 '{{\"id\":\"{id}\"}}'; }}"
                ),
                ..Default::default()
            },
        );
        let reg = Registry::start();
        let repo = format!("installer/{id}");
        let layers = &spec.installer_layers;
        let installer = push_factory_image(&reg.url(), &repo, V, layers, installer_seed).await;
        let (kubelet_repo, kubelet_tag) = ("siderolabs/kubelet", "v1.35.6");
        let kubelet = push_factory_image(
            &reg.url(),
            kubelet_repo,
            kubelet_tag,
            &[1 << 20],
            kubelet_seed,
        )
        .await;
        MirrorSite {
            dir,
            id,
            assets,
            nginx,
            reg,
            installer,
            kubelet,
        }
    }

    /// `dir/<p>`.
    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// The names of the published assets.
    pub fn asset_names(&self) -> Vec<String> {
        self.assets.iter().map(|a| a.0.clone()).collect()
    }

    /// `dir/<name>`: a mirror config of the schematic file, release [`V`],
    /// `images`, the installer and [`KUBELET`].
    pub fn config(&self, name: &str, images: &[String]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(
            &p,
            format!(
                "schematics:\n  - file: schematic.yaml\ntalosVersions: [{V}]\nimages: [{}]\ninstallers: [installer]\nextraImages: [{KUBELET}]\n",
                images.join(", ")
            ),
        )
        .unwrap();
        p
    }

    /// `talos-gen mirror sync --config <config> --cache-dir <cache>` with
    /// nginx as the factory and the registry as the installer registry and
    /// ghcr.io's mirror upstream.
    pub fn sync_cmd(&self, config: &Path, cache: &Path) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
        c.args(["mirror", "sync", "--config"])
            .arg(config)
            .arg("--cache-dir")
            .arg(cache)
            .args(["--factory-url", &self.nginx.url()])
            .args(["--registry-url", &self.reg.url()])
            .args(["--mirror-upstream", &format!("ghcr.io={}", self.reg.url())]);
        c
    }

    /// The reference of the installer, as the configs' `installers:` name it.
    pub fn installer_ref(&self) -> String {
        format!("factory.talos.dev/{}:{V}", self.installer.repo)
    }
}
