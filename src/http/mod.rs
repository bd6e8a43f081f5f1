//! The HTTP edge: routes, typed state, limits, graceful stop. Handlers are
//! thin: they validate the request, call the core, and shape the answer.
//! Each route family lives in its own file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};

use crate::error::{Error, Result};

pub mod api;
pub mod image;
pub mod machineconfig;
pub mod metrics;
pub mod ops;
pub mod registry;
pub mod schematics;

/// Everything `serve` was told, already parsed by the CLI edge.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: String,
    pub cache_dir: PathBuf,
    pub factory_url: String,
    pub registry_url: Option<String>,
    pub offline: bool,
    pub cache_max_size: Option<String>,
    pub schematics_dir: Option<PathBuf>,
    pub matrix: Option<PathBuf>,
    pub mirror_upstreams: Vec<String>,
    pub shutdown_timeout: Duration,
    pub api_token_file: Option<PathBuf>,
    pub tag_revalidate: Duration,
}

/// Shared, typed state handed to every handler.
#[derive(Clone)]
pub struct AppState(pub Arc<Shared>);

pub struct Shared {
    pub cfg: ServeConfig,
    /// The support matrix (`--matrix FILE` or the embedded one).
    pub matrix: crate::matrix::Matrix,
    /// Known schematics: `--schematics-dir` (or embedded) plus POSTed ones.
    pub schematics: Arc<crate::schematic::Registry>,
    pub metrics: crate::metrics::Metrics,
    pub store: crate::store::Store,
    pub fills: crate::fill::Fills,
    /// `None` when offline.
    pub upstream: Option<crate::upstream::Upstream>,
    pub images: crate::imagecache::ImageCache,
    pub registry: crate::registry::Registry,
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
        let matrix = crate::matrix::Matrix::load(cfg.matrix.as_deref())?;
        let schematics = Arc::new(crate::schematic::Registry::open(
            &cfg.cache_dir,
            cfg.schematics_dir.as_deref(),
        )?);
        let metrics = crate::metrics::Metrics::new();
        let max = cfg
            .cache_max_size
            .as_deref()
            .map(crate::store::parse_size)
            .transpose()?;
        let dir = cfg.cache_dir.clone();
        let store = tokio::task::spawn_blocking(move || crate::store::Store::open(dir, max))
            .await
            .map_err(|e| Error::io("opening the store", std::io::Error::other(e)))??;
        let fills = crate::fill::Fills::new(store.clone()).with_metrics(metrics.clone());
        let upstream = if cfg.offline {
            None
        } else {
            Some(crate::upstream::Upstream::new(Default::default())?)
        };
        let registry = crate::registry::Registry::new(
            fills.clone(),
            Some(metrics.clone()),
            Some(cfg.registry_url.as_deref().unwrap_or(&cfg.factory_url)),
            &cfg.mirror_upstreams,
            cfg.offline,
        )?
        .with_revalidate(cfg.tag_revalidate);
        let images = crate::imagecache::ImageCache::new(
            fills.clone(),
            upstream.clone().map(|u| (u, cfg.factory_url.clone())),
            schematics.clone(),
            metrics.clone(),
        );
        Ok(AppState(Arc::new(Shared {
            cfg,
            matrix,
            schematics,
            metrics,
            store,
            fills,
            upstream,
            images,
            registry,
        })))
    }
}

/// All routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/api/v1/matrix", get(api::matrix))
        .route("/api/v1/matrix/check", get(api::matrix_check))
        .route("/schematics", axum::routing::post(schematics::create))
        .route("/schematics/{id}", get(schematics::get))
        .route("/v2/", get(registry::v2_root))
        .route("/v2/{*rest}", get(registry::v2_tail))
        .route("/metrics", get(metrics::metrics))
        .route("/versions", get(image::versions))
        .route(
            "/image/{schematic}/{version}/{asset}",
            get(image::get_image),
        )
        .route("/api/v1/machineconfig", post(machineconfig::generate))
        .route(
            "/api/v1/kubelet-reservations",
            post(machineconfig::reservations),
        )
        .with_state(state)
}

/// Bind, serve until SIGTERM or Ctrl-C, then drain.
pub async fn serve(cfg: ServeConfig) -> Result<()> {
    let addr: SocketAddr = cfg
        .listen
        .parse()
        .map_err(|e| Error::bad_input(format!("--listen: {:?}: {e}", cfg.listen)))?;
    let state = AppState::new(cfg).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("--listen: binding {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("listener address", e))?;
    tracing::info!(%local, "listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| Error::io("serving", e))?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown signal received");
}
