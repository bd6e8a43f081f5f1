//! Integration tests, one binary: the /v2/ registry against the distribution registry: pulls, auth, mirrors, containerd.
//! Each module below was a test binary of its own; `support` is the one harness.

#[path = "../support/mod.rs"]
mod support;

mod registry_auth;
mod registry_containerd;
mod registry_e2e;
mod registry_mirror;
mod source_images;
