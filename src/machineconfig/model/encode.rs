//! The encoder: a document's tree as yaml.v3 writes its Go struct (Go
//! field order, `omitempty` with yaml.v3's zero rules, Go maps sorted).

use crate::goyaml::{self, Node};

use super::{Doc, StructDef, Ty, config, get};

impl Doc {
    /// The document as yaml.v3 writes it.
    pub fn encode(&self) -> Node {
        match self {
            Doc::V1Alpha1(body) => encode_struct(body, config()),
            Doc::Other {
                kind,
                api_version,
                body,
            } => {
                let mut out = vec![
                    ("apiVersion".to_string(), Node::str(api_version.as_str())),
                    ("kind".to_string(), Node::str(kind.kind)),
                ];
                if let Node::Map(m) = encode_struct(body, kind.def) {
                    out.extend(m);
                }
                Node::Map(out)
            }
        }
    }
}

/// All documents, `---`-separated, as Talos writes a config.
pub fn render(docs: &[Doc]) -> String {
    let nodes: Vec<Node> = docs.iter().map(Doc::encode).collect();
    goyaml::documents(&nodes)
}

/// yaml.v3's `isZero` for a value of type `ty` held as `v` (absent = None).
fn is_zero(v: Option<&Node>, ty: &Ty) -> bool {
    let Some(v) = v else { return true };
    match ty {
        Ty::Ptr(_) | Ty::PtrStruct(_) => false,
        Ty::Struct(def) => def.fields.iter().all(|f| is_zero(get(v, f.name), &f.ty)),
        _ => v.is_empty(),
    }
}

fn encode_struct(v: &Node, def: &StructDef) -> Node {
    let mut out = Vec::new();
    for f in def.fields {
        let val = get(v, f.name);
        if f.omitempty && is_zero(val, &f.ty) {
            continue;
        }
        out.push((f.name.to_string(), encode_value(val, &f.ty)));
    }
    Node::Map(out)
}

fn encode_value(v: Option<&Node>, ty: &Ty) -> Node {
    match ty {
        Ty::Str => v.cloned().unwrap_or_else(|| Node::str("")),
        Ty::Int => v.cloned().unwrap_or(Node::Int(0)),
        Ty::Bool => v.cloned().unwrap_or(Node::Bool(false)),
        Ty::Dur => v.cloned().unwrap_or_else(|| Node::str("0s")),
        Ty::Scalar => v.cloned().unwrap_or(Node::Int(0)),
        Ty::Ptr(inner) => match v {
            None => Node::Null,
            Some(x) => encode_value(Some(x), inner),
        },
        Ty::Struct(def) => encode_struct(v.unwrap_or(&Node::Map(Vec::new())), def),
        Ty::PtrStruct(def) => match v {
            None | Some(Node::Null) => Node::Null,
            Some(x) => encode_struct(x, def),
        },
        Ty::Seq(elem) => match v {
            Some(Node::Seq(items)) => {
                Node::Seq(items.iter().map(|i| encode_value(Some(i), elem)).collect())
            }
            _ => Node::Seq(Vec::new()),
        },
        Ty::Keyed(def, _) => match v {
            Some(Node::Seq(items)) => Node::Seq(
                items
                    .iter()
                    .map(|i| match i {
                        Node::Null => Node::Null,
                        x => encode_struct(x, def),
                    })
                    .collect(),
            ),
            _ => Node::Seq(Vec::new()),
        },
        Ty::Map(elem) => match v {
            Some(Node::Map(m)) => {
                let mut entries: Vec<(String, Node)> = m
                    .iter()
                    .map(|(k, x)| (k.clone(), encode_value(Some(x), elem)))
                    .collect();
                goyaml::sort_go_map(&mut entries);
                Node::Map(entries)
            }
            _ => Node::Map(Vec::new()),
        },
        Ty::Args | Ty::Free => match v {
            Some(x) => sorted_free(x),
            None => Node::Map(Vec::new()),
        },
    }
}

/// A free-form tree with every mapping in Go map order.
fn sorted_free(v: &Node) -> Node {
    match v {
        Node::Map(m) => {
            let mut entries: Vec<(String, Node)> =
                m.iter().map(|(k, x)| (k.clone(), sorted_free(x))).collect();
            goyaml::sort_go_map(&mut entries);
            Node::Map(entries)
        }
        Node::Seq(s) => Node::Seq(s.iter().map(sorted_free).collect()),
        other => other.clone(),
    }
}
