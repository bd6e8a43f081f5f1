//! The boundary to the support matrix: is a (Talos, Kubernetes) pair
//! supported, which Kubernetes version a Talos minor defaults to, and which
//! kubelet patch Cozystack runs for a Kubernetes minor.
//! These are the only calls this module makes into `crate::matrix`.

use crate::matrix::Matrix;
use crate::version::Version;
use crate::{Error, Result};

/// `Ok(())` when the support matrix runs `k8s` on `talos`, otherwise the
/// matrix's refusal naming both versions and the supported range.
pub fn check_pair(matrix: &Matrix, talos: &Version, k8s: &Version) -> Result<()> {
    matrix.check(talos, k8s).map(drop)
}

/// The Kubernetes version a Talos minor generates by default (its last patch).
pub fn default_kubernetes(matrix: &Matrix, talos: &Version) -> Option<String> {
    matrix.default_kubernetes(talos).ok().map(|v| v.to_string())
}

/// The newest Talos release of `talos`'s minor the matrix knows.
pub fn newest_release(matrix: &Matrix, talos: &Version) -> Option<String> {
    matrix.newest_release(talos).map(|v| v.to_string())
}

/// The kubelet version Cozystack runs for a Kubernetes minor, or the
/// refusal, worded as every version refusal is (`... Supported versions:
/// v1.31, v1.32, ...`). `--force` cannot help here (there is no kubelet
/// release to write), so the message says what does: a full version.
pub fn kubelet_patch(matrix: &Matrix, k8s: &Version) -> Result<String> {
    matrix
        .kubelet_patch(k8s)
        .map(|v| v.to_string())
        .ok_or_else(|| {
            let keys: Vec<String> = matrix.kubelet_table().map(|(k, _)| k).collect();
            Error::refused(format!(
                "Kubernetes {} is not supported by the Cozystack profile (its kubelet table). Supported versions: {}. --force cannot pick a kubelet release for {}: give a full --kubernetes-version ({}.Z) to write one anyway",
                k8s.minor_string(),
                keys.join(", "),
                k8s.minor_string(),
                k8s.minor_string()
            ))
        })
}

/// The sandbox (pause) image Talos `talos` pulls (the per-release image
/// table; a bare minor or a newer release gets its minor's newest known
/// release), or the table's refusal.
pub fn pause_image(matrix: &Matrix, talos: &Version) -> Result<String> {
    Ok(matrix.images().lookup(talos)?.release.pause.clone())
}

/// The Cozystack chart's own Talos guard (`kubernetes-nodes` chart):
/// Talos minor -> allowed Kubernetes minors. A minor missing from the
/// table skips the check, as the chart does.
pub const CHART_TALOS_GUARD: &[(&str, &[&str])] = &[(
    "v1.13",
    &["v1.31", "v1.32", "v1.33", "v1.34", "v1.35", "v1.36"],
)];
