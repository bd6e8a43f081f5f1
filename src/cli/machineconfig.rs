//! `talos-gen machineconfig` and `talos-gen kubelet-reservations`.

use clap::Args;

/// The kubelet reservation overrides, shared by both commands. Values may
/// start with `-` (so that `-5%` reaches the validator and is named).
#[derive(Debug, Args, Clone, Default)]
pub struct ReservationOverrides {
    /// Memory reserved for system daemons (default: 5% of node memory, 256Mi..1Gi).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub system_reserved_memory: Option<String>,
    /// Memory reserved for Kubernetes daemons (default: 5% of node memory, 256Mi..1Gi).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub kube_reserved_memory: Option<String>,
    /// CPU reserved for system daemons (default: 5% of node CPU, 50m..500m).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub system_reserved_cpu: Option<String>,
    /// CPU reserved for Kubernetes daemons (default: 5% of node CPU, 50m..500m).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub kube_reserved_cpu: Option<String>,
    /// Hard eviction threshold for memory.available, a percentage in (0, 100] or a quantity (default: 7%).
    #[arg(long, value_name = "QUANTITY|PCT", allow_hyphen_values = true)]
    pub eviction_hard_memory: Option<String>,
    /// Soft eviction threshold for memory.available, above the hard one (default: 10%).
    #[arg(long, value_name = "QUANTITY|PCT", allow_hyphen_values = true)]
    pub eviction_soft_memory: Option<String>,
}

impl ReservationOverrides {
    /// The overrides with the node's size: what both commands compute from.
    fn sizing(
        self,
        instance_type: Option<String>,
        cpu: Option<String>,
        memory: Option<String>,
    ) -> crate::machineconfig::Sizing {
        crate::machineconfig::Sizing {
            instance_type,
            cpu,
            memory,
            system_reserved_memory: self.system_reserved_memory,
            kube_reserved_memory: self.kube_reserved_memory,
            system_reserved_cpu: self.system_reserved_cpu,
            kube_reserved_cpu: self.kube_reserved_cpu,
            eviction_hard_memory: self.eviction_hard_memory,
            eviction_soft_memory: self.eviction_soft_memory,
        }
    }
}

const MACHINECONFIG_EXAMPLES: &str = "\
Examples:
  # A Cozystack worker pool, from the chart's values file (as in the repository's examples/)
  talos-gen machineconfig --profile cozystack -f examples/kubernetes-nodes.values.yaml \\
    --cluster-name tenant1 --endpoint https://tenant1.example:6443 \\
    --with-secrets secrets.yaml -o worker.yaml

  # A plain worker, as `talosctl gen config` would write it (fresh secrets saved)
  talos-gen machineconfig --talos-version v1.13.6 --kubernetes-version 1.35.0 \\
    --cluster-name c1 --endpoint https://c1.example:6443 \\
    --output-secrets secrets.yaml -o worker.yaml

  # No install image at all (as talosctl with --install-image '')
  talos-gen machineconfig --talos-version v1.13 --cluster-name c1 \\
    --endpoint https://c1.example:6443 --install-image '' --install-disk ''";

#[derive(Debug, Args)]
#[command(after_help = MACHINECONFIG_EXAMPLES)]
pub struct MachineconfigArgs {
    /// The version contract, v1.X[.Y] (default: the values' talos.version, else v1.13.6). It decides the documents written; the install image is tagged with the full release: this version when it has a patch, else the values' talos.version of that minor, else the newest release the support matrix knows (said on stderr).
    #[arg(long, value_name = "VERSION")]
    pub talos_version: Option<String>,
    /// Kubernetes version (default: the Talos minor's default; with --profile cozystack the chart's kubelet release for the values' `version`).
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
    /// The cluster name (required).
    #[arg(long, value_name = "NAME")]
    pub cluster_name: Option<String>,
    /// The control plane endpoint, e.g. https://cluster:6443 (required).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// A talosctl secrets bundle (default: fresh secrets are generated).
    #[arg(long, value_name = "FILE", value_parser = super::common::file_flag)]
    pub with_secrets: Option<String>,
    /// Write the secrets bundle used here (mode 0600); never replaces a file holding a different bundle (default: not written).
    #[arg(long, value_name = "FILE")]
    pub output_secrets: Option<String>,
    /// Extra certificate SANs, comma-separated (default: none).
    #[arg(long, value_name = "SAN,...", value_delimiter = ',')]
    pub additional_sans: Vec<String>,
    /// The cluster DNS domain (default: cluster.local).
    #[arg(long, value_name = "DOMAIN")]
    pub dns_domain: Option<String>,
    /// The disk to install to (default: /dev/sda as talosctl; /dev/vda with --profile cozystack); '' writes none.
    #[arg(long, value_name = "DISK")]
    pub install_disk: Option<String>,
    /// The installer image (default: talosctl's for the release, ghcr.io/siderolabs/installer:<v> up to 1.13, factory.talos.dev/metal-installer/<vanilla schematic>:<v> from 1.14; <repository>/<schematic>:<v> with --schematic or --profile cozystack); '' writes none.
    #[arg(long, value_name = "REF")]
    pub install_image: Option<String>,
    /// A registry mirror, host=url[,url...]; repeatable (default: none).
    #[arg(long, value_name = "HOST=URL")]
    pub registry_mirror: Vec<String>,
    /// @file or inline YAML, repeatable; strategic merge as talosctl applies
    /// it, or a JSON (RFC 6902) patch (a list of operations, JSON or YAML)
    /// (default: none).
    #[arg(long, value_name = "PATCH", allow_hyphen_values = true)]
    pub config_patch: Vec<String>,
    /// Write a config for a pair the support matrix refuses, with a warning (default: refuse, exit 1).
    #[arg(long, default_value = "false", value_name = "BOOL", action = clap::ArgAction::Set, value_parser = super::common::BoolFlag, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub force: bool,
    /// Schematic ID (64 hex) of the install image, <repository>/<ID>:<v> (default: none; the values' talos.schematicID with --profile cozystack).
    #[arg(long, value_name = "ID")]
    pub schematic: Option<String>,
    /// Installer repository for --schematic, host/path (default: factory.talos.dev/installer).
    #[arg(long, value_name = "REPO")]
    pub installer_repository: Option<String>,
    /// `cozystack`: the Cozystack chart's worker document (default: none, a plain talosctl worker).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// The values of one Cozystack worker pool (the chart's values.yaml; needs --profile cozystack; default: none).
    #[arg(short = 'f', long, value_name = "FILE", value_parser = super::common::file_flag)]
    pub values: Option<String>,
    /// A DNS server IP; repeatable (default: none).
    #[arg(long, value_name = "IP")]
    pub nameserver: Vec<String>,
    /// A DNS search domain; repeatable (default: none).
    #[arg(long, value_name = "DOMAIN")]
    pub search_domain: Vec<String>,
    /// A static host entry, IP=alias[,alias...]; repeatable (default: none).
    #[arg(long, value_name = "IP=ALIASES")]
    pub extra_host_entry: Vec<String>,
    /// Size the node by a Cozystack instance type, e.g. u1.medium (default: the values' instanceType with the profile).
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    /// Node CPU, e.g. 2 or 1500m; give with --memory (default: from the instance type).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub cpu: Option<String>,
    /// Node memory, e.g. 8Gi; give with --cpu (default: from the instance type).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub memory: Option<String>,
    #[command(flatten)]
    pub reservations: ReservationOverrides,
    /// Use this support-matrix data file (default: the embedded one).
    #[arg(long, value_name = "FILE", value_parser = super::common::file_flag)]
    pub matrix: Option<String>,
    /// Write the config here, atomically (default: standard output).
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
    /// an explicit --registry-mirror or talos.registryMirrors entry wins
    /// (default: none).
    #[arg(long, value_name = "URL")]
    pub air_gap_mirror: Option<String>,
    /// A cosign public key (PEM): an ImageVerificationConfig with a
    /// publicKey rule for each image of the pull list (Talos 1.13+)
    /// (default: none, no ImageVerificationConfig).
    #[arg(long, value_name = "FILE", value_parser = super::common::file_flag)]
    pub image_verification_key: Option<String>,
    /// A PEM CA certificate (`ca.crt` of `talos-gen mirror cert`) trusted
    /// for every https:// mirror endpoint the config writes: a
    /// RegistryTLSConfig document per endpoint host from Talos 1.12,
    /// machine.registries.config.<host>.tls.ca before (default: none).
    #[arg(long, value_name = "FILE", value_parser = super::common::file_flag)]
    pub mirror_ca: Option<String>,
}

const RESERVATIONS_EXAMPLES: &str = "\
Instance types: u1, o1, d1 (nano..8xlarge, 2xmedium for u1/d1), rt1 (micro..8xlarge),
cx1 (medium..8xlarge, also <size>1gi), m1 (large..8xlarge, also <size>1gi),
n1 (medium..8xlarge), gn1 (xlarge..8xlarge).

Examples:
  talos-gen kubelet-reservations --instance-type u1.medium
  talos-gen kubelet-reservations --memory 16Gi --cpu 4 --json
  talos-gen kubelet-reservations --instance-type u1.xlarge --eviction-hard-memory 5%";

#[derive(Debug, Args)]
#[command(after_help = RESERVATIONS_EXAMPLES)]
pub struct ReservationsArgs {
    /// Size the node by a Cozystack instance type, e.g. u1.medium (default: none; then give --memory and --cpu).
    #[arg(long, value_name = "TYPE")]
    pub instance_type: Option<String>,
    /// Node memory, e.g. 8Gi; give with --cpu (default: the instance type's).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// Node CPU, e.g. 2 or 1500m; give with --memory (default: the instance type's).
    #[arg(long, value_name = "QUANTITY", allow_hyphen_values = true)]
    pub cpu: Option<String>,
    #[command(flatten)]
    pub overrides: ReservationOverrides,
    /// Print one JSON object with the contract's fields (default: text lines).
    #[arg(long)]
    pub json: bool,
}

/// Read `@file` (or `@-`) patches; anything else is inline YAML.
fn patch_text(arg: &str, i: usize) -> crate::Result<String> {
    match arg.strip_prefix('@') {
        Some(path) => super::read_yaml_input(path, &format!("--config-patch #{}", i + 1)),
        None => Ok(arg.to_string()),
    }
}

/// Write `text` to `path` atomically ([`crate::atomic`]: a temp file (mode
/// 0600) beside it, fsync, rename, fsync of the directory). A path through a
/// symbolic link is written where the link points (the link stays). A path
/// that is not a regular file (`/dev/null`, `/dev/stdout`, a FIFO with a
/// reader) is written to as it is, never replaced by a file: a rename over
/// it would swap the device for a regular file; a FIFO without a reader is
/// an error, not a wait; a directory is an error.
pub(super) fn write_file(path: &str, text: &str, what: &str) -> crate::Result<()> {
    write_file_as(path, text, what, crate::atomic::Replace::Yes)
}

/// [`write_file`]; with [`Replace::Never`](crate::atomic::Replace::Never) a
/// file another writer made at `path` meanwhile is refused, not replaced.
fn write_file_as(
    path: &str,
    text: &str,
    what: &str,
    replace: crate::atomic::Replace,
) -> crate::Result<()> {
    let io = |e| crate::Error::io(format!("{what}: {path}"), e);
    let target = match std::fs::canonicalize(path) {
        Ok(real) => {
            let meta = std::fs::metadata(&real).map_err(io)?;
            if meta.is_dir() {
                return Err(crate::Error::bad_input(format!(
                    "{what}: {path:?} is a directory; give a file"
                )));
            }
            if !meta.is_file() {
                return write_special(&real, text).map_err(io);
            }
            real
        }
        Err(_) if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink()) => {
            // Through a link that leads nowhere: the rename would replace
            // the link itself, and writing where it points would make a
            // file the user may not expect; refused either way.
            return Err(crate::Error::bad_input(format!(
                "{what}: {path:?} is a symbolic link to a file that does not exist; not written (give the file itself)"
            )));
        }
        Err(_) => std::path::PathBuf::from(path),
    };
    crate::atomic::write_bytes(&target, 0o600, replace, text.as_bytes()).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            crate::Error::refused(format!(
                "{what}: {path:?} was made by another writer meanwhile; not overwritten"
            ))
        } else {
            io(e)
        }
    })
}

/// Write to an existing file that is not a regular one (a device, a FIFO),
/// opened without creating or truncating it. A FIFO with no reader is an
/// error (`ENXIO` from a non-blocking open), not a wait; once a reader is
/// there the file is opened again blocking, so a slow reader is waited for
/// as with any pipe.
fn write_special(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let probe = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENXIO) => std::io::Error::other("a FIFO with no reader"),
            _ => e,
        })?;
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    drop(probe);
    f.write_all(text.as_bytes())
}

/// Do two path arguments name one file (the same text, or, when they
/// exist, the same inode; a missing file's directory is compared)?
fn same_file(a: &str, b: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    if a == b {
        return true;
    }
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let resolved = |p: &str| {
        let p = std::path::Path::new(p);
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        Some(std::fs::canonicalize(dir).ok()?.join(p.file_name()?))
    };
    matches!((resolved(a), resolved(b)), (Some(x), Some(y)) if x == y)
}

/// Said on stderr when the config was made from fresh secrets that were
/// not saved (neither `--with-secrets` nor `--output-secrets`).
pub const SECRETS_NOT_SAVED: &str = "warning: the secrets generated for this config were not saved, so no control plane or other node can be made for its cluster; give --output-secrets FILE to keep them (or --with-secrets FILE to use a bundle you have)";

pub fn run(args: MachineconfigArgs) -> crate::Result<i32> {
    use crate::machineconfig::Request;
    use crate::yaml::Value;
    check_outputs(&args)?;
    let secrets = match &args.with_secrets {
        Some(path) => Some(Value::String(super::read_yaml_input(
            path,
            "--with-secrets",
        )?)),
        None => None,
    };
    let values = match &args.values {
        Some(path) => Some(Value::String(super::read_yaml_input(path, "--values")?)),
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
        sizing: r.sizing(args.instance_type, args.cpu, args.memory),
        air_gap_mirror: args.air_gap.air_gap_mirror,
        image_verification_key: args
            .air_gap
            .image_verification_key
            .as_deref()
            .map(|p| super::read_input(p, "--image-verification-key"))
            .transpose()?,
        mirror_ca: args
            .air_gap
            .mirror_ca
            .as_deref()
            .map(|p| super::read_input(p, "--mirror-ca"))
            .transpose()?,
    };
    let output = args.output.as_deref().filter(|p| *p != "-");
    if let (Some(secrets), Some(config)) = (&args.output_secrets, output)
        && same_file(secrets, config)
    {
        return Err(crate::Error::bad_input(format!(
            "--output-secrets: {secrets:?} is also the -o/--output file; give two different files"
        )));
    }
    let matrix = crate::compose::load_matrix(args.matrix.as_deref().map(std::path::Path::new))?;
    let out = crate::machineconfig::generate_with(&req, &matrix)?;
    for w in &out.warnings {
        eprintln!("talos-gen: {w}");
    }
    if args.with_secrets.is_none() && args.output_secrets.is_none() {
        // Fresh secrets nobody kept: no control plane or other worker can
        // ever be made for the cluster this config joins.
        eprintln!("talos-gen: {SECRETS_NOT_SAVED}");
    }
    if let Some(path) = &args.output_secrets {
        write_secrets(path, &out)?;
    }
    match output {
        Some(path) => {
            // A secrets bundle is never overwritten, not even by -o: the
            // cluster's configs are made from it.
            if let Ok(existing) = crate::input::read_string(
                std::path::Path::new(path),
                crate::input::MAX_INPUT,
                crate::input::Kind::File,
            ) && crate::machineconfig::secrets::Bundle::parse(&existing, path).is_ok()
            {
                return Err(crate::Error::refused(format!(
                    "-o/--output: {path:?} holds a secrets bundle; not overwritten (give another file)"
                )));
            }
            write_file(path, &out.config, "--output")?
        }
        None => {
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

/// Neither output is `-` for the bundle or one of the files read (by name,
/// or the same inode through a link): checked before any write.
fn check_outputs(args: &MachineconfigArgs) -> crate::Result<()> {
    // The bundle is kept in a file: every later config of the cluster
    // needs it again (`-` would have made a file named `-`).
    if args.output_secrets.as_deref() == Some("-") {
        return Err(crate::Error::bad_input(
            "--output-secrets: \"-\" is not a file; give the file the bundle is kept in (every later config of the cluster needs it)",
        ));
    }
    // Every file read is an input only: neither output may be one (by
    // name, or the same inode through a link), checked before any write.
    let mut inputs: Vec<(String, &str)> = Vec::new();
    for (flag, p) in [
        ("--with-secrets", &args.with_secrets),
        ("--values", &args.values),
        (
            "--image-verification-key",
            &args.air_gap.image_verification_key,
        ),
        ("--mirror-ca", &args.air_gap.mirror_ca),
    ] {
        if let Some(p) = p.as_deref().filter(|p| *p != "-") {
            inputs.push((flag.to_string(), p));
        }
    }
    for (i, p) in args.config_patch.iter().enumerate() {
        if let Some(p) = p.strip_prefix('@').filter(|p| *p != "-") {
            inputs.push((format!("--config-patch #{}", i + 1), p));
        }
    }
    let outputs = [
        ("-o/--output", args.output.as_deref().filter(|p| *p != "-")),
        ("--output-secrets", args.output_secrets.as_deref()),
    ];
    for (flag, out) in outputs {
        let Some(out) = out else { continue };
        if let Some((input_flag, input)) = inputs.iter().find(|(_, i)| same_file(i, out)) {
            return Err(crate::Error::bad_input(format!(
                "{flag}: {out:?} is the {input_flag} file {input:?}; it would be overwritten: give another file"
            )));
        }
    }
    Ok(())
}

/// `--output-secrets`: the bundle written, or left as it is when the file
/// holds the same one.
fn write_secrets(path: &str, out: &crate::machineconfig::Output) -> crate::Result<()> {
    // Never replace a different bundle: configs already made from it
    // would stop matching the cluster. The same bundle is left as it is.
    match crate::input::read_string(
        std::path::Path::new(path),
        crate::input::MAX_INPUT,
        crate::input::Kind::File,
    ) {
        Ok(existing) => {
            let same = crate::machineconfig::secrets::Bundle::parse(&existing, path)
                .is_ok_and(|b| b == out.bundle);
            if !same {
                return Err(crate::Error::refused(format!(
                    "--output-secrets: {path:?} already holds a different secrets bundle; not overwritten (remove it, or pass it as --with-secrets)"
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Never: another run making the bundle at once is not replaced.
            write_file_as(
                path,
                &out.secrets_yaml(),
                "--output-secrets",
                crate::atomic::Replace::Never,
            )?
        }
        Err(e) => return Err(crate::Error::io(format!("--output-secrets: {path}"), e)),
    }
    Ok(())
}

pub fn run_reservations(args: ReservationsArgs) -> crate::Result<i32> {
    let sizing = args
        .overrides
        .sizing(args.instance_type, args.cpu, args.memory);
    let r = crate::machineconfig::kubelet_reservations(&sizing)?;
    if args.json {
        let text = serde_json::to_string_pretty(&r)
            .map_err(|e| crate::Error::refused(format!("encoding JSON: {e}")))?;
        outln!("{text}")?;
    } else {
        out!("{}", r.to_text())?;
    }
    Ok(0)
}
