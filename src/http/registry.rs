//! `/v2/`: the read side of the OCI distribution API. Thin: parse the path
//! and `?ns=`, ask [`crate::registry::Registry`], shape the answer.
//!
//! Repository names contain slashes, so one wildcard route takes the tail and
//! it is split here: `<repo>/manifests/<ref>`, `<repo>/blobs/<digest>`,
//! `<repo>/tags/list` or `<repo>/referrers/<digest>`. The raw (still
//! percent-encoded) path is used, and any `%` is refused, so an encoded
//! slash or dot can never reach the grammar checks disguised. Query values
//! (`ns`, `n`, `last`, `artifactType`) are percent-decoded (`+` kept as it
//! is: a media type has them) and each may be given once.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::ranges::{Answer, CacheStatus, Validators, respond};
use super::state::AppState;
use crate::registry::{Blob, Digest, INDEX_MEDIA_TYPE, OciError, Reference, TagQuery};

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

/// `GET, HEAD /v2/<repo>/{manifests,blobs}/<ref>`, `/v2/<repo>/tags/list`,
/// `/v2/<repo>/referrers/<digest>`.
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

/// An [`OciError`] answered: the one OCI answer ([`super::error::oci`]).
pub fn error_response(e: &OciError, method: &Method) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    super::error::oci(status, e.code, &e.message, method == Method::HEAD)
}

/// The query parameter `name`, percent-decoded, if any (repeated or not
/// UTF-8: refused).
fn query_param(query: Option<&str>, name: &str) -> Result<Option<String>, OciError> {
    let mut out = None;
    for pair in query.unwrap_or("").split('&') {
        let Some(v) = pair.strip_prefix(name).and_then(|r| r.strip_prefix('=')) else {
            continue;
        };
        if out.is_some() {
            return Err(OciError::new(
                400,
                "UNSUPPORTED",
                format!("{name} given more than once"),
            ));
        }
        out = Some(percent_decode(v).ok_or_else(|| {
            OciError::new(
                400,
                "UNSUPPORTED",
                format!("{name}: a bad percent-encoding"),
            )
        })?);
    }
    Ok(out)
}

/// `%XX` sequences decoded (`+` kept); `None` for a bad one or a result
/// not UTF-8. `percent_decode_str` passes a malformed `%` through as it
/// is, so one that is not followed by two hex digits is refused first.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let malformed = b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// The `ns` query parameter, if any (repeated: refused), lowercased: a
/// host name is case-insensitive (`?ns=GHCR.IO` is `ghcr.io`).
fn ns_param(query: Option<&str>) -> Result<Option<String>, OciError> {
    Ok(query_param(query, "ns")?.map(|ns| ns.to_ascii_lowercase()))
}

/// `n` and `last` of a tag list request.
fn tag_query(query: Option<&str>) -> Result<TagQuery, OciError> {
    let n = query_param(query, "n")?
        .map(|v| {
            v.parse::<usize>()
                .map_err(|_| OciError::new(400, "UNSUPPORTED", format!("n={v:?} is not a count")))
        })
        .transpose()?;
    Ok(TagQuery {
        n,
        last: query_param(query, "last")?,
    })
}

fn json_response(method: &Method, content_type: &'static str, body: bytes::Bytes) -> Response {
    let len = body.len();
    let mut resp = if method == Method::HEAD {
        Response::new(Body::empty())
    } else {
        Response::new(Body::from(body))
    };
    let h = resp.headers_mut();
    set_common(h);
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    resp
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
    let query = req.uri.query();
    let ns = ns_param(query)?;
    let ns = ns.as_deref();
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
            super::stale::mark(h, m.stale);
            if m.fetched {
                CacheStatus::Miss { stored: true }
            } else {
                CacheStatus::stored(m.stale)
            }
            .insert(h);
            // The conditionals blobs ask (412, 304), GET and HEAD alike:
            // the digest is the entity tag.
            let validators = Validators {
                etag: Some(format!("\"{}\"", m.digest)),
                last_modified: None,
            };
            if let Some(status) = validators.precondition(&req.headers) {
                let h = std::mem::take(resp.headers_mut());
                return Ok(super::ranges::bodiless(status, h));
            }
            Ok(resp)
        }
        "blobs" => {
            let up = reg.route(repo, ns)?;
            let d = Digest::parse(reference)?;
            if method == Method::HEAD {
                // A HEAD fills nothing: the store's size, else the upstream's HEAD.
                let (size, status) = match reg.stored_blob_size(&d).await? {
                    Some(n) => (n, CacheStatus::Hit),
                    None => (
                        reg.blob_size(&up, repo, &d).await?,
                        CacheStatus::Miss { stored: false },
                    ),
                };
                let mut h = HeaderMap::new();
                blob_headers(&mut h, &d, size);
                status.insert(&mut h);
                // The same conditionals as the GET's answer (412, 304).
                let validators = super::ranges::Validators {
                    etag: Some(format!("\"{d}\"")),
                    last_modified: None,
                };
                if let Some(status) = validators.precondition(&req.headers) {
                    return Ok(super::ranges::bodiless(status, h));
                }
                let mut resp = Response::new(Body::empty());
                *resp.headers_mut() = h;
                return Ok(resp);
            }
            let (up, d) = (&up, &d);
            super::ranges::once_more_if_dropped(|| async move {
                let blob = reg.blob(up, repo, d).await?;
                let status = CacheStatus::of(&blob);
                serve_blob(reg, d, blob, status, &req.headers).await
            })
            .await
        }
        "tags" if reference == "list" => {
            let up = reg.route(repo, ns)?;
            let q = tag_query(query)?;
            let list = reg.tags(&up, repo, &q).await?;
            let mut resp = json_response(&method, "application/json", list.body().into());
            super::stale::mark(resp.headers_mut(), list.stale);
            // A tag list from the upstream is passed on, not kept.
            match list.stored {
                true => CacheStatus::stored(list.stale),
                false => CacheStatus::Miss { stored: false },
            }
            .insert(resp.headers_mut());
            if let Some(next) = &list.next {
                let mut link = format!("</v2/{repo}/tags/list?");
                if let Some(n) = next.n {
                    link.push_str(&format!("n={n}&"));
                }
                link.push_str(&format!("last={}", next.last.as_deref().unwrap_or("")));
                if let Some(ns) = ns {
                    link.push_str(&format!("&ns={ns}"));
                }
                link.push_str(">; rel=\"next\"");
                if let Ok(v) = HeaderValue::from_str(&link) {
                    resp.headers_mut().insert(header::LINK, v);
                }
            }
            Ok(resp)
        }
        "referrers" => {
            let up = reg.route(repo, ns)?;
            let d = Digest::parse(reference)?;
            let at = query_param(query, "artifactType")?;
            let r = reg.referrers(&up, repo, &d, at.as_deref()).await?;
            let mut resp = json_response(&method, INDEX_MEDIA_TYPE, r.body);
            super::stale::mark(resp.headers_mut(), r.stale);
            use crate::registry::ReferrersSource as Src;
            match r.source {
                Src::Upstream => CacheStatus::Miss { stored: true },
                Src::Stored => CacheStatus::Hit,
                Src::Stale => CacheStatus::Stale,
                Src::Empty => CacheStatus::Miss { stored: false },
            }
            .insert(resp.headers_mut());
            if r.filtered {
                resp.headers_mut().insert(
                    "oci-filters-applied",
                    HeaderValue::from_static("artifactType"),
                );
            }
            Ok(resp)
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
    cache: CacheStatus,
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
            cache,
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
        assert_eq!(
            ns_param(Some("ns=ghcr.io")).unwrap().as_deref(),
            Some("ghcr.io")
        );
        assert_eq!(ns_param(None).unwrap(), None);
        assert!(ns_param(Some("ns=a&ns=b")).is_err());
        assert_eq!(ns_param(Some("nsx=a&n=1")).unwrap(), None);
    }

    #[test]
    fn query_values() {
        let q = Some(
            "n=2&last=v1&ns=ghcr.io&artifactType=application%2Fvnd.dev.cosign.artifact.sig.v1%2Bjson",
        );
        assert_eq!(
            tag_query(q).unwrap(),
            TagQuery {
                n: Some(2),
                last: Some("v1".into())
            }
        );
        assert_eq!(
            query_param(q, "artifactType").unwrap().as_deref(),
            Some("application/vnd.dev.cosign.artifact.sig.v1+json")
        );
        assert_eq!(
            query_param(Some("artifactType=a/b+json"), "artifactType")
                .unwrap()
                .as_deref(),
            Some("a/b+json")
        );
        assert!(tag_query(Some("n=x")).is_err());
        assert!(tag_query(Some("n=-1")).is_err());
        assert!(query_param(Some("last=%zz"), "last").is_err());
        assert!(query_param(Some("last=%ff"), "last").is_err());
        assert!(query_param(Some("last=%4"), "last").is_err());
    }
}
