//! `--config-patch`: patches applied as talosctl applies them. A patch
//! that is one list (JSON or YAML) is a JSON (RFC 6902) patch, applied to
//! the config as written when it is a single document (the result decoded
//! strictly again); anything else is a strategic-merge patch. A patch is decoded strictly into the typed model (an unknown field
//! or a wrong type is bad input naming the field), then merged with Talos'
//! rules (`pkg/machinery/config/merge`):
//! - scalars are replaced unless the patch value is zero; a bool always;
//! - a set pointer replaces a nil one, else the pointees merge (a pointer
//!   to a scalar is replaced even by a zero value);
//! - slices are appended to, unless tagged `merge:"replace"`;
//! - maps merge key by key; `meta.Args` keys are replaced;
//! - structs merge field by field;
//! - documents other than `v1alpha1` match on apiVersion/kind/name and are
//!   appended when new;
//! - `$patch: delete` (Talos' delete directive, `configloader` decoder):
//!   in a document's top mapping it deletes that document (never
//!   `v1alpha1`); as the only content of a mapping value it zeroes that
//!   field or deletes that map key; in a list element it deletes the first
//!   element whose string field (the element's first other key) has that
//!   value. Deletes of a patch document apply before the rest of it is
//!   merged; a path that does not resolve is an error, a document that is
//!   not there is skipped. Mappings and lists a delete leaves empty drop
//!   out of the patch, and so does a document left with nothing but
//!   `version`/`kind`/`name`.

use crate::error::{Error, Result};
use crate::goyaml::Node;
use crate::yaml::Value;

use super::model::{self, Doc, StructDef, Ty};

/// One document of a patch: merged, or a delete directive; or a whole
/// JSON (RFC 6902) patch.
#[derive(Debug, Clone)]
pub enum PatchDoc {
    Merge(Doc),
    Delete(Delete),
    Json6902(json_patch::Patch),
}

/// A `$patch: delete` directive, resolved to the document it names and a
/// path in it (Talos' delete selector).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    /// The document, as [`Doc::identity`] names it.
    doc: String,
    /// Field and map-key names; a list element is the segment `[i]`.
    path: Vec<String>,
    /// For a list element: the field and value that pick the element.
    key: String,
    value: String,
}

/// Parse one `--config-patch` argument's text into documents.
pub fn parse(text: &str, what: &str) -> Result<Vec<PatchDoc>> {
    parse_values(crate::yaml::documents_from_str(text, what)?, what)
}

/// Decode already-parsed patch documents.
pub fn parse_values(values: Vec<Value>, what: &str) -> Result<Vec<PatchDoc>> {
    if values.is_empty() {
        return Err(Error::bad_input(format!("{what}: the patch is empty")));
    }
    // A list (in YAML or JSON) is a JSON patch, as talosctl detects it.
    if let [Value::Sequence(_)] = values.as_slice() {
        let ops: json_patch::Patch = crate::yaml::from_value(
            values.into_iter().next().unwrap_or_default(),
            &format!("{what}: a JSON (RFC 6902) patch"),
        )?;
        return Ok(vec![PatchDoc::Json6902(ops)]);
    }
    let mut docs = Vec::new();
    for mut v in values {
        if let Value::Sequence(_) = v {
            return Err(Error::bad_input(format!(
                "{what}: a document of a multi-document patch must be a mapping (a JSON patch is one list alone)"
            )));
        }
        if v.is_null() {
            continue;
        }
        let Value::Mapping(_) = v else {
            return Err(Error::bad_input(format!(
                "{what}: a patch document must be a mapping"
            )));
        };
        let (deletes, gone) = take_deletes(&mut v, what)?;
        docs.extend(deletes.into_iter().map(PatchDoc::Delete));
        if gone {
            continue;
        }
        let Value::Mapping(m) = v else {
            unreachable!("still a mapping")
        };
        docs.push(PatchDoc::Merge(decode_doc(m, what)?));
    }
    Ok(docs)
}

// ---- $patch: delete -----------------------------------------------------------

fn is_delete_directive(k: &Value, v: &Value) -> bool {
    matches!(k, Value::String(k) if k == "$patch") && scalar_text(v).as_deref() == Some("delete")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Parent {
    Document,
    Mapping,
    Sequence,
}

/// Take every `$patch: delete` out of one patch document, in document
/// order, as Talos' decoder does: the directive's mapping leaves the patch,
/// and so do mappings and lists left empty. Returns the deletes and whether
/// nothing of the document is left to merge.
fn take_deletes(doc: &mut Value, what: &str) -> Result<(Vec<Delete>, bool)> {
    // The document's own names, which every delete in it is about.
    let top = |key: &str| -> String {
        match &*doc {
            Value::Mapping(m) => m.get(key).and_then(scalar_text).unwrap_or_default(),
            _ => String::new(),
        }
    };
    let root = Root {
        api_version: top("apiVersion"),
        kind: top("kind"),
        name: top("name"),
    };
    let mut found = Vec::new();
    let mut path = Vec::new();
    let gone = walk_deletes(Parent::Document, doc, &mut path, &root, &mut found, what)?;
    let gone = gone || is_empty_doc(doc);
    Ok((found, gone))
}

/// The top-level `apiVersion`, `kind` and `name` of a patch document.
struct Root {
    api_version: String,
    kind: String,
    name: String,
}

/// Returns whether `v` is to be removed from its parent.
fn walk_deletes(
    parent: Parent,
    v: &mut Value,
    path: &mut Vec<String>,
    root: &Root,
    found: &mut Vec<Delete>,
    what: &str,
) -> Result<bool> {
    match v {
        Value::Mapping(m) => {
            let entries: Vec<(Value, Value)> = std::mem::take(m).into_iter().collect();
            let mut kept = crate::yaml::Mapping::new();
            let mut iter = entries.into_iter();
            let mut removed = false;
            while let Some((k, mut val)) = iter.next() {
                if is_delete_directive(&k, &val) {
                    if parent != Parent::Sequence && path.iter().any(|p| p.starts_with('[')) {
                        return Err(Error::bad_input(format!(
                            "{what}: $patch: delete: cannot delete an inner key in '{}'",
                            path.join(".")
                        )));
                    }
                    // The whole mapping, as it was, names the selection.
                    let mut whole = kept;
                    whole.insert(k, val);
                    whole.extend(iter);
                    found.push(selector(parent, path, root, &whole, what)?);
                    return Ok(true);
                }
                path.push(scalar_text(&k).unwrap_or_default());
                let drop = walk_deletes(Parent::Mapping, &mut val, path, root, found, what)?;
                path.pop();
                if drop {
                    removed = true;
                } else {
                    kept.insert(k, val);
                }
            }
            let empty = kept.is_empty();
            *m = kept;
            // Only what a delete emptied goes; a mapping written empty stays.
            Ok(removed && empty)
        }
        Value::Sequence(items) => {
            let mut kept = Vec::with_capacity(items.len());
            let mut removed = false;
            for mut item in std::mem::take(items) {
                path.push(format!("[{}]", kept.len()));
                let drop = walk_deletes(Parent::Sequence, &mut item, path, root, found, what)?;
                path.pop();
                if drop {
                    removed = true;
                } else {
                    kept.push(item);
                }
            }
            let empty = kept.is_empty();
            *items = kept;
            Ok(removed && empty)
        }
        Value::Tagged(t) => walk_deletes(parent, &mut t.value, path, root, found, what),
        _ => Ok(false),
    }
}

/// Talos' `isEmptyDoc`: nothing but scalar `version`, `kind`, `name`.
fn is_empty_doc(v: &Value) -> bool {
    let Value::Mapping(m) = v else { return false };
    m.iter().all(|(k, val)| {
        matches!(k, Value::String(k) if k == "version" || k == "kind" || k == "name")
            && scalar_text(val).is_some()
    })
}

fn selector(
    parent: Parent,
    path: &[String],
    root: &Root,
    node: &crate::yaml::Mapping,
    what: &str,
) -> Result<Delete> {
    let (api_version, kind) = (&root.api_version, &root.kind);
    if path.is_empty() && (api_version.is_empty() || kind.is_empty()) {
        return Err(Error::bad_input(format!(
            "{what}: $patch: delete of a whole document needs its apiVersion and kind \
             (the v1alpha1 document cannot be deleted)"
        )));
    }
    let doc = match (api_version.as_str(), kind.as_str()) {
        ("", "") => "v1alpha1".to_string(),
        (a, k) if !a.is_empty() && !k.is_empty() => match root.name.as_str() {
            "" => format!("{a}/{k}"),
            n => format!("{a}/{k}/{n}"),
        },
        _ => {
            return Err(Error::bad_input(format!(
                "{what}: $patch: delete at '{}': kind and apiVersion must be both set",
                path.join(".")
            )));
        }
    };
    let (key, value) = if parent == Parent::Sequence {
        let Some((k, v)) = node
            .iter()
            .find(|(k, v)| !is_delete_directive(k, v))
            .map(|(k, v)| {
                (
                    scalar_text(k).unwrap_or_default(),
                    scalar_text(v).unwrap_or_default(),
                )
            })
        else {
            return Err(Error::bad_input(format!(
                "{what}: $patch: delete at '{}': a list element to delete needs a key: value to find it by",
                path.join(".")
            )));
        };
        (k, v)
    } else {
        (String::new(), String::new())
    };
    Ok(Delete {
        doc,
        path: path.to_vec(),
        key,
        value,
    })
}

enum DelErr {
    LookupFailed,
    Msg(&'static str),
}

/// Apply a delete to a document's body (Talos' `deleteForPath`): `slot` is
/// the value of type `ty` (absent = Go's zero value).
fn delete_at(
    slot: Option<&mut Node>,
    ty: &Ty,
    path: &[String],
    key: &str,
    value: &str,
) -> std::result::Result<(), DelErr> {
    let Some((seg, rest)) = path.split_first() else {
        return Err(DelErr::Msg("path is empty"));
    };
    let slot = slot.filter(|n| !matches!(n, Node::Null));
    match ty {
        Ty::PtrStruct(_) if slot.is_none() => Err(DelErr::LookupFailed),
        Ty::Struct(def) | Ty::PtrStruct(def) => {
            let field = def.field(seg).ok_or(DelErr::LookupFailed)?;
            let Some(node) = slot else {
                // A zero struct held by value: its fields are zero too.
                return if rest.is_empty() {
                    Ok(())
                } else {
                    delete_at(None, &field.ty, rest, key, value)
                };
            };
            if rest.is_empty() {
                super::model::remove(node, seg);
                Ok(())
            } else {
                delete_at(
                    super::model::get_mut(node, seg),
                    &field.ty,
                    rest,
                    key,
                    value,
                )
            }
        }
        Ty::Map(_) | Ty::Args => {
            let Some(node) = slot else {
                return Err(DelErr::LookupFailed);
            };
            if super::model::get(node, seg).is_none() {
                return Err(DelErr::LookupFailed);
            }
            if rest.is_empty() {
                super::model::remove(node, seg);
                Ok(())
            } else {
                let elem = match ty {
                    Ty::Map(e) => *e,
                    _ => &Ty::Str,
                };
                delete_at(super::model::get_mut(node, seg), elem, rest, key, value)
            }
        }
        Ty::Seq(_) | Ty::Keyed(..) => {
            if !rest.is_empty() {
                return Err(DelErr::Msg(
                    "searching for complex paths in slices is not supported",
                ));
            }
            if !seg.starts_with('[') {
                return Err(DelErr::Msg(
                    "searching for non-integer keys in slices is not supported",
                ));
            }
            let def = match ty {
                Ty::Keyed(def, _) => *def,
                Ty::Seq(Ty::Struct(def) | Ty::PtrStruct(def)) => *def,
                _ => return Err(DelErr::LookupFailed),
            };
            // Only a string field can match (Go compares reflect String()).
            if !def.field(key).is_some_and(|f| matches!(f.ty, Ty::Str)) {
                return Err(DelErr::LookupFailed);
            }
            let Some(Node::Seq(items)) = slot else {
                return Err(DelErr::LookupFailed);
            };
            let pos = items.iter().position(|it| {
                matches!(it, Node::Map(_))
                    && match super::model::get(it, key) {
                        Some(Node::Str(s)) => s == value,
                        None => value.is_empty(),
                        _ => false,
                    }
            });
            match pos {
                Some(i) => {
                    items.remove(i);
                    Ok(())
                }
                None => Err(DelErr::LookupFailed),
            }
        }
        // Scalars, pointers to scalars, free-form values (Talos'
        // `Unstructured` has no field to walk into): nothing to descend.
        _ => Err(DelErr::LookupFailed),
    }
}

/// A JSON patch, as talosctl applies one: to the config as written (zero
/// fields included), only when it is a single document; the result is
/// decoded strictly again, so a field Talos does not have is still an error.
fn apply_json6902(config: &mut [Doc], ops: &json_patch::Patch, what: &str) -> Result<()> {
    let [doc @ Doc::V1Alpha1(_)] = config else {
        return Err(Error::bad_input(format!(
            "{what}: JSON (RFC 6902) patches apply only to a single-document config, as in \
             talosctl, and this one has {} documents (every worker config from Talos 1.12 on \
             has several); write a strategic merge patch",
            config.len()
        )));
    };
    let mut json = node_to_json(&doc.encode());
    json_patch::patch(&mut json, ops).map_err(|e| {
        Error::bad_input(format!("{what}: applying the JSON (RFC 6902) patch: {e}"))
    })?;
    // JSON is YAML: read the result back through the one YAML parser.
    let text = serde_json::to_string(&json)
        .map_err(|e| Error::bad_input(format!("{what}: encoding the patched config: {e}")))?;
    let Value::Mapping(m) = crate::yaml::value_from_str(&text, what)? else {
        return Err(Error::bad_input(format!(
            "{what}: the JSON patch left the config without a top-level mapping"
        )));
    };
    if m.get("kind").is_some() || m.get("apiVersion").is_some() {
        return Err(Error::bad_input(format!(
            "{what}: the JSON patch turned the v1alpha1 document into another kind"
        )));
    }
    let body = decode_struct(&Value::Mapping(m), &model::CONFIG, what, "")?;
    *doc = Doc::V1Alpha1(body);
    Ok(())
}

fn node_to_json(n: &Node) -> serde_json::Value {
    use serde_json::Value as J;
    match n {
        Node::Null => J::Null,
        Node::Bool(b) => J::Bool(*b),
        Node::Int(i) => J::from(*i),
        Node::UInt(u) => J::from(*u),
        Node::Str(s) => J::String(s.clone()),
        Node::Seq(items) => J::Array(items.iter().map(node_to_json).collect()),
        Node::Map(m) => J::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), node_to_json(v)))
                .collect(),
        ),
        Node::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
    }
}

fn apply_delete(config: &mut Vec<Doc>, d: Delete, what: &str) -> Result<()> {
    let Some(i) = config.iter().position(|doc| doc.identity() == d.doc) else {
        // A delete for a document that is not there is skipped, as in Talos.
        return Ok(());
    };
    if d.path.is_empty() {
        if matches!(config[i], Doc::V1Alpha1(_)) {
            return Err(Error::bad_input(format!(
                "{what}: $patch: delete: the v1alpha1 document cannot be deleted"
            )));
        }
        config.remove(i);
        return Ok(());
    }
    let (body, ty) = match &mut config[i] {
        Doc::V1Alpha1(b) => (b, Ty::Struct(&model::CONFIG)),
        Doc::Other { kind, body, .. } => (body, Ty::Struct(kind.def)),
    };
    let shown = d.path.join(".");
    delete_at(Some(body), &ty, &d.path, &d.key, &d.value).map_err(|e| {
        let why = match e {
            DelErr::LookupFailed => "lookup failed (nothing there to delete)",
            DelErr::Msg(m) => m,
        };
        let sel = if d.key.is_empty() {
            String::new()
        } else {
            format!(" (the element with {}: {:?})", d.key, d.value)
        };
        Error::bad_input(format!(
            "{what}: $patch: delete of '{shown}'{sel} in document {}: {why}",
            d.doc
        ))
    })
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
pub fn apply(config: &mut Vec<Doc>, patch: Vec<PatchDoc>, what: &str) -> Result<()> {
    for right in patch {
        let right = match right {
            PatchDoc::Merge(doc) => doc,
            PatchDoc::Delete(d) => {
                apply_delete(config, d, what)?;
                continue;
            }
            PatchDoc::Json6902(ops) => {
                apply_json6902(config, &ops, what)?;
                continue;
            }
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Vec<Doc> {
        let mut docs = Vec::new();
        apply(&mut docs, parse(text, "base").unwrap(), "base").unwrap();
        docs
    }

    fn patched(base: &str, patches: &[&str]) -> Result<String> {
        let mut docs = config(base);
        for (i, p) in patches.iter().enumerate() {
            let what = format!("patch #{}", i + 1);
            apply(&mut docs, parse(p, &what)?, &what)?;
        }
        Ok(model::render(&docs))
    }

    const BASE: &str = "version: v1alpha1
machine:
  network:
    hostname: hostname1
    interfaces:
      - interface: eth0
        dhcp: true
      - interface: eth1
        addresses: [10.3.5.4/32]
---
apiVersion: v1alpha1
kind: StaticHostConfig
name: 10.0.0.1
hostnames: [a]
---
apiVersion: v1alpha1
kind: RegistryMirrorConfig
name: ghcr.io
endpoints:
  - url: https://one
  - url: https://two
";

    /// Talos' own `configpatcher/testdata/patchdelete` case (its v1alpha1
    /// part, with documents of kinds a worker uses): the result is Talos'
    /// expected output byte for byte.
    #[test]
    fn delete_directives_as_talos_applies_them() {
        let patch = "apiVersion: v1alpha1
kind: StaticHostConfig
name: 10.0.0.1
$patch: delete
---
apiVersion: v1alpha1
kind: RegistryMirrorConfig
name: ghcr.io
endpoints:
  - url: https://one
    $patch: delete
  - url: https://three
---
version: v1alpha1
machine:
  network:
    hostname:
      $patch: delete
    interfaces:
      - interface: eth0
        $patch: delete
      - interface: eth1
        addresses: [10.3.5.5/32]
      - interface: eth0
        dummy: true
";
        let got = patched(BASE, &[patch]).unwrap();
        assert_eq!(
            got,
            "version: v1alpha1
machine:
    type: \"\"
    token: \"\"
    certSANs: []
    network:
        interfaces:
            - interface: eth1
              addresses:
                - 10.3.5.4/32
                - 10.3.5.5/32
            - interface: eth0
              dummy: true
cluster: null
---
apiVersion: v1alpha1
kind: RegistryMirrorConfig
name: ghcr.io
endpoints:
    - url: https://two
    - url: https://three
"
        );
    }

    #[test]
    fn delete_map_keys_and_whole_sections() {
        let base = "version: v1alpha1
machine:
  nodeLabels: {a: b, c: d}
  sysctls: {x: y}
";
        let got = patched(
            base,
            &["machine:\n  nodeLabels:\n    a:\n      $patch: delete\n  sysctls:\n    $patch: delete\n"],
        )
        .unwrap();
        assert!(got.contains("nodeLabels:\n        c: d\n"), "{got}");
        assert!(!got.contains("a: b") && !got.contains("sysctls"), "{got}");
    }

    /// A list element written empty stays in the patch, even where an
    /// element before it was a delete (only what a delete empties goes).
    #[test]
    fn only_what_a_delete_empties_leaves_the_patch() {
        let mut v = crate::yaml::value_from_str(
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        $patch: delete\n      - {}\n    kept: {}\n",
            "t",
        )
        .unwrap();
        let (deletes, gone) = take_deletes(&mut v, "t").unwrap();
        assert_eq!(deletes.len(), 1);
        assert_eq!(deletes[0].path, ["machine", "network", "interfaces", "[0]"]);
        assert!(!gone);
        let left = crate::yaml::value_from_str(
            "machine:\n  network:\n    interfaces:\n      - {}\n    kept: {}\n",
            "t",
        )
        .unwrap();
        assert_eq!(v, left);
        // Emptied by deletes all the way up: nothing of the document is left.
        let mut v = crate::yaml::value_from_str(
            "version: v1alpha1\nmachine:\n  network:\n    hostname:\n      $patch: delete\n",
            "t",
        )
        .unwrap();
        assert!(take_deletes(&mut v, "t").unwrap().1);
    }

    #[test]
    fn delete_errors_name_the_path() {
        let err = |p: &str| patched(BASE, &[p]).unwrap_err().to_string();
        // Nothing there (a map key, a list element).
        let e = err("machine:\n  nodeLabels:\n    nope:\n      $patch: delete\n");
        assert!(
            e.contains("'machine.nodeLabels.nope'") && e.contains("lookup failed"),
            "{e}"
        );
        let e = err(
            "machine:\n  network:\n    interfaces:\n      - interface: eth9\n        $patch: delete\n",
        );
        assert!(
            e.contains("interface: \"eth9\"") && e.contains("lookup failed"),
            "{e}"
        );
        // The v1alpha1 document itself.
        let e = err("version: v1alpha1\n$patch: delete\n");
        assert!(
            e.contains("cannot be deleted") || e.contains("apiVersion and kind"),
            "{e}"
        );
        // Inside a list element.
        let e = err(
            "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses:\n          $patch: delete\n",
        );
        assert!(e.contains("cannot delete an inner key"), "{e}");
        // A list element with nothing to find it by.
        let e = err("machine:\n  network:\n    interfaces:\n      - $patch: delete\n");
        assert!(e.contains("needs a key"), "{e}");
        // A field Talos does not have.
        let e = err("machine:\n  bogus:\n    $patch: delete\n");
        assert!(e.contains("lookup failed"), "{e}");
    }

    #[test]
    fn delete_of_a_missing_document_is_skipped_and_zero_fields_are_fine() {
        let base = "version: v1alpha1\nmachine:\n  type: worker\n";
        let before = patched(base, &[]).unwrap();
        let p = "apiVersion: v1alpha1\nkind: KubeSpanConfig\n$patch: delete\n---\nmachine:\n  network:\n    hostname:\n      $patch: delete\n";
        // machine.network is nil in the base: a lookup failure, as in Talos.
        assert!(patched(base, &[p]).is_err());
        let p = "apiVersion: v1alpha1\nkind: KubeSpanConfig\n$patch: delete\n---\nmachine:\n  kubelet:\n    $patch: delete\n";
        assert_eq!(patched(base, &[p]).unwrap(), before);
    }

    /// The shape of Talos' `patchdelete` control-plane case, on content of
    /// our own: the last label deleted (the emptied map is left out), a
    /// list element deleted, a free-form section deleted, a plugin added by
    /// one patch and deleted by the next.
    #[test]
    fn deletes_across_successive_patches() {
        let base = "version: v1alpha1
machine:
  type: worker
  nodeLabels:
    only: \"\"
cluster:
  apiServer:
    image: example/apiserver:v1
    admissionControl:
      - name: PodSecurity
        configuration: {a: 1}
    auditPolicy:
      kind: Policy
      rules: [{level: Metadata}]
";
        let got = patched(
            base,
            &[
                "cluster:\n  apiServer:\n    admissionControl:\n    - name: PodSecurity\n      $patch: delete\nmachine:\n  nodeLabels:\n    only:\n      $patch: delete\n",
                "cluster:\n  apiServer:\n    admissionControl:\n    - name: Other\n      configuration: {b: 2}\n    auditPolicy:\n      $patch: delete\n",
                "cluster:\n  apiServer:\n    admissionControl:\n    - name: Other\n      $patch: delete\n",
            ],
        )
        .unwrap();
        assert_eq!(
            got,
            "version: v1alpha1
machine:
    type: worker
    token: \"\"
    certSANs: []
cluster:
    apiServer:
        image: example/apiserver:v1
"
        );
    }
}
