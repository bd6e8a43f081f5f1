//! The typed decoder: a patch document's YAML decoded strictly into the
//! model's tree (an unknown field or a wrong type is bad input naming the
//! field; nulls dropped, as Go leaves them zero).

use crate::error::{Error, Result};
use crate::goyaml::Node;
use crate::yaml::Value;

use super::path_join;
use crate::machineconfig::model::{self, Doc, StructDef, Ty};

pub(super) fn decode_doc(mut m: crate::yaml::Mapping, what: &str) -> Result<Doc> {
    let kind = m.remove("kind");
    let api_version = m.remove("apiVersion");
    match kind {
        None => {
            if api_version.is_some() {
                return Err(Error::bad_input(format!("{what}: apiVersion without kind")));
            }
            let body = decode_struct(&Value::Mapping(m), model::config(), what, "")?;
            Ok(Doc::V1Alpha1(body))
        }
        Some(Value::String(k)) => {
            let Some(kind) = model::kind_named(&k) else {
                return Err(Error::bad_input(format!(
                    "{what}: unknown document kind {k:?}"
                )));
            };
            let api_version = match api_version {
                Some(Value::String(a)) if a == "v1alpha1" => a,
                Some(other) => {
                    return Err(Error::bad_input(format!(
                        "{what}: {k}: unsupported apiVersion {}",
                        scalar_text(&other).unwrap_or_else(|| "(not a string)".into())
                    )));
                }
                None => {
                    return Err(Error::bad_input(format!("{what}: {k}: missing apiVersion")));
                }
            };
            let body = decode_struct(&Value::Mapping(m), kind.def, what, k.as_str())?;
            Ok(Doc::Other {
                kind,
                api_version,
                body,
            })
        }
        Some(_) => Err(Error::bad_input(format!("{what}: kind must be a string"))),
    }
}

pub(super) fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A mapping as a tree: each key a scalar, each value made by `value`
/// (given the value and its path).
fn map_node(
    m: &crate::yaml::Mapping,
    what: &str,
    path: &str,
    mut value: impl FnMut(&Value, &str) -> Result<Node>,
) -> Result<Node> {
    let mut out = Vec::with_capacity(m.len());
    for (k, val) in m {
        let Some(key) = scalar_text(k) else {
            return Err(Error::bad_input(format!(
                "{what}: {path}: mapping keys must be strings"
            )));
        };
        let node = value(val, &path_join(path, &key))?;
        out.push((key, node));
    }
    Ok(Node::Map(out))
}

fn type_err(what: &str, path: &str, want: &str) -> Error {
    Error::bad_input(format!("{what}: {path}: expected {want}"))
}

/// Decode a mapping into a struct tree: present keys only, nulls dropped.
pub(super) fn decode_struct(
    v: &Value,
    def: &'static StructDef,
    what: &str,
    path: &str,
) -> Result<Node> {
    let Value::Mapping(m) = v else {
        return Err(type_err(
            what,
            if path.is_empty() { "document" } else { path },
            "a mapping",
        ));
    };
    let mut out = Vec::new();
    for (k, val) in m {
        let Value::String(key) = k else {
            return Err(Error::bad_input(format!(
                "{what}: {path}: mapping keys must be strings"
            )));
        };
        let p = path_join(path, key);
        let Some(field) = def.field(key) else {
            return Err(Error::bad_input(crate::text::clip_quoted(&format!(
                "{what}: unknown field {p:?} (Talos' {} has no field {key:?})",
                def.name
            ))));
        };
        if val.is_null() {
            continue;
        }
        let node = decode_value(val, &field.ty, what, &p)?;
        out.push((key.clone(), node));
    }
    Ok(Node::Map(out))
}

fn decode_value(v: &Value, ty: &Ty, what: &str, path: &str) -> Result<Node> {
    match ty {
        Ty::Str => match v {
            Value::String(s) => Ok(Node::Str(s.clone())),
            Value::Number(_) | Value::Bool(_) => Ok(Node::Str(scalar_text(v).unwrap_or_default())),
            _ => Err(type_err(what, path, "a string")),
        },
        Ty::Int => match v.as_i64() {
            Some(i) => Ok(Node::Int(i)),
            None => Err(type_err(what, path, "an integer")),
        },
        Ty::Bool => match v {
            Value::Bool(b) => Ok(Node::Bool(*b)),
            _ => Err(type_err(what, path, "true or false")),
        },
        Ty::Dur => match v {
            Value::String(s) => match crate::machineconfig::duration::parse(s) {
                Some(ns) => Ok(Node::Str(crate::machineconfig::duration::format(ns))),
                None => Err(type_err(what, path, "a duration such as 1m30s")),
            },
            Value::Number(n) => match n.as_i64() {
                Some(ns) => Ok(Node::Str(crate::machineconfig::duration::format(
                    ns as i128,
                ))),
                None => Err(type_err(what, path, "a duration")),
            },
            _ => Err(type_err(what, path, "a duration")),
        },
        Ty::Scalar => match v {
            Value::String(s) => Ok(Node::Str(s.clone())),
            Value::Number(n) if n.as_i64().is_some() => Ok(Node::Int(n.as_i64().unwrap_or(0))),
            _ => Err(type_err(what, path, "a string or an integer")),
        },
        Ty::Ptr(inner) => decode_value(v, inner, what, path),
        Ty::Struct(def) | Ty::PtrStruct(def) => decode_struct(v, def, what, path),
        Ty::Seq(elem) => match v {
            Value::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    if item.is_null() {
                        out.push(Node::Null);
                    } else {
                        out.push(decode_value(item, elem, what, &p)?);
                    }
                }
                Ok(Node::Seq(out))
            }
            _ => Err(type_err(what, path, "a list")),
        },
        Ty::Keyed(def, _) => match v {
            Value::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    out.push(decode_struct(item, def, what, &format!("{path}[{i}]"))?);
                }
                Ok(Node::Seq(out))
            }
            _ => Err(type_err(what, path, "a list")),
        },
        Ty::Map(elem) => match v {
            // A null (tagged or not) is kept as a null entry.
            Value::Mapping(m) => map_node(m, what, path, |val, p| match val.is_null() {
                true => Ok(Node::Null),
                false => decode_value(val, elem, what, p),
            }),
            _ => Err(type_err(what, path, "a mapping")),
        },
        Ty::Args => match v {
            Value::Mapping(m) => {
                let mut out = Vec::new();
                for (k, val) in m {
                    let Some(key) = scalar_text(k) else {
                        return Err(type_err(what, path, "string keys"));
                    };
                    let p = path_join(path, &key);
                    let node = match val {
                        Value::Sequence(items) => {
                            let mut l = Vec::new();
                            for it in items {
                                match scalar_text(it) {
                                    Some(s) => l.push(Node::Str(s)),
                                    None => {
                                        return Err(type_err(
                                            what,
                                            &p,
                                            "a string or a list of strings",
                                        ));
                                    }
                                }
                            }
                            Node::Seq(l)
                        }
                        other => match scalar_text(other) {
                            Some(s) => Node::Str(s),
                            None => {
                                return Err(type_err(what, &p, "a string or a list of strings"));
                            }
                        },
                    };
                    out.push((key, node));
                }
                Ok(Node::Map(out))
            }
            _ => Err(type_err(what, path, "a mapping")),
        },
        Ty::Free => match v {
            Value::Mapping(_) => free_from_value(v, what, path),
            _ => Err(type_err(what, path, "a mapping")),
        },
    }
}

/// A free-form YAML value as a tree.
pub fn free_from_value(v: &Value, what: &str, path: &str) -> Result<Node> {
    Ok(match v {
        Value::Null => Node::Null,
        Value::Bool(b) => Node::Bool(*b),
        Value::Number(n) => crate::yaml::integer_node(n).ok_or_else(|| {
            Error::bad_input(format!(
                "{what}: {path}: fractional numbers are not supported here; quote the value"
            ))
        })?,
        Value::String(s) => Node::Str(s.clone()),
        Value::Sequence(items) => {
            let mut out = Vec::new();
            for (i, it) in items.iter().enumerate() {
                out.push(free_from_value(it, what, &format!("{path}[{i}]"))?);
            }
            Node::Seq(out)
        }
        Value::Mapping(m) => map_node(m, what, path, |val, p| free_from_value(val, what, p))?,
        Value::Tagged(t) => free_from_value(&t.value, what, path)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A null in a Go map, tagged or not, is a null entry (as yaml.v3 reads
    /// it), not a value of the map's type.
    #[test]
    fn a_null_map_value_is_kept_as_null() {
        for text in [
            "machine:\n  nodeLabels: {a: null, b: c}\n",
            "machine:\n  nodeLabels: {a: !x null, b: c}\n",
        ] {
            let v = crate::yaml::value_from_str(text, "t").unwrap();
            let node = decode_struct(&v, model::config(), "t", "").unwrap();
            let labels = model::get(model::get(&node, "machine").unwrap(), "nodeLabels").unwrap();
            assert_eq!(model::get(labels, "a"), Some(&Node::Null), "{text}");
            assert_eq!(
                model::get(labels, "b"),
                Some(&Node::Str("c".into())),
                "{text}"
            );
        }
    }
}
