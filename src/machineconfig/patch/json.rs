//! JSON (RFC 6902) patches, as talosctl applies them.

use crate::error::{Error, Result};
use crate::goyaml::Node;
use crate::yaml::Value;

use super::decode::decode_struct;
use crate::machineconfig::model::{self, Doc};

/// A JSON patch, as talosctl applies one: to the config as written (zero
/// fields included), only when it is a single document; the result is
/// decoded strictly again, so a field Talos does not have is still an error.
pub(super) fn apply_json6902(
    config: &mut [Doc],
    ops: &json_patch::Patch,
    what: &str,
) -> Result<()> {
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
    let body = decode_struct(&Value::Mapping(m), model::config(), what, "")?;
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
