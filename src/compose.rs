//! The composition root: the one place that builds the store, the fills,
//! the upstream clients, the known schematics, the image cache and the
//! registry from one typed config. `serve` ([`crate::http::AppState`]) and
//! the mirror job ([`crate::mirror::sync()`]) both start here, so they make
//! the same calls with the same bounds and the same validation.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::factory::ImageCache;
pub use crate::factory::{DEFAULT_FACTORY_URL, DEFAULT_METADATA_TTL};
use crate::fill::Fills;
use crate::known_schematics;
use crate::matrix::Matrix;
use crate::metrics::Metrics;
pub use crate::outage::DEFAULT_STALE_WHILE_REVALIDATE;
use crate::registry::Registry;
pub use crate::registry::TAG_REVALIDATE;
pub use crate::store::Location;
use crate::store::Store;
use crate::upstream::{Limits, Upstream, UpstreamConfig};

/// What the service is built from (parsed and checked at the CLI edge):
/// `serve` embeds it whole in [`crate::http::ServeConfig`], the mirror job
/// starts from [`ServiceConfig::new`]; each default is a named const.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The store: a local directory or an S3 bucket.
    pub store: Location,
    /// Evict down to this many bytes (`None`: no limit).
    pub cache_max_size: Option<u64>,
    /// The upstream Image Factory (`--factory-url`, default [`DEFAULT_FACTORY_URL`]).
    pub factory_url: String,
    /// Installer registry (`None`: the factory URL).
    pub registry_url: Option<String>,
    /// `--mirror-upstream`, parsed at the CLI edge.
    pub mirror_upstreams: crate::registry::MirrorTable,
    pub offline: bool,
    pub schematics_dir: Option<PathBuf>,
    /// How long a tag -> digest mapping is trusted (default [`TAG_REVALIDATE`]).
    pub tag_revalidate: Duration,
    /// How long a stored factory document is answered without asking the
    /// factory (default [`DEFAULT_METADATA_TTL`]).
    pub metadata_ttl: Duration,
    /// How long past its freshness a stored document or tag answers at
    /// once while one background fetch refreshes it (default
    /// [`DEFAULT_STALE_WHILE_REVALIDATE`]).
    pub stale_while_revalidate: Duration,
    /// Cap on fills at once (`None`: no cap).
    pub max_concurrent_fills: Option<usize>,
    /// The bounds on every upstream wait.
    pub limits: Limits,
    /// Reach hosts without a `--mirror-upstream` at `https://<host>` (the
    /// mirror job's `extraImages`).
    pub direct_upstreams: bool,
    /// Remember an upstream that did not answer for a short while
    /// ([`crate::outage`]): the service does; the mirror job, whose every
    /// item tries its upstream and reports what it found, does not.
    pub remember_outages: bool,
}

impl ServiceConfig {
    /// Defaults for everything but the store (a directory or a bucket).
    pub fn new(store: impl Into<Location>) -> ServiceConfig {
        ServiceConfig {
            store: store.into(),
            cache_max_size: None,
            factory_url: DEFAULT_FACTORY_URL.into(),
            registry_url: None,
            mirror_upstreams: Default::default(),
            offline: false,
            schematics_dir: None,
            tag_revalidate: TAG_REVALIDATE,
            metadata_ttl: DEFAULT_METADATA_TTL,
            stale_while_revalidate: DEFAULT_STALE_WHILE_REVALIDATE,
            max_concurrent_fills: None,
            limits: Limits::default(),
            direct_upstreams: false,
            remember_outages: true,
        }
    }
}

/// Open the store at `loc` off the async threads (evicting down to `max`
/// bytes): the one way a store is opened from async code, by the service
/// and by the mirror commands that need the store alone.
pub async fn open_store(loc: Location, max: Option<u64>) -> Result<Store> {
    tokio::task::spawn_blocking(move || Store::open_at(&loc, max))
        .await
        .map_err(|e| Error::io("opening the store", std::io::Error::other(e)))?
}

/// The parts, built once.
pub struct Service {
    pub metrics: Metrics,
    pub store: Store,
    pub fills: Fills,
    /// `None` when offline.
    pub upstream: Option<Upstream>,
    /// The factory base URL, checked.
    pub factory_url: String,
    pub schematics: Arc<known_schematics::KnownSchematics>,
    pub images: ImageCache,
    pub registry: Registry,
}

impl Service {
    /// The operator's view of the store (listing, totals, documents, the
    /// check): what the HTTP edge holds, never the store handle itself.
    pub fn inventory(&self) -> crate::inventory::Inventory {
        crate::inventory::Inventory::new(self.store.clone())
    }

    /// Open the store (off the async threads) and build everything on it.
    pub async fn build(cfg: &ServiceConfig) -> Result<Service> {
        // Every URL is checked before anything is created, each under the
        // flag the user typed (the registry falls back to the factory URL).
        let factory_url = crate::registry::names::check_base_url(&cfg.factory_url)
            .map_err(|e| Error::bad_input(format!("--factory-url: {e}")))?;
        if let Some(u) = &cfg.registry_url {
            crate::registry::names::check_base_url(u)
                .map_err(|e| Error::bad_input(format!("--registry-url: {e}")))?;
        }
        // A bucket that did not open (it did not answer, or refused us) is
        // `Unavailable`: `serve` waits for it, not ready, rather than exit.
        let store = open_store(cfg.store.clone(), cfg.cache_max_size)
            .await
            .map_err(|e| match (&cfg.store, e) {
                (Location::S3(_), e @ Error::Io { .. }) => Error::Unavailable(e.to_string()),
                (_, e) => e,
            })?;
        let metrics = Metrics::new();
        let schematics = Arc::new(known_schematics::KnownSchematics::open(
            store.clone(),
            cfg.schematics_dir.as_deref(),
        )?);
        let mut outages =
            crate::outage::Outages::new(cfg.limits.timeout, cfg.stale_while_revalidate);
        if !cfg.remember_outages {
            outages = outages.without_memory();
        }
        let mut fills = Fills::new(store.clone())
            .with_metrics(metrics.clone())
            .with_outages(outages);
        if let Some(n) = cfg.max_concurrent_fills {
            fills = fills.with_limit(n);
        }
        let upstream = if cfg.offline {
            None
        } else {
            Some(Upstream::new(UpstreamConfig {
                limits: cfg.limits,
                ..UpstreamConfig::default()
            })?)
        };
        let mut registry = Registry::new(
            fills.clone(),
            Some(metrics.clone()),
            Some(cfg.registry_url.as_deref().unwrap_or(&factory_url)),
            cfg.mirror_upstreams.clone(),
            cfg.offline,
            cfg.limits,
        )?
        .with_revalidate(cfg.tag_revalidate);
        if cfg.direct_upstreams {
            registry = registry.allow_direct_upstreams();
        }
        let mut images = ImageCache::new(
            fills.clone(),
            upstream.clone().map(|u| (u, factory_url.clone())),
            schematics.clone(),
            metrics.clone(),
        );
        if let Some(n) = cfg.max_concurrent_fills {
            images = images.with_document_limit(n);
        }
        images.metadata_ttl = cfg.metadata_ttl;
        Ok(Service {
            metrics,
            store,
            fills,
            upstream,
            factory_url,
            schematics,
            images,
            registry,
        })
    }
}

/// `--matrix FILE` when given (read as every input is, [`crate::input`];
/// any problem is bad input, exit 2), else the embedded matrix. Here, not
/// in `matrix`, which is pure: the CLI and the service both load it so.
pub fn load_matrix(path: Option<&Path>) -> Result<Matrix> {
    let Some(path) = path else {
        return Ok(Matrix::embedded().clone());
    };
    let what = format!("--matrix {}", path.display());
    let text = crate::input::read_string(
        path,
        crate::input::MAX_INPUT,
        crate::input::Kind::FileOrPipe,
    )
    .map_err(|e| Error::bad_input(format!("{what}: {e}")))?;
    Matrix::from_yaml(&text, &what)
}
