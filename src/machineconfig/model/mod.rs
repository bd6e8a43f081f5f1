//! The typed model of the documents a worker config is made of: for every
//! Talos struct, its YAML fields in Go struct order with their Go type
//! shape, `omitempty` and `merge:"replace"` tags (read from the public Talos
//! source, `pkg/machinery/config/types`, tag v1.14.0-rc.1; the order is the
//! same in v1.13.9 for every field both have).
//!
//! The working representation of a document is a [`crate::goyaml::Node`] tree in
//! which a key is present when Go would hold a non-nil pointer (or a
//! non-zero value); [`Doc::encode`] turns it into what yaml.v3 writes for the
//! struct: Go field order, `omitempty` applied with yaml.v3's zero rules,
//! Go maps sorted in yaml.v3's key order.
//!
//! Files: `tables` (the Go struct tables, loaded from `structs.txt`, and [`kinds`]), `encode` (the
//! tree as yaml.v3 writes it); this file has the shapes, documents and
//! tree helpers.

mod encode;
mod tables;

use crate::goyaml::Node;
pub use encode::render;
pub use tables::*;

/// The Go shape of one field.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    /// string (and string-like: URL, netip prefix/address, CEL expression);
    /// zero is "".
    Str,
    /// An integer; zero is 0.
    Int,
    /// A non-pointer bool; zero is false.
    Bool,
    /// A `time.Duration`, written as Go's `Duration.String()`.
    Dur,
    /// A scalar kept as given (int or string: file modes, disk sizes).
    Scalar,
    /// A pointer to a scalar (`*bool`, `*int`, `*Endpoint`, ...): written
    /// whenever set, even when the pointee is zero.
    Ptr(&'static Ty),
    /// A struct held by value.
    Struct(&'static StructDef),
    /// A pointer to a struct: `{}` when set and empty.
    PtrStruct(&'static StructDef),
    /// A slice.
    Seq(&'static Ty),
    /// A slice of structs Talos merges item by item on `key`
    /// (`NetworkDeviceList`, `VlanList`, `AdmissionPluginConfigList`).
    Keyed(&'static StructDef, &'static str),
    /// `map[string]T`.
    Map(&'static Ty),
    /// `meta.Args`: map of string or list of strings, merged key by key.
    Args,
    /// `meta.Unstructured`: any mapping, Go-map ordered.
    Free,
}

#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    pub omitempty: bool,
    pub replace: bool,
}

#[derive(Debug)]
pub struct StructDef {
    pub name: &'static str,
    pub fields: &'static [Field],
}

impl StructDef {
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// A document kind other than `v1alpha1`: its kind, whether it carries a
/// `name` (part of its identity when patches are merged), its fields, and
/// its definition name in the JSON schema.
#[derive(Debug)]
pub struct Kind {
    pub kind: &'static str,
    pub named: bool,
    pub def: &'static StructDef,
    pub schema: &'static str,
}

pub fn kind_named(name: &str) -> Option<&'static Kind> {
    kinds().iter().find(|k| k.kind == name)
}

/// One document of a config.
#[derive(Debug, Clone)]
pub enum Doc {
    /// The `v1alpha1` document (`version: v1alpha1`).
    V1Alpha1(Node),
    /// Another kind; the body holds its fields (without apiVersion/kind).
    Other {
        kind: &'static Kind,
        api_version: String,
        body: Node,
    },
}

impl Doc {
    pub fn other(kind: &str, body: Node) -> Doc {
        Doc::Other {
            kind: kind_named(kind).expect("known kind"),
            api_version: "v1alpha1".into(),
            body,
        }
    }

    /// `apiVersion/kind[/name]`, as Talos' strategic merge matches documents.
    pub fn identity(&self) -> String {
        match self {
            Doc::V1Alpha1(_) => "v1alpha1".into(),
            Doc::Other {
                kind,
                api_version,
                body,
            } => {
                let mut id = format!("{api_version}/{}", kind.kind);
                if kind.named {
                    id.push('/');
                    if let Some(Node::Str(n)) = get(body, "name") {
                        id.push_str(n);
                    }
                }
                id
            }
        }
    }
}

// ---- tree helpers -------------------------------------------------------

pub fn get<'a>(node: &'a Node, key: &str) -> Option<&'a Node> {
    match node {
        Node::Map(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
        _ => None,
    }
}

pub fn get_mut<'a>(node: &'a mut Node, key: &str) -> Option<&'a mut Node> {
    match node {
        Node::Map(m) => m.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
        _ => None,
    }
}

/// Set `key` (replacing a present value); `node` must be a mapping.
pub fn set(node: &mut Node, key: &str, value: Node) {
    if let Node::Map(m) = node {
        if let Some(slot) = m.iter_mut().find(|(k, _)| k == key) {
            slot.1 = value;
        } else {
            m.push((key.to_string(), value));
        }
    }
}

pub fn remove(node: &mut Node, key: &str) -> Option<Node> {
    if let Node::Map(m) = node
        && let Some(i) = m.iter().position(|(k, _)| k == key)
    {
        return Some(m.remove(i).1);
    }
    None
}

/// The child mapping at `key`, created empty when absent.
pub fn child<'a>(node: &'a mut Node, key: &str) -> &'a mut Node {
    if get(node, key).is_none() {
        set(node, key, Node::empty_map());
    }
    get_mut(node, key).expect("just set")
}
