//! `GET, HEAD /image/{schematic}/{version}/{asset}` and `.../{asset}.sha256`:
//! artifacts from the store or a running fill, with the headers the factory
//! sends plus `Accept-Ranges`, a strong `ETag` (the sha256), `Last-Modified`,
//! single byte ranges and conditional requests ([`super::ranges`]). Never
//! compressed. Thin: validate the key, open the object, answer.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};

use super::error::text;
use super::ranges::{Answer, CacheStatus, Validators, once_more_if_dropped, respond};
use super::state::AppState;
use crate::factory::{ImageCache, ImageKey};
use crate::fill::Object;

pub use super::ranges::{ByteRange, RangeAsk, parse_range};

/// The query the factory reads on `/image`: `?filename=` names the
/// download (`Content-Disposition`, and the name in a `.sha256` line).
#[derive(Debug, Default, serde::Deserialize)]
pub struct ImageQuery {
    #[serde(default)]
    filename: Option<String>,
}

/// A `?filename=` the answer can carry: a plain name of printable ASCII,
/// no quotes, backslashes or path separators, not `.` or `..` (400
/// otherwise, naming it; a name outside ASCII, such as one with a
/// right-to-left override that shows `exe.iso` for `osi.exe`, included).
fn check_filename(f: &str) -> crate::Result<()> {
    let ok = !f.is_empty()
        && f.len() <= 255
        && f != "."
        && f != ".."
        && f.chars()
            .all(|c| (c.is_ascii_graphic() || c == ' ') && !matches!(c, '"' | '\\' | '/'));
    if ok {
        Ok(())
    } else {
        Err(crate::Error::bad_input(format!(
            "filename: {:?} is not a plain file name",
            f.chars().take(64).collect::<String>()
        )))
    }
}

/// The route handler for GET and HEAD.
pub async fn get_image(
    State(state): State<AppState>,
    method: Method,
    Path((schematic, version, asset)): Path<(String, String, String)>,
    Query(query): Query<ImageQuery>,
    headers: HeaderMap,
) -> Response {
    let cache = &state.images;
    let (asset, sha) = match asset.strip_suffix(".sha256") {
        Some(a) => (a.to_string(), true),
        None => (asset, false),
    };
    let key = match ImageKey::parse(&schematic, &version, &asset) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    let filename = query.filename.filter(|f| !f.is_empty());
    if let Some(f) = &filename
        && let Err(e) = check_filename(f)
    {
        return e.into_response();
    }
    let head_only = method == Method::HEAD;
    let name = filename.as_deref().unwrap_or(&key.asset);
    let (key, headers, filename) = (&key, &headers, filename.as_deref());
    let Ok(resp) = once_more_if_dropped(|| async move {
        Ok::<_, Infallible>(match cache.open(key).await {
            Err(e) => e.into_response(),
            Ok(obj) if sha => sha256_answer(obj, name, head_only, headers).await,
            Ok(obj) => artifact(cache, obj, head_only, headers, filename).await,
        })
    })
    .await;
    cache.metrics().response("image", resp.status().as_u16());
    resp
}

/// `GET, HEAD /talosctl/{version}/{path}`: a talosctl binary of the
/// factory, through the same fill and answer as an image.
pub async fn get_talosctl(
    State(state): State<AppState>,
    method: Method,
    Path((version, path)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let cache = &state.images;
    let key = match crate::factory::TalosctlKey::parse(&version, &path) {
        Ok(k) => k,
        Err(e) => return e.into_response(),
    };
    let (key, headers, head_only) = (&key, &headers, method == Method::HEAD);
    let Ok(resp) = once_more_if_dropped(|| async move {
        Ok::<_, Infallible>(match cache.open_talosctl(key).await {
            Err(e) => e.into_response(),
            // The factory names the download after the path.
            Ok(obj) => artifact(cache, obj, head_only, headers, Some(&key.file)).await,
        })
    })
    .await;
    cache.metrics().response("image", resp.status().as_u16());
    resp
}

/// `GET /versions`: the factory's list, kept for when it cannot be asked.
pub async fn versions(State(state): State<AppState>) -> Response {
    super::factory::answer(&state, Ok(crate::factory::FactoryDoc::versions())).await
}

/// `<sha256>  <asset>`: known once the artifact is stored.
async fn sha256_answer(obj: Object, name: &str, head_only: bool, req: &HeaderMap) -> Response {
    let cache = CacheStatus::of(&obj).kept();
    let stored = match obj.complete().await {
        Ok(o) => o,
        Err(e) => return e.into_response(),
    };
    let body = format!("{}  {name}\n", stored.entry.digest);
    let validators = super::ranges::Validators {
        etag: Some(format!("\"{}.sha256\"", stored.entry.digest)),
        last_modified: None,
    };
    if let Some(status) = validators.precondition(req) {
        let mut h = HeaderMap::new();
        validators.insert(&mut h);
        cache.insert(&mut h);
        return super::ranges::bodiless(status, h);
    }
    let mut r = text(axum::http::StatusCode::OK, body.clone());
    if head_only {
        *r.body_mut() = Body::empty();
    }
    let h = r.headers_mut();
    cache.insert(h);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    validators.insert(h);
    r
}

/// The artifact: the factory's content type and disposition, validators
/// once stored (a growing one has none: `If-Range` cannot match it).
async fn artifact(
    cache: &ImageCache,
    obj: Object,
    head_only: bool,
    req: &HeaderMap,
    filename: Option<&str>,
) -> Response {
    // No length from the upstream: answer once stored (with validators).
    let mut status = CacheStatus::of(&obj);
    let obj = match obj.len() {
        Some(_) => obj,
        None => match obj.complete().await {
            Ok(o) => {
                status = status.kept();
                Object::Stored(o)
            }
            Err(e) => return e.into_response(),
        },
    };
    let head = obj.head();
    let mut base = HeaderMap::new();
    let ct = head
        .content_type
        .as_deref()
        .and_then(|c| HeaderValue::from_str(c).ok())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    base.insert(header::CONTENT_TYPE, ct);
    let named = filename.map(|f| format!("attachment; filename=\"{f}\""));
    if let Some(cd) = named
        .as_deref()
        .or(head.meta.get("content-disposition").map(String::as_str))
        .and_then(|c| HeaderValue::from_str(c).ok())
    {
        base.insert(header::CONTENT_DISPOSITION, cd);
    }
    let validators = match obj.entry() {
        Some(e) => Validators {
            etag: Some(format!("\"{}\"", e.digest)),
            last_modified: Some(e.fetched_time()),
        },
        None => Validators::default(),
    };
    let metrics = cache.metrics().clone();
    respond(
        obj,
        req,
        Answer {
            base,
            validators,
            head_only,
            cache: status,
            on_bytes: Box::new(move |n| metrics.served("image", n)),
        },
    )
    .await
}
