//! How one string scalar is written: the style yaml.v3 / yaml.v4 pick for it
//! (plain, single- or double-quoted, literal block), the emitter's scalar
//! analysis, the resolver checks that decide whether a plain string would read
//! back as something else, and Go's float formatting.

use std::fmt::Write as _;

use super::{BEST_INDENT, Flavor, pad};

#[derive(Clone, Copy, PartialEq)]
pub(super) enum ScalarCtx {
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
pub(super) fn scalar_text(s: &str, ctx: ScalarCtx, indent: usize, f: Flavor) -> String {
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
}
