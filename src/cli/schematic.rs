//! `talos-gen schematic id|canonical [FILE|-]`.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct SchematicArgs {
    #[command(subcommand)]
    pub command: SchematicCommand,
}

#[derive(Debug, Subcommand)]
pub enum SchematicCommand {
    /// Print the 64-hex schematic ID.
    Id {
        /// Schematic YAML or JSON; `-` (the default) reads standard input.
        #[arg(default_value = "-")]
        file: String,
    },
    /// Print the canonical YAML whose sha256 is the ID.
    Canonical {
        #[arg(default_value = "-")]
        file: String,
    },
}

pub fn run(_args: SchematicArgs) -> crate::Result<i32> {
    Err(crate::Error::refused("schematic: not implemented yet"))
}
