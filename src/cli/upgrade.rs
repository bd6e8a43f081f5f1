//! `talos-gen upgrade plan` and `talos-gen upgrade images`: the fewest
//! steps from one (Talos, Kubernetes) pair to another, and every image the
//! pairs on the way pull.

use clap::{Args, Subcommand};

use crate::matrix::Matrix;
use crate::upgrade::{self, Question};

#[derive(Debug, Args)]
pub struct UpgradeArgs {
    #[command(subcommand)]
    pub command: UpgradeCommand,
}

const PLAN_HELP: &str = "Rules: every pair on the way is one the support matrix accepts; Kubernetes moves within its minor or to the next one, never down (talosctl upgrade-k8s); an in-place Talos step (talosctl upgrade) goes only where the target minor's host-upgrade window admits the running release (hostUpgrade.from <= running < hostUpgrade.below, never a denied one); --replace drops the window. A Talos minor passed on the way lands on its newest stable release the data knows, a Kubernetes minor on the patch `talos-gen images` would pick; standard error says which.\n\nTie-break: ";

#[derive(Debug, Subcommand)]
pub enum UpgradeCommand {
    /// The fewest steps from one (Talos, Kubernetes) pair to another. Exit 0
    /// with a plan (no steps when equal), 1 no path (the blocking rule named),
    /// 2 bad input.
    #[command(after_help = plan_help())]
    Plan(PlanArgs),
    /// Every image the plan's pairs pull (the starting pair's too), once each.
    #[command(
        after_help = "Examples:\n  # what the air-gapped mirror must hold before the upgrade starts\n  talos-gen upgrade images --from-talos v1.11.6 --from-kubernetes 1.31.4 \\\n    --to-talos v1.14.6 --to-kubernetes 1.36.3 --schematic cozystack\n  talos-gen upgrade images --from-talos v1.12.11 --from-kubernetes 1.35.6 --to-talos 1.13 \\\n    --to-kubernetes 1.36 --platform nocloud --optional --json"
    )]
    Images(ImagesArgs),
}

fn plan_help() -> String {
    format!(
        "{PLAN_HELP}{}\n\nExamples:\n  talos-gen upgrade plan --from-talos v1.11.6 --from-kubernetes 1.31.4 --to-talos v1.14.6 --to-kubernetes 1.36.3\n  # KubeVirt workers replaced by Cluster API: no host window\n  talos-gen upgrade plan --from-talos v1.9.6 --from-kubernetes 1.32.4 --to-talos 1.14 --to-kubernetes 1.35 --replace --json",
        upgrade::TIE_BREAK
    )
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The running Talos release, with its patch (v1.11.6).
    #[arg(long, value_name = "VERSION")]
    pub from_talos: String,
    /// The running Kubernetes version, with its patch (1.31.4).
    #[arg(long, value_name = "VERSION")]
    pub from_kubernetes: String,
    /// The target Talos release, or a minor (its newest stable release the data knows).
    #[arg(long, value_name = "VERSION")]
    pub to_talos: String,
    /// The target Kubernetes version, or a minor (the Cozystack kubelet patch, else the newest patch the data names).
    #[arg(long, value_name = "VERSION")]
    pub to_kubernetes: String,
    /// Talos steps replace machines with a fresh disk (Cluster API): no host-upgrade window.
    #[arg(long, default_value = "false", value_name = "BOOL", action = clap::ArgAction::Set, value_parser = super::common::BoolFlag, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub replace: bool,
    /// Print JSON: the plan (upgrade images: the plan and each image with its role).
    #[arg(long)]
    pub json: bool,
    /// Use this data file (default: the embedded matrix).
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<String>,
}

#[derive(Debug, Args)]
pub struct ImagesArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// Schematic ID of the installer, or an embedded schematic's name (default: the vanilla schematic).
    #[arg(long, value_name = "ID")]
    pub schematic: Option<String>,
    #[command(flatten)]
    pub installer: super::common::InstallerArgs,
}

pub fn run(args: UpgradeArgs) -> crate::Result<i32> {
    match args.command {
        UpgradeCommand::Plan(a) => {
            let (_, plan) = plan(&a)?;
            if a.json {
                out!("{}", crate::text::json_document(&plan.to_json()))?;
            } else {
                out!("{}", plan.to_text())?;
            }
            Ok(0)
        }
        UpgradeCommand::Images(a) => {
            let (matrix, plan) = plan(&a.plan)?;
            let (images, notes) = upgrade::images(
                &matrix,
                &plan,
                &upgrade::ImageOptions {
                    schematic: a.schematic.as_deref(),
                    installer_repository: a.installer.installer_repository.as_deref(),
                    platform: a.installer.platform.as_deref(),
                    optional: a.installer.optional,
                    names: Default::default(),
                },
            )?;
            for n in notes {
                eprintln!("talos-gen: upgrade images: {n}");
            }
            if a.plan.json {
                outln!("{}", pretty(&upgrade::images_json(&plan, &images)))?;
            } else {
                for i in images {
                    outln!("{}", i.reference)?;
                }
            }
            Ok(0)
        }
    }
}

fn plan(a: &PlanArgs) -> crate::Result<(Matrix, upgrade::Plan)> {
    let matrix = crate::compose::load_matrix(a.matrix.as_deref().map(std::path::Path::new))?;
    let plan = upgrade::plan(
        &matrix,
        &Question {
            from_talos: &a.from_talos,
            from_kubernetes: &a.from_kubernetes,
            to_talos: &a.to_talos,
            to_kubernetes: &a.to_kubernetes,
            replace: a.replace,
            names: upgrade::FLAGS,
        },
    )?;
    for n in &plan.notes {
        eprintln!("talos-gen: upgrade plan: {n}");
    }
    Ok((matrix, plan))
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}
