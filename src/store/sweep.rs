//! The sweep of what no key names, while the service runs: objects (with
//! their checksums and tier copies) that no entry or pin record names and
//! that are older than [`super::entries::ORPHAN_GRACE`] (a younger one may
//! be a commit's upload about to get its entry). (Spool leftovers stay the
//! start-up's: a temp file is created before its lock is taken, so a sweep
//! while fills run could take a new one for a leftover.) A process killed mid-commit leaves such objects; the
//! start-up scan took them only when a start came late enough, now every
//! [`SWEEP_EVERY`] does ([`Store::sweep_every`], started by `serve`).
//! Counted: [`Store::swept`] (`talos_gen_store_orphans_swept_total`,
//! `talos_gen_store_orphan_bytes_swept_total`).
//!
//! The same sweep aborts the unfinished multipart uploads of objects
//! started more than [`UPLOAD_AGE`] ago (a process killed mid-upload
//! leaves them; the bucket backend lists them, `store::s3::uploads`; a
//! backend without such uploads has none): [`Store::abort_stale_uploads`],
//! counted by [`Store::aborted_uploads`]
//! (`talos_gen_store_multipart_aborted_total`).
//!
//! Nothing is deleted on a view the backend did not confirm: the index is
//! re-read under the store lock first, and an object a key names after
//! that (another process's commit) is kept.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Store;
use super::backend::Aborted;
use super::entries::ORPHAN_GRACE;
use crate::error::Result;

/// How often `serve` sweeps: debris is gone within this long of turning
/// [`ORPHAN_GRACE`] old.
pub const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// How old an unfinished multipart upload is before a sweep aborts it: far
/// above the time an upload takes (one is bounded by the store's timeout
/// per part), so none in flight is aborted.
pub const UPLOAD_AGE: Duration = Duration::from_secs(3600);

/// What one sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    pub objects: u64,
    pub bytes: u64,
    /// Orphans whose deletion the backend did not confirm (tried again at
    /// the next sweep).
    pub failed: u64,
}

impl Store {
    /// Remove the objects no key names that are older than `grace`
    /// (blocking).
    pub fn sweep_orphans(&self, grace: Duration) -> Result<Swept> {
        let b = self.backend();
        // The listing needs no lock; what is named is decided under it.
        let listed = self
            .answered(b.list_objects())
            .map_err(|e| self.did_not_answer(e))?;
        let _lock = self.lock_store()?;
        self.refresh().map_err(|e| self.did_not_answer(e))?;
        let mut swept = Swept::default();
        for (digest, len) in listed {
            if self.lock().objects.contains_key(&digest) {
                continue;
            }
            // An age the backend did not tell counts as young.
            match b.object_age(&digest) {
                Ok(Some(age)) if age >= grace => {}
                _ => continue,
            }
            tracing::info!(%digest, bytes = len, "sweeping an object no key names");
            match self.delete_object(&digest) {
                Ok(()) => {
                    swept.objects += 1;
                    swept.bytes += len;
                }
                Err(_) => swept.failed += 1,
            }
        }
        self.inner
            .swept_objects
            .fetch_add(swept.objects, Ordering::Relaxed);
        self.inner
            .swept_bytes
            .fetch_add(swept.bytes, Ordering::Relaxed);
        Ok(swept)
    }

    /// Abort the backend's unfinished uploads of objects started more than
    /// `older_than` ago (blocking); counted. A failure is this sweep's
    /// alone: it does not mark the store down (a bucket may refuse the
    /// listing and still serve every object).
    pub fn abort_stale_uploads(&self, older_than: Duration) -> Result<Aborted> {
        let done = self
            .backend()
            .abort_stale_uploads(older_than)
            .map_err(|e| self.did_not_answer(e))?;
        self.inner
            .aborted_uploads
            .fetch_add(done.uploads, Ordering::Relaxed);
        Ok(done)
    }

    /// Unfinished multipart uploads aborted since start.
    pub fn aborted_uploads(&self) -> u64 {
        self.inner.aborted_uploads.load(Ordering::Relaxed)
    }

    /// Orphan objects and their bytes swept since start.
    pub fn swept(&self) -> (u64, u64) {
        (
            self.inner.swept_objects.load(Ordering::Relaxed),
            self.inner.swept_bytes.load(Ordering::Relaxed),
        )
    }

    /// Sweep every `period` on a blocking thread, in the background, until
    /// the store is dropped (must be called within a runtime).
    pub fn sweep_every(&self, period: Duration) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                let store = Store { inner };
                let r = tokio::task::spawn_blocking(move || {
                    (
                        store.sweep_orphans(ORPHAN_GRACE),
                        store.abort_stale_uploads(UPLOAD_AGE),
                    )
                });
                let (orphans, uploads) = match r.await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(error = %e, "sweep: the task did not run");
                        continue;
                    }
                };
                match orphans {
                    Ok(s) if s.failed > 0 => {
                        tracing::warn!(failed = s.failed, "sweep: orphans not deleted")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "sweep: nothing swept"),
                }
                match uploads {
                    Ok(a) if a.failed > 0 => {
                        tracing::warn!(failed = a.failed, "sweep: unfinished uploads not aborted")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "sweep: no unfinished upload aborted"),
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Meta, Store};
    use std::time::Duration;

    /// Issue 48, item 5: objects no key names (a commit killed between its
    /// object and its entry) go with a sweep while the store is open, once
    /// older than the grace, and are counted; named ones stay; a younger
    /// one stays for the next sweep.
    #[tokio::test(flavor = "multi_thread")]
    async fn orphans_are_swept_while_the_store_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let kept = store
            .commit_bytes("k", b"named"[..].into(), Meta::default())
            .await
            .unwrap();
        // What a killed commit leaves: an object, no entry.
        let orphan = "0".repeat(64);
        let path = dir.path().join("objects/sha256").join(&orphan);
        std::fs::write(&path, vec![7u8; 1000]).unwrap();
        let s = store.clone();
        let young = tokio::task::spawn_blocking(move || s.sweep_orphans(Duration::from_secs(600)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(young.objects, 0, "younger than the grace: kept");
        assert!(path.exists());
        let s = store.clone();
        let swept = tokio::task::spawn_blocking(move || s.sweep_orphans(Duration::ZERO))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((swept.objects, swept.bytes, swept.failed), (1, 1000, 0));
        assert!(!path.exists());
        assert!(store.object_path(&kept.digest).unwrap().exists());
        assert_eq!(store.swept(), (1, 1000));
    }
}
