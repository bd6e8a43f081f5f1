//! `/v2/`: the read side of the OCI distribution API. Thin: parse the path
//! and `?ns=`, ask [`crate::registry::Registry`], shape the answer.
//!
//! Repository names contain slashes, so one wildcard route takes the tail and
//! it is split here: `<repo>/manifests/<ref>` or `<repo>/blobs/<digest>`. The
//! raw (still percent-encoded) path is used, and any `%` is refused, so an
//! encoded slash or dot can never reach the grammar checks disguised.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::registry::{Blob, Digest, OciError, Reference};

/// `GET /v2/`: the API version check.
pub async fn v2_root() -> Response {
    let mut r = (StatusCode::OK, "{}").into_response();
    set_common(r.headers_mut());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `GET, HEAD /v2/<repo>/{manifests,blobs}/<ref>`.
pub async fn v2_tail(State(st): State<AppState>, req: Request) -> Response {
    let (parts, _body) = req.into_parts();
    let r = match handle(&st, &parts).await {
        Ok(r) => r,
        Err(e) => error_response(&e, &parts.method),
    };
    st.registry.response(r.status().as_u16());
    r
}

fn set_common(h: &mut HeaderMap) {
    h.insert(
        "docker-distribution-api-version",
        HeaderValue::from_static("registry/2.0"),
    );
}

pub fn error_response(e: &OciError, method: &Method) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = if method == Method::HEAD {
        Body::empty()
    } else {
        Body::from(e.body())
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    set_common(r.headers_mut());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The `ns` query parameter, if any (repeated: refused).
fn ns_param(query: Option<&str>) -> Result<Option<&str>, OciError> {
    let mut ns = None;
    for pair in query.unwrap_or("").split('&') {
        if let Some(v) = pair.strip_prefix("ns=") {
            if ns.is_some() {
                return Err(OciError::new(400, "UNSUPPORTED", "ns given more than once"));
            }
            ns = Some(v);
        }
    }
    Ok(ns)
}

async fn handle(st: &AppState, req: &Parts) -> Result<Response, OciError> {
    let method = req.method.clone();
    if method != Method::GET && method != Method::HEAD {
        return Err(OciError::new(
            405,
            "UNSUPPORTED",
            format!("{method} is not supported: this registry is read-only"),
        ));
    }
    let path = req.uri.path();
    let tail = path.strip_prefix("/v2/").unwrap_or("");
    if tail.contains('%') {
        return Err(OciError::new(
            400,
            "NAME_INVALID",
            "percent-encoded characters are not allowed in repository paths",
        ));
    }
    let segs: Vec<&str> = tail.split('/').collect();
    if segs.len() < 3 {
        return Err(OciError::new(
            404,
            "UNSUPPORTED",
            format!("no such route: {path}"),
        ));
    }
    let kind = segs[segs.len() - 2];
    let reference = segs[segs.len() - 1];
    let repo_end = tail.len() - kind.len() - reference.len() - 2;
    let repo = &tail[..repo_end];
    let ns = ns_param(req.uri.query())?;
    let reg = &st.registry;
    match kind {
        "manifests" => {
            let up = reg.route(repo, ns)?;
            let r = Reference::parse(reference)?;
            let m = reg.manifest(&up, repo, &r).await?;
            let mut resp = if method == Method::HEAD {
                Response::new(Body::empty())
            } else {
                Response::new(Body::from(m.body.clone()))
            };
            let h = resp.headers_mut();
            set_common(h);
            if let Ok(v) = HeaderValue::from_str(&m.media_type) {
                h.insert(header::CONTENT_TYPE, v);
            }
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(m.body.len()));
            if let Ok(v) = HeaderValue::from_str(m.digest.as_str()) {
                h.insert("docker-content-digest", v.clone());
            }
            if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", m.digest)) {
                h.insert(header::ETAG, v);
            }
            Ok(resp)
        }
        "blobs" => {
            let up = reg.route(repo, ns)?;
            let d = Digest::parse(reference)?;
            if method == Method::HEAD {
                let size = reg.blob_size(&up, repo, &d).await?;
                let mut resp = Response::new(Body::empty());
                blob_headers(resp.headers_mut(), &d, size);
                return Ok(resp);
            }
            let blob = reg.blob(&up, repo, &d).await?;
            serve_blob(reg, &d, blob, &req.headers).await
        }
        _ => Err(OciError::new(
            404,
            "UNSUPPORTED",
            format!("no such route: {path}"),
        )),
    }
}

fn blob_headers(h: &mut HeaderMap, d: &Digest, size: u64) {
    set_common(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(v) = HeaderValue::from_str(d.as_str()) {
        h.insert("docker-content-digest", v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"{d}\"")) {
        h.insert(header::ETAG, v);
    }
}

/// A single byte range `bytes=a-b`, `bytes=a-`, `bytes=-n` against `size`.
/// `None`: no usable range header (serve the whole body);
/// `Some(Err(()))`: unsatisfiable (416).
pub fn parse_range(h: Option<&HeaderValue>, size: u64) -> Option<Result<(u64, u64), ()>> {
    let s = h?.to_str().ok()?.trim();
    let spec = s.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None; // multiple ranges: answer the whole body (allowed)
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let r = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        if n == 0 || size == 0 {
            return Some(Err(()));
        }
        (size.saturating_sub(n), size - 1)
    } else {
        let start: u64 = a.parse().ok()?;
        let end: u64 = if b.is_empty() {
            size.saturating_sub(1)
        } else {
            let e: u64 = b.parse().ok()?;
            if e < start {
                return None;
            }
            e.min(size.saturating_sub(1))
        };
        if start >= size {
            return Some(Err(()));
        }
        (start, end)
    };
    Some(Ok(r))
}

async fn serve_blob(
    reg: &crate::registry::Registry,
    d: &Digest,
    blob: Blob,
    req_headers: &HeaderMap,
) -> Result<Response, OciError> {
    let size = match &blob {
        Blob::Stored(obj) => Some(obj.entry.size),
        Blob::Filling(_, head) => head.len,
    };
    let range = match size {
        Some(size) => parse_range(req_headers.get(header::RANGE), size),
        None => None,
    };
    let total = size.unwrap_or(0);
    let (status, start, len) = match range {
        None => (StatusCode::OK, 0, size),
        Some(Ok((a, b))) => (StatusCode::PARTIAL_CONTENT, a, Some(b - a + 1)),
        Some(Err(())) => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            set_common(r.headers_mut());
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{total}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return Ok(r);
        }
    };
    let body = match blob {
        Blob::Stored(obj) => {
            // Memory-mapped, chunk-checked windows of the committed object,
            // one copy to the socket; the lease keeps it until the end.
            let n = len.unwrap_or(total);
            reg.served("blob", n);
            Body::from_stream(obj.stream(start, start + n))
        }
        Blob::Filling(h, _) => {
            let end = len.map(|n| start + n);
            reg.served("blob", len.unwrap_or(0));
            Body::from_stream(h.reader(start, end))
        }
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    blob_headers(h, d, len.unwrap_or(0));
    if len.is_none() {
        h.remove(header::CONTENT_LENGTH);
    }
    if status == StatusCode::PARTIAL_CONTENT
        && let Some(n) = len
        && let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{}/{total}", start + n - 1))
    {
        h.insert(header::CONTENT_RANGE, v);
    }
    Ok(resp)
}

impl IntoResponse for OciError {
    fn into_response(self) -> Response {
        error_response(&self, &Method::GET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hv(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range(Some(&hv("bytes=0-9")), 100), Some(Ok((0, 9))));
        assert_eq!(parse_range(Some(&hv("bytes=90-")), 100), Some(Ok((90, 99))));
        assert_eq!(parse_range(Some(&hv("bytes=-10")), 100), Some(Ok((90, 99))));
        assert_eq!(
            parse_range(Some(&hv("bytes=50-500")), 100),
            Some(Ok((50, 99)))
        );
        assert_eq!(parse_range(Some(&hv("bytes=100-")), 100), Some(Err(())));
        assert_eq!(parse_range(Some(&hv("bytes=0-1,5-6")), 100), None);
        assert_eq!(parse_range(Some(&hv("items=0-1")), 100), None);
        assert_eq!(parse_range(None, 100), None);
    }

    #[test]
    fn ns_parsing() {
        assert_eq!(ns_param(Some("ns=ghcr.io")).unwrap(), Some("ghcr.io"));
        assert_eq!(ns_param(None).unwrap(), None);
        assert!(ns_param(Some("ns=a&ns=b")).is_err());
    }
}
