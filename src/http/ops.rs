//! Operations routes: probes, and the gate that answers 503 while the
//! store (an S3 bucket) does not answer.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;

/// How long `/readyz` and the store watch wait for the bucket.
pub const STORE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a remote store is probed in the background.
pub const STORE_PROBE_EVERY: Duration = Duration::from_secs(2);

pub async fn healthz() -> (StatusCode, &'static str) {
    (StatusCode::OK, "ok\n")
}

/// Ready when the store answers: always for a local directory; for a
/// bucket, a HEAD within [`STORE_PROBE_TIMEOUT`].
pub async fn readyz(State(st): State<AppState>) -> (StatusCode, String) {
    if !st.store.is_remote() {
        return (StatusCode::OK, "ready\n".into());
    }
    match st.store.check(STORE_PROBE_TIMEOUT).await {
        Ok(()) => (StatusCode::OK, "ready\n".into()),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")),
    }
}

/// Routes that read or write the store answer 503 at once while the store
/// does not answer (the probes, metrics and the status page still do).
/// Reads of artifacts and blobs go on: the core serves what the bucket's
/// local tier holds and answers 503 at once for the rest.
pub async fn store_gate(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let read = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let served_by_core = read
        && (path.starts_with("/image/")
            || path.starts_with("/talosctl/")
            || (path.starts_with("/v2/") && path.contains("/blobs/")));
    let exempt = matches!(path, "/" | "/healthz" | "/readyz" | "/metrics")
        || path.starts_with("/api/")
        || served_by_core;
    if !exempt && !st.store.available() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "5")],
            format!(
                "the store {} does not answer; try again\n",
                st.store.describe()
            ),
        )
            .into_response();
    }
    next.run(req).await
}
