//! `/api/v1/`: the support matrix as JSON, the pair check, and the upgrade plan.
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
                "error": format!("no such API endpoint: {shown} (known: /api/v1/matrix, /api/v1/matrix/check, /api/v1/machineconfig, /api/v1/kubelet-reservations, /api/v1/datavolume, /api/v1/upgrade-plan)")
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
        (Err(e), _) | (_, Err(e)) => return super::error::JsonError(e).into_response(),
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

/// The query keys of `/api/v1/upgrade-plan`.
const UPGRADE_KEYS: &[&str] = &[
    "fromTalos",
    "fromKubernetes",
    "toTalos",
    "toKubernetes",
    "replace",
];

/// `GET /api/v1/upgrade-plan?fromTalos=&fromKubernetes=&toTalos=&toKubernetes=[&replace=true]`:
/// 200 with the JSON `upgrade plan --json` prints; 400 for bad input (an
/// unknown key, a missing or malformed version), 422 when no path exists
/// (the blocking rule named); the error as `{"error": ...}`.
pub async fn upgrade_plan(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    match upgrade_plan_json(&st.matrix, &q) {
        Ok(v) => Json(v).into_response(),
        Err(e) => super::error::JsonError(e).into_response(),
    }
}

fn upgrade_plan_json(
    matrix: &crate::matrix::Matrix,
    q: &HashMap<String, String>,
) -> Result<serde_json::Value, Error> {
    if let Some(k) = q.keys().find(|k| !UPGRADE_KEYS.contains(&k.as_str())) {
        return Err(Error::bad_input(format!(
            "{:?}: not a query parameter of /api/v1/upgrade-plan (known: {})",
            k.chars().take(64).collect::<String>(),
            UPGRADE_KEYS.join(", ")
        )));
    }
    let replace = match q.get("replace").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(Error::bad_input(format!(
                "replace: {:?} is not true or false",
                other.chars().take(64).collect::<String>()
            )));
        }
    };
    let get = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let plan = crate::upgrade::plan(
        matrix,
        &crate::upgrade::Question {
            from_talos: get("fromTalos"),
            from_kubernetes: get("fromKubernetes"),
            to_talos: get("toTalos"),
            to_kubernetes: get("toKubernetes"),
            replace,
            names: crate::upgrade::QUERY,
        },
    )?;
    Ok(plan.to_json())
}
