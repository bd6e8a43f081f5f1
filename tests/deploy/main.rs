//! Integration tests, one binary: what ships: the Kubernetes manifests and the container image.
//! Each module below was a test binary of its own; `support` is the one harness.

#[path = "../support/mod.rs"]
mod support;

mod container_image;
mod manifests;
mod rehearsal;
