//! The store as the operator's pages see it: the status page, `/metrics`,
//! `/readyz` and the gate that answers 503 while a bucket does not answer.
//! Read-only figures, whether the store answers, and small documents kept
//! in it (the last `mirror sync` result). The HTTP edge holds an
//! [`Inventory`], never the [`Store`]: nothing a handler does can write,
//! pin or delete.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::store::{Key, KeyKind, Store};

/// How long a page waits for a document the store must read (a slow
/// bucket): the read goes on, and the next page has it.
const DOCUMENT_WAIT: Duration = Duration::from_millis(50);

/// A read-only handle on the store.
#[derive(Clone)]
pub struct Inventory {
    store: Store,
    /// Documents read, by key: (digest, bytes). Objects are immutable, so
    /// a document is read again only when its key names another digest.
    docs: Arc<Mutex<HashMap<Key, (String, Bytes)>>>,
}

/// What a stored key is, as the status page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed {
    /// A disk image: `<schematic>/<version>/<asset>`.
    Artifact(String),
    /// A tag mapping: `<upstream>/<repo>:<tag>`.
    Tag(String),
    Manifest,
    Blob,
    Schematic,
    Other,
}

/// One stored key.
#[derive(Debug, Clone)]
pub struct StoredKey {
    pub key: Key,
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
    /// Orphan objects, and their bytes, swept since start.
    pub swept_objects: u64,
    pub swept_bytes: u64,
    /// Unfinished multipart uploads aborted since start.
    pub aborted_uploads: u64,
}

impl StoredKey {
    /// What this key is, for the status page (the key's kind, parsed by
    /// the store).
    pub fn listed(&self) -> Listed {
        match self.key.kind() {
            KeyKind::Image {
                schematic,
                version,
                asset,
            } => Listed::Artifact(format!("{schematic}/{version}/{asset}")),
            KeyKind::OciTag {
                upstream,
                repo,
                tag,
            } => Listed::Tag(format!("{upstream}/{repo}:{tag}")),
            KeyKind::OciManifest { .. } => Listed::Manifest,
            KeyKind::OciBlob { .. } => Listed::Blob,
            KeyKind::Schematic { .. } => Listed::Schematic,
            _ => Listed::Other,
        }
    }
}

impl Inventory {
    pub fn new(store: Store) -> Inventory {
        Inventory {
            store,
            docs: Arc::default(),
        }
    }

    /// The store's own bound on one call (a bucket's `--upstream-timeout`).
    pub fn call_bound(&self) -> Duration {
        self.store.call_bound()
    }

    /// The directory or bucket URL.
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// `--cache-max-size`.
    pub fn max_size(&self) -> Option<u64> {
        self.store.max_size()
    }

    /// Did the last check find the store answering?
    pub fn available(&self) -> bool {
        self.store.available()
    }

    /// Does the index hold `key` (as this process knows it)?
    pub fn holds(&self, key: &Key) -> bool {
        self.store.entry(key).is_some()
    }

    pub fn totals(&self) -> Totals {
        let entries = self.store.entries();
        Totals {
            bytes: self.store.total_size(),
            objects: self.store.object_count(),
            keys: entries.len(),
            pinned: entries.iter().filter(|e| e.pinned).count(),
            corrupt_dropped: self.store.corrupt_dropped(),
            swept_objects: self.store.swept().0,
            swept_bytes: self.store.swept().1,
            aborted_uploads: self.store.aborted_uploads(),
        }
    }

    /// Every key, sorted, with when it was last read (the status page;
    /// [`Inventory::totals`] is the cheaper count).
    pub fn keys(&self) -> Vec<StoredKey> {
        self.store
            .entries()
            .into_iter()
            .map(|e| StoredKey {
                last_use: self.store.last_use(&e.digest),
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
    /// The page never waits on the store for it: a copy already read (same
    /// digest) is answered from memory, else the read runs on a blocking
    /// thread for at most [`DOCUMENT_WAIT`] (and fills the copy when done).
    pub async fn document(&self, key: &Key, max: u64) -> Option<Bytes> {
        let digest = self.store.entry(key)?.digest;
        let docs = || self.docs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((d, b)) = docs().get(key)
            && *d == digest
        {
            return Some(b.clone());
        }
        let (store, k, cache) = (self.store.clone(), key.clone(), self.docs.clone());
        let read = tokio::task::spawn_blocking(move || {
            // (a store that did not answer: shown as not read, a display)
            let o = store.lookup(&k).ok()??;
            let d = o.entry.digest.clone();
            let b = o.read_small(max).ok()?;
            cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(k, (d, b.clone()));
            Some(b)
        });
        tokio::time::timeout(DOCUMENT_WAIT, read)
            .await
            .ok()?
            .ok()
            .flatten()
    }

    /// Ask the store whether it answers, within `limit` (a local directory
    /// always does; a bucket gets a HEAD), off the async threads.
    pub async fn check(&self, limit: Duration) -> Result<()> {
        self.check_task(limit)
            .await
            .map_err(|e| Error::io("checking the store", std::io::Error::other(e)))?
    }

    /// [`Inventory::check`] as a task of its own on a blocking thread, so
    /// a caller can stop waiting for it without starting another (the
    /// background prober, `http::ops`).
    pub fn check_task(&self, limit: Duration) -> tokio::task::JoinHandle<Result<()>> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.check(limit))
    }
}
