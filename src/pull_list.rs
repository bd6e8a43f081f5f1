//! The worker's pull list: every image a Talos worker pulls, planned from
//! one (Talos, Kubernetes, schematic) triple and the per-release image table
//! ([`crate::matrix::release_images`]). Used by `talos-gen images`, the mirror
//! config's `workers:` and `machineconfig --air-gap-mirror`.
//!
//! ```
//! use talos_gen::pull_list::{plan, PullRequest};
//! let m = talos_gen::matrix::Matrix::embedded();
//! let p = plan(m, &PullRequest { talos: "v1.13.9", kubernetes: "v1.35", ..Default::default() }).unwrap();
//! let refs: Vec<_> = p.images.iter().map(|i| i.reference.as_str()).collect();
//! assert_eq!(refs, [
//!     "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.9",
//!     "ghcr.io/siderolabs/kubelet:v1.35.6",
//!     "registry.k8s.io/pause:3.10.1",
//! ]);
//! ```

use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::oci_ref::repository_of;
use crate::version::Version;

/// The vanilla schematic (`customization: {}`), the Image Factory's and
/// Talos' default (`pkg/images` `DefaultInstallerImageSchematic` from 1.14).
pub const VANILLA_SCHEMATIC: &str =
    "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

/// The Image Factory's registry host.
pub const FACTORY_HOST: &str = "factory.talos.dev";

/// The default installer repository (Cozystack's `talos.installerRepository`).
pub const DEFAULT_INSTALLER_REPOSITORY: &str = "factory.talos.dev/installer";

/// What an image is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Installer,
    Kubelet,
    Pause,
    Flannel,
    KubeProxy,
    CoreDns,
    KubeNetworkPolicies,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Installer => "installer",
            Role::Kubelet => "kubelet",
            Role::Pause => "pause",
            Role::Flannel => "flannel",
            Role::KubeProxy => "kube-proxy",
            Role::CoreDns => "coredns",
            Role::KubeNetworkPolicies => "kube-network-policies",
        }
    }

    /// The one-line purpose `--json` prints.
    pub fn purpose(self) -> &'static str {
        match self {
            Role::Installer => "installs and upgrades Talos on the disk (machine.install.image)",
            Role::Kubelet => "the kubelet, run by Talos as a container (machine.kubelet.image)",
            Role::Pause => "containerd's sandbox (pause) image, one container per pod",
            Role::Flannel => {
                "the flannel CNI DaemonSet (only when Talos manages the CNI: cluster.network.cni flannel)"
            }
            Role::KubeProxy => "the kube-proxy DaemonSet (only when Talos deploys kube-proxy)",
            Role::CoreDns => "CoreDNS (only when Talos deploys it; may be scheduled on workers)",
            Role::KubeNetworkPolicies => {
                "kube-network-policies (only with flannel's network policies enabled)"
            }
        }
    }

    pub fn optional(self) -> bool {
        !matches!(self, Role::Installer | Role::Kubelet | Role::Pause)
    }
}

/// One image of the pull list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    /// `host/repository:tag`.
    pub reference: String,
    pub role: Role,
}

impl Pull {
    /// The registry host (`ghcr.io`).
    pub fn host(&self) -> &str {
        self.reference.split('/').next().unwrap_or_default()
    }

    /// `host/repository` without the tag.
    pub fn repository(&self) -> &str {
        repository_of(&self.reference)
    }

    /// The tag.
    pub fn tag(&self) -> &str {
        self.reference[self.repository().len()..].trim_start_matches(':')
    }
}

/// The question: flags of `talos-gen images`, fields of a mirror `workers:` entry.
#[derive(Debug, Clone, Default)]
pub struct PullRequest<'a> {
    pub talos: &'a str,
    pub kubernetes: &'a str,
    /// 64-hex; the vanilla schematic when `None`.
    pub schematic: Option<&'a str>,
    /// `host/path`; default `factory.talos.dev/installer`, or
    /// `factory.talos.dev/<platform>-installer` when a platform is given.
    pub installer_repository: Option<&'a str>,
    pub platform: Option<&'a str>,
    /// Add the optional images (Talos-managed CNI and add-ons).
    pub optional: bool,
    /// How flags are named in messages (`--talos` / `workers[0].talos`).
    pub names: Names<'a>,
}

/// The names of the inputs in messages.
#[derive(Debug, Clone, Copy)]
pub struct Names<'a> {
    pub talos: &'a str,
    pub kubernetes: &'a str,
    pub schematic: &'a str,
    pub installer_repository: &'a str,
    pub platform: &'a str,
}

impl Default for Names<'_> {
    fn default() -> Self {
        Names {
            talos: "--talos",
            kubernetes: "--kubernetes",
            schematic: "--schematic",
            installer_repository: "--installer-repository",
            platform: "--platform",
        }
    }
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct PullList {
    /// The Talos version the installer is tagged with (as asked, or the
    /// resolved release for a bare minor).
    pub talos: Version,
    /// The release of the image table used.
    pub release: Version,
    /// The kubelet version (`v1.35.6`).
    pub kubernetes: Version,
    pub schematic: String,
    pub installer_repository: String,
    /// Talos' own default installer for the release (informational).
    pub talos_default_installer: String,
    pub images: Vec<Pull>,
    /// For stderr: the release or kubelet version was chosen, not given.
    pub notes: Vec<String>,
}

impl PullList {
    /// The registry hosts of the images, sorted, each once.
    pub fn hosts(&self) -> Vec<String> {
        let mut h: Vec<String> = self.images.iter().map(|p| p.host().to_string()).collect();
        h.sort();
        h.dedup();
        h
    }

    pub fn get(&self, role: Role) -> Option<&Pull> {
        self.images.iter().find(|p| p.role == role)
    }

    /// `--json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "talos": self.talos.to_string(),
            "release": self.release.to_string(),
            "kubernetes": self.kubernetes.to_string(),
            "schematic": self.schematic,
            "installerRepository": self.installer_repository,
            "talosDefaultInstaller": self.talos_default_installer,
            "images": self.images.iter().map(|p| serde_json::json!({
                "image": p.reference,
                "role": p.role.name(),
                "for": p.role.purpose(),
                "optional": p.role.optional(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// A platform name as the factory spells them (`openstack`, `digital-ocean`).
pub fn check_platform(p: &str, what: &str) -> Result<()> {
    let ok = !p.is_empty()
        && p.len() <= 32
        && p.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !p.starts_with('-')
        && !p.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::bad_input(format!(
            "{what}: {p:?} is not a platform name (e.g. openstack, metal, nocloud)"
        )))
    }
}

/// `host/path` of an installer repository.
pub fn check_repository(r: &str, what: &str) -> Result<()> {
    let bad = || {
        Error::bad_input(format!(
            "{what}: {r:?} is not a repository such as factory.talos.dev/installer"
        ))
    };
    let (host, path) = r.split_once('/').ok_or_else(bad)?;
    let host_ok = (host.contains('.') || host.contains(':') || host == "localhost")
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:".contains(&b));
    let path_ok = path.split('/').all(|s| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
    });
    if host_ok && path_ok {
        Ok(())
    } else {
        Err(bad())
    }
}

/// The kubelet version for `k8s`: a full version as given; a minor
/// (`v1.35`) is the patch [`Matrix::kubernetes_patch`] resolves (the
/// Cozystack chart's, else the release's own default of that minor, else the
/// newest patch the data names; noted unless the chart's), never a bare
/// minor written as a tag.
fn kubelet_version(
    matrix: &Matrix,
    k8s: &Version,
    release_default: Option<&Version>,
    what: &str,
    notes: &mut Vec<String>,
) -> Result<Version> {
    if k8s.patch.is_some() {
        return Ok(k8s.clone());
    }
    match matrix.kubernetes_patch(k8s, release_default) {
        Some((v, from)) => {
            if matrix.kubelet_patch(k8s).is_none() {
                notes.push(format!(
                    "{what} {k8s}: the Cozystack kubelet table has no {}; using {v}, {from}",
                    k8s.minor_string()
                ));
            }
            Ok(v)
        }
        None => {
            let known: Vec<String> = matrix.kubelet_table().map(|(k, _)| k).collect();
            Err(Error::refused(format!(
                "{what} {k8s}: no kubelet patch known for {} (the Cozystack table has {}); give a full version such as {}.0",
                k8s.minor_string(),
                known.join(", "),
                k8s.minor_string()
            )))
        }
    }
}

/// Plan the pull list. Bad input (a malformed version, schematic,
/// repository or platform) is exit 2; a pair the matrix refuses, or a
/// release the image table cannot answer, exit 1.
pub fn plan(matrix: &Matrix, req: &PullRequest) -> Result<PullList> {
    let n = req.names;
    if req.talos.trim().is_empty() {
        return Err(Error::bad_input(format!("{}: required", n.talos)));
    }
    if req.kubernetes.trim().is_empty() {
        return Err(Error::bad_input(format!("{}: required", n.kubernetes)));
    }
    let asked = Version::parse_named(req.talos, n.talos)?;
    let k8s = Version::parse_named(req.kubernetes, n.kubernetes)?;
    // An embedded schematic's name (`cozystack`) is taken for its ID.
    let schematic = req
        .schematic
        .map(crate::schematic::id_or_name)
        .unwrap_or(VANILLA_SCHEMATIC);
    if !crate::schematic::is_valid_id(schematic) {
        return Err(Error::bad_input(format!(
            "{}: {schematic:?} is not a 64-hex schematic ID",
            n.schematic
        )));
    }
    if let Some(p) = req.platform {
        check_platform(p, n.platform)?;
    }
    let installer_repository = match (req.installer_repository, req.platform) {
        (Some(r), _) => {
            let r = r.trim_end_matches('/');
            check_repository(r, n.installer_repository)?;
            r.to_string()
        }
        (None, Some(p)) => format!("{FACTORY_HOST}/{p}-installer"),
        (None, None) => DEFAULT_INSTALLER_REPOSITORY.to_string(),
    };

    let lookup = matrix.images().lookup(&asked)?;
    let release = lookup.release;
    let mut notes: Vec<String> = lookup.note.into_iter().collect();
    notes.extend(matrix.pending_note(&asked));
    let talos = if asked.patch.is_some() {
        asked.clone()
    } else {
        release.talos.clone()
    };
    matrix.check(&talos, &k8s)?;
    let kubelet = kubelet_version(
        matrix,
        &k8s,
        release.kubernetes.as_ref(),
        n.kubernetes,
        &mut notes,
    )?;
    matrix.check(&talos, &kubelet)?;

    let mut images = vec![
        Pull {
            reference: format!("{installer_repository}/{schematic}:{talos}"),
            role: Role::Installer,
        },
        Pull {
            reference: format!("{}:{kubelet}", release.kubelet),
            role: Role::Kubelet,
        },
        Pull {
            reference: release.pause.clone(),
            role: Role::Pause,
        },
    ];
    if req.optional {
        let opt = [
            (release.flannel.clone(), Role::Flannel),
            (
                release
                    .kube_proxy
                    .as_ref()
                    .map(|r| format!("{r}:{kubelet}")),
                Role::KubeProxy,
            ),
            (release.coredns.clone(), Role::CoreDns),
            (
                release.kube_network_policies.clone(),
                Role::KubeNetworkPolicies,
            ),
        ];
        for (r, role) in opt {
            if let Some(reference) = r {
                images.push(Pull { reference, role });
            }
        }
    }
    Ok(PullList {
        talos,
        release: release.talos.clone(),
        kubernetes: kubelet,
        schematic: schematic.to_string(),
        installer_repository,
        talos_default_installer: release.talos_default_installer(),
        images,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> &'static Matrix {
        Matrix::embedded()
    }

    fn refs(p: &PullList) -> Vec<&str> {
        p.images.iter().map(|i| i.reference.as_str()).collect()
    }

    fn req<'a>(talos: &'a str, k8s: &'a str) -> PullRequest<'a> {
        PullRequest {
            talos,
            kubernetes: k8s,
            ..Default::default()
        }
    }

    #[test]
    fn default_pull_list() {
        let p = plan(m(), &req("v1.13.9", "v1.35")).unwrap();
        assert_eq!(
            refs(&p),
            [
                "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.13.9",
                "ghcr.io/siderolabs/kubelet:v1.35.6",
                "registry.k8s.io/pause:3.10.1",
            ]
        );
        assert!(p.notes.is_empty());
        assert_eq!(
            p.hosts(),
            ["factory.talos.dev", "ghcr.io", "registry.k8s.io"]
        );
        assert_eq!(
            p.talos_default_installer,
            "ghcr.io/siderolabs/installer:v1.13.9"
        );
    }

    #[test]
    fn exact_kubelet_schematic_repository_platform() {
        let s = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
        let mut r = req("1.10.3", "1.33.2");
        r.schematic = Some(s);
        r.installer_repository = Some("registry.example:5000/talos/installer/");
        let p = plan(m(), &r).unwrap();
        assert_eq!(
            refs(&p)[..2],
            [
                format!("registry.example:5000/talos/installer/{s}:v1.10.3").as_str(),
                "ghcr.io/siderolabs/kubelet:v1.33.2"
            ]
        );
        assert_eq!(p.images[2].reference, "registry.k8s.io/pause:3.10");
        let mut r = req("v1.14.0-rc.1", "1.37.0");
        r.platform = Some("openstack");
        let p = plan(m(), &r).unwrap();
        assert_eq!(
            p.images[0].reference,
            format!("factory.talos.dev/openstack-installer/{VANILLA_SCHEMATIC}:v1.14.0-rc.1")
        );
        assert_eq!(p.images[2].reference, "registry.k8s.io/pause:3.10.2");
        assert!(!p.talos_default_installer.starts_with("ghcr.io"));
    }

    #[test]
    fn newer_releases_and_minors() {
        let p = plan(m(), &req("v1.13.12", "v1.34")).unwrap();
        assert_eq!(p.release.to_string(), "v1.13.9");
        assert!(p.images[0].reference.ends_with(":v1.13.12"));
        assert!(
            p.notes[0].contains("newer than the image data"),
            "{:?}",
            p.notes
        );
        let p = plan(m(), &req("1.12", "1.33")).unwrap();
        assert_eq!(p.talos.to_string(), "v1.12.11");
        assert!(p.images[0].reference.ends_with(":v1.12.11"));
        // A minor the Cozystack table lacks: the release's default (same minor).
        let p = plan(m(), &req("v1.13.9", "v1.36")).unwrap();
        assert_eq!(p.kubernetes.to_string(), "v1.36.3");
        assert_eq!(p.notes.len(), 1);
    }

    #[test]
    fn optional_images() {
        let mut r = req("v1.13.9", "v1.35.6");
        r.optional = true;
        let p = plan(m(), &r).unwrap();
        assert_eq!(
            refs(&p)[3..],
            [
                "ghcr.io/siderolabs/flannel:0.28.8",
                "registry.k8s.io/kube-proxy:v1.35.6",
                "registry.k8s.io/coredns/coredns:v1.14.6",
                "registry.k8s.io/networking/kube-network-policies:v1.1.0",
            ]
        );
        assert!(p.images[3..].iter().all(|i| i.role.optional()));
        assert!(p.images[..3].iter().all(|i| !i.role.optional()));
        let j = p.to_json();
        assert_eq!(j["images"][1]["role"], "kubelet");
        assert_eq!(j["images"][3]["optional"], true);
    }

    #[test]
    fn refusals_and_bad_input() {
        // refused: the matrix says no, the table has no such minor, no kubelet patch
        for (t, k) in [
            ("v1.13.9", "v1.30"),
            ("v1.7.0", "v1.30"),
            ("v1.16.0", "v1.35"),
            ("v1.12.11", "v1.36"),
            ("v1.10.9", "v1.27"),
        ] {
            let e = plan(m(), &req(t, k)).unwrap_err();
            assert_eq!(e.exit_code(), 1, "{t} {k}: {e}");
        }
        // A minor no table, release or matrix row names: refused.
        assert!(
            m().kubernetes_patch(&Version::parse("v1.40").unwrap(), None)
                .is_none()
        );
        // Issue 21: a bare minor outside the Cozystack table is the newest
        // patch of that minor the data names (never written as `:v1.X`).
        let p = plan(m(), &req("v1.14.0-rc.1", "v1.36")).unwrap();
        assert_eq!(p.images[1].reference, "ghcr.io/siderolabs/kubelet:v1.36.3");
        let p = plan(m(), &req("v1.10.9", "v1.28")).unwrap();
        assert_eq!(p.images[1].reference, "ghcr.io/siderolabs/kubelet:v1.28.3");
        // 1.14 with its own minor: the release's default kubelet.
        let p = plan(m(), &req("v1.14.0-rc.1", "v1.37")).unwrap();
        // (a bare minor never resolves to a pre-release: the release's
        // default 1.37.0-rc.0 is passed over for the matrix's 1.37.0)
        assert_eq!(p.images[1].reference, "ghcr.io/siderolabs/kubelet:v1.37.0");
        // bad input
        let mut bad = vec![req("x", "v1.35"), req("v1.13.9", "1"), req("", "v1.35")];
        let mut r = req("v1.13.9", "v1.35");
        r.schematic = Some("abc");
        bad.push(r.clone());
        r.schematic = None;
        r.platform = Some("Open Stack");
        bad.push(r.clone());
        r.platform = None;
        r.installer_repository = Some("installer");
        bad.push(r);
        for r in bad {
            let e = plan(m(), &r).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{r:?}: {e}");
        }
    }

    #[test]
    fn references() {
        assert_eq!(repository_of("ghcr.io/a/b:v1"), "ghcr.io/a/b");
        assert_eq!(repository_of("localhost:5000/a:1"), "localhost:5000/a");
        assert_eq!(repository_of("localhost:5000/a"), "localhost:5000/a");
        let p = Pull {
            reference: "127.0.0.1:5000/x/y:v1.2".into(),
            role: Role::Pause,
        };
        assert_eq!(
            (p.host(), p.repository(), p.tag()),
            ("127.0.0.1:5000", "127.0.0.1:5000/x/y", "v1.2")
        );
    }
}
