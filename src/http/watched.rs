//! [`Watched`]: a body passed through with a [`Watch`] beside it, the one
//! body wrapper of the edge (the access log's byte count and line, the
//! request-body deadline, the connection's in-flight guard).
//!
//! The inner body's end and size hint are passed on, so an answer keeps its
//! `Content-Length` (`BodyExt::map_frame` would drop the hint, and every
//! answer would go chunked).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;

/// What one poll of a body answered.
pub type Polled = Poll<Option<Result<Frame<Bytes>, axum::Error>>>;

/// What rides along a [`Watched`] body.
pub trait Watch: Send + Unpin + 'static {
    /// Before the inner body is polled: `Some` ends the body with that
    /// error instead (a deadline that passed).
    fn before(&mut self, _cx: &mut Context<'_>) -> Option<axum::Error> {
        None
    }

    /// What the inner body answered.
    fn after(&mut self, _polled: &Polled) {}

    /// The body is dropped; `ended`: the inner body said it ended.
    fn dropped(&mut self, _ended: bool) {}
}

/// The body and its watch.
pub struct Watched<W: Watch> {
    pub inner: Body,
    pub watch: W,
}

impl<W: Watch> Watched<W> {
    pub fn body(inner: Body, watch: W) -> Body {
        Body::new(Watched { inner, watch })
    }
}

impl<W: Watch> http_body::Body for Watched<W> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Polled {
        let this = &mut *self;
        if let Some(e) = this.watch.before(cx) {
            return Poll::Ready(Some(Err(e)));
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        this.watch.after(&polled);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl<W: Watch> Drop for Watched<W> {
    fn drop(&mut self) {
        let ended = http_body::Body::is_end_stream(&self.inner);
        self.watch.dropped(ended);
    }
}
