//! What `/v2/` means: repository and reference validation, manifests and
//! blobs by digest, tag revalidation, `?ns=` mirrors.
//!
//! The pull-through keeps everything in the shared [`crate::store::Store`],
//! under the keys of [`layout`] (manifests and blobs by digest, tag links).
//!
//! Objects by digest are immutable: once verified (sha256 of the bytes equals
//! the digest) they are served without asking the upstream again. A tag is
//! revalidated after [`TAG_REVALIDATE`]; when the upstream cannot be reached
//! (or fails with 5xx), the last known mapping is served.
//!
//! Files: `names` (the grammar, the mirror table), `client` (the upstream
//! client), `layout` (store keys, the manifest walk), `proxy` (the
//! [`Registry`], routing, the registries the store holds, blobs),
//! `manifest` (manifest fetch, verify, commit, tags), `listing` (tag lists
//! and OCI 1.1 referrers, online and from the store), `error`
//! ([`OciError`] and its mappings),
//! `source` (the factory's source image proxy: `siderolabs/<image>` from
//! `ghcr.io` without `?ns=`).

pub mod client;
mod error;
pub mod layout;
mod listing;

mod manifest;
pub mod names;
mod proxy;
pub mod source;

pub use error::{OciError, OciKind};
pub use listing::{
    INDEX_MEDIA_TYPE, MAX_LIST, Referrers, ReferrersSource, TagList, TagQuery, empty_index,
};
pub use manifest::{INDEX_TYPES, MAX_MANIFEST, Manifest, accepts, media_type_field, not_accepted};
pub use names::{Digest, MirrorTable, NameError, Reference, UpstreamId};
pub use proxy::{BLOB_FILL_TIMEOUT, Blob, Registry, TAG_REVALIDATE};
