//! The command-line edge: parse flags, call the core, print, map errors to
//! the contract's exit codes (0 done, 1 refused, 2 bad input). Each
//! subcommand lives in its own file; nothing here holds domain logic.

use clap::{Parser, Subcommand};

use crate::error::Error;

pub mod images;
pub mod machineconfig;
pub mod matrix;
pub mod mirror;
pub mod schematic;
pub mod serve;

#[derive(Debug, Parser)]
#[command(
    name = "talos-gen",
    version,
    about = "Talos worker configs, the support matrix, and a caching proxy for the Talos Image Factory"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The support matrix: which Kubernetes versions each Talos minor runs.
    Matrix(matrix::MatrixArgs),
    /// Schematic IDs and canonical encodings, identical to the Image Factory's.
    Schematic(schematic::SchematicArgs),
    /// The images a worker pulls (installer, kubelet, pause), one per line.
    Images(images::ImagesArgs),
    /// Write a worker machine config (all documents).
    Machineconfig(Box<machineconfig::MachineconfigArgs>),
    /// Kubelet reservations, eviction thresholds and autoscaler capacity for a node group.
    KubeletReservations(machineconfig::ReservationsArgs),
    /// Run the HTTP service: Image Factory cache, OCI pull-through, API.
    Serve(Box<serve::ServeArgs>),
    /// Fill, check and carry the store for air-gapped sites.
    Mirror(mirror::MirrorArgs),
}

/// Parse the process arguments, run, and return the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // clap prints help/version with exit 0 and usage errors with exit 2.
            let _ = e.print();
            return e.exit_code();
        }
    };
    let result = match cli.command {
        Command::Matrix(a) => matrix::run(a),
        Command::Schematic(a) => schematic::run(a),
        Command::Images(a) => images::run(a),
        Command::Machineconfig(a) => machineconfig::run(*a),
        Command::KubeletReservations(a) => machineconfig::run_reservations(a),
        Command::Serve(a) => serve::run(*a),
        Command::Mirror(a) => mirror::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => report(&e),
    }
}

/// Print one line naming the problem and return its exit code.
pub fn report(e: &Error) -> i32 {
    eprintln!("talos-gen: {e}");
    e.exit_code()
}

/// Read a file argument, `-` meaning standard input.
pub fn read_input(path: &str, what: &str) -> crate::Result<String> {
    use std::io::Read;
    if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| Error::bad_input(format!("{what}: reading standard input: {e}")))?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).map_err(|e| Error::bad_input(format!("{what}: {path}: {e}")))
    }
}
