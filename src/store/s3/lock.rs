//! The store lock across replicas: a lease object `lock` written with a
//! conditional put, renewed while held, deleted on release (see the
//! module above for the protocol and where a store does not honour it).

use std::io;
use std::sync::MutexGuard;
use std::time::Duration;

use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::{S3Backend, now_ms};
use crate::store::backend::Backend;
use crate::store::backend::LockGuard;

/// How long a lease lives unless renewed.
pub const LEASE_TTL: Duration = Duration::from_secs(20);
/// How often a held lease is renewed.
const LEASE_RENEW: Duration = Duration::from_secs(5);

#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Lease {
    owner: String,
    /// Milliseconds since the epoch.
    expires: u64,
}

impl S3Backend {
    /// Take the store lock: the lease where the store honours conditional
    /// puts, else this process's own mutex.
    pub(super) fn take_lock(&self) -> io::Result<LockGuard<'_>> {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if !self.conditional_create {
            return Ok(Box::new(LocalGuard(local)));
        }
        let mut etag = self.take_lease()?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let s3 = self.s3.clone();
        let p = self.path("lock");
        let owner = self.owner.clone();
        let update = self.conditional_update;
        let limit = self.cfg.timeout;
        let rt = self.rt.as_ref().expect("runtime present until drop");
        let renewer = rt.spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = tokio::time::sleep(LEASE_RENEW) => {}
                }
                let body = serde_json::to_vec(&Lease {
                    owner: owner.clone(),
                    expires: now_ms() + LEASE_TTL.as_millis() as u64,
                })
                .expect("a lease encodes");
                let mode = if update {
                    PutMode::Update(UpdateVersion {
                        e_tag: Some(etag.clone()),
                        version: None,
                    })
                } else {
                    PutMode::Overwrite
                };
                let put = s3.put_opts(
                    &p,
                    PutPayload::from(body),
                    PutOptions {
                        mode,
                        ..Default::default()
                    },
                );
                match tokio::time::timeout(limit, put).await {
                    Ok(Ok(r)) => etag = r.e_tag.unwrap_or_default(),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "renewing the store lease failed");
                    }
                    Err(_) => tracing::warn!("renewing the store lease timed out"),
                }
            }
        });
        Ok(Box::new(LeaseGuard {
            backend: self,
            _local: local,
            stop: Some(stop),
            renewer: Some(renewer),
        }))
    }

    pub(super) fn read_lease(&self) -> io::Result<Option<(Lease, String)>> {
        let s3 = self.s3.clone();
        let p = self.path("lock");
        let got = self.call(async move {
            let r = s3.get_opts(&p, Default::default()).await?;
            let etag = r.meta.e_tag.clone().unwrap_or_default();
            Ok((r.bytes().await?, etag))
        });
        match got {
            Ok((b, etag)) => Ok(serde_json::from_slice::<Lease>(&b).ok().map(|l| (l, etag))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn lease_body(&self) -> Vec<u8> {
        serde_json::to_vec(&Lease {
            owner: self.owner.clone(),
            expires: now_ms() + LEASE_TTL.as_millis() as u64,
        })
        .expect("a lease encodes")
    }

    /// Take the lease: create it; while another holds it, wait (bounded);
    /// take over one whose holder let it expire.
    fn take_lease(&self) -> io::Result<String> {
        let deadline = std::time::Instant::now() + self.cfg.timeout * 2;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.put_bytes(self.path("lock"), self.lease_body(), PutMode::Create) {
                Ok(etag) => return Ok(etag.unwrap_or_default()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            if let Some((lease, etag)) = self.read_lease()?
                && lease.expires < now_ms()
            {
                tracing::warn!(holder = %lease.owner, "taking over an expired store lease");
                if self.conditional_update {
                    let v = UpdateVersion {
                        e_tag: Some(etag),
                        version: None,
                    };
                    match self.put_bytes(self.path("lock"), self.lease_body(), PutMode::Update(v)) {
                        Ok(etag) => return Ok(etag.unwrap_or_default()),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                } else {
                    let s3 = self.s3.clone();
                    let p = self.path("lock");
                    let _ = self.call(async move { s3.delete(&p).await });
                }
                continue;
            }
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the store lock of {} stayed taken for {:?}",
                        self.describe(),
                        self.cfg.timeout * 2
                    ),
                ));
            }
            let jitter = Duration::from_millis(rand::random::<u64>() % 20);
            std::thread::sleep(pause + jitter);
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }
}

/// The held lease: renewed by a task on the backend's runtime, deleted
/// (when still ours) on drop.
struct LeaseGuard<'a> {
    backend: &'a S3Backend,
    _local: MutexGuard<'a, ()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    renewer: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for LeaseGuard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.renewer.take() {
            let _ = futures::executor::block_on(h);
        }
        let b = self.backend;
        // Delete it only if it is still ours (a lease that expired while
        // we were stalled may be another's by now).
        if let Ok(Some((lease, _))) = b.read_lease()
            && lease.owner == b.owner
        {
            let s3 = b.s3.clone();
            let p = b.path("lock");
            let _ = b.call(async move { s3.delete(&p).await });
        }
    }
}

struct LocalGuard<'a>(#[allow(dead_code)] MutexGuard<'a, ()>);
