//! The CDI a cluster runs (`--cdi-version`, `cdiVersion=`): which fields of
//! CDI's `cdi.kubevirt.io/v1beta1` types the documents may carry there. A
//! strict `kubectl apply` refuses a field the CRD does not have, so a field
//! is written only from the CDI release that added it.
//!
//! Read in kubevirt/containerized-data-importer,
//! `staging/src/kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1/types.go`:
//! `DataVolumeSourceHTTP.Checksum` (`json:"checksum,omitempty"`) is absent
//! at v1.64.0 and present from v1.65.0 (and at v1.66.0).

use crate::error::{Error, Result};
use crate::version::Version;

/// What Cozystack runs today (the contract's default).
pub const DEFAULT: &str = "v1.64.0";

/// The first CDI whose `DataVolumeSourceHTTP` has `checksum`.
const CHECKSUM_FROM: (u64, u64, u64) = (1, 65, 0);

/// A CDI release, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cdi {
    pub version: Version,
}

impl Cdi {
    /// `text` (`v1.64.0`, `1.66`), named `what` in errors; `None`: [`DEFAULT`].
    pub fn parse(text: Option<&str>, what: &str) -> Result<Cdi> {
        let t = text.unwrap_or(DEFAULT);
        let version = Version::parse_named(t, what)?;
        if version.major != 1 {
            return Err(Error::bad_input(format!(
                "{what}: {t:?} is not a CDI release (v1.x.y, e.g. {DEFAULT})"
            )));
        }
        Ok(Cdi { version })
    }

    /// Does this CDI's `DataVolumeSourceHTTP` have `checksum`?
    pub fn has_http_checksum(&self) -> bool {
        let (a, b, c) = self.version.core();
        (a, b, c) >= CHECKSUM_FROM
    }
}

impl Default for Cdi {
    fn default() -> Cdi {
        Cdi::parse(None, "--cdi-version").expect("the default CDI version parses")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datavolume::{self as dv, Names, Profile, Request};
    use serde_json::Value;

    /// The JSON fields of CDI's v1beta1 types the documents can reach,
    /// transcribed from kubevirt/containerized-data-importer
    /// `staging/src/kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1/types.go`
    /// at the tag (`json:"..."` tags of `DataVolumeSpec`, `DataVolumeSource`,
    /// `DataVolumeSourceHTTP`, `DataVolumeSourcePVC`, `DataVolumeSourceRef`,
    /// `StorageSpec`, `DataSourceSpec`, `DataSourceSource`), with ObjectMeta's
    /// and `VolumeResourceRequirements`' fields the documents use. A path is
    /// `type.field`; the value names the type of the field.
    fn fields(tag: &str) -> Vec<(&'static str, &'static str)> {
        let mut f = vec![
            ("DataVolume.apiVersion", "string"),
            ("DataVolume.kind", "string"),
            ("DataVolume.metadata", "ObjectMeta"),
            ("DataVolume.spec", "DataVolumeSpec"),
            ("DataSource.apiVersion", "string"),
            ("DataSource.kind", "string"),
            ("DataSource.metadata", "ObjectMeta"),
            ("DataSource.spec", "DataSourceSpec"),
            ("ObjectMeta.name", "string"),
            ("ObjectMeta.namespace", "string"),
            ("ObjectMeta.annotations", "map"),
            ("ObjectMeta.labels", "map"),
            ("DataVolumeSpec.source", "DataVolumeSource"),
            ("DataVolumeSpec.sourceRef", "DataVolumeSourceRef"),
            ("DataVolumeSpec.pvc", "object"),
            ("DataVolumeSpec.storage", "StorageSpec"),
            ("DataVolumeSpec.priorityClassName", "string"),
            ("DataVolumeSpec.contentType", "string"),
            ("DataVolumeSpec.checkpoints", "object"),
            ("DataVolumeSpec.finalCheckpoint", "bool"),
            ("DataVolumeSpec.preallocation", "bool"),
            ("DataVolumeSource.http", "DataVolumeSourceHTTP"),
            ("DataVolumeSource.s3", "object"),
            ("DataVolumeSource.gcs", "object"),
            ("DataVolumeSource.registry", "object"),
            ("DataVolumeSource.pvc", "DataVolumeSourcePVC"),
            ("DataVolumeSource.upload", "object"),
            ("DataVolumeSource.blank", "object"),
            ("DataVolumeSource.imageio", "object"),
            ("DataVolumeSource.vddk", "object"),
            ("DataVolumeSource.snapshot", "object"),
            ("DataVolumeSourceHTTP.url", "string"),
            ("DataVolumeSourceHTTP.secretRef", "string"),
            ("DataVolumeSourceHTTP.certConfigMap", "string"),
            ("DataVolumeSourceHTTP.extraHeaders", "object"),
            ("DataVolumeSourceHTTP.secretExtraHeaders", "object"),
            ("DataVolumeSourcePVC.namespace", "string"),
            ("DataVolumeSourcePVC.name", "string"),
            ("DataVolumeSourceRef.kind", "string"),
            ("DataVolumeSourceRef.namespace", "string"),
            ("DataVolumeSourceRef.name", "string"),
            ("StorageSpec.accessModes", "object"),
            ("StorageSpec.selector", "object"),
            ("StorageSpec.resources", "VolumeResourceRequirements"),
            ("StorageSpec.volumeName", "string"),
            ("StorageSpec.storageClassName", "string"),
            ("StorageSpec.volumeMode", "string"),
            ("StorageSpec.dataSource", "object"),
            ("StorageSpec.dataSourceRef", "object"),
            ("VolumeResourceRequirements.requests", "map"),
            ("VolumeResourceRequirements.limits", "map"),
            ("DataSourceSpec.source", "DataSourceSource"),
            ("DataSourceSource.pvc", "DataVolumeSourcePVC"),
            ("DataSourceSource.snapshot", "object"),
            ("DataSourceSource.dataSource", "object"),
        ];
        match tag {
            "v1.64.0" => {}
            "v1.66.0" => f.extend([
                ("DataVolumeSpec.serviceAccountName", "string"),
                ("DataVolumeSourceHTTP.checksum", "string"),
                ("DataVolumeSourceHTTP.insecureSkipVerify", "bool"),
            ]),
            other => panic!("no field list for CDI {other}"),
        }
        f
    }

    /// Every field of `v` (of CDI type `ty`) is one `tag`'s types have.
    fn check(v: &Value, ty: &str, tag: &str, at: &str) {
        let f = fields(tag);
        let Value::Object(m) = v else {
            panic!("{at}: not an object")
        };
        for (k, child) in m {
            let path = format!("{ty}.{k}");
            let Some((_, sub)) = f.iter().find(|(p, _)| *p == path) else {
                panic!("CDI {tag} has no field {at}.{k} ({path})");
            };
            match *sub {
                "string" => assert!(child.is_string(), "{at}.{k}"),
                "bool" => assert!(child.is_boolean(), "{at}.{k}"),
                "map" => assert!(
                    child
                        .as_object()
                        .is_some_and(|o| o.values().all(Value::is_string)),
                    "{at}.{k}"
                ),
                "object" => {}
                t => check(child, t, tag, &format!("{at}.{k}")),
            }
        }
    }

    fn docs(cdi: &str) -> Vec<Value> {
        let hex = "ab".repeat(32);
        let s = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
        let base = Request {
            base_url: "https://talos-gen.example:8443".into(),
            schematic: s.into(),
            talos_version: "v1.13.6".into(),
            cdi_version: Some(cdi.into()),
            ..Default::default()
        };
        let mut out = Vec::new();
        let plain = Request {
            name: "md0".into(),
            size: "20Gi".into(),
            cert_configmap: Some("ca".into()),
            storage_class: Some("replicated".into()),
            ..base.clone()
        };
        out.push(
            dv::plan(&plain, Names::Flags, &|_| None)
                .unwrap()
                .to_json(&hex),
        );
        let golden = Request {
            golden: true,
            namespace: Some("cozy-public".into()),
            ..plain
        };
        let j = dv::plan(&golden, Names::Flags, &|_| None)
            .unwrap()
            .to_json(&hex);
        out.extend(j["items"].as_array().unwrap().iter().cloned());
        let cozy = Request {
            golden: true,
            profile: Profile::Cozystack,
            ..base
        };
        out.push(
            dv::plan(&cozy, Names::Flags, &|_| None)
                .unwrap()
                .to_json(&hex),
        );
        for profile in [Profile::Plain, Profile::Cozystack] {
            let c = dv::CloneRequest {
                clone_from: format!("cozy-public/talos-worker-{s}-v1.13.6"),
                name: "md0-disk".into(),
                size: "20Gi".into(),
                storage_class: Some("replicated".into()),
                namespace: Some("tenant-a".into()),
                profile,
            };
            out.push(dv::clone_plan(&c, Names::Flags).unwrap().to_json());
        }
        out
    }

    /// The v1.64 and v1.66 shapes: every document of every layout written
    /// for the oldest and the newest CDI named has only fields that CDI's
    /// v1beta1 types have; the checksum is there exactly from v1.65.
    #[test]
    fn documents_fit_the_oldest_and_newest_cdi_named() {
        for tag in ["v1.64.0", "v1.66.0"] {
            let all = docs(tag);
            assert_eq!(all.len(), 6);
            for d in &all {
                let kind = d["kind"].as_str().unwrap();
                check(d, kind, tag, kind);
            }
            let with_checksum = all
                .iter()
                .filter(|d| !d["spec"]["source"]["http"]["checksum"].is_null())
                .count();
            assert_eq!(with_checksum, if tag == "v1.64.0" { 0 } else { 3 }, "{tag}");
        }
        assert!(
            !Cdi::parse(Some("v1.64.9"), "x")
                .unwrap()
                .has_http_checksum()
        );
        assert!(Cdi::parse(Some("1.65"), "x").unwrap().has_http_checksum());
        assert!(!Cdi::default().has_http_checksum());
        let e = Cdi::parse(Some("banana"), "--cdi-version").unwrap_err();
        assert!(e.to_string().starts_with("--cdi-version: "), "{e}");
    }
}
