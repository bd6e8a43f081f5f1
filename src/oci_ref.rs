//! The OCI reference grammar, written once: repository names and their
//! path components, tags, `sha256:` digests, registry hosts, and image
//! references as users write them (`[host[:port]/]repository[:tag][@digest]`).
//! The `/v2/` edge (`registry::names`), the mirror config and the machine
//! config's flags all check names here, each saying in its own words what
//! the name was for. Pure: strings in, a verdict or the parts out.

use std::fmt;

/// Longest repository name accepted (distribution's limit).
pub const MAX_REPO_LEN: usize = 255;
/// Longest tag (OCI distribution spec: 128 characters).
pub const MAX_TAG_LEN: usize = 128;

/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
pub fn is_tag(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_TAG_LEN
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// `sha256:<64 lowercase hex>`, the only digest algorithm served.
pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(crate::text::is_hex64)
}

/// One path component: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
pub fn is_component(s: &str) -> bool {
    let b = s.as_bytes();
    if b.is_empty() || !is_alnum(b[0]) || !is_alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if is_alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator run: ".", "_", "__", or "-"+; followed by alnum.
        let start = i;
        while i < b.len() && !is_alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// A lowercase letter or a digit.
pub fn is_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// A syntactically valid OCI repository name (`component(/component)*`).
pub fn is_repository(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_REPO_LEN && s.split('/').all(is_component)
}

/// A registry host as references and `?ns=` carry it: `host[:port]`.
pub fn is_registry_host(s: &str) -> bool {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    };
    if let Some(p) = port
        && (p.is_empty() || p.len() > 5 || !p.bytes().all(|c| c.is_ascii_digit()))
    {
        return false;
    }
    is_dns_name(host)
}

/// A DNS name: dot-separated labels of letters, digits and inner `-`, at
/// most 63 bytes each and 253 in all.
pub fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        })
}

/// `host/repo` of `host/repo:tag` or `host/repo@digest` (a `:` in the host
/// is a port). Unchecked: for references already known good.
pub fn repository_of(reference: &str) -> &str {
    let name = reference.split('@').next().unwrap_or(reference);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    match name[last_slash..].rfind(':') {
        Some(i) => &name[..last_slash + i],
        None => name,
    }
}

/// The part of an image reference that is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefError {
    Host,
    Repository,
    Tag,
    Digest,
}

impl fmt::Display for RefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefError::Host => "the registry host is not host[:port]",
            RefError::Repository => {
                "the repository is not lowercase path components separated by single slashes"
            }
            RefError::Tag => "the tag is not [A-Za-z0-9_][A-Za-z0-9._-]{0,127}",
            RefError::Digest => "the digest is not sha256:<64 lowercase hex>",
        })
    }
}

/// An image reference as written, split and checked part by part:
/// `[host/]repository[:tag][@digest]`. A first component with a `.` or a
/// `:` (or `localhost`) is the registry host; a tag is after the last `:`
/// of the last component; a digest may follow a tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageRef<'a> {
    pub host: Option<&'a str>,
    pub repository: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

impl<'a> ImageRef<'a> {
    pub fn parse(s: &'a str) -> Result<ImageRef<'a>, RefError> {
        let (name, digest) = match s.split_once('@') {
            Some((n, d)) => (n, Some(d)),
            None => (s, None),
        };
        if digest.is_some_and(|d| !is_digest(d)) {
            return Err(RefError::Digest);
        }
        let (host, rest) = match name.split_once('/') {
            Some((h, r)) if h.contains('.') || h.contains(':') || h == "localhost" => (Some(h), r),
            _ => (None, name),
        };
        if host.is_some_and(|h| !is_registry_host(h)) {
            return Err(RefError::Host);
        }
        let last = rest.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match rest[last..].rfind(':') {
            Some(i) => (&rest[..last + i], Some(&rest[last + i + 1..])),
            None => (rest, None),
        };
        if tag.is_some_and(|t| !is_tag(t)) {
            return Err(RefError::Tag);
        }
        if !is_repository(repository) {
            return Err(RefError::Repository);
        }
        Ok(ImageRef {
            host,
            repository,
            tag,
            digest,
        })
    }

    /// The registry host and repository as Docker normalises them: no host
    /// is Docker Hub (`docker.io`), whose one-component names are under
    /// `library/`; the host lowercased.
    pub fn normalised(&self) -> (String, String) {
        let host = self.host.unwrap_or("docker.io").to_ascii_lowercase();
        let hub = host == "docker.io" || host == "index.docker.io";
        let repo = if hub && !self.repository.contains('/') {
            format!("library/{}", self.repository)
        } else {
            self.repository.to_string()
        };
        (host, repo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    #[test]
    fn image_refs_split_as_written() {
        let r = ImageRef::parse("ghcr.io/siderolabs/kubelet:v1.35.6").unwrap();
        assert_eq!(
            (r.host, r.repository, r.tag, r.digest),
            (Some("ghcr.io"), "siderolabs/kubelet", Some("v1.35.6"), None)
        );
        let r = ImageRef::parse("localhost:5000").unwrap();
        assert_eq!(
            (r.host, r.repository, r.tag),
            (None, "localhost", Some("5000"))
        );
        let r = ImageRef::parse("127.0.0.1:5000/a/b").unwrap();
        assert_eq!(
            (r.host, r.repository, r.tag),
            (Some("127.0.0.1:5000"), "a/b", None)
        );
        let d = format!("sha256:{H}");
        let s = format!("factory.talos.dev/installer/{H}:v1.13.6@{d}");
        let r = ImageRef::parse(&s).unwrap();
        assert_eq!((r.tag, r.digest), (Some("v1.13.6"), Some(d.as_str())));
        assert_eq!(
            ImageRef::parse("nginx").unwrap().normalised(),
            ("docker.io".into(), "library/nginx".into())
        );
        assert_eq!(
            ImageRef::parse("GHCR.io/a").unwrap().normalised(),
            ("ghcr.io".into(), "a".into())
        );
        for (bad, why) in [
            ("", RefError::Repository),
            ("ghcr.io/", RefError::Repository),
            ("ghcr.io/A:b", RefError::Repository),
            ("ghcr.io/a/../b", RefError::Repository),
            ("ghcr.io/a:..", RefError::Tag),
            ("ghcr.io/a/b:", RefError::Tag),
            ("a@sha256:x", RefError::Digest),
            ("bad_host.io/a", RefError::Host),
        ] {
            assert_eq!(ImageRef::parse(bad), Err(why), "{bad:?}");
        }
    }

    #[test]
    fn repositories_of_references() {
        assert_eq!(repository_of("ghcr.io/a/b:v1"), "ghcr.io/a/b");
        assert_eq!(repository_of("localhost:5000/a:1"), "localhost:5000/a");
        assert_eq!(repository_of("localhost:5000/a"), "localhost:5000/a");
        assert_eq!(repository_of(&format!("x/y@sha256:{H}")), "x/y");
    }
}
