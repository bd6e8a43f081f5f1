//! Issue 41, an operator's second day: inputs in the forms people type
//! (durations, `--listen` host names, a path of the wrong kind named), a
//! closed standard output ending quietly, typo tips on one line, the
//! secrets a config was made with never dropped without a word, and the
//! small wrongs of `images` and `schematic id`.

use crate::support;

use std::io::Read;
use std::process::{Command, Stdio};

fn run(args: &[&str]) -> (i32, String, String) {
    support::run_text(args, None)
}

/// `serve` with `args`, then a `--factory-url` its run refuses (exit 2
/// naming it) after every flag was parsed: the flags were taken when that
/// is the error.
/// `talos-gen datavolume` for the cozystack schematic at `base`, with
/// `--timeout timeout`.
fn datavolume(base: &str, timeout: &str) -> (i32, String, String) {
    run(&[
        "datavolume",
        "--base-url",
        base,
        "--schematic",
        "cozystack",
        "--talos-version",
        "v1.13.6",
        "--name",
        "d",
        "--size",
        "20Gi",
        "--timeout",
        timeout,
    ])
}

fn serve_parses(args: &[&str]) -> (i32, String) {
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().join("c");
    let mut all = vec!["serve"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--factory-url", "ftp://x", "--cache-dir"]);
    all.push(cache.to_str().unwrap());
    let (code, _, err) = run(&all);
    (code, err)
}

/// Every duration flag takes `30s`, `2m`, `1m30s` and plain seconds; any
/// other word is exit 2, one line naming the flag.
#[test]
fn duration_flags_take_units_and_plain_seconds() {
    let serve_flags = [
        "--shutdown-timeout",
        "--upstream-timeout",
        "--body-read-timeout",
        "--metadata-ttl",
        "--tag-revalidate",
        "--stale-while-revalidate",
        "--header-read-timeout",
        "--write-timeout",
    ];
    for flag in serve_flags {
        for v in ["30s", "2m", "1m30s", "30"] {
            let (code, err) = serve_parses(&[flag, v]);
            assert_eq!(code, 2, "{flag} {v}: {err}");
            assert!(
                err.contains("--factory-url") && !err.contains(flag),
                "{flag} {v} was refused: {err}"
            );
        }
        for v in ["30x", "soon", "-5s"] {
            let (code, err) = serve_parses(&[&format!("{flag}={v}")]);
            assert_eq!(code, 2, "{flag} {v}: {err}");
            assert!(err.contains(flag) && err.contains(v), "{flag} {v}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    }
    // A bound that must be more than zero says so.
    let (code, err) = serve_parses(&["--body-read-timeout", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("more than zero"), "{err}");
    // The mirror job's and datavolume's durations, the same grammar.
    let dir = tempfile::tempdir().unwrap();
    for v in ["30", "1m30s"] {
        let (code, _, err) = run(&[
            "mirror",
            "sync",
            "--config",
            dir.path().join("none.yaml").to_str().unwrap(),
            "--cache-dir",
            dir.path().join("c").to_str().unwrap(),
            "--upstream-timeout",
            v,
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(!err.contains("--upstream-timeout"), "{v}: {err}");
        let (code, _, err) = datavolume("ftp://x", v);
        assert_eq!(code, 2, "{err}");
        assert!(!err.contains("--timeout"), "{v}: {err}");
    }
}

/// The line `serve` logs when it listens, or its exit and stderr.
fn serve_listening(listen: &str) -> Result<String, (i32, String)> {
    support::serve_listening(&["--listen", listen], &[])
}

/// `--listen` takes a host name (resolved when the flags are read) and
/// `:PORT`; a name that is no address is exit 2 naming it.
#[test]
fn listen_takes_host_names() {
    let line = serve_listening("localhost:0").unwrap();
    assert!(line.contains("127.0.0.1:"), "{line}");
    let line = serve_listening("127.0.0.1:0").unwrap();
    assert!(line.contains("127.0.0.1:"), "{line}");
    for bad in [
        "localhost",
        "localhost:http",
        "no such host:80",
        "[::1]x:80",
    ] {
        let (code, err) = serve_listening(bad).unwrap_err();
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(
            err.contains("--listen") && err.contains(bad),
            "{bad}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// A path flag naming a file of the wrong kind: exit 2, one line naming
/// the flag and the path (not "File exists" with exit 1).
#[test]
fn a_path_of_the_wrong_kind_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, "x").unwrap();
    let file = file.to_str().unwrap();
    let d = dir.path().to_str().unwrap();
    let under = format!("{file}/store");
    let cases: Vec<(Vec<&str>, &str, &str)> = vec![
        (vec!["serve", "--cache-dir", file], "--cache-dir", file),
        (vec!["serve", "--cache-dir", &under], "--cache-dir", &under),
        (
            vec!["mirror", "verify", "--cache-dir", file],
            "--cache-dir",
            file,
        ),
        (
            vec!["serve", "--cache-dir", d, "--schematics-dir", file],
            "--schematics-dir",
            file,
        ),
        (
            vec![
                "machineconfig",
                "--profile",
                "cozystack",
                "-f",
                d,
                "--cluster-name",
                "c",
                "--endpoint",
                "https://c:6443",
            ],
            "--values",
            d,
        ),
        (vec!["mirror", "plan", "--config", d], "--config", d),
        (vec!["matrix", "--matrix", d], "--matrix", d),
        (
            vec!["mirror", "cert", "--output-dir", file, "--name", "x"],
            "--output-dir",
            file,
        ),
    ];
    for (args, flag, path) in cases {
        let (code, out, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(flag) && err.contains(path), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    }
}

/// `talos-gen ... | head -c 100`: a reader gone before the output is
/// written, or after part of it, ends the command quietly (exit 0, nothing
/// on stderr), never a panic (exit 101). Many times, since the timing
/// varies.
#[test]
fn a_closed_stdout_ends_quietly() {
    let commands: &[&[&str]] = &[
        &["matrix", "--json"],
        &["matrix"],
        &["version"],
        &["schematic", "canonical", "cozystack"],
        &[
            "images",
            "--talos",
            "v1.13.6",
            "--kubernetes",
            "v1.35",
            "--optional",
            "--json",
        ],
        &["kubelet-reservations", "--instance-type", "u1.medium"],
    ];
    for args in commands {
        for i in 0..20 {
            let mut c = Command::new(support::bin());
            c.args(*args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().unwrap();
            let mut stdout = child.stdout.take().unwrap();
            if i % 2 == 1 {
                // As `head -c 100`: some of it read, then the pipe closed.
                let mut first = [0u8; 100];
                let _ = stdout.read(&mut first);
            }
            drop(stdout);
            let out = child.wait_with_output().unwrap();
            let err = support::stderr(&out);
            assert_eq!(out.status.code(), Some(0), "{args:?} run {i}: {err}");
            assert!(err.is_empty(), "{args:?} run {i}: {err}");
        }
    }
}

/// A mistyped flag: one line, the tip on it (clap's own runs 5-7 lines).
#[test]
fn typo_tips_are_one_line() {
    for (args, tip) in [
        (vec!["serve", "--cach-dir", "x"], "--cache-dir"),
        (vec!["matrix", "--jsn"], "--json"),
        (vec!["mirror", "sycn"], "sync"),
        (
            vec!["machineconfig", "--cluster-nam", "c"],
            "--cluster-name",
        ),
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(&format!("'{tip}'")),
            "{args:?}: {err}"
        );
    }
    // A required flag missing: the flag on the same line.
    let (code, _, err) = run(&["mirror", "plan"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--config <FILE>"), "{err}");
}

/// A config made from fresh secrets that nobody kept says so, naming
/// `--output-secrets`; with the secrets kept or given, no word.
#[test]
fn unsaved_secrets_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets.yaml");
    let base = [
        "machineconfig",
        "--talos-version",
        "v1.13.6",
        "--cluster-name",
        "c1",
        "--endpoint",
        "https://c1.example:6443",
    ];
    let (code, out, err) = run(&base);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kind: ") || out.contains("machine:"), "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not saved") && err.contains("--output-secrets"),
        "{err}"
    );
    let save = [&base[..], &["--output-secrets", secrets.to_str().unwrap()]].concat();
    let (code, _, err) = run(&save);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("not saved"), "{err}");
    let reuse = [&base[..], &["--with-secrets", secrets.to_str().unwrap()]].concat();
    let (code, _, err) = run(&reuse);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("not saved"), "{err}");
}

/// `images --talos` of a minor the data lacks names the minors it has; a
/// release newer than the data prints the installer it asked for and says
/// exactly that (the other images chosen as for the newest known release).
#[test]
fn images_say_what_they_use() {
    let (code, out, err) = run(&["images", "--talos", "v1.99", "--kubernetes", "v1.35"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("(only )"), "{err}");
    assert!(!err.contains("v1.99 (minor v1.99)"), "{err}");
    assert!(err.contains("v1.13") && err.contains("v1.14"), "{err}");
    let (code, out, err) = run(&["images", "--talos", "v1.13.12", "--kubernetes", "v1.35"]);
    assert_eq!(code, 0, "{err}");
    let installer = out.lines().next().unwrap();
    assert!(installer.ends_with(":v1.13.12"), "{out}");
    assert!(
        err.contains("the installer is tagged v1.13.12 as asked") && err.contains("as for v1.13.9"),
        "{err}"
    );
    assert!(!err.contains("using the images of"), "{err}");
    // The matrix's refusal of a bare minor says it once.
    let (code, _, err) = run(&[
        "matrix",
        "check",
        "--talos",
        "v1.99",
        "--kubernetes",
        "1.35",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("(minor v1.99)"), "{err}");
    assert!(err.contains("v1.14"), "{err}");
}

/// `schematic id NAME` with a name that is neither a file nor embedded:
/// the embedded names, nearest first.
#[test]
fn schematic_names_are_offered() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(support::bin())
        .args(["schematic", "id", "cozystak"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = support::stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!err.contains("No such file"), "{err}");
    assert!(
        err.contains("\"cozystak\"") && err.contains("nearest first: cozystack, "),
        "{err}"
    );
    // A path is still read as a file, and its error is the file's.
    let (code, _, err) = run(&["schematic", "id", "./cozystak"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("./cozystak"), "{err}");
}

/// A mirror config's top-level typo: exit 2, one line naming it and the
/// nearest known key.
#[test]
fn mirror_config_typos_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(&cfg, "talosVersion: [v1.13.6]\nimages: [metal-amd64.iso]\n").unwrap();
    let (code, _, err) = run(&["mirror", "plan", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("unknown field `talosVersion` (nearest known: `talosVersions`)"),
        "{err}"
    );
}

/// `datavolume` against a base URL nothing answers: exit 1, one line
/// naming the checksum URL once (the client's own error repeated it).
#[test]
fn datavolume_says_its_url_once() {
    let port = support::free_port();
    let base = format!("http://127.0.0.1:{port}");
    let (code, _, err) = datavolume(&base, "5s");
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches(&base).count(), 1, "{err}");
    assert!(err.contains("openstack-amd64.raw.xz.sha256"), "{err}");
    assert!(err.to_lowercase().contains("connect"), "{err}");
}
