//! The factory's keys and lists, as a verifying or browsing client fetches
//! them: `GET /oci/cosign/signing-key.pub`, `/secureboot/signing-cert.pem`,
//! `/version/{v}/extensions/official`, `/version/{v}/overlays/official`.
//! Thin: name the document, ask [`crate::imagecache::ImageCache::document`]
//! (the stored copy within `--metadata-ttl`, the factory's otherwise, the
//! stored one when the factory cannot be asked or `--offline`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::state::AppState;
use crate::imagecache::FactoryDoc;

async fn answer(state: &AppState, doc: crate::Result<FactoryDoc>) -> Response {
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
            r
        }
        Err(e) => e.into_response(),
    }
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
