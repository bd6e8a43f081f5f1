//! `talos-gen images`: the worker's pull list.

use clap::Args;

#[derive(Debug, Args)]
pub struct ImagesArgs {
    /// Talos version (a release such as v1.13.9, or a minor: its newest known release).
    #[arg(long, value_name = "VERSION")]
    pub talos: String,
    /// Kubernetes version: a minor (v1.35: the Cozystack kubelet patch) or a full version.
    #[arg(long, value_name = "VERSION")]
    pub kubernetes: String,
    /// Schematic ID of the installer (default: the vanilla schematic).
    #[arg(long, value_name = "ID")]
    pub schematic: Option<String>,
    #[command(flatten)]
    pub installer: super::common::InstallerArgs,
    /// Print JSON: each image with what it is for.
    #[arg(long)]
    pub json: bool,
    /// Use this data file (default: the embedded matrix and its image table).
    #[arg(long, value_name = "FILE", value_parser = super::common::file_flag)]
    pub matrix: Option<String>,
}

pub fn run(args: ImagesArgs) -> crate::Result<i32> {
    let matrix = crate::compose::load_matrix(args.matrix.as_deref().map(std::path::Path::new))?;
    let p = crate::pull_list::plan(
        &matrix,
        &crate::pull_list::PullRequest {
            talos: &args.talos,
            kubernetes: &args.kubernetes,
            schematic: args.schematic.as_deref(),
            installer_repository: args.installer.installer_repository.as_deref(),
            platform: args.installer.platform.as_deref(),
            optional: args.installer.optional,
            names: Default::default(),
        },
    )?;
    for n in &p.notes {
        eprintln!("talos-gen: images: {n}");
    }
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&p.to_json()).unwrap_or_default()
        )?;
    } else {
        for i in &p.images {
            outln!("{}", i.reference)?;
        }
    }
    Ok(0)
}
