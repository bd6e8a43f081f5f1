//! talos-gen: the support matrix, schematic IDs, Talos worker machine configs,
//! and a caching proxy for the Talos Image Factory and installer registries.
//!
//! See ARCHITECTURE.md for the code map. Lower modules never import higher ones.

pub mod atomic;
pub mod error;
pub mod goyaml;
pub mod input;
pub mod oci_ref;
pub mod text;
pub mod version;
pub mod yaml;

pub mod cosign;
pub mod known_schematics;
pub mod matrix;
pub mod schematic;

pub mod pull_list;

pub mod machineconfig;
pub mod upgrade;

pub mod cache;
pub mod factory;
pub mod fill;
pub mod inventory;
pub mod metrics;
pub mod outage;
pub mod registry;
pub mod store;
pub mod upstream;
pub mod verifiers;

pub mod datavolume;

pub mod compose;

pub mod mirror;

pub mod cli;
pub mod http;

pub use error::{Error, Result};
