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
use crate::registry::{
    Blob, Digest, INDEX_MEDIA_TYPE, OciError, OciKind, Reference, TagQuery, UpstreamId,
};

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
        Err(e) => error_response(&e),
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
pub fn error_response(e: &OciError) -> Response {
    let status = super::error::oci_status(e.kind);
    let mut r = super::error::oci(status, e.code(), &e.message);
    // An upstream's 429 tells the client when to come back.
    if let Some(v) = e
        .retry_after
        .as_deref()
        .and_then(|v| HeaderValue::from_str(v).ok())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
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
                OciKind::Unsupported,
                format!("{name} given more than once"),
            ));
        }
        out = Some(percent_decode(v).ok_or_else(|| {
            OciError::new(
                OciKind::Unsupported,
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
                .map_err(|_| OciError::new(OciKind::Unsupported, format!("n={v:?} is not a count")))
        })
        .transpose()?;
    Ok(TagQuery {
        n,
        last: query_param(query, "last")?,
    })
}

fn json_response(head: bool, content_type: &'static str, body: bytes::Bytes) -> Response {
    let len = body.len();
    let mut resp = if head {
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

/// A `/v2/` request path split: `<repo>/<kind>/<reference>` and `?ns=`.
#[derive(Debug, PartialEq, Eq)]
struct V2Path<'a> {
    repo: &'a str,
    kind: &'a str,
    reference: &'a str,
    ns: Option<String>,
}

/// Split the raw path (any `%` refused: an encoded slash or dot never
/// reaches the grammar checks) and read `?ns=`.
fn parse_path<'a>(path: &'a str, query: Option<&str>) -> Result<V2Path<'a>, OciError> {
    let tail = path.strip_prefix("/v2/").unwrap_or("");
    if tail.contains('%') {
        return Err(OciError::new(
            OciKind::NameInvalid,
            "percent-encoded characters are not allowed in repository paths",
        ));
    }
    let mut parts = tail.rsplitn(3, '/');
    let (Some(reference), Some(kind), Some(repo)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(no_route(path));
    };
    Ok(V2Path {
        repo,
        kind,
        reference,
        ns: ns_param(query)?,
    })
}

fn no_route(path: &str) -> OciError {
    OciError::new(OciKind::NoRoute, format!("no such route: {path}"))
}

/// Parse, ask the upstream route, and hand the request to its kind's answer.
async fn handle(st: &AppState, req: &Parts) -> Result<Response, OciError> {
    let method = &req.method;
    if method != Method::GET && method != Method::HEAD {
        return Err(OciError::new(
            OciKind::ReadOnly,
            format!("{method} is not supported: this registry is read-only"),
        ));
    }
    let p = parse_path(req.uri.path(), req.uri.query())?;
    let known = matches!(p.kind, "manifests" | "blobs" | "referrers")
        || (p.kind, p.reference) == ("tags", "list");
    if !known {
        return Err(no_route(req.uri.path()));
    }
    let up = st.registry.route(p.repo, p.ns.as_deref())?;
    let head = method == Method::HEAD;
    let ask = Ask {
        st,
        up,
        p,
        req,
        head,
    };
    match ask.p.kind {
        "manifests" => manifest(&ask).await,
        "blobs" if head => blob_head(&ask).await,
        "blobs" => blob_get(&ask).await,
        "tags" => tags(&ask).await,
        _ => referrers(&ask).await,
    }
}

/// A `/v2/` request as parsed, for its kind's answer.
struct Ask<'a> {
    st: &'a AppState,
    /// Where its repository is asked.
    up: UpstreamId,
    p: V2Path<'a>,
    req: &'a Parts,
    head: bool,
}

/// The headers naming an object by its digest, built once for manifests
/// and blobs: `Docker-Content-Digest` and the `ETag` (the digest quoted),
/// and the validators the conditionals ask.
fn digest_headers(h: &mut HeaderMap, d: &Digest) -> Validators {
    if let Ok(v) = HeaderValue::from_str(d.as_str()) {
        h.insert("docker-content-digest", v);
    }
    let validators = Validators {
        etag: Some(format!("\"{d}\"")),
        last_modified: None,
    };
    validators.insert(h);
    validators
}

/// `GET, HEAD .../manifests/<ref>`: the body, its type, the conditionals
/// blobs ask (412, 304), GET and HEAD alike.
async fn manifest(ask: &Ask<'_>) -> Result<Response, OciError> {
    let (reg, p) = (&ask.st.registry, &ask.p);
    let r = Reference::parse(p.reference)?;
    let m = reg.manifest(&ask.up, p.repo, &r).await?;
    let accept = ask.req.headers.get_all(header::ACCEPT);
    if !crate::registry::accepts(accept.iter().filter_map(|v| v.to_str().ok()), &m.media_type) {
        return Err(crate::registry::not_accepted(
            p.repo,
            p.reference,
            &m.media_type,
        ));
    }
    let mut resp = match ask.head {
        true => Response::new(Body::empty()),
        false => Response::new(Body::from(m.body.clone())),
    };
    let h = resp.headers_mut();
    set_common(h);
    if let Ok(v) = HeaderValue::from_str(&m.media_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(m.body.len()));
    let validators = digest_headers(h, &m.digest);
    super::stale::mark(h, m.stale);
    match (m.fetched, m.served.how) {
        (_, how) if m.stale || how != crate::cache::How::Hit => {
            CacheStatus::served(m.stale, m.served)
        }
        (true, _) => CacheStatus::Miss { stored: true },
        (false, _) => CacheStatus::Hit,
    }
    .insert(h);
    if let Some(status) = validators.precondition(&ask.req.headers) {
        let h = std::mem::take(resp.headers_mut());
        return Ok(super::ranges::bodiless(status, h));
    }
    Ok(resp)
}

/// `HEAD .../blobs/<digest>`: fills nothing: the store's size, else the
/// upstream's HEAD; the GET's conditionals (412, 304).
async fn blob_head(ask: &Ask<'_>) -> Result<Response, OciError> {
    let Ask { st, up, p, req, .. } = ask;
    let d = Digest::parse(p.reference)?;
    let reg = &st.registry;
    let (size, status) = match reg.stored_blob_size(&d).await? {
        Some(n) => (n, CacheStatus::Hit),
        None => (
            reg.blob_size(up, p.repo, &d).await?,
            CacheStatus::Miss { stored: false },
        ),
    };
    let mut h = HeaderMap::new();
    let validators = blob_headers(&mut h, &d);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    status.insert(&mut h);
    if let Some(status) = validators.precondition(&req.headers) {
        return Ok(super::ranges::bodiless(status, h));
    }
    let mut resp = Response::new(Body::empty());
    *resp.headers_mut() = h;
    Ok(resp)
}

/// `GET .../blobs/<digest>`: the shared object answer, once more if the
/// fill it followed was dropped.
async fn blob_get(ask: &Ask<'_>) -> Result<Response, OciError> {
    let Ask { st, up, p, req, .. } = ask;
    let d = &Digest::parse(p.reference)?;
    let (reg, repo, req_headers) = (&st.registry, p.repo, &req.headers);
    super::ranges::once_more_if_dropped(|| async move {
        let blob = reg.blob(up, repo, d).await?;
        let status = CacheStatus::of(&blob);
        serve_blob(reg, d, blob, status, req_headers).await
    })
    .await
}

/// `GET, HEAD .../tags/list`: the upstream's whole list (kept) or the
/// last one kept, a page of it in lexical order; `Link` to the next page.
async fn tags(ask: &Ask<'_>) -> Result<Response, OciError> {
    let p = &ask.p;
    let q = tag_query(ask.req.uri.query())?;
    let list = ask.st.registry.tags(&ask.up, p.repo, &q).await?;
    let mut resp = json_response(ask.head, "application/json", list.body().into());
    let h = resp.headers_mut();
    super::stale::mark(h, list.stale);
    CacheStatus::served(list.stale, list.served).insert(h);
    if let Some(next) = &list.next {
        let mut link = format!("</v2/{}/tags/list?", p.repo);
        if let Some(n) = next.n {
            link.push_str(&format!("n={n}&"));
        }
        link.push_str(&format!("last={}", next.last.as_deref().unwrap_or("")));
        if let Some(ns) = &p.ns {
            link.push_str(&format!("&ns={ns}"));
        }
        link.push_str(">; rel=\"next\"");
        if let Ok(v) = HeaderValue::from_str(&link) {
            h.insert(header::LINK, v);
        }
    }
    Ok(resp)
}

/// `GET, HEAD .../referrers/<digest>[?artifactType=]`.
async fn referrers(ask: &Ask<'_>) -> Result<Response, OciError> {
    let p = &ask.p;
    let d = Digest::parse(p.reference)?;
    let at = query_param(ask.req.uri.query(), "artifactType")?;
    let r = ask
        .st
        .registry
        .referrers(&ask.up, p.repo, &d, at.as_deref())
        .await?;
    let mut resp = json_response(ask.head, INDEX_MEDIA_TYPE, r.body);
    let h = resp.headers_mut();
    super::stale::mark(h, r.stale);
    use crate::registry::ReferrersSource as Src;
    match r.source {
        Src::Stale => CacheStatus::Stale,
        Src::Upstream | Src::Stored if r.served.how != crate::cache::How::Hit => {
            CacheStatus::served(r.stale, r.served)
        }
        Src::Upstream => CacheStatus::Miss { stored: true },
        Src::Stored => CacheStatus::Hit,
        Src::Empty => CacheStatus::Miss { stored: false },
    }
    .insert(h);
    if r.filtered {
        h.insert(
            "oci-filters-applied",
            HeaderValue::from_static("artifactType"),
        );
    }
    Ok(resp)
}

/// A blob's headers (a HEAD's and a GET's base): common, type, digest.
fn blob_headers(h: &mut HeaderMap, d: &Digest) -> Validators {
    set_common(h);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    digest_headers(h, d)
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
    let validators = blob_headers(&mut base, d);
    let metrics = reg.metrics().cloned();
    Ok(respond(
        blob,
        req_headers,
        Answer {
            base,
            validators,
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
        error_response(&self)
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
    fn paths() {
        let p = parse_path("/v2/a/b/c/manifests/v1", Some("ns=GHCR.io")).unwrap();
        assert_eq!(
            p,
            V2Path {
                repo: "a/b/c",
                kind: "manifests",
                reference: "v1",
                ns: Some("ghcr.io".into())
            }
        );
        let p = parse_path("/v2/x/tags/list", None).unwrap();
        assert_eq!((p.repo, p.kind, p.reference), ("x", "tags", "list"));
        assert_eq!(
            parse_path("/v2/x", None).unwrap_err().kind,
            OciKind::NoRoute
        );
        assert_eq!(
            parse_path("/v2/x/y", None).unwrap_err().kind,
            OciKind::NoRoute
        );
        let e = parse_path("/v2/a%2Fb/manifests/v1", None).unwrap_err();
        assert_eq!(e.kind, OciKind::NameInvalid);
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
