//! Uploads: a verified spool file becomes an object by one PUT, or a
//! multipart upload streamed from the file ([`PART`] bytes a part, at most
//! [`PARTS_IN_FLIGHT`] in memory), completed only when every part is
//! there and aborted on any failure, so the bucket never shows part of an
//! object.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};

use super::{S3Backend, io_err};

/// Bytes per multipart part (S3 wants at least 5 MiB but for the last).
pub const PART: usize = 8 << 20;
/// Parts uploading at once (memory per upload: this many parts and one
/// being read).
pub const PARTS_IN_FLIGHT: usize = 2;

impl S3Backend {
    /// Upload the spool file as `path`: one PUT when it fits a part, else
    /// a multipart upload streamed from the file, aborted on failure.
    pub(super) fn upload(&self, path: &ObjPath, file: &File, len: u64) -> io::Result<()> {
        let read = |pos: u64, n: usize| -> io::Result<Bytes> {
            let mut buf = vec![0u8; n];
            file.read_exact_at(&mut buf, pos)?;
            Ok(Bytes::from(buf))
        };
        if len <= PART as u64 {
            let body = read(0, len as usize)?;
            let s3 = self.s3.clone();
            let p = path.clone();
            return self
                .call(async move { s3.put(&p, PutPayload::from(body)).await })
                .map(drop);
        }
        let s3 = self.s3.clone();
        let p = path.clone();
        let _mine = self.uploading.enter(path.as_ref());
        let mut up = self.call(async move { s3.put_multipart(&p).await })?;
        let rt = self.rt.as_ref().expect("runtime present until drop");
        let res = (|| {
            let mut inflight = std::collections::VecDeque::new();
            let mut pos = 0u64;
            while pos < len {
                let n = ((len - pos) as usize).min(PART);
                let body = read(pos, n)?;
                pos += n as u64;
                if inflight.len() >= PARTS_IN_FLIGHT {
                    let h: tokio::task::JoinHandle<_> =
                        inflight.pop_front().expect("a part in flight");
                    wait_part(h)?;
                }
                let part = up.put_part(PutPayload::from(body));
                let limit = self.cfg.timeout;
                inflight
                    .push_back(rt.spawn(async move { tokio::time::timeout(limit, part).await }));
            }
            for h in inflight {
                wait_part(h)?;
            }
            Ok::<_, io::Error>(())
        })();
        // `complete` and `abort` need the upload back on the runtime.
        let (tx, rx) = std::sync::mpsc::channel();
        let limit = self.cfg.timeout;
        let ok = res.is_ok();
        rt.spawn(async move {
            let r = if ok {
                tokio::time::timeout(limit, up.complete())
                    .await
                    .map(|r| r.map(drop))
            } else {
                tokio::time::timeout(limit, up.abort()).await
            };
            let _ = tx.send(r);
        });
        let done = rx
            .recv_timeout(limit + Duration::from_secs(1))
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "completing an upload"))?;
        res?;
        match done {
            Ok(r) => r.map_err(io_err),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("completing an upload did not finish within {limit:?}"),
            )),
        }
    }
}

fn wait_part(
    h: tokio::task::JoinHandle<Result<object_store::Result<()>, tokio::time::error::Elapsed>>,
) -> io::Result<()> {
    match futures::executor::block_on(h) {
        Ok(Ok(r)) => r.map_err(io_err),
        Ok(Err(_)) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "uploading a part timed out",
        )),
        Err(e) => Err(io::Error::other(e)),
    }
}
