//! Operations routes: probes, and the background prober they answer from.
//! (The gate that answers 503 while the store, an S3 bucket, does not
//! answer is a column of the route policy table, [`super::ROUTES`],
//! applied by [`super::limits::enforce`].)
//!
//! `/healthz`, `/readyz`, `/metrics` and the status page never wait on the
//! store or an upstream: a task started with the service ([`Probes::start`])
//! checks the store about every [`STORE_PROBE_EVERY`] (each check bounded by
//! the store's own bound, a bucket's `--upstream-timeout`: a slow answer is
//! an answer; on a blocking thread, never two at once) and
//! asks each upstream every [`UPSTREAM_PROBE_EVERY`] on the service's own
//! client (bounded by `--upstream-timeout`), and keeps what it found here.
//! Readiness needs the store only: an upstream that does not answer makes
//! misses fail, never the service unready.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use crate::inventory::Inventory;

/// How long the service's start waits for the store's first check (a
/// check still running then goes on; not ready until it answers). Every
/// check may take the store's own bound (`Store::call_bound`: a bucket's
/// `--upstream-timeout`) and still be an answer.
pub const STORE_FIRST_WAIT: Duration = Duration::from_secs(2);
/// How often the store is checked in the background.
pub const STORE_PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often each upstream is asked in the background.
pub const UPSTREAM_PROBE_EVERY: Duration = Duration::from_secs(15);

/// Why a probe found no answer (kept, and shown by `/readyz` and the
/// status page; `Clone` as the findings are copied out for each page).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProbeError {
    /// The store's check failed: its own line.
    #[error("{0}")]
    StoreCheck(String),
    /// The check's task ended without a verdict.
    #[error("checking the store: {0}")]
    Task(String),
    #[error("the store {store} gave no answer within {secs}s")]
    StoreSilent { store: String, secs: u64 },
    #[error("no answer within {0}s")]
    UpstreamSilent(u64),
    #[error("connect failed")]
    Connect,
    /// The upstream's request failed otherwise: the client's line.
    #[error("{0}")]
    Upstream(String),
}

/// What the last store check found.
#[derive(Debug, Clone)]
pub struct StoreProbe {
    /// `Err`: why it did not answer.
    pub result: Result<(), ProbeError>,
    /// When the check ended.
    pub at: SystemTime,
}

/// One upstream: its role, URL (display form: no credentials, no query),
/// and what the last probe found (`None`: not asked yet, or offline).
#[derive(Debug, Clone)]
pub struct UpstreamProbe {
    pub role: String,
    pub url: String,
    /// `Ok((status, took))` or `Err(why)`.
    pub result: Option<Result<(u16, Duration), ProbeError>>,
    pub at: Option<SystemTime>,
}

/// What the prober found; every probe route reads only this.
#[derive(Debug, Clone, Default)]
pub struct Found {
    /// `None` until the first check ended.
    pub store: Option<StoreProbe>,
    pub upstreams: Vec<UpstreamProbe>,
    /// The last `mirror sync` or `mirror import` the store holds, as last read.
    pub mirror_run: Option<crate::mirror::report::SyncStatus>,
}

/// The prober's findings, shared with the handlers. The tasks hold them
/// weakly: they end when the service's state is dropped.
#[derive(Clone, Default)]
pub struct Probes(Arc<Mutex<Found>>);

/// What to ask: (role, base URL, path).
pub type Target = (String, String, &'static str);

impl Probes {
    /// A copy of what was found last.
    pub fn found(&self) -> Found {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Start probing `store` and, unless `upstream` is `None` (offline),
    /// each of `targets` with its client, each ask bounded by `timeout`.
    /// The store's first check and the last mirror run are read before this
    /// returns (so the service's first answers know them); the upstreams'
    /// first answers come in the background.
    pub async fn start(
        store: Inventory,
        upstream: Option<crate::upstream::Upstream>,
        targets: Vec<Target>,
        timeout: Duration,
    ) -> Probes {
        let p = Probes::default();
        let (result, running) = check_once(&store, None, STORE_FIRST_WAIT).await;
        let ok = result.is_ok();
        let run = if ok { first_report(&store).await } else { None };
        {
            let mut f = p.0.lock().unwrap_or_else(|e| e.into_inner());
            f.upstreams = targets
                .iter()
                .map(|(role, url, _)| UpstreamProbe {
                    role: role.clone(),
                    url: super::status::display_url(url),
                    result: None,
                    at: None,
                })
                .collect();
            f.store = Some(StoreProbe {
                result,
                at: SystemTime::now(),
            });
            f.mirror_run = run;
        }
        tokio::spawn(store_loop(Arc::downgrade(&p.0), store, running, ok));
        if let Some(up) = upstream {
            tokio::spawn(upstream_loop(
                Arc::downgrade(&p.0),
                up.client().clone(),
                targets,
                timeout,
            ));
        }
        p
    }
}

/// The last mirror run at start: read whole if the store holds one (a
/// read a little slower than a page's wait is waited for here, once).
async fn first_report(store: &Inventory) -> Option<crate::mirror::report::SyncStatus> {
    for _ in 0..40 {
        if let Some(r) = crate::mirror::report::read_from(store).await {
            return Some(r);
        }
        if !store.holds(&crate::mirror::report::status_key()) {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// A store check in flight, and when it began.
struct Running {
    task: tokio::task::JoinHandle<crate::Result<()>>,
    since: Instant,
}

/// One store check, or the wait for one still `running`, given the
/// store's own bound ([`Inventory::call_bound`]: a bucket's
/// `--upstream-timeout`) and half a second: a slow answer within it is an
/// answer (slow is not down). The wait stops at `cap` (the service's first
/// check: it does not hold the start for a whole bound); a check still
/// running then is handed back, and counts as no answer yet.
async fn check_once(
    store: &Inventory,
    running: Option<Running>,
    cap: Duration,
) -> (Result<(), ProbeError>, Option<Running>) {
    let bound = store.call_bound();
    let mut r = running.unwrap_or_else(|| Running {
        task: store.check_task(bound),
        since: Instant::now(),
    });
    // The check is bounded itself; this bound is for one that is not.
    let deadline = r.since + bound + Duration::from_millis(500);
    let wait = deadline.saturating_duration_since(Instant::now()).min(cap);
    match tokio::time::timeout(wait, &mut r.task).await {
        Ok(Ok(res)) => (res.map_err(|e| ProbeError::StoreCheck(e.to_string())), None),
        Ok(Err(e)) => (Err(ProbeError::Task(e.to_string())), None),
        Err(_) => (
            Err(ProbeError::StoreSilent {
                store: store.describe(),
                secs: r.since.elapsed().as_secs(),
            }),
            Some(r),
        ),
    }
}

fn update(w: &Weak<Mutex<Found>>, f: impl FnOnce(&mut Found)) -> bool {
    match w.upgrade() {
        Some(m) => {
            f(&mut m.lock().unwrap_or_else(|p| p.into_inner()));
            true
        }
        None => false,
    }
}

async fn store_loop(
    w: Weak<Mutex<Found>>,
    store: Inventory,
    mut running: Option<Running>,
    mut was_ok: bool,
) {
    loop {
        tokio::time::sleep(STORE_PROBE_EVERY).await;
        let (result, still) = check_once(&store, running.take(), Duration::MAX).await;
        running = still;
        let ok = result.is_ok();
        if ok != was_ok {
            match &result {
                Ok(()) => {
                    tracing::info!(store = %store.describe(), "the store answers again; ready")
                }
                Err(e) => {
                    tracing::error!(store = %store.describe(), error = %e, "the store does not answer; not ready, answering 503 for what it must read")
                }
            }
            was_ok = ok;
        }
        // The last mirror run, for /metrics and the status page (a bounded
        // read; the last one read is kept when this one is slow).
        let run = if ok {
            crate::mirror::report::read_from(&store).await
        } else {
            None
        };
        let alive = update(&w, |f| {
            f.store = Some(StoreProbe {
                result,
                at: SystemTime::now(),
            });
            if run.is_some() {
                f.mirror_run = run;
            }
        });
        if !alive {
            return;
        }
    }
}

async fn upstream_loop(
    w: Weak<Mutex<Found>>,
    client: reqwest::Client,
    targets: Vec<Target>,
    timeout: Duration,
) {
    loop {
        let asks = targets.iter().map(|(_, url, path)| {
            let client = client.clone();
            async move {
                let started = Instant::now();
                match client
                    .get(format!("{url}{path}"))
                    .timeout(timeout)
                    .send()
                    .await
                {
                    Ok(r) => Ok((r.status().as_u16(), started.elapsed())),
                    Err(e) if e.is_timeout() => Err(ProbeError::UpstreamSilent(timeout.as_secs())),
                    Err(e) if e.is_connect() => Err(ProbeError::Connect),
                    Err(e) => Err(ProbeError::Upstream(crate::text::error_line(&e))),
                }
            }
        });
        let results = futures::future::join_all(asks).await;
        let alive = update(&w, |f| {
            for (row, r) in f.upstreams.iter_mut().zip(results) {
                row.result = Some(r);
                row.at = Some(SystemTime::now());
            }
        });
        if !alive {
            return;
        }
        tokio::time::sleep(UPSTREAM_PROBE_EVERY).await;
    }
}

pub async fn healthz() -> (StatusCode, &'static str) {
    (StatusCode::OK, "ok\n")
}

/// Ready while the store answers, as the background prober and the last
/// store call found it; no upstream counts. Never waits on the store.
pub async fn readyz(State(st): State<AppState>) -> (StatusCode, String) {
    let found = st.probes.found();
    let probe = found.store.as_ref().map(|s| s.result.clone());
    match probe {
        Some(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {e}\n")),
        _ if !st.store.available() => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the store {} does not answer\n",
                st.store.describe()
            ),
        ),
        _ => (StatusCode::OK, "ready\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::backend::Hooked;

    /// A store whose every check answers after `slow` (one given less
    /// fails at its limit, as a bucket's HEAD), its calls bounded by
    /// `bound` (a fake backend: a real bucket cannot be made slow one call
    /// kind at a time in a unit test; this pins the prober's arithmetic).
    fn slow_store(dir: &std::path::Path, slow: Duration, bound: Duration) -> Inventory {
        let b = Hooked {
            check_takes: Some(slow),
            bound: Some(bound),
            ..Hooked::new(dir)
        };
        Inventory::new(Store::with_backend(Box::new(b), None).unwrap())
    }

    /// The next check the prober ends after `after` (by its time).
    async fn next_check(p: &Probes, after: Option<SystemTime>) -> StoreProbe {
        let t = Instant::now();
        loop {
            if let Some(s) = p.found().store
                && Some(s.at) != after
            {
                return s;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "no check ended");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Issue 48, item 4: a store answering every check in 2.1 s, with its
    /// calls bounded by 3 s, is ready at every check once the first answer
    /// is in (on main, 20169a0: not ready at every check, the prober gave
    /// it a fixed 2 s).
    #[tokio::test(flavor = "multi_thread")]
    async fn a_slow_store_that_answers_within_its_bound_stays_ready() {
        let dir = tempfile::tempdir().unwrap();
        let inv = slow_store(
            dir.path(),
            Duration::from_millis(2100),
            Duration::from_secs(3),
        );
        let p = Probes::start(inv.clone(), None, Vec::new(), Duration::from_secs(3)).await;
        let mut at = p.found().store.map(|s| s.at);
        // The start waits 2 s for the first answer; then every check answers.
        let mut first = next_check(&p, at).await;
        for _ in 0..2 {
            if first.result.is_ok() {
                break;
            }
            at = Some(first.at);
            first = next_check(&p, at).await;
        }
        assert!(first.result.is_ok(), "never ready: {:?}", first.result);
        let mut at = Some(first.at);
        for _ in 0..2 {
            let s = next_check(&p, at).await;
            assert!(s.result.is_ok(), "not ready: {:?}", s.result);
            at = Some(s.at);
        }
        assert!(inv.available());
    }

    /// A store whose check does not answer within its own bound is not
    /// ready, within that bound and a second or two.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_store_silent_past_its_bound_is_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        let inv = slow_store(dir.path(), Duration::from_secs(4), Duration::from_secs(1));
        let t = Instant::now();
        let p = Probes::start(inv, None, Vec::new(), Duration::from_secs(1)).await;
        let s = p.found().store.unwrap();
        assert!(s.result.is_err(), "{:?}", s.result);
        assert!(
            t.elapsed() < Duration::from_millis(2500),
            "{:?}",
            t.elapsed()
        );
    }
}
