//! The one place that parses YAML (serde_norway, the maintained fork of the deprecated serde_yaml). Everything else calls these
//! functions. The generic tree they return ([`Value`], [`Mapping`]) is
//! serde_norway's own, and callers (patches, schematic options, values files)
//! match on it: swapping the parser means giving them a tree of the same
//! shape, not only new functions here. Writing YAML is `goyaml`'s job,
//! never this module's. Before any parse, [`check_structure`] bounds the
//! nesting and the node count in one linear pass over the bytes.

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::text::clip_quoted;

/// A parsed YAML tree (mapping order kept as written).
pub use serde_norway::{Mapping, Value};

/// Parse one YAML (or JSON) document into `T`; errors name `what` and the
/// position/field serde reports. The text passes [`check_structure`] first.
pub fn from_str<T: DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    check_structure(text, what)?;
    serde_norway::from_str(text).map_err(|e| {
        let mut m = clip_quoted(&e.to_string());
        // The parser places a duplicate key at its mapping's start (or
        // nowhere): the second occurrence's own line and column instead.
        if m.contains("duplicate entry")
            && let Some((_, line, col)) = duplicate_key(text)
        {
            let cut = m.find(" at line ").unwrap_or(m.len());
            m = format!("{}, given again at line {line}, column {col}", &m[..cut]);
        }
        Error::bad_input(format!("{what}: {m}"))
    })
}

/// The first key given twice in one block mapping of `text`, with the
/// line and column of its second occurrence (a scan of lines and their
/// indentation; block scalars' lines skipped).
fn duplicate_key(text: &str) -> Option<(String, usize, usize)> {
    // Open mappings, innermost last: (indent, keys seen).
    let mut open: Vec<(usize, Vec<String>)> = Vec::new();
    let mut scalar_above: Option<usize> = None;
    for (n, l) in text.lines().enumerate() {
        let t = l.trim_start();
        let mut indent = l.len() - t.len();
        if let Some(s) = scalar_above {
            if t.is_empty() || indent > s {
                continue;
            }
            scalar_above = None;
        }
        if t.is_empty() || t.starts_with('#') || t.starts_with("---") {
            continue;
        }
        let mut rest = t;
        while rest == "-" || rest.starts_with("- ") {
            // A new list entry: the mappings inside the last one close.
            open.retain(|(i, _)| *i <= indent);
            let after = rest[1..].trim_start();
            indent += rest.len() - after.len();
            rest = after;
        }
        let Some((key, value)) = rest.split_once(':') else {
            continue;
        };
        if !(value.is_empty() || value.starts_with([' ', '\t'])) {
            continue;
        }
        let key = key
            .trim()
            .trim_matches(|c| c == '"' || c == '\'')
            .to_string();
        open.retain(|(i, _)| *i <= indent);
        match open.last_mut() {
            Some((i, keys)) if *i == indent => {
                if keys.contains(&key) {
                    return Some((key, n + 1, indent + 1));
                }
                keys.push(key);
            }
            _ => open.push((indent, vec![key])),
        }
        if value.trim_start().starts_with(['|', '>']) {
            scalar_above = Some(indent);
        }
    }
    None
}

/// A file that holds no document (empty, only comments, a pipe that
/// brought nothing) names nothing: bad input naming `what`, never a
/// config of defaults (`kind`: what the file should hold).
pub fn require_document(text: &str, what: &str, kind: &str) -> Result<()> {
    match value_from_str(text, what)?.is_null() {
        true => Err(Error::bad_input(format!(
            "{what}: the file holds no {kind} (empty, or only comments): it names nothing"
        ))),
        false => Ok(()),
    }
}

/// Parse one document into a generic tree.
pub fn value_from_str(text: &str, what: &str) -> Result<Value> {
    from_str(text, what)
}

/// Parse every `---`-separated document (after [`check_structure`]).
pub fn documents_from_str(text: &str, what: &str) -> Result<Vec<Value>> {
    use serde::Deserialize;
    check_structure(text, what)?;
    let mut out = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        let v = Value::deserialize(doc)
            .map_err(|e| Error::bad_input(format!("{what}: {}", clip_quoted(&e.to_string()))))?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Convert a parsed tree into `T`.
pub fn from_value<T: DeserializeOwned>(v: Value, what: &str) -> Result<T> {
    serde_norway::from_value(v)
        .map_err(|e| Error::bad_input(format!("{what}: {}", clip_quoted(&e.to_string()))))
}

/// A whole number as the emitter's node (`Int`, or `UInt` above `i64`);
/// `None` for a fraction, which each caller refuses or keeps as it must.
pub fn integer_node(n: &serde_norway::Number) -> Option<crate::goyaml::Node> {
    use crate::goyaml::Node;
    n.as_i64()
        .map(Node::Int)
        .or_else(|| n.as_u64().map(Node::UInt))
}

/// Nesting deeper than this is refused before any parser sees the text.
/// serde_norway's own recursion limit is 128 as well, so nothing that parsed
/// before is refused; what changes is that a body nested 30,000 deep is
/// refused in one linear pass instead of costing the parser seconds
/// (libyaml's event stream is built whole before the limit is checked).
pub const MAX_DEPTH: usize = 128;

/// More nodes than this (scalars, collections, entries, keys, aliases:
/// estimated from their indicators) are refused before parsing: no
/// schematic, config, patch or values file comes near it.
pub const MAX_NODES: usize = 100_000;

/// A cheap structural check of YAML (or JSON) text, before any parser:
/// nesting (flow `[`/`{` and block indentation, `- ` entries included) at
/// most [`MAX_DEPTH`], nodes at most [`MAX_NODES`]. One linear pass over
/// the bytes that knows quotes, comments, block scalars and document
/// markers well enough not to count what is inside them; it never accepts
/// what the parser would refuse for depth, and it errs towards counting
/// (an estimate: it bounds work, it does not validate). Every parse in this
/// module runs it first; the HTTP edge and the CLI call it too, naming the
/// body or the file.
pub fn check_structure(text: &str, what: &str) -> Result<()> {
    Scan::new(text.as_bytes()).run().map_err(|e| {
        Error::bad_input(format!(
            "{what}: {} at line {}, column {}; refused before parsing",
            e.why, e.line, e.column
        ))
    })
}

/// The state of [`check_structure`]'s pass.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    line: usize,
    line_start: usize,
    /// Open flow collections (`[`, `{`).
    flow: usize,
    /// Indentations of the open block nodes.
    block: Vec<usize>,
    nodes: usize,
}

/// Why [`check_structure`]'s pass refused, and where (1-based).
struct ScanError {
    why: String,
    line: usize,
    column: usize,
}

impl<'a> Scan<'a> {
    fn new(b: &'a [u8]) -> Scan<'a> {
        Scan {
            b,
            i: 0,
            line: 1,
            line_start: 0,
            flow: 0,
            block: Vec::new(),
            nodes: 0,
        }
    }

    fn err(&self, why: String) -> ScanError {
        ScanError {
            why,
            line: self.line,
            column: self.i - self.line_start + 1,
        }
    }

    /// The depth so far is `flow + block`, where the innermost block level
    /// of a line may be the node itself (a scalar, or the flow collection
    /// already counted in `flow`), not a collection: one level of slack, so
    /// that nothing the parser takes (128 levels) is refused here; 129 is
    /// then the parser's to refuse, cheaply.
    fn depth_check(&self) -> std::result::Result<(), ScanError> {
        let depth = self.flow + self.block.len();
        if depth > MAX_DEPTH + 1 {
            return Err(self.err(format!("nested deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn node(&mut self) -> std::result::Result<(), ScanError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.err(format!("more than {MAX_NODES} nodes")));
        }
        Ok(())
    }

    fn peek(&self, at: usize) -> u8 {
        self.b.get(at).copied().unwrap_or(b'\n')
    }

    fn newline(&mut self) {
        self.i += 1;
        self.line += 1;
        self.line_start = self.i;
    }

    /// Push a block node at column `col` when it is deeper than the open one.
    fn push_block(&mut self, col: usize) -> std::result::Result<(), ScanError> {
        if self.block.last().is_none_or(|&top| col > top) {
            self.block.push(col);
            self.depth_check()?;
        }
        Ok(())
    }

    fn run(mut self) -> std::result::Result<(), ScanError> {
        // `Some(min)`: inside a block scalar whose content lines are
        // indented at least `min`; they are text, not structure.
        let mut block_scalar: Option<usize> = None;
        while self.i < self.b.len() {
            // at the start of a line
            let rest = &self.b[self.i..];
            let indent = rest.iter().take_while(|&&c| c == b' ').count();
            let first = self.peek(self.i + indent);
            let blank = matches!(first, b'\n' | b'\r') || self.i + indent >= self.b.len();
            let marker = indent == 0
                && (rest.starts_with(b"---") || rest.starts_with(b"..."))
                && matches!(self.peek(self.i + 3), b' ' | b'\t' | b'\n' | b'\r');
            if let Some(min) = block_scalar {
                if !marker && (blank || indent >= min) {
                    self.skip_line();
                    continue;
                }
                block_scalar = None;
            }
            if self.flow > 0 {
                // inside a flow collection lines carry no block structure
                self.rest_of_line()?;
                continue;
            }
            if blank || first == b'#' || (indent == 0 && first == b'%') {
                self.skip_line();
                continue;
            }
            if marker {
                self.block.clear();
                self.i += 3;
                if self.rest_of_line()?.is_some() {
                    block_scalar = Some(0);
                }
                continue;
            }
            while self.block.last().is_some_and(|&top| top > indent) {
                self.block.pop();
            }
            self.i += indent;
            self.push_block(indent)?;
            self.node()?;
            // `- - - x`, `? x`: each entry indicator opens a node deeper;
            // `owner`: the column of the node a block scalar on this line
            // belongs to
            let mut owner = indent;
            let mut entry = None;
            while matches!(self.peek(self.i), b'-' | b'?')
                && matches!(self.peek(self.i + 1), b' ' | b'\n' | b'\r')
            {
                owner = self.i - self.line_start;
                self.i += 1;
                while self.peek(self.i) == b' ' {
                    self.i += 1;
                }
                let col = self.i - self.line_start;
                entry = Some(col);
                self.push_block(col)?;
                self.node()?;
            }
            if let Some(header) = self.rest_of_line()? {
                // `- |`: the scalar is the entry, owned by the `-`; `key: |`
                // (also `- key: |`): owned by the key, the open block node
                let parent = if entry == Some(header) {
                    owner
                } else {
                    *self.block.last().unwrap_or(&0)
                };
                block_scalar = Some(parent + 1);
            }
        }
        Ok(())
    }

    fn skip_line(&mut self) {
        while self.i < self.b.len() && self.b[self.i] != b'\n' {
            self.i += 1;
        }
        if self.i < self.b.len() {
            self.newline();
        }
    }

    /// Scan to the end of the line (past it); `Some(column)` when the line
    /// opens a block scalar (`|` or `>` as a value, outside flow) there.
    fn rest_of_line(&mut self) -> std::result::Result<Option<usize>, ScanError> {
        // at the start of a token: a quote or an indicator means something
        let mut token_start = true;
        while self.i < self.b.len() {
            let c = self.b[self.i];
            match c {
                b'\n' => {
                    self.newline();
                    return Ok(None);
                }
                b'#' if token_start || self.i == self.line_start => {
                    self.skip_line();
                    return Ok(None);
                }
                b' ' | b'\t' | b'\r' => {
                    token_start = true;
                    self.i += 1;
                    continue;
                }
                b'"' | b'\'' if token_start => {
                    self.quoted(c)?;
                    token_start = false;
                    continue;
                }
                b'[' | b'{' if token_start || self.flow > 0 => {
                    self.flow += 1;
                    self.depth_check()?;
                    self.node()?;
                    self.i += 1;
                    token_start = true;
                    continue;
                }
                b']' | b'}' if self.flow > 0 => {
                    self.flow -= 1;
                    self.i += 1;
                    token_start = false;
                    continue;
                }
                b',' if self.flow > 0 => {
                    self.node()?;
                    self.i += 1;
                    token_start = true;
                    continue;
                }
                // an alias is a node (an anchor `&` names the next one)
                b'*' if token_start => self.node()?,
                b'|' | b'>' if token_start && self.flow == 0 => {
                    // a block scalar header: indicators, then a comment or the end
                    let mut j = self.i + 1;
                    while matches!(self.peek(j), b'+' | b'-' | b'0'..=b'9') {
                        j += 1;
                    }
                    while matches!(self.peek(j), b' ' | b'\t') {
                        j += 1;
                    }
                    if matches!(self.peek(j), b'\n' | b'\r' | b'#') {
                        let col = self.i - self.line_start;
                        self.skip_line();
                        return Ok(Some(col));
                    }
                }
                b':' if matches!(self.peek(self.i + 1), b' ' | b'\t' | b'\n' | b'\r')
                    || (self.flow > 0 && matches!(self.peek(self.i + 1), b',' | b']' | b'}')) =>
                {
                    // a key's value follows
                    self.node()?;
                    self.i += 1;
                    token_start = true;
                    continue;
                }
                _ => {}
            }
            token_start = false;
            self.i += 1;
        }
        Ok(None)
    }

    /// Past a quoted scalar starting at `self.i` (it may span lines).
    fn quoted(&mut self, q: u8) -> std::result::Result<(), ScanError> {
        self.node()?;
        self.i += 1;
        while self.i < self.b.len() {
            let c = self.b[self.i];
            if c == b'\n' {
                self.newline();
                continue;
            }
            if q == b'"' && c == b'\\' {
                self.i += 2;
                continue;
            }
            if c == q {
                if q == b'\'' && self.peek(self.i + 1) == b'\'' {
                    self.i += 2;
                    continue;
                }
                self.i += 1;
                return Ok(());
            }
            self.i += 1;
        }
        Ok(())
    }
}

/// One step of a path into a YAML document: a mapping's key, or a list's
/// entry (for [`locate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The plain scalar at `path` as written in `text` (`1.30`, where the
/// parser's number says 1.3), when it is a block mapping's value on its
/// key's line.
pub fn written_value(text: &str, path: &[Step<'_>]) -> Option<String> {
    let (line, col) = locate(text, path)?;
    let l = text.lines().nth(line - 1)?;
    let (_, v) = l.get(col - 1..)?.split_once(':')?;
    let v = v.split(" #").next()?.trim();
    (!v.is_empty() && !v.starts_with(['{', '[', '|', '>', '"', '\''])).then(|| v.to_string())
}

/// Where the node at `path` is written in `text`: its 1-based line and
/// column, or those of the deepest step found (a flow collection, `{...}`
/// or `[...]`, is not entered: its line is the answer). Block YAML as
/// values files are written; a scan of lines and their indentation, run
/// only to place an error the parser's tree cannot place.
pub fn locate(text: &str, path: &[Step<'_>]) -> Option<(usize, usize)> {
    // (line, indent, content); a list item's `- ` becomes an entry of its
    // own ("-") followed by its content two columns further in.
    let mut entries: Vec<(usize, usize, &str)> = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') || t.starts_with("---") {
            continue;
        }
        let mut indent = l.len() - t.len();
        let mut rest = t;
        while rest == "-" || rest.starts_with("- ") {
            entries.push((n + 1, indent, "-"));
            let after = rest[1..].trim_start();
            indent += rest.len() - after.len();
            rest = after;
        }
        if !rest.is_empty() {
            entries.push((n + 1, indent, rest));
        }
    }
    let is_key = |c: &str, k: &str| {
        [format!("{k}:"), format!("\"{k}\":"), format!("'{k}':")]
            .iter()
            .any(|p| {
                c.strip_prefix(p.as_str())
                    .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
            })
    };
    // The node's block: the entries after `lo` deeper than `parent` (a
    // key's list may put its markers at the key's own column).
    let (mut lo, mut parent, mut of_key): (usize, isize, bool) = (0, -1, true);
    let mut found = None;
    for step in path {
        let end = entries[lo..]
            .iter()
            .position(|e| {
                let i = e.1 as isize;
                i < parent || (i == parent && !(of_key && e.2 == "-"))
            })
            .map_or(entries.len(), |p| lo + p);
        let block = &entries[lo..end];
        let col = block.iter().map(|e| e.1).min()?;
        let at = match step {
            Step::Key(k) => block.iter().position(|e| e.1 == col && is_key(e.2, k))?,
            Step::Index(i) => {
                block
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.1 == col && e.2 == "-")
                    .nth(*i)?
                    .0
            }
        };
        let e = block[at];
        found = Some((e.0, e.1 + 1));
        lo += at + 1;
        parent = e.1 as isize;
        of_key = matches!(step, Step::Key(_));
        if of_key {
            let value = e.2.split_once(':').map_or("", |(_, v)| v.trim_start());
            if value.starts_with(['{', '[']) {
                break;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> String {
        check_structure(text, "t").unwrap_err().to_string()
    }

    #[test]
    fn deep_flow_and_block_nesting_are_refused_before_parsing() {
        let deep = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
        let t = std::time::Instant::now();
        let e = refused(&deep);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert!(
            e.contains("nested deeper than 128 levels at line 1, column 129"),
            "{e}"
        );
        let just_over = format!("{}1{}", "[".repeat(129), "]".repeat(129));
        assert!(
            value_from_str(&just_over, "t").is_err(),
            "129: the parser's own limit"
        );
        let json = format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200));
        assert!(refused(&json).contains("nested deeper"));
        let block: String = (0..200)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        assert!(
            refused(&block).contains("at line 130,"),
            "{}",
            refused(&block)
        );
        let entries = format!("{}x\n", "- ".repeat(200));
        assert!(refused(&entries).contains("nested deeper"));
        // and through every parse of this module
        let e = from_str::<Value>(&deep, "body").unwrap_err().to_string();
        assert!(e.starts_with("body: nested deeper"), "{e}");
        assert!(documents_from_str(&deep, "body").is_err());
    }

    #[test]
    fn too_many_nodes_are_refused() {
        let wide = format!("[{}1]", "1,".repeat(MAX_NODES));
        assert!(refused(&wide).contains("more than 100000 nodes"));
        let lines: String = (0..MAX_NODES).map(|i| format!("k{i}: v\n")).collect();
        assert!(refused(&lines).contains("nodes"));
    }

    #[test]
    fn what_the_parser_takes_passes_at_its_depth() {
        // 128 levels, serde_norway's own limit, in every form: accepted here
        let flow = format!("{}1{}", "[".repeat(128), "]".repeat(128));
        value_from_str(&flow, "t").unwrap();
        let block: String = (0..128)
            .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
            .collect();
        value_from_str(&block, "t").unwrap();
        let entries = format!("{}x\n", "- ".repeat(128));
        value_from_str(&entries, "t").unwrap();
        let json = format!("{}1{}", "{\"a\":".repeat(127), "}".repeat(127));
        check_structure(&json, "t").unwrap();
        serde_json::from_str::<serde_json::Value>(&json).unwrap();
    }

    #[test]
    fn brackets_inside_scalars_comments_and_block_scalars_are_text() {
        let text = format!(
            "a: \"{q}\"\nb: '{q}'' {q}'\nc: x{q}\n# {q}\nd: |\n  {q}\n  {q}\ne: >-\n    {q}\nf:\n  - |\n    {q}\n  - g: |\n      {q}\nh: [\"]]]\", '[[[']\n--- |\n {q}\n",
            q = "[{".repeat(300)
        );
        check_structure(&text, "t").unwrap();
        documents_from_str(&text, "t").unwrap();
        // a sibling key after a block scalar is structure again
        let hidden = format!(
            "- k: |\n    text\n  other: {}1{}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert!(refused(&hidden).contains("nested deeper"));
    }

    #[test]
    fn every_yaml_file_of_the_repository_passes() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut n = 0;
        for dir in [
            "schematics",
            "matrix",
            "mirror",
            "src/machineconfig/testdata",
            ".ci",
        ] {
            let Ok(rd) = std::fs::read_dir(root.join(dir)) else {
                continue;
            };
            for e in rd.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    check_structure(&text, &p.display().to_string()).unwrap();
                    n += 1;
                }
            }
        }
        assert!(n > 3, "{n} files");
    }

    /// Issue 50 item 4: an error's field placed at its line and column.
    #[test]
    fn locate_finds_a_fields_line_and_column() {
        let text = "# the pool\nversion: \"v1.35\"\nkubelet:\n  evictionHardMemory: 7%\n  systemReservedMemroy: 1Gi\ngpus:\n- name: a\n- nme: b\ntalos:\n  registryMirrors:\n    ghcr.io:\n      endpoints:\n        - https://m:5000\n        - not a url\nroles: [5]\n";
        let k = Step::Key;
        assert_eq!(locate(text, &[k("version")]), Some((2, 1)));
        assert_eq!(
            locate(text, &[k("kubelet"), k("systemReservedMemroy")]),
            Some((5, 3))
        );
        assert_eq!(
            locate(text, &[k("gpus"), Step::Index(1), k("nme")]),
            Some((8, 3))
        );
        assert_eq!(
            locate(
                text,
                &[
                    k("talos"),
                    k("registryMirrors"),
                    k("ghcr.io"),
                    k("endpoints"),
                    Step::Index(1)
                ]
            ),
            Some((14, 9))
        );
        // A flow list is not entered: its key's place.
        assert_eq!(locate(text, &[k("roles"), Step::Index(0)]), Some((15, 1)));
        assert_eq!(locate(text, &[k("nothing")]), None);
    }

    /// Issue 50 item 4: a duplicate key is placed where it is given again,
    /// not at its mapping's start.
    #[test]
    fn a_duplicate_key_is_placed_at_its_second_occurrence() {
        let text = "cluster: a\nkubelet:\n  systemReservedMemory: 1Gi\n  note: |\n    systemReservedMemory: not a key\n  kubeReservedMemory: 1Gi\n  systemReservedMemory: 2Gi\n";
        let e = value_from_str(text, "--values").unwrap_err().to_string();
        assert!(
            e.ends_with("key \"systemReservedMemory\", given again at line 7, column 3"),
            "{e}"
        );
        let e = value_from_str("cluster: a\nroles: []\ncluster: b\n", "v")
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("key \"cluster\", given again at line 3, column 1"),
            "{e}"
        );
        let ok = "gpus:\n- name: a\n- name: b\n";
        assert!(value_from_str(ok, "v").is_ok());
        assert_eq!(duplicate_key(ok), None);
    }
}
