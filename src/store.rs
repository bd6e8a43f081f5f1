//! The content-addressed store: objects by sha256 under the cache dir, an
//! index from keys to objects. Knows nothing of HTTP, Talos or OCI: keys in,
//! verified objects out.
//!
//! # Layout (under `--cache-dir`)
//! - `objects/sha256/<hex>`: the bytes, named by their sha256.
//! - `index/<sha256(key)>.json`: one [`Entry`] per key (the key itself is
//!   stored inside; a key never becomes a path, so nothing a client sends is
//!   joined onto the filesystem).
//! - `tmp/`: fills in progress. Emptied on [`Store::open`].
//!
//! Every write goes to a temp file, is fsynced and renamed. On open, temp
//! leftovers are removed, index entries whose object is missing or has the
//! wrong size are dropped, and objects no entry names are removed.
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
//!     let _len = obj.entry.size;
//!     let _file: &std::fs::File = &obj.file; // read with FileExt::read_at
//! }
//! # Ok(()) }
//! ```
//! Several keys may name one object ([`Store::link`]); eviction
//! (`--cache-max-size`, [`Store::evict`]) removes least-recently-used objects
//! that no reader holds and no key pins, with every key naming them.

use std::collections::{BTreeMap, HashMap};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

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

/// Parse a size such as `50Gi`, `10G`, `512Mi`, `100M`, `4096` (bytes).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        Error::bad_input(format!(
            "--cache-max-size: {s:?} is not a size (e.g. 50Gi, 10G, 4096)"
        ))
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mul: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "k" | "KB" | "kB" => 1000,
        "M" | "MB" => 1000_u64.pow(2),
        "G" | "GB" => 1000_u64.pow(3),
        "T" | "TB" => 1000_u64.pow(4),
        "Ki" | "KiB" => 1 << 10,
        "Mi" | "MiB" => 1 << 20,
        "Gi" | "GiB" => 1 << 30,
        "Ti" | "TiB" => 1 << 40,
        _ => return Err(bad()),
    };
    if !n.is_finite() || n < 0.0 {
        return Err(bad());
    }
    Ok((n * mul as f64) as u64)
}

/// A handle to the store; cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    max_size: Option<u64>,
    state: Mutex<State>,
    tmp_seq: AtomicU64,
}

#[derive(Default)]
struct State {
    keys: HashMap<String, Entry>,
    objects: HashMap<String, Obj>,
    total: u64,
    clock: u64,
    /// Wall-clock last read per object digest (seconds since the epoch).
    used_at: HashMap<String, u64>,
}

struct Obj {
    size: u64,
    readers: usize,
    last_used: u64,
    keys: Vec<String>,
}

impl State {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }
}

/// Unreferenced objects younger than this survive a startup.
const ORPHAN_GRACE: Duration = Duration::from_secs(600);

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn key_file_name(key: &str) -> String {
    format!("{}.json", hex::encode(Sha256::digest(key.as_bytes())))
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn fsync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| Error::io(format!("opening {}", dir.display()), e))?;
    d.sync_all()
        .map_err(|e| Error::io(format!("fsync {}", dir.display()), e))
}

impl Store {
    /// Open (creating) the store at `dir`: clean up interrupted fills, check
    /// the index against the objects, and evict down to `max_size` bytes.
    pub fn open(dir: impl Into<PathBuf>, max_size: Option<u64>) -> Result<Store> {
        let dir = dir.into();
        for sub in ["objects/sha256", "index", "tmp"] {
            let p = dir.join(sub);
            fs::create_dir_all(&p)
                .map_err(|e| Error::io(format!("creating {}", p.display()), e))?;
        }
        // Leftovers of interrupted fills and index writes: temp names carry
        // the writer's pid; those of live processes (another process sharing
        // the cache dir, e.g. the mirror job) are left alone.
        let tmp = dir.join("tmp");
        for e in read_dir(&tmp)? {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
            let live = pid.is_some_and(|p| {
                p != std::process::id() && Path::new(&format!("/proc/{p}")).exists()
            });
            if !live {
                let _ = fs::remove_file(e.path());
            }
        }
        let mut state = State::default();
        // Objects on disk.
        let mut on_disk: HashMap<String, u64> = HashMap::new();
        let objdir = dir.join("objects/sha256");
        for e in read_dir(&objdir)? {
            let name = e.file_name().to_string_lossy().into_owned();
            let md = e.metadata().ok();
            match md {
                Some(md) if is_hex64(&name) && md.is_file() => {
                    on_disk.insert(name, md.len());
                }
                _ => {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        // Index entries, checked against the objects.
        let idxdir = dir.join("index");
        for e in read_dir(&idxdir)? {
            let path = e.path();
            let entry: Option<Entry> = fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
            let ok = entry.filter(|en: &Entry| {
                e.file_name().to_string_lossy() == key_file_name(&en.key)
                    && is_hex64(&en.digest)
                    && on_disk.get(&en.digest) == Some(&en.size)
            });
            match ok {
                Some(en) => {
                    let t = en.fetched;
                    let obj = state.objects.entry(en.digest.clone()).or_insert(Obj {
                        size: en.size,
                        readers: 0,
                        last_used: 0,
                        keys: Vec::new(),
                    });
                    obj.last_used = obj.last_used.max(t);
                    obj.keys.push(en.key.clone());
                    state.keys.insert(en.key.clone(), en);
                }
                None => {
                    tracing::warn!(path = %path.display(), "dropping an index entry that does not match its object");
                    let _ = fs::remove_file(&path);
                }
            }
        }
        // Objects no key names are garbage (unless just written: another
        // process may be about to write their index entry).
        for (digest, size) in &on_disk {
            if !state.objects.contains_key(digest) {
                let p = objdir.join(digest);
                let young = fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age < ORPHAN_GRACE);
                if !young {
                    tracing::info!(%digest, "removing an unreferenced object");
                    let _ = fs::remove_file(p);
                }
            } else {
                state.total += size;
            }
        }
        // LRU order from fetch times; the clock continues above them.
        state.clock = state
            .objects
            .values()
            .map(|o| o.last_used)
            .max()
            .unwrap_or(0);
        let store = Store {
            inner: Arc::new(Inner {
                dir,
                max_size,
                state: Mutex::new(state),
                tmp_seq: AtomicU64::new(0),
            }),
        };
        store.evict(None);
        Ok(store)
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn max_size(&self) -> Option<u64> {
        self.inner.max_size
    }

    /// Bytes held by committed objects.
    pub fn total_size(&self) -> u64 {
        self.lock().total
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent-enough state.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The path of an object (for verify/export); `None` for a malformed digest.
    pub fn object_path(&self, digest: &str) -> Option<PathBuf> {
        is_hex64(digest).then(|| self.inner.dir.join("objects/sha256").join(digest))
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
        let path = self.inner.dir.join("objects/sha256").join(&entry.digest);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(key, error = %e, "object missing; dropping its entry");
                drop(st);
                self.remove(key);
                return None;
            }
        };
        let t = st.tick();
        if let Some(o) = st.objects.get_mut(&entry.digest) {
            o.readers += 1;
            o.last_used = t;
        }
        st.used_at.insert(entry.digest.clone(), now_secs());
        drop(st);
        Some(StoredObject {
            lease: Lease {
                store: self.clone(),
                digest: entry.digest.clone(),
            },
            file,
            path,
            entry,
        })
    }

    /// Load `key`'s index entry written by another process, if its object
    /// is there with the right size.
    fn adopt(&self, key: &str) -> Option<()> {
        let path = self.inner.dir.join("index").join(key_file_name(key));
        let en: Entry = serde_json::from_slice(&fs::read(&path).ok()?).ok()?;
        if en.key != key || !is_hex64(&en.digest) {
            return None;
        }
        let md = fs::metadata(self.inner.dir.join("objects/sha256").join(&en.digest)).ok()?;
        if md.len() != en.size {
            return None;
        }
        let mut st = self.lock();
        if st.keys.contains_key(key) {
            return Some(());
        }
        let t = st.tick();
        let is_new = !st.objects.contains_key(&en.digest);
        let obj = st.objects.entry(en.digest.clone()).or_insert(Obj {
            size: en.size,
            readers: 0,
            last_used: t,
            keys: Vec::new(),
        });
        obj.keys.push(key.to_string());
        if is_new {
            st.total += en.size;
        }
        st.keys.insert(key.to_string(), en);
        Some(())
    }

    /// A new temp file for a fill. Hashes what is written through it.
    pub fn temp(&self) -> Result<TempObject> {
        let n = self.inner.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = self
            .inner
            .dir
            .join("tmp")
            .join(format!("fill-{}-{n}-{nanos}", std::process::id()));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        Ok(TempObject {
            path: Some(path),
            file: Some(file),
            hasher: Sha256::new(),
            len: 0,
        })
    }

    /// Fsync `tmp`, move it into place as its sha256 and point `key` at it
    /// (replacing what the key named before). Evicts down to the size limit,
    /// never the object just committed.
    pub async fn commit(&self, mut tmp: TempObject, key: &str, meta: Meta) -> Result<Entry> {
        let file = tmp.file.take().expect("temp file present until commit");
        let digest = hex::encode(tmp.hasher.clone().finalize());
        let size = tmp.len;
        let src = tmp.path.take().expect("temp path present until commit");
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
        tokio::task::spawn_blocking(move || store.commit_blocking(file, &src, en))
            .await
            .map_err(|e| Error::io("commit task", std::io::Error::other(e)))??;
        Ok(entry)
    }

    fn commit_blocking(&self, file: File, src: &Path, entry: Entry) -> Result<()> {
        let objdir = self.inner.dir.join("objects/sha256");
        let dst = objdir.join(&entry.digest);
        let res = (|| {
            file.sync_all()
                .map_err(|e| Error::io(format!("fsync {}", src.display()), e))?;
            drop(file);
            fs::rename(src, &dst).map_err(|e| {
                Error::io(
                    format!("renaming {} to {}", src.display(), dst.display()),
                    e,
                )
            })?;
            fsync_dir(&objdir)
        })();
        if res.is_err() {
            let _ = fs::remove_file(src);
        }
        res?;
        self.put_entry(entry)
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
        let store = self.clone();
        let en = entry.clone();
        tokio::task::spawn_blocking(move || store.put_entry(en))
            .await
            .map_err(|e| Error::io("link task", std::io::Error::other(e)))??;
        Ok(entry)
    }

    /// Write the index file for `entry` (temp + fsync + rename) and update
    /// the in-memory state; then evict.
    fn put_entry(&self, entry: Entry) -> Result<()> {
        let idxdir = self.inner.dir.join("index");
        let name = key_file_name(&entry.key);
        let n = self.inner.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .inner
            .dir
            .join("tmp")
            .join(format!("index-{}-{n}", std::process::id()));
        let body = serde_json::to_vec_pretty(&entry)
            .map_err(|e| Error::io("encoding an index entry", std::io::Error::other(e)))?;
        let res = (|| {
            let mut f = File::create(&tmp)
                .map_err(|e| Error::io(format!("creating {}", tmp.display()), e))?;
            f.write_all(&body)
                .and_then(|_| f.sync_all())
                .map_err(|e| Error::io(format!("writing {}", tmp.display()), e))?;
            fs::rename(&tmp, idxdir.join(&name))
                .map_err(|e| Error::io(format!("renaming {}", tmp.display()), e))?;
            fsync_dir(&idxdir)
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res?;
        let digest = entry.digest.clone();
        {
            let mut st = self.lock();
            let t = st.tick();
            let old = st.keys.insert(entry.key.clone(), entry.clone());
            // Rewriting a key onto the object it already names (a pin, a
            // refreshed fetch time) must not drop that object.
            if let Some(old) = old.filter(|o| o.digest != digest) {
                self.unref(&mut st, &old.key, &old.digest);
            }
            let is_new = !st.objects.contains_key(&digest);
            let obj = st.objects.entry(digest.clone()).or_insert(Obj {
                size: entry.size,
                readers: 0,
                last_used: t,
                keys: Vec::new(),
            });
            obj.last_used = t;
            if !obj.keys.contains(&entry.key) {
                obj.keys.push(entry.key.clone());
            }
            if is_new {
                st.total += entry.size;
            }
        }
        self.evict(Some(&digest));
        Ok(())
    }

    /// Drop `key` from `digest`'s key list; remove the object when no key is left.
    fn unref(&self, st: &mut State, key: &str, digest: &str) {
        let gone = match st.objects.get_mut(digest) {
            Some(o) => {
                o.keys.retain(|k| k != key);
                o.keys.is_empty()
            }
            None => false,
        };
        if gone && let Some(o) = st.objects.remove(digest) {
            st.total -= o.size;
            let _ = fs::remove_file(self.inner.dir.join("objects/sha256").join(digest));
        }
    }

    /// Forget `key` (its object goes when no other key names it).
    pub fn remove(&self, key: &str) {
        let mut st = self.lock();
        if let Some(old) = st.keys.remove(key) {
            let _ = fs::remove_file(self.inner.dir.join("index").join(key_file_name(key)));
            self.unref(&mut st, key, &old.digest);
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
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.put_entry(entry))
            .await
            .map_err(|e| Error::io("pin task", std::io::Error::other(e)))?
    }

    /// Evict least-recently-used objects that no reader holds and no key
    /// pins until the total is within the limit. `keep` is never evicted.
    pub fn evict(&self, keep: Option<&str>) {
        let Some(max) = self.inner.max_size else {
            return;
        };
        let mut st = self.lock();
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
                st.keys.remove(&k);
                let _ = fs::remove_file(self.inner.dir.join("index").join(key_file_name(&k)));
            }
            if let Some(o) = st.objects.remove(&digest) {
                st.total -= o.size;
                let _ = fs::remove_file(self.inner.dir.join("objects/sha256").join(&digest));
            }
        }
    }

    fn release(&self, digest: &str) {
        let mut st = self.lock();
        if let Some(o) = st.objects.get_mut(digest) {
            o.readers = o.readers.saturating_sub(1);
        }
    }
}

fn read_dir(dir: &Path) -> Result<Vec<fs::DirEntry>> {
    Ok(fs::read_dir(dir)
        .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?
        .filter_map(|e| e.ok())
        .collect())
}

/// Keeps an object from eviction while held.
pub struct Lease {
    store: Store,
    digest: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.store.release(&self.digest);
    }
}

/// A committed object opened for reading.
pub struct StoredObject {
    pub entry: Entry,
    /// Open on the object; read with `std::os::unix::fs::FileExt::read_at`.
    pub file: File,
    pub path: PathBuf,
    pub lease: Lease,
}

/// Bytes per step when streaming a stored object (1 MiB measured best
/// against 2, 8 and 32 MiB windows with wrk on loopback).
pub const STREAM_CHUNK: usize = 1 << 20;

/// Stream bytes `start..end` of a committed object (whose file never
/// changes) in large chunks, holding `lease` until the end. Each chunk is a
/// read-only memory map of one window of the file, handed out as `Bytes`
/// without copying and unmapped when the consumer drops it, so the bytes go
/// from the page cache to the socket in one copy and memory stays bounded
/// by the chunks in flight.
pub fn stream_range(
    file: Arc<File>,
    start: u64,
    end: u64,
    lease: Lease,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures::stream::unfold(
        (file, start, Some(lease)),
        move |(file, pos, lease)| async move {
            lease.as_ref()?;
            if pos >= end {
                return None;
            }
            let n = ((end - pos) as usize).min(STREAM_CHUNK);
            let f = file.clone();
            let res = tokio::task::spawn_blocking(move || map_window(&f, pos, n))
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r);
            match res {
                Ok(b) => Some((Ok(b), (file, pos + n as u64, lease))),
                Err(e) => Some((Err(e), (file, end, None))),
            }
        },
    )
}

/// A read-only mapping of part of a file.
struct Mapped {
    base: *mut libc::c_void,
    map_len: usize,
    skip: usize,
    len: usize,
}

// SAFETY: the mapping is read-only and owned; nothing aliases it mutably.
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `base..base+map_len` is a live PROT_READ mapping (until
        // drop) and `skip + len <= map_len`.
        unsafe { std::slice::from_raw_parts((self.base as *const u8).add(self.skip), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mmap returned.
        unsafe {
            libc::munmap(self.base, self.map_len);
        }
    }
}

fn map_window(file: &File, pos: u64, len: usize) -> std::io::Result<bytes::Bytes> {
    use std::os::fd::AsRawFd;
    if len == 0 {
        return Ok(bytes::Bytes::new());
    }
    let file_len = file.metadata()?.len();
    if pos + len as u64 > file_len {
        return Err(std::io::Error::other(
            "stored object is shorter than its entry",
        ));
    }
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let aligned = pos - pos % page;
    let skip = (pos - aligned) as usize;
    let map_len = skip + len;
    // SAFETY: a fresh read-only shared mapping of a regular file we hold
    // open; objects are immutable once committed (replaced only by rename,
    // never truncated), so the mapped range stays valid.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            file.as_raw_fd(),
            aligned as libc::off_t,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: advisory only, on the region just mapped.
    unsafe {
        libc::madvise(base, map_len, libc::MADV_SEQUENTIAL);
    }
    Ok(bytes::Bytes::from_owner(Mapped {
        base,
        map_len,
        skip,
        len,
    }))
}

/// A fill's temp file: written through [`TempObject::write_all`], which
/// hashes as it goes. Removed on drop unless committed.
pub struct TempObject {
    path: Option<PathBuf>,
    file: Option<File>,
    hasher: Sha256,
    len: u64,
}

impl TempObject {
    pub fn path(&self) -> &Path {
        self.path
            .as_deref()
            .expect("temp path present until commit")
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `buf`; when this returns, readers of the path see the bytes.
    /// (A plain write into the page cache: short enough to do inline.)
    pub async fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        let f = self.file.as_mut().expect("temp file present until commit");
        f.write_all(buf)
            .map_err(|e| Error::io("writing a fill", e))?;
        self.hasher.update(buf);
        self.len += buf.len() as u64;
        Ok(())
    }

    /// The sha256 of what has been written so far.
    pub fn digest(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}

impl Drop for TempObject {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("50Gi").unwrap(), 50 << 30);
        assert_eq!(parse_size("10G").unwrap(), 10_000_000_000);
        assert_eq!(parse_size("1.5Mi").unwrap(), 3 << 19);
        assert!(parse_size("ten").is_err());
        assert!(parse_size("10X").is_err());
    }

    #[tokio::test]
    async fn commit_get_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let e = put(&store, "../../etc/passwd", b"hello", false).await;
        assert_eq!(e.digest, hex::encode(Sha256::digest(b"hello")));
        let o = store.get("../../etc/passwd").unwrap();
        assert_eq!(std::fs::read(&o.path).unwrap(), b"hello");
        assert!(o.path.starts_with(dir.path()));
        drop(o);
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
        assert!(!dir.path().join("index/bogus.json").exists());
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
        // a live process's temp file survives another's startup
        let t = mirror.temp().unwrap();
        drop(Store::open(dir.path(), None).unwrap());
        // (same pid here: our own leftovers are always removed)
        assert!(!t.path().exists());
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
            let mut s = Box::pin(stream_range(Arc::new(o.file), a as u64, b as u64, o.lease));
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
}
