//! The local directory backend (`--cache-dir`): where things live under
//! the cache dir, and how the store touches the filesystem there: only
//! regular files it names itself, opened without following links and
//! without blocking on FIFOs or devices.
//!
//! - `objects/sha256/<hex>`: object bytes, named by their sha256;
//! - `sums/<hex>`: the object's per-chunk checksums ([`super::sums`]);
//! - `index/<sha256(key)>.json`: one entry per key (a key never becomes a path);
//! - `tmp/{fill,index,sums}-<pid>-<random>`: writes in progress, each
//!   holding an exclusive `flock` for its whole life, so another process
//!   (in any PID namespace) can tell a live write from a leftover;
//! - `lock`: the store lock, held (`flock`, exclusive) around every write
//!   of an index entry and every deletion, by every process on the store.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirEntryExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::backend::{Backend, Listed, LockGuard, ObjectRead};

/// The directory layout of one store.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    root: PathBuf,
}

/// A store in a local directory.
pub struct LocalDir {
    layout: Layout,
    /// The store lock file; the mutex orders this process's own holders
    /// (a `flock` is per open file, so it does not exclude our threads).
    lock: Mutex<File>,
}

impl LocalDir {
    /// Open (creating) the directory layout under `root`.
    pub fn open(root: PathBuf) -> io::Result<LocalDir> {
        let layout = Layout::new(root);
        for p in layout.dirs() {
            fs::create_dir_all(&p)
                .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", p.display())))?;
        }
        let lock_path = layout.lock_file();
        let lock = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("opening {}: {e}", lock_path.display()))
            })?;
        Ok(LocalDir {
            layout,
            lock: Mutex::new(lock),
        })
    }
}

struct Flock<'a>(MutexGuard<'a, File>);

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// A committed object file, read in memory maps: a window mapped per read
/// (`read_chunk`), or the whole file mapped ([`ObjectRead::map`]), which
/// the store keeps while it holds the object ([`Mapped`]).
struct LocalObject {
    file: File,
    len: u64,
}

impl ObjectRead for LocalObject {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_chunk(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        map_chunk(&self.file, pos, len)
    }

    fn map(&self) -> Option<Bytes> {
        match map_whole(&self.file, self.len) {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(error = %e, "mapping a stored object whole; reading it by windows");
                None
            }
        }
    }
}

/// An object's bytes as one map of the whole file (its file closed: the
/// map keeps the inode, so an object deleted meanwhile is still read
/// whole). Cheap to clone; every read is a slice of the one map.
pub(super) struct Mapped(pub(super) Bytes);

impl ObjectRead for Mapped {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_chunk(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        slice_map(&self.0, pos, len)
    }

    fn map(&self) -> Option<Bytes> {
        Some(self.0.clone())
    }
}

/// `len` bytes at `pos` of a whole-object map.
fn slice_map(map: &Bytes, pos: u64, len: usize) -> io::Result<Bytes> {
    let end = pos
        .checked_add(len as u64)
        .filter(|&e| e <= map.len() as u64);
    match end {
        Some(end) => Ok(map.slice(pos as usize..end as usize)),
        None => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "stored object is shorter than its entry",
        )),
    }
}

/// The page size, for aligning `mincore` and `madvise` calls.
fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 { n as usize } else { 4096 }
    })
}

/// The pages under `b` (a slice of a map), page-aligned: address and length.
fn pages_of(b: &[u8]) -> (*mut libc::c_void, usize) {
    let page = page_size();
    let at = b.as_ptr() as usize;
    let start = at & !(page - 1);
    (start as *mut libc::c_void, at + b.len() - start)
}

/// Is every page of `b` (a slice of a file map) in the page cache? Then
/// touching it costs at most a minor fault, never a wait on the disk: an
/// async worker may read it. (A page reclaimed between this answer and the
/// touch is read from disk there: rare, and bounded by one page.) A page
/// past the end of a truncated file is never resident.
pub(super) fn resident(b: &[u8]) -> bool {
    if b.is_empty() {
        return true;
    }
    let page = page_size();
    let (start, len) = pages_of(b);
    let mut vec = [0u8; 256];
    let mut done = 0usize;
    while done < len {
        let n = (len - done).min(vec.len() * page);
        let pages = n.div_ceil(page);
        // SAFETY: `start + done .. + n` lies within the map `b` is a slice
        // of (page-aligned down from `b`), and `vec` holds one byte for each
        // of its pages.
        let r = unsafe {
            libc::mincore(
                (start as usize + done) as *mut libc::c_void,
                n,
                vec.as_mut_ptr(),
            )
        };
        if r != 0 || vec[..pages].iter().any(|v| v & 1 == 0) {
            return false;
        }
        done += n;
    }
    true
}

/// Read the pages of `b` (a slice of a file map) into memory and map them
/// (blocking: it waits on the disk). A page past the end of the file (the
/// file was truncated under the store) is an error here, not a SIGBUS
/// later.
pub(super) fn populate(b: &[u8]) -> io::Result<()> {
    if b.is_empty() {
        return Ok(());
    }
    let (start, len) = pages_of(b);
    // SAFETY: the range lies within the map `b` is a slice of; the advice
    // only faults its pages in.
    let r = unsafe { libc::madvise(start, len, libc::MADV_POPULATE_READ) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // A kernel before 5.14: touch a byte of every page instead.
        Some(libc::EINVAL) => {
            let page = page_size();
            let mut at = 0;
            while at < b.len() {
                // SAFETY: in bounds; a volatile read so it is not elided.
                unsafe { std::ptr::read_volatile(b.as_ptr().add(at)) };
                at += page;
            }
            Ok(())
        }
        Some(libc::EFAULT) | Some(libc::ENOMEM) => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "stored object is shorter than its entry",
        )),
        _ => Err(e),
    }
}

/// The whole of `file` (`len` bytes, checked against the file now) as one
/// read-only map, no page read yet.
fn map_whole(file: &File, len: u64) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    if file.metadata()?.len() < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "stored object is shorter than its entry",
        ));
    }
    let len = usize::try_from(len).map_err(|_| io::Error::other("object too large to map"))?;
    // SAFETY: as for `map_chunk`: committed objects are never written,
    // truncated or rewritten by the store (removed by unlinking only), and
    // the length was checked just now. A page is touched by an async worker
    // only once `resident` said it is in memory (a page of a truncated file
    // never is), otherwise on a blocking thread after `populate`.
    let map = unsafe { memmap2::MmapOptions::new().len(len).map(file)? };
    Ok(Bytes::from_owner(map))
}

impl Backend for LocalDir {
    fn describe(&self) -> String {
        self.layout.root().display().to_string()
    }

    fn local_dir(&self) -> Option<&Path> {
        Some(self.layout.root())
    }

    fn lock(&self) -> io::Result<LockGuard<'_>> {
        let f = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        f.lock()?;
        Ok(Box::new(Flock(f)))
    }

    fn spool(&self) -> io::Result<(PathBuf, File)> {
        self.layout.locked_temp("fill-")
    }

    fn clean_spool(&self) {
        clean_temp(&self.layout);
    }

    fn list_objects(&self) -> io::Result<HashMap<String, u64>> {
        let mut on_disk = HashMap::new();
        for e in read_dir(&self.layout.objects())? {
            let name = e.file_name().to_string_lossy().into_owned();
            match e.metadata() {
                Ok(md) if is_hex64(&name) && md.file_type().is_file() => {
                    on_disk.insert(name, md.len());
                }
                _ => stranger(&e),
            }
        }
        Ok(on_disk)
    }

    fn object_len(&self, digest: &str) -> Option<u64> {
        let md = fs::symlink_metadata(self.layout.object(digest)).ok()?;
        md.is_file().then_some(md.len())
    }

    fn object_age(&self, digest: &str) -> Option<Duration> {
        fs::symlink_metadata(self.layout.object(digest))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
    }

    fn open_object(&self, digest: &str, _len: u64) -> io::Result<Box<dyn ObjectRead>> {
        open_mapped(&self.layout.object(digest))
    }

    fn put_object(&self, spool: &Path, file: File, digest: &str, sums: &[u8]) -> io::Result<bool> {
        file.sync_all()?;
        let sums_path = self.layout.sums_file(digest);
        if !sums_path.exists() {
            write_atomic(&self.layout, "sums-", &sums_path, sums)?;
        }
        let dst = self.layout.object(digest);
        let existed = dst.exists();
        fs::rename(spool, &dst)?;
        drop(file);
        fsync_dir(&self.layout.objects())?;
        Ok(existed)
    }

    fn delete_object(&self, digest: &str) {
        let _ = fs::remove_file(self.layout.object(digest));
        let _ = fs::remove_file(self.layout.sums_file(digest));
    }

    fn list_entries(&self) -> io::Result<Vec<Listed>> {
        let mut v = Vec::new();
        for e in read_dir(&self.layout.index())? {
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_index_name(&name) || !regular(&e) {
                stranger(&e);
                continue;
            }
            v.push(Listed {
                name,
                token: e.ino(),
            });
        }
        Ok(v)
    }

    fn read_entry(&self, name: &str) -> Option<(Vec<u8>, u64)> {
        use std::io::Read;
        let mut f = open_regular(&self.layout.index().join(name)).ok()?;
        let ino = f.metadata().ok()?.ino();
        let mut b = Vec::new();
        f.read_to_end(&mut b).ok()?;
        Some((b, ino))
    }

    fn write_entry(&self, name: &str, body: &[u8]) -> io::Result<u64> {
        write_atomic(
            &self.layout,
            "index-",
            &self.layout.index().join(name),
            body,
        )
    }

    fn delete_entry(&self, name: &str) {
        let _ = fs::remove_file(self.layout.index().join(name));
    }

    fn read_sums(&self, digest: &str) -> io::Result<Option<Vec<u8>>> {
        match read_regular(&self.layout.sums_file(digest)) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            // Anything else there (a stranger, unreadable): none to check by.
            Err(_) => Ok(None),
        }
    }

    fn write_sums(&self, digest: &str, body: &[u8]) -> io::Result<()> {
        write_atomic(&self.layout, "sums-", &self.layout.sums_file(digest), body).map(drop)
    }
}

/// Remove the leftovers of interrupted writes in `layout`'s `tmp/`: only
/// names the store writes, only when no process (of any PID namespace)
/// holds their lock.
pub(super) fn clean_temp(layout: &Layout) {
    for e in read_dir(&layout.tmp()).unwrap_or_default() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !TEMP_PREFIXES.iter().any(|p| name.starts_with(p)) || !regular(&e) {
            stranger(&e);
            continue;
        }
        if let Ok(f) = open_regular(&e.path())
            && f.try_lock().is_ok()
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Is this directory entry a regular file (never following a link)?
fn regular(e: &fs::DirEntry) -> bool {
    e.file_type().is_ok_and(|t| t.is_file())
}

/// Something in the store's folders the store did not put there: left
/// alone, never opened.
fn stranger(e: &fs::DirEntry) {
    let what = e.file_type().map(|t| kind(&t)).unwrap_or("entry");
    tracing::warn!(path = %e.path().display(), kind = what, "not written by talos-gen: left alone");
}

/// A read-only map of `len` bytes of `file` at `pos`.
fn map_chunk(file: &File, pos: u64, len: usize) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    if file.metadata()?.len() < pos + len as u64 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "stored object is shorter than its entry",
        ));
    }
    // SAFETY: memmap2 requires that the mapped file is not changed while
    // mapped. Objects are immutable once committed: the store only ever
    // writes them through a temp file that is renamed into place, never
    // truncates or rewrites one, and removes them by unlinking (the inode
    // and this mapping stay valid). The length was checked above, so no
    // page of the map lies beyond the end of the file.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(pos)
            .len(len)
            .populate()
            .map(file)?
    };
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Bytes::from_owner(map))
}

/// Prefixes of the temp files the store creates (nothing else in `tmp/`
/// is ever removed).
pub(super) const TEMP_PREFIXES: [&str; 3] = ["fill-", "index-", "sums-"];

impl Layout {
    pub(super) fn new(root: PathBuf) -> Layout {
        Layout { root }
    }

    pub(super) fn root(&self) -> &Path {
        &self.root
    }

    /// The subfolders the store owns.
    pub(super) fn dirs(&self) -> [PathBuf; 4] {
        [self.objects(), self.index(), self.sums(), self.tmp()]
    }

    pub(super) fn objects(&self) -> PathBuf {
        self.root.join("objects/sha256")
    }

    pub(super) fn object(&self, digest: &str) -> PathBuf {
        self.objects().join(digest)
    }

    pub(super) fn index(&self) -> PathBuf {
        self.root.join("index")
    }

    pub(super) fn sums(&self) -> PathBuf {
        self.root.join("sums")
    }

    pub(super) fn sums_file(&self, digest: &str) -> PathBuf {
        self.sums().join(digest)
    }

    pub(super) fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub(super) fn lock_file(&self) -> PathBuf {
        self.root.join("lock")
    }

    /// A new temp file `tmp/<prefix><pid>-<random>`, created exclusively and
    /// locked (`flock`) for as long as the returned file is open.
    pub(super) fn locked_temp(&self, prefix: &str) -> io::Result<(PathBuf, File)> {
        let path = self.tmp().join(format!(
            "{prefix}{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        file.try_lock().map_err(|e| match e {
            fs::TryLockError::Error(e) => e,
            fs::TryLockError::WouldBlock => io::Error::other("a new temp file is locked"),
        })?;
        Ok((path, file))
    }
}

/// `sha256(key).json`: index files are named by the key's hash.
pub(super) fn index_name(key: &str) -> String {
    format!("{}.json", hex::encode(Sha256::digest(key.as_bytes())))
}

pub(super) use crate::text::is_hex64;

/// Is `name` an index file name the store writes (`<hex64>.json`)?
pub(super) fn is_index_name(name: &str) -> bool {
    name.strip_suffix(".json").is_some_and(is_hex64)
}

/// Open `path` for reading only if it is a regular file: never follows a
/// symbolic link, never blocks on a FIFO or device (`O_NONBLOCK`, which a
/// regular file ignores), and says what it found otherwise.
pub(super) fn open_regular(path: &Path) -> io::Result<File> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let ft = f.metadata()?.file_type();
    if !ft.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is a {}, not a regular file", path.display(), kind(&ft)),
        ));
    }
    Ok(f)
}

/// A regular file of the store's own, opened for reads by memory maps.
pub(super) fn open_mapped(path: &Path) -> io::Result<Box<dyn ObjectRead>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    Ok(Box::new(LocalObject { file, len }))
}

/// Read a small regular file (an index entry, a checksum list).
pub(super) fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    open_regular(path)?.read_to_end(&mut buf)?;
    Ok(buf)
}

/// What a directory entry is, in words (for the warnings about strangers).
pub(super) fn kind(ft: &fs::FileType) -> &'static str {
    if ft.is_dir() {
        "directory"
    } else if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "device"
    } else if ft.is_file() {
        "file"
    } else {
        "special file"
    }
}

/// The entries of `dir` (never following links: `file_type` is the link's own).
pub(super) fn read_dir(dir: &Path) -> io::Result<Vec<fs::DirEntry>> {
    Ok(fs::read_dir(dir)?.filter_map(|e| e.ok()).collect())
}

pub(super) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Write `body` to `dst` durably: a locked temp file, fsync, rename, fsync
/// of the directory. The temp file is removed on failure. Returns the
/// inode of the file now at `dst`.
pub(super) fn write_atomic(
    layout: &Layout,
    prefix: &str,
    dst: &Path,
    body: &[u8],
) -> io::Result<u64> {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let (tmp, mut f) = layout.locked_temp(prefix)?;
    let res = (|| {
        f.write_all(body)?;
        f.sync_all()?;
        let ino = f.metadata()?.ino();
        fs::rename(&tmp, dst)?;
        fsync_dir(dst.parent().unwrap_or(Path::new(".")))?;
        Ok(ino)
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages not in memory are seen so, and read in by `populate`; pages
    /// past the end of a file truncated under its map are never resident,
    /// and `populate` says so instead of the process taking a SIGBUS.
    #[test]
    fn residency_is_seen_and_a_truncated_map_is_an_error_not_a_crash() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o");
        let len = 1 << 20;
        let mut f = File::create(&path).unwrap();
        f.write_all(&vec![7u8; len]).unwrap();
        f.sync_all().unwrap();
        // SAFETY: advice on an open file: drop its clean pages from the cache.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let o = open_mapped(&path).unwrap();
        let map = o.map().unwrap();
        assert_eq!(map.len(), len);
        // (a filesystem that keeps every page in memory passes trivially)
        if !resident(&map) {
            populate(&map[4096..]).unwrap();
            assert!(resident(&map[4096..]));
        }
        assert_eq!(map[len - 1], 7);
        // truncated under the map: the tail is gone
        f.set_len(100 << 10).unwrap();
        let tail = &map[512 << 10..];
        assert!(!resident(tail));
        let e = populate(tail).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        assert!(resident(&map[..64 << 10]));
    }
}
