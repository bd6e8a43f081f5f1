//! Limits and access control at the HTTP edge:
//!
//! - [`enforce`]: the route policy table ([`super::ROUTES`]): with
//!   `--api-token-file`, a write to a [`Writes::Token`] route needs
//!   `Authorization: Bearer <token>` ([`super::token::ApiToken`]), 401
//!   otherwise; a [`Writes::PinnedWithToken`] route learns whether what it
//!   stores may be pinned ([`PinWrites`]); a store-gated route is 503 while the
//!   store does not answer.
//! - [`track`]: request counts and latency by route template and status.
//! - [`WriteGuard`]: a socket wrapper that fails a write stalled for longer
//!   than the write timeout, so a client that stops reading cannot hold a
//!   connection (and its file descriptor) forever.
//! - [`BODY_LIMIT`]: request bodies above 1 MiB are refused with 413.
//! - [`body_deadline`]: a request body must arrive whole within the body
//!   read timeout (408 and the connection closed), so a client that sends a
//!   head and then stalls or trickles its body cannot hold a connection
//!   (and a handler, and a descriptor) forever.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Writes;
use super::state::AppState;

/// Largest request body accepted (POST endpoints): 1 MiB.
pub const BODY_LIMIT: usize = 1 << 20;

/// Largest request header fields accepted: 32 KiB (431 above, [`head_size`]).
pub const HEADER_LIMIT: usize = 32 << 10;

/// Longest request target accepted: 32 KiB (414 above, [`head_size`]).
pub const URI_LIMIT: usize = 32 << 10;

/// Largest request head hyper reads whole (request line and fields): room
/// for hyper's own 64 KiB bound on the target (414 past it) and the
/// fields, so a long URI is told 414, not 431.
pub const HEAD_BUFFER: usize = 80 << 10;

/// Most header fields accepted in one request.
pub const MAX_HEADERS: usize = 100;

/// What a write may keep, as [`enforce`] decided it for the request: pinned
/// (never evicted) only with the token, else cache (`--cache-max-size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinWrites(pub bool);

/// Is this request a write (any method but GET/HEAD/OPTIONS)?
fn is_write(req: &Request) -> bool {
    !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Middleware: apply the route's row of [`super::ROUTES`].
pub async fn enforce(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let template = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    let policy = super::route_policy(&template);
    let token = st.api_token.as_ref().map(|tok| {
        let auth = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        tok.accepts(auth)
    });
    if policy.writes == Writes::Token && is_write(&req) && token == Some(false) {
        st.metrics.auth_failure();
        tracing::warn!(path = %req.uri().path(), "refused: missing or wrong bearer token");
        return Refusal::Token.answer(&req);
    }
    // Without --api-token-file every client is trusted alike (pinned, as
    // before); with it, only the token's bearer pins.
    let pin = policy.writes == Writes::PinnedWithToken && token != Some(false);
    req.extensions_mut().insert(PinWrites(pin));
    if policy.gated(req.method(), req.uri().path()) && !st.store.available() {
        return Refusal::StoreDown(st.store.describe()).answer(&req);
    }
    next.run(req).await
}

/// Why this layer refused a request, before any handler: typed, answered
/// in the route family's shape by [`super::error::refusal`] (never text a
/// middleware parses back).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A write without the bearer token `--api-token-file` holds: 401.
    Token,
    /// A store-gated route while the store (named) does not answer: 503.
    StoreDown(String),
    /// A write's body not whole within `--body-read-timeout`: 408.
    BodyLate(Duration),
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::Token => StatusCode::UNAUTHORIZED,
            Refusal::StoreDown(_) => StatusCode::SERVICE_UNAVAILABLE,
            Refusal::BodyLate(_) => StatusCode::REQUEST_TIMEOUT,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::Token => {
                "this endpoint requires Authorization: Bearer <token> (--api-token-file)".into()
            }
            Refusal::StoreDown(store) => format!("the store {store} does not answer; try again"),
            Refusal::BodyLate(limit) => format!(
                "the request body did not arrive whole within {}s (--body-read-timeout)",
                limit.as_secs_f64()
            ),
        }
    }

    /// The answer to `req`: its family's shape, with the headers this
    /// refusal carries (the challenge, `Connection: close`).
    pub fn answer<B>(&self, req: &axum::http::Request<B>) -> Response {
        self.answer_at(req.uri().path())
    }

    fn answer_at(&self, path: &str) -> Response {
        let mut r = super::error::refusal(path, self.status(), &self.message());
        let h = r.headers_mut();
        match self {
            Refusal::Token => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"talos-gen\""),
                );
            }
            Refusal::BodyLate(_) => {
                h.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Refusal::StoreDown(_) => {}
        }
        r
    }
}

/// Middleware: the request's `Host` (RFC 9112 3.2): an HTTP/1.1 request
/// without one, or any request with more than one, is 400 in its family's
/// shape; so every route (`/pxe`'s URLs, the datavolume's base URL) reads
/// one host or none. (HTTP/1.0 may omit it; HTTP/2 names its authority.)
pub async fn one_host(req: Request, next: Next) -> Response {
    let hosts = req.headers().get_all(header::HOST).iter().count();
    let why = match hosts {
        0 if req.version() == axum::http::Version::HTTP_11 => {
            "an HTTP/1.1 request names its host: no Host header (RFC 9112 3.2)"
        }
        n if n > 1 => "a request names one host: more than one Host header (RFC 9112 3.2)",
        _ => return next.run(req).await,
    };
    super::error::refusal(req.uri().path(), StatusCode::BAD_REQUEST, why)
}

/// Middleware: a request target longer than [`URI_LIMIT`] is 414 (RFC
/// 9110 15.5.15), header fields above [`HEADER_LIMIT`] 431 (RFC 6585 5),
/// each with its one line in the route family's shape. (hyper reads heads
/// up to [`HEAD_BUFFER`] and refuses a target of 64 KiB itself, 414.)
pub async fn head_size(req: Request, next: Next) -> Response {
    let uri = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    let fields: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    let (status, why) = if uri > URI_LIMIT {
        (
            StatusCode::URI_TOO_LONG,
            format!("the request target is {uri} bytes; at most {URI_LIMIT} are read"),
        )
    } else if fields > HEADER_LIMIT {
        (
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("the header fields are {fields} bytes; at most {HEADER_LIMIT} are read"),
        )
    } else {
        return next.run(req).await;
    };
    super::error::refusal(req.uri().path(), status, &why)
}

/// Middleware: count requests by route template and status; time to the head.
pub async fn track(State(st): State<AppState>, req: Request, next: Next) -> Response {
    // (an `Arc` clone: the metric borrows the declared template's label)
    let route = req.extensions().get::<MatchedPath>().cloned();
    let started = Instant::now();
    let resp = next.run(req).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    st.metrics
        .request(route, resp.status().as_u16(), started.elapsed());
    resp
}

/// A connection whose writes fail once they have been blocked for longer
/// than `timeout` (the peer stopped reading). Reads pass through untouched;
/// hyper's header-read timeout bounds idle and slow request heads.
pub struct WriteGuard<T> {
    inner: T,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteGuard<T> {
    pub fn new(inner: T, timeout: Duration) -> WriteGuard<T> {
        WriteGuard {
            inner,
            timeout,
            stalled: None,
        }
    }

    fn pending<R>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<R>> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {}s; closing",
                    timeout.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending(cx),
            r => {
                self.stalled = None;
                r
            }
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending(cx),
            r => {
                self.stalled = None;
                r
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending(cx),
            r => {
                self.stalled = None;
                r
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Middleware: the request body of a write must arrive whole within
/// `--body-read-timeout` from the end of its head. Past it the body ends in
/// an error (whatever reads it stops) and the answer is 408 with
/// `Connection: close`: the rest of the body is never read.
pub async fn body_deadline(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if !is_write(&req) {
        return next.run(req).await;
    }
    let limit = st.cfg.body_read_timeout;
    let fired = Arc::new(AtomicBool::new(false));
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let timed = Deadline {
        sleep: Box::pin(tokio::time::sleep(limit)),
        fired: fired.clone(),
    };
    let body = super::watched::Watched::body(body, timed);
    let resp = next.run(Request::from_parts(parts, body)).await;
    if !fired.load(Ordering::Relaxed) {
        return resp;
    }
    tracing::warn!(%path, "refused: the request body did not arrive within the body read timeout");
    Refusal::BodyLate(limit).answer_at(&path)
}

/// A request body that ends in an error once its deadline passes.
struct Deadline {
    sleep: Pin<Box<tokio::time::Sleep>>,
    fired: Arc<AtomicBool>,
}

impl super::watched::Watch for Deadline {
    fn before(&mut self, cx: &mut Context<'_>) -> Option<axum::Error> {
        if self.sleep.as_mut().poll(cx).is_pending() {
            return None;
        }
        self.fired.store(true, Ordering::Relaxed);
        Some(axum::Error::new(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the request body did not arrive within the body read timeout",
        )))
    }
}
