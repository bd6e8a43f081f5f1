//! The last `mirror sync` result, kept in the store itself (key
//! [`status_key`], a small JSON object, pinned) so that the `serve` reading
//! the same store shows it on its status page.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::inventory::Inventory;
use crate::store::{Meta, Store};

use super::sync::SyncReport;

/// The store key of the last sync result.
/// The store key of the last run's record (`status/mirror-sync`).
pub fn status_key() -> crate::store::Key {
    crate::store::Key::mirror_status()
}

/// One failed item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailedItem {
    pub name: String,
    pub error: String,
}

/// What the last `mirror sync` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncStatus {
    /// Unix seconds when the run ended.
    pub finished: u64,
    pub ok: bool,
    pub items: usize,
    pub failed: Vec<FailedItem>,
    pub fetched: usize,
    pub fetched_bytes: u64,
    pub stored: usize,
    pub stored_bytes: u64,
    pub elapsed_secs: f64,
    /// The summary line the job printed.
    pub summary: String,
    /// Per Talos release of the config, what the store holds (after the
    /// prune, when there was one).
    #[serde(default)]
    pub releases: Vec<super::prune::ReleaseHolding>,
    /// `sync` or `import` (what wrote this result; older results: sync).
    #[serde(default = "sync_kind")]
    pub kind: String,
    /// For an import: the bundle file it read.
    #[serde(default)]
    pub bundle: Option<String>,
    /// For an import: when the sync that filled the exporting store ended
    /// (its result travels in the bundle), if it carried one.
    #[serde(default)]
    pub carried_sync: Option<u64>,
}

fn sync_kind() -> String {
    "sync".into()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

impl SyncStatus {
    pub fn from_report(r: &SyncReport) -> SyncStatus {
        let failed: Vec<FailedItem> = r
            .failed()
            .into_iter()
            .map(|i| FailedItem {
                name: i.name.clone(),
                error: i.error.clone().unwrap_or_default(),
            })
            .collect();
        SyncStatus {
            finished: now_secs(),
            ok: failed.is_empty(),
            items: r.items.len(),
            failed,
            fetched: r.items.iter().map(|i| i.fetched).sum(),
            fetched_bytes: r.items.iter().map(|i| i.fetched_bytes).sum(),
            stored: r.items.iter().map(|i| i.stored).sum(),
            stored_bytes: r.items.iter().map(|i| i.stored_bytes).sum(),
            elapsed_secs: r.elapsed.as_secs_f64(),
            summary: r.summary(),
            releases: Vec::new(),
            kind: sync_kind(),
            bundle: None,
            carried_sync: None,
        }
    }

    /// What `mirror import` of `bundle` did, as the status page shows a
    /// sync: when, what, from which bundle (and the sync it carried).
    pub fn from_import(
        r: &super::bundle::ImportReport,
        bundle: &str,
        elapsed: std::time::Duration,
        carried: Option<&SyncStatus>,
    ) -> SyncStatus {
        let mut failed: Vec<FailedItem> = r
            .bad
            .iter()
            .map(|b| FailedItem {
                name: b.clone(),
                error: "bytes do not match its name; not imported".into(),
            })
            .collect();
        failed.extend(r.missing.iter().map(|k| FailedItem {
            name: k.clone(),
            error: "its object is not in the bundle; not imported".into(),
        }));
        SyncStatus {
            finished: now_secs(),
            ok: failed.is_empty(),
            items: r.keys + r.present,
            failed,
            fetched: r.objects,
            fetched_bytes: r.bytes,
            stored: r.keys + r.present,
            stored_bytes: r.bytes,
            elapsed_secs: elapsed.as_secs_f64(),
            summary: r.summary(),
            releases: carried.map(|c| c.releases.clone()).unwrap_or_default(),
            kind: "import".into(),
            bundle: Some(bundle.to_string()),
            carried_sync: carried.map(|c| c.finished),
        }
    }
}

/// After `mirror import`: the result the bundle carried (the exporting
/// store's last sync, now in this store, if any), then this import's
/// result written over it.
pub async fn write_import(
    loc: impl Into<crate::store::Location>,
    r: &super::bundle::ImportReport,
    bundle: &str,
    elapsed: std::time::Duration,
) -> Result<SyncStatus> {
    let loc = loc.into();
    let store = crate::compose::open_store(loc, None).await?;
    // (a store that did not answer is said so, never taken for "no record")
    let carried = read(&store)?.filter(|c| c.kind == "sync");
    let status = SyncStatus::from_import(r, bundle, elapsed, carried.as_ref());
    write(&store, &status).await?;
    Ok(status)
}

/// Write the result of a sync into the store at `cache_dir`.
pub async fn write(store: &Store, status: &SyncStatus) -> Result<()> {
    let json = serde_json::to_vec_pretty(status)
        .map_err(|e| crate::Error::refused(format!("encoding the sync status: {e}")))?;
    let meta = Meta {
        content_type: Some("application/json".into()),
        pinned: true,
        ..Default::default()
    };
    store.commit_bytes(&status_key(), json.into(), meta).await?;
    Ok(())
}

/// Largest sync result read back.
const MAX_STATUS: u64 = 1 << 20;

/// The last sync result in `store`: `Ok(None)` when none is stored (or it
/// does not parse), `Err` when the store did not answer.
pub fn read(store: &Store) -> Result<Option<SyncStatus>, crate::store::Unavailable> {
    let Some(o) = store.lookup(&status_key())? else {
        return Ok(None);
    };
    Ok(o.read_small(MAX_STATUS)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok()))
}

/// The same, read through the operator's [`Inventory`] (the status page).
pub async fn read_from(inventory: &Inventory) -> Option<SyncStatus> {
    let b = inventory.document(&status_key(), MAX_STATUS).await?;
    serde_json::from_slice(&b).ok()
}
