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

pub mod access;
pub mod api;
pub mod factory;
pub mod image;
pub mod limits;
pub mod machineconfig;
pub mod metrics;
pub mod ops;
pub mod registry;
pub mod schematics;
pub mod status;

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
    /// Time a client has to send a request head (also the keep-alive idle limit).
    pub header_read_timeout: Duration,
    /// A response write blocked this long (the client stopped reading) ends the connection.
    pub write_timeout: Duration,
    /// Upstream fills running at once.
    pub max_concurrent_fills: usize,
    /// The bounds on every upstream wait (`--upstream-timeout`, `--upstream-min-rate`).
    pub upstream_limits: crate::upstream::Limits,
    /// How long a stored factory document (`/versions`, the signing key
    /// and certificate, the extension and overlay lists) is answered
    /// without asking the factory (`--metadata-ttl`).
    pub metadata_ttl: Duration,
}

impl ServeConfig {
    /// Defaults for everything but the listen address and cache directory.
    pub fn new(listen: impl Into<String>, cache_dir: impl Into<PathBuf>) -> ServeConfig {
        ServeConfig {
            listen: listen.into(),
            cache_dir: cache_dir.into(),
            factory_url: "https://factory.talos.dev".into(),
            registry_url: None,
            offline: false,
            cache_max_size: None,
            schematics_dir: None,
            matrix: None,
            mirror_upstreams: Vec::new(),
            shutdown_timeout: Duration::from_secs(30),
            api_token_file: None,
            tag_revalidate: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(15),
            write_timeout: Duration::from_secs(60),
            max_concurrent_fills: 16,
            upstream_limits: crate::upstream::Limits::default(),
            metadata_ttl: crate::imagecache::DEFAULT_METADATA_TTL,
        }
    }
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
    /// `--api-token-file`: the token `/api/v1/` writes require.
    pub api_token: Option<limits::ApiToken>,
    /// When the service started (uptime on the status page).
    pub started: std::time::SystemTime,
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
        // Name the flag the user typed: the registry falls back to the factory URL.
        crate::registry::names::check_base_url(&cfg.factory_url)
            .map_err(|e| Error::bad_input(format!("--factory-url: {e}")))?;
        if let Some(u) = &cfg.registry_url {
            crate::registry::names::check_base_url(u)
                .map_err(|e| Error::bad_input(format!("--registry-url: {e}")))?;
        }
        let matrix = crate::matrix::Matrix::load(cfg.matrix.as_deref())?;
        let api_token = cfg
            .api_token_file
            .as_deref()
            .map(limits::ApiToken::from_file)
            .transpose()?;
        let max = cfg
            .cache_max_size
            .as_deref()
            .map(crate::store::parse_size)
            .transpose()?;
        let svc = crate::service::Service::build(&crate::service::ServiceConfig {
            cache_dir: cfg.cache_dir.clone(),
            cache_max_size: max,
            factory_url: cfg.factory_url.clone(),
            registry_url: cfg.registry_url.clone(),
            mirror_upstreams: cfg.mirror_upstreams.clone(),
            offline: cfg.offline,
            schematics_dir: cfg.schematics_dir.clone(),
            tag_revalidate: cfg.tag_revalidate,
            max_concurrent_fills: Some(cfg.max_concurrent_fills),
            limits: cfg.upstream_limits,
            direct_upstreams: false,
        })
        .await?;
        let crate::service::Service {
            metrics,
            store,
            fills,
            upstream,
            schematics,
            mut images,
            registry,
            ..
        } = svc;
        images.metadata_ttl = cfg.metadata_ttl;
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
            api_token,
            started: std::time::SystemTime::now(),
        })))
    }
}

/// All routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(status::page))
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
        .route("/oci/cosign/signing-key.pub", get(factory::cosign_key))
        .route(
            "/secureboot/signing-cert.pem",
            get(factory::secureboot_cert),
        )
        .route(
            "/version/{version}/extensions/official",
            get(factory::extensions),
        )
        .route(
            "/version/{version}/overlays/official",
            get(factory::overlays),
        )
        .route(
            "/image/{schematic}/{version}/{asset}",
            get(image::get_image),
        )
        .route("/api/v1/machineconfig", post(machineconfig::generate))
        .route(
            "/api/v1/kubelet-reservations",
            post(machineconfig::reservations),
        )
        // Buffering extractors (the POST endpoints) stop at 1 MiB: 413.
        // (`POST /schematics` reads its body under the same limit itself.)
        .layer(axum::extract::DefaultBodyLimit::max(limits::BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::require_token,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::track,
        ))
        .fallback(api::not_found)
        // Outermost: every answer, 401 and 413 included, gets its line.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::log,
        ))
        .with_state(state)
}

/// Bind, serve until SIGTERM or Ctrl-C, then drain.
pub async fn serve(cfg: ServeConfig) -> Result<()> {
    // `:8080` means all interfaces, as Go programs (and kubectl) read it.
    let listen = match cfg.listen.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => cfg.listen.clone(),
    };
    let addr: SocketAddr = listen
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
    let app = router(state.clone());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(state.cfg.header_read_timeout)
        .max_header_size(limits::HEADER_LIMIT)
        .max_headers(limits::MAX_HEADERS)
        .keep_alive(true);
    let write_timeout = state.cfg.write_timeout;
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = &mut stop => break,
        };
        let (tcp, _peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let io = hyper_util::rt::TokioIo::new(limits::WriteGuard::new(tcp, write_timeout));
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = graceful.watch(http.serve_connection(io, svc));
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
    // Stop accepting; let requests in flight finish, up to the timeout.
    drop(listener);
    let limit = state.cfg.shutdown_timeout;
    tracing::info!(
        connections = graceful.count(),
        timeout_secs = limit.as_secs(),
        "draining"
    );
    match tokio::time::timeout(limit, graceful.shutdown()).await {
        Ok(()) => tracing::info!("stopped"),
        Err(_) => tracing::warn!(
            timeout_secs = limit.as_secs(),
            "stopped with requests still in flight (--shutdown-timeout)"
        ),
    }
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
