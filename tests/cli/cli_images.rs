//! `talos-gen images` and `talos-gen mirror plan`: the worker's pull list
//! and the mirror config's `workers:` expansion, through the binary.

use crate::support::{run, stderr, stdout};

const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
const COZY: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

#[test]
fn images_prints_the_pull_list() {
    let o = run(
        &["images", "--talos", "v1.13.9", "--kubernetes", "v1.35"],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "factory.talos.dev/installer/{VANILLA}:v1.13.9\nghcr.io/siderolabs/kubelet:v1.35.6\nregistry.k8s.io/pause:3.10.1\n"
        )
    );
    assert_eq!(stderr(&o), "");
    let o = run(
        &[
            "images",
            "--talos",
            "1.12.3",
            "--kubernetes",
            "1.33.2",
            "--schematic",
            COZY,
            "--installer-repository",
            "mirror.local:8443/installer",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "mirror.local:8443/installer/{COZY}:v1.12.3\nghcr.io/siderolabs/kubelet:v1.33.2\nregistry.k8s.io/pause:3.10\n"
        )
    );
    let o = run(
        &[
            "images",
            "--talos",
            "v1.14.0-rc.1",
            "--kubernetes",
            "v1.37.0",
            "--platform",
            "openstack",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!(
            "factory.talos.dev/openstack-installer/{VANILLA}:v1.14.0-rc.1\n"
        )),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).ends_with("registry.k8s.io/pause:3.10.2\n"));
}

#[test]
fn images_json_says_what_each_is_for() {
    let o = run(
        &[
            "images",
            "--talos",
            "v1.13.9",
            "--kubernetes",
            "v1.35.6",
            "--optional",
            "--json",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let images = j["images"].as_array().unwrap();
    assert_eq!(images.len(), 7);
    assert_eq!(images[2]["image"], "registry.k8s.io/pause:3.10.1");
    assert_eq!(images[2]["role"], "pause");
    assert!(images[2]["for"].as_str().unwrap().contains("sandbox"));
    assert_eq!(images[2]["optional"], false);
    assert_eq!(images[3]["image"], "ghcr.io/siderolabs/flannel:0.28.8");
    assert_eq!(images[3]["optional"], true);
    assert_eq!(
        j["talosDefaultInstaller"],
        "ghcr.io/siderolabs/installer:v1.13.9"
    );
}

#[test]
fn images_newer_release_is_said_on_stderr() {
    let o = run(
        &["images", "--talos", "v1.13.15", "--kubernetes", "v1.35"],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(":v1.13.15\n"));
    assert!(stdout(&o).contains("registry.k8s.io/pause:3.10.1\n"));
    let e = stderr(&o);
    assert!(
        e.starts_with("talos-gen: images: Talos v1.13.15 is newer than the image data")
            && e.contains("v1.13.9"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1);
}

#[test]
fn images_refusals_and_bad_input() {
    // refused by the matrix, or no image data: exit 1, one line
    for (t, k, want) in [
        ("v1.13.9", "v1.30", "not supported by Talos"),
        ("v1.7.4", "v1.30", "no image data for Talos v1.7.4"),
    ] {
        let o = run(&["images", "--talos", t, "--kubernetes", k], None);
        assert_eq!(o.status.code(), Some(1), "{t} {k}");
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1);
        assert_eq!(stdout(&o), "");
    }
    // bad input: exit 2, naming the flag
    for (args, want) in [
        (vec!["--talos", "one", "--kubernetes", "v1.35"], "--talos"),
        (
            vec!["--talos", "v1.13.9", "--kubernetes", "x"],
            "--kubernetes",
        ),
        (
            vec![
                "--talos",
                "v1.13.9",
                "--kubernetes",
                "v1.35",
                "--schematic",
                "abc",
            ],
            "--schematic",
        ),
        (
            vec![
                "--talos",
                "v1.13.9",
                "--kubernetes",
                "v1.35",
                "--platform",
                "A B",
            ],
            "--platform",
        ),
        (vec!["--talos", "v1.13.9"], "--kubernetes"),
    ] {
        let mut a = vec!["images"];
        a.extend(args);
        let o = run(&a, None);
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
    }
}

#[test]
fn images_matrix_file_replaces_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("m.yaml");
    std::fs::write(
        &f,
        "talos:\n  - talos: \"1.99\"\n    kubernetes: {min: \"1.40.0\", max: \"1.41.99\"}\n    defaultKubernetes: {initial: \"1.41.0\", latest: \"1.41.2\"}\nimages:\n  - talos: v1.99.0\n    pause: registry.example/pause:9\n    kubelet: registry.example/kubelet\n    installer: registry.example/installer\n",
    )
    .unwrap();
    let o = run(
        &[
            "images",
            "--matrix",
            f.to_str().unwrap(),
            "--talos",
            "v1.99.0",
            "--kubernetes",
            "v1.41.1",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o).lines().skip(1).collect::<Vec<_>>(),
        [
            "registry.example/kubelet:v1.41.1",
            "registry.example/pause:9"
        ]
    );
}

#[test]
fn mirror_plan_expands_workers_without_network() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!(
            "workers:\n  - talos: v1.13.9\n    kubernetes: v1.35\n    schematic: {COZY}\nextraImages: [docker.io/library/busybox:1.36]\n"
        ),
    )
    .unwrap();
    let c = cfg.to_str().unwrap();
    let o = run(&["mirror", "plan", "--config", c], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        format!("  disk image  /image/{COZY}/v1.13.9/openstack-amd64.raw.xz"),
        format!(
            "  installer   factory.talos.dev/installer/{COZY}:v1.13.9 (every platform of the index)"
        ),
        "  kubelet     ghcr.io/siderolabs/kubelet:v1.35.6".to_string(),
        "  pause       registry.k8s.io/pause:3.10.1".to_string(),
        "    + cosign signature ghcr.io/siderolabs/kubelet:sha256-<manifest digest>.sig (where the upstream has it)".to_string(),
        "  image docker.io/library/busybox:1.36".to_string(),
        "5 items".to_string(),
    ] {
        assert!(text.lines().any(|l| l == want), "{want:?} not in\n{text}");
    }
    let o = run(&["mirror", "plan", "--config", c, "--json"], None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["items"].as_array().unwrap().len(), 5);
    assert_eq!(j["workers"][0]["kubernetes"], "v1.35.6");
    assert_eq!(j["items"][2]["kind"], "installer");
    assert_eq!(j["items"][2]["signature"], "if-present");
    assert_eq!(j["items"][0]["signature"], serde_json::Value::Null);

    // refused pair: exit 1 naming the entry; bad entry: exit 2
    std::fs::write(&cfg, "workers: [{talos: v1.13.9, kubernetes: v1.30}]\n").unwrap();
    let o = run(&["mirror", "plan", "--config", c], None);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("workers[0]: Kubernetes v1.30"),
        "{}",
        stderr(&o)
    );
    std::fs::write(
        &cfg,
        "workers: [{talos: v1.13.9, kubernetes: v1.35, arch: x}]\n",
    )
    .unwrap();
    let o = run(&["mirror", "plan", "--config", c], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("workers[0].arch"), "{}", stderr(&o));
}
