//! `--config-patch`: strategic-merge patches applied as talosctl applies
//! them. A patch is decoded strictly into the typed model (an unknown field
//! or a wrong type is bad input naming the field), then merged with Talos'
//! rules (`pkg/machinery/config/merge`):
//! - scalars are replaced unless the patch value is zero; a bool always;
//! - a set pointer replaces a nil one, else the pointees merge (a pointer
//!   to a scalar is replaced even by a zero value);
//! - slices are appended to, unless tagged `merge:"replace"`;
//! - maps merge key by key; `meta.Args` keys are replaced;
//! - structs merge field by field;
//! - documents other than `v1alpha1` match on apiVersion/kind/name and are
//!   appended when new.

use crate::error::{Error, Result};
use crate::goyaml::Node;
use crate::yaml::Value;

use super::model::{self, Doc, StructDef, Ty};

/// Parse one `--config-patch` argument's text into documents.
pub fn parse(text: &str, what: &str) -> Result<Vec<Doc>> {
    parse_values(crate::yaml::documents_from_str(text, what)?, what)
}

/// Decode already-parsed patch documents.
pub fn parse_values(values: Vec<Value>, what: &str) -> Result<Vec<Doc>> {
    if values.is_empty() {
        return Err(Error::bad_input(format!("{what}: the patch is empty")));
    }
    let mut docs = Vec::new();
    for v in values {
        if let Value::Sequence(_) = v {
            return Err(Error::bad_input(format!(
                "{what}: JSON (RFC 6902) patches are not supported; write a strategic merge patch"
            )));
        }
        let Value::Mapping(m) = v else {
            return Err(Error::bad_input(format!(
                "{what}: a patch document must be a mapping"
            )));
        };
        docs.push(decode_doc(m, what)?);
    }
    Ok(docs)
}

fn decode_doc(mut m: crate::yaml::Mapping, what: &str) -> Result<Doc> {
    let kind = m.remove("kind");
    let api_version = m.remove("apiVersion");
    match kind {
        None => {
            if api_version.is_some() {
                return Err(Error::bad_input(format!("{what}: apiVersion without kind")));
            }
            let body = decode_struct(&Value::Mapping(m), &model::CONFIG, what, "")?;
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
            if m.contains_key("$patch") {
                return Err(Error::bad_input(format!(
                    "{what}: {k}: $patch: delete is not supported"
                )));
            }
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

fn path_join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn type_err(what: &str, path: &str, want: &str) -> Error {
    Error::bad_input(format!("{what}: {path}: expected {want}"))
}

/// Decode a mapping into a struct tree: present keys only, nulls dropped.
fn decode_struct(v: &Value, def: &'static StructDef, what: &str, path: &str) -> Result<Node> {
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
            return Err(Error::bad_input(format!(
                "{what}: unknown field {p:?} (Talos' {} has no field {key:?})",
                def.name
            )));
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
            Value::String(s) => match super::duration::parse(s) {
                Some(ns) => Ok(Node::Str(super::duration::format(ns))),
                None => Err(type_err(what, path, "a duration such as 1m30s")),
            },
            Value::Number(n) => match n.as_i64() {
                Some(ns) => Ok(Node::Str(super::duration::format(ns as i128))),
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
            Value::Mapping(m) => {
                let mut out = Vec::new();
                for (k, val) in m {
                    let Some(key) = scalar_text(k) else {
                        return Err(Error::bad_input(format!(
                            "{what}: {path}: mapping keys must be strings"
                        )));
                    };
                    let p = path_join(path, &key);
                    if val.is_null() {
                        out.push((key, Node::Null));
                        continue;
                    }
                    out.push((key, decode_value(val, elem, what, &p)?));
                }
                Ok(Node::Map(out))
            }
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
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Node::Int(i)
            } else if let Some(u) = n.as_u64() {
                Node::UInt(u)
            } else {
                return Err(Error::bad_input(format!(
                    "{what}: {path}: fractional numbers are not supported here; quote the value"
                )));
            }
        }
        Value::String(s) => Node::Str(s.clone()),
        Value::Sequence(items) => {
            let mut out = Vec::new();
            for (i, it) in items.iter().enumerate() {
                out.push(free_from_value(it, what, &format!("{path}[{i}]"))?);
            }
            Node::Seq(out)
        }
        Value::Mapping(m) => {
            let mut out = Vec::new();
            for (k, val) in m {
                let Some(key) = scalar_text(k) else {
                    return Err(Error::bad_input(format!(
                        "{what}: {path}: mapping keys must be strings"
                    )));
                };
                let p = path_join(path, &key);
                out.push((key, free_from_value(val, what, &p)?));
            }
            Node::Map(out)
        }
        Value::Tagged(t) => free_from_value(&t.value, what, path)?,
    })
}

/// Apply one patch's documents to the config, in order.
pub fn apply(config: &mut Vec<Doc>, patch: Vec<Doc>, what: &str) -> Result<()> {
    for right in patch {
        let id = right.identity();
        if let Some(left) = config.iter_mut().find(|d| d.identity() == id) {
            match (left, right) {
                (Doc::V1Alpha1(l), Doc::V1Alpha1(r)) => {
                    merge_struct(l, r, &model::CONFIG, what, "")?
                }
                (Doc::Other { kind, body: l, .. }, Doc::Other { body: r, .. }) => {
                    let def = kind.def;
                    merge_struct(l, r, def, what, kind.kind)?
                }
                _ => {}
            }
        } else {
            config.push(right);
        }
    }
    Ok(())
}

/// Merge `right` into `left`, both struct trees of `def`.
pub fn merge_struct(
    left: &mut Node,
    right: Node,
    def: &'static StructDef,
    what: &str,
    path: &str,
) -> Result<()> {
    if !matches!(left, Node::Map(_)) {
        *left = Node::empty_map();
    }
    let Node::Map(r) = right else {
        return Ok(());
    };
    // A non-pointer bool the patch leaves out is false in the decoded Go
    // struct, and booleans are always merged.
    for f in def.fields {
        if matches!(f.ty, Ty::Bool) && !r.iter().any(|(k, _)| k == f.name) {
            model::remove(left, f.name);
        }
    }
    for (key, rv) in r {
        let Some(f) = def.field(&key) else { continue };
        let p = path_join(path, &key);
        let lv = model::get_mut(left, &key);
        match (lv, f.ty) {
            (None, _) => {
                if !is_go_zero_for_merge(&rv, &f.ty) {
                    model::set(left, &key, rv);
                }
            }
            (Some(l), ty) => {
                merge_value(l, rv, &ty, f.replace, false, what, &p)?;
            }
        }
    }
    Ok(())
}

/// Whether Talos' merge would skip a right-hand value of this type when
/// the left one is absent (zero scalars, empty slices/maps; bools and set
/// pointers are taken).
fn is_go_zero_for_merge(v: &Node, ty: &Ty) -> bool {
    match ty {
        Ty::Bool | Ty::Ptr(_) | Ty::PtrStruct(_) | Ty::Struct(_) => false,
        _ => v.is_empty(),
    }
}

fn merge_value(
    left: &mut Node,
    right: Node,
    ty: &Ty,
    replace: bool,
    overwrite: bool,
    what: &str,
    path: &str,
) -> Result<()> {
    match ty {
        Ty::Str | Ty::Int | Ty::Dur | Ty::Scalar => {
            if overwrite || !right.is_empty() {
                *left = right;
            }
        }
        Ty::Bool => *left = right,
        Ty::Ptr(inner) => merge_value(left, right, inner, replace, true, what, path)?,
        Ty::PtrStruct(def) | Ty::Struct(def) => {
            if replace {
                if !right.is_empty() {
                    *left = right;
                }
            } else {
                merge_struct(left, right, def, what, path)?
            }
        }
        Ty::Seq(_) => {
            if right.is_empty() {
                return Ok(());
            }
            if replace {
                *left = right;
            } else if let (Node::Seq(l), Node::Seq(r)) = (&mut *left, right) {
                l.extend(r);
            }
        }
        Ty::Keyed(def, key) => {
            let (Node::Seq(l), Node::Seq(r)) = (&mut *left, right) else {
                return Ok(());
            };
            for item in r {
                let k = model::get(&item, key).cloned();
                let pos = k
                    .as_ref()
                    .filter(|k| !k.is_empty())
                    .and_then(|k| l.iter().position(|li| model::get(li, key) == Some(k)));
                match pos {
                    Some(i) => merge_struct(&mut l[i], item, def, what, path)?,
                    None => l.push(item),
                }
            }
        }
        Ty::Map(elem) => {
            if right.is_empty() {
                return Ok(());
            }
            if replace {
                *left = right;
                return Ok(());
            }
            if !matches!(left, Node::Map(_)) {
                *left = Node::empty_map();
            }
            let Node::Map(r) = right else { return Ok(()) };
            for (k, rv) in r {
                let p = path_join(path, &k);
                match model::get_mut(left, &k) {
                    Some(lv) if !matches!(lv, Node::Null) => {
                        merge_value(lv, rv, elem, false, false, what, &p)?
                    }
                    _ => model::set(left, &k, rv),
                }
            }
        }
        Ty::Args => {
            if let Node::Map(r) = right {
                for (k, rv) in r {
                    model::set(left, &k, rv);
                }
            }
        }
        Ty::Free => {
            if right.is_empty() {
                return Ok(());
            }
            if replace {
                *left = right;
                return Ok(());
            }
            merge_free(left, right, what, path)?;
        }
    }
    Ok(())
}

/// Merge of `map[string]any` values: nested mappings merge, lists append,
/// scalars are replaced unless zero; the two sides must agree on type.
fn merge_free(left: &mut Node, right: Node, what: &str, path: &str) -> Result<()> {
    let Node::Map(r) = right else { return Ok(()) };
    if !matches!(left, Node::Map(_)) {
        *left = Node::empty_map();
    }
    for (k, rv) in r {
        let p = path_join(path, &k);
        match model::get_mut(left, &k) {
            Some(lv) if !matches!(lv, Node::Null) => {
                let same = std::mem::discriminant(lv) == std::mem::discriminant(&rv)
                    || matches!(
                        (&*lv, &rv),
                        (Node::Int(_), Node::UInt(_)) | (Node::UInt(_), Node::Int(_))
                    );
                if !same {
                    return Err(Error::bad_input(format!(
                        "{what}: {p}: the patch changes the value's type"
                    )));
                }
                match (lv, rv) {
                    (lv @ Node::Map(_), rv @ Node::Map(_)) => merge_free(lv, rv, what, &p)?,
                    (Node::Seq(l), Node::Seq(r)) => {
                        if !r.is_empty() {
                            l.extend(r)
                        }
                    }
                    (lv, rv @ Node::Bool(_)) => *lv = rv,
                    (lv, rv) => {
                        if !rv.is_empty() {
                            *lv = rv
                        }
                    }
                }
            }
            _ => model::set(left, &k, rv),
        }
    }
    Ok(())
}
