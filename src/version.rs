//! Version parsing shared by the matrix, machine configs and the image routes.
//!
//! Accepts what Talos' own tooling accepts: an optional leading `v`,
//! `major.minor` or `major.minor.patch`, and an optional pre-release
//! suffix (`-rc.1`). Comparisons ignore the suffix, as Talos'
//! compatibility code does. Build metadata (`+dirty`) is refused
//! everywhere: a version names an image tag, and `+` is not valid in an
//! OCI tag.

use std::fmt;

use crate::error::{Error, Result};

/// A parsed version. `patch` is `None` when only `major.minor` was given.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: Option<u64>,
    /// Pre-release suffix, without the leading `-`.
    pub pre: Option<String>,
}

/// Longest version string we look at; anything longer is bad input.
const MAX_LEN: usize = 64;

impl Version {
    /// Parse `what` (named in the error) from `s`.
    pub fn parse_named(s: &str, what: &str) -> Result<Version> {
        let bad = |why: &str| {
            let shown: String = s.chars().take(MAX_LEN).collect();
            Error::bad_input(format!("{what}: {shown:?} is not a version ({why})"))
        };
        if s.len() > MAX_LEN {
            return Err(bad("too long"));
        }
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        if t.contains('+') {
            return Err(bad(
                "build metadata (+...) is not valid in an image tag; give the release without it",
            ));
        }
        let (core, pre) = match t.find('-') {
            Some(i) => {
                let suffix = &t[i + 1..];
                if suffix.is_empty()
                    || !suffix
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
                {
                    return Err(bad("malformed suffix"));
                }
                (&t[..i], Some(suffix.to_string()))
            }
            None => (t, None),
        };
        let mut parts = core.split('.');
        let num = |p: Option<&str>| -> Result<Option<u64>> {
            match p {
                None => Ok(None),
                Some(p)
                    if !p.is_empty()
                        && p.len() <= 9
                        && p.bytes().all(|b| b.is_ascii_digit())
                        && !(p.len() > 1 && p.starts_with('0')) =>
                {
                    Ok(Some(p.parse().expect("digits")))
                }
                Some(_) => Err(bad("expected major.minor[.patch]")),
            }
        };
        let major = num(parts.next())?.ok_or_else(|| bad("empty"))?;
        let minor = num(parts.next())?.ok_or_else(|| bad("expected major.minor[.patch]"))?;
        let patch = num(parts.next())?;
        if parts.next().is_some() {
            return Err(bad("too many components"));
        }
        Ok(Version {
            major,
            minor,
            patch,
            pre,
        })
    }

    pub fn parse(s: &str) -> Result<Version> {
        Version::parse_named(s, "version")
    }

    /// `(major, minor)`.
    pub fn minor_key(&self) -> (u64, u64) {
        (self.major, self.minor)
    }

    /// `(major, minor, patch)` with a missing patch as 0, suffix ignored.
    pub fn core(&self) -> (u64, u64, u64) {
        (self.major, self.minor, self.patch.unwrap_or(0))
    }

    /// `v1.13`
    pub fn minor_string(&self) -> String {
        format!("v{}.{}", self.major, self.minor)
    }
}

impl fmt::Display for Version {
    /// `v1.13.6`, `v1.13`, `v1.14.0-rc.1`: as given, with a `v`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)?;
        if let Some(p) = self.patch {
            write!(f, ".{p}")?;
        }
        if let Some(pre) = &self.pre {
            write!(f, "-{pre}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Version {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Version::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let v = Version::parse("v1.13.6").unwrap();
        assert_eq!(v.core(), (1, 13, 6));
        assert_eq!(v.to_string(), "v1.13.6");
        assert_eq!(Version::parse("1.35").unwrap().to_string(), "v1.35");
        let rc = Version::parse("v1.14.0-rc.1").unwrap();
        assert_eq!(rc.core(), (1, 14, 0));
        assert_eq!(rc.pre.as_deref(), Some("rc.1"));
        assert_eq!(rc.to_string(), "v1.14.0-rc.1");
    }

    /// Issue 50 item 9: build metadata is not valid in an OCI tag.
    #[test]
    fn build_metadata_is_refused() {
        for s in ["v1.13.6+build", "1.13+dirty", "v1.14.0-rc.1+x"] {
            let e = Version::parse_named(s, "--talos-version").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{s}");
            assert!(e.to_string().contains(&format!("{s:?}")), "{e}");
            assert!(e.to_string().contains("build metadata"), "{e}");
        }
    }

    #[test]
    fn rejects() {
        for s in [
            "",
            "v",
            "1",
            "1.",
            "1.x",
            "a.b.c",
            "1.2.3.4",
            "1.2-",
            "01.2",
            "1.2.3-rc 1",
            "99999999999.1",
        ] {
            let e = Version::parse_named(s, "--talos").unwrap_err();
            assert_eq!(e.exit_code(), 2, "{s}");
            assert!(e.to_string().starts_with("--talos: "), "{e}");
        }
    }
}
