//! What a `/v2/` client sends, typed: digests, references (tags and
//! digests), the factory's installer repositories, the `?ns=` routing and
//! the `--mirror-upstream` table, on the one reference grammar of
//! [`crate::oci_ref`] (re-exported here for the registry's callers).
//! Everything here is pure: strings in, typed values or a clear error out.
//! Nothing parsed here ever becomes a filesystem path.

use std::collections::BTreeMap;
use std::fmt;

pub use crate::oci_ref::{
    MAX_REPO_LEN, MAX_TAG_LEN, is_dns_name, is_registry_host, is_repository, is_tag,
};
use crate::oci_ref::{is_alnum, is_component};

/// Why a name, reference or ns was refused; maps to an OCI error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameError {
    /// Not a valid repository name at all (400 NAME_INVALID).
    Invalid(String),
    /// A valid name this service does not serve (403 DENIED).
    Denied(String),
    /// Malformed tag or digest (400 MANIFEST_INVALID / DIGEST_INVALID).
    Reference(String),
    Digest(String),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Invalid(m)
            | NameError::Denied(m)
            | NameError::Reference(m)
            | NameError::Digest(m) => f.write_str(m),
        }
    }
}

/// A sha256 digest, `sha256:<64 lowercase hex>`; the only algorithm served.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

impl Digest {
    pub fn parse(s: &str) -> Result<Digest, NameError> {
        let bad = || {
            NameError::Digest(format!(
                "digest {:?} is not sha256:<64 lowercase hex>",
                truncate(s)
            ))
        };
        let hex = s.strip_prefix("sha256:").ok_or_else(bad)?;
        if is_hex64(hex) {
            Ok(Digest(s.to_string()))
        } else {
            Err(bad())
        }
    }

    /// The digest of `data`.
    pub fn of(data: &[u8]) -> Digest {
        use sha2::Digest as _;
        Digest(format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(data))
        ))
    }

    /// From the 64-hex form (as the store records it).
    pub fn from_hex(hex: &str) -> Option<Digest> {
        is_hex64(hex).then(|| Digest(format!("sha256:{hex}")))
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 64 hex characters.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A manifest reference: a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Tag(String),
    Digest(Digest),
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference, NameError> {
        if s.contains(':') {
            return Digest::parse(s).map(Reference::Digest);
        }
        if is_tag(s) {
            Ok(Reference::Tag(s.to_string()))
        } else {
            Err(NameError::Reference(format!(
                "reference {:?} is neither a tag ([A-Za-z0-9_][A-Za-z0-9._-]{{0,127}}) nor sha256:<hex>",
                truncate(s)
            )))
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Tag(t) => f.write_str(t),
            Reference::Digest(d) => f.write_str(d.as_str()),
        }
    }
}

pub use crate::text::is_hex64;

/// An installer repository of the Image Factory:
/// `installer[-secureboot]/<schematic>` or
/// `<platform>-installer[-secureboot]/<schematic>` (64-hex schematic).
pub fn is_installer_repository(s: &str) -> bool {
    let Some((image, schematic)) = s.split_once('/') else {
        return false;
    };
    if !is_hex64(schematic) || !is_component(image) {
        return false;
    }
    let base = image.strip_suffix("-secureboot").unwrap_or(image);
    if base == "installer" {
        return true;
    }
    match base.strip_suffix("-installer") {
        Some(platform) => {
            !platform.is_empty()
                && platform
                    .split('-')
                    .all(|p| !p.is_empty() && p.bytes().all(is_alnum))
        }
        None => false,
    }
}

/// Which upstream a request goes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UpstreamId {
    /// `--registry-url` (installer repositories).
    Installer,
    /// A `--mirror-upstream` registry, by its `ns`.
    Mirror(String),
}

impl UpstreamId {
    /// A stable name for store keys and metrics.
    pub fn key_name(&self) -> String {
        match self {
            UpstreamId::Installer => "installer".to_string(),
            UpstreamId::Mirror(ns) => format!("ns={ns}"),
        }
    }
}

/// The `--mirror-upstream ns=URL` table.
#[derive(Debug, Clone, Default)]
pub struct MirrorTable {
    map: BTreeMap<String, String>,
}

impl MirrorTable {
    /// Parse `ns=URL` strings; an empty list is an empty table.
    pub fn parse(items: &[String]) -> crate::Result<MirrorTable> {
        let bad = crate::Error::bad_input;
        let mut map = BTreeMap::new();
        for item in items.iter().flat_map(|s| s.split([',', ' '])) {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (ns, url) = item.split_once('=').ok_or_else(|| {
                bad(format!(
                    "--mirror-upstream: {item:?} is not ns=URL (e.g. ghcr.io=https://ghcr.io)"
                ))
            })?;
            if !is_registry_host(ns) {
                return Err(bad(format!(
                    "--mirror-upstream: {ns:?} is not a registry host[:port]"
                )));
            }
            let url =
                check_base_url(url).map_err(|e| bad(format!("--mirror-upstream {ns}: {e}")))?;
            // Host names are case-insensitive: kept lowercase, as `?ns=` is read.
            map.insert(ns.to_ascii_lowercase(), url);
        }
        Ok(MirrorTable { map })
    }

    pub fn get(&self, ns: &str) -> Option<&str> {
        self.map.get(ns).map(String::as_str)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Why a base URL is refused; each names the URL as typed (the caller
/// puts the flag or field before it).
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("{url:?} is not a URL: {reason}")]
    NotUrl { url: String, reason: String },
    #[error("{0:?} is not an http(s) URL with a host")]
    NotHttp(String),
    #[error("{0:?} must not carry a query or fragment")]
    QueryOrFragment(String),
}

/// An `http(s)://host[:port][/path]` base URL, returned without a trailing slash.
pub fn check_base_url(url: &str) -> Result<String, UrlError> {
    let u = reqwest::Url::parse(url).map_err(|e| UrlError::NotUrl {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(UrlError::NotHttp(url.to_string()));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(UrlError::QueryOrFragment(url.to_string()));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// `host[:port]` of a base URL (what `?ns=` would name it).
pub fn url_host(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url).ok()?;
    let host = u.host_str()?;
    Some(match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    })
}

/// Decide which upstream serves `repo`, given the request's `ns`.
/// - no `ns`: installer repositories, from `--registry-url`, and the
///   factory's source images (`siderolabs/imager`, ...: [`super::source`]),
///   from `ghcr.io`;
/// - `ns=factory.talos.dev` (the host Talos and Cozystack name installers
///   by) or the `--registry-url` host itself (a Talos worker whose mirror
///   for the factory points here): installer repositories, from
///   `--registry-url` whatever host that is, even when a
///   `--mirror-upstream` names the same `ns`;
/// - `ns` configured with `--mirror-upstream`: any valid repository;
/// - anything else is denied and never proxied.
pub fn route(
    repo: &str,
    ns: Option<&str>,
    mirrors: &MirrorTable,
    installer_host: Option<&str>,
) -> Result<UpstreamId, NameError> {
    if !is_repository(repo) {
        return Err(NameError::Invalid(format!(
            "repository name {:?} is not a valid OCI repository name",
            truncate(repo)
        )));
    }
    match ns {
        None => {
            if is_installer_repository(repo) {
                Ok(UpstreamId::Installer)
            } else if super::source::is_source_repository(repo) {
                Ok(UpstreamId::Mirror(super::source::SOURCE_HOST.to_string()))
            } else {
                Err(NameError::Denied(format!(
                    "repository {repo:?} is not served here: without ?ns= only installer[-secureboot]/<schematic>, <platform>-installer[-secureboot]/<schematic> and siderolabs/{{{}}} are",
                    super::source::SOURCE_IMAGES.join(",")
                )))
            }
        }
        Some(ns) => {
            if !is_registry_host(ns) {
                return Err(NameError::Invalid(format!(
                    "ns {:?} is not a registry host[:port]",
                    truncate(ns)
                )));
            }
            let installer_ns = ns == crate::pull_list::FACTORY_HOST || installer_host == Some(ns);
            if installer_ns && is_installer_repository(repo) {
                Ok(UpstreamId::Installer)
            } else if mirrors.get(ns).is_some() {
                Ok(UpstreamId::Mirror(ns.to_string()))
            } else {
                Err(NameError::Denied(format!(
                    "ns {ns:?} is not a configured mirror upstream (--mirror-upstream {ns}=URL)"
                )))
            }
        }
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oci_ref::{ImageRef, RefError};

    /// An image reference as users write it (`ghcr.io/siderolabs/kubelet:v1.35.6`,
    /// `factory.talos.dev/installer/<id>:v1.13.6`, `nginx`, `x/y@sha256:...`),
    /// split into registry host, repository and reference the way Docker
    /// normalises it: a first component without `.` or `:` (and not
    /// `localhost`) is a Docker Hub repository; a Docker Hub name without `/`
    /// is under `library/`; no tag means `latest`; a digest wins over a tag.
    /// (The tests' statement of [`ImageRef`]'s normalisation.)
    fn parse_image_reference(s: &str) -> Result<(String, String, Reference), NameError> {
        let r = ImageRef::parse(s).map_err(|why| {
            let m = format!("image reference {:?}: {why}", truncate(s));
            match why {
                RefError::Digest => NameError::Digest(m),
                _ => NameError::Invalid(m),
            }
        })?;
        let (host, repo) = r.normalised();
        let reference = match (r.digest, r.tag) {
            (Some(d), _) => Reference::Digest(Digest::parse(d)?),
            (None, Some(t)) => Reference::Tag(t.to_string()),
            (None, None) => Reference::Tag("latest".to_string()),
        };
        Ok((host, repo, reference))
    }

    const H: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    #[test]
    fn installer_repositories() {
        for ok in [
            format!("installer/{H}"),
            format!("installer-secureboot/{H}"),
            format!("metal-installer/{H}"),
            format!("digital-ocean-installer-secureboot/{H}"),
            format!("openstack-installer/{H}"),
        ] {
            assert!(is_installer_repository(&ok), "{ok}");
            assert!(is_repository(&ok), "{ok}");
        }
        for bad in [
            format!("installer/{}", &H[..63]),
            format!("installer/{}", H.to_uppercase()),
            format!("installer/{H}/x"),
            format!("x/installer/{H}"),
            format!("-installer/{H}"),
            format!("installerx/{H}"),
            format!("installer-secureboot-secureboot/{H}"),
            format!("metal--installer/{H}"),
            "installer".to_string(),
            format!("../{H}"),
        ] {
            assert!(!is_installer_repository(&bad), "{bad}");
        }
    }

    #[test]
    fn repository_grammar() {
        for ok in [
            "a",
            "siderolabs/kubelet",
            "library/nginx",
            "a.b_c__d---e/f0",
        ] {
            assert!(is_repository(ok), "{ok}");
        }
        for bad in [
            "",
            "A",
            "a//b",
            "/a",
            "a/",
            "..",
            "a/../b",
            "a/./b",
            "a___b",
            "a-",
            "a%2fb",
            "a\\b",
            "a b",
            &"a".repeat(256),
        ] {
            assert!(!is_repository(bad), "{bad:?}");
        }
    }

    #[test]
    fn references() {
        assert_eq!(
            Reference::parse("v1.13.6"),
            Ok(Reference::Tag("v1.13.6".into()))
        );
        assert!(Reference::parse("latest").is_ok());
        assert!(Reference::parse(&format!("sha256:{H}")).is_ok());
        for bad in [
            "",
            ".x",
            "-x",
            "a/b",
            "..",
            &"a".repeat(129),
            "sha512:abc",
            &format!("sha256:{}", &H[..10]),
            &format!("sha256:{}", H.to_uppercase()),
            "sha256:../../etc",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Digest::parse(&format!("sha256:{H}/..")).is_err());
    }

    #[test]
    fn registry_hosts_and_mirror_table() {
        for ok in [
            "ghcr.io",
            "docker.io",
            "127.0.0.1:5000",
            "registry-1.docker.io",
        ] {
            assert!(is_registry_host(ok), "{ok}");
        }
        for bad in [
            "",
            "a..b",
            "-a.io",
            "a.io:",
            "a.io:x",
            "a/b",
            "a.io:123456",
            "a_b.io",
        ] {
            assert!(!is_registry_host(bad), "{bad}");
        }
        let t = MirrorTable::parse(&["ghcr.io=https://ghcr.io/".into()]).unwrap();
        assert_eq!(t.get("ghcr.io"), Some("https://ghcr.io"));
        assert!(MirrorTable::parse(&["ghcr.io".into()]).is_err());
        assert!(MirrorTable::parse(&["ghcr.io=ftp://x".into()]).is_err());
        assert!(MirrorTable::parse(&["a/b=http://x".into()]).is_err());
    }

    #[test]
    fn image_references() {
        let r = |s: &str| parse_image_reference(s).unwrap();
        assert_eq!(
            r("ghcr.io/siderolabs/kubelet:v1.35.6"),
            (
                "ghcr.io".into(),
                "siderolabs/kubelet".into(),
                Reference::Tag("v1.35.6".into())
            )
        );
        assert_eq!(
            r("nginx"),
            (
                "docker.io".into(),
                "library/nginx".into(),
                Reference::Tag("latest".into())
            )
        );
        assert_eq!(r("127.0.0.1:5000/a/b").0, "127.0.0.1:5000");
        assert_eq!(r("127.0.0.1:5000/a/b").2, Reference::Tag("latest".into()));
        let d = format!("sha256:{H}");
        assert_eq!(
            r(&format!("factory.talos.dev/installer/{H}:v1.13.6@{d}")).2,
            Reference::Digest(Digest::parse(&d).unwrap())
        );
        for bad in [
            "",
            "ghcr.io/",
            "ghcr.io/A:b",
            "ghcr.io/a:..",
            "a@sha256:x",
            "ghcr.io/a/../b",
        ] {
            assert!(parse_image_reference(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn routing() {
        let t = MirrorTable::parse(&["ghcr.io=http://127.0.0.1:1".into()]).unwrap();
        let inst = format!("installer/{H}");
        assert_eq!(route(&inst, None, &t, None), Ok(UpstreamId::Installer));
        assert_eq!(
            route("siderolabs/kubelet", Some("ghcr.io"), &t, None),
            Ok(UpstreamId::Mirror("ghcr.io".into()))
        );
        assert!(matches!(
            route("siderolabs/kubelet", None, &t, None),
            Err(NameError::Denied(_))
        ));
        // The factory's source images, from ghcr.io without ?ns=; no other
        // siderolabs/ name.
        for img in super::super::source::SOURCE_IMAGES {
            assert_eq!(
                route(&format!("siderolabs/{img}"), None, &t, None),
                Ok(UpstreamId::Mirror("ghcr.io".into()))
            );
        }
        assert!(matches!(
            route("siderolabs/talosctl", None, &t, None),
            Err(NameError::Denied(_))
        ));
        assert!(matches!(
            route("siderolabs/kubelet", Some("docker.io"), &t, None),
            Err(NameError::Denied(_))
        ));
        assert!(matches!(
            route("x", Some("a/b"), &t, None),
            Err(NameError::Invalid(_))
        ));
        assert_eq!(
            route(
                &inst,
                Some("factory.talos.dev"),
                &t,
                Some("factory.talos.dev")
            ),
            Ok(UpstreamId::Installer)
        );
        assert!(route("a/../b", None, &t, None).is_err());
        // factory.talos.dev is the installer registry whatever --registry-url is...
        assert_eq!(
            route(&inst, Some("factory.talos.dev"), &t, Some("10.0.0.5:5000")),
            Ok(UpstreamId::Installer)
        );
        assert_eq!(
            route(&inst, Some("factory.talos.dev"), &t, None),
            Ok(UpstreamId::Installer)
        );
        // ...also when a --mirror-upstream names it too; other repositories
        // there go to that mirror, or nowhere.
        let t2 = MirrorTable::parse(&["factory.talos.dev=http://127.0.0.1:1".into()]).unwrap();
        assert_eq!(
            route(&inst, Some("factory.talos.dev"), &t2, Some("127.0.0.1:2")),
            Ok(UpstreamId::Installer)
        );
        assert_eq!(
            route("siderolabs/x", Some("factory.talos.dev"), &t2, None),
            Ok(UpstreamId::Mirror("factory.talos.dev".into()))
        );
        assert!(matches!(
            route("siderolabs/x", Some("factory.talos.dev"), &t, None),
            Err(NameError::Denied(_))
        ));
    }
}
