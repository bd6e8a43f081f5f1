//! The Kubernetes manifests in mirror/ (`kubernetes*.yaml`: the one-volume
//! layout and the S3 layout):
//! - strictly valid (`kubernetes-validate --strict`, unknown fields refused)
//!   against the schemas of every Kubernetes minor Cozystack supports,
//!   1.31 to 1.35 (the newest patch the installed package has for each);
//! - every `--flag` in a container's args and every `TALOS_GEN_*` variable
//!   given to it is one that `talos-gen <subcommand> --help` names;
//! - both run as the Dockerfile's user (65532) on a read-only root
//!   filesystem, and the S3 layout has replicas, a PodDisruptionBudget
//!   covering them, the credentials in a Secret and no PersistentVolume.

use crate::support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_norway::Value;

const MINORS: [u32; 5] = [31, 32, 33, 34, 35];

/// The S3 store backend's variables (issue 13), checked against `--help`
/// once the binary has `--store`.
const S3_ENV: [&str; 3] = [
    "TALOS_GEN_STORE",
    "TALOS_GEN_S3_ENDPOINT",
    "TALOS_GEN_S3_REGION",
];

fn manifests() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mirror");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("kubernetes") && n.ends_with(".yaml")
        })
        .collect();
    v.sort();
    let names: Vec<String> = v
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in ["kubernetes.yaml", "kubernetes-s3.yaml"] {
        assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
    }
    v
}

fn docs(path: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn kind_name(d: &Value) -> (String, String) {
    (
        d["kind"].as_str().unwrap_or("").to_string(),
        d["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

/// The schema versions the installed kubernetes-validate has (`1.33.0`, ...),
/// or `None` when its Python module cannot be asked.
fn schema_versions() -> Option<Vec<String>> {
    let out = Command::new("python3")
        .args([
            "-c",
            "from kubernetes_validate.utils import all_versions; print('\\n'.join(all_versions()))",
        ])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}

/// The newest `1.<minor>.<patch>` in `versions` (numeric patch order).
fn newest_patch(versions: &[String], minor: u32) -> Option<String> {
    let prefix = format!("1.{minor}.");
    versions
        .iter()
        .filter_map(|v| {
            let p: u32 = v.strip_prefix(&prefix)?.parse().ok()?;
            Some((p, v.clone()))
        })
        .max()
        .map(|(_, v)| v)
}

#[test]
fn manifests_validate_strictly_for_kubernetes_1_31_to_1_35() {
    let Some(tool) = support::optional_tool(
        "kubernetes-validate",
        "validates the manifests against the Kubernetes schemas",
    ) else {
        return;
    };
    let versions = schema_versions();
    for minor in MINORS {
        let version = match &versions {
            Some(vs) => newest_patch(vs, minor).unwrap_or_else(|| {
                panic!("kubernetes-validate has no schema for 1.{minor} (it has {vs:?})")
            }),
            None => format!("1.{minor}.0"),
        };
        for path in manifests() {
            let n = docs(&path).len();
            let out = Command::new(&tool)
                .args(["--strict", "--no-warn", "-k", &version])
                .arg(&path)
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.status.success(),
                "{} against {version}:\n{text}",
                path.display()
            );
            // The tool falls back to an older schema for a version it lacks:
            // every document must have passed against this very minor.
            let passed = text
                .lines()
                .filter(|l| l.contains(" passed ") && l.ends_with(&format!("version 1.{minor}")))
                .count();
            assert_eq!(
                passed,
                n,
                "{}: {n} documents, {passed} passed against 1.{minor}:\n{text}",
                path.display()
            );
        }
    }
}

/// `talos-gen <words> --help`, cached.
fn help(cache: &mut BTreeMap<Vec<String>, String>, words: &[String]) -> String {
    cache
        .entry(words.to_vec())
        .or_insert_with(|| {
            let out = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
                .args(words)
                .arg("--help")
                .output()
                .unwrap();
            assert!(out.status.success(), "talos-gen {words:?} --help");
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .clone()
}

fn names_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        help[i + flag.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
    })
}

/// Every container of every pod template in `docs`, with its pod spec.
fn containers(docs: &[Value]) -> Vec<(String, Value, Value)> {
    let mut v = Vec::new();
    for d in docs {
        let spec = match d["kind"].as_str() {
            Some("Deployment") => &d["spec"]["template"]["spec"],
            Some("CronJob") => &d["spec"]["jobTemplate"]["spec"]["template"]["spec"],
            Some("Job") => &d["spec"]["template"]["spec"],
            Some("Pod") => &d["spec"],
            _ => continue,
        };
        for c in spec["containers"].as_sequence().unwrap() {
            let (k, n) = kind_name(d);
            v.push((format!("{k}/{n}"), spec.clone(), c.clone()));
        }
    }
    v
}

#[test]
fn manifest_flags_and_variables_are_the_binarys() {
    let mut cache = BTreeMap::new();
    for path in manifests() {
        let docs = docs(&path);
        let config_maps: BTreeMap<String, Value> = docs
            .iter()
            .filter(|d| d["kind"] == "ConfigMap")
            .map(|d| (kind_name(d).1, d["data"].clone()))
            .collect();
        for (what, _, c) in containers(&docs) {
            if what.starts_with("Pod/") {
                continue; // the bundle upload pod (busybox) runs no talos-gen
            }
            let args: Vec<String> = c["args"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            let words: Vec<String> = args
                .iter()
                .take_while(|a| !a.starts_with('-'))
                .cloned()
                .collect();
            assert!(!words.is_empty(), "{what}: no subcommand in {args:?}");
            let h = help(&mut cache, &words);
            for a in &args[words.len()..] {
                let flag = a.split('=').next().unwrap();
                assert!(
                    flag.starts_with("--") && names_flag(&h, flag),
                    "{}: {what}: `talos-gen {}` has no {flag}",
                    path.display(),
                    words.join(" ")
                );
            }
            let mut vars: Vec<String> = Vec::new();
            for e in c["env"].as_sequence().into_iter().flatten() {
                vars.push(e["name"].as_str().unwrap().to_string());
            }
            for e in c["envFrom"].as_sequence().into_iter().flatten() {
                if let Some(cm) = e["configMapRef"]["name"].as_str() {
                    let data = config_maps
                        .get(cm)
                        .unwrap_or_else(|| panic!("{what}: ConfigMap {cm} not in the manifest"));
                    vars.extend(
                        data.as_mapping()
                            .unwrap()
                            .keys()
                            .map(|k| k.as_str().unwrap().to_string()),
                    );
                }
            }
            let has_store = names_flag(&h, "--store");
            for var in vars.iter().filter(|v| v.starts_with("TALOS_GEN_")) {
                if S3_ENV.contains(&var.as_str()) && !has_store {
                    eprintln!(
                        "NOTE: {what}: {var} not checked: `talos-gen {}` has no --store yet",
                        words.join(" ")
                    );
                    continue;
                }
                assert!(
                    h.contains(&format!("[env: {var}=")),
                    "{}: {what}: `talos-gen {}` reads no {var}",
                    path.display(),
                    words.join(" ")
                );
            }
        }
    }
}

#[test]
fn manifests_run_as_the_image_user_on_a_read_only_root() {
    for path in manifests() {
        let docs = docs(&path);
        let cs = containers(&docs);
        assert!(!cs.is_empty(), "{}", path.display());
        for (what, pod, c) in cs {
            let p = format!("{}: {what}", path.display());
            assert_eq!(pod["securityContext"]["runAsUser"], 65532, "{p}");
            assert_eq!(pod["securityContext"]["runAsGroup"], 65532, "{p}");
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{p}");
            let sc = &c["securityContext"];
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{p}");
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{p}");
            assert_eq!(sc["capabilities"]["drop"][0], "ALL", "{p}");
            if what.starts_with("Pod/") {
                continue; // the bundle upload pod runs no talos-gen
            }
            if what.starts_with("Deployment/") {
                assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{p}");
                assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz", "{p}");
            }
        }
    }
}

#[test]
fn s3_layout_has_replicas_a_budget_a_secret_and_no_volume() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mirror/kubernetes-s3.yaml");
    let docs = docs(&path);
    let by_kind = |k: &str| -> Vec<&Value> { docs.iter().filter(|d| d["kind"] == k).collect() };
    assert!(by_kind("PersistentVolumeClaim").is_empty(), "no PVC");
    let deploy = by_kind("Deployment");
    assert_eq!(deploy.len(), 1);
    let deploy = deploy[0];
    let replicas = deploy["spec"]["replicas"].as_u64().unwrap();
    assert!(replicas >= 3, "replicas {replicas}");
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];

    let pdb = by_kind("PodDisruptionBudget");
    assert_eq!(pdb.len(), 1);
    let pdb = pdb[0];
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&pod_labels[k.as_str().unwrap()], v, "PDB selects the pods");
    }
    let max_unavailable = pdb["spec"]["maxUnavailable"].as_u64();
    let min_available = pdb["spec"]["minAvailable"].as_u64();
    assert!(
        max_unavailable == Some(1) || min_available.is_some_and(|m| m >= 2 && m < replicas),
        "PDB leaves a quorum and lets a drain go on"
    );

    let secrets = by_kind("Secret");
    assert_eq!(secrets.len(), 1);
    let secret = secrets[0];
    let secret_name = kind_name(secret).1;
    for k in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        assert!(secret["stringData"][k].is_string(), "Secret has {k}");
    }
    let store = docs
        .iter()
        .filter(|d| d["kind"] == "ConfigMap")
        .find_map(|d| d["data"]["TALOS_GEN_STORE"].as_str())
        .expect("a ConfigMap with TALOS_GEN_STORE");
    assert!(store.starts_with("s3://"), "{store}");

    let cs = containers(&docs);
    assert!(
        cs.iter().any(|(w, _, _)| w.starts_with("CronJob/")),
        "CronJob"
    );
    for (what, pod, c) in cs {
        let from_secret = c["envFrom"]
            .as_sequence()
            .into_iter()
            .flatten()
            .any(|e| e["secretRef"]["name"].as_str() == Some(&secret_name));
        assert!(from_secret, "{what} reads the credentials from the Secret");
        for vol in pod["volumes"].as_sequence().into_iter().flatten() {
            // The TLS Secret (issue 21) holds no state either.
            assert!(
                vol["emptyDir"].is_mapping()
                    || vol["configMap"].is_mapping()
                    || vol["secret"]["secretName"] == "talos-gen-tls",
                "{what}: only scratch, config and the TLS Secret, not {vol:?}"
            );
        }
        assert!(
            pod["affinity"]["podAffinity"].is_null(),
            "{what}: no node pinning"
        );
    }
}

fn manifest(name: &str) -> Vec<Value> {
    docs(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("mirror")
            .join(name),
    )
}

fn args_of(c: &Value) -> Vec<String> {
    c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The value of `--flag=V` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|a| a.strip_prefix(&format!("--{name}=")))
}

/// Issue 21 item 1 and 4: what a Cozystack operator applies: every registry
/// of the worker's pull list mirrored; HTTPS from the Secret `mirror cert`
/// output becomes; the Service's port the listener's and the README's; the
/// ConfigMaps in the `workers:` form; an import Job; a released image tag.
#[test]
fn manifests_are_what_a_cozystack_operator_applies() {
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let repo_config =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/mirror/mirror.yaml"))
            .unwrap();
    for name in ["kubernetes.yaml", "kubernetes-s3.yaml"] {
        let docs = manifest(name);
        let cs = containers(&docs);
        for (what, _, c) in &cs {
            let image = c["image"].as_str().unwrap();
            assert!(
                !image.ends_with(":latest") && image.contains(':'),
                "{name}: {what}: {image}"
            );
            assert_eq!(
                image,
                format!("ghcr.io/cozystack/talos-gen:{version}"),
                "{name}: {what}"
            );
        }
        let (_, pod, serve) = cs
            .iter()
            .find(|(w, _, _)| w.starts_with("Deployment/"))
            .unwrap();
        let args = args_of(serve);
        // Every registry host of the worker's pull list has an upstream.
        let plan = talos_gen::pull_list::plan(
            talos_gen::matrix::Matrix::embedded(),
            &talos_gen::pull_list::PullRequest {
                talos: "v1.13.6",
                kubernetes: "v1.35",
                schematic: None,
                installer_repository: None,
                platform: None,
                optional: false,
                names: Default::default(),
            },
        )
        .unwrap();
        for (_, c) in cs
            .iter()
            .filter(|(w, _, _)| !w.starts_with("Pod/"))
            .map(|(w, _, c)| (w, c))
        {
            let a = args_of(c);
            if a.first().map(String::as_str) == Some("mirror")
                && a.get(1).map(String::as_str) == Some("import")
            {
                continue;
            }
            let ups: Vec<String> = a
                .iter()
                .filter_map(|x| x.strip_prefix("--mirror-upstream="))
                .flat_map(|v| {
                    v.split(',')
                        .map(|p| p.split('=').next().unwrap().to_string())
                })
                .collect();
            for host in plan.hosts() {
                let host = host.as_str();
                if host == "factory.talos.dev" {
                    assert_eq!(
                        flag(&a, "registry-url"),
                        Some("https://factory.talos.dev"),
                        "{name}: {a:?}"
                    );
                } else {
                    assert!(
                        ups.contains(&host.to_string()),
                        "{name}: {host} not mirrored: {a:?}"
                    );
                }
            }
        }
        // HTTPS from the Secret: its tls.crt/tls.key, as `mirror cert` names them.
        let cert = flag(&args, "tls-cert").expect("--tls-cert");
        let key = flag(&args, "tls-key").expect("--tls-key");
        let mount = serve["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| cert.starts_with(m["mountPath"].as_str().unwrap()))
            .expect("the certificate's volume");
        let dir = mount["mountPath"].as_str().unwrap();
        assert_eq!(cert, format!("{dir}/tls.crt"));
        assert_eq!(key, format!("{dir}/tls.key"));
        let vol = pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        assert_eq!(vol["secret"]["secretName"], "talos-gen-tls", "{name}");
        // The port: --listen, the container port, the Service, the README.
        let listen = flag(&args, "listen").unwrap();
        let port: u64 = listen.rsplit(':').next().unwrap().parse().unwrap();
        assert_eq!(serve["ports"][0]["containerPort"], port);
        let svc = docs.iter().find(|d| d["kind"] == "Service").unwrap();
        assert_eq!(
            svc["spec"]["ports"][0]["port"], port,
            "{name}: the Service port"
        );
        assert_eq!(serve["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
        let url = format!("imageFactoryURL: https://talos-gen.example:{port}");
        assert!(readme.contains(&url), "README names {url}");
        // The ConfigMap's mirror config: `workers:`, the repository's mirror.yaml.
        let cm = docs
            .iter()
            .find_map(|d| d["data"]["mirror.yaml"].as_str())
            .expect("the mirror ConfigMap");
        assert!(cm.contains("\nworkers:\n"), "{name}: {cm}");
        assert!(!cm.contains("extraImages"), "{name}: the old form: {cm}");
        assert!(
            repo_config.ends_with(cm),
            "{name}: the ConfigMap is mirror/mirror.yaml"
        );
        let cfg = talos_gen::mirror::Config::parse(cm, std::path::Path::new("."), name).unwrap();
        assert_eq!(
            cfg.workers.len(),
            5,
            "one pool per Cozystack Kubernetes minor"
        );
    }
    // The import Job: `mirror import` of the bundle volume into the store volume.
    let docs = manifest("kubernetes-import.yaml");
    let cs = containers(&docs);
    let (what, pod, c) = cs
        .iter()
        .find(|(w, _, _)| w.starts_with("Job/"))
        .expect("an import Job");
    let args = args_of(c);
    assert_eq!(&args[..2], ["mirror", "import"], "{what}");
    assert_eq!(
        c["image"].as_str().unwrap(),
        format!("ghcr.io/cozystack/talos-gen:{version}")
    );
    let claims: Vec<&str> = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .collect();
    assert_eq!(claims, ["talos-gen-cache", "talos-gen-bundle"]);
    let store = manifest("kubernetes.yaml");
    assert!(store.iter().any(
        |d| d["kind"] == "PersistentVolumeClaim" && d["metadata"]["name"] == "talos-gen-cache"
    ));
    let bundle = manifest("kubernetes-bundle.yaml");
    assert!(bundle.iter().any(
        |d| d["kind"] == "PersistentVolumeClaim" && d["metadata"]["name"] == "talos-gen-bundle"
    ));
}

/// The DataVolume example (a custom kind: kubernetes-validate has no
/// schema for it) checked for shape against CDI's v1beta1 types
/// (staging/src/kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1/types.go,
/// DataVolumeSpec and DataVolumeSourceHTTP at CDI v1.65.0, the first with
/// `checksum`): only their fields, the URL the Cozystack chart builds from
/// the values' `talos.imageFactoryURL`, a `certConfigMap`, a sha256 checksum.
#[test]
fn datavolume_example_has_cdis_shape() {
    let docs = manifest("datavolume.yaml");
    assert_eq!(docs.len(), 1);
    let dv = &docs[0];
    assert_eq!(dv["apiVersion"], "cdi.kubevirt.io/v1beta1");
    assert_eq!(dv["kind"], "DataVolume");
    let keys = |v: &Value| -> Vec<String> {
        v.as_mapping()
            .unwrap()
            .keys()
            .map(|k| k.as_str().unwrap().to_string())
            .collect()
    };
    for k in keys(dv) {
        assert!(
            ["apiVersion", "kind", "metadata", "spec"].contains(&k.as_str()),
            "{k}"
        );
    }
    let spec_fields = [
        "source",
        "sourceRef",
        "pvc",
        "storage",
        "priorityClassName",
        "contentType",
        "checkpoints",
        "finalCheckpoint",
        "preallocation",
    ];
    for k in keys(&dv["spec"]) {
        assert!(
            spec_fields.contains(&k.as_str()),
            "spec.{k} is no DataVolumeSpec field"
        );
    }
    let http_fields = [
        "url",
        "secretRef",
        "certConfigMap",
        "extraHeaders",
        "secretExtraHeaders",
        "checksum",
        "insecureSkipVerify",
    ];
    let http = &dv["spec"]["source"]["http"];
    for k in keys(http) {
        assert!(
            http_fields.contains(&k.as_str()),
            "http.{k} is no DataVolumeSourceHTTP field"
        );
    }
    let url = http["url"].as_str().unwrap();
    let rest = url
        .strip_prefix("https://talos-gen.example:8443/image/")
        .expect(url);
    let parts: Vec<&str> = rest.split('/').collect();
    assert_eq!(parts.len(), 3, "{url}");
    assert!(talos_gen::schematic::is_valid_id(parts[0]), "{url}");
    assert!(parts[1].starts_with("v1."), "{url}");
    assert_eq!(parts[2], "openstack-amd64.raw.xz");
    assert!(
        http["certConfigMap"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    assert!(http["checksum"].as_str().unwrap().starts_with("sha256:"));
    for k in keys(&dv["spec"]["storage"]) {
        assert!(
            [
                "accessModes",
                "resources",
                "storageClassName",
                "volumeMode",
                "selector",
                "dataSource",
                "dataSourceRef",
                "volumeName"
            ]
            .contains(&k.as_str()),
            "storage.{k}"
        );
    }
}
