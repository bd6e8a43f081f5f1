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
use super::entries::Write;
use super::read::{Fault, Lease, StoredObject};
use super::sums::{self, Sums};
use super::{AsKey, Entry, Key, Meta, STREAM_CHUNK, Store, TempObject, Unavailable};
use crate::error::{Error, Result};

/// What [`Store::rebuild_sums`] came to.
enum Rebuilt {
    Sums(Arc<Sums>),
    /// The bytes were wrong: the copy is gone.
    Dropped,
    /// The backend did not answer: nothing dropped.
    Unanswered,
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

    /// [`Store::lookup`] on a blocking thread: what the async paths call.
    pub async fn open_key(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> std::result::Result<Option<StoredObject>, Unavailable> {
        let key = key.as_key();
        let key: &Key = &key;
        // An object held open already (its file and checksums in memory):
        // memory work only, no blocking thread.
        if let Some(o) = self.open_held(key.as_str()) {
            return Ok(Some(o));
        }
        let store = self.clone();
        let key = key.clone();
        self.unless_down(tokio::task::spawn_blocking(move || store.lookup(&key)))
            .await
            .unwrap_or_else(|e| Err(Unavailable(format!("opening a stored object: {e}"))))
    }

    /// The entry for `key`: from memory, else read from the backend (an
    /// entry another process wrote, adopted) on a blocking thread. `Err`
    /// when the store may hold it and did not answer: never "absent".
    pub async fn entry_at(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> std::result::Result<Option<Entry>, Unavailable> {
        let key = key.as_key();
        let key: &Key = &key;
        if let Some(e) = self.entry(key) {
            return Ok(Some(e));
        }
        let store = self.clone();
        let key = key.clone();
        self.unless_down(tokio::task::spawn_blocking(move || {
            store.entry_blocking(key.as_str())
        }))
        .await
        .unwrap_or_else(|e| Err(Unavailable(format!("reading the index: {e}"))))
    }

    /// [`Store::entry_at`] on the caller's (blocking) thread: memory, else
    /// the backend's entry (another process's write, adopted); a store
    /// known down is probed at most once a second, else answered
    /// unavailable at once.
    fn entry_blocking(&self, key: &str) -> std::result::Result<Option<Entry>, Unavailable> {
        if let Some(e) = self.entry_raw(key) {
            return Ok(Some(e));
        }
        if !self.available() && !self.recheck_due() {
            return Err(self.unavailable());
        }
        match self.adopt(key) {
            Ok(_) => Ok(self.entry_raw(key)),
            Err(e) => {
                tracing::warn!(key, error = %e, "the store did not answer");
                Err(self.unavailable())
            }
        }
    }

    /// [`Store::readable_entry`] after [`Store::entry_at`]: an entry
    /// another process wrote is found too.
    pub async fn readable_entry_at(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> std::result::Result<Option<Entry>, Unavailable> {
        let key = key.as_key();
        let key: &Key = &key;
        self.entry_at(key).await?;
        self.readable_entry(key)
    }

    /// Await a blocking call to the store, or answer "unavailable" as soon
    /// as the store is marked down meanwhile (by any request's failed call
    /// or the probe): a request waiting on a frozen bucket gets its 503 when
    /// the first call fails, not at its own timeout. The call itself runs
    /// on to its own bound on its blocking thread.
    async fn unless_down<T>(
        &self,
        call: tokio::task::JoinHandle<std::result::Result<T, Unavailable>>,
    ) -> std::result::Result<std::result::Result<T, Unavailable>, tokio::task::JoinError> {
        let down = self.went_down();
        tokio::select! {
            r = call => r,
            () = down => Ok(Err(self.unavailable())),
        }
    }

    /// The object for `key` if this process holds it open already (a
    /// handle the backend said is worth keeping, [`ObjectRead::keep_open`],
    /// with its checksums): the lease taken, no call to the backend. `None`: ask [`Store::lookup`].
    pub(super) fn open_held(&self, key: &str) -> Option<StoredObject> {
        let (entry, object, sums, born) = {
            let mut st = self.lock();
            let entry = st.keys.get(key)?;
            let o = st.objects.get(&entry.digest)?;
            let (Some(object), Some(sums)) = (o.open.clone(), o.sums.clone()) else {
                return None;
            };
            let entry = entry.clone();
            let born = st.lease(&entry.digest)?.born;
            (entry, object, sums, born)
        };
        Some(StoredObject {
            lease: Lease {
                store: self.clone(),
                digest: entry.digest.clone(),
                born,
            },
            object,
            sums,
            entry,
            tiered: false,
        })
    }

    /// A small stored object whole (at most `max` bytes, its sha256
    /// checked: a rotten one is dropped), opened and read on a blocking
    /// thread. `Err` when the store holds the key but cannot read it now (a bucket that
    /// does not answer, and no copy in the local tier), so the caller
    /// answers 503 rather than fetching it again; `Ok(None)` when absent,
    /// too large, or rotten (dropped).
    pub async fn read_small_at(
        &self,
        key: &(impl AsKey + ?Sized),
        max: u64,
    ) -> std::result::Result<Option<(Entry, bytes::Bytes)>, Unavailable> {
        let key = key.as_key();
        let key: &Key = &key;
        let store = self.clone();
        let key = key.clone();
        self.unless_down(tokio::task::spawn_blocking(move || {
            let Some(o) = store.lookup(&key)? else {
                return Ok(None);
            };
            let entry = o.entry.clone();
            match o.read_small(max) {
                Ok(b) => Ok(Some((entry, b))),
                // Held, not readable now (the bucket did not answer, a
                // read that failed on an object of the right length).
                Err(Error::Unavailable(m)) => {
                    tracing::warn!(key = %key, error = %m, "reading a stored object");
                    Err(store.unavailable())
                }
                // Rotten or gone (dropped), or larger than asked.
                Err(e) => {
                    tracing::warn!(key = %key, error = %e, "reading a stored object");
                    Ok(None)
                }
            }
        }))
        .await
        .unwrap_or_else(|e| Err(Unavailable(format!("reading a stored object: {e}"))))
    }

    /// Open the object for `key` (blocking): `Ok(None)` when the store
    /// does not have it (the backend said so), `Err` when it may and the
    /// backend did not answer (never taken for "absent": the caller answers
    /// 503, it does not fetch the key again). Marks it recently used. A
    /// held object's size and checksums are in memory, so this reaches the
    /// backend only for a key another process wrote (adopted) or checksums
    /// not yet loaded. Every object comes with its block checksums: where
    /// they are missing or do not fit, the whole object is read first and
    /// they are rebuilt only when it hashes to its digest.
    pub fn lookup(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> std::result::Result<Option<StoredObject>, Unavailable> {
        let key = key.as_key();
        let key: &Key = &key;
        self.lookup_raw(key.as_str())
    }

    /// [`Store::lookup`] by the key's string form (inside the store).
    fn lookup_raw(&self, key: &str) -> std::result::Result<Option<StoredObject>, Unavailable> {
        let down = || self.unavailable();
        let Some(entry) = self.entry_blocking(key)? else {
            return Ok(None);
        };
        // Take the reader's lease first (nothing evicts the object from
        // here on), then open it with the state unlocked.
        let (known_sums, known_open, born) = {
            let mut st = self.lock();
            match st.lease(&entry.digest) {
                Some(o) => (o.sums.clone(), o.open.clone(), o.born),
                None => return Ok(None),
            }
        };
        let lease = Lease {
            store: self.clone(),
            digest: entry.digest.clone(),
            born,
        };
        if let (Some(object), Some(sums)) = (known_open, known_sums.clone()) {
            return Ok(Some(StoredObject {
                lease,
                object,
                sums,
                entry,
                tiered: false,
            }));
        }
        // The backend's handle (no round trip: a local file's open, a
        // bucket's object, or the copy it keeps in its local tier).
        let object: Arc<dyn ObjectRead> = match self
            .answered_unless_missing(self.backend().open_object(&entry.digest, entry.size))
        {
            Ok(o) => o.into(),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                // The backend did not answer (an S3 outage): the entry
                // stays; the request fails rather than refetching.
                tracing::warn!(key, error = %e, "the store did not answer");
                return Err(down());
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "object missing; dropping its entry");
                drop(lease);
                if let Err(e) = self.remove_raw(key) {
                    tracing::warn!(key, error = %e, "the entry of a missing object could not be dropped");
                }
                return Ok(None);
            }
        };
        let tier = object.is_copy();
        // A store marked down is not asked (it is probed at most once per
        // gap); a local copy is read all the same.
        if !tier && !self.available() && !self.recheck_due() {
            return Err(down());
        }
        let sums = match known_sums {
            Some(s) => Some(s),
            None => match self.load_sums(&entry.digest, entry.size) {
                Ok(s) => {
                    if let Some(o) = self.lock().objects.get_mut(&entry.digest) {
                        o.sums = s.clone();
                    }
                    s
                }
                Err(e) => {
                    tracing::warn!(key, error = %e, "the store did not answer");
                    return Err(down());
                }
            },
        };
        let sums = match sums {
            Some(s) => s,
            None => match self.rebuild_sums(&entry, born, &*object, tier) {
                Rebuilt::Sums(s) => s,
                Rebuilt::Dropped => {
                    drop(lease);
                    if tier {
                        // Only the local copy was wrong: read the bucket.
                        return self.lookup_raw(key);
                    }
                    return Ok(None);
                }
                Rebuilt::Unanswered => {
                    drop(lease);
                    return Err(down());
                }
            },
        };
        if !tier {
            self.backend()
                .read_through(&entry.digest, entry.size, sums.clone());
        }
        // A handle worth keeping (an open file) is kept while the object
        // is held: the next open is memory work ([`Store::open_held`]). (A
        // file shorter than its entry is a short read, and dropped, when
        // read.)
        if !tier && object.keep_open() {
            self.lock().keep_open(&entry.digest, born, object.clone());
        }
        Ok(Some(StoredObject {
            lease,
            object,
            sums,
            entry,
            tiered: tier,
        }))
    }

    /// [`Store::answered`] for an open: a missing object is the backend's
    /// answer too (the caller drops the entry).
    fn answered_unless_missing<T>(&self, r: std::io::Result<T>) -> std::io::Result<T> {
        match r {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(e),
            r => self.answered(r),
        }
    }

    /// Is the store marked down but not probed for a second? Then this
    /// caller probes it (one at a time; within a second of the last probe
    /// everyone else is answered "unavailable" at once). Blocking.
    fn recheck_due(&self) -> bool {
        if !self.inner.probe_due() {
            return false;
        }
        self.check(self.call_bound()).is_ok()
    }

    /// An object without block checksums (or with ones that do not fit its
    /// size): read whole, once, before a byte of it goes out. Its bytes
    /// hash to its digest: the checksums are rebuilt from that read and
    /// written. They do not: the copy is dropped (a tier copy only that
    /// copy). The backend did not answer: nothing is dropped.
    fn rebuild_sums(
        &self,
        entry: &Entry,
        born: u64,
        object: &dyn ObjectRead,
        tiered: bool,
    ) -> Rebuilt {
        let digest = &entry.digest;
        match hash_and_sum(object) {
            Ok((got, fresh)) if got == *digest => {
                tracing::warn!(%digest, "an object without checksums hashed right; its checksums rebuilt");
                if let Err(e) = self.write_sums(digest, &fresh) {
                    tracing::warn!(%digest, error = %e, "writing rebuilt checksums");
                }
                let fresh = Arc::new(fresh);
                if let Some(o) = self.lock().objects.get_mut(digest)
                    && o.born == born
                {
                    o.sums = Some(fresh.clone());
                }
                Rebuilt::Sums(fresh)
            }
            Ok((got, _)) => {
                if tiered {
                    let _ = self.tier_mismatch(digest, 0);
                } else {
                    let reason = format!("it has no checksums and its bytes hash to sha256:{got}");
                    self.quarantine_copy(digest, Some(born), &reason);
                }
                Rebuilt::Dropped
            }
            Err(e) => {
                tracing::warn!(%digest, error = %e, "reading an object without checksums");
                match self.read_failed(digest, born, &e, tiered) {
                    Fault::Dropped => Rebuilt::Dropped,
                    Fault::Unreadable => Rebuilt::Unanswered,
                }
            }
        }
    }

    /// The checksums of an object of `size` bytes, if they are there and
    /// fit (`Ok(None)`: none, or none that fit: the caller rebuilds them
    /// from a whole read); `Err`: the backend did not answer.
    pub(super) fn load_sums(&self, digest: &str, size: u64) -> std::io::Result<Option<Arc<Sums>>> {
        let Some(b) = self.answered(self.backend().read_sums(digest))? else {
            return Ok(None);
        };
        match Sums::decode(&b) {
            Ok(s) if s.fits(size) => Ok(Some(Arc::new(s))),
            _ => {
                tracing::warn!(%digest, "the checksums do not fit their object: rebuilt from a whole read");
                Ok(None)
            }
        }
    }

    /// A new temp file for a fill, created and locked on a blocking thread;
    /// written through [`TempObject::into_writer`], which hashes as it goes.
    pub async fn temp(&self) -> Result<TempObject> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.temp_blocking())
            .await
            .map_err(|e| Error::io("temp file task", std::io::Error::other(e)))?
    }

    /// [`Store::temp`] for a caller on a blocking thread.
    pub(super) fn temp_blocking(&self) -> Result<TempObject> {
        let (path, file) = self
            .backend()
            .spool()
            .map_err(|e| Error::io(format!("creating a temp file in {}", self.describe()), e))?;
        Ok(TempObject::new(path, file))
    }

    /// Store a small body (a manifest, a list, a schematic) under `key`:
    /// the temp file, its write and the commit, all on a blocking thread.
    pub async fn commit_bytes(
        &self,
        key: &(impl AsKey + ?Sized),
        body: bytes::Bytes,
        meta: Meta,
    ) -> Result<Entry> {
        let key = key.as_key();
        let key: &Key = &key;
        let store = self.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || {
            let mut tmp = store.temp_blocking()?;
            tmp.write(&body)?;
            store.commit_now(tmp, &key, meta, None)
        })
        .await
        .map_err(|e| Error::io("commit task", std::io::Error::other(e)))?
    }

    /// Fsync `tmp`, move it into place as its sha256 and point `key` at it
    /// (replacing what the key named before), with `meta` (a pin included:
    /// one index write). Evicts down to the size limit, never the object
    /// just committed. Every step on a blocking thread.
    pub async fn commit(&self, tmp: TempObject, key: &Key, meta: Meta) -> Result<Entry> {
        let store = self.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || store.commit_now(tmp, &key, meta, None))
            .await
            .map_err(|e| Error::io("commit task", std::io::Error::other(e)))?
    }

    /// [`Store::commit`] on the caller's (blocking) thread; `room`, the
    /// fill's reservation, is let go once the object counts itself (or
    /// the commit failed and its file is gone), before the eviction.
    pub(super) fn commit_now(
        &self,
        tmp: TempObject,
        key: &Key,
        meta: Meta,
        room: Option<super::Reservation>,
    ) -> Result<Entry> {
        let (file, src, digest, size, sums) = tmp.into_parts();
        let entry = Entry::fetched_now(key.clone(), digest, size, meta);
        let digest = entry.digest.clone();
        let res = self.commit_blocking(file, &src, entry, sums);
        // The spool file is gone on success; on failure it must go too.
        let _ = std::fs::remove_file(&src);
        drop(room);
        if res.is_ok() {
            self.evict(Some(&digest));
        }
        res
    }

    /// The commit on a blocking thread; the entry that stands is returned
    /// (a pinned entry another process wrote stays, and the object just
    /// stored goes again unless a key names it).
    fn commit_blocking(&self, file: File, src: &Path, entry: Entry, sums: Sums) -> Result<Entry> {
        let did_not_store = |e| {
            Error::io(
                format!("storing sha256:{} in {}", entry.digest, self.describe()),
                e,
            )
        };
        let sums_body = sums.encode();
        // The backend's own put in two halves: what needs no lock (an
        // upload) now, so replicas do not wait on each other's uploads;
        // what makes the object visible under the store lock.
        let publish = self
            .answered_unless_missing(self.backend().stage_object(
                src,
                file,
                &entry.digest,
                &sums_body,
            ))
            .map_err(did_not_store)?;
        let lock = self.lock_store()?;
        let existed = self
            .answered_unless_missing(publish())
            .map_err(did_not_store)?;
        let stands = self.put_entry_locked(&lock, entry.clone(), Write::Cache);
        // No index entry for it (a failure, or a pinned entry that stays):
        // the object must not stay behind as an orphan (unless another key,
        // here or in another process, names it; nothing is deleted on a
        // view the backend did not confirm).
        let orphan = match &stands {
            Ok(e) => e.digest != entry.digest,
            Err(_) => true,
        };
        if orphan
            && !existed
            && self.refresh().is_ok()
            && !self.lock().objects.contains_key(&entry.digest)
        {
            // (a failure is logged: the object is swept as an orphan)
            let _failed = self.delete_object(&entry.digest).is_err();
        }
        let stands = stands?;
        drop(lock);
        if stands.digest != entry.digest {
            return Ok(stands);
        }
        // The checksums are known: the first read loads nothing.
        let sums = Arc::new(sums);
        if let Some(o) = self.lock().objects.get_mut(&entry.digest) {
            o.sums = Some(sums.clone());
        }
        Ok(stands)
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
    /// deleted it): its keys go, so the next request fetches it again. An
    /// object of another length than its entry (truncated under the
    /// store: the store never truncates a committed object): dropped like a
    /// corrupt one. A tier copy gone or short: the copy goes (the bucket
    /// stays the truth). Any other failure: the object is held but cannot
    /// be read now ([`Fault::Unreadable`]; a backend that did not answer
    /// the length is marked down). The same for every backend.
    pub(super) fn read_failed(
        &self,
        digest: &str,
        born: u64,
        e: &std::io::Error,
        tiered: bool,
    ) -> Fault {
        use std::io::ErrorKind::{NotFound, UnexpectedEof};
        if tiered {
            if matches!(e.kind(), NotFound | UnexpectedEof) {
                tracing::error!(%digest, error = %e, "the local tier's copy is gone or short; dropped (the bucket's is read next)");
                self.backend().drop_copy(digest);
            }
            return Fault::Dropped;
        }
        if e.kind() != NotFound {
            // A read that failed: the object may be short or long
            // (truncated, replaced under its name), or the backend may not
            // have answered. Its length, asked once, tells them apart:
            // another length than the entry's drops it (the next request
            // fetches it again); none, the keys below; a backend that does
            // not answer, or the right length, nothing (held, unreadable now).
            let want = self.lock().objects.get(digest).map(|o| o.size);
            match (want, self.answered(self.backend().object_len(digest))) {
                (Some(want), Ok(Some(n))) if n != want => {
                    self.quarantine_copy(
                        digest,
                        Some(born),
                        &format!("the stored object has {n} bytes, its entry says {want} ({e})"),
                    );
                    return Fault::Dropped;
                }
                (_, Ok(None)) => {}
                _ => return Fault::Unreadable,
            }
        }
        let _lock = match self.lock_store() {
            Ok(l) => l,
            Err(e) => {
                // The keys stay: the next read meets the gap again.
                tracing::error!(%digest, error = %e, "object missing from the store; its keys NOT dropped: the store lock was not had");
                return Fault::Dropped;
            }
        };
        if let Err(e) = self.refresh() {
            tracing::error!(%digest, error = %e, "object missing from the store; its keys NOT dropped: the store did not answer");
            return Fault::Unreadable;
        }
        let keys = self.remove_object_locked(digest);
        tracing::warn!(%digest, ?keys, "object missing from the store; dropping its keys");
        Fault::Dropped
    }

    /// A chunk of the local tier's copy of `digest` failed its checksum:
    /// the copy goes (the bucket stays the truth), the read is cut.
    pub(super) fn tier_mismatch(&self, digest: &str, chunk: u64) -> std::io::Error {
        tracing::error!(%digest, chunk, "the local tier's copy is corrupt; dropped (the bucket's is read next)");
        self.backend().drop_copy(digest);
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
        if let Err(e) = self.refresh() {
            tracing::error!(%digest, reason, error = %e, "corrupt object in the store; NOT dropped: the store did not answer");
            return;
        }
        match self.remove_object_locked(digest) {
            Ok(keys) => {
                tracing::error!(%digest, ?keys, reason, "corrupt object in the store; dropped (the next request fetches it again)");
                if keys.is_empty() {
                    // (a failure is logged; `drop_object` reads what stays)
                    let _failed = self.delete_object(digest).is_err();
                }
            }
            Err(e) => {
                tracing::error!(%digest, reason, error = %e, "corrupt object in the store; NOT all dropped")
            }
        }
    }

    /// Whether the local file this process holds for `digest` is no longer
    /// the one the store names (another process dropped it and stored a
    /// fresh copy under the same name; called under the store lock, so no
    /// commit moves it meanwhile). Then the held handle is let go, so the
    /// next read here opens the fresh copy. A bucket, or no file held:
    /// false (the `born` check is all there is).
    fn replaced_by_another_process(&self, digest: &str) -> bool {
        let Some(held) = self.lock().objects.get(digest).and_then(|o| o.open.clone()) else {
            return false;
        };
        if !held.replaced() {
            return false;
        }
        if let Some(o) = self.lock().objects.get_mut(digest) {
            o.open = None;
        }
        true
    }

    /// The object's checksums as stored: `Ok(None)` when none are stored
    /// or they do not decode, `Err` when the store did not answer.
    pub fn stored_sums(&self, digest: &str) -> std::io::Result<Option<Sums>> {
        Ok(self
            .backend()
            .read_sums(digest)?
            .and_then(|b| Sums::decode(&b).ok()))
    }

    /// Write (replace) an object's checksums (for `mirror verify`, after it
    /// re-hashed the object whole).
    pub fn write_sums(&self, digest: &str, sums: &Sums) -> Result<()> {
        self.backend()
            .write_sums(digest, &sums.encode())
            .map_err(|e| Error::io(format!("writing the checksums of sha256:{digest}"), e))?;
        if let Some(o) = self.lock().objects.get_mut(digest) {
            o.sums = Some(Arc::new(sums.clone()));
        }
        Ok(())
    }

    /// Open an object's bytes by digest, unleased and unchecked (for
    /// `mirror verify`, which hashes them whole).
    pub fn open_raw(&self, digest: &str) -> Result<Box<dyn ObjectRead>> {
        let size = self
            .answered(self.backend().object_len(digest))
            .map_err(|e| self.did_not_answer(e))?
            .ok_or_else(|| {
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
        matches!(self.backend().object_len(digest), Ok(None))
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
