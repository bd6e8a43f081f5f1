//! The OCI layout in the shared store, and what a manifest points at: the
//! one place the registry, `mirror sync`, the signatures step and
//! `mirror export` take their keys and their manifest walk from.
//!
//! Keys:
//! - `oci/manifest/sha256:<hex>`: a manifest, byte for byte as the upstream
//!   sent it, with the upstream's media type as content type;
//! - `oci/blob/sha256:<hex>`: a blob;
//! - `oci/tag/<upstream>/<repo>:<tag>`: a link to the manifest a tag named
//!   when last asked (the entry's fetch time drives revalidation);
//! - `oci/referrers/<upstream>/<repo>@sha256:<hex>`: the referrers index
//!   (OCI 1.1) of that manifest as last answered (the upstream's, or the
//!   empty index `mirror sync` kept for an upstream without the API).
//!
//! `<upstream>` is [`UpstreamId::key_name`]: `installer`, or `ns=<host>`.
//! The registries a store holds objects for are read off these keys
//! ([`held_host`]): nothing else records them.

use super::names::{Digest, UpstreamId};
use crate::store::{Entry, Key, KeyKind, KeyPrefix, Store};

/// The store key of a manifest.
pub fn manifest_key(d: &Digest) -> Key {
    Key::oci_manifest(d.as_str())
}

/// The store key of a blob.
pub fn blob_key(d: &Digest) -> Key {
    Key::oci_blob(d.as_str())
}

/// The digest (hex) a key claims its object has, for the keys that name
/// one: a blob, a manifest and a schematic (a schematic's ID is the sha256
/// of its canonical bytes). A key that claims a digest its object does not
/// have is never imported, is bad in `mirror verify`, and is never served.
pub fn claimed_digest(key: &Key) -> Option<&str> {
    key.claimed_digest()
}

/// A registry document (a manifest, an index, a referrers page, a `Link`
/// header) or a stored key that is not what it claims: why, in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// `Err(why)` when `key` claims a digest other than `object` (hex).
pub fn check_claim(key: &Key, object: &str) -> Result<(), Malformed> {
    match claimed_digest(key) {
        Some(c) if c != object => Err(Malformed(format!(
            "{key} names sha256:{c} but its object is sha256:{object}"
        ))),
        _ => Ok(()),
    }
}

/// The store key of a tag mapping.
pub fn tag_key(up: &UpstreamId, repo: &str, tag: &str) -> Key {
    Key::oci_tag(&up.key_name(), repo, tag)
}

/// The store key of a repository's last whole tag list.
pub fn tag_list_key(up: &UpstreamId, repo: &str) -> Key {
    Key::oci_tag_list(&up.key_name(), repo)
}

/// The store key of a manifest's referrers index.
pub fn referrers_key(up: &UpstreamId, repo: &str, d: &Digest) -> Key {
    Key::oci_referrers(&up.key_name(), repo, d.as_str())
}

/// Every tag key of `repo` (the tag follows the prefix).
pub fn tag_prefix(up: &UpstreamId, repo: &str) -> KeyPrefix {
    KeyPrefix::oci_tags(&up.key_name(), repo)
}

/// The `ns` registry host a tag or referrers key was stored for
/// (`oci/tag/ns=ghcr.io/siderolabs/kubelet:v1` -> `ghcr.io`).
pub fn held_host(key: &Key) -> Option<&str> {
    match key.kind() {
        KeyKind::OciTag { upstream, .. } | KeyKind::OciReferrers { upstream, .. } => {
            upstream.strip_prefix("ns=")
        }
        _ => None,
    }
}

/// What a manifest points at: what a pull of it fetches from the registry.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ManifestRefs {
    /// Child manifests (of an index / manifest list).
    pub manifests: Vec<Digest>,
    /// Config, layers and artifact blobs, with their declared sizes;
    /// without the blobs a client fetches from their `urls`.
    pub blobs: Vec<(Digest, Option<u64>)>,
}

/// Parse the references out of a manifest or index body.
///
/// Foreign layers: a blob whose descriptor lists `urls` (Docker's
/// `application/vnd.docker.image.rootfs.foreign.diff.tar.gzip`, OCI's
/// `application/vnd.oci.image.layer.nondistributable.*`) is not walked. A
/// client fetches it from those URLs: containerd tries them first and
/// comes to the registry only when every URL answers 404, and push and
/// copy tools (skopeo, Docker) leave such a layer out of the registry, so
/// the upstream need not have it. The media type alone does not decide: a
/// non-distributable layer without `urls` has no source but the registry,
/// so it is carried like any other.
pub fn manifest_refs(body: &[u8]) -> Result<ManifestRefs, Malformed> {
    #[derive(serde::Deserialize)]
    struct Desc {
        digest: String,
        size: Option<u64>,
        #[serde(default)]
        urls: Vec<String>,
    }
    #[derive(serde::Deserialize)]
    struct M {
        #[serde(default)]
        manifests: Vec<Desc>,
        config: Option<Desc>,
        #[serde(default)]
        layers: Vec<Desc>,
        #[serde(default)]
        blobs: Vec<Desc>,
    }
    let m: M =
        serde_json::from_slice(body).map_err(|e| Malformed(format!("not a manifest: {e}")))?;
    let parse = |d: &Desc| {
        Digest::parse(&d.digest)
            .map_err(|_| Malformed(format!("unsupported digest {:?}", d.digest)))
    };
    let mut out = ManifestRefs::default();
    for d in &m.manifests {
        out.manifests.push(parse(d)?);
    }
    for d in m.config.iter().chain(&m.layers).chain(&m.blobs) {
        let digest = parse(d)?;
        if d.urls.is_empty() {
            out.blobs.push((digest, d.size));
        }
    }
    Ok(out)
}

/// What the stored manifest graph below some manifests holds.
#[derive(Debug, Default)]
pub struct Reached {
    /// Every stored object reached, each once, in walk order (a manifest,
    /// then its blobs): its digest and its store entry.
    pub objects: Vec<(Digest, Entry)>,
    /// False when a manifest or blob is missing, or a manifest unreadable.
    pub complete: bool,
}

/// Walk the manifests `tops` reach (an index's children, each manifest's
/// blobs by [`manifest_refs`]) through the store: the one walk `mirror`
/// pins, prunes and exports by. It reads only manifests (small, their
/// sha256 checked) and never fetches.
pub fn reach_stored(store: &Store, tops: Vec<Digest>) -> Reached {
    let mut out = Reached {
        objects: Vec::new(),
        complete: true,
    };
    let mut queue = tops;
    let (mut seen, mut blobs_seen): (Vec<Digest>, Vec<Digest>) = Default::default();
    while let Some(d) = queue.pop() {
        if seen.contains(&d) {
            continue;
        }
        seen.push(d.clone());
        // A store that does not answer leaves the walk incomplete, as an
        // absent manifest does: never a smaller set taken as the whole.
        let refs = store
            .lookup(&manifest_key(&d))
            .ok()
            .flatten()
            .and_then(|o| {
                let entry = o.entry.clone();
                let body = o.read_small(super::MAX_MANIFEST as u64).ok()?;
                Some((entry, manifest_refs(&body)))
            });
        let Some((entry, refs)) = refs else {
            out.complete = false;
            continue;
        };
        out.objects.push((d, entry));
        let Ok(refs) = refs else {
            out.complete = false;
            continue;
        };
        queue.extend(refs.manifests);
        for (b, _) in refs.blobs {
            match store.entry(&blob_key(&b)) {
                Some(e) if !blobs_seen.contains(&b) => {
                    blobs_seen.push(b.clone());
                    out.objects.push((b, e));
                }
                Some(_) => {}
                None => out.complete = false,
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn refs() {
        let d = digest('a');
        let idx = format!(r#"{{"manifests":[{{"digest":"{d}","size":3}}]}}"#);
        let r = manifest_refs(idx.as_bytes()).unwrap();
        assert_eq!(r.manifests.len(), 1);
        let m = format!(
            r#"{{"config":{{"digest":"{d}","size":1}},"layers":[{{"digest":"{d}","size":2}}]}}"#
        );
        assert_eq!(manifest_refs(m.as_bytes()).unwrap().blobs.len(), 2);
        assert!(manifest_refs(b"[]").is_err());
        assert!(manifest_refs(br#"{"layers":[{"digest":"md5:x"}]}"#).is_err());
    }

    #[test]
    fn a_layer_with_urls_is_left_to_them_and_one_without_is_carried() {
        let (config, plain, foreign, oci_nd, bare_nd) = (
            digest('c'),
            digest('1'),
            digest('2'),
            digest('3'),
            digest('4'),
        );
        let m = format!(
            r#"{{"schemaVersion":2,
            "config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"{config}","size":10}},
            "layers":[
              {{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","digest":"{plain}","size":1}},
              {{"mediaType":"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip","digest":"{foreign}","size":2,
                "urls":["https://mcr.microsoft.com/v2/windows/servercore/blobs/{foreign}"]}},
              {{"mediaType":"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip","digest":"{oci_nd}","size":3,
                "urls":["https://example.com/layer"]}},
              {{"mediaType":"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip","digest":"{bare_nd}","size":4}}
            ]}}"#
        );
        let r = manifest_refs(m.as_bytes()).unwrap();
        let want: Vec<(Digest, Option<u64>)> = [(config, 10), (plain, 1), (bare_nd, 4)]
            .into_iter()
            .map(|(d, n)| (Digest::parse(&d).unwrap(), Some(n)))
            .collect();
        assert_eq!(r.blobs, want);
        assert!(r.manifests.is_empty());
        // A foreign layer's digest is still checked.
        let bad = r#"{"layers":[{"digest":"md5:x","urls":["https://example.com/l"]}]}"#;
        assert!(manifest_refs(bad.as_bytes()).is_err());
    }

    #[test]
    fn keys() {
        // The string forms are `store::key`'s test; here what the registry
        // puts in them.
        let d = Digest::parse(&digest('a')).unwrap();
        assert_eq!(
            manifest_key(&d).kind(),
            KeyKind::OciManifest { digest: d.as_str() }
        );
        assert_eq!(blob_key(&d).kind(), KeyKind::OciBlob { digest: d.as_str() });
        assert_eq!(
            tag_key(&UpstreamId::Mirror("ghcr.io".into()), "a/b", "v1").kind(),
            KeyKind::OciTag {
                upstream: "ns=ghcr.io",
                repo: "a/b",
                tag: "v1"
            }
        );
        assert_eq!(
            tag_key(&UpstreamId::Installer, "installer/x", "v1.13.6").kind(),
            KeyKind::OciTag {
                upstream: "installer",
                repo: "installer/x",
                tag: "v1.13.6"
            }
        );
        let up = UpstreamId::Mirror("ghcr.io".into());
        assert_eq!(
            referrers_key(&up, "a/b", &d).kind(),
            KeyKind::OciReferrers {
                upstream: "ns=ghcr.io",
                repo: "a/b",
                digest: d.as_str()
            }
        );
        let tag = tag_key(&up, "a/b", "v1");
        assert_eq!(tag_prefix(&up, "a/b").rest(&tag), Some("v1"));
        assert_eq!(
            tag_prefix(&up, "a/b").rest(&tag_key(&up, "a/b/c", "v1")),
            None
        );
        assert_eq!(held_host(&tag), Some("ghcr.io"));
        assert_eq!(held_host(&referrers_key(&up, "a", &d)), Some("ghcr.io"));
        assert_eq!(
            held_host(&tag_key(&UpstreamId::Installer, "installer/x", "v1")),
            None
        );
        assert_eq!(held_host(&manifest_key(&d)), None);
    }
}
