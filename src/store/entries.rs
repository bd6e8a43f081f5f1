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
use super::names::{index_name, parse_entry};
use super::sums::Sums;
use super::{AsKey, Entry, Key, KeyPrefix, Meta, Store, Touch, backend, now_secs, pins};
use crate::error::{Error, Result};

/// Unreferenced objects younger than this survive a startup.
pub(super) const ORPHAN_GRACE: Duration = Duration::from_secs(600);
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
    /// Entry or pin record name -> change token as last read (every
    /// write replaces the record, so a changed token is another process's
    /// write).
    pub(super) seen: HashMap<String, u64>,
    /// Keys whose pin record stands, as last read ([`super::pins`]): their
    /// record in `keys` is the pin record's, whatever their entry says.
    pub(super) pins: HashSet<String>,
    pub(super) last_refresh: Option<Instant>,
    /// Bumped by every entry this process writes (a refresh that listed
    /// before it must not take its key for one another process removed).
    pub(super) written: u64,
}

/// What the store knows of one object while it is held: immutable facts
/// (size, checksums), read once.
pub(super) struct Obj {
    pub(super) size: u64,
    pub(super) readers: usize,
    pub(super) last_used: u64,
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

    /// Remove `key` from memory: the record names to delete (its entry,
    /// and its pin record when one stands), and the object to delete when
    /// no key is left on it.
    pub(super) fn take_key(&mut self, key: &str) -> Option<(Vec<String>, Option<String>)> {
        let old = self.keys.remove(key)?;
        let mut names = vec![index_name(key)];
        if self.pins.remove(key) {
            names.push(super::pins::pin_name(key));
        }
        for n in &names {
            self.seen.remove(n);
        }
        let orphan = self.forget_key(key, &old.digest).then_some(old.digest);
        Some((names, orphan))
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
        // Pin records first: a key's pin record stands over its entry.
        let mut listed = b.list_entries().map_err(io)?;
        listed.sort_by_key(|l| !pins::is_pin_name(&l.name));
        for l in listed {
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
                (Ok(en), None)
                    if !pins::is_pin_name(&l.name) && state.pins.contains(en.key.as_str()) =>
                {
                    state.seen.insert(l.name, l.token);
                }
                (Ok(en), None) => {
                    if pins::is_pin_name(&l.name) {
                        state.pins.insert(en.key.as_str().to_string());
                    }
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
                        if let Err(e) = b.delete_entry(&l.name) {
                            tracing::warn!(name = %l.name, error = %e, "the index entry could not be deleted");
                        }
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
                    if let Err(e) = b.delete_object(digest) {
                        tracing::warn!(%digest, error = %e, "the unreferenced object could not be deleted");
                    }
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
    ) -> std::result::Result<Option<Entry>, super::Unavailable> {
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
        // Its pin record, when one stands, is the key's record.
        let pin = pins::pin_name(key);
        for name in [pin.clone(), index_name(key)] {
            let Some((body, token)) = self.answered(self.backend().read_entry(&name))? else {
                continue;
            };
            let Ok(en) = parse_entry(&name, &body) else {
                continue;
            };
            if self.answered(self.backend().object_len(&en.digest))? != Some(en.size) {
                continue;
            }
            let mut st = self.lock();
            if st.keys.contains_key(key) {
                return Ok(true);
            }
            if name == pin {
                st.pins.insert(key.to_string());
            }
            st.seen.insert(name, token);
            st.insert(en);
            return Ok(true);
        }
        Ok(false)
    }

    /// Re-read the index entries other processes wrote or removed since we
    /// last looked (blocking; before deciding to delete, under the store
    /// lock). The backend is read with the state unlocked; what it said is
    /// applied after, and only when every read was answered: `Err` (the
    /// backend did not answer) changes nothing, and the caller deletes
    /// nothing on the view it has.
    pub(super) fn refresh(&self) -> std::io::Result<()> {
        let b = self.backend();
        let (mut seen, written, pins_before) = {
            let st = self.lock();
            let pinned: HashSet<String> = st.pins.iter().map(|k| index_name(k)).collect();
            (st.seen.clone(), st.written, pinned)
        };
        let list = self.answered(b.list_entries())?;
        let pinned_now = pins::pinned_entries(list.iter().map(|l| l.name.as_str()));
        // An entry whose pin record went (a mirror unpinned it) is read
        // again: its record is the entry's now.
        for name in pins_before.difference(&pinned_now) {
            seen.remove(name);
        }
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
        // Pin records first; an entry beside one is only noted as seen.
        fresh.sort_by_key(|(name, _, _)| !pins::is_pin_name(name));
        let mut st = self.lock();
        for (name, token, en) in fresh {
            let pin = pins::is_pin_name(&name);
            let beside_pin = !pin && pinned_now.contains(&name);
            st.seen.insert(name, token);
            if pin {
                st.pins.insert(en.key.as_str().to_string());
            }
            if !beside_pin {
                // A key the other process re-pointed: the old object's
                // bytes are its business (it deleted them if unreferenced).
                let _ = st.insert(en);
            }
        }
        if st.written == written {
            let vanished_pins: Vec<String> = st
                .pins
                .iter()
                .filter(|k| !pinned_now.contains(&index_name(k)))
                .cloned()
                .collect();
            for k in vanished_pins {
                st.pins.remove(&k);
                st.seen.remove(&pins::pin_name(&k));
            }
        }
        // Keys whose entry and pin record another process removed (unless
        // this process wrote an entry since the listing: it may be one of
        // them).
        if st.written == written {
            let vanished: Vec<(String, String)> = st
                .keys
                .values()
                .filter(|en| {
                    let k = en.key.as_str();
                    !present.contains(&index_name(k)) && !present.contains(&pins::pin_name(k))
                })
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
        // The pin record first: one that stands wins over any cached copy,
        // whatever the entry says (another process's entry write, decided
        // before the pin, may land after it: `pins`).
        let pin = self.read_pin(entry.key.as_str())?;
        let current = self
            .answered(b.read_entry(&name))
            .map_err(|e| self.did_not_answer(e))?
            .and_then(|(body, token)| parse_entry(&name, &body).ok().map(|en| (en, token)));
        let cached = write == Write::Cache && !entry.pinned;
        let kept = match (pin.as_ref(), current.as_ref()) {
            (Some((p, _)), _) if cached => Some(p.clone()),
            (None, Some((cur, _)))
                if cached && cur.pinned && object_len(&cur.digest)? == Some(cur.size) =>
            {
                Some(cur.clone())
            }
            _ => None,
        };
        let (stands, token) = match kept {
            Some(k) => {
                tracing::info!(key = %k.key, digest = %k.digest, "a pinned entry stays: not replaced by a cached copy");
                if let Some((_, t)) = &pin {
                    let mut st = self.lock();
                    st.seen.insert(pins::pin_name(k.key.as_str()), *t);
                    st.pins.insert(k.key.as_str().to_string());
                }
                (k, current.map(|(_, t)| t))
            }
            None => {
                let token = self.write_records(&entry, pin.is_some())?;
                (entry, Some(token))
            }
        };
        let old = {
            let mut st = self.lock();
            if let Some(token) = token {
                st.seen.insert(name, token);
            }
            st.insert(stands.clone())
        };
        if let Some(old) = old {
            // The key named another object before: delete it if nothing
            // (here or in another process) names it any more.
            if self.refresh().is_ok() && !self.lock().objects.contains_key(&old) {
                // (a failure is logged: the object is swept as an orphan)
                let _failed = self.delete_object(&old).is_err();
            }
        }
        Ok(stands)
    }

    /// Forget `key`: its entry and pin record, and its object when no
    /// other key names it. Blocking. `Ok(true)` when they are gone,
    /// `Ok(false)` when the store did not hold the key; `Err` when the
    /// store lock, the re-read of the index or a deletion failed (then
    /// nothing, or not all of it, was removed: the key may still be there).
    pub fn remove(&self, key: &(impl AsKey + ?Sized)) -> Result<bool> {
        let key = key.as_key();
        let key: &Key = &key;
        self.remove_raw(key.as_str())
    }

    /// [`Store::remove`] by the key's string form (inside the store).
    pub(super) fn remove_raw(&self, key: &str) -> Result<bool> {
        let _lock = self.lock_store()?;
        // Nothing is deleted on a view the backend did not confirm.
        self.refresh().map_err(|e| self.did_not_answer(e))?;
        let taken = self.lock().take_key(key);
        let held = taken.is_some();
        self.delete_taken(taken)?;
        Ok(held)
    }

    /// Delete what [`State::take_key`] took out of memory: records, and
    /// objects no key names any more. The first deletion the backend did
    /// not confirm ends it, as an error naming what was not deleted.
    pub(super) fn delete_taken(
        &self,
        taken: impl IntoIterator<Item = (Vec<String>, Option<String>)>,
    ) -> Result<()> {
        for (names, orphan) in taken {
            for name in names {
                self.answered(self.backend().delete_entry(&name))
                    .map_err(|e| {
                        Error::io(
                            format!("deleting the index record {name} in {}", self.describe()),
                            e,
                        )
                    })?;
            }
            if let Some(d) = orphan {
                self.delete_object(&d).map_err(|e| {
                    Error::io(
                        format!("deleting the object sha256:{d} in {}", self.describe()),
                        e,
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Delete an object's bytes (and any local copy the backend keeps);
    /// a deletion the backend did not confirm is logged and returned.
    pub(super) fn delete_object(&self, digest: &str) -> std::io::Result<()> {
        let r = self.backend().delete_object(digest);
        if let Err(e) = &r {
            tracing::warn!(%digest, error = %e, "deleting an object failed: it stays until the next sweep");
        }
        r
    }

    /// Drop every key naming `digest` (caller holds the store lock, and
    /// has refreshed); the object with the last. Returns the keys.
    pub(super) fn remove_object_locked(&self, digest: &str) -> Result<Vec<Key>> {
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
        self.delete_taken(taken)?;
        Ok(keys)
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
}
