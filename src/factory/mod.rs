//! What the Image Factory's paths mean, answered from the store or through
//! one fill: the same calls for `serve` and the mirror job.
//!
//! - `artifacts`: `/image/{schematic}/{version}/{asset}` ([`ImageKey`]:
//!   64-hex schematic, Talos version, the factory's asset grammar; store key
//!   `image/<schematic>/<version>/<asset>`) and `/talosctl/...`
//!   ([`TalosctlKey`]). [`ImageCache::lookup`] answers from the store or
//!   joins/starts a fill that GETs `<factory>/image/...`. A factory 404 for
//!   a schematic the service knows ([`SchematicLookup`]) is answered by
//!   POSTing the schematic upstream and retrying once. `.xz`, `.gz` and
//!   `.zst` artifacts must decode ([`verifier_for`]).
//! - `documents`: the factory's small documents ([`FactoryDoc`]: `/versions`,
//!   signing key and certificate, extension and overlay lists), coalesced,
//!   kept `--metadata-ttl`, the stored copy answered stale when the factory
//!   fails ([`ImageCache::document`]).
//! - `pxe`: the iPXE script as a document ([`FactoryDoc::pxe`]), the assets
//!   it boots ([`pxe_assets`]) and its URLs pointed here ([`rewrite_pxe`]).
//!
//! Offline, nothing but the store is consulted.

use std::sync::Arc;
use std::time::Duration;

use crate::fill::{FetchError, Fills};
use crate::metrics::Metrics;
use crate::upstream::Upstream;

mod artifacts;
mod documents;
mod pxe;

pub use crate::upstream::DEFAULT_FACTORY_URL;
pub use artifacts::{ImageKey, TalosctlKey, valid_asset, verifier_for};
pub use documents::{DEFAULT_METADATA_TTL, Document, FactoryDoc};
pub use pxe::{pxe_assets, rewrite_pxe};

/// "Canonical bytes of a schematic this service knows" (from
/// `POST /schematics` or `--schematics-dir`), so the factory can be taught
/// a schematic it answered 404 for.
pub trait SchematicLookup: Send + Sync {
    fn canonical(&self, id: &str) -> Option<Vec<u8>>;
}

/// Any `Fn(id) -> Option<bytes>` is a lookup, e.g. over the
/// known schematics: `Arc::new(move |id: &str| known.get(id).ok().flatten().map(String::into_bytes))`.
impl<F> SchematicLookup for F
where
    F: Fn(&str) -> Option<Vec<u8>> + Send + Sync,
{
    fn canonical(&self, id: &str) -> Option<Vec<u8>> {
        self(id)
    }
}

/// Knows no schematics.
pub struct NoSchematics;

impl SchematicLookup for NoSchematics {
    fn canonical(&self, _id: &str) -> Option<Vec<u8>> {
        None
    }
}

/// Why an image could not be answered.
#[derive(Debug, Clone)]
pub enum ImageError {
    /// Offline and not in the store.
    NotCached(String),
    Fetch(FetchError),
}

/// The image artifact cache.
#[derive(Clone)]
pub struct ImageCache {
    fills: Fills,
    /// `None` when offline.
    upstream: Option<(Upstream, String)>,
    schematics: Arc<dyn SchematicLookup>,
    metrics: Metrics,
    pub fill_timeout: Duration,
    /// How long a stored factory document is answered without asking
    /// the factory ([`ImageCache::document`]).
    pub metadata_ttl: Duration,
    /// Factory document requests running at once (`--max-concurrent-fills`).
    doc_slots: Option<Arc<tokio::sync::Semaphore>>,
}

impl ImageCache {
    /// `upstream` is the client and the factory base URL, `None` offline.
    pub fn new(
        fills: Fills,
        upstream: Option<(Upstream, String)>,
        schematics: Arc<dyn SchematicLookup>,
        metrics: Metrics,
    ) -> ImageCache {
        ImageCache {
            fills,
            upstream,
            schematics,
            metrics,
            fill_timeout: Duration::from_secs(3600),
            metadata_ttl: DEFAULT_METADATA_TTL,
            doc_slots: None,
        }
    }

    /// At most `n` factory document requests at once (the service gives
    /// it `--max-concurrent-fills`, the artifacts' bound).
    pub fn with_document_limit(mut self, n: usize) -> ImageCache {
        self.doc_slots = Some(Arc::new(tokio::sync::Semaphore::new(n.max(1))));
        self
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// The schematics the service knows (named files and earlier POSTs) is
/// what the factory is taught after a 404.
impl SchematicLookup for crate::known_schematics::KnownSchematics {
    fn canonical(&self, id: &str) -> Option<Vec<u8>> {
        self.get(id).ok().flatten().map(String::into_bytes)
    }
}
