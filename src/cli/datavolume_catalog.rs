//! `talos-gen datavolume catalog` and `talos-gen datavolume check`:
//! Cozystack's worker image catalog (its `images[]` values for every
//! (schematic, release) a plan or mirror config passes through) and the
//! charts' guards over the live DataVolumes before a rollout.

use clap::{ArgGroup, Args, Subcommand};

use crate::datavolume::{catalog, check};
use crate::error::Error;

#[derive(Debug, Subcommand)]
pub enum DatavolumeCommand {
    /// Cozystack's worker image catalog values (kubernetes-worker-image's
    /// imageFactoryURL and images[]) for every (schematic, release) an
    /// upgrade plan or a mirror config passes through, imageFactoryURL on
    /// talos-gen. Entries the catalog's template would refuse are refused.
    #[command(
        after_help = "Examples:\n  talos-gen datavolume catalog --from-talos v1.11.6 --from-kubernetes 1.31.4 \\\n    --to-talos v1.14.6 --to-kubernetes 1.36.3 --base-url http://talos-gen.example:8080 -o catalog.yaml\n  talos-gen datavolume catalog --config mirror.yaml --base-url http://talos-gen.example:8080"
    )]
    Catalog(CatalogArgs),
    /// What Cozystack's charts would refuse or wait on, from the live
    /// DataVolumes (kubectl get dv -A -o json): a golden missing, Failed or
    /// still importing, a StorageClass that differs, a worker disk smaller
    /// than its golden; with --values, an entry that drifted from its
    /// golden and the worker disks still cloning a golden the values no
    /// longer name. One line each; exit 0 none, 1 some, 2 bad input.
    #[command(
        after_help = "Examples:\n  kubectl get dv -A -o json | talos-gen datavolume check\n  talos-gen datavolume check -f live.json --values catalog.yaml"
    )]
    Check(CheckArgs),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["config", "from_talos"])))]
pub struct CatalogArgs {
    /// A mirror config: every openstack-amd64.raw.xz disk image it names (schematics x talosVersions x images, workers:, upgrades:); (required) unless the plan's four versions are given.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["from_talos", "from_kubernetes", "to_talos", "to_kubernetes", "replace", "schematic"])]
    pub config: Option<String>,
    /// The running Talos release of an upgrade plan (as `upgrade plan`); (required) unless --config.
    #[arg(long, value_name = "VERSION", requires_all = ["from_kubernetes", "to_talos", "to_kubernetes"])]
    pub from_talos: Option<String>,
    /// The running Kubernetes version; (required) with --from-talos.
    #[arg(long, value_name = "VERSION")]
    pub from_kubernetes: Option<String>,
    /// The target Talos release, or a minor; (required) with --from-talos.
    #[arg(long, value_name = "VERSION")]
    pub to_talos: Option<String>,
    /// The target Kubernetes version, or a minor; (required) with --from-talos.
    #[arg(long, value_name = "VERSION")]
    pub to_kubernetes: Option<String>,
    /// Talos steps replace machines: no host-upgrade window.
    #[arg(long)]
    pub replace: bool,
    /// The plan's schematic: an ID, or an embedded schematic's name.
    #[arg(long, value_name = "ID", default_value = "cozystack")]
    pub schematic: String,
    /// talos-gen's base URL, as the cluster reaches it: the catalog's imageFactoryURL.
    #[arg(long, value_name = "URL")]
    pub base_url: String,
    /// Use this data file (default: the embedded matrix).
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<String>,
    /// Give each entry its storage: the raw disk's size read from --base-url (ranged reads of the image's xz index) plus a tenth, at least 256Mi, rounded up to a whole Gi (default: no storage, the catalog's own default).
    #[arg(long)]
    pub sizes: bool,
    /// With --sizes: the longest wait for each image's answer (a cold cache downloads it first).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::common::duration_flag)]
    pub timeout: std::time::Duration,
    /// Write the values here, atomically (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<String>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The live DataVolumes: the output of `kubectl get dv -A -o json`, or - for standard input.
    #[arg(
        short = 'f',
        long = "file",
        value_name = "LIVE.json|-",
        default_value = "-"
    )]
    pub file: String,
    /// The catalog's values (its values.yaml, or `datavolume catalog`'s output) about to be applied (default: none, no drift or removal checked).
    #[arg(long, value_name = "FILE")]
    pub values: Option<String>,
}

pub fn run(cmd: DatavolumeCommand) -> crate::Result<i32> {
    match cmd {
        DatavolumeCommand::Catalog(a) => run_catalog(a),
        DatavolumeCommand::Check(a) => run_check(a),
    }
}

fn run_catalog(a: CatalogArgs) -> crate::Result<i32> {
    let matrix = crate::compose::load_matrix(a.matrix.as_deref().map(std::path::Path::new))?;
    let (pairs, from) = match &a.config {
        Some(path) => {
            let config =
                crate::mirror::config::Config::load_with(std::path::Path::new(path), &matrix)?;
            for n in &config.notes {
                eprintln!("talos-gen: datavolume catalog: {n}");
            }
            (
                crate::mirror::golden::golden_pairs(&config),
                format!("--config {path}"),
            )
        }
        None => {
            let schematic = crate::known_schematics::id_or_name(&a.schematic).to_string();
            if !crate::schematic::is_valid_id(&schematic) {
                return Err(Error::bad_input(format!(
                    "--schematic: {:?} is neither a 64-character lowercase hex schematic ID nor the name of an embedded schematic (e.g. cozystack)",
                    a.schematic.chars().take(80).collect::<String>()
                )));
            }
            let plan = crate::upgrade::plan(
                &matrix,
                &crate::upgrade::Question {
                    from_talos: a.from_talos.as_deref().unwrap_or_default(),
                    from_kubernetes: a.from_kubernetes.as_deref().unwrap_or_default(),
                    to_talos: a.to_talos.as_deref().unwrap_or_default(),
                    to_kubernetes: a.to_kubernetes.as_deref().unwrap_or_default(),
                    replace: a.replace,
                    names: crate::upgrade::FLAGS,
                },
            )?;
            for n in &plan.notes {
                eprintln!("talos-gen: datavolume catalog: {n}");
            }
            (
                catalog::pairs_of_plan(&plan, &schematic),
                "the plan".to_string(),
            )
        }
    };
    let storage = if a.sizes {
        sizes(&a.base_url, &pairs, a.timeout)?
    } else {
        Vec::new()
    };
    let values = catalog::values_with_storage(&a.base_url, &pairs, &storage, &from)?;
    let text = crate::goyaml::to_string(&values);
    match a.output.as_deref() {
        Some(path) => super::machineconfig::write_file(path, &text, "-o")?,
        None => out!("{text}")?,
    }
    Ok(0)
}

/// Each pair's storage: its raw disk's size on the service plus headroom.
fn sizes(
    base_url: &str,
    pairs: &[(String, String)],
    timeout: std::time::Duration,
) -> crate::Result<Vec<String>> {
    let base = crate::registry::names::check_base_url(base_url)
        .map_err(|e| Error::bad_input(format!("--base-url: {e}")))?;
    let base = base.trim_end_matches('/').to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))?;
    let mut out = Vec::with_capacity(pairs.len());
    for (s, v) in pairs {
        let url = format!(
            "{base}/image/{s}/{v}/{}-{}.raw.xz",
            crate::datavolume::cozystack::PLATFORM,
            crate::datavolume::cozystack::ARCH
        );
        let raw = rt.block_on(crate::datavolume::size::fetch_raw_size(&url, timeout))?;
        out.push(crate::datavolume::size::headroom(raw));
    }
    Ok(out)
}

fn run_check(a: CheckArgs) -> crate::Result<i32> {
    let what = if a.file == "-" {
        "standard input".to_string()
    } else {
        format!("-f {}", a.file)
    };
    let text = super::read_input(&a.file, "-f")?;
    let live = check::parse_live(&text, &what)?;
    let catalog = match &a.values {
        Some(path) => {
            let text = super::read_yaml_input(path, "--values")?;
            Some(check::catalog_of_values(
                &text,
                &format!("--values {path}"),
            )?)
        }
        None => None,
    };
    let findings = check::check(&live, catalog.as_deref());
    for f in &findings {
        outln!("{}", f.line())?;
    }
    if findings.is_empty() {
        outln!(
            "ok: {} DataVolumes read; nothing the charts would refuse or wait on",
            live.len()
        )?;
        Ok(0)
    } else {
        Ok(1)
    }
}
