//! Integration tests, one binary: the CLI and the libraries it fronts: matrix, schematics, images, machine configs (byte parity and schema), reservations, the README's tested blocks, and the parsers under proptest.
//! Each module below was a test binary of its own; `support` is the one harness.

#[path = "../support/mod.rs"]
mod support;

mod cli_images;
mod cli_matrix_schematic;
mod cli_smoke;
mod datavolume_catalog;
mod house_rules;
mod inputs_as_typed;
mod machineconfig_air_gap;
mod machineconfig_cli;
mod machineconfig_parity;
mod machineconfig_schema;
mod operator_cli;
mod parsers;
mod reservations;
mod second_day;
mod talos_minors;
mod upgrade_plan;
mod versions_names;
