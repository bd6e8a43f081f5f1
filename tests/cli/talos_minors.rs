//! The checklist of a new Talos minor, enforced: every minor of the one
//! contract table (`machineconfig::contract::CONTRACTS`) has a row in the
//! support matrix, a row in the image data (from the first minor the image
//! data covers), a golden config and its schema in the reference data. Adding
//! `(15, ...)` to the table fails here until each is in place
//! (ARCHITECTURE.md, How to, "Add a Talos minor").

use crate::support;

use talos_gen::machineconfig::contract::{self, CONTRACTS};
use talos_gen::matrix::Matrix;
use talos_gen::version::Version;

#[test]
fn every_contract_minor_has_its_matrix_and_image_rows() {
    let matrix = Matrix::embedded();
    let releases = matrix.images().releases();
    let first_imaged = releases.iter().map(|r| r.talos.minor).min().unwrap();
    for minor in contract::minors() {
        let v = Version::parse_named(&format!("v1.{minor}"), "minor").unwrap();
        assert!(
            matrix.entry(&v).is_ok(),
            "v1.{minor} is a contract but matrix/matrix.yaml has no row for it"
        );
        if minor >= first_imaged {
            assert!(
                releases
                    .iter()
                    .any(|r| r.talos.major == 1 && r.talos.minor == minor),
                "v1.{minor} is a contract but matrix/images.yaml has no release of it"
            );
        }
    }
}

#[test]
fn every_contract_minor_has_a_golden_config_and_a_schema() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    for (minor, schema) in CONTRACTS {
        let golden = shared.join(format!("talos-golden/v1.{minor}/base-worker.yaml"));
        assert!(golden.is_file(), "v1.{minor}: no {}", golden.display());
        let file = shared
            .join("talos-schema")
            .join(super::machineconfig_schema::schema_file_of(schema));
        assert!(file.is_file(), "v1.{minor}: no {}", file.display());
    }
}

/// Issue 49: Talos 1.15 on day one, before its tag: plans into it, its
/// pull list and a machine config, each saying on stderr where its data
/// comes from; a pre-release the data does not name in full is refused.
#[test]
fn talos_1_15_before_its_tag() {
    let from_main = "Talos main at ad8823176e75";
    let (code, out, err) = support::run_text(
        &[
            "upgrade",
            "plan",
            "--from-talos",
            "v1.13.9",
            "--from-kubernetes",
            "1.35.6",
            "--to-talos",
            "1.15",
            "--to-kubernetes",
            "1.37",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("1. talos v1.15.0 "), "{out}");
    assert!(err.contains(from_main), "{err}");
    let (code, out, err) = support::run_text(
        &[
            "images",
            "--talos",
            "v1.15",
            "--kubernetes",
            "1.37.0",
            "--optional",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(from_main), "{err}");
    for want in [
        "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.15.0",
        "registry.k8s.io/pause:3.10.2",
        "registry.k8s.io/coredns/coredns:v1.14.7",
        "ghcr.io/siderolabs/kubelet:v1.37.0",
    ] {
        assert!(out.lines().any(|l| l == want), "{want} not in\n{out}");
    }
    let (code, _, err) = support::run_text(
        &[
            "images",
            "--talos",
            "v1.15.0-beta.0",
            "--kubernetes",
            "1.37.0",
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    let (code, out, err) = support::run_text(
        &[
            "machineconfig",
            "--talos-version",
            "v1.15",
            "--cluster-name",
            "c",
            "--endpoint",
            "https://c.example:6443",
            "--kubernetes-version",
            "1.37.0",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains(from_main), "{err}");
    assert!(out.contains("kind: KubeletConfig"), "{out}");
}
