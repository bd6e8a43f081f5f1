//! `talos-gen matrix` and `talos-gen schematic` as whole processes: output,
//! exit codes (0 ok, 1 refused, 2 bad input) and the messages.

use crate::support;

use crate::support::{run, stderr, stdout};

const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
const COZYSTACK: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

/// `talos-gen [before...] matrix check --talos <talos> --kubernetes <k8s> [after...]`,
/// `before` going between `matrix` and `check` (the parent command's flags).
fn check(before: &[&str], talos: &str, k8s: &str, after: &[&str]) -> std::process::Output {
    let mut args = vec!["matrix"];
    args.extend_from_slice(before);
    args.extend(["check", "--talos", talos, "--kubernetes", k8s]);
    args.extend_from_slice(after);
    run(&args, None)
}

fn repo(path: &str) -> String {
    format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn schematic_ids_of_the_shipped_files() {
    let o = run(
        &["schematic", "id", &repo("schematics/cozystack.yaml")],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{COZYSTACK}\n"));
    let o = run(&["schematic", "id", "-"], Some(b"{}\n"));
    assert_eq!(stdout(&o), format!("{VANILLA}\n"));
    let o = run(&["schematic", "id"], Some(b"customization: {}\n"));
    assert_eq!(stdout(&o), format!("{VANILLA}\n"));
    let o = run(&["schematic", "id", &repo("schematics/vanilla.yaml")], None);
    assert_eq!(stdout(&o), format!("{VANILLA}\n"));
}

#[test]
fn schematic_canonical() {
    let o = run(
        &["schematic", "canonical", "-"],
        Some(br#"{"customization":{"systemExtensions":{"officialExtensions":["siderolabs/qemu-guest-agent"]}}}"#),
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        "customization:\n    systemExtensions:\n        officialExtensions:\n            - siderolabs/qemu-guest-agent\n"
    );
}

#[test]
fn schematic_bad_input_exits_2_naming_the_problem() {
    for (input, word) in [
        ("customization: {unknownField: 1}\n", "unknownField"),
        (
            "customization: {meta: [{key: 256, value: x}]}\n",
            "meta[0].key",
        ),
        ("owner: someone\n", "owner"),
        (
            "customization: {extraKernelArgs: {a: b}}\n",
            "extraKernelArgs",
        ),
        (
            "customization: {diskImage: {sectorSize: -1}}\n",
            "sectorSize",
        ),
        ("", "empty"),
    ] {
        let o = run(&["schematic", "id", "-"], Some(input.as_bytes()));
        assert_eq!(o.status.code(), Some(2), "{input:?}");
        assert!(stdout(&o).is_empty());
        let err = stderr(&o);
        assert!(err.contains(word), "{input:?}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let o = run(&["schematic", "id", "/nonexistent/file.yaml"], None);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn matrix_check_answers() {
    let o = check(&[], "v1.13.6", "v1.35", &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("ok: "), "{}", stdout(&o));

    let o = check(&[], "v1.13.6", "v1.30", &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains(
        "Kubernetes v1.30 is not supported by Talos v1.13.6. Supported versions: v1.31, v1.32, v1.33, v1.34, v1.35, v1.36"
    ));

    for (t, k, code) in [
        ("v1.7.0", "1.25.0", 0),
        ("v1.7.0", "1.31.0", 1),
        ("v1.0.6", "1.23", 0),
        ("1.14.0-rc.1", "v1.32.1", 0),
        ("1.15.0", "1.35", 0),
        ("1.16.0", "1.35", 1),
        ("1.x", "1.35", 2),
        ("1.13", "banana", 2),
    ] {
        let o = check(&[], t, k, &[]);
        assert_eq!(o.status.code(), Some(code), "{t} {k}: {}", stderr(&o));
    }
    let o = check(&[], "1.16.0", "1.35", &[]);
    assert!(
        stderr(&o).contains("does not know Talos v1.16.0"),
        "{}",
        stderr(&o)
    );
    // Talos 1.15 before its tag: accepted, and stderr says where its row
    // comes from.
    let o = check(&[], "1.15.0", "1.38", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("Talos main at ad8823176e75"),
        "{}",
        stderr(&o)
    );

    let o = check(&[], "1.13", "1.30", &["--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["supported"], false);
}

#[test]
fn matrix_table_json_and_replacement_file() {
    let o = run(&["matrix"], None);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("v1.14"));
    let o = run(&["matrix", "--json"], None);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["talos"].as_array().unwrap().len(), 16);
    assert_eq!(v["talos"][14]["kubernetesMin"], "v1.32.0");

    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("m.yaml");
    std::fs::write(
        &f,
        "talos:\n  - talos: \"1.13\"\n    kubernetes: {min: \"1.30.0\", max: \"1.30.99\"}\n    defaultKubernetes: {initial: \"1.30.0\", latest: \"1.30.1\"}\n",
    )
    .unwrap();
    let fs = f.to_str().unwrap();
    let o = check(&["--matrix", fs], "1.13", "1.30", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // `--matrix` after `check` too.
    let o = check(&[], "1.12", "1.30", &["--matrix", fs]);
    assert_eq!(o.status.code(), Some(1));
    std::fs::write(&f, "talos: [\n").unwrap();
    let o = run(&["matrix", "--matrix", fs], None);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["matrix", "--matrix", "/nonexistent.yaml"], None);
    assert_eq!(o.status.code(), Some(2));
}

/// The kubelet table in matrix/ is the Cozystack chart's versions.yaml.
#[test]
fn kubelet_table_matches_cozystack() {
    let Some(dir) = support::reference_dir() else {
        return;
    };
    let text = std::fs::read_to_string(dir.join("cozystack/versions.yaml")).unwrap();
    let chart: std::collections::BTreeMap<String, String> =
        talos_gen::yaml::from_str(&text, "versions.yaml").unwrap();
    let m = talos_gen::matrix::Matrix::embedded();
    let ours: std::collections::BTreeMap<String, String> =
        m.kubelet_table().map(|(k, v)| (k, v.to_string())).collect();
    assert_eq!(ours, chart);
}

/// A YAML file nested deeper than 128 levels is refused before any parser
/// reads it (issue 19, item 5): exit 2 and one line naming the flag and the
/// file, within 3 s (a linear pass: milliseconds), for every file input of the CLI.
#[test]
fn deeply_nested_files_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.yaml");
    std::fs::write(
        &deep,
        format!("{}{}", "[".repeat(30_000), "]".repeat(30_000)),
    )
    .unwrap();
    let d = deep.to_str().unwrap();
    let patch = format!("@{d}");
    let cases: [(&[&str], String); 5] = [
        (&["schematic", "id", d], format!("schematic {d}")),
        (&["machineconfig", "-f", d], format!("--values {d}")),
        (
            &["machineconfig", "--config-patch", &patch],
            format!("--config-patch #1 {d}"),
        ),
        (
            &["machineconfig", "--with-secrets", d],
            format!("--with-secrets {d}"),
        ),
        (&["mirror", "plan", "--config", d], format!("--config {d}")),
    ];
    for (args, named) in cases {
        let t = std::time::Instant::now();
        let o = run(args, None);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err,
            format!(
                "talos-gen: {named}: nested deeper than 128 levels at line 1, column 129; refused before parsing\n"
            ),
            "{args:?}"
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(3),
            "{args:?}: {:?}",
            t.elapsed()
        );
    }
    // the same from standard input
    let text = std::fs::read(&deep).unwrap();
    let o = run(&["schematic", "id", "-"], Some(&text));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("talos-gen: schematic standard input: nested deeper"),
        "{}",
        stderr(&o)
    );
}
