//! Integration tests, one binary: the mirror job: sync, progress, prune, signatures, export (tar, HTTP tree, OCI layout) and import, the air-gapped worker end to end.
//! Each module below was a test binary of its own; `support` is the one harness.

#[path = "../support/mod.rs"]
mod support;

mod air_gap_e2e;
mod mirror_bundle_trust;
mod mirror_e2e;
mod mirror_progress;
mod mirror_prune;
mod mirror_signatures;
mod mirror_source_images;
mod mirror_tree_export;
