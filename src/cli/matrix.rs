//! `talos-gen matrix [--json]` and `talos-gen matrix check`.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// Use this data file instead of the embedded matrix.
    #[arg(long, global = true, value_name = "FILE")]
    pub matrix: Option<String>,
    /// Print the table as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Option<MatrixCommand>,
}

#[derive(Debug, Subcommand)]
pub enum MatrixCommand {
    /// Is this Talos/Kubernetes pair supported? Exit 0 yes, 1 no, 2 bad input.
    Check {
        #[arg(long, value_name = "VERSION")]
        talos: String,
        #[arg(long, value_name = "VERSION")]
        kubernetes: String,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(_args: MatrixArgs) -> crate::Result<i32> {
    Err(crate::Error::refused("matrix: not implemented yet"))
}
