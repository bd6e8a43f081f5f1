//! A write in progress: a locked temp file that hashes (sha256) and
//! checksums (per chunk) what goes through it.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::sums::{Sums, SumsBuilder};
use crate::error::{Error, Result};

/// Pieces a [`SpoolWriter`] holds waiting for its blocking thread.
pub const SPOOL_QUEUE: usize = 16;

/// A fill's temp file: written on a blocking thread ([`SpoolWriter`]),
/// which hashes and checksums as it goes. Holds an exclusive `flock` on the file while alive
/// (so no other process's start-up removes it); removed on drop unless
/// committed.
pub struct TempObject {
    pub(super) path: Option<PathBuf>,
    pub(super) file: Option<File>,
    pub(super) hasher: Sha256,
    pub(super) sums: SumsBuilder,
    pub(super) len: u64,
}

impl TempObject {
    pub(super) fn new(path: PathBuf, file: File) -> TempObject {
        TempObject {
            path: Some(path),
            file: Some(file),
            hasher: Sha256::new(),
            sums: SumsBuilder::default(),
            len: 0,
        }
    }

    pub fn path(&self) -> &Path {
        self.path
            .as_deref()
            .expect("temp path present until commit")
    }

    /// The spool opened for reading (blocking: an open), for the readers
    /// of a fill still growing: read at an offset like a stored object
    /// ([`super::checked::CheckedRead`]), what was just written from the
    /// page cache without a wait.
    pub fn reader(&self) -> std::io::Result<std::sync::Arc<dyn super::ObjectRead>> {
        super::local::open_spool(self.path()).map(std::sync::Arc::from)
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `buf` (blocking: a write(2), sha256 and CRC32C): only on a
    /// blocking thread, through [`SpoolWriter`] or
    /// [`super::Store::commit_bytes`]. When this returns, readers of the
    /// path see the bytes.
    pub(super) fn write(&mut self, buf: &[u8]) -> Result<()> {
        let f = self.file.as_mut().expect("temp file present until commit");
        f.write_all(buf)
            .map_err(|e| Error::io("writing a fill", e))?;
        self.hasher.update(buf);
        self.sums.update(buf);
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Hand this temp file to a blocking thread that writes what
    /// [`SpoolWriter::write`] queues (at most [`SPOOL_QUEUE`] pieces
    /// waiting: the async side waits, never blocks), calling `after` there
    /// once each piece is written (readers of a growing fill are told
    /// then). Must run inside tokio.
    pub fn into_writer(self, after: impl FnMut(&TempObject) + Send + 'static) -> SpoolWriter {
        let mut after = after;
        let path = self.path().to_path_buf();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(SPOOL_QUEUE);
        let task = tokio::task::spawn_blocking(move || {
            let mut t = self;
            while let Some(b) = rx.blocking_recv() {
                t.write(&b)?;
                after(&t);
            }
            Ok(t)
        });
        SpoolWriter {
            tx: Some(tx),
            task: Some(task),
            path,
        }
    }

    /// The per-chunk checksums ([`super::sums::CHUNK`] bytes each) of the
    /// whole chunks written so far, from chunk `from` on.
    pub fn chunk_sums_since(&self, from: usize) -> &[u32] {
        self.sums.whole_since(from)
    }

    /// The checksum of the short chunk written after the whole ones and its
    /// length (0: none).
    pub fn tail_sum(&self) -> (u32, usize) {
        self.sums.tail()
    }

    /// The sha256 of what has been written so far.
    pub fn digest(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }

    /// Take the parts for the commit: file, path, digest, length, sums.
    pub(super) fn into_parts(mut self) -> (File, PathBuf, String, u64, Sums) {
        let file = self.file.take().expect("temp file present until commit");
        let path = self.path.take().expect("temp path present until commit");
        let digest = hex::encode(self.hasher.clone().finalize());
        let sums = std::mem::take(&mut self.sums).finish();
        (file, path, digest, self.len, sums)
    }
}

impl Drop for TempObject {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// A temp file being written on a blocking thread: a write(2) to a slow
/// volume, the sha256 and the CRC32C of every piece never run on an async
/// worker. [`SpoolWriter::write`] queues a piece (waiting while
/// [`SPOOL_QUEUE`] are queued); [`SpoolWriter::finish`] hands the temp
/// file back once every piece is written, for the commit. Dropped
/// unfinished: the thread ends and the file is removed.
pub struct SpoolWriter {
    tx: Option<tokio::sync::mpsc::Sender<Bytes>>,
    task: Option<tokio::task::JoinHandle<Result<TempObject>>>,
    path: PathBuf,
}

impl SpoolWriter {
    /// The temp file's path (readers of a growing fill open it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queue `b` to be written after what was queued before.
    pub async fn write(&mut self, b: Bytes) -> Result<()> {
        let sent = match &self.tx {
            Some(tx) => tx.send(b).await.is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The thread stopped: its error says why.
        self.tx = None;
        match self.wait().await {
            Err(e) => Err(e),
            Ok(_) => Err(Error::io(
                "writing a fill",
                std::io::Error::other("the writer stopped"),
            )),
        }
    }

    /// Every queued piece written: the temp file, for the commit.
    pub async fn finish(mut self) -> Result<TempObject> {
        self.tx = None;
        self.wait().await
    }

    async fn wait(&mut self) -> Result<TempObject> {
        let Some(task) = self.task.take() else {
            return Err(Error::io(
                "writing a fill",
                std::io::Error::other("the writer stopped"),
            ));
        };
        task.await
            .map_err(|e| Error::io("writing a fill", std::io::Error::other(e)))?
    }
}
