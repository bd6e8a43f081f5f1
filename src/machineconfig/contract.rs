//! Version contracts: what the generator writes for `--talos-version v1.X`.
//! Every gate lives in the one table below, read as "from v1.X on" (Talos'
//! `pkg/machinery/config/contract.go`, where each gate is
//! `contract.Greater(TalosVersion1_{X-1})`).

use crate::error::{Error, Result};
use crate::version::Version;

/// The one table of the Talos minors talos-gen writes, oldest first: each
/// with the Talos release whose published JSON schema its documents are
/// checked against (the reference data's `talos-schema/`; the minors before
/// 1.12 against 1.11.6's, the last schema that still describes
/// `machine.registries`). The parity and schema tests, and the data checks
/// (a matrix row, an image row, a golden config per minor), read this table:
/// adding a minor starts here (ARCHITECTURE.md, How to, "Add a Talos minor").
pub const CONTRACTS: &[(u64, &str)] = &[
    (3, "v1.11.6"),
    (4, "v1.11.6"),
    (5, "v1.11.6"),
    (6, "v1.11.6"),
    (7, "v1.11.6"),
    (8, "v1.11.6"),
    (9, "v1.11.6"),
    (10, "v1.11.6"),
    (11, "v1.11.6"),
    (12, "v1.12.11"),
    (13, "v1.13.9"),
    (14, "v1.14.0-rc.1"),
    // Talos main at ad8823176e75 (no v1.15 tag yet): its schema is the
    // reference data's config.schema.main-v1.15-dev.json, and its worker
    // goldens are byte-identical to 1.14's, so no gate opens at 15.
    (15, "v1.15-dev"),
];

/// The contracts this generator knows: the first and last of [`CONTRACTS`].
pub const OLDEST_MINOR: u64 = CONTRACTS[0].0;
pub const NEWEST_MINOR: u64 = CONTRACTS[CONTRACTS.len() - 1].0;

/// The minors of [`CONTRACTS`], oldest first.
pub fn minors() -> impl Iterator<Item = u64> {
    CONTRACTS.iter().map(|(m, _)| *m)
}

/// A behaviour that changed at one Talos minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `machine.kubelet.defaultRuntimeSeccompProfileEnabled: true`
    KubeletSeccompDefault,
    /// `machine.features.stableHostname: true` (legacy field, until the
    /// HostnameConfig document replaces it)
    StableHostname,
    /// `cluster.discovery.registries.kubernetes.disabled: true`
    KubernetesDiscoveryDisabled,
    /// `machine.kubelet.disableManifestsDirectory: true`
    ManifestsDirectoryDisabled,
    /// `machine.features.apidCheckExtKeyUsage: true`
    ApidCheckExtKeyUsage,
    /// `machine.features.diskQuotaSupport: true`
    DiskQuotaSupport,
    /// `machine.features.kubePrism {enabled: true, port: 7445}`
    KubePrism,
    /// host DNS enabled
    HostDns,
    /// `hostDNS.forwardKubeDNSToHost: true`
    ForwardKubeDnsToHost,
    /// `cluster.clusterName` on workers
    ClusterNameForWorkers,
    /// Registry mirrors as RegistryMirrorConfig/RegistryTLSConfig
    /// documents, a HostnameConfig document; `rbac`, `stableHostname`,
    /// `apidCheckExtKeyUsage` no longer written.
    MultidocNetwork,
    /// `install.grubUseUKICmdline: true`
    GrubUseUkiCmdline,
    /// The empty `machine.network: {}` is dropped; KubeSpan is a document.
    NoLegacyNetwork,
    /// Nameservers, search domains and static hosts are ResolverConfig and
    /// StaticHostConfig documents. Talos 1.12 introduced both kinds and its
    /// schema already drops `machine.network.{nameservers, searchDomains,
    /// extraHostEntries}`, so the replacement holds from 1.12 on.
    ResolverDocuments,
    /// Host DNS in the ResolverConfig document.
    HostDnsDocument,
    /// DiscoveryServiceConfig / DiscoveryIdentityConfig documents.
    DiscoveryDocuments,
    /// UnattendedInstallConfig instead of `machine.install`.
    UnattendedInstall,
    /// Kube*Config documents instead of `machine.kubelet`, `cluster.*`.
    MultidocKubernetes,
    /// EPHEMERAL VolumeConfig and FilesystemTrimConfig documents.
    FilesystemTrim,
    /// SecurityProfileConfig {workloadIsolation: true}.
    WorkloadIsolation,
    /// SysctlConfig instead of `machine.sysctls`.
    SysctlDocument,
    /// The ImageVerificationConfig document (cosign signature rules) exists.
    ImageVerification,
    /// talosctl's default installer is the factory's
    /// `metal-installer/<vanilla schematic>` (`ghcr.io/siderolabs/installer`
    /// is no longer published).
    FactoryInstaller,
}

/// The one table of gates: each holds from that minor on.
pub const GATES: &[(Gate, u64)] = &[
    (Gate::KubeletSeccompDefault, 2),
    (Gate::StableHostname, 2),
    (Gate::KubernetesDiscoveryDisabled, 2),
    (Gate::ManifestsDirectoryDisabled, 3),
    (Gate::ApidCheckExtKeyUsage, 3),
    (Gate::DiskQuotaSupport, 5),
    (Gate::KubePrism, 6),
    (Gate::HostDns, 7),
    (Gate::ForwardKubeDnsToHost, 8),
    (Gate::ClusterNameForWorkers, 8),
    (Gate::MultidocNetwork, 12),
    (Gate::GrubUseUkiCmdline, 12),
    (Gate::ResolverDocuments, 12),
    (Gate::NoLegacyNetwork, 13),
    (Gate::ImageVerification, 13),
    (Gate::HostDnsDocument, 14),
    (Gate::DiscoveryDocuments, 14),
    (Gate::UnattendedInstall, 14),
    (Gate::MultidocKubernetes, 14),
    (Gate::FilesystemTrim, 14),
    (Gate::WorkloadIsolation, 14),
    (Gate::SysctlDocument, 14),
    (Gate::FactoryInstaller, 14),
];

/// A version contract (`v1.X`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contract {
    pub minor: u64,
}

impl Contract {
    /// The contract of a Talos version; only the minors of [`CONTRACTS`] are known.
    pub fn from_version(v: &Version) -> Result<Contract> {
        if v.major != 1 || !(OLDEST_MINOR..=NEWEST_MINOR).contains(&v.minor) {
            return Err(Error::refused(format!(
                "--talos-version: no version contract for {v}: talos-gen writes v1.{OLDEST_MINOR} through v1.{NEWEST_MINOR}"
            )));
        }
        Ok(Contract { minor: v.minor })
    }

    pub fn has(&self, gate: Gate) -> bool {
        GATES
            .iter()
            .find(|(g, _)| *g == gate)
            .is_some_and(|(_, from)| self.minor >= *from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_table_is_one_run_of_minors() {
        let minors: Vec<u64> = minors().collect();
        let want: Vec<u64> = (OLDEST_MINOR..=NEWEST_MINOR).collect();
        assert_eq!(
            minors, want,
            "CONTRACTS must list every minor once, in order"
        );
        for (minor, schema) in CONTRACTS {
            let v = Version::parse_named(schema, "schema").unwrap();
            assert!(
                v.minor == *minor || (*minor < 12 && v.minor == 11),
                "v1.{minor}: {schema}"
            );
        }
        for (g, from) in GATES {
            assert!(
                *from <= NEWEST_MINOR,
                "{g:?} opens after the newest contract"
            );
        }
    }

    #[test]
    fn every_gate_once() {
        for (g, _) in GATES {
            assert_eq!(GATES.iter().filter(|(x, _)| x == g).count(), 1, "{g:?}");
        }
        let c = Contract { minor: 12 };
        assert!(c.has(Gate::MultidocNetwork));
        assert!(!c.has(Gate::NoLegacyNetwork));
    }
}
