//! Operations routes: probes. (The gate that answers 503 while the store,
//! an S3 bucket, does not answer is a column of the route policy table,
//! [`super::ROUTE_POLICY`], applied by [`super::limits::enforce`].)

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;

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
