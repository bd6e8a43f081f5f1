//! `GET /metrics`: the service's counters as Prometheus text.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::state::AppState;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    state.metrics.set_store_bytes(state.store.total_size());
    state
        .metrics
        .set_store_corrupt(state.store.corrupt_dropped());
    let entries = state.store.entries();
    let pinned = entries.iter().filter(|e| e.pinned).count();
    state
        .metrics
        .set_store_counts(state.store.object_count(), entries.len(), pinned);
    let fills = state.fills.in_progress();
    let waiting = fills.iter().filter(|f| f.phase == "waiting").count();
    state.metrics.set_fills(fills.len() - waiting, waiting);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
