//! Cosign signatures in `mirror sync`: before an installer or image is
//! fetched, its signature manifest (`sha256-<hex>.sig` in the same
//! repository) is fetched and pinned beside it, and with `--cosign-key`
//! verified offline ([`crate::cosign`]). A missing or bad signature under
//! `--cosign-key` fails the item before any of its objects is fetched or
//! pinned; the other items go on.
//!
//! `sync` calls [`before`] and [`after`] once per OCI item; everything else
//! about signatures lives here.

use super::config::{Config, Item, Signature};
use crate::cosign::PublicKey;
use crate::registry::layout::{blob_key, manifest_key, manifest_refs, tag_key};
use crate::registry::{Digest, Reference, Registry, UpstreamId};
use crate::store::Store;

/// What the sync does about each item's signature.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    keys: Vec<PublicKey>,
    wanted: Vec<(Item, Signature)>,
}

impl Policy {
    pub fn from_config(cfg: &Config) -> Policy {
        Policy {
            keys: cfg.cosign_keys.clone(),
            wanted: cfg
                .items()
                .into_iter()
                .map(|i| {
                    let w = cfg.wants_signature(&i);
                    (i, w)
                })
                .collect(),
        }
    }

    fn want(&self, item: &Item) -> Signature {
        self.wanted
            .iter()
            .find(|(i, _)| i == item)
            .map_or(Signature::No, |(_, w)| *w)
    }
}

/// The manifest digest a signature was checked for (see [`after`]).
#[derive(Debug)]
pub struct Checked(Option<Digest>);

/// Fetch (and with keys verify) the signature of `repo:reference` before
/// the item itself is synced. `Err` fails the item.
pub async fn before(
    registry: &Registry,
    store: &Store,
    policy: &Policy,
    item: &Item,
    up: &UpstreamId,
    repo: &str,
    reference: &str,
) -> Result<Checked, String> {
    let want = policy.want(item);
    if want == Signature::No {
        return Ok(Checked(None));
    }
    // Without keys there is nothing to refuse: committed pinned at once
    // (one index write); with keys, pinned only once verified.
    let pin = want != Signature::Verify;
    let r = Reference::parse(reference).map_err(|e| format!("{e:?}"))?;
    let top = registry
        .manifest_kept(up, repo, &r, pin)
        .await
        .map_err(|e| format!("manifest {repo}:{reference}: {}", e.message))?
        .digest;
    let tag = crate::cosign::signature_tag(top.as_str());
    let sig = match registry
        .manifest_kept(up, repo, &Reference::Tag(tag.clone()), pin)
        .await
    {
        Ok(m) => m,
        Err(e) if e.kind.unknown() && want == Signature::IfPresent => {
            return Ok(Checked(None));
        }
        Err(e) if e.kind.unknown() => {
            return Err(format!(
                "no cosign signature ({repo}:{tag} not found); --cosign-key needs one"
            ));
        }
        Err(e) => return Err(format!("signature {repo}:{tag}: {}", e.message)),
    };
    let refs = manifest_refs(&sig.body).map_err(|e| format!("signature {repo}:{tag}: {e}"))?;
    let mut blobs = Vec::new();
    for (d, _) in &refs.blobs {
        match registry.blob_kept(up, repo, d, pin).await {
            Ok(b) => {
                b.complete()
                    .await
                    .map_err(|e| format!("signature {repo}:{tag}: blob {d}: {e}"))?;
            }
            Err(e) => return Err(format!("signature {repo}:{tag}: blob {d}: {}", e.message)),
        }
        blobs.push(d.clone());
    }
    if want == Signature::Verify {
        let read = |d: &str| -> Result<Vec<u8>, String> {
            let d = Digest::parse(d).map_err(|_| format!("unsupported digest {d:?}"))?;
            let o = store
                .get(&blob_key(&d))
                .ok_or_else(|| format!("payload {d} is not in the store"))?;
            o.read_small(crate::registry::MAX_MANIFEST as u64)
                .map(|b| b.to_vec())
                .map_err(|e| format!("reading payload {d}: {e}"))
        };
        crate::cosign::verify_manifest(&sig.body, top.as_str(), &policy.keys, read)
            .map_err(|e| format!("cosign signature {repo}:{tag}: {e}"))?;
    }
    for key in blobs
        .iter()
        .map(blob_key)
        .chain([manifest_key(&sig.digest), tag_key(up, repo, &tag)])
    {
        store
            .set_pinned(&key, true)
            .await
            .map_err(|e| format!("pinning {key}: {e}"))?;
    }
    Ok(Checked(Some(top)))
}

/// After the item was synced to manifest `top`: the signature must have
/// been checked for that same manifest (a tag that moved in between fails).
pub fn after(checked: Checked, top: &Digest) -> Result<(), String> {
    match checked.0 {
        Some(d) if &d != top => Err(format!(
            "the tag moved from {d} (whose signature was fetched) to {top} during the sync; run it again"
        )),
        _ => Ok(()),
    }
}
