//! `GET /api/v1/upgrade-plan` (issue 40): the JSON `talos-gen upgrade plan
//! --json` prints for the same question; bad input 400, no path 422, each
//! with a JSON error body.

use std::time::Duration;

use crate::support::{Service, run_text, send};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_plan_answers_the_cli_json() {
    let tmp = tempfile::tempdir().unwrap();
    let srv = Service::builder()
        .listen_port_zero()
        .args(["--offline", "--cache-dir"])
        .arg(tmp.path().join("cache"))
        .start();
    let base = srv.url();
    let http = reqwest::Client::new();
    let get = |q: String| send(http.get(format!("{base}/api/v1/upgrade-plan?{q}")));

    for (from_t, from_k, to_t, to_k, replace) in [
        ("v1.11.6", "1.31.4", "v1.14.6", "1.36.3", false),
        ("v1.14.6", "1.32.13", "v1.9.6", "1.32.13", true),
        ("v1.13.9", "1.35.6", "1.14", "1.35", false),
        ("v1.13.9", "1.35.6", "v1.13.9", "1.35.6", false),
    ] {
        let mut args = vec![
            "upgrade",
            "plan",
            "--from-talos",
            from_t,
            "--from-kubernetes",
            from_k,
            "--to-talos",
            to_t,
            "--to-kubernetes",
            to_k,
            "--json",
        ];
        if replace {
            args.push("--replace");
        }
        let (code, out, err) = run_text(&args, None);
        assert_eq!(code, 0, "{err}");
        let cli: serde_json::Value = serde_json::from_str(&out).unwrap();
        let r = get(format!(
            "fromTalos={from_t}&fromKubernetes={from_k}&toTalos={to_t}&toKubernetes={to_k}{}",
            if replace { "&replace=true" } else { "" }
        ))
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.header("content-type").starts_with("application/json"));
        assert_eq!(r.json(), cli);
    }

    // No path: 422 naming the rule; bad input: 400; both JSON.
    for (q, status, says) in [
        (
            "fromTalos=v1.13.9&fromKubernetes=1.35.6&toTalos=v1.13.9&toKubernetes=1.34.1",
            422,
            "Kubernetes downgrade",
        ),
        (
            "fromTalos=v1.0.6&fromKubernetes=1.23.6&toTalos=v1.1.2&toKubernetes=1.23.6",
            422,
            "host-upgrade window",
        ),
        (
            "fromTalos=v1.13&fromKubernetes=1.35.6&toTalos=v1.14&toKubernetes=1.35",
            400,
            "fromTalos: v1.13 is a minor",
        ),
        (
            "fromTalos=v1.13.9&toTalos=v1.14&toKubernetes=1.35",
            400,
            "fromKubernetes: required",
        ),
        (
            "fromTalos=v1.13.9&fromKubernetes=x&toTalos=v1.14&toKubernetes=1.35",
            400,
            "fromKubernetes",
        ),
        (
            "fromTalos=v1.13.9&fromKubernetes=1.35.6&toTalos=v1.14&toKubernetes=1.35&replace=yes",
            400,
            "replace: \"yes\"",
        ),
        (
            "fromTalos=v1.13.9&fromKubernetes=1.35.6&toTalos=v1.14&toKubernetes=1.35&bogus=1",
            400,
            "unknown query parameter \"bogus\"",
        ),
    ] {
        let r = get(q.to_string()).await;
        assert_eq!(r.status, status, "{q}: {}", r.text());
        let e = r.json();
        assert!(e["error"].as_str().unwrap().contains(says), "{q}: {e}");
    }
    assert_eq!(srv.terminate(Duration::from_secs(10)), Some(0));
}
