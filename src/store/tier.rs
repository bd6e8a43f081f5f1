//! The local tier of a bucket (`serve --local-cache-max-size`): copies of
//! objects read from the bucket, kept under the spool directory
//! (`--cache-dir`, `tier/<hex>`), so hot objects are read at local speed
//! and keep being served while the bucket is slow or gone. The bucket
//! stays the truth: a copy is a cache, checked on every read against the
//! checksums held in memory (a rotten copy is dropped, never the object),
//! least recently used out above the bound, and whatever the store drops
//! goes from here too.
//!
//! A copy comes from a fill (the verified spool file, renamed here after
//! the upload) or, for an object another replica stored, from a
//! background read of the bucket after its first request (checked block
//! by block and hashed whole before it is renamed into place). Those
//! reads run [`COPIES`] at a time; what is asked meanwhile waits its turn
//! (up to [`PENDING`]), so every object of an image pulled once (its
//! manifests and blobs, read at once) gets its copy.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::STREAM_CHUNK;
use super::backend::{ObjectRead, ReadBuf};
use super::checked::{Checker, Verdict};
use super::local::{is_hex64, open_object_file};
use super::sums::Sums;

/// Background copies from the bucket at once.
const COPIES: usize = 2;
/// Copies waiting for one of those (beyond, a request is dropped: the
/// object's next read asks again).
const PENDING: usize = 1024;

pub(super) struct Tier {
    dir: PathBuf,
    max: u64,
    state: Mutex<TierState>,
    /// Opens an object in the bucket (what a background copy reads).
    bucket: Option<Opener>,
}

/// Opens the bucket's object `digest` of `len` bytes (no round trip).
pub(super) type Opener = Arc<dyn Fn(&str, u64) -> Box<dyn ObjectRead> + Send + Sync>;

/// A copy in the tier, read like any object; it says it is a copy
/// ([`ObjectRead::is_copy`]: a fault in it drops only the copy).
struct Copy(Box<dyn ObjectRead>);

impl ObjectRead for Copy {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn read_chunk(&self, pos: u64, len: usize) -> std::io::Result<bytes::Bytes> {
        self.0.read_chunk(pos, len)
    }
    fn read_ready(&self, buf: &mut ReadBuf, pos: u64, want: usize) -> std::io::Result<bool> {
        self.0.read_ready(buf, pos, want)
    }
    fn read_rest(&self, buf: &mut ReadBuf, pos: u64, want: usize) -> std::io::Result<()> {
        self.0.read_rest(buf, pos, want)
    }
    fn is_copy(&self) -> bool {
        true
    }
}

#[derive(Default)]
struct TierState {
    /// digest -> (size, last use).
    files: HashMap<String, (u64, u64)>,
    total: u64,
    clock: u64,
    /// Copies from the bucket in progress.
    copying: HashSet<String>,
    /// Copies waiting for a slot: (digest, size, checksums).
    pending: VecDeque<(String, u64, Arc<Sums>)>,
    /// Bytes held for copies in progress (a background copy being written,
    /// a fill's spool file about to be renamed in): counted with `total`
    /// against the bound, so the tier never holds more than it.
    reserved: u64,
}

impl Tier {
    /// Open (creating) the tier in `dir`, bounded by `max` bytes: the
    /// copies there are kept in the order of their modification times,
    /// leftovers of interrupted copies removed.
    pub(super) fn open(dir: PathBuf, max: u64) -> std::io::Result<Tier> {
        fs::create_dir_all(&dir)?;
        let mut found = Vec::new();
        for e in fs::read_dir(&dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(md) = e.metadata() else { continue };
            if !md.file_type().is_file() {
                continue;
            }
            if is_hex64(&name) {
                found.push((md.modified().ok(), name, md.len()));
            } else if name.starts_with(".copy-") {
                let _ = fs::remove_file(e.path());
            }
        }
        found.sort();
        let mut st = TierState::default();
        for (_, name, len) in found {
            st.clock += 1;
            st.total += len;
            st.files.insert(name, (len, st.clock));
        }
        Ok(Tier {
            dir,
            max,
            state: Mutex::new(st),
            bucket: None,
        })
    }

    /// The tier whose background copies read the bucket through `open`.
    pub(super) fn reading(mut self, open: Opener) -> Tier {
        self.bucket = Some(open);
        self
    }

    fn lock(&self) -> MutexGuard<'_, TierState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(digest)
    }

    /// Keep only the copies `keep(digest, size)` accepts (start-up: the
    /// objects the bucket holds, at their size).
    pub(super) fn keep_only(&self, keep: impl Fn(&str, u64) -> bool) {
        let gone: Vec<String> = {
            let mut st = self.lock();
            let gone: Vec<String> = st
                .files
                .iter()
                .filter(|(d, (n, _))| !keep(d, *n))
                .map(|(d, _)| d.clone())
                .collect();
            for d in &gone {
                if let Some((n, _)) = st.files.remove(d) {
                    st.total -= n;
                }
            }
            gone
        };
        for d in gone {
            let _ = fs::remove_file(self.path(&d));
        }
        self.shrink();
    }

    /// Is there a copy of `digest` of `size` bytes (memory only)?
    pub(super) fn holds(&self, digest: &str, size: u64) -> bool {
        matches!(self.lock().files.get(digest), Some((n, _)) if *n == size)
    }

    /// Bytes and copies held.
    #[cfg(test)]
    pub(super) fn usage(&self) -> (u64, usize) {
        let st = self.lock();
        (st.total, st.files.len())
    }

    /// The local copy of `digest` (of `size` bytes), opened, if there is
    /// one; marks it used (blocking: a file open).
    pub(super) fn open_copy(&self, digest: &str, size: u64) -> Option<Box<dyn ObjectRead>> {
        {
            let mut st = self.lock();
            st.clock += 1;
            let t = st.clock;
            match st.files.get_mut(digest) {
                Some((n, last)) if *n == size => *last = t,
                _ => return None,
            }
        }
        match open_object_file(&self.path(digest)) {
            Ok(o) if o.len() == size => Some(Box::new(Copy(o))),
            _ => {
                self.remove(digest);
                None
            }
        }
    }

    /// Drop the copy of `digest`, if any (a reader holding its file keeps
    /// reading it).
    pub(super) fn remove(&self, digest: &str) {
        let had = {
            let mut st = self.lock();
            match st.files.remove(digest) {
                Some((n, _)) => {
                    st.total -= n;
                    true
                }
                None => false,
            }
        };
        if had {
            let _ = fs::remove_file(self.path(digest));
        }
    }

    /// Make room for `size` more bytes and hold them for a copy about to
    /// be written: least recently used copies out (their files removed
    /// before this returns) until what is held plus every reservation is
    /// within the bound. `false`: it does not fit beside the copies in
    /// progress (nothing held).
    fn reserve(&self, size: u64) -> bool {
        let victims = {
            let mut st = self.lock();
            if st.reserved.saturating_add(size) > self.max {
                return false;
            }
            st.reserved += size;
            Self::victims(&mut st, self.max)
        };
        self.remove_files(victims);
        true
    }

    /// A reservation of `size` bytes ends: its copy is in place as
    /// `digest` (`Some`), or it failed (`None`).
    fn settle(&self, size: u64, digest: Option<&str>) {
        let mut st = self.lock();
        st.reserved -= size;
        if let Some(digest) = digest {
            st.clock += 1;
            let t = st.clock;
            if let Some((n, _)) = st.files.insert(digest.to_string(), (size, t)) {
                st.total -= n;
            }
            st.total += size;
        }
        let victims = Self::victims(&mut st, self.max);
        drop(st);
        self.remove_files(victims);
    }

    /// Least recently used copies out until within the bound.
    fn shrink(&self) {
        let victims = Self::victims(&mut self.lock(), self.max);
        self.remove_files(victims);
    }

    /// Take the least recently used copies out of memory until what is
    /// held and reserved is within `max`; their files are the caller's to
    /// remove (with the state unlocked).
    fn victims(st: &mut TierState, max: u64) -> Vec<String> {
        let mut v = Vec::new();
        while st.total + st.reserved > max {
            let Some(d) = st
                .files
                .iter()
                .min_by_key(|(_, (_, last))| *last)
                .map(|(d, _)| d.clone())
            else {
                break;
            };
            if let Some((n, _)) = st.files.remove(&d) {
                st.total -= n;
            }
            v.push(d);
        }
        v
    }

    fn remove_files(&self, victims: Vec<String>) {
        for d in victims {
            tracing::debug!(digest = %d, "out of the local tier");
            let _ = fs::remove_file(self.path(&d));
        }
    }

    /// A fill's verified spool file becomes the copy of `digest` (room made
    /// first: the tier never holds more than its bound).
    pub(super) fn adopt_spool(&self, spool: &Path, digest: &str, size: u64) {
        if !self.reserve(size) {
            return;
        }
        let placed = fs::rename(spool, self.path(digest)).is_ok();
        self.settle(size, placed.then_some(digest));
    }

    /// `digest` was read from the bucket: copy it here in the background
    /// (at most [`COPIES`] at once, the rest queued; a request meanwhile
    /// reads the bucket).
    pub(super) fn want(self: &Arc<Self>, digest: &str, size: u64, sums: Arc<Sums>) {
        if size > self.max {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut st = self.lock();
            if st.files.contains_key(digest) || st.copying.contains(digest) {
                return;
            }
            let queued = st.pending.iter().any(|(d, ..)| d == digest);
            if st.copying.len() >= COPIES || st.reserved + size > self.max {
                if st.pending.len() < PENDING && !queued {
                    st.pending.push_back((digest.to_string(), size, sums));
                }
                return;
            }
            st.copying.insert(digest.to_string());
        }
        if !self.reserve(size) {
            self.lock().copying.remove(digest);
            return;
        }
        let tier = self.clone();
        let mut next = Some((digest.to_string(), size, sums));
        rt.spawn_blocking(move || {
            while let Some((digest, size, sums)) = next.take() {
                let mut unanswered = false;
                match tier.copy(&digest, size, &sums) {
                    Ok(()) => tier.settle(size, Some(&digest)),
                    Err(e) => {
                        unanswered = e.kind() != std::io::ErrorKind::InvalidData;
                        tier.settle(size, None);
                        tracing::warn!(%digest, error = %e, "copying into the local tier failed")
                    }
                }
                let mut st = tier.lock();
                st.copying.remove(&digest);
                if unanswered {
                    // The bucket did not answer: nothing waits on it.
                    st.pending.clear();
                }
                // The next one waiting, unless it got its copy meanwhile;
                // one that does not fit beside the copies in progress waits.
                while let Some(w) = st.pending.pop_front() {
                    if st.files.contains_key(&w.0) || st.copying.contains(&w.0) {
                        continue;
                    }
                    if st.reserved + w.1 > tier.max {
                        st.pending.push_front(w);
                        break;
                    }
                    st.copying.insert(w.0.clone());
                    next = Some(w);
                    break;
                }
                drop(st);
                if let Some(w) = &next
                    && !tier.reserve(w.1)
                {
                    tier.lock().copying.remove(&w.0);
                    next = None;
                }
            }
        });
    }

    /// Read `digest` from the bucket into a temp file here, every block
    /// checked and the whole hashed, then rename it into place.
    fn copy(&self, digest: &str, size: u64, sums: &Arc<Sums>) -> std::io::Result<()> {
        use sha2::Digest as _;
        let open = self
            .bucket
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the tier reads no bucket"))?;
        let object = open(digest, size);
        // The one block check of every read; a block that does not match
        // ends the copy (the bucket's object is the store's to judge, at
        // its next read).
        let mut checker = Checker::new(sums.clone(), Arc::new(CopyVerdict));
        let tmp = self
            .dir
            .join(format!(".copy-{digest}-{:08x}", rand::random::<u32>()));
        let res = (|| {
            let mut out = fs::File::create(&tmp)?;
            let mut h = sha2::Sha256::new();
            let mut span = object.span(0, size);
            let mut pos = 0u64;
            while pos < size {
                let n = ((size - pos) as usize).min(STREAM_CHUNK);
                let b = match span.as_mut() {
                    Some(s) => s.next_bytes(n)?,
                    None => object.read_chunk(pos, n)?,
                };
                let b = checker.check_blocking(pos, b)?;
                h.update(&b);
                out.write_all(&b)?;
                pos += n as u64;
            }
            if hex::encode(h.finalize()) != digest {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the bytes do not hash to their digest",
                ));
            }
            fs::rename(&tmp, self.path(digest))
        })();
        if res.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        res
    }
}

/// A copy's verdict: a block that does not match ends the copy.
struct CopyVerdict;

impl Verdict for CopyVerdict {
    fn mismatch(&self, from: u64, _to: u64, _b: &[u8]) -> std::io::Result<Arc<Sums>> {
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the block at {from} does not match its checksum"),
        ))
    }

    fn failed(&self, _e: &std::io::Error) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_recently_used_copies_go_above_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let tier = Tier::open(dir.path().join("tier"), 10).unwrap();
        let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        for d in [&a, &b] {
            let spool = dir.path().join("spool");
            fs::write(&spool, b"12345").unwrap();
            tier.adopt_spool(&spool, d, 5);
        }
        assert_eq!(tier.usage(), (10, 2));
        assert!(tier.open_copy(&a, 5).is_some(), "a used: b is the oldest");
        let spool = dir.path().join("spool");
        fs::write(&spool, b"12345").unwrap();
        tier.adopt_spool(&spool, &c, 5);
        assert_eq!(tier.usage(), (10, 2));
        assert!(tier.open_copy(&b, 5).is_none(), "b went");
        assert!(!dir.path().join("tier").join(&b).exists());
        assert!(tier.open_copy(&a, 5).is_some() && tier.open_copy(&c, 5).is_some());
        // Asked for another size: not served.
        assert!(tier.open_copy(&c, 6).is_none());
        // Reopened: the copies are found again; keep_only drops strangers.
        drop(tier);
        fs::write(dir.path().join("tier/.copy-x-1"), b"partial").unwrap();
        let tier = Tier::open(dir.path().join("tier"), 10).unwrap();
        assert_eq!(tier.usage(), (10, 2));
        assert!(!dir.path().join("tier/.copy-x-1").exists());
        tier.keep_only(|d, _| d == a);
        assert_eq!(tier.usage(), (5, 1));
        assert!(!dir.path().join("tier").join(&c).exists());
    }
}
