//! The typed state every handler gets: built once from [`ServeConfig`] through
//! the composition root ([`crate::compose`]).

use std::sync::Arc;

use super::ServeConfig;
use super::token;
use crate::error::Result;

/// Shared, typed state handed to every handler.
#[derive(Clone)]
pub struct AppState(pub Arc<Shared>);

pub struct Shared {
    pub cfg: ServeConfig,
    /// The support matrix (`--matrix FILE` or the embedded one).
    pub matrix: crate::matrix::Matrix,
    /// Known schematics: `--schematics-dir` (or embedded) plus POSTed ones.
    pub schematics: Arc<crate::known_schematics::KnownSchematics>,
    pub metrics: crate::metrics::Metrics,
    /// The store, read-only: figures and whether it answers.
    pub store: crate::inventory::Inventory,
    /// The fills in progress, and nothing else of them (the store handle
    /// the fills hold stays behind this door).
    pub fills: FillProgress,
    /// `None` when offline.
    pub upstream: Option<crate::upstream::Upstream>,
    pub images: crate::factory::ImageCache,
    pub registry: crate::registry::Registry,
    /// `--api-token-file`: the token `/api/v1/` writes require.
    pub api_token: Option<token::ApiToken>,
    /// When the service started (uptime on the status page).
    pub started: std::time::SystemTime,
    /// What the background prober last found of the store and the
    /// upstreams: the probes, `/metrics` and the status page answer from it.
    pub probes: super::ops::Probes,
}

/// What the edge may ask of [`crate::fill::Fills`]: the fills in progress
/// (the status page, `/metrics`). The field is private: nothing in `http/`
/// reaches the store handle the fills hold (`house_rules` checks that no
/// handler names `Store` or asks `.store()`).
#[derive(Clone)]
pub struct FillProgress(crate::fill::Fills);

impl FillProgress {
    pub fn in_progress(&self) -> Vec<crate::fill::FillStatus> {
        self.0.in_progress()
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// Build the state: load data, open the store.
    pub async fn new(cfg: ServeConfig) -> Result<AppState> {
        let matrix = crate::compose::load_matrix(cfg.matrix.as_deref())?;
        let api_token = cfg
            .api_token_file
            .as_deref()
            .map(token::ApiToken::from_file)
            .transpose()?;
        let svc = crate::compose::Service::build(&cfg.service).await?;
        let store = svc.inventory();
        let crate::compose::Service {
            metrics,
            fills,
            upstream,
            schematics,
            images,
            registry,
            ..
        } = svc;
        let probes = super::ops::Probes::start(
            store.clone(),
            upstream.clone(),
            super::ops::upstream_targets(&cfg),
            cfg.limits.timeout,
            fills.outages().clone(),
        )
        .await;
        Ok(AppState(Arc::new(Shared {
            cfg,
            matrix,
            schematics,
            metrics,
            store,
            fills: FillProgress(fills),
            upstream,
            images,
            registry,
            api_token,
            started: std::time::SystemTime::now(),
            probes,
        })))
    }
}
