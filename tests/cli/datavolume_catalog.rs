//! `talos-gen datavolume catalog` and `datavolume check` (issue 49):
//! Cozystack's worker image catalog from an upgrade plan and from a mirror
//! config, each entry rendered back through the catalog's template as the
//! chart would (`kubernetes-worker-image.dv.yaml`'s name, namespace and
//! URL, transcribed); the charts' guards over live DataVolumes, exit 0 / 1
//! / 2.

use crate::support::run_text;

const COZY: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
const BASE: &str = "http://talos-gen.example:8080";

fn yaml(text: &str) -> serde_json::Value {
    talos_gen::yaml::from_str(text, "the catalog").expect("YAML")
}

/// `(schematicID, version)` of each entry, and what the template makes of
/// it with the values' imageFactoryURL: `talos-worker-<id>-<version>` in
/// cozy-public importing `<url>/image/<id>/<version>/openstack-amd64.raw.xz`.
fn entries(values: &serde_json::Value) -> Vec<(String, String)> {
    let url = values["imageFactoryURL"].as_str().unwrap();
    assert_eq!(url, BASE);
    values["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let (id, v) = (
                e["schematicID"].as_str().unwrap(),
                e["version"].as_str().unwrap(),
            );
            assert_eq!(e.as_object().unwrap().len(), 2, "{e}");
            (id.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn the_catalog_from_a_plan_and_from_a_mirror_config() {
    let (code, out, err) = run_text(
        &[
            "datavolume",
            "catalog",
            "--from-talos",
            "v1.11.6",
            "--from-kubernetes",
            "1.31.4",
            "--to-talos",
            "v1.14.6",
            "--to-kubernetes",
            "1.36.3",
            "--base-url",
            "http://talos-gen.example:8080/",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let e = entries(&yaml(&out));
    let want: Vec<(String, String)> = ["v1.11.6", "v1.12.11", "v1.14.6"]
        .iter()
        .map(|v| (COZY.to_string(), v.to_string()))
        .collect();
    assert_eq!(e, want);
    assert!(err.contains("Talos v1.12 on the way"), "{err}");

    // A mirror config: its schematics x talosVersions when images names
    // the openstack-amd64 disk, each worker's (the vanilla schematic by
    // default), each once.
    let (_dir, cfg) = crate::support::temp_file(
        "mirror.yaml",
        "schematics: [cozystack]\ntalosVersions: [v1.13.6, v1.14.6]\nimages: [openstack-amd64.raw.xz, metal-amd64.iso]\nworkers:\n  - {talos: v1.13.6, kubernetes: 1.35.6, schematic: cozystack}\n  - {talos: v1.12.11, kubernetes: 1.35.6}\n  - {talos: v1.12.11, kubernetes: 1.35.6, platform: nocloud}\n",
    );
    let (code, out, err) = run_text(
        &[
            "datavolume",
            "catalog",
            "--config",
            &cfg,
            "--base-url",
            BASE,
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        entries(&yaml(&out)),
        [(COZY, "v1.13.6"), (COZY, "v1.14.6"), (VANILLA, "v1.12.11")]
            .map(|(s, v)| (s.to_string(), v.to_string()))
    );

    // Refused: a config naming no openstack-amd64 disk (exit 1); bad input
    // (exit 2) naming what was typed.
    let (_dir2, none) = crate::support::temp_file(
        "mirror.yaml",
        "schematics: [cozystack]\ntalosVersions: [v1.13.6]\nimages: [metal-amd64.iso]\n",
    );
    let (code, _, err) = run_text(
        &[
            "datavolume",
            "catalog",
            "--config",
            &none,
            "--base-url",
            BASE,
        ],
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("names no openstack-amd64 disk image"), "{err}");
    for (args, want) in [
        (
            vec!["--config", cfg.as_str(), "--base-url", "ftp://x"],
            "--base-url: ",
        ),
        (
            vec![
                "--from-talos",
                "v1.11.6",
                "--from-kubernetes",
                "1.31.4",
                "--to-talos",
                "v1.14.6",
                "--to-kubernetes",
                "1.36.3",
                "--base-url",
                BASE,
                "--schematic",
                "nope",
            ],
            "--schematic: \"nope\"",
        ),
        (vec!["--base-url", BASE], "--config"),
    ] {
        let mut a = vec!["datavolume", "catalog"];
        a.extend(args);
        let (code, _, err) = run_text(&a, None);
        assert_eq!(code, 2, "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {err}");
    }
}

#[test]
fn check_reads_live_datavolumes_from_a_file_or_stdin() {
    let golden = format!("talos-worker-{COZY}-v1.13.6");
    let live = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"kind": "DataVolume", "metadata": {"name": golden, "namespace": "cozy-public"},
         "spec": {"source": {"http": {"url": format!("{BASE}/image/{COZY}/v1.13.6/openstack-amd64.raw.xz")}},
                  "storage": {"resources": {"requests": {"storage": "6Gi"}}, "storageClassName": "replicated"}},
         "status": {"phase": "Succeeded"}},
        {"kind": "DataVolume", "metadata": {"name": "md0-disk", "namespace": "tenant-a"},
         "spec": {"source": {"pvc": {"namespace": "cozy-public", "name": golden}},
                  "storage": {"resources": {"requests": {"storage": "20Gi"}}, "storageClassName": "replicated"}}},
    ]})
    .to_string();
    let (code, out, err) = run_text(&["datavolume", "check"], Some(live.as_bytes()));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("ok: 2 DataVolumes read"), "{out}");
    // The disk smaller than its golden: exit 1, one line naming both.
    let small = live.replace("\"20Gi\"", "\"4Gi\"");
    let (_dir, f) = crate::support::temp_file("live.json", &small);
    let (code, out, _) = run_text(&["datavolume", "check", "-f", &f], None);
    assert_eq!(code, 1);
    assert_eq!(
        out,
        format!(
            "refuse: tenant-a/md0-disk asks 4Gi and golden {golden} is 6Gi: a clone target must be at least its source; the tenant render fails\n"
        )
    );
    // With the values about to be applied: the golden dropped from them.
    let (_dir2, values) = crate::support::temp_file(
        "catalog.yaml",
        &format!(
            "imageFactoryURL: {BASE}\nimages:\n  - schematicID: {COZY}\n    version: v1.14.6\n"
        ),
    );
    let (code, out, _) = run_text(
        &["datavolume", "check", "--values", &values],
        Some(live.as_bytes()),
    );
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!("in use: tenant-a/md0-disk clones golden {golden}")),
        "{out}"
    );
    assert!(out.contains("is not in cozy-public yet"), "{out}");
    let (code, _, err) = run_text(&["datavolume", "check"], Some(b"not json"));
    assert_eq!(code, 2);
    assert!(err.contains("standard input: not JSON"), "{err}");
}
