//! The per-release image table: what a Talos worker pulls, release by
//! release (`matrix/images.yaml`, embedded; a `--matrix` file may replace it
//! with an `images:` section of the same shape). The header of the data file
//! says where each column comes from in Talos' source.
//!
//! Only data and lookup live here; the pull list a worker gets from a
//! (Talos, Kubernetes, schematic) triple is [`crate::pull_list`].

use std::cmp::Ordering;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::version::Version;

/// The embedded data file.
pub const EMBEDDED: &str = include_str!("../../matrix/images.yaml");

/// The images of one Talos release.
#[derive(Debug, Clone, PartialEq)]
pub struct ReleaseImages {
    /// The release, `v1.13.9` (patch always present).
    pub talos: Version,
    /// The release's own default Kubernetes version (informational).
    pub kubernetes: Option<Version>,
    /// containerd's sandbox image, a full reference (`registry.k8s.io/pause:3.10.1`).
    pub pause: String,
    /// The kubelet repository; the tag is `v<kubernetes>`.
    pub kubelet: String,
    /// Talos' own default install image repository (the tag is the release).
    pub installer: String,
    /// Optional images (Talos-managed CNI and add-ons): full references, or
    /// the repository for kube-proxy (tagged `v<kubernetes>`).
    pub flannel: Option<String>,
    pub kube_proxy: Option<String>,
    pub coredns: Option<String>,
    pub kube_network_policies: Option<String>,
    /// Where a replacement file's row came from (free text).
    pub source: Option<String>,
    /// Set when the row's values were not read at its own tag but carried
    /// forward from the nearest readable release: from where, and why.
    pub carried: Option<String>,
}

impl ReleaseImages {
    /// Talos' default installer for this release: `<installer>:<release>`.
    pub fn talos_default_installer(&self) -> String {
        format!("{}:{}", self.installer, self.talos)
    }

    /// Does Talos publish `ghcr.io/siderolabs/installer` for this release?
    /// (Not from 1.14 on, where the default is the Image Factory's.)
    #[cfg(test)]
    fn publishes_ghcr_installer(&self) -> bool {
        self.installer == "ghcr.io/siderolabs/installer"
    }
}

/// A row as written in the file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawRelease {
    talos: String,
    #[serde(default)]
    kubernetes: Option<String>,
    pause: String,
    kubelet: String,
    installer: String,
    #[serde(default)]
    flannel: Option<String>,
    #[serde(default)]
    kube_proxy: Option<String>,
    #[serde(default)]
    coredns: Option<String>,
    #[serde(default)]
    kube_network_policies: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    carried: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    releases: Vec<RawRelease>,
}

/// The whole table, oldest release first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ImageTable {
    releases: Vec<ReleaseImages>,
}

/// The answer of [`ImageTable::lookup`]: the row used, and a note for
/// stderr when it is not the exact release asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Lookup<'a> {
    pub release: &'a ReleaseImages,
    pub note: Option<String>,
}

/// Release order: the core triple, then a pre-release before its release
/// (`v1.14.0-rc.1 < v1.14.0`), pre-releases compared by dot-separated
/// identifiers (numbers numerically), as semver does.
pub fn release_cmp(a: &Version, b: &Version) -> Ordering {
    a.core().cmp(&b.core()).then_with(|| {
        let pre = |v: &Version| {
            v.pre
                .as_deref()
                .map(|p| p.split('+').next().unwrap_or("").to_string())
                .filter(|p| !p.is_empty())
        };
        match (pre(a), pre(b)) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) => {
                let mut xi = x.split('.');
                let mut yi = y.split('.');
                loop {
                    match (xi.next(), yi.next()) {
                        (None, None) => return Ordering::Equal,
                        (None, Some(_)) => return Ordering::Less,
                        (Some(_), None) => return Ordering::Greater,
                        (Some(p), Some(q)) => {
                            let o = match (p.parse::<u64>(), q.parse::<u64>()) {
                                (Ok(m), Ok(n)) => m.cmp(&n),
                                (Ok(_), Err(_)) => Ordering::Less,
                                (Err(_), Ok(_)) => Ordering::Greater,
                                (Err(_), Err(_)) => p.cmp(q),
                            };
                            if o != Ordering::Equal {
                                return o;
                            }
                        }
                    }
                }
            }
        }
    })
}

/// `host[:port]/path[:tag]`, lowercase, as the data file writes images.
/// `tagged`: a tag is required (full reference) or forbidden (repository).
fn check_ref(s: &str, tagged: bool, at: &str) -> Result<String> {
    let bad = |why: &str| Error::bad_input(format!("{at}: {s:?} {why}"));
    let (host, rest) = s
        .split_once('/')
        .ok_or_else(|| bad("is not host/repository"))?;
    if !(host.contains('.') || host.contains(':') || host == "localhost")
        || !host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b".-:".contains(&b))
    {
        return Err(bad("does not start with a registry host"));
    }
    let last = rest.rsplit('/').next().unwrap_or("");
    let (repo, tag) = match last.rsplit_once(':') {
        Some((_, t)) => (&rest[..rest.len() - t.len() - 1], Some(t)),
        None => (rest, None),
    };
    let repo_ok = !repo.is_empty()
        && repo.split('/').all(|seg| {
            !seg.is_empty()
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        });
    if !repo_ok {
        return Err(bad("is not a valid repository name"));
    }
    match (tag, tagged) {
        (Some(t), true)
            if !t.is_empty()
                && t.len() <= 128
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)) =>
        {
            Ok(s.to_string())
        }
        (None, false) => Ok(s.to_string()),
        (_, true) => Err(bad("is not host/repository:tag")),
        (Some(_), false) => Err(bad("must be a repository without a tag")),
    }
}

impl ImageTable {
    /// Parse a data file of the embedded shape (`releases: [...]`).
    pub fn from_yaml(text: &str, what: &str) -> Result<ImageTable> {
        let raw: RawFile = crate::yaml::from_str(text, what)?;
        ImageTable::from_raw(raw.releases, &format!("{what}: releases"))
    }

    /// Build the table from rows; `what` names the list in messages
    /// (`--matrix f.yaml: images`).
    pub fn from_raw(rows: Vec<RawRelease>, what: &str) -> Result<ImageTable> {
        if rows.is_empty() {
            return Err(Error::bad_input(format!("{what}: empty list")));
        }
        let mut releases: Vec<ReleaseImages> = Vec::with_capacity(rows.len());
        for (i, r) in rows.into_iter().enumerate() {
            let at = |field: &str| format!("{what}[{i}].{field}");
            let talos = Version::parse_named(&r.talos, &at("talos"))?;
            if talos.patch.is_none() {
                return Err(Error::bad_input(format!(
                    "{}: {:?} must be a release such as \"v1.13.9\"",
                    at("talos"),
                    r.talos
                )));
            }
            let kubernetes = r
                .kubernetes
                .as_deref()
                .map(|k| Version::parse_named(k, &at("kubernetes")))
                .transpose()?;
            let opt = |v: &Option<String>, field: &str, tagged: bool| {
                v.as_deref()
                    .map(|s| check_ref(s, tagged, &at(field)))
                    .transpose()
            };
            let row = ReleaseImages {
                pause: check_ref(&r.pause, true, &at("pause"))?,
                kubelet: check_ref(&r.kubelet, false, &at("kubelet"))?,
                installer: check_ref(&r.installer, false, &at("installer"))?,
                flannel: opt(&r.flannel, "flannel", true)?,
                kube_proxy: opt(&r.kube_proxy, "kubeProxy", false)?,
                coredns: opt(&r.coredns, "coredns", true)?,
                kube_network_policies: opt(&r.kube_network_policies, "kubeNetworkPolicies", true)?,
                source: r.source,
                carried: r.carried,
                talos,
                kubernetes,
            };
            if releases
                .iter()
                .any(|x| release_cmp(&x.talos, &row.talos) == Ordering::Equal)
            {
                return Err(Error::bad_input(format!(
                    "{}: Talos {} appears twice",
                    at("talos"),
                    row.talos
                )));
            }
            releases.push(row);
        }
        releases.sort_by(|a, b| release_cmp(&a.talos, &b.talos));
        Ok(ImageTable { releases })
    }

    /// Every release, oldest first.
    pub fn releases(&self) -> &[ReleaseImages] {
        &self.releases
    }

    /// The row for `talos`: the exact release; for a bare minor (`v1.13`)
    /// or a release newer than the data, the newest known release of its
    /// minor, with a note saying so. A minor the table does not cover, or
    /// an older release it lacks, is refused (exit 1).
    pub fn lookup(&self, talos: &Version) -> Result<Lookup<'_>> {
        let same_minor: Vec<&ReleaseImages> = self
            .releases
            .iter()
            .filter(|r| r.talos.minor_key() == talos.minor_key())
            .collect();
        let span = match (self.releases.first(), self.releases.last()) {
            (Some(a), Some(b)) => format!("{} to {}", a.talos, b.talos),
            _ => "nothing".into(),
        };
        // A bare minor means a release: the newest stable one, never a
        // pre-release (one is taken only when asked for by name).
        let stable = same_minor
            .iter()
            .rev()
            .find(|r| r.talos.pre.is_none())
            .copied();
        if same_minor.is_empty() {
            let mut minors: Vec<String> = self
                .releases
                .iter()
                .map(|r| r.talos.minor_string())
                .collect();
            minors.dedup();
            return Err(Error::refused(format!(
                "no image data for Talos {talos}: the data knows the minors {}",
                minors.join(", ")
            )));
        }
        if talos.patch.is_none() {
            return match stable {
                Some(newest) => Ok(Lookup {
                    release: newest,
                    note: Some(format!(
                        "Talos {talos}: using {}, the newest release of {} the image data knows",
                        newest.talos,
                        talos.minor_string()
                    )),
                }),
                None => Err(Error::refused(format!(
                    "no stable Talos {} release in the image data (only {}): give the release",
                    talos.minor_string(),
                    same_minor
                        .iter()
                        .map(|r| r.talos.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            };
        }
        let Some(newest) = same_minor.last().copied() else {
            return Err(Error::refused(format!(
                "no image data for Talos {talos} (minor {}): the data covers {span}",
                talos.minor_string()
            )));
        };
        if let Some(r) = same_minor
            .iter()
            .find(|r| release_cmp(&r.talos, talos) == Ordering::Equal)
        {
            return Ok(Lookup {
                release: r,
                note: None,
            });
        }
        if release_cmp(talos, &newest.talos) == Ordering::Greater {
            return Ok(Lookup {
                release: newest,
                note: Some(format!(
                    "Talos {talos} is newer than the image data: the installer is tagged {talos} as asked; the other images are chosen as for {}, the newest {} release the data knows",
                    newest.talos,
                    talos.minor_string()
                )),
            });
        }
        let known: Vec<String> = same_minor.iter().map(|r| r.talos.to_string()).collect();
        Err(Error::refused(format!(
            "no image data for Talos {talos}: the data knows {} releases {}",
            talos.minor_string(),
            known.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn table() -> ImageTable {
        ImageTable::from_yaml(EMBEDDED, "embedded").unwrap()
    }

    /// Values checked against Talos' source by hand (`git show <tag>:<path>`
    /// in github.com/siderolabs/talos), independent of the extraction that
    /// wrote the data file.
    #[test]
    fn the_table_holds_talos_values_for_several_minors() {
        let t = table();
        let get = |s: &str| t.lookup(&v(s)).unwrap().release.clone();
        // v1.8.0:pkg/images/list.go `DefaultSandboxImage = "registry.k8s.io/pause:3.9"`,
        // constants.go FlannelVersion "v0.25.6", DefaultCoreDNSVersion "v1.11.3".
        let r = get("v1.8.0");
        assert_eq!(r.pause, "registry.k8s.io/pause:3.9");
        assert_eq!(r.kubelet, "ghcr.io/siderolabs/kubelet");
        assert_eq!(r.installer, "ghcr.io/siderolabs/installer");
        assert_eq!(
            r.flannel.as_deref(),
            Some("ghcr.io/siderolabs/flannel:v0.25.6")
        );
        assert_eq!(
            r.coredns.as_deref(),
            Some("registry.k8s.io/coredns/coredns:v1.11.3")
        );
        assert_eq!(r.kube_proxy.as_deref(), Some("registry.k8s.io/kube-proxy"));
        assert_eq!(r.kube_network_policies, None);
        // v1.8.3:pkg/images/list.go moved to pause:3.10 within the 1.8 minor.
        assert_eq!(get("v1.8.2").pause, "registry.k8s.io/pause:3.9");
        assert_eq!(get("v1.8.3").pause, "registry.k8s.io/pause:3.10");
        // v1.10.9: pause 3.10, CoreDNS v1.12.1, flannel v0.26.7.
        let r = get("v1.10.9");
        assert_eq!(r.pause, "registry.k8s.io/pause:3.10");
        assert_eq!(
            r.flannel.as_deref(),
            Some("ghcr.io/siderolabs/flannel:v0.26.7")
        );
        // v1.12.7 -> v1.12.8: pause 3.10 -> 3.10.1 inside 1.12.
        assert_eq!(get("v1.12.7").pause, "registry.k8s.io/pause:3.10");
        assert_eq!(get("v1.12.8").pause, "registry.k8s.io/pause:3.10.1");
        // v1.13.9: pause 3.10.1 (the value for 1.13), flannel
        // "0.28.8" without `v` (commit 57b8616), kube-network-policies v1.1.0,
        // DefaultKubernetesVersion 1.36.3.
        let r = get("v1.13.9");
        assert_eq!(r.pause, "registry.k8s.io/pause:3.10.1");
        assert_eq!(
            r.flannel.as_deref(),
            Some("ghcr.io/siderolabs/flannel:0.28.8")
        );
        assert_eq!(
            r.kube_network_policies.as_deref(),
            Some("registry.k8s.io/networking/kube-network-policies:v1.1.0")
        );
        assert_eq!(r.kubernetes, Some(v("1.36.3")));
        assert!(r.publishes_ghcr_installer());
        assert_eq!(
            r.talos_default_installer(),
            "ghcr.io/siderolabs/installer:v1.13.9"
        );
        // v1.14.0-rc.1: pause 3.10.2; images.go InstallerImage("metal") with
        // DefaultInstallerImageSchematic (the vanilla schematic) on the factory.
        let r = get("v1.14.0-rc.1");
        assert_eq!(r.pause, "registry.k8s.io/pause:3.10.2");
        assert_eq!(
            r.installer,
            "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
        );
        assert!(!r.publishes_ghcr_installer());
    }

    #[test]
    fn every_release_from_1_8_0_is_there() {
        let t = table();
        let names: Vec<String> = t.releases().iter().map(|r| r.talos.to_string()).collect();
        assert_eq!(names.first().map(String::as_str), Some("v1.8.0"));
        assert_eq!(names.last().map(String::as_str), Some("v1.15.0"));
        // Patch counts per minor as tagged in Talos (1.8.0-1.8.4, ..., 1.13.0-1.13.9).
        // 1.14.0-1.14.6 are carried from v1.14.0-rc.1 (marked so), 1.15.0
        // from Talos main at ad8823176e75 (no 1.15 tag yet).
        for (minor, last) in [
            (8, 4),
            (9, 6),
            (10, 9),
            (11, 6),
            (12, 11),
            (13, 9),
            (14, 6),
            (15, 0),
        ] {
            for p in 0..=last {
                let want = format!("v1.{minor}.{p}");
                assert!(names.contains(&want), "{want} missing");
            }
            assert!(!names.contains(&format!("v1.{minor}.{}", last + 1)));
        }
        assert_eq!(names.len(), 5 + 7 + 10 + 7 + 12 + 10 + 1 + 7 + 1);
        for r in t.releases() {
            let carried = r.talos.minor >= 14 && r.talos.pre.is_none();
            assert_eq!(r.carried.is_some(), carried, "{}", r.talos);
        }
        for r in t.releases() {
            assert!(r.pause.starts_with("registry.k8s.io/pause:"), "{}", r.talos);
            assert!(r.flannel.is_some() && r.coredns.is_some() && r.kube_proxy.is_some());
        }
    }

    #[test]
    fn lookup_rules() {
        let t = table();
        // exact
        let l = t.lookup(&v("1.12.3")).unwrap();
        assert_eq!(l.release.talos, v("v1.12.3"));
        assert!(l.note.is_none());
        // newer than the data: the newest of its minor, with a note
        let l = t.lookup(&v("v1.13.42")).unwrap();
        assert_eq!(l.release.talos.to_string(), "v1.13.9");
        assert!(l.note.unwrap().contains("newer than the image data"));
        let l = t.lookup(&v("v1.14.0")).unwrap();
        assert_eq!(l.release.talos.to_string(), "v1.14.0");
        // a bare minor: the newest stable release, never a pre-release
        let l = t.lookup(&v("1.14")).unwrap();
        assert_eq!(l.release.talos.to_string(), "v1.14.6");
        let l = t.lookup(&v("v1.14.7")).unwrap();
        assert_eq!(l.release.talos.to_string(), "v1.14.6");
        // a bare minor
        let l = t.lookup(&v("1.11")).unwrap();
        assert_eq!(l.release.talos.to_string(), "v1.11.6");
        assert!(l.note.is_some());
        // unknown minors and missing older releases are refused
        for s in ["1.7.5", "1.16.0", "v1.14.0-beta.0", "v1.13.0-rc.0"] {
            let e = t.lookup(&v(s)).unwrap_err();
            assert_eq!(e.exit_code(), 1, "{s}");
        }
    }

    #[test]
    fn release_order() {
        let order = [
            "1.14.0-alpha.0",
            "1.14.0-alpha.2",
            "1.14.0-beta.0",
            "1.14.0-rc.1",
            "1.14.0-rc.10",
            "1.14.0",
            "1.14.1",
        ];
        for w in order.windows(2) {
            assert_eq!(release_cmp(&v(w[0]), &v(w[1])), Ordering::Less, "{w:?}");
        }
    }

    #[test]
    fn bad_rows_are_bad_input() {
        let row = |extra: &str| {
            format!(
                "releases:\n  - talos: v1.99.0\n    pause: registry.k8s.io/pause:3.10\n    kubelet: ghcr.io/siderolabs/kubelet\n    installer: ghcr.io/siderolabs/installer\n{extra}"
            )
        };
        assert!(ImageTable::from_yaml(&row(""), "t").is_ok());
        for bad in [
            "releases: []\n".to_string(),
            row("    bogus: 1\n"),
            row("    flannel: ghcr.io/siderolabs/flannel\n"),
            row("    kubeProxy: registry.k8s.io/kube-proxy:v1\n"),
            "releases:\n  - talos: v1.99\n    pause: a.b/p:1\n    kubelet: a.b/k\n    installer: a.b/i\n"
                .to_string(),
            "releases:\n  - talos: v1.99.0\n    pause: pause:3.10\n    kubelet: a.b/k\n    installer: a.b/i\n"
                .to_string(),
            format!(
                "{}  - talos: v1.99.0\n    pause: a.b/p:1\n    kubelet: a.b/k\n    installer: a.b/i\n",
                row("")
            ),
        ] {
            let e = ImageTable::from_yaml(&bad, "t").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            assert!(e.to_string().starts_with("t: "), "{e}");
        }
    }
}
