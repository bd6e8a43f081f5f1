//! `talos-gen datavolume`: the CDI `DataVolume` of one pool's disk image,
//! its checksum read from the artifact's `.sha256` on the service; with
//! `--golden` also the `DataSource` naming it; with `--clone-from` a worker
//! disk cloned from such a DataSource.

use std::time::Duration;

use clap::Args;

use crate::datavolume::{self, CloneRequest, Names, Request};
use crate::error::Error;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  talos-gen datavolume --base-url http://talos-gen.example:8080 --schematic cozystack \\\n    --talos-version v1.13.6 --name md0-disk --size 20Gi -o md0-disk.yaml\n  talos-gen datavolume --base-url https://talos-gen.example:8443 --cert-configmap talos-gen-ca \\\n    --schematic ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515 \\\n    --talos-version v1.13.6 --platform nocloud --arch arm64 --name md1-disk --size 10Gi \\\n    --storage-class replicated | kubectl apply -f -\n\n  # the golden layout: one import per schematic and release into a shared namespace ...\n  talos-gen datavolume --golden --namespace cozy-public --base-url http://talos-gen.example:8080 \\\n    --schematic cozystack --talos-version v1.13.6 --name talos-v1.13.6-cozystack --size 20Gi\n  # ... and each worker disk a clone of it (no download)\n  talos-gen datavolume --clone-from cozy-public/talos-v1.13.6-cozystack --name md0-disk-0 --size 20Gi"
)]
pub struct DatavolumeArgs {
    /// The talos-gen service's base URL, as the cluster reaches it (e.g. https://talos-gen.example:8443); (required) unless --clone-from.
    #[arg(long, value_name = "URL", required_unless_present = "clone_from")]
    pub base_url: Option<String>,
    /// Schematic ID (64 hex), or the name of an embedded schematic (cozystack, vanilla); (required) unless --clone-from.
    #[arg(long, value_name = "ID", required_unless_present = "clone_from")]
    pub schematic: Option<String>,
    /// Talos release of the disk image (v1.13.6); (required) unless --clone-from.
    #[arg(long, value_name = "VERSION", required_unless_present = "clone_from")]
    pub talos_version: Option<String>,
    /// Platform of the disk image.
    #[arg(long, value_name = "P", default_value = datavolume::DEFAULT_PLATFORM)]
    pub platform: String,
    /// Architecture of the disk image (amd64, arm64).
    #[arg(long, value_name = "ARCH", default_value = datavolume::DEFAULT_ARCH)]
    pub arch: String,
    /// Name of the DataVolume (and of the PVC CDI makes).
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// Storage request, a Kubernetes quantity (20Gi).
    #[arg(long, value_name = "SIZE")]
    pub size: String,
    /// StorageClass of the volume (default: the cluster's default class).
    #[arg(long, value_name = "SC")]
    pub storage_class: Option<String>,
    /// ConfigMap holding the CA of an HTTPS base URL (CDI's certConfigMap; default: none).
    #[arg(long = "cert-configmap", value_name = "NAME")]
    pub cert_configmap: Option<String>,
    /// metadata.namespace of the documents (default: none, the namespace they are applied in); --golden needs it.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// The golden image: the import in --namespace and a CDI DataSource there naming its PVC, for worker disks to clone.
    #[arg(long, requires = "namespace", default_value = "false", value_name = "BOOL", action = clap::ArgAction::Set, value_parser = super::common::BoolFlag, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub golden: bool,
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
    if let Some(clone_from) = args.clone_from {
        let plan = datavolume::clone_plan(
            &CloneRequest {
                clone_from,
                name: args.name,
                size: args.size,
                storage_class: args.storage_class,
                namespace: args.namespace,
            },
            Names::Flags,
        )?;
        return write(args.output.as_deref(), &plan.to_yaml());
    }
    // A bare minor (`v1.13`) is the newest release of it the support
    // matrix knows, as `machineconfig` resolves one; stderr says which.
    let (talos_version, note) = crate::matrix::Matrix::embedded()
        .release_of(&args.talos_version.unwrap_or_default(), "--talos-version")?;
    if let Some(note) = note {
        eprintln!("talos-gen: {note}");
    }
    let req = Request {
        base_url: args.base_url.unwrap_or_default(),
        schematic: args.schematic.unwrap_or_default(),
        talos_version,
        platform: Some(args.platform),
        arch: Some(args.arch),
        name: args.name,
        size: args.size,
        storage_class: args.storage_class,
        cert_configmap: args.cert_configmap,
        namespace: args.namespace,
        golden: args.golden,
    };
    let plan = datavolume::plan(&req, Names::Flags, &embedded_id)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))?;
    let sha = rt.block_on(datavolume::fetch_checksum(&plan, args.timeout))?;
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
