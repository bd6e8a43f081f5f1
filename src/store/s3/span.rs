//! Reads of an object in the bucket: ranged GETs, or a stream's whole
//! span through one GET ([`S3Object::pieces`]): a task on the reader's
//! runtime (the server's; the backend's own without one) pulls the body
//! into a read-ahead bounded in bytes ([`SPAN_AHEAD`]), and the body's
//! pieces go to the reader as the HTTP client gave them (the store checks
//! them in place, `store::pieces`).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::AmazonS3;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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
    /// each, the ratio 0.54-0.71 to 0.64-0.79.
    fn pieces(&self, from: u64, to: u64) -> Option<Pieces> {
        if from >= to || to > self.len {
            // Chunk by chunk: `read_chunk` says what is wrong.
            return None;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(SPAN_AHEAD));
        // On the reader's runtime when it has a multi-threaded one (the
        // server's): the GET's connection and the reader then wake each
        // other on one pool of workers, not across two runtimes.
        let rt = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => h,
            _ => self.rt.clone(),
        };
        rt.spawn(self.clone().get_span(from, to, tx, room));
        // A piece's room in the read-ahead is free once the reader has it.
        Some(Box::pin(futures::stream::poll_fn(move |cx| {
            rx.poll_recv(cx).map(|o| o.map(|r| r.map(|(b, _room)| b)))
        })))
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

/// Bytes a span's GET may read ahead of its reader (a piece larger than
/// this waits for the whole read-ahead to be free).
const SPAN_AHEAD: usize = 2 << 20;
/// Times in a row a span opens its GET again, from where it was, after a
/// failed one (a GET that brought [`SPAN_FLOOR`] bytes starts the count
/// anew: a bucket that fails every few KiB is cut, as the floor says).
const SPAN_REOPENS: u32 = 2;
/// A span's GET must bring this many bytes within each timeout (time spent
/// waiting for the reader not counted): the floor a ranged GET per 1 MiB,
/// each bounded by the timeout, used to give.
const SPAN_FLOOR: usize = 1 << 20;

/// What a span's GET hands its reader: a piece of the body with its room
/// in the read-ahead, or the error that ends the span.
type Piece = io::Result<(Bytes, OwnedSemaphorePermit)>;

/// Why one GET of a span stopped.
enum Stop {
    /// The span is whole, or its reader is gone.
    Done,
    /// It failed, having brought this many bytes.
    Failed(io::Error, usize),
}

impl S3Object {
    /// `pos..to` into `tx`, on the backend's runtime, through one GET at
    /// a time: cut when it brings less than [`SPAN_FLOOR`] bytes in a
    /// timeout; a GET that fails part way is opened again from the next
    /// byte, at most [`SPAN_REOPENS`] times in a row; the reader dropping
    /// the span ends the GET at once.
    async fn get_span(
        self,
        mut pos: u64,
        to: u64,
        tx: UnboundedSender<Piece>,
        room: Arc<Semaphore>,
    ) {
        let mut reopens = 0;
        loop {
            let (err, brought) = match self.get_once(&mut pos, to, &tx, &room).await {
                Stop::Done => return,
                Stop::Failed(e, n) => (e, n),
            };
            if brought >= SPAN_FLOOR {
                reopens = 0;
            }
            if reopens >= SPAN_REOPENS {
                let _ = tx.send(Err(err));
                return;
            }
            reopens += 1;
            tracing::warn!(error = %err, "a GET from the bucket failed part way; asking again from where it was");
        }
    }

    /// One GET of `pos..to`, its pieces into `tx` (`pos` follows them).
    async fn get_once(
        &self,
        pos: &mut u64,
        to: u64,
        tx: &UnboundedSender<Piece>,
        room: &Arc<Semaphore>,
    ) -> Stop {
        let limit = self.timeout;
        let late = |what: &str| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} did not come within {limit:?}"),
            )
        };
        let opts = object_store::GetOptions {
            range: Some(object_store::GetRange::Bounded(*pos..to)),
            ..Default::default()
        };
        let get = tokio::select! {
            r = tokio::time::timeout(limit, self.streams.get_opts(&self.path, opts)) => r,
            _ = tx.closed() => return Stop::Done,
        };
        let mut body = match get {
            Ok(Ok(r)) => r.into_stream(),
            Ok(Err(e)) => return Stop::Failed(io_err(e), 0),
            Err(_) => return Stop::Failed(late("the answer to a GET"), 0),
        };
        // The floor: SPAN_FLOOR bytes per `limit` of waiting on the body.
        let (mut budget, mut got, mut brought) = (limit, 0usize, 0usize);
        loop {
            let t = tokio::time::Instant::now();
            let next = tokio::select! {
                r = tokio::time::timeout(budget, body.next()) => r,
                _ = tx.closed() => return Stop::Done,
            };
            budget = budget.saturating_sub(t.elapsed());
            let b = match next {
                Ok(Some(Ok(b))) => b,
                Ok(Some(Err(e))) => return Stop::Failed(io_err(e), brought),
                Ok(None) if *pos >= to => return Stop::Done,
                Ok(None) => {
                    let e = io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "a GET ended before the bytes asked for",
                    );
                    return Stop::Failed(e, brought);
                }
                Err(_) => {
                    return Stop::Failed(late(&format!("{SPAN_FLOOR} bytes of a GET")), brought);
                }
            };
            if b.len() as u64 > to - *pos {
                let e = io::Error::other("a GET brought more bytes than asked for");
                return Stop::Failed(e, brought);
            }
            got += b.len();
            if got >= SPAN_FLOOR {
                (budget, got) = (limit, got % SPAN_FLOOR);
            }
            brought += b.len();
            // Room in the read-ahead: the reader's time, not the bucket's.
            let n = b.len().min(SPAN_AHEAD) as u32;
            let permit = tokio::select! {
                p = room.clone().acquire_many_owned(n) => match p {
                    Ok(p) => p,
                    Err(_) => return Stop::Done,
                },
                _ = tx.closed() => return Stop::Done,
            };
            *pos += b.len() as u64;
            if tx.send(Ok((b, permit))).is_err() {
                return Stop::Done;
            }
        }
    }
}

/// A span's pieces read in `n`-byte steps on a blocking thread.
struct S3Span {
    pieces: Pieces,
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
                // Blocking: this runs on a blocking thread (the pieces
                // come from the backend's runtime, every wait bounded).
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
