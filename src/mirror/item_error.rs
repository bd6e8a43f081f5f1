//! Why one item of a mirror run failed, naming the object at fault, and
//! the pin every mirrored key ends with: shared by [`super::sync`] and
//! [`super::signatures`].

use crate::fill::FetchError;
use crate::registry::layout::Malformed;
use crate::registry::{Digest, NameError, OciError};
use crate::store::{Key, Store};

/// Why one item of a sync (or a schematic it teaches) failed: its report's
/// line, naming the object at fault (`manifest repo:tag`, `blob sha256:...`,
/// the key it was pinning).
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    /// The item's tag or digest does not parse.
    #[error("{0}")]
    Reference(NameError),
    /// The registry refused or failed `what` (`manifest repo:tag`, ...).
    #[error("{what}: {}", cause.message)]
    Registry { what: String, cause: OciError },
    /// No upstream serves the item's registry host.
    #[error("{}", .0.message)]
    Unrouted(OciError),
    /// A manifest or index that is not what it claims.
    #[error("{what}: {cause}")]
    Malformed { what: String, cause: Malformed },
    /// The fill of an artifact failed.
    #[error("{0}")]
    Fetch(FetchError),
    /// Offline, and the artifact is not stored.
    #[error("{0}")]
    NotCached(String),
    /// The fill of `what` (`blob sha256:...`) failed.
    #[error("{what}: {cause}")]
    FetchOf { what: String, cause: FetchError },
    #[error("pinning {key}: {cause}")]
    Pin { key: String, cause: crate::Error },
    /// The run's concurrency slots closed (the sync was stopped).
    #[error("{0}")]
    Stopped(tokio::sync::AcquireError),
    /// `--cosign-key` and no signature beside the image (`repo:tag`).
    #[error("no cosign signature ({0} not found); --cosign-key needs one")]
    Unsigned(String),
    /// A signature layer names a digest of another algorithm.
    #[error("unsupported digest {0:?}")]
    PayloadDigest(String),
    #[error("payload {0} is not in the store")]
    PayloadMissing(Digest),
    #[error("reading payload {digest}: {cause}")]
    PayloadRead { digest: Digest, cause: crate::Error },
    #[error("cosign signature {at}: {cause}")]
    Signature {
        at: String,
        cause: crate::cosign::SignatureError,
    },
    #[error(
        "the tag moved from {from} (whose signature was fetched) to {to} during the sync; run it again"
    )]
    TagMoved { from: Digest, to: Digest },
    /// Within the object `at` (`signature repo:tag`, `referrer D of repo@T`).
    #[error("{at}: {cause}")]
    Within { at: String, cause: Box<ItemError> },
    /// Every blob was tried: the first failure and how many more.
    #[error("{first} (and {more} more)")]
    Several { first: Box<ItemError>, more: usize },
    /// Teaching the factory a schematic (`POST url`): why not.
    #[error("POST {url}: {why}")]
    Post { url: String, why: String },
    #[error("the schematic: {0}")]
    Schematic(crate::Error),
    #[error("storing the schematic: {0}")]
    StoringSchematic(crate::Error),
    #[error("manifest {0}: none fetched")]
    NoManifest(String),
}

impl ItemError {
    /// What the registry answered about `what`.
    pub fn registry(what: impl Into<String>, cause: OciError) -> ItemError {
        ItemError::Registry {
            what: what.into(),
            cause,
        }
    }

    /// This error, said as within `at`.
    pub fn within(self, at: impl Into<String>) -> ItemError {
        ItemError::Within {
            at: at.into(),
            cause: Box::new(self),
        }
    }
}

pub(super) async fn pin(store: &Store, key: &Key) -> std::result::Result<(), ItemError> {
    store
        .set_pinned(key, true)
        .await
        .map_err(|cause| ItemError::Pin {
            key: key.to_string(),
            cause,
        })
}
