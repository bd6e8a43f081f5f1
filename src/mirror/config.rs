//! The mirror config (`mirror.yaml`) and the items it names.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::factory::ImageKey;
use crate::registry::names;

mod plan;
use plan::item_repository;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    schematics: Vec<RawSchematic>,
    #[serde(default)]
    talos_versions: Vec<String>,
    #[serde(default)]
    images: Vec<String>,
    #[serde(default)]
    installers: Vec<String>,
    #[serde(default)]
    extra_images: Vec<String>,
    #[serde(default)]
    workers: Vec<RawWorker>,
    /// talosctl binaries per `talosVersions` entry: `linux-amd64`, ...
    #[serde(default)]
    talosctl: Vec<String>,
    /// iPXE scripts per schematic and `talosVersions` entry: `metal-amd64`,
    /// ... (with the kernel and initramfs, or the UKI, they boot).
    #[serde(default)]
    pxe: Vec<String>,
    /// The factory's source images (`imager`, `installer-base`, ...:
    /// `ghcr.io/siderolabs/<name>`) per `talosVersions` entry.
    #[serde(default)]
    source_images: Vec<String>,
    /// Upgrade plans: every pair on the way, each as a `workers:` entry.
    #[serde(default)]
    upgrades: Vec<RawUpgrade>,
}

/// An `upgrades:` entry: the pairs of `talos-gen upgrade plan` from one
/// pair to another, each expanded as a `workers:` entry (its pull list and
/// disk image).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawUpgrade {
    from_talos: String,
    from_kubernetes: String,
    to_talos: String,
    to_kubernetes: String,
    #[serde(default)]
    replace: bool,
    schematic: Option<RawSchematic>,
    platform: Option<String>,
    arch: Option<String>,
    installer_repository: Option<String>,
    #[serde(default)]
    optional_images: bool,
}

/// The config's top-level keys (the contract's and those [`Raw`] reads;
/// `upgrades` is the contract's upgrade-plan list).
pub const KEYS: &[&str] = &[
    "schematics",
    "talosVersions",
    "images",
    "installers",
    "extraImages",
    "workers",
    "talosctl",
    "pxe",
    "sourceImages",
    "upgrades",
];

/// A top-level key the config does not have is bad input naming it and the
/// nearest known key, one line (a typo never silently drops a list).
fn check_top_level(text: &str, what: &str) -> Result<()> {
    use crate::yaml::Value;
    let Ok(Value::Mapping(m)) = crate::yaml::value_from_str(text, what) else {
        // Not a mapping, or not YAML: the typed parse says what is wrong.
        return Ok(());
    };
    for k in m.keys() {
        let k = match k {
            Value::String(s) => s.clone(),
            other => format!("{other:?}"),
        };
        if !KEYS.contains(&k.as_str()) {
            let listed: Vec<String> = KEYS.iter().map(|k| format!("`{k}`")).collect();
            let near = crate::text::by_nearness(&k, KEYS)[0];
            return Err(Error::bad_input(crate::text::clip_quoted(&format!(
                "{what}: unknown field `{k}` (nearest known: `{near}`), expected one of {}",
                listed.join(", ")
            ))));
        }
    }
    Ok(())
}

/// A `workers:` entry: one worker pool, everything its nodes pull.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawWorker {
    talos: String,
    kubernetes: String,
    schematic: Option<RawSchematic>,
    platform: Option<String>,
    arch: Option<String>,
    installer_repository: Option<String>,
    /// Also the optional images (Talos-managed CNI and add-ons).
    #[serde(default)]
    optional_images: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum RawSchematic {
    Id(String),
    File { file: String },
}

/// A schematic of the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchematicSource {
    pub id: String,
    /// Canonical bytes, when the config gave the schematic as a file
    /// (then it is POSTed to the factory before anything is fetched).
    pub canonical: Option<String>,
    /// The file it came from, for messages.
    pub file: Option<PathBuf>,
}

/// An image outside the installer repositories (`extraImages`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraImage {
    /// Registry host (`ghcr.io`, `docker.io`, `127.0.0.1:5000`).
    pub host: String,
    pub repo: String,
    /// A tag or `sha256:...`.
    pub reference: String,
}

impl ExtraImage {
    /// Parse a Docker-style reference: `[host/]repo[:tag][@digest]`; without
    /// a host it is Docker Hub (`library/` for single names), without a tag `latest`.
    pub fn parse(s: &str) -> Result<ExtraImage> {
        let r = crate::oci_ref::ImageRef::parse(s)
            .map_err(|why| Error::bad_input(format!("extraImages: {s:?}: {why}")))?;
        let (host, repo) = r.normalised();
        let reference = r.digest.or(r.tag).unwrap_or("latest").to_string();
        Ok(ExtraImage {
            host,
            repo,
            reference,
        })
    }

    pub fn display(&self) -> String {
        let sep = if self.reference.starts_with("sha256:") {
            '@'
        } else {
            ':'
        };
        format!("{}/{}{sep}{}", self.host, self.repo, self.reference)
    }
}

/// A parsed, validated config.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub schematics: Vec<SchematicSource>,
    /// Normalised with a leading `v`.
    pub versions: Vec<String>,
    pub images: Vec<String>,
    pub installers: Vec<String>,
    pub extra_images: Vec<ExtraImage>,
    /// `workers:`, expanded (no network).
    pub workers: Vec<Worker>,
    /// For stderr: releases or kubelet versions a worker entry was given
    /// (the newest known release of a minor, ...).
    pub notes: Vec<String>,
    /// `mirror sync --cosign-key`: every installer and image must carry a
    /// cosign signature one of these keys verifies (see `signatures`).
    pub cosign_keys: Vec<crate::cosign::PublicKey>,
    /// `talosctl:` entries (`linux-amd64`, ...), checked.
    pub talosctl: Vec<String>,
    /// `pxe:` entries (`metal-amd64`, ...), checked.
    pub pxe: Vec<String>,
    /// `sourceImages:` entries (`imager`, ...), checked against
    /// [`crate::registry::source::SOURCE_IMAGES`].
    pub source_images: Vec<String>,
}

/// Default platform and architecture of a `workers:` entry.
pub const DEFAULT_PLATFORM: &str = "openstack";
pub const DEFAULT_ARCH: &str = "amd64";

/// One `workers:` entry, expanded.
#[derive(Debug, Clone)]
pub struct Worker {
    /// The worker's pull list (installer, kubelet, pause, optional images).
    pub pull: crate::pull_list::PullList,
    pub schematic: SchematicSource,
    pub platform: String,
    pub arch: String,
    /// The disk image `<platform>-<arch>.raw.xz` of its schematic and release.
    pub disk: ImageKey,
    /// The OCI items of the pull list, in its order (the installer first).
    pub oci: Vec<Item>,
    /// For an `upgrades:` entry's pair: `upgrades[0] pair 2 of 8`.
    pub upgrade: Option<String>,
}

impl Worker {
    /// Everything the worker needs: its disk image, then the pull list.
    pub fn items(&self) -> Vec<Item> {
        let mut v = vec![Item::Image(self.disk.clone())];
        v.extend(self.oci.iter().cloned());
        v
    }
}

/// The mirror item of one image reference: an installer of the factory's
/// registry (`factory.talos.dev/<installer>/<schematic>`, fetched from
/// `--registry-url`) or an image of its own registry.
pub fn item_for_reference(reference: &str, what: &str) -> Result<Item> {
    if let Some(rest) = reference.strip_prefix(&format!("{}/", crate::pull_list::FACTORY_HOST)) {
        let repo = crate::oci_ref::repository_of(rest);
        let tag = rest[repo.len()..].trim_start_matches(':');
        if names::is_installer_repository(repo) && names::is_tag(tag) {
            return Ok(Item::Installer {
                repo: repo.to_string(),
                tag: tag.to_string(),
            });
        }
    }
    ExtraImage::parse(reference)
        .map(Item::Extra)
        .map_err(|e| Error::bad_input(format!("{what}: {e}")))
}

/// What `mirror sync` does about an item's cosign signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    No,
    /// Fetch `sha256-<hex>.sig` when the upstream has it.
    IfPresent,
    /// Fetch it and verify it with `--cosign-key`; missing or bad fails the item.
    Verify,
}

/// `"<what>: "` of an `at` such as `cfg: workers[0]`.
fn what_prefix(at: &str) -> &str {
    match at.find(": ") {
        Some(i) => &at[..i + 2],
        None => "",
    }
}

/// One thing to mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `/image/<schematic>/<version>/<asset>`.
    Image(ImageKey),
    /// `<installer>/<schematic>:<version>` from the installer registry.
    Installer { repo: String, tag: String },
    /// An `extraImages` entry through its registry.
    Extra(ExtraImage),
    /// `/talosctl/<version>/<file>` of the factory.
    Talosctl(crate::factory::TalosctlKey),
}

impl Item {
    /// How messages name the item.
    pub fn name(&self) -> String {
        match self {
            Item::Image(k) => format!("image {}", k.path()),
            // The reference a worker pulls, as `mirror plan` prints it.
            Item::Installer { tag, .. } => format!("installer {}:{tag}", item_repository(self)),
            Item::Extra(x) => format!("image {}", x.display()),
            Item::Talosctl(t) => format!("talosctl {}", t.path()),
        }
    }
}

/// A schematic given as an ID or `{file: path}` (relative to `base`);
/// `at` names it in messages (`cfg: schematics[0]`).
fn schematic_source(s: RawSchematic, base: &Path, at: &str) -> Result<SchematicSource> {
    Ok(match s {
        RawSchematic::Id(id) => {
            // An embedded schematic's name (`cozystack`) is taken for its ID.
            let id = crate::known_schematics::id_or_name(&id).to_string();
            if crate::schematic::is_valid_id(&id) {
                SchematicSource {
                    id,
                    canonical: None,
                    file: None,
                }
            } else {
                return Err(Error::bad_input(format!(
                    "{at}: {id:?} is not a 64-hex schematic ID (or give {{file: path}})"
                )));
            }
        }
        RawSchematic::File { file } => {
            let p = base.join(&file);
            let text = crate::input::read_string(
                &p,
                crate::input::MAX_INPUT,
                crate::input::Kind::FileOrPipe,
            )
            .map_err(|e| Error::bad_input(format!("{at}: file {}: {e}", p.display())))?;
            let (id, canonical) = crate::schematic::id_and_canonical(&text)
                .map_err(|e| Error::bad_input(format!("{at}: file {}: {e}", p.display())))?;
            SchematicSource {
                id,
                canonical: Some(canonical),
                file: Some(p),
            }
        }
    })
}

impl Config {
    /// Read and validate `path`; schematic files are relative to it.
    pub fn load(path: &Path) -> Result<Config> {
        Config::load_with(path, crate::matrix::Matrix::embedded())
    }

    /// [`Config::load`] with a support matrix (`--matrix`) for `workers:`.
    pub fn load_with(path: &Path, matrix: &crate::matrix::Matrix) -> Result<Config> {
        let text = crate::input::read_string(
            path,
            crate::input::MAX_INPUT,
            crate::input::Kind::FileOrPipe,
        )
        .map_err(|e| Error::bad_input(format!("--config {}: {e}", path.display())))?;
        crate::yaml::require_document(&text, &format!("--config {}", path.display()), "config")?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse_with(&text, base, &format!("--config {}", path.display()), matrix)
    }

    /// Parse config text; `base` resolves `{file: ...}` schematics.
    pub fn parse(text: &str, base: &Path, what: &str) -> Result<Config> {
        Config::parse_with(text, base, what, crate::matrix::Matrix::embedded())
    }

    /// [`Config::parse`] with a support matrix for `workers:`.
    pub fn parse_with(
        text: &str,
        base: &Path,
        what: &str,
        matrix: &crate::matrix::Matrix,
    ) -> Result<Config> {
        check_top_level(text, what)?;
        let raw: Raw = crate::yaml::from_str(text, what)?;
        let mut cfg = Config::default();
        for (i, s) in raw.schematics.into_iter().enumerate() {
            let src = schematic_source(s, base, &format!("{what}: schematics[{i}]"))?;
            if !cfg.schematics.iter().any(|x| x.id == src.id) {
                cfg.schematics.push(src);
            }
        }
        for (i, v) in raw.talos_versions.iter().enumerate() {
            let v = crate::version::Version::parse_named(v, &format!("talosVersions[{i}]"))
                .map_err(|e| Error::bad_input(format!("{what}: {e}")))?
                .to_string();
            if !cfg.versions.contains(&v) {
                cfg.versions.push(v);
            }
        }
        let probe = "0".repeat(64);
        for (i, a) in raw.images.iter().enumerate() {
            ImageKey::parse(&probe, "v1.0.0", a)
                .map_err(|e| Error::bad_input(format!("{what}: images[{i}]: {e}")))?;
            if !cfg.images.contains(a) {
                cfg.images.push(a.clone());
            }
        }
        for (i, r) in raw.installers.iter().enumerate() {
            if !names::is_installer_repository(&format!("{r}/{probe}")) {
                return Err(Error::bad_input(format!(
                    "{what}: installers[{i}]: {r:?} is not an installer repository (installer, installer-secureboot, <platform>-installer[-secureboot])"
                )));
            }
            if !cfg.installers.contains(r) {
                cfg.installers.push(r.clone());
            }
        }
        for x in &raw.extra_images {
            let x = ExtraImage::parse(x).map_err(|e| Error::bad_input(format!("{what}: {e}")))?;
            if !cfg.extra_images.contains(&x) {
                cfg.extra_images.push(x);
            }
        }
        let probe_version = "v1.11.0";
        for (i, t) in raw.talosctl.iter().enumerate() {
            crate::factory::TalosctlKey::from_platform(probe_version, t).map_err(|e| {
                Error::bad_input(format!(
                    "{what}: talosctl[{i}]: {t:?}: expected <os>-<arch> such as linux-amd64 ({e})"
                ))
            })?;
            if !cfg.talosctl.contains(t) {
                cfg.talosctl.push(t.clone());
            }
        }
        if !cfg.talosctl.is_empty() && cfg.versions.is_empty() {
            return Err(Error::bad_input(format!(
                "{what}: talosctl needs at least one talosVersions entry"
            )));
        }
        for (i, p) in raw.pxe.iter().enumerate() {
            crate::factory::FactoryDoc::pxe(&probe, probe_version, p)
                .map_err(|e| Error::bad_input(format!("{what}: pxe[{i}]: {e}")))?;
            if !cfg.pxe.contains(p) {
                cfg.pxe.push(p.clone());
            }
        }
        for (i, n) in raw.source_images.iter().enumerate() {
            if !crate::registry::source::is_source_image(n) {
                return Err(Error::bad_input(format!(
                    "{what}: sourceImages[{i}]: {n:?} is not a source image of the factory ({})",
                    crate::registry::source::SOURCE_IMAGES.join(", ")
                )));
            }
            if !cfg.source_images.contains(n) {
                cfg.source_images.push(n.clone());
            }
        }
        if !cfg.source_images.is_empty() && cfg.versions.is_empty() {
            return Err(Error::bad_input(format!(
                "{what}: sourceImages needs at least one talosVersions entry"
            )));
        }
        let needs_pairs =
            !cfg.images.is_empty() || !cfg.installers.is_empty() || !cfg.pxe.is_empty();
        if needs_pairs && (cfg.schematics.is_empty() || cfg.versions.is_empty()) {
            return Err(Error::bad_input(format!(
                "{what}: images, installers and pxe need at least one schematic and one talosVersions entry"
            )));
        }
        for (i, w) in raw.workers.into_iter().enumerate() {
            let at = format!("{what}: workers[{i}]");
            let worker = Config::worker(w, base, &at, &format!("workers[{i}]"), matrix)?;
            for n in &worker.pull.notes {
                cfg.notes.push(format!("workers[{i}]: {n}"));
            }
            cfg.workers.push(worker);
        }
        for (i, u) in raw.upgrades.into_iter().enumerate() {
            cfg.upgrade(u, base, what, i, matrix)?;
        }
        Ok(cfg)
    }

    /// Expand `upgrades[i]`: plan it, then each pair as a worker.
    fn upgrade(
        &mut self,
        u: RawUpgrade,
        base: &Path,
        what: &str,
        i: usize,
        matrix: &crate::matrix::Matrix,
    ) -> Result<()> {
        let key = format!("upgrades[{i}]");
        let at = format!("{what}: {key}");
        let names: Vec<String> = ["fromTalos", "fromKubernetes", "toTalos", "toKubernetes"]
            .iter()
            .map(|f| format!("{key}.{f}"))
            .collect();
        let plan = crate::upgrade::plan(
            matrix,
            &crate::upgrade::Question {
                from_talos: &u.from_talos,
                from_kubernetes: &u.from_kubernetes,
                to_talos: &u.to_talos,
                to_kubernetes: &u.to_kubernetes,
                replace: u.replace,
                names: crate::upgrade::Names {
                    from_talos: &names[0],
                    from_kubernetes: &names[1],
                    to_talos: &names[2],
                    to_kubernetes: &names[3],
                },
            },
        )
        .map_err(|e| match e {
            Error::BadInput(m) => Error::bad_input(format!("{what}: {m}")),
            Error::Refused(m) => Error::refused(format!("{at}: {m}")),
            e => e,
        })?;
        for n in &plan.notes {
            self.notes.push(format!("{key}: {n}"));
        }
        // The pairs whose release the image data knows; the others named.
        let all = plan.pairs().len();
        let (pairs, unknown) = crate::upgrade::imaged_pairs(matrix, &plan);
        for n in unknown {
            self.notes.push(format!("{key}: {n}"));
        }
        for (n, pair) in pairs.iter().enumerate() {
            let w = RawWorker {
                talos: pair.talos.to_string(),
                kubernetes: pair.kubernetes.to_string(),
                schematic: u.schematic.clone(),
                platform: u.platform.clone(),
                arch: u.arch.clone(),
                installer_repository: u.installer_repository.clone(),
                optional_images: u.optional_images,
            };
            let mut worker = Config::worker(w, base, &at, &key, matrix)?;
            worker.upgrade = Some(format!("{key} pair {} of {all}", n + 1));
            self.workers.push(worker);
        }
        Ok(())
    }

    fn worker(
        w: RawWorker,
        base: &Path,
        at: &str,
        key: &str,
        matrix: &crate::matrix::Matrix,
    ) -> Result<Worker> {
        let schematic = match w.schematic {
            Some(s) => schematic_source(s, base, &format!("{at}.schematic"))?,
            None => SchematicSource {
                id: crate::pull_list::VANILLA_SCHEMATIC.to_string(),
                canonical: None,
                file: None,
            },
        };
        let platform = w.platform.unwrap_or_else(|| DEFAULT_PLATFORM.to_string());
        crate::pull_list::check_platform(&platform, &format!("{at}.platform"))?;
        let arch = w.arch.unwrap_or_else(|| DEFAULT_ARCH.to_string());
        if !matches!(arch.as_str(), "amd64" | "arm64") {
            return Err(Error::bad_input(format!(
                "{at}.arch: {arch:?} is not amd64 or arm64"
            )));
        }
        let names = [
            format!("{key}.talos"),
            format!("{key}.kubernetes"),
            format!("{key}.schematic"),
            format!("{key}.installerRepository"),
            format!("{key}.platform"),
        ];
        let pull = crate::pull_list::plan(
            matrix,
            &crate::pull_list::PullRequest {
                talos: &w.talos,
                kubernetes: &w.kubernetes,
                schematic: Some(&schematic.id),
                installer_repository: w.installer_repository.as_deref(),
                // The installer stays the factory's generic one unless the
                // entry names a repository; the platform is the disk image's.
                platform: None,
                optional: w.optional_images,
                names: crate::pull_list::Names {
                    talos: &names[0],
                    kubernetes: &names[1],
                    schematic: &names[2],
                    installer_repository: &names[3],
                    platform: &names[4],
                },
            },
        )
        .map_err(|e| match e {
            Error::BadInput(m) if !m.starts_with(what_prefix(at)) => {
                Error::bad_input(format!("{}{m}", what_prefix(at)))
            }
            Error::Refused(m) => Error::refused(format!("{at}: {m}")),
            e => e,
        })?;
        let disk = ImageKey::parse(
            &schematic.id,
            &pull.talos.to_string(),
            &format!("{platform}-{arch}.raw.xz"),
        )
        .map_err(|e| Error::bad_input(format!("{at}: the disk image: {e}")))?;
        let mut oci = Vec::new();
        for p in &pull.images {
            oci.push(item_for_reference(&p.reference, at)?);
        }
        Ok(Worker {
            pull,
            schematic,
            platform,
            arch,
            disk,
            oci,
            upgrade: None,
        })
    }

    /// Every schematic of the config: `schematics:` and those of `workers:`
    /// (the ones given as files are taught to the factory before a sync).
    pub fn all_schematics(&self) -> Vec<&SchematicSource> {
        let mut out: Vec<&SchematicSource> = self.schematics.iter().collect();
        for w in &self.workers {
            if !out.iter().any(|s| s.id == w.schematic.id) {
                out.push(&w.schematic);
            }
        }
        out
    }

    /// Does `mirror sync` fetch the cosign signature of `item`? With
    /// `--cosign-key`, every installer and image (and it must verify);
    /// without, the OCI items of `workers:` (where the upstream has one).
    pub fn wants_signature(&self, item: &Item) -> Signature {
        if matches!(item, Item::Image(_) | Item::Talosctl(_)) {
            return Signature::No;
        }
        if !self.cosign_keys.is_empty() {
            return Signature::Verify;
        }
        if self.workers.iter().any(|w| w.oci.contains(item))
            || self.source_image_items().contains(item)
        {
            Signature::IfPresent
        } else {
            Signature::No
        }
    }

    /// The factory documents `mirror sync` keeps: the keys and lists of
    /// every release, and the iPXE script of each `pxe:` entry per
    /// schematic and `talosVersions` entry.
    pub fn factory_docs(&self) -> Vec<crate::factory::FactoryDoc> {
        let mut out = crate::factory::FactoryDoc::for_releases(&self.talos_versions());
        for s in &self.schematics {
            for v in &self.versions {
                for p in &self.pxe {
                    if let Ok(d) = crate::factory::FactoryDoc::pxe(&s.id, v, p) {
                        out.push(d);
                    }
                }
            }
        }
        out
    }

    /// Every Talos release of the config (`talosVersions`, then those of
    /// `workers:` as their disk images name them), each once.
    pub fn talos_versions(&self) -> Vec<String> {
        let mut out = self.versions.clone();
        for w in &self.workers {
            if !out.contains(&w.disk.version) {
                out.push(w.disk.version.clone());
            }
        }
        out
    }

    /// `sourceImages:` as items: `ghcr.io/siderolabs/<name>:<version>` for
    /// each `talosVersions` entry (the keys `/v2/siderolabs/<name>` reads).
    pub fn source_image_items(&self) -> Vec<Item> {
        use crate::registry::source;
        let mut out = Vec::new();
        for v in &self.versions {
            for n in &self.source_images {
                out.push(Item::Extra(ExtraImage {
                    host: source::SOURCE_HOST.to_string(),
                    repo: source::repository(n),
                    reference: v.clone(),
                }));
            }
        }
        out
    }

    /// Every item, in a stable order.
    pub fn items(&self) -> Vec<Item> {
        let mut out = Vec::new();
        for s in &self.schematics {
            for v in &self.versions {
                for a in &self.images {
                    if let Ok(k) = ImageKey::parse(&s.id, v, a) {
                        out.push(Item::Image(k));
                    }
                }
                for r in &self.installers {
                    out.push(Item::Installer {
                        repo: format!("{r}/{}", s.id),
                        tag: v.clone(),
                    });
                }
                // What each iPXE script boots.
                for p in &self.pxe {
                    for a in crate::factory::pxe_assets(p) {
                        if let Ok(k) = ImageKey::parse(&s.id, v, &a) {
                            let item = Item::Image(k);
                            if !out.contains(&item) {
                                out.push(item);
                            }
                        }
                    }
                }
            }
        }
        for v in &self.versions {
            for t in &self.talosctl {
                if let Ok(k) = crate::factory::TalosctlKey::from_platform(v, t) {
                    out.push(Item::Talosctl(k));
                }
            }
        }
        for x in self.source_image_items() {
            if !out.contains(&x) {
                out.push(x);
            }
        }
        for x in &self.extra_images {
            if !out.contains(&Item::Extra(x.clone())) {
                out.push(Item::Extra(x.clone()));
            }
        }
        for w in &self.workers {
            for item in w.items() {
                if !out.contains(&item) {
                    out.push(item);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    /// `text` parsed in a folder holding `s.yaml`, a schematic file.
    fn parse_beside_a_schematic_file(text: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.yaml"), "customization: {}\n").unwrap();
        Config::parse(text, dir.path(), "cfg").unwrap()
    }

    #[test]
    fn extra_images() {
        let x = ExtraImage::parse("ghcr.io/siderolabs/kubelet:v1.35.6").unwrap();
        assert_eq!(
            (x.host.as_str(), x.repo.as_str(), x.reference.as_str()),
            ("ghcr.io", "siderolabs/kubelet", "v1.35.6")
        );
        let x = ExtraImage::parse("nginx").unwrap();
        assert_eq!(x.display(), "docker.io/library/nginx:latest");
        let x = ExtraImage::parse("127.0.0.1:5000/a/b").unwrap();
        assert_eq!(x.display(), "127.0.0.1:5000/a/b:latest");
        let d = format!("sha256:{S}");
        let x = ExtraImage::parse(&format!("ghcr.io/a/b:1@{d}")).unwrap();
        assert_eq!(x.reference, d);
        for bad in ["ghcr.io/A/b:1", "ghcr.io/a/b:", "ghcr.io/a@sha256:12", ""] {
            assert!(ExtraImage::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn workers_expand() {
        let text = format!(
            "workers:\n  - {{talos: v1.13.9, kubernetes: v1.35, schematic: {S}}}\n  - {{talos: v1.12.11, kubernetes: 1.34.2, schematic: {{file: s.yaml}}, platform: nocloud, arch: arm64, installerRepository: registry.example/talos/installer, optionalImages: true}}\nextraImages: [ghcr.io/siderolabs/kubelet:v1.35.6]\n"
        );
        let c = parse_beside_a_schematic_file(&text);
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        let names: Vec<String> = c.items().iter().map(Item::name).collect();
        let v = crate::pull_list::VANILLA_SCHEMATIC;
        assert_eq!(
            names,
            [
                "image ghcr.io/siderolabs/kubelet:v1.35.6".to_string(),
                format!("image /image/{S}/v1.13.9/openstack-amd64.raw.xz"),
                format!("installer factory.talos.dev/installer/{S}:v1.13.9"),
                "image registry.k8s.io/pause:3.10.1".to_string(),
                format!("image /image/{v}/v1.12.11/nocloud-arm64.raw.xz"),
                format!("image registry.example/talos/installer/{v}:v1.12.11"),
                "image ghcr.io/siderolabs/kubelet:v1.34.2".to_string(),
                "image registry.k8s.io/pause:3.10.1".to_string(),
                "image ghcr.io/siderolabs/flannel:v0.27.4".to_string(),
                "image registry.k8s.io/kube-proxy:v1.34.2".to_string(),
                "image registry.k8s.io/coredns/coredns:v1.14.2".to_string(),
            ]
            .into_iter()
            .fold(Vec::<String>::new(), |mut acc, n| {
                if !acc.contains(&n) {
                    acc.push(n);
                }
                acc
            })
        );
        // The file schematic is taught to the factory; the ID one is not.
        let all = c.all_schematics();
        assert_eq!(all.len(), 2);
        assert!(all[1].canonical.is_some());
        // Signatures: for the workers' OCI items where present (the kubelet
        // the first worker shares with extraImages too); none for disk images
        // or for extraImages alone.
        let items = c.items();
        assert_eq!(c.wants_signature(&items[1]), Signature::No);
        assert_eq!(c.wants_signature(&items[2]), Signature::IfPresent);
        assert_eq!(c.wants_signature(&items[0]), Signature::IfPresent);
        let plain = parse_beside_a_schematic_file("extraImages: [ghcr.io/a/b:1]\n");
        assert_eq!(plain.wants_signature(&plain.items()[0]), Signature::No);
        let text = c.plan_text();
        assert!(text.contains("worker 1: Talos v1.12.11"), "{text}");
        assert!(text.contains("(every platform of the index)"), "{text}");
        assert!(
            text.contains("+ cosign signature registry.k8s.io/pause:sha256-<manifest digest>.sig"),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("{} items\n", items.len())),
            "{text}"
        );
        let j = c.plan_json();
        assert_eq!(
            j["workers"][0]["diskImage"],
            format!("/image/{S}/v1.13.9/openstack-amd64.raw.xz")
        );
        assert_eq!(j["workers"][1]["images"][3]["optional"], true);
        assert_eq!(j["items"].as_array().unwrap().len(), items.len());
    }

    #[test]
    fn bad_workers() {
        let dir = tempfile::tempdir().unwrap();
        for (bad, code, want) in [
            ("workers: [{talos: v1.13.9}]\n", 2, "kubernetes"),
            (
                "workers: [{talos: x, kubernetes: v1.35}]\n",
                2,
                "cfg: workers[0].talos",
            ),
            (
                "workers: [{talos: v1.13.9, kubernetes: v1.35, arch: s390x}]\n",
                2,
                "workers[0].arch",
            ),
            (
                "workers: [{talos: v1.13.9, kubernetes: v1.35, platform: A}]\n",
                2,
                "workers[0].platform",
            ),
            (
                "workers: [{talos: v1.13.9, kubernetes: v1.35, schematic: abc}]\n",
                2,
                "workers[0].schematic",
            ),
            (
                "workers: [{talos: v1.13.9, kubernetes: v1.35, bogus: 1}]\n",
                2,
                "bogus",
            ),
            (
                "workers: [{talos: v1.13.9, kubernetes: v1.30}]\n",
                1,
                "cfg: workers[0]: Kubernetes v1.30 is not supported",
            ),
            (
                "workers: [{talos: v1.7.0, kubernetes: v1.30}]\n",
                1,
                "no image data",
            ),
        ] {
            let e = Config::parse(bad, dir.path(), "cfg").unwrap_err();
            assert_eq!(e.exit_code(), code, "{bad}: {e}");
            assert!(e.to_string().contains(want), "{bad}: {e}");
        }
        // A newer release: a note, not an error.
        let c = Config::parse(
            "workers: [{talos: v1.13.20, kubernetes: v1.35}]\n",
            dir.path(),
            "cfg",
        )
        .unwrap();
        assert_eq!(c.notes.len(), 1);
        assert!(c.notes[0].starts_with("workers[0]: "), "{:?}", c.notes);
    }

    /// Every key the typed config reads is in [`KEYS`] (the check before
    /// it would refuse one it lacks), and a key of neither is refused by
    /// name with the nearest known key.
    #[test]
    fn top_level_keys() {
        let e = crate::yaml::from_str::<Raw>("noSuchKey: []\n", "cfg").unwrap_err();
        let msg = e.to_string();
        let listed = msg.split_once("expected one of").unwrap().1;
        let read: Vec<&str> = listed.split('`').skip(1).step_by(2).collect();
        assert!(read.len() >= 9, "{msg}");
        for k in read {
            assert!(KEYS.contains(&k), "{k} is read but not in KEYS");
        }
        let e = Config::parse("imagse: []\n", Path::new("."), "cfg").unwrap_err();
        assert_eq!(
            e.to_string().split_once(", expected").unwrap().0,
            "cfg: unknown field `imagse` (nearest known: `images`)"
        );
    }

    #[test]
    fn parse_and_items() {
        let text = format!(
            "schematics: [{S}, {{file: s.yaml}}]\ntalosVersions: [1.13.6]\nimages: [openstack-amd64.raw.xz]\ninstallers: [installer]\nextraImages: [ghcr.io/siderolabs/kubelet:v1.35.6]\n"
        );
        let c = parse_beside_a_schematic_file(&text);
        assert_eq!(c.versions, ["v1.13.6"]);
        assert!(c.schematics[1].canonical.is_some());
        let items = c.items();
        assert_eq!(items.len(), 5);
        assert_eq!(
            items[1].name(),
            format!("installer factory.talos.dev/installer/{S}:v1.13.6")
        );
        for bad in [
            "schematics: [abc]\n",
            "schematics: [{file: missing.yaml}]\n",
            "talosVersions: [x]\n",
            &format!("schematics: [{S}]\ntalosVersions: [v1.13.6]\nimages: [../x]\n"),
            &format!("schematics: [{S}]\ntalosVersions: [v1.13.6]\ninstallers: [foo]\n"),
            "unknown: 1\n",
            "images: [metal-amd64.iso]\n",
        ] {
            let e = Config::parse(bad, Path::new("/nonexistent"), "cfg").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn source_images() {
        let dir = tempfile::tempdir().unwrap();
        let c = Config::parse(
            "talosVersions: [v1.13.6, 1.12.4]
sourceImages: [imager, installer-base, imager]
",
            dir.path(),
            "cfg",
        )
        .unwrap();
        let names: Vec<String> = c.items().iter().map(Item::name).collect();
        assert_eq!(
            names,
            [
                "image ghcr.io/siderolabs/imager:v1.13.6",
                "image ghcr.io/siderolabs/installer-base:v1.13.6",
                "image ghcr.io/siderolabs/imager:v1.12.4",
                "image ghcr.io/siderolabs/installer-base:v1.12.4",
            ]
        );
        // Their signatures are fetched where the upstream has them.
        for i in c.items() {
            assert_eq!(c.wants_signature(&i), Signature::IfPresent, "{}", i.name());
        }
        let plan = c.plan_text();
        assert!(plan.contains("image ghcr.io/siderolabs/imager:v1.13.6\n    + cosign signature ghcr.io/siderolabs/imager:sha256-<manifest digest>.sig"), "{plan}");
        for (bad, want) in [
            (
                "talosVersions: [v1.13.6]
sourceImages: [kubelet]
",
                "cfg: sourceImages[0]: \"kubelet\" is not a source image of the factory (installer-base, installer, imager, extensions, overlays, talosctl-all)",
            ),
            (
                "sourceImages: [imager]
",
                "sourceImages needs at least one talosVersions entry",
            ),
        ] {
            let e = Config::parse(bad, dir.path(), "cfg").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().contains(want), "{bad}: {e}");
        }
    }
}
