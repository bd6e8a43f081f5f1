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

#[derive(Clone, Copy, PartialEq)]
enum ScalarCtx {
    /// A simple mapping key.
    Key,
    /// A block-context value.
    Value,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

/// The text of a string scalar (without the trailing newline for
/// non-literal styles; literal blocks end with their last line break).
fn scalar_text(s: &str, ctx: ScalarCtx, indent: usize, f: Flavor) -> String {
    let style = select_style(s, ctx, f);
    match style {
        Style::Plain => s.to_string(),
        Style::Single => format!("'{}'", s.replace('\'', "''")),
        Style::Double => double_quoted(s),
        Style::Literal => literal(s, indent, f),
    }
}

fn select_style(s: &str, ctx: ScalarCtx, f: Flavor) -> Style {
    // encoder.stringv (v3) / representer.stringv + desolver (v4): the
    // requested style.
    let compat_quoted = is_base60_float(s) || is_old_bool(s);
    let mut style = match f {
        Flavor::V3 => {
            if s.contains('\n') {
                Style::Literal
            } else if resolves_to_str(s) && !compat_quoted {
                Style::Plain
            } else {
                Style::Double
            }
        }
        Flavor::V4 => {
            if s.contains('\n') {
                let literal_ok = s.len() >= 2 && s.chars().any(|c| !c.is_whitespace());
                if literal_ok {
                    Style::Literal
                } else {
                    Style::Double
                }
            } else if compat_quoted || s == "<<" {
                Style::Single
            } else if resolves_to_str(s) {
                Style::Plain
            } else {
                Style::Double
            }
        }
    };
    // emitter.select_scalar_style: what the analysis allows.
    let a = analyze(s);
    if style == Style::Plain {
        if !a.block_plain_allowed {
            style = Style::Single;
        }
        if s.is_empty() && ctx == ScalarCtx::Key {
            style = Style::Single;
        }
    }
    if style == Style::Single && !a.single_quoted_allowed {
        style = Style::Double;
    }
    if style == Style::Literal && (!a.block_allowed || ctx == ScalarCtx::Key) {
        style = Style::Double;
    }
    style
}

struct Analysis {
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

fn is_printable(c: char) -> bool {
    let u = c as u32;
    u == 0x0A
        || (0x20..=0x7E).contains(&u)
        || (0xA0..=0xD7FF).contains(&u)
        || ((0xE000..=0xFFFD).contains(&u) && u != 0xFEFF)
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

fn is_blankz(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => c == ' ' || c == '\t' || is_break(c) || c == '\0',
    }
}

/// yaml_emitter_analyze_scalar, for block context.
fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    // Fast path for the long tokens configs are full of (base64 PEM,
    // URLs without spaces): nothing in them is an indicator, a space, a
    // break or unprintable, so every style is allowed.
    // ("-" alone is a block indicator: a dash followed by the end.)
    if s != "-"
        && !s.starts_with("---")
        && !s.starts_with("...")
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'.' | b'_' | b'-')
        })
    {
        return Analysis {
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: true,
        };
    }
    analyze_slow(s)
}

/// The full yaml_emitter_analyze_scalar loop.
fn analyze_slow(s: &str) -> Analysis {
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = false;
    if s.starts_with("---") || s.starts_with("...") {
        block_indicators = true;
    }
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break, mut previous_space, mut previous_break) =
        (false, false, false, false);
    let mut line_breaks = false;
    let mut special = false;
    let mut preceded_by_ws = true;
    let n = chars.len();
    for i in 0..n {
        let c = chars[i];
        let followed_by_ws = is_blankz(chars.get(i + 1).copied());
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' if followed_by_ws => block_indicators = true,
                '-' if followed_by_ws => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_ws => block_indicators = true,
                '#' if preceded_by_ws => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) {
            special = true;
        }
        if is_break(c) {
            line_breaks = true;
        }
        if c == ' ' {
            if i == 0 {
                leading_space = true;
            }
            if i == n - 1 {
                trailing_space = true;
            }
            if previous_break {
                break_space = true;
            }
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            if i == 0 {
                leading_break = true;
            }
            if i == n - 1 {
                trailing_break = true;
            }
            if previous_space {
                space_break = true;
            }
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_ws = is_blankz(Some(c));
    }
    let mut a = Analysis {
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// yaml.v3 `resolve("", s)` returns `!!str`: a plain scalar reads back as this string.
fn resolves_to_str(s: &str) -> bool {
    const SPECIAL: &[&str] = &[
        "true", "True", "TRUE", "false", "False", "FALSE", "", "~", "null", "Null", "NULL", ".nan",
        ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf",
        "-.INF", "<<",
    ];
    if SPECIAL.contains(&s) {
        return false;
    }
    let first = s.as_bytes()[0];
    match first {
        b'.' => go_parse_float(s).is_none(),
        b'0'..=b'9' | b'+' | b'-' => {
            if first.is_ascii_digit() && is_timestamp(s) {
                return false;
            }
            let plain: String = s.chars().filter(|&c| c != '_').collect();
            if go_parse_int_base0(&plain) {
                return false;
            }
            if is_yaml_style_float(&plain) && go_parse_float(&plain).is_some() {
                return false;
            }
            let body = plain.strip_prefix('-').unwrap_or(&plain);
            if let Some(b) = body.strip_prefix("0b")
                && !b.is_empty()
                && b.bytes().all(|c| c == b'0' || c == b'1')
            {
                return false;
            }
            if let Some(o) = body.strip_prefix("0o")
                && !o.is_empty()
                && o.bytes().all(|c| (b'0'..=b'7').contains(&c))
            {
                return false;
            }
            true
        }
        _ => true,
    }
}

/// Go's strconv.ParseInt(s, 0, 64) or ParseUint(s, 0, 64) succeeds.
fn go_parse_int_base0(s: &str) -> bool {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    if body.is_empty() {
        return false;
    }
    let (radix, digits) =
        if let Some(d) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, d)
        } else if let Some(d) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
            (8, d)
        } else if let Some(d) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
            (2, d)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return false;
    }
    match u64::from_str_radix(digits, radix) {
        Ok(v) => !neg || v <= (i64::MAX as u64) + 1,
        Err(_) => false,
    }
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let st = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - st
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Go's strconv.ParseFloat(s, 64) without error (finite, or an explicit infinity/NaN).
fn go_parse_float(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return Some(0.0);
    }
    // Rust accepts what Go accepts for decimal forms (Go also takes hex
    // floats and underscores, which the callers have ruled out or removed).
    let v: f64 = s.parse().ok()?;
    if v.is_infinite() { None } else { Some(v) }
}

fn is_old_bool(s: &str) -> bool {
    matches!(
        s,
        "y" | "Y"
            | "yes"
            | "Yes"
            | "YES"
            | "on"
            | "On"
            | "ON"
            | "n"
            | "N"
            | "no"
            | "No"
            | "NO"
            | "off"
            | "Off"
            | "OFF"
    )
}

/// `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`
fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    if i >= b.len() || !b[i].is_ascii_digit() {
        return false;
    }
    i += 1;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while i < b.len() && b[i] == b':' {
        i += 1;
        // [0-5]?[0-9]
        let st = i;
        while i < b.len() && b[i].is_ascii_digit() && i - st < 2 {
            i += 1;
        }
        match i - st {
            1 => {}
            2 if b[st] <= b'5' => {}
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

/// yaml.v3's timestamp check: `YYYY-` then one of the layouts
/// `2006-1-2T15:4:5.999999999Z07:00`, `2006-1-2t15:4:5.999999999Z07:00`,
/// `2006-1-2 15:4:5.999999999`, `2006-1-2`.
fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return false;
    }
    let rest = &s[5..];
    let num = |t: &str, max: usize| -> Option<(u32, usize)> {
        let n = t.bytes().take_while(u8::is_ascii_digit).count().min(max);
        if n == 0 {
            return None;
        }
        Some((t[..n].parse().ok()?, n))
    };
    let Some((month, n)) = num(rest, 2) else {
        return false;
    };
    let rest = &rest[n..];
    let Some(rest) = rest.strip_prefix('-') else {
        return false;
    };
    let Some((day, n)) = num(rest, 2) else {
        return false;
    };
    let rest = &rest[n..];
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return false;
    }
    if rest.is_empty() {
        return true;
    }
    let (sep, rest) = rest.split_at(1);
    if !matches!(sep, "T" | "t" | " ") {
        return false;
    }
    let mut rest = rest;
    for (k, max) in [(0, 23), (1, 59), (2, 59)] {
        if k > 0 {
            let Some(r) = rest.strip_prefix(':') else {
                return false;
            };
            rest = r;
        }
        let Some((v, n)) = num(rest, 2) else {
            return false;
        };
        if v > max {
            return false;
        }
        rest = &rest[n..];
    }
    if let Some(r) = rest.strip_prefix('.') {
        let n = r.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &r[n..];
    }
    if sep == " " {
        return rest.is_empty();
    }
    // Z07:00
    if rest == "Z" {
        return true;
    }
    let Some(r) = rest.strip_prefix(['+', '-']) else {
        return false;
    };
    r.len() == 5
        && r.as_bytes()[2] == b':'
        && r[..2].parse::<u32>().is_ok()
        && r[3..].parse::<u32>().is_ok()
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if !is_printable(c) || c == '\u{FEFF}' || is_break(c) || c == '"' || c == '\\' {
            match c {
                '\0' => out.push_str("\\0"),
                '\u{7}' => out.push_str("\\a"),
                '\u{8}' => out.push_str("\\b"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\u{B}' => out.push_str("\\v"),
                '\u{C}' => out.push_str("\\f"),
                '\r' => out.push_str("\\r"),
                '\u{1B}' => out.push_str("\\e"),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{85}' => out.push_str("\\N"),
                '\u{A0}' => out.push_str("\\_"),
                '\u{2028}' => out.push_str("\\L"),
                '\u{2029}' => out.push_str("\\P"),
                c if (c as u32) <= 0xFF => {
                    let _ = write!(out, "\\x{:02X}", c as u32);
                }
                c if (c as u32) <= 0xFFFF => {
                    let _ = write!(out, "\\u{:04X}", c as u32);
                }
                c => {
                    let _ = write!(out, "\\U{:08X}", c as u32);
                }
            }
        } else {
            out.push(c);
        }
    }
    out.push('"');
    out
}

/// `|` block with hints, content at `indent`, ending with a line break.
/// The indentation hint is written for a leading space, and in v3 also for a
/// leading line break (v4 dropped that case: go-yaml issue #65).
fn literal(s: &str, indent: usize, f: Flavor) -> String {
    let mut out = String::from("|");
    let first = s.chars().next();
    if first == Some(' ') || (f == Flavor::V3 && first.is_some_and(is_break)) {
        let _ = write!(out, "{BEST_INDENT}");
    }
    let mut rev = s.chars().rev();
    match (rev.next(), rev.next()) {
        (None, _) => out.push('-'),
        (Some(l), _) if !is_break(l) => out.push('-'),
        (Some(_), None) => out.push('+'),
        (Some(_), Some(p)) if is_break(p) => out.push('+'),
        _ => {}
    }
    out.push('\n');
    let mut at_line_start = true;
    for c in s.chars() {
        if is_break(c) {
            out.push('\n');
            at_line_start = true;
        } else {
            if at_line_start {
                pad(&mut out, indent);
                at_line_start = false;
            }
            out.push(c);
        }
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)` with yaml's `.inf`, `-.inf`
/// and `.nan`: shortest digits, `%e` form (`1e+06`) when the decimal
/// exponent is below -4 or at least 6.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // Shortest round-trip digits and the decimal exponent.
    let e = format!("{:e}", f.abs());
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let mut m = digits[..1].to_string();
        if digits.len() > 1 {
            m.push('.');
            m.push_str(&digits[1..]);
        }
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{m}e{es}{:02}", exp.abs());
    }
    let nd = digits.len() as i32;
    let body = if exp < 0 {
        format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
    } else if exp + 1 >= nd {
        format!("{}{}", digits, "0".repeat((exp + 1 - nd) as usize))
    } else {
        let (a, b) = digits.split_at((exp + 1) as usize);
        format!("{a}.{b}")
    };
    format!("{sign}{body}")
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
    fn analysis_fast_path_agrees_with_the_full_loop() {
        for s in [
            "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJQakNC==",
            "a+b/c=d",
            "-x",
            "x-",
            "v1.28.0",
            "ghcr.io",
            "a_b.c-d",
            "..x",
            "--x",
            "=",
        ] {
            let fast = analyze(s);
            let slow = analyze_slow(s);
            assert_eq!(
                (
                    fast.block_plain_allowed,
                    fast.single_quoted_allowed,
                    fast.block_allowed
                ),
                (
                    slow.block_plain_allowed,
                    slow.single_quoted_allowed,
                    slow.block_allowed
                ),
                "{s:?}"
            );
        }
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
