//! `POST /api/v1/machineconfig` and `POST /api/v1/kubelet-reservations`.
//!
//! Bodies are JSON or YAML with the flags' names in camelCase. Configs and
//! bundles carry secrets: neither request nor response bodies are ever
//! logged, and error messages name fields, not their secret values.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::state::AppState;
use crate::error::Error;
use crate::machineconfig::{self, Request, ReservationsRequest};

fn error_response(e: Error) -> Response {
    super::error::JsonError(e).into_response()
}

fn body_text(body: &Bytes) -> Result<&str, Error> {
    std::str::from_utf8(body).map_err(|_| Error::bad_input("body: not UTF-8"))
}

/// A JSON body (it starts with `{`) is read with the JSON parser, anything
/// else as YAML; both name the field at fault. Either passes the cheap
/// structural check (`yaml::check_structure`: depth, nodes) first. Called
/// off the async workers (`blocking`).
fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Error> {
    let text = body_text(body)?;
    crate::yaml::check_structure(text, "body")?;
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| Error::bad_input(format!("body: {e}")))
    } else {
        crate::yaml::from_str(text, "body")
    }
}

/// `POST /api/v1/machineconfig`: answers the config as `application/yaml`.
pub async fn generate(State(state): State<AppState>, body: Bytes) -> Response {
    let st = state.clone();
    let result = super::blocking::run("generating the config", move || {
        parse_body::<Request>(&body).and_then(|req| machineconfig::generate_with(&req, &st.matrix))
    })
    .await;
    match result {
        Ok(out) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/yaml"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            for w in &out.warnings {
                let text = format!("299 talos-gen \"{}\"", w.replace('"', "'"));
                if let Ok(v) = HeaderValue::from_str(&text) {
                    headers.append(header::WARNING, v);
                }
            }
            (StatusCode::OK, headers, out.config).into_response()
        }
        Err(e) => error_response(e),
    }
}

/// `POST /api/v1/kubelet-reservations`: answers JSON with the contract's fields.
pub async fn reservations(body: Bytes) -> Response {
    let result = super::blocking::run("computing the reservations", move || {
        parse_body::<ReservationsRequest>(&body)
            .and_then(|req| machineconfig::kubelet_reservations(&req))
    })
    .await;
    match result {
        Ok(r) => match serde_json::to_string(&r) {
            Ok(json) => (
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                json,
            )
                .into_response(),
            Err(e) => error_response(Error::refused(format!("encoding JSON: {e}"))),
        },
        Err(e) => error_response(e),
    }
}
