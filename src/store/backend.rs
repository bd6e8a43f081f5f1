//! What the store needs from the place that keeps its bytes: the seam a
//! directory and a bucket plug into. [`super::Store`] keeps the policy
//! (index, leases, pins, eviction, checks, quarantine); a backend keeps
//! objects, index entries and checksums, and must guarantee:
//!
//! - **whole or absent**: an object is visible only whole, and an entry
//!   written names an object that is there;
//! - **change tokens**: each entry's token changes whenever it is
//!   rewritten (an inode, an ETag), so a process sees others' writes before
//!   it deletes anything;
//! - **absent is not unknown**: a read answers held (`Ok(Some)`), absent
//!   (`Ok(None)`, only the backend's own "not found") or unavailable (`Err`);
//! - **one lock**: `lock` excludes every process on the store while entries
//!   are written and objects deleted;
//! - **names it owns**: it removes only what it wrote.
//!
//! Every method blocks: the store calls them only from blocking threads,
//! holding no mutex, and a remote backend bounds every call. Two never
//! block: [`ObjectRead::pieces`] (a stream polled by its reader) and
//! [`ObjectRead::read_ready`] (what an object has at hand, e.g. the page
//! cache). No hook is for one kind of backend only: what differs is a
//! capability each answers for itself ([`Backend::stage_object`],
//! [`ObjectRead`]); [`Kind`] is for messages and metrics only.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::sums::Sums;

/// The buffer a piece of an object is read into: its first [`ReadBuf::len`]
/// bytes are read; the rest of its memory is what the next read writes
/// over. A buffer used before (`store::bufs` keeps pieces' buffers for the
/// next reads) is not zeroed again: the bytes past `len` are never handed
/// out. (The safe `preadv2` reads into initialized memory only; zeroing a
/// fresh 256 KiB piece before each read was about 5% of a warm GET's CPU.)
#[derive(Default)]
pub struct ReadBuf {
    bytes: Vec<u8>,
    filled: usize,
}

impl ReadBuf {
    /// An empty buffer over `bytes` (their contents are never read).
    pub fn reuse(bytes: Vec<u8>) -> ReadBuf {
        ReadBuf { bytes, filled: 0 }
    }

    /// The bytes read so far.
    pub fn len(&self) -> usize {
        self.filled
    }

    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// The room for bytes `len()..want` (empty when `want <= len()`),
    /// zeroed only where this buffer's memory never held bytes.
    pub fn room(&mut self, want: usize) -> &mut [u8] {
        if self.bytes.len() < want {
            self.bytes.resize(want, 0);
        }
        let at = self.filled.min(want);
        &mut self.bytes[at..want]
    }

    /// `n` more bytes of [`ReadBuf::room`] were read.
    pub fn advance(&mut self, n: usize) {
        self.filled += n;
        assert!(self.filled <= self.bytes.len(), "read past the room");
    }

    pub fn extend_from_slice(&mut self, b: &[u8]) {
        let end = self.filled + b.len();
        self.room(end).copy_from_slice(b);
        self.filled = end;
    }

    /// The bytes read.
    pub fn filled(&self) -> &[u8] {
        &self.bytes[..self.filled]
    }

    /// The bytes read, as their own vector.
    pub fn into_filled(mut self) -> Vec<u8> {
        self.bytes.truncate(self.filled);
        self.bytes
    }

    /// The buffer's memory, for another read ([`ReadBuf::reuse`]).
    pub fn into_storage(self) -> Vec<u8> {
        self.bytes
    }
}

/// An object opened for reading.
pub trait ObjectRead: Send + Sync {
    /// Its length in bytes.
    fn len(&self) -> u64;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` bytes at `pos` (within the object).
    fn read_chunk(&self, pos: u64, len: usize) -> io::Result<Bytes>;

    /// Bytes `from..to` read in order through one request, on a blocking
    /// thread (a remote store's one GET instead of a request per chunk);
    /// `None` (the default): read chunk by chunk.
    fn span(&self, _from: u64, _to: u64) -> Option<Box<dyn Span>> {
        None
    }

    /// Bytes `from..to` in order through one request, as they arrive, in
    /// pieces of any size, for a response served from a remote store: the
    /// request is async I/O polled by the reader, its read-ahead the
    /// socket's buffer, so polling this never blocks (an async worker may); every
    /// wait is bounded by the backend, and an end before `to` is an error.
    /// `None` (the default): a stream reads on blocking threads
    /// ([`ObjectRead::span`], or chunk by chunk).
    fn pieces(&self, _from: u64, _to: u64) -> Option<Pieces> {
        None
    }

    /// Fill `buf` (empty or partly filled) toward `want` bytes of the
    /// object from `pos` with what the backend has at hand without a wait
    /// (a local file: what the page cache holds, `RWF_NOWAIT`), so an
    /// async worker may call it: `Ok(true)` when `buf` is full, `Ok(false)`
    /// when the rest must come from [`ObjectRead::read_rest`] on a blocking
    /// thread. The default has nothing at hand.
    fn read_ready(&self, _buf: &mut ReadBuf, _pos: u64, _want: usize) -> io::Result<bool> {
        Ok(false)
    }

    /// Fill `buf` (empty or partly filled) to `want` bytes of the object
    /// from `pos` (blocking); an object ending first is `UnexpectedEof`.
    /// The bytes land in the reader's own buffer: never a map, so no byte
    /// changed or cut after the check goes out.
    fn read_rest(&self, buf: &mut ReadBuf, pos: u64, want: usize) -> io::Result<()> {
        let have = buf.len();
        if have < want {
            let b = self.read_chunk(pos + have as u64, want - have)?;
            buf.extend_from_slice(&b);
        }
        Ok(())
    }

    /// Is this handle worth keeping while the store holds the object (an
    /// open descriptor: the next open is then memory work)? The default,
    /// a handle that costs nothing to make again, is not.
    fn keep_open(&self) -> bool {
        false
    }

    /// Are these bytes no longer the ones the backend names (another
    /// process dropped the object and stored a fresh copy under its name
    /// while this handle was open)? The default: a handle always reads
    /// what the backend names now.
    fn replaced(&self) -> bool {
        false
    }

    /// Is it a local copy the backend keeps beside the object (a bucket's
    /// local tier), readable while the backend does not answer? A fault in
    /// a copy drops only the copy ([`Backend::drop_copy`]); the object is
    /// read from the backend next.
    fn is_copy(&self) -> bool {
        false
    }
}

/// An object's bytes as they arrive (see [`ObjectRead::pieces`]).
pub type Pieces = std::pin::Pin<Box<dyn futures::Stream<Item = io::Result<Bytes>> + Send>>;

/// Bytes of an object read in order (see [`ObjectRead::span`]).
pub trait Span: Send {
    /// The next `n` bytes. Blocks; every wait is bounded by the backend,
    /// and an end before `n` bytes is an error.
    fn next_bytes(&mut self, n: usize) -> io::Result<Bytes>;
}

/// The second half of a put ([`Backend::stage_object`]), run under the
/// store lock.
pub type Publish<'a> = Box<dyn FnOnce() -> io::Result<bool> + Send + 'a>;

/// What kind of place a backend is: for messages and metrics only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory on this machine (`--cache-dir`).
    Dir,
    /// A bucket reached over the network (`--store s3://`).
    Bucket,
}

/// One index entry as listed: its name and change token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub token: u64,
}

/// What one abort of unfinished uploads did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Aborted {
    /// Unfinished multipart uploads aborted.
    pub uploads: u64,
    /// Stale ones whose abort the backend did not confirm (tried again at
    /// the next sweep).
    pub failed: u64,
}

/// Anything a lock guard can be.
pub trait Held {}
impl<T> Held for T {}

/// Held while the store lock is taken; dropping it releases the lock.
pub type LockGuard<'a> = Box<dyn Held + 'a>;

/// Where a store keeps its objects, entries and checksums.
pub trait Backend: Send + Sync + 'static {
    /// For logs and the status page (`/var/cache/talos-gen`, `s3://bucket/prefix`).
    fn describe(&self) -> String;
    /// What kind of place it is, for messages and metrics only (never a
    /// branch of the store's read or commit logic).
    fn kind(&self) -> Kind;

    /// Take the store lock (every process on the store).
    fn lock(&self) -> io::Result<LockGuard<'_>>;

    /// A new spool file for a write in progress: local (readers of a
    /// growing fill read it), locked for as long as it is open.
    fn spool(&self) -> io::Result<(PathBuf, File)>;
    /// Remove spool files no process holds (start-up).
    fn clean_spool(&self);
    /// Abort the unfinished uploads of objects started more than
    /// `older_than` ago (a bucket's multipart uploads a killed process
    /// left). The default: a backend without such uploads has none.
    fn abort_stale_uploads(&self, older_than: Duration) -> io::Result<Aborted> {
        let _ = older_than;
        Ok(Aborted::default())
    }

    /// Every object: digest -> length.
    fn list_objects(&self) -> io::Result<HashMap<String, u64>>;
    /// An object's length: `Ok(None)` when it is not there, `Err` when the
    /// backend did not answer (never taken for "not there").
    fn object_len(&self, digest: &str) -> io::Result<Option<u64>>;
    /// How long ago the object was written (orphans younger than a grace
    /// period may still be about to get their entry); `Ok(None)` when it
    /// is not there, `Err` when the backend did not answer.
    fn object_age(&self, digest: &str) -> io::Result<Option<Duration>>;
    /// Open an object of `len` bytes (the index knows it: objects are
    /// immutable, so a remote backend opens it without a round trip).
    fn open_object(&self, digest: &str, len: u64) -> io::Result<Box<dyn ObjectRead>>;
    /// Make the verified spool file the object `digest`, with its
    /// checksums; `Ok(true)` when the object was there already.
    fn put_object(&self, spool: &Path, file: File, digest: &str, sums: &[u8]) -> io::Result<bool>;
    /// The first half of a put, called before the store lock is taken:
    /// what is slow and needs no lock (an upload) happens here; the
    /// returned step, called under the store lock, makes the object
    /// visible (or checks that what was uploaded is still there, another
    /// process may have deleted it meanwhile) and answers as
    /// [`Backend::put_object`]. The default does all of it under the lock
    /// (a local rename).
    fn stage_object<'a>(
        &'a self,
        spool: &'a Path,
        file: File,
        digest: &'a str,
        sums: &'a [u8],
    ) -> io::Result<Publish<'a>> {
        Ok(Box::new(move || self.put_object(spool, file, digest, sums)))
    }
    /// Delete an object and its checksums: `Ok` when they are gone (or
    /// were never there), `Err` when the backend did not confirm it.
    fn delete_object(&self, digest: &str) -> io::Result<()>;

    fn list_entries(&self) -> io::Result<Vec<Listed>>;
    /// An entry's body and change token: `Ok(None)` when there is no such
    /// entry, `Err` when the backend did not answer (never taken for
    /// "no entry": a commit or a fetch decided on that would undo what
    /// another process wrote).
    fn read_entry(&self, name: &str) -> io::Result<Option<(Vec<u8>, u64)>>;
    /// Write (replace) an entry; its new change token.
    fn write_entry(&self, name: &str, body: &[u8]) -> io::Result<u64>;
    /// Delete an entry: `Ok` when it is gone (or was never there), `Err`
    /// when the backend did not confirm it.
    fn delete_entry(&self, name: &str) -> io::Result<()>;

    /// An object's checksums: `Ok(None)` when it has none, `Err` when the
    /// backend did not answer.
    fn read_sums(&self, digest: &str) -> io::Result<Option<Vec<u8>>>;
    fn write_sums(&self, digest: &str, body: &[u8]) -> io::Result<()>;

    /// Local copies a backend keeps of its objects (a bucket's local tier:
    /// [`Backend::open_object`] opens the copy when it holds one, and a put
    /// keeps the verified spool file as one): keep only those
    /// `keep(digest, size)` accepts (start-up: the objects the index
    /// names). A backend without copies has nothing to do.
    fn retain_copies(&self, _keep: &dyn Fn(&str, u64) -> bool) {}

    /// Does the backend hold a local copy of `digest` of `size` bytes,
    /// readable while it does not answer (memory only)?
    fn holds_copy(&self, _digest: &str, _size: u64) -> bool {
        false
    }

    /// The local copy of `digest` is short or rotten: drop it (the object
    /// stays; it is read from the backend next).
    fn drop_copy(&self, _digest: &str) {}

    /// `digest` was read from the backend itself (not a copy): a backend
    /// that keeps copies may make one now, in the background, checked
    /// against `sums` and hashed whole before it is used.
    fn read_through(&self, _digest: &str, _size: u64, _sums: Arc<Sums>) {}

    /// Is the backend reachable, answered within `limit` (`/readyz`)? A
    /// local directory always is.
    fn check(&self, _limit: Duration) -> io::Result<()> {
        Ok(())
    }

    /// The backend's own bound on one call (a bucket's: `--upstream-timeout`):
    /// a check that answers within it is an answer, however slow
    /// (`http::ops`' prober gives the store this long, not less). The
    /// default, for a backend whose calls do not wait on a network: 2 s.
    fn call_bound(&self) -> Duration {
        Duration::from_secs(2)
    }
}

/// A local directory with hooks, for tests that need a backend call to
/// stall, be counted or do nothing (a fake: a real backend cannot be made
/// to misbehave one call at a time).
#[cfg(test)]
pub(crate) struct Hooked {
    pub inner: super::LocalDir,
    /// The kind the store is told (a bucket's paths, on a directory).
    pub kind: Kind,
    /// Called with the call's name before every read of metadata: lengths,
    /// ages, listings, entries, checksums, the check.
    pub on_read: Box<dyn Fn(&'static str) + Send + Sync>,
    /// Answers `spool` in place of the directory's.
    #[allow(clippy::type_complexity)]
    pub spool: Option<Box<dyn Fn() -> io::Result<(PathBuf, File)> + Send + Sync>>,
    /// Deletes of objects do nothing (as an S3 delete that failed: the
    /// backend only logs it).
    pub refuse_deletes: bool,
    /// Opening an object's bytes fails as a bucket that did not answer
    /// (a timeout): the store holds it, nothing can be read of it.
    pub unanswered_opens: bool,
    /// The bound it says its calls have (`None`: the directory's).
    pub bound: Option<Duration>,
    /// How long its check takes to answer; one given less than that by its
    /// caller's limit fails at the limit, as a bucket's HEAD times out.
    pub check_takes: Option<Duration>,
    /// Entry writes and deletions fail as a bucket that did not answer
    /// (frozen at the first index write).
    pub unanswered_writes: bool,
    /// The store lock orders nothing (a bucket that ignores conditional
    /// writes, where a second process's lock is not excluded: `s3::lock`).
    pub no_lock: bool,
    /// Called with the record's name before every entry write (a test
    /// holds one there, as a slow network holds a PUT).
    pub on_write: Box<dyn Fn(&str) + Send + Sync>,
}

#[cfg(test)]
impl Hooked {
    pub fn new(dir: &Path) -> Hooked {
        Hooked {
            inner: super::LocalDir::open(dir.to_path_buf()).unwrap(),
            kind: Kind::Dir,
            on_read: Box::new(|_| {}),
            spool: None,
            refuse_deletes: false,
            unanswered_opens: false,
            bound: None,
            check_takes: None,
            unanswered_writes: false,
            no_lock: false,
            on_write: Box::new(|_| {}),
        }
    }
}

#[cfg(test)]
impl Hooked {
    /// What a bucket that did not answer says.
    fn silent() -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the bucket did not answer (a test's backend)",
        )
    }
}

#[cfg(test)]
impl Backend for Hooked {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn kind(&self) -> Kind {
        self.kind
    }
    fn lock(&self) -> io::Result<LockGuard<'_>> {
        if self.no_lock {
            return Ok(Box::new(()));
        }
        self.inner.lock()
    }
    fn spool(&self) -> io::Result<(PathBuf, File)> {
        match &self.spool {
            Some(f) => f(),
            None => self.inner.spool(),
        }
    }
    fn clean_spool(&self) {
        self.inner.clean_spool()
    }
    fn list_objects(&self) -> io::Result<HashMap<String, u64>> {
        (self.on_read)("list_objects");
        self.inner.list_objects()
    }
    fn object_len(&self, digest: &str) -> io::Result<Option<u64>> {
        (self.on_read)("object_len");
        self.inner.object_len(digest)
    }
    fn object_age(&self, digest: &str) -> io::Result<Option<Duration>> {
        (self.on_read)("object_age");
        self.inner.object_age(digest)
    }
    fn open_object(&self, digest: &str, len: u64) -> io::Result<Box<dyn ObjectRead>> {
        if self.unanswered_opens {
            return Err(Hooked::silent());
        }
        self.inner.open_object(digest, len)
    }
    fn put_object(&self, spool: &Path, file: File, digest: &str, sums: &[u8]) -> io::Result<bool> {
        self.inner.put_object(spool, file, digest, sums)
    }
    fn delete_object(&self, digest: &str) -> io::Result<()> {
        if self.refuse_deletes {
            return Err(io::Error::other("the delete failed (a test's backend)"));
        }
        self.inner.delete_object(digest)
    }
    fn list_entries(&self) -> io::Result<Vec<Listed>> {
        (self.on_read)("list_entries");
        self.inner.list_entries()
    }
    fn read_entry(&self, name: &str) -> io::Result<Option<(Vec<u8>, u64)>> {
        (self.on_read)("read_entry");
        self.inner.read_entry(name)
    }
    fn write_entry(&self, name: &str, body: &[u8]) -> io::Result<u64> {
        (self.on_write)(name);
        if self.unanswered_writes {
            return Err(Hooked::silent());
        }
        self.inner.write_entry(name, body)
    }
    fn delete_entry(&self, name: &str) -> io::Result<()> {
        if self.unanswered_writes {
            return Err(Hooked::silent());
        }
        self.inner.delete_entry(name)
    }
    fn read_sums(&self, digest: &str) -> io::Result<Option<Vec<u8>>> {
        (self.on_read)("read_sums");
        self.inner.read_sums(digest)
    }
    fn write_sums(&self, digest: &str, body: &[u8]) -> io::Result<()> {
        self.inner.write_sums(digest, body)
    }
    fn check(&self, limit: Duration) -> io::Result<()> {
        (self.on_read)("check");
        if let Some(takes) = self.check_takes {
            std::thread::sleep(takes.min(limit));
            if takes > limit {
                return Err(Hooked::silent());
            }
        }
        self.inner.check(limit)
    }
    fn call_bound(&self) -> Duration {
        self.bound.unwrap_or_else(|| self.inner.call_bound())
    }
}
