//! Cozystack's golden worker image catalog, as its charts render it
//! (reference: `../shared/cozystack/golden/`, cozystack commit 5952c7db6652
//! with the render-time refusals of 0034da0181e2): one `DataVolume` per
//! (schematic, version), named `talos-worker-<schematicID>-<version>` in
//! `cozy-public` (`kubernetes-worker-image/templates/dv.yaml`), and the
//! worker disk that clones it with `spec.source.pvc`
//! (`kubernetes/templates/cluster.yaml`, `image.builtin`).
//!
//! Pure: documents and the catalog's entries, checked as the template
//! checks them. What CDI accepts where it runs is [`super::cdi`]'s; the
//! live guards (`datavolume check`) are [`super::check`]'s.

use crate::error::{Error, Result};
use crate::goyaml::{Map, Node};

use super::{Field, Names, Request};

/// Where every golden lives.
pub const NAMESPACE: &str = "cozy-public";
/// The catalog's default `storage` (values.yaml).
pub const DEFAULT_STORAGE: &str = "6Gi";
/// The catalog's default `storageClass` (values.yaml).
pub const DEFAULT_STORAGE_CLASS: &str = "replicated";
/// The worker disk's default size (cluster.yaml: `.group.diskSize | default "20Gi"`).
pub const DEFAULT_WORKER_DISK: &str = "20Gi";
/// The one asset the catalog imports (`openstack-amd64.raw.xz`).
pub const PLATFORM: &str = "openstack";
pub const ARCH: &str = "amd64";

pub const ANN_SCHEMATIC: &str = "kubernetes-worker-image.cozystack.io/schematic-id";
pub const ANN_VERSION: &str = "kubernetes-worker-image.cozystack.io/talos-version";
/// On each worker disk cloned from a golden: the golden's name.
pub const ANN_GOLDEN: &str = "kubernetes-worker-image.cozystack.io/golden";

/// The golden's name: `talos-worker-<schematicID>-<version>` (the contract
/// the kubernetes app reconstructs).
pub fn golden_name(schematic: &str, version: &str) -> String {
    format!("talos-worker-{schematic}-{version}")
}

/// One `images[]` entry of the catalog's values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    pub schematic_id: String,
    pub version: String,
    pub image_factory_url: Option<String>,
    pub storage: Option<String>,
    pub storage_class: Option<String>,
}

/// The catalog's top-level defaults (values.yaml).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defaults {
    pub image_factory_url: String,
    pub storage: String,
    pub storage_class: Option<String>,
}

impl Default for Defaults {
    fn default() -> Defaults {
        Defaults {
            image_factory_url: "https://factory.talos.dev".into(),
            storage: DEFAULT_STORAGE.into(),
            storage_class: Some(DEFAULT_STORAGE_CLASS.into()),
        }
    }
}

/// An entry as the template renders it: every default applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Golden {
    pub schematic_id: String,
    pub version: String,
    /// `<factory>/image/<schematicID>/<version>/openstack-amd64.raw.xz`.
    pub url: String,
    pub storage: String,
    pub storage_class: Option<String>,
}

impl Golden {
    pub fn name(&self) -> String {
        golden_name(&self.schematic_id, &self.version)
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, the template's schematicID rule.
fn is_schematic_id(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// `^v[0-9]+\.[0-9]+(\.[0-9]+)?(-[0-9a-z.]+)?$`, the template's version rule.
pub fn is_catalog_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    let nums_ok = (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let pre_ok = pre.is_none_or(|p| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.')
    });
    nums_ok && pre_ok
}

/// A plain http(s) URL: a scheme, a host, no query, fragment or user info.
fn is_plain_url(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
    else {
        return false;
    };
    let host = rest.split('/').next().unwrap_or("");
    !host.is_empty()
        && !rest.contains(['?', '#', '@', ' '])
        && rest.bytes().all(|b| b.is_ascii_graphic())
}

/// Render `images` as the template does, refusing what it refuses: a
/// malformed schematicID, version or imageFactoryURL, and two entries
/// naming one golden. `at(i, field)` names a field in messages.
pub fn render(
    defaults: &Defaults,
    images: &[Entry],
    at: &dyn Fn(usize, &str) -> String,
) -> Result<Vec<Golden>> {
    let mut out: Vec<Golden> = Vec::with_capacity(images.len());
    for (i, e) in images.iter().enumerate() {
        let bad = |field: &str, value: &str, rule: &str| {
            Error::bad_input(format!(
                "{}: {:?} {rule}",
                at(i, field),
                value.chars().take(80).collect::<String>()
            ))
        };
        if !is_schematic_id(&e.schematic_id) {
            return Err(bad(
                "schematicID",
                &e.schematic_id,
                "is not a schematic ID the catalog takes (^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)",
            ));
        }
        if !is_catalog_version(&e.version) {
            return Err(bad(
                "version",
                &e.version,
                "is not a version the catalog takes (^v[0-9]+\\.[0-9]+(\\.[0-9]+)?(-[0-9a-z.]+)?$, e.g. v1.13.6)",
            ));
        }
        let factory = e
            .image_factory_url
            .as_deref()
            .unwrap_or(&defaults.image_factory_url);
        if !is_plain_url(factory) {
            return Err(bad(
                "imageFactoryURL",
                factory,
                "is not a plain http(s) URL",
            ));
        }
        let storage = e
            .storage
            .clone()
            .unwrap_or_else(|| defaults.storage.clone());
        if !super::is_storage_quantity(&storage) {
            return Err(bad(
                "storage",
                &storage,
                "is not a Kubernetes quantity of storage (e.g. 6Gi)",
            ));
        }
        let g = Golden {
            url: format!(
                "{}/image/{}/{}/{PLATFORM}-{ARCH}.raw.xz",
                factory.trim_end_matches('/'),
                e.schematic_id,
                e.version
            ),
            schematic_id: e.schematic_id.clone(),
            version: e.version.clone(),
            storage,
            storage_class: e
                .storage_class
                .clone()
                .or_else(|| defaults.storage_class.clone())
                .filter(|s| !s.is_empty()),
        };
        if let Some(j) = out.iter().position(|o| o.name() == g.name()) {
            return Err(Error::bad_input(format!(
                "{}: {} is also entry {j}: two entries name one golden (a changed entry is a new (schematicID, version))",
                at(i, "schematicID"),
                g.name()
            )));
        }
        out.push(g);
    }
    Ok(out)
}

/// The Cozystack catalog's golden for a checked request: the catalog's
/// name, namespace and asset; what the catalog has no field for refused.
pub(super) fn golden_of_request(
    req: &Request,
    names: Names,
    base: &str,
    schematic: &str,
    version: &str,
) -> Result<Golden> {
    let n = |f| names.of(f);
    let refuse = |what: &str, why: &str| Err(Error::bad_input(format!("{what}: {why}")));
    if !req.golden {
        return refuse(
            n(Field::Profile),
            &format!(
                "cozystack writes the catalog's golden ({}) or a worker disk cloning one ({})",
                n(Field::Golden),
                n(Field::CloneFrom)
            ),
        );
    }
    let golden = golden_name(schematic, version);
    if !req.name.is_empty() && req.name != golden {
        return refuse(
            n(Field::Name),
            &format!(
                "{:?}: the catalog names its golden {golden} (leave {} out)",
                super::shown(&req.name),
                n(Field::Name)
            ),
        );
    }
    if let Some(ns) = req.namespace.as_deref().filter(|ns| *ns != NAMESPACE) {
        return refuse(
            n(Field::Namespace),
            &format!(
                "{:?}: the catalog's goldens are in {}",
                super::shown(ns),
                NAMESPACE
            ),
        );
    }
    for (field, value, want) in [
        (Field::Platform, req.platform.as_deref(), PLATFORM),
        (Field::Arch, req.arch.as_deref(), ARCH),
    ] {
        if let Some(v) = value.filter(|v| *v != want) {
            return refuse(
                n(field),
                &format!(
                    "{:?}: the catalog imports {}-{}.raw.xz only",
                    super::shown(v),
                    PLATFORM,
                    ARCH
                ),
            );
        }
    }
    if req.cert_configmap.is_some() {
        return refuse(
            n(Field::CertConfigMap),
            "the catalog has no certConfigMap (its template writes none)",
        );
    }
    if !req.size.is_empty() {
        super::check_size(&req.size, n(Field::Size))?;
    }
    if let Some(sc) = &req.storage_class {
        super::check_subdomain(sc, n(Field::StorageClass), "StorageClass")?;
    }
    let defaults = Defaults {
        image_factory_url: base.trim_end_matches('/').to_string(),
        ..Default::default()
    };
    let entry = Entry {
        schematic_id: schematic.to_string(),
        version: version.to_string(),
        image_factory_url: None,
        storage: (!req.size.is_empty()).then(|| req.size.clone()),
        storage_class: req.storage_class.clone(),
    };
    let mut rendered = render(&defaults, &[entry], &|_, field| match field {
        "schematicID" => n(Field::Schematic).to_string(),
        "version" => n(Field::TalosVersion).to_string(),
        "storage" => n(Field::Size).to_string(),
        _ => n(Field::BaseUrl).to_string(),
    })?;
    Ok(rendered.remove(0))
}

/// The golden `DataVolume`, as `templates/dv.yaml` renders it;
/// `checksum` (`sha256:<hex>`) only where the CDI has the field.
pub fn golden_document(g: &Golden, checksum: Option<&str>) -> Node {
    let annotations = Map::new()
        .field("helm.sh/resource-policy", "keep")
        .field("cdi.kubevirt.io/storage.bind.immediate.requested", "true")
        .field("cdi.kubevirt.io/storage.usePopulator", "true")
        .field(ANN_SCHEMATIC, g.schematic_id.as_str())
        .field(ANN_VERSION, g.version.as_str());
    let http = Map::new()
        .field("url", g.url.as_str())
        .some("checksum", checksum);
    Map::new()
        .field("apiVersion", "cdi.kubevirt.io/v1beta1")
        .field("kind", "DataVolume")
        .field(
            "metadata",
            Map::new()
                .field("annotations", annotations)
                .field(
                    "labels",
                    Map::new().field("app.kubernetes.io/managed-by", "cozystack"),
                )
                .field("name", g.name())
                .field("namespace", NAMESPACE),
        )
        .field(
            "spec",
            Map::new()
                .field("contentType", "kubevirt")
                .field("source", Map::new().field("http", http))
                .field(
                    "storage",
                    super::storage(&g.storage, g.storage_class.as_deref()),
                ),
        )
        .into()
}

/// A worker disk cloned from the golden `source_namespace/source_name`, as
/// cluster.yaml's `image.builtin` path renders `disk-system`: `source.pvc`
/// (a name that never changes with cluster state), no `usePopulator`
/// annotation, the golden named in an annotation.
pub fn worker_document(
    name: &str,
    namespace: Option<&str>,
    source_namespace: &str,
    source_name: &str,
    size: &str,
    storage_class: Option<&str>,
) -> Node {
    Map::new()
        .field("apiVersion", "cdi.kubevirt.io/v1beta1")
        .field("kind", "DataVolume")
        .field(
            "metadata",
            Map::new()
                .field("name", name)
                .some("namespace", namespace)
                .field("annotations", Map::new().field(ANN_GOLDEN, source_name)),
        )
        .field(
            "spec",
            Map::new()
                .field(
                    "source",
                    Map::new().field(
                        "pvc",
                        Map::new()
                            .field("namespace", source_namespace)
                            .field("name", source_name),
                    ),
                )
                .field("storage", super::storage(size, storage_class)),
        )
        .into()
}

/// The catalog's values for `entries`: `imageFactoryURL` (talos-gen) and
/// `images[]`, each entry only with what differs from the defaults.
pub fn values_document(image_factory_url: &str, entries: &[Entry]) -> Node {
    let images: Vec<Node> = entries
        .iter()
        .map(|e| {
            Map::new()
                .field("schematicID", e.schematic_id.as_str())
                .field("version", e.version.as_str())
                .some("imageFactoryURL", e.image_factory_url.as_deref())
                .some("storage", e.storage.as_deref())
                .some("storageClass", e.storage_class.as_deref())
                .into()
        })
        .collect();
    Map::new()
        .field("imageFactoryURL", image_factory_url)
        .field("images", Node::Seq(images))
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datavolume::{self as dv, Names, Profile, Request};
    use serde_json::Value;

    const S: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    fn at(i: usize, f: &str) -> String {
        format!("images[{i}].{f}")
    }

    fn entry(s: &str, v: &str) -> Entry {
        Entry {
            schematic_id: s.into(),
            version: v.into(),
            ..Default::default()
        }
    }

    fn json(n: &Node) -> Value {
        dv::json_of(n)
    }

    /// helm-unittest's `path`: dots, and `["key"]` for keys with dots.
    fn get<'a>(v: &'a Value, path: &str) -> &'a Value {
        let mut cur = v;
        let mut rest = path;
        while !rest.is_empty() {
            let key;
            if let Some(r) = rest.strip_prefix("[\"") {
                let end = r.find("\"]").unwrap();
                key = &r[..end];
                rest = r[end + 2..].trim_start_matches('.');
            } else {
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                key = &rest[..end];
                rest = rest[end..].trim_start_matches('.');
            }
            cur = &cur[key];
        }
        cur
    }

    /// `kubernetes-worker-image.dv_test.yaml`, "renders the default golden
    /// DataVolume in cozy-public with the contract name": the values.yaml
    /// defaults and its one entry; each `equal` assert transcribed.
    #[test]
    fn the_catalog_template_default_case() {
        let g = render(&Defaults::default(), &[entry(S, "v1.13.6")], &at).unwrap();
        assert_eq!(g.len(), 1);
        let d = json(&golden_document(&g[0], None));
        assert_eq!(d["kind"], "DataVolume");
        for (path, want) in [
            ("metadata.name", format!("talos-worker-{S}-v1.13.6")),
            ("metadata.namespace", "cozy-public".into()),
            (
                "spec.source.http.url",
                format!("https://factory.talos.dev/image/{S}/v1.13.6/openstack-amd64.raw.xz"),
            ),
            ("spec.contentType", "kubevirt".into()),
            ("spec.storage.resources.requests.storage", "6Gi".into()),
            ("spec.storage.storageClassName", "replicated".into()),
            (
                "metadata.annotations[\"cdi.kubevirt.io/storage.usePopulator\"]",
                "true".into(),
            ),
            (
                "metadata.annotations[\"cdi.kubevirt.io/storage.bind.immediate.requested\"]",
                "true".into(),
            ),
            (
                "metadata.annotations[\"helm.sh/resource-policy\"]",
                "keep".into(),
            ),
        ] {
            assert_eq!(get(&d, path), &Value::String(want), "{path}");
        }
    }

    /// "honours per-image overrides and keeps the contract name format".
    #[test]
    fn the_catalog_template_override_case() {
        let e = Entry {
            schematic_id: "abc123".into(),
            version: "v1.14.0".into(),
            image_factory_url: Some("http://mirror.example.com/talos/".into()),
            storage: Some("6Gi".into()),
            storage_class: Some("local".into()),
        };
        let g = render(&Defaults::default(), &[e], &at).unwrap();
        let d = json(&golden_document(&g[0], None));
        for (path, want) in [
            ("metadata.name", "talos-worker-abc123-v1.14.0"),
            (
                "spec.source.http.url",
                "http://mirror.example.com/talos/image/abc123/v1.14.0/openstack-amd64.raw.xz",
            ),
            ("spec.storage.resources.requests.storage", "6Gi"),
            ("spec.storage.storageClassName", "local"),
        ] {
            assert_eq!(get(&d, path), want, "{path}");
        }
    }

    /// "renders one DataVolume per images[] entry".
    #[test]
    fn the_catalog_template_many_case() {
        let g = render(
            &Defaults::default(),
            &[entry("aaa", "v1.13.6"), entry("bbb", "v1.14.0")],
            &at,
        )
        .unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(
            json(&golden_document(&g[0], None))["metadata"]["name"],
            "talos-worker-aaa-v1.13.6"
        );
        assert_eq!(
            json(&golden_document(&g[1], None))["metadata"]["name"],
            "talos-worker-bbb-v1.14.0"
        );
    }

    /// The whole document as dv.yaml renders the default entry (the
    /// annotations' and labels' values, and nothing else), transcribed.
    #[test]
    fn the_golden_is_the_template_whole() {
        let g = render(&Defaults::default(), &[entry(S, "v1.13.6")], &at).unwrap();
        let want = serde_json::json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataVolume",
            "metadata": {
                "annotations": {
                    "helm.sh/resource-policy": "keep",
                    "cdi.kubevirt.io/storage.bind.immediate.requested": "true",
                    "cdi.kubevirt.io/storage.usePopulator": "true",
                    "kubernetes-worker-image.cozystack.io/schematic-id": S,
                    "kubernetes-worker-image.cozystack.io/talos-version": "v1.13.6",
                },
                "labels": {"app.kubernetes.io/managed-by": "cozystack"},
                "name": format!("talos-worker-{S}-v1.13.6"),
                "namespace": "cozy-public",
            },
            "spec": {
                "contentType": "kubevirt",
                "source": {"http": {"url": format!("https://factory.talos.dev/image/{S}/v1.13.6/openstack-amd64.raw.xz")}},
                "storage": {"resources": {"requests": {"storage": "6Gi"}}, "storageClassName": "replicated"},
            },
        });
        assert_eq!(json(&golden_document(&g[0], None)), want);
    }

    fn golden_req() -> Request {
        Request {
            base_url: "https://talos-gen.example:8443/".into(),
            schematic: S.into(),
            talos_version: "1.13.6".into(),
            golden: true,
            profile: Profile::Cozystack,
            ..Default::default()
        }
    }

    /// `datavolume --golden --profile cozystack` is the template's document
    /// for the same entry with talos-gen as imageFactoryURL, field by field;
    /// the checksum only where the CDI named has it.
    #[test]
    fn the_profile_golden_is_the_catalog_document() {
        let hex = "ab".repeat(32);
        let p = dv::plan(&golden_req(), Names::Flags, &|_| None).unwrap();
        let defaults = Defaults {
            image_factory_url: "https://talos-gen.example:8443".into(),
            ..Default::default()
        };
        let g = render(&defaults, &[entry(S, "v1.13.6")], &at).unwrap();
        assert_eq!(p.to_json(&hex), json(&golden_document(&g[0], None)));
        assert!(!p.to_yaml(&hex).contains("---"), "no DataSource");
        let mut r = golden_req();
        r.cdi_version = Some("v1.66.0".into());
        r.size = "10Gi".into();
        r.storage_class = Some("local".into());
        let j = dv::plan(&r, Names::Flags, &|_| None).unwrap().to_json(&hex);
        assert_eq!(
            j["spec"]["source"]["http"]["checksum"],
            format!("sha256:{hex}")
        );
        assert_eq!(
            j["spec"]["storage"]["resources"]["requests"]["storage"],
            "10Gi"
        );
        assert_eq!(j["spec"]["storage"]["storageClassName"], "local");
    }

    /// What the catalog has no place for is refused, naming the flag.
    #[test]
    fn the_profile_golden_refuses_what_the_catalog_cannot_hold() {
        for (f, flag) in [
            (
                (|r: &mut Request| r.name = "mine".into()) as fn(&mut Request),
                "--name",
            ),
            (|r| r.namespace = Some("default".into()), "--namespace"),
            (|r| r.platform = Some("nocloud".into()), "--platform"),
            (|r| r.arch = Some("arm64".into()), "--arch"),
            (|r| r.cert_configmap = Some("ca".into()), "--cert-configmap"),
            (|r| r.golden = false, "--profile"),
            (
                |r| r.talos_version = "1.13.6+dirty".into(),
                "--talos-version",
            ),
            (|r| r.size = "6GB".into(), "--size"),
            (|r| r.cdi_version = Some("2.0".into()), "--cdi-version"),
        ] {
            let mut r = golden_req();
            f(&mut r);
            let e = dv::plan(&r, Names::Flags, &|_| None).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().starts_with(&format!("{flag}: ")), "{e}");
        }
        let mut r = golden_req();
        r.name = format!("talos-worker-{S}-v1.13.6");
        r.namespace = Some("cozy-public".into());
        assert!(dv::plan(&r, Names::Flags, &|_| None).is_ok());
    }

    /// The catalog's refusals, each: a malformed schematicID, version or
    /// imageFactoryURL, and two entries naming one golden.
    #[test]
    fn the_catalog_refuses_as_the_template_does() {
        let d = Defaults::default();
        for (e, field) in [
            (entry("ABC", "v1.13.6"), "images[0].schematicID"),
            (entry("-abc", "v1.13.6"), "images[0].schematicID"),
            (entry("abc-", "v1.13.6"), "images[0].schematicID"),
            (entry("", "v1.13.6"), "images[0].schematicID"),
            (entry("a_b", "v1.13.6"), "images[0].schematicID"),
            (entry("abc", "1.13.6"), "images[0].version"),
            (entry("abc", "v1"), "images[0].version"),
            (entry("abc", "v1.13.6.1"), "images[0].version"),
            (entry("abc", "v1.13.6-RC.1"), "images[0].version"),
            (entry("abc", "v1.13.6+dirty"), "images[0].version"),
            (entry("abc", ""), "images[0].version"),
            (
                Entry {
                    image_factory_url: Some("ftp://x".into()),
                    ..entry("abc", "v1.13.6")
                },
                "images[0].imageFactoryURL",
            ),
            (
                Entry {
                    image_factory_url: Some("https://x/?a=b".into()),
                    ..entry("abc", "v1.13.6")
                },
                "images[0].imageFactoryURL",
            ),
            (
                Entry {
                    image_factory_url: Some("https://user@x".into()),
                    ..entry("abc", "v1.13.6")
                },
                "images[0].imageFactoryURL",
            ),
        ] {
            let err = render(&d, &[e], &at).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(err.to_string().starts_with(&format!("{field}: ")), "{err}");
        }
        for ok in ["v1.13", "v1.13.6", "v1.15.0-alpha.1", "v1.14.0-rc.1"] {
            assert!(render(&d, &[entry("abc", ok)], &at).is_ok(), "{ok}");
        }
        let err = render(
            &d,
            &[
                entry("aaa", "v1.13.6"),
                Entry {
                    storage: Some("8Gi".into()),
                    ..entry("aaa", "v1.13.6")
                },
            ],
            &at,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("images[1].schematicID: talos-worker-aaa-v1.13.6 is also entry 0"),
            "{err}"
        );
    }

    /// cluster.yaml's clone path (`image.builtin`), transcribed: the
    /// worker disk's `source.pvc {namespace: cozy-public, name: <golden>}`,
    /// its storage the diskSize (default 20Gi) and the StorageClass, and no
    /// `usePopulator` annotation (the HTTP path's only); talos-gen adds the
    /// golden's name as an annotation.
    #[test]
    fn the_worker_clone_path_of_cluster_yaml() {
        let golden = golden_name(S, "v1.13.6");
        let c = dv::CloneRequest {
            clone_from: format!("cozy-public/{golden}"),
            name: "md0-disk-system".into(),
            size: String::new(),
            storage_class: Some("replicated".into()),
            namespace: None,
            profile: Profile::Cozystack,
        };
        let p = dv::clone_plan(&c, Names::Flags).unwrap();
        let d = p.to_json();
        let want = serde_json::json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1",
            "kind": "DataVolume",
            "metadata": {
                "name": "md0-disk-system",
                "annotations": {"kubernetes-worker-image.cozystack.io/golden": golden},
            },
            "spec": {
                "source": {"pvc": {"namespace": "cozy-public", "name": golden}},
                "storage": {"resources": {"requests": {"storage": "20Gi"}}, "storageClassName": "replicated"},
            },
        });
        assert_eq!(d, want);
        assert!(d["spec"].get("sourceRef").is_none());
        // Without the profile, the DataSource layout as it was.
        let plain = dv::clone_plan(
            &dv::CloneRequest {
                profile: Profile::Plain,
                size: "20Gi".into(),
                ..c.clone()
            },
            Names::Flags,
        )
        .unwrap()
        .to_json();
        assert_eq!(plain["spec"]["sourceRef"]["kind"], "DataSource");
        let e = dv::clone_plan(
            &dv::CloneRequest {
                profile: Profile::Plain,
                ..c
            },
            Names::Flags,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "--size: missing (required)");
    }

    #[test]
    fn values_are_the_catalog_shape() {
        let y = crate::goyaml::to_string(&values_document(
            "https://talos-gen.example:8443",
            &[
                entry(S, "v1.13.6"),
                Entry {
                    storage: Some("8Gi".into()),
                    ..entry(S, "v1.14.6")
                },
            ],
        ));
        assert_eq!(
            y,
            format!(
                "imageFactoryURL: https://talos-gen.example:8443\nimages:\n    - schematicID: {S}\n      version: v1.13.6\n    - schematicID: {S}\n      version: v1.14.6\n      storage: 8Gi\n"
            )
        );
    }
}
