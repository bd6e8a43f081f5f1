//! Byte parity with Talos' own generator: for every `v1.X` folder of
//! `../shared/talos-golden`, `talos-gen machineconfig` run with the issue's
//! exact arguments writes the same bytes.

use crate::support;

use std::path::Path;

use crate::support::reference::OVERRIDES_PATCH;
use talos_gen::machineconfig::contract;

fn base_args(golden: &Path, minor: &str) -> Vec<String> {
    [
        "machineconfig",
        "--with-secrets",
        golden.join("secrets.yaml").to_str().unwrap(),
        "--cluster-name",
        "base",
        "--endpoint",
        "https://base:6443",
        "--kubernetes-version",
        "1.28.0",
        "--talos-version",
        minor,
        "--install-disk",
        "",
        "--install-image",
        "",
        "--force",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn minors(golden: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(golden)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.starts_with("v1.").then_some(name)
        })
        .collect();
    v.sort_by_key(|m| m[3..].parse::<u32>().unwrap_or(0));
    v
}

fn run(args: &[String]) -> std::process::Output {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    support::run(&refs, None)
}

/// The overrides inputs of Talos' stability test from 1.14 on
/// (`v1alpha1_stability_test.go` at ad8823176e75: `patch.yaml`, a
/// `KubeletConfig` with `clusterDNS: [3.3.3.3]`, in place of
/// `patch-pre14.yaml`; `generate.WithSysctls` writes a `SysctlConfig`; the
/// install kernel args and the custom CNI do not reach a worker's
/// documents), as one config patch.
const OVERRIDES_PATCH_MULTIDOC: &str = "\
apiVersion: v1alpha1
kind: SysctlConfig
params:
  foo: bar
---
apiVersion: v1alpha1
kind: KubeletConfig
clusterDNS:
  - 3.3.3.3
";

/// The one difference a config patch cannot avoid: Talos' generator
/// (`generate.WithSysctls`) places the `SysctlConfig` before the
/// `VolumeConfig`, while a patch's new document is appended last (Talos'
/// `configpatcher.StrategicMerge` appends too; talosctl has no sysctl
/// flag). Moved there, the rest must be byte-identical.
fn sysctl_in_generator_place(out: &[u8]) -> Vec<u8> {
    let text = String::from_utf8(out.to_vec()).unwrap();
    let doc = "---\napiVersion: v1alpha1\nkind: SysctlConfig\nparams:\n    foo: bar\n";
    let Some(rest) = text.strip_suffix(doc) else {
        panic!("the patch's SysctlConfig is not the last document:\n{text}");
    };
    let at = "apiVersion: v1alpha1\nkind: VolumeConfig\n";
    let i = rest.find(at).expect("a VolumeConfig document");
    format!("{}{}---\n{}", &rest[..i], &doc[4..], &rest[i..]).into_bytes()
}

#[test]
fn base_worker_is_byte_identical_for_every_contract() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let golden = shared.join("talos-golden");
    // Every contract of the one table has its golden config (checked in
    // talos_minors), and no golden folder is left without a contract.
    let all: Vec<String> = contract::minors().map(|m| format!("v1.{m}")).collect();
    assert_eq!(
        minors(&golden),
        all,
        "talos-golden's folders against contract::CONTRACTS"
    );
    for minor in all {
        let out = run(&base_args(&golden, &minor));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{minor}: {}",
            support::stderr(&out)
        );
        let want = std::fs::read(golden.join(&minor).join("base-worker.yaml")).unwrap();
        assert!(
            out.stdout == want,
            "{minor}: base differs\n--- got\n{}\n--- want\n{}",
            support::stdout(&out),
            String::from_utf8_lossy(&want)
        );
        // Talos 1.5 through 1.10 run Kubernetes 1.28; elsewhere the pair is
        // outside the support matrix and is written with a warning.
        let n: u32 = minor[3..].parse().unwrap();
        let warned = support::stderr(&out).contains("warning: Kubernetes v1.28.0");
        assert_eq!(
            warned,
            !(5..=10).contains(&n),
            "{minor}: {}",
            support::stderr(&out)
        );
    }
}

#[test]
fn overrides_worker_is_byte_identical_where_present() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let golden = shared.join("talos-golden");
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("overrides.yaml");
    std::fs::write(&own, OVERRIDES_PATCH).unwrap();
    let own_multidoc = dir.path().join("overrides-multidoc.yaml");
    std::fs::write(&own_multidoc, OVERRIDES_PATCH_MULTIDOC).unwrap();
    let mut seen = 0;
    for minor in minors(&golden) {
        let want_path = golden.join(&minor).join("overrides-worker.yaml");
        if !want_path.exists() {
            continue;
        }
        seen += 1;
        let mut args = base_args(&golden, &minor);
        for (i, a) in args.clone().iter().enumerate() {
            if a == "--install-disk" {
                args[i + 1] = "/dev/vda".into();
            }
        }
        args.extend(
            [
                "--additional-sans",
                "foo,bar",
                "--dns-domain",
                "example.com",
                "--registry-mirror",
                "ghcr.io=https://ghcr.io.my-mirror.com",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        let n: u32 = minor[3..].parse().unwrap();
        let multidoc = n >= 14;
        args.push("--config-patch".into());
        if multidoc {
            args.push(format!("@{}", own_multidoc.display()));
        } else {
            args.push(format!("@{}", own.display()));
            args.push("--config-patch".into());
            args.push(format!("@{}", golden.join("patch.yaml").display()));
        }
        let mut out = run(&args);
        if multidoc {
            out.stdout = sysctl_in_generator_place(&out.stdout);
        }
        assert_eq!(
            out.status.code(),
            Some(0),
            "{minor}: {}",
            support::stderr(&out)
        );
        let want = std::fs::read(&want_path).unwrap();
        assert!(
            out.stdout == want,
            "{minor}: overrides differ\n--- got\n{}\n--- want\n{}",
            support::stdout(&out),
            String::from_utf8_lossy(&want)
        );
    }
    assert!(seen >= 10, "expected overrides for v1.3..v1.12");
}

#[test]
fn unsupported_pair_without_force_is_refused() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let golden = shared.join("talos-golden");
    let mut args = base_args(&golden, "v1.13");
    args.retain(|a| a != "--force");
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    let err = support::stderr(&out);
    assert!(err.contains("v1.28.0") && err.contains("v1.13"), "{err}");
    assert!(
        err.contains("Supported versions: v1.31, v1.32, v1.33, v1.34, v1.35, v1.36"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn secrets_round_trip_through_output_secrets() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("secrets.yaml");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = [
            "machineconfig",
            "--cluster-name",
            "c1",
            "--endpoint",
            "https://c1.example:6443",
            "--talos-version",
            "v1.13.6",
            "--kubernetes-version",
            "1.35.6",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let first = run(&args(&["--output-secrets", saved.to_str().unwrap()]));
    assert_eq!(first.status.code(), Some(0), "{}", support::stderr(&first));
    let again = run(&args(&["--with-secrets", saved.to_str().unwrap()]));
    assert_eq!(again.status.code(), Some(0), "{}", support::stderr(&again));
    assert_eq!(first.stdout, again.stdout, "same secrets, same config");
    // The saved bundle has talosctl's layout.
    let text = std::fs::read_to_string(&saved).unwrap();
    let want_keys = std::fs::read_to_string(shared.join("talos-golden/secrets.yaml")).unwrap();
    let keys = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(':').next())
            .map(str::to_string)
            .collect()
    };
    assert_eq!(keys(&text), keys(&want_keys));
}
