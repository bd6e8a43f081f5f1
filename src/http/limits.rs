//! Limits and access control at the HTTP edge:
//!
//! - [`ApiToken`] and [`require_token`]: with `--api-token-file`, every write
//!   (any method but GET/HEAD/OPTIONS) under `/api/v1/` needs
//!   `Authorization: Bearer <token>`; 401 otherwise. The comparison is
//!   constant-time (both sides hashed to 32 bytes first, so not even the
//!   length leaks). Neither the token nor the header is ever logged.
//! - [`track`]: request counts and latency by route template and status.
//! - [`WriteGuard`]: a socket wrapper that fails a write stalled for longer
//!   than the write timeout, so a client that stops reading cannot hold a
//!   connection (and its file descriptor) forever.
//! - [`BODY_LIMIT`]: request bodies above 1 MiB are refused with 413.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::state::AppState;
use crate::error::{Error, Result};

/// Largest request body accepted (POST endpoints): 1 MiB.
pub const BODY_LIMIT: usize = 1 << 20;

/// Largest request head (request line plus headers) accepted: 32 KiB (431 above).
pub const HEADER_LIMIT: usize = 32 << 10;

/// Most header fields accepted in one request.
pub const MAX_HEADERS: usize = 100;

/// The bearer token the `/api/v1/` writes require. Holds only its sha256.
#[derive(Clone)]
pub struct ApiToken {
    hash: [u8; 32],
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

impl ApiToken {
    /// Read the token from `path`: the file's content without surrounding
    /// whitespace; an empty or unreadable file is bad input.
    pub fn from_file(path: &Path) -> Result<ApiToken> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::bad_input(format!("--api-token-file: {}: {e}", path.display())))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(Error::bad_input(format!(
                "--api-token-file: {}: the file holds no token",
                path.display()
            )));
        }
        if token.chars().any(|c| c.is_control() || c == ' ') {
            return Err(Error::bad_input(format!(
                "--api-token-file: {}: the token holds spaces or control characters",
                path.display()
            )));
        }
        Ok(ApiToken::new(token))
    }

    pub fn new(token: &str) -> ApiToken {
        ApiToken {
            hash: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Does the `Authorization` header value carry this token?
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(v) = authorization else {
            return false;
        };
        let presented = match v.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &v[7..],
            _ => return false,
        };
        let presented = presented.trim_ascii();
        let h: [u8; 32] = Sha256::digest(presented).into();
        bool::from(h.ct_eq(&self.hash))
    }
}

/// Is this request a write to the service's own API?
fn is_api_write(req: &Request) -> bool {
    req.uri().path().starts_with("/api/v1/")
        && !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Middleware: refuse `/api/v1/` writes without the bearer token (when one is configured).
pub async fn require_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(tok) = &st.api_token
        && is_api_write(&req)
    {
        let auth = req
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        if !tok.accepts(auth) {
            st.metrics.auth_failure();
            tracing::warn!(path = %req.uri().path(), "refused: missing or wrong bearer token");
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"talos-gen\"")],
                "error: this endpoint requires Authorization: Bearer <token> (--api-token-file)\n",
            )
                .into_response();
        }
    }
    next.run(req).await
}

/// Middleware: count requests by route template and status; time to the head.
pub async fn track(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let started = Instant::now();
    let resp = next.run(req).await;
    st.metrics
        .request(&route, resp.status().as_u16(), started.elapsed());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare() {
        let t = ApiToken::new("s3cret");
        assert!(t.accepts(Some(b"Bearer s3cret")));
        assert!(t.accepts(Some(b"bearer s3cret")));
        assert!(!t.accepts(Some(b"Bearer s3cre")));
        assert!(!t.accepts(Some(b"Bearer s3cret2")));
        assert!(!t.accepts(Some(b"Basic s3cret")));
        assert!(!t.accepts(Some(b"s3cret")));
        assert!(!t.accepts(Some(b"")));
        assert!(!t.accepts(None));
        assert_eq!(format!("{t:?}"), "ApiToken(<redacted>)");
    }
}
