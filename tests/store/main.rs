//! Integration tests, one binary: trust in the store: faults of the store and the upstream, the S3 backend on Garage.
//! Each module below was a test binary of its own; `support` is the one harness.

#[path = "../support/mod.rs"]
mod support;

mod frozen_bucket;
mod garage_cluster;
mod https_bucket;
mod multipart_sweep;
mod pin_race;
mod s3_store;
mod slow_readers;
mod trust_store;
mod trust_upstream;
