//! The read path: a committed object opened under a lease, streamed
//! through the one checked body ([`super::checked`]): every checksum block
//! checked before a byte of it is handed out.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use super::STREAM_CHUNK;
use super::backend::ObjectRead;
use super::checked::{CheckedRead, Checker, Verdict};
use super::sums::Sums;
use super::{Entry, Store};
use crate::error::{Error, Result};

/// What a failed read came to ([`Store::read_failed`]).
pub(super) enum Fault {
    /// The copy read is gone (dropped, or the backend lost it): the next
    /// request fetches the key again (a tier copy: the bucket is read next).
    Dropped,
    /// The object is held but could not be read now (a backend that did
    /// not answer): the request fails (503), nothing is fetched again.
    Unreadable,
}

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

/// The checksum block size reads align to.
fn unit_of(sums: &Sums) -> u64 {
    (sums.chunk() as u64).max(1)
}

/// What a read of a stored object does when a block does not match or a
/// read fails: the store decides (on a blocking thread). One per read; it
/// holds the lease as long as the read lives.
struct StoreVerdict {
    object: Arc<dyn ObjectRead>,
    lease: Lease,
    /// Bytes per checksum block.
    unit: u64,
    tiered: bool,
}

impl Verdict for StoreVerdict {
    /// A tier copy's block: the copy goes (the bucket is read next). Else
    /// either the checksums rotted (the object hashes right: they are
    /// rewritten and handed back) or the bytes did (the object dropped).
    fn mismatch(&self, from: u64, _to: u64, _b: &[u8]) -> io::Result<Arc<Sums>> {
        let block = from / self.unit;
        let store = &self.lease.store;
        if self.tiered {
            return Err(store.tier_mismatch(&self.lease.digest, block));
        }
        store
            .chunk_mismatch(&self.lease.digest, self.lease.born, &*self.object, block)
            .map(Arc::new)
    }

    fn failed(&self, e: &io::Error) {
        self.lease
            .store
            .read_failed(&self.lease.digest, self.lease.born, e, self.tiered);
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

    /// Stream bytes `start..end` (end exclusive, within the object),
    /// holding the lease until the end, every checksum block of it checked
    /// before a byte of it is handed out ([`Checker`], the one check of
    /// every read): a mismatch (bit rot) drops the object from the store
    /// and ends the stream with an error, so the response is cut before
    /// its end and the next request fetches the object again.
    ///
    /// A bucket's object is read as it arrives ([`ObjectRead::pieces`]:
    /// one GET, its pieces checked in place); any other is read at an
    /// offset into the stream's own buffer ([`CheckedRead`]: from the page
    /// cache on the async worker, else on a blocking thread), checked there
    /// and sent from there. Memory stays bounded by the pieces in flight.
    pub fn stream(
        self,
        start: u64,
        end: u64,
    ) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
        let size = self.entry.size;
        let end = end.min(size);
        let wins = windows(start, end, size, unit_of(&self.sums));
        let (object, checker) = self.into_checked();
        if let (Some(&(from, _)), Some(&(_, to))) = (wins.first(), wins.last())
            && let Some(p) = object.pieces(from, to)
        {
            return super::pieces::checked(p, (from, to), (start, end), size, checker)
                .left_stream();
        }
        CheckedRead::new(object, checker, size, start, end)
            .stream()
            .right_stream()
    }

    /// The object's handle and the checker of its reads (which holds the
    /// lease).
    fn into_checked(self) -> (Arc<dyn ObjectRead>, Checker) {
        let StoredObject {
            object,
            sums,
            lease,
            tiered,
            ..
        } = self;
        let verdict = StoreVerdict {
            object: object.clone(),
            lease,
            unit: unit_of(&sums),
            tiered,
        };
        (object, Checker::new(sums, Arc::new(verdict)))
    }

    /// A blocking reader of the whole object, chunk-checked like
    /// [`StoredObject::stream`] (for `mirror export`).
    pub fn reader(self) -> impl io::Read + Send {
        let size = self.entry.size;
        let (object, checker) = self.into_checked();
        ChunkReader {
            object,
            checker,
            size,
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
                    Fault::Unreadable => Error::Unavailable(format!(
                        "reading {}: {e} (held, not readable now)",
                        self.entry.key
                    )),
                    Fault::Dropped => Error::io(format!("reading {}", self.entry.key), e),
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
    object: Arc<dyn ObjectRead>,
    checker: Checker,
    size: u64,
    pos: u64,
    buf: Bytes,
}

impl io::Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buf.is_empty() {
            if self.pos >= self.size {
                return Ok(0);
            }
            let (from, to) = windows(self.pos, self.size, self.size, self.checker.unit())[0];
            let b = self
                .object
                .read_chunk(from, (to - from) as usize)
                .inspect_err(|e| self.checker.failed_blocking(e))?;
            self.buf = self.checker.check_blocking(from, b)?;
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
    use super::windows;

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
