//! The read path: a committed object opened under a lease, streamed in
//! chunk-sized memory maps, every chunk checked against its checksum
//! before a byte of it is handed out.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};

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
    /// The object's path (for `mirror export`, which copies it whole).
    pub path: PathBuf,
    pub(super) file: File,
    pub(super) sums: Option<Arc<Sums>>,
    pub(super) lease: Lease,
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
    /// holding the lease until the end. Each step maps one chunk of the
    /// file read-only and checks it against the object's chunk checksum:
    /// a mismatch (bit rot) drops the object from the store and ends the
    /// stream with an error, so the response is cut before its end and the
    /// next request fetches the object again. Memory stays bounded by the
    /// chunks in flight; the bytes go from the page cache to the socket in
    /// one copy.
    pub fn stream(
        self,
        start: u64,
        end: u64,
    ) -> impl futures::Stream<Item = io::Result<Bytes>> + Send + 'static {
        let StoredObject {
            entry,
            file,
            sums,
            lease,
            ..
        } = self;
        let file = Arc::new(file);
        let size = entry.size;
        let end = end.min(size);
        futures::stream::unfold((start, Some(lease), sums), move |(pos, lease, sums)| {
            let file = file.clone();
            async move {
                let lease = lease?;
                if pos >= end {
                    return None;
                }
                let chunk = pos / CHUNK as u64;
                let cstart = chunk * CHUNK as u64;
                let cend = (cstart + CHUNK as u64).min(size);
                let store = lease.store.clone();
                let digest = lease.digest.clone();
                let s = sums.clone();
                let res = tokio::task::spawn_blocking(move || {
                    let b = map_chunk(&file, cstart, (cend - cstart) as usize)?;
                    match s {
                        Some(s) if !s.check(chunk as usize, &b) => {
                            store.chunk_mismatch(&digest, &file, chunk)?;
                            Ok(b)
                        }
                        _ => Ok(b),
                    }
                })
                .await
                .map_err(io::Error::other)
                .and_then(|r| r);
                match res {
                    Ok(b) => {
                        let upto = end.min(cend);
                        let part = b.slice((pos - cstart) as usize..(upto - cstart) as usize);
                        Some((Ok(part), (upto, Some(lease), sums)))
                    }
                    Err(e) => Some((Err(e), (end, None, None))),
                }
            }
        })
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
        let mut buf = vec![0u8; self.entry.size as usize];
        self.file
            .read_exact_at(&mut buf, 0)
            .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
        let got = hex::encode(Sha256::digest(&buf));
        if got != self.entry.digest {
            let reason = format!("its bytes hash to sha256:{got}");
            self.lease.store.quarantine(&self.entry.digest, &reason);
            return Err(Error::io(
                format!("stored object {}", self.entry.key),
                io::Error::new(io::ErrorKind::InvalidData, reason),
            ));
        }
        Ok(Bytes::from(buf))
    }
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
