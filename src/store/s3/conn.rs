//! The HTTP client of span GETs ([`SpanClient`]): hyper's HTTP/1
//! connection, plain or in TLS (an `https://` endpoint: rustls, the
//! platform's verifier as reqwest has it), over a socket whose receive
//! low-water mark (`SO_RCVLOWAT`) follows what the GET still has to
//! bring, so the reader of a stream is woken once a [`LOWAT`] of body has
//! come instead of once per TCP segment, and holds at most hyper's
//! [`READ_BUF`].
//!
//! Why: each wakeup is paid by the bucket's server and by the reader;
//! reqwest keeps its sockets to itself, hence this client, given to
//! `object_store` as its [`HttpConnector`] for the span GETs only (what
//! the mark saved: `docs/performance.md`).
//!
//! The mark never waits for bytes that are not coming: it is at most what
//! the GET's body still has to bring less [`HELD`] (what hyper and rustls
//! may hold unread), and 1 outside a body; an early end or a close wakes
//! the reader whatever the mark.
//!
//! No task: hyper's connection is driven by whoever waits on it
//! ([`MarkedBody`] polls it before each look at the body), so a piece goes
//! from the socket to the reader on one thread. A body dropped part way
//! drops its connection; one read to its end is kept for the next GET
//! ([`POOL`] at most) and looked at before reuse; while any is kept, a task
//! closes every [`SWEEP`] those the server closed or unused for [`IDLE`].

use std::future::Future;
use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpResponseBody, HttpService,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// The highest mark: the bytes a reader waits for before it is woken.
/// Never past the body's next multiple of the span's pace floor (the
/// `floor` of [`SpanClient::new`]): a bucket that brings the floor within
/// a timeout wakes its reader the moment it has, as without a mark.
const LOWAT: usize = 1 << 20;
/// The socket's receive buffer, set before it connects, well above the
/// mark. Left to the kernel, setting a mark raises the buffer to about the
/// mark (and no further while the reader waits), so a full window, not
/// the mark, woke the reader, short of the floor's next multiple: a bucket
/// at 1.1-1.9x the floor's pace had its GETs cut (found by a hostile
/// pass). Fixed, it is the window's bound too: 4 MiB asked (the kernel
/// doubles it), near the 6 MiB the kernel's own tuning stops at.
const RCVBUF: u32 = 4 << 20;
/// hyper's read buffer (its `max_buf_size`).
const READ_BUF: usize = 256 << 10;
/// What hyper may hold that the body has not handed over: its read buffer
/// and one piece in its channel (and rustls a record), with room to spare.
const HELD: u64 = 4 * READ_BUF as u64;
/// Idle connections kept.
const POOL: usize = 8;
/// A kept connection unused this long is closed (as reqwest's pool does,
/// `object_store`'s other calls: 30 s).
const IDLE: Duration = Duration::from_secs(30);
/// How often the kept connections are looked at.
const SWEEP: Duration = Duration::from_secs(5);

/// The span GETs' client: [`HttpConnector`] for `object_store`.
#[derive(Debug, Clone)]
pub(super) struct SpanClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// `https` endpoints: the TLS client (`None`: plain HTTP only).
    tls: Option<TlsConnector>,
    connect_timeout: Duration,
    /// The span's pace floor: the mark never reaches past its next multiple.
    floor: u64,
    idle: Mutex<Vec<Conn>>,
    /// Whether the task that looks at kept connections runs.
    sweeping: AtomicBool,
}

/// hyper's side of one connection: polled by whoever waits on it (the
/// GET's answer, then its body), no task of its own.
type Driver =
    Pin<Box<hyper::client::conn::http1::Connection<TokioIo<Stream>, http_body_util::Empty<Bytes>>>>;

/// One connection: hyper's sender and driver, and the socket's wanted mark.
struct Conn {
    tls: bool,
    authority: String,
    /// When it was last given back.
    since: Instant,
    send: SendRequest<http_body_util::Empty<Bytes>>,
    driver: Driver,
    mark: Arc<AtomicUsize>,
}

impl Conn {
    /// Poll the connection once; false once it has ended (never polled
    /// again then).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        self.driver.as_mut().poll(cx).is_pending()
    }

    /// Whether a kept connection can take a request: polled once (a
    /// closed one ends) without waiting.
    fn ready(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.drive(&mut cx) && self.send.is_ready()
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("authority", &self.authority)
            .finish()
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanClient")
            .field("tls", &self.tls.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl SpanClient {
    /// A client of plain-HTTP endpoints, and with `tls` of HTTPS ones too
    /// ([`tls_connector`]).
    pub(super) fn new(
        connect_timeout: Duration,
        floor: usize,
        tls: Option<TlsConnector>,
    ) -> SpanClient {
        SpanClient {
            inner: Arc::new(Inner {
                tls,
                connect_timeout,
                floor: floor.max(1) as u64,
                idle: Mutex::new(Vec::new()),
                sweeping: AtomicBool::new(false),
            }),
        }
    }
}

/// The TLS client of HTTPS endpoints: ring, and the platform's verifier
/// (the system's roots, `SSL_CERT_FILE`/`SSL_CERT_DIR` where set), as
/// reqwest gives `object_store`'s other calls; HTTP/1.1 only (ALPN).
pub(super) fn tls_connector() -> io::Result<TlsConnector> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone())
        .map_err(|e| io::Error::other(format!("the TLS verifier: {e}")))?;
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| io::Error::other(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(cfg)))
}

impl HttpConnector for SpanClient {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(self.clone()))
    }
}

fn err(kind: HttpErrorKind, e: impl std::error::Error + Send + Sync + 'static) -> HttpError {
    HttpError::new(kind, e)
}

fn other(kind: HttpErrorKind, msg: &str) -> HttpError {
    err(kind, io::Error::other(msg.to_string()))
}

impl HttpService for SpanClient {
    fn call<'a, 'b>(
        &'a self,
        req: HttpRequest,
    ) -> Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(self.inner.clone().call(req))
    }
}

impl Inner {
    async fn call(self: Arc<Self>, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let (parts, body) = req.into_parts();
        if !body.is_empty() {
            return Err(other(
                HttpErrorKind::Request,
                "the span client sends requests without a body only",
            ));
        }
        let uri = &parts.uri;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") if self.tls.is_some() => true,
            _ => {
                return Err(other(
                    HttpErrorKind::Request,
                    "the span client speaks HTTP, and HTTPS when built with TLS, only",
                ));
            }
        };
        let Some(authority) = uri.authority().map(|a| a.as_str().to_string()) else {
            return Err(other(HttpErrorKind::Request, "a URL without a host"));
        };
        let mut conn = match self.take(tls, &authority) {
            Some(c) => c,
            None => self.open(tls, &authority).await?,
        };
        let mut out = axum::http::Request::builder()
            .method(parts.method)
            .uri(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
            .version(axum::http::Version::HTTP_11)
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| err(HttpErrorKind::Request, e))?;
        *out.headers_mut() = parts.headers;
        // The host the request was signed for (SigV4 signs `host`, then
        // leaves the header to the client).
        out.headers_mut().insert(
            axum::http::header::HOST,
            axum::http::HeaderValue::from_str(&authority)
                .map_err(|e| err(HttpErrorKind::Request, e))?,
        );
        // The answer, the connection driven meanwhile.
        let mut answer = std::pin::pin!(conn.send.send_request(out));
        let mut open = true;
        let res = std::future::poll_fn(|cx| {
            if open {
                open = conn.drive(cx);
            }
            answer.as_mut().poll(cx)
        })
        .await
        .map_err(|e| err(HttpErrorKind::Request, e))?;
        let (parts, incoming) = res.into_parts();
        let len = incoming.size_hint().exact();
        let mut body = MarkedBody {
            incoming,
            len,
            handed: 0,
            conn: Mutex::new(open.then_some(conn)),
            pool: self.clone(),
        };
        body.set_mark();
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }

    /// A kept connection to `authority` that can take a request (each
    /// looked at out of the lock; one that cannot is dropped).
    fn take(&self, tls: bool, authority: &str) -> Option<Conn> {
        loop {
            let mut c = {
                let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                let i = idle
                    .iter()
                    .position(|c| c.tls == tls && c.authority == authority)?;
                idle.swap_remove(i)
            };
            if c.ready() {
                return Some(c);
            }
        }
    }

    /// Keep `conn` for the next GET (at most [`POOL`]), and have the
    /// kept ones looked at while any is kept ([`sweep`]).
    fn put(self: &Arc<Self>, mut conn: Conn) {
        conn.mark.store(1, Ordering::Relaxed);
        conn.since = Instant::now();
        let over = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < POOL {
                idle.push(conn);
                None
            } else {
                Some(conn)
            }
        };
        // One too many is closed out of the lock.
        if over.is_some() {
            return;
        }
        if !self.sweeping.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn(sweep(Arc::downgrade(self)))),
                Err(_) => self.sweeping.store(false, Ordering::Release),
            }
        }
    }

    /// A connection to `authority`, in TLS where `tls`: the socket and the
    /// TLS handshake within the connect timeout.
    async fn open(&self, tls: bool, authority: &str) -> Result<Conn, HttpError> {
        let mark = Arc::new(AtomicUsize::new(1));
        let io = tokio::time::timeout(self.connect_timeout, self.stream(tls, authority, &mark))
            .await
            .map_err(|_| {
                other(
                    HttpErrorKind::Connect,
                    &format!(
                        "connecting to {authority} took over {:?}",
                        self.connect_timeout
                    ),
                )
            })??;
        let (send, conn) = hyper::client::conn::http1::Builder::new()
            .max_buf_size(READ_BUF)
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| err(HttpErrorKind::Connect, e))?;
        Ok(Conn {
            tls,
            authority: authority.to_string(),
            since: Instant::now(),
            send,
            driver: Box::pin(conn),
            mark,
        })
    }

    /// The marked socket to `authority` (`host` alone: port 80, or 443 in
    /// TLS, the URL's authority as signed), in TLS where `tls`.
    async fn stream(
        &self,
        tls: bool,
        authority: &str,
        mark: &Arc<AtomicUsize>,
    ) -> Result<Stream, HttpError> {
        let a = authority
            .parse::<axum::http::uri::Authority>()
            .map_err(|e| err(HttpErrorKind::Connect, e))?;
        let port = a.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let host = a.host().trim_start_matches('[').trim_end_matches(']');
        let tcp = connect(&format!("{}:{port}", a.host()))
            .await
            .map_err(|e| err(HttpErrorKind::Connect, e))?;
        tcp.set_nodelay(true)
            .map_err(|e| err(HttpErrorKind::Connect, e))?;
        let io = MarkedSocket {
            tcp,
            mark: mark.clone(),
            set: 1,
        };
        let Some(connector) = self.tls.as_ref().filter(|_| tls) else {
            return Ok(Stream::Plain(io));
        };
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|e| err(HttpErrorKind::Connect, e))?;
        let s = connector
            .connect(name, io)
            .await
            .map_err(|e| err(HttpErrorKind::Connect, e))?;
        Ok(Stream::Tls(Box::new(s)))
    }
}

/// Every [`SWEEP`] while connections are kept: each looked at out of the
/// lock, those closed by the server or unused for [`IDLE`] closed; the
/// task ends when none is left (the next [`Inner::put`] starts another)
/// or the client is gone.
async fn sweep(pool: Weak<Inner>) {
    loop {
        tokio::time::sleep(SWEEP).await;
        let Some(p) = pool.upgrade() else { return };
        let kept = std::mem::take(&mut *p.idle.lock().unwrap_or_else(|e| e.into_inner()));
        let kept: Vec<Conn> = kept
            .into_iter()
            .filter_map(|mut c| (c.since.elapsed() < IDLE && c.ready()).then_some(c))
            .collect();
        let mut over = Vec::new();
        {
            let mut idle = p.idle.lock().unwrap_or_else(|e| e.into_inner());
            for c in kept {
                if idle.len() < POOL {
                    idle.push(c);
                } else {
                    over.push(c);
                }
            }
            if idle.is_empty() {
                p.sweeping.store(false, Ordering::Release);
                return;
            }
        }
        // Those too many (others were given back meanwhile), closed out of the lock.
        drop(over);
    }
}

/// A response body that keeps its socket's mark at what it still has to
/// bring, and gives its connection back once read to its end.
struct MarkedBody {
    incoming: hyper::body::Incoming,
    /// The body's length (`None`: none given; the mark stays at 1).
    len: Option<u64>,
    /// Body bytes handed over.
    handed: u64,
    /// The connection, driven before each look at the body; given back
    /// once the body is whole. (A `Mutex` for `Sync` only: reached through
    /// `&mut`, never locked.)
    conn: Mutex<Option<Conn>>,
    pool: Arc<Inner>,
}

impl MarkedBody {
    fn conn(&mut self) -> &mut Option<Conn> {
        self.conn.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    /// Body bytes not yet handed over.
    fn left(&self) -> Option<u64> {
        self.len.map(|l| l.saturating_sub(self.handed))
    }

    fn set_mark(&mut self) {
        let (left, floor) = (self.left(), self.pool.floor);
        let to_floor = floor - self.handed % floor;
        if let (Some(c), Some(left)) = (self.conn(), left) {
            let m = left
                .saturating_sub(HELD)
                .min(to_floor)
                .clamp(1, LOWAT as u64) as usize;
            c.mark.store(m, Ordering::Relaxed);
        }
    }
}

impl Drop for MarkedBody {
    fn drop(&mut self) {
        // A body dropped part way: its connection goes with it (closed
        // with its socket).
        drop(self.conn().take());
    }
}

impl Body for MarkedBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        let conn = this.conn();
        if let Some(c) = conn
            && !c.drive(cx)
        {
            // The connection ended: what it brought is in the body's channel.
            *conn = None;
        }
        match Pin::new(&mut this.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    this.handed += d.len() as u64;
                    this.set_mark();
                    // The whole body handed over: the connection can take
                    // the next GET (a reader that has all it asked for
                    // need not poll for the end).
                    if this.left() == Some(0)
                        && let Some(mut c) = this.conn().take()
                        && c.drive(cx)
                    {
                        this.pool.put(c);
                    }
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(err(HttpErrorKind::Decode, e)))),
            Poll::Ready(None) => {
                if let Some(c) = this.conn().take() {
                    this.pool.put(c);
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

/// The connection's socket: sets `SO_RCVLOWAT` to the wanted mark before
/// a read where it changed.
struct MarkedSocket {
    tcp: TcpStream,
    mark: Arc<AtomicUsize>,
    set: usize,
}

impl AsyncRead for MarkedSocket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let want = self.mark.load(Ordering::Relaxed);
        if want != self.set {
            let v = want.min(i32::MAX as usize) as libc::c_int;
            // SAFETY: a valid socket owned by `self.tcp`; an int option.
            let r = unsafe {
                libc::setsockopt(
                    self.tcp.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVLOWAT,
                    &v as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            // Where the kernel refused, the next read asks again.
            if r == 0 {
                self.set = want;
            }
        }
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for MarkedSocket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// A connection's byte stream: the marked socket, plain or in TLS.
enum Stream {
    Plain(MarkedSocket),
    Tls(Box<TlsStream<MarkedSocket>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// A socket to `addr` (`host:port`) with its receive buffer at [`RCVBUF`]:
/// each address the name gives, in turn.
async fn connect(addr: &str) -> io::Result<TcpStream> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let sock = if a.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        sock.set_recv_buffer_size(RCVBUF)?;
        match sock.connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, format!("{addr} names no address"))
    }))
}
