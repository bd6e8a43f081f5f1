//! `talos-gen machineconfig` and `talos-gen kubelet-reservations`.

use clap::Args;

/// The kubelet reservation overrides, shared by both commands.
#[derive(Debug, Args, Clone, Default)]
pub struct ReservationOverrides {
    #[arg(long, value_name = "QUANTITY")]
    pub system_reserved_memory: Option<String>,
    #[arg(long, value_name = "QUANTITY")]
    pub kube_reserved_memory: Option<String>,
    #[arg(long, value_name = "QUANTITY")]
    pub system_reserved_cpu: Option<String>,
    #[arg(long, value_name = "QUANTITY")]
    pub kube_reserved_cpu: Option<String>,
    #[arg(long, value_name = "QUANTITY|PCT")]
    pub eviction_hard_memory: Option<String>,
    #[arg(long, value_name = "QUANTITY|PCT")]
    pub eviction_soft_memory: Option<String>,
}

#[derive(Debug, Args)]
pub struct MachineconfigArgs {
    /// The version contract, v1.X[.Y].
    #[arg(long, value_name = "VERSION")]
    pub talos_version: Option<String>,
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
    #[arg(long, value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// The control plane endpoint, e.g. https://cluster:6443.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// A talosctl secrets bundle; without it fresh secrets are generated.
    #[arg(long, value_name = "FILE")]
    pub with_secrets: Option<String>,
    /// Write the (generated or read) secrets bundle here.
    #[arg(long, value_name = "FILE")]
    pub output_secrets: Option<String>,
    #[arg(long, value_name = "SAN,...", value_delimiter = ',')]
    pub additional_sans: Vec<String>,
    #[arg(long, value_name = "DOMAIN")]
    pub dns_domain: Option<String>,
    #[arg(long, value_name = "DISK")]
    pub install_disk: Option<String>,
    /// The installer image; an empty string writes no image.
    #[arg(long, value_name = "REF")]
    pub install_image: Option<String>,
    /// host=url[,url...], repeatable.
    #[arg(long, value_name = "HOST=URL")]
    pub registry_mirror: Vec<String>,
    /// @file or inline YAML, repeatable; strategic merge as talosctl applies it.
    #[arg(long, value_name = "PATCH")]
    pub config_patch: Vec<String>,
    /// Write a config for a pair the support matrix refuses, with a warning.
    #[arg(long)]
    pub force: bool,
    /// Schematic ID for the install image (with --installer-repository).
    #[arg(long, value_name = "ID")]
    pub schematic: Option<String>,
    #[arg(long, value_name = "REPO")]
    pub installer_repository: Option<String>,
    /// `cozystack`: the Cozystack chart's worker document.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// The values of one Cozystack worker pool.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub values: Option<String>,
    #[arg(long, value_name = "IP")]
    pub nameserver: Vec<String>,
    #[arg(long, value_name = "DOMAIN")]
    pub search_domain: Vec<String>,
    /// IP=alias[,alias...], repeatable.
    #[arg(long, value_name = "IP=ALIASES")]
    pub extra_host_entry: Vec<String>,
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    #[arg(long, value_name = "QUANTITY")]
    pub cpu: Option<String>,
    #[arg(long, value_name = "QUANTITY")]
    pub memory: Option<String>,
    #[command(flatten)]
    pub reservations: ReservationOverrides,
    /// Use this support-matrix data file instead of the embedded one.
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<String>,
    /// Write the config here instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReservationsArgs {
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    #[arg(long, value_name = "QUANTITY")]
    pub memory: Option<String>,
    #[arg(long, value_name = "QUANTITY")]
    pub cpu: Option<String>,
    #[command(flatten)]
    pub overrides: ReservationOverrides,
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: MachineconfigArgs) -> crate::Result<i32> {
    Err(crate::Error::refused("machineconfig: not implemented yet"))
}

pub fn run_reservations(_args: ReservationsArgs) -> crate::Result<i32> {
    Err(crate::Error::refused(
        "kubelet-reservations: not implemented yet",
    ))
}
