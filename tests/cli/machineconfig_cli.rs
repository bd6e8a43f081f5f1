//! `talos-gen machineconfig` edges: bad input and refusals with the
//! contract's exit codes and a message naming the field, the Cozystack
//! values file as it is, and patches the goldens do not show.

use crate::support;

use std::path::Path;

/// The golden secrets bundle and the Cozystack chart's values file of the
/// reference data, and the argument lists built on them.
struct Golden {
    secrets: String,
    values: String,
}

impl Golden {
    fn new(shared: &Path) -> Golden {
        let s = |p: &str| shared.join(p).to_str().unwrap().to_string();
        Golden {
            secrets: s("talos-golden/secrets.yaml"),
            values: s("cozystack/kubernetes-nodes.values.yaml"),
        }
    }

    /// `--with-secrets <golden bundle>`, then `extra`.
    fn with<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["--with-secrets", self.secrets.as_str()];
        args.extend_from_slice(extra);
        args
    }

    /// [`Golden::with`] `--talos-version <talos>`, then `extra`.
    fn talos<'a>(&'a self, talos: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = self.with(&["--talos-version", talos]);
        args.extend_from_slice(extra);
        args
    }

    /// [`Golden::with`] `--profile cozystack -f <values>` (`-`: stdin), then `extra`.
    fn profile<'a>(&'a self, values: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = self.with(&["--profile", "cozystack", "-f", values]);
        args.extend_from_slice(extra);
        args
    }

    /// [`Golden::profile`] with the chart's values file.
    fn cozy<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        self.profile(&self.values, extra)
    }
}

/// `talos-gen machineconfig --cluster-name c1 --endpoint ... <extra>`:
/// (exit code, stdout, stderr).
fn mc(extra: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut args = vec![
        "machineconfig",
        "--cluster-name",
        "c1",
        "--endpoint",
        "https://c1.ns.svc:6443",
    ];
    args.extend_from_slice(extra);
    support::run_text(&args, stdin)
}

#[test]
fn bad_input_and_refusals() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let g = Golden::new(&shared);
    let patch = |p| g.talos("v1.13", &["--config-patch", p]);
    let memory = "must be less than effective node memory (4Gi)";
    let window = "Supported versions: v1.31, v1.32, v1.33, v1.34, v1.35, v1.36";
    let table = "Kubernetes v1.30 is not supported by the Cozystack profile (its kubelet table). Supported versions: v1.31, v1.32, v1.33, v1.34, v1.35";
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (
            g.cozy(&["--instance-type", "u9.huge"]),
            2,
            "instanceType \"u9.huge\" not found",
        ),
        (
            g.cozy(&["--memory", "4 Gi", "--cpu", "1"]),
            2,
            "invalid --memory value \"4 Gi\"",
        ),
        (
            g.cozy(&["--kube-reserved-cpu", "lots"]),
            2,
            "invalid --kube-reserved-cpu value \"lots\"",
        ),
        (g.cozy(&["--system-reserved-memory", "3.5Gi"]), 1, memory),
        (patch("machine: [unclosed"), 2, "--config-patch #1"),
        (
            patch("machine:\n  kubelet:\n    nope: 1\n"),
            2,
            "unknown field \"machine.kubelet.nope\"",
        ),
        (
            patch("machine:\n  install:\n    wipe: maybe\n"),
            2,
            "machine.install.wipe: expected true or false",
        ),
        (
            patch("apiVersion: v1alpha1\nkind: NoSuchConfig\n"),
            2,
            "unknown document kind \"NoSuchConfig\"",
        ),
        (
            g.talos("v1.13", &["--kubernetes-version", "1.28.0"]),
            1,
            window,
        ),
        (g.talos("v1.99", &[]), 1, "--talos-version"),
        (g.talos("1.x", &[]), 2, "--talos-version"),
        (
            g.with(&["--registry-mirror", "ghcr.io"]),
            2,
            "--registry-mirror",
        ),
        (g.with(&["--nameserver", "not-an-ip"]), 2, "--nameserver"),
        (
            vec!["--with-secrets", "/nonexistent/secrets.yaml"],
            2,
            "--with-secrets",
        ),
        (g.cozy(&["--kubernetes-version", "v1.30"]), 1, table),
    ];
    for (args, want, msg) in cases {
        let (code, out, err) = mc(&args, None);
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn values_file_unknown_keys() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let g = Golden::new(&shared);
    for (text, want, msg) in [
        // Issue 41: a top-level key the chart does not have is refused
        // (a typo of `talos:` once silently gave the default release).
        (
            "somethingNew: 1\nversion: v1.34\n",
            2,
            "--values: unknown top-level key \"somethingNew\" (nearest known: ",
        ),
        ("version: v1.34\npodCpuLimit: 2\n", 0, ""),
        ("talos:\n  versionn: v1.13.6\n", 2, "versionn"),
        (
            "kubelet:\n  systemReservedMem: 1Gi\n",
            2,
            "systemReservedMem",
        ),
        (
            "talos:\n  registryMirrors:\n    ghcr.io:\n      endpoint: [http://x]\n",
            2,
            "talos.registryMirrors.ghcr.io",
        ),
    ] {
        let (code, out, err) = mc(&g.profile("-", &[]), Some(text.as_bytes()));
        assert_eq!(code, want, "{text}: {err}");
        assert!(err.contains(msg), "{text}: {err}");
        if want == 0 {
            assert!(out.contains("ghcr.io/siderolabs/kubelet:v1.34.9"), "{out}");
        }
    }
}

#[test]
fn the_chart_guard_refuses_and_force_writes() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let g = Golden::new(&shared);
    let values = Some("version: v1.35\ntalos:\n  version: v1.13.6\n".as_bytes());
    // v1.13 runs v1.31..v1.36; v1.30 is not in the versions table either,
    // so use the talos version to move out of the window instead.
    let old_talos = g.profile("-", &["--talos-version", "v1.11.3"]);
    let (code, _, err) = mc(&old_talos, values);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Kubernetes v1.35.6 is not supported by Talos v1.11.3"),
        "{err}"
    );
    let (code, out, err) = mc(&[&old_talos[..], &["--force"]].concat(), values);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning:"), "{err}");
    assert!(out.contains("registries") || out.contains("kubelet:v1.35.6"));
}

#[test]
fn real_values_file_renders_the_chart_worker() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let g = Golden::new(&shared);
    let (code, out, err) = mc(
        &g.cozy(&[
            "--talos-version",
            "v1.11.6",
            "--kubernetes-version",
            "v1.34",
            "--nameserver",
            "10.95.0.10",
            "--search-domain",
            "svc.cozy.local",
            "--search-domain",
            "cozy.local",
            "--extra-host-entry",
            "10.95.3.4=c1.ns.svc,c1.ns.svc.cluster.local",
        ]),
        None,
    );
    assert_eq!(code, 0, "{err}");
    let want_fragments = [
        "    network:\n        nameservers:\n            - 10.95.0.10\n        searchDomains:\n            - svc.cozy.local\n            - cozy.local\n        extraHostEntries:\n            - ip: 10.95.3.4\n              aliases:\n                - c1.ns.svc\n                - c1.ns.svc.cluster.local\n",
        "        image: ghcr.io/siderolabs/kubelet:v1.34.9\n",
        "            kubeReserved:\n                cpu: 50m\n                memory: 256Mi\n",
        "    install:\n        disk: /dev/vda\n        image: factory.talos.dev/installer/ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515:v1.11.6\n        wipe: false\n",
        "        kubePrism:\n            enabled: false\n",
        "            - 10.243.0.0/16\n",
        "            - 10.95.0.0/16\n",
        "            service:\n                disabled: true\n",
        "        rbac: true\n",
    ];
    for f in want_fragments {
        assert!(out.contains(f), "missing:\n{f}\n--- in\n{out}");
    }
}

#[test]
fn patches_beyond_the_goldens() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let g = Golden::new(&shared);
    // Fields in Go struct order whatever order the patch uses; maps sorted;
    // extraArgs replaced per key; mirrors merged by name (endpoints append).
    let patch = "\
machine:
  time:
    servers: [time.example]
    bootTimeout: 90s
  kubelet:
    extraArgs:
      rotate-server-certificates: true
    nodeIP:
      validSubnets: [10.0.0.0/8]
  nodeLabels:
    zone: b
    a10: x
    a9: y
---
apiVersion: v1alpha1
kind: RegistryMirrorConfig
name: ghcr.io
endpoints:
  - url: https://second.example
";
    let (code, out, err) = mc(
        &g.talos(
            "v1.12",
            &[
                "--kubernetes-version",
                "1.34.0",
                "--registry-mirror",
                "ghcr.io=https://first.example",
                "--config-patch",
                patch,
            ],
        ),
        None,
    );
    assert_eq!(code, 0, "{err}");
    for f in [
        "    kubelet:\n        image: ghcr.io/siderolabs/kubelet:v1.34.0\n        extraArgs:\n            rotate-server-certificates: \"true\"\n        defaultRuntimeSeccompProfileEnabled: true\n        nodeIP:\n            validSubnets:\n                - 10.0.0.0/8\n        disableManifestsDirectory: true\n",
        "    time:\n        servers:\n            - time.example\n        bootTimeout: 1m30s\n",
        "    nodeLabels:\n        a9: \"y\"\n        a10: x\n        zone: b\n",
        "kind: RegistryMirrorConfig\nname: ghcr.io\nendpoints:\n    - url: https://first.example\n    - url: https://second.example\n",
    ] {
        assert!(out.contains(f), "missing:\n{f}\n--- in\n{out}");
    }
    // features come after time in MachineConfig.
    assert!(out.find("    time:").unwrap() < out.find("    features:").unwrap());
}

/// `$patch: delete` through the CLI: deleting the registry mirror document
/// a flag wrote gives exactly the config written without that flag;
/// deleting something that is not there exits 2 naming the path.
#[test]
fn delete_directives_through_the_cli() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let g = Golden::new(&shared);
    let base = g.talos("v1.13", &["--kubernetes-version", "1.35.0"]);
    let (code, plain, err) = mc(&base, None);
    assert_eq!(code, 0, "{err}");
    let mut args = base.to_vec();
    args.extend(["--registry-mirror", "ghcr.io=https://mirror.example"]);
    let (code, with_mirror, err) = mc(&args, None);
    assert_eq!(code, 0, "{err}");
    assert!(with_mirror.contains("kind: RegistryMirrorConfig\nname: ghcr.io\n"));
    args.extend([
        "--config-patch",
        "apiVersion: v1alpha1\nkind: RegistryMirrorConfig\nname: ghcr.io\n$patch: delete\n",
    ]);
    let (code, out, err) = mc(&args, None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, plain);

    let mut args = base.to_vec();
    args.extend([
        "--config-patch",
        "machine:\n  nodeLabels:\n    missing:\n      $patch: delete\n",
    ]);
    let (code, _, err) = mc(&args, None);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--config-patch #1") && err.contains("'machine.nodeLabels.missing'"),
        "{err}"
    );
}

/// JSON (RFC 6902) patches, detected as talosctl detects them (a list, in
/// JSON or YAML): on a single-document config (up to 1.11) they give the
/// same config as the equivalent strategic merge patch; a multi-document
/// config (1.12 on) refuses them; a field Talos lacks or a path that is not
/// there exits 2.
#[test]
fn json6902_patches() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let g = Golden::new(&shared);
    let with = |talos: &str, patch: &str| {
        let k8s = ["--kubernetes-version", "1.33.0", "--config-patch", patch];
        mc(&g.talos(talos, &k8s), None)
    };
    let strategic = "machine:\n  install:\n    extraKernelArgs: [foo=bar]\n  sysctls: {foo: bar}\n  network:\n    hostname: worker1\ncluster:\n  network:\n    cni: {name: custom, urls: [https://example.com/cni.yaml]}\n";
    let json = r#"[
      {"op": "add", "path": "/machine/install/extraKernelArgs", "value": ["foo=bar"]},
      {"op": "add", "path": "/machine/sysctls", "value": {"foo": "bar"}},
      {"op": "add", "path": "/machine/network/hostname", "value": "worker1"},
      {"op": "add", "path": "/cluster/network/cni", "value": {"name": "custom", "urls": ["https://example.com/cni.yaml"]}}
    ]"#;
    let yaml_ops = "- op: add\n  path: /machine/network/hostname\n  value: worker1\n";
    let (c1, a, e1) = with("v1.11", strategic);
    let (c2, b, e2) = with("v1.11", json);
    assert_eq!((c1, c2), (0, 0), "{e1}{e2}");
    assert_eq!(a, b);
    assert!(a.contains("hostname: worker1"));
    let (c, out, e) = with("v1.11", yaml_ops);
    assert_eq!(c, 0, "{e}");
    assert!(out.contains("        hostname: worker1\n"), "{out}");

    let (c, _, e) = with("v1.13", json);
    assert_eq!(c, 2);
    assert!(e.contains("single-document"), "{e}");
    let (c, _, e) = with(
        "v1.11",
        r#"[{"op": "add", "path": "/machine/bogus", "value": 1}]"#,
    );
    assert_eq!(c, 2);
    assert!(e.contains("bogus"), "{e}");
    let (c, _, e) = with(
        "v1.11",
        r#"[{"op": "remove", "path": "/machine/network/nope"}]"#,
    );
    assert_eq!(c, 2);
    assert!(e.contains("--config-patch #1") && e.contains("JSON"), "{e}");
}

/// Issue 10 item 5: `--output-secrets` never replaces a different bundle
/// (exit 1, file untouched), the same bundle is fine (`--with-secrets A
/// --output-secrets A`), one file for both outputs is exit 2, and both files
/// are written atomically with mode 0600 (no temp file left behind).
#[test]
fn output_secrets_never_overwrites_a_different_bundle() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("secrets.yaml");
    let cfg = dir.path().join("worker.yaml");
    let (a_s, cfg_s) = (a.to_str().unwrap(), cfg.to_str().unwrap());
    let base = ["--talos-version", "v1.13.6"];

    let mut args = base.to_vec();
    args.extend(["--output-secrets", a_s, "-o", cfg_s]);
    let (code, out, err) = mc(&args, None);
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty(), "-o: nothing on stdout");
    for f in [&a, &cfg] {
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    let first = std::fs::read(&a).unwrap();
    let first_cfg = std::fs::read(&cfg).unwrap();

    // Fresh secrets again: a different bundle; refused, nothing touched.
    let (code, out, err) = mc(&args, None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--output-secrets") && err.contains("different secrets bundle"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.is_empty());
    assert_eq!(std::fs::read(&a).unwrap(), first);
    assert_eq!(std::fs::read(&cfg).unwrap(), first_cfg);

    // The same bundle as input: the config is the same.
    let mut same = base.to_vec();
    same.extend(["--with-secrets", a_s]);
    let (code, out, err) = mc(&same, None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.as_bytes(), first_cfg.as_slice());
    assert_eq!(std::fs::read(&a).unwrap(), first);

    // A file that is not a bundle at all is not replaced either.
    let junk = dir.path().join("notes.txt");
    std::fs::write(&junk, "my notes\n").unwrap();
    let mut args = base.to_vec();
    args.extend(["--output-secrets", junk.to_str().unwrap()]);
    let (code, _, err) = mc(&args, None);
    assert_eq!(code, 1, "{err}");
    assert_eq!(std::fs::read_to_string(&junk).unwrap(), "my notes\n");

    // One file for both: bad input, whatever the spelling.
    let both = dir.path().join("both.yaml");
    let other_spelling = dir.path().join(".").join("both.yaml");
    for o in [&both, &other_spelling] {
        let mut args = base.to_vec();
        args.extend([
            "--output-secrets",
            both.to_str().unwrap(),
            "-o",
            o.to_str().unwrap(),
        ]);
        let (code, _, err) = mc(&args, None);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("--output-secrets") && err.contains("-o"),
            "{err}"
        );
        assert!(!both.exists());
    }

    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.ends_with(".tmp") && !n.ends_with(".partial")),
        "temp files left: {names:?}"
    );
}

/// Runs making one `--output-secrets` file at once (each checks that the
/// file is absent, then makes fresh secrets): one bundle is kept, never
/// replaced by another run's, so every run that answered 0 wrote a config
/// made from the bundle on disk; the others are refused (exit 1).
#[test]
fn runs_making_one_secrets_bundle_at_once_never_replace_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("secrets.yaml");
    let s_s = s.to_str().unwrap().to_string();
    let runs: Vec<_> = (0..6)
        .map(|i| {
            let cfg = dir.path().join(format!("worker-{i}.yaml"));
            let s_s = s_s.clone();
            let h = std::thread::spawn(move || {
                let c = cfg.to_str().unwrap();
                mc(
                    &[
                        "--talos-version",
                        "v1.13.6",
                        "--output-secrets",
                        &s_s,
                        "-o",
                        c,
                    ],
                    None,
                )
            });
            (dir.path().join(format!("worker-{i}.yaml")), h)
        })
        .collect();
    let mut ok = 0;
    for (cfg, h) in runs {
        let (code, _, err) = h.join().unwrap();
        if code == 0 {
            ok += 1;
            let (code, out, err) = mc(
                &["--talos-version", "v1.13.6", "--with-secrets", &s_s],
                None,
            );
            assert_eq!(code, 0, "{err}");
            assert_eq!(
                out.as_bytes(),
                std::fs::read(&cfg).unwrap().as_slice(),
                "{}: made from a bundle that is not the one kept",
                cfg.display()
            );
        } else {
            assert_eq!(code, 1, "{err}");
            assert!(err.contains("not overwritten"), "{err}");
        }
    }
    assert!(ok >= 1);
}

/// An output that is not a regular file is written to, never replaced: a
/// character device (`-o /dev/null` used to become a regular file of mode
/// 0600, as root, swapping the machine's `/dev/null` for a file), a FIFO
/// with a reader; a FIFO with no reader is one clear error, at once; a path
/// through a symbolic link is written where the link points, the link kept.
#[test]
fn outputs_that_are_not_regular_files_are_written_to_never_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let sec = dir.path().join("secrets.yaml");
    let (code, _, err) = mc(
        &[
            "--talos-version",
            "v1.13.6",
            "--output-secrets",
            sec.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let base = [
        "--talos-version",
        "v1.13.6",
        "--with-secrets",
        sec.to_str().unwrap(),
    ];
    let (code, want, err) = mc(&base, None);
    assert_eq!(code, 0, "{err}");

    // A null device of the test's own (mknod needs root: skipped loudly otherwise).
    let null = dir.path().join("null");
    let made = std::process::Command::new("mknod")
        .args(["-m", "666", null.to_str().unwrap(), "c", "1", "3"])
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let mut args = base.to_vec();
        args.extend(["-o", null.to_str().unwrap()]);
        let (code, _, err) = mc(&args, None);
        assert_eq!(code, 0, "{err}");
        let meta = std::fs::symlink_metadata(&null).unwrap();
        assert!(
            meta.file_type().is_char_device(),
            "{meta:?}: replaced by a file"
        );
    } else {
        support::skip("mknod of a character device needs root");
    }

    // A FIFO with no reader: an error naming it, not a wait.
    let fifo = dir.path().join("fifo");
    crate::support::mkfifo(&fifo);
    let mut args = base.to_vec();
    args.extend(["-o", fifo.to_str().unwrap()]);
    let t = std::time::Instant::now();
    let (code, _, err) = mc(&args, None);
    assert_ne!(code, 0);
    assert!(err.contains("fifo") && err.contains("no reader"), "{err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );

    // A FIFO with a reader gets the config.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    crate::support::eventually(
        "the reader opened the FIFO",
        std::time::Duration::from_secs(10),
        || {
            let (code, _, _) = mc(&args, None);
            code == 0
        },
    );
    assert_eq!(reader.join().unwrap(), want);

    // Through a link: the link stays, its target holds the config.
    let real = dir.path().join("real.yaml");
    std::fs::write(&real, "old\n").unwrap();
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let mut args = base.to_vec();
    args.extend(["-o", link.to_str().unwrap()]);
    let (code, _, err) = mc(&args, None);
    assert_eq!(code, 0, "{err}");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&real).unwrap(), want);
}

/// Issue 20 item 5: the secrets bundle is never an output. `-o` or
/// `--output-secrets` naming the `--with-secrets` file, by its name, another
/// spelling, a symbolic link or a hard link, is exit 2 before anything is
/// written: the bundle keeps its bytes (it used to be overwritten by the
/// worker config, the cluster's CA keys gone).
#[test]
fn the_secrets_bundle_is_never_an_output() {
    let dir = tempfile::tempdir().unwrap();
    let sec = dir.path().join("sec.yaml");
    let base = ["--talos-version", "v1.13.6"];
    let mut args = base.to_vec();
    args.extend(["--output-secrets", sec.to_str().unwrap()]);
    let (code, _, err) = mc(&args, None);
    assert_eq!(code, 0, "{err}");
    let bundle = std::fs::read(&sec).unwrap();
    let soft = dir.path().join("soft.yaml");
    std::os::unix::fs::symlink(&sec, &soft).unwrap();
    let hard = dir.path().join("hard.yaml");
    std::fs::hard_link(&sec, &hard).unwrap();
    let spelled = dir.path().join(".").join("sec.yaml");
    for flag in ["-o", "--output-secrets"] {
        for out in [&sec, &spelled, &soft, &hard] {
            let mut args = base.to_vec();
            args.extend(["--with-secrets", sec.to_str().unwrap()]);
            args.extend([flag, out.to_str().unwrap()]);
            let (code, stdout, err) = mc(&args, None);
            assert_eq!(code, 2, "{flag} {}: {err}", out.display());
            assert!(
                err.contains(flag) && err.contains("--with-secrets"),
                "{flag}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(stdout.is_empty());
            assert_eq!(
                std::fs::read(&sec).unwrap(),
                bundle,
                "{flag} {}",
                out.display()
            );
            assert!(
                std::fs::symlink_metadata(&soft)
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
        }
    }
}

/// A hostile pass: no file the command reads is an output (`-f`,
/// `--config-patch @FILE`, `--mirror-ca`, `--image-verification-key`: exit
/// 2 before a write, the file keeps its bytes); `-o` never replaces a
/// secrets bundle (exit 1), while a config written before is written again;
/// an output through a link that leads nowhere is refused (exit 2; the link
/// used to be replaced by the file).
#[test]
fn no_input_and_no_secrets_bundle_is_ever_an_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let base = ["--talos-version", "v1.13.6"];
    for (name, body) in [
        ("values.yaml", "talos: {}\n"),
        ("patch.yaml", "machine: {}\n"),
        ("ca.crt", "not read\n"),
        ("key.pub", "not read\n"),
    ] {
        std::fs::write(p(name), body).unwrap();
    }
    let patch = format!("@{}", p("patch.yaml"));
    for (flag, arg, file) in [
        ("--values", p("values.yaml"), p("values.yaml")),
        ("--config-patch #1", patch.clone(), p("patch.yaml")),
        ("--mirror-ca", p("ca.crt"), p("ca.crt")),
        ("--image-verification-key", p("key.pub"), p("key.pub")),
    ] {
        let before = std::fs::read(&file).unwrap();
        let given = flag.split(' ').next().unwrap();
        for out in ["-o", "--output-secrets"] {
            let mut args = base.to_vec();
            args.extend([given, arg.as_str(), out, file.as_str()]);
            let (code, stdout, err) = mc(&args, None);
            assert_eq!(code, 2, "{flag} {out}: {err}");
            assert!(
                err.contains(out.trim_start_matches('-'))
                    && err.contains(flag)
                    && err.contains("it would be overwritten"),
                "{flag} {out}: {err}"
            );
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(stdout.is_empty());
            assert_eq!(std::fs::read(&file).unwrap(), before, "{flag} {out}");
        }
    }
    // A bundle, then -o onto it: refused, the bundle kept.
    let sec = p("sec.yaml");
    let (code, _, err) = mc(&[base[0], base[1], "--output-secrets", &sec], None);
    assert_eq!(code, 0, "{err}");
    let bundle = std::fs::read(&sec).unwrap();
    let (code, stdout, err) = mc(&[base[0], base[1], "-o", &sec], None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("holds a secrets bundle; not overwritten"),
        "{err}"
    );
    assert!(stdout.is_empty());
    assert_eq!(std::fs::read(&sec).unwrap(), bundle);
    // A config is written again over the one before (the reconcile Job).
    let cfg = p("worker.yaml");
    for _ in 0..2 {
        let (code, _, err) = mc(
            &[base[0], base[1], "--with-secrets", &sec, "-o", &cfg],
            None,
        );
        assert_eq!(code, 0, "{err}");
    }
    // `--output-secrets -` is no file (it made one named `-`).
    let (code, stdout, err) = mc(&[base[0], base[1], "--output-secrets", "-"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not a file"), "{err}");
    assert!(stdout.is_empty());
    // A link that leads nowhere, as either output.
    let link = p("dangling");
    let nowhere = p("nowhere.yaml");
    std::os::unix::fs::symlink(&nowhere, &link).unwrap();
    for out in ["-o", "--output-secrets"] {
        let (code, _, err) = mc(&[base[0], base[1], out, &link], None);
        assert_eq!(code, 2, "{out}: {err}");
        assert!(
            err.contains("symbolic link to a file that does not exist"),
            "{err}"
        );
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert!(!std::path::Path::new(&nowhere).exists());
    }
}

/// A hostile pass: a file given where YAML of some shape is expected, but
/// holding something else (`/etc/passwd` as one scalar, a line of
/// `/etc/shadow` as a key, a 10 MB key), is refused in one short line that
/// names the flag and the file but copies no more than 20 characters of any
/// value it quotes (the whole file was printed, and a 10 MB line).
#[test]
fn a_wrong_file_is_named_not_copied_into_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let passwd = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\nsecret-line-three:x:2:2:bin:/bin:/usr/sbin/nologin\n";
    std::fs::write(p("passwd"), passwd).unwrap();
    let shadow = "root:$6$saltsalt$0123456789abcdefghijklmnopqrstuvwxyzABCDEF:20228:0:99999:7::\n";
    std::fs::write(p("shadow"), format!("{shadow}: 1\n")).unwrap();
    std::fs::write(p("bigkey.yaml"), format!("{}: 1\n", "k".repeat(10 << 20))).unwrap();
    // A quote escaped inside the value does not end the cut.
    std::fs::write(
        p("escaped.yaml"),
        format!("\"ab\\\"cd {}\"\n", passwd.replace('\n', " ")),
    )
    .unwrap();
    let base = ["--talos-version", "v1.13.6"];
    let patch = |f: &str| format!("@{}", p(f));
    for (flag, arg) in [
        ("--with-secrets", p("passwd")),
        ("--with-secrets", p("shadow")),
        ("--with-secrets", p("bigkey.yaml")),
        ("--with-secrets", p("escaped.yaml")),
        ("--config-patch", patch("shadow")),
        ("--config-patch", patch("bigkey.yaml")),
    ] {
        let (code, stdout, err) = mc(&[base[0], base[1], flag, &arg], None);
        assert_eq!(code, 2, "{flag} {arg}: {err}");
        assert!(stdout.is_empty());
        assert_eq!(err.lines().count(), 1, "{flag} {arg}: {err}");
        assert!(err.len() < 400, "{flag} {arg}: {} bytes: {err}", err.len());
        assert!(err.contains(flag), "{err}");
        for leaked in [
            "daemon",
            "secret-line-three",
            "0123456789abcdef",
            "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
        ] {
            assert!(
                !err.contains(leaked),
                "{flag} {arg} copies {leaked:?}: {err}"
            );
        }
    }
    // The same for a mirror config and the schematic file it names.
    std::fs::write(
        p("m1.yaml"),
        format!(
            "schematics: [{{file: {}}}]\ntalosVersions: [v1.13.6]\n",
            p("passwd")
        ),
    )
    .unwrap();
    std::fs::write(
        p("m2.yaml"),
        format!(
            "schematics: [{{file: {}}}]\ntalosVersions: [v1.13.6]\n",
            p("shadow")
        ),
    )
    .unwrap();
    for cfg in ["m1.yaml", "m2.yaml", "bigkey.yaml"] {
        let (code, _, err) = support::run_text(&["mirror", "plan", "--config", &p(cfg)], None);
        assert_eq!(code, 2, "{cfg}: {err}");
        assert_eq!(err.lines().count(), 1, "{cfg}: {err}");
        assert!(err.len() < 400, "{cfg}: {} bytes: {err}", err.len());
        for leaked in [
            "daemon",
            "secret-line-three",
            "0123456789abcdef",
            "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
        ] {
            assert!(!err.contains(leaked), "{cfg} copies {leaked:?}: {err}");
        }
    }
    // A short field name is still named whole.
    std::fs::write(p("typo.yaml"), "schematicz: []\n").unwrap();
    let (code, _, err) = support::run_text(&["mirror", "plan", "--config", &p("typo.yaml")], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown field `schematicz`"), "{err}");
}

/// Issue 20 hostile pass: every input file is read like the TLS files: a
/// device (`/dev/zero`, read without end before: killed for memory) is
/// exit 2 naming it, a pipe that never ends is cut at 16 MiB (exit 2), a
/// FIFO with no writer does not hang, and a shell's `<(...)` still works.
#[test]
fn input_files_are_files_or_pipes_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let sec = dir.path().join("sec.yaml");
    let base = ["--talos-version", "v1.13.6"];
    let mut args = base.to_vec();
    args.extend(["--output-secrets", sec.to_str().unwrap(), "-o", "/dev/null"]);
    let (code, _, err) = mc(&args, None);
    assert_eq!(code, 0, "{err}");
    let fifo = dir.path().join("fifo");
    crate::support::mkfifo(&fifo);
    for (flag, path, why) in [
        ("--with-secrets", "/dev/zero", "not a regular file"),
        ("--values", "/dev/zero", "not a regular file"),
        ("--matrix", "/dev/zero", "not a regular file"),
    ] {
        let mut args = base.to_vec();
        args.extend([flag, path]);
        let (code, _, err) = mc(&args, None);
        assert_eq!(code, 2, "{flag} {path}: {err}");
        assert!(
            err.contains(flag) && err.contains(path) && err.contains(why),
            "{err}"
        );
    }
    // A FIFO nobody writes to: never read as empty (issue 50 item 2), never
    // a hang: bad input once its first writer was waited for (10 s).
    let mut args = base.to_vec();
    args.extend(["--with-secrets", fifo.to_str().unwrap()]);
    let (code, _, err) = mc(&args, None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no writer opened within 10s"), "{err}");
    let bin = env!("CARGO_BIN_EXE_talos-gen");
    let sh = |script: String| {
        std::process::Command::new("bash")
            .args(["-c", &script])
            .output()
            .unwrap()
    };
    let common =
        "machineconfig --cluster-name c1 --endpoint https://c1.ns.svc:6443 --talos-version v1.13.6";
    let o = sh(format!(
        "{bin} {common} --with-secrets <(cat {}) >/dev/null",
        sec.display()
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = sh(format!("{bin} {common} --values <(yes) >/dev/null"));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("larger than 16777216 bytes"));
}
