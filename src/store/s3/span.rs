//! Reads of an object in the bucket: ranged GETs, or a stream's whole
//! span through one GET ([`S3Object::pieces`]) polled by its reader
//! ([`SpanGet`]: no task, no queue; the socket's buffer is the
//! read-ahead), its pieces handed on as the HTTP client gave them (the
//! store checks them in place, `store::pieces`).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::AmazonS3;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};

use super::io_err;
use crate::store::backend::{ObjectRead, Pieces, Span};

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

    /// The span's pieces ([`S3Object::pieces`]) read on a blocking thread
    /// (the local tier's copy from the bucket).
    fn span(&self, from: u64, to: u64) -> Option<Box<dyn Span>> {
        let pieces = self.pieces(from, to)?;
        Some(Box::new(S3Span {
            pieces,
            rt: self.rt.clone(),
            buf: Bytes::new(),
            pos: from,
            to,
        }))
    }

    /// A stream's bytes through one GET of the whole span: a ranged GET per
    /// 1 MiB chunk, even 4 of them in flight, reached 0.42x a direct GET
    /// from Garage (`bench/s3.sh`); one GET read into 1 MiB windows on
    /// blocking threads, 0.6-0.9x; its pieces forwarded as they come (no
    /// copy, no handoff per window): the copy gone from the profile, CPU
    /// per byte down in 8 s loops of GETs (8.4 against 9.9 ticks a 64 MiB
    /// GET), the ratio as noisy as before on a shared 2-core machine. The
    /// rest of the gap is the two cores Garage (about 3 s of CPU per GiB)
    /// shares with talos-gen (about 1.3 s, most of it the kernel's socket
    /// copies, then CRC32C) and the client. The GET's task moved from the
    /// backend's runtime to the reader's (one pool of workers for the
    /// connection, the GET and the response): talos-gen's CPU per GiB from
    /// 1312-1568 ms to 1024-1088 ms in four alternating `bench/s3.sh` runs
    /// each, the ratio 0.54-0.71 to 0.64-0.79. The task gone, the GET
    /// polled by the response itself (one hand-off fewer): 912-960 ms
    /// against 1056-1472 ms (`docs/performance.md`).
    fn pieces(&self, from: u64, to: u64) -> Option<Pieces> {
        if from >= to || to > self.len {
            // Chunk by chunk: `read_chunk` says what is wrong.
            return None;
        }
        #[cfg(feature = "bench-object-store-get")]
        if plain_get() {
            return Some(self.plain_pieces(from, to));
        }
        let get = SpanGet {
            obj: self.clone(),
            pos: from,
            to,
            reopens: 0,
            body: None,
            budget: self.timeout,
            brought: 0,
        };
        Some(Box::pin(futures::stream::unfold(
            Some(get),
            |get| async move {
                let mut get = get?;
                match get.next().await? {
                    Ok(b) => Some((Ok(b), Some(get))),
                    // The stream ends after its error.
                    Err(e) => Some((Err(e), None)),
                }
            },
        )))
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

/// `TALOS_GEN_S3_GET=object_store` in a binary built with the cargo feature
/// `bench-object-store-get` (`bench/s3.sh`'s comparison only; the shipped
/// binary has no such switch): a stream's span read through
/// `object_store`'s own streaming GET, on its own HTTP client (reqwest), in
/// place of [`SpanGet`] over [`super::conn`] (the span client earns its
/// lines only against it). Not for production: a GET that stalls after its
/// head waits on `object_store`'s own client timeout, with no floor.
#[cfg(feature = "bench-object-store-get")]
pub(super) fn plain_get() -> bool {
    static PLAIN_GET: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
        std::env::var("TALOS_GEN_S3_GET").is_ok_and(|v| v == "object_store")
    });
    *PLAIN_GET
}

/// Without the bench feature there is one S3 GET path: the span's.
#[cfg(not(feature = "bench-object-store-get"))]
pub(super) const fn plain_get() -> bool {
    false
}

#[cfg(feature = "bench-object-store-get")]
impl S3Object {
    /// The span through one `object_store` GET (see [`plain_get`]), its
    /// head bounded by the timeout.
    fn plain_pieces(&self, from: u64, to: u64) -> Pieces {
        let (s3, path, limit) = (self.streams.clone(), self.path.clone(), self.timeout);
        let opened = async move {
            let opts = object_store::GetOptions::new().with_range(Some(from..to));
            match tokio::time::timeout(limit, s3.get_opts(&path, opts)).await {
                Ok(Ok(r)) => r.into_stream().map(|b| b.map_err(io_err)).boxed(),
                Ok(Err(e)) => futures::stream::iter([Err(io_err(e))]).boxed(),
                Err(_) => futures::stream::iter([Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("a GET did not answer within {limit:?}"),
                ))])
                .boxed(),
            }
        };
        Box::pin(futures::stream::once(opened).flatten())
    }
}

/// Times in a row a span opens its GET again, from where it was, after a
/// failed one (a GET that brought [`SPAN_FLOOR`] bytes starts the count
/// anew: a bucket that fails every few KiB is cut, as the floor says).
const SPAN_REOPENS: u32 = 2;
/// A span's GET must bring this many bytes within each timeout (time spent
/// waiting for the reader not counted): the floor a ranged GET per 1 MiB,
/// each bounded by the timeout, used to give.
pub(super) const SPAN_FLOOR: usize = 1 << 20;

/// A span's GET, polled by its reader: no task and no queue between the
/// HTTP client's connection and the reader (the socket's buffer is the
/// read-ahead, so a slow reader holds no bytes of its own). One GET at a
/// time: cut when it brings less than [`SPAN_FLOOR`] bytes in a timeout
/// of waiting on the bucket (the reader's time is not counted: the clock
/// runs only while the reader waits for a piece); a GET that fails part
/// way is opened again from the next byte, at most [`SPAN_REOPENS`] times
/// in a row, unless its answer did not come within the timeout (a frozen
/// bucket: the span ends then, one timeout after the stall, or two when it
/// stalled mid-body); the reader dropping the span drops the GET.
struct SpanGet {
    obj: S3Object,
    pos: u64,
    to: u64,
    reopens: u32,
    body: Option<futures::stream::BoxStream<'static, object_store::Result<Bytes>>>,
    /// What is left of the current timeout: it starts again with the
    /// GET and with each [`SPAN_FLOOR`] bytes it brings.
    budget: Duration,
    /// Bytes the current GET brought.
    brought: usize,
}

impl SpanGet {
    /// The next piece; `None` once the span is whole.
    async fn next(&mut self) -> Option<io::Result<Bytes>> {
        let limit = self.obj.timeout;
        let late = |what: &str| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} did not come within {limit:?}"),
            )
        };
        loop {
            if self.pos >= self.to {
                return None;
            }
            let body = match &mut self.body {
                Some(b) => b,
                None => {
                    let opts = object_store::GetOptions {
                        range: Some(object_store::GetRange::Bounded(self.pos..self.to)),
                        ..Default::default()
                    };
                    let get = self.obj.streams.get_opts(&self.obj.path, opts);
                    let e = match tokio::time::timeout(limit, get).await {
                        Ok(Ok(r)) => {
                            self.budget = limit;
                            self.body = Some(r.into_stream());
                            continue;
                        }
                        Ok(Err(e)) => io_err(e),
                        // A bucket that does not answer at all is not asked
                        // again: a reopen would only add a timeout to the
                        // wait of a reader that may have no byte yet.
                        Err(_) => return Some(Err(late("the answer to a GET"))),
                    };
                    match self.failed(e) {
                        Some(e) => return Some(Err(e)),
                        None => continue,
                    }
                }
            };
            let t = tokio::time::Instant::now();
            let next = tokio::time::timeout(self.budget, body.next()).await;
            self.budget = self.budget.saturating_sub(t.elapsed());
            let e = match next {
                Ok(Some(Ok(b))) if b.len() as u64 > self.to - self.pos => {
                    io::Error::other("a GET brought more bytes than asked for")
                }
                Ok(Some(Ok(b))) => {
                    // Another SPAN_FLOOR bytes in: a new timeout.
                    if (self.brought + b.len()) / SPAN_FLOOR > self.brought / SPAN_FLOOR {
                        self.budget = limit;
                    }
                    self.brought += b.len();
                    self.pos += b.len() as u64;
                    return Some(Ok(b));
                }
                Ok(Some(Err(e))) => io_err(e),
                Ok(None) => io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "a GET ended before the bytes asked for",
                ),
                Err(_) => late(&format!("{SPAN_FLOOR} bytes of a GET")),
            };
            if let Some(e) = self.failed(e) {
                return Some(Err(e));
            }
        }
    }

    /// The current GET failed with `e`: `Some(e)` ends the span, `None`
    /// opens it again from where it was.
    fn failed(&mut self, e: io::Error) -> Option<io::Error> {
        self.body = None;
        // The bytes count once: a reopen that fails at once did not bring them.
        if std::mem::take(&mut self.brought) >= SPAN_FLOOR {
            self.reopens = 0;
        }
        if self.reopens >= SPAN_REOPENS {
            return Some(e);
        }
        self.reopens += 1;
        tracing::warn!(error = %e, "a GET from the bucket failed part way; asking again from where it was");
        None
    }
}

/// A span's pieces read in `n`-byte steps on a blocking thread.
struct S3Span {
    pieces: Pieces,
    /// The backend's runtime, entered while the GET is polled here (its
    /// timers and connection need one; the caller's thread may have none).
    rt: tokio::runtime::Handle,
    buf: Bytes,
    pos: u64,
    to: u64,
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
                // Blocking: this runs on a blocking thread, the GET polled
                // here in the backend's runtime, every wait bounded.
                let _in_rt = self.rt.enter();
                match futures::executor::block_on(self.pieces.next()) {
                    Some(Ok(b)) => self.buf = b,
                    Some(Err(e)) => return Err(e),
                    None => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "a GET ended before the bytes asked for",
                        ));
                    }
                }
                continue;
            }
            // A piece that holds the whole read is handed out as it is.
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
