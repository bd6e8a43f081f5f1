//! The mirror config (`mirror.yaml`) and the items it names.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::imagecache::ImageKey;
use crate::registry::names;

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
}

#[derive(Debug, Deserialize)]
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
        let bad = |why: &str| Error::bad_input(format!("extraImages: {s:?}: {why}"));
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (s, None),
        };
        let (host, rest) = match name.split_once('/') {
            Some((h, r)) if h.contains('.') || h.contains(':') || h == "localhost" => {
                (h.to_string(), r.to_string())
            }
            _ => ("docker.io".to_string(), name.to_string()),
        };
        // A tag is after the last ':' of the last path segment.
        let last = rest.rsplit('/').next().unwrap_or("");
        let (repo, tag) = match last.rsplit_once(':') {
            Some((_, t)) => (
                rest[..rest.len() - t.len() - 1].to_string(),
                Some(t.to_string()),
            ),
            None => (rest.clone(), None),
        };
        let repo = if host == "docker.io" && !repo.contains('/') {
            format!("library/{repo}")
        } else {
            repo
        };
        if !names::is_registry_host(&host) {
            return Err(bad("the registry host is not host[:port]"));
        }
        if !names::is_repository(&repo) {
            return Err(bad("not a valid repository name"));
        }
        let reference = match (digest, tag) {
            (Some(d), _) => names::Digest::parse(d)
                .map_err(|_| bad("the digest is not sha256:<64 hex>"))?
                .as_str()
                .to_string(),
            (None, Some(t)) => {
                if !names::is_tag(&t) {
                    return Err(bad("not a valid tag"));
                }
                t
            }
            (None, None) => "latest".to_string(),
        };
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
}

impl Item {
    /// How messages name the item.
    pub fn name(&self) -> String {
        match self {
            Item::Image(k) => format!("image {}", k.path()),
            Item::Installer { repo, tag } => format!("installer {repo}:{tag}"),
            Item::Extra(x) => format!("image {}", x.display()),
        }
    }
}

impl Config {
    /// Read and validate `path`; schematic files are relative to it.
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::bad_input(format!("--config {}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, base, &format!("--config {}", path.display()))
    }

    /// Parse config text; `base` resolves `{file: ...}` schematics.
    pub fn parse(text: &str, base: &Path, what: &str) -> Result<Config> {
        let raw: Raw = crate::yaml::from_str(text, what)?;
        let mut cfg = Config::default();
        for (i, s) in raw.schematics.into_iter().enumerate() {
            let src = match s {
                RawSchematic::Id(id) => {
                    if crate::schematic::is_valid_id(&id) {
                        SchematicSource {
                            id,
                            canonical: None,
                            file: None,
                        }
                    } else {
                        return Err(Error::bad_input(format!(
                            "{what}: schematics[{i}]: {id:?} is not a 64-hex schematic ID (or give {{file: path}})"
                        )));
                    }
                }
                RawSchematic::File { file } => {
                    let p = base.join(&file);
                    let text = std::fs::read_to_string(&p).map_err(|e| {
                        Error::bad_input(format!(
                            "{what}: schematics[{i}]: file {}: {e}",
                            p.display()
                        ))
                    })?;
                    let (id, canonical) =
                        crate::schematic::id_and_canonical(&text).map_err(|e| {
                            Error::bad_input(format!(
                                "{what}: schematics[{i}]: file {}: {e}",
                                p.display()
                            ))
                        })?;
                    SchematicSource {
                        id,
                        canonical: Some(canonical),
                        file: Some(p),
                    }
                }
            };
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
        let needs_pairs = !cfg.images.is_empty() || !cfg.installers.is_empty();
        if needs_pairs && (cfg.schematics.is_empty() || cfg.versions.is_empty()) {
            return Err(Error::bad_input(format!(
                "{what}: images and installers need at least one schematic and one talosVersions entry"
            )));
        }
        Ok(cfg)
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
            }
        }
        for x in &self.extra_images {
            out.push(Item::Extra(x.clone()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

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
    fn parse_and_items() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.yaml"), "customization: {}\n").unwrap();
        let text = format!(
            "schematics: [{S}, {{file: s.yaml}}]\ntalosVersions: [1.13.6]\nimages: [openstack-amd64.raw.xz]\ninstallers: [installer]\nextraImages: [ghcr.io/siderolabs/kubelet:v1.35.6]\n"
        );
        let c = Config::parse(&text, dir.path(), "cfg").unwrap();
        assert_eq!(c.versions, ["v1.13.6"]);
        assert!(c.schematics[1].canonical.is_some());
        let items = c.items();
        assert_eq!(items.len(), 5);
        assert_eq!(items[1].name(), format!("installer installer/{S}:v1.13.6"));
        for bad in [
            "schematics: [abc]\n",
            "schematics: [{file: missing.yaml}]\n",
            "talosVersions: [x]\n",
            &format!("schematics: [{S}]\ntalosVersions: [v1.13.6]\nimages: [../x]\n"),
            &format!("schematics: [{S}]\ntalosVersions: [v1.13.6]\ninstallers: [foo]\n"),
            "unknown: 1\n",
            "images: [metal-amd64.iso]\n",
        ] {
            let e = Config::parse(bad, dir.path(), "cfg").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
        }
    }
}
