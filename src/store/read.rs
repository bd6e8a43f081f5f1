//! The read path: a committed object opened under a lease, streamed chunk
//! by chunk, every chunk checked against its checksum before a byte of it
//! is handed out.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use super::STREAM_CHUNK;
use super::backend::ObjectRead;
use super::sums::Sums;
use super::{Entry, Store};
use crate::error::{Error, Result};

/// Keeps an object from eviction while held.
pub struct Lease {
    pub(super) store: Store,
    pub(super) digest: String,
    /// Which copy of the object it holds (the store's clock when that copy
    /// came into memory): a copy dropped and stored again is a new one,
    /// which a reader of the old one neither releases nor drops.
    pub(super) born: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.store.release(&self.digest, self.born);
    }
}

/// A committed object opened for reading.
pub struct StoredObject {
    pub entry: Entry,
    pub(super) object: Arc<dyn ObjectRead>,
    /// Its block checksums: every object is opened with them (rebuilt
    /// from a whole read that matched its sha256 where they were missing
    /// or did not fit), so no read is ever served unchecked.
    pub(super) sums: Arc<Sums>,
    pub(super) lease: Lease,
    /// Read from a bucket's local tier (a mismatch drops the copy only).
    pub(super) tiered: bool,
}

/// The windows a read of `start..end` (of an object of `size` bytes)
/// goes through: at most [`STREAM_CHUNK`] each, on the stream grid, their
/// ends widened to whole checksum blocks of `unit` bytes (so each window
/// can be checked) and no further (a range reads little beyond itself).
fn windows(start: u64, end: u64, size: u64, unit: u64) -> Vec<(u64, u64)> {
    let stream = STREAM_CHUNK as u64;
    let end = end.min(size);
    let mut v = Vec::new();
    if start >= end {
        return v;
    }
    let mut pos = start - start % unit;
    let last = end.div_ceil(unit).saturating_mul(unit).min(size);
    while pos < last {
        let grid = (pos - pos % stream).saturating_add(stream);
        let wend = grid.min(last);
        v.push((pos, wend));
        pos = wend;
    }
    v
}

/// What checking a read takes: the store (to drop a rotten object), the
/// object and its checksums.
struct Check<'a> {
    store: &'a Store,
    digest: &'a str,
    born: u64,
    object: &'a dyn ObjectRead,
    sums: &'a Sums,
    tiered: bool,
}

impl Check<'_> {
    /// Bytes `from..to` of the object, every checksum block in them
    /// checked (blocking). `from` is block-aligned; `to` is too, or the
    /// object's end.
    fn window(&self, from: u64, to: u64) -> io::Result<Bytes> {
        let b = self.object.read_chunk(from, (to - from) as usize)?;
        self.blocks(from, to, b).map(|(b, _)| b)
    }

    /// Check the bytes `b` of `from..to` against their checksum blocks: a
    /// mismatch drops the object (or rewrites rotten checksums) and is
    /// `Err` unless the bytes match the checksums computed afresh (then
    /// handed back with the bytes, for the rest of the read).
    fn blocks(&self, from: u64, to: u64, b: Bytes) -> io::Result<(Bytes, Option<Sums>)> {
        let mut fresh_sums: Option<Sums> = None;
        {
            let s = self.sums;
            let bs = s.chunk() as u64;
            // The checksums computed afresh after a mismatch, for the rest.
            let mut at = from;
            while at < to {
                let n = bs.min(to - at);
                let block = at / bs;
                let off = (at - from) as usize;
                let data = &b[off..off + n as usize];
                if !fresh_sums.as_ref().unwrap_or(s).check(block as usize, data) {
                    if self.tiered {
                        return Err(self.store.tier_mismatch(self.digest, block));
                    }
                    // Either the checksums rotted (the object hashes right:
                    // they are rewritten) or these bytes did: they go out only
                    // if they match the checksums computed afresh.
                    let fresh =
                        self.store
                            .chunk_mismatch(self.digest, self.born, self.object, block)?;
                    if fresh.chunk() as u64 != bs || !fresh.check(block as usize, data) {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("chunk {block} of sha256:{} was read wrong", self.digest),
                        ));
                    }
                    fresh_sums = Some(fresh);
                }
                at += n;
            }
        }
        Ok((b, fresh_sums))
    }
}

/// The checksum block size reads align to.
fn unit_of(sums: &Sums) -> u64 {
    (sums.chunk() as u64).max(1)
}

/// What a stream asks of the store when a block fails its check or a
/// read fails (on a blocking thread): one per stream, shared by its read
/// paths; it holds the lease as long as the stream lives.
struct ReadVerdict {
    object: Arc<dyn ObjectRead>,
    sums: Arc<Sums>,
    lease: Lease,
    tiered: bool,
}

impl ReadVerdict {
    /// [`Check::blocks`] of `b` (`from..to`) against `sums` (the stream's
    /// own, or the ones rewritten during it); a failure is told to the
    /// store ([`Store::read_failed`]).
    fn recheck(
        &self,
        sums: &Sums,
        from: u64,
        to: u64,
        b: io::Result<Bytes>,
    ) -> io::Result<(Bytes, Option<Sums>)> {
        let check = Check {
            store: &self.lease.store,
            digest: &self.lease.digest,
            born: self.lease.born,
            object: &*self.object,
            sums,
            tiered: self.tiered,
        };
        let r = b.and_then(|b| check.blocks(from, to, b));
        if let Err(e) = &r {
            self.lease
                .store
                .read_failed(&self.lease.digest, self.lease.born, e, self.tiered);
        }
        r
    }
}

impl super::pieces::Verdict for ReadVerdict {
    fn mismatch(&self, from: u64, to: u64, b: Bytes) -> io::Result<Bytes> {
        self.recheck(&self.sums, from, to, Ok(b)).map(|(b, _)| b)
    }

    fn failed(&self, e: &io::Error) {
        self.lease
            .store
            .read_failed(&self.lease.digest, self.lease.born, e, self.tiered);
    }
}

/// Bytes handed out per step of a local file's read, at most: each piece
/// is read into the stream's own buffer, its checksum blocks checked there
/// on the async worker, and that buffer sent, so the bytes checked are the
/// bytes sent and the socket copies from a buffer still in the CPU cache (a
/// piece fits in a core's L2, 512 KiB here). Measured on a 2-core machine
/// (`docs/performance.md`).
pub const SEND_PIECE: usize = 256 << 10;

/// The first piece of a stream, and every piece of a slow one: a client
/// that takes a piece slower than [`FAST_READER`] gets pieces of this size,
/// so a connection holds little while its socket drains (400 slow readers
/// in tens of MiB, not a [`SEND_PIECE`] each); a faster one's pieces double
/// up to [`SEND_PIECE`].
pub const FIRST_PIECE: usize = 64 << 10;

/// Bytes a second a client must take its pieces at for them to grow.
const FAST_READER: f64 = 2.0 * 1024.0 * 1024.0;

/// Bytes all streams together may hold in pieces larger than
/// [`FIRST_PIECE`] (handed out and not yet dropped by the socket's
/// writer); beyond it a stream's pieces stay at [`FIRST_PIECE`], so
/// hundreds of readers whose sockets stopped draining hold tens of MiB at
/// most.
const LARGE_PIECES: usize = 48 << 20;

/// Bytes held now in pieces larger than [`FIRST_PIECE`].
static LARGE_HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A piece's buffer; one larger than [`FIRST_PIECE`] gives its share of
/// [`LARGE_PIECES`] back when the last handle on it is dropped.
struct PieceBuf {
    buf: Vec<u8>,
    large: usize,
}

impl AsRef<[u8]> for PieceBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for PieceBuf {
    fn drop(&mut self) {
        if self.large > 0 {
            LARGE_HELD.fetch_sub(self.large, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Take `n` bytes of [`LARGE_PIECES`] for a piece; `false` when that
/// would go over it.
fn take_large(n: usize) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let mut held = LARGE_HELD.load(Relaxed);
    loop {
        if held + n > LARGE_PIECES {
            return false;
        }
        match LARGE_HELD.compare_exchange_weak(held, held + n, Relaxed, Relaxed) {
            Ok(_) => return true,
            Err(h) => held = h,
        }
    }
}

/// The next piece's size after a piece of `piece` bytes (`n` of them handed
/// out) was taken in `took`: doubled (up to [`SEND_PIECE`]) for a client
/// at [`FAST_READER`] or faster, back to [`FIRST_PIECE`] for a slower one.
fn next_piece(piece: usize, n: usize, took: std::time::Duration) -> usize {
    if n as f64 >= FAST_READER * took.as_secs_f64() {
        (piece * 2).min(SEND_PIECE)
    } else {
        FIRST_PIECE
    }
}

/// A read of a local file ([`ObjectRead::file`]), piece by piece from the
/// checksum block holding `start` to the one holding `end - 1`: each
/// piece copied into the stream's buffer from the page cache on the async
/// worker when the page cache holds it (`RWF_NOWAIT`: never a wait on the
/// disk there), else on a blocking thread; then its checksum blocks
/// checked in that buffer and the buffer sent, [`FIRST_PIECE`] to
/// [`SEND_PIECE`] at a time (by the client's pace and the budget for large
/// pieces); a last piece shorter than a quarter piece joins the one before. A
/// mismatch is handled on a blocking thread ([`Check::blocks`]: the object
/// dropped, or its checksums rewritten) and ends the stream with an error
/// unless the bytes prove right; a file shorter than its entry (truncated
/// under the store) ends it too, and drops the object.
struct FileRead {
    object: Arc<dyn ObjectRead>,
    /// The size of the next piece, and when the last one was handed out.
    piece: usize,
    handed: Option<(std::time::Instant, usize)>,
    verdict: Arc<ReadVerdict>,
    /// The checksums the next piece is checked against (the verdict's,
    /// until a mismatch proved them rotten and they were rewritten).
    sums: Arc<Sums>,
    /// The bytes asked for.
    start: u64,
    end: u64,
    /// The next byte to read (block-aligned), and where reading ends (the
    /// end of the block holding `end - 1`).
    at: u64,
    last: u64,
}

impl FileRead {
    fn new(
        object: Arc<dyn ObjectRead>,
        size: u64,
        verdict: Arc<ReadVerdict>,
        start: u64,
        end: u64,
    ) -> FileRead {
        let end = end.min(size);
        let sums = verdict.sums.clone();
        let unit = unit_of(&sums);
        let (at, last) = if start < end {
            (
                start - start % unit,
                end.div_ceil(unit).saturating_mul(unit).min(size),
            )
        } else {
            (0, 0)
        };
        FileRead {
            object,
            piece: FIRST_PIECE,
            handed: None,
            verdict,
            sums,
            start,
            end,
            at,
            last,
        }
    }

    fn stream(self) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
        futures::stream::unfold(Some(self), |state| async move {
            let mut r = state?;
            match r.next().await {
                Ok(Some(b)) => Some((Ok(b), Some(r))),
                Ok(None) => None,
                // The stream ends after its first error (the response is cut there).
                Err(e) => Some((Err(e), None)),
            }
        })
    }

    /// The next checked piece within `start..end`; `None` at the end.
    async fn next(&mut self) -> io::Result<Option<Bytes>> {
        if let Some((at, n)) = self.handed.take() {
            // The client's pace on the last piece: hyper asks for the next
            // once the last is nearly written to the socket.
            self.piece = next_piece(self.piece, n, at.elapsed());
        }
        while self.at < self.last {
            let unit = unit_of(&self.sums);
            let left = self.last - self.at;
            let size = |piece: usize| {
                let want = (piece as u64).max(unit) / unit * unit;
                if left <= want + want / 4 { left } else { want }
            };
            // A piece over the first size takes its share of the budget for
            // large pieces, or is cut back to the first size.
            let mut n = size(self.piece);
            let large = n > FIRST_PIECE as u64 && take_large(n as usize);
            if n > FIRST_PIECE as u64 && !large {
                n = size(FIRST_PIECE);
            }
            let (from, to) = (self.at, self.at + n);
            self.at = to;
            let b = match self.read(from, n as usize, large).await {
                Ok(b) => b,
                Err(e) => {
                    let v = self.verdict.clone();
                    let e2 = io::Error::new(e.kind(), e.to_string());
                    let _ = tokio::task::spawn_blocking(move || {
                        super::pieces::Verdict::failed(&*v, &e2)
                    })
                    .await;
                    return Err(e);
                }
            };
            let b = self.check(from, to, b).await?;
            let (a, z) = (self.start.max(from), self.end.min(to));
            if a < z {
                self.handed = Some((std::time::Instant::now(), (z - a) as usize));
                return Ok(Some(b.slice((a - from) as usize..(z - from) as usize)));
            }
        }
        Ok(None)
    }

    /// Bytes `from..from + n` of the file in a buffer of their own (`large`:
    /// its share of [`LARGE_PIECES`] taken): what the page cache holds
    /// copied there on the async worker, the rest read on a blocking thread.
    async fn read(&mut self, from: u64, n: usize, large: bool) -> io::Result<Bytes> {
        let large = if large { n } else { 0 };
        let mut piece = PieceBuf {
            buf: Vec::with_capacity(n),
            large,
        };
        if !self.object.read_ready(&mut piece.buf, from, n)? {
            let object = self.object.clone();
            piece = tokio::task::spawn_blocking(move || {
                object.read_rest(&mut piece.buf, from, n).map(|()| piece)
            })
            .await
            .map_err(io::Error::other)??;
        }
        Ok(Bytes::from_owner(piece))
    }

    /// Check the blocks of `from..to` (block-aligned, whole blocks or up to
    /// the object's end): inline while they match, else on a blocking
    /// thread, where a rotten object is dropped.
    async fn check(&mut self, from: u64, to: u64, b: Bytes) -> io::Result<Bytes> {
        let s = self.sums.clone();
        let bs = s.chunk();
        let first = (from / bs as u64) as usize;
        if b.chunks(bs)
            .enumerate()
            .all(|(i, blk)| s.check(first + i, blk))
        {
            return Ok(b);
        }
        let v = self.verdict.clone();
        let (b, fresh) = tokio::task::spawn_blocking(move || v.recheck(&s, from, to, Ok(b)))
            .await
            .map_err(io::Error::other)??;
        if let Some(f) = fresh {
            // The checksums were what rotted: the rewritten ones check the rest.
            self.sums = Arc::new(f);
        }
        Ok(b)
    }
}

impl StoredObject {
    /// The object's length in bytes.
    pub fn len(&self) -> u64 {
        self.entry.size
    }

    pub fn is_empty(&self) -> bool {
        self.entry.size == 0
    }

    /// Are its bytes read over a network (a bucket, not its local tier)?
    /// For metrics and `Cache-Status` only.
    pub fn reads_remote(&self) -> bool {
        self.object.remote()
    }

    /// Stream bytes `start..end` (end exclusive, within the object),
    /// holding the lease until the end, every checksum block of it checked
    /// before a byte of it is handed out: a mismatch (bit rot) drops the
    /// object from the store and ends the stream with an error, so the
    /// response is cut before its end and the next request fetches the
    /// object again.
    ///
    /// A local object is read from its open file, kept while the store
    /// holds the object, into the stream's own buffer ([`FileRead`]: from
    /// the page cache on the async worker, from the disk on a blocking
    /// thread), checked there and sent from there. A bucket's object is
    /// read as it arrives ([`ObjectRead::pieces`]) or window by window on
    /// blocking threads (one GET for the whole span). Memory stays bounded
    /// by the pieces in flight.
    pub fn stream(
        self,
        start: u64,
        end: u64,
    ) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
        let StoredObject {
            entry,
            object,
            sums,
            lease,
            tiered,
        } = self;
        let size = entry.size;
        let end = end.min(size);
        let wins = windows(start, end, size, unit_of(&sums));
        let verdict = Arc::new(ReadVerdict {
            object: object.clone(),
            sums: sums.clone(),
            lease,
            tiered,
        });
        // The bytes as they arrive through one request (a bucket's GET),
        // checked in place.
        if let (Some(&(from, _)), Some(&(_, to))) = (wins.first(), wins.last())
            && let Some(p) = object.pieces(from, to)
        {
            let s = super::pieces::checked(p, (from, to), (start, end), size, sums, verdict);
            return s.left_stream();
        }
        // Else piece by piece into the stream's own buffer (a file: from
        // the page cache on the async worker, else on a blocking thread).
        FileRead::new(object, size, verdict, start, end)
            .stream()
            .right_stream()
    }

    /// A blocking reader of the whole object, chunk-checked like
    /// [`StoredObject::stream`] (for `mirror export`).
    pub fn reader(self) -> impl io::Read + Send {
        ChunkReader {
            obj: self,
            pos: 0,
            buf: Bytes::new(),
        }
    }

    /// The whole object in memory, for small ones (manifests, schematics,
    /// lists): at most `max` bytes, and its sha256 checked against the
    /// digest it is stored under (a mismatch drops it: `Err`). Reads
    /// inline: meant for objects of a few KiB.
    pub fn read_small(self, max: u64) -> Result<Bytes> {
        if self.entry.size > max {
            return Err(Error::bad_input(format!(
                "stored object {} is {} bytes, more than the {max} expected",
                self.entry.key, self.entry.size
            )));
        }
        let buf = self
            .object
            .read_chunk(0, self.entry.size as usize)
            .map_err(|e| {
                let fault = self.lease.store.read_failed(
                    &self.entry.digest,
                    self.lease.born,
                    &e,
                    self.tiered,
                );
                match fault {
                    super::objects::Fault::Unreadable => Error::Unavailable(format!(
                        "reading {}: {e} (held, not readable now)",
                        self.entry.key
                    )),
                    super::objects::Fault::Dropped => {
                        Error::io(format!("reading {}", self.entry.key), e)
                    }
                }
            })?;
        let got = hex::encode(Sha256::digest(&buf));
        if got != self.entry.digest {
            let reason = format!("its bytes hash to sha256:{got}");
            if self.tiered {
                let _ = self.lease.store.tier_mismatch(&self.entry.digest, 0);
            } else {
                self.lease.store.quarantine_copy(
                    &self.entry.digest,
                    Some(self.lease.born),
                    &reason,
                );
            }
            return Err(Error::io(
                format!("stored object {}", self.entry.key),
                io::Error::new(io::ErrorKind::InvalidData, reason),
            ));
        }
        Ok(buf)
    }
}

struct ChunkReader {
    obj: StoredObject,
    pos: u64,
    buf: Bytes,
}

impl io::Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buf.is_empty() {
            let size = self.obj.entry.size;
            if self.pos >= size {
                return Ok(0);
            }
            let (from, to) = windows(self.pos, size, size, unit_of(&self.obj.sums))[0];
            let check = Check {
                store: &self.obj.lease.store,
                digest: &self.obj.lease.digest,
                born: self.obj.lease.born,
                object: &*self.obj.object,
                sums: &self.obj.sums,
                tiered: self.obj.tiered,
            };
            self.buf = check.window(from, to)?;
            self.pos += self.buf.len() as u64;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf = self.buf.slice(n..);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::{FIRST_PIECE, SEND_PIECE, next_piece, windows};
    use std::time::Duration;

    #[test]
    fn pieces_grow_for_a_fast_client_and_shrink_for_a_slow_one() {
        let ms = Duration::from_millis;
        // 64 KiB taken in 1 ms, then 128 KiB: doubled, up to the cap
        assert_eq!(next_piece(FIRST_PIECE, FIRST_PIECE, ms(1)), 2 * FIRST_PIECE);
        assert_eq!(
            next_piece(2 * FIRST_PIECE, 2 * FIRST_PIECE, ms(1)),
            SEND_PIECE
        );
        assert_eq!(next_piece(SEND_PIECE, SEND_PIECE, ms(100)), SEND_PIECE);
        // a 256 KiB piece taken in 200 ms (1.25 MiB/s): back to the first size
        assert_eq!(next_piece(SEND_PIECE, SEND_PIECE, ms(200)), FIRST_PIECE);
        // a client reading a KiB now and then
        assert_eq!(next_piece(FIRST_PIECE, FIRST_PIECE, ms(500)), FIRST_PIECE);
    }

    const M: u64 = 1 << 20;
    const K64: u64 = 64 << 10;

    #[test]
    fn windows_follow_the_stream_grid_and_cover_only_whole_blocks() {
        // the whole object: 1 MiB windows on the grid, the last one short
        assert_eq!(
            windows(0, 2 * M + 5, 2 * M + 5, K64),
            [(0, M), (M, 2 * M), (2 * M, 2 * M + 5)]
        );
        // a 1 MiB range off the grid: two windows, widened to whole 64 KiB
        // blocks only, not to whole 1 MiB windows
        let s = M / 2 + 1000;
        let w = windows(s, s + M, 4 * M, K64);
        assert_eq!(w, [(M / 2, M), (M, M + M / 2 + K64)]);
        let read: u64 = w.iter().map(|(a, b)| b - a).sum();
        assert!(read <= M + 2 * K64, "{read}");
        // a byte
        assert_eq!(windows(10, 11, 4 * M, K64), [(0, K64)]);
        // at the end of the object the last block is short
        assert_eq!(
            windows(3 * M + 10, 4 * M + 3, 4 * M + 3, K64),
            [(3 * M, 4 * M), (4 * M, 4 * M + 3)]
        );
        assert!(windows(5, 5, 10, K64).is_empty());
        // 1 MiB blocks (an older checksum file): whole windows
        assert_eq!(windows(s, s + M, 4 * M, M), [(0, M), (M, 2 * M)]);
    }
}
