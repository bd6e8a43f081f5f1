//! The entry store: the index in memory (keys, change tokens, pins,
//! leases, LRU eviction), the start-up scan, and what other processes
//! wrote, read in under the store lock before anything is deleted.
//!
//! The state mutex is held for memory work only: every backend call
//! (a listing, an entry read or write, a deletion) runs with it released,
//! its result applied afterwards.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::backend::ObjectRead;
use super::local::{index_name, is_hex64};
use super::sums::Sums;
use super::{AsKey, Entry, Key, KeyPrefix, Meta, Store, Touch, backend, now_secs};
use crate::error::{Error, Result};

/// Unreferenced objects younger than this survive a startup.
const ORPHAN_GRACE: Duration = Duration::from_secs(600);
/// How stale this process's view of other processes' writes may be before
/// an eviction check re-reads the index.
pub(super) const REFRESH_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct State {
    pub(super) keys: HashMap<Key, Entry>,
    pub(super) objects: HashMap<String, Obj>,
    pub(super) total: u64,
    clock: u64,
    /// Wall-clock last read per object digest (seconds since the epoch).
    used_at: HashMap<String, u64>,
    /// Entry name -> change token as last read (every write replaces the
    /// entry, so a changed token is another process's write).
    seen: HashMap<String, u64>,
    last_refresh: Option<Instant>,
    /// Bumped by every entry this process writes (a refresh that listed
    /// before it must not take its key for one another process removed).
    written: u64,
}

/// What the store knows of one object while it is held: immutable facts
/// (size, checksums), read once.
pub(super) struct Obj {
    pub(super) size: u64,
    pub(super) readers: usize,
    last_used: u64,
    pub(super) keys: Vec<Key>,
    /// Its block checksums, once loaded (or rebuilt): `None` until then.
    pub(super) sums: Option<Arc<Sums>>,
    /// The object's handle open for reads, when the backend says it is
    /// worth keeping ([`ObjectRead::keep_open`]: an open file), kept from
    /// its first open until it leaves memory (evicted, dropped, its last
    /// key gone) or the cap on idle handles takes it ([`MAX_IDLE_FILES`]);
    /// readers hold their own reference, so it is closed after the last one.
    pub(super) open: Option<Arc<dyn ObjectRead>>,
    /// When this entry of the object came into memory (the state's clock):
    /// a file opened before the object was dropped and stored again is not
    /// kept for the new one.
    pub(super) born: u64,
}

/// Open files kept for objects no reader holds (the least recently used
/// beyond it are closed; the file of an object being read stays).
pub(super) const MAX_IDLE_FILES: usize = 128;

impl Obj {
    fn new(size: u64, t: u64) -> Obj {
        Obj {
            size,
            readers: 0,
            last_used: t,
            keys: Vec::new(),
            sums: None,
            open: None,
            born: t,
        }
    }
}

impl State {
    pub(super) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Point `entry.key` at `entry.digest` in memory only. Returns the
    /// digest the key named before, if different.
    pub(super) fn insert(&mut self, entry: Entry) -> Option<String> {
        let t = self.tick();
        let digest = entry.digest.clone();
        let key = entry.key.clone();
        let size = entry.size;
        let old = self
            .keys
            .insert(key.clone(), entry)
            .map(|o| o.digest)
            .filter(|d| *d != digest);
        if let Some(d) = &old {
            self.forget_key(key.as_str(), d);
        }
        let is_new = !self.objects.contains_key(&digest);
        let obj = self
            .objects
            .entry(digest.clone())
            .or_insert_with(|| Obj::new(size, t));
        obj.last_used = obj.last_used.max(t);
        if !obj.keys.contains(&key) {
            obj.keys.push(key);
        }
        if is_new {
            self.total += size;
        }
        old
    }

    /// Drop `key` from `digest`'s key list in memory; an object left with no
    /// key leaves memory too (its bytes are the caller's business).
    /// Returns whether the object has no key left.
    fn forget_key(&mut self, key: &str, digest: &str) -> bool {
        let gone = match self.objects.get_mut(digest) {
            Some(o) => {
                o.keys.retain(|k| k != key);
                o.keys.is_empty()
            }
            None => false,
        };
        if gone && let Some(o) = self.objects.remove(digest) {
            self.total -= o.size;
        }
        gone
    }

    /// Take a reader's lease on `digest` (nothing evicts it until the
    /// lease is released); marks it used. `None` when it is not held.
    pub(super) fn lease(&mut self, digest: &str) -> Option<&mut Obj> {
        let t = self.tick();
        self.used_at.insert(digest.to_string(), now_secs());
        let o = self.objects.get_mut(digest)?;
        o.readers += 1;
        o.last_used = t;
        Some(o)
    }

    /// Keep `object` as `digest`'s open handle (for its entry `born`, of
    /// its size), unless it has one already; then close the least recently
    /// used handles of objects no reader holds beyond [`MAX_IDLE_FILES`].
    pub(super) fn keep_open(&mut self, digest: &str, born: u64, object: Arc<dyn ObjectRead>) {
        match self.objects.get_mut(digest) {
            Some(o) if o.born == born && o.open.is_none() && object.len() == o.size => {
                o.open = Some(object)
            }
            _ => return,
        }
        let mut idle: Vec<(u64, &String)> = self
            .objects
            .iter()
            .filter(|(d, o)| o.open.is_some() && o.readers == 0 && d.as_str() != digest)
            .map(|(d, o)| (o.last_used, d))
            .collect();
        // The new file is idle too once its reader leaves.
        let keep = MAX_IDLE_FILES.saturating_sub(1);
        if idle.len() <= keep {
            return;
        }
        idle.sort_unstable();
        let drop: Vec<String> = idle[..idle.len() - keep]
            .iter()
            .map(|(_, d)| (*d).clone())
            .collect();
        for d in drop {
            if let Some(o) = self.objects.get_mut(&d) {
                o.open = None;
            }
        }
    }

    /// Remove `key` from memory: the entry name to delete, and the object
    /// to delete when no key is left on it.
    fn take_key(&mut self, key: &str) -> Option<(String, Option<String>)> {
        let old = self.keys.remove(key)?;
        let name = index_name(key);
        self.seen.remove(&name);
        let orphan = self.forget_key(key, &old.digest).then_some(old.digest);
        Some((name, orphan))
    }
}

/// Who writes an entry, and so what it may replace.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Write {
    /// A cached copy (a fill, a link): never replaces a pinned entry.
    Cache,
    /// The owner of the pins (the mirror job, `set_pinned`): replaces.
    Owner,
}

/// Parse an entry the backend gave, checking it against its name.
fn parse_entry(name: &str, body: &[u8]) -> std::result::Result<Entry, BadEntry> {
    let en: Entry =
        serde_json::from_slice(body).map_err(|_| BadEntry::Unparsable(name.to_string()))?;
    if index_name(en.key.as_str()) != name || !is_hex64(&en.digest) {
        return Err(BadEntry::Mismatch(name.to_string(), en.key));
    }
    Ok(en)
}

/// An index entry a scan cannot take (by its name in `index/`).
#[derive(Debug, thiserror::Error)]
enum BadEntry {
    #[error("index entry {0} does not parse")]
    Unparsable(String),
    #[error("index entry {0} does not match its key {1}")]
    Mismatch(String, Key),
}

/// What a scan of one listed entry found wrong, if anything.
fn entry_problem(en: &Entry, on_disk: &HashMap<String, u64>) -> Option<String> {
    match on_disk.get(&en.digest) {
        None => Some(format!(
            "{}: object sha256:{} is missing",
            en.key, en.digest
        )),
        Some(&n) if n != en.size => Some(format!(
            "{}: object sha256:{} has {n} bytes, its entry says {} ({})",
            en.key,
            en.digest,
            en.size,
            if n > en.size {
                "bytes appended"
            } else {
                "truncated"
            }
        )),
        Some(_) => None,
    }
}

impl Store {
    /// The start-up scan (under the store lock, before the store is
    /// shared): spool leftovers, objects, index entries, orphans, and every
    /// object's checksums, loaded once. With [`Touch::Untouched`] nothing
    /// is removed: what is wrong is only left out and listed.
    pub(super) fn scan(&self, touch: Touch) -> Result<(State, Vec<String>)> {
        let b = self.backend();
        let io = |e| Error::io(format!("reading the store {}", b.describe()), e);
        let recover = touch == Touch::Recover;
        if recover {
            b.clean_spool();
        }
        let mut state = State::default();
        let mut dropped = Vec::new();
        let on_disk = b.list_objects().map_err(io)?;
        for l in b.list_entries().map_err(io)? {
            // An entry the backend did not answer for is not dropped: the
            // open fails (an entry gone between the listing and the read
            // was removed by another process, and is simply not there).
            let parsed = match b.read_entry(&l.name).map_err(io)? {
                None => continue,
                Some((body, _)) => parse_entry(&l.name, &body),
            };
            let problem = match &parsed {
                Err(p) => Some(p.to_string()),
                Ok(en) => entry_problem(en, &on_disk),
            };
            match (parsed, problem) {
                (Ok(en), None) => {
                    state.seen.insert(l.name, l.token);
                    let t = en.fetched;
                    let digest = en.digest.clone();
                    state.insert(en);
                    if let Some(o) = state.objects.get_mut(&digest) {
                        o.last_used = o.last_used.max(t);
                    }
                }
                (_, Some(p)) => {
                    if recover {
                        tracing::warn!(problem = %p, "dropping an index entry");
                        b.delete_entry(&l.name);
                    }
                    dropped.push(p);
                }
                (Err(_), None) => unreachable!("an unparsed entry is a problem"),
            }
        }
        // Objects no key names are garbage (unless just written: a process
        // of an older release, without the store lock, may be about to write
        // their index entry).
        for digest in on_disk.keys() {
            if !state.objects.contains_key(digest) {
                // An age the backend did not tell counts as young: nothing
                // is deleted on a guess.
                let young = match b.object_age(digest) {
                    Ok(age) => age.is_some_and(|age| age < ORPHAN_GRACE),
                    Err(_) => true,
                };
                if !young && recover {
                    tracing::info!(%digest, "removing an unreferenced object");
                    b.delete_object(digest);
                }
            }
        }
        let mut unchecked = 0;
        for (digest, o) in state.objects.iter_mut() {
            if let Ok(s) = self.load_sums(digest, o.size) {
                unchecked += usize::from(s.is_none());
                o.sums = s;
            }
        }
        if unchecked > 0 {
            tracing::warn!(
                objects = unchecked,
                "objects without chunk checksums that fit (written by an older talos-gen, or their checksum file lost): each is read whole at its first read and given them when it hashes to its digest"
            );
        }
        // LRU order from fetch times; the clock continues above them.
        state.clock = state
            .objects
            .values()
            .map(|o| o.last_used)
            .max()
            .unwrap_or(0);
        state.last_refresh = Some(Instant::now());
        Ok((state, dropped))
    }

    /// The entry for `key`, without taking a lease.
    pub fn entry(&self, key: &(impl AsKey + ?Sized)) -> Option<Entry> {
        let key = key.as_key();
        let key: &Key = &key;
        self.entry_raw(key.as_str())
    }

    /// [`Store::entry`] by the key's string form (inside the store).
    pub(super) fn entry_raw(&self, key: &str) -> Option<Entry> {
        self.lock().keys.get(key).cloned()
    }

    /// [`Store::entry`] for an answer that stands for the bytes (a HEAD):
    /// `Err` when the store holds the key but could not read it now (a
    /// bucket that does not answer, and no copy in the local tier), as
    /// [`Store::lookup`] would say; memory work only.
    pub fn readable_entry(
        &self,
        key: &(impl AsKey + ?Sized),
    ) -> std::result::Result<Option<Entry>, super::objects::Unavailable> {
        let key = key.as_key();
        let key: &Key = &key;
        let Some(e) = self.entry(key) else {
            return Ok(None);
        };
        let in_tier = self.backend().holds_copy(&e.digest, e.size);
        if !self.available() && !in_tier {
            return Err(self.unavailable());
        }
        Ok(Some(e))
    }

    /// When the object with `digest` was last read through [`Store::get`]
    /// since this process started (seconds since the epoch).
    pub fn last_use(&self, digest: &str) -> Option<u64> {
        self.lock().used_at.get(digest).copied()
    }

    /// Distinct objects held.
    pub fn object_count(&self) -> usize {
        self.lock().objects.len()
    }

    /// Every entry (for the mirror job).
    pub fn entries(&self) -> Vec<Entry> {
        let mut v: Vec<Entry> = self.lock().keys.values().cloned().collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// The entries whose key starts with `prefix`, sorted by key. Other
    /// processes' writes (an import, a sync on the same store) are read in
    /// when this process's view is older than a second, in the background
    /// on a blocking thread (inline outside a runtime), whatever the
    /// backend: the answer is the view in memory, the next one sees what
    /// the refresh found.
    pub fn entries_with_prefix(&self, prefix: &KeyPrefix) -> Vec<Entry> {
        let stale = self
            .lock()
            .last_refresh
            .is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
        if stale {
            self.refresh_in_background();
        }
        let st = self.lock();
        let mut v: Vec<Entry> = st
            .keys
            .values()
            .filter(|e| prefix.rest(&e.key).is_some())
            .cloned()
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    fn refresh_in_background(&self) {
        if self.inner.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        let run = move || {
            let _ = store.refresh();
            store.inner.refreshing.store(false, Ordering::Release);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => drop(h.spawn_blocking(run)),
            Err(_) => run(),
        }
    }

    /// Load `key`'s index entry written by another process (blocking):
    /// `Ok(true)` when the store holds it (now in memory), `Ok(false)` when
    /// the backend says there is no such entry (or its object is not
    /// there), `Err` when the backend did not answer: never "absent".
    pub(super) fn adopt(&self, key: &str) -> std::io::Result<bool> {
        let name = index_name(key);
        let Some((body, token)) = self.answered(self.backend().read_entry(&name))? else {
            return Ok(false);
        };
        let Ok(en) = parse_entry(&name, &body) else {
            return Ok(false);
        };
        if self.answered(self.backend().object_len(&en.digest))? != Some(en.size) {
            return Ok(false);
        }
        let mut st = self.lock();
        if st.keys.contains_key(key) {
            return Ok(true);
        }
        st.seen.insert(name, token);
        st.insert(en);
        Ok(true)
    }

    /// Re-read the index entries other processes wrote or removed since we
    /// last looked (blocking; before deciding to delete, under the store
    /// lock). The backend is read with the state unlocked; what it said is
    /// applied after, and only when every read was answered: `Err` (the
    /// backend did not answer) changes nothing, and the caller deletes
    /// nothing on the view it has.
    pub(super) fn refresh(&self) -> std::io::Result<()> {
        let b = self.backend();
        let (seen, written) = {
            let st = self.lock();
            (st.seen.clone(), st.written)
        };
        let list = self.answered(b.list_entries())?;
        let mut present = HashSet::new();
        let mut fresh = Vec::new();
        for l in list {
            present.insert(l.name.clone());
            if seen.get(&l.name) == Some(&l.token) {
                continue;
            }
            let Some((body, _)) = self.answered(b.read_entry(&l.name))? else {
                // Removed since the listing.
                present.remove(&l.name);
                continue;
            };
            let Ok(en) = parse_entry(&l.name, &body) else {
                continue;
            };
            if self.answered(b.object_len(&en.digest))? != Some(en.size) {
                continue;
            }
            fresh.push((l.name, l.token, en));
        }
        let mut st = self.lock();
        for (name, token, en) in fresh {
            st.seen.insert(name, token);
            // A key the other process re-pointed: the old object's bytes
            // are its business (it deleted them if unreferenced).
            let _ = st.insert(en);
        }
        // Keys whose entry another process removed (unless this process
        // wrote an entry since the listing: it may be one of them).
        if st.written == written {
            let vanished: Vec<(String, String)> = st
                .keys
                .values()
                .filter(|en| !present.contains(&index_name(en.key.as_str())))
                .map(|en| (en.key.as_str().to_string(), en.digest.clone()))
                .collect();
            for (k, d) in vanished {
                st.keys.remove(k.as_str());
                st.seen.remove(&index_name(&k));
                st.forget_key(&k, &d);
            }
        }
        st.last_refresh = Some(Instant::now());
        Ok(())
    }

    /// Point `key` at an object already in the store (e.g. a tag at a
    /// manifest digest). Fails with NotFound when the object is absent.
    /// The same link made again within a second (same object, same facts)
    /// writes nothing: the entry would differ only by that second.
    pub async fn link(
        &self,
        key: &(impl AsKey + ?Sized),
        digest: &str,
        meta: Meta,
    ) -> Result<Entry> {
        let key = key.as_key();
        let key: &Key = &key;
        let (size, same) = {
            let st = self.lock();
            let size = st.objects.get(digest).map(|o| o.size);
            let same = st.keys.get(key.as_str()).filter(|e| {
                e.digest == digest
                    && e.content_type == meta.content_type
                    && e.pinned == meta.pinned
                    && e.meta == meta.meta
                    && e.fetched + 1 >= now_secs()
            });
            (size, same.cloned())
        };
        let size = size.ok_or_else(|| {
            Error::NotFound(format!("object sha256:{digest} is not in the store"))
        })?;
        if let Some(e) = same {
            return Ok(e);
        }
        let entry = Entry::fetched_now(key.clone(), digest.to_string(), size, meta);
        self.put_entry(entry, Write::Cache).await
    }

    /// Write `entry` under the store lock (the object must be there), then
    /// evict; all on a blocking thread. The entry that stands is returned
    /// (a pinned one another process wrote wins over an unpinned write).
    async fn put_entry(&self, entry: Entry, write: Write) -> Result<Entry> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let digest = entry.digest.clone();
            let lock = store.lock_store()?;
            let stands = store.put_entry_locked(&lock, entry, write)?;
            drop(lock);
            store.evict(Some(&digest));
            Ok(stands)
        })
        .await
        .map_err(|e| Error::io("index task", std::io::Error::other(e)))?
    }

    /// What the backend's silence is told as: 503, never "absent".
    pub(super) fn did_not_answer(&self, e: std::io::Error) -> Error {
        Error::Unavailable(format!(
            "the store {} did not answer: {}",
            self.describe(),
            crate::text::error_line(&e)
        ))
    }

    /// Write the index entry for `entry` and update the in-memory state;
    /// the entry that stands is returned. The caller holds the store lock
    /// (blocking). The entry there now is read first, under that lock: a
    /// write never replaces an entry it has not read. A pinned entry wins
    /// over a [`Write::Cache`] write (it stays, with its digest, and is
    /// returned); a backend that does not answer is
    /// [`Error::Unavailable`], and nothing is written or dropped.
    pub(super) fn put_entry_locked(
        &self,
        _lock: &backend::LockGuard<'_>,
        entry: Entry,
        write: Write,
    ) -> Result<Entry> {
        let b = self.backend();
        let object_len = |d: &str| {
            self.answered(b.object_len(d))
                .map_err(|e| self.did_not_answer(e))
        };
        if object_len(&entry.digest)? != Some(entry.size) {
            // Another process removed it since we looked.
            let mut st = self.lock();
            if let Some(o) = st.objects.remove(&entry.digest) {
                st.total -= o.size;
            }
            return Err(Error::NotFound(format!(
                "object sha256:{} is not in the store",
                entry.digest
            )));
        }
        let name = index_name(entry.key.as_str());
        let current = self
            .answered(b.read_entry(&name))
            .map_err(|e| self.did_not_answer(e))?
            .and_then(|(body, token)| parse_entry(&name, &body).ok().map(|en| (en, token)));
        let (stands, token) = match current {
            Some((cur, token))
                if write == Write::Cache
                    && cur.pinned
                    && !entry.pinned
                    && object_len(&cur.digest)? == Some(cur.size) =>
            {
                tracing::info!(key = %cur.key, digest = %cur.digest, "a pinned entry stays: not replaced by a cached copy");
                (cur, token)
            }
            _ => {
                let body = serde_json::to_vec_pretty(&entry)
                    .map_err(|e| Error::io("encoding an index entry", std::io::Error::other(e)))?;
                let token = self.answered(b.write_entry(&name, &body)).map_err(|e| {
                    Error::io(
                        format!("writing the index entry {name} in {}", self.describe()),
                        e,
                    )
                })?;
                self.lock().written += 1;
                (entry, token)
            }
        };
        let old = {
            let mut st = self.lock();
            st.seen.insert(name, token);
            st.insert(stands.clone())
        };
        if let Some(old) = old {
            // The key named another object before: delete it if nothing
            // (here or in another process) names it any more.
            if self.refresh().is_ok() && !self.lock().objects.contains_key(&old) {
                self.delete_object(&old);
            }
        }
        Ok(stands)
    }

    /// Forget `key` (its object goes when no other key names it). Blocking.
    pub fn remove(&self, key: &(impl AsKey + ?Sized)) {
        let key = key.as_key();
        let key: &Key = &key;
        self.remove_raw(key.as_str())
    }

    /// [`Store::remove`] by the key's string form (inside the store).
    pub(super) fn remove_raw(&self, key: &str) {
        let Ok(_lock) = self.lock_store() else {
            return;
        };
        // Nothing is deleted on a view the backend did not confirm.
        if self.refresh().is_err() {
            return;
        }
        self.remove_key_locked(key);
    }

    /// Remove `key`'s entry and, when no key is left on its object, the
    /// object. Caller holds the store lock and has refreshed.
    fn remove_key_locked(&self, key: &str) {
        let taken = self.lock().take_key(key);
        self.delete_taken(taken);
    }

    /// Delete what [`State::take_key`] took out of memory: entries, and
    /// objects no key names any more.
    fn delete_taken(&self, taken: impl IntoIterator<Item = (String, Option<String>)>) {
        for (name, orphan) in taken {
            self.backend().delete_entry(&name);
            if let Some(d) = orphan {
                self.delete_object(&d);
            }
        }
    }

    /// Delete an object's bytes (and any local copy the backend keeps).
    pub(super) fn delete_object(&self, digest: &str) {
        self.backend().delete_object(digest);
    }

    /// Drop every key naming `digest` (caller holds the store lock, and
    /// has refreshed); the object with the last. Returns the keys.
    pub(super) fn remove_object_locked(&self, digest: &str) -> Vec<Key> {
        let (keys, taken) = {
            let mut st = self.lock();
            let keys = st
                .objects
                .get(digest)
                .map(|o| o.keys.clone())
                .unwrap_or_default();
            let taken: Vec<_> = keys
                .iter()
                .filter_map(|k| st.take_key(k.as_str()))
                .collect();
            (keys, taken)
        };
        self.delete_taken(taken);
        keys
    }

    /// Set or clear the pin on `key`.
    pub async fn set_pinned(&self, key: &(impl AsKey + ?Sized), pinned: bool) -> Result<()> {
        let key = key.as_key();
        let key: &Key = &key;
        let mut entry = self
            .entry(key)
            .ok_or_else(|| Error::NotFound(format!("{key} is not in the store")))?;
        if entry.pinned == pinned {
            return Ok(());
        }
        entry.pinned = pinned;
        self.put_entry(entry, Write::Owner).await.map(drop)
    }

    /// Evict least-recently-used objects that no reader holds and no key
    /// pins until the total is within the limit. `keep` is never evicted.
    /// Before deciding, the index is re-read under the store lock, so an
    /// object another process pinned (or re-pointed a key to) is kept.
    /// Blocking: call it off the async threads.
    pub fn evict(&self, keep: Option<&str>) {
        let Some(max) = self.inner.max_size else {
            return;
        };
        {
            let st = self.lock();
            let fresh = st.last_refresh.is_some_and(|t| t.elapsed() < REFRESH_EVERY);
            if st.total + self.in_flight() <= max && fresh {
                return;
            }
        }
        let Ok(_lock) = self.lock_store() else {
            return;
        };
        // Nothing is evicted on a view the backend did not confirm (an
        // object another process pinned meanwhile would go).
        if self.refresh().is_err() {
            return;
        }
        loop {
            // The victim leaves memory with its keys in one hold of the
            // state lock (no reader can lease it after the choice); its
            // entries and bytes are deleted after, unlocked.
            let (digest, taken) = {
                let mut st = self.lock();
                if st.total + self.in_flight() <= max {
                    break;
                }
                let victim = st
                    .objects
                    .iter()
                    .filter(|(d, o)| {
                        o.readers == 0
                            && Some(d.as_str()) != keep
                            && !o
                                .keys
                                .iter()
                                .any(|k| st.keys.get(k).is_some_and(|e| e.pinned))
                    })
                    .min_by_key(|(_, o)| o.last_used)
                    .map(|(d, o)| (d.clone(), o.keys.clone()));
                let Some((digest, keys)) = victim else {
                    break;
                };
                let taken: Vec<_> = keys
                    .iter()
                    .filter_map(|k| st.take_key(k.as_str()))
                    .collect();
                (digest, taken)
            };
            tracing::info!(%digest, "evicting");
            self.delete_taken(taken);
        }
    }

    /// A reader's lease ended.
    pub(super) fn release(&self, digest: &str, born: u64) {
        let over = {
            let mut st = self.lock();
            if let Some(o) = st.objects.get_mut(digest)
                && o.born == born
            {
                o.readers = o.readers.saturating_sub(1);
            }
            // Over the bound in this view, or a view a second old: another
            // process (the mirror job, an import) may have written since,
            // and its objects count against the bound too (the round reads
            // them in under the store lock, at most once a second).
            let stale = st.last_refresh.is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
            self.inner
                .max_size
                .is_some_and(|m| st.total + self.in_flight() > m || stale)
        };
        // A burst's objects become evictable as their readers leave. One
        // eviction runs at a time; a release during it asks for another
        // round, so the last reader to leave is never missed.
        if !over {
            return;
        }
        self.inner.evict_again.store(true, Ordering::Release);
        if !self.inner.evicting.swap(true, Ordering::AcqRel) {
            let store = self.clone();
            let run = move || {
                loop {
                    store.inner.evict_again.store(false, Ordering::Release);
                    store.evict(None);
                    store.inner.evicting.store(false, Ordering::Release);
                    // A release between the round and the flag: go again
                    // unless that release started its own round.
                    if !store.inner.evict_again.load(Ordering::Acquire)
                        || store.inner.evicting.swap(true, Ordering::AcqRel)
                    {
                        break;
                    }
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn_blocking(run);
                }
                Err(_) => run(),
            }
        }
    }
}
