//! The readers of a fill: its spool read as the bytes land, each block
//! checked against the CRC32C the fill took of what it received (a block
//! another process wrote into taints the fill and cuts the read), then the
//! committed object's rest, checked, for a reader still behind at the
//! commit.

use std::sync::Arc;

use bytes::Bytes;
use futures::stream::Stream;
use tokio::sync::watch;

use super::{Phase, Progress, Shared};
use crate::store::checked::{CheckedRead, Checker, Expected, Verdict};
use crate::store::sums::Sums;

/// Bytes `start..end` of the fill as they arrive (see [`super::FillHandle::reader`]).
pub(super) fn stream(
    sh: Arc<Shared>,
    start: u64,
    end: Option<u64>,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let st = ReadState {
        rx: sh.tx.subscribe(),
        sh,
        pos: start,
        end,
        stored: None,
    };
    futures::stream::unfold(st, |mut st| async move {
        match st.step().await {
            Ok(Some(b)) => Some((Ok(b), st)),
            Ok(None) => None,
            Err(e) => {
                st.end = Some(st.pos); // end after the error
                Some((Err(e), st))
            }
        }
    })
}

/// The checksums a fill's readers check its file against: the fill's own
/// (see `Shared::sums`).
/// A snapshot of them for one read: from block `first` on, each block's
/// CRC32C and the count of bytes it covers.
struct FillExpected {
    first: usize,
    sums: Vec<(u32, usize)>,
}

/// Blocks of a fill's checksums one read of it takes (a piece of a read
/// is 64 KiB, or up to 80 KiB when its last quarter joins it).
const SNAPSHOT_BLOCKS: usize = 2;

impl Expected for FillExpected {
    fn unit(&self) -> u64 {
        crate::store::sums::CHUNK as u64
    }

    fn crc(&self, block: usize, len: usize) -> Option<u32> {
        let &(crc, n) = self.sums.get(block.checked_sub(self.first)?)?;
        (n == len).then_some(crc)
    }
}

/// A block of a fill's file that does not match what the fill received
/// (another process wrote into it): the fill is tainted (never committed)
/// and the read is cut.
impl Verdict for Shared {
    fn mismatch(&self, from: u64, _to: u64, _b: &[u8]) -> std::io::Result<Arc<Sums>> {
        self.tainted
            .store(true, std::sync::atomic::Ordering::Release);
        Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "{}: block {} of the fill's file does not match what was received",
                self.key,
                from / crate::store::sums::CHUNK as u64
            ),
        ))
    }

    fn failed(&self, _e: &std::io::Error) {}
}

/// The rest of a read from the committed object (checked block by block).
type StoredRest = std::pin::Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

pub(super) struct ReadState {
    sh: Arc<Shared>,
    rx: watch::Receiver<Progress>,
    pos: u64,
    end: Option<u64>,
    /// Once the fill is committed with bytes of this read still to go:
    /// the rest, from the stored object.
    stored: Option<StoredRest>,
}

impl ReadState {
    /// The next bytes of `pos..limit` the fill's checksums cover, read
    /// from its file and checked through the store's one checked body
    /// ([`CheckedRead`]: whole 64 KiB blocks against the CRC the fill took
    /// of the bytes it received, and the part of the block being written
    /// against the CRC of that part), so a byte another process wrote into
    /// the file is never sent; `None` when the checksums do not reach
    /// `pos` yet. Small pieces (64 KiB, the first piece of a read), so a
    /// slow reader holds little, with hyper's write queue bounded by
    /// `http::WRITE_QUEUE`: 400 slow readers of one fill in tens of MiB.
    async fn read_checked(&mut self, limit: u64) -> std::io::Result<Option<Bytes>> {
        let Some(file) = self.sh.file.get().cloned() else {
            return Err(std::io::Error::other("fill has no file"));
        };
        // The checksums of the next few blocks as they are now, each with
        // the count of bytes it covers (a whole block's, or the bytes so far
        // of the block being written): the bytes read are checked against
        // this snapshot, never against checksums that grew meanwhile.
        let bs = crate::store::sums::CHUNK;
        let first = (self.pos / bs as u64) as usize;
        let sums: Vec<(u32, usize)> = {
            let g = self.sh.sums.lock().unwrap_or_else(|p| p.into_inner());
            let whole = g.whole.iter().skip(first).take(SNAPSHOT_BLOCKS);
            let mut v: Vec<(u32, usize)> = whole.map(|&c| (c, bs)).collect();
            if v.len() < SNAPSHOT_BLOCKS && first + v.len() == g.whole.len() && g.tail.1 > 0 {
                v.push(g.tail);
            }
            v
        };
        let covered = (first * bs + sums.iter().map(|&(_, n)| n).sum::<usize>()) as u64;
        if covered <= self.pos {
            return Ok(None);
        }
        let expected = FillExpected { first, sums };
        let checker = Checker::new(Arc::new(expected), self.sh.clone());
        let mut read = CheckedRead::new(file, checker, covered, self.pos, limit.min(covered));
        match read.next().await {
            Ok(Some(b)) => {
                self.pos += b.len() as u64;
                Ok(Some(b))
            }
            Ok(None) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                Err(std::io::Error::other("fill file shorter than written"))
            }
            Err(e) => Err(e),
        }
    }

    async fn step(&mut self) -> std::io::Result<Option<Bytes>> {
        use futures::StreamExt;
        loop {
            if let Some(rest) = self.stored.as_mut() {
                return match rest.next().await {
                    Some(Ok(b)) => {
                        self.pos += b.len() as u64;
                        Ok(Some(b))
                    }
                    Some(Err(e)) => Err(e),
                    None => Ok(None),
                };
            }
            if self.end.is_some_and(|e| self.pos >= e) {
                return Ok(None);
            }
            let p = self.rx.borrow_and_update().clone();
            if let Phase::Done(e) = &p.phase {
                let end = self.end.map_or(e.size, |x| x.min(e.size));
                if self.pos >= end {
                    return Ok(None);
                }
                // Committed: the rest comes from the stored object, checked.
                match self.sh.store.open_key(&self.sh.key).await {
                    Ok(Some(o)) if o.entry.digest == e.digest => {
                        self.stored = Some(Box::pin(o.stream(self.pos, end)));
                        continue;
                    }
                    _ => {
                        return Err(std::io::Error::other(format!(
                            "{}: the committed object could not be opened to finish this read",
                            self.sh.key
                        )));
                    }
                }
            }
            let len = self.sh.head.get().and_then(|h| h.len);
            let (limit, done) = match &p.phase {
                // (`Done` went to the stored object above.)
                Phase::Done(_) | Phase::Verified => (p.written, true),
                Phase::Failed(e) => return Err(std::io::Error::other(e.to_string())),
                // Hold back the last byte until the object is verified.
                _ => (
                    match len {
                        Some(n) => p.written.min(n.saturating_sub(1)),
                        None => p.written,
                    },
                    false,
                ),
            };
            let mut limit = self.end.map_or(limit, |e| e.min(limit));
            // A range's last byte, too, waits for the verdict: a range
            // answered from a fill that then fails must not end cleanly.
            if !done && let Some(e) = self.end {
                limit = limit.min(e.saturating_sub(1));
            }
            if self.pos < limit {
                match self.read_checked(limit).await? {
                    Some(b) => return Ok(Some(b)),
                    None if done => {
                        return Err(std::io::Error::other("fill has no checksum for a block"));
                    }
                    None => {
                        if self.rx.changed().await.is_err() {
                            return Err(std::io::Error::other("fill task vanished"));
                        }
                        continue;
                    }
                }
            }
            if done {
                return Ok(None);
            }
            if self.rx.changed().await.is_err() {
                return Err(std::io::Error::other("fill task vanished"));
            }
        }
    }
}
