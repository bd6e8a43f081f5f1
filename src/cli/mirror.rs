//! `talos-gen mirror sync|verify|export|import`.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct MirrorArgs {
    #[command(subcommand)]
    pub command: MirrorCommand,
}

const SYNC_EXAMPLES: &str = "\
Config keys (YAML, docs/interface.md): schematics (IDs, names such as cozystack, or {file: path}),
talosVersions, images (disk image asset names), installers, extraImages, workers ({talos,
kubernetes, schematic, platform, arch, installerRepository, optionalImages}: everything a worker
pool pulls), talosctl, pxe, sourceImages, upgrades ({fromTalos, fromKubernetes, toTalos,
toKubernetes, replace, schematic, platform, arch, installerRepository, optionalImages}: every pair
of `talos-gen upgrade plan`, each as a workers entry).

Exit 0 when every item is stored, 1 when any failed (each named once), 2 for a bad config.
The result is kept in the store and shown on serve's status page and /metrics.

Examples:
  # Cozystack's defaults (mirror/mirror.yaml) into the store serve reads
  talos-gen mirror sync --config mirror/mirror.yaml --cache-dir /var/cache/talos-gen

  # Kubelet images through a registry mirror, 8 items at once
  talos-gen mirror sync --config mirror.yaml --cache-dir /data \\
    --mirror-upstream ghcr.io=https://ghcr.io --concurrency 8";

const EXPORT_EXAMPLES: &str = "\
A directory is written in place (each file renamed into place; unchanged files kept);
a non-empty one without talos-gen-export.json is refused (exit 1).

Examples:
  # everything stored, for `mirror import` on the other side
  talos-gen mirror export --cache-dir /var/cache/talos-gen --output mirror.tar

  # the disk images of a config as files for an internal web server
  talos-gen mirror export --cache-dir /var/cache/talos-gen --config mirror.yaml \\
    --format http --output /srv/talos-factory

  # its installers and images as an OCI layout for the site's registry
  talos-gen mirror export --cache-dir /var/cache/talos-gen --config mirror.yaml \\
    --format oci --output /media/usb/talos-oci
  skopeo copy --all oci:/media/usb/talos-oci:ghcr.io/siderolabs/kubelet:v1.35.6 \\
    docker://registry.example/siderolabs/kubelet:v1.35.6";

const PRUNE_EXAMPLES: &str = "\
Only what the mirror job pinned (disk images, talosctl binaries, installers and images with
their signatures, the factory's documents) is removed; serve's own cache is left to
--cache-max-size, schematics stay. A blob another kept image still names stays. Refused
(exit 1, nothing removed) while the store does not hold everything the config names.

Examples:
  # a Talos release dropped from mirror.yaml: what would go, then remove it
  talos-gen mirror prune --config mirror.yaml --cache-dir /var/cache/talos-gen --dry-run
  talos-gen mirror prune --config mirror.yaml --cache-dir /var/cache/talos-gen

  # nightly: sync, then prune only when the sync succeeded
  talos-gen mirror sync --config mirror.yaml --cache-dir /var/cache/talos-gen --prune";

const CERT_EXAMPLES: &str = "\
Validity: the CA 3650 days (ten years), the server certificate 825 days; both ECDSA P-256.
The keys are written mode 0600.

Examples:
  # a CA and a certificate for the name and address the workers use
  talos-gen mirror cert --output-dir tls --name talos-gen.example --name 10.0.0.10
  talos-gen serve --listen :8443 --tls-cert tls/tls.crt --tls-key tls/tls.key

  # renew the server certificate from the same CA (the workers keep trusting ca.crt)
  mv tls/tls.crt tls/tls.crt.old; mv tls/tls.key tls/tls.key.old
  talos-gen mirror cert --output-dir tls --name talos-gen.example --name 10.0.0.10

  # the workers trust it
  talos-gen machineconfig ... --air-gap-mirror https://talos-gen.example:8443 --mirror-ca tls/ca.crt";

#[derive(Debug, Subcommand)]
pub enum MirrorCommand {
    /// Fetch everything the config names into the store.
    #[command(after_help = SYNC_EXAMPLES)]
    Sync {
        /// The mirror config (YAML: schematics, talosVersions, images, installers, extraImages, workers, talosctl, pxe, sourceImages, upgrades; see below).
        #[arg(long, env = "TALOS_GEN_CONFIG", value_name = "FILE", value_parser = super::common::file_flag)]
        config: String,
        #[command(flatten)]
        at: super::common::MirrorStoreArgs,
        /// The upstream Image Factory.
        #[arg(
            long,
            env = "TALOS_GEN_FACTORY_URL",
            default_value = crate::compose::DEFAULT_FACTORY_URL,
            value_name = "URL"
        )]
        factory_url: String,
        /// Upstream OCI registry for installer images (default: the factory URL).
        #[arg(long, env = "TALOS_GEN_REGISTRY_URL", value_name = "URL")]
        registry_url: Option<String>,
        /// Upstreams for extraImages registries, ns=URL; repeatable or comma-separated (default: https://<host>).
        #[arg(
            long,
            env = "TALOS_GEN_MIRROR_UPSTREAM",
            value_name = "NS=URL",
            value_delimiter = ','
        )]
        mirror_upstream: Vec<String>,
        /// Items fetched at once.
        #[arg(
            long,
            env = "TALOS_GEN_CONCURRENCY",
            default_value_t = 4,
            value_name = "N"
        )]
        concurrency: usize,
        #[command(flatten)]
        upstream: super::common::UpstreamArgs,
        /// A cosign public key (PEM); repeatable. Every installer and image
        /// must then carry a cosign signature one of the keys verifies
        /// (default: none; signatures found are mirrored, not checked).
        #[arg(
            long,
            env = "TALOS_GEN_COSIGN_KEY",
            value_name = "FILE",
            value_delimiter = ' ',
            value_parser = super::common::file_flag
        )]
        cosign_key: Vec<String>,
        /// Support-matrix data file for `workers:` (default: the embedded one).
        #[arg(long, env = "TALOS_GEN_MATRIX", value_name = "FILE", value_parser = super::common::file_flag)]
        matrix: Option<String>,
        /// After a sync with no failure, remove what the mirror job stored
        /// and the config no longer names (as `mirror prune`); a failed
        /// sync never prunes (default: false).
        #[arg(long, env = "TALOS_GEN_PRUNE")]
        prune: bool,
        /// With --prune: list what would go, remove nothing (default: false).
        #[arg(long, requires = "prune")]
        dry_run: bool,
    },
    /// Remove what the mirror job stored and the config no longer names.
    #[command(after_help = PRUNE_EXAMPLES)]
    Prune {
        /// The mirror config whose items are kept.
        #[arg(long, env = "TALOS_GEN_CONFIG", value_name = "FILE", value_parser = super::common::file_flag)]
        config: String,
        #[command(flatten)]
        at: super::common::MirrorStoreArgs,
        /// List what would go and how many bytes; remove nothing (default: false).
        #[arg(long)]
        dry_run: bool,
        /// Support-matrix data file for `workers:` (default: the embedded one).
        #[arg(long, env = "TALOS_GEN_MATRIX", value_name = "FILE", value_parser = super::common::file_flag)]
        matrix: Option<String>,
    },
    /// Print what a sync would fetch (workers expanded); no network.
    Plan {
        /// The mirror config, as for `mirror sync`.
        #[arg(long, env = "TALOS_GEN_CONFIG", value_name = "FILE", value_parser = super::common::file_flag)]
        config: String,
        /// Print the plan as JSON (default: text).
        #[arg(long)]
        json: bool,
        /// Support-matrix data file for `workers:` (default: the embedded one).
        #[arg(long, env = "TALOS_GEN_MATRIX", value_name = "FILE", value_parser = super::common::file_flag)]
        matrix: Option<String>,
    },
    /// Re-hash every stored object against its digest.
    Verify {
        #[command(flatten)]
        at: super::common::MirrorStoreArgs,
    },
    /// Write the store (or what a config names) for the other side of an air gap:
    /// one tar file for `mirror import`, a static HTTP tree, or an OCI image layout.
    #[command(after_help = EXPORT_EXAMPLES)]
    Export {
        #[command(flatten)]
        at: super::common::MirrorStoreArgs,
        /// Where to write: the tar file (`tar`), or a directory (`http`, `oci`)
        /// that is absent, empty, or a previous export of that format.
        #[arg(long, value_name = "PATH")]
        output: String,
        /// tar: one file for `mirror import`; http: `image/<schematic>/<version>/<asset>`
        /// with `.sha256` beside it (and schematics, the factory's documents) for any HTTP
        /// file server at talos.imageFactoryURL; oci: an OCI image layout of the
        /// installers and images (skopeo copy oci:PATH:REF, ctr import).
        #[arg(
            long,
            env = "TALOS_GEN_FORMAT",
            value_enum,
            default_value = "tar",
            value_name = "FORMAT"
        )]
        format: crate::mirror::Format,
        /// Export only what this mirror config names (default: everything stored).
        #[arg(long, env = "TALOS_GEN_CONFIG", value_name = "FILE", value_parser = super::common::file_flag)]
        config: Option<String>,
    },
    /// Write a CA and a server certificate for `serve --tls-cert/--tls-key`.
    #[command(after_help = CERT_EXAMPLES)]
    Cert {
        /// Where ca.crt, ca.key, tls.crt and tls.key go, created when missing (required).
        /// With ca.crt and ca.key already there, only a new tls.crt/tls.key
        /// is issued from that CA; an existing tls.crt or tls.key is refused
        /// (exit 1): no file is ever overwritten.
        #[arg(long, value_name = "DIR", value_parser = super::common::dir_flag)]
        output_dir: String,
        /// A host name or IP address the mirror is reached at (a subject
        /// alternative name of tls.crt); repeatable or comma-separated.
        #[arg(
            long,
            value_name = "HOST_OR_IP",
            required = true,
            value_delimiter = ','
        )]
        name: Vec<String>,
    },
    /// Verify and add the objects of an exported tar file.
    Import {
        /// A tar file written by `talos-gen mirror export`.
        #[arg(value_name = "FILE.tar", value_parser = super::common::file_flag)]
        file: String,
        #[command(flatten)]
        at: super::common::MirrorStoreArgs,
    },
}

/// A stopped sync's record for the status page is written within this,
/// or not at all.
const INTERRUPTED_WRITE: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a stopped run waits for its tasks to end (blocking ones, a
/// commit's fsync) before it exits; together with [`INTERRUPTED_WRITE`]
/// well inside the 10 s a signal's answer is promised in.
const INTERRUPTED_DRAIN: std::time::Duration = std::time::Duration::from_secs(3);

/// SIGINT and SIGTERM, caught from the start of a sync or an import so
/// that either ends it with one line saying what was stored (exit 130,
/// 143, as the shell reports a process the signal ended).
struct Signals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Signals {
    fn new(rt: &tokio::runtime::Runtime) -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let _in = rt.enter();
        Signals(
            signal(SignalKind::interrupt())
                .ok()
                .zip(signal(SignalKind::terminate()).ok()),
        )
    }

    /// The first of them to come: its name and the exit code it means.
    async fn first(&mut self) -> (&'static str, i32) {
        match &mut self.0 {
            Some((int, term)) => tokio::select! {
                _ = int.recv() => ("SIGINT", 130),
                _ = term.recv() => ("SIGTERM", 143),
            },
            None => std::future::pending().await,
        }
    }
}

/// The bound on every S3 call of verify, export and import (sync and
/// serve take `--upstream-timeout`).
const STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One line per key that goes (or would), then the total.
fn print_prune(r: &crate::mirror::PruneReport) {
    use crate::text::count;
    let human = crate::text::human_size;
    let verb = if r.dry_run { "would remove" } else { "removed" };
    for (k, size) in &r.keys {
        let _ = outln!("{verb} {k} ({})", human(*size));
    }
    let _ = outln!(
        "mirror prune{}: {} {}, {} ({}) {}; {} kept",
        if r.dry_run { " --dry-run" } else { "" },
        count(r.keys.len() as u64, "key", "keys"),
        if r.dry_run {
            "would be removed"
        } else {
            "removed"
        },
        count(r.objects as u64, "object", "objects"),
        human(r.bytes),
        if r.dry_run { "would be freed" } else { "freed" },
        count(r.kept as u64, "mirrored key", "mirrored keys")
    );
}

/// The config (with `--matrix` for `workers:`); its notes go to stderr.
fn load_config(path: &str, matrix: Option<&str>) -> crate::Result<crate::mirror::Config> {
    let m = crate::compose::load_matrix(matrix.map(std::path::Path::new))?;
    let cfg = crate::mirror::Config::load_with(std::path::Path::new(path), &m)?;
    for n in &cfg.notes {
        eprintln!("talos-gen: mirror: {n}");
    }
    Ok(cfg)
}

pub fn run(args: MirrorArgs) -> crate::Result<i32> {
    use crate::mirror;
    use std::path::Path;
    // The job reports every item itself (one line each, between the
    // progress bars); the service's info and warn lines would repeat them.
    // Those that are logged are written around the bars, never across them.
    super::serve::init_tracing_with("text", "error", crate::mirror::progress::log_writer);
    let rt = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| crate::Error::io("starting the runtime", e))
    };
    match args.command {
        MirrorCommand::Sync {
            config,
            at,
            factory_url,
            registry_url,
            mirror_upstream,
            concurrency,
            upstream,
            cosign_key,
            matrix,
            prune,
            dry_run,
        } => {
            if concurrency == 0 {
                return Err(crate::Error::bad_input("--concurrency: must be at least 1"));
            }
            let cfg = sync_config(&config, matrix.as_deref(), &cosign_key)?;
            let opts = mirror::SyncOptions {
                factory_url,
                registry_url,
                mirror_upstreams: crate::registry::MirrorTable::parse(&mirror_upstream)?,
                concurrency,
                output: mirror::Output::auto(),
                limits: upstream.limits(),
            };
            let loc = at.location(upstream.upstream_timeout)?;
            let rt = rt()?;
            let mut signals = Signals::new(&rt);
            let caught = std::cell::Cell::new(None);
            let report = rt.block_on(async {
                let stop = async {
                    caught.set(Some(signals.first().await));
                };
                mirror::sync_until(&cfg, &loc, &opts, stop).await
            })?;
            if report.interrupted {
                let (name, code) = caught.get().unwrap_or(("a signal", 130));
                // The run as the status page shows it, if the store answers
                // at once; then the fills in flight are dropped with the
                // runtime (their temp files with them).
                record_interrupted(&rt, &loc, &report);
                rt.shutdown_timeout(INTERRUPTED_DRAIN);
                eprintln!("talos-gen: {}", report.interrupted_summary(name));
                return Ok(code);
            }
            // Every item ended: a signal now (during --prune or the status
            // record) ends the run at once, saying so.
            rt.spawn(async move {
                let (name, code) = signals.first().await;
                eprintln!(
                    "talos-gen: mirror sync: interrupted by {name} after every item ended (each listed above); --prune and the status page's record may not be done"
                );
                std::process::exit(code);
            });
            after_sync(&rt, &loc, &cfg, &report, prune.then_some(dry_run))
        }
        MirrorCommand::Prune {
            config,
            at,
            dry_run,
            matrix,
        } => run_prune(&config, &at, dry_run, matrix.as_deref(), rt),
        MirrorCommand::Plan {
            config,
            json,
            matrix,
        } => {
            let cfg = load_config(&config, matrix.as_deref())?;
            if json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&cfg.plan_json()).unwrap_or_default()
                )?;
            } else {
                out!("{}", cfg.plan_text())?;
            }
            Ok(0)
        }
        MirrorCommand::Verify { at } => {
            let loc = at.location(STORE_TIMEOUT)?;
            Ok(print_verify(&mirror::verify(&loc)?))
        }
        MirrorCommand::Export {
            at,
            output,
            format,
            config,
        } => run_export(&at, &output, format, config.as_deref()),
        MirrorCommand::Cert { output_dir, name } => {
            let r = mirror::cert::issue(Path::new(&output_dir), &name)?;
            print_cert(&r, &name, &output_dir);
            Ok(0)
        }

        MirrorCommand::Import { file, at } => run_import(&file, &at, rt),
    }
}

/// `mirror export`: a tar bundle, or a tree (`--format http|oci`).
fn run_export(
    at: &super::common::MirrorStoreArgs,
    output: &str,
    format: crate::mirror::Format,
    config: Option<&str>,
) -> crate::Result<i32> {
    use crate::mirror;
    use std::path::Path;
    let cfg = config
        .map(|c| mirror::Config::load(Path::new(c)))
        .transpose()?;
    let loc = at.location(STORE_TIMEOUT)?;
    if format != mirror::Format::Tar {
        let r = mirror::export_tree(&loc, Path::new(output), cfg.as_ref(), format)?;
        print_export_tree(&r, format, output);
        return Ok(0);
    }
    let r = mirror::export(&loc, Path::new(output), cfg.as_ref())?;
    let _ = outln!(
        "mirror export: {} keys, {} objects ({}) written to {output}",
        r.keys,
        r.objects,
        crate::text::human_size(r.bytes)
    );
    Ok(0)
}

/// After an interrupted sync: the run as the status page shows it, if the
/// store answers at once (within [`INTERRUPTED_WRITE`]).
fn record_interrupted(
    rt: &tokio::runtime::Runtime,
    loc: &crate::store::Location,
    report: &crate::mirror::SyncReport,
) {
    use crate::mirror;
    rt.block_on(async {
        let l = loc.clone();
        let write = async {
            let store = tokio::task::spawn_blocking(move || mirror::open_store(&l))
                .await
                .ok()?
                .ok()?;
            let mut status = mirror::report::SyncStatus::from_report(report);
            status.ok = false;
            mirror::report::write(&store, &status).await.ok()
        };
        tokio::time::timeout(INTERRUPTED_WRITE, write)
            .await
            .ok()
            .flatten()
    });
}

/// `mirror prune`: remove what the config no longer names, then update the
/// status page's holdings.
fn run_prune(
    config: &str,
    at: &super::common::MirrorStoreArgs,
    dry_run: bool,
    matrix: Option<&str>,
    rt: impl FnOnce() -> crate::Result<tokio::runtime::Runtime>,
) -> crate::Result<i32> {
    use crate::mirror;
    let cfg = load_config(config, matrix)?;
    let loc = at.location(STORE_TIMEOUT)?;
    // A dry run changes nothing, not even the leftovers an open sweeps.
    let store = if dry_run {
        mirror::look_at_store(&loc)?
    } else {
        mirror::open_store(&loc)?
    };
    let rt = rt()?;
    let r = rt.block_on(mirror::prune(&store, &cfg, dry_run))?;
    print_prune(&r);
    // The status page's per-release holdings follow.
    let last = if dry_run {
        Ok(None)
    } else {
        mirror::report::read(&store)
    };
    match last {
        Ok(Some(mut status)) => {
            status.releases = mirror::holdings(&store, &cfg);
            if let Err(e) = rt.block_on(mirror::report::write(&store, &status)) {
                eprintln!("talos-gen: mirror prune: updating the status page's holdings: {e}");
            }
        }
        Err(e) => eprintln!("talos-gen: mirror prune: the status page's holdings not updated: {e}"),
        Ok(None) => {}
    }
    Ok(0)
}

/// `mirror import`: read a bundle into the store, stopped by a signal.
fn run_import(
    file: &str,
    at: &super::common::MirrorStoreArgs,
    rt: impl FnOnce() -> crate::Result<tokio::runtime::Runtime>,
) -> crate::Result<i32> {
    use crate::mirror;
    use std::path::Path;
    let loc = at.location(STORE_TIMEOUT)?;
    let started = std::time::Instant::now();
    let rt = rt()?;
    let mut signals = Signals::new(&rt);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caught = std::sync::Arc::new(std::sync::OnceLock::new());
    let watch = {
        let (stop, caught) = (stop.clone(), caught.clone());
        rt.spawn(async move {
            let _ = caught.set(signals.first().await);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    let r = rt.block_on(mirror::import_until(Path::new(file), &loc, &stop, true))?;
    watch.abort();
    if r.interrupted.is_some() {
        let (name, code) = caught.get().copied().unwrap_or(("a signal", 130));
        rt.shutdown_timeout(INTERRUPTED_DRAIN);
        eprintln!("talos-gen: {}", r.interrupted_summary(name));
        return Ok(code);
    }
    Ok(report_import(&rt, &loc, file, started.elapsed(), &r))
}

/// `mirror sync`'s config: the file (nothing to mirror is bad input) and
/// the `--cosign-key` files.
fn sync_config(
    config: &str,
    matrix: Option<&str>,
    cosign_key: &[String],
) -> crate::Result<crate::mirror::Config> {
    let mut cfg = load_config(config, matrix)?;
    if cfg.items().is_empty() && cfg.schematics.iter().all(|s| s.canonical.is_none()) {
        return Err(crate::Error::bad_input(format!(
            "--config: {config}: nothing to mirror (no workers, images, installers or extraImages)"
        )));
    }
    for k in cosign_key {
        let what = format!("--cosign-key {k}");
        let text = super::read_input(k, "--cosign-key")?;
        cfg.cosign_keys
            .push(crate::cosign::PublicKey::from_pem(&text, &what)?);
    }
    Ok(cfg)
}

/// After `mirror sync`: its summary, `--prune` (`Some(dry_run)`) when
/// nothing failed, and the result kept in the store for serve's status
/// page (a failure there does not undo the sync). The exit code.
fn after_sync(
    rt: &tokio::runtime::Runtime,
    loc: &crate::store::Location,
    cfg: &crate::mirror::Config,
    report: &crate::mirror::SyncReport,
    prune: Option<bool>,
) -> crate::Result<i32> {
    use crate::mirror;
    let _ = outln!("{}", report.summary());
    let failed = report.failed();
    // Each failed item was printed once, with its reason, as it ended.
    if !failed.is_empty() {
        eprintln!(
            "talos-gen: mirror sync: {} of {} items and factory documents failed (each listed above with its reason)",
            failed.len(),
            report.items.len() + report.factory.len()
        );
    }
    let store = mirror::open_store(loc)?;
    let mut pruned = Ok(());
    match prune {
        Some(dry_run) if failed.is_empty() => {
            pruned = rt
                .block_on(mirror::prune(&store, cfg, dry_run))
                .map(|r| print_prune(&r));
        }
        Some(_) => eprintln!("talos-gen: mirror sync: --prune: the sync failed; nothing pruned"),
        None => {}
    }
    let mut status = mirror::report::SyncStatus::from_report(report);
    status.releases = mirror::holdings(&store, cfg);
    if let Err(e) = rt.block_on(mirror::report::write(&store, &status)) {
        eprintln!("talos-gen: mirror sync: keeping the result for the status page: {e}");
    }
    pruned?;
    Ok(if failed.is_empty() { 0 } else { 1 })
}

/// `mirror verify`'s lines; the exit code (1 when anything was dropped or
/// could not be read whole).
fn print_verify(r: &crate::mirror::VerifyReport) -> i32 {
    let _ = outln!(
        "mirror verify: {} objects ({}) checked, {} bad, {} entries dropped on open{}{}",
        r.objects,
        crate::text::human_size(r.bytes),
        r.bad.len(),
        r.dropped_at_open.len(),
        if r.unread.is_empty() {
            String::new()
        } else {
            format!(", {} not read (kept)", r.unread.len())
        },
        if r.sums_written > 0 {
            format!(", chunk checksums written for {}", r.sums_written)
        } else {
            String::new()
        }
    );
    for d in &r.dropped_at_open {
        eprintln!(
            "talos-gen: mirror verify: {d}; entry removed, run mirror sync to fetch it again"
        );
    }
    for b in &r.bad {
        let done = if b.removed {
            "removed, run mirror sync to fetch it again"
        } else {
            "NOT removed: still in the store after the drop (the store lock or the delete failed, see the log above, or another process stored it again); run mirror verify again"
        };
        eprintln!(
            "talos-gen: mirror verify: bad object sha256:{} ({}): {}; {done}",
            b.digest,
            b.keys.join(", "),
            b.reason
        );
    }
    for u in &r.unread {
        eprintln!(
            "talos-gen: mirror verify: object sha256:{} ({}) could not be read whole: {}; NOT removed (nothing is known of its bytes): run mirror verify again",
            u.digest,
            u.keys.join(", "),
            u.reason
        );
    }
    if r.all_checked_whole() { 0 } else { 1 }
}

/// `mirror export --format http|oci`'s lines.
fn print_export_tree(r: &crate::mirror::TreeReport, format: crate::mirror::Format, output: &str) {
    use crate::mirror;
    for l in &r.left_out {
        eprintln!("talos-gen: mirror export: {l}");
    }
    let what = match format {
        mirror::Format::Oci => "image references",
        _ => "artifacts",
    };
    let _ = outln!(
        "mirror export --format {}: {} {what}, {} files ({}) in {output}; {} copied ({}), {} unchanged, {} removed",
        format.name(),
        r.items,
        r.files,
        crate::text::human_size(r.bytes),
        r.copied,
        crate::text::human_size(r.copied_bytes),
        r.files - r.copied,
        r.removed
    );
}

/// `mirror cert`'s line.
fn print_cert(r: &crate::mirror::cert::CertReport, name: &[String], output_dir: &str) {
    let until = r
        .not_after
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    let _ = outln!(
        "mirror cert: {} for {} (valid until {until}){}",
        r.written
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        name.join(", "),
        if r.reused_ca {
            format!(", issued by the CA already in {output_dir}")
        } else {
            String::new()
        }
    );
}

/// `mirror import`'s lines, and its result recorded in the store (shown by
/// serve's status page and /metrics like a sync). The exit code.
fn report_import(
    rt: &tokio::runtime::Runtime,
    loc: &crate::store::Location,
    file: &str,
    took: std::time::Duration,
    r: &crate::mirror::ImportReport,
) -> i32 {
    use crate::mirror;
    let _ = outln!("mirror import: {}", r.summary());
    let written = rt.block_on(mirror::report::write_import(loc, r, file, took));
    if let Err(e) = written {
        eprintln!("talos-gen: mirror import: recording the result in the store: {e}");
    }
    for b in &r.bad {
        eprintln!("talos-gen: mirror import: {b}; refused");
    }
    for k in &r.missing {
        eprintln!("talos-gen: mirror import: {k}: its object is not in the file; not imported");
    }
    if r.bad.is_empty() && r.missing.is_empty() {
        0
    } else {
        1
    }
}
