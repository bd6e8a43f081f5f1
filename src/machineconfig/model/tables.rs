//! The Go struct tables, loaded once from `structs.txt` (written like the
//! Go declarations it mirrors, so a reader checks it against Talos' source
//! line by line): every struct a worker config uses with its YAML fields
//! in Go struct order, and the multi-document kinds.
//!
//! The text is part of the binary; [`config`] and [`kinds`] parse it on
//! first use. A mistake in it (an unknown type, a struct named twice, one
//! nobody uses) is a bug in this crate, caught by the unit test below and
//! by every golden config test, so it panics with the line it is on.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::{Field, Kind, StructDef, Ty};

const TEXT: &str = include_str!("structs.txt");

struct Tables {
    config: &'static StructDef,
    kinds: &'static [Kind],
}

static TABLES: LazyLock<Tables> = LazyLock::new(|| load(TEXT).unwrap_or_else(|e| panic!("{e}")));

/// The `v1alpha1` document's struct (`v1alpha1.Config`).
pub fn config() -> &'static StructDef {
    TABLES.config
}

/// Every multi-document kind this generator writes or accepts in patches.
pub fn kinds() -> &'static [Kind] {
    TABLES.kinds
}

/// A mistake in `structs.txt`: the line it is on and what is wrong there.
#[derive(Debug, thiserror::Error)]
#[error("structs.txt:{line}: {what}")]
struct TableError {
    line: usize,
    what: String,
}

fn at(line: usize, what: impl Into<String>) -> TableError {
    TableError {
        line,
        what: what.into(),
    }
}

/// One declaration as written: a struct, or a document's body.
struct Decl<'t> {
    line: usize,
    fields: Vec<(usize, Vec<&'t str>)>,
}

fn load(text: &'static str) -> Result<Tables, TableError> {
    let mut structs: HashMap<&str, Decl> = HashMap::new();
    let mut documents: Vec<(&str, bool, &str, Decl)> = Vec::new();
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((n, line)) = lines.next() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |what: &str| at(n, format!("{what}: {line:?}"));
        let (head, open) = line
            .strip_suffix("{}")
            .map(|h| (h, false))
            .or_else(|| line.strip_suffix('{').map(|h| (h, true)))
            .ok_or_else(|| err("expected a struct or document"))?;
        let mut decl = Decl {
            line: n,
            fields: Vec::new(),
        };
        if open {
            loop {
                let (m, l) = lines.next().ok_or_else(|| err("no closing brace"))?;
                let l = l.trim();
                if l == "}" {
                    break;
                }
                if !l.is_empty() && !l.starts_with('#') {
                    decl.fields.push((m, l.split_whitespace().collect()));
                }
            }
        }
        match head.split_whitespace().collect::<Vec<_>>()[..] {
            [name] => {
                if structs.insert(name, decl).is_some() {
                    return Err(err("a struct declared twice"));
                }
            }
            ["document", kind, schema] => documents.push((kind, false, schema, decl)),
            ["document", kind, schema, "named"] => documents.push((kind, true, schema, decl)),
            _ => return Err(err("expected `Name {` or `document Kind schema [named] {`")),
        }
    }

    let mut built = Builder {
        decls: structs,
        done: HashMap::new(),
        building: Vec::new(),
    };
    let config = built.get("v1alpha1.Config", 0)?;
    let mut kinds = Vec::new();
    for (kind, named, schema, decl) in documents {
        let def = built.build(kind, &decl)?;
        kinds.push(Kind {
            kind,
            named,
            def,
            schema,
        });
    }
    if let Some((name, d)) = built
        .decls
        .iter()
        .find(|(n, _)| !built.done.contains_key(*n))
    {
        return Err(at(d.line, format!("{name} is never used")));
    }
    Ok(Tables {
        config,
        kinds: Vec::leak(kinds),
    })
}

/// Builds structs depth first, each once; the tables live for the whole
/// process, so what it builds is leaked into `&'static` on purpose.
struct Builder<'t> {
    decls: HashMap<&'t str, Decl<'t>>,
    done: HashMap<&'t str, &'static StructDef>,
    building: Vec<&'t str>,
}

impl Builder<'static> {
    fn get(&mut self, name: &'static str, line: usize) -> Result<&'static StructDef, TableError> {
        if let Some(def) = self.done.get(name) {
            return Ok(def);
        }
        if self.building.contains(&name) {
            return Err(at(line, format!("{name} holds itself")));
        }
        let decl = self
            .decls
            .remove(name)
            .ok_or_else(|| at(line, format!("no struct {name}")))?;
        self.building.push(name);
        let def = self.build(name, &decl);
        self.building.pop();
        self.decls.insert(name, decl);
        let def = def?;
        self.done.insert(name, def);
        Ok(def)
    }

    fn build(
        &mut self,
        name: &'static str,
        decl: &Decl<'static>,
    ) -> Result<&'static StructDef, TableError> {
        let mut fields = Vec::new();
        for (n, words) in &decl.fields {
            let [field, ty, ref flags @ ..] = words[..] else {
                return Err(at(*n, "expected `yamlName type [flags]`"));
            };
            let mut ty = self.ty(ty, *n)?;
            let (mut omitempty, mut replace) = (false, false);
            for flag in flags {
                match *flag {
                    "omitempty" => omitempty = true,
                    "replace" => replace = true,
                    key if key.starts_with("key=") => {
                        let Ty::Seq(Ty::Struct(def)) = ty else {
                            return Err(at(*n, "key= needs a []Struct"));
                        };
                        ty = Ty::Keyed(def, &key[4..]);
                    }
                    other => return Err(at(*n, format!("unknown flag {other:?}"))),
                }
            }
            fields.push(Field {
                name: field,
                ty,
                omitempty,
                replace,
            });
        }
        Ok(Box::leak(Box::new(StructDef {
            name,
            fields: Vec::leak(fields),
        })))
    }

    fn ty(&mut self, word: &'static str, line: usize) -> Result<Ty, TableError> {
        let leak = |t: Ty| -> &'static Ty { Box::leak(Box::new(t)) };
        Ok(match word {
            "string" => Ty::Str,
            "int" => Ty::Int,
            "bool" => Ty::Bool,
            "duration" => Ty::Dur,
            "scalar" => Ty::Scalar,
            "args" => Ty::Args,
            "free" => Ty::Free,
            _ => {
                if let Some(inner) = word.strip_prefix('*') {
                    match self.ty(inner, line)? {
                        Ty::Struct(def) => Ty::PtrStruct(def),
                        t => Ty::Ptr(leak(t)),
                    }
                } else if let Some(inner) = word.strip_prefix("[]") {
                    Ty::Seq(leak(self.ty(inner, line)?))
                } else if let Some(inner) = word.strip_prefix("map[string]") {
                    Ty::Map(leak(self.ty(inner, line)?))
                } else {
                    Ty::Struct(self.get(word, line)?)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_load() {
        assert_eq!(config().name, "v1alpha1.Config");
        let interfaces = config()
            .field("machine")
            .and_then(|f| match f.ty {
                Ty::PtrStruct(m) => m.field("network"),
                _ => None,
            })
            .and_then(|f| match f.ty {
                Ty::PtrStruct(n) => n.field("interfaces"),
                _ => None,
            })
            .expect("machine.network.interfaces");
        assert!(matches!(interfaces.ty, Ty::Keyed(d, "interface") if d.name == "Device"));
        assert!(interfaces.omitempty);
        assert!(
            kinds()
                .iter()
                .any(|k| k.kind == "RegistryMirrorConfig" && k.named)
        );
    }

    #[test]
    fn mistakes_in_the_text_name_their_line() {
        for (text, want) in [
            (
                "v1alpha1.Config {\n    a  nope\n}\n",
                "structs.txt:2: no struct nope",
            ),
            (
                "v1alpha1.Config {}\nX {}\n",
                "structs.txt:2: X is never used",
            ),
            (
                "v1alpha1.Config {}\nv1alpha1.Config {}\n",
                "structs.txt:2: a struct declared twice",
            ),
            (
                "v1alpha1.Config {\n    a  *v1alpha1.Config\n}\n",
                "structs.txt:2: v1alpha1.Config holds itself",
            ),
            (
                "v1alpha1.Config {\n    a  string  often\n}\n",
                "structs.txt:2: unknown flag",
            ),
            (
                "v1alpha1.Config {\n    a  []string  key=x\n}\n",
                "structs.txt:2: key= needs",
            ),
        ] {
            let err = load(text)
                .err()
                .unwrap_or_else(|| panic!("{text:?} loaded"))
                .to_string();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
    }
}
