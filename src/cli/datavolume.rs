//! `talos-gen datavolume`: the CDI `DataVolume` of one pool's disk image,
//! its checksum read from the artifact's `.sha256` on the service; with
//! `--golden` also the `DataSource` naming it; with `--clone-from` a worker
//! disk cloned from such a DataSource. With `--profile cozystack`,
//! Cozystack's catalog golden and a worker disk cloning it; `--cdi-version`
//! the CDI whose fields are written; the storage, when left out, from the
//! raw disk's size (read from the image's xz index on the service). The
//! `catalog` and `check` subcommands are [`super::datavolume_catalog`]'s.

use std::time::Duration;

use clap::Args;

use crate::datavolume::{self, CloneRequest, Names, Profile, Request};
use crate::error::Error;

#[derive(Debug, Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  talos-gen datavolume --base-url http://talos-gen.example:8080 --schematic cozystack \\\n    --talos-version v1.13.6 --name md0-disk --size 20Gi -o md0-disk.yaml\n  talos-gen datavolume --base-url https://talos-gen.example:8443 --cert-configmap talos-gen-ca \\\n    --schematic ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515 \\\n    --talos-version v1.13.6 --platform nocloud --arch arm64 --name md1-disk --size 10Gi \\\n    --storage-class replicated | kubectl apply -f -\n\n  # the golden layout: one import per schematic and release into a shared namespace ...\n  talos-gen datavolume --golden --namespace cozy-public --base-url http://talos-gen.example:8080 \\\n    --schematic cozystack --talos-version v1.13.6 --name talos-v1.13.6-cozystack --size 20Gi\n  # ... and each worker disk a clone of it (no download)\n  talos-gen datavolume --clone-from cozy-public/talos-v1.13.6-cozystack --name md0-disk-0 --size 20Gi\n\n  # Cozystack's catalog: its golden talos-worker-<schematic>-<version> in cozy-public (size from the image) ...\n  talos-gen datavolume --golden --profile cozystack --base-url http://talos-gen.example:8080 \\\n    --schematic cozystack --talos-version v1.13.6\n  # ... a worker disk cloning it (spec.source.pvc), and the catalog's values for an upgrade\n  talos-gen datavolume --clone-from cozy-public/talos-worker-<schematic>-v1.13.6 --profile cozystack --name md0-disk-0\n  talos-gen datavolume catalog --from-talos v1.11.6 --from-kubernetes 1.31.4 --to-talos v1.14.6 \\\n    --to-kubernetes 1.36.3 --base-url http://talos-gen.example:8080"
)]
pub struct DatavolumeArgs {
    #[command(subcommand)]
    pub command: Option<Box<super::datavolume_catalog::DatavolumeCommand>>,
    /// The talos-gen service's base URL, as the cluster reaches it (e.g. https://talos-gen.example:8443); (required) unless --clone-from.
    #[arg(long, value_name = "URL", required_unless_present = "clone_from")]
    pub base_url: Option<String>,
    /// Schematic ID (64 hex), or the name of an embedded schematic (cozystack, vanilla); (required) unless --clone-from.
    #[arg(long, value_name = "ID", required_unless_present = "clone_from")]
    pub schematic: Option<String>,
    /// Talos release of the disk image (v1.13.6); (required) unless --clone-from.
    #[arg(long, value_name = "VERSION", required_unless_present = "clone_from")]
    pub talos_version: Option<String>,
    /// Platform of the disk image (default: openstack).
    #[arg(long, value_name = "P")]
    pub platform: Option<String>,
    /// Architecture of the disk image, amd64 or arm64 (default: amd64).
    #[arg(long, value_name = "ARCH")]
    pub arch: Option<String>,
    /// Name of the DataVolume (and of the PVC CDI makes); (required) but with --golden --profile cozystack (the catalog's name).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Storage request, a Kubernetes quantity (20Gi), at least the raw disk's uncompressed size (default: that size plus a tenth, at least 256Mi, rounded up to a whole Gi; for a --clone-from worker disk: required, or the chart's 20Gi with --profile cozystack).
    #[arg(long, value_name = "SIZE")]
    pub size: Option<String>,
    /// StorageClass of the volume (default: the cluster's default class).
    #[arg(long, value_name = "SC")]
    pub storage_class: Option<String>,
    /// ConfigMap holding the CA of an HTTPS base URL (CDI's certConfigMap; default: none).
    #[arg(long = "cert-configmap", value_name = "NAME")]
    pub cert_configmap: Option<String>,
    /// metadata.namespace of the documents (default: none, the namespace they are applied in); --golden needs it.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// The golden image: the import in --namespace and a CDI DataSource there naming its PVC, for worker disks to clone; with --profile cozystack, the catalog's golden talos-worker-<schematic>-<version> in cozy-public.
    #[arg(long, default_value = "false", value_name = "BOOL", action = clap::ArgAction::Set, value_parser = super::common::BoolFlag, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub golden: bool,
    /// Whose layout: cozystack (Cozystack's worker image catalog: its golden DataVolume, worker disks cloning it with spec.source.pvc) (default: talos-gen's own, a DataSource).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// The CDI release the cluster runs: fields only where it has them (spec.source.http.checksum from v1.65.0).
    #[arg(long, value_name = "VERSION", default_value = datavolume::cdi::DEFAULT)]
    pub cdi_version: String,
    /// A worker disk cloned from the golden image's DataSource NS/NAME: spec.sourceRef, no download, no checksum (default: none, an import).
    #[arg(long, value_name = "NS/NAME", conflicts_with_all = ["base_url", "schematic", "talos_version", "cert_configmap", "golden"])]
    pub clone_from: Option<String>,
    /// The longest wait for the .sha256 answer (the service answers it once
    /// the artifact is whole: after a cold cache, the whole download).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::common::duration_flag)]
    pub timeout: Duration,
    /// Write the documents here, atomically (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<String>,
}

pub fn run(args: DatavolumeArgs) -> crate::Result<i32> {
    if let Some(cmd) = args.command {
        return super::datavolume_catalog::run(*cmd);
    }
    let profile = match args.profile.as_deref() {
        Some(p) => Profile::parse(p, "--profile")?,
        None => Profile::Plain,
    };
    if let Some(clone_from) = args.clone_from {
        let plan = datavolume::clone_plan(
            &CloneRequest {
                clone_from,
                name: args.name.unwrap_or_default(),
                size: args.size.unwrap_or_default(),
                storage_class: args.storage_class,
                namespace: args.namespace,
                profile,
            },
            Names::Flags,
        )?;
        return write(args.output.as_deref(), &plan.to_yaml());
    }
    // A bare minor (`v1.13`) is the newest release of it the support
    // matrix knows, as `machineconfig` resolves one; stderr says which.
    let (talos_version, note) = match args.talos_version.as_deref() {
        Some(t) => crate::matrix::Matrix::embedded().release_of(t, "--talos-version")?,
        None => (String::new(), None),
    };
    if let Some(note) = note {
        eprintln!("talos-gen: {note}");
    }
    let req = Request {
        base_url: args.base_url.unwrap_or_default(),
        schematic: args.schematic.unwrap_or_default(),
        talos_version,
        platform: args.platform,
        arch: args.arch,
        name: args.name.unwrap_or_default(),
        size: args.size.unwrap_or_default(),
        storage_class: args.storage_class,
        cert_configmap: args.cert_configmap,
        namespace: args.namespace,
        golden: args.golden,
        profile,
        cdi_version: Some(args.cdi_version),
    };
    let plan = datavolume::plan(&req, Names::Flags, &embedded_id)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))?;
    // The checksum (the artifact whole on the service), then the raw disk's
    // size from its xz index (ranged reads of the tail).
    let (sha, raw) = rt.block_on(async {
        let sha = datavolume::fetch_checksum(&plan, args.timeout).await?;
        let raw = datavolume::size::fetch_raw_size(&plan.url, args.timeout).await?;
        Ok::<_, Error>((sha, raw))
    })?;
    let plan = plan.with_raw_size(raw, Names::Flags)?;
    write(args.output.as_deref(), &plan.to_yaml(&sha))
}

/// To `-o FILE` (atomically) or standard output.
fn write(output: Option<&str>, text: &str) -> crate::Result<i32> {
    match output {
        Some(path) => super::machineconfig::write_file(path, text, "-o")?,
        None => out!("{text}")?,
    }
    Ok(0)
}

/// The ID of an embedded schematic (`cozystack`).
fn embedded_id(name: &str) -> Option<String> {
    let (_, text) = crate::known_schematics::EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)?;
    crate::schematic::id_and_canonical(text)
        .ok()
        .map(|(id, _)| id)
}
