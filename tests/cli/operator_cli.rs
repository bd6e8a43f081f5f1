//! Issue 14, as a new user meets the CLI: every message names what was
//! typed, with the contract's exit codes (0 ok, 1 refused, 2 bad input),
//! honest defaults, help with defaults and examples, and the README's
//! commands run as written.

use crate::support;

use std::path::Path;

fn run(args: &[&str]) -> (i32, String, String) {
    support::run_text(args, None)
}

fn run_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut c = std::process::Command::new(support::bin());
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        support::stdout(&out),
        support::stderr(&out),
    )
}

fn mc(shared: &Path, extra: &[&str]) -> (i32, String, String) {
    let secrets = shared.join("talos-golden/secrets.yaml");
    let mut args = vec![
        "machineconfig",
        "--cluster-name",
        "c1",
        "--endpoint",
        "https://c1.example:6443",
        "--with-secrets",
        secrets.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// [`mc`] with `--talos-version <talos> --kubernetes-version <k8s>`, then `extra`.
fn mc_versions(shared: &Path, talos: &str, k8s: &str, extra: &[&str]) -> (i32, String, String) {
    let versions = ["--talos-version", talos, "--kubernetes-version", k8s];
    mc(shared, &[&versions[..], extra].concat())
}

/// [`mc`] with `--profile cozystack -f <values>`, then `extra`.
fn mc_cozy(shared: &Path, values: &str, extra: &[&str]) -> (i32, String, String) {
    mc(
        shared,
        &[&["--profile", "cozystack", "-f", values][..], extra].concat(),
    )
}

/// `talos-gen matrix check --talos <talos> --kubernetes <k8s>`.
fn matrix_check(talos: &str, k8s: &str) -> (i32, String, String) {
    run(&["matrix", "check", "--talos", talos, "--kubernetes", k8s])
}

const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
const COZY: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

/// Item 1: a version without a patch never becomes an image tag.
#[test]
fn versions_never_tag_an_image_with_a_bare_minor() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let values = shared.join("cozystack/kubernetes-nodes.values.yaml");
    let v = values.to_str().unwrap();
    // The values' release of that minor.
    let (code, out, err) = mc_cozy(&shared, v, &["--talos-version", "v1.13"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "image: factory.talos.dev/installer/{COZY}:v1.13.6\n"
        )),
        "{out}"
    );
    assert!(!out.contains(":v1.13\n"), "{out}");
    // No values: the matrix's newest release, said on stderr.
    let (code, out, err) = mc(&shared, &["--talos-version", "v1.13"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("image: ghcr.io/siderolabs/installer:v1.13.9\n"),
        "{out}"
    );
    assert!(
        err.contains("--talos-version v1.13 has no patch") && err.contains("v1.13.9"),
        "{err}"
    );
    // A matrix that knows no release of the minor: exit 2 asking for one.
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("matrix.yaml");
    std::fs::write(
        &m,
        "talos:\n  - talos: \"1.13\"\n    kubernetes: {min: \"1.31.0\", max: \"1.36.99\"}\n    defaultKubernetes: {initial: \"1.36.0\", latest: \"1.36.3\"}\n",
    )
    .unwrap();
    let (code, out, err) = mc(
        &shared,
        &["--talos-version", "v1.13", "--matrix", m.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("--talos-version") && err.contains("give the full release"),
        "{err}"
    );
    // With no image written there is no tag to choose.
    let (code, _, err) = mc(
        &shared,
        &[
            "--talos-version",
            "v1.13",
            "--matrix",
            m.to_str().unwrap(),
            "--install-image",
            "",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // Build metadata is echoed as typed, never written as a tag; it is not
    // a version anywhere (issue 50 item 9: `+` is not valid in an OCI tag).
    let (code, _, err) = mc(&shared, &["--talos-version", "v1.13.6+build"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("\"v1.13.6+build\""), "{err}");
    let (code, _, err) = matrix_check("v1.13.6+build", "v1.30");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("build metadata"), "{err}");
}

/// Item 1: one wording for every version refusal, and what --force can do.
#[test]
fn version_refusals_are_worded_one_way() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let values = shared.join("cozystack/kubernetes-nodes.values.yaml");
    let v = values.to_str().unwrap();
    let (c1, _, matrix) = matrix_check("v1.13.6", "v1.30");
    let (c2, _, table) = mc_cozy(&shared, v, &["--kubernetes-version", "v1.30"]);
    let (c3, _, pair) = mc_versions(&shared, "v1.13.6", "1.30.0", &[]);
    assert_eq!((c1, c2, c3), (1, 1, 1), "{matrix}{table}{pair}");
    for e in [&matrix, &table, &pair] {
        assert!(e.contains("Supported versions: v1.31, v1.32"), "{e}");
        assert!(!e.contains("allowed versions are"), "{e}");
        assert!(!e.contains("[v1.31"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
    // --force cannot pick a kubelet for a minor the table lacks: it says so...
    let (code, _, err) = mc_cozy(&shared, v, &["--kubernetes-version", "v1.30", "--force"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--force cannot pick a kubelet release"),
        "{err}"
    );
    // ...and a full version with --force writes it.
    let (code, out, err) = mc_cozy(&shared, v, &["--kubernetes-version", "v1.30.14", "--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kubelet:v1.30.14"), "{out}");
}

/// Item 2: image references are checked before they are written.
#[test]
fn image_references_are_checked() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bad_values = dir.path().join("values.yaml");
    std::fs::write(&bad_values, "talos:\n  schematicID: zzz\n").unwrap();
    let bad_repo = dir.path().join("repo.yaml");
    std::fs::write(&bad_repo, "talos:\n  installerRepository: 'not a repo//'\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--schematic", "nothex"], "--schematic: \"nothex\""),
        (
            vec!["--profile", "cozystack", "-f", bad_values.to_str().unwrap()],
            "talos.schematicID: \"zzz\"",
        ),
        (
            vec!["--profile", "cozystack", "-f", bad_repo.to_str().unwrap()],
            "talos.installerRepository: \"not a repo//\"",
        ),
        (
            vec![
                "--schematic",
                VANILLA,
                "--installer-repository",
                "not a repo//",
            ],
            "--installer-repository: \"not a repo//\"",
        ),
        (
            vec!["--install-image", "Not An Image"],
            "--install-image: \"Not An Image\"",
        ),
    ];
    for (args, want) in cases {
        let (code, out, err) = mc(&shared, &args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.is_empty());
    }
}

/// Item 3: errors name what the user typed.
#[test]
fn errors_name_what_was_typed() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let values = shared.join("cozystack/kubernetes-nodes.values.yaml");
    let v = values.to_str().unwrap();
    let cozy = ["--profile", "cozystack", "-f", v];
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            [&cozy[..], &["--memory", "8GB", "--cpu", "2"]].concat(),
            2,
            "invalid --memory value \"8GB\"",
        ),
        (
            vec![
                "--eviction-hard-memory",
                "-5%",
                "--instance-type",
                "u1.medium",
            ],
            2,
            "--eviction-hard-memory: the eviction threshold must be a percentage in (0, 100], got -5%",
        ),
        (
            vec!["--cpu", "0", "--memory", "8Gi"],
            2,
            "--cpu must be a positive value, got 0",
        ),
        (
            vec!["--instance-type", "u1.medum"],
            2,
            "nearest known: u1.medium",
        ),
    ];
    for (args, want, msg) in cases {
        let (code, _, err) = mc(&shared, &args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // The same through kubelet-reservations.
    let (code, _, err) = run(&[
        "kubelet-reservations",
        "--instance-type",
        "u1.medium",
        "--eviction-hard-memory",
        "-5%",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("(0, 100]"), "{err}");
    // A typo at the top level of a values file (issue 41): exit 2, one
    // line naming the key and the nearest known one, nothing written.
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("values.yaml");
    let text = std::fs::read_to_string(&values).unwrap();
    for (typo_text, key, near) in [
        (
            format!("{text}instanceTyp: u1.large\n"),
            "instanceTyp",
            "instanceType",
        ),
        (
            text.replacen("\ntalos:\n", "\ntalso:\n", 1),
            "talso",
            "talos",
        ),
    ] {
        std::fs::write(&typo, &typo_text).unwrap();
        let (code, out, err) = mc(
            &shared,
            &["--profile", "cozystack", "-f", typo.to_str().unwrap()],
        );
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty(), "{out}");
        // The key's own line and column follow (issue 50 item 4).
        let line = typo_text
            .lines()
            .position(|l| l.starts_with(&format!("{key}:")))
            .unwrap()
            + 1;
        assert_eq!(
            err.trim(),
            format!(
                "talos-gen: --values: unknown top-level key \"{key}\" (nearest known: \"{near}\") (line {line}, column 1)"
            )
        );
    }
    // The real file (every key of the chart) is taken.
    let (code, _, err) = mc(&shared, &["--profile", "cozystack", "-f", v]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("unknown top-level key"), "{err}");
    // serve names the flag typed; internal type names never show.
    let (code, _, err) = run(&[
        "serve",
        "--factory-url",
        "ftp://x",
        "--cache-dir",
        "/nonexistent/x",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--factory-url"), "{err}");
    assert!(!err.contains("--registry-url"), "{err}");
    let out = support::run(&["schematic", "id", "-"], Some(b"overlay: [1]\n"));
    let err = support::stderr(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !err.contains("RawOverlay") && err.contains("expected a mapping"),
        "{err}"
    );
}

/// Item 4: --memory without --cpu is the same everywhere.
#[test]
fn pool_sizing_is_consistent() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let half = dir.path().join("values.yaml");
    std::fs::write(&half, "resources:\n  memory: 8Gi\n").unwrap();
    let (c1, _, e1) = mc(
        &shared,
        &["--profile", "cozystack", "-f", half.to_str().unwrap()],
    );
    let (c2, _, e2) = mc(&shared, &["--profile", "cozystack", "--memory", "8Gi"]);
    let (c3, _, e3) = mc(&shared, &["--memory", "8Gi"]);
    let (c4, _, e4) = run(&["kubelet-reservations", "--memory", "8Gi"]);
    assert_eq!((c1, c2, c3, c4), (2, 2, 2, 2), "{e1}{e2}{e3}{e4}");
    assert!(
        e1.contains("resources.cpu") && e1.contains("resources.memory"),
        "{e1}"
    );
    for e in [&e2, &e3, &e4] {
        assert!(e.contains("--memory 8Gi without --cpu"), "{e}");
    }
}

/// Item 5: environment and flags.
#[test]
fn environment_and_flags() {
    // A flag given twice takes the last value.
    let (code, out, err) = run(&[
        "kubelet-reservations",
        "--instance-type",
        "u1.medium",
        "--instance-type",
        "u1.xlarge",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"capacityCpu\": \"3600m\""), "{out}");
    // --log-format rejects unknown values; booleans in the environment.
    let (code, _, err) = run(&["serve", "--log-format", "xml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--log-format") && err.contains("text, json"),
        "{err}"
    );
    let (code, _, err) = run_env(&["serve"], &[("TALOS_GEN_OFFLINE", "maybe")]);
    assert_eq!(code, 2);
    assert!(err.contains("--offline"), "{err}");
}

/// What `serve` made of its `--offline` setting: it logs `offline=...` on
/// its `listening` line (then it is stopped), or exits with a message.
fn serve_offline(args: &[&str], env: &[(&str, &str)]) -> Result<bool, (i32, String)> {
    let args = [&["--listen", "127.0.0.1:0"], args].concat();
    let mut env: Vec<(&str, Option<&str>)> = env.iter().map(|(k, v)| (*k, Some(*v))).collect();
    if !env.iter().any(|(k, _)| *k == "TALOS_GEN_OFFLINE") {
        env.push(("TALOS_GEN_OFFLINE", None));
    }
    let line = support::serve_listening(&args, &env)?;
    if line.contains("offline=true") {
        Ok(true)
    } else if line.contains("offline=false") {
        Ok(false)
    } else {
        panic!("no offline= on {line:?}")
    }
}

/// Item 5: boolean settings take true/false and 1/0, from the environment
/// (`TALOS_GEN_OFFLINE`) and on the command line (`--offline=V`); the bare
/// flag means true; a bad value (the empty one too) is bad input, named.
#[test]
fn boolean_settings_take_true_false_1_0() {
    assert_eq!(serve_offline(&[], &[]), Ok(false), "the default");
    assert_eq!(
        serve_offline(&["--offline"], &[]),
        Ok(true),
        "the bare flag"
    );
    let cases = [
        ("true", true),
        ("false", false),
        ("1", true),
        ("0", false),
        // Any case.
        ("TRUE", true),
        ("False", false),
    ];
    for (v, want) in cases {
        let env = serve_offline(&[], &[("TALOS_GEN_OFFLINE", v)]);
        assert_eq!(env, Ok(want), "TALOS_GEN_OFFLINE={v}");
        let flag = format!("--offline={v}");
        assert_eq!(serve_offline(&[&flag], &[]), Ok(want), "{flag}");
    }
    // The command line wins over the environment.
    assert_eq!(
        serve_offline(&["--offline=false"], &[("TALOS_GEN_OFFLINE", "1")]),
        Ok(false)
    );
    assert_eq!(
        serve_offline(&["--offline"], &[("TALOS_GEN_OFFLINE", "0")]),
        Ok(true)
    );
    // Exactly the contract's words (issue 21): clap's boolish `yes`/`off`
    // are refused like any other word.
    for v in ["", "maybe", "2", "truee", "yes", "no", "on", "off"] {
        let (code, err) = serve_offline(&[], &[("TALOS_GEN_OFFLINE", v)]).unwrap_err();
        assert_eq!(code, 2, "TALOS_GEN_OFFLINE={v:?}: {err}");
        assert_eq!(
            err.trim(),
            format!(
                "error: --offline (or TALOS_GEN_OFFLINE): {v:?} is not a boolean; give true or false, 1 or 0"
            ),
            "one line naming the variable and the value"
        );
        let (code, err) = serve_offline(&[&format!("--offline={v}")], &[]).unwrap_err();
        assert_eq!(code, 2, "--offline={v:?}: {err}");
        assert!(err.contains(&format!("{v:?} is not a boolean")), "{err}");
    }
    // A value is given with `=`; a separate word is not taken as one.
    let (code, err) = serve_offline(&["--offline", "false"], &[]).unwrap_err();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'false'"), "{err}");
}

/// Every subcommand path of the CLI (`["mirror", "sync"]`, ...), from clap's
/// own tree, with its arguments.
fn subcommands() -> Vec<(Vec<String>, clap::Command)> {
    fn walk(prefix: &[String], c: &clap::Command, out: &mut Vec<(Vec<String>, clap::Command)>) {
        for s in c.get_subcommands() {
            if s.get_name() == "help" {
                continue;
            }
            let mut path = prefix.to_vec();
            path.push(s.get_name().to_string());
            out.push((path.clone(), s.clone()));
            walk(&path, s, out);
        }
    }
    // Built, so that each argument's number of values is settled.
    let mut root = talos_gen::cli::command();
    root.build();
    let mut out = Vec::new();
    walk(&[], &root, &mut out);
    out
}

/// The help text of one option: its line and any lines clap wraps under it.
fn option_block(options: &[&str], long: &str) -> Option<String> {
    let flag = format!("--{long}");
    let starts = |t: &str| {
        let t = match t.split_once(", ") {
            Some((short, rest)) if short.len() == 2 => rest,
            _ => t,
        };
        t == flag || t.starts_with(&format!("{flag} ")) || t.starts_with(&format!("{flag}["))
    };
    let i = options.iter().position(|l| starts(l.trim_start()))?;
    let mut block = options[i].trim().to_string();
    // The option's whole text: every paragraph (a possible-values list and
    // `[default: ...]` come after blank lines) up to the next option.
    for l in &options[i + 1..] {
        let t = l.trim();
        if t.is_empty() {
            continue;
        }
        let next_option =
            t.starts_with("--") || (t.len() > 3 && t.starts_with('-') && t.as_bytes()[2] == b',');
        if next_option {
            break;
        }
        if t.is_empty() {
            continue;
        }
        block.push(' ');
        block.push_str(t);
    }
    Some(block)
}

/// Item 6: every flag of every subcommand has a description and says its
/// default; the main commands end with examples.
#[test]
fn help_describes_every_flag() {
    let listed: &[&[&str]] = &[
        &["machineconfig"],
        &["kubelet-reservations"],
        &["serve"],
        &["mirror", "sync"],
        &["mirror", "verify"],
        &["mirror", "prune"],
        &["mirror", "cert"],
        &["mirror", "export"],
        &["mirror", "import"],
        &["matrix"],
        &["matrix", "check"],
        &["schematic", "id"],
        &["schematic", "canonical"],
        &["datavolume"],
    ];
    let tree = subcommands();
    for cmd in listed {
        assert!(
            tree.iter().any(|(p, _)| p == cmd),
            "{cmd:?} is no longer a subcommand"
        );
    }
    for (cmd, clap_cmd) in &tree {
        let mut args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        args.push("--help");
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{cmd:?}: {err}");
        // Each option line: `  --flag <V>  description` (clap puts long
        // descriptions on the next line; both forms have text after the flag).
        // Only the Options section (the examples after it hold flags too).
        let lines: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with("Options:"))
            .skip(1)
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .collect();
        assert!(!lines.is_empty(), "{cmd:?}: no options in\n{out}");
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            if !(t.starts_with("--") || (t.starts_with('-') && t.chars().nth(2) == Some(','))) {
                continue;
            }
            if t.starts_with("--help") || t.starts_with("-h,") || t.starts_with("-V,") {
                continue;
            }
            let (_, rest) = t.split_once("  ").unwrap_or((t, ""));
            let next = lines.get(i + 1).map(|n| n.trim()).unwrap_or("");
            assert!(
                !rest.trim().is_empty() || (!next.is_empty() && !next.starts_with('-')),
                "{cmd:?}: no description for {t:?}\n{out}"
            );
        }
        // Defaults: a flag with a default in clap shows it as
        // `[default: V]`; any other flag taking a value says in its text
        // what happens without it (`(default: ...)`), unless it is required.
        // Switches (`--json`) are off unless given.
        let mut checked = Vec::new();
        for a in clap_cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            if a.is_hide_set() || matches!(long, "help" | "version") {
                continue;
            }
            let block = option_block(&lines, long)
                .unwrap_or_else(|| panic!("{cmd:?}: --{long} not in\n{out}"));
            let defaults: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let takes_value =
                a.get_action().takes_values() && a.get_num_args().is_some_and(|n| n.takes_values());
            if !takes_value {
                continue;
            }
            checked.push(long);
            if !defaults.is_empty() {
                let shown = format!("[default: {}]", defaults.join(", "));
                assert!(
                    block.contains(&shown),
                    "{cmd:?}: --{long} does not show {shown}: {block}"
                );
            } else {
                let required = a.is_required_set() || block.contains("(required)");
                assert!(
                    required || block.to_lowercase().contains("default"),
                    "{cmd:?}: --{long} does not say its default: {block}"
                );
            }
        }
        if cmd == &["serve"] {
            for f in [
                "listen",
                "offline",
                "upstream-timeout",
                "upstream-min-rate",
                "tls-cert",
                "tls-key",
                "public-url",
                "log-format",
                "metadata-ttl",
                "store",
                "s3-endpoint",
                "s3-region",
                "trust-forwarded-for",
                "local-cache-max-size",
                "body-read-timeout",
                "max-connections",
                "stale-while-revalidate",
            ] {
                assert!(checked.contains(&f), "serve --{f} not checked: {checked:?}");
            }
            assert_eq!(checked.len(), 30, "{checked:?}");
        }
    }
    // The upstream bounds, on both commands that have them.
    for cmd in [&["serve"][..], &["mirror", "sync"]] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let (_, out, _) = run(&args);
        let lines: Vec<&str> = out.lines().collect();
        let t = option_block(&lines, "upstream-timeout").unwrap();
        assert!(t.contains("[default: 30s]"), "{cmd:?}: {t}");
        let r = option_block(&lines, "upstream-min-rate").unwrap();
        assert!(r.contains("[default: 1Ki]"), "{cmd:?}: {r}");
    }
    for cmd in [
        &["machineconfig"][..],
        &["kubelet-reservations"],
        &["serve"],
        &["mirror", "sync"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let (_, out, _) = run(&args);
        assert!(out.contains("Examples:\n"), "{cmd:?}:\n{out}");
    }
    let (_, out, _) = run(&["machineconfig", "--help"]);
    assert!(
        out.contains("/dev/sda") && out.contains("ghcr.io/siderolabs/installer"),
        "{out}"
    );
    let (_, out, _) = run(&["serve", "--help"]);
    assert!(out.contains("[default: 127.0.0.1:8080]"), "{out}");
    assert!(out.contains("--offline[=<BOOL>]"), "{out}");
    assert!(
        option_block(&out.lines().collect::<Vec<_>>(), "offline")
            .unwrap()
            .contains("[default: false]"),
        "{out}"
    );
}

/// Issue 21 item 6: every command's `--help` ends with examples: an
/// `Examples:` section, nothing after it but indented lines.
#[test]
fn every_help_ends_with_examples() {
    for (cmd, _) in subcommands() {
        let mut args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        args.push("--help");
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{cmd:?}: {err}");
        let (_, tail) = out
            .rsplit_once("\nExamples:\n")
            .unwrap_or_else(|| panic!("{cmd:?}: no examples:\n{out}"));
        for l in tail.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                l.starts_with("  "),
                "{cmd:?}: {l:?} after the examples:\n{out}"
            );
        }
        assert!(tail.contains("talos-gen "), "{cmd:?}: {tail}");
    }
}

/// Issue 21 item 6: `mirror sync --help` names every key of the mirror
/// config, as the config parser itself lists them (an unknown key's
/// refusal), `workers` among them.
#[test]
fn mirror_sync_help_names_every_config_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("m.yaml");
    std::fs::write(&cfg, "noSuchKey: []\n").unwrap();
    let (code, _, err) = run(&["mirror", "plan", "--config", cfg.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    let listed = err
        .split_once("expected one of")
        .unwrap_or_else(|| panic!("the refusal lists no keys: {err}"))
        .1;
    let keys: Vec<&str> = listed.split('`').skip(1).step_by(2).collect();
    assert!(
        keys.contains(&"workers") && keys.len() >= 8,
        "{keys:?} from {err}"
    );
    let (_, help, _) = run(&["mirror", "sync", "--help"]);
    for k in keys {
        assert!(
            help.contains(&format!(" {k}")) || help.contains(&format!("{k},")),
            "mirror sync --help does not name {k}:\n{help}"
        );
    }
}

/// Item 6: `schematic id NAME`, `version`, and talosctl's defaults.
#[test]
fn named_schematics_version_and_defaults() {
    let (code, out, err) = run(&["schematic", "id", "cozystack"]);
    assert_eq!((code, out.trim()), (0, COZY), "{err}");
    let (code, out, _) = run(&["schematic", "id", "vanilla"]);
    assert_eq!((code, out.trim()), (0, VANILLA));
    for args in [&["version"][..], &["--version"]] {
        let (code, out, err) = run(args);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("Talos: v1.0 to v1.15 (newest release v1.14.6), v1.15 unreleased")
                && out.contains("Kubernetes: v1.21 to v1.38"),
            "{out}"
        );
    }
    let Some(shared) = support::reference_dir() else {
        return;
    };
    // talosctl gen config's defaults: /dev/sda, its installer per release.
    let (code, out, err) = mc_versions(&shared, "v1.13.6", "1.35.0", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "        disk: /dev/sda\n        image: ghcr.io/siderolabs/installer:v1.13.6\n"
        ),
        "{out}"
    );
    let (code, out, err) = mc_versions(&shared, "v1.14.0", "1.35.0", &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "image: factory.talos.dev/metal-installer/{VANILLA}:v1.14.0\n"
        )),
        "{out}"
    );
    assert!(out.contains("disk.dev_path == \"/dev/sda\""), "{out}");
    // '' writes none; the profile keeps its own.
    let (code, out, err) = mc(
        &shared,
        &[
            "--talos-version",
            "v1.13.6",
            "--install-image",
            "",
            "--install-disk",
            "",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        !out.contains("installer:") && !out.contains("disk: /dev/sda"),
        "{out}"
    );
    let (code, out, err) = mc(&shared, &["--profile", "cozystack"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("disk: /dev/vda\n") && out.contains(COZY),
        "{out}"
    );
}

/// Item 8: mirror job edges.
#[test]
fn mirror_edges() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache_s = cache.to_str().unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "schematics: []\n").unwrap();
    let (code, _, err) = run(&[
        "mirror",
        "sync",
        "--config",
        empty.to_str().unwrap(),
        "--cache-dir",
        cache_s,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing to mirror"), "{err}");
    // Not a mirror tar: one line of text, no raw bytes.
    let junk = dir.path().join("junk.tar");
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(&junk, bytes).unwrap();
    let (code, _, err) = run(&[
        "mirror",
        "import",
        junk.to_str().unwrap(),
        "--cache-dir",
        cache_s,
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("talos-gen mirror export"), "{err}");
    assert!(
        err.chars().all(|c| c == '\n' || (' '..='~').contains(&c)),
        "{err:?}"
    );
    // Export, then import twice: the second says what was already there.
    let exported = dir.path().join("m.tar");
    let (code, _, err) = run(&[
        "mirror",
        "export",
        "--cache-dir",
        cache_s,
        "--output",
        exported.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&[
        "mirror",
        "import",
        exported.to_str().unwrap(),
        "--cache-dir",
        cache_s,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("already present"), "{out}");
    // Nothing was written the second time, and the line says so (it
    // counted the objects already there as imported).
    assert!(out.contains("0 keys, 0 objects (0 B) imported"), "{out}");
}

/// README: the commands a user copies work as written, from a fresh clone
/// (issue 41: the values file they name is the repository's own
/// `examples/kubernetes-nodes.values.yaml`, nothing from elsewhere).
#[test]
fn readme_commands_run() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    // Every `talos-gen machineconfig|kubelet-reservations|schematic|matrix`
    // line of a ```sh block marked `# tested`, continuation lines joined.
    let mut cmds = Vec::new();
    let mut in_block = false;
    let mut tested = false;
    let mut cur = String::new();
    for l in readme.lines() {
        if l.starts_with("```sh") {
            in_block = true;
            tested = l.contains("tested");
            continue;
        }
        if l.starts_with("```") {
            in_block = false;
            continue;
        }
        if !(in_block && tested) {
            continue;
        }
        let l = l.trim();
        if l.starts_with('#') || l.is_empty() {
            continue;
        }
        cur.push_str(l.trim_end_matches('\\'));
        cur.push(' ');
        if !l.ends_with('\\') {
            cmds.push(std::mem::take(&mut cur));
        }
    }
    assert!(cmds.len() >= 4, "{cmds:?}");
    // A clone's root as the commands see it: the repository's files under
    // their own paths, what the commands write kept out of the checkout.
    let work = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::os::unix::fs::symlink(root.join("examples"), work.path().join("examples")).unwrap();
    for c in cmds {
        let words: Vec<String> = shell_words(&c);
        assert_eq!(words[0], "talos-gen", "{c}");
        let out = std::process::Command::new(support::bin())
            .args(&words[1..])
            .current_dir(work.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README command failed: {c}\n{}",
            support::stderr(&out)
        );
    }
}

/// The example values file is the chart's `values.yaml` as published (the
/// reference copy in `../shared`), under a comment naming its source.
#[test]
fn example_values_file_is_the_charts() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/kubernetes-nodes.values.yaml"
    ))
    .unwrap();
    let head: String = example.lines().take(4).collect::<Vec<_>>().join(" ");
    assert!(
        head.contains("github.com/cozystack/cozystack")
            && head.contains("packages/apps/kubernetes-nodes/values.yaml"),
        "{head}"
    );
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let chart =
        std::fs::read_to_string(shared.join("cozystack/kubernetes-nodes.values.yaml")).unwrap();
    assert!(
        example.ends_with(&chart),
        "the example is not the chart's file"
    );
}

/// Enough of sh's word splitting for the README: spaces, '' and "".
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, ' ') => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// GitHub's anchor of a heading: lowercase, punctuation dropped, spaces
/// made `-`.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A Markdown file's text outside fenced blocks and inline code spans,
/// and its headings' anchors.
fn prose_and_anchors(text: &str) -> (String, Vec<String>) {
    let mut prose = String::new();
    let mut anchors = Vec::new();
    let mut fenced = false;
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(h) = l.strip_prefix('#') {
            anchors.push(anchor_of(h.trim_start_matches('#')));
        }
        // Inline code is no link: `a](b)` in backquotes is left out.
        for (i, part) in l.split('`').enumerate() {
            if i % 2 == 0 {
                prose.push_str(part);
            }
            prose.push(' ');
        }
        prose.push('\n');
    }
    (prose, anchors)
}

/// Issue 41: every relative link of README.md, ARCHITECTURE.md and
/// docs/*.md resolves (a file of the repository, and its heading when it
/// names one), and so does every `*.md` file named in their prose (the
/// `see cozystack-worker.md` of docs/interface.md named a file the
/// repository does not have).
#[test]
fn every_relative_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            docs.push(p);
        }
    }
    let anchors_of = |p: &Path| prose_and_anchors(&std::fs::read_to_string(p).unwrap()).1;
    let mut bad = Vec::new();
    let mut followed = 0;
    for doc in &docs {
        let (prose, anchors) = prose_and_anchors(&std::fs::read_to_string(doc).unwrap());
        let dir = doc.parent().unwrap();
        let name = doc.strip_prefix(root).unwrap().display().to_string();
        // [text](target) and [text](target "title")
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            rest = &rest[end..];
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            followed += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                doc.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                bad.push(format!("{name}: {target}: no such file"));
                continue;
            }
            if !anchor.is_empty() {
                let known = if path.is_empty() {
                    anchors.clone()
                } else {
                    anchors_of(&file)
                };
                if !known.iter().any(|a| a == anchor) {
                    bad.push(format!("{name}: {target}: no heading #{anchor}"));
                }
            }
        }
        // A `*.md` file named in prose: in the document's folder or the
        // repository's root.
        for word in prose.split(|c: char| c.is_whitespace() || "(),;:\"'[]".contains(c)) {
            let word = word.trim_end_matches('.');
            if !word.ends_with(".md") || word.contains("://") {
                continue;
            }
            let word = word.split('#').next().unwrap();
            if !dir.join(word).exists() && !root.join(word).exists() {
                bad.push(format!("{name}: names {word}, not in the repository"));
            }
        }
    }
    assert!(followed >= 5, "only {followed} links found");
    assert!(
        bad.is_empty(),
        "links that do not resolve:\n{}",
        bad.join("\n")
    );
}

/// Issue 41: the examples of `--help` agree with the README: the offline
/// serve is the README's command (no --mirror-upstream: the registries the
/// store holds are known without it), and the values file of
/// `machineconfig --help` is the repository's example.
#[test]
fn help_examples_agree_with_the_readme() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let (_, help, _) = run(&["serve", "--help"]);
    let offline: Vec<&str> = help
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("talos-gen serve --offline"))
        .collect();
    assert!(!offline.is_empty(), "{help}");
    for l in offline {
        assert!(!l.contains("--mirror-upstream"), "{l}");
        assert!(
            readme.lines().any(|r| r.trim() == l),
            "serve --help's {l:?} is not a README command"
        );
    }
    let (_, help, _) = run(&["machineconfig", "--help"]);
    let values: Vec<&str> = help
        .split_whitespace()
        .skip_while(|w| *w != "-f")
        .skip(1)
        .take(1)
        .collect();
    assert_eq!(values, ["examples/kubernetes-nodes.values.yaml"], "{help}");
    assert!(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(values[0])
            .is_file()
    );
    assert!(readme.contains(&format!("-f {}", values[0])));
}
