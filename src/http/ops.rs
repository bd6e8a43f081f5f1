//! Operations routes: probes (and later metrics and the status page).

use axum::http::StatusCode;

pub async fn healthz() -> (StatusCode, &'static str) {
    (StatusCode::OK, "ok\n")
}

pub async fn readyz() -> (StatusCode, &'static str) {
    (StatusCode::OK, "ready\n")
}
