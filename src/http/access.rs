//! The access log: one line per request, at info, when its body has been
//! sent (or the client went away): method, path, status, body bytes sent,
//! duration. The path only: never the query, never a header, so tokens and
//! secrets stay out of it. `--log-format json` makes each line a JSON object.
//! 5xx answers are also remembered for the status page's last errors.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::state::AppState;

/// Middleware: wrap the response body so the line is written when it ends.
pub async fn log(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let path: String = req.uri().path().chars().take(512).collect();
    let started = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    if status >= 500 {
        st.metrics
            .record_error(format!("{method} {path}: HTTP {status}"));
    }
    let (parts, body) = resp.into_parts();
    let body = Body::new(Logged {
        inner: body,
        line: Some(Line {
            method,
            path,
            status,
            started,
            bytes: 0,
        }),
    });
    Response::from_parts(parts, body)
}

struct Line {
    method: String,
    path: String,
    status: u16,
    started: Instant,
    bytes: u64,
}

impl Line {
    fn emit(self, complete: bool) {
        tracing::info!(
            target: "access",
            method = %self.method,
            path = %self.path,
            status = self.status,
            bytes = self.bytes,
            duration_ms = self.started.elapsed().as_secs_f64() * 1000.0,
            complete,
            "request"
        );
    }
}

struct Logged {
    inner: Body,
    /// `None` once written.
    line: Option<Line>,
}

impl HttpBody for Logged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(line)) = (frame.data_ref(), self.line.as_mut()) {
                    line.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None) => {
                if let Some(line) = self.line.take() {
                    line.emit(true);
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(line) = self.line.take() {
                    line.emit(false);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Logged {
    /// HEAD answers and empty bodies may never be polled to their end; a
    /// client that went away leaves a partial body.
    fn drop(&mut self) {
        if let Some(line) = self.line.take() {
            let complete = self.inner.is_end_stream();
            line.emit(complete);
        }
    }
}
