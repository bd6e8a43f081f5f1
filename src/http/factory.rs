//! The factory's keys and lists, as a verifying or browsing client fetches
//! them: `GET /oci/cosign/signing-key.pub`, `/secureboot/signing-cert.pem`,
//! `/version/{v}/extensions/official`, `/version/{v}/overlays/official`.
//! Thin: name the document, ask [`crate::factory::ImageCache::document`]
//! (the stored copy within `--metadata-ttl`, the factory's otherwise, the
//! stored one when the factory cannot be asked or `--offline`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::text;
use super::state::AppState;
use crate::factory::FactoryDoc;

pub(super) async fn answer(state: &AppState, doc: crate::Result<FactoryDoc>) -> Response {
    let doc = match doc {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    match state.images.document(&doc, state.images.metadata_ttl).await {
        Ok(d) => {
            let mut r = Response::new(Body::from(d.body));
            if let Ok(v) = HeaderValue::from_str(&d.content_type) {
                r.headers_mut().insert(header::CONTENT_TYPE, v);
            }
            super::stale::mark(r.headers_mut(), d.stale);
            super::ranges::CacheStatus::served(d.stale, d.served).insert(r.headers_mut());
            r
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /pxe/{schematic}/{version}/{path}`: the factory's iPXE script
/// (kept like its other documents), its image URLs pointed back at this
/// service ([`base_url`]) so the kernel and initramfs come through it too.
pub async fn pxe(
    State(state): State<AppState>,
    Path((schematic, version, path)): Path<(String, String, String)>,
    headers: axum::http::HeaderMap,
) -> Response {
    let doc = match FactoryDoc::pxe(&schematic, &version, &path) {
        Ok(d) => d,
        Err(e) => return e.into_response(),
    };
    let r = answer(&state, Ok(doc)).await;
    if r.status() != StatusCode::OK {
        return r;
    }
    let (parts, body) = r.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "reading the stored script",
        );
    };
    let base = base_url(&state, &headers);
    let script = crate::factory::rewrite_pxe(&String::from_utf8_lossy(&bytes), &base);
    let mut r = Response::from_parts(parts, Body::from(script));
    r.headers_mut().remove(header::CONTENT_LENGTH);
    if state.cfg.public_url.is_none() {
        // Built from the request's headers: a shared cache in front must
        // not hand one client's host to another.
        r.headers_mut().insert(
            header::VARY,
            HeaderValue::from_static("Host, X-Forwarded-Host, X-Forwarded-Proto"),
        );
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("private"));
    }
    r
}

/// The base URL a client reached this service at: `--public-url`, else
/// the request's `X-Forwarded-Proto` + `X-Forwarded-Host` (a proxy or
/// ingress in front), else its `Host` with this listener's scheme.
pub fn base_url(state: &AppState, headers: &axum::http::HeaderMap) -> String {
    if let Some(u) = &state.cfg.public_url {
        return u.clone();
    }
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
            .filter(|v| {
                !v.is_empty()
                    && v.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                    })
            })
            .map(str::to_string)
    };
    let scheme = match h("x-forwarded-proto").as_deref() {
        Some("https") => "https",
        Some("http") => "http",
        _ if state.cfg.tls.is_some() => "https",
        _ => "http",
    };
    let host = h("x-forwarded-host")
        .or_else(|| h("host"))
        .unwrap_or_else(|| state.cfg.listen.clone());
    format!("{scheme}://{host}")
}

/// `GET /oci/cosign/signing-key.pub`.
pub async fn cosign_key(State(state): State<AppState>) -> Response {
    answer(&state, Ok(FactoryDoc::cosign_key())).await
}

/// `GET /secureboot/signing-cert.pem`.
pub async fn secureboot_cert(State(state): State<AppState>) -> Response {
    answer(&state, Ok(FactoryDoc::secureboot_cert())).await
}

/// `GET /version/{version}/extensions/official`.
pub async fn extensions(State(state): State<AppState>, Path(v): Path<String>) -> Response {
    answer(&state, FactoryDoc::extensions(&v)).await
}

/// `GET /version/{version}/overlays/official`.
pub async fn overlays(State(state): State<AppState>, Path(v): Path<String>) -> Response {
    answer(&state, FactoryDoc::overlays(&v)).await
}
