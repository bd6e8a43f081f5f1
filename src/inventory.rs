//! The store as the operator's pages see it: the status page, `/metrics`,
//! `/readyz` and the gate that answers 503 while a bucket does not answer.
//! Read-only figures, whether the store answers, and small documents kept
//! in it (the last `mirror sync` result). The HTTP edge holds an
//! [`Inventory`], never the [`Store`]: nothing a handler does can write,
//! pin or delete.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::Store;

/// A read-only handle on the store.
#[derive(Clone)]
pub struct Inventory(Store);

/// One stored key.
#[derive(Debug, Clone)]
pub struct StoredKey {
    pub key: String,
    /// Lowercase hex sha256 of the bytes.
    pub digest: String,
    pub size: u64,
    /// When the bytes were fetched, and last read (seconds since the epoch;
    /// a read not seen since this process started is `None`).
    pub fetched: u64,
    pub last_use: Option<u64>,
    pub pinned: bool,
}

/// The store's figures at one moment.
#[derive(Debug, Clone)]
pub struct Totals {
    /// Bytes of the objects held.
    pub bytes: u64,
    /// Objects (one per digest; keys may share one).
    pub objects: usize,
    /// Keys, and how many of them are pinned.
    pub keys: usize,
    pub pinned: usize,
    /// Objects dropped since start because a read found them rotten.
    pub corrupt_dropped: u64,
}

impl Inventory {
    pub fn new(store: Store) -> Inventory {
        Inventory(store)
    }

    /// The directory or bucket URL.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// `--cache-max-size`.
    pub fn max_size(&self) -> Option<u64> {
        self.0.max_size()
    }

    pub fn is_remote(&self) -> bool {
        self.0.is_remote()
    }

    /// Did the last check find the store answering?
    pub fn available(&self) -> bool {
        self.0.available()
    }

    pub fn totals(&self) -> Totals {
        let entries = self.0.entries();
        Totals {
            bytes: self.0.total_size(),
            objects: self.0.object_count(),
            keys: entries.len(),
            pinned: entries.iter().filter(|e| e.pinned).count(),
            corrupt_dropped: self.0.corrupt_dropped(),
        }
    }

    /// Every key, sorted, with when it was last read (the status page;
    /// [`Inventory::totals`] is the cheaper count).
    pub fn keys(&self) -> Vec<StoredKey> {
        self.0
            .entries()
            .into_iter()
            .map(|e| StoredKey {
                last_use: self.0.last_use(&e.digest),
                key: e.key,
                digest: e.digest,
                size: e.size,
                fetched: e.fetched,
                pinned: e.pinned,
            })
            .collect()
    }

    /// A small stored document (at most `max` bytes, its sha256 checked);
    /// `None` when absent or unreadable.
    pub fn document(&self, key: &str, max: u64) -> Option<bytes::Bytes> {
        self.0.get(key)?.read_small(max).ok()
    }

    /// Ask the store whether it answers, within `limit` (a local directory
    /// always does; a bucket gets a HEAD), off the async threads.
    pub async fn check(&self, limit: Duration) -> Result<()> {
        let store = self.0.clone();
        tokio::task::spawn_blocking(move || store.check(limit))
            .await
            .map_err(|e| Error::io("checking the store", std::io::Error::other(e)))?
    }

    /// For a bucket: check every `every` (each check bounded by `limit`), so
    /// that [`Inventory::available`] follows it down and back up, and log
    /// each change. A local directory needs no watch.
    pub fn watch(&self, every: Duration, limit: Duration) {
        if !self.is_remote() {
            return;
        }
        let inv = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let was = inv.available();
                let ok = inv.check(limit).await.is_ok();
                if ok != was {
                    if ok {
                        tracing::info!(store = %inv.describe(), "the store answers again");
                    } else {
                        tracing::error!(store = %inv.describe(), "the store does not answer; answering 503");
                    }
                }
            }
        });
    }
}
