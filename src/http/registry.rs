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

use super::ranges::{Answer, Validators, respond};
use super::state::AppState;
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

/// A blob (GET): the shared object answer ([`super::ranges`]): ranges,
/// validators (the digest is the entity tag, known before the bytes),
/// checked chunks or the growing fill.
async fn serve_blob(
    reg: &crate::registry::Registry,
    d: &Digest,
    blob: Blob,
    req_headers: &HeaderMap,
) -> Result<Response, OciError> {
    let mut base = HeaderMap::new();
    set_common(&mut base);
    base.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(d.as_str()) {
        base.insert("docker-content-digest", v);
    }
    let metrics = reg.metrics().cloned();
    Ok(respond(
        blob,
        req_headers,
        Answer {
            base,
            validators: Validators {
                etag: Some(format!("\"{d}\"")),
                last_modified: None,
            },
            head_only: false,
            on_bytes: Box::new(move |n| {
                if let Some(m) = &metrics {
                    m.served("blob", n)
                }
            }),
        },
    )
    .await)
}

impl IntoResponse for OciError {
    fn into_response(self) -> Response {
        error_response(&self, &Method::GET)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blob route's range cases, through the one shared parser.
    #[test]
    fn ranges() {
        use crate::http::ranges::{ByteRange, RangeAsk, parse_range};
        let r = |start, end| RangeAsk::Partial(ByteRange { start, end });
        assert_eq!(parse_range("bytes=0-9", 100), r(0, 10));
        assert_eq!(parse_range("bytes=90-", 100), r(90, 100));
        assert_eq!(parse_range("bytes=-10", 100), r(90, 100));
        assert_eq!(parse_range("bytes=50-500", 100), r(50, 100));
        assert_eq!(parse_range("bytes=100-", 100), RangeAsk::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,5-6", 100), RangeAsk::Full);
        assert_eq!(parse_range("items=0-1", 100), RangeAsk::Full);
    }

    #[test]
    fn ns_parsing() {
        assert_eq!(ns_param(Some("ns=ghcr.io")).unwrap(), Some("ghcr.io"));
        assert_eq!(ns_param(None).unwrap(), None);
        assert!(ns_param(Some("ns=a&ns=b")).is_err());
    }
}
