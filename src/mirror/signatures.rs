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
use super::item_error::{ItemError, pin};
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
) -> Result<Checked, ItemError> {
    let want = policy.want(item);
    if want == Signature::No {
        return Ok(Checked(None));
    }
    // Without keys there is nothing to refuse: committed pinned at once
    // (one index write); with keys, pinned only once verified.
    let pin_now = want != Signature::Verify;
    let r = Reference::parse(reference).map_err(ItemError::Reference)?;
    let top = registry
        .manifest_kept(up, repo, &r, pin_now)
        .await
        .map_err(|e| ItemError::registry(format!("manifest {repo}:{reference}"), e))?
        .digest;
    let tag = crate::cosign::signature_tag(top.as_str());
    let sig = match registry
        .manifest_kept(up, repo, &Reference::Tag(tag.clone()), pin_now)
        .await
    {
        Ok(m) => m,
        Err(e) if e.kind.unknown() && want == Signature::IfPresent => {
            return Ok(Checked(None));
        }
        Err(e) if e.kind.unknown() => return Err(ItemError::Unsigned(format!("{repo}:{tag}"))),
        Err(e) => return Err(ItemError::registry(format!("signature {repo}:{tag}"), e)),
    };
    let within = |e: ItemError| e.within(format!("signature {repo}:{tag}"));
    let refs = manifest_refs(&sig.body).map_err(|cause| ItemError::Malformed {
        what: format!("signature {repo}:{tag}"),
        cause,
    })?;
    let mut blobs = Vec::new();
    for (d, _) in &refs.blobs {
        let what = || format!("blob {d}");
        match registry.blob_kept(up, repo, d, pin_now).await {
            Ok(b) => {
                b.complete().await.map_err(|cause| {
                    within(ItemError::FetchOf {
                        what: what(),
                        cause,
                    })
                })?;
            }
            Err(e) => return Err(within(ItemError::registry(what(), e))),
        }
        blobs.push(d.clone());
    }
    if want == Signature::Verify {
        // The payloads are read from the store (a bucket: a GET each) on a
        // blocking thread, never on the async worker.
        let (st, body, keys) = (store.clone(), sig.body.clone(), policy.keys.clone());
        let at = top.clone();
        let verdict = tokio::task::spawn_blocking(move || {
            let read = |d: &str| payload(&st, d);
            crate::cosign::verify_manifest(&body, at.as_str(), &keys, read)
        })
        .await
        .map_err(|e| ItemError::PayloadRead {
            digest: top.clone(),
            cause: crate::Error::io("verifying the signature", std::io::Error::other(e)),
        })?;
        verdict.map_err(|cause| ItemError::Signature {
            at: format!("{repo}:{tag}"),
            cause,
        })?;
    }
    for key in blobs
        .iter()
        .map(blob_key)
        .chain([manifest_key(&sig.digest), tag_key(up, repo, &tag)])
    {
        pin(store, &key).await?;
    }
    Ok(Checked(Some(top)))
}

/// A signature layer's payload, read from the store (fetched just before).
fn payload(store: &Store, d: &str) -> Result<Vec<u8>, ItemError> {
    let digest = Digest::parse(d).map_err(|_| ItemError::PayloadDigest(d.to_string()))?;
    // A store that does not answer is not one without the payload.
    let o = match store.lookup(&blob_key(&digest)) {
        Ok(Some(o)) => o,
        Ok(None) => return Err(ItemError::PayloadMissing(digest)),
        Err(down) => {
            let cause = crate::Error::Unavailable(down.to_string());
            return Err(ItemError::PayloadRead { digest, cause });
        }
    };
    o.read_small(crate::registry::MAX_MANIFEST as u64)
        .map(|b| b.to_vec())
        .map_err(|cause| ItemError::PayloadRead { digest, cause })
}

/// After the item was synced to manifest `top`: the signature must have
/// been checked for that same manifest (a tag that moved in between fails).
pub fn after(checked: Checked, top: &Digest) -> Result<(), ItemError> {
    match checked.0 {
        Some(from) if &from != top => Err(ItemError::TagMoved {
            from,
            to: top.clone(),
        }),
        _ => Ok(()),
    }
}
