//! `/api/v1/`: the support matrix as JSON, and the pair check.
//! Thin: parse the query, call `matrix`, shape the answer.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::state::AppState;
use crate::error::Error;
use crate::version::Version;

/// Any path no route matches: under `/api/v1/` a JSON error body (API
/// clients parse it), elsewhere a plain 404.
pub async fn not_found(uri: axum::http::Uri) -> Response {
    let path = uri.path();
    if path.starts_with("/api/") {
        let shown: String = path.chars().take(200).collect();
        (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({
                "error": format!("no such API endpoint: {shown} (known: /api/v1/matrix, /api/v1/matrix/check, /api/v1/machineconfig, /api/v1/kubelet-reservations, /api/v1/datavolume)")
            })),
        )
            .into_response()
    } else {
        (StatusCode::NOT_FOUND, "not found\n").into_response()
    }
}

/// `GET /api/v1/matrix`: the table as `matrix --json` prints it.
pub async fn matrix(State(st): State<AppState>) -> Response {
    Json(st.matrix.to_json()).into_response()
}

/// `GET /api/v1/matrix/check?talos=&kubernetes=`: 200
/// `{"supported": bool, "message": ...}` (an unsupported pair or an unknown
/// Talos minor is `supported: false`); 400 when a version is missing or
/// unparsable.
pub async fn matrix_check(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let parse = |key: &str| -> Result<Version, Error> {
        let v = q
            .get(key)
            .ok_or_else(|| Error::bad_input(format!("{key}: missing query parameter")))?;
        Version::parse_named(v, key)
    };
    let (talos, k8s) = match (parse("talos"), parse("kubernetes")) {
        (Ok(t), Ok(k)) => (t, k),
        (Err(e), _) | (_, Err(e)) => return e.into_response(),
    };
    let (supported, message) = match st.matrix.check(&talos, &k8s) {
        Ok(s) => (true, s.message),
        Err(e) => (false, e.to_string()),
    };
    Json(serde_json::json!({
        "supported": supported,
        "message": message,
        "talos": talos.to_string(),
        "kubernetes": k8s.to_string(),
    }))
    .into_response()
}
