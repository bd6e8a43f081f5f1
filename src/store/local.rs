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

use super::backend::{Backend, Kind, Listed, LockGuard, ObjectRead, ReadBuf};

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
        fs::create_dir_all(layout.root()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("creating {}: {e}", layout.root().display()),
            )
        })?;
        // The store's own folders are its own: one that is a link would
        // lead its sweeps and writes outside the store, so each is made
        // (parent first) and looked at without following a link (the root
        // itself may be a link: that is where the operator put the store).
        for p in layout.own_dirs() {
            let made = fs::create_dir(&p);
            let t = fs::symlink_metadata(&p).map(|m| m.file_type());
            match (made, t) {
                (_, Ok(t)) if t.is_dir() => {}
                (_, Ok(t)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} is a {}, not a folder of the store's own; refused",
                            p.display(),
                            kind(&t)
                        ),
                    ));
                }
                (Err(e), _) | (_, Err(e)) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("creating {}: {e}", p.display()),
                    ));
                }
            }
        }
        let lock_path = layout.lock_file();
        let lock = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a link, not the store's own lock file; refused",
                        lock_path.display()
                    ),
                ),
                _ => io::Error::new(e.kind(), format!("opening {}: {e}", lock_path.display())),
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

/// A committed object file, read with `pread` into buffers of the
/// reader's own (never mapped: a byte the check saw is the byte sent, and
/// a file truncated under the store is a short read, not a SIGBUS). The
/// store keeps the handle while it holds the object
/// ([`ObjectRead::keep_open`]), so a warm open is memory work; what the
/// page cache holds is read without a wait ([`ObjectRead::read_ready`]).
pub(super) struct LocalObject {
    file: File,
    len: u64,
    /// Where it was opened: a later open of that name that finds another
    /// file means the object was replaced ([`ObjectRead::replaced`]).
    path: PathBuf,
}

impl ObjectRead for LocalObject {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_chunk(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        read_at(&self.file, pos, len)
    }

    fn read_ready(&self, buf: &mut ReadBuf, pos: u64, want: usize) -> io::Result<bool> {
        read_cached_at(&self.file, buf, pos, want)
    }

    fn read_rest(&self, buf: &mut ReadBuf, pos: u64, want: usize) -> io::Result<()> {
        read_exact_at(&self.file, buf, pos, want)
    }

    fn keep_open(&self) -> bool {
        true
    }

    fn replaced(&self) -> bool {
        let (Ok(h), Ok(now)) = (self.file.metadata(), fs::symlink_metadata(&self.path)) else {
            return false;
        };
        (h.dev(), h.ino()) != (now.dev(), now.ino())
    }
}

fn short() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "stored object is shorter than its entry",
    )
}

/// One `preadv2` of up to `want - buf.len()` bytes at `pos + buf.len()`
/// into `buf` (`flags`: empty, or `NOWAIT`); the bytes read (0 at the end
/// of the file).
fn pread_once(
    file: &File,
    buf: &mut ReadBuf,
    pos: u64,
    want: usize,
    flags: rustix::io::ReadWriteFlags,
) -> io::Result<usize> {
    let have = buf.len();
    if have >= want {
        return Ok(0);
    }
    let off = i64::try_from(pos + have as u64).map_err(|_| short())? as u64;
    // The safe call reads into initialized memory: the buffer's own
    // (zeroed only the first time it is used, [`ReadBuf::room`]).
    loop {
        let r = rustix::io::preadv2(file, &mut [io::IoSliceMut::new(buf.room(want))], off, flags);
        match r {
            Ok(n) => {
                buf.advance(n);
                return Ok(n);
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Fill `buf` (empty or partly filled) to `want` bytes with the file's
/// bytes from `pos` (blocking: it may wait on the disk). A file ending
/// first is `UnexpectedEof`.
pub(super) fn read_exact_at(
    file: &File,
    buf: &mut ReadBuf,
    pos: u64,
    want: usize,
) -> io::Result<()> {
    while buf.len() < want {
        if pread_once(file, buf, pos, want, rustix::io::ReadWriteFlags::empty())? == 0 {
            return Err(short());
        }
    }
    Ok(())
}

/// `len` bytes of `file` at `pos` (blocking); a file ending first is
/// `UnexpectedEof`. (A fill's readers read its spool file with it too.)
pub fn read_at(file: &File, pos: u64, len: usize) -> io::Result<Bytes> {
    let mut buf = ReadBuf::default();
    read_exact_at(file, &mut buf, pos, len)?;
    Ok(Bytes::from(buf.into_filled()))
}

/// Fill `buf` toward `want` bytes from `pos` with what the page cache
/// holds, never waiting on the disk (`RWF_NOWAIT`: an async worker may
/// call it): `Ok(true)` when it is full, `Ok(false)` when the rest must be
/// read on a blocking thread ([`read_exact_at`]: a page not in memory, the
/// file's end, or a kernel or filesystem without `RWF_NOWAIT`).
pub(super) fn read_cached_at(
    file: &File,
    buf: &mut ReadBuf,
    pos: u64,
    want: usize,
) -> io::Result<bool> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return Ok(buf.len() >= want);
    }
    while buf.len() < want {
        match pread_once(file, buf, pos, want, rustix::io::ReadWriteFlags::NOWAIT) {
            Ok(0) => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) | Some(libc::EINVAL)
                ) =>
            {
                UNSUPPORTED.store(true, Ordering::Relaxed);
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

impl Backend for LocalDir {
    fn describe(&self) -> String {
        self.layout.root().display().to_string()
    }

    fn kind(&self) -> Kind {
        Kind::Dir
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

    fn object_len(&self, digest: &str) -> io::Result<Option<u64>> {
        match fs::symlink_metadata(self.layout.object(digest)) {
            Ok(md) => Ok(md.is_file().then_some(md.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn object_age(&self, digest: &str) -> io::Result<Option<Duration>> {
        match fs::symlink_metadata(self.layout.object(digest)) {
            Ok(md) if md.is_file() => Ok(Some(md.modified()?.elapsed().unwrap_or_default())),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn open_object(&self, digest: &str, _len: u64) -> io::Result<Box<dyn ObjectRead>> {
        open_object_file(&self.layout.object(digest))
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

    fn delete_object(&self, digest: &str) -> io::Result<()> {
        remove_if_there(&self.layout.object(digest))?;
        remove_if_there(&self.layout.sums_file(digest))
    }

    fn list_entries(&self) -> io::Result<Vec<Listed>> {
        let mut v = Vec::new();
        let folders: [(PathBuf, NameCheck); 2] = [
            (self.layout.index(), is_index_name),
            (self.layout.pins(), super::names::is_pin_name),
        ];
        for (dir, ours) in folders {
            for e in read_dir(&dir)? {
                let name = e.file_name().to_string_lossy().into_owned();
                if !ours(&name) || !regular(&e) {
                    stranger(&e);
                    continue;
                }
                v.push(Listed {
                    name,
                    token: e.ino(),
                });
            }
        }
        Ok(v)
    }

    fn read_entry(&self, name: &str) -> io::Result<Option<(Vec<u8>, u64)>> {
        use std::io::Read;
        let mut f = match open_regular(&self.layout.record(name)) {
            Ok(f) => f,
            // No entry, or a name of the store's shape that is not a file
            // of its own (a link, a FIFO): not an entry.
            Err(e) if not_an_entry(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let ino = f.metadata()?.ino();
        let mut b = Vec::new();
        f.read_to_end(&mut b)?;
        Ok(Some((b, ino)))
    }

    fn write_entry(&self, name: &str, body: &[u8]) -> io::Result<u64> {
        write_atomic(&self.layout, "index-", &self.layout.record(name), body)
    }

    fn delete_entry(&self, name: &str) -> io::Result<()> {
        remove_if_there(&self.layout.record(name))
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

/// Remove `path`: `Ok` when it is gone, whether or not it was there.
fn remove_if_there(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
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

    /// The folders under the root the store owns, each after its parent.
    fn own_dirs(&self) -> [PathBuf; 6] {
        [
            self.root.join("objects"),
            self.objects(),
            self.index(),
            self.pins(),
            self.sums(),
            self.tmp(),
        ]
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

    /// Pin records (`store::pins`), apart from the entries.
    pub(super) fn pins(&self) -> PathBuf {
        self.root.join("pins")
    }

    /// Where the index record `name` is: an entry in `index/`, a pin
    /// record in `pins/`.
    pub(super) fn record(&self, name: &str) -> PathBuf {
        if super::names::is_pin_name(name) {
            self.pins().join(name)
        } else {
            self.index().join(name)
        }
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

pub(super) use super::names::is_index_name;
pub(super) use crate::text::is_hex64;

/// Whether a name in one of the index's folders is of the store's shape.
pub(super) type NameCheck = fn(&str) -> bool;

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

/// What [`open_regular`] answers for a name that holds no file of the
/// store's: nothing there, a link (`O_NOFOLLOW`), or not a regular file.
fn not_an_entry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput
    ) || e.raw_os_error() == Some(libc::ELOOP)
}

/// A regular file of the store's own, opened for reads.
pub(super) fn open_object_file(path: &Path) -> io::Result<Box<dyn ObjectRead>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    Ok(Box::new(LocalObject {
        file,
        len,
        path: path.to_path_buf(),
    }))
}

/// A spool file this process created (a fill in progress), opened for its
/// readers: read at an offset while it grows.
pub(super) fn open_spool(path: &Path) -> io::Result<Box<dyn ObjectRead>> {
    let file = File::open(path)?;
    Ok(Box::new(LocalObject {
        file,
        len: 0,
        path: path.to_path_buf(),
    }))
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

    /// Pages not in memory are left to a blocking read (`read_cached_at`
    /// never waits on the disk), which completes the same bytes; a file
    /// truncated under an open object is a short read (`UnexpectedEof`),
    /// never a crash.
    #[test]
    fn cached_reads_leave_the_disk_to_blocking_ones_and_a_truncated_file_is_a_short_read() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o");
        let len = 1 << 20;
        let body: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut f = File::create(&path).unwrap();
        f.write_all(&body).unwrap();
        f.sync_all().unwrap();
        // Drop the file's clean pages from the cache.
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let o = open_object_file(&path).unwrap();
        // (a buffer used before: what it held is never read back)
        let mut buf = ReadBuf::reuse(vec![0xee; 2 << 20]);
        // (a filesystem that keeps every page in memory fills it at once)
        if !o.read_ready(&mut buf, 4096, len - 4096).unwrap() {
            o.read_rest(&mut buf, 4096, len - 4096).unwrap();
        }
        assert_eq!(buf.filled(), &body[4096..]);
        let mut again = ReadBuf::reuse(buf.into_storage());
        assert!(again.is_empty());
        o.read_rest(&mut again, 0, 100).unwrap();
        assert_eq!(again.filled(), &body[..100]);
        assert_eq!(&o.read_chunk(10, 100).unwrap()[..], &body[10..110]);
        // truncated under the open object: the tail is a short read
        f.set_len(100 << 10).unwrap();
        let mut buf = ReadBuf::default();
        assert!(!o.read_ready(&mut buf, 64 << 10, 512 << 10).unwrap());
        let e = o.read_rest(&mut buf, 64 << 10, 512 << 10).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        assert_eq!(
            o.read_chunk(512 << 10, 10).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(&o.read_chunk(0, 64 << 10).unwrap()[..], &body[..64 << 10]);
    }
}
