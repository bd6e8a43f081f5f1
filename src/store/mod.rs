//! The content-addressed store: objects by sha256, an index from keys to
//! objects. Knows nothing of HTTP, Talos or OCI: keys in, verified objects
//! out. The policy lives here (the index in memory, leases, pins, LRU
//! eviction, a checksum check on every chunk read, quarantine of rotten
//! objects); the bytes live in a [`Backend`] ([`backend`] says what one
//! must guarantee): today the local directory ([`LocalDir`], `--cache-dir`).
//!
//! # Layout of the local directory (see [`local`])
//! `objects/sha256/<hex>` (the bytes), `sums/<hex>` (their per-chunk
//! checksums, [`sums`]), `index/<sha256(key)>.json` (one [`Entry`] per
//! key: a key never becomes a path), `tmp/` (writes in progress, each
//! holding a `flock`), `lock` (the store lock).
//!
//! # Guarantees
//! - Every write goes to a temp file, is fsynced and renamed; an object is
//!   visible only once its index entry is written, and an object whose
//!   entry could not be written (a full disk) is removed again.
//! - Every read checks each chunk it hands out ([`StoredObject::stream`]);
//!   a rotten object is dropped with every key naming it.
//! - Several processes may share one store (`serve` and the mirror job, in
//!   their own PID namespaces): index writes and deletions happen under
//!   the store lock, and before deleting anything a process re-reads the
//!   index entries others wrote ([`Store::evict`] never drops what another
//!   process pinned); a temp file is removed only when no process holds
//!   its lock.
//! - Only names the store itself writes are ever removed, only in its own
//!   subfolders; anything else there (and any FIFO, socket, device or link)
//!   is left alone with a warning and never opened.
//!
//! # Usage
//! ```no_run
//! # async fn demo() -> talos_gen::Result<()> {
//! use talos_gen::store::{Store, Meta};
//! let store = Store::open("/var/cache/talos-gen", Some(50 << 30))?;
//! // write
//! let mut tmp = store.temp()?;
//! tmp.write_all(b"hello").await?;
//! let entry = store.commit(tmp, "image/x/v1.0.0/a.raw.xz", Meta::default()).await?;
//! assert_eq!(entry.size, 5);
//! // read (the lease keeps the object from eviction while held)
//! if let Some(obj) = store.get("image/x/v1.0.0/a.raw.xz") {
//!     let _body = obj.stream(0, 5); // Stream<Item = io::Result<Bytes>>, chunk-checked
//! }
//! # Ok(()) }
//! ```
//! Several keys may name one object ([`Store::link`]); eviction
//! (`--cache-max-size`, [`Store::evict`]) removes least-recently-used objects
//! that no reader holds and no key pins, with every key naming them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub mod backend;
pub mod local;
mod read;
pub mod s3;
pub mod sums;
mod temp;

pub use backend::{Backend, ObjectRead};
pub use local::LocalDir;
use local::{index_name, is_hex64};
pub use read::{Lease, StoredObject};
pub use s3::{S3Backend, S3Config};
use sums::Sums;
pub use temp::TempObject;

/// Bytes per step when streaming a stored object (1 MiB measured best
/// against 2, 8 and 32 MiB windows with wrk on loopback); a whole number
/// of checksum blocks ([`sums::CHUNK`]).
pub const STREAM_CHUNK: usize = 1 << 20;

/// What the index knows about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: String,
    /// Lowercase hex sha256 of the object's bytes.
    pub digest: String,
    pub size: u64,
    #[serde(default)]
    pub content_type: Option<String>,
    /// When the bytes were fetched (seconds since the epoch).
    pub fetched: u64,
    /// Pinned entries (mirror job) are never evicted.
    #[serde(default)]
    pub pinned: bool,
    /// Free-form facts the caller wants back (e.g. a content disposition).
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

impl Entry {
    pub fn fetched_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.fetched)
    }
}

/// What the caller attaches to a key on commit.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    pub content_type: Option<String>,
    pub pinned: bool,
    pub meta: BTreeMap<String, String>,
}

/// Where a store is: a local directory (`--cache-dir`) or an S3 bucket
/// (`--store s3://...`, with `--cache-dir` its local spool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Dir(PathBuf),
    S3(S3Config),
}

impl Location {
    /// For messages: the directory or `s3://bucket/prefix`.
    pub fn describe(&self) -> String {
        match self {
            Location::Dir(d) => d.display().to_string(),
            Location::S3(c) => c.url(),
        }
    }

    /// The local directory, when the store is one.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Location::Dir(d) => Some(d),
            Location::S3(_) => None,
        }
    }
}

impl From<PathBuf> for Location {
    fn from(p: PathBuf) -> Location {
        Location::Dir(p)
    }
}

impl From<&Location> for Location {
    fn from(l: &Location) -> Location {
        l.clone()
    }
}

impl From<&Path> for Location {
    fn from(p: &Path) -> Location {
        Location::Dir(p.to_path_buf())
    }
}

/// A handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Box<dyn Backend>,
    max_size: Option<u64>,
    state: Mutex<State>,
    /// Objects dropped because their bytes rotted.
    corrupt: AtomicU64,
    /// An eviction is scheduled or running.
    evicting: AtomicBool,
    /// A reader left while an eviction ran: run another round.
    evict_again: AtomicBool,
    /// What [`Store::open`] found wrong and dropped.
    dropped_at_open: Vec<String>,
    /// The backend answered its last call or probe (an S3 outage clears it).
    available: AtomicBool,
}

#[derive(Default)]
struct State {
    keys: HashMap<String, Entry>,
    objects: HashMap<String, Obj>,
    total: u64,
    clock: u64,
    /// Wall-clock last read per object digest (seconds since the epoch).
    used_at: HashMap<String, u64>,
    /// Entry name -> change token as last read (every write replaces the
    /// entry, so a changed token is another process's write).
    seen: HashMap<String, u64>,
    last_refresh: Option<Instant>,
}

struct Obj {
    size: u64,
    readers: usize,
    last_used: u64,
    keys: Vec<String>,
    /// Loaded on first read: `Some(None)` when the object has no checksums.
    sums: Option<Option<Arc<Sums>>>,
}

impl Obj {
    fn new(size: u64, t: u64) -> Obj {
        Obj {
            size,
            readers: 0,
            last_used: t,
            keys: Vec::new(),
            sums: None,
        }
    }
}

impl State {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Point `entry.key` at `entry.digest` in memory only. Returns the
    /// digest the key named before, if different.
    fn insert(&mut self, entry: Entry) -> Option<String> {
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
            self.forget_key(&key, d);
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
}

/// Unreferenced objects younger than this survive a startup.
const ORPHAN_GRACE: Duration = Duration::from_secs(600);
/// How stale this process's view of other processes' writes may be before
/// an eviction check re-reads the index.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parse an entry the backend gave, checking it against its name.
fn parse_entry(name: &str, body: &[u8]) -> std::result::Result<Entry, String> {
    let en: Entry =
        serde_json::from_slice(body).map_err(|_| format!("index entry {name} does not parse"))?;
    if index_name(&en.key) != name || !is_hex64(&en.digest) {
        return Err(format!(
            "index entry {name} does not match its key {}",
            en.key
        ));
    }
    Ok(en)
}

impl Store {
    /// Open (creating) the store in the local directory `dir`: clean up
    /// interrupted writes, check the index against the objects, and evict
    /// down to `max_size` bytes.
    pub fn open(dir: impl Into<PathBuf>, max_size: Option<u64>) -> Result<Store> {
        let dir: PathBuf = dir.into();
        if dir.as_os_str().is_empty() {
            return Err(Error::bad_input(
                "the cache directory is an empty path (give a directory)",
            ));
        }
        let backend = LocalDir::open(dir.clone())
            .map_err(|e| Error::io(format!("opening the store {}", dir.display()), e))?;
        Store::with_backend(Box::new(backend), max_size)
    }

    /// Open the store at `loc` (blocking: the S3 backend connects and
    /// lists the bucket).
    pub fn open_at(loc: &Location, max_size: Option<u64>) -> Result<Store> {
        match loc {
            Location::Dir(d) => Store::open(d.clone(), max_size),
            Location::S3(c) => {
                let backend = S3Backend::open(c.clone()).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::InvalidInput {
                        Error::bad_input(format!("--store {}: {e}", c.url()))
                    } else {
                        Error::io(format!("opening the store {}", c.url()), e)
                    }
                })?;
                Store::with_backend(Box::new(backend), max_size)
            }
        }
    }

    /// Open a store on any backend (the same checks as [`Store::open`]).
    pub fn with_backend(backend: Box<dyn Backend>, max_size: Option<u64>) -> Result<Store> {
        let mut store = Store {
            inner: Arc::new(Inner {
                backend,
                max_size,
                state: Mutex::new(State::default()),
                corrupt: AtomicU64::new(0),
                evicting: AtomicBool::new(false),
                evict_again: AtomicBool::new(false),
                dropped_at_open: Vec::new(),
                available: AtomicBool::new(true),
            }),
        };
        let (state, dropped) = {
            let _lock = store.lock_store()?;
            store.scan()?
        };
        let inner = Arc::get_mut(&mut store.inner).expect("store not shared yet");
        inner.state = Mutex::new(state);
        inner.dropped_at_open = dropped;
        store.evict(None);
        Ok(store)
    }

    fn backend(&self) -> &dyn Backend {
        &*self.inner.backend
    }

    /// The start-up scan (under the store lock): spool leftovers, objects,
    /// index entries, orphans.
    fn scan(&self) -> Result<(State, Vec<String>)> {
        let b = self.backend();
        let io = |e| Error::io(format!("reading the store {}", b.describe()), e);
        b.clean_spool();
        let mut state = State::default();
        let mut dropped = Vec::new();
        let on_disk = b.list_objects().map_err(io)?;
        for l in b.list_entries().map_err(io)? {
            let parsed = b
                .read_entry(&l.name)
                .ok_or_else(|| format!("index entry {} cannot be read", l.name))
                .and_then(|(body, _)| parse_entry(&l.name, &body));
            let problem = match &parsed {
                Err(p) => Some(p.clone()),
                Ok(en) => match on_disk.get(&en.digest) {
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
                },
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
                    tracing::warn!(problem = %p, "dropping an index entry");
                    b.delete_entry(&l.name);
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
                let young = b.object_age(digest).is_some_and(|age| age < ORPHAN_GRACE);
                if !young {
                    tracing::info!(%digest, "removing an unreferenced object");
                    b.delete_object(digest);
                }
            }
        }
        let unchecked = state
            .objects
            .keys()
            .filter(|d| b.read_sums(d).is_none())
            .count();
        if unchecked > 0 {
            tracing::warn!(
                objects = unchecked,
                "objects without chunk checksums (written by an older talos-gen) are served unchecked; `talos-gen mirror verify` adds them"
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

    /// Is the backend reachable (within `limit`)? Updates
    /// [`Store::available`]. Blocking.
    pub fn check(&self, limit: Duration) -> Result<()> {
        let r = self.backend().check(limit);
        self.inner.available.store(r.is_ok(), Ordering::Relaxed);
        r.map_err(|e| Error::io(format!("the store {}", self.describe()), e))
    }

    /// Did the backend answer its last call or [`Store::check`]?
    pub fn available(&self) -> bool {
        self.inner.available.load(Ordering::Relaxed)
    }

    /// Is the store somewhere other than a local directory (a bucket)?
    pub fn is_remote(&self) -> bool {
        self.backend().local_dir().is_none()
    }

    /// The local directory, when the store is one (for the status page).
    pub fn dir(&self) -> Option<&Path> {
        self.backend().local_dir()
    }

    /// Where the store is, in words (`/var/cache/talos-gen`, `s3://...`).
    pub fn describe(&self) -> String {
        self.backend().describe()
    }

    pub fn max_size(&self) -> Option<u64> {
        self.inner.max_size
    }

    /// Bytes held by committed objects (as this process knows them).
    pub fn total_size(&self) -> u64 {
        self.lock().total
    }

    /// Objects dropped so far because a read found their bytes rotten.
    pub fn corrupt_dropped(&self) -> u64 {
        self.inner.corrupt.load(Ordering::Relaxed)
    }

    /// What [`Store::open`] found wrong and dropped (one line each: the key,
    /// the object, what was wrong).
    pub fn dropped_at_open(&self) -> &[String] {
        &self.inner.dropped_at_open
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough state.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the store lock (blocking: call off the async threads, or briefly).
    fn lock_store(&self) -> Result<backend::LockGuard<'_>> {
        self.backend()
            .lock()
            .map_err(|e| Error::io("locking the store", e))
    }

    /// The path of an object in a local store (tests); `None` for a
    /// malformed digest or another backend.
    pub fn object_path(&self, digest: &str) -> Option<PathBuf> {
        let dir = self.dir()?;
        is_hex64(digest).then(|| dir.join("objects/sha256").join(digest))
    }

    /// The entry for `key`, without taking a lease.
    pub fn entry(&self, key: &str) -> Option<Entry> {
        self.lock().keys.get(key).cloned()
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
    /// first when this process's view is older than a second.
    pub fn entries_with_prefix(&self, prefix: &str) -> Vec<Entry> {
        let mut st = self.lock();
        if st.last_refresh.is_none_or(|t| t.elapsed() >= REFRESH_EVERY) {
            self.refresh(&mut st);
        }
        let mut v: Vec<Entry> = st
            .keys
            .values()
            .filter(|e| e.key.starts_with(prefix))
            .cloned()
            .collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }

    /// Open the object for `key` for reading; the returned lease keeps it
    /// from eviction until dropped. Marks it recently used.
    pub fn get(&self, key: &str) -> Option<StoredObject> {
        let mut st = self.lock();
        let entry = match st.keys.get(key) {
            Some(e) => e.clone(),
            None => {
                // Another process (the mirror job) may have added it.
                drop(st);
                self.adopt(key)?;
                st = self.lock();
                st.keys.get(key)?.clone()
            }
        };
        // Take the reader's lease first (nothing evicts the object from
        // here on), then open it with the state unlocked: a remote backend
        // answers over the network, and no other caller of the store may
        // wait behind that round trip.
        let t = st.tick();
        let o = st.objects.get_mut(&entry.digest)?;
        o.readers += 1;
        o.last_used = t;
        let known_sums = o.sums.clone();
        st.used_at.insert(entry.digest.clone(), now_secs());
        drop(st);
        let lease = Lease {
            store: self.clone(),
            digest: entry.digest.clone(),
        };
        let object = match self.backend().open_object(&entry.digest) {
            Ok(o) => {
                self.inner.available.store(true, Ordering::Relaxed);
                o
            }
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                // The backend did not answer (an S3 outage): the entry
                // stays; the request fails rather than refetching.
                tracing::warn!(key, error = %e, "the store did not answer");
                self.inner.available.store(false, Ordering::Relaxed);
                return None;
            }
            Err(e) => {
                tracing::warn!(key, error = %e, "object missing; dropping its entry");
                drop(lease);
                self.remove(key);
                return None;
            }
        };
        let sums = match known_sums {
            Some(s) => s,
            None => {
                let s = self.load_sums(&entry.digest, entry.size);
                if let Some(o) = self.lock().objects.get_mut(&entry.digest) {
                    o.sums = Some(s.clone());
                }
                s
            }
        };
        Some(StoredObject {
            lease,
            object,
            sums,
            entry,
        })
    }

    /// The checksums of an object of `size` bytes, if they are there and fit.
    fn load_sums(&self, digest: &str, size: u64) -> Option<Arc<Sums>> {
        let b = self.backend().read_sums(digest)?;
        match Sums::decode(&b) {
            Ok(s) if s.fits(size) => Some(Arc::new(s)),
            _ => {
                tracing::warn!(%digest, "the checksums do not fit their object; serving it unchecked");
                None
            }
        }
    }

    /// Load `key`'s index entry written by another process, if its object
    /// is there with the right size.
    fn adopt(&self, key: &str) -> Option<()> {
        let name = index_name(key);
        let (body, token) = self.backend().read_entry(&name)?;
        let en = parse_entry(&name, &body).ok()?;
        if self.backend().object_len(&en.digest) != Some(en.size) {
            return None;
        }
        let mut st = self.lock();
        if st.keys.contains_key(key) {
            return Some(());
        }
        st.seen.insert(name, token);
        st.insert(en);
        Some(())
    }

    /// Re-read the index entries other processes wrote or removed since we
    /// last looked (under the store lock, before deciding to delete).
    fn refresh(&self, st: &mut State) {
        let b = self.backend();
        let Ok(list) = b.list_entries() else {
            return;
        };
        let mut present = HashSet::new();
        for l in list {
            present.insert(l.name.clone());
            if st.seen.get(&l.name) == Some(&l.token) {
                continue;
            }
            let Some(en) = b
                .read_entry(&l.name)
                .and_then(|(body, _)| parse_entry(&l.name, &body).ok())
            else {
                continue;
            };
            if b.object_len(&en.digest) != Some(en.size) {
                continue;
            }
            st.seen.insert(l.name, l.token);
            // A key the other process re-pointed: the old object's bytes
            // are its business (it deleted them if unreferenced).
            let _ = st.insert(en);
        }
        // Keys whose entry another process removed.
        let vanished: Vec<(String, String)> = st
            .keys
            .values()
            .filter(|en| !present.contains(&index_name(&en.key)))
            .map(|en| (en.key.clone(), en.digest.clone()))
            .collect();
        for (k, d) in vanished {
            st.keys.remove(&k);
            st.seen.remove(&index_name(&k));
            st.forget_key(&k, &d);
        }
        st.last_refresh = Some(Instant::now());
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
    /// (replacing what the key named before). Evicts down to the size limit,
    /// never the object just committed.
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
            let res = store.commit_blocking(file, &src, en, &sums);
            // The spool file is gone on success; on failure it must go too.
            let _ = std::fs::remove_file(&src);
            res
        })
        .await
        .map_err(|e| Error::io("commit task", std::io::Error::other(e)))??;
        self.evict(Some(&entry.digest));
        Ok(entry)
    }

    fn commit_blocking(&self, file: File, src: &Path, entry: Entry, sums: &Sums) -> Result<()> {
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
                let mut st = self.lock();
                self.refresh(&mut st);
                if !st.objects.contains_key(&entry.digest) {
                    self.backend().delete_object(&entry.digest);
                }
            }
            return Err(e);
        }
        Ok(())
    }

    /// Point `key` at an object already in the store (e.g. a tag at a
    /// manifest digest). Fails with NotFound when the object is absent.
    pub async fn link(&self, key: &str, digest: &str, meta: Meta) -> Result<Entry> {
        let size = {
            let st = self.lock();
            st.objects.get(digest).map(|o| o.size)
        }
        .ok_or_else(|| Error::NotFound(format!("object sha256:{digest} is not in the store")))?;
        let entry = Entry {
            key: key.to_string(),
            digest: digest.to_string(),
            size,
            content_type: meta.content_type,
            fetched: now_secs(),
            pinned: meta.pinned,
            meta: meta.meta,
        };
        self.put_entry(entry.clone()).await?;
        Ok(entry)
    }

    /// Write `entry` under the store lock (the object must be there), then evict.
    async fn put_entry(&self, entry: Entry) -> Result<()> {
        let store = self.clone();
        let digest = entry.digest.clone();
        tokio::task::spawn_blocking(move || {
            let lock = store.lock_store()?;
            store.put_entry_locked(&lock, entry)
        })
        .await
        .map_err(|e| Error::io("index task", std::io::Error::other(e)))??;
        self.evict(Some(&digest));
        Ok(())
    }

    /// Write the index entry for `entry` and update the in-memory state.
    /// The caller holds the store lock.
    fn put_entry_locked(&self, _lock: &backend::LockGuard<'_>, entry: Entry) -> Result<()> {
        if self.backend().object_len(&entry.digest) != Some(entry.size) {
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
        let name = index_name(&entry.key);
        let body = serde_json::to_vec_pretty(&entry)
            .map_err(|e| Error::io("encoding an index entry", std::io::Error::other(e)))?;
        let token = self.backend().write_entry(&name, &body).map_err(|e| {
            Error::io(
                format!("writing the index entry {name} in {}", self.describe()),
                e,
            )
        })?;
        let mut st = self.lock();
        st.seen.insert(name, token);
        if let Some(old) = st.insert(entry) {
            // The key named another object before: delete it if nothing
            // (here or in another process) names it any more.
            self.refresh(&mut st);
            if !st.objects.contains_key(&old) {
                self.backend().delete_object(&old);
            }
        }
        Ok(())
    }

    /// Forget `key` (its object goes when no other key names it).
    pub fn remove(&self, key: &str) {
        let Ok(_lock) = self.lock_store() else {
            return;
        };
        let mut st = self.lock();
        self.refresh(&mut st);
        self.remove_key_locked(&mut st, key);
    }

    /// Remove `key`'s entry and, when no key is left on its object, the
    /// object. Caller holds the store lock and has refreshed.
    fn remove_key_locked(&self, st: &mut State, key: &str) {
        if let Some(old) = st.keys.remove(key) {
            let name = index_name(key);
            st.seen.remove(&name);
            self.backend().delete_entry(&name);
            if st.forget_key(key, &old.digest) {
                self.backend().delete_object(&old.digest);
            }
        }
    }

    /// Set or clear the pin on `key`.
    pub async fn set_pinned(&self, key: &str, pinned: bool) -> Result<()> {
        let mut entry = self
            .entry(key)
            .ok_or_else(|| Error::NotFound(format!("{key} is not in the store")))?;
        if entry.pinned == pinned {
            return Ok(());
        }
        entry.pinned = pinned;
        self.put_entry(entry).await
    }

    /// Evict least-recently-used objects that no reader holds and no key
    /// pins until the total is within the limit. `keep` is never evicted.
    /// Before deciding, the index is re-read under the store lock, so an
    /// object another process pinned (or re-pointed a key to) is kept.
    pub fn evict(&self, keep: Option<&str>) {
        let Some(max) = self.inner.max_size else {
            return;
        };
        {
            let st = self.lock();
            let fresh = st.last_refresh.is_some_and(|t| t.elapsed() < REFRESH_EVERY);
            if st.total <= max && fresh {
                return;
            }
        }
        let Ok(_lock) = self.lock_store() else {
            return;
        };
        let mut st = self.lock();
        self.refresh(&mut st);
        while st.total > max {
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
                .map(|(d, _)| d.clone());
            let Some(digest) = victim else {
                break;
            };
            let keys = st
                .objects
                .get(&digest)
                .map(|o| o.keys.clone())
                .unwrap_or_default();
            tracing::info!(%digest, ?keys, "evicting");
            for k in keys {
                self.remove_key_locked(&mut st, &k);
            }
        }
    }

    fn release(&self, digest: &str) {
        let over = {
            let mut st = self.lock();
            if let Some(o) = st.objects.get_mut(digest) {
                o.readers = o.readers.saturating_sub(1);
            }
            self.inner.max_size.is_some_and(|m| st.total > m)
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

    /// A chunk of `digest` failed its checksum. If the whole object still
    /// hashes to its digest, the checksums were what rotted: they are
    /// rewritten and handed back (`Ok`), so the caller checks the bytes it
    /// holds against them. Otherwise the object is dropped with every key
    /// naming it (`Err`: the response is cut).
    fn chunk_mismatch(
        &self,
        digest: &str,
        object: &dyn ObjectRead,
        chunk: u64,
    ) -> std::io::Result<Sums> {
        let (got, sums) = hash_and_sum(object)?;
        if got == digest {
            tracing::warn!(%digest, chunk, "a chunk checksum was wrong but the object is intact; rewriting its checksums");
            let _ = self.write_sums(digest, &sums);
            return Ok(sums);
        }
        let reason =
            format!("chunk {chunk} does not match its checksum (the bytes hash to sha256:{got})");
        self.quarantine(digest, &reason);
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("stored object sha256:{digest} is corrupt: {reason}; dropped"),
        ))
    }

    /// Drop a corrupt object with every key naming it (here and in the
    /// backend), log it and count it ([`Store::corrupt_dropped`]).
    fn quarantine(&self, digest: &str, reason: &str) {
        self.inner.corrupt.fetch_add(1, Ordering::Relaxed);
        let Ok(_lock) = self.lock_store() else {
            return;
        };
        let mut st = self.lock();
        self.refresh(&mut st);
        let keys = st
            .objects
            .get(digest)
            .map(|o| o.keys.clone())
            .unwrap_or_default();
        tracing::error!(%digest, ?keys, reason, "corrupt object in the store; dropped (the next request fetches it again)");
        for k in &keys {
            self.remove_key_locked(&mut st, k);
        }
        if keys.is_empty() {
            self.backend().delete_object(digest);
        }
    }

    /// The object's checksums as stored (`None`: none, or unreadable).
    pub fn stored_sums(&self, digest: &str) -> Option<Sums> {
        Sums::decode(&self.backend().read_sums(digest)?).ok()
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
        self.backend()
            .open_object(digest)
            .map_err(|e| Error::io(format!("opening sha256:{digest}"), e))
    }

    /// Drop the object `digest` and every key naming it (for `mirror verify`).
    pub fn drop_object(&self, digest: &str, reason: &str) {
        self.quarantine(digest, reason);
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

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use std::fs;

    async fn put(store: &Store, key: &str, body: &[u8], pinned: bool) -> Entry {
        let mut t = store.temp().unwrap();
        t.write_all(body).await.unwrap();
        store
            .commit(
                t,
                key,
                Meta {
                    pinned,
                    ..Meta::default()
                },
            )
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn commit_get_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let e = put(&store, "../../etc/passwd", b"hello", false).await;
        assert_eq!(e.digest, hex::encode(Sha256::digest(b"hello")));
        let o = store.get("../../etc/passwd").unwrap();
        assert_eq!(&o.read_small(64).unwrap()[..], b"hello");
        // keys never become paths: the object is under the store's own dir
        let p = store.object_path(&e.digest).unwrap();
        assert!(p.starts_with(dir.path()) && p.exists());
        // leftovers: a partial fill and a stray index entry
        std::fs::write(dir.path().join("tmp/fill-partial"), b"part").unwrap();
        std::fs::write(dir.path().join("tmp/fill-999999999-1-2"), b"part").unwrap();
        std::fs::write(dir.path().join("index/bogus.json"), b"{").unwrap();
        let orphan = dir.path().join("objects/sha256").join("a".repeat(64));
        std::fs::write(&orphan, b"orphan").unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&orphan)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let young = dir.path().join("objects/sha256").join("b".repeat(64));
        std::fs::write(&young, b"young").unwrap();
        drop(store);
        let store = Store::open(dir.path(), None).unwrap();
        assert_eq!(store.entries().len(), 1);
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
            0
        );
        // not a name the store writes: left alone
        assert!(dir.path().join("index/bogus.json").exists());
        assert!(!orphan.exists());
        assert!(
            young.exists(),
            "a just-written object may still get its entry"
        );
        assert_eq!(store.total_size(), 5);
        // a truncated object drops its entry
        let p = store.object_path(&e.digest).unwrap();
        std::fs::write(&p, b"hel").unwrap();
        drop(store);
        let store = Store::open(dir.path(), None).unwrap();
        assert!(store.get("../../etc/passwd").is_none());
    }

    #[tokio::test]
    async fn link_replace_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let a = put(&store, "a", b"one", false).await;
        store.link("b", &a.digest, Meta::default()).await.unwrap();
        assert!(
            store
                .link("c", &"0".repeat(64), Meta::default())
                .await
                .is_err()
        );
        store.remove("a");
        assert!(store.get("b").is_some());
        put(&store, "b", b"two", false).await;
        assert!(!store.object_path(&a.digest).unwrap().exists());
        assert_eq!(store.total_size(), 3);
    }

    #[tokio::test]
    async fn eviction_lru_leases_pins() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Some(25)).unwrap();
        put(&store, "pinned", &[1; 10], true).await;
        put(&store, "old", &[2; 10], false).await;
        let held = store.get("old").unwrap();
        put(&store, "new", &[3; 10], false).await; // 30 > 25: "old" is held, "pinned" pinned
        assert!(store.get("old").is_some());
        drop(held);
        put(&store, "newer", &[4; 10], false).await;
        // now "old" (least recently used, unheld) and then "new" may go
        assert!(store.get("pinned").is_some());
        assert!(store.get("newer").is_some());
        assert!(store.total_size() <= 25);
        assert!(store.get("old").is_none());
    }

    #[tokio::test]
    async fn pinning_an_only_key_keeps_its_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        put(&store, "only", &[7; 10], false).await;
        let digest = store.entry("only").unwrap().digest;
        store.set_pinned("only", true).await.unwrap();
        assert!(store.entry("only").unwrap().pinned);
        assert!(store.get("only").is_some());
        assert!(store.object_path(&digest).is_some_and(|p| p.exists()));
        assert_eq!(store.total_size(), 10);
        drop(store);
        let store = Store::open(dir.path(), None).unwrap();
        assert!(store.get("only").is_some(), "survives a reopen");
    }

    #[tokio::test]
    async fn pinning_or_relinking_keeps_the_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Some(1)).unwrap();
        let e = put(&store, "k", b"bytes", false).await;
        store.set_pinned("k", true).await.unwrap();
        assert!(store.object_path(&e.digest).unwrap().exists());
        store
            .link(
                "k",
                &e.digest,
                Meta {
                    pinned: true,
                    ..Meta::default()
                },
            )
            .await
            .unwrap();
        assert!(store.object_path(&e.digest).unwrap().exists());
        assert_eq!(store.total_size(), 5);
        drop(store);
        let store = Store::open(dir.path(), Some(1)).unwrap();
        assert!(store.get("k").is_some_and(|o| o.entry.pinned));
    }

    #[tokio::test]
    async fn sees_entries_written_by_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let serve = Store::open(dir.path(), None).unwrap();
        let mirror = Store::open(dir.path(), None).unwrap();
        put(&mirror, "k", b"mirrored", true).await;
        let o = serve.get("k").expect("adopted from disk");
        assert_eq!(o.entry.size, 8);
        assert!(o.entry.pinned);
        assert_eq!(serve.total_size(), 8);
        // a live writer's temp file survives another's startup (it holds
        // the file's lock; PIDs say nothing across PID namespaces)
        let t = mirror.temp().unwrap();
        let p = t.path().to_path_buf();
        drop(Store::open(dir.path(), None).unwrap());
        assert!(p.exists());
        drop(t);
        assert!(!p.exists());
    }

    #[tokio::test]
    async fn streams_ranges() {
        use futures::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let body: Vec<u8> = (0..(STREAM_CHUNK * 2 + 12345))
            .map(|i| (i % 253) as u8)
            .collect();
        put(&store, "k", &body, false).await;
        for (a, b) in [
            (0, body.len()),
            (5000, 5001),
            (4095, STREAM_CHUNK + 3),
            (10, 10),
        ] {
            let o = store.get("k").unwrap();
            let mut s = Box::pin(o.stream(a as u64, b as u64));
            let mut got = Vec::new();
            while let Some(c) = s.next().await {
                got.extend_from_slice(&c.unwrap());
            }
            assert!(got == body[a..b], "{a}..{b}");
        }
    }

    #[tokio::test]
    async fn temp_dropped_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let mut t = store.temp().unwrap();
        t.write_all(b"x").await.unwrap();
        let p = t.path().to_path_buf();
        assert!(p.exists());
        drop(t);
        assert!(!p.exists());
    }

    async fn read_whole(o: StoredObject) -> std::io::Result<Vec<u8>> {
        use futures::StreamExt;
        let n = o.len();
        let mut s = Box::pin(o.stream(0, n));
        let mut got = Vec::new();
        while let Some(c) = s.next().await {
            got.extend_from_slice(&c?);
        }
        Ok(got)
    }

    fn flip_byte(path: &Path, at: u64) {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, at).unwrap();
        b[0] ^= 0x20;
        f.write_all_at(&b, at).unwrap();
    }

    #[tokio::test]
    async fn a_rotten_chunk_cuts_the_read_and_drops_the_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let body: Vec<u8> = (0..(STREAM_CHUNK * 2 + 999))
            .map(|i| (i % 241) as u8)
            .collect();
        let e = put(&store, "k", &body, true).await;
        store
            .link("alias", &e.digest, Meta::default())
            .await
            .unwrap();
        assert_eq!(read_whole(store.get("k").unwrap()).await.unwrap(), body);
        flip_byte(
            &store.object_path(&e.digest).unwrap(),
            STREAM_CHUNK as u64 + 17,
        );
        // across a restart too: the checksums live beside the index
        drop(store);
        let store = Store::open(dir.path(), None).unwrap();
        // a range inside the intact first chunk is still served
        {
            use futures::StreamExt;
            let o = store.get("k").unwrap();
            let mut s = Box::pin(o.stream(10, 20));
            assert_eq!(&s.next().await.unwrap().unwrap()[..], &body[10..20]);
        }
        let err = read_whole(store.get("k").unwrap()).await.unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
        assert_eq!(store.corrupt_dropped(), 1);
        assert!(store.get("k").is_none(), "dropped");
        assert!(store.get("alias").is_none(), "with every key naming it");
        assert!(!store.object_path(&e.digest).unwrap().exists());
        assert!(!dir.path().join("sums").join(&e.digest).exists());
        // the next fill stores it again
        put(&store, "k", &body, false).await;
        assert_eq!(read_whole(store.get("k").unwrap()).await.unwrap(), body);
    }

    #[tokio::test]
    async fn a_rotten_small_object_is_dropped_by_read_small() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let e = put(&store, "m", b"{\"schemaVersion\":2}", false).await;
        assert!(store.get("m").unwrap().read_small(1024).is_ok());
        flip_byte(&store.object_path(&e.digest).unwrap(), 3);
        assert!(store.get("m").unwrap().read_small(1024).is_err());
        assert!(store.get("m").is_none());
        assert_eq!(store.corrupt_dropped(), 1);
    }

    #[tokio::test]
    async fn a_rotten_checksum_file_is_rewritten_not_the_object_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let body = vec![5u8; STREAM_CHUNK + 10];
        let e = put(&store, "k", &body, true).await;
        let sums = dir.path().join("sums").join(&e.digest);
        flip_byte(&sums, 9);
        drop(store);
        let store = Store::open(dir.path(), None).unwrap();
        assert_eq!(read_whole(store.get("k").unwrap()).await.unwrap(), body);
        assert_eq!(store.corrupt_dropped(), 0);
        assert_eq!(store.stored_sums(&e.digest).unwrap(), Sums::of(&body));
    }

    #[tokio::test]
    async fn a_pin_written_by_another_process_holds_against_eviction() {
        let dir = tempfile::tempdir().unwrap();
        // "serve": a size limit, the object in memory unpinned
        let serve = Store::open(dir.path(), Some(25)).unwrap();
        let e = put(&serve, "boot", &[1; 10], false).await;
        drop(serve.get("boot"));
        // "mirror sync", another process on the same directory, pins it
        let mirror = Store::open(dir.path(), None).unwrap();
        mirror.set_pinned("boot", true).await.unwrap();
        // serve fills past its limit: the least recently used ("boot") would go
        put(&serve, "a", &[2; 10], false).await;
        put(&serve, "b", &[3; 10], false).await;
        put(&serve, "c", &[4; 10], false).await;
        assert!(
            serve.object_path(&e.digest).unwrap().exists(),
            "pinned on disk: kept"
        );
        let o = serve.get("boot").expect("still served");
        assert!(o.entry.pinned, "serve learnt the pin");
        assert!(serve.total_size() <= 25 + 10);
    }

    #[tokio::test]
    async fn objects_read_in_a_burst_are_evicted_when_their_readers_leave() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Some(13)).unwrap();
        let mut held = Vec::new();
        for (i, k) in ["a", "b", "c", "d"].iter().enumerate() {
            put(&store, k, &[i as u8; 6], false).await;
            held.push(store.get(k).unwrap());
        }
        assert_eq!(store.total_size(), 24, "every object has a reader");
        drop(held);
        for _ in 0..1000 {
            if store.total_size() <= 13 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(store.total_size() <= 13, "{}", store.total_size());
        let on_disk = fs::read_dir(dir.path().join("objects/sha256"))
            .unwrap()
            .count();
        assert_eq!(on_disk, 2);
    }

    #[tokio::test]
    async fn a_failed_index_write_leaves_no_orphaned_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        // A directory where the key's index file must go makes the rename
        // fail, as a full disk would (root ignores permissions, so a
        // read-only directory would not).
        fs::create_dir(dir.path().join("index").join(local::index_name("k"))).unwrap();
        let mut t = store.temp().unwrap();
        t.write_all(b"orphan?").await.unwrap();
        let err = store.commit(t, "k", Meta::default()).await.unwrap_err();
        assert!(err.to_string().contains("index entry"), "{err}");
        assert_eq!(
            fs::read_dir(dir.path().join("objects/sha256"))
                .unwrap()
                .count(),
            0
        );
        assert_eq!(fs::read_dir(dir.path().join("sums")).unwrap().count(), 0);
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        assert!(store.get("k").is_none());
        assert_eq!(store.total_size(), 0);
    }

    #[test]
    fn strangers_in_the_store_are_never_opened_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path(), None).unwrap());
        let mut strangers = Vec::new();
        for (sub, name) in [
            ("index", format!("{}.json", "c".repeat(64))),
            ("objects/sha256", "d".repeat(64)),
            ("tmp", "fill-1-fifo".to_string()),
            ("sums", "e".repeat(64)),
        ] {
            let p = dir.path().join(sub).join(name);
            let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            strangers.push(p);
        }
        let note = dir.path().join("objects/sha256/README");
        fs::write(&note, b"mine").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("index/link.json")).unwrap();
        // Opening must not block on a FIFO: do it on a thread with a deadline.
        let d = dir.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(Store::open(d, Some(1)).map(|s| s.entries().len())));
        let n = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("open did not hang")
            .unwrap();
        assert_eq!(n, 0);
        for p in strangers.iter().chain([&note]) {
            assert!(fs::symlink_metadata(p).is_ok(), "{} kept", p.display());
        }
        assert!(fs::symlink_metadata(dir.path().join("index/link.json")).is_ok());
        assert!(Path::new("/etc/passwd").exists());
    }

    #[test]
    fn an_empty_cache_dir_is_refused() {
        let err = Store::open("", None).err().unwrap();
        assert_eq!(err.exit_code(), 2);
    }
}
