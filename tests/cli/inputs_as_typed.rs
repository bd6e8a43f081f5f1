//! Issue 50: inputs that cannot silently mean something else, each written
//! as a person would type it: values files and mirror configs (YAML
//! numbers read as versions, pipes whose writer comes late, empty files,
//! nested values of the wrong shape), the one boolean grammar of the
//! CLI, durations below a millisecond, and the default cache directory
//! kept out of git.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::{bin, mkfifo, run_text};

fn mc(values: &str, extra: &[&str]) -> (i32, String, String) {
    let mut a = vec![
        "machineconfig",
        "--profile",
        "cozystack",
        "-f",
        values,
        "--cluster-name",
        "tenant1",
        "--endpoint",
        "https://tenant1.example:6443",
    ];
    a.extend_from_slice(extra);
    run_text(&a, None)
}

fn values_file(dir: &std::path::Path, text: &str) -> String {
    let p = dir.join("values.yaml");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// Item 1: a version YAML reads as a number is refused, exit 2, naming
/// the field and saying to quote it; quoted, it is read as written.
#[test]
fn a_version_yaml_reads_as_a_number_is_refused() {
    let d = tempfile::tempdir().unwrap();
    for (text, says) in [
        (
            "version: 1.30\n",
            "--values: version: 1.30 is the number 1.3 to YAML, not the version 1.30; quote it: version: \"1.30\" (line 1, column 1)",
        ),
        (
            "# the pool\ntalos:\n  version: 1.10 # the release\n",
            "--values: talos.version: 1.10 is the number 1.1 to YAML, not the version 1.10; quote it: version: \"1.10\" (line 3, column 3)",
        ),
        // In a flow mapping the text as written is not looked for: the
        // number, and the advice.
        (
            "talos: {version: 1.10}\n",
            "--values: talos.version: YAML reads this unquoted version as the number 1.1",
        ),
    ] {
        let (code, _, err) = mc(&values_file(d.path(), text), &[]);
        assert_eq!(code, 2, "{text:?}: {err}");
        assert!(err.contains(says), "{text:?}: {err}");
        assert!(err.contains("quote it"), "{err}");
    }
    let (code, out, err) = mc(&values_file(d.path(), "version: \"1.34\"\n"), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kubelet:v1.34."), "{out}");
}

/// Item 2: a FIFO whose writer opens late is read to its end; one that
/// brings nothing, and an empty file, are never a config: exit 2.
#[test]
fn a_pipe_is_read_to_its_end_and_nothing_is_never_a_config() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("values.fifo");
    mkfifo(&fifo);
    let f = fifo.to_str().unwrap();
    let spawn = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mcargs = [
        "machineconfig",
        "--profile",
        "cozystack",
        "-f",
        f,
        "--cluster-name",
        "tenant1",
        "--endpoint",
        "https://tenant1.example:6443",
    ];
    // The writer's open waits for talos-gen's: the writer comes late.
    let child = spawn(&mcargs);
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    w.write_all(b"talos:\n  version: \"v1.12.0\"\n").unwrap();
    drop(w);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(":v1.12.0"),
        "the pipe's values were read: {stdout}"
    );

    // A writer that brings nothing: no values, exit 2 (was the defaults).
    let child = spawn(&mcargs);
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--values: the file holds no values"), "{err}");

    let child = spawn(&["mirror", "plan", "--config", f]);
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the file holds no config"), "{err}");

    for text in ["", "# only a comment\n"] {
        let p = values_file(d.path(), text);
        let (code, _, err) = mc(&p, &[]);
        assert_eq!(code, 2, "{text:?}: {err}");
        let (code, out, err) = run_text(&["mirror", "plan", "--config", &p], None);
        assert_eq!(code, 2, "{text:?}: {out}{err}");
    }
}

/// Item 3: nested values that would change nothing or write nonsense are
/// refused, exit 2, naming the field's path (item 4).
#[test]
fn nested_values_of_the_wrong_shape_are_refused_by_path() {
    let d = tempfile::tempdir().unwrap();
    for (text, says) in [
        (
            "gpus: [{nme: x}]\n",
            "unknown key in gpus[0] \"nme\" (nearest known: \"name\")",
        ),
        ("gpus: [{}]\n", "gpus[0]: name is required"),
        ("images: {kubctl: x}\n", "unknown key in images \"kubctl\""),
        ("roles: ingress-nginx\n", "roles: expected a list"),
        ("roles: [5, {a: b}]\n", "roles[0]: expected a string"),
        (
            "talos:\n  registryMirrors:\n    ghcr.io:\n      endpoints: [\"not a url\"]\n",
            "talos.registryMirrors.ghcr.io.endpoints[0]: \"not a url\" is not an http(s) URL",
        ),
        (
            "talos:\n  registryMirrors:\n    \"\":\n      endpoints: [\"https://mirror:5000\"]\n",
            "talos.registryMirrors: \"\" is not a registry host name",
        ),
        (
            "talos:\n  registryMirrors: [ghcr.io]\n",
            "talos.registryMirrors: expected a mapping",
        ),
        (
            "kubelet:\n  systemReservedMemory: 2048\n",
            "kubelet.systemReservedMemory: 2048 is a bare number (bytes); give the unit",
        ),
        (
            "kubelet:\n  systemReservedMemroy: 1Gi\n",
            "unknown key in kubelet \"systemReservedMemroy\" (nearest known: \"systemReservedMemory\")",
        ),
    ] {
        let (code, _, err) = mc(&values_file(d.path(), text), &[]);
        assert_eq!(code, 2, "{text:?}: {err}");
        assert!(
            err.contains(&format!("--values: {says}")),
            "{text:?}: {err}"
        );
    }
}

/// Item 5: the CLI's booleans take the one grammar, as the API's do.
#[test]
fn cli_booleans_take_one_grammar() {
    let plan = [
        "upgrade",
        "plan",
        "--from-talos",
        "v1.13.9",
        "--from-kubernetes",
        "1.35.6",
        "--to-talos",
        "v1.14",
        "--to-kubernetes",
        "1.35",
        "--json",
    ];
    for (v, want) in [
        ("false", false),
        ("FALSE", false),
        ("0", false),
        ("true", true),
        ("1", true),
    ] {
        let mut a = plan.to_vec();
        let flag = format!("--replace={v}");
        a.push(&flag);
        let (code, out, err) = run_text(&a, None);
        assert_eq!(code, 0, "{flag}: {err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(j["replace"].as_bool(), Some(want), "{flag}");
    }
    let mut a = plan.to_vec();
    a.push("--replace=yes");
    let (code, _, err) = run_text(&a, None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--replace: \"yes\" is not a boolean"), "{err}");
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = mc(
        &values_file(d.path(), "version: \"v1.35\"\n"),
        &["--force=false"],
    );
    assert_eq!(code, 0, "{err}");
}

/// Item 10: a duration below a millisecond is refused where it would time
/// out every request; the default cache directory is kept out of git.
#[test]
fn small_things() {
    for args in [
        &["serve", "--offline", "--upstream-timeout", "1us"][..],
        &["serve", "--offline", "--body-read-timeout", "999us"][..],
        &[
            "mirror",
            "sync",
            "--config",
            "x.yaml",
            "--cache-dir",
            "c",
            "--upstream-timeout",
            "500ns",
        ][..],
    ] {
        let (code, _, err) = run_text(args, None);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("below a millisecond"), "{args:?}: {err}");
    }
    let gitignore =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.gitignore")).unwrap();
    assert!(
        gitignore.lines().any(|l| l == "/talos-gen-cache/"),
        "{gitignore}"
    );
}

/// Item 4: a values file's error names the field's path with its line and
/// column; a duplicate key is placed where it is given again, not where
/// its mapping starts.
#[test]
fn values_errors_name_their_line_and_column() {
    let d = tempfile::tempdir().unwrap();
    let head = "# a pool\ncluster: tenant1\nversion: \"v1.35\"\n";
    for (text, says) in [
        (
            format!("{head}kubelet:\n  evictionHardMemory: 7%\n  systemReservedMemroy: 1Gi\n"),
            "unknown key in kubelet \"systemReservedMemroy\" (nearest known: \"systemReservedMemory\") (line 6, column 3)",
        ),
        (
            format!("{head}talos:\n  version: \"v1.13.6\"\n  registryMirrors: [ghcr.io]\n"),
            "talos.registryMirrors: expected a mapping of registry host",
        ),
        (
            format!("{head}gpus:\n- name: a\n- nme: b\n"),
            "(line 6, column 3)",
        ),
        (
            format!(
                "{head}kubelet:\n  systemReservedMemory: 1Gi\n  kubeReservedMemory: 1Gi\n  systemReservedMemory: 2Gi\n"
            ),
            "duplicate entry with key \"systemReservedMemory\", given again at line 7, column 3",
        ),
    ] {
        let (code, _, err) = mc(&values_file(d.path(), &text), &[]);
        assert_eq!(code, 2, "{text:?}: {err}");
        assert!(err.contains(says), "{text:?}: {err}");
    }
    let (_, _, err) = mc(
        &values_file(
            d.path(),
            &format!("{head}talos:\n  version: \"v1.13.6\"\n  registryMirrors: [ghcr.io]\n"),
        ),
        &[],
    );
    assert!(err.contains("(line 6, column 3)"), "{err}");
}
