//! A remote object's bytes served as they arrive ([`ObjectRead::pieces`]:
//! S3, one GET polled by the stream itself), checked block by block in
//! place: each piece the HTTP client hands over is checked and forwarded
//! as it is (`Bytes` slices of it, no copy), only a block's unchecked tail
//! held across piece boundaries (its CRC32C carried along), and no byte of
//! a checksum block goes out before the whole block matched. Polling never
//! blocks: the pieces come from the GET's socket (async I/O, every wait
//! bounded by the backend), a check is
//! a CRC32C of at most a piece (hardware, memory speed), and what may
//! block (a block that failed its check: the object hashed whole again; a
//! failed read: the store told) goes to a blocking thread.
//!
//! [`ObjectRead::pieces`]: super::backend::ObjectRead::pieces

use std::collections::VecDeque;
use std::io;

use bytes::Bytes;
use futures::StreamExt;

use super::backend::Pieces;
use super::checked::Checker;

/// Bytes `start..end` of an object of `size` bytes from `pieces`, which
/// bring `from..to` (`from` on a block boundary, `to` one or the object's
/// end, `from <= start <= end <= to`), every block checked against `sums`
/// before a byte of it goes out ([`Checker`]). The stream ends with an error at the
/// first failure (a block that does not match, a read that failed or
/// ended early), never cleanly.
pub(super) fn checked(
    pieces: Pieces,
    (from, to): (u64, u64),
    (start, end): (u64, u64),
    size: u64,
    checker: Checker,
) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
    let unit = checker.unit();
    let st = State {
        pieces,
        pos: from,
        to,
        start,
        end,
        size,
        unit,
        checker,
        block: from,
        held: Vec::new(),
        crc: 0,
        ready: VecDeque::new(),
        done: false,
    };
    futures::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(item) = st.ready.pop_front() {
                if item.is_err() {
                    st.done = true;
                    st.ready.clear();
                }
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            st.step().await;
        }
    })
}

struct State {
    pieces: Pieces,
    /// The object offset of the next byte from `pieces`.
    pos: u64,
    to: u64,
    start: u64,
    end: u64,
    size: u64,
    unit: u64,
    checker: Checker,
    /// Where the block being gathered starts.
    block: u64,
    /// Its bytes so far (`block..pos`), unchecked.
    held: Vec<Bytes>,
    /// Their CRC32C.
    crc: u32,
    /// What goes out next.
    ready: VecDeque<io::Result<Bytes>>,
    done: bool,
}

impl State {
    /// Take the next piece: its checked bytes into `ready`, or the end, or
    /// an error.
    async fn step(&mut self) {
        let piece = match self.pieces.next().await {
            Some(Ok(b)) => b,
            Some(Err(e)) => return self.fail(e).await,
            None if self.pos >= self.to && self.held.is_empty() => {
                self.done = true;
                return;
            }
            None => {
                let e = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the read ended at byte {}, before {}", self.pos, self.to),
                );
                return self.fail(e).await;
            }
        };
        if piece.len() as u64 > self.to - self.pos {
            let e = io::Error::other(format!(
                "the read brought more than the {}..{} asked for",
                self.pos, self.to
            ));
            return self.fail(e).await;
        }
        // `piece` holds `base..base + len`; its bytes from `run` on are not
        // handed on yet.
        let (base, len) = (self.pos, piece.len());
        let (mut run, mut at) = (0usize, 0usize);
        while at < len {
            let block_end = (self.block + self.unit).min(self.size);
            let take = ((block_end - self.pos) as usize).min(len - at);
            self.crc = crc32c::crc32c_append(self.crc, &piece[at..at + take]);
            at += take;
            self.pos += take as u64;
            if self.pos < block_end {
                break;
            }
            // A whole block: `held` (from earlier pieces) and
            // `piece[b0..at]`.
            let b0 = self.block.saturating_sub(base) as usize;
            let i = (self.block / self.unit) as usize;
            if self
                .checker
                .fits(i, (block_end - self.block) as usize, self.crc)
            {
                // Checked: the earlier pieces' part goes out now (nothing
                // of this piece has yet), this piece's part at its end.
                let mut o = self.block;
                for h in std::mem::take(&mut self.held) {
                    let n = h.len() as u64;
                    self.emit(o, h);
                    o += n;
                }
            } else {
                // The blocks before it go out; this one as the store
                // decides (its bytes copied whole: a rare path).
                self.emit(base + run as u64, piece.slice(run..b0));
                let mut whole = bytes::BytesMut::with_capacity((block_end - self.block) as usize);
                for h in self.held.drain(..) {
                    whole.extend_from_slice(&h);
                }
                whole.extend_from_slice(&piece[b0..at]);
                let (from, to) = (self.block, block_end);
                match self.checker.mismatch(from, to, whole.freeze()).await {
                    Ok(b) => self.emit(from, b),
                    // (The verdict heard of it already.)
                    Err(e) => return self.ready.push_back(Err(e)),
                }
                run = at;
            }
            self.block = block_end;
            self.crc = 0;
        }
        // Checked up to the block being gathered; the rest of the piece is
        // held until that block is whole.
        let cut = (self.block.saturating_sub(base) as usize).min(len);
        self.emit(base + run as u64, piece.slice(run..cut.max(run)));
        if cut < len {
            self.held.push(piece.slice(cut..));
        }
        // The span's last block ends at its end: nothing to wait for.
        if self.pos >= self.to && self.held.is_empty() {
            self.done = true;
        }
    }

    /// Bytes `b` at object offset `at` go out, cut to `start..end`.
    fn emit(&mut self, at: u64, b: Bytes) {
        let (a, z) = (at.max(self.start), (at + b.len() as u64).min(self.end));
        if a < z {
            self.ready
                .push_back(Ok(b.slice((a - at) as usize..(z - at) as usize)));
        }
    }

    /// The read failed: the store is told (on a blocking thread), the
    /// stream ends with the error.
    async fn fail(&mut self, e: io::Error) {
        let e = self.checker.failed(e).await;
        self.ready.push_back(Err(e));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::store::checked::testing::Seen;
    use crate::store::sums::{CHUNK, Sums};

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// `b` cut into pieces of the sizes in `sizes` (cycled).
    fn cut(b: &[u8], sizes: &[usize]) -> Vec<io::Result<Bytes>> {
        let b = Bytes::copy_from_slice(b);
        let (mut v, mut at, mut i) = (Vec::new(), 0, 0);
        while at < b.len() {
            let n = sizes[i % sizes.len()].min(b.len() - at);
            v.push(Ok(b.slice(at..at + n)));
            at += n;
            i += 1;
        }
        v
    }

    async fn run(
        items: Vec<io::Result<Bytes>>,
        span: (u64, u64),
        out: (u64, u64),
        size: u64,
        sums: Sums,
        seen: Arc<Seen>,
    ) -> (Vec<u8>, Option<io::Error>) {
        let pieces: Pieces = Box::pin(futures::stream::iter(items));
        let s = checked(pieces, span, out, size, Checker::new(Arc::new(sums), seen));
        let mut s = std::pin::pin!(s);
        let mut got = Vec::new();
        while let Some(r) = s.next().await {
            match r {
                Ok(b) => got.extend_from_slice(&b),
                Err(e) => {
                    assert!(s.next().await.is_none(), "nothing after an error");
                    return (got, Some(e));
                }
            }
        }
        (got, None)
    }

    const SIZES: &[&[usize]] = &[
        &[1 << 20],
        &[CHUNK],
        &[1, 7, 65535, 3],
        &[100_000, 16384, 408 << 10],
        &[CHUNK + 1, CHUNK - 1],
    ];

    #[tokio::test]
    async fn pieces_of_any_size_go_out_whole_and_in_order() {
        let n = 5 * CHUNK + 123;
        let d = data(n);
        let sums = Sums::of(&d);
        let k = CHUNK as u64;
        for sizes in SIZES {
            // (span, what goes out): the whole, a range inside, a byte, the
            // short last block.
            for (span, out) in [
                ((0, n as u64), (0, n as u64)),
                ((k, 4 * k), (k + 10, 3 * k + 5)),
                ((2 * k, 3 * k), (2 * k + 9, 2 * k + 10)),
                ((5 * k, n as u64), (5 * k + 3, n as u64)),
            ] {
                let seen = Arc::new(Seen::default());
                let items = cut(&d[span.0 as usize..span.1 as usize], sizes);
                let (got, err) = run(items, span, out, n as u64, sums.clone(), seen.clone()).await;
                assert!(err.is_none(), "{sizes:?} {span:?}: {err:?}");
                assert!(
                    got == d[out.0 as usize..out.1 as usize],
                    "{sizes:?} {span:?}"
                );
                assert!(seen.mismatches.lock().unwrap().is_empty());
            }
        }
    }

    #[tokio::test]
    async fn no_byte_of_a_rotten_block_goes_out() {
        let n = 5 * CHUNK + 123;
        let d = data(n);
        let sums = Sums::of(&d);
        let mut bad = d.clone();
        bad[2 * CHUNK + 17] ^= 0x20;
        for sizes in SIZES {
            let seen = Arc::new(Seen::default());
            let items = cut(&bad, sizes);
            let span = (0, n as u64);
            let (got, err) = run(items, span, span, n as u64, sums.clone(), seen.clone()).await;
            let err = err.expect("cut");
            assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{sizes:?}");
            assert!(got.len() <= 2 * CHUNK, "{sizes:?}: {} bytes out", got.len());
            assert!(got == d[..got.len()], "{sizes:?}: what went out is right");
            let k = CHUNK as u64;
            assert_eq!(*seen.mismatches.lock().unwrap(), [(2 * k, 3 * k)]);
            assert_eq!(seen.failures.lock().unwrap().len(), 1, "the store told");
        }
        // Rotten checksums (the store found the bytes right): served whole.
        for sizes in SIZES {
            let seen = Arc::new(Seen {
                fresh: Some(Arc::new(sums.clone())),
                ..Default::default()
            });
            let mut rotten = sums.clone().encode();
            rotten[8 + 4 * 3] ^= 1;
            let rotten = Sums::decode(&rotten).unwrap();
            let span = (0, n as u64);
            let (got, err) = run(cut(&d, sizes), span, span, n as u64, rotten, seen.clone()).await;
            assert!(err.is_none(), "{err:?}");
            assert!(got == d, "{sizes:?}");
            assert_eq!(seen.mismatches.lock().unwrap().len(), 1);
        }
    }

    #[tokio::test]
    async fn a_read_that_fails_or_ends_early_never_ends_cleanly() {
        let n = 3 * CHUNK;
        let d = data(n);
        let sums = Sums::of(&d);
        let span = (0, n as u64);
        // Ends early.
        let seen = Arc::new(Seen::default());
        let items = cut(&d[..2 * CHUNK + 5], &[4096]);
        let (got, err) = run(items, span, span, n as u64, sums.clone(), seen.clone()).await;
        assert_eq!(err.unwrap().kind(), io::ErrorKind::UnexpectedEof);
        assert!(got == d[..2 * CHUNK], "the whole blocks before the end");
        assert_eq!(seen.failures.lock().unwrap().len(), 1);
        // Fails part way.
        let seen = Arc::new(Seen::default());
        let mut items = cut(&d[..CHUNK + 5], &[4096]);
        items.push(Err(io::Error::new(io::ErrorKind::TimedOut, "slow")));
        let (got, err) = run(items, span, span, n as u64, sums.clone(), seen.clone()).await;
        assert_eq!(err.unwrap().kind(), io::ErrorKind::TimedOut);
        assert!(got == d[..CHUNK]);
        // Brings more than asked.
        let seen = Arc::new(Seen::default());
        let (_, err) = run(
            cut(&d, &[n]),
            (0, CHUNK as u64),
            (0, 10),
            n as u64,
            sums.clone(),
            seen,
        )
        .await;
        assert!(err.is_some());
    }
}
