//! The object store: bodies and their block checksums. An object is
//! opened under a lease with what the entry store already knows (its size
//! and checksums, read once): a warm read makes no backend round trip
//! before its first byte. A local object's file is opened at its first
//! read and kept open with its metadata while the store holds it (closed
//! with the object, or beyond [`super::entries::MAX_IDLE_FILES`] idle
//! files): the next open is memory work on the async worker
//! ([`Store::open_key`]). The commit (spool file -> object
//! -> entry), the checks that drop rotten objects, and for a bucket the
//! local tier.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use super::backend::ObjectRead;
use super::local::LocalObject;
use super::read::{Lease, StoredObject};
use super::sums::{self, Sums};
use super::{Entry, Meta, STREAM_CHUNK, Store, TempObject, now_secs};
use crate::error::{Error, Result};

/// The store holds the object but could not reach it (a bucket that does
/// not answer, with no copy in the local tier): the request fails (503),
/// it is never fetched again from the upstream.
#[derive(Debug, Clone)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Store {
    /// What a request for an object the store holds but cannot reach now
    /// is told (a bucket that does not answer: 503).
    pub(super) fn unavailable(&self) -> Unavailable {
        Unavailable(format!(
            "the store {} does not answer; try again",
            self.describe()
        ))
    }

    /// Open the object for `key` for reading (blocking); the returned
    /// lease keeps it from eviction until dropped. `None` when absent or
    /// unreachable (see [`Store::lookup`] to tell them apart).
    pub fn get(&self, key: &str) -> Option<StoredObject> {
        self.lookup(key).ok().flatten()
    }

    /// [`Store::lookup`] on a blocking thread: what the async paths call.
    pub async fn open_key(
        &self,
        key: &str,
    ) -> std::result::Result<Option<StoredObject>, Unavailable> {
        // An object held open already (its file and checksums in memory):
        // memory work only, no blocking thread.
        if let Some(o) = self.open_held(key) {
            return Ok(Some(o));
        }
        let store = self.clone();
        let key = key.to_string();
        tokio::task::spawn_blocking(move || store.lookup(&key))
            .await
            .unwrap_or_else(|e| Err(Unavailable(format!("opening a stored object: {e}"))))
    }

    /// The object for `key` if this process holds it open already (a local
    /// store keeps each object it read open, with its checksums): the
    /// lease taken, no call to the backend. `None`: ask [`Store::lookup`].
    pub(super) fn open_held(&self, key: &str) -> Option<StoredObject> {
        let (entry, file, sums, born) = {
            let mut st = self.lock();
            let entry = st.keys.get(key)?;
            let o = st.objects.get(&entry.digest)?;
            let (Some(file), Some(sums)) = (o.file.clone(), o.sums.clone()) else {
                return None;
            };
            let entry = entry.clone();
            let born = st.lease(&entry.digest)?.born;
            (entry, file, sums, born)
        };
        Some(StoredObject {
            lease: Lease {
                store: self.clone(),
                digest: entry.digest.clone(),
                born,
            },
            object: LocalObject::held(file, entry.size),
            sums,
            entry,
            tiered: false,
        })
    }

    /// A small stored object whole (at most `max` bytes, its sha256
    /// checked: a rotten one is dropped), opened and read on a blocking
    /// thread; `None` when absent, unreachable or unreadable (logged).
    pub async fn read_small_key(&self, key: &str, max: u64) -> Option<(Entry, bytes::Bytes)> {
        self.read_small_at(key, max).await.ok().flatten()
    }

    /// [`Store::read_small_key`] telling the store's silence apart: `Err`
    /// when the store holds the key but cannot read it now (a bucket that
    /// does not answer, and no copy in the local tier), so the caller
    /// answers 503 rather than fetching it again; `Ok(None)` when absent,
    /// too large, or rotten (dropped).
    pub async fn read_small_at(
        &self,
        key: &str,
        max: u64,
    ) -> std::result::Result<Option<(Entry, bytes::Bytes)>, Unavailable> {
        let store = self.clone();
        let key = key.to_string();
        tokio::task::spawn_blocking(move || {
            let Some(o) = store.lookup(&key)? else {
                return Ok(None);
            };
            let entry = o.entry.clone();
            match o.read_small(max) {
                Ok(b) => Ok(Some((entry, b))),
                Err(e) => {
                    tracing::warn!(key, error = %e, "reading a stored object");
                    match &e {
                        // A bucket that stopped answering mid-read (not
                        // bytes read and found rotten, dropped; not an
                        // object gone; not a large one).
                        Error::Io { source, .. }
                            if store.is_remote()
                                && !matches!(
                                    source.kind(),
                                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::NotFound
                                ) =>
                        {
                            store.set_available(false);
                            Err(store.unavailable())
                        }
                        _ => Ok(None),
                    }
                }
            }
        })
        .await
        .unwrap_or_else(|e| Err(Unavailable(format!("reading a stored object: {e}"))))
    }

    /// Open the object for `key` (blocking): `Ok(None)` when the store
    /// does not have it, `Err` when it does but cannot reach it now.
    /// Marks it recently used. A held object's size and checksums are in
    /// memory, so this reaches the backend only for a key another process
    /// wrote (adopted) or checksums not yet loaded.
    pub fn lookup(&self, key: &str) -> std::result::Result<Option<StoredObject>, Unavailable> {
        let down = || self.unavailable();
        let known = self.lock().keys.get(key).cloned();
        let entry = match known {
            Some(e) => e,
            None if !self.available() => return Err(down()),
            None => {
                // Another process (the mirror job) may have added it.
                if self.adopt(key).is_none() {
                    return Ok(None);
                }
                match self.lock().keys.get(key) {
                    Some(e) => e.clone(),
                    None => return Ok(None),
                }
            }
        };
        // Take the reader's lease first (nothing evicts the object from
        // here on), then open it with the state unlocked.
        let (known_sums, known_file, born) = {
            let mut st = self.lock();
            match st.lease(&entry.digest) {
                Some(o) => (o.sums.clone(), o.file.clone(), o.born),
                None => return Ok(None),
            }
        };
        let lease = Lease {
            store: self.clone(),
            digest: entry.digest.clone(),
            born,
        };
        if let (Some(file), Some(sums)) = (known_file, known_sums.clone()) {
            return Ok(Some(StoredObject {
                lease,
                object: LocalObject::held(file, entry.size),
                sums,
                entry,
                tiered: false,
            }));
        }
        let tiered = self
            .tier()
            .and_then(|t| t.open_copy(&entry.digest, entry.size));
        if tiered.is_none() && self.is_remote() && !self.available() {
            return Err(down());
        }
        let sums = match known_sums {
            Some(s) => s,
            None => match self.load_sums(&entry.digest, entry.size) {
                Ok(s) => {
                    if let Some(o) = self.lock().objects.get_mut(&entry.digest) {
                        o.sums = Some(s.clone());
                    }
                    s
                }
                Err(e) => {
                    tracing::warn!(key, error = %e, "the store did not answer");
                    self.set_available(false);
                    return Err(down());
                }
            },
        };
        let tier = tiered.is_some();
        let mut object = match tiered {
            Some(o) => o,
            None => match self.backend().open_object(&entry.digest, entry.size) {
                Ok(o) => o,
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    // The backend did not answer (an S3 outage): the entry
                    // stays; the request fails rather than refetching.
                    tracing::warn!(key, error = %e, "the store did not answer");
                    self.set_available(false);
                    return Err(down());
                }
                Err(e) => {
                    tracing::warn!(key, error = %e, "object missing; dropping its entry");
                    drop(lease);
                    self.remove(key);
                    return Ok(None);
                }
            },
        };
        // A local object without checksums (an older talos-gen's, or its
        // checksum file lost): hashed whole once, here, before a byte of it
        // goes out; right, it gets its checksums; wrong, it is dropped.
        let sums = match sums {
            Some(s) => Some(s),
            None if !tier && !self.is_remote() => match hash_and_sum(&*object) {
                Ok((got, fresh)) if got == entry.digest => {
                    tracing::warn!(%entry.digest, "an object without checksums hashed right; its checksums written");
                    let _ = self.write_sums(&entry.digest, &fresh);
                    let fresh = Some(Arc::new(fresh));
                    if let Some(o) = self.lock().objects.get_mut(&entry.digest)
                        && o.born == born
                    {
                        o.sums = Some(fresh.clone());
                    }
                    fresh
                }
                Ok((got, _)) => {
                    drop(lease);
                    let reason = format!("it has no checksums and its bytes hash to sha256:{got}");
                    self.quarantine_copy(&entry.digest, Some(born), &reason);
                    return Ok(None);
                }
                Err(e) => {
                    tracing::warn!(key, error = %e, "reading an object without checksums");
                    drop(lease);
                    self.read_failed(&entry.digest, born, &e, false);
                    return Ok(None);
                }
            },
            None => None,
        };
        if !tier && let Some(t) = self.tier() {
            t.want(self, &entry.digest, entry.size, sums.clone());
        }
        // A local object's file is kept open while the object is held: the
        // next open is memory work ([`Store::open_held`]). (A file shorter
        // than its entry is a short read, and dropped, when read.)
        if !tier
            && !self.is_remote()
            && let Some(file) = object.file()
        {
            self.lock()
                .keep_file(&entry.digest, born, file.clone(), entry.size);
            object = LocalObject::held(file, entry.size);
        }
        Ok(Some(StoredObject {
            lease,
            object,
            sums,
            entry,
            tiered: tier,
        }))
    }

    /// The checksums of an object of `size` bytes, if they are there and
    /// fit (`Ok(None)`: none, served unchecked); `Err`: the backend did
    /// not answer.
    pub(super) fn load_sums(&self, digest: &str, size: u64) -> std::io::Result<Option<Arc<Sums>>> {
        let Some(b) = self.backend().read_sums(digest)? else {
            return Ok(None);
        };
        match Sums::decode(&b) {
            Ok(s) if s.fits(size) => Ok(Some(Arc::new(s))),
            _ => {
                tracing::warn!(%digest, "the checksums do not fit their object; serving it unchecked");
                Ok(None)
            }
        }
    }

    /// A new temp file for a fill. Hashes what is written through it.
    pub fn temp(&self) -> Result<TempObject> {
        let (path, file) = self
            .backend()
            .spool()
            .map_err(|e| Error::io(format!("creating a temp file in {}", self.describe()), e))?;
        Ok(TempObject::new(path, file))
    }

    /// Fsync `tmp`, move it into place as its sha256 and point `key` at it
    /// (replacing what the key named before), with `meta` (a pin included:
    /// one index write). Evicts down to the size limit, never the object
    /// just committed. Every step on a blocking thread.
    pub async fn commit(&self, tmp: TempObject, key: &str, meta: Meta) -> Result<Entry> {
        let (file, src, digest, size, sums) = tmp.into_parts();
        let entry = Entry {
            key: key.to_string(),
            digest,
            size,
            content_type: meta.content_type,
            fetched: now_secs(),
            pinned: meta.pinned,
            meta: meta.meta,
        };
        let store = self.clone();
        let en = entry.clone();
        tokio::task::spawn_blocking(move || {
            let res = store.commit_blocking(file, &src, en.clone(), sums);
            // The spool file is gone on success; on failure it must go too.
            let _ = std::fs::remove_file(&src);
            if res.is_ok() {
                store.evict(Some(&en.digest));
            }
            res
        })
        .await
        .map_err(|e| Error::io("commit task", std::io::Error::other(e)))??;
        Ok(entry)
    }

    fn commit_blocking(&self, file: File, src: &Path, entry: Entry, sums: Sums) -> Result<()> {
        let put = |file: File| {
            self.backend()
                .put_object(src, file, &entry.digest, &sums.encode())
                .map_err(|e| {
                    Error::io(
                        format!("storing sha256:{} in {}", entry.digest, self.describe()),
                        e,
                    )
                })
        };
        // An upload (S3) runs before the lock, so replicas do not wait on
        // each other's uploads; under the lock the object is checked again
        // (another replica may have deleted it meanwhile) and uploaded
        // again if it went.
        let early = if self.backend().upload_outside_lock() {
            let f = file
                .try_clone()
                .map_err(|e| Error::io("reopening a fill", e))?;
            Some(put(f)?)
        } else {
            None
        };
        let lock = self.lock_store()?;
        let existed = match early {
            Some(existed) if self.backend().object_len(&entry.digest) == Some(entry.size) => {
                existed
            }
            _ => put(file)?,
        };
        if let Err(e) = self.put_entry_locked(&lock, entry.clone()) {
            // No index entry: the object must not stay behind as an orphan
            // (unless another key, here or in another process, names it).
            if !existed {
                self.refresh();
                if !self.lock().objects.contains_key(&entry.digest) {
                    self.delete_object(&entry.digest);
                }
            }
            return Err(e);
        }
        drop(lock);
        // The checksums are known: the first read loads nothing.
        let sums = Arc::new(sums);
        if let Some(o) = self.lock().objects.get_mut(&entry.digest) {
            o.sums = Some(Some(sums.clone()));
        }
        // A bucket's fill is verified on local disk already: it becomes
        // the local tier's copy.
        if let Some(t) = self.tier() {
            t.adopt_spool(src, &entry.digest, entry.size);
        }
        Ok(())
    }

    /// A chunk of `digest` failed its checksum. If the whole object still
    /// hashes to its digest, the checksums were what rotted: they are
    /// rewritten and handed back (`Ok`), so the caller checks the bytes it
    /// holds against them. Otherwise the object is dropped with every key
    /// naming it (`Err`: the response is cut).
    pub(super) fn chunk_mismatch(
        &self,
        digest: &str,
        born: u64,
        object: &dyn ObjectRead,
        chunk: u64,
    ) -> std::io::Result<Sums> {
        let (got, sums) = hash_and_sum(object)?;
        if got == digest {
            tracing::warn!(%digest, chunk, "a chunk checksum was wrong but the object is intact; rewriting its checksums");
            let _ = self.write_sums(digest, &sums);
            return Ok(sums);
        }
        let reason = format!(
            "chunk {chunk} does not match its checksum (the whole object hashes to sha256:{got})"
        );
        self.quarantine_copy(digest, Some(born), &reason);
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("stored object sha256:{digest} is corrupt: {reason}; dropped"),
        ))
    }

    /// A read of `digest` failed (blocking); `tiered`: it read the local
    /// tier's copy. The object gone from the backend (another replica
    /// deleted it): its keys go, so the next request fetches it again. A
    /// local file shorter than its entry (truncated under the store: the
    /// store never truncates a committed object): dropped like a corrupt
    /// one. A tier copy gone or short: the copy goes (the bucket stays the
    /// truth). Any other failure is the backend not answering.
    pub(super) fn read_failed(&self, digest: &str, born: u64, e: &std::io::Error, tiered: bool) {
        use std::io::ErrorKind::{NotFound, UnexpectedEof};
        if tiered {
            if matches!(e.kind(), NotFound | UnexpectedEof) {
                tracing::error!(%digest, error = %e, "the local tier's copy is gone or short; dropped (the bucket's is read next)");
                if let Some(t) = self.tier() {
                    t.remove(digest);
                }
            }
            return;
        }
        match e.kind() {
            NotFound => {}
            UnexpectedEof if !self.is_remote() => {
                return self.quarantine_copy(
                    digest,
                    Some(born),
                    &format!("its file is shorter than its entry ({e})"),
                );
            }
            _ => return,
        }
        let _lock = match self.lock_store() {
            Ok(l) => l,
            Err(e) => {
                // The keys stay: the next read meets the gap again.
                tracing::error!(%digest, error = %e, "object missing from the store; its keys NOT dropped: the store lock was not had");
                return;
            }
        };
        self.refresh();
        let keys = self.remove_object_locked(digest);
        tracing::warn!(%digest, ?keys, "object missing from the store; dropping its keys");
    }

    /// A chunk of the local tier's copy of `digest` failed its checksum:
    /// the copy goes (the bucket stays the truth), the read is cut.
    pub(super) fn tier_mismatch(&self, digest: &str, chunk: u64) -> std::io::Error {
        tracing::error!(%digest, chunk, "the local tier's copy is corrupt; dropped (the bucket's is read next)");
        if let Some(t) = self.tier() {
            t.remove(digest);
        }
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the local copy of sha256:{digest} is corrupt (chunk {chunk}); dropped"),
        )
    }

    /// Drop a corrupt object with every key naming it (here and in the
    /// backend), log it and count it ([`Store::corrupt_dropped`]).
    pub(super) fn quarantine(&self, digest: &str, reason: &str) {
        self.quarantine_copy(digest, None, reason)
    }

    /// [`Store::quarantine`] of the copy of `digest` that came into memory
    /// at `born` (`None`: whichever is held): a reader of a copy already
    /// dropped (and perhaps stored again, fetched afresh) leaves the
    /// current one alone, and the drop is counted once.
    pub(super) fn quarantine_copy(&self, digest: &str, born: Option<u64>, reason: &str) {
        if let Some(b) = born
            && self.lock().objects.get(digest).map(|o| o.born) != Some(b)
        {
            tracing::warn!(%digest, reason, "a reader of a copy already dropped met its fault; the store's copy, if any, is left alone");
            return;
        }
        let _lock = match self.lock_store() {
            Ok(l) => l,
            Err(e) => {
                self.inner
                    .corrupt
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                // The keys stay: the next read meets the fault again.
                tracing::error!(%digest, reason, error = %e, "corrupt object in the store; NOT dropped: the store lock was not had");
                return;
            }
        };
        if born.is_some() && self.replaced_by_another_process(digest) {
            tracing::warn!(%digest, reason, "a reader of a copy another process already dropped (and stored afresh) met its fault; the store's copy is left alone, this process's handle on the old one let go");
            return;
        }
        self.inner
            .corrupt
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.refresh();
        let keys = self.remove_object_locked(digest);
        tracing::error!(%digest, ?keys, reason, "corrupt object in the store; dropped (the next request fetches it again)");
        if keys.is_empty() {
            self.delete_object(digest);
        }
    }

    /// Whether the local file this process holds for `digest` is no longer
    /// the one the store names (another process dropped it and stored a
    /// fresh copy under the same name; called under the store lock, so no
    /// commit moves it meanwhile). Then the held handle is let go, so the
    /// next read here opens the fresh copy. A bucket, or no file held:
    /// false (the `born` check is all there is).
    fn replaced_by_another_process(&self, digest: &str) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(path) = self.object_path(digest) else {
            return false;
        };
        let Some(held) = self.lock().objects.get(digest).and_then(|o| o.file.clone()) else {
            return false;
        };
        let (Ok(h), Ok(now)) = (held.metadata(), std::fs::metadata(&path)) else {
            return false;
        };
        if (h.dev(), h.ino()) == (now.dev(), now.ino()) {
            return false;
        }
        if let Some(o) = self.lock().objects.get_mut(digest) {
            o.file = None;
        }
        true
    }

    /// The object's checksums as stored (`None`: none, or unreadable).
    pub fn stored_sums(&self, digest: &str) -> Option<Sums> {
        Sums::decode(&self.backend().read_sums(digest).ok()??).ok()
    }

    /// Write (replace) an object's checksums (for `mirror verify`, after it
    /// re-hashed the object whole).
    pub fn write_sums(&self, digest: &str, sums: &Sums) -> Result<()> {
        self.backend()
            .write_sums(digest, &sums.encode())
            .map_err(|e| Error::io(format!("writing the checksums of sha256:{digest}"), e))?;
        if let Some(o) = self.lock().objects.get_mut(digest) {
            o.sums = Some(Some(Arc::new(sums.clone())));
        }
        Ok(())
    }

    /// Open an object's bytes by digest, unleased and unchecked (for
    /// `mirror verify`, which hashes them whole).
    pub fn open_raw(&self, digest: &str) -> Result<Box<dyn ObjectRead>> {
        let size = self.backend().object_len(digest).ok_or_else(|| {
            Error::NotFound(format!("object sha256:{digest} is not in the store"))
        })?;
        self.backend()
            .open_object(digest, size)
            .map_err(|e| Error::io(format!("opening sha256:{digest}"), e))
    }

    /// Drop the object `digest` and every key naming it (for `mirror
    /// verify`). Whether its bytes are gone from the backend afterwards:
    /// `false` when the store lock or the delete failed (both only logged
    /// on the serving path), or another process stored it again.
    pub fn drop_object(&self, digest: &str, reason: &str) -> bool {
        self.quarantine(digest, reason);
        self.backend().object_len(digest).is_none()
    }
}

/// sha256 (hex) and chunk checksums of a whole object, streamed.
pub fn hash_and_sum(object: &dyn ObjectRead) -> std::io::Result<(String, Sums)> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    let mut b = sums::SumsBuilder::default();
    let len = object.len();
    let mut pos = 0u64;
    while pos < len {
        let n = ((len - pos) as usize).min(STREAM_CHUNK);
        let chunk = object.read_chunk(pos, n)?;
        h.update(&chunk);
        b.update(&chunk);
        pos += n as u64;
    }
    Ok((hex::encode(h.finalize()), b.finish()))
}
