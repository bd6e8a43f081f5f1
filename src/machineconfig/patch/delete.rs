//! `$patch: delete`: the directives taken out of a patch document as
//! Talos' decoder does, resolved to a document and a path
//! ([`Delete`]), and applied to the config (Talos' `deleteForPath`).

use crate::error::{Error, Result};
use crate::goyaml::Node;
use crate::yaml::Value;

use super::decode::scalar_text;
use super::model::{self, Doc, Ty};

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
pub(super) fn take_deletes(doc: &mut Value, what: &str) -> Result<(Vec<Delete>, bool)> {
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
                model::remove(node, seg);
                Ok(())
            } else {
                delete_at(model::get_mut(node, seg), &field.ty, rest, key, value)
            }
        }
        Ty::Map(_) | Ty::Args => {
            let Some(node) = slot else {
                return Err(DelErr::LookupFailed);
            };
            if model::get(node, seg).is_none() {
                return Err(DelErr::LookupFailed);
            }
            if rest.is_empty() {
                model::remove(node, seg);
                Ok(())
            } else {
                let elem = match ty {
                    Ty::Map(e) => *e,
                    _ => &Ty::Str,
                };
                delete_at(model::get_mut(node, seg), elem, rest, key, value)
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
                    && match model::get(it, key) {
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

pub(super) fn apply_delete(config: &mut Vec<Doc>, d: Delete, what: &str) -> Result<()> {
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
        Doc::V1Alpha1(b) => (b, Ty::Struct(model::config())),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machineconfig::patch::{apply, parse};

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

    const BASE: &str = include_str!("testdata/patchdelete/base.yaml");

    /// Talos' own `configpatcher/testdata/patchdelete` case (its v1alpha1
    /// part, with documents of kinds a worker uses): the result is Talos'
    /// expected output byte for byte.
    #[test]
    fn delete_directives_as_talos_applies_them() {
        let patch = include_str!("testdata/patchdelete/patch.yaml");
        let got = patched(BASE, &[patch]).unwrap();
        assert_eq!(got, include_str!("testdata/patchdelete/expected.yaml"));
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
