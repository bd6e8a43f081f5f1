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
    #[command(
        after_help = "Examples:\n  talos-gen schematic id cozystack\n  talos-gen schematic id schematics/cozystack.yaml\n  echo '{}' | talos-gen schematic id -"
    )]
    Id {
        /// Schematic YAML or JSON file, `-` for standard input, or the name of an embedded schematic (cozystack, vanilla).
        #[arg(default_value = "-", value_name = "FILE|-|NAME")]
        file: String,
    },
    /// Print the canonical YAML whose sha256 is the ID.
    Canonical {
        /// Schematic YAML or JSON file, `-` for standard input, or the name of an embedded schematic (cozystack, vanilla).
        #[arg(default_value = "-", value_name = "FILE|-|NAME")]
        file: String,
    },
}

pub fn run(args: SchematicArgs) -> crate::Result<i32> {
    let (file, canonical) = match &args.command {
        SchematicCommand::Id { file } => (file, false),
        SchematicCommand::Canonical { file } => (file, true),
    };
    // A name of an embedded schematic (`cozystack`, `vanilla`) unless a file
    // of that name exists.
    let embedded = crate::known_schematics::EMBEDDED
        .iter()
        .find(|(name, _)| *name == file.as_str())
        .filter(|_| !std::path::Path::new(file).exists());
    let text = match embedded {
        Some((_, text)) => text.to_string(),
        // A bare word that is no file: most likely a name mistyped.
        None if file != "-" && !file.contains('/') && std::fs::symlink_metadata(file).is_err() => {
            let names: Vec<&str> = crate::known_schematics::EMBEDDED
                .iter()
                .map(|(n, _)| *n)
                .collect();
            return Err(crate::Error::bad_input(format!(
                "schematic: {file:?} is neither a file nor an embedded schematic (names, nearest first: {})",
                crate::text::by_nearness(file, &names).join(", ")
            )));
        }
        None => super::read_yaml_input(file, "schematic")?,
    };
    let (id, yaml) = crate::schematic::id_and_canonical(&text)?;
    if canonical {
        out!("{yaml}")?;
    } else {
        outln!("{id}")?;
    }
    Ok(0)
}
