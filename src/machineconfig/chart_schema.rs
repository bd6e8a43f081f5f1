//! The `kubernetes-nodes` chart's values schema, every key at its own
//! depth (the `@param`, `@typedef` and `@field` lines of the chart's
//! `values.yaml`): a values file is checked against it before anything is
//! read from it, so a nested typo (`kubelet.systemReservedMemroy`), an
//! entry of the wrong shape (`gpus: [{nme: x}]`, `roles: ingress-nginx`)
//! or a bare number where the chart means a quantity of memory
//! (`kubelet.systemReservedMemory: 2048`) is bad input naming the field's
//! path, never a config that silently means something else. A version the
//! YAML reads as a number (`version: 1.30`, read as 1.3) is refused, with
//! the advice to quote it. Chart keys the generator has no use for are
//! checked as well as the ones it reads.

use crate::error::Error;
use crate::yaml::Value;

/// What a value may be. `null` is always the chart's default.
#[derive(Debug, Clone, Copy)]
enum Ty {
    Str,
    /// A string, or a whole number the chart reads as its text.
    StrOrInt,
    Int,
    Bool,
    /// A version string (`v1.35`, `"1.13.6"`): never a YAML number.
    Version,
    /// An http(s) URL with a host.
    Url,
    /// A CPU quantity: a number of cores, or a string (`500m`, `"2"`).
    Cpu,
    /// A memory quantity with its unit (`512Mi`); a bare number is bytes
    /// the user hardly meant: refused, the unit named.
    Memory,
    /// A memory quantity or a percentage (`7%`).
    MemoryOrPercent,
    List(&'static Ty),
    /// A mapping of these keys, the second list required.
    Map(&'static [Field], &'static [&'static str]),
    /// `talos.registryMirrors`: registry host -> `{endpoints, ...}`.
    Mirrors,
}

type Field = (&'static str, Ty);

const GPU: &[Field] = &[("name", Ty::Str)];
const RESOURCES: &[Field] = &[("cpu", Ty::Cpu), ("memory", Ty::Memory)];
const KUBELET: &[Field] = &[
    ("systemReservedMemory", Ty::Memory),
    ("kubeReservedMemory", Ty::Memory),
    ("systemReservedCpu", Ty::Cpu),
    ("kubeReservedCpu", Ty::Cpu),
    ("evictionHardMemory", Ty::MemoryOrPercent),
    ("evictionSoftMemory", Ty::MemoryOrPercent),
];
const TALOS: &[Field] = &[
    ("version", Ty::Version),
    ("schematicID", Ty::Str),
    ("imageFactoryURL", Ty::Url),
    ("installerRepository", Ty::Str),
    ("registryMirrors", Ty::Mirrors),
];
const IMAGES: &[Field] = &[("kubectl", Ty::Str)];
const MIRROR: &[Field] = &[
    ("endpoints", Ty::List(&Ty::Url)),
    ("overridePath", Ty::Bool),
    ("skipFallback", Ty::Bool),
];

/// The top level, in the chart's order (`cozystack::CHART_KEYS` names the
/// same keys; `the_schema_names_every_chart_key` holds them together).
const TOP: &[Field] = &[
    ("cluster", Ty::Str),
    ("storageClass", Ty::Str),
    ("minReplicas", Ty::Int),
    ("maxReplicas", Ty::Int),
    ("instanceType", Ty::Str),
    ("diskSize", Ty::Memory),
    ("roles", Ty::List(&Ty::Str)),
    ("resources", Ty::Map(RESOURCES, &[])),
    ("podCpuLimit", Ty::Cpu),
    ("podCpuRequest", Ty::Cpu),
    ("gpus", Ty::List(&Ty::Map(GPU, &["name"]))),
    ("kubelet", Ty::Map(KUBELET, &[])),
    ("logSerialConsole", Ty::Bool),
    ("maxUnhealthy", Ty::StrOrInt),
    ("nodeStartupTimeout", Ty::Str),
    ("readyUnknownTimeout", Ty::Str),
    ("readyFalseTimeout", Ty::Str),
    ("maxNodeProvisionTime", Ty::Str),
    ("version", Ty::Version),
    ("talos", Ty::Map(TALOS, &[])),
    ("images", Ty::Map(IMAGES, &[])),
];

/// One step of a field's path: a key, or a list's entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A refusal and the path of the field at fault (for its line and column,
/// [`crate::yaml::locate`]).
#[derive(Debug)]
pub struct Refused {
    pub at: Vec<Seg>,
    pub error: Error,
    /// A version the YAML read as a number: the number it read.
    pub read_as: Option<String>,
}

/// `kubelet.systemReservedMemory`, `gpus[0]`, `talos.registryMirrors.ghcr.io`.
pub fn show(at: &[Seg]) -> String {
    let mut out = String::new();
    for s in at {
        match s {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

type Checked = std::result::Result<(), Refused>;

/// Check a values tree (a mapping, or null) against the chart's schema;
/// errors are `{what}: <path>: ...`, with the path's steps.
pub fn check(v: &Value, what: &str) -> Checked {
    check_map(v, TOP, &[], what)
}

/// [`check`], a version the YAML read as a number shown as written in
/// `source` (`1.30`, not the parser's 1.3) when the text is at hand.
pub fn check_in(v: &Value, what: &str, source: Option<&str>) -> Checked {
    check(v, what).map_err(|r| {
        let (Some(text), Some(read_as), Some(Seg::Key(k))) = (source, &r.read_as, r.at.last())
        else {
            return r;
        };
        match crate::yaml::written_value(text, &steps(&r.at)) {
            Some(written) => Refused {
                error: Error::bad_input(format!(
                    "{what}: {}: {written} is the number {read_as} to YAML, not the version {written}; quote it: {k}: \"{written}\"",
                    show(&r.at)
                )),
                ..r
            },
            None => r,
        }
    })
}

/// The path's steps as `yaml::locate` takes them.
pub fn steps(at: &[Seg]) -> Vec<crate::yaml::Step<'_>> {
    at.iter()
        .map(|s| match s {
            Seg::Key(k) => crate::yaml::Step::Key(k.as_str()),
            Seg::Index(i) => crate::yaml::Step::Index(*i),
        })
        .collect()
}

fn bad(what: &str, at: &[Seg], msg: impl std::fmt::Display) -> Refused {
    Refused {
        at: at.to_vec(),
        error: Error::bad_input(format!("{what}: {}: {msg}", show(at))),
        read_as: None,
    }
}

fn with(at: &[Seg], s: Seg) -> Vec<Seg> {
    let mut v = at.to_vec();
    v.push(s);
    v
}

/// A key's text (the chart's keys are strings; another scalar as written).
fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".into(),
        _ => "a collection".into(),
    }
}

fn check_map(v: &Value, fields: &[Field], at: &[Seg], what: &str) -> Checked {
    let m = match v {
        Value::Null => return Ok(()),
        Value::Mapping(m) => m,
        other => {
            let shown = if at.is_empty() {
                "the values".to_string()
            } else {
                show(at)
            };
            return Err(Refused {
                at: at.to_vec(),
                error: Error::bad_input(format!(
                    "{what}: {shown}: expected a mapping of {}, got {}",
                    names(fields),
                    shape(other)
                )),
                read_as: None,
            });
        }
    };
    let known: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    for (k, val) in m {
        let k = key_text(k);
        let Some((_, ty)) = fields.iter().find(|(f, _)| *f == k) else {
            let kind = if at.is_empty() {
                "top-level key".to_string()
            } else {
                format!("key in {}", show(at))
            };
            return Err(Refused {
                at: with(at, Seg::Key(k.clone())),
                error: Error::bad_input(format!(
                    "{what}: {}",
                    crate::text::unknown_word(&kind, &k, &known)
                )),
                read_as: None,
            });
        };
        check_value(val, *ty, &with(at, Seg::Key(k)), what)?;
    }
    Ok(())
}

fn names(fields: &[Field]) -> String {
    let n: Vec<&str> = fields.iter().map(|(k, _)| *k).take(4).collect();
    let more = if fields.len() > 4 { ", ..." } else { "" };
    format!("{}{more}", n.join(", "))
}

/// What a value is, for a message.
fn shape(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => crate::text::clip_quoted(&format!("the string {s:?}")),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

fn check_value(v: &Value, ty: Ty, at: &[Seg], what: &str) -> Checked {
    if v.is_null() {
        return Ok(());
    }
    let want = |w: &str| bad(what, at, format!("expected {w}, got {}", shape(v)));
    match (ty, v) {
        (Ty::Map(fields, required), _) => {
            check_map(v, fields, at, what)?;
            if let Some(req) = required
                .iter()
                .find(|r| v.as_mapping().is_some_and(|m| !m.contains_key(**r)))
            {
                return Err(bad(
                    what,
                    at,
                    format!("{req} is required (e.g. {req}: nvidia.com/AD102GL_L40S)"),
                ));
            }
            Ok(())
        }
        (Ty::List(item), Value::Sequence(items)) => {
            for (i, it) in items.iter().enumerate() {
                let at = with(at, Seg::Index(i));
                if it.is_null() {
                    return Err(bad(what, &at, "an empty entry"));
                }
                check_value(it, *item, &at, what)?;
            }
            Ok(())
        }
        (Ty::List(_), _) => Err(want("a list")),
        (Ty::Mirrors, Value::Mapping(m)) => {
            for (host, entry) in m {
                let host = key_text(host);
                if host.trim().is_empty() || host.contains(['/', ' ']) {
                    return Err(bad(
                        what,
                        at,
                        format!("{host:?} is not a registry host name (e.g. ghcr.io)"),
                    ));
                }
                check_map(entry, MIRROR, &with(at, Seg::Key(host)), what)?;
            }
            Ok(())
        }
        (Ty::Mirrors, _) => Err(want(
            "a mapping of registry host to {endpoints: [URL, ...]} (e.g. ghcr.io: {endpoints: [https://mirror:5000]})",
        )),
        (Ty::Str, Value::String(_)) => Ok(()),
        (Ty::Str, _) => Err(want("a string")),
        (Ty::StrOrInt, Value::String(_)) => Ok(()),
        (Ty::StrOrInt, Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(()),
        (Ty::StrOrInt, _) => Err(want("a string or a whole number")),
        (Ty::Int, Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(()),
        (Ty::Int, _) => Err(want("a whole number")),
        (Ty::Bool, Value::Bool(_)) => Ok(()),
        (Ty::Bool, _) => Err(want("true or false")),
        (Ty::Version, Value::String(_)) => Ok(()),
        (Ty::Version, Value::Number(n)) => Err(Refused {
            read_as: Some(n.to_string()),
            ..bad(
                what,
                at,
                format!(
                    "YAML reads this unquoted version as the number {n} (1.30 reads as 1.3, 1.10 as 1.1); quote it as written, e.g. {}: \"v1.30\"",
                    match at.last() {
                        Some(Seg::Key(k)) => k.as_str(),
                        _ => "version",
                    }
                ),
            )
        }),
        (Ty::Version, _) => Err(want("a version string (e.g. \"v1.35\")")),
        (Ty::Url, Value::String(s)) => super::check_url(s, &format!("{what}: {}", show(at)))
            .map_err(|error| Refused {
                at: at.to_vec(),
                error,
                read_as: None,
            }),
        (Ty::Url, _) => Err(want("an http(s) URL")),
        (Ty::Cpu, Value::Number(n)) if n.as_f64().is_some_and(|f| f >= 0.0) => Ok(()),
        (Ty::Cpu, Value::String(s)) if super::quantity::is_cpu(s) => Ok(()),
        (Ty::Cpu, _) => Err(want("a CPU quantity (e.g. 2, 500m)")),
        (Ty::Memory | Ty::MemoryOrPercent, Value::Number(n)) => Err(bad(
            what,
            at,
            format!("{n} is a bare number (bytes); give the unit, e.g. {n}Mi or {n}Gi"),
        )),
        (Ty::Memory | Ty::MemoryOrPercent, Value::String(s)) if is_bare_number(s) => Err(bad(
            what,
            at,
            format!("{s:?} has no unit (bytes); give the unit, e.g. {s}Mi or {s}Gi"),
        )),
        (Ty::Memory, Value::String(s)) if super::quantity::is_memory(s) => Ok(()),
        (Ty::MemoryOrPercent, Value::String(s))
            if super::quantity::is_memory(s)
                || s.strip_suffix('%').is_some_and(super::quantity::is_decimal) =>
        {
            Ok(())
        }
        (Ty::Memory, _) => Err(want("a memory quantity with its unit (e.g. 512Mi, 2Gi)")),
        (Ty::MemoryOrPercent, _) => Err(want(
            "a memory quantity with its unit or a percentage (e.g. 200Mi, 7%)",
        )),
    }
}

/// `2048`, `1.5`: a quantity without its unit.
fn is_bare_number(s: &str) -> bool {
    super::quantity::is_decimal(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str) -> String {
        let v = crate::yaml::value_from_str(yaml, "values").unwrap();
        check(&v, "--values").unwrap_err().error.to_string()
    }

    #[test]
    fn the_schema_names_every_chart_key() {
        let top: Vec<&str> = TOP.iter().map(|(k, _)| *k).collect();
        assert_eq!(top, super::super::cozystack::CHART_KEYS);
    }

    /// Issue 50 items 1, 3, 4: each hostile case of the issue as typed.
    #[test]
    fn nested_values_that_would_mean_something_else_are_refused() {
        for (yaml, want) in [
            (
                "version: 1.30\n",
                "--values: version: YAML reads this unquoted version as the number 1.3",
            ),
            (
                "talos:\n  version: 1.10\n",
                "--values: talos.version: YAML reads this unquoted version as the number 1.1",
            ),
            (
                "gpus: [{nme: x}]\n",
                "--values: unknown key in gpus[0] \"nme\" (nearest known: \"name\")",
            ),
            ("gpus: [{}]\n", "--values: gpus[0]: name is required"),
            (
                "images: {kubctl: x}\n",
                "--values: unknown key in images \"kubctl\" (nearest known: \"kubectl\")",
            ),
            (
                "roles: ingress-nginx\n",
                "--values: roles: expected a list, got the string \"ingress-nginx\"",
            ),
            (
                "roles: [5, {a: b}]\n",
                "--values: roles[0]: expected a string, got the number 5",
            ),
            (
                "talos:\n  registryMirrors:\n    ghcr.io:\n      endpoints: [\"not a url\"]\n",
                "--values: talos.registryMirrors.ghcr.io.endpoints[0]: \"not a url\" is not an http(s) URL",
            ),
            (
                "talos:\n  registryMirrors:\n    \"\":\n      endpoints: [\"https://m:5000\"]\n",
                "--values: talos.registryMirrors: \"\" is not a registry host name",
            ),
            (
                "talos:\n  registryMirrors: [ghcr.io]\n",
                "--values: talos.registryMirrors: expected a mapping of registry host",
            ),
            (
                "kubelet:\n  systemReservedMemory: 2048\n",
                "--values: kubelet.systemReservedMemory: 2048 is a bare number (bytes); give the unit",
            ),
            (
                "kubelet:\n  systemReservedMemroy: 1Gi\n",
                "--values: unknown key in kubelet \"systemReservedMemroy\" (nearest known: \"systemReservedMemory\")",
            ),
            (
                "resources: {memory: \"4096\"}\n",
                "--values: resources.memory: \"4096\" has no unit",
            ),
            (
                "minReplicas: two\n",
                "--values: minReplicas: expected a whole number",
            ),
            (
                "logSerialConsole: \"yes\"\n",
                "--values: logSerialConsole: expected true or false",
            ),
            (
                "talos:\n  imageFactoryURL: factory.talos.dev\n",
                "--values: talos.imageFactoryURL: \"factory.talos.dev\" is not an http(s) URL",
            ),
        ] {
            let e = err(yaml);
            assert!(e.starts_with(want), "{yaml:?}\n  got:  {e}\n  want: {want}");
        }
    }

    #[test]
    fn the_charts_own_values_pass() {
        let text = include_str!("../../examples/kubernetes-nodes.values.yaml");
        let v = crate::yaml::value_from_str(text, "values").unwrap();
        assert!(check(&v, "values").is_ok());
        let ok = "version: \"v1.35\"\nresources: {cpu: 4, memory: 8Gi}\nkubelet: {evictionHardMemory: 7%, systemReservedCpu: 500m}\ngpus: [{name: nvidia.com/AD102GL_L40S}]\nroles: [ingress-nginx]\nmaxUnhealthy: 1\n";
        check(
            &crate::yaml::value_from_str(ok, "values").unwrap(),
            "values",
        )
        .unwrap();
    }
}
