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
//! client (bounded by `--upstream-timeout`; one task per upstream URL, its
//! paths one after the other, never two probes of it at once; after a
//! failure again in 1 s, doubling up to that period), and keeps what it
//! found here. A failure is also the flights' memory of the upstream
//! ([`crate::outage`]): a stale copy answers at once, a cold key fails fast.
//! Readiness needs the store only: an upstream that does not answer makes
//! misses fail, never the service unready.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use axum::extract::State;
use axum::http::StatusCode;

use super::AppState;
use crate::inventory::Inventory;
use crate::outage::Outages;

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
        outages: Outages,
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
                    url: display_url(url),
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
            for (url, rows) in by_upstream(&targets) {
                tokio::spawn(upstream_loop(
                    Arc::downgrade(&p.0),
                    up.client().clone(),
                    url,
                    rows,
                    timeout,
                    outages.clone(),
                ));
            }
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

/// One upstream's probes: its rows (index, path) asked one after the
/// other, never two at once; every [`UPSTREAM_PROBE_EVERY`] while it
/// answers, else again after 1 s, doubling up to that period
/// ([`next_probe`]). What it finds is also the flights' memory
/// ([`Outages`]): a silent upstream is known down.
async fn upstream_loop(
    w: Weak<Mutex<Found>>,
    client: reqwest::Client,
    url: String,
    rows: Vec<(usize, &'static str)>,
    timeout: Duration,
    outages: Outages,
) {
    let mut backoff = None;
    loop {
        let mut results = Vec::new();
        for (i, path) in &rows {
            results.push((*i, probe(&client, &format!("{url}{path}"), timeout).await));
        }
        let failed = results.iter().find_map(|(_, r)| r.as_ref().err());
        match failed {
            Some(e) => outages.failed(&url, &format!("probing {url}: {e}")),
            None => outages.answered(&url),
        }
        backoff = next_probe(backoff, failed.is_some());
        let alive = update(&w, |f| {
            for (i, r) in results {
                if let Some(row) = f.upstreams.get_mut(i) {
                    row.result = Some(r);
                    row.at = Some(SystemTime::now());
                }
            }
        });
        if !alive {
            return;
        }
        tokio::time::sleep(backoff.unwrap_or(UPSTREAM_PROBE_EVERY)).await;
    }
}

/// The wait before an upstream's next probe: `None` (the normal period)
/// while it answers; after a failure 1 s, doubling with each one after,
/// up to the normal period.
fn next_probe(last: Option<Duration>, failed: bool) -> Option<Duration> {
    if !failed {
        return None;
    }
    Some(match last {
        None => Duration::from_secs(1),
        Some(d) => (d * 2).min(UPSTREAM_PROBE_EVERY),
    })
}

/// One probe: the status and how long it took, or why no answer came.
async fn probe(
    client: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<(u16, Duration), ProbeError> {
    let started = Instant::now();
    match client.get(url).timeout(timeout).send().await {
        Ok(r) => Ok((r.status().as_u16(), started.elapsed())),
        Err(e) if e.is_timeout() => Err(ProbeError::UpstreamSilent(timeout.as_secs())),
        Err(e) if e.is_connect() => Err(ProbeError::Connect),
        Err(e) => Err(ProbeError::Upstream(crate::text::error_line(&e))),
    }
}

/// The targets grouped by upstream URL: (URL, its rows and paths), in
/// the order first named.
fn by_upstream(targets: &[Target]) -> Vec<(String, Vec<(usize, &'static str)>)> {
    let mut out: Vec<(String, Vec<(usize, &'static str)>)> = Vec::new();
    for (i, (_, url, path)) in targets.iter().enumerate() {
        match out.iter_mut().find(|(u, _)| u == url) {
            Some((_, rows)) => rows.push((i, path)),
            None => out.push((url.clone(), vec![(i, path)])),
        }
    }
    out
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

/// A URL for display: no user info, no query.
pub(crate) fn display_url(u: &str) -> String {
    match reqwest::Url::parse(u) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string()
        }
        Err(_) => "(unparsable URL)".to_string(),
    }
}

/// What the background prober asks ([`Probes`]): (role, base
/// URL, path to ask).
pub(super) fn upstream_targets(cfg: &super::ServeConfig) -> Vec<Target> {
    let mut v = vec![("Image Factory".to_string(), cfg.factory_url.clone(), "/")];
    let reg = cfg.registry_url.clone().unwrap_or(cfg.factory_url.clone());
    v.push(("installer registry".to_string(), reg, "/v2/"));
    for (ns, url) in cfg.mirror_upstreams.iter() {
        v.push((format!("mirror {ns}"), url.to_string(), "/v2/"));
    }
    v
}

/// The upstreams in one line for the start-up log (`factory=URL
/// registry=URL mirror ghcr.io=URL`, no credentials), or that none is
/// contacted.
pub(super) fn upstream_summary(cfg: &super::ServeConfig) -> String {
    if cfg.offline {
        return "none (--offline)".into();
    }
    upstream_targets(cfg)
        .into_iter()
        .map(|(role, url, _)| {
            let role = match role.as_str() {
                "Image Factory" => "factory".to_string(),
                "installer registry" => "registry".to_string(),
                r => r.strip_prefix("mirror ").unwrap_or(r).to_string(),
            };
            format!("{role}={}", display_url(&url))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A down upstream is asked again after 1 s, then 2, 4, 8, and at
    /// most every normal period; one that answers, every period.
    #[test]
    fn the_prober_backs_off_on_a_down_upstream() {
        let mut d = None;
        let mut seen = Vec::new();
        for _ in 0..6 {
            d = next_probe(d, true);
            seen.push(d.unwrap().as_secs());
        }
        assert_eq!(seen, [1, 2, 4, 8, 15, 15]);
        assert_eq!(next_probe(d, false), None);
    }

    /// One task per upstream URL: the factory and the installer registry
    /// on one URL are asked one after the other, never at once.
    #[test]
    fn one_upstream_is_one_prober() {
        let t = |role: &str, url: &str, path| (role.to_string(), url.to_string(), path);
        let targets = vec![
            t("Image Factory", "http://f", "/"),
            t("installer registry", "http://f", "/v2/"),
            t("mirror ghcr.io", "http://g", "/v2/"),
        ];
        assert_eq!(
            by_upstream(&targets),
            vec![
                ("http://f".to_string(), vec![(0, "/"), (1, "/v2/")]),
                ("http://g".to_string(), vec![(2, "/v2/")]),
            ]
        );
    }
}
