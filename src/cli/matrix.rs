//! `talos-gen matrix [--json]` and `talos-gen matrix check`.

use std::path::Path;

use clap::{Args, Subcommand};

use crate::version::Version;

#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// Use this data file (default: the embedded matrix).
    #[arg(long, global = true, value_name = "FILE", value_parser = super::common::file_flag)]
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
    #[command(
        after_help = "Examples:\n  talos-gen matrix check --talos v1.13.6 --kubernetes v1.35\n  talos-gen matrix check --talos 1.14 --kubernetes 1.32.3 --json"
    )]
    Check {
        /// Talos version, v1.X[.Y] (with or without v, pre-release suffixes allowed).
        #[arg(long, value_name = "VERSION")]
        talos: String,
        /// Kubernetes version, v1.X[.Y].
        #[arg(long, value_name = "VERSION")]
        kubernetes: String,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: MatrixArgs) -> crate::Result<i32> {
    let matrix = crate::compose::load_matrix(args.matrix.as_deref().map(Path::new))?;
    match args.command {
        None => {
            if args.json {
                out!("{}", crate::text::json_document(&matrix.to_json()))?;
            } else {
                out!("{}", matrix.to_table())?;
            }
            Ok(0)
        }
        Some(MatrixCommand::Check {
            talos,
            kubernetes,
            json,
        }) => {
            let talos = Version::parse_named(&talos, "--talos")?;
            let k8s = Version::parse_named(&kubernetes, "--kubernetes")?;
            let answer = matrix.check(&talos, &k8s);
            if let Some(n) = matrix.pending_note(&talos) {
                eprintln!("talos-gen: matrix check: {n}");
            }
            if json || args.json {
                let (supported, message) = match &answer {
                    Ok(s) => (true, s.message.clone()),
                    // check() refuses; it has no other failure.
                    Err(e) => (false, e.to_string()),
                };
                out!(
                    "{}",
                    crate::text::json_document(&serde_json::json!({
                        "supported": supported,
                        "message": message,
                        "talos": talos.to_string(),
                        "kubernetes": k8s.to_string(),
                    }))
                )?;
                return Ok(if supported { 0 } else { 1 });
            }
            let s = answer?;
            outln!("ok: {}", s.message)?;
            Ok(0)
        }
    }
}
