//! The HTTP API for configs and reservations, against a real `talos-gen
//! serve` process on loopback.

use crate::support;

use crate::support::Service;

/// `serve --offline` over a cache dir of its own.
fn start() -> (tempfile::TempDir, Service) {
    let dir = tempfile::tempdir().unwrap();
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(dir.path())
        .arg("--offline")
        .start();
    (dir, svc)
}

#[tokio::test]
async fn machineconfig_over_http_matches_the_cli() {
    let Some(shared) = support::reference_dir() else {
        return;
    };
    let (_dir, server) = start();
    let secrets = std::fs::read_to_string(shared.join("talos-golden/secrets.yaml")).unwrap();
    let client = reqwest::Client::new();

    // JSON body: the same bytes as the golden.
    let body = serde_json::json!({
        "clusterName": "base",
        "endpoint": "https://base:6443",
        "kubernetesVersion": "1.28.0",
        "talosVersion": "v1.12",
        "installDisk": "",
        "installImage": "",
        "force": true,
        "secrets": secrets,
    });
    let resp = client
        .post(format!("{}/api/v1/machineconfig", server.url()))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/yaml");
    assert!(resp.headers().get("warning").is_some());
    let text = resp.text().await.unwrap();
    let want = std::fs::read_to_string(shared.join("talos-golden/v1.12/base-worker.yaml")).unwrap();
    assert_eq!(text, want);

    // YAML body with the Cozystack profile and inline values.
    let yaml = format!(
        "clusterName: kubernetes-demo\nendpoint: https://kubernetes-demo.ns.svc:6443\nprofile: cozystack\ninstanceType: u1.xlarge\nvalues:\n  version: v1.34\n  gpus: [{{name: x}}]\nsecrets: |\n{}",
        secrets
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    let resp = client
        .post(format!("{}/api/v1/machineconfig", server.url()))
        .header("content-type", "application/yaml")
        .body(yaml)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.contains("kubelet:v1.34.9"), "{text}");
    assert!(text.contains("memory: 819Mi"), "{text}");
    assert!(text.contains("gpu: \"on\""), "{text}");

    // Bad input: 400 naming the field; refusal: 422.
    let resp = client
        .post(format!("{}/api/v1/machineconfig", server.url()))
        .header("content-type", "application/json")
        .body(serde_json::json!({"clusterName": "c", "endpoint": "https://c:6443", "instanceTyp": "u1.medium"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().contains("instanceTyp"));
    let resp = client
        .post(format!("{}/api/v1/machineconfig", server.url()))
        .header("content-type", "application/json")
        .body(serde_json::json!({"clusterName": "c", "endpoint": "https://c:6443", "talosVersion": "v1.13", "kubernetesVersion": "1.20.0", "secrets": secrets}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
}

#[tokio::test]
async fn reservations_over_http() {
    let (_dir, server) = start();
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/api/v1/kubelet-reservations", server.url()))
        .header("content-type", "application/json")
        .body(serde_json::json!({"instanceType": "u1.medium"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let j: serde_json::Value = serde_json::from_str(&resp.text().await.unwrap()).unwrap();
    assert_eq!(j["capacityMemory"], "3297Mi");
    assert_eq!(j["capacityCpu"], "900m");
    assert_eq!(j["systemReservedMemory"], "256Mi");
    let resp = client
        .post(format!("{}/api/v1/kubelet-reservations", server.url()))
        .body("instanceType: u1.nano\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let resp = client
        .post(format!("{}/api/v1/kubelet-reservations", server.url()))
        .body("instanceType: u1.medium\nevictionHardMemory: lots\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // Issue 41: the API's field, never the CLI's flag.
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("evictionHardMemory") && !text.contains("--"),
        "{text}"
    );
}

#[tokio::test]
async fn air_gap_fields_over_http() {
    let (_dir, server) = start();
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .unwrap()
        .public_key_pem();
    let body = serde_json::json!({
        "talosVersion": "v1.13.9",
        "kubernetesVersion": "1.35.6",
        "clusterName": "c",
        "endpoint": "https://c:6443",
        "airGapMirror": "http://10.0.0.5:8080",
        "imageVerificationKey": key,
    });
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/machineconfig", server.url()))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("name: registry.k8s.io\nendpoints:\n    - url: http://10.0.0.5:8080\nskipFallback: true\n"), "{text}");
    assert!(text.contains("kind: ImageVerificationConfig"), "{text}");
    // 1.12 with a key: 400 naming the version.
    let mut bad = body.clone();
    bad["talosVersion"] = "v1.12.11".into();
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/machineconfig", server.url()))
        .body(bad.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("v1.12.11"));
}

/// The ```` ```sh api-tested ```` blocks of docs/interface.md, continuation
/// lines joined: the API examples a user copies.
fn api_examples() -> Vec<String> {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/interface.md")).unwrap();
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for l in doc.lines() {
        let t = l.trim();
        match &mut block {
            None if t.starts_with("```sh api-tested") => block = Some(String::new()),
            None => {}
            Some(b) if t.starts_with("```") => {
                out.push(std::mem::take(b));
                block = None;
            }
            Some(b) => {
                b.push_str(t.trim_end_matches('\\'));
                b.push(' ');
            }
        }
    }
    out
}

/// Issue 41 item 4: the values file posted as it is, the flags as query
/// parameters (the documented example, run with curl from the repository's
/// root as written), JSON values alike; errors name the API's fields.
#[tokio::test]
async fn values_file_as_body_with_flags_in_the_query() {
    let (_dir, server) = start();
    let examples = api_examples();
    assert!(
        !examples.is_empty(),
        "docs/interface.md has no api-tested example"
    );
    for ex in &examples {
        let cmd = ex.replace("http://127.0.0.1:8080", &server.url());
        let out = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{cmd}: {}{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("type: worker"), "{text}");
        // instanceType=u1.xlarge of the query: its reservations.
        assert!(text.contains("memory: 819Mi"), "{text}");
        assert!(text.contains("installer/ce4c9805"), "{text}");
    }
    let client = reqwest::Client::new();
    let post = |query: &str, body: &str| {
        client
            .post(format!("{}/api/v1/machineconfig{query}", server.url()))
            .body(body.to_string())
            .send()
    };
    let q = "?clusterName=demo&endpoint=https://demo:6443&profile=cozystack";
    // JSON values, as it is.
    let r = post(q, r#"{"cluster": "demo", "version": "v1.34", "gpus": []}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("kubelet:v1.34.9"));
    // Repeated and comma-separated list parameters.
    let r = post(
        &format!("{q}&additionalSans=a.example,b.example&nameserver=10.0.0.53"),
        "version: v1.35\n",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("b.example") && text.contains("10.0.0.53"),
        "{text}"
    );
    // Errors name API fields, never CLI flags.
    for (query, body, want) in [
        (
            "?endpoint=https://demo:6443&profile=cozystack",
            "cluster: demo\n",
            "clusterName: required",
        ),
        (
            q,
            "talso:\n  version: v1.12.3\n",
            "body: unknown top-level key \\\"talso\\\" (nearest known: \\\"talos\\\")",
        ),
        (
            "?clusterNam=demo",
            "",
            "unknown query parameter \\\"clusterNam\\\" (nearest known: \\\"clusterName\\\")",
        ),
        (
            "?clusterName=demo&endpoint=https://demo:6443&talosVersion=v1.13.6&kubernetesVersion=banana",
            "",
            "kubernetesVersion",
        ),
        (
            "?clusterName=demo&endpoint=https://demo:6443&profile=cozystack&secrets=x",
            "",
            "secrets: not a query parameter",
        ),
    ] {
        let r = post(query, body).await.unwrap();
        assert_eq!(r.status(), 400, "{query}");
        let text = r.text().await.unwrap();
        assert!(text.contains(want), "{query}: {text}");
        assert!(
            !text.contains("\"--") && !text.contains(" --"),
            "{query}: {text}"
        );
    }
    // The envelope's errors too; a values file sent without query
    // parameters is told what to do.
    let r = post("", r#"{"endpoint": "https://demo:6443"}"#)
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("clusterName: required"));
    let values = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/kubernetes-nodes.values.yaml"
    ))
    .unwrap();
    let r = post("", &values).await.unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("unknown field `cluster`") && text.contains("query parameters"),
        "{text}"
    );
}
