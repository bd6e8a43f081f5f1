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
//!
//! The bound holds on disk, not only for names: a copy a reader has open
//! is never chosen to make room (its blocks would stay until the reader
//! closes it), and one removed while open anyway (dropped as rotten, its
//! object deleted) counts against the bound until its last reader closes
//! it; a copy that does not fit beside those is not made.

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
    state: Arc<Mutex<TierState>>,
    /// Opens an object in the bucket (what a background copy reads).
    bucket: Option<Opener>,
}

/// Opens the bucket's object `digest` of `len` bytes (no round trip).
pub(super) type Opener = Arc<dyn Fn(&str, u64) -> Box<dyn ObjectRead> + Send + Sync>;

/// A copy in the tier, read like any object; it says it is a copy
/// ([`ObjectRead::is_copy`]: a fault in it drops only the copy). While it
/// is open its copy is not evicted, and counts until closed if removed.
struct Copy {
    file: Box<dyn ObjectRead>,
    digest: String,
    state: Arc<Mutex<TierState>>,
}

impl Drop for Copy {
    fn drop(&mut self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.close(&self.digest);
    }
}

impl ObjectRead for Copy {
    fn len(&self) -> u64 {
        self.file.len()
    }
    fn read_chunk(&self, pos: u64, len: usize) -> std::io::Result<bytes::Bytes> {
        self.file.read_chunk(pos, len)
    }
    fn read_ready(&self, buf: &mut ReadBuf, pos: u64, want: usize) -> std::io::Result<bool> {
        self.file.read_ready(buf, pos, want)
    }
    fn read_rest(&self, buf: &mut ReadBuf, pos: u64, want: usize) -> std::io::Result<()> {
        self.file.read_rest(buf, pos, want)
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
    /// Open copies: digest -> handles (never chosen to make room).
    open: HashMap<String, usize>,
    /// Copies removed while open: digest -> bytes still on disk until the
    /// last handle closes (counted with `total` against the bound; no new
    /// copy of that digest until then).
    ghosts: HashMap<String, u64>,
    ghost_bytes: u64,
}

impl TierState {
    /// Bytes the tier's files hold on disk, or are held for.
    fn on_disk(&self) -> u64 {
        self.total + self.reserved + self.ghost_bytes
    }

    /// A handle on `digest`'s copy closed.
    fn close(&mut self, digest: &str) {
        let Some(n) = self.open.get_mut(digest) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            self.open.remove(digest);
            // Its file was removed while open: its blocks go now.
            if let Some(n) = self.ghosts.remove(digest) {
                self.ghost_bytes -= n;
            }
        }
    }

    /// `digest`'s copy leaves memory (its file is the caller's to remove):
    /// when open, its bytes count as a ghost until closed.
    fn take(&mut self, digest: &str) -> bool {
        let Some((n, _)) = self.files.remove(digest) else {
            return false;
        };
        self.total -= n;
        if self.open.contains_key(digest) {
            *self.ghosts.entry(digest.to_string()).or_default() += n;
            self.ghost_bytes += n;
        }
        true
    }
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
            state: Arc::new(Mutex::new(st)),
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
                st.take(d);
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
            // Open from here (counted before the file is, so no eviction
            // between the two takes it unseen).
            *st.open.entry(digest.to_string()).or_default() += 1;
        }
        match open_object_file(&self.path(digest)) {
            Ok(file) if file.len() == size => Some(Box::new(Copy {
                file,
                digest: digest.to_string(),
                state: self.state.clone(),
            })),
            _ => {
                self.lock().close(digest);
                self.remove(digest);
                None
            }
        }
    }

    /// Drop the copy of `digest`, if any (a reader holding its file keeps
    /// reading it).
    pub(super) fn remove(&self, digest: &str) {
        let had = self.lock().take(digest);
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
        let (victims, fits) = {
            let mut st = self.lock();
            if st.reserved.saturating_add(size) > self.max {
                return false;
            }
            st.reserved += size;
            let victims = Self::victims(&mut st, self.max);
            // What open copies hold cannot be made room from.
            let fits = st.on_disk() <= self.max;
            if !fits {
                st.reserved -= size;
            }
            (victims, fits)
        };
        self.remove_files(victims);
        fits
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

    /// Take the least recently used copies no reader has open out of
    /// memory until what is held, reserved and still open is within `max`;
    /// their files are the caller's to remove (with the state unlocked).
    fn victims(st: &mut TierState, max: u64) -> Vec<String> {
        let mut v = Vec::new();
        while st.on_disk() > max {
            let Some(d) = st
                .files
                .iter()
                .filter(|(d, _)| !st.open.contains_key(*d))
                .min_by_key(|(_, (_, last))| *last)
                .map(|(d, _)| d.clone())
            else {
                break;
            };
            st.take(&d);
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
        if self.lock().ghosts.contains_key(digest) || !self.reserve(size) {
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
            if st.files.contains_key(digest)
                || st.copying.contains(digest)
                || st.ghosts.contains_key(digest)
            {
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

#[cfg(test)]
mod disk_tests {
    use super::*;

    /// Bytes the tier's directory holds on disk, files removed but still
    /// open included (what `du` of the volume sees).
    fn on_disk(dir: &Path, open: &[&dyn ObjectRead]) -> u64 {
        let named: u64 = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.metadata().unwrap().len())
            .sum();
        let ghosts: u64 = open.iter().map(|o| o.len()).sum();
        named + ghosts
    }

    fn adopt(tier: &Tier, dir: &Path, digest: &str, body: &[u8]) {
        let spool = dir.join("spool");
        fs::write(&spool, body).unwrap();
        tier.adopt_spool(&spool, digest, body.len() as u64);
        let _ = fs::remove_file(&spool);
    }

    /// Issue 48, item 3: a copy a reader has open is not evicted while
    /// others can make room; one removed while open (dropped) counts until
    /// it is closed, so a new copy that would take the disk past the bound
    /// is not made; the disk never holds more than the bound. (On main,
    /// 20169a0: the open copy, least recently used, was evicted first and
    /// its blocks stayed beside b and c: 15 bytes on disk, bound 10.)
    #[test]
    fn copies_open_for_reading_count_until_closed() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("tier");
        let tier = Tier::open(t.clone(), 10).unwrap();
        let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        adopt(&tier, dir.path(), &a, b"aaaaa");
        adopt(&tier, dir.path(), &b, b"bbbbb");
        // a is the least recently used, but a reader holds it open.
        let reading = tier.open_copy(&a, 5).unwrap();
        assert!(tier.open_copy(&b, 5).is_some());
        adopt(&tier, dir.path(), &c, b"ccccc");
        assert!(tier.holds(&a, 5), "the open copy stays");
        assert!(!tier.holds(&b, 5), "the closed one made room");
        assert!(on_disk(&t, &[]) <= 10);
        // a dropped while open (rotten, say): its blocks stay until closed,
        // so nothing new fits beside them and c, open too.
        let reading_c = tier.open_copy(&c, 5).unwrap();
        tier.remove(&a);
        adopt(&tier, dir.path(), &b, b"bbbbb");
        assert!(!tier.holds(&b, 5), "no room while a's blocks are held");
        assert!(tier.holds(&c, 5));
        assert!(
            on_disk(&t, &[&*reading]) <= 10,
            "{}",
            on_disk(&t, &[&*reading])
        );
        drop(reading);
        adopt(&tier, dir.path(), &b, b"bbbbb");
        assert!(tier.holds(&b, 5), "room once a is closed");
        assert!(on_disk(&t, &[]) <= 10);
        drop(reading_c);
    }
}
