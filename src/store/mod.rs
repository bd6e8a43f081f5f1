//! The content-addressed store: objects by sha256, an index from typed
//! keys to objects; keys in, verified objects out, nothing of HTTP, Talos
//! or OCI. Two halves behind this facade, as pingora's cache keeps
//! metadata apart from bodies: the **entry store** ([`entries`]: the index
//! in memory, change tokens, pins ([`pins`], records apart from entries),
//! leases, eviction ([`evict`]), other processes' writes read in under the
//! store lock) and the **object store** ([`objects`]: bodies and their
//! block checksums, kept in memory while held; the commit; every read
//! checked ([`read`], [`checked`]); quarantine; a bucket's local tier),
//! the bytes in a [`Backend`] ([`LocalDir`], [`S3Backend`]).
//!
//! No mutex of the store is held across a backend call, a file open or a
//! read; backends are called only from blocking threads, each call
//! bounded, so a frozen bucket stalls only the requests that need it. What
//! stays on an async worker is memory work (a local object already open,
//! a piece the page cache holds, copied with `RWF_NOWAIT` and checked).
//! Guarantees: an object is visible only once whole and named by an entry;
//! every chunk handed out is checked and a rotten object is dropped with
//! its keys; processes sharing a store re-read the index before deleting
//! and never undo another's pin; only names the store writes are removed,
//! in its own folders ([`local`] has the directory's layout). E.g.:
//! ```no_run
//! # async fn demo() -> talos_gen::Result<()> {
//! use talos_gen::store::{Key, Meta, Store};
//! let store = Store::open("/var/cache/talos-gen", Some(50 << 30))?;
//! let key = Key::image("x", "v1.0.0", "a.raw.xz");
//! store.commit_bytes(&key, b"hello"[..].into(), Meta::default()).await?;
//! if let Ok(Some(obj)) = store.lookup(&key) { let _body = obj.stream(0, 5); }
//! # Ok(()) }
//! ```

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
mod evict;
pub mod key;
pub mod local;
mod names;
mod objects;
mod pieces;
mod pins;
mod read;
mod room;
pub mod s3;
pub mod sums;
mod sweep;
mod temp;
#[cfg(test)]
mod tests;
mod tier;

pub use backend::{Aborted, Backend, Kind, ObjectRead};
use entries::State;
pub use key::{AsKey, Family, Key, KeyKind, KeyPrefix};
pub use local::LocalDir;
use local::is_hex64;
pub use objects::hash_and_sum;
pub use read::{Lease, StoredObject};
pub use room::NoRoom;
pub use s3::{S3Backend, S3Config};
pub use sweep::{SWEEP_EVERY, Swept, UPLOAD_AGE};
pub use temp::{SpoolWriter, TempObject};

/// Bytes per step when streaming a stored object (1 MiB measured best
/// against 2, 8 and 32 MiB windows with wrk on loopback); a whole number
/// of checksum blocks ([`sums::CHUNK`]).
pub const STREAM_CHUNK: usize = 1 << 20;

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

/// The one conversion into the crate's error: held but out of reach, 503.
impl From<Unavailable> for Error {
    fn from(u: Unavailable) -> Error {
        Error::Unavailable(u.0)
    }
}

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
    /// Woken when it is let go (fills waiting for room, `room`).
    freed: Arc<tokio::sync::Notify>,
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
        self.freed.notify_waiters();
    }
}

/// A store marked down is probed by a request (blocking, at most the
/// backend's own bound, [`Store::call_bound`])
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
    /// Orphan objects, and their bytes, swept while running (`sweep`).
    swept_objects: AtomicU64,
    swept_bytes: AtomicU64,
    /// Unfinished multipart uploads aborted while running (`sweep`).
    aborted_uploads: AtomicU64,
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
    /// Woken when room may have been made: a reservation let go, an
    /// eviction round ended (fills waiting for room, `room`).
    room_freed: Arc<tokio::sync::Notify>,
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
                swept_objects: AtomicU64::new(0),
                swept_bytes: AtomicU64::new(0),
                aborted_uploads: AtomicU64::new(0),
                evicting: AtomicBool::new(false),
                evict_again: AtomicBool::new(false),
                refreshing: AtomicBool::new(false),
                dropped_at_open: Vec::new(),
                available: tokio::sync::watch::Sender::new(true),
                in_flight: Arc::new(AtomicU64::new(0)),
                room_freed: Arc::new(tokio::sync::Notify::new()),
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

    /// The backend's own bound on one call ([`Backend::call_bound`]: a
    /// bucket's `--upstream-timeout`): how long a check may take and still
    /// be an answer.
    pub fn call_bound(&self) -> Duration {
        self.backend().call_bound()
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
        let mut r = self.no_room_held();
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

    /// A reservation of nothing yet.
    fn no_room_held(&self) -> Reservation {
        Reservation {
            held: self.inner.in_flight.clone(),
            len: 0,
            freed: self.inner.room_freed.clone(),
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
