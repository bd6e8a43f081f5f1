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
    /// @file or inline YAML, repeatable; strategic merge as talosctl applies
    /// it, or a JSON (RFC 6902) patch (a list of operations, JSON or YAML).
    #[arg(long, value_name = "PATCH", allow_hyphen_values = true)]
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
    #[command(flatten)]
    pub air_gap: AirGapArgs,
}

/// The air-gap flags (issue 12), kept apart from the talosctl-style flags.
#[derive(Debug, Args, Clone, Default)]
pub struct AirGapArgs {
    /// Registry mirrors with skipFallback for every registry host the
    /// worker pulls from (installer, kubelet, pause), all pointing at URL;
    /// an explicit --registry-mirror or talos.registryMirrors entry wins.
    #[arg(long, value_name = "URL")]
    pub air_gap_mirror: Option<String>,
    /// A cosign public key (PEM): an ImageVerificationConfig with a
    /// publicKey rule for each image of the pull list (Talos 1.13+).
    #[arg(long, value_name = "FILE")]
    pub image_verification_key: Option<String>,
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

/// Read `@file` (or `@-`) patches; anything else is inline YAML.
fn patch_text(arg: &str, i: usize) -> crate::Result<String> {
    match arg.strip_prefix('@') {
        Some(path) => super::read_input(path, &format!("--config-patch #{}", i + 1)),
        None => Ok(arg.to_string()),
    }
}

/// Write `text` to `path` through a temporary file, fsync and rename.
fn write_file(path: &str, text: &str, what: &str) -> crate::Result<()> {
    use std::io::Write;
    let target = std::path::Path::new(path);
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let io = |e| crate::Error::io(format!("{what}: {path}"), e);
    let mut tmp = tempfile_in(dir).map_err(io)?;
    tmp.1.write_all(text.as_bytes()).map_err(io)?;
    tmp.1.sync_all().map_err(io)?;
    std::fs::rename(&tmp.0, target).map_err(io)?;
    Ok(())
}

fn tempfile_in(dir: &std::path::Path) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    for n in 0..100u32 {
        let p = dir.join(format!(".talos-gen.{}.{n}.tmp", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
        {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no temporary file name free"))
}

pub fn run(args: MachineconfigArgs) -> crate::Result<i32> {
    use crate::machineconfig::Request;
    use crate::yaml::Value;
    let secrets = match &args.with_secrets {
        Some(path) => Some(Value::String(super::read_input(path, "--with-secrets")?)),
        None => None,
    };
    let values = match &args.values {
        Some(path) => Some(Value::String(super::read_input(path, "--values")?)),
        None => None,
    };
    let mut patches = Vec::new();
    for (i, p) in args.config_patch.iter().enumerate() {
        patches.push(Value::String(patch_text(p, i)?));
    }
    let r = args.reservations;
    let req = Request {
        talos_version: args.talos_version,
        kubernetes_version: args.kubernetes_version,
        cluster_name: args.cluster_name,
        endpoint: args.endpoint,
        secrets,
        additional_sans: args.additional_sans,
        dns_domain: args.dns_domain,
        install_disk: args.install_disk,
        install_image: args.install_image,
        registry_mirror: args.registry_mirror,
        config_patch: patches,
        force: args.force,
        schematic: args.schematic,
        installer_repository: args.installer_repository,
        profile: args.profile,
        values,
        nameserver: args.nameserver,
        search_domain: args.search_domain,
        extra_host_entry: args.extra_host_entry,
        instance_type: args.instance_type,
        cpu: args.cpu,
        memory: args.memory,
        system_reserved_memory: r.system_reserved_memory,
        kube_reserved_memory: r.kube_reserved_memory,
        system_reserved_cpu: r.system_reserved_cpu,
        kube_reserved_cpu: r.kube_reserved_cpu,
        eviction_hard_memory: r.eviction_hard_memory,
        eviction_soft_memory: r.eviction_soft_memory,
        air_gap_mirror: args.air_gap.air_gap_mirror,
        image_verification_key: args
            .air_gap
            .image_verification_key
            .as_deref()
            .map(|p| super::read_input(p, "--image-verification-key"))
            .transpose()?,
    };
    let matrix = crate::matrix::Matrix::load(args.matrix.as_deref().map(std::path::Path::new))?;
    let out = crate::machineconfig::generate_with(&req, &matrix)?;
    for w in &out.warnings {
        eprintln!("talos-gen: {w}");
    }
    if let Some(path) = &args.output_secrets {
        write_file(path, &out.secrets_yaml(), "--output-secrets")?;
    }
    match &args.output {
        Some(path) if path != "-" => write_file(path, &out.config, "--output")?,
        _ => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(out.config.as_bytes())
                .and_then(|_| stdout.flush())
                .map_err(|e| crate::Error::io("writing standard output", e))?;
        }
    }
    Ok(0)
}

pub fn run_reservations(args: ReservationsArgs) -> crate::Result<i32> {
    let o = args.overrides;
    let r =
        crate::machineconfig::kubelet_reservations(&crate::machineconfig::ReservationsRequest {
            instance_type: args.instance_type,
            memory: args.memory,
            cpu: args.cpu,
            system_reserved_memory: o.system_reserved_memory,
            kube_reserved_memory: o.kube_reserved_memory,
            system_reserved_cpu: o.system_reserved_cpu,
            kube_reserved_cpu: o.kube_reserved_cpu,
            eviction_hard_memory: o.eviction_hard_memory,
            eviction_soft_memory: o.eviction_soft_memory,
        })?;
    if args.json {
        let text = serde_json::to_string_pretty(&r)
            .map_err(|e| crate::Error::refused(format!("encoding JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", r.to_text());
    }
    Ok(0)
}
