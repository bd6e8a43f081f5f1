//! `POST /schematics` and `GET /schematics/{id}`, as the Image Factory
//! answers them. Thin: read the body (at most 1 MiB), call `schematic` off
//! the async workers (`blocking`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Limited};

use super::state::AppState;
use crate::error::Error;
use crate::schematic::{MAX_SIZE, Schematic};

/// `POST /schematics`: body YAML or JSON; 201 `{"id","schematic"}`; 400
/// with the reason when invalid; 413 when over 1 MiB.
pub async fn create(
    State(st): State<AppState>,
    pin: Option<axum::Extension<super::limits::PinWrites>>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    // Pinned only with the API token (the route policy table); else cache.
    let pinned = pin.is_some_and(|p| p.0.0);
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_SIZE as u64) {
        return too_large();
    }
    let bytes = match Limited::new(body, MAX_SIZE).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("schematic larger than {MAX_SIZE} bytes\n"),
                )
                    .into_response();
            }
            return Error::bad_input(format!("reading the body: {e}")).into_response();
        }
    };
    // UTF-8, structure and parse off the async workers (see `blocking`)
    let parsed = super::blocking::run("parsing the schematic", move || {
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| Error::bad_input("schematic: body is not UTF-8"))?;
        Schematic::parse(text)
    })
    .await;
    let schematic = match parsed {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    match st.schematics.put(&schematic, pinned).await {
        Ok((id, canonical)) => {
            tracing::info!(%id, pinned, "schematic stored");
            let body = serde_json::json!({ "id": id, "schematic": canonical });
            (
                StatusCode::CREATED,
                [(header::CONTENT_TYPE, "application/json")],
                format!("{body}\n"),
            )
                .into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// `GET /schematics/{id}`: the canonical bytes (`sha256(body) == id`) as
/// `application/yaml`; 404 `schematic not found`; 400 for an ID that is not
/// 64 lowercase hex digits (checked before the filesystem is touched).
pub async fn get(State(st): State<AppState>, Path(id): Path<String>) -> Response {
    if !crate::schematic::is_valid_id(&id) {
        return Error::bad_input("invalid schematic ID: expected 64 lowercase hex digits")
            .into_response();
    }
    let found = tokio::task::spawn_blocking(move || st.schematics.get(&id)).await;
    match found {
        Ok(Ok(Some(canonical))) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/yaml")],
            canonical,
        )
            .into_response(),
        Ok(Ok(None)) => (StatusCode::NOT_FOUND, "schematic not found\n").into_response(),
        Ok(Err(e)) => e.into_response(),
        Err(e) => Error::io(
            "reading the schematic",
            std::io::Error::other(e.to_string()),
        )
        .into_response(),
    }
}

/// 413, closing the connection: the rest of the body is never read, so the
/// client must not reuse the connection for another request.
fn too_large() -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [(header::CONNECTION, "close")],
        format!("schematic larger than {MAX_SIZE} bytes\n"),
    )
        .into_response()
}
