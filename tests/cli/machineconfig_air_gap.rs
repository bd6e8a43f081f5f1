//! `machineconfig --air-gap-mirror URL` and `--image-verification-key FILE`
//! through the binary (the documents themselves are checked against the
//! schemas in `machineconfig_schema`).

use crate::support::{run, stderr, stdout};

const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

fn key_file(dir: &std::path::Path) -> String {
    let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let p = dir.join("cosign.pub");
    std::fs::write(&p, kp.public_key_pem()).unwrap();
    p.to_str().unwrap().to_string()
}

fn args<'a>(talos: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "machineconfig",
        "--talos-version",
        talos,
        "--kubernetes-version",
        "1.34.2",
        "--cluster-name",
        "c",
        "--endpoint",
        "https://c:6443",
        "--schematic",
        SCHEMATIC,
    ];
    a.extend_from_slice(extra);
    a
}

#[test]
fn air_gap_mirror_and_verification_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let o = run(
        &args(
            "v1.13.9",
            &[
                "--air-gap-mirror",
                "https://mirror.local:8443",
                "--image-verification-key",
                &key,
            ],
        ),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = stdout(&o);
    for host in ["factory.talos.dev", "ghcr.io", "registry.k8s.io"] {
        assert!(
            c.contains(&format!(
                "kind: RegistryMirrorConfig\nname: {host}\nendpoints:\n    - url: https://mirror.local:8443\nskipFallback: true\n"
            )),
            "{host}:\n{c}"
        );
    }
    assert!(c.contains(
        "kind: ImageVerificationConfig\nrules:\n    - image: factory.talos.dev/installer/"
    ));
    assert!(c.contains("    - image: registry.k8s.io/pause\n"));
    // The legacy form before 1.12.
    let o = run(
        &args("v1.11.6", &["--air-gap-mirror", "http://10.1.1.1:5000"]),
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("        mirrors:\n            factory.talos.dev:\n                endpoints:\n                    - http://10.1.1.1:5000\n                skipFallback: true\n"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn air_gap_errors() {
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path());
    let junk = dir.path().join("junk.pub");
    std::fs::write(&junk, "not a key\n").unwrap();
    let junk = junk.to_str().unwrap();
    for (a, code, want) in [
        (
            args("v1.12.11", &["--image-verification-key", &key]),
            2,
            "needs Talos v1.13 or later; the config is for v1.12.11",
        ),
        (
            args("v1.13.9", &["--image-verification-key", junk]),
            2,
            "--image-verification-key: no PEM block",
        ),
        (
            args(
                "v1.13.9",
                &["--image-verification-key", "/nonexistent/k.pub"],
            ),
            2,
            "--image-verification-key",
        ),
        (
            args("v1.13.9", &["--air-gap-mirror", "mirror.local"]),
            2,
            "--air-gap-mirror: \"mirror.local\" is not an http(s) URL",
        ),
        (
            args("v1.7.0", &["--air-gap-mirror", "http://m:1", "--force"]),
            1,
            "--air-gap-mirror: no image data for Talos v1.7.0",
        ),
    ] {
        let o = run(&a, None);
        assert_eq!(o.status.code(), Some(code), "{a:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{a:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), "");
    }
}
