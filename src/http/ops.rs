//! Operations routes: probes, and the background prober they answer from.
//! (The gate that answers 503 while the store, an S3 bucket, does not
//! answer is a column of the route policy table, [`super::ROUTES`],
//! applied by [`super::limits::enforce`].)
//!
//! `/healthz`, `/readyz`, `/metrics` and the status page never wait on the
//! store or an upstream: a task started with the service ([`Probes::start`])
//! checks the store about every [`STORE_PROBE_EVERY`] (each check bounded by
//! [`STORE_PROBE_TIMEOUT`], on a blocking thread, never two at once) and
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

/// How long one store check may take (a bucket's HEAD).
pub const STORE_PROBE_TIMEOUT: Duration = Duration::from_secs(2);
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
        let (result, running) = check_once(&store, None).await;
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

/// One store check, or the wait for one still `running`; the check still
/// running when its bound passed is handed back.
async fn check_once(
    store: &Inventory,
    running: Option<tokio::task::JoinHandle<crate::Result<()>>>,
) -> (
    Result<(), ProbeError>,
    Option<tokio::task::JoinHandle<crate::Result<()>>>,
) {
    let mut task = running.unwrap_or_else(|| store.check_task(STORE_PROBE_TIMEOUT));
    // The check is bounded itself; this bound is for one that is not.
    match tokio::time::timeout(STORE_PROBE_TIMEOUT + Duration::from_millis(500), &mut task).await {
        Ok(Ok(r)) => (r.map_err(|e| ProbeError::StoreCheck(e.to_string())), None),
        Ok(Err(e)) => (Err(ProbeError::Task(e.to_string())), None),
        Err(_) => (
            Err(ProbeError::StoreSilent {
                store: store.describe(),
                secs: STORE_PROBE_TIMEOUT.as_secs(),
            }),
            Some(task),
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
    mut running: Option<tokio::task::JoinHandle<crate::Result<()>>>,
    mut was_ok: bool,
) {
    loop {
        tokio::time::sleep(STORE_PROBE_EVERY).await;
        let (result, still) = check_once(&store, running.take()).await;
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
