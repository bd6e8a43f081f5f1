//! Every config talos-gen writes validates, document by document, against
//! the official JSON schema of its Talos minor. Schemas used (nearest copy
//! in `../shared/talos-schema` for minors without their own):
//! v1.3..v1.11 -> config.schema.v1.11.6.json, v1.12 -> v1.12.11,
//! v1.13 -> config.schema.json (v1.13.9), v1.14 -> v1.14.0-rc.1.
//! Exactly three exceptions are allowed (Talos itself writes them and the
//! schemas leave them out): top-level `persist`; `machine.install.
//! extraKernelArgs` from 1.12; the kind `UnattendedInstallConfig`, spelled
//! `UnattendedInstall` in the 1.14-rc schema. One kind has no definition in
//! any of them, `ImageVerificationConfig` (Talos 1.13+): it is checked
//! against a stand-in written from Talos' Go types (see
//! `image_verification_schema`).

use crate::support;

use std::collections::HashMap;
use std::path::Path;

use crate::support::reference::OVERRIDES_PATCH;
use serde_json::Value as Json;
use talos_gen::machineconfig::{self, Request, contract, model};
use talos_gen::yaml::Value;

/// The reference data's file of a Talos release's published schema: the
/// newest stable one is `config.schema.json` (`talos-schema/SOURCE.txt`),
/// the others carry their release in the name.
pub(crate) fn schema_file_of(release: &str) -> String {
    match release {
        "v1.13.9" => "config.schema.json".into(),
        // Talos main before the v1.15 tag (the reference data's SOURCE.txt).
        "v1.15-dev" => "config.schema.main-v1.15-dev.json".into(),
        r => format!("config.schema.{r}.json"),
    }
}

/// The schema contract `minor`'s documents are checked against: the one
/// table, `contract::CONTRACTS`, says which release's.
fn schema_file(minor: u64) -> String {
    let (_, release) = contract::CONTRACTS
        .iter()
        .find(|(m, _)| *m == minor)
        .unwrap_or_else(|| panic!("v1.{minor} is not in contract::CONTRACTS"));
    schema_file_of(release)
}

struct Schemas {
    dir: std::path::PathBuf,
    files: HashMap<String, Json>,
    validators: HashMap<(u64, String), jsonschema::Validator>,
}

impl Schemas {
    fn new(shared: &Path) -> Schemas {
        Schemas {
            dir: shared.join("talos-schema"),
            files: HashMap::new(),
            validators: HashMap::new(),
        }
    }

    fn validator(&mut self, minor: u64, def: &str) -> &jsonschema::Validator {
        let file = schema_file(minor);
        let key = (minor, def.to_string());
        if def == IMAGE_VERIFICATION_DEF && !self.validators.contains_key(&key) {
            let v = jsonschema::validator_for(&image_verification_schema()).unwrap();
            self.validators.insert(key.clone(), v);
        }
        if !self.validators.contains_key(&key) {
            let path = self.dir.join(&file);
            let schema = self.files.entry(file.clone()).or_insert_with(|| {
                serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
            });
            let defs = schema["$defs"].clone();
            assert!(defs.get(def).is_some(), "{file} has no definition {def}");
            let wrapper = serde_json::json!({
                "$schema": schema["$schema"].clone(),
                "$ref": format!("#/$defs/{def}"),
                "$defs": defs,
            });
            let v = jsonschema::validator_for(&wrapper).unwrap();
            self.validators.insert(key.clone(), v);
        }
        &self.validators[&key]
    }

    /// Validate every document of `config` for contract `minor`; panics
    /// naming the document and the errors.
    fn check(&mut self, minor: u64, config: &str, label: &str) {
        let docs = talos_gen::yaml::documents_from_str(config, label).unwrap();
        assert!(!docs.is_empty(), "{label}: no documents");
        for doc in docs {
            let mut json: Json = serde_json::to_value(&doc).unwrap();
            let def: String = match json.get("kind").and_then(Json::as_str) {
                None => {
                    // The exceptions for the versioned document.
                    let obj = json.as_object_mut().unwrap();
                    obj.remove("persist");
                    if minor >= 12
                        && let Some(install) = obj
                            .get_mut("machine")
                            .and_then(|m| m.get_mut("install"))
                            .and_then(Json::as_object_mut)
                    {
                        install.remove("extraKernelArgs");
                    }
                    "v1alpha1.Config".into()
                }
                Some(kind) => {
                    let k = model::kind_named(kind)
                        .unwrap_or_else(|| panic!("{label}: unknown kind {kind}"));
                    if kind == "UnattendedInstallConfig" && minor >= 14 {
                        json["kind"] = Json::String("UnattendedInstall".into());
                    }
                    k.schema.to_string()
                }
            };
            let v = self.validator(minor, &def);
            let errors: Vec<String> = v
                .iter_errors(&json)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{label}: {def} (schema {}) invalid:\n{}\n--- document\n{}",
                schema_file(minor),
                errors.join("\n"),
                serde_json::to_string_pretty(&json).unwrap()
            );
        }
    }
}

/// Talos' published schemas (v1.13.9, v1.14.0-rc.1, main) have no
/// definition for `ImageVerificationConfig`, though Talos decodes it from
/// v1.13 on. Its documents are checked against this schema instead, written
/// from the Go types at v1.13.9 (pkg/machinery/config/types/security/
/// image_verification.go: `rules` of {image, skip, deny, keyless {issuer,
/// subject, subjectRegex}, publicKey {certificate}}, all omitempty) and its
/// Validate (a rule needs an image and exactly one verifier unless it skips
/// or denies).
const IMAGE_VERIFICATION_DEF: &str = "security.ImageVerificationConfigV1Alpha1";

fn image_verification_schema() -> Json {
    serde_json::json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": false,
        "required": ["apiVersion", "kind"],
        "properties": {
            "apiVersion": {"const": "v1alpha1"},
            "kind": {"const": "ImageVerificationConfig"},
            "rules": {"type": "array", "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["image"],
                "properties": {
                    "image": {"type": "string", "minLength": 1},
                    "skip": {"type": "boolean"},
                    "deny": {"type": "boolean"},
                    "keyless": {"type": "object", "additionalProperties": false,
                        "required": ["issuer"],
                        "properties": {
                            "issuer": {"type": "string"},
                            "subject": {"type": "string"},
                            "subjectRegex": {"type": "string"}}},
                    "publicKey": {"type": "object", "additionalProperties": false,
                        "required": ["certificate"],
                        "properties": {"certificate": {"type": "string", "minLength": 1}}}
                },
                "oneOf": [
                    {"required": ["keyless"], "not": {"required": ["publicKey"]}},
                    {"required": ["publicKey"], "not": {"required": ["keyless"]}},
                    {"required": ["skip"], "not": {"anyOf": [{"required": ["keyless"]}, {"required": ["publicKey"]}]}},
                    {"required": ["deny"], "not": {"anyOf": [{"required": ["keyless"]}, {"required": ["publicKey"]}]}}
                ]
            }}
        }
    })
}

fn golden_secrets(shared: &Path) -> Value {
    Value::String(std::fs::read_to_string(shared.join("talos-golden/secrets.yaml")).unwrap())
}

fn base(shared: &Path, minor: u64) -> Request {
    Request {
        talos_version: Some(format!("v1.{minor}")),
        kubernetes_version: Some("1.28.0".into()),
        cluster_name: Some("base".into()),
        endpoint: Some("https://base:6443".into()),
        secrets: Some(golden_secrets(shared)),
        install_disk: Some(String::new()),
        install_image: Some(String::new()),
        force: true,
        ..Default::default()
    }
}

#[test]
fn the_validator_allows_exactly_the_three_exceptions_on_talos_goldens() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let mut schemas = Schemas::new(&shared);
    for minor in contract::minors() {
        let dir = shared.join(format!("talos-golden/v1.{minor}"));
        for f in ["base-worker.yaml", "overrides-worker.yaml"] {
            let p = dir.join(f);
            if p.exists() {
                let text = std::fs::read_to_string(&p).unwrap();
                schemas.check(minor, &text, &format!("golden v1.{minor}/{f}"));
            }
        }
    }
}

#[test]
fn base_and_overrides_are_schema_valid() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let mut schemas = Schemas::new(&shared);
    let patch = std::fs::read_to_string(shared.join("talos-golden/patch.yaml")).unwrap();
    for minor in contract::minors() {
        let out = machineconfig::generate(&base(&shared, minor)).unwrap();
        schemas.check(minor, &out.config, &format!("base v1.{minor}"));
        // The overrides mode, on every contract that still has the
        // fields the patches name (1.14 moved kubelet and sysctls out).
        if minor <= 13 {
            let mut req = base(&shared, minor);
            req.install_disk = Some("/dev/vda".into());
            req.additional_sans = vec!["foo".into(), "bar".into()];
            req.dns_domain = Some("example.com".into());
            req.registry_mirror = vec![
                "ghcr.io=https://ghcr.io.my-mirror.com".into(),
                "docker.io=https://a.example/v2,http://10.0.0.1:5000".into(),
            ];
            req.config_patch = vec![
                Value::String(OVERRIDES_PATCH.into()),
                Value::String(patch.clone()),
            ];
            let out = machineconfig::generate(&req).unwrap();
            schemas.check(minor, &out.config, &format!("overrides v1.{minor}"));
        }
    }
}

#[test]
fn fresh_secrets_resolver_and_mirror_modes_are_schema_valid() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let mut schemas = Schemas::new(&shared);
    for minor in contract::minors() {
        let req = Request {
            talos_version: Some(format!("v1.{minor}.0")),
            cluster_name: Some("tenant-a".into()),
            endpoint: Some("https://tenant-a.ns.svc:6443".into()),
            install_disk: Some("/dev/sda".into()),
            install_image: Some("factory.talos.dev/installer/abc:v1.13.6".into()),
            nameserver: vec!["10.96.0.10".into(), "fd00::10".into()],
            search_domain: vec!["svc.cozy.local".into(), "cozy.local".into()],
            extra_host_entry: vec!["10.95.1.1=a.ns.svc,a.ns.svc.cluster.local".into()],
            registry_mirror: vec!["ghcr.io=https://m1.example,https://m2.example".into()],
            ..Default::default()
        };
        let out = machineconfig::generate(&req).unwrap();
        schemas.check(minor, &out.config, &format!("resolver v1.{minor}"));
        // The deprecated form is never written where its replacement exists.
        let has_legacy_net = out.config.contains("\n        nameservers:");
        assert_eq!(has_legacy_net, minor <= 11, "v1.{minor}:\n{}", out.config);
        let has_legacy_mirrors = out.config.contains("    registries:\n        mirrors:");
        assert_eq!(
            has_legacy_mirrors,
            minor <= 11,
            "v1.{minor}:\n{}",
            out.config
        );
        if minor >= 12 {
            assert!(out.config.contains("kind: ResolverConfig"));
            assert!(out.config.contains("kind: StaticHostConfig"));
        }
    }
}

#[test]
fn cozystack_profile_is_schema_valid_on_every_contract() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let mut schemas = Schemas::new(&shared);
    let values =
        std::fs::read_to_string(shared.join("cozystack/kubernetes-nodes.values.yaml")).unwrap();
    for minor in contract::minors() {
        for (label, extra) in [
            ("defaults", ""),
            (
                "gpu+mirrors",
                "\ngpus: [{name: nvidia.com/AD102GL_L40S}]\ntalos:\n  registryMirrors:\n    ghcr.io:\n      endpoints: [\"http://mirror$(id)\", https://m2.example]\n      skipFallback: true\n",
            ),
        ] {
            let text = if extra.is_empty() {
                values.clone()
            } else {
                // A values file is one mapping; replace the talos/gpus keys.
                let mut v: Value = talos_gen::yaml::value_from_str(&values, "values").unwrap();
                let e: Value = talos_gen::yaml::value_from_str(extra, "extra").unwrap();
                if let (Value::Mapping(m), Value::Mapping(x)) = (&mut v, e) {
                    for (k, val) in x {
                        if k.as_str() == Some("talos")
                            && let Some(Value::Mapping(t)) = m.get_mut("talos")
                        {
                            if let Value::Mapping(tx) = val {
                                for (k2, v2) in tx {
                                    t.insert(k2, v2);
                                }
                            }
                            continue;
                        }
                        m.insert(k, val);
                    }
                }
                serde_json::to_string(&v).unwrap()
            };
            let req = Request {
                profile: Some("cozystack".into()),
                values: Some(Value::String(text)),
                talos_version: Some(format!("v1.{minor}.0")),
                cluster_name: Some("kubernetes-demo".into()),
                endpoint: Some("https://kubernetes-demo.tenant-root.svc:6443".into()),
                secrets: Some(golden_secrets(&shared)),
                nameserver: vec!["10.95.0.10".into()],
                search_domain: vec!["svc.cozy.local".into(), "cozy.local".into()],
                extra_host_entry: vec!["10.95.3.4=kubernetes-demo.tenant-root.svc".into()],
                force: true,
                ..Default::default()
            };
            let out =
                machineconfig::generate(&req).unwrap_or_else(|e| panic!("v1.{minor} {label}: {e}"));
            schemas.check(minor, &out.config, &format!("cozystack {label} v1.{minor}"));
            assert!(out.config.contains("ghcr.io/siderolabs/kubelet:v1.35.6"));
            assert!(out.config.contains(&format!(
                "factory.talos.dev/installer/ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515:v1.{minor}.0"
            )));
            if label != "defaults" {
                assert!(out.config.contains("gpu: \"on\""), "{}", out.config);
                assert!(out.config.contains("http://mirror$(id)"), "{}", out.config);
            }
        }
    }
}

/// A fresh cosign-style public key (PEM).
fn public_key_pem() -> String {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .unwrap()
        .public_key_pem()
}

#[test]
fn air_gap_mirror_and_image_verification_are_schema_valid() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let mut schemas = Schemas::new(&shared);
    let key = public_key_pem();
    let schematic = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
    for minor in 8..=14u64 {
        let mut req = base(&shared, minor);
        req.kubernetes_version = Some(match minor {
            8 => "1.31.4".into(),
            14 => "1.37.0".into(),
            _ => "1.31.4".into(),
        });
        req.install_image = None;
        req.schematic = Some(schematic.into());
        req.air_gap_mirror = Some("http://10.0.0.5:8080".into());
        req.registry_mirror = vec!["ghcr.io=https://ghcr.example".into()];
        if minor >= 13 {
            req.image_verification_key = Some(key.clone());
        }
        let out = machineconfig::generate(&req).unwrap_or_else(|e| panic!("v1.{minor}: {e}"));
        schemas.check(minor, &out.config, &format!("air gap v1.{minor}"));
        let c = &out.config;
        if minor >= 12 {
            for host in ["factory.talos.dev", "registry.k8s.io"] {
                assert!(
                    c.contains(&format!(
                        "kind: RegistryMirrorConfig\nname: {host}\nendpoints:\n    - url: http://10.0.0.5:8080\nskipFallback: true\n"
                    )),
                    "v1.{minor} {host}:\n{c}"
                );
            }
            // The explicit --registry-mirror wins for ghcr.io.
            assert!(
                c.contains("name: ghcr.io\nendpoints:\n    - url: https://ghcr.example\n---"),
                "{c}"
            );
        } else {
            assert!(
                c.contains("            registry.k8s.io:\n                endpoints:\n                    - http://10.0.0.5:8080\n                skipFallback: true\n"),
                "v1.{minor}:\n{c}"
            );
            assert!(c.contains("            factory.talos.dev:\n"), "{c}");
            assert!(
                c.contains("                    - https://ghcr.example\n"),
                "{c}"
            );
        }
        assert_eq!(
            c.contains("kind: ImageVerificationConfig"),
            minor >= 13,
            "v1.{minor}"
        );
        if minor >= 13 {
            for image in [
                format!("factory.talos.dev/installer/{schematic}"),
                "ghcr.io/siderolabs/kubelet".into(),
                "registry.k8s.io/pause".into(),
            ] {
                assert!(c.contains(&format!("    - image: {image}\n      publicKey:\n        certificate: |-\n            -----BEGIN PUBLIC KEY-----\n")), "{image}:\n{c}");
            }
        }
    }
    // The stand-in schema is not a blank check.
    let v = jsonschema::validator_for(&image_verification_schema()).unwrap();
    let rule = |r: Json| serde_json::json!({"apiVersion": "v1alpha1", "kind": "ImageVerificationConfig", "rules": [r]});
    assert!(v.is_valid(&rule(
        serde_json::json!({"image": "a/*", "publicKey": {"certificate": "c"}})
    )));
    for bad in [
        serde_json::json!({"image": "a/*", "publicKey": {"certificate": "c"}, "keyless": {"issuer": "i"}}),
        serde_json::json!({"image": "a/*"}),
        serde_json::json!({"image": "a/*", "publicKey": {"certificate": "c", "key": "k"}}),
        serde_json::json!({"publicKey": {"certificate": "c"}}),
    ] {
        assert!(!v.is_valid(&rule(bad.clone())), "{bad}");
    }
    // Before 1.13 the key is bad input naming the version.
    let mut req = base(&shared, 12);
    req.image_verification_key = Some(key);
    let e = machineconfig::generate(&req).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("v1.12"), "{e}");
}

/// A fresh CA certificate (PEM), as `talos-gen mirror cert` writes ca.crt.
fn ca_pem() -> String {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    p.self_signed(&key).unwrap().pem()
}

#[test]
fn mirror_ca_is_schema_valid_in_both_forms() {
    use base64::Engine;
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let mut schemas = Schemas::new(&shared);
    let ca = ca_pem();
    let schematic = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
    for minor in 8..=14u64 {
        let mut req = base(&shared, minor);
        req.kubernetes_version = Some(if minor == 14 { "1.37.0" } else { "1.31.4" }.into());
        req.install_image = None;
        req.schematic = Some(schematic.into());
        req.air_gap_mirror = Some("https://talos-gen.example:8443".into());
        req.registry_mirror = vec!["ghcr.io=https://ghcr.example/v2,http://10.0.0.1:5000".into()];
        req.mirror_ca = Some(ca.clone());
        let out = machineconfig::generate(&req).unwrap_or_else(|e| panic!("v1.{minor}: {e}"));
        schemas.check(minor, &out.config, &format!("mirror ca v1.{minor}"));
        let c = &out.config;
        let indented: String = ca.lines().map(|l| format!("    {l}\n")).collect();
        if minor >= 12 {
            // One document per https endpoint host, after the mirrors, by name.
            let tls =
                |host: &str| format!("kind: RegistryTLSConfig\nname: {host}\nca: |\n{indented}");
            let a = c
                .find(&tls("ghcr.example"))
                .unwrap_or_else(|| panic!("v1.{minor}:\n{c}"));
            let b = c
                .find(&tls("talos-gen.example:8443"))
                .unwrap_or_else(|| panic!("v1.{minor}:\n{c}"));
            let last_mirror = c.rfind("kind: RegistryMirrorConfig").unwrap();
            assert!(last_mirror < a && a < b, "v1.{minor}: order:\n{c}");
            assert_eq!(c.matches("kind: RegistryTLSConfig").count(), 2, "{c}");
            assert!(!c.contains("name: 10.0.0.1:5000\nca"), "{c}");
            assert!(!c.contains("    config:\n"), "{c}");
        } else {
            let b64 = base64::engine::general_purpose::STANDARD.encode(&ca);
            for host in ["ghcr.example", "talos-gen.example:8443"] {
                assert!(
                    c.contains(&format!(
                        "            {host}:\n                tls:\n                    ca: {b64}\n"
                    )),
                    "v1.{minor} {host}:\n{c}"
                );
            }
            assert!(!c.contains("kind: RegistryTLSConfig"), "{c}");
        }
    }
    // Only http:// endpoints: nothing to trust it for, bad input; so is a key.
    let mut req = base(&shared, 13);
    req.air_gap_mirror = Some("http://10.0.0.5:8080".into());
    req.mirror_ca = Some(ca);
    let e = machineconfig::generate(&req).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().starts_with("--mirror-ca: "), "{e}");
    req.air_gap_mirror = Some("https://m.example".into());
    req.mirror_ca = Some(public_key_pem());
    let e = machineconfig::generate(&req).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().contains("PUBLIC KEY"), "{e}");
}
