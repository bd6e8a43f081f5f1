//! The one mapping of the crate's errors to HTTP answers. A handler returns
//! `Result<_, E>` for any of these and the answer is the same everywhere:
//! a status and the one-line message; an upstream's own 4xx passes through
//! with its status and body, under its type only when that is JSON (else
//! plain text, `nosniff`).
//!
//! | error | status |
//! |---|---|
//! | bad input | 400 |
//! | refused | 422 |
//! | not found, not cached offline | 404 |
//! | upstream failed / timed out | 502 / 504 |
//! | upstream 4xx | as it came (JSON or plain text) |
//! | the store does not answer | 503, `Retry-After: 5` |
//! | local I/O | 500 |
//!
//! The statuses are this module's: [`status_of`] ([`Error`]),
//! [`fetch_status`] ([`FetchError`]) and [`oci_status`] ([`OciKind`]);
//! nothing below the edge names an HTTP status. Every refusal is shaped by
//! its route's [`Family`]: OCI's body on `/v2/` ([`oci`]), `{"error": ...}`
//! on `/api/` ([`JsonError`]), one line of text elsewhere ([`text`]); what
//! a layer answered as text is put in shape by [`shape`], the one
//! middleware every answer passes.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::Error;
use crate::factory::ImageError;
use crate::registry::OciKind;
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

/// The status an [`Error`] is answered with, on every route (the OCI
/// routes keep it under their own body shape, [`oci_status`]).
pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::BadInput(_) => StatusCode::BAD_REQUEST,
        Error::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Upstream(_) => StatusCode::BAD_GATEWAY,
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The status a failed fetch is answered with, on every route: an
/// upstream's own answer as it came, a bound that fired 504, a failed
/// upstream 502, local trouble 500, a store that does not answer 503.
pub fn fetch_status(e: &FetchError) -> StatusCode {
    match e {
        FetchError::Status { status, .. } => {
            StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
        }
        FetchError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
        FetchError::Failed(_) => StatusCode::BAD_GATEWAY,
        FetchError::Local(_) => StatusCode::INTERNAL_SERVER_ERROR,
        FetchError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    }
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

/// Any error a handler answers with: its status (the one mapping) and its
/// one line (`Display`).
pub trait Answered {
    fn status(&self) -> StatusCode;
    fn message(&self) -> String;
}

impl Answered for Error {
    fn status(&self) -> StatusCode {
        status_of(self)
    }
    fn message(&self) -> String {
        self.to_string()
    }
}

impl Answered for FetchError {
    fn status(&self) -> StatusCode {
        fetch_status(self)
    }
    fn message(&self) -> String {
        self.to_string()
    }
}

impl Answered for ImageError {
    fn status(&self) -> StatusCode {
        match self {
            ImageError::NotCached(_) => StatusCode::NOT_FOUND,
            ImageError::Fetch(f) => f.status(),
        }
    }
    fn message(&self) -> String {
        match self {
            ImageError::NotCached(m) => m.clone(),
            ImageError::Fetch(f) => f.to_string(),
        }
    }
}

/// The same mapping with a JSON body `{"error": "..."}`, for the JSON API
/// routes (`/api/v1/...`): any [`Answered`] error, the crate's by default.
pub struct JsonError<E: Answered = Error>(pub E);

impl<E: Answered> IntoResponse for JsonError<E> {
    fn into_response(self) -> Response {
        json_of(&self.0)
    }
}

/// Any [`Answered`] error as `{"error": ...}`.
pub fn json_of(e: &dyn Answered) -> Response {
    let (status, msg) = (e.status(), e.message());
    if status.is_server_error() {
        tracing::error!(error = %msg, "request failed");
    }
    json(status, msg)
}

/// A refusal made before any handler (the token check, the store gate, the
/// body deadline: [`super::limits::Refusal`]) answered in its route
/// family's shape at once: the OCI body on `/v2/`, `{"error": ...}` on
/// `/api/`, one line of text elsewhere (`Retry-After: 5` on a 503), never
/// text that [`shape`] parses back.
pub fn refusal(path: &str, status: StatusCode, msg: &str) -> Response {
    match Family::of(path) {
        Family::Registry => oci(status, oci_code(status), msg),
        Family::Api => json(status, msg.to_string()),
        Family::Plain => {
            let mut r = text(status, msg);
            if status == StatusCode::SERVICE_UNAVAILABLE {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
            }
            r
        }
    }
}

/// `{"error": msg}` under `status` (`Retry-After: 5` on a 503).
fn json(status: StatusCode, msg: String) -> Response {
    let body = serde_json::json!({ "error": msg }).to_string();
    let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    if status.is_server_error() {
        r.extensions_mut().insert(super::access::Reason(msg));
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}

/// How a route's refusals are shaped, by its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `/v2/...`: the OCI error body.
    Registry,
    /// `/api/...`: `{"error": ...}`.
    Api,
    /// Everything else (`/image/`, `/schematics`, ...): one line of text.
    Plain,
}

impl Family {
    pub fn of(path: &str) -> Family {
        if path == "/v2" || path.starts_with("/v2/") {
            Family::Registry
        } else if path.starts_with("/api/") {
            Family::Api
        } else {
            Family::Plain
        }
    }
}

/// The status of each [`OciKind`]: the `/v2/` half of the one mapping
/// (the crate's errors keep [`status_of`]'s statuses under it,
/// checked by `one_mapping`).
pub fn oci_status(kind: OciKind) -> StatusCode {
    let code = match kind {
        OciKind::NameInvalid
        | OciKind::ManifestInvalid
        | OciKind::DigestInvalid
        | OciKind::Unsupported => 400,
        OciKind::Denied => 403,
        OciKind::NameUnknown
        | OciKind::ManifestUnknown
        | OciKind::BlobUnknown
        | OciKind::NoRoute => 404,
        OciKind::ReadOnly => 405,
        OciKind::Refused => 422,
        OciKind::TooManyRequests => 429,
        OciKind::Internal => 500,
        OciKind::Upstream => 502,
        OciKind::Unavailable => 503,
        OciKind::Timeout => 504,
        OciKind::Relayed(s) => s,
    };
    StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY)
}

/// The OCI code of a refusal no registry code was chosen for, by status.
pub fn oci_code(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "UNAUTHORIZED",
        403 => "DENIED",
        404 => "NAME_UNKNOWN",
        413 => "SIZE_INVALID",
        429 => "TOOMANYREQUESTS",
        502..=504 => "UNAVAILABLE",
        400..=499 => "UNSUPPORTED",
        _ => "UNKNOWN",
    }
}

/// The OCI answer: `{"errors":[{"code","message"}]}`, `application/json`,
/// the distribution API version header; `Retry-After: 5` on a 503. A HEAD
/// gets the same head, its `Content-Length` the GET's (the body is never
/// sent to a HEAD: axum and hyper drop it).
pub fn oci(status: StatusCode, code: &str, message: &str) -> Response {
    let body =
        Body::from(serde_json::json!({"errors": [{"code": code, "message": message}]}).to_string());
    let mut r = Response::new(body);
    *r.status_mut() = status;
    if status.is_server_error() {
        r.extensions_mut()
            .insert(super::access::Reason(message.to_string()));
    }
    let h = r.headers_mut();
    h.insert(
        "docker-distribution-api-version",
        HeaderValue::from_static("registry/2.0"),
    );
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    r
}

/// Middleware: a refusal answered as plain text on a `/v2/` or `/api/`
/// route is answered in its family's shape instead, with the same status,
/// headers and line (a leading `error: ` dropped). Only our own short
/// lines are plain text there (an upstream's page never is: the registry
/// maps it to an OCI error, the API to its JSON), so the body read is small;
/// past 64 KiB the line is the status's reason.
pub async fn shape(req: Request, next: Next) -> Response {
    let family = Family::of(req.uri().path());
    let head = req.method() == Method::HEAD;
    let resp = next.run(req).await;
    let status = resp.status();
    let plain = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_none_or(|c| c.as_bytes().starts_with(b"text/plain"));
    // A failed precondition or an unsatisfiable range is the answer to
    // what was asked (bodiless by design), not a refusal.
    let refusal = (status.is_client_error() || status.is_server_error())
        && !matches!(
            status,
            StatusCode::PRECONDITION_FAILED | StatusCode::RANGE_NOT_SATISFIABLE
        );
    if family == Family::Plain {
        return match refusal && !head && http_body::Body::size_hint(resp.body()).exact() == Some(0)
        {
            true => with_line(resp),
            false => resp,
        };
    }
    if !plain || !refusal {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let line = match axum::body::to_bytes(body, 64 << 10).await {
        Ok(b) => crate::text::one_line(&String::from_utf8_lossy(&b)),
        Err(_) => String::new(),
    };
    let line = line
        .strip_prefix("error: ")
        .unwrap_or(&line)
        .trim()
        .to_string();
    let line = match line.is_empty() {
        true => status.canonical_reason().unwrap_or("refused").to_string(),
        false => line,
    };
    let shaped = match family {
        Family::Registry => oci(status, oci_code(status), &line),
        _ => json(status, line),
    };
    let (new, body) = shaped.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (k, v) in &new.headers {
        parts.headers.insert(k, v.clone());
    }
    Response::from_parts(parts, body)
}

/// A bodiless refusal on a text route (axum's own 405) given its one
/// line: the status's reason, and for a 405 what the route answers
/// (its `Allow`).
fn with_line(resp: Response) -> Response {
    let (mut parts, _) = resp.into_parts();
    let reason = parts.status.canonical_reason().unwrap_or("refused");
    let line = match parts
        .headers
        .get(header::ALLOW)
        .and_then(|a| a.to_str().ok())
    {
        Some(allow) if parts.status == StatusCode::METHOD_NOT_ALLOWED => {
            format!("{reason}: this route answers {allow}")
        }
        _ => reason.to_string(),
    };
    let (new, body) = text(parts.status, line).into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    for (k, v) in &new.headers {
        parts.headers.insert(k, v.clone());
    }
    Response::from_parts(parts, body)
}

impl IntoResponse for FetchError {
    fn into_response(self) -> Response {
        let status = fetch_status(&self);
        match self {
            FetchError::Status {
                content_type,
                body,
                retry_after,
                ..
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
                // An upstream's 429 tells the client when to come back.
                if let Some(v) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
                    r.headers_mut().insert(header::RETRY_AFTER, v);
                }
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
                body: bytes::Bytes::new(),
                retry_after: None,
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
                retry_after: None,
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
            assert_eq!(
                oci_status(oci.kind).as_u16(),
                st(e.into_response()),
                "{oci:?}"
            );
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
            assert_eq!(
                oci_status(oci.kind).as_u16(),
                st(e.into_response()),
                "{oci:?}"
            );
        }
    }
}
