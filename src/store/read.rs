//! The read path: a committed object opened under a lease, streamed chunk
//! by chunk, every chunk checked against its checksum before a byte of it
//! is handed out.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::backend::ObjectRead;
use super::sums::{CHUNK, Sums};
use super::{Entry, Store};
use crate::error::{Error, Result};

/// Keeps an object from eviction while held.
pub struct Lease {
    pub(super) store: Store,
    pub(super) digest: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.store.release(&self.digest);
    }
}

/// A committed object opened for reading.
pub struct StoredObject {
    pub entry: Entry,
    pub(super) object: Box<dyn ObjectRead>,
    pub(super) sums: Option<Arc<Sums>>,
    pub(super) lease: Lease,
}

/// Chunk `i` of an object of `size` bytes, checked (blocking).
fn checked_chunk(
    store: &Store,
    digest: &str,
    object: &dyn ObjectRead,
    sums: Option<&Sums>,
    chunk: u64,
    size: u64,
) -> io::Result<Bytes> {
    let cstart = chunk * CHUNK as u64;
    let cend = (cstart + CHUNK as u64).min(size);
    let b = object.read_chunk(cstart, (cend - cstart) as usize)?;
    if let Some(s) = sums
        && !s.check(chunk as usize, &b)
    {
        store.chunk_mismatch(digest, object, chunk)?;
    }
    Ok(b)
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
    /// holding the lease until the end. Each step reads one chunk (the
    /// local backend maps it read-only: page cache to socket in one copy)
    /// and checks it against the object's chunk checksum: a mismatch (bit
    /// rot) drops the object from the store and ends the stream with an
    /// error, so the response is cut before its end and the next request
    /// fetches the object again. Memory stays bounded by the chunks in
    /// flight.
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
        } = self;
        use futures::StreamExt;
        let object: Arc<dyn ObjectRead> = Arc::from(object);
        let size = entry.size;
        let end = end.min(size);
        let ahead = object.read_ahead().max(1);
        let lease = Arc::new(lease);
        let first = start / CHUNK as u64;
        let last = if end > start {
            (end - 1) / CHUNK as u64 + 1
        } else {
            first
        };
        // One future per chunk, `ahead` of them in flight, in order; the
        // lease lives as long as the stream (every future holds it).
        let fetches = futures::stream::iter(first..last).map(move |chunk| {
            let object = object.clone();
            let sums = sums.clone();
            let lease = lease.clone();
            async move {
                let cstart = chunk * CHUNK as u64;
                let store = lease.store.clone();
                let digest = lease.digest.clone();
                let b = tokio::task::spawn_blocking(move || {
                    checked_chunk(&store, &digest, &*object, sums.as_deref(), chunk, size)
                })
                .await
                .map_err(io::Error::other)
                .and_then(|r| r)?;
                drop(lease);
                let from = start.max(cstart);
                let upto = end.min(cstart + b.len() as u64);
                Ok(b.slice((from - cstart) as usize..(upto - cstart) as usize))
            }
        });
        // The stream ends after its first error (the response is cut there).
        fetches
            .buffered(ahead)
            .scan(false, |failed, r: io::Result<Bytes>| {
                let item = if *failed {
                    None
                } else {
                    *failed = r.is_err();
                    Some(r)
                };
                futures::future::ready(item)
            })
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
            .map_err(|e| Error::io(format!("reading {}", self.entry.key), e))?;
        let got = hex::encode(Sha256::digest(&buf));
        if got != self.entry.digest {
            let reason = format!("its bytes hash to sha256:{got}");
            self.lease.store.quarantine(&self.entry.digest, &reason);
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
            let chunk = self.pos / CHUNK as u64;
            self.buf = checked_chunk(
                &self.obj.lease.store,
                &self.obj.lease.digest,
                &*self.obj.object,
                self.obj.sums.as_deref(),
                chunk,
                size,
            )?;
            self.pos += self.buf.len() as u64;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf = self.buf.slice(n..);
        Ok(n)
    }
}
