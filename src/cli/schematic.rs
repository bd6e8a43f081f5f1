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

pub fn run(args: SchematicArgs) -> crate::Result<i32> {
    let (file, canonical) = match &args.command {
        SchematicCommand::Id { file } => (file, false),
        SchematicCommand::Canonical { file } => (file, true),
    };
    let text = super::read_input(file, "schematic")?;
    let (id, yaml) = crate::schematic::id_and_canonical(&text)?;
    if canonical {
        print!("{yaml}");
    } else {
        println!("{id}");
    }
    Ok(0)
}
