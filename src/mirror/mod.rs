//! The mirror job: fill the store ahead of time (`sync`), re-hash it
//! (`verify`), and carry it across an air gap (`export` / `import`; or
//! as a static HTTP tree or an OCI image layout, `tree_export`).
//!
//! Everything goes through the same [`crate::store::Store`] the service
//! reads, with its keys ([`crate::factory`], [`crate::registry::layout`]):
//! `image/<schematic>/<version>/<asset>`, `oci/manifest/<digest>`,
//! `oci/blob/<digest>`, `oci/tag/<upstream>/<repo>:<tag>`,
//! `oci/referrers/<upstream>/<repo>@<digest>`. Mirrored keys are pinned, so
//! `--cache-max-size` never evicts them.
//!
//! Here, shared by the commands: [`open_store`] (a store that must exist),
//! the keys a config reaches ([`reachable_keys`]) and what an export
//! carries.

pub mod bundle;
pub mod cert;
pub mod config;
pub mod golden;
pub mod item_error;
pub mod progress;
pub mod prune;
pub mod report;
pub mod signatures;
pub mod sync;
pub mod sync_report;
pub mod tree_export;
pub mod verify;

pub use bundle::{ExportReport, ImportReport, export, import, import_until};
pub use config::{Config, ExtraImage, Item, Signature, Worker};
pub use prune::{PruneReport, ReleaseHolding, holdings, prune};
pub use sync::{Output, SyncOptions, SyncReport, sync, sync_until};
pub use tree_export::{Format, TreeReport, export_tree};
pub use verify::{VerifyReport, verify};

use crate::error::{Error, Result};
use crate::registry::layout::{manifest_refs, referrers_key, tag_key};
use crate::registry::{Digest, UpstreamId};
use crate::store::{Entry, Key, Location, Store};

/// The store at `loc`, which must be one (an export never creates a
/// local store; a bucket is opened as it is).
pub fn open_store(loc: &Location) -> Result<Store> {
    is_store(loc)?;
    Store::open_at(loc, None)
}

/// [`open_store`] only to look (`mirror prune --dry-run`): nothing in the
/// store changes ([`Store::open_untouched`]).
pub fn look_at_store(loc: &Location) -> Result<Store> {
    is_store(loc)?;
    Store::open_untouched(loc)
}

fn is_store(loc: &Location) -> Result<()> {
    match loc.dir() {
        Some(dir) if !dir.join("index").is_dir() => Err(Error::bad_input(format!(
            "--cache-dir {}: not a talos-gen store",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// The entries an export carries: all, or what `cfg` reaches. Items of
/// `cfg` that are not (fully) stored refuse the export, named.
fn selected_entries(store: &Store, cfg: Option<&Config>) -> Result<Vec<Entry>> {
    Ok(match cfg {
        None => store.entries(),
        Some(cfg) => {
            let (keys, missing) = reachable_keys(store, cfg);
            if !missing.is_empty() {
                return Err(Error::refused(format!(
                    "not in the store (run mirror sync first): {}",
                    missing.join(", ")
                )));
            }
            keys.iter().filter_map(|k| store.entry(k)).collect()
        }
    })
}

/// Every store key a config's items reach in `store` (schematics, the
/// factory's documents, tags, manifests, blobs, images); the items not
/// (fully) stored are named in the
/// error list. A schematic given by file must be stored (sync stores it);
/// one given by ID is carried when the store has it.
pub fn reachable_keys(store: &Store, cfg: &Config) -> (Vec<Key>, Vec<String>) {
    let mut keys = Vec::new();
    let mut missing = Vec::new();
    for s in cfg.all_schematics() {
        let key = crate::known_schematics::store_key(&s.id);
        if store.entry(&key).is_some() {
            keys.push(key);
        } else if s.canonical.is_some() {
            missing.push(format!("schematic {}", s.id));
        }
    }
    // The factory's keys and lists of its releases travel when stored
    // (the factory may offer none: never missing).
    for doc in cfg.factory_docs() {
        let key = doc.store_key();
        if store.entry(&key).is_some() {
            keys.push(key);
        }
    }
    for item in cfg.items() {
        if !item_keys(store, &item, &mut keys) {
            missing.push(item.name());
        }
    }
    (keys, missing)
}

/// Add the store keys `item` reaches to `keys` (each once); `false` when
/// the item is not (fully) stored.
pub fn item_keys(store: &Store, item: &Item, keys: &mut Vec<Key>) -> bool {
    let (up, repo, reference) = match item {
        Item::Image(_) | Item::Talosctl(_) => {
            let key = match item {
                Item::Image(k) => k.store_key(),
                Item::Talosctl(k) => k.store_key(),
                _ => unreachable!(),
            };
            if store.entry(&key).is_some() {
                if !keys.contains(&key) {
                    keys.push(key);
                }
                return true;
            }
            return false;
        }
        Item::Installer { repo, tag } => (UpstreamId::Installer, repo.clone(), tag.clone()),
        Item::Extra(x) => (
            UpstreamId::Mirror(x.host.clone()),
            x.repo.clone(),
            x.reference.clone(),
        ),
    };
    let top = if let Some(d) = reference.strip_prefix("sha256:").and_then(Digest::from_hex) {
        Some(d)
    } else {
        let k = tag_key(&up, &repo, &reference);
        store.entry(&k).and_then(|e| {
            if !keys.contains(&k) {
                keys.push(k);
            }
            Digest::from_hex(&e.digest)
        })
    };
    let Some(top) = top else {
        return false;
    };
    let mut queue = vec![top.clone()];
    // Its cosign signature (`sha256-<hex>.sig`) travels with it when stored.
    let sig = tag_key(&up, &repo, &crate::cosign::signature_tag(top.as_str()));
    if let Some(d) = store.entry(&sig).and_then(|e| Digest::from_hex(&e.digest)) {
        if !keys.contains(&sig) {
            keys.push(sig);
        }
        queue.push(d);
    }
    // Its referrers index (and every manifest it lists) likewise. An index
    // the store holds but does not give (it does not answer, the read
    // fails, the body is not an index) leaves the item incomplete: what it
    // lists is unknown, never taken for nothing (a prune would remove it).
    let rk = referrers_key(&up, &repo, &top);
    let mut complete = true;
    if store.entry(&rk).is_some() {
        let listed = match store.lookup(&rk) {
            Ok(Some(o)) => o
                .read_small(crate::registry::MAX_LIST as u64)
                .ok()
                .and_then(|b| manifest_refs(&b).ok()),
            Ok(None) | Err(_) => None,
        };
        match listed {
            Some(r) => queue.extend(r.manifests),
            None => complete = false,
        }
        if !keys.contains(&rk) {
            keys.push(rk);
        }
    }
    let reached = crate::registry::layout::reach_stored(store, queue);
    for (_, e) in reached.objects {
        if !keys.contains(&e.key) {
            keys.push(e.key);
        }
    }
    complete && reached.complete
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::layout::{manifest_key, referrers_key};
    use crate::store::Meta;
    use std::io::{Seek, SeekFrom, Write};

    /// `body` stored under `key` and under its manifest key.
    async fn put(store: &Store, keys: &[Key], body: &str) -> Digest {
        let d = Digest::of(body.as_bytes());
        for key in keys.iter().chain([&manifest_key(&d)]) {
            let bytes = body.as_bytes().to_vec().into();
            store
                .commit_bytes(key, bytes, Meta::default())
                .await
                .unwrap();
        }
        d
    }

    /// A referrers index the store holds but does not give (its object
    /// rotten) leaves the item incomplete, so a prune refuses: what it
    /// lists is unknown, never taken for nothing.
    #[tokio::test]
    async fn a_referrers_index_that_cannot_be_read_leaves_the_item_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let up = UpstreamId::Mirror("ghcr.io".into());
        // The image (an index with no children), tagged v1; one referrer.
        let top = put(&store, &[tag_key(&up, "a/b", "v1")], r#"{"manifests":[]}"#).await;
        let referrer = put(&store, &[], r#"{"manifests":[],"annotations":{"a":"b"}}"#).await;
        let rk = referrers_key(&up, "a/b", &top);
        let listing = format!(r#"{{"manifests":[{{"digest":"{referrer}","size":2}}]}}"#);
        let e = store
            .commit_bytes(&rk, listing.into_bytes().into(), Meta::default())
            .await
            .unwrap();
        let item = Item::Extra(crate::mirror::config::ExtraImage {
            host: "ghcr.io".into(),
            repo: "a/b".into(),
            reference: "v1".into(),
        });
        let mut keys = Vec::new();
        assert!(item_keys(&store, &item, &mut keys), "{keys:?}");
        assert!(keys.contains(&rk), "{keys:?}");
        assert!(keys.contains(&manifest_key(&referrer)), "{keys:?}");

        // A flipped byte in the index's object: the read fails its check.
        let path = store.object_path(&e.digest).unwrap();
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.seek(SeekFrom::Start(5)).unwrap();
        f.write_all(b"#").unwrap();
        drop(f);
        let mut keys = Vec::new();
        assert!(!item_keys(&store, &item, &mut keys), "{keys:?}");
    }
}
