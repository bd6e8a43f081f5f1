//! `talos-gen upgrade plan` / `upgrade images` (issue 40): the planner's
//! rules answered against Talos' and go-kubernetes' own test cases
//! (transcribed below as data), a property test checking plans step by step
//! against an independent search, and the commands end to end.

use proptest::prelude::*;
use talos_gen::matrix::Matrix;
use talos_gen::upgrade::{
    self, Change, HostRefusal, Pair, Question, Step, check_step, host_upgrade,
    kubernetes_path_supported, kubernetes_step,
};
use talos_gen::version::Version;

use crate::support::{run, stderr, stdout};

fn v(s: &str) -> Version {
    Version::parse(s).unwrap()
}

/// Talos 1.15 as `pkg/machinery/compatibility/talos115/talos115.go` says
/// (siderolabs/talos main at ad8823176e75, v1.14.0-beta.1-84): Kubernetes
/// 1.33.0 to 1.38.99, hosts from 1.13.0 below 1.17.0. The embedded matrix
/// ends at 1.14, the newest release (1.15 is unreleased), so the cases of
/// 1.15 are answered with this row added; without it talos-gen refuses
/// them as an unknown minor (tested below).
const TALOS_115: &str = "talos:\n  - talos: \"1.15\"\n    kubernetes: {min: \"1.33.0\", max: \"1.38.99\"}\n    defaultKubernetes: {initial: \"1.38.0\", latest: \"1.38.0\"}\n    hostUpgrade: {from: \"1.13.0\", below: \"1.17.0\"}\n";

fn matrix_for(target: &Version) -> Matrix {
    if target.minor_key() == (1, 15) {
        Matrix::from_yaml(TALOS_115, "talos115").unwrap()
    } else {
        Matrix::embedded().clone()
    }
}

/// `(host, target, expectedError)` of siderolabs/talos
/// `pkg/machinery/compatibility/talos_version_test.go` at ad8823176e75
/// (v1.14.0-beta.1-84-gad8823176, main 2026-08-21), every case of every
/// `TestTalosUpgradeCompatibility*` in order: `target.UpgradeableFrom(host)`.
const TALOS_VERSION_CASES: &[(&str, &str, &str)] = &[
    ("1.2.0", "1.3.0", ""),                 // TestTalosUpgradeCompatibility13
    ("1.0.0-alpha.0", "1.3.0", ""),         // TestTalosUpgradeCompatibility13
    ("1.2.0-alpha.0", "1.3.0-alpha.0", ""), // TestTalosUpgradeCompatibility13
    ("1.3.0", "1.3.1", ""),                 // TestTalosUpgradeCompatibility13
    ("1.3.0-beta.0", "1.3.0", ""),          // TestTalosUpgradeCompatibility13
    ("1.4.5", "1.3.3", ""),                 // TestTalosUpgradeCompatibility13
    (
        "0.14.3",
        "1.3.0",
        "host version 0.14.3 is too old to upgrade to Talos 1.3.0",
    ), // TestTalosUpgradeCompatibility13
    (
        "1.5.0-alpha.0",
        "1.3.0",
        "host version 1.5.0-alpha.0 is too new to downgrade to Talos 1.3.0",
    ), // TestTalosUpgradeCompatibility13
    ("1.3.0", "1.4.0", ""),                 // TestTalosUpgradeCompatibility14
    ("1.0.0-alpha.0", "1.4.0", ""),         // TestTalosUpgradeCompatibility14
    ("1.2.0-alpha.0", "1.4.0-alpha.0", ""), // TestTalosUpgradeCompatibility14
    ("1.4.0", "1.4.1", ""),                 // TestTalosUpgradeCompatibility14
    ("1.4.0-beta.0", "1.4.0", ""),          // TestTalosUpgradeCompatibility14
    ("1.5.5", "1.4.3", ""),                 // TestTalosUpgradeCompatibility14
    (
        "0.14.3",
        "1.4.0",
        "host version 0.14.3 is too old to upgrade to Talos 1.4.0",
    ), // TestTalosUpgradeCompatibility14
    (
        "1.6.0-alpha.0",
        "1.4.0",
        "host version 1.6.0-alpha.0 is too new to downgrade to Talos 1.4.0",
    ), // TestTalosUpgradeCompatibility14
    ("1.3.0", "1.5.0", ""),                 // TestTalosUpgradeCompatibility15
    ("1.2.0-alpha.0", "1.5.0", ""),         // TestTalosUpgradeCompatibility15
    ("1.2.0", "1.5.0-alpha.0", ""),         // TestTalosUpgradeCompatibility15
    ("1.5.0", "1.5.1", ""),                 // TestTalosUpgradeCompatibility15
    ("1.5.0-beta.0", "1.5.0", ""),          // TestTalosUpgradeCompatibility15
    ("1.6.5", "1.5.3", ""),                 // TestTalosUpgradeCompatibility15
    (
        "1.1.0",
        "1.5.0",
        "host version 1.1.0 is too old to upgrade to Talos 1.5.0",
    ), // TestTalosUpgradeCompatibility15
    (
        "1.7.0-alpha.0",
        "1.5.0",
        "host version 1.7.0-alpha.0 is too new to downgrade to Talos 1.5.0",
    ), // TestTalosUpgradeCompatibility15
    ("1.4.0", "1.6.0", ""),                 // TestTalosUpgradeCompatibility16
    ("1.3.0-alpha.0", "1.6.0", ""),         // TestTalosUpgradeCompatibility16
    ("1.3.0", "1.6.0-alpha.0", ""),         // TestTalosUpgradeCompatibility16
    ("1.6.0", "1.6.1", ""),                 // TestTalosUpgradeCompatibility16
    ("1.6.0-beta.0", "1.6.0", ""),          // TestTalosUpgradeCompatibility16
    ("1.7.5", "1.6.3", ""),                 // TestTalosUpgradeCompatibility16
    (
        "1.2.0",
        "1.6.0",
        "host version 1.2.0 is too old to upgrade to Talos 1.6.0",
    ), // TestTalosUpgradeCompatibility16
    (
        "1.8.0-alpha.0",
        "1.6.0",
        "host version 1.8.0-alpha.0 is too new to downgrade to Talos 1.6.0",
    ), // TestTalosUpgradeCompatibility16
    ("1.5.0", "1.7.0", ""),                 // TestTalosUpgradeCompatibility17
    ("1.4.0-alpha.0", "1.7.0", ""),         // TestTalosUpgradeCompatibility17
    ("1.4.0", "1.7.0-alpha.0", ""),         // TestTalosUpgradeCompatibility17
    ("1.6.0", "1.7.1", ""),                 // TestTalosUpgradeCompatibility17
    ("1.6.0-beta.0", "1.7.0", ""),          // TestTalosUpgradeCompatibility17
    ("1.8.5", "1.7.3", ""),                 // TestTalosUpgradeCompatibility17
    (
        "1.3.0",
        "1.7.0",
        "host version 1.3.0 is too old to upgrade to Talos 1.7.0",
    ), // TestTalosUpgradeCompatibility17
    (
        "1.9.0-alpha.0",
        "1.7.0",
        "host version 1.9.0-alpha.0 is too new to downgrade to Talos 1.7.0",
    ), // TestTalosUpgradeCompatibility17
    ("1.6.0", "1.8.0", ""),                 // TestTalosUpgradeCompatibility18
    ("1.5.0-alpha.0", "1.8.0", ""),         // TestTalosUpgradeCompatibility18
    ("1.5.0", "1.8.0-alpha.0", ""),         // TestTalosUpgradeCompatibility18
    ("1.7.0", "1.8.1", ""),                 // TestTalosUpgradeCompatibility18
    ("1.7.0-beta.0", "1.8.0", ""),          // TestTalosUpgradeCompatibility18
    ("1.9.5", "1.8.3", ""),                 // TestTalosUpgradeCompatibility18
    (
        "1.4.0",
        "1.8.0",
        "host version 1.4.0 is too old to upgrade to Talos 1.8.0",
    ), // TestTalosUpgradeCompatibility18
    (
        "1.10.0-alpha.0",
        "1.8.0",
        "host version 1.10.0-alpha.0 is too new to downgrade to Talos 1.8.0",
    ), // TestTalosUpgradeCompatibility18
    ("1.8.0", "1.9.0", ""),                 // TestTalosUpgradeCompatibility19
    ("1.8.0-alpha.0", "1.9.0", ""),         // TestTalosUpgradeCompatibility19
    ("1.8.0", "1.9.0-alpha.0", ""),         // TestTalosUpgradeCompatibility19
    ("1.8.3", "1.9.1", ""),                 // TestTalosUpgradeCompatibility19
    ("1.9.0-beta.0", "1.9.0", ""),          // TestTalosUpgradeCompatibility19
    ("1.9.5", "1.9.3", ""),                 // TestTalosUpgradeCompatibility19
    (
        "1.7.0",
        "1.9.0",
        "host version 1.7.0 is too old to upgrade to Talos 1.9.0",
    ), // TestTalosUpgradeCompatibility19
    (
        "1.11.0-alpha.0",
        "1.9.0",
        "host version 1.11.0-alpha.0 is too new to downgrade to Talos 1.9.0",
    ), // TestTalosUpgradeCompatibility19
    ("1.8.0", "1.10.0", ""),                // TestTalosUpgradeCompatibility110
    ("1.9.0-alpha.0", "1.10.0", ""),        // TestTalosUpgradeCompatibility110
    ("1.8.0", "1.10.0-alpha.0", ""),        // TestTalosUpgradeCompatibility110
    ("1.9.3", "1.10.1", ""),                // TestTalosUpgradeCompatibility110
    ("1.10.0-beta.0", "1.10.0", ""),        // TestTalosUpgradeCompatibility110
    ("1.10.5", "1.10.3", ""),               // TestTalosUpgradeCompatibility110
    (
        "1.7.0",
        "1.10.0",
        "host version 1.7.0 is too old to upgrade to Talos 1.10.0",
    ), // TestTalosUpgradeCompatibility110
    (
        "1.12.0-alpha.0",
        "1.10.0",
        "host version 1.12.0-alpha.0 is too new to downgrade to Talos 1.10.0",
    ), // TestTalosUpgradeCompatibility110
    ("1.9.0", "1.11.0", ""),                // TestTalosUpgradeCompatibility111
    ("1.10.0-alpha.0", "1.11.0", ""),       // TestTalosUpgradeCompatibility111
    ("1.9.0", "1.11.0-alpha.0", ""),        // TestTalosUpgradeCompatibility111
    ("1.10.3", "1.11.1", ""),               // TestTalosUpgradeCompatibility111
    ("1.11.0-beta.0", "1.11.0", ""),        // TestTalosUpgradeCompatibility111
    ("1.11.5", "1.11.3", ""),               // TestTalosUpgradeCompatibility111
    (
        "1.8.0",
        "1.11.0",
        "host version 1.8.0 is too old to upgrade to Talos 1.11.0",
    ), // TestTalosUpgradeCompatibility111
    (
        "1.14.0-alpha.0",
        "1.12.0",
        "host version 1.14.0-alpha.0 is too new to downgrade to Talos 1.12.0",
    ), // TestTalosUpgradeCompatibility111
    ("1.10.0", "1.12.0", ""),               // TestTalosUpgradeCompatibility112
    ("1.11.0-alpha.0", "1.12.0", ""),       // TestTalosUpgradeCompatibility112
    ("1.10.0", "1.12.0-alpha.0", ""),       // TestTalosUpgradeCompatibility112
    ("1.11.3", "1.12.1", ""),               // TestTalosUpgradeCompatibility112
    ("1.12.0-beta.0", "1.12.0", ""),        // TestTalosUpgradeCompatibility112
    ("1.12.5", "1.12.3", ""),               // TestTalosUpgradeCompatibility112
    (
        "1.9.0",
        "1.12.0",
        "host version 1.9.0 is too old to upgrade to Talos 1.12.0",
    ), // TestTalosUpgradeCompatibility112
    (
        "1.14.0-alpha.0",
        "1.12.0",
        "host version 1.14.0-alpha.0 is too new to downgrade to Talos 1.12.0",
    ), // TestTalosUpgradeCompatibility112
    ("1.11.0", "1.13.0", ""),               // TestTalosUpgradeCompatibility113
    ("1.12.0-alpha.0", "1.13.0", ""),       // TestTalosUpgradeCompatibility113
    ("1.11.0", "1.13.0-alpha.0", ""),       // TestTalosUpgradeCompatibility113
    ("1.12.3", "1.13.1", ""),               // TestTalosUpgradeCompatibility113
    ("1.13.0-beta.0", "1.13.0", ""),        // TestTalosUpgradeCompatibility113
    ("1.13.5", "1.13.3", ""),               // TestTalosUpgradeCompatibility113
    (
        "1.10.0",
        "1.13.0",
        "host version 1.10.0 is too old to upgrade to Talos 1.13.0",
    ), // TestTalosUpgradeCompatibility113
    (
        "1.15.0-alpha.0",
        "1.13.0",
        "host version 1.15.0-alpha.0 is too new to downgrade to Talos 1.13.0",
    ), // TestTalosUpgradeCompatibility113
    ("1.12.0", "1.14.0", ""),               // TestTalosUpgradeCompatibility114
    ("1.13.0-alpha.0", "1.14.0", ""),       // TestTalosUpgradeCompatibility114
    ("1.12.0", "1.14.0-alpha.0", ""),       // TestTalosUpgradeCompatibility114
    ("1.13.3", "1.14.1", ""),               // TestTalosUpgradeCompatibility114
    ("1.14.0-beta.0", "1.14.0", ""),        // TestTalosUpgradeCompatibility114
    ("1.14.5", "1.14.3", ""),               // TestTalosUpgradeCompatibility114
    (
        "1.11.0",
        "1.14.0",
        "host version 1.11.0 is too old to upgrade to Talos 1.14.0",
    ), // TestTalosUpgradeCompatibility114
    (
        "1.16.0-alpha.0",
        "1.14.0",
        "host version 1.16.0-alpha.0 is too new to downgrade to Talos 1.14.0",
    ), // TestTalosUpgradeCompatibility114
    ("1.13.0", "1.15.0", ""),               // TestTalosUpgradeCompatibility115
    ("1.14.0-alpha.0", "1.15.0", ""),       // TestTalosUpgradeCompatibility115
    ("1.13.0", "1.15.0-alpha.0", ""),       // TestTalosUpgradeCompatibility115
    ("1.14.3", "1.15.1", ""),               // TestTalosUpgradeCompatibility115
    ("1.15.0-beta.0", "1.15.0", ""),        // TestTalosUpgradeCompatibility115
    ("1.15.5", "1.15.3", ""),               // TestTalosUpgradeCompatibility115
    (
        "1.12.0",
        "1.15.0",
        "host version 1.12.0 is too old to upgrade to Talos 1.15.0",
    ), // TestTalosUpgradeCompatibility115
    (
        "1.17.0-alpha.0",
        "1.15.0",
        "host version 1.17.0-alpha.0 is too new to downgrade to Talos 1.15.0",
    ), // TestTalosUpgradeCompatibility115
    (
        "1.5.0",
        "1.17.0-alpha.0",
        "upgrades to version 1.17.0-alpha.0 are not supported",
    ), // TestTalosUpgradeCompatibilityUnsupported
    (
        "1.4.0",
        "1.16.0-alpha.0",
        "upgrades to version 1.16.0-alpha.0 are not supported",
    ), // TestTalosUpgradeCompatibilityUnsupported
];

/// `(kubernetesVersion, target, expectedError)` of siderolabs/talos
/// `pkg/machinery/compatibility/kubernetes_version_test.go` at the same
/// commit, every case of every `TestKubernetesCompatibility*`:
/// `kubernetesVersion.SupportedWith(target)`.
const KUBERNETES_VERSION_CASES: &[(&str, &str, &str)] = &[
    ("1.23.1", "1.2.0", ""),        // TestKubernetesCompatibility12
    ("1.24.3", "1.2.0-beta.0", ""), // TestKubernetesCompatibility12
    ("1.25.0-rc.0", "1.2.7", ""),   // TestKubernetesCompatibility12
    (
        "1.26.0-alpha.0",
        "1.2.0",
        "version of Kubernetes 1.26.0-alpha.0 is too new to be used with Talos 1.2.0",
    ), // TestKubernetesCompatibility12
    (
        "1.22.4",
        "1.2.0",
        "version of Kubernetes 1.22.4 is too old to be used with Talos 1.2.0",
    ), // TestKubernetesCompatibility12
    ("1.24.1", "1.3.0", ""),        // TestKubernetesCompatibility13
    ("1.25.3", "1.3.0-beta.0", ""), // TestKubernetesCompatibility13
    ("1.26.0-rc.0", "1.3.7", ""),   // TestKubernetesCompatibility13
    (
        "1.27.0-alpha.0",
        "1.3.0",
        "version of Kubernetes 1.27.0-alpha.0 is too new to be used with Talos 1.3.0",
    ), // TestKubernetesCompatibility13
    (
        "1.23.4",
        "1.3.0",
        "version of Kubernetes 1.23.4 is too old to be used with Talos 1.3.0",
    ), // TestKubernetesCompatibility13
    ("1.25.1", "1.4.0", ""),        // TestKubernetesCompatibility14
    ("1.26.3", "1.4.0-beta.0", ""), // TestKubernetesCompatibility14
    ("1.27.0-rc.0", "1.4.7", ""),   // TestKubernetesCompatibility14
    (
        "1.28.0-alpha.0",
        "1.4.0",
        "version of Kubernetes 1.28.0-alpha.0 is too new to be used with Talos 1.4.0",
    ), // TestKubernetesCompatibility14
    (
        "1.24.1",
        "1.4.0",
        "version of Kubernetes 1.24.1 is too old to be used with Talos 1.4.0",
    ), // TestKubernetesCompatibility14
    ("1.26.1", "1.5.0", ""),        // TestKubernetesCompatibility15
    ("1.27.3", "1.5.0-beta.0", ""), // TestKubernetesCompatibility15
    ("1.28.0-rc.0", "1.5.7", ""),   // TestKubernetesCompatibility15
    (
        "1.29.0-alpha.0",
        "1.5.0",
        "version of Kubernetes 1.29.0-alpha.0 is too new to be used with Talos 1.5.0",
    ), // TestKubernetesCompatibility15
    (
        "1.25.1",
        "1.5.0",
        "version of Kubernetes 1.25.1 is too old to be used with Talos 1.5.0",
    ), // TestKubernetesCompatibility15
    ("1.27.1", "1.6.0", ""),        // TestKubernetesCompatibility16
    ("1.24.1", "1.6.0", ""),        // TestKubernetesCompatibility16
    ("1.28.3", "1.6.0-beta.0", ""), // TestKubernetesCompatibility16
    ("1.29.0-rc.0", "1.6.7", ""),   // TestKubernetesCompatibility16
    (
        "1.30.0-alpha.0",
        "1.6.0",
        "version of Kubernetes 1.30.0-alpha.0 is too new to be used with Talos 1.6.0",
    ), // TestKubernetesCompatibility16
    (
        "1.23.1",
        "1.6.0",
        "version of Kubernetes 1.23.1 is too old to be used with Talos 1.6.0",
    ), // TestKubernetesCompatibility16
    ("1.27.1", "1.7.0", ""),        // TestKubernetesCompatibility17
    ("1.25.1", "1.7.0", ""),        // TestKubernetesCompatibility17
    ("1.28.3", "1.7.0-beta.0", ""), // TestKubernetesCompatibility17
    ("1.30.0-rc.0", "1.7.7", ""),   // TestKubernetesCompatibility17
    (
        "1.31.0-alpha.0",
        "1.7.0",
        "version of Kubernetes 1.31.0-alpha.0 is too new to be used with Talos 1.7.0",
    ), // TestKubernetesCompatibility17
    (
        "1.24.1",
        "1.7.0",
        "version of Kubernetes 1.24.1 is too old to be used with Talos 1.7.0",
    ), // TestKubernetesCompatibility17
    ("1.27.1", "1.8.0", ""),        // TestKubernetesCompatibility18
    ("1.26.1", "1.8.0", ""),        // TestKubernetesCompatibility18
    ("1.30.3", "1.8.0-beta.0", ""), // TestKubernetesCompatibility18
    ("1.31.0-rc.0", "1.8.7", ""),   // TestKubernetesCompatibility18
    (
        "1.32.0-alpha.0",
        "1.8.0",
        "version of Kubernetes 1.32.0-alpha.0 is too new to be used with Talos 1.8.0",
    ), // TestKubernetesCompatibility18
    (
        "1.25.1",
        "1.8.0",
        "version of Kubernetes 1.25.1 is too old to be used with Talos 1.8.0",
    ), // TestKubernetesCompatibility18
    ("1.28.1", "1.9.0", ""),        // TestKubernetesCompatibility19
    ("1.27.1", "1.9.0", ""),        // TestKubernetesCompatibility19
    ("1.31.3", "1.9.0-beta.0", ""), // TestKubernetesCompatibility19
    ("1.32.0-rc.0", "1.9.7", ""),   // TestKubernetesCompatibility19
    (
        "1.33.0-alpha.0",
        "1.9.0",
        "version of Kubernetes 1.33.0-alpha.0 is too new to be used with Talos 1.9.0",
    ), // TestKubernetesCompatibility19
    (
        "1.26.1",
        "1.9.0",
        "version of Kubernetes 1.26.1 is too old to be used with Talos 1.9.0",
    ), // TestKubernetesCompatibility19
    ("1.29.1", "1.10.0", ""),       // TestKubernetesCompatibility110
    ("1.28.1", "1.10.0", ""),       // TestKubernetesCompatibility110
    ("1.32.3", "1.10.0-beta.0", ""), // TestKubernetesCompatibility110
    ("1.33.0-rc.0", "1.10.7", ""),  // TestKubernetesCompatibility110
    (
        "1.34.0-alpha.0",
        "1.10.0",
        "version of Kubernetes 1.34.0-alpha.0 is too new to be used with Talos 1.10.0",
    ), // TestKubernetesCompatibility110
    (
        "1.27.1",
        "1.10.0",
        "version of Kubernetes 1.27.1 is too old to be used with Talos 1.10.0",
    ), // TestKubernetesCompatibility110
    ("1.30.1", "1.11.0", ""),       // TestKubernetesCompatibility111
    ("1.29.1", "1.11.0", ""),       // TestKubernetesCompatibility111
    ("1.33.3", "1.11.0-beta.0", ""), // TestKubernetesCompatibility111
    ("1.34.0-rc.0", "1.11.7", ""),  // TestKubernetesCompatibility111
    (
        "1.35.0-alpha.0",
        "1.11.0",
        "version of Kubernetes 1.35.0-alpha.0 is too new to be used with Talos 1.11.0",
    ), // TestKubernetesCompatibility111
    (
        "1.28.1",
        "1.11.0",
        "version of Kubernetes 1.28.1 is too old to be used with Talos 1.11.0",
    ), // TestKubernetesCompatibility111
    ("1.31.1", "1.12.0", ""),       // TestKubernetesCompatibility112
    ("1.30.1", "1.12.0", ""),       // TestKubernetesCompatibility112
    ("1.34.3", "1.12.0-beta.0", ""), // TestKubernetesCompatibility112
    ("1.35.0-rc.0", "1.12.7", ""),  // TestKubernetesCompatibility112
    (
        "1.36.0-alpha.0",
        "1.12.0",
        "version of Kubernetes 1.36.0-alpha.0 is too new to be used with Talos 1.12.0",
    ), // TestKubernetesCompatibility112
    (
        "1.29.1",
        "1.12.0",
        "version of Kubernetes 1.29.1 is too old to be used with Talos 1.12.0",
    ), // TestKubernetesCompatibility112
    ("1.31.1", "1.13.0", ""),       // TestKubernetesCompatibility113
    ("1.32.1", "1.13.0", ""),       // TestKubernetesCompatibility113
    ("1.35.3", "1.13.0-beta.0", ""), // TestKubernetesCompatibility113
    ("1.36.0-rc.0", "1.13.7", ""),  // TestKubernetesCompatibility113
    (
        "1.37.0-alpha.0",
        "1.13.0",
        "version of Kubernetes 1.37.0-alpha.0 is too new to be used with Talos 1.13.0",
    ), // TestKubernetesCompatibility113
    (
        "1.30.1",
        "1.13.0",
        "version of Kubernetes 1.30.1 is too old to be used with Talos 1.13.0",
    ), // TestKubernetesCompatibility113
    ("1.32.1", "1.14.0", ""),       // TestKubernetesCompatibility114
    ("1.33.1", "1.14.0", ""),       // TestKubernetesCompatibility114
    ("1.36.3", "1.14.0-beta.0", ""), // TestKubernetesCompatibility114
    ("1.37.0-rc.0", "1.14.7", ""),  // TestKubernetesCompatibility114
    (
        "1.38.0-alpha.0",
        "1.14.0",
        "version of Kubernetes 1.38.0-alpha.0 is too new to be used with Talos 1.14.0",
    ), // TestKubernetesCompatibility114
    (
        "1.31.1",
        "1.14.0",
        "version of Kubernetes 1.31.1 is too old to be used with Talos 1.14.0",
    ), // TestKubernetesCompatibility114
    ("1.33.1", "1.15.0", ""),       // TestKubernetesCompatibility115
    ("1.34.1", "1.15.0", ""),       // TestKubernetesCompatibility115
    ("1.37.3", "1.15.0-beta.0", ""), // TestKubernetesCompatibility115
    ("1.38.0-rc.0", "1.15.7", ""),  // TestKubernetesCompatibility115
    (
        "1.39.0-alpha.0",
        "1.15.0",
        "version of Kubernetes 1.39.0-alpha.0 is too new to be used with Talos 1.15.0",
    ), // TestKubernetesCompatibility115
    (
        "1.32.1",
        "1.15.0",
        "version of Kubernetes 1.32.1 is too old to be used with Talos 1.15.0",
    ), // TestKubernetesCompatibility115
    (
        "1.25.0",
        "1.16.0-alpha.0",
        "compatibility with version 1.16.0-alpha.0 is not supported",
    ), // TestKubernetesCompatibilityUnsupported
    (
        "1.25.0",
        "1.1.0",
        "compatibility with version 1.1.0 is not supported",
    ), // TestKubernetesCompatibilityUnsupported
];

/// siderolabs/go-kubernetes `kubernetes/upgrade/path.go` at 0caf1f226727
/// (v0.2.41): the `IsSupported` table, every `from->to` of minors it
/// accepts; and `path_test.go`'s one case (`v1.19.5` -> `1.20.7`, supported).
const PATH_SUPPORTED: &[&str] = &[
    "1.19->1.19",
    "1.19->1.20",
    "1.20->1.20",
    "1.20->1.21",
    "1.21->1.21",
    "1.21->1.22",
    "1.22->1.22",
    "1.22->1.23",
    "1.23->1.23",
    "1.23->1.24",
    "1.24->1.24",
    "1.24->1.25",
    "1.25->1.25",
    "1.25->1.26",
    "1.26->1.26",
    "1.26->1.27",
    "1.27->1.27",
    "1.27->1.28",
    "1.28->1.28",
    "1.28->1.29",
    "1.29->1.29",
    "1.29->1.30",
    "1.30->1.30",
    "1.30->1.31",
    "1.31->1.31",
    "1.31->1.32",
    "1.32->1.32",
    "1.32->1.33",
    "1.33->1.33",
    "1.33->1.34",
    "1.34->1.34",
    "1.34->1.35",
    "1.35->1.35",
    "1.35->1.36",
    "1.36->1.36",
    "1.36->1.37",
    "1.37->1.37",
];

#[test]
fn talos_host_upgrade_cases_answered_as_talos_does() {
    assert_eq!(TALOS_VERSION_CASES.len(), 106);
    for &(host, target, expected) in TALOS_VERSION_CASES {
        let (h, t) = (v(host), v(target));
        let got = host_upgrade(&matrix_for(&t), &h, &t);
        let want = if expected.is_empty() {
            None
        } else if expected.contains("too old") {
            Some(HostRefusal::TooOld)
        } else if expected.contains("too new") {
            Some(HostRefusal::TooNew)
        } else if expected.contains("denied") {
            Some(HostRefusal::Denied)
        } else {
            Some(HostRefusal::Unsupported)
        };
        assert_eq!(
            got.clone().err().map(|(k, _)| k),
            want,
            "{host} -> {target}: Talos says {expected:?}, talos-gen {got:?}"
        );
        if let Err((_, m)) = got {
            // The message starts as Talos' does (versions shown with a v).
            let ours = m.replace('v', "");
            let theirs = expected.replace('v', "");
            assert!(ours.starts_with(&theirs), "{m:?} vs {expected:?}");
        }
    }
    // The embedded matrix has the 1.15 row now (read at the same commit):
    // it answers as the test's row does; a minor it lacks is refused as
    // unknown.
    for &(host, target, _) in TALOS_VERSION_CASES {
        let (h, t) = (v(host), v(target));
        if t.minor_key() == (1, 15) {
            assert_eq!(
                host_upgrade(Matrix::embedded(), &h, &t).map_err(|e| e.0),
                host_upgrade(&matrix_for(&t), &h, &t).map_err(|e| e.0),
                "{host} -> {target}"
            );
        }
    }
    let e = host_upgrade(Matrix::embedded(), &v("1.14.0"), &v("1.16.0")).unwrap_err();
    assert_eq!(e.0, HostRefusal::Unsupported);
}

#[test]
fn kubernetes_version_cases_answered_as_talos_does() {
    assert_eq!(KUBERNETES_VERSION_CASES.len(), 82);
    for &(k8s, target, expected) in KUBERNETES_VERSION_CASES {
        let t = v(target);
        let got = matrix_for(&t).check(&t, &v(k8s));
        assert_eq!(
            got.is_ok(),
            expected.is_empty(),
            "{k8s} with Talos {target}: Talos says {expected:?}, talos-gen {got:?}"
        );
        if let Err(e) = got {
            assert_eq!(e.exit_code(), 1);
        }
    }
    // Talos 1.1 has no compatibility package (Talos: "compatibility with
    // version 1.1.0 is not supported"); talos-gen's matrix has a docs row
    // for it, and refuses that case's 1.25.0 by range: the same verdict.
    assert!(Matrix::embedded().check(&v("1.1.0"), &v("1.24.0")).is_ok());
}

#[test]
fn go_kubernetes_path_cases_answered_the_same() {
    let minor = |s: &str| {
        let (a, b) = s.split_once('.').unwrap();
        Version {
            major: a.parse().unwrap(),
            minor: b.parse().unwrap(),
            patch: Some(0),
            pre: None,
        }
    };
    for case in PATH_SUPPORTED {
        let (from, to) = case.split_once("->").unwrap();
        assert!(
            kubernetes_path_supported(&minor(from), &minor(to)),
            "{case}"
        );
    }
    // What the table leaves out is refused: a skipped minor, a minor down,
    // another major.
    for (from, to) in [
        ("1.19", "1.21"),
        ("1.20", "1.19"),
        ("1.37", "1.39"),
        ("1.30", "2.31"),
    ] {
        let case = format!("{from}->{to}");
        assert!(!PATH_SUPPORTED.contains(&case.as_str()));
        assert!(
            !kubernetes_path_supported(&minor(from), &minor(to)),
            "{case}"
        );
    }
    // path_test.go: v1.19.5 -> 1.20.7 is supported.
    assert!(kubernetes_step(&v("v1.19.5"), &v("1.20.7")).is_ok());
    // Where talos-gen is stricter, by the issue's rule: go-kubernetes'
    // table looks at minors only and takes 1.19.5 -> 1.19.2 ("1.19->1.19");
    // a plan never moves Kubernetes down, nor "steps" to the same version.
    assert!(kubernetes_path_supported(&v("1.19.5"), &v("1.19.2")));
    assert!(kubernetes_step(&v("1.19.5"), &v("1.19.2")).is_err());
    assert!(kubernetes_step(&v("1.19.5"), &v("1.19.5")).is_err());
}

/// The candidate versions the independent search walks: the ends, the
/// newest release of every Talos minor, and for every Kubernetes minor
/// between the ends the patch the data names.
fn brute_force(m: &Matrix, from: &Pair, to: &Pair, replace: bool) -> Option<usize> {
    let mut talos: Vec<Version> = vec![from.talos.clone(), to.talos.clone()];
    talos.extend(m.entries().iter().filter_map(|e| e.newest.clone()));
    let mut k8s: Vec<Version> = vec![from.kubernetes.clone(), to.kubernetes.clone()];
    for minor in from.kubernetes.minor..=to.kubernetes.minor {
        let mv = Version {
            major: 1,
            minor,
            patch: None,
            pre: None,
        };
        if let Some((p, _)) = m.kubernetes_patch(&mv, None) {
            k8s.push(p);
        }
    }
    // Breadth-first, level by level, over every pair (no pruning).
    let mut level: Vec<Pair> = vec![from.clone()];
    let mut seen: Vec<Pair> = level.clone();
    for depth in 0..=talos.len() * k8s.len() {
        if level.contains(to) {
            return Some(depth);
        }
        let mut next = Vec::new();
        for at in &level {
            let moves = talos
                .iter()
                .map(|t| Step {
                    change: Change::Talos,
                    pair: Pair {
                        talos: t.clone(),
                        kubernetes: at.kubernetes.clone(),
                    },
                })
                .chain(k8s.iter().map(|k| Step {
                    change: Change::Kubernetes,
                    pair: Pair {
                        talos: at.talos.clone(),
                        kubernetes: k.clone(),
                    },
                }));
            for s in moves {
                if check_step(m, replace, at, &s).is_ok() && !seen.contains(&s.pair) {
                    seen.push(s.pair.clone());
                    next.push(s.pair);
                }
            }
        }
        if next.is_empty() {
            return None;
        }
        level = next;
    }
    None
}

/// A pair of the embedded matrix: a Talos release (newest or `.0` or a
/// middle patch) and a Kubernetes patch of a minor near its range.
fn pair() -> impl Strategy<Value = (String, String)> {
    (2usize..=14, 0u8..3, 0u64..7, 0u64..16).prop_map(|(minor, p, kshift, kpatch)| {
        let m = Matrix::embedded();
        let e = &m.entries()[minor];
        let newest = e.newest.clone().unwrap();
        let talos = match p {
            0 => newest.to_string(),
            1 => format!("v1.{minor}.0"),
            _ => format!("v1.{minor}.{}", newest.patch.unwrap() / 2),
        };
        let kmin = e.kubernetes_min.minor;
        (talos, format!("1.{}.{kpatch}", kmin + kshift))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every step of a plan is valid and leaves the pair it says; the plan
    /// ends at the target; no shorter plan exists (an independent
    /// breadth-first search over the minors finds none); and no plan is
    /// answered exactly when that search finds no path.
    #[test]
    fn plans_are_valid_and_shortest(from in pair(), to in pair(), replace in any::<bool>()) {
        let m = Matrix::embedded();
        let q = Question {
            from_talos: &from.0, from_kubernetes: &from.1,
            to_talos: &to.0, to_kubernetes: &to.1,
            replace, ..Default::default()
        };
        let fp = Pair { talos: v(&from.0), kubernetes: v(&from.1) };
        let tp = Pair { talos: v(&to.0), kubernetes: v(&to.1) };
        let ends_ok = m.check(&fp.talos, &fp.kubernetes).is_ok() && m.check(&tp.talos, &tp.kubernetes).is_ok();
        match upgrade::plan(m, &q) {
            Ok(p) => {
                prop_assert!(ends_ok);
                let mut at = p.from.clone();
                for s in &p.steps {
                    prop_assert!(check_step(m, replace, &at, s).is_ok(), "{:?} from {:?}: {:?}", s, at, check_step(m, replace, &at, s));
                    at = s.pair.clone();
                }
                prop_assert_eq!(&at, &tp);
                prop_assert_eq!(Some(p.steps.len()), brute_force(m, &fp, &tp, replace), "{}", p.to_text());
                // the same question, the same plan
                prop_assert_eq!(upgrade::plan(m, &q).unwrap(), p);
            }
            Err(e) => {
                prop_assert_eq!(e.exit_code(), 1, "{}", e);
                if ends_ok {
                    prop_assert_eq!(brute_force(m, &fp, &tp, replace), None, "{}", e);
                }
            }
        }
    }
}

const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

const ISSUE: &[&str] = &[
    "--from-talos",
    "v1.11.6",
    "--from-kubernetes",
    "1.31.4",
    "--to-talos",
    "v1.14.6",
    "--to-kubernetes",
    "1.36.3",
];

#[test]
fn upgrade_plan_end_to_end() {
    let mut args = vec!["upgrade", "plan"];
    args.extend(ISSUE);
    let o = run(&args, None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 7, "{out}");
    assert!(
        out.starts_with("1. talos v1.12.11 (leaves talos v1.12.11, kubernetes 1.31.4)\n"),
        "{out}"
    );
    assert!(
        out.ends_with("7. kubernetes 1.36.3 (leaves talos v1.14.6, kubernetes 1.36.3)\n"),
        "{out}"
    );
    assert!(
        stderr(&o).contains("Talos v1.12 on the way: its newest stable release v1.12.11"),
        "{}",
        stderr(&o)
    );
    args.push("--json");
    let o = run(&args, None);
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        j["from"],
        serde_json::json!({"talos": "v1.11.6", "kubernetes": "1.31.4"})
    );
    assert_eq!(
        j["to"],
        serde_json::json!({"talos": "v1.14.6", "kubernetes": "1.36.3"})
    );
    assert_eq!(j["replace"], false);
    assert_eq!(
        j["steps"][2],
        serde_json::json!({"change": "talos", "talos": "v1.14.6", "kubernetes": "1.32.13"})
    );
    assert_eq!(j.as_object().unwrap().len(), 4);

    // equal: exit 0, no steps
    let o = run(
        &[
            "upgrade",
            "plan",
            "--from-talos",
            "v1.13.9",
            "--from-kubernetes",
            "1.35.6",
            "--to-talos",
            "v1.13.9",
            "--to-kubernetes",
            "1.35.6",
        ],
        None,
    );
    assert_eq!(
        (o.status.code(), stdout(&o).as_str()),
        (Some(0), ""),
        "{}",
        stderr(&o)
    );
    // refused: exit 1, one line naming the rule
    for (to_t, to_k, rule) in [
        ("v1.13.9", "1.34.1", "Kubernetes downgrade"),
        (
            "v1.9.6",
            "1.35.6",
            "the target pair: Kubernetes v1.35.6 is not supported by Talos v1.9.6",
        ),
    ] {
        let o = run(
            &[
                "upgrade",
                "plan",
                "--from-talos",
                "v1.13.9",
                "--from-kubernetes",
                "1.35.6",
                "--to-talos",
                to_t,
                "--to-kubernetes",
                to_k,
            ],
            None,
        );
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains(rule), "{}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    let window = [
        "upgrade",
        "plan",
        "--from-talos",
        "v1.0.6",
        "--from-kubernetes",
        "1.23.6",
        "--to-talos",
        "v1.1.2",
        "--to-kubernetes",
        "1.23.6",
    ];
    let o = run(&window, None);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("host-upgrade window"), "{}", stderr(&o));
    let mut replaced = window.to_vec();
    replaced.push("--replace");
    let o = run(&replaced, None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "1. talos v1.1.2 (leaves talos v1.1.2, kubernetes 1.23.6)\n"
    );
    // bad input: exit 2
    let o = run(
        &[
            "upgrade",
            "plan",
            "--from-talos",
            "v1.13",
            "--from-kubernetes",
            "1.35.6",
            "--to-talos",
            "v1.14",
            "--to-kubernetes",
            "1.35",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--from-talos: v1.13 is a minor"),
        "{}",
        stderr(&o)
    );
    let o = run(
        &[
            "upgrade",
            "plan",
            "--from-talos",
            "v1.13.9",
            "--from-kubernetes",
            "x",
            "--to-talos",
            "v1.14",
            "--to-kubernetes",
            "1.35",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--from-kubernetes"), "{}", stderr(&o));
    // --help states the tie-break rule
    let o = run(&["upgrade", "plan", "--help"], None);
    assert!(stdout(&o).contains(upgrade::TIE_BREAK), "{}", stdout(&o));
}

#[test]
fn upgrade_images_lists_every_pair_once() {
    let mut args = vec!["upgrade", "images"];
    args.extend(ISSUE);
    let o = run(&args, None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let mut want = Vec::new();
    for t in ["v1.11.6", "v1.12.11", "v1.14.6"] {
        want.push(format!("factory.talos.dev/installer/{VANILLA}:{t}"));
    }
    for k in [
        "v1.31.4", "v1.32.13", "v1.33.13", "v1.34.9", "v1.35.6", "v1.36.3",
    ] {
        want.push(format!("ghcr.io/siderolabs/kubelet:{k}"));
    }
    for w in &want {
        assert!(lines.contains(&w.as_str()), "{w} not in\n{out}");
    }
    let mut sorted = lines.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), lines.len(), "an image twice:\n{out}");
    // Each pair's pull list, as `talos-gen images` gives it, is inside.
    for (t, k) in [("v1.12.11", "1.32.13"), ("v1.14.6", "1.36.3")] {
        let o = run(&["images", "--talos", t, "--kubernetes", k], None);
        for l in stdout(&o).lines() {
            assert!(lines.contains(&l), "{l} not in\n{out}");
        }
    }
    args.extend([
        "--schematic",
        "cozystack",
        "--platform",
        "nocloud",
        "--optional",
        "--json",
    ]);
    let o = run(&args, None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["plan"]["steps"].as_array().unwrap().len(), 7);
    let images: Vec<&str> = j["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["image"].as_str().unwrap())
        .collect();
    assert!(
        images
            .iter()
            .any(|i| i.starts_with("factory.talos.dev/nocloud-installer/ce4c98")),
        "{images:?}"
    );
    assert!(
        images
            .iter()
            .any(|i| i.starts_with("registry.k8s.io/kube-proxy:v1.33.13")),
        "{images:?}"
    );
    let o = run(
        &[
            "upgrade",
            "images",
            "--from-talos",
            "v1.11.6",
            "--from-kubernetes",
            "1.31.4",
            "--to-talos",
            "v1.14.6",
            "--to-kubernetes",
            "1.36.3",
            "--schematic",
            "nope",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// The mirror config's `upgrades:` expands to the images `upgrade images`
/// lists for the same question (and each Talos release's disk image), in
/// `mirror plan` (what `mirror sync` fetches: the same items).
#[test]
fn mirror_plan_expands_upgrades_to_the_same_images() {
    let (_dir, cfg) = crate::support::temp_file(
        "mirror.yaml",
        "upgrades:\n  - fromTalos: v1.11.6\n    fromKubernetes: 1.31.4\n    toTalos: v1.14.6\n    toKubernetes: 1.36.3\n    schematic: cozystack\n    platform: nocloud\n    arch: arm64\n",
    );
    let c = cfg.as_str();
    let o = run(&["mirror", "plan", "--config", c, "--json"], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mut oci: Vec<String> = Vec::new();
    let mut disks: Vec<String> = Vec::new();
    for i in j["items"].as_array().unwrap() {
        let r = i["reference"].as_str().unwrap().to_string();
        if i["kind"] == "image" {
            disks.push(r);
        } else {
            oci.push(r);
        }
    }
    let mut args = vec!["upgrade", "images"];
    args.extend(ISSUE);
    args.extend(["--schematic", "cozystack"]);
    let o = run(&args, None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut want: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    want.sort();
    oci.sort();
    assert_eq!(oci, want);
    let coz = want[0]
        .split('/')
        .nth(2)
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        disks,
        ["v1.11.6", "v1.12.11", "v1.14.6"]
            .map(|t| format!("/image/{coz}/{t}/nocloud-arm64.raw.xz"))
    );
    assert_eq!(j["workers"].as_array().unwrap().len(), 8);
    assert_eq!(j["workers"][1]["upgrade"], "upgrades[0] pair 2 of 8");
    let o = run(&["mirror", "plan", "--config", c], None);
    assert!(
        stdout(&o).contains("(upgrades[0] pair 8 of 8)\n"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).contains("upgrades[0]: Talos v1.12 on the way"),
        "{}",
        stderr(&o)
    );

    // A blocked plan: exit 1 naming the entry; a bad field: exit 2.
    for (body, code, says) in [
        (
            "upgrades: [{fromTalos: v1.13.9, fromKubernetes: 1.35.6, toTalos: v1.13.9, toKubernetes: 1.34.1}]\n",
            1,
            "upgrades[0]: no path",
        ),
        (
            "upgrades: [{fromTalos: v1.13, fromKubernetes: 1.35.6, toTalos: v1.14, toKubernetes: 1.35}]\n",
            2,
            "upgrades[0].fromTalos",
        ),
        (
            "upgrades: [{fromTalos: v1.13.9, fromKubernetes: 1.35.6, toTalos: v1.14, toKubernetes: 1.35, arch: s390x}]\n",
            2,
            "upgrades[0].arch",
        ),
        (
            "upgrades: [{fromTalos: v1.13.9, fromKubernetes: 1.35.6, toTalos: v1.14, toKubernetes: 1.35, bogus: 1}]\n",
            2,
            "bogus",
        ),
    ] {
        std::fs::write(&cfg, body).unwrap();
        let o = run(&["mirror", "plan", "--config", c], None);
        assert_eq!(o.status.code(), Some(code), "{body}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{body}: {}", stderr(&o));
    }
}

/// `--matrix FILE` replaces the data: its windows and denied versions rule.
#[test]
fn upgrade_plan_reads_a_matrix_file_with_denied_versions() {
    let (_dir, file) = crate::support::temp_file(
        "m.yaml",
        "talos:\n  - talos: \"1.98\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\n    newest: \"1.98.4\"\n    hostUpgrade: {from: \"1.97.0\", below: \"1.100.0\"}\n  - talos: \"1.99\"\n    kubernetes: {min: \"1.41.0\", max: \"1.42.99\"}\n    defaultKubernetes: {initial: \"1.42.0\", latest: \"1.42.2\"}\n    newest: \"1.99.2\"\n    hostUpgrade: {from: \"1.98.0\", below: \"1.100.0\", denied: [\"1.98.3\"]}\n",
    );
    let m = file.as_str();
    let plan_with = |m: &str, from: &str| {
        run(
            &[
                "upgrade",
                "plan",
                "--matrix",
                m,
                "--from-talos",
                from,
                "--from-kubernetes",
                "1.41.0",
                "--to-talos",
                "1.99",
                "--to-kubernetes",
                "1.42.0",
            ],
            None,
        )
    };
    let plan = |from: &str| plan_with(m, from);
    // 1.98.3 is denied: it first moves to 1.98.4 (its own minor's window).
    let o = plan("v1.98.3");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "1. talos v1.98.4 (leaves talos v1.98.4, kubernetes 1.41.0)\n\
         2. talos v1.99.2 (leaves talos v1.99.2, kubernetes 1.41.0)\n\
         3. kubernetes 1.42.0 (leaves talos v1.99.2, kubernetes 1.42.0)\n"
    );
    let o = plan("v1.98.1");
    assert_eq!(stdout(&o).lines().count(), 2, "{}", stdout(&o));
    let o = plan_with("/nonexistent/m.yaml", "v1.98.1");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// Issue 49: plans through releases before the image data's first (1.8.0).
/// Every plan from the newest release of each Talos minor 1.2..1.7 (at its
/// default Kubernetes) to 1.13.9 / 1.36.3 that `upgrade plan` answers,
/// `upgrade images` answers too: the images of every pair the data knows,
/// the others named, each once. Of these 6 plans all passed a release
/// before 1.8 and failed before ("no image data").
#[test]
fn upgrade_images_through_releases_the_image_data_lacks() {
    let m = Matrix::embedded();
    let mut answered = 0;
    for e in m
        .entries()
        .iter()
        .filter(|e| (2..8).contains(&e.talos.minor))
    {
        let from_t = e.newest.as_ref().unwrap().to_string();
        let from_k = e.default_latest.to_string();
        let q = Question {
            from_talos: &from_t,
            from_kubernetes: &from_k,
            to_talos: "v1.13.9",
            to_kubernetes: "1.36.3",
            replace: true,
            names: upgrade::FLAGS,
        };
        let Ok(plan) = upgrade::plan(m, &q) else {
            continue;
        };
        let (images, notes) = upgrade::images(m, &plan, &Default::default())
            .unwrap_or_else(|e| panic!("{from_t} {from_k}: {e}"));
        let (known, unknown) = upgrade::imaged_pairs(m, &plan);
        assert_eq!(known.len() + unknown.len(), plan.pairs().len());
        assert!(!unknown.is_empty(), "{from_t}: {}", plan.to_text());
        for u in &unknown {
            assert!(notes.contains(u), "{u}");
        }
        for p in known {
            let kubelet = format!("ghcr.io/siderolabs/kubelet:{}", p.kubernetes);
            assert!(images.iter().any(|i| i.reference == kubelet), "{kubelet}");
        }
        answered += 1;
    }
    assert_eq!(answered, 6);

    // The CLI: exit 0, the known pairs' images on stdout, the unknown pair
    // on stderr.
    let o = run(
        &[
            "upgrade",
            "images",
            "--from-talos",
            "v1.6.8",
            "--from-kubernetes",
            "1.29.7",
            "--to-talos",
            "v1.9.6",
            "--to-kubernetes",
            "1.32.4",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("factory.talos.dev/installer/{VANILLA}:v1.9.6\n")));
    assert!(
        stderr(&o).contains("pair (talos v1.6.8, kubernetes 1.29.7): its images are not listed"),
        "{}",
        stderr(&o)
    );

    // A mirror config's `upgrades:` the same way.
    let (_dir, cfg) = crate::support::temp_file(
        "mirror.yaml",
        "upgrades:\n  - fromTalos: v1.6.8\n    fromKubernetes: 1.29.7\n    toTalos: v1.9.6\n    toKubernetes: 1.32.4\n",
    );
    let o = run(&["mirror", "plan", "--config", &cfg], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("upgrades[0]: pair (talos v1.6.8, kubernetes 1.29.7)"),
        "{}",
        stderr(&o)
    );
    assert!(stdout(&o).contains("kubelet:v1.32.4"), "{}", stdout(&o));
}

/// Issue 49: a plan blocked because the data knows no patch of a
/// Kubernetes minor on the way names that minor.
#[test]
fn a_blocked_plan_names_the_kubernetes_minor_without_a_patch() {
    let o = run(
        &[
            "upgrade",
            "plan",
            "--from-talos",
            "v1.0.6",
            "--from-kubernetes",
            "1.21.3",
            "--to-talos",
            "v1.2.9",
            "--to-kubernetes",
            "1.25.5",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the data knows no patch of Kubernetes 1.22"),
        "{}",
        stderr(&o)
    );
}
