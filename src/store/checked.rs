//! The one checked body of every read: a stored file, a bucket's stream,
//! a local tier's copy and a fill still growing are all handed out through
//! a [`Checker`], which holds the checksums the bytes must match
//! ([`Expected`]) and what to do when they do not ([`Verdict`]). No byte
//! of a checksum block goes out before the whole block (or, in a growing
//! fill, the part of it the checksums cover) matched; a block that does not
//! match goes out only when the verdict proves the checksums rotted (the
//! object hashed whole to its digest and its checksums were rebuilt: the
//! bytes must match those), else the read ends with an error there, never
//! cleanly.
//!
//! Two ways bytes arrive, one check:
//! - [`CheckedRead`]: bytes read at an offset from an [`ObjectRead`] into
//!   the read's own buffer (what the backend has at hand without a wait,
//!   the page cache, on the async worker; the rest on a blocking thread),
//!   in pieces sized by the client's pace;
//! - [`super::pieces`]: a bucket's stream, its pieces checked in place as
//!   they arrive (no copy), a block's unchecked tail held across pieces.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::backend::{ObjectRead, ReadBuf};
use super::sums::Sums;

/// The checksums a read is checked against.
pub trait Expected: Send + Sync + 'static {
    /// Bytes per checksum block.
    fn unit(&self) -> u64;
    /// The CRC32C of the first `len` bytes of block `block`, when known
    /// (a stored object's blocks are whole, its last one to its end; a
    /// growing fill also knows the part of its last block written so far).
    fn crc(&self, block: usize, len: usize) -> Option<u32>;
}

impl Expected for Sums {
    fn unit(&self) -> u64 {
        (self.chunk() as u64).max(1)
    }

    fn crc(&self, block: usize, _len: usize) -> Option<u32> {
        self.expected(block)
    }
}

/// What a read does when a block fails its check or a read fails; called
/// on a blocking thread.
pub trait Verdict: Send + Sync + 'static {
    /// Block `from..to` (its bytes `b`) did not match: the checksums
    /// computed afresh from the whole object when it hashed right (they
    /// rotted, not the bytes; the block goes out only if it matches them,
    /// and they check the rest of the read), else the error that cuts it.
    fn mismatch(&self, from: u64, to: u64, b: &[u8]) -> io::Result<Arc<Sums>>;
    /// A read failed (the store may drop an object the backend lost).
    fn failed(&self, e: &io::Error);
}

/// The one block check: the checksums of a read and its verdict.
#[derive(Clone)]
pub struct Checker {
    expected: Arc<dyn Expected>,
    verdict: Arc<dyn Verdict>,
}

impl Checker {
    pub fn new(expected: Arc<dyn Expected>, verdict: Arc<dyn Verdict>) -> Checker {
        Checker { expected, verdict }
    }

    /// Bytes per checksum block.
    pub fn unit(&self) -> u64 {
        self.expected.unit()
    }

    /// Do the first `len` bytes of block `block` have the CRC32C `crc`?
    pub fn fits(&self, block: usize, len: usize, crc: u32) -> bool {
        self.expected.crc(block, len) == Some(crc)
    }

    /// Do all blocks of `b` (at `from`, block-aligned) match?
    fn all_fit(&self, from: u64, b: &[u8]) -> bool {
        let unit = self.unit() as usize;
        let first = (from / unit as u64) as usize;
        b.chunks(unit)
            .enumerate()
            .all(|(i, blk)| self.fits(first + i, blk.len(), super::sums::crc(blk)))
    }

    /// `b` (the bytes at `from`, block-aligned: whole blocks, the last
    /// one possibly the part the checksums cover), checked: inline while
    /// they match, else on a blocking thread ([`Checker::check_blocking`]).
    pub async fn check(&mut self, from: u64, b: Bytes) -> io::Result<Bytes> {
        if self.all_fit(from, &b) {
            return Ok(b);
        }
        let mut me = self.clone();
        let (me, r) = tokio::task::spawn_blocking(move || {
            let r = me.check_blocking(from, b);
            (me, r)
        })
        .await
        .map_err(io::Error::other)?;
        *self = me;
        r
    }

    /// [`Checker::check`] on the caller's (blocking) thread: a block that
    /// does not match is put to the verdict; checksums it rebuilt check
    /// the rest of the read.
    pub fn check_blocking(&mut self, from: u64, b: Bytes) -> io::Result<Bytes> {
        let unit = self.unit();
        let mut at = from;
        for blk in b.chunks(unit as usize) {
            let block = (at / unit) as usize;
            if !self.fits(block, blk.len(), super::sums::crc(blk)) {
                self.mismatch_blocking(at, at + blk.len() as u64, blk)?;
            }
            at += blk.len() as u64;
        }
        Ok(b)
    }

    /// Block `from..to` (its bytes `b`) did not match: `Ok` when the
    /// verdict's fresh checksums vouch for it (and check the rest of the
    /// read from here on), else the error that cuts the read (the verdict
    /// hears of it as of a failed read). Blocking.
    fn mismatch_blocking(&mut self, from: u64, to: u64, b: &[u8]) -> io::Result<()> {
        let unit = self.unit();
        let block = (from / unit) as usize;
        let r = self.verdict.mismatch(from, to, b).and_then(|fresh| {
            if fresh.chunk() as u64 != unit || !fresh.check(block, b) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("block {block} was read wrong (it matches neither its checksum nor one computed afresh)"),
                ));
            }
            Ok(fresh)
        });
        match r {
            Ok(fresh) => {
                self.expected = fresh;
                Ok(())
            }
            Err(e) => {
                self.verdict.failed(&e);
                Err(e)
            }
        }
    }

    /// [`Checker::mismatch_blocking`] from an async reader (on a blocking
    /// thread): the block's bytes when they may go out.
    pub async fn mismatch(&mut self, from: u64, to: u64, b: Bytes) -> io::Result<Bytes> {
        let mut me = self.clone();
        let (me, r) = tokio::task::spawn_blocking(move || {
            let r = me.mismatch_blocking(from, to, &b).map(|()| b);
            (me, r)
        })
        .await
        .map_err(io::Error::other)?;
        *self = me;
        r
    }

    /// A read failed: the verdict hears of it (on a blocking thread); the
    /// error cuts the read.
    pub async fn failed(&self, e: io::Error) -> io::Error {
        let v = self.verdict.clone();
        match tokio::task::spawn_blocking(move || {
            v.failed(&e);
            e
        })
        .await
        {
            Ok(e) => e,
            Err(j) => io::Error::other(j),
        }
    }

    /// [`Checker::failed`] on the caller's (blocking) thread.
    pub fn failed_blocking(&self, e: &io::Error) {
        self.verdict.failed(e)
    }
}

/// Bytes handed out per step of a read at an offset, at most: each piece
/// is read into the read's own buffer, its checksum blocks checked there
/// on the async worker, and that buffer sent, so the bytes checked are the
/// bytes sent and the socket copies from a buffer still in the CPU cache (a
/// piece fits in a core's L2, 512 KiB here). Measured on a 2-core machine
/// (`docs/performance.md`).
pub const SEND_PIECE: usize = 256 << 10;

/// The first piece of a read, and every piece of a slow one: a client
/// that takes a piece slower than [`FAST_READER`] gets pieces of this size,
/// so a connection holds little while its socket drains (400 slow readers
/// in tens of MiB, not a [`SEND_PIECE`] each); a faster one's pieces double
/// up to [`SEND_PIECE`].
pub const FIRST_PIECE: usize = 64 << 10;

/// Bytes a second a client must take its pieces at for them to grow.
const FAST_READER: f64 = 2.0 * 1024.0 * 1024.0;

/// Bytes all reads together may hold in pieces larger than
/// [`FIRST_PIECE`] (handed out and not yet dropped by the socket's
/// writer); beyond it a read's pieces stay at [`FIRST_PIECE`], so
/// hundreds of readers whose sockets stopped draining hold tens of MiB at
/// most.
const LARGE_PIECES: usize = 48 << 20;

/// Bytes held now in pieces larger than [`FIRST_PIECE`].
static LARGE_HELD: AtomicUsize = AtomicUsize::new(0);

/// A piece's buffer; one larger than [`FIRST_PIECE`] gives its share of
/// [`LARGE_PIECES`] back when the last handle on it is dropped, and its
/// memory goes back to the pool of piece buffers ([`super::bufs`]), to be
/// read into again.
struct PieceBuf {
    buf: ReadBuf,
    large: usize,
}

impl AsRef<[u8]> for PieceBuf {
    fn as_ref(&self) -> &[u8] {
        self.buf.filled()
    }
}

impl Drop for PieceBuf {
    fn drop(&mut self) {
        if self.large > 0 {
            LARGE_HELD.fetch_sub(self.large, Relaxed);
        }
        super::bufs::give(std::mem::take(&mut self.buf).into_storage());
    }
}

/// Take `n` bytes of [`LARGE_PIECES`] for a piece; `false` when that
/// would go over it.
fn take_large(n: usize) -> bool {
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
pub(super) fn next_piece(piece: usize, n: usize, took: Duration) -> usize {
    if n as f64 >= FAST_READER * took.as_secs_f64() {
        (piece * 2).min(SEND_PIECE)
    } else {
        FIRST_PIECE
    }
}

/// A checked read of bytes `start..end` of an object read at an offset,
/// piece by piece from the checksum block holding `start` to the one
/// holding `end - 1`: each piece copied into the read's own buffer
/// ([`ObjectRead::read_ready`] on the async worker, the rest
/// [`ObjectRead::read_rest`] on a blocking thread), its blocks checked
/// there ([`Checker::check`]) and that buffer sent, [`FIRST_PIECE`] to
/// [`SEND_PIECE`] at a time (by the client's pace and the budget for large
/// pieces); a last piece shorter than a quarter piece joins the one before.
/// A failed read (a file shorter than its entry) or a block that does not
/// match ends it with an error.
pub struct CheckedRead {
    object: Arc<dyn ObjectRead>,
    checker: Checker,
    /// The size of the next piece, and when the last one was handed out.
    piece: usize,
    handed: Option<(Instant, usize)>,
    /// The bytes asked for.
    start: u64,
    end: u64,
    /// The next byte to read (block-aligned), and where reading ends (the
    /// end of the block holding `end - 1`, or of what the checksums cover).
    at: u64,
    last: u64,
}

impl CheckedRead {
    /// Bytes `start..end` of `object`, whose checksums cover its first
    /// `covered` bytes (a stored object: its length).
    pub fn new(
        object: Arc<dyn ObjectRead>,
        checker: Checker,
        covered: u64,
        start: u64,
        end: u64,
    ) -> CheckedRead {
        let end = end.min(covered);
        let unit = checker.unit();
        let (at, last) = if start < end {
            (
                start - start % unit,
                end.div_ceil(unit).saturating_mul(unit).min(covered),
            )
        } else {
            (0, 0)
        };
        CheckedRead {
            object,
            checker,
            piece: FIRST_PIECE,
            handed: None,
            start,
            end,
            at,
            last,
        }
    }

    /// The read as a stream that ends after its first error.
    pub fn stream(self) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
        futures::stream::unfold(Some(self), |state| async move {
            let mut r = state?;
            match r.next().await {
                Ok(Some(b)) => Some((Ok(b), Some(r))),
                Ok(None) => None,
                Err(e) => Some((Err(e), None)),
            }
        })
    }

    /// The next checked piece within `start..end`; `None` at the end.
    pub async fn next(&mut self) -> io::Result<Option<Bytes>> {
        if let Some((at, n)) = self.handed.take() {
            // The client's pace on the last piece: hyper asks for the next
            // once the last is nearly written to the socket.
            self.piece = next_piece(self.piece, n, at.elapsed());
        }
        while self.at < self.last {
            let unit = self.checker.unit();
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
            let from = self.at;
            self.at += n;
            let b = match self.read(from, n as usize, large).await {
                Ok(b) => b,
                Err(e) => return Err(self.checker.failed(e).await),
            };
            let b = self.checker.check(from, b).await?;
            let to = from + n;
            let (a, z) = (self.start.max(from), self.end.min(to));
            if a < z {
                self.handed = Some((Instant::now(), (z - a) as usize));
                return Ok(Some(b.slice((a - from) as usize..(z - from) as usize)));
            }
        }
        Ok(None)
    }

    /// Bytes `from..from + n` in a buffer of their own (`large`: its share
    /// of [`LARGE_PIECES`] taken): what the backend has at hand copied
    /// there on the async worker, the rest read on a blocking thread.
    async fn read(&mut self, from: u64, n: usize, large: bool) -> io::Result<Bytes> {
        // Memory a piece already sent was read into (not zeroed again).
        let mut piece = PieceBuf {
            buf: ReadBuf::reuse(super::bufs::take(n)),
            large: if large { n } else { 0 },
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
}

/// What the store's checked-read tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::sync::Mutex;

    /// A verdict that records what it was asked, and vouches with
    /// `fresh` (the checksums computed afresh, when the bytes proved right:
    /// the checksums rotted) when it has them.
    #[derive(Default)]
    pub(crate) struct Seen {
        pub fresh: Option<Arc<Sums>>,
        pub mismatches: Mutex<Vec<(u64, u64)>>,
        pub failures: Mutex<Vec<String>>,
    }

    impl Verdict for Seen {
        fn mismatch(&self, from: u64, to: u64, b: &[u8]) -> io::Result<Arc<Sums>> {
            self.mismatches.lock().unwrap().push((from, to));
            assert_eq!(b.len() as u64, to - from, "the whole block");
            self.fresh
                .clone()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "corrupt"))
        }

        fn failed(&self, e: &io::Error) {
            self.failures.lock().unwrap().push(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Seen;
    use super::*;

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

    /// Bytes in memory, read at an offset.
    struct Mem(Vec<u8>);

    impl ObjectRead for Mem {
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
        fn read_chunk(&self, pos: u64, len: usize) -> io::Result<Bytes> {
            let pos = pos as usize;
            self.0
                .get(pos..pos + len)
                .map(Bytes::copy_from_slice)
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "short"))
        }
    }

    fn body(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    async fn read_all(
        obj: Vec<u8>,
        sums: Sums,
        seen: Arc<Seen>,
        start: u64,
        end: u64,
    ) -> (Vec<u8>, Option<io::Error>) {
        use futures::StreamExt;
        // what the checksums cover: the object's length as its entry says
        let size = (sums.len() as u64 - 1) * sums.chunk() as u64 + (sums.len() == 6) as u64 * 123;
        let checker = Checker::new(Arc::new(sums), seen);
        let mut s =
            Box::pin(CheckedRead::new(Arc::new(Mem(obj)), checker, size, start, end).stream());
        let mut out = Vec::new();
        while let Some(r) = s.next().await {
            match r {
                Ok(b) => out.extend_from_slice(&b),
                Err(e) => return (out, Some(e)),
            }
        }
        (out, None)
    }

    #[tokio::test]
    async fn a_read_at_an_offset_hands_out_only_checked_bytes_and_cuts_at_a_mismatch() {
        let unit = crate::store::sums::CHUNK;
        let good = body(5 * unit + 123);
        let sums = Sums::of(&good);
        // a range across blocks, off the block grid: exactly its bytes
        let seen = Arc::new(Seen::default());
        let (out, err) = read_all(
            good.clone(),
            sums.clone(),
            seen.clone(),
            1000,
            3 * unit as u64 + 7,
        )
        .await;
        assert!(err.is_none());
        assert_eq!(out, &good[1000..3 * unit + 7]);
        assert!(seen.mismatches.lock().unwrap().is_empty());
        // block 3 rotted: blocks 0..3 go out, then the read is cut
        let mut bad = good.clone();
        bad[3 * unit + 5] ^= 1;
        let seen = Arc::new(Seen::default());
        let (out, err) =
            read_all(bad.clone(), sums.clone(), seen.clone(), 0, bad.len() as u64).await;
        assert_eq!(err.unwrap().kind(), io::ErrorKind::InvalidData);
        assert!(out.len() <= 3 * unit, "{} bytes out", out.len());
        assert_eq!(&out[..], &good[..out.len()]);
        assert_eq!(
            seen.mismatches.lock().unwrap()[0],
            (3 * unit as u64, 4 * unit as u64)
        );
        // the checksums rotted, not the bytes: fresh ones vouch, check the
        // rest, and are asked for once
        let mut rotten = sums.encode();
        let at = 8 + 4 * 2;
        rotten[at] ^= 1;
        let rotten = Sums::decode(&rotten).unwrap();
        let seen = Arc::new(Seen {
            fresh: Some(Arc::new(sums.clone())),
            ..Seen::default()
        });
        let (out, err) = read_all(good.clone(), rotten, seen.clone(), 0, good.len() as u64).await;
        assert!(err.is_none());
        assert_eq!(out, good);
        assert_eq!(seen.mismatches.lock().unwrap().len(), 1);
        // fresh checksums that do not vouch for these bytes: cut
        let seen = Arc::new(Seen {
            fresh: Some(Arc::new(sums.clone())),
            ..Seen::default()
        });
        let (_, err) = read_all(bad.clone(), sums.clone(), seen, 0, bad.len() as u64).await;
        assert_eq!(err.unwrap().kind(), io::ErrorKind::InvalidData);
        // a short object: the read fails, the verdict hears of it
        let seen = Arc::new(Seen::default());
        let (out, err) = read_all(
            good[..2 * unit].to_vec(),
            sums,
            seen.clone(),
            0,
            good.len() as u64,
        )
        .await;
        assert!(err.is_some());
        assert!(out.len() <= 2 * unit);
        assert_eq!(seen.failures.lock().unwrap().len(), 1);
    }
}
