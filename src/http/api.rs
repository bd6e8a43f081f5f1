//! `/api/v1/`: the support matrix as JSON, the pair check, and the upgrade plan.
//! Thin: parse the query, call `matrix`, shape the answer.

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::query::Params;
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

/// `GET /api/v1/matrix`: the table as `matrix --json` prints it. It takes
/// no query parameter (one given is 400, as on every `/api/v1/` route).
pub async fn matrix(
    State(st): State<AppState>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    match Params::new(q, &[], &[]) {
        Ok(_) => document(&st.matrix.to_json()),
        Err(e) => super::error::JsonError(e).into_response(),
    }
}

/// `GET /api/v1/matrix/check?talos=&kubernetes=`: 200
/// `{"supported": bool, "message": ...}` (an unsupported pair or an unknown
/// Talos minor is `supported: false`); 400 when a version is missing or
/// unparsable.
pub async fn matrix_check(
    State(st): State<AppState>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    let parsed = Params::new(q, &["talos", "kubernetes"], &[]).and_then(|q| {
        let parse = |key: &str| -> Result<Version, Error> {
            let v = q
                .get(key)
                .ok_or_else(|| Error::bad_input(format!("{key}: missing query parameter")))?;
            Version::parse_named(v, key)
        };
        Ok((parse("talos")?, parse("kubernetes")?))
    });
    let (talos, k8s) = match parsed {
        Ok(p) => p,
        Err(e) => return super::error::JsonError(e).into_response(),
    };
    let (supported, message) = match st.matrix.check(&talos, &k8s) {
        Ok(s) => (true, s.message),
        Err(e) => (false, e.to_string()),
    };
    document(&serde_json::json!({
        "supported": supported,
        "message": message,
        "talos": talos.to_string(),
        "kubernetes": k8s.to_string(),
    }))
}

/// The same bytes the CLI prints for the same question (`--json`):
/// [`crate::text::json_document`].
fn document(v: &serde_json::Value) -> Response {
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        crate::text::json_document(v),
    )
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
/// (the blocking rule named); the error as `{"error": ...}`. The query is
/// read as every `/api/v1/` route's ([`Params`]).
pub async fn upgrade_plan(
    State(st): State<AppState>,
    Query(q): Query<Vec<(String, String)>>,
) -> Response {
    match Params::new(q, UPGRADE_KEYS, &[]).and_then(|q| upgrade_plan_json(&st.matrix, &q)) {
        Ok(v) => document(&v),
        Err(e) => super::error::JsonError(e).into_response(),
    }
}

fn upgrade_plan_json(
    matrix: &crate::matrix::Matrix,
    q: &Params,
) -> Result<serde_json::Value, Error> {
    let replace = q.flag("replace")?;
    let get = |k: &str| q.get(k).unwrap_or("");
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
