//! Where things live under the cache dir, and how the store touches the
//! filesystem there: only regular files it names itself, opened without
//! following links and without blocking on FIFOs or devices.
//!
//! - `objects/sha256/<hex>`: object bytes, named by their sha256;
//! - `sums/<hex>`: the object's per-chunk checksums ([`super::sums`]);
//! - `index/<sha256(key)>.json`: one entry per key (a key never becomes a path);
//! - `tmp/{fill,index,sums}-<pid>-<random>`: writes in progress, each
//!   holding an exclusive `flock` for its whole life, so another process
//!   (in any PID namespace) can tell a live write from a leftover;
//! - `lock`: the store lock, held (`flock`, exclusive) around every write
//!   of an index entry and every deletion, by every process on the store.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The directory layout of one store.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    root: PathBuf,
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

    pub(super) fn index_file(&self, key: &str) -> PathBuf {
        self.index().join(index_name(key))
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

pub(super) fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

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
