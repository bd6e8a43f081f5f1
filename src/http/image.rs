//! `GET, HEAD /image/{schematic}/{version}/{asset}` and `.../{asset}.sha256`:
//! artifacts from the store or a running fill, with the headers the factory
//! sends plus `Accept-Ranges`, a strong `ETag` (the sha256), `Last-Modified`,
//! single byte ranges and conditional requests. Never compressed.

use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::fill::{FetchError, FillHandle, Head, Joined};
use crate::imagecache::{ImageCache, ImageError, ImageKey};
use crate::metrics::Metrics;
use crate::store::{Entry, StoredObject};

use super::AppState;

fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut m = msg.into();
    if !m.ends_with('\n') {
        m.push('\n');
    }
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        m,
    )
        .into_response()
}

fn fetch_error(e: FetchError) -> Response {
    match e {
        FetchError::Status {
            status,
            content_type,
            body,
        } => {
            let st = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            let mut r = (st, body).into_response();
            if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
                r.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            r
        }
        FetchError::Timeout(m) => text(StatusCode::GATEWAY_TIMEOUT, m),
        FetchError::Failed(m) => text(StatusCode::BAD_GATEWAY, m),
        FetchError::Local(m) => text(StatusCode::INTERNAL_SERVER_ERROR, m),
    }
}

fn image_error(e: ImageError) -> Response {
    match e {
        ImageError::NotCached(m) => text(StatusCode::NOT_FOUND, m),
        ImageError::Fetch(f) => fetch_error(f),
    }
}

/// The route handler for GET and HEAD.
pub async fn get_image(
    State(state): State<AppState>,
    method: Method,
    Path((schematic, version, asset)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let cache = &state.images;
    let (asset, sha) = match asset.strip_suffix(".sha256") {
        Some(a) => (a.to_string(), true),
        None => (asset, false),
    };
    let key = match ImageKey::parse(&schematic, &version, &asset) {
        Ok(k) => k,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let resp = if sha {
        sha256_answer(cache, &key, method == Method::HEAD).await
    } else {
        artifact(cache, &key, &method, &headers).await
    };
    cache.metrics().response("image", resp.status().as_u16());
    resp
}

/// `GET /versions`: the factory's list, kept for when it cannot be asked.
pub async fn versions(State(state): State<AppState>) -> Response {
    match state.images.versions().await {
        Ok((ct, body)) => {
            let mut r = Response::new(Body::from(body));
            if let Ok(v) = HeaderValue::from_str(&ct) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            r
        }
        Err(e) => image_error(e),
    }
}

async fn sha256_answer(cache: &ImageCache, key: &ImageKey, head_only: bool) -> Response {
    let entry = match cache.lookup(key) {
        Ok(Joined::Stored(o)) => o.entry.clone(),
        Ok(Joined::Filling(h)) => match h.wait().await {
            Ok(e) => e,
            Err(e) => return fetch_error(e),
        },
        Err(e) => return image_error(e),
    };
    let body = format!("{}  {}\n", entry.digest, key.asset);
    let mut r = Response::new(if head_only {
        Body::empty()
    } else {
        Body::from(body.clone())
    });
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}.sha256\"", entry.digest)) {
        h.insert(header::ETAG, v);
    }
    r
}

/// A single byte range, end exclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

/// What a `Range` header asks of a body of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeAsk {
    /// No (usable) range: the whole body.
    Full,
    Partial(ByteRange),
    Unsatisfiable,
}

/// Parse `Range` for a body of `len` bytes. Malformed headers and multiple
/// ranges are ignored (the whole body is sent), as RFC 9110 allows.
pub fn parse_range(value: &str, len: u64) -> RangeAsk {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return RangeAsk::Full;
    };
    if spec.contains(',') {
        return RangeAsk::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeAsk::Full;
    };
    let num = |s: &str| -> Option<u64> {
        let s = s.trim();
        if s.is_empty() || s.len() > 19 || !s.bytes().all(|c| c.is_ascii_digit()) {
            None
        } else {
            s.parse().ok()
        }
    };
    match (a.trim().is_empty(), b.trim().is_empty()) {
        (true, true) => RangeAsk::Full,
        (true, false) => match num(b) {
            // suffix range: the last n bytes
            Some(0) => RangeAsk::Unsatisfiable,
            Some(n) if len == 0 => {
                let _ = n;
                RangeAsk::Unsatisfiable
            }
            Some(n) => RangeAsk::Partial(ByteRange {
                start: len.saturating_sub(n),
                end: len,
            }),
            None => RangeAsk::Full,
        },
        (false, _) => {
            let Some(start) = num(a) else {
                return RangeAsk::Full;
            };
            let last = if b.trim().is_empty() {
                None
            } else {
                match num(b) {
                    Some(l) if l >= start => Some(l),
                    _ => return RangeAsk::Full,
                }
            };
            if start >= len {
                return RangeAsk::Unsatisfiable;
            }
            let end = last.map_or(len, |l| l.saturating_add(1).min(len));
            RangeAsk::Partial(ByteRange { start, end })
        }
    }
}

fn etag_of(e: &Entry) -> String {
    format!("\"{}\"", e.digest)
}

/// Does an `If-None-Match` / `If-Range` entity-tag list match `etag`?
fn etag_list_matches(list: &str, etag: &str, weak_ok: bool) -> bool {
    list.split(',').map(str::trim).any(|t| {
        t == "*" || t == etag || (weak_ok && t.strip_prefix("W/").is_some_and(|s| s == etag))
    })
}

fn hdr(h: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// What conditional headers say for a stored object.
enum Cond {
    NotModified,
    Proceed { use_range: bool },
}

fn conditions(h: &HeaderMap, etag: &str, modified: SystemTime) -> Cond {
    let modified_secs = httpdate::fmt_http_date(modified);
    let modified = httpdate::parse_http_date(&modified_secs).unwrap_or(modified);
    if let Some(inm) = hdr(h, header::IF_NONE_MATCH) {
        if etag_list_matches(inm, etag, true) {
            return Cond::NotModified;
        }
    } else if let Some(ims) = hdr(h, header::IF_MODIFIED_SINCE)
        && let Ok(t) = httpdate::parse_http_date(ims)
        && modified <= t
    {
        return Cond::NotModified;
    }
    let use_range = match hdr(h, header::IF_RANGE) {
        None => true,
        Some(v) if v.trim().starts_with('"') => v.trim() == etag,
        Some(v) => httpdate::parse_http_date(v).is_ok_and(|t| modified <= t),
    };
    Cond::Proceed { use_range }
}

fn base_headers(h: &mut HeaderMap, head: &Head) {
    let ct = head
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_TYPE, ct);
    if let Some(cd) = head
        .meta
        .get("content-disposition")
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        h.insert(header::CONTENT_DISPOSITION, cd);
    }
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
}

async fn artifact(
    cache: &ImageCache,
    key: &ImageKey,
    method: &Method,
    req: &HeaderMap,
) -> Response {
    let head_only = method == Method::HEAD;
    let joined = match cache.lookup(key) {
        Ok(j) => j,
        Err(e) => return image_error(e),
    };
    match joined {
        Joined::Stored(obj) => serve_stored(cache.metrics(), obj, head_only, req),
        Joined::Filling(mut h) => {
            let head = match h.head().await {
                Ok(hd) => hd,
                Err(e) => return fetch_error(e),
            };
            let Some(len) = head.len else {
                // No length from upstream: wait for the whole object.
                return match h.wait().await {
                    Ok(_) => match cache.fills().store().get(&key.store_key()) {
                        Some(obj) => serve_stored(cache.metrics(), obj, head_only, req),
                        None => text(
                            StatusCode::BAD_GATEWAY,
                            "the artifact was evicted as soon as it arrived",
                        ),
                    },
                    Err(e) => fetch_error(e),
                };
            };
            serve_filling(cache.metrics(), h, head, len, head_only, req)
        }
    }
}

fn range_of(req: &HeaderMap, len: u64, use_range: bool) -> RangeAsk {
    match (use_range, hdr(req, header::RANGE)) {
        (true, Some(r)) => parse_range(r, len),
        _ => RangeAsk::Full,
    }
}

fn shape(
    head: &Head,
    len: u64,
    ask: RangeAsk,
) -> Result<(StatusCode, ByteRange, HeaderMap), Box<Response>> {
    let mut h = HeaderMap::new();
    base_headers(&mut h, head);
    let (status, range) = match ask {
        RangeAsk::Full => (StatusCode::OK, ByteRange { start: 0, end: len }),
        RangeAsk::Partial(r) => {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {}-{}/{len}", r.start, r.end - 1))
            {
                h.insert(header::CONTENT_RANGE, v);
            }
            (StatusCode::PARTIAL_CONTENT, r)
        }
        RangeAsk::Unsatisfiable => {
            let mut r = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r.headers_mut()
                .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            return Err(Box::new(r));
        }
    };
    h.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(range.end - range.start),
    );
    Ok((status, range, h))
}

fn serve_stored(
    metrics: &Metrics,
    obj: StoredObject,
    head_only: bool,
    req: &HeaderMap,
) -> Response {
    let entry = obj.entry.clone();
    let etag = etag_of(&entry);
    let modified = entry.fetched_time();
    let mut extra = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        extra.insert(header::ETAG, v);
    }
    if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(modified)) {
        extra.insert(header::LAST_MODIFIED, v);
    }
    let use_range = match conditions(req, &etag, modified) {
        Cond::NotModified => {
            let mut r = StatusCode::NOT_MODIFIED.into_response();
            r.headers_mut().extend(extra);
            return r;
        }
        Cond::Proceed { use_range } => use_range,
    };
    let head = Head {
        len: Some(entry.size),
        content_type: entry.content_type.clone(),
        meta: entry.meta.clone(),
    };
    let (status, range, mut h) =
        match shape(&head, entry.size, range_of(req, entry.size, use_range)) {
            Ok(x) => x,
            Err(mut r) => {
                r.headers_mut().extend(extra);
                return *r;
            }
        };
    h.extend(extra);
    let body = if head_only {
        Body::empty()
    } else {
        Body::from_stream(counted(metrics.clone(), obj.stream(range.start, range.end)))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = h;
    r
}

fn serve_filling(
    metrics: &Metrics,
    h: FillHandle,
    head: Head,
    len: u64,
    head_only: bool,
    req: &HeaderMap,
) -> Response {
    // No ETag yet; `If-Range` cannot match, so ranges apply only without it.
    let use_range = hdr(req, header::IF_RANGE).is_none();
    let (status, range, hm) = match shape(&head, len, range_of(req, len, use_range)) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let body = if head_only {
        Body::empty()
    } else {
        Body::from_stream(counted(
            metrics.clone(),
            h.reader(range.start, Some(range.end)),
        ))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = hm;
    r
}

fn counted(
    metrics: Metrics,
    s: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    s.inspect(move |r| {
        if let Ok(b) = r {
            metrics.served("image", b.len() as u64);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        let p = |s| parse_range(s, 100);
        let r = |start, end| RangeAsk::Partial(ByteRange { start, end });
        assert_eq!(p("bytes=0-0"), r(0, 1));
        assert_eq!(p("bytes=10-"), r(10, 100));
        assert_eq!(p("bytes=90-200"), r(90, 100));
        assert_eq!(p("bytes=-10"), r(90, 100));
        assert_eq!(p("bytes=-1000"), r(0, 100));
        assert_eq!(p("bytes=100-"), RangeAsk::Unsatisfiable);
        assert_eq!(p("bytes=-0"), RangeAsk::Unsatisfiable);
        assert_eq!(p("bytes=5-1"), RangeAsk::Full);
        assert_eq!(p("bytes=0-1,5-6"), RangeAsk::Full);
        assert_eq!(p("items=0-1"), RangeAsk::Full);
        assert_eq!(p("bytes=x-1"), RangeAsk::Full);
        assert_eq!(parse_range("bytes=0-", 0), RangeAsk::Unsatisfiable);
    }

    #[test]
    fn etags() {
        assert!(etag_list_matches("\"a\", \"b\"", "\"b\"", true));
        assert!(etag_list_matches("W/\"b\"", "\"b\"", true));
        assert!(!etag_list_matches("W/\"b\"", "\"b\"", false));
        assert!(etag_list_matches("*", "\"b\"", true));
        assert!(!etag_list_matches("\"c\"", "\"b\"", true));
    }
}
