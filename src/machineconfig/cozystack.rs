//! The values of one Cozystack `kubernetes-nodes` worker pool, read as the
//! chart reads them: chart defaults for what the file leaves out, the
//! chart's keys the generator has no use for ignored, every key checked
//! against the chart's schema at its own depth first (`chart_schema`).

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::yaml::{Mapping, Value};

use super::generate::Mirror;
use super::reservations::Sizing;

pub const DEFAULT_TALOS_VERSION: &str = "v1.13.6";
pub const DEFAULT_SCHEMATIC: &str =
    "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
/// The chart's own default `talos.imageFactoryURL` (its values.yaml): a
/// fact of the chart, written here so this pure module imports nothing that
/// does I/O; `tests/cli/house_rules.rs` holds it equal to the service's
/// `upstream::DEFAULT_FACTORY_URL`.
pub const DEFAULT_IMAGE_FACTORY_URL: &str = "https://factory.talos.dev";
pub const DEFAULT_INSTALLER_REPOSITORY: &str = "factory.talos.dev/installer";
pub const DEFAULT_INSTANCE_TYPE: &str = "u1.medium";
pub const DEFAULT_KUBERNETES: &str = "v1.35";
pub const POD_SUBNET: &str = "10.243.0.0/16";
pub const SERVICE_SUBNET: &str = "10.95.0.0/16";
pub const INSTALL_DISK: &str = "/dev/vda";

#[derive(Debug, Default, Deserialize)]
struct RawValues {
    version: Option<Value>,
    talos: Option<RawTalos>,
    #[serde(rename = "instanceType")]
    instance_type: Option<Value>,
    resources: Option<RawResources>,
    kubelet: Option<RawKubelet>,
    gpus: Option<Vec<Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTalos {
    version: Option<Value>,
    #[serde(rename = "schematicID")]
    schematic_id: Option<Value>,
    #[serde(rename = "imageFactoryURL")]
    image_factory_url: Option<Value>,
    #[serde(rename = "installerRepository")]
    installer_repository: Option<Value>,
    #[serde(rename = "registryMirrors")]
    registry_mirrors: Option<Mapping>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    cpu: Option<Value>,
    memory: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawKubelet {
    system_reserved_memory: Option<Value>,
    kube_reserved_memory: Option<Value>,
    system_reserved_cpu: Option<Value>,
    kube_reserved_cpu: Option<Value>,
    eviction_hard_memory: Option<Value>,
    eviction_soft_memory: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawMirror {
    endpoints: Option<Vec<Value>>,
    override_path: Option<bool>,
    skip_fallback: Option<bool>,
}

/// One pool's values, with the chart's defaults applied.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Values {
    /// Kubernetes minor, e.g. `v1.35`.
    pub version: String,
    pub talos_version: String,
    pub schematic_id: String,
    pub image_factory_url: String,
    pub installer_repository: String,
    pub registry_mirrors: Vec<Mirror>,
    /// `instanceType`, `resources` and the `kubelet` overrides.
    pub sizing: Sizing,
    pub gpu: bool,
}

/// The top-level keys of the chart's `values.yaml` and its schema (every
/// `@param` of packages/apps/kubernetes-nodes/values.yaml, 2026, the two
/// optional `podCpu*` ones included): anything else is a typo, refused.
pub const CHART_KEYS: &[&str] = &[
    "cluster",
    "storageClass",
    "minReplicas",
    "maxReplicas",
    "instanceType",
    "diskSize",
    "roles",
    "resources",
    "podCpuLimit",
    "podCpuRequest",
    "gpus",
    "kubelet",
    "logSerialConsole",
    "maxUnhealthy",
    "nodeStartupTimeout",
    "readyUnknownTimeout",
    "readyFalseTimeout",
    "maxNodeProvisionTime",
    "version",
    "talos",
    "images",
];

/// Helm's `toString` of a scalar value.
fn text(v: &Option<Value>, field: &str, what: &str) -> Result<Option<String>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(Value::Bool(b)) => Ok(Some(b.to_string())),
        Some(_) => Err(Error::bad_input(format!(
            "{what}: {field} must be a string"
        ))),
    }
}

/// A schema refusal, with the line and column of its field in `source`
/// when the text is at hand and the field is found in it.
fn placed(r: super::chart_schema::Refused, source: Option<&str>) -> Error {
    let steps = super::chart_schema::steps(&r.at);
    match source.and_then(|t| crate::yaml::locate(t, &steps)) {
        Some((line, col)) => Error::bad_input(format!("{} (line {line}, column {col})", r.error)),
        None => r.error,
    }
}

/// `talos.registryMirrors`: host -> endpoints (at least one) and options.
fn registry_mirrors(m: Option<Mapping>, what: &str) -> Result<Vec<Mirror>> {
    let mut mirrors = Vec::new();
    let Some(m) = m else {
        return Ok(mirrors);
    };
    for (host, entry) in m {
        let Value::String(host) = host else {
            return Err(Error::bad_input(format!(
                "{what}: talos.registryMirrors keys must be registry host names"
            )));
        };
        let field = format!("talos.registryMirrors.{host}");
        let raw: RawMirror = crate::yaml::from_value(entry, &format!("{what}: {field}"))?;
        let mut endpoints = Vec::new();
        for e in raw.endpoints.unwrap_or_default() {
            match e {
                Value::String(s) => endpoints.push(s),
                _ => {
                    return Err(Error::bad_input(format!(
                        "{what}: {field}.endpoints must be a list of URLs"
                    )));
                }
            }
        }
        if endpoints.is_empty() {
            return Err(Error::bad_input(format!(
                "{what}: {field}.endpoints must name at least one endpoint"
            )));
        }
        mirrors.push(Mirror {
            host,
            endpoints,
            override_path: raw.override_path,
            skip_fallback: raw.skip_fallback,
        });
    }
    Ok(mirrors)
}

/// The worker's size: instance type or resources, and the kubelet's reservations.
fn sizing(
    instance_type: &Option<Value>,
    resources: RawResources,
    kubelet: RawKubelet,
    what: &str,
) -> Result<Sizing> {
    Ok(Sizing {
        instance_type: match instance_type {
            None => Some(DEFAULT_INSTANCE_TYPE.to_string()),
            other => text(other, "instanceType", what)?,
        },
        cpu: text(&resources.cpu, "resources.cpu", what)?,
        memory: text(&resources.memory, "resources.memory", what)?,
        system_reserved_memory: text(
            &kubelet.system_reserved_memory,
            "kubelet.systemReservedMemory",
            what,
        )?,
        kube_reserved_memory: text(
            &kubelet.kube_reserved_memory,
            "kubelet.kubeReservedMemory",
            what,
        )?,
        system_reserved_cpu: text(
            &kubelet.system_reserved_cpu,
            "kubelet.systemReservedCpu",
            what,
        )?,
        kube_reserved_cpu: text(&kubelet.kube_reserved_cpu, "kubelet.kubeReservedCpu", what)?,
        eviction_hard_memory: text(
            &kubelet.eviction_hard_memory,
            "kubelet.evictionHardMemory",
            what,
        )?,
        eviction_soft_memory: text(
            &kubelet.eviction_soft_memory,
            "kubelet.evictionSoftMemory",
            what,
        )?,
    })
}

impl Values {
    /// Parse a values tree (`what` names the source in errors).
    pub fn from_value(v: Value, what: &str) -> Result<Values> {
        Values::from_value_in(v, what, None)
    }

    /// [`Values::from_value`] of a tree parsed from `source`: a field the
    /// schema refuses is placed at its line and column there.
    pub fn from_value_in(v: Value, what: &str, source: Option<&str>) -> Result<Values> {
        let v = match v {
            Value::Null => Value::Mapping(Mapping::new()),
            Value::Mapping(m) => Value::Mapping(m),
            _ => {
                return Err(Error::bad_input(format!(
                    "{what}: the values must be a mapping"
                )));
            }
        };
        // Every key at its own depth, its type (a version never a YAML
        // number, a memory quantity with its unit, every URL a URL).
        super::chart_schema::check_in(&v, what, source).map_err(|r| placed(r, source))?;
        let raw: RawValues = crate::yaml::from_value(v, what)?;
        let talos = raw.talos.unwrap_or_default();
        let or = |v: Option<String>, d: &str| v.unwrap_or_else(|| d.to_string());
        let mirrors = registry_mirrors(talos.registry_mirrors, what)?;
        let resources = raw.resources.unwrap_or_default();
        let kubelet = raw.kubelet.unwrap_or_default();
        Ok(Values {
            version: or(text(&raw.version, "version", what)?, DEFAULT_KUBERNETES),
            talos_version: or(
                text(&talos.version, "talos.version", what)?,
                DEFAULT_TALOS_VERSION,
            ),
            schematic_id: or(
                text(&talos.schematic_id, "talos.schematicID", what)?,
                DEFAULT_SCHEMATIC,
            ),
            image_factory_url: or(
                text(&talos.image_factory_url, "talos.imageFactoryURL", what)?,
                DEFAULT_IMAGE_FACTORY_URL,
            ),
            installer_repository: or(
                text(
                    &talos.installer_repository,
                    "talos.installerRepository",
                    what,
                )?,
                DEFAULT_INSTALLER_REPOSITORY,
            ),
            registry_mirrors: mirrors,
            sizing: sizing(&raw.instance_type, resources, kubelet, what)?,
            gpu: raw.gpus.is_some_and(|g| !g.is_empty()),
        })
    }

    /// The chart's values with nothing set (all defaults).
    pub fn defaults() -> Values {
        Values::from_value(Value::Null, "values").expect("defaults parse")
    }

    /// `<installerRepository>/<schematicID>:<talos.version>`
    pub fn install_image(&self) -> String {
        format!(
            "{}/{}:{}",
            self.installer_repository.trim_end_matches('/'),
            self.schematic_id,
            self.talos_version
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chart's values file (the repository's copy) is taken as it is,
    /// and its keys are the known ones: every key it sets, and the two
    /// optional ones its schema has (`podCpuLimit`, `podCpuRequest`).
    #[test]
    fn the_charts_keys_are_known() {
        let text = include_str!("../../examples/kubernetes-nodes.values.yaml");
        let v = crate::yaml::value_from_str(text, "values").unwrap();
        let Value::Mapping(m) = &v else {
            panic!("not a mapping")
        };
        let mut set: Vec<&str> = m.keys().filter_map(|k| k.as_str()).collect();
        set.extend(["podCpuLimit", "podCpuRequest"]);
        set.sort();
        let mut known = CHART_KEYS.to_vec();
        known.sort();
        assert_eq!(set, known);
        let values = Values::from_value(v, "values").unwrap();
        assert_eq!(values, Values::defaults());
        let e = Values::from_value(
            crate::yaml::value_from_str("talso:\n  version: v1.12.3\n", "v").unwrap(),
            "values",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "values: unknown top-level key \"talso\" (nearest known: \"talos\")"
        );
    }
}
