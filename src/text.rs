//! Small text grammars and formats every layer shares, written once: a
//! sha256 in hex (schematic IDs, object names, digests), sizes and
//! durations as a person reads them (the status page, the mirror job's
//! lines and progress bars), and an upstream's error body, or an error
//! with its causes, as one line.

use std::time::Duration;

/// 64 lowercase hex digits: a sha256 as the store, the factory and OCI
/// digests write it.
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `1.5 GiB`-style sizes (binary units, one decimal; bytes as a count).
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `1 object`, `3 objects`: a count with its noun in the right number.
pub fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `3d 4h`, `5m 12s`, `40s`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {sec}s")
    } else {
        format!("{sec}s")
    }
}

/// Most characters [`one_line`] keeps.
pub const ONE_LINE_MAX: usize = 200;

/// An upstream's error body, or an error text that carries one (an S3
/// client's error quotes the body), as one short line for a log or a
/// terminal: an XML error (S3's `<Error>`) reduced to its `Code` and
/// `Message`, an HTML page to its `<title>`, other markup dropped, control
/// characters and runs of whitespace made one space, at most
/// [`ONE_LINE_MAX`] characters (`...` marks a cut).
pub fn one_line(text: &str) -> String {
    // ASCII lowercasing keeps every byte offset.
    let lower = text.to_ascii_lowercase();
    let element = |name: &str| -> Option<&str> {
        let open = format!("<{name}>");
        let start = lower.find(&open)? + open.len();
        let end = lower[start..].find(&format!("</{name}>"))? + start;
        Some(&text[start..end])
    };
    let summary = match lower.find('<') {
        None => text.to_string(),
        Some(at) => {
            let before = text[..at].trim_end().trim_end_matches(':');
            let gist = match (element("code"), element("message"), element("title")) {
                (Some(c), Some(m), _) => format!("{c}: {m}"),
                (Some(c), None, _) => c.to_string(),
                (None, Some(m), _) => m.to_string(),
                (None, None, Some(t)) => t.to_string(),
                (None, None, None) => {
                    let mut out = String::new();
                    let mut in_tag = false;
                    for c in text[at..].chars() {
                        match c {
                            '<' => in_tag = true,
                            '>' => {
                                in_tag = false;
                                out.push(' ');
                            }
                            c if !in_tag => out.push(c),
                            _ => {}
                        }
                    }
                    out
                }
            };
            // The page's gist survives a long lead (an S3 client's own words).
            let gist = squeeze(&gist, ONE_LINE_MAX / 2);
            let before = squeeze(before, ONE_LINE_MAX - gist.chars().count());
            return match (before.is_empty(), gist.is_empty()) {
                (true, _) => gist,
                (false, true) => before,
                (false, false) => format!("{before}: {gist}"),
            };
        }
    };
    squeeze(&summary, ONE_LINE_MAX)
}

/// Longest span a parser's error quotes from a file's text (a field name,
/// a scalar) before it is cut.
pub const QUOTE_MAX: usize = 40;

/// A parser's error message with every quoted span (between backquotes or
/// double quotes) of more than [`QUOTE_MAX`] characters cut to its start
/// and its length: the error names the field and the line, while a file
/// read by mistake (a whole `/etc/passwd` as one scalar, a 10 MB key) is
/// not copied onto the terminal or into a log.
pub fn clip_quoted(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len().min(1024));
    let mut chars = msg.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '`' && c != '"' {
            continue;
        }
        // The span to the matching quote; in double quotes a backslash
        // escapes the next character (`\"` does not end the span). A span
        // with no end runs to the end of the message, and is cut alike.
        let mut span = String::new();
        let mut closed = false;
        let mut escaped = false;
        for d in chars.by_ref() {
            if escaped {
                escaped = false;
            } else if d == '\\' && c == '"' {
                escaped = true;
            } else if d == c {
                closed = true;
                break;
            }
            span.push(d);
        }
        let n = span.chars().count();
        if n > QUOTE_MAX {
            out.extend(span.chars().take(QUOTE_MAX / 2));
            out.push_str(&format!("... ({n} characters)"));
        } else {
            out.push_str(&span);
        }
        if closed {
            out.push(c);
        }
    }
    out
}

/// An error and its causes as one line ([`one_line`]): each cause the
/// text does not already say is appended (`: cause`), and the innermost
/// one is kept whole when the line is cut (an S3 client's own words about
/// its retries are long; "invalid peer certificate: UnknownIssuer" at the
/// end of the chain is what the operator needs to read).
pub fn error_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut said = vec![e.to_string()];
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !t.trim().is_empty() && !said.iter().any(|x| x.contains(&t)) {
            said.push(t);
        }
        src = s.source();
    }
    let root = match said.pop() {
        Some(r) if !said.is_empty() => squeeze(&one_line(&r), ONE_LINE_MAX / 2),
        Some(only) => return one_line(&only),
        None => return String::new(),
    };
    let lead = squeeze(
        &one_line(&said.join(": ")),
        ONE_LINE_MAX - root.chars().count() - 2,
    );
    format!("{lead}: {root}")
}

/// Whitespace and control characters made single spaces, cut at `max`
/// characters (`...` marks the cut).
fn squeeze(text: &str, max: usize) -> String {
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect();
    let joined = words.join(" ");
    if joined.chars().count() > max {
        let cut: String = joined.chars().take(max).collect();
        format!("{cut}...")
    } else {
        joined
    }
}

/// A JSON document as the CLI prints it and the API answers it, byte for
/// byte: indented two spaces, one newline at its end (`matrix --json`,
/// `matrix check --json`, `upgrade plan --json` and their `/api/v1/` routes).
pub fn json_document(v: &serde_json::Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// The one boolean grammar of every flag, `TALOS_GEN_*` variable and API
/// query parameter: `true`/`false`, `1`/`0`, any case; anything else
/// (`yes`, `on`, the empty value) `None`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// Levenshtein distance over chars, ASCII case ignored (keys and names are
/// short; a word is read up to its first 64 characters).
pub fn edit_distance(a: &str, b: &str) -> usize {
    levenshtein(a, b, |c| c.to_ascii_lowercase())
}

/// Levenshtein distance over chars (the first 64 of `a`), each char
/// through `fold` first (case-blind: `to_ascii_lowercase`; exact: `|c| c`).
pub fn levenshtein(a: &str, b: &str, fold: impl Fn(char) -> char) -> usize {
    let b: Vec<char> = b.chars().map(&fold).collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().take(64).enumerate() {
        let ca = fold(ca);
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// The known words by closeness to `word` (edit distance, then the order
/// of `known`), nearest first.
pub fn by_nearness<'a>(word: &str, known: &[&'a str]) -> Vec<&'a str> {
    let mut all: Vec<(usize, usize, &str)> = known
        .iter()
        .enumerate()
        .map(|(i, k)| (edit_distance(word, k), i, *k))
        .collect();
    all.sort();
    all.into_iter().map(|(_, _, k)| k).collect()
}

/// A typo tip, one line: `unknown key "talso" (nearest known: "talos")`,
/// `what` naming the kind of word (`top-level key`), with the nearest of
/// `known` whatever its distance (the user reads what is there).
pub fn unknown_word(what: &str, word: &str, known: &[&str]) -> String {
    let quoted = clip_quoted(&format!("{word:?}"));
    match by_nearness(word, known).first() {
        Some(k) => format!("unknown {what} {quoted} (nearest known: {k:?})"),
        None => format!("unknown {what} {quoted}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_spans_are_clipped() {
        let key = "k".repeat(10 << 20);
        let m = clip_quoted(&format!(
            "unknown field `{key}`, expected one of `owner`, `overlay`"
        ));
        assert_eq!(
            m,
            format!(
                "unknown field `{}... (10485760 characters)`, expected one of `owner`, `overlay`",
                "k".repeat(20)
            )
        );
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin";
        let m = clip_quoted(&format!(
            "invalid type: string \"{passwd}\", expected struct"
        ));
        assert!(!m.contains("daemon"), "{m}");
        assert!(m.ends_with("characters)\", expected struct"), "{m}");
        // An escaped quote does not end a span.
        let m = clip_quoted(&format!(
            "invalid type: string \"a\\\"{}\", expected a mapping",
            "S".repeat(5000)
        ));
        assert_eq!(
            m,
            format!(
                "invalid type: string \"a\\\"{}... (5003 characters)\", expected a mapping",
                "S".repeat(17)
            )
        );
        // A span with no end is cut too.
        let m = clip_quoted(&format!("unknown field \"{}", "S".repeat(5000)));
        assert_eq!(
            m,
            format!("unknown field \"{}... (5000 characters)", "S".repeat(20))
        );
        for short in [
            "a \"x\\\"y\" b",
            "unknown field `cpus`",
            "a \"quote\" and `tick`",
            "an open ` quote",
            "\"",
            "",
        ] {
            assert_eq!(clip_quoted(short), short);
        }
        // Multi-byte characters are cut on a character.
        let m = clip_quoted(&format!("`{}`", "é".repeat(50)));
        assert_eq!(m, format!("`{}... (50 characters)`", "é".repeat(20)));
    }

    #[test]
    fn an_error_line_keeps_its_innermost_cause() {
        #[derive(Debug)]
        struct E(String, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let chain = |v: &[&str]| {
            v.iter()
                .rev()
                .fold(None, |inner, t| Some(Box::new(E(t.to_string(), inner))))
                .unwrap()
        };
        let long = format!(
            "Error performing PUT https://127.0.0.1:1/b/{} in 340ms, after 2 retries - HTTP error: error sending request",
            "x".repeat(300)
        );
        let e = chain(&[
            &long,
            "error sending request",
            "client error (Connect)",
            "invalid peer certificate: UnknownIssuer",
        ]);
        let line = error_line(&*e);
        assert!(
            line.ends_with(": client error (Connect): invalid peer certificate: UnknownIssuer")
                || line.ends_with("...: invalid peer certificate: UnknownIssuer"),
            "{line}"
        );
        assert!(
            line.starts_with("Error performing PUT https://127.0.0.1:1/b/"),
            "{line}"
        );
        assert!(line.chars().count() <= ONE_LINE_MAX + 3, "{line}");
        // A cause the text already says is not said twice.
        let e = chain(&["reading: gone", "gone"]);
        assert_eq!(error_line(&*e), "reading: gone");
        let e = chain(&["short", "because"]);
        assert_eq!(error_line(&*e), "short: because");
    }

    #[test]
    fn error_bodies_become_one_line() {
        let html = "<!DOCTYPE html>\n<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n<center><h1>502 Bad Gateway</h1></center>\n<hr><center>nginx</center>\n</body>\n</html>\n";
        assert_eq!(one_line(html), "502 Bad Gateway");
        let s3 = "Client error with status 403 Forbidden: <?xml version=\"1.0\"?>\n<Error><Code>AccessDenied</Code><Message>Access\n Denied</Message></Error>";
        assert_eq!(
            one_line(s3),
            "Client error with status 403 Forbidden: AccessDenied: Access Denied"
        );
        assert_eq!(one_line("  plain\n\ttext\r\n"), "plain text");
        assert_eq!(one_line("<p>a</p>\n<p>b</p>"), "a b");
        let long = "x".repeat(500);
        assert_eq!(one_line(&long).chars().count(), ONE_LINE_MAX + 3);
        assert!(!one_line("a\u{1b}[31mb").contains('\u{1b}'));
    }

    #[test]
    fn formats_and_grammars() {
        assert_eq!(count(1, "object", "objects"), "1 object");
        assert_eq!(count(0, "object", "objects"), "0 objects");
        assert_eq!(count(2, "key", "keys"), "2 keys");
        assert_eq!(human_size(10), "10 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(3 << 30), "3.0 GiB");
        assert_eq!(human_duration(Duration::from_secs(40)), "40s");
        assert_eq!(human_duration(Duration::from_secs(312)), "5m 12s");
        assert_eq!(
            human_duration(Duration::from_secs(3 * 86400 + 4 * 3600)),
            "3d 4h"
        );
        assert!(is_hex64(&"a".repeat(64)));
        assert!(!is_hex64(&"A".repeat(64)));
        assert!(!is_hex64(&"a".repeat(63)));
    }

    #[test]
    fn typo_tips() {
        assert_eq!(edit_distance("talso", "talos"), 2);
        assert_eq!(edit_distance("instanceTyp", "instanceType"), 1);
        assert_eq!(edit_distance("Talos", "talos"), 0);
        let known = ["cluster", "talos", "instanceType", "version"];
        assert_eq!(by_nearness("talso", &known)[0], "talos");
        assert_eq!(
            unknown_word("top-level key", "instanceTyp", &known),
            "unknown top-level key \"instanceTyp\" (nearest known: \"instanceType\")"
        );
        assert_eq!(unknown_word("name", "x", &[]), "unknown name \"x\"");
        let long = "k".repeat(500);
        let line = unknown_word("key", &long, &known);
        assert!(line.len() < 120 && !line.contains('\n'), "{line}");
    }
}
