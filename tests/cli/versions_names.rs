//! Issue 21 item 6: versions and names as a person means them, through the
//! binary: a bare Kubernetes minor becomes a patch the data knows (never a
//! tag such as `kubelet:v1.36`) or is refused naming the flag; a bare Talos
//! minor is its newest stable release (1.14: v1.14.6, not v1.14.0-rc.1);
//! the embedded schematic names are taken wherever an ID is.

use crate::support::{run, stderr, stdout};

const COZY: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

fn machineconfig(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "machineconfig",
        "--cluster-name",
        "c",
        "--endpoint",
        "https://10.0.0.1:6443",
    ];
    args.extend_from_slice(extra);
    let o = run(&args, None);
    (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
}

/// The `image:` values a config writes.
fn images_of(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_bare_kubernetes_minor_is_a_known_patch_or_refused() {
    let (code, out, err) =
        machineconfig(&["--talos-version", "v1.13.9", "--kubernetes-version", "1.36"]);
    assert_eq!(code, 0, "{err}");
    let imgs = images_of(&out);
    assert!(
        imgs.iter()
            .any(|i| i == "ghcr.io/siderolabs/kubelet:v1.36.3"),
        "{imgs:?}"
    );
    assert!(!out.contains("kubelet:v1.36\n"), "{out}");
    assert!(
        err.contains("--kubernetes-version 1.36 has no patch; using v1.36.3"),
        "{err}"
    );
    // The same input through `images` names the same kubelet.
    let o = run(
        &["images", "--talos", "v1.13.9", "--kubernetes", "1.36"],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("ghcr.io/siderolabs/kubelet:v1.36.3\n"),
        "{}",
        stdout(&o)
    );
    // A Cozystack minor: the chart's patch.
    let (code, out, err) = machineconfig(&[
        "--talos-version",
        "v1.13.9",
        "--kubernetes-version",
        "v1.35",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        images_of(&out).contains(&"ghcr.io/siderolabs/kubelet:v1.35.6".to_string()),
        "{out}"
    );
    // A minor the data knows nothing of: refused, naming the flag.
    let (code, out, err) =
        machineconfig(&["--talos-version", "v1.13.9", "--kubernetes-version", "1.40"]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--kubernetes-version") && err.contains("\"1.40\""),
        "{err}"
    );
    assert!(out.is_empty());
}

#[test]
fn a_bare_talos_minor_is_its_newest_stable_release() {
    let (code, out, err) = machineconfig(&["--talos-version", "v1.14"]);
    assert_eq!(code, 0, "{err}");
    let imgs = images_of(&out);
    assert!(
        imgs.iter()
            .all(|i| !i.contains("-rc") && !i.ends_with(":v1.14")),
        "{imgs:?}"
    );
    assert!(
        imgs.iter().any(|i| i.ends_with("metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.6")),
        "{imgs:?}"
    );
    // Kubernetes defaults to a stable patch too.
    assert!(
        imgs.iter()
            .any(|i| i == "ghcr.io/siderolabs/kubelet:v1.37.0"),
        "{imgs:?}"
    );
    let o = run(&["version"], None);
    assert!(
        stdout(&o).contains("newest release v1.14.6"),
        "{}",
        stdout(&o)
    );
    let images = |talos: &str| run(&["images", "--talos", talos, "--kubernetes", "v1.35"], None);
    let o = images("v1.14");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(":v1.14.6\n") && !stdout(&o).contains("rc."),
        "{}",
        stdout(&o)
    );
    // A pre-release is still there when asked for by name.
    let o = images("v1.14.0-rc.1");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(":v1.14.0-rc.1\n"), "{}", stdout(&o));
}

/// The data's 1.14 stable rows are there, each marked as carried with
/// the reason (the source snapshot has no tag to read them at).
#[test]
fn talos_1_14_stable_rows_are_marked_carried() {
    let text = include_str!("../../matrix/images.yaml");
    for n in 0..=6 {
        let head = format!("  - talos: v1.14.{n}\n");
        let at = text
            .find(&head)
            .unwrap_or_else(|| panic!("no row {head:?}"));
        let row: String = text[at + head.len()..]
            .lines()
            .take_while(|l| l.starts_with("    "))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            row.contains("carried: \"from v1.14.0-rc.1")
                && row.contains(&format!("no v1.14.{n} tag")),
            "v1.14.{n}: {row}"
        );
    }
    let m = include_str!("../../matrix/matrix.yaml");
    assert!(m.contains("newest: \"1.14.6\""), "matrix.yaml 1.14 newest");
}

#[test]
fn embedded_schematic_names_are_taken_for_ids() {
    let by_name = run(
        &[
            "images",
            "--talos",
            "v1.13.9",
            "--kubernetes",
            "v1.35",
            "--schematic",
            "cozystack",
        ],
        None,
    );
    let by_id = run(
        &[
            "images",
            "--talos",
            "v1.13.9",
            "--kubernetes",
            "v1.35",
            "--schematic",
            COZY,
        ],
        None,
    );
    assert_eq!(by_name.status.code(), Some(0), "{}", stderr(&by_name));
    assert_eq!(stdout(&by_name), stdout(&by_id));
    assert!(stdout(&by_name).contains(COZY));
    let (code, out, err) =
        machineconfig(&["--talos-version", "v1.13.9", "--schematic", "cozystack"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        images_of(&out).contains(&format!("factory.talos.dev/installer/{COZY}:v1.13.9")),
        "{out}"
    );
    // A name that is no embedded schematic is still refused as an ID.
    let (code, _, err) = machineconfig(&["--talos-version", "v1.13.9", "--schematic", "cozystak"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"cozystak\""), "{err}");
}
