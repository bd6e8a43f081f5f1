//! `GET /metrics`: the service's counters as Prometheus text, from state
//! the service keeps (the store's figures in memory, the last mirror run as
//! [`super::ops::Probes`] read it): never a wait on the store.

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
        .set_store_swept(totals.swept_objects, totals.swept_bytes);
    state.metrics.set_store_aborted(totals.aborted_uploads);
    state
        .metrics
        .set_store_counts(totals.objects, totals.keys, totals.pinned);
    // As the background prober last read it: never a wait on the store.
    if let Some(run) = state.probes.found().mirror_run {
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
