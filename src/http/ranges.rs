//! Answering for one object, whole or a byte range, with its validators:
//! the one place that reads `Range`, `If-Range`, `If-None-Match` and
//! `If-Modified-Since`, shared by `/image` and `/v2/.../blobs`.
//!
//! The conditional headers are the `headers` crate's typed ones. `Range`
//! is parsed here: `headers::Range::satisfiable_ranges` drops a suffix
//! longer than the body (RFC 9110 says: the whole body), accepts `+5` as a
//! number and an end before the start, so it does not fit the contract.

use std::time::SystemTime;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use headers::{
    ETag, HeaderMapExt, IfMatch, IfModifiedSince, IfNoneMatch, IfRange, IfUnmodifiedSince,
    LastModified,
};

use crate::fill::Object;

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
            Some(_) if len == 0 => RangeAsk::Unsatisfiable,
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

/// What identifies the representation (for conditional requests).
#[derive(Debug, Clone, Default)]
pub struct Validators {
    /// A strong entity tag, quoted (`"<hex>"`).
    pub etag: Option<String>,
    pub last_modified: Option<SystemTime>,
}

impl Validators {
    fn etag(&self) -> Option<ETag> {
        self.etag.as_deref().and_then(|e| e.parse().ok())
    }

    fn last_modified(&self) -> Option<LastModified> {
        self.last_modified.map(LastModified::from)
    }

    /// `ETag` and `Last-Modified`, the ones set.
    pub fn insert(&self, h: &mut HeaderMap) {
        if let Some(e) = self.etag() {
            h.typed_insert(e);
        }
        if let Some(m) = self.last_modified() {
            h.typed_insert(m);
        }
    }

    /// The answer the conditional headers of `req` call for before any
    /// body: 412 (a failed `If-Match` / `If-Unmodified-Since`), else 304
    /// (`If-None-Match` / `If-Modified-Since` say the client's copy is
    /// current), else `None`. Every answer that carries these validators
    /// (a body, a HEAD, a `.sha256` line) asks this one function.
    pub fn precondition(&self, req: &HeaderMap) -> Option<StatusCode> {
        if self.precondition_failed(req) {
            Some(StatusCode::PRECONDITION_FAILED)
        } else if self.not_modified(req) {
            Some(StatusCode::NOT_MODIFIED)
        } else {
            None
        }
    }

    /// `If-Match` (or, without it, `If-Unmodified-Since`) fails (RFC 9110
    /// 13.2.2: 412 before anything else): no current tag matches strongly,
    /// or the object changed after the date. A growing object (no tag yet)
    /// matches only `If-Match: *`; without a date `If-Unmodified-Since` is
    /// ignored.
    fn precondition_failed(&self, req: &HeaderMap) -> bool {
        if let Some(im) = req.typed_get::<IfMatch>() {
            return match self.etag() {
                Some(e) => !im.precondition_passes(&e),
                None => im != IfMatch::any(),
            };
        }
        match (req.typed_get::<IfUnmodifiedSince>(), self.last_modified) {
            (Some(ius), Some(t)) => !ius.precondition_passes(t),
            _ => false,
        }
    }

    /// `If-None-Match` (or, without it, `If-Modified-Since`) says the
    /// client's copy is current.
    fn not_modified(&self, req: &HeaderMap) -> bool {
        if let Some(inm) = req.typed_get::<IfNoneMatch>() {
            return self.etag().is_some_and(|e| !inm.precondition_passes(&e));
        }
        match (req.typed_get::<IfModifiedSince>(), self.last_modified) {
            (Some(ims), Some(t)) => !ims.is_modified(t),
            _ => false,
        }
    }

    /// `If-Range` absent, or matching this representation: an entity tag
    /// strongly, a date only when it is exactly `Last-Modified` (RFC 9110
    /// 13.1.5; the `headers` crate's `IfRange::is_modified` also accepts a
    /// later date, so dates are compared here).
    fn range_applies(&self, req: &HeaderMap) -> bool {
        let Some(v) = req.get(header::IF_RANGE) else {
            return true;
        };
        if let Some(date) = v
            .to_str()
            .ok()
            .and_then(|s| httpdate::parse_http_date(s).ok())
        {
            let secs = |t: SystemTime| {
                t.duration_since(SystemTime::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs())
            };
            return self.last_modified.is_some_and(|lm| secs(lm) == secs(date));
        }
        match req.typed_get::<IfRange>() {
            Some(ir) => {
                self.etag.is_some()
                    && !ir.is_modified(self.etag().as_ref(), self.last_modified().as_ref())
            }
            None => false,
        }
    }
}

/// A 304 or 412 with the answer's headers but no body (and no type).
pub fn bodiless(status: StatusCode, h: HeaderMap) -> Response {
    let mut r = status.into_response();
    r.headers_mut().extend(h);
    r.headers_mut().remove(header::CONTENT_TYPE);
    r.headers_mut().remove(header::CONTENT_LENGTH);
    r
}

/// Where an answer came from, as its `Cache-Status` (RFC 9211) says it:
/// `talos-gen; hit` (the store's copy, fresh), `talos-gen; fwd=miss` (from
/// the upstream; `; stored` once the store kept it), `talos-gen;
/// fwd=revalidated` (the upstream was asked and confirmed the stored
/// copy), `talos-gen; fwd=stale` (the stored copy past its freshness:
/// the upstream failed, is known down, or is asked in the background; the
/// answer also carries `Warning: 110`); `; collapsed` when another
/// request's flight served it. Every `/image/`, `/talosctl/`, `/v2/` and
/// factory document answer carries one ([`CacheStatus::DEFAULT`], plain
/// `talos-gen`, when no lookup stands behind it: a refusal, an error
/// before the store or the upstream was asked, a store that does not
/// answer), and the access log line repeats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    Hit,
    Miss {
        stored: bool,
    },
    Stale,
    Revalidated,
    /// Another request's flight served it: what that flight did.
    Collapsed(Shared),
    /// Nothing was looked up or asked.
    None,
}

/// What the flight that served a collapsed request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shared {
    /// Fetched and kept.
    Fetched,
    Revalidated,
    /// A fill being fetched, not kept yet.
    Filling,
}

impl CacheStatus {
    /// The header's name.
    pub const HEADER: &'static str = "cache-status";
    /// The value of an answer no lookup stands behind (a refused request,
    /// `/v2/` itself, an error before the store or the upstream was
    /// asked): it never went upstream, so no `fwd`.
    pub const DEFAULT: &'static str = "talos-gen";

    /// A stored object is a hit; a growing one is a miss not kept yet,
    /// collapsed when another request started its fill.
    pub fn of(obj: &Object) -> CacheStatus {
        match obj {
            Object::Stored(_) => CacheStatus::Hit,
            Object::Growing(g) if g.handle().is_joined() => CacheStatus::Collapsed(Shared::Filling),
            Object::Growing(_) => CacheStatus::Miss { stored: false },
        }
    }

    /// Hit unless `stale` (a stored copy answered because the upstream failed).
    pub fn stored(stale: bool) -> CacheStatus {
        if stale {
            CacheStatus::Stale
        } else {
            CacheStatus::Hit
        }
    }

    /// What a revalidating lookup did ([`crate::cache::revalidate`]).
    pub fn served(stale: bool, s: crate::cache::Served) -> CacheStatus {
        use crate::cache::How;
        match (s.how, s.collapsed) {
            _ if stale => CacheStatus::Stale,
            (How::Hit | How::Stale, _) => CacheStatus::Hit,
            (How::Fetched, false) => CacheStatus::Miss { stored: true },
            (How::Fetched, true) => CacheStatus::Collapsed(Shared::Fetched),
            (How::Revalidated, false) => CacheStatus::Revalidated,
            (How::Revalidated, true) => CacheStatus::Collapsed(Shared::Revalidated),
        }
    }

    pub fn value(self) -> &'static str {
        match self {
            CacheStatus::Hit => "talos-gen; hit",
            CacheStatus::Miss { stored: false } => "talos-gen; fwd=miss",
            CacheStatus::Miss { stored: true } => "talos-gen; fwd=miss; stored",
            CacheStatus::Stale => "talos-gen; fwd=stale",
            CacheStatus::Revalidated => "talos-gen; fwd=revalidated",
            CacheStatus::Collapsed(Shared::Fetched) => "talos-gen; fwd=miss; stored; collapsed",
            CacheStatus::Collapsed(Shared::Revalidated) => "talos-gen; fwd=revalidated; collapsed",
            CacheStatus::Collapsed(Shared::Filling) => "talos-gen; fwd=miss; collapsed",
            CacheStatus::None => CacheStatus::DEFAULT,
        }
    }

    /// Set the header on `h`.
    pub fn insert(self, h: &mut HeaderMap) {
        h.insert(CacheStatus::HEADER, HeaderValue::from_static(self.value()));
    }

    /// A miss whose object is now stored says so.
    pub(super) fn kept(self) -> CacheStatus {
        match self {
            CacheStatus::Miss { .. } => CacheStatus::Miss { stored: true },
            CacheStatus::Collapsed(Shared::Filling) => CacheStatus::Collapsed(Shared::Fetched),
            other => other,
        }
    }
}

/// How one response goes out.
pub struct Answer {
    /// Headers every answer of the route carries (content type, disposition,
    /// the registry's version header), 304 and 416 included.
    pub base: HeaderMap,
    pub validators: Validators,
    pub head_only: bool,
    /// Where the object came from ([`CacheStatus::of`] when it was opened).
    pub cache: CacheStatus,
    /// Called with the size of each body chunk sent (metrics).
    pub on_bytes: Box<dyn Fn(u64) + Send + Sync>,
}

/// The mark of an answer whose stored copy failed its check before a byte
/// of it went out (the store dropped the copy): the handler opens the
/// object once more, so the client gets it fetched again, not an error.
#[derive(Debug, Clone, Copy)]
pub struct Dropped;

/// `answer()`, and once more where it was [`Dropped`]: the stored copy
/// failed its check before a byte went out and the store dropped it, so
/// the second open fetches it again (offline: not found).
pub async fn once_more_if_dropped<E, F>(mut answer: impl FnMut() -> F) -> Result<Response, E>
where
    F: Future<Output = Result<Response, E>>,
{
    let r = answer().await?;
    if r.extensions().get::<Dropped>().is_some() {
        answer().await
    } else {
        Ok(r)
    }
}

/// Answer `req` with `obj`: 304, 416, 206 or 200, `Content-Length`,
/// `Content-Range`, `Accept-Ranges`, the validators; the body streamed
/// from the object (checked chunks, or the growing fill whose end waits for
/// verification). An object whose length is not known yet is answered
/// once it is stored.
pub async fn respond(obj: Object, req: &HeaderMap, a: Answer) -> Response {
    let mut cache = a.cache;
    let obj = match obj.len() {
        Some(_) => obj,
        None => match obj.complete().await {
            Ok(o) => {
                cache = cache.kept();
                Object::Stored(o)
            }
            Err(e) => return e.into_response(),
        },
    };
    let len = obj.len().unwrap_or(0);
    let mut h = a.base;
    cache.insert(&mut h);
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    a.validators.insert(&mut h);
    if let Some(status) = a.validators.precondition(req) {
        return bodiless(status, h);
    }
    let ask = match req.get(header::RANGE).and_then(|v| v.to_str().ok()) {
        // Range applies to GET only: a HEAD gets the 200's headers (RFC 9110 14.2).
        Some(v) if !a.head_only && a.validators.range_applies(req) => parse_range(v, len),
        _ => RangeAsk::Full,
    };
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
                h.insert(header::CONTENT_RANGE, v);
            }
            h.remove(header::CONTENT_TYPE);
            r.headers_mut().extend(h);
            return r;
        }
    };
    h.insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(range.end - range.start),
    );
    let body = if a.head_only {
        Body::empty()
    } else {
        let count = a.on_bytes;
        // A stored object's first bytes come before the head: a store
        // that could not read them (a bucket that does not answer, a
        // failed read) is a 503, not a cut 200; a first block that fails
        // its check (the copy dropped by the store) is a 503 marked
        // [`Dropped`], which the handler answers by opening the object
        // once more (fetched again), not a head and no bytes.
        let stored = matches!(obj, Object::Stored(_));
        let mut s = obj.stream(range.start, Some(range.end));
        let first = if stored {
            match s.next().await {
                Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                    let mut r = crate::fill::FetchError::Unavailable(format!(
                        "the stored copy failed its check and was dropped; ask again: {e}"
                    ))
                    .into_response();
                    r.extensions_mut().insert(Dropped);
                    return r;
                }
                Some(Err(e)) => {
                    return crate::fill::FetchError::Unavailable(format!(
                        "the store could not read it: {e}"
                    ))
                    .into_response();
                }
                other => other,
            }
        } else {
            None
        };
        Body::from_stream(futures::stream::iter(first).chain(s).inspect(move |r| {
            if let Ok(b) = r {
                count(b.len() as u64);
            }
        }))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = h;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_status_values() {
        assert_eq!(CacheStatus::Hit.value(), "talos-gen; hit");
        assert_eq!(
            CacheStatus::Miss { stored: false }.value(),
            "talos-gen; fwd=miss"
        );
        assert_eq!(
            CacheStatus::Miss { stored: false }.kept().value(),
            "talos-gen; fwd=miss; stored"
        );
        assert_eq!(CacheStatus::Hit.kept(), CacheStatus::Hit);
        assert_eq!(CacheStatus::stored(true).value(), "talos-gen; fwd=stale");
        assert_eq!(CacheStatus::stored(false), CacheStatus::Hit);
        assert_eq!(CacheStatus::None.value(), "talos-gen");
        use crate::cache::{How, Served};
        let served = |how, collapsed| CacheStatus::served(false, Served { how, collapsed });
        assert_eq!(
            served(How::Revalidated, false).value(),
            "talos-gen; fwd=revalidated"
        );
        assert_eq!(
            served(How::Revalidated, true).value(),
            "talos-gen; fwd=revalidated; collapsed"
        );
        assert_eq!(
            served(How::Fetched, true).value(),
            "talos-gen; fwd=miss; stored; collapsed"
        );
        assert_eq!(served(How::Hit, false).value(), "talos-gen; hit");
        let joined = CacheStatus::Collapsed(Shared::Filling);
        assert_eq!(joined.value(), "talos-gen; fwd=miss; collapsed");
        assert_eq!(
            joined.kept().value(),
            "talos-gen; fwd=miss; stored; collapsed"
        );
        let stale = Served {
            how: How::Fetched,
            collapsed: true,
        };
        assert_eq!(
            CacheStatus::served(true, stale).value(),
            "talos-gen; fwd=stale"
        );
    }

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
        assert_eq!(p("bytes=+5-9"), RangeAsk::Full);
        assert_eq!(parse_range("bytes=0-", 0), RangeAsk::Unsatisfiable);
    }

    fn hm(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn validators() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let v = Validators {
            etag: Some("\"abc\"".into()),
            last_modified: Some(t),
        };
        assert!(v.not_modified(&hm(&[("if-none-match", "\"abc\"")])));
        assert!(v.not_modified(&hm(&[("if-none-match", "W/\"abc\", \"x\"")])));
        assert!(v.not_modified(&hm(&[("if-none-match", "*")])));
        assert!(!v.not_modified(&hm(&[("if-none-match", "\"c\"")])));
        let date = httpdate::fmt_http_date(t);
        assert!(v.not_modified(&hm(&[("if-modified-since", &date)])));
        // If-None-Match wins over If-Modified-Since
        assert!(!v.not_modified(&hm(&[
            ("if-none-match", "\"c\""),
            ("if-modified-since", &date)
        ])));
        assert!(v.range_applies(&hm(&[])));
        assert!(v.range_applies(&hm(&[("if-range", "\"abc\"")])));
        assert!(!v.range_applies(&hm(&[("if-range", "\"old\"")])));
        assert!(v.range_applies(&hm(&[("if-range", &date)])));
        // a date is a match only when it is exactly Last-Modified (RFC 9110
        // 13.1.5): later or earlier, the whole body.
        let later = httpdate::fmt_http_date(t + std::time::Duration::from_secs(60));
        let earlier = httpdate::fmt_http_date(t - std::time::Duration::from_secs(60));
        assert!(!v.range_applies(&hm(&[("if-range", &later)])));
        assert!(!v.range_applies(&hm(&[("if-range", &earlier)])));
        let no_date = Validators {
            etag: Some("\"abc\"".into()),
            last_modified: None,
        };
        assert!(!no_date.range_applies(&hm(&[("if-range", &date)])));
        assert!(no_date.range_applies(&hm(&[("if-range", "\"abc\"")])));
        assert!(!no_date.range_applies(&hm(&[("if-range", "W/\"abc\"")])));
        // a growing object has no validators: If-Range never matches
        assert!(!Validators::default().range_applies(&hm(&[("if-range", "\"abc\"")])));
        assert!(!Validators::default().not_modified(&hm(&[("if-none-match", "*")])));
        // If-Match, If-Unmodified-Since: 412 when they fail.
        assert!(!v.precondition_failed(&hm(&[])));
        assert!(!v.precondition_failed(&hm(&[("if-match", "\"abc\"")])));
        assert!(!v.precondition_failed(&hm(&[("if-match", "\"x\", \"abc\"")])));
        assert!(!v.precondition_failed(&hm(&[("if-match", "*")])));
        assert!(v.precondition_failed(&hm(&[("if-match", "\"nope\"")])));
        assert!(v.precondition_failed(&hm(&[("if-match", "W/\"abc\"")])));
        let before = httpdate::fmt_http_date(t - std::time::Duration::from_secs(60));
        assert!(v.precondition_failed(&hm(&[("if-unmodified-since", &before)])));
        assert!(!v.precondition_failed(&hm(&[("if-unmodified-since", &date)])));
        // If-Match wins over If-Unmodified-Since.
        assert!(!v.precondition_failed(&hm(&[
            ("if-match", "\"abc\""),
            ("if-unmodified-since", &before)
        ])));
        let growing = Validators::default();
        assert!(growing.precondition_failed(&hm(&[("if-match", "\"abc\"")])));
        assert!(!growing.precondition_failed(&hm(&[("if-match", "*")])));
        assert!(!growing.precondition_failed(&hm(&[("if-unmodified-since", &before)])));
    }
}
