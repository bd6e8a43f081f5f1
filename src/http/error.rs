//! The one mapping of the crate's errors to HTTP answers. A handler returns
//! `Result<_, E>` for any of these and the answer is the same everywhere:
//! a status and the one-line message (plain text); an upstream's own 4xx
//! answer passes through with its status and body, under its type only when
//! that is JSON (else plain text, `nosniff`: an upstream's HTML page never
//! runs on our origin). The OCI routes keep only their body
//! shape (`{"errors":[...]}`, [`crate::registry::OciError`]).
//!
//! | error | status |
//! |---|---|
//! | bad input | 400 |
//! | refused | 422 |
//! | not found, not cached offline | 404 |
//! | upstream failed | 502 |
//! | upstream timed out | 504 |
//! | upstream 4xx | as it came (JSON or plain text) |
//! | the store holds it but does not answer (a bucket down) | 503, `Retry-After: 5` |
//! | local I/O | 500 |
//! | the store does not answer | 503 |
//!
//! The statuses are [`Error::http_status`] and [`FetchError::http_status`];
//! this module only answers with them.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::Error;
use crate::factory::ImageError;
use crate::upstream::FetchError;

/// A plain-text answer: `msg` and a newline.
pub fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    let why = status
        .is_server_error()
        .then(|| super::access::Reason(m.trim_end().to_string()));
    let mut r = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        m,
    )
        .into_response();
    if let Some(why) = why {
        r.extensions_mut().insert(why);
    }
    r
}

/// The status an [`Error`] is answered with.
pub fn status_of(e: &Error) -> StatusCode {
    StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = status_of(&self);
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let mut r = text(status, self.to_string());
        if status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        r
    }
}

/// The same mapping with a JSON body `{"error": "..."}`, for the JSON API
/// routes (`/api/v1/machineconfig`, `/api/v1/kubelet-reservations`).
pub struct JsonError(pub Error);

impl IntoResponse for JsonError {
    fn into_response(self) -> Response {
        let status = status_of(&self.0);
        if status.is_server_error() {
            tracing::error!(error = %self.0, "request failed");
        }
        let body = serde_json::json!({ "error": self.0.to_string() }).to_string();
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

impl IntoResponse for FetchError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::BAD_GATEWAY);
        match self {
            FetchError::Status {
                content_type, body, ..
            } => {
                // The body as it came, under a type no browser runs: JSON
                // (a registry's `{"errors":[...]}`) keeps its type, anything
                // else (an HTML error page) is plain text on our origin.
                let ct = content_type
                    .filter(|c| is_json(c))
                    .and_then(|c| HeaderValue::from_str(&c).ok())
                    .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8"));
                let mut r = (status, body).into_response();
                r.headers_mut().insert(header::CONTENT_TYPE, ct);
                r.headers_mut().insert(
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                );
                r
            }
            FetchError::Unavailable(m) => {
                let mut r = text(status, m);
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
                r
            }
            FetchError::Timeout(m) | FetchError::Failed(m) | FetchError::Local(m) => {
                text(status, m)
            }
        }
    }
}

/// Is `content_type` JSON (`application/json`, `application/<x>+json`,
/// with or without parameters)?
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|t| t.ends_with("+json") && !t.contains('/'))
}

impl IntoResponse for ImageError {
    fn into_response(self) -> Response {
        match self {
            ImageError::NotCached(m) => text(StatusCode::NOT_FOUND, m),
            ImageError::Fetch(f) => f.into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_mapping() {
        let st = |r: Response| r.status().as_u16();
        assert_eq!(st(Error::bad_input("x").into_response()), 400);
        assert_eq!(st(Error::refused("x").into_response()), 422);
        assert_eq!(st(Error::NotFound("x".into()).into_response()), 404);
        assert_eq!(st(Error::Upstream("x".into()).into_response()), 502);
        assert_eq!(st(FetchError::Timeout("t".into()).into_response()), 504);
        assert_eq!(st(FetchError::Failed("f".into()).into_response()), 502);
        assert_eq!(
            st(FetchError::Status {
                status: 404,
                content_type: None,
                body: bytes::Bytes::new()
            }
            .into_response()),
            404
        );
        assert_eq!(st(ImageError::NotCached("n".into()).into_response()), 404);
        // An upstream's 4xx keeps its body; only JSON keeps its type, an
        // HTML page becomes plain text (never run on our origin).
        let relayed = |ct: &str| {
            let r = FetchError::Status {
                status: 404,
                content_type: Some(ct.into()),
                body: bytes::Bytes::from_static(b"<script>alert(1)</script>"),
            }
            .into_response();
            let h = |n| r.headers().get(n).unwrap().to_str().unwrap().to_string();
            (h(header::CONTENT_TYPE), h(header::X_CONTENT_TYPE_OPTIONS))
        };
        let plain = "text/plain; charset=utf-8".to_string();
        let nosniff = "nosniff".to_string();
        for html in [
            "text/html",
            "TEXT/HTML; charset=utf-8",
            "image/svg+xml",
            "application/xhtml+xml",
            "application/json/../html",
        ] {
            assert_eq!(relayed(html), (plain.clone(), nosniff.clone()), "{html}");
        }
        for json in [
            "application/json",
            "application/json; charset=utf-8",
            "application/vnd.oci.image.index.v1+json",
        ] {
            assert_eq!(relayed(json), (json.to_string(), nosniff.clone()), "{json}");
        }
        // The OCI routes answer the same statuses, only under their body.
        let all = || {
            [
                Error::bad_input("x"),
                Error::refused("x"),
                Error::NotFound("x".into()),
                Error::Upstream("x".into()),
                Error::io("x", std::io::Error::other("y")),
            ]
        };
        for (e, same) in all().into_iter().zip(all()) {
            let oci = crate::registry::OciError::from(same);
            assert_eq!(oci.status, st(e.into_response()), "{oci:?}");
        }
        let fetches = || {
            [
                FetchError::Timeout("t".into()),
                FetchError::Failed("f".into()),
                FetchError::Local("l".into()),
                FetchError::Unavailable("u".into()),
            ]
        };
        for (e, same) in fetches().into_iter().zip(fetches()) {
            let oci = crate::registry::OciError::from(same);
            assert_eq!(oci.status, st(e.into_response()), "{oci:?}");
        }
    }
}
