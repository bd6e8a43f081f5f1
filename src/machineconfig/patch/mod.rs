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
//!
//! Files: `decode` (a patch document decoded strictly into the typed
//! [`model`]), `delete` (`$patch: delete`), `merge` (the strategic merge),
//! `json` (RFC 6902 patches); this file is the entry point.

mod decode;
mod delete;
mod json;
mod merge;

use crate::error::{Error, Result};
use crate::yaml::Value;

use super::model::{self, Doc};
use decode::decode_doc;
pub use decode::free_from_value;
pub use delete::Delete;
use delete::{apply_delete, take_deletes};
use json::apply_json6902;
pub use merge::merge_struct;

/// One document of a patch: merged, or a delete directive; or a whole
/// JSON (RFC 6902) patch.
#[derive(Debug, Clone)]
pub enum PatchDoc {
    Merge(Doc),
    Delete(Delete),
    Json6902(json_patch::Patch),
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
                    merge_struct(l, r, model::config(), what, "")?
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

pub(super) fn path_join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}
