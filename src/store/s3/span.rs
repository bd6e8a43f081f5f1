//! Reads of an object in the bucket: ranged GETs, or a stream's whole
//! span through one GET ([`S3Span`]).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::AmazonS3;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};

use super::io_err;
use crate::store::backend::{ObjectRead, Span};

/// An object in the bucket: read by ranged GETs, or a stream's whole span
/// through one GET ([`S3Span`]).
#[derive(Clone)]
pub(super) struct S3Object {
    pub(super) s3: Arc<AmazonS3>,
    /// The client of span GETs.
    pub(super) streams: Arc<AmazonS3>,
    pub(super) path: ObjPath,
    pub(super) len: u64,
    pub(super) timeout: Duration,
    pub(super) rt: tokio::runtime::Handle,
}

impl ObjectRead for S3Object {
    fn len(&self) -> u64 {
        self.len
    }

    /// A stream's bytes through one GET of the whole span: a ranged GET per
    /// 1 MiB chunk, even 4 of them in flight, reached 0.42x a direct GET
    /// from Garage (`bench/s3.sh`); one GET, about 0.7x.
    fn span(&self, from: u64, to: u64) -> Option<Box<dyn Span>> {
        if from >= to || to > self.len {
            // Chunk by chunk: `read_chunk` says what is wrong.
            return None;
        }
        let mut span = S3Span {
            object: self.clone(),
            pos: from,
            to,
            rx: None,
            buf: Bytes::new(),
            reopens: 0,
            brought: 0,
        };
        span.open();
        Some(Box::new(span))
    }

    fn read_chunk(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        if pos + len as u64 > self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "stored object is shorter than its entry",
            ));
        }
        let s3 = self.s3.clone();
        let p = self.path.clone();
        let limit = self.timeout;
        let task = self.rt.spawn(async move {
            tokio::time::timeout(limit, s3.get_range(&p, pos..pos + len as u64)).await
        });
        let b = match futures::executor::block_on(task) {
            Ok(Ok(r)) => r.map_err(io_err)?,
            Ok(Err(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("a ranged GET did not finish within {limit:?}"),
                ));
            }
            Err(e) => return Err(io::Error::other(e)),
        };
        if b.len() != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("a ranged GET gave {} bytes of {len}", b.len()),
            ));
        }
        Ok(b)
    }
}

/// Body chunks a span's GET may have in flight ahead of its reader (the
/// HTTP client's reads: up to about 400 KiB each, so about 2 MiB queued).
const SPAN_BUFFER: usize = 4;
/// Times in a row a span opens its GET again, from where it was, after a
/// failed one (a GET that brought [`SPAN_FLOOR`] bytes starts the count
/// anew: a bucket that fails every few KiB is cut, as the floor says).
const SPAN_REOPENS: u32 = 2;
/// A span's GET must bring this many bytes within each timeout (time spent
/// waiting for the reader not counted): the floor a ranged GET per 1 MiB,
/// each bounded by the timeout, used to give.
const SPAN_FLOOR: usize = 1 << 20;

/// `pos..to` of an object read through one GET: a task on the backend's
/// runtime pulls the body into a bounded channel the reader takes from,
/// cut when it brings less than [`SPAN_FLOOR`] bytes in a timeout. A GET
/// that fails part way is opened again from the next byte, at most
/// [`SPAN_REOPENS`] times in a row; the reader dropping the span ends the
/// GET at its next chunk.
struct S3Span {
    object: S3Object,
    pos: u64,
    to: u64,
    rx: Option<tokio::sync::mpsc::Receiver<io::Result<Bytes>>>,
    buf: Bytes,
    reopens: u32,
    /// Bytes the current GET brought.
    brought: usize,
}

impl S3Span {
    fn open(&mut self) {
        self.brought = 0;
        let (tx, rx) = tokio::sync::mpsc::channel(SPAN_BUFFER);
        let (s3, path, limit) = (
            self.object.streams.clone(),
            self.object.path.clone(),
            self.object.timeout,
        );
        let range = self.pos..self.to;
        self.object.rt.spawn(async move {
            let late = |what: &str| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what} did not come within {limit:?}"),
                )
            };
            let opts = object_store::GetOptions {
                range: Some(object_store::GetRange::Bounded(range)),
                ..Default::default()
            };
            let get = tokio::select! {
                r = tokio::time::timeout(limit, s3.get_opts(&path, opts)) => r,
                _ = tx.closed() => return,
            };
            let mut body = match get {
                Ok(Ok(r)) => r.into_stream(),
                Ok(Err(e)) => {
                    let _ = tx.send(Err(io_err(e))).await;
                    return;
                }
                Err(_) => {
                    let _ = tx.send(Err(late("the answer to a GET"))).await;
                    return;
                }
            };
            // The floor: SPAN_FLOOR bytes per `limit` of waiting on the body.
            let (mut budget, mut got) = (limit, 0usize);
            loop {
                let t = tokio::time::Instant::now();
                let next = tokio::select! {
                    r = tokio::time::timeout(budget, body.next()) => r,
                    _ = tx.closed() => return,
                };
                budget = budget.saturating_sub(t.elapsed());
                let item = match next {
                    Ok(Some(Ok(b))) => {
                        got += b.len();
                        if got >= SPAN_FLOOR {
                            (budget, got) = (limit, got % SPAN_FLOOR);
                        }
                        Ok(b)
                    }
                    Ok(Some(Err(e))) => Err(io_err(e)),
                    Ok(None) => return,
                    Err(_) => Err(late(&format!("{SPAN_FLOOR} bytes of a GET"))),
                };
                let failed = item.is_err();
                // A reader gone (the client left) ends the GET here.
                if tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        self.rx = Some(rx);
    }
}

impl Span for S3Span {
    fn next_bytes(&mut self, n: usize) -> io::Result<Bytes> {
        if self.pos + n as u64 > self.to {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a span read past its end",
            ));
        }
        let mut out = bytes::BytesMut::new();
        while out.len() < n {
            if self.buf.is_empty() {
                let got = match self.rx.as_mut() {
                    Some(rx) => rx.blocking_recv(),
                    None => None,
                };
                match got {
                    Some(Ok(b)) => {
                        self.brought += b.len();
                        if self.brought >= SPAN_FLOOR {
                            self.reopens = 0;
                        }
                        self.buf = b;
                    }
                    // Ended or failed before the span's end: again from
                    // the next byte, a bounded number of times.
                    other => {
                        let err = match other {
                            Some(Err(e)) => e,
                            _ => io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "a GET ended before the bytes asked for",
                            ),
                        };
                        if self.reopens >= SPAN_REOPENS {
                            return Err(err);
                        }
                        self.reopens += 1;
                        tracing::warn!(error = %err, "a GET from the bucket failed part way; asking again from where it was");
                        self.open();
                    }
                }
                continue;
            }
            // A chunk that holds the whole read is handed out as it is.
            if out.is_empty() && self.buf.len() >= n {
                self.pos += n as u64;
                return Ok(self.buf.split_to(n));
            }
            if out.capacity() == 0 {
                out.reserve(n);
            }
            let take = (n - out.len()).min(self.buf.len());
            out.extend_from_slice(&self.buf.split_to(take));
            self.pos += take as u64;
        }
        Ok(out.freeze())
    }
}
