//! The store's keys, typed: the **one** place a key's string is built or
//! read. A [`Key`] is made by a constructor per kind of stored thing
//! (an artifact, talosctl, a factory document, a schematic, the mirror
//! job's status, an OCI manifest, blob, tag mapping or referrers index)
//! and read back as a [`KeyKind`]; every `Store` call takes a `&Key`, so no
//! module outside the store can hand it a string. The string form is the
//! format stores have always held (index file names are `sha256(key)`):
//! it must never change.
//!
//! A key read from an existing store that is none of these kinds is kept
//! as it is ([`KeyKind::Other`]): the store never drops what it cannot
//! name.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// A store key. Its string form ([`Key::as_str`], `Display`) is what the
/// index holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Key(String);

/// What a `Store` call takes as its key: a [`Key`] (and, in the crate's
/// own unit tests only, a plain string). Sealed: nothing outside the
/// crate adds a way in.
pub trait AsKey: sealed::Sealed {
    fn as_key(&self) -> Cow<'_, Key>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Key {}
    #[cfg(test)]
    impl Sealed for str {}
    #[cfg(test)]
    impl Sealed for String {}
    #[cfg(test)]
    impl<T: Sealed + ?Sized> Sealed for &T {}
}

impl AsKey for Key {
    fn as_key(&self) -> Cow<'_, Key> {
        Cow::Borrowed(self)
    }
}

#[cfg(test)]
impl AsKey for str {
    fn as_key(&self) -> Cow<'_, Key> {
        Cow::Owned(Key::raw(self))
    }
}

#[cfg(test)]
impl AsKey for String {
    fn as_key(&self) -> Cow<'_, Key> {
        Cow::Owned(Key::raw(self.as_str()))
    }
}

#[cfg(test)]
impl<T: AsKey + ?Sized> AsKey for &T {
    fn as_key(&self) -> Cow<'_, Key> {
        (**self).as_key()
    }
}

/// What a key names, parsed from its string form ([`Key::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind<'a> {
    /// `image/<schematic>/<version>/<asset>`: an Image Factory artifact.
    Image {
        schematic: &'a str,
        version: &'a str,
        asset: &'a str,
    },
    /// `talosctl/<version>/<file>`.
    Talosctl { version: &'a str, file: &'a str },
    /// `factory<path>`: a factory document (`path` starts with `/`).
    FactoryDoc { path: &'a str },
    /// `schematic/<id>`: a POSTed or mirrored schematic (its id is the
    /// sha256 of its bytes).
    Schematic { id: &'a str },
    /// `status/mirror-sync`: the last mirror run's record.
    MirrorStatus,
    /// `oci/manifest/sha256:<hex>`.
    OciManifest { digest: &'a str },
    /// `oci/blob/sha256:<hex>`.
    OciBlob { digest: &'a str },
    /// `oci/tag/<upstream>/<repo>:<tag>`: the manifest a tag named when last asked.
    OciTag {
        upstream: &'a str,
        repo: &'a str,
        tag: &'a str,
    },
    /// `oci/tags/<upstream>/<repo>`: the last whole tag list the upstream
    /// gave for a repository.
    OciTagList { upstream: &'a str, repo: &'a str },
    /// `oci/referrers/<upstream>/<repo>@sha256:<hex>`.
    OciReferrers {
        upstream: &'a str,
        repo: &'a str,
        digest: &'a str,
    },
    /// None of the above (kept, never named).
    Other(&'a str),
}

/// The families of keys, for listing and for what the mirror job owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Image,
    Talosctl,
    FactoryDoc,
    Schematic,
    MirrorStatus,
    Oci,
    Other,
}

const IMAGE: &str = "image/";
const TALOSCTL: &str = "talosctl/";
const FACTORY: &str = "factory";
const SCHEMATIC: &str = "schematic/";
const MIRROR_STATUS: &str = "status/mirror-sync";
const OCI_MANIFEST: &str = "oci/manifest/";
const OCI_BLOB: &str = "oci/blob/";
const OCI_TAG: &str = "oci/tag/";
const OCI_REFERRERS: &str = "oci/referrers/";
const OCI_TAG_LIST: &str = "oci/tags/";

impl Key {
    /// A key from its string form, only inside the store (what the index
    /// holds, and the store's own tests).
    pub(crate) fn raw(s: impl Into<String>) -> Key {
        Key(s.into())
    }

    /// An Image Factory artifact.
    pub fn image(schematic: &str, version: &str, asset: &str) -> Key {
        Key(format!("{IMAGE}{schematic}/{version}/{asset}"))
    }

    /// A talosctl binary.
    pub fn talosctl(version: &str, file: &str) -> Key {
        Key(format!("{TALOSCTL}{version}/{file}"))
    }

    /// A factory document at the factory's `path` (`/versions`, ...).
    pub fn factory_doc(path: &str) -> Key {
        Key(format!("{FACTORY}{path}"))
    }

    /// A schematic by its id.
    pub fn schematic(id: &str) -> Key {
        Key(format!("{SCHEMATIC}{id}"))
    }

    /// The mirror job's status record.
    pub fn mirror_status() -> Key {
        Key(MIRROR_STATUS.to_string())
    }

    /// A manifest by its digest (`sha256:<hex>`).
    pub fn oci_manifest(digest: &str) -> Key {
        Key(format!("{OCI_MANIFEST}{digest}"))
    }

    /// A blob by its digest (`sha256:<hex>`).
    pub fn oci_blob(digest: &str) -> Key {
        Key(format!("{OCI_BLOB}{digest}"))
    }

    /// A tag's mapping (`upstream`: `installer` or `ns=<host>`).
    pub fn oci_tag(upstream: &str, repo: &str, tag: &str) -> Key {
        Key(format!("{OCI_TAG}{upstream}/{repo}:{tag}"))
    }

    /// A repository's whole tag list, as the upstream last gave it.
    pub fn oci_tag_list(upstream: &str, repo: &str) -> Key {
        Key(format!("{OCI_TAG_LIST}{upstream}/{repo}"))
    }

    /// A manifest's referrers index.
    pub fn oci_referrers(upstream: &str, repo: &str, digest: &str) -> Key {
        Key(format!("{OCI_REFERRERS}{upstream}/{repo}@{digest}"))
    }

    /// The string form, as the index holds it (for messages and logs).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What this key names.
    pub fn kind(&self) -> KeyKind<'_> {
        let s = self.0.as_str();
        let other = KeyKind::Other(s);
        if let Some(rest) = s.strip_prefix(IMAGE) {
            let mut it = rest.splitn(3, '/');
            return match (it.next(), it.next(), it.next()) {
                (Some(schematic), Some(version), Some(asset)) => KeyKind::Image {
                    schematic,
                    version,
                    asset,
                },
                _ => other,
            };
        }
        if let Some(rest) = s.strip_prefix(TALOSCTL) {
            return match rest.split_once('/') {
                Some((version, file)) => KeyKind::Talosctl { version, file },
                None => other,
            };
        }
        if let Some(path) = s.strip_prefix(FACTORY)
            && path.starts_with('/')
        {
            return KeyKind::FactoryDoc { path };
        }
        if let Some(id) = s.strip_prefix(SCHEMATIC) {
            return KeyKind::Schematic { id };
        }
        if s == MIRROR_STATUS {
            return KeyKind::MirrorStatus;
        }
        if let Some(digest) = s.strip_prefix(OCI_MANIFEST) {
            return KeyKind::OciManifest { digest };
        }
        if let Some(digest) = s.strip_prefix(OCI_BLOB) {
            return KeyKind::OciBlob { digest };
        }
        if let Some(rest) = s.strip_prefix(OCI_TAG) {
            // A host may hold a port (`ns=host:5000`) but no `/`; a
            // repository no `:`; a tag neither.
            return match rest
                .split_once('/')
                .and_then(|(up, r)| r.rsplit_once(':').map(|(repo, tag)| (up, repo, tag)))
            {
                Some((upstream, repo, tag)) => KeyKind::OciTag {
                    upstream,
                    repo,
                    tag,
                },
                None => other,
            };
        }
        if let Some(rest) = s.strip_prefix(OCI_TAG_LIST) {
            return match rest.split_once('/') {
                Some((upstream, repo)) if !repo.is_empty() => {
                    KeyKind::OciTagList { upstream, repo }
                }
                _ => other,
            };
        }
        if let Some(rest) = s.strip_prefix(OCI_REFERRERS) {
            return match rest
                .split_once('/')
                .and_then(|(up, r)| r.rsplit_once('@').map(|(repo, d)| (up, repo, d)))
            {
                Some((upstream, repo, digest)) => KeyKind::OciReferrers {
                    upstream,
                    repo,
                    digest,
                },
                None => other,
            };
        }
        other
    }

    /// The family of this key.
    pub fn family(&self) -> Family {
        match self.kind() {
            KeyKind::Image { .. } => Family::Image,
            KeyKind::Talosctl { .. } => Family::Talosctl,
            KeyKind::FactoryDoc { .. } => Family::FactoryDoc,
            KeyKind::Schematic { .. } => Family::Schematic,
            KeyKind::MirrorStatus => Family::MirrorStatus,
            KeyKind::OciManifest { .. }
            | KeyKind::OciBlob { .. }
            | KeyKind::OciTag { .. }
            | KeyKind::OciTagList { .. }
            | KeyKind::OciReferrers { .. } => Family::Oci,
            KeyKind::Other(_) => Family::Other,
        }
    }

    /// The digest (hex) this key claims its object has, for the keys that
    /// name one: a blob, a manifest (`sha256:<hex>`) and a schematic (its
    /// id is the sha256 of its canonical bytes).
    pub fn claimed_digest(&self) -> Option<&str> {
        match self.kind() {
            KeyKind::OciBlob { digest } | KeyKind::OciManifest { digest } => {
                digest.strip_prefix("sha256:")
            }
            KeyKind::Schematic { id } => Some(id),
            _ => None,
        }
    }

    /// The names this key is made of (a schematic, a version, an asset, a
    /// registry host, each segment of a repository, a tag), for a reader
    /// looking for one it knows (the status page's schematic labels); a
    /// content-addressed or unknown key has none.
    pub fn names(&self) -> Vec<&str> {
        match self.kind() {
            KeyKind::Image {
                schematic,
                version,
                asset,
            } => vec![schematic, version, asset],
            KeyKind::Talosctl { version, file } => vec![version, file],
            KeyKind::Schematic { id } => vec![id],
            KeyKind::OciTag {
                upstream,
                repo,
                tag,
            } => [upstream]
                .into_iter()
                .chain(repo.split('/'))
                .chain([tag])
                .collect(),
            KeyKind::OciReferrers { upstream, repo, .. }
            | KeyKind::OciTagList { upstream, repo } => {
                [upstream].into_iter().chain(repo.split('/')).collect()
            }
            _ => Vec::new(),
        }
    }
}

impl KeyKind<'_> {
    /// The key of this kind (its string form as it always was).
    pub fn key(&self) -> Key {
        match *self {
            KeyKind::Image {
                schematic,
                version,
                asset,
            } => Key::image(schematic, version, asset),
            KeyKind::Talosctl { version, file } => Key::talosctl(version, file),
            KeyKind::FactoryDoc { path } => Key::factory_doc(path),
            KeyKind::Schematic { id } => Key::schematic(id),
            KeyKind::MirrorStatus => Key::mirror_status(),
            KeyKind::OciManifest { digest } => Key::oci_manifest(digest),
            KeyKind::OciBlob { digest } => Key::oci_blob(digest),
            KeyKind::OciTag {
                upstream,
                repo,
                tag,
            } => Key::oci_tag(upstream, repo, tag),
            KeyKind::OciReferrers {
                upstream,
                repo,
                digest,
            } => Key::oci_referrers(upstream, repo, digest),
            KeyKind::OciTagList { upstream, repo } => Key::oci_tag_list(upstream, repo),
            KeyKind::Other(s) => Key::raw(s),
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::borrow::Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// A set of keys by a leading part of their string form: every tag of one
/// repository ([`KeyPrefix::oci_tags`]), or a whole family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPrefix(String);

impl KeyPrefix {
    /// Every tag mapping of `repo` on `upstream`.
    pub fn oci_tags(upstream: &str, repo: &str) -> KeyPrefix {
        KeyPrefix(format!("{OCI_TAG}{upstream}/{repo}:"))
    }

    /// Every tag or referrers key stored for an `ns=` registry.
    pub fn held_for_ns() -> [KeyPrefix; 2] {
        [
            KeyPrefix(format!("{OCI_TAG}ns=")),
            KeyPrefix(format!("{OCI_REFERRERS}ns=")),
        ]
    }

    /// Does `key` start with this prefix? The rest of it when it does.
    pub fn rest<'a>(&self, key: &'a Key) -> Option<&'a str> {
        key.0.strip_prefix(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

    /// Every kind parses back to itself, and its string form is the format
    /// stores have always held (before the key was typed, each was built
    /// by `format!` in its module: these are those formats).
    #[test]
    fn every_kind_round_trips_in_the_old_format() {
        let d = format!("sha256:{H}");
        let cases: Vec<(Key, String)> = vec![
            (
                Key::image(H, "v1.13.6", "metal-amd64.raw.xz"),
                format!("image/{H}/v1.13.6/metal-amd64.raw.xz"),
            ),
            (
                Key::talosctl("v1.11.0", "talosctl-linux-amd64"),
                "talosctl/v1.11.0/talosctl-linux-amd64".into(),
            ),
            (Key::factory_doc("/versions"), "factory/versions".into()),
            (
                Key::factory_doc("/version/v1.13.6/extensions/official"),
                "factory/version/v1.13.6/extensions/official".into(),
            ),
            (
                Key::factory_doc(&format!("/pxe/{H}/v1.13.6/metal-amd64")),
                format!("factory/pxe/{H}/v1.13.6/metal-amd64"),
            ),
            (Key::schematic(H), format!("schematic/{H}")),
            (Key::mirror_status(), "status/mirror-sync".into()),
            (Key::oci_manifest(&d), format!("oci/manifest/{d}")),
            (Key::oci_blob(&d), format!("oci/blob/{d}")),
            (
                Key::oci_tag("ns=ghcr.io", "a/b", "v1"),
                "oci/tag/ns=ghcr.io/a/b:v1".into(),
            ),
            (
                Key::oci_tag("ns=127.0.0.1:5000", "siderolabs/kubelet", "v1.31.4"),
                "oci/tag/ns=127.0.0.1:5000/siderolabs/kubelet:v1.31.4".into(),
            ),
            (
                Key::oci_tag("installer", "installer/x", "v1.13.6"),
                "oci/tag/installer/installer/x:v1.13.6".into(),
            ),
            (
                Key::oci_referrers("ns=ghcr.io", "a/b", &d),
                format!("oci/referrers/ns=ghcr.io/a/b@{d}"),
            ),
            (
                Key::oci_tag_list("ns=ghcr.io", "a/b"),
                "oci/tags/ns=ghcr.io/a/b".into(),
            ),
        ];
        for (key, old) in &cases {
            assert_eq!(key.as_str(), old);
            assert!(!matches!(key.kind(), KeyKind::Other(_)), "{key}");
            assert_eq!(&key.kind().key(), key, "{key}");
            assert_eq!(&Key::raw(old.clone()).kind().key(), key);
            // The index's JSON holds the plain string.
            assert_eq!(
                serde_json::to_string(key).unwrap(),
                serde_json::to_string(old).unwrap()
            );
        }
        assert_eq!(
            Key::oci_tag("ns=127.0.0.1:5000", "a/b", "v1").kind(),
            KeyKind::OciTag {
                upstream: "ns=127.0.0.1:5000",
                repo: "a/b",
                tag: "v1"
            }
        );
        assert_eq!(Key::oci_blob(&d).claimed_digest(), Some(H));
        assert_eq!(Key::schematic(H).claimed_digest(), Some(H));
        assert_eq!(Key::oci_tag("installer", "a", "b").claimed_digest(), None);
        for odd in ["image/a/b", "talosctl/x", "factoryx", "oci/tag/x", "x/y"] {
            assert_eq!(Key::raw(odd).kind(), KeyKind::Other(odd));
            assert_eq!(Key::raw(odd).kind().key().as_str(), odd);
        }
        let p = KeyPrefix::oci_tags("installer", "installer/x");
        assert_eq!(
            p.rest(&Key::oci_tag("installer", "installer/x", "v1")),
            Some("v1")
        );
        assert_eq!(
            p.rest(&Key::oci_tag("installer", "installer/xy", "v1")),
            None
        );
    }
    /// The metadata record as older stores hold it (no `fresh_until`)
    /// reads, and is fresh for the reader's TTL after `fetched`; a record
    /// without one is written without the field (older binaries read it);
    /// one with it is fresh until then, whatever the reader's TTL.
    #[test]
    fn an_old_record_without_fresh_until_is_fresh_for_the_readers_ttl() {
        let now = super::super::now_secs();
        let old = format!(
            r#"{{"key":"factory/versions","digest":"{H}","size":2,"content_type":null,"fetched":{now},"pinned":false,"meta":{{}}}}"#
        );
        let e: super::super::Entry = serde_json::from_str(&old).unwrap();
        assert_eq!(e.key, Key::factory_doc("/versions"));
        assert_eq!(e.fresh_until, None);
        assert!(e.is_fresh(std::time::Duration::from_secs(60)));
        assert!(!e.is_fresh(std::time::Duration::ZERO));
        assert!(!serde_json::to_string(&e).unwrap().contains("fresh_until"));
        let mut e = e;
        e.fresh_until = Some(now + 60);
        assert!(e.is_fresh(std::time::Duration::ZERO));
        e.fresh_until = Some(now);
        assert!(!e.is_fresh(std::time::Duration::from_secs(60)));
        let back: super::super::Entry =
            serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }
}
