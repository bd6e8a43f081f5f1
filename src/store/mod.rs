//! The content-addressed store: objects by sha256, an index from keys to
//! objects. Knows nothing of HTTP, Talos or OCI: keys in, verified objects
//! out. Two halves behind this facade, as pingora's cache keeps metadata
//! apart from bodies:
//! - the **entry store** ([`entries`]): the index in memory (keys,
//!   change tokens, pins, leases, LRU eviction), cross-process refresh and
//!   adoption under the store lock;
//! - the **object store** ([`objects`]): bodies and their block checksums
//!   (read once and kept in memory while the object is held: objects are
//!   immutable; a local object's open file too, from its first read),
//!   the commit, the check on every chunk read ([`read`]), quarantine, and
//!   for a bucket the local tier ([`tier`]).
//!
//! The bytes live in a [`Backend`] ([`backend`] says what one must
//! guarantee): the local directory ([`LocalDir`], `--cache-dir`) or a
//! bucket ([`S3Backend`]).
//!
//! # Never waiting on the backend
//! No mutex of the store is held across a backend call, a file open or a
//! read; a remote backend is called only from blocking threads
//! ([`Store::open_key`], [`Store::commit`] and the rest use `spawn_blocking`,
//! every call bounded by the backend's timeout), so a frozen bucket
//! stalls the requests that need it, never the others. What stays on the
//! async worker is memory work: opening a local object already held open
//! (its file and checksums in memory), and copying a piece of it from the
//! page cache into the stream's buffer (`preadv2` with `RWF_NOWAIT`, which
//! never waits on the disk; a piece not all in memory is read on a
//! blocking thread) and checking it there.
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
//! use talos_gen::store::{Key, Meta, Store};
//! let store = Store::open("/var/cache/talos-gen", Some(50 << 30))?;
//! // keys are typed: one constructor per kind of stored thing
//! let key = Key::image("x", "v1.0.0", "a.raw.xz");
//! // write
//! let entry = store
//!     .commit_bytes(&key, b"hello"[..].into(), Meta::default())
//!     .await?;
//! assert_eq!(entry.size, 5);
//! // read (the lease keeps the object from eviction while held)
//! // (held, absent, or the store did not answer: never taken for absent)
//! if let Ok(Some(obj)) = store.lookup(&key) {
//!     let _body = obj.stream(0, 5); // Stream<Item = io::Result<Bytes>>, chunk-checked
//! }
//! # Ok(()) }
//! ```
//! Several keys may name one object ([`Store::link`]); eviction
//! (`--cache-max-size`, [`Store::evict`]) removes least-recently-used objects
//! that no reader holds and no key pins, with every key naming them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub mod backend;
mod bufs;
pub mod checked;
mod entries;
pub mod key;
pub mod local;
mod objects;
mod pieces;
mod read;
pub mod s3;
pub mod sums;
mod temp;
#[cfg(test)]
mod tests;
mod tier;

pub use backend::{Backend, Kind, ObjectRead};
use entries::State;
pub use key::{AsKey, Family, Key, KeyKind, KeyPrefix};
pub use local::LocalDir;
use local::is_hex64;
pub use objects::{Unavailable, hash_and_sum};
pub use read::{Lease, StoredObject};
pub use s3::{S3Backend, S3Config};
pub use temp::{SpoolWriter, TempObject};

/// Bytes per step when streaming a stored object (1 MiB measured best
/// against 2, 8 and 32 MiB windows with wrk on loopback); a whole number
/// of checksum blocks ([`sums::CHUNK`]).
pub const STREAM_CHUNK: usize = 1 << 20;

/// What the index knows about one key: its **metadata record**, kept by
/// the entry store apart from the body (one per key). The body's block
/// checksums belong to the object, not the key: they are kept once per
/// digest (`sums/<hex>`) and reached through [`Entry::digest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub key: Key,
    /// Lowercase hex sha256 of the object's bytes.
    pub digest: String,
    pub size: u64,
    #[serde(default)]
    pub content_type: Option<String>,
    /// When the bytes were fetched (seconds since the epoch).
    pub fetched: u64,
    /// Until when the copy is fresh (seconds since the epoch): answered
    /// without asking the upstream before then. Written by a writer that
    /// revalidates ([`Meta::fresh_for`]); absent in entries written before
    /// it existed and in the mirror job's, which are fresh for the
    /// reader's own TTL after `fetched` ([`Entry::is_fresh`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh_until: Option<u64>,
    /// Pinned entries (mirror job) are never evicted.
    #[serde(default)]
    pub pinned: bool,
    /// Free-form facts the caller wants back (e.g. a content disposition).
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

impl Entry {
    /// The record of `key`, its object `digest` of `size` bytes, fetched
    /// now, as `meta` says.
    pub(crate) fn fetched_now(key: Key, digest: String, size: u64, meta: Meta) -> Entry {
        let now = now_secs();
        Entry {
            key,
            digest,
            size,
            content_type: meta.content_type,
            fetched: now,
            fresh_until: fresh_until(now, meta.fresh_for),
            pinned: meta.pinned,
            meta: meta.meta,
        }
    }

    pub fn fetched_time(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.fetched)
    }

    /// Is the copy fresh now: before its `fresh_until`, or, for a record
    /// without one, within `ttl` of `fetched`? The one freshness rule.
    pub fn is_fresh(&self, ttl: Duration) -> bool {
        let until = self
            .fresh_until
            .map(|s| UNIX_EPOCH + Duration::from_secs(s))
            .unwrap_or_else(|| self.fetched_time() + ttl);
        SystemTime::now() < until
    }
}

/// `fetched + ttl` in whole seconds (a part of a second counts as one).
fn fresh_until(fetched: u64, ttl: Option<Duration>) -> Option<u64> {
    ttl.map(|t| fetched.saturating_add(t.as_secs() + u64::from(t.subsec_nanos() > 0)))
}

/// What the caller attaches to a key on commit.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    pub content_type: Option<String>,
    pub pinned: bool,
    /// How long the copy stays fresh from now ([`Entry::fresh_until`]);
    /// `None`: the reader's TTL decides.
    pub fresh_for: Option<Duration>,
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

/// What opening a store may do to it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Touch {
    /// Recover: sweep leftovers, drop what is unreadable, evict.
    Recover,
    /// Only look ([`Store::open_untouched`]).
    Untouched,
}

/// Bytes a fill in progress holds against `--cache-max-size`
/// ([`Store::reserve`]); let go when dropped.
pub struct Reservation {
    held: Arc<AtomicU64>,
    len: u64,
}

impl Reservation {
    /// The bytes it holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.held.fetch_sub(self.len, Ordering::AcqRel);
    }
}

/// A store marked down is probed by a request (blocking, at most 2 s)
/// only when no probe began or ended for this long: with a prober that
/// checks it every second (`serve`), requests never wait on a probe.
const PROBE_GAP: Duration = Duration::from_secs(3);

/// A handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Box<dyn Backend>,
    /// The directory a store opened on one is in (for [`Store::object_path`]).
    dir: Option<PathBuf>,
    max_size: Option<u64>,
    state: Mutex<State>,
    /// Objects dropped because their bytes rotted.
    corrupt: AtomicU64,
    /// An eviction is scheduled or running.
    evicting: AtomicBool,
    /// A reader left while an eviction ran: run another round.
    evict_again: AtomicBool,
    /// A background refresh of the index is running.
    refreshing: AtomicBool,
    /// What [`Store::open`] found wrong and dropped.
    dropped_at_open: Vec<String>,
    /// The backend answered its last call or probe: the first call that
    /// fails or times out clears it for every request at once, and
    /// requests waiting on the store are woken by the change
    /// ([`Store::open_key`]); a call or probe that answers sets it again.
    available: tokio::sync::watch::Sender<bool>,
    /// Bytes held for fills in progress ([`Store::reserve`]): counted
    /// with the committed objects against `--cache-max-size`, so room is
    /// made before a fill's bytes land, not after.
    in_flight: Arc<AtomicU64>,
    /// When the backend was last probed ([`Store::check`]), in ms since
    /// `opened`: a store marked down is probed again by a caller at most
    /// once a second.
    last_probe: AtomicU64,
    opened: std::time::Instant,
}

impl Inner {
    /// Is a probe of a store marked down due (none begun or ended for
    /// [`PROBE_GAP`]: where a prober checks the store every second, as
    /// `serve`'s does, never)? The one caller that gets `true` probes;
    /// the others are answered at once.
    fn probe_due(&self) -> bool {
        let now = self.opened.elapsed().as_millis() as u64 + 1000;
        let last = self.last_probe.load(Ordering::Acquire);
        now.saturating_sub(last) >= PROBE_GAP.as_millis() as u64
            && self
                .last_probe
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Store {
    /// Open (creating) the store in the local directory `dir`: clean up
    /// interrupted writes, check the index against the objects, and evict
    /// down to `max_size` bytes.
    pub fn open(dir: impl Into<PathBuf>, max_size: Option<u64>) -> Result<Store> {
        Store::open_dir(dir.into(), max_size, Touch::Recover)
    }

    fn open_dir(dir: PathBuf, max_size: Option<u64>, touch: Touch) -> Result<Store> {
        if dir.as_os_str().is_empty() {
            return Err(Error::bad_input(
                "the cache directory is an empty path (give a directory)",
            ));
        }
        let backend = LocalDir::open(dir.clone())
            .map_err(|e| Error::io(format!("opening the store {}", dir.display()), e))?;
        Store::build(Box::new(backend), max_size, touch, Some(dir))
    }

    /// Open the store at `loc` (blocking: the S3 backend connects and
    /// lists the bucket); a bucket's local tier under its spool directory.
    pub fn open_at(loc: &Location, max_size: Option<u64>) -> Result<Store> {
        Store::open_at_with(loc, max_size, Touch::Recover)
    }

    /// Open the store at `loc` only to look at it (`mirror prune
    /// --dry-run`): nothing on the backend changes. No leftover of an
    /// interrupted write is swept, no unreadable entry or orphan object is
    /// removed, nothing is evicted, a bucket's local tier is not opened;
    /// what [`Store::open_at`] would drop is only left out of the state and
    /// listed by [`Store::dropped_at_open`].
    pub fn open_untouched(loc: &Location) -> Result<Store> {
        Store::open_at_with(loc, None, Touch::Untouched)
    }

    fn open_at_with(loc: &Location, max_size: Option<u64>, touch: Touch) -> Result<Store> {
        match loc {
            Location::Dir(d) => Store::open_dir(d.clone(), max_size, touch),
            Location::S3(c) => {
                let mut backend = S3Backend::open(c.clone()).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::InvalidInput {
                        Error::bad_input(format!("--store {}: {e}", c.url()))
                    } else {
                        Error::io(format!("opening the store {}", c.url()), e)
                    }
                })?;
                if touch != Touch::Untouched && c.local_tier > 0 {
                    backend = backend
                        .with_tier(c.spool.join("tier"), c.local_tier)
                        .map_err(|e| {
                            Error::io(
                                format!("opening the local tier in {}", c.spool.display()),
                                e,
                            )
                        })?;
                }
                Store::build(Box::new(backend), max_size, touch, None)
            }
        }
    }

    /// Open a store on any backend (the same checks as [`Store::open`]).
    pub fn with_backend(backend: Box<dyn Backend>, max_size: Option<u64>) -> Result<Store> {
        Store::build(backend, max_size, Touch::Recover, None)
    }

    fn build(
        backend: Box<dyn Backend>,
        max_size: Option<u64>,
        touch: Touch,
        dir: Option<PathBuf>,
    ) -> Result<Store> {
        let mut store = Store {
            inner: Arc::new(Inner {
                backend,
                dir,
                max_size,
                state: Mutex::new(State::default()),
                corrupt: AtomicU64::new(0),
                evicting: AtomicBool::new(false),
                evict_again: AtomicBool::new(false),
                refreshing: AtomicBool::new(false),
                dropped_at_open: Vec::new(),
                available: tokio::sync::watch::Sender::new(true),
                in_flight: Arc::new(AtomicU64::new(0)),
                last_probe: AtomicU64::new(0),
                opened: std::time::Instant::now(),
            }),
        };
        let (state, dropped) = {
            let _lock = store.lock_store()?;
            store.scan(touch)?
        };
        store
            .backend()
            .retain_copies(&|d, size| state.objects.get(d).is_some_and(|o| o.size == size));
        let inner = Arc::get_mut(&mut store.inner).expect("store not shared yet");
        inner.state = Mutex::new(state);
        inner.dropped_at_open = dropped;
        if touch == Touch::Recover {
            store.evict(None);
        }
        Ok(store)
    }

    fn backend(&self) -> &dyn Backend {
        &*self.inner.backend
    }

    /// Is the backend reachable (within `limit`)? Updates
    /// [`Store::available`]. Blocking.
    pub fn check(&self, limit: Duration) -> Result<()> {
        let stamp = || {
            let now = self.inner.opened.elapsed().as_millis() as u64 + 1000;
            self.inner.last_probe.fetch_max(now, Ordering::AcqRel);
        };
        stamp();
        let r = self.answered(self.backend().check(limit));
        stamp();
        r.map_err(|e| Error::io(format!("the store {}", self.describe()), e))
    }

    /// Did the backend answer its last call or [`Store::check`]?
    pub fn available(&self) -> bool {
        *self.inner.available.borrow()
    }

    fn set_available(&self, ok: bool) {
        self.inner.available.send_if_modified(|v| {
            let changed = *v != ok;
            *v = ok;
            changed
        });
    }

    /// Note what a backend call said of the backend: any failure marks the
    /// store down for everyone at once, an answer marks it up. Every call
    /// whose answer decides "held or absent" goes through here.
    pub(super) fn answered<T>(&self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            if self.available() {
                tracing::warn!(store = %self.describe(), error = %e, "the store did not answer: marked down");
            }
            self.set_available(false);
        } else {
            self.set_available(true);
        }
        r
    }

    /// Resolves when the store goes from up to down after this call (a
    /// request waiting on the store is answered 503 then, not at its own
    /// timeout).
    pub(super) fn went_down(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.inner.available.subscribe();
        rx.borrow_and_update();
        async move {
            loop {
                if rx.changed().await.is_err() {
                    // The store is gone: never resolves.
                    std::future::pending::<()>().await;
                }
                if !*rx.borrow_and_update() {
                    return;
                }
            }
        }
    }

    /// What kind of place the store is, for messages and metrics only.
    pub fn kind(&self) -> Kind {
        self.backend().kind()
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

    /// Bytes held for fills in progress.
    pub(crate) fn in_flight(&self) -> u64 {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// Hold `len` bytes for a fill about to write them (its upstream's
    /// length), counted against `--cache-max-size` until the reservation
    /// is dropped (the fill committed or failed); least recently used
    /// objects are evicted to make room first, on a blocking thread.
    pub fn reserve(&self, len: u64) -> Reservation {
        let mut r = Reservation {
            held: self.inner.in_flight.clone(),
            len: 0,
        };
        self.grow(&mut r, len);
        r
    }

    /// Hold `more` bytes on top of `r`: a fill of unknown length as its
    /// bytes arrive ([`Reservation::len`] is what it holds), evicting as
    /// [`Store::reserve`] does.
    pub fn grow(&self, r: &mut Reservation, more: u64) {
        self.inner.in_flight.fetch_add(more, Ordering::AcqRel);
        r.len += more;
        let over = self
            .inner
            .max_size
            .is_some_and(|m| self.total_size() + self.in_flight() > m);
        if over {
            let store = self.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(h) => drop(h.spawn_blocking(move || store.evict(None))),
                Err(_) => store.evict(None),
            }
        }
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

    /// The in-memory state. Held only for memory work: never across a
    /// backend call, a file open or a read.
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough state.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take the store lock (blocking: only on blocking threads).
    fn lock_store(&self) -> Result<backend::LockGuard<'_>> {
        self.backend()
            .lock()
            .map_err(|e| Error::io("locking the store", e))
    }

    /// The path of an object in a store opened on a local directory
    /// ([`Store::open`], [`Store::open_at`]), for tools and tests that look
    /// at its files; `None` for a malformed digest or another store. Never
    /// read by the store's own read or commit paths.
    pub fn object_path(&self, digest: &str) -> Option<PathBuf> {
        let dir = self.inner.dir.as_deref()?;
        is_hex64(digest).then(|| dir.join("objects/sha256").join(digest))
    }
}
