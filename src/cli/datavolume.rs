//! `talos-gen datavolume`: the CDI `DataVolume` of one pool's disk image,
//! its checksum read from the artifact's `.sha256` on the service.

use std::time::Duration;

use clap::Args;

use crate::datavolume::{self, Names, Request};
use crate::error::Error;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  talos-gen datavolume --base-url http://talos-gen.example:8080 --schematic cozystack \\\n    --talos-version v1.13.6 --name md0-disk --size 20Gi -o md0-disk.yaml\n  talos-gen datavolume --base-url https://talos-gen.example:8443 --cert-configmap talos-gen-ca \\\n    --schematic ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515 \\\n    --talos-version v1.13.6 --platform nocloud --arch arm64 --name md1-disk --size 10Gi \\\n    --storage-class replicated | kubectl apply -f -"
)]
pub struct DatavolumeArgs {
    /// The talos-gen service's base URL, as the cluster reaches it (e.g. https://talos-gen.example:8443).
    #[arg(long, value_name = "URL")]
    pub base_url: String,
    /// Schematic ID (64 hex), or the name of an embedded schematic (cozystack, vanilla).
    #[arg(long, value_name = "ID")]
    pub schematic: String,
    /// Talos release of the disk image (v1.13.6).
    #[arg(long, value_name = "VERSION")]
    pub talos_version: String,
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
    /// The longest wait for the .sha256 answer (the service answers it once
    /// the artifact is whole: after a cold cache, the whole download).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::common::duration_flag)]
    pub timeout: Duration,
    /// Write the DataVolume here, atomically (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<String>,
}

pub fn run(args: DatavolumeArgs) -> crate::Result<i32> {
    let req = Request {
        base_url: args.base_url,
        schematic: args.schematic,
        talos_version: args.talos_version,
        platform: Some(args.platform),
        arch: Some(args.arch),
        name: args.name,
        size: args.size,
        storage_class: args.storage_class,
        cert_configmap: args.cert_configmap,
    };
    let plan = datavolume::plan(&req, Names::Flags, &embedded_id)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the runtime", e))?;
    let sha = rt.block_on(datavolume::fetch_checksum(&plan, args.timeout))?;
    let text = plan.to_yaml(&sha);
    match &args.output {
        Some(path) => super::machineconfig::write_file(path, &text, "-o")?,
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
