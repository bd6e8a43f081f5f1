//! The one place that parses YAML (serde_yaml). Everything else calls these
//! functions. The generic tree they return ([`Value`], [`Mapping`]) is
//! serde_yaml's own, and callers (patches, schematic options, values files)
//! match on it: swapping the parser means giving them a tree of the same
//! shape, not only new functions here. Writing YAML is `goyaml`'s job,
//! never this module's.

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// A parsed YAML tree (mapping order kept as written).
pub use serde_yaml::{Mapping, Value};

/// Parse one YAML (or JSON) document into `T`; errors name `what` and the
/// position/field serde reports.
pub fn from_str<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    serde_yaml::from_str(text).map_err(|e| Error::bad_input(format!("{what}: {e}")))
}

/// Parse one document into a generic tree.
pub fn value_from_str(text: &str, what: &str) -> Result<Value> {
    from_str(text, what)
}

/// Parse every `---`-separated document.
pub fn documents_from_str(text: &str, what: &str) -> Result<Vec<Value>> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).map_err(|e| Error::bad_input(format!("{what}: {e}")))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Convert a parsed tree into `T`.
pub fn from_value<T: DeserializeOwned>(v: Value, what: &str) -> Result<T> {
    serde_yaml::from_value(v).map_err(|e| Error::bad_input(format!("{what}: {e}")))
}

/// A whole number as the emitter's node (`Int`, or `UInt` above `i64`);
/// `None` for a fraction, which each caller refuses or keeps as it must.
pub fn integer_node(n: &serde_yaml::Number) -> Option<crate::goyaml::Node> {
    use crate::goyaml::Node;
    n.as_i64()
        .map(Node::Int)
        .or_else(|| n.as_u64().map(Node::UInt))
}
