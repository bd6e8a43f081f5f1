//! The boundary to the support matrix: is a (Talos, Kubernetes) pair
//! supported, which Kubernetes version a Talos minor defaults to, and which
//! kubelet patch Cozystack runs for a Kubernetes minor.
//!
//! TODO(matrix): switch these three functions to `crate::matrix` once it is
//! merged; they are the only calls this module makes into the matrix.

use crate::version::Version;

/// (Talos minor, lowest Kubernetes minor, highest Kubernetes minor,
/// default Kubernetes version) from `spec/talos-config.md`. For 1.14 the
/// code's minimum (1.32) is followed, not the docs' (1.33).
const TABLE: &[(u64, u64, u64, &str)] = &[
    (0, 21, 23, "1.23.6"),
    (1, 22, 24, "1.24.3"),
    (2, 23, 25, "1.25.5"),
    (3, 24, 26, "1.26.3"),
    (4, 25, 27, "1.27.4"),
    (5, 26, 28, "1.28.3"),
    (6, 24, 29, "1.29.7"),
    (7, 25, 30, "1.30.5"),
    (8, 26, 31, "1.31.4"),
    (9, 27, 32, "1.32.4"),
    (10, 28, 33, "1.33.6"),
    (11, 29, 34, "1.34.1"),
    (12, 30, 35, "1.35.4"),
    (13, 31, 36, "1.36.3"),
    (14, 32, 37, "1.37.0"),
];

fn row(talos: &Version) -> Option<&'static (u64, u64, u64, &'static str)> {
    if talos.major != 1 {
        return None;
    }
    TABLE.iter().find(|r| r.0 == talos.minor)
}

/// `Ok(())` when the support matrix runs `k8s` on `talos`, otherwise the
/// refusal naming both versions and the supported range.
pub fn check_pair(talos: &Version, k8s: &Version) -> Result<(), String> {
    let Some(&(_, lo, hi, _)) = row(talos) else {
        return Err(format!(
            "Talos {talos} is not in the support matrix (known: v1.0 through v1.{})",
            TABLE.last().map(|r| r.0).unwrap_or(0)
        ));
    };
    if k8s.major == 1 && (lo..=hi).contains(&k8s.minor) {
        Ok(())
    } else {
        Err(format!(
            "Kubernetes {k8s} is not supported by Talos {talos}: supported Kubernetes versions are v1.{lo} through v1.{hi}"
        ))
    }
}

/// The Kubernetes version a Talos minor generates by default (its last patch).
pub fn default_kubernetes(talos: &Version) -> Option<&'static str> {
    row(talos).map(|r| r.3)
}

/// Cozystack's `files/versions.yaml`: Kubernetes minor -> kubelet version.
pub const KUBELET_VERSIONS: &[(&str, &str)] = &[
    ("v1.35", "v1.35.6"),
    ("v1.34", "v1.34.9"),
    ("v1.33", "v1.33.13"),
    ("v1.32", "v1.32.13"),
    ("v1.31", "v1.31.14"),
];

/// The kubelet version Cozystack runs for a Kubernetes minor (`v1.35`), or
/// the chart's refusal.
pub fn kubelet_patch(minor: &str) -> Result<&'static str, String> {
    KUBELET_VERSIONS
        .iter()
        .find(|(k, _)| *k == minor)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            // Helm's `keys` of a dict comes out sorted.
            let mut keys: Vec<&str> = KUBELET_VERSIONS.iter().map(|(k, _)| *k).collect();
            keys.sort();
            format!(
                "Kubernetes version {minor} is not supported, allowed versions are [{}]",
                keys.join(" ")
            )
        })
}

/// The Cozystack chart's own Talos guard (`kubernetes-nodes` chart):
/// Talos minor -> allowed Kubernetes minors. A minor missing from the
/// table skips the check, as the chart does.
pub const CHART_TALOS_GUARD: &[(&str, &[&str])] = &[(
    "v1.13",
    &["v1.31", "v1.32", "v1.33", "v1.34", "v1.35", "v1.36"],
)];
