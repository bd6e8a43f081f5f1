//! `talos-gen datavolume` and `GET /api/v1/datavolume`: the CDI
//! `DataVolume` of a pool's disk image, with nginx as the factory and
//! `serve` in front. The document is checked against CDI's v1beta1 shape
//! (the properties and required fields of `DataVolume`, `DataVolumeSpec`,
//! `DataVolumeSource`, `DataVolumeSourceHTTP`, `StorageSpec` and
//! `VolumeResourceRequirements` as CDI's `api/openapi-spec/swagger.json`
//! publishes them, unknown fields refused as a structural CRD prunes them,
//! the checksum as CDI's `checksum.ParseAndValidate` reads it; the golden
//! layout's `DataSource` and a clone's `spec.sourceRef` the same way, from
//! kubevirt/containerized-data-importer at c07cdb6fbd18, v1.66.0-6), then read
//! the importer's way: nbdkit's curl plugin and qemu-img convert on the URL
//! it names, the bytes hashing to the checksum it names and unpacking to
//! the disk.

use std::process::Command;

use crate::support::factory::{A, Factory, S, V, image_path};
use crate::support::nbd::NbdCurl;
use crate::support::{Service, curl, require_tool, run_text, sha256_hex};

/// CDI v1beta1's `DataVolume` as far as this document goes (from
/// `api/openapi-spec/swagger.json`, definitions `v1beta1.DataVolume`,
/// `v1beta1.DataVolumeSpec`, `v1beta1.DataVolumeSource`,
/// `v1beta1.DataVolumeSourceHTTP`, `v1beta1.StorageSpec`,
/// `v1.VolumeResourceRequirements`; `resource.Quantity` with the pattern
/// Kubernetes gives it in CRD schemas).
fn cdi_schema() -> serde_json::Value {
    let s = |t: &str| serde_json::json!({ "type": t });
    let quantity = serde_json::json!({
        "type": "string",
        "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
    });
    let obj = |required: &[&str], props: serde_json::Value| {
        serde_json::json!({
            "type": "object",
            "required": required,
            "properties": props,
            "additionalProperties": false,
        })
    };
    let http = obj(
        &["url"],
        serde_json::json!({
            "url": s("string"),
            "secretRef": s("string"),
            "certConfigMap": s("string"),
            "extraHeaders": {"type": "array", "items": s("string")},
            "secretExtraHeaders": {"type": "array", "items": s("string")},
            // CDI 1.65: algorithm:hash; sha256 is 64 hex.
            "checksum": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "insecureSkipVerify": s("boolean"),
        }),
    );
    let source = obj(
        &[],
        serde_json::json!({
            "http": http, "s3": s("object"), "gcs": s("object"), "registry": s("object"),
            "pvc": s("object"), "upload": s("object"), "blank": s("object"),
            "imageio": s("object"), "vddk": s("object"), "snapshot": s("object"),
        }),
    );
    let resources = obj(
        &[],
        serde_json::json!({
            "limits": {"type": "object", "additionalProperties": quantity},
            "requests": {"type": "object", "additionalProperties": quantity},
        }),
    );
    let storage = obj(
        &[],
        serde_json::json!({
            "accessModes": {"type": "array", "items": {"enum": ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]}},
            "selector": s("object"),
            "resources": resources,
            "volumeName": s("string"),
            "storageClassName": s("string"),
            "volumeMode": {"enum": ["Block", "Filesystem", "FromStorageProfile"]},
            "dataSource": s("object"),
            "dataSourceRef": s("object"),
        }),
    );
    // v1beta1.DataVolumeSourceRef; the webhook (datavolume-validate.go)
    // takes only kind DataSource.
    let source_ref = obj(
        &["kind", "name"],
        serde_json::json!({
            "kind": {"const": "DataSource"}, "name": s("string"), "namespace": s("string"),
        }),
    );
    let mut spec = obj(
        &[],
        serde_json::json!({
            "source": source, "sourceRef": source_ref, "pvc": s("object"), "storage": storage,
            "priorityClassName": s("string"), "serviceAccountName": s("string"),
            "contentType": {"enum": ["kubevirt", "archive"]},
            "checkpoints": s("array"), "finalCheckpoint": s("boolean"), "preallocation": s("boolean"),
        }),
    );
    // The webhook: "Data volume should have either Source or SourceRef".
    spec["oneOf"] = serde_json::json!([{"required": ["source"]}, {"required": ["sourceRef"]}]);
    let mut dv = obj(
        &["spec", "apiVersion", "kind", "metadata"],
        serde_json::json!({
            "apiVersion": {"const": "cdi.kubevirt.io/v1beta1"},
            "kind": {"const": "DataVolume"},
            "metadata": metadata(),
            "spec": spec,
            "status": s("object"),
        }),
    );
    dv["$schema"] = "http://json-schema.org/draft-07/schema#".into();
    dv
}

/// `metadata`: a DNS-1123 subdomain name, a DNS-1123 label namespace.
fn metadata() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"},
            "namespace": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"},
        },
    })
}

/// CDI v1beta1's `DataSource` (swagger.json definitions
/// `v1beta1.DataSource`, `v1beta1.DataSourceSpec` (required `source`),
/// `v1beta1.DataSourceSource` (`pvc`, `snapshot`, `dataSource`),
/// `v1beta1.DataVolumeSourcePVC` (required `name`, `namespace`)).
fn cdi_datasource_schema() -> serde_json::Value {
    let named = serde_json::json!({
        "type": "object",
        "required": ["namespace", "name"],
        "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}},
        "additionalProperties": false,
    });
    serde_json::json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "required": ["spec", "apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": {"const": "cdi.kubevirt.io/v1beta1"},
            "kind": {"const": "DataSource"},
            "metadata": metadata(),
            "spec": {
                "type": "object",
                "required": ["source"],
                "properties": {
                    "source": {
                        "type": "object",
                        "properties": {"pvc": named, "snapshot": named, "dataSource": named},
                        "additionalProperties": false,
                    },
                },
                "additionalProperties": false,
            },
            "status": {"type": "object"},
        },
        "additionalProperties": false,
    })
}

/// `doc` is valid against `schema`, CDI's shape of a `kind`.
fn check_against(schema: &serde_json::Value, kind: &str, doc: &serde_json::Value) {
    let v = jsonschema::validator_for(schema).expect("the schema compiles");
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "not a CDI v1beta1 {kind}: {errors:?}\n{doc:#}"
    );
}

fn check_datasource(doc: &serde_json::Value) {
    check_against(&cdi_datasource_schema(), "DataSource", doc);
}

fn check_shape(doc: &serde_json::Value) {
    check_against(&cdi_schema(), "DataVolume", doc);
}

fn yaml(text: &str) -> serde_json::Value {
    talos_gen::yaml::from_str(text, "the DataVolume").expect("YAML")
}

/// The ID of the embedded `cozystack` schematic.
fn cozystack_id() -> String {
    let (code, out, err) = run_text(&["schematic", "id", "cozystack"], None);
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

/// The message of an `/api/v1/` refusal: `{"error": ...}` whatever the
/// format asked (issue 50 item 7).
fn error_message(body: &[u8]) -> String {
    let j: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)));
    j["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn datavolume_from_the_cli_and_the_api_is_cdis_shape_and_imports_with_its_checksum() {
    let fx = Factory::new(2, 4, &[A], None);
    // The disk image of the embedded cozystack schematic too.
    let coz = cozystack_id();
    let d = fx.root().join(format!("image/{coz}/{V}"));
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join(A), &fx.xz).unwrap();
    let svc = fx.serve(&[]);
    let want_sum = format!("sha256:{}", sha256_hex(&fx.xz));
    let url = format!("{}{}", svc.url(), image_path(A));

    // The CLI, every field given, written to a file.
    let out = fx.dir.path().join("dv.yaml");
    let (code, stdout, err) = run_text(
        &[
            "datavolume",
            "--base-url",
            &svc.url(),
            "--schematic",
            S,
            "--talos-version",
            V,
            "--name",
            "talos-worker-md0",
            "--size",
            "20Gi",
            "--storage-class",
            "replicated",
            "--cert-configmap",
            "talos-gen-ca",
            "--cdi-version",
            "v1.65.0",
            "-o",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(stdout, "");
    let text = std::fs::read_to_string(&out).unwrap();
    let doc = yaml(&text);
    check_shape(&doc);
    let http = &doc["spec"]["source"]["http"];
    assert_eq!(http["url"], url.as_str());
    assert_eq!(http["checksum"], want_sum.as_str());
    assert_eq!(http["certConfigMap"], "talos-gen-ca");
    assert_eq!(doc["metadata"]["name"], "talos-worker-md0");
    assert_eq!(
        doc["spec"]["storage"]["resources"]["requests"]["storage"],
        "20Gi"
    );
    assert_eq!(doc["spec"]["storage"]["storageClassName"], "replicated");

    // The importer's way on the URL it wrote: nbdkit curl + qemu-img
    // convert; the bytes hash to the checksum it named and unpack to the disk.
    let nbd = NbdCurl::start(http["url"].as_str().unwrap());
    let got = fx.dir.path().join("imported.bin");
    nbd.convert(&got);
    let mut bytes = std::fs::read(&got).unwrap();
    // NBD exports whole sectors: the tail past the artifact is zeros.
    assert!(bytes.len() >= fx.xz.len() && bytes[fx.xz.len()..].iter().all(|b| *b == 0));
    bytes.truncate(fx.xz.len());
    assert_eq!(
        format!("sha256:{}", sha256_hex(&bytes)),
        http["checksum"].as_str().unwrap()
    );
    std::fs::write(&got, &bytes).unwrap();
    let unpacked = Command::new(require_tool("xz"))
        .arg("-dc")
        .arg(&got)
        .output()
        .unwrap();
    assert!(unpacked.status.success());
    assert!(
        unpacked.stdout == fx.raw,
        "the import does not unpack to the disk"
    );

    // The API, the same question: the same document, byte for byte (the
    // base URL is the request's own); JSON on ?format=json.
    let q = format!(
        "schematic={S}&talosVersion={V}&name=talos-worker-md0&size=20Gi&storageClass=replicated&certConfigMap=talos-gen-ca&cdiVersion=v1.65.0"
    );
    let api = |query: &str| curl(&[&format!("{}/api/v1/datavolume?{query}", svc.url())]);
    let r = api(&q);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(String::from_utf8(r.body.clone()).unwrap(), text);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/yaml")
    );
    let r = api(&format!("{q}&format=json"));
    assert_eq!(r.status, 200);
    let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(j, doc);
    // Defaults (no class, no CA, the CDI Cozystack runs: v1.64.0, which
    // has no checksum field), a schematic by name, the base URL a proxy in
    // front names.
    let r = curl(&[
        "-H",
        "X-Forwarded-Proto: https",
        "-H",
        "X-Forwarded-Host: talos-gen.example:8443",
        &format!(
            "{}/api/v1/datavolume?schematic=cozystack&talosVersion={V}&name=md1&size=10Gi",
            svc.url()
        ),
    ]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let doc = yaml(&String::from_utf8(r.body).unwrap());
    check_shape(&doc);
    assert_eq!(
        doc["spec"]["source"]["http"]["url"],
        format!("https://talos-gen.example:8443/image/{coz}/{V}/{A}")
    );
    assert!(doc["spec"]["source"]["http"].get("checksum").is_none());
    assert!(doc["spec"]["source"]["http"].get("certConfigMap").is_none());
    assert!(doc["spec"]["storage"].get("storageClassName").is_none());
    // Bad input: 400 naming the parameter (JSON with format=json).
    for (query, want) in [
        (q.replace("size=20Gi", "size=20GB"), "size: \"20GB\""),
        (q.replace("&name=talos-worker-md0", ""), "name: missing"),
        (
            q.replace("cdiVersion=v1.65.0", "cdiVersion=banana"),
            "cdiVersion: \"banana\"",
        ),
        (format!("{q}&profile=openshift"), "profile: \"openshift\""),
        (
            q.replace("talosVersion=", "talosversion="),
            "unknown query parameter \"talosversion\" (nearest known: \"talosVersion\")",
        ),
        (
            format!("{q}&platform=Open_Stack"),
            "platform: \"Open_Stack\"",
        ),
    ] {
        let r = api(&query);
        let body = error_message(&r.body);
        assert_eq!(r.status, 400, "{query}: {body}");
        assert!(body.contains(want), "{query}: {body}");
    }
    let r = api(&format!("{}&format=json", q.replace("size=20Gi", "size=0")));
    assert_eq!(r.status, 400);
    let e: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert!(e["error"].as_str().unwrap().starts_with("size: "), "{e}");

    // The CLI by schematic name, to standard output.
    let (code, stdout, err) = run_text(
        &[
            "datavolume",
            "--base-url",
            &svc.url(),
            "--schematic",
            "cozystack",
            "--talos-version",
            V,
            "--name",
            "md1",
            "--size",
            "10Gi",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let doc = yaml(&stdout);
    check_shape(&doc);
    assert_eq!(
        doc["spec"]["source"]["http"]["url"],
        format!("{}/image/{coz}/{V}/{A}", svc.url())
    );

    // The checksum cannot be read: exit 1 naming the URL.
    let args = |base: &str, version: &str| {
        run_text(
            &[
                "datavolume",
                "--base-url",
                base,
                "--schematic",
                S,
                "--talos-version",
                version,
                "--name",
                "md0",
                "--size",
                "20Gi",
                "--timeout",
                "10s",
            ],
            None,
        )
    };
    let missing = format!("{}/image/{S}/v1.13.7/{A}.sha256", svc.url());
    let (code, stdout, err) = args(&svc.url(), "v1.13.7");
    assert_eq!(code, 1, "{err}");
    assert_eq!(stdout, "");
    assert!(err.contains(&missing) && err.contains("404"), "{err}");
    let closed = format!("http://127.0.0.1:{}", crate::support::free_port());
    let (code, _, err) = args(&closed, V);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("{closed}/image/{S}/{V}/{A}.sha256")),
        "{err}"
    );
    // Bad input: exit 2 naming the flag, nothing asked.
    for (flag, value, want) in [
        ("--size", "20 Gi", "--size: \"20 Gi\""),
        ("--name", "Worker", "--name: \"Worker\""),
        ("--schematic", "nope", "--schematic: \"nope\""),
        ("--arch", "s390x", "--arch: \"s390x\""),
    ] {
        let mut a = vec![
            "datavolume",
            "--base-url",
            &closed,
            "--schematic",
            S,
            "--talos-version",
            V,
            "--name",
            "md0",
            "--size",
            "20Gi",
        ];
        a.extend([flag, value]);
        let (code, _, err) = run_text(&a, None);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(err.contains(want), "{flag}: {err}");
    }
    drop(svc);

    // Offline, the artifact stored: the API still answers, from the store.
    let off = Service::builder()
        .arg("--offline")
        .arg("--cache-dir")
        .arg(fx.cache())
        .start();
    let r = curl(&[&format!("{}/api/v1/datavolume?{q}", off.url())]);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        yaml(&String::from_utf8(r.body).unwrap())["spec"]["source"]["http"]["checksum"],
        want_sum.as_str()
    );
}

/// The documents of a YAML stream (`---` lines between them).
fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
    text.split("\n---\n").map(yaml).collect()
}

/// Issue 40: the golden layout. `--golden --namespace NS` writes the import
/// in NS and a `DataSource` naming its PVC; `--clone-from NS/NAME` a
/// worker's DataVolume whose `spec.sourceRef` is it (no `spec.source`, no
/// service asked); the API answers the same bytes for the same question.
/// Each document checked against CDI's published shapes, which are shown
/// to refuse what CDI refuses.
#[test]
fn golden_image_and_its_clones_are_cdis_shape() {
    // The schemas bite: both source and sourceRef, a sourceRef of another
    // kind, a DataSource's pvc without its namespace.
    let schema = cdi_schema();
    let dv = jsonschema::validator_for(&schema).unwrap();
    let both = serde_json::json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "x"}, "spec": {"source": {"blank": {}},
        "sourceRef": {"kind": "DataSource", "name": "g"}}});
    assert!(!dv.is_valid(&both));
    let pvc_ref = serde_json::json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "x"}, "spec": {"sourceRef": {"kind": "PersistentVolumeClaim", "name": "g"}}});
    assert!(!dv.is_valid(&pvc_ref));
    let schema = cdi_datasource_schema();
    let ds = jsonschema::validator_for(&schema).unwrap();
    let no_ns = serde_json::json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataSource",
        "metadata": {"name": "g"}, "spec": {"source": {"pvc": {"name": "g"}}}});
    assert!(!ds.is_valid(&no_ns));

    let fx = Factory::new(2, 4, &[A], None);
    let svc = fx.serve(&[]);
    let want_sum = format!("sha256:{}", sha256_hex(&fx.xz));
    let name = "talos-v1-13-6-cozystack";
    let (code, golden, err) = run_text(
        &[
            "datavolume",
            "--golden",
            "--namespace",
            "cozy-public",
            "--base-url",
            &svc.url(),
            "--schematic",
            S,
            "--talos-version",
            V,
            "--name",
            name,
            "--size",
            "20Gi",
            "--cert-configmap",
            "talos-gen-ca",
            "--cdi-version",
            "v1.66.0",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let docs = yaml_docs(&golden);
    assert_eq!(docs.len(), 2, "{golden}");
    check_shape(&docs[0]);
    check_datasource(&docs[1]);
    assert_eq!(
        docs[0]["metadata"],
        serde_json::json!({"name": name, "namespace": "cozy-public"})
    );
    let http = &docs[0]["spec"]["source"]["http"];
    assert_eq!(http["checksum"], want_sum.as_str());
    assert_eq!(http["certConfigMap"], "talos-gen-ca");
    assert_eq!(docs[1]["metadata"], docs[0]["metadata"]);
    assert_eq!(
        docs[1]["spec"]["source"]["pvc"],
        serde_json::json!({"name": name, "namespace": "cozy-public"})
    );
    let api = |query: &str| curl(&[&format!("{}/api/v1/datavolume?{query}", svc.url())]);
    let q = format!(
        "golden=true&namespace=cozy-public&schematic={S}&talosVersion={V}&name={name}&size=20Gi&certConfigMap=talos-gen-ca&cdiVersion=v1.66.0"
    );
    let r = api(&q);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(String::from_utf8(r.body).unwrap(), golden);
    let r = api(&format!("{q}&format=json"));
    let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(j["kind"], "List");
    assert_eq!(j["items"], serde_json::Value::Array(docs.clone()));

    // A worker's disk, cloned: no service, no checksum.
    let out = fx.dir.path().join("md0-disk-0.yaml");
    let (code, stdout, err) = run_text(
        &[
            "datavolume",
            "--clone-from",
            &format!("cozy-public/{name}"),
            "--name",
            "md0-disk-0",
            "--size",
            "20Gi",
            "--storage-class",
            "replicated",
            "-o",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!((code, stdout.as_str()), (0, ""), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    let clone = yaml(&text);
    check_shape(&clone);
    assert!(clone["spec"].get("source").is_none(), "{text}");
    assert_eq!(
        clone["spec"]["sourceRef"],
        serde_json::json!({"kind": "DataSource", "name": name, "namespace": "cozy-public"})
    );
    assert_eq!(clone["spec"]["storage"]["storageClassName"], "replicated");
    let r = api(&format!(
        "cloneFrom=cozy-public/{name}&name=md0-disk-0&size=20Gi&storageClass=replicated"
    ));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(String::from_utf8(r.body).unwrap(), text);

    // Bad input: exit 2 / 400 naming what was typed.
    for (args, want) in [
        (
            vec![
                "--golden",
                "--base-url",
                "http://x.example",
                "--schematic",
                S,
                "--talos-version",
                V,
            ],
            "--namespace",
        ),
        (
            vec![
                "--clone-from",
                "cozy-public/g",
                "--base-url",
                "http://x.example",
            ],
            "--base-url",
        ),
        (
            vec!["--clone-from", "cozy-public"],
            "--clone-from: \"cozy-public\"",
        ),
        (vec!["--clone-from", "Cozy/g"], "--clone-from: \"Cozy\""),
    ] {
        let mut a = vec!["datavolume", "--name", "md0", "--size", "20Gi"];
        a.extend(args.iter().copied());
        let (code, _, err) = run_text(&a, None);
        assert_eq!(code, 2, "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
    for (query, want) in [
        (
            format!("golden=true&schematic={S}&talosVersion={V}&name=g&size=1Gi"),
            "golden: needs namespace",
        ),
        (
            format!("golden=yes&namespace=n&schematic={S}&talosVersion={V}&name=g&size=1Gi"),
            "golden: \"yes\"",
        ),
        (
            "cloneFrom=n/g&name=w&size=1Gi&schematic=cozystack".to_string(),
            "schematic: not with cloneFrom",
        ),
        ("cloneFrom=n/g&size=1Gi".to_string(), "name: missing"),
        (
            "cloneFrom=g&name=w&size=1Gi&format=json".to_string(),
            "cloneFrom: \"g\"",
        ),
    ] {
        let r = api(&query);
        let body = error_message(&r.body);
        assert_eq!(r.status, 400, "{query}: {body}");
        assert!(body.contains(want), "{query}: {body}");
    }
}

/// Issue 49: `datavolume --golden --profile cozystack` from the CLI and
/// the API: the catalog's golden (`talos-worker-<schematic>-<version>` in
/// cozy-public, as dv.yaml renders it, its URL on talos-gen), no checksum
/// for the CDI Cozystack runs (v1.64.0) and one for v1.66.0; its storage
/// the raw disk's size (from the xz index, as the service answers it in
/// `x-talos-gen-raw-disk-size`) plus the stated headroom, a `--size` below
/// it refused naming both; a worker disk cloning it with `source.pvc`.
#[test]
fn the_cozystack_golden_its_size_and_its_worker_clone() {
    let fx = Factory::new(2, 4, &[A], None);
    let svc = fx.serve(&[]);
    let golden = format!("talos-worker-{S}-{V}");
    let base = svc.url();
    let cli = |extra: &[&str]| {
        let mut a = vec![
            "datavolume",
            "--golden",
            "--profile",
            "cozystack",
            "--base-url",
            &base,
            "--schematic",
            S,
            "--talos-version",
            V,
        ];
        a.extend(extra);
        run_text(&a, None)
    };
    let (code, text, err) = cli(&[]);
    assert_eq!(code, 0, "{err}");
    let doc = yaml(&text);
    check_shape(&doc);
    assert_eq!(doc["metadata"]["name"], golden.as_str());
    assert_eq!(doc["metadata"]["namespace"], "cozy-public");
    assert_eq!(
        doc["metadata"]["annotations"]["kubernetes-worker-image.cozystack.io/schematic-id"],
        S
    );
    assert_eq!(
        doc["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    assert_eq!(
        doc["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "cozystack"
    );
    assert_eq!(doc["spec"]["contentType"], "kubevirt");
    assert_eq!(
        doc["spec"]["source"]["http"],
        serde_json::json!({"url": format!("{}{}", svc.url(), image_path(A))})
    );
    // 6 MiB of raw disk: its size plus 256 MiB, rounded up to 1Gi.
    assert_eq!(fx.raw.len(), 6 << 20);
    assert_eq!(
        doc["spec"]["storage"]["resources"]["requests"]["storage"],
        "1Gi"
    );
    assert_eq!(doc["spec"]["storage"]["storageClassName"], "replicated");

    // The API: the same bytes, and the raw size in a header.
    let api = |query: &str| curl(&[&format!("{}/api/v1/datavolume?{query}", svc.url())]);
    let q = format!("golden=true&profile=cozystack&schematic={S}&talosVersion={V}");
    let r = api(&q);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(String::from_utf8(r.body.clone()).unwrap(), text);
    assert_eq!(
        r.header("x-talos-gen-raw-disk-size"),
        Some(fx.raw.len().to_string())
    );

    // CDI v1.66.0 has the checksum field.
    let (code, text, err) = cli(&["--cdi-version", "v1.66.0", "--size", "8Gi"]);
    assert_eq!(code, 0, "{err}");
    let doc = yaml(&text);
    check_shape(&doc);
    assert_eq!(
        doc["spec"]["source"]["http"]["checksum"],
        format!("sha256:{}", sha256_hex(&fx.xz)).as_str()
    );
    assert_eq!(
        doc["spec"]["storage"]["resources"]["requests"]["storage"],
        "8Gi"
    );

    // A size below the raw disk: refused (exit 1 / 4xx) naming both sizes.
    let (code, _, err) = cli(&["--size", "5Mi"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--size: 5Mi (5242880 bytes) is smaller than the raw disk inside the image, 6291456 bytes"),
        "{err}"
    );
    let r = api(&format!("{q}&size=5Mi"));
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        r.status >= 400 && body.contains("size: 5Mi"),
        "{}: {body}",
        r.status
    );
    // What the catalog has no place for: exit 2 naming the flag.
    let (code, _, err) = cli(&["--name", "mine"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--name: \"mine\""), "{err}");

    // The catalog with each entry's storage from the image (ranged reads
    // of its tail on the service, the artifact stored by now).
    let (_cfgdir, cfg) = crate::support::temp_file(
        "mirror.yaml",
        &format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}]\n"),
    );
    let (code, out, err) = run_text(
        &[
            "datavolume",
            "catalog",
            "--config",
            &cfg,
            "--base-url",
            &base,
            "--sizes",
            "--timeout",
            "1m",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!(
            "imageFactoryURL: {base}\nimages:\n    - schematicID: {S}\n      version: {V}\n      storage: 1Gi\n"
        )
    );

    // The worker disk cloning it, from the CLI and the API: the same bytes.
    let (code, clone, err) = run_text(
        &[
            "datavolume",
            "--clone-from",
            &format!("cozy-public/{golden}"),
            "--profile",
            "cozystack",
            "--name",
            "md0-disk-0",
            "--storage-class",
            "replicated",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let doc = yaml(&clone);
    check_shape(&doc);
    assert_eq!(
        doc["spec"]["source"]["pvc"],
        serde_json::json!({"namespace": "cozy-public", "name": golden})
    );
    assert_eq!(
        doc["metadata"]["annotations"]["kubernetes-worker-image.cozystack.io/golden"],
        golden.as_str()
    );
    assert_eq!(
        doc["spec"]["storage"]["resources"]["requests"]["storage"],
        "20Gi"
    );
    let r = api(&format!(
        "cloneFrom=cozy-public/{golden}&profile=cozystack&name=md0-disk-0&storageClass=replicated"
    ));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(String::from_utf8(r.body).unwrap(), clone);
}
