//! A write in progress: a locked temp file that hashes (sha256) and
//! checksums (per chunk) what goes through it.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::sums::{Sums, SumsBuilder};
use crate::error::{Error, Result};

/// A fill's temp file: written through [`TempObject::write_all`], which
/// hashes as it goes. Holds an exclusive `flock` on the file while alive
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

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `buf`; when this returns, readers of the path see the bytes.
    /// (A plain write into the page cache: short enough to do inline.)
    pub async fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        let f = self.file.as_mut().expect("temp file present until commit");
        f.write_all(buf)
            .map_err(|e| Error::io("writing a fill", e))?;
        self.hasher.update(buf);
        self.sums.update(buf);
        self.len += buf.len() as u64;
        Ok(())
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
