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
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::Writes;
use super::state::AppState;

/// Largest request body accepted (POST endpoints): 1 MiB.
pub const BODY_LIMIT: usize = 1 << 20;

/// Largest request head (request line plus headers) accepted: 32 KiB (431 above).
pub const HEADER_LIMIT: usize = 32 << 10;

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
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"talos-gen\"")],
            "error: this endpoint requires Authorization: Bearer <token> (--api-token-file)\n",
        )
            .into_response();
    }
    // Without --api-token-file every client is trusted alike (pinned, as
    // before); with it, only the token's bearer pins.
    let pin = policy.writes == Writes::PinnedWithToken && token != Some(false);
    req.extensions_mut().insert(PinWrites(pin));
    if policy.gated(req.method(), req.uri().path()) && !st.store.available() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "5")],
            format!(
                "the store {} does not answer; try again\n",
                st.store.describe()
            ),
        )
            .into_response();
    }
    next.run(req).await
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
    (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONNECTION, "close")],
        format!(
            "error: the request body did not arrive whole within {}s (--body-read-timeout)\n",
            limit.as_secs_f64()
        ),
    )
        .into_response()
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
