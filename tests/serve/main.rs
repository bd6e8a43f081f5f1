//! Integration tests, one binary: talos-gen serve over HTTP: the API, /image through nginx and curl, factory documents, the operator's pages and probes, limits, auth, graceful stop, TLS.
//! Each module below was a test binary of its own; `support` is the one harness.

#[path = "../support/mod.rs"]
mod support;

mod body_limits;
mod datavolume;
mod edge_small_things;
mod factory_metadata;
mod http_machineconfig;
mod image_e2e;
mod one_flight;
mod ops_auth;
mod ops_failures;
mod ops_graceful;
mod ops_leftovers;
mod ops_limits;
mod ops_status;
mod refusals;
mod serve_api;
mod tls_e2e;
mod upgrade_api;
