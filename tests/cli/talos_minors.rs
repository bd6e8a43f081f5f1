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
