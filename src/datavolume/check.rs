//! `talos-gen datavolume check`: what Cozystack's charts would refuse or
//! wait on, read from the live DataVolumes (`kubectl get dv -A -o json`)
//! before a rollout: the render-time guards of `kubernetes/templates/
//! cluster.yaml` for each worker disk that clones a golden (the golden
//! missing or `Failed`, on another StorageClass, larger than the disk),
//! the wait CDI puts on a clone of a golden still importing, and, given the
//! catalog's values, each entry that drifted from its live golden (a
//! DataVolume spec cannot be patched in place) and each worker disk still
//! cloning a golden the values no longer name (about to go).
//!
//! Pure: the caller reads the files; every finding is a line.

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};

use super::cozystack::{self, Defaults, Entry, Golden};

/// One thing the charts would refuse or wait on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The chart's render fails (`fail`) or CDI's clone cannot complete.
    Refuse(String),
    /// CDI holds the worker disk until the golden is populated.
    Wait(String),
    /// A worker disk clones a golden the catalog no longer names.
    InUse(String),
}

impl Finding {
    pub fn line(&self) -> String {
        match self {
            Finding::Refuse(m) => format!("refuse: {m}"),
            Finding::Wait(m) => format!("wait: {m}"),
            Finding::InUse(m) => format!("in use: {m}"),
        }
    }
}

/// The catalog's values (its values.yaml, or `datavolume catalog`'s).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawValues {
    #[serde(default, rename = "imageFactoryURL")]
    image_factory_url: Option<String>,
    #[serde(default)]
    storage: Option<String>,
    #[serde(default)]
    storage_class: Option<String>,
    #[serde(default)]
    images: Vec<RawEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEntry {
    #[serde(rename = "schematicID")]
    schematic_id: String,
    version: String,
    #[serde(default, rename = "imageFactoryURL")]
    image_factory_url: Option<String>,
    #[serde(default)]
    storage: Option<String>,
    #[serde(default)]
    storage_class: Option<String>,
}

/// The catalog's values `text` (named `what`), rendered as its template
/// does (what it refuses, refused).
pub fn catalog_of_values(text: &str, what: &str) -> Result<Vec<Golden>> {
    let raw: RawValues = crate::yaml::from_str(text, what)?;
    let base = Defaults::default();
    let defaults = Defaults {
        image_factory_url: raw.image_factory_url.unwrap_or(base.image_factory_url),
        storage: raw.storage.unwrap_or(base.storage),
        storage_class: raw.storage_class.or(base.storage_class),
    };
    let entries: Vec<Entry> = raw
        .images
        .into_iter()
        .map(|e| Entry {
            schematic_id: e.schematic_id,
            version: e.version,
            image_factory_url: e.image_factory_url,
            storage: e.storage,
            storage_class: e.storage_class,
        })
        .collect();
    cozystack::render(&defaults, &entries, &|i, f| {
        format!("{what}: images[{i}].{f}")
    })
}

/// A live DataVolume, as far as the guards look.
struct Live<'a> {
    namespace: &'a str,
    name: &'a str,
    phase: &'a str,
    progress: &'a str,
    url: &'a str,
    pvc: Option<(&'a str, &'a str)>,
    storage: &'a str,
    class: &'a str,
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().fold(v, |v, k| &v[*k]).as_str().unwrap_or("")
}

fn live_of(v: &Value) -> Live<'_> {
    let pvc = &v["spec"]["source"]["pvc"];
    Live {
        namespace: s(v, &["metadata", "namespace"]),
        name: s(v, &["metadata", "name"]),
        phase: s(v, &["status", "phase"]),
        progress: s(v, &["status", "progress"]),
        url: s(v, &["spec", "source", "http", "url"]),
        pvc: pvc
            .is_object()
            .then(|| (s(pvc, &["namespace"]), s(pvc, &["name"]))),
        // `spec.storage`, or the older `spec.pvc` (a PVC spec).
        storage: match s(v, &["spec", "storage", "resources", "requests", "storage"]) {
            "" => s(v, &["spec", "pvc", "resources", "requests", "storage"]),
            x => x,
        },
        class: match s(v, &["spec", "storage", "storageClassName"]) {
            "" => s(v, &["spec", "pvc", "storageClassName"]),
            x => x,
        },
    }
}

/// The live DataVolumes of `text` (`kubectl get dv -A -o json`: a `List`,
/// or one object), named `what` in errors.
pub fn parse_live(text: &str, what: &str) -> Result<Vec<Value>> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        Error::bad_input(format!("{what}: not JSON (kubectl get dv -A -o json): {e}"))
    })?;
    let items = match (&v["kind"], &v["items"]) {
        (_, Value::Array(items)) => items.clone(),
        (Value::String(k), _) if k == "DataVolume" => vec![v.clone()],
        _ => {
            return Err(Error::bad_input(format!(
                "{what}: neither a List of DataVolumes nor one (kubectl get dv -A -o json)"
            )));
        }
    };
    for (i, item) in items.iter().enumerate() {
        if item["kind"].as_str().is_some_and(|k| k != "DataVolume") {
            return Err(Error::bad_input(format!(
                "{what}: items[{i}] is a {}, not a DataVolume",
                item["kind"]
            )));
        }
        if s(item, &["metadata", "name"]).is_empty() {
            return Err(Error::bad_input(format!(
                "{what}: items[{i}] has no metadata.name"
            )));
        }
    }
    Ok(items)
}

fn bytes(q: &str) -> Option<f64> {
    super::size::quantity_bytes(q)
}

/// What the charts would refuse or wait on, given the live DataVolumes
/// and, when known, the catalog's entries.
pub fn check(live: &[Value], catalog: Option<&[Golden]>) -> Vec<Finding> {
    let all: Vec<Live<'_>> = live.iter().map(live_of).collect();
    let golden_of = |name: &str| {
        all.iter()
            .find(|g| g.namespace == cozystack::NAMESPACE && g.name == name)
    };
    let mut out = Vec::new();
    for w in all.iter() {
        let Some((ns, name)) = w.pvc else { continue };
        if ns != cozystack::NAMESPACE || !name.starts_with("talos-worker-") {
            continue;
        }
        out.extend(worker_findings(w, name, golden_of(name)));
        if let Some(c) = catalog
            && !c.iter().any(|g| g.name() == name)
        {
            out.push(Finding::InUse(format!(
                "{}/{} clones golden {name}, which the catalog no longer names (delete the golden only once nothing clones it)",
                w.namespace, w.name
            )));
        }
    }
    for g in catalog.unwrap_or_default() {
        let name = g.name();
        match golden_of(&name) {
            None => out.push(Finding::Wait(format!(
                "golden {name} is not in {} yet: the catalog has not been applied",
                cozystack::NAMESPACE
            ))),
            Some(l) => out.extend(drift(g, l)),
        }
    }
    out
}

/// The guards of cluster.yaml's `image.builtin` path for worker disk `w`
/// cloning `name`, and CDI's wait.
fn worker_findings(w: &Live<'_>, name: &str, golden: Option<&Live<'_>>) -> Vec<Finding> {
    let who = format!("{}/{}", w.namespace, w.name);
    let Some(g) = golden else {
        return vec![Finding::Refuse(format!(
            "{who} clones golden {name}, not found in {}: the tenant render fails (add its entry to the catalog)",
            cozystack::NAMESPACE
        ))];
    };
    let mut out = Vec::new();
    match g.phase {
        "Failed" => out.push(Finding::Refuse(format!(
            "{who} clones golden {name}, which failed to import (phase Failed): the tenant render fails; delete the golden to retry its import"
        ))),
        "Succeeded" => {}
        phase => out.push(Finding::Wait(format!(
            "{who} clones golden {name}, still importing (phase {}{}): CDI holds the disk until it is done",
            if phase.is_empty() { "unknown" } else { phase },
            if g.progress.is_empty() { String::new() } else { format!(", {}", g.progress) }
        ))),
    }
    if !w.class.is_empty() && !g.class.is_empty() && w.class != g.class {
        out.push(Finding::Refuse(format!(
            "{who} is on StorageClass {:?}, golden {name} on {:?}: CDI cannot CSI-clone across StorageClasses; the tenant render fails",
            w.class, g.class
        )));
    }
    if let (Some(wb), Some(gb)) = (bytes(w.storage), bytes(g.storage))
        && wb < gb
    {
        out.push(Finding::Refuse(format!(
            "{who} asks {} and golden {name} is {}: a clone target must be at least its source; the tenant render fails",
            w.storage, g.storage
        )));
    }
    out
}

/// An entry whose live golden differs from it: the template refuses
/// (a DataVolume spec cannot be patched in place).
fn drift(g: &Golden, l: &Live<'_>) -> Vec<Finding> {
    let name = g.name();
    let mut out = Vec::new();
    let want_class = g.storage_class.as_deref().unwrap_or("");
    for (what, entry, live) in [
        ("source URL", g.url.as_str(), l.url),
        ("storage", g.storage.as_str(), l.storage),
        ("StorageClass", want_class, l.class),
    ] {
        let same = match what {
            "storage" => bytes(entry).is_some() && bytes(entry) == bytes(live),
            _ => entry == live,
        };
        if !same {
            out.push(Finding::Refuse(format!(
                "the catalog's entry for {name} has {what} {entry:?}, its live golden {live:?}: a DataVolume spec cannot be patched in place (a changed entry is a new (schematicID, version))"
            )));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const S: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
    const F: &str = "http://talos-gen.example:8080";

    fn name(v: &str) -> String {
        cozystack::golden_name(S, v)
    }

    fn golden(v: &str, phase: &str, storage: &str) -> Value {
        json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name(v), "namespace": "cozy-public"},
            "spec": {"contentType": "kubevirt",
                "source": {"http": {"url": format!("{F}/image/{S}/{v}/openstack-amd64.raw.xz")}},
                "storage": {"resources": {"requests": {"storage": storage}}, "storageClassName": "replicated"}},
            "status": {"phase": phase, "progress": if phase == "Succeeded" { "100.0%" } else { "45.00%" }}})
    }

    fn worker(n: &str, v: &str, size: &str, class: &str) -> Value {
        json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": n, "namespace": "tenant-a"},
            "spec": {"source": {"pvc": {"namespace": "cozy-public", "name": name(v)}},
                "storage": {"resources": {"requests": {"storage": size}}, "storageClassName": class}}})
    }

    /// Each guard of cluster.yaml's `image.builtin` path, CDI's wait, and
    /// with the values: drift, an entry not applied yet, a golden in use
    /// that the values dropped.
    #[test]
    fn the_charts_guards_over_live_datavolumes() {
        let live = vec![
            golden("v1.13.6", "Succeeded", "6Gi"),
            golden("v1.14.6", "ImportInProgress", "6Gi"),
            golden("v1.12.11", "Failed", "6Gi"),
            worker("ok", "v1.13.6", "20Gi", "replicated"),
            worker("waits", "v1.14.6", "20Gi", "replicated"),
            worker("failed", "v1.12.11", "20Gi", "replicated"),
            worker("missing", "v1.11.6", "20Gi", "replicated"),
            worker("other-class", "v1.13.6", "20Gi", "local"),
            worker("small", "v1.13.6", "5Gi", "replicated"),
            // An HTTP import: nothing to check.
            json!({"kind": "DataVolume", "metadata": {"name": "http", "namespace": "t"},
                "spec": {"source": {"http": {"url": "http://x/y.raw.xz"}}}}),
        ];
        let got: Vec<String> = check(&live, None).iter().map(Finding::line).collect();
        let (a, b, c, d) = (
            name("v1.13.6"),
            name("v1.14.6"),
            name("v1.12.11"),
            name("v1.11.6"),
        );
        assert_eq!(
            got,
            [
                format!(
                    "wait: tenant-a/waits clones golden {b}, still importing (phase ImportInProgress, 45.00%): CDI holds the disk until it is done"
                ),
                format!(
                    "refuse: tenant-a/failed clones golden {c}, which failed to import (phase Failed): the tenant render fails; delete the golden to retry its import"
                ),
                format!(
                    "refuse: tenant-a/missing clones golden {d}, not found in cozy-public: the tenant render fails (add its entry to the catalog)"
                ),
                format!(
                    "refuse: tenant-a/other-class is on StorageClass \"local\", golden {a} on \"replicated\": CDI cannot CSI-clone across StorageClasses; the tenant render fails"
                ),
                format!(
                    "refuse: tenant-a/small asks 5Gi and golden {a} is 6Gi: a clone target must be at least its source; the tenant render fails"
                ),
            ]
        );
        assert!(check(&live[..4], None).is_empty());

        let values = format!(
            "imageFactoryURL: {F}\nimages:\n  - schematicID: {S}\n    version: v1.13.6\n  - schematicID: {S}\n    version: v1.14.6\n    storage: 8Gi\n  - schematicID: {S}\n    version: v1.15.0\n"
        );
        let catalog = catalog_of_values(&values, "--values v.yaml").unwrap();
        let got: Vec<String> = check(&live[..6], Some(&catalog))
            .iter()
            .map(Finding::line)
            .collect();
        let e = name("v1.15.0");
        assert_eq!(
            got,
            [
                format!(
                    "wait: tenant-a/waits clones golden {b}, still importing (phase ImportInProgress, 45.00%): CDI holds the disk until it is done"
                ),
                format!(
                    "refuse: tenant-a/failed clones golden {c}, which failed to import (phase Failed): the tenant render fails; delete the golden to retry its import"
                ),
                format!(
                    "in use: tenant-a/failed clones golden {c}, which the catalog no longer names (delete the golden only once nothing clones it)"
                ),
                format!(
                    "refuse: the catalog's entry for {b} has storage \"8Gi\", its live golden \"6Gi\": a DataVolume spec cannot be patched in place (a changed entry is a new (schematicID, version))"
                ),
                format!(
                    "wait: golden {e} is not in cozy-public yet: the catalog has not been applied"
                ),
            ]
        );
    }

    #[test]
    fn bad_input_names_the_file() {
        for (text, want) in [
            ("nope", "live.json: not JSON"),
            ("{\"kind\": \"Pod\"}", "live.json: neither a List"),
            (
                "{\"items\": [{\"kind\": \"Pod\", \"metadata\": {\"name\": \"p\"}}]}",
                "live.json: items[0] is a \"Pod\"",
            ),
            (
                "{\"items\": [{\"kind\": \"DataVolume\"}]}",
                "live.json: items[0] has no metadata.name",
            ),
        ] {
            let e = parse_live(text, "live.json").unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().starts_with(want), "{e}");
        }
        let e = catalog_of_values(
            "images:\n  - schematicID: A\n    version: v1.13.6\n",
            "--values v.yaml",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--values v.yaml: images[0].schematicID: "),
            "{e}"
        );
        let e = catalog_of_values("bogus: 1\n", "--values v.yaml").unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }
}
