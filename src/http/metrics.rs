//! `GET /metrics`: the service's counters as Prometheus text.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

use super::state::AppState;

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let totals = state.store.totals();
    state.metrics.set_store_bytes(totals.bytes);
    state.metrics.set_store_corrupt(totals.corrupt_dropped);
    state
        .metrics
        .set_store_counts(totals.objects, totals.keys, totals.pinned);
    if let Some(run) = crate::mirror::report::read_from(&state.store).await {
        state.metrics.set_mirror_last_run(run.finished, run.ok);
    }
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
