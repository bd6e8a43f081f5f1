//! The project's one YAML emitter: writes ordered trees exactly as Go's
//! `gopkg.in/yaml.v3` encoder does with `SetIndent(4)` (what Talos uses), or,
//! with [`Flavor::V4`], as `go.yaml.in/yaml/v4`'s `Marshal` does (what the
//! Image Factory uses since late 2025; same layout, a few strings quoted
//! differently), so that schematic IDs and machine configs match them byte
//! for byte.
//!
//! It knows nothing of Talos: callers build a [`Node`] with fields in the
//! order they want them (Go struct order), leaving out what `omitempty`
//! would leave out, and this module decides indentation and quoting.
//!
//! Rules reproduced (from yaml.v3's emitter and encoder):
//! - indentation 4; a block sequence under a mapping key is indented to the
//!   next multiple of 4; the first level inside a sequence item skips the
//!   `- ` indicator (+2), everything else rounds up to the next multiple of 4;
//! - empty mappings and sequences print in flow style: `{}` and `[]`;
//! - a string is plain unless it would read back as something else (null,
//!   bool, int, float, timestamp, YAML 1.1 bools such as `yes`, base-60
//!   floats, `<<`) — then double-quoted — or the emitter's scalar analysis
//!   forbids plain style (indicators, leading/trailing space) — then
//!   single-quoted, or double-quoted when single quotes cannot hold it;
//! - multi-line strings are literal blocks (`|`, `|-`, `|+`, with an
//!   indentation hint when they start with a space or newline);
//! - no line folding (yaml.v3 sets an unlimited width).

use std::fmt::Write as _;

mod scalar;

pub use scalar::go_float;
use scalar::{ScalarCtx, scalar_text};

/// A YAML tree in emission order.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    /// Written as Go's `strconv.FormatFloat(f, 'g', -1, 64)` (`.inf`, `.nan`).
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Ordered mapping with string keys.
    Map(Vec<(String, Node)>),
}

impl Node {
    pub fn str(s: impl Into<String>) -> Node {
        Node::Str(s.into())
    }

    /// An empty mapping (`{}`).
    pub fn empty_map() -> Node {
        Node::Map(Vec::new())
    }

    /// A sequence of strings.
    pub fn strs<I, S>(items: I) -> Node
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Node::Seq(items.into_iter().map(|s| Node::Str(s.into())).collect())
    }

    /// True for what Go's `omitempty` leaves out of a generic value:
    /// null, false, 0, "", and empty sequences and mappings.
    pub fn is_empty(&self) -> bool {
        match self {
            Node::Null => true,
            Node::Bool(b) => !b,
            Node::Int(i) => *i == 0,
            Node::UInt(u) => *u == 0,
            Node::Float(f) => *f == 0.0,
            Node::Str(s) => s.is_empty(),
            Node::Seq(v) => v.is_empty(),
            Node::Map(v) => v.is_empty(),
        }
    }
}

/// Builder for ordered mappings: `Map::new().field("a", x).opt("b", y)`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Map(pub Vec<(String, Node)>);

impl Map {
    pub fn new() -> Map {
        Map(Vec::new())
    }
    /// Always written.
    pub fn field(mut self, key: &str, value: impl Into<Node>) -> Map {
        self.0.push((key.to_string(), value.into()));
        self
    }
    /// Written unless empty (Go's `omitempty`).
    pub fn opt(mut self, key: &str, value: impl Into<Node>) -> Map {
        let v = value.into();
        if !v.is_empty() {
            self.0.push((key.to_string(), v));
        }
        self
    }
    /// Written when `Some`.
    pub fn some(mut self, key: &str, value: Option<impl Into<Node>>) -> Map {
        if let Some(v) = value {
            self.0.push((key.to_string(), v.into()));
        }
        self
    }
    pub fn push(&mut self, key: &str, value: impl Into<Node>) {
        self.0.push((key.to_string(), value.into()));
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<Map> for Node {
    fn from(m: Map) -> Node {
        Node::Map(m.0)
    }
}
impl From<&str> for Node {
    fn from(s: &str) -> Node {
        Node::Str(s.to_string())
    }
}
impl From<String> for Node {
    fn from(s: String) -> Node {
        Node::Str(s)
    }
}
impl From<&String> for Node {
    fn from(s: &String) -> Node {
        Node::Str(s.clone())
    }
}
impl From<bool> for Node {
    fn from(b: bool) -> Node {
        Node::Bool(b)
    }
}
impl From<i64> for Node {
    fn from(i: i64) -> Node {
        Node::Int(i)
    }
}
impl From<u64> for Node {
    fn from(i: u64) -> Node {
        Node::UInt(i)
    }
}
impl From<u32> for Node {
    fn from(i: u32) -> Node {
        Node::UInt(i as u64)
    }
}
impl From<u8> for Node {
    fn from(i: u8) -> Node {
        Node::UInt(i as u64)
    }
}
impl From<Vec<Node>> for Node {
    fn from(v: Vec<Node>) -> Node {
        Node::Seq(v)
    }
}

/// Sort mapping entries the way yaml.v3 orders the keys of a Go map with
/// string keys (`keyList.Less`): at the first differing rune two letters
/// compare by code point; a letter and a non-letter put the non-letter
/// first (the letter first when the runes before were digits); digit runs
/// compare by numeric value, then by length.
pub fn sort_go_map(entries: &mut [(String, Node)]) {
    entries.sort_by(|a, b| go_key_cmp(&a.0, &b.0));
}

/// [`go_key_less`] as an ordering, for `sort_by`.
pub fn go_key_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    if go_key_less(a, b) {
        std::cmp::Ordering::Less
    } else if go_key_less(b, a) {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Equal
    }
}

/// yaml.v3's `keyList.Less` for two string keys.
pub fn go_key_less(a: &str, b: &str) -> bool {
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let mut digits = false;
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            digits = ar[i].is_ascii_digit();
            i += 1;
            continue;
        }
        let al = ar[i].is_alphabetic();
        let bl = br[i].is_alphabetic();
        if al && bl {
            return ar[i] < br[i];
        }
        if al || bl {
            return if digits { al } else { bl };
        }
        let (mut an, mut bn): (i64, i64) = (0, 0);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an.wrapping_mul(10).wrapping_add(ar[ai] as i64 - '0' as i64);
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn.wrapping_mul(10).wrapping_add(br[bi] as i64 - '0' as i64);
            bi += 1;
        }
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return ar[i] < br[i];
    }
    ar.len() < br.len()
}

const BEST_INDENT: usize = 4;

/// Which Go YAML library's string styling to reproduce. Layout is the same
/// for both; they differ only in how a few strings are quoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flavor {
    /// `gopkg.in/yaml.v3` (Talos machine configs). The default.
    #[default]
    V3,
    /// `go.yaml.in/yaml/v4` `Marshal` (the Image Factory since late 2025):
    /// YAML 1.1 booleans (`yes`, `off`, ...), base-60 numbers (`12:30`) and
    /// `<<` are single-quoted instead of double-quoted, and a multi-line
    /// string is a literal block only when it is at least two bytes long and
    /// not all whitespace (otherwise double-quoted).
    V4,
}

/// One document, ending with a newline.
pub fn to_string(node: &Node) -> String {
    to_string_flavor(node, Flavor::V3)
}

/// One document in the given flavor.
pub fn to_string_flavor(node: &Node, flavor: Flavor) -> String {
    let mut out = String::new();
    emit_document(&mut out, node, flavor);
    out
}

/// Several documents joined by `---` lines, as Talos writes a multi-document config.
pub fn documents(nodes: &[Node]) -> String {
    let mut out = String::new();
    for (i, n) in nodes.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        emit_document(&mut out, n, Flavor::V3);
    }
    out
}

fn emit_document(out: &mut String, node: &Node, f: Flavor) {
    match node {
        Node::Map(m) if !m.is_empty() => emit_map(out, m, 0, false, f),
        Node::Seq(s) if !s.is_empty() => emit_seq(out, s, 0, false, f),
        other => {
            // A bare scalar document: yaml.v3 indents block scalars by the
            // best indent here.
            emit_scalar_value(out, other, BEST_INDENT, f);
            out.push('\n');
        }
    }
}

/// Where a block collection opened below `parent` starts, yaml.v3 style.
fn child_indent(parent: usize, in_seq_item: bool) -> usize {
    if in_seq_item {
        parent + 2
    } else {
        BEST_INDENT * ((parent + BEST_INDENT) / BEST_INDENT)
    }
}

fn pad(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// Mapping entries at column `indent`; when `inline`, the first key follows
/// a `- ` already written on the current line.
fn emit_map(out: &mut String, entries: &[(String, Node)], indent: usize, inline: bool, f: Flavor) {
    for (i, (k, v)) in entries.iter().enumerate() {
        if !(inline && i == 0) {
            pad(out, indent);
        }
        out.push_str(&scalar_text(k, ScalarCtx::Key, indent, f));
        out.push(':');
        emit_value_after_indicator(out, v, indent, false, f);
    }
}

/// Sequence items at column `indent`.
fn emit_seq(out: &mut String, items: &[Node], indent: usize, inline: bool, f: Flavor) {
    for (i, item) in items.iter().enumerate() {
        if !(inline && i == 0) {
            pad(out, indent);
        }
        out.push('-');
        emit_value_after_indicator(out, item, indent, true, f);
    }
}

/// Writes what follows `key:` or `-`, including the line break(s).
fn emit_value_after_indicator(
    out: &mut String,
    v: &Node,
    indent: usize,
    in_seq_item: bool,
    f: Flavor,
) {
    let child = child_indent(indent, in_seq_item);
    match v {
        Node::Map(m) if !m.is_empty() => {
            if in_seq_item {
                out.push(' ');
                emit_map(out, m, child, true, f);
            } else {
                out.push('\n');
                emit_map(out, m, child, false, f);
            }
        }
        Node::Seq(s) if !s.is_empty() => {
            if in_seq_item {
                out.push(' ');
                emit_seq(out, s, child, true, f);
            } else {
                out.push('\n');
                emit_seq(out, s, child, false, f);
            }
        }
        other => {
            out.push(' ');
            emit_scalar_value(out, other, child, f);
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
    }
}

fn emit_scalar_value(out: &mut String, v: &Node, indent: usize, f: Flavor) {
    match v {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Node::UInt(u) => {
            let _ = write!(out, "{u}");
        }
        Node::Float(f) => out.push_str(&go_float(*f)),
        Node::Str(s) => out.push_str(&scalar_text(s, ScalarCtx::Value, indent, f)),
        Node::Map(_) => out.push_str("{}"),
        Node::Seq(_) => out.push_str("[]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(s: &str) -> String {
        to_string(&Map::new().field("k", s).into())
    }

    #[test]
    fn quoting_follows_go() {
        let cases = [
            ("plain", "k: plain\n"),
            ("", "k: \"\"\n"),
            ("true", "k: \"true\"\n"),
            ("True", "k: \"True\"\n"),
            ("yes", "k: \"yes\"\n"),
            ("off", "k: \"off\"\n"),
            ("null", "k: \"null\"\n"),
            ("~", "k: \"~\"\n"),
            ("0123", "k: \"0123\"\n"),
            ("089", "k: \"089\"\n"),
            ("123", "k: \"123\"\n"),
            ("1_000", "k: \"1_000\"\n"),
            ("0x1F", "k: \"0x1F\"\n"),
            ("0xZZ", "k: 0xZZ\n"),
            ("1.5", "k: \"1.5\"\n"),
            ("1e3", "k: \"1e3\"\n"),
            (".5", "k: \".5\"\n"),
            (".inf", "k: \".inf\"\n"),
            ("1e999", "k: 1e999\n"),
            ("12:30", "k: \"12:30\"\n"),
            ("2023-10-12", "k: \"2023-10-12\"\n"),
            ("2023-10-12T10:46:09Z", "k: \"2023-10-12T10:46:09Z\"\n"),
            ("v1.28.0", "k: v1.28.0\n"),
            ("1.28.0", "k: 1.28.0\n"),
            ("{\"a\":1}", "k: '{\"a\":1}'\n"),
            ("a: b", "k: 'a: b'\n"),
            ("a:b", "k: a:b\n"),
            ("a #b", "k: 'a #b'\n"),
            ("a#b", "k: a#b\n"),
            (" lead", "k: ' lead'\n"),
            ("trail ", "k: 'trail '\n"),
            ("- x", "k: '- x'\n"),
            ("-x", "k: -x\n"),
            ("-", "k: '-'\n"),
            ("?", "k: '?'\n"),
            (":", "k: ':'\n"),
            ("--", "k: --\n"),
            ("*", "k: '*'\n"),
            ("it's", "k: it's\n"),
            ("'q'", "k: '''q'''\n"),
            ("tab\there", "k: \"tab\\there\"\n"),
            ("---", "k: '---'\n"),
            ("<<", "k: \"<<\"\n"),
            ("http://mirror$(id)", "k: http://mirror$(id)\n"),
            ("10%", "k: 10%\n"),
            ("%x", "k: '%x'\n"),
            ("1m30s", "k: 1m30s\n"),
            (
                "https://example.com/a?b=c",
                "k: https://example.com/a?b=c\n",
            ),
            ("[x]", "k: '[x]'\n"),
            ("a, b", "k: a, b\n"),
            ("é", "k: é\n"),
            ("😀", "k: \"\\U0001F600\"\n"),
        ];
        for (input, want) in cases {
            assert_eq!(val(input), want, "input {input:?}");
        }
    }

    #[test]
    fn literal_blocks() {
        assert_eq!(val("a\nb\n"), "k: |\n    a\n    b\n");
        assert_eq!(val("a\nb"), "k: |-\n    a\n    b\n");
        assert_eq!(val("a\n\nb\n"), "k: |\n    a\n\n    b\n");
        assert_eq!(val("a\n\n"), "k: |+\n    a\n\n");
        assert_eq!(val(" a\nb\n"), "k: |4\n     a\n    b\n");
        // trailing space forbids a block: double quotes.
        assert_eq!(val("a \nb"), "k: \"a \\nb\"\n");
        let seq = to_string(&Map::new().field("l", vec![Node::str("x\ny\n")]).into());
        assert_eq!(seq, "l:\n    - |\n      x\n      y\n");
    }

    #[test]
    fn indentation_matches_talos() {
        let mount = Map::new()
            .field("destination", "/var/opt")
            .field("type", "bind")
            .field("source", "/var/opt")
            .field("options", Node::strs(["rshared"]));
        let doc: Node = Map::new()
            .field(
                "machine",
                Map::new().field(
                    "kubelet",
                    Map::new()
                        .field("image", "ghcr.io/siderolabs/kubelet:v1.28.0")
                        .field("extraMounts", vec![Node::from(mount)]),
                ),
            )
            .field("certSANs", Node::Seq(vec![]))
            .field("network", Node::empty_map())
            .into();
        let want = "\
machine:
    kubelet:
        image: ghcr.io/siderolabs/kubelet:v1.28.0
        extraMounts:
            - destination: /var/opt
              type: bind
              source: /var/opt
              options:
                - rshared
certSANs: []
network: {}
";
        assert_eq!(to_string(&doc), want);
    }

    #[test]
    fn v4_flavor_differs_only_where_go_yaml_v4_does() {
        let v4 = |s: &str| to_string_flavor(&Map::new().field("k", s).into(), Flavor::V4);
        // YAML 1.1 compatibility strings and the merge key: single quotes in v4.
        assert_eq!(v4("yes"), "k: 'yes'\n");
        assert_eq!(v4("Off"), "k: 'Off'\n");
        assert_eq!(v4("n"), "k: 'n'\n");
        assert_eq!(v4("12:30"), "k: '12:30'\n");
        assert_eq!(v4("<<"), "k: '<<'\n");
        // Multi-line strings that are too short or all blank: double quotes.
        assert_eq!(v4("\n"), "k: \"\\n\"\n");
        assert_eq!(v4(" \n "), "k: \" \\n \"\n");
        // A leading line break gets no indentation hint in v4 (it does in v3).
        assert_eq!(v4("\na\n"), "k: |\n\n    a\n");
        assert_eq!(val("\na\n"), "k: |4\n\n    a\n");
        // Everything else as v3.
        for s in [
            "",
            "true",
            "0123",
            "a: b",
            "{\"a\":1}",
            " lead",
            "trail ",
            "plain",
            "1.5",
            "~",
            "a\nb\n",
            "a\nb",
            " a\nb\n",
        ] {
            assert_eq!(v4(s), val(s), "input {s:?}");
        }
    }

    #[test]
    fn literal_in_nested_maps_and_sequences() {
        let doc: Node = Map::new()
            .field(
                "a",
                Map::new()
                    .field("b", "line1\nline2\n")
                    .field("c", vec![Node::from(Map::new().field("d", "x\ny"))]),
            )
            .into();
        assert_eq!(
            to_string(&doc),
            "a:\n    b: |\n        line1\n        line2\n    c:\n        - d: |-\n            x\n            y\n"
        );
    }

    #[test]
    fn floats_as_go_formats_them() {
        for (f, s) in [
            (1.5, "1.5"),
            (1.0, "1"),
            (100000.0, "100000"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (1e21, "1e+21"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.25, "-2.25"),
            (123.456, "123.456"),
            (f64::INFINITY, ".inf"),
            (f64::NEG_INFINITY, "-.inf"),
            (f64::NAN, ".nan"),
        ] {
            assert_eq!(go_float(f), s, "{f}");
        }
        assert_eq!(
            to_string(&Map::new().field("f", Node::Float(0.5)).into()),
            "f: 0.5\n"
        );
    }

    #[test]
    fn nested_sequences_and_docs() {
        let doc: Node = Map::new()
            .field(
                "a",
                vec![
                    Node::Seq(vec![Node::str("x"), Node::str("y")]),
                    Node::Map(vec![]),
                ],
            )
            .into();
        assert_eq!(to_string(&doc), "a:\n    - - x\n      - \"y\"\n    - {}\n");
        let d = documents(&[
            Map::new().field("a", 1i64).into(),
            Map::new().field("b", true).into(),
        ]);
        assert_eq!(d, "a: 1\n---\nb: true\n");
    }

    #[test]
    fn go_map_key_order() {
        let mut e: Vec<(String, Node)> = [
            "nodefs.available",
            "memory.available",
            "imagefs.available",
            "nodefs.inodesFree",
            "a10",
            "a9",
            "a_b",
            "ab",
            "B",
            "a",
        ]
        .iter()
        .map(|k| (k.to_string(), Node::Null))
        .collect();
        sort_go_map(&mut e);
        let keys: Vec<&str> = e.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "B",
                "a",
                "a_b",
                "a9",
                "a10",
                "ab",
                "imagefs.available",
                "memory.available",
                "nodefs.available",
                "nodefs.inodesFree"
            ]
        );
    }

    #[test]
    fn keys_are_quoted_like_values() {
        let doc: Node = Map::new()
            .field("memory.available", "7%")
            .field("", "x")
            .field("true", "y")
            .into();
        assert_eq!(
            to_string(&doc),
            "memory.available: 7%\n\"\": x\n\"true\": \"y\"\n"
        );
    }
}
