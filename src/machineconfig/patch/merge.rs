//! The strategic merge, with Talos' rules (`pkg/machinery/config/merge`;
//! the rules are listed in [`super`]).

use crate::error::{Error, Result};
use crate::goyaml::Node;

use super::path_join;
use crate::machineconfig::model::{self, StructDef, Ty};

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
