//! The invariants of ARCHITECTURE.md that a scan of `src/` can check:
//! nothing lower imports anything higher (the code map's layers below),
//! the YAML parser (`serde_norway`) only behind `yaml`, `unsafe` only where ARCHITECTURE.md says,
//! the HTTP edge names no store type, no error is a bare `String` below
//! the CLI edge, and no function runs over 120 lines. A new module fails here until it is placed in a layer (and
//! in ARCHITECTURE.md's code map).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The code map's layers, lowest first: a module may use modules of lower
/// layers only (same-layer modules do not use each other).
const LAYERS: &[&[&str]] = &[
    &["error"],
    &["version", "goyaml", "input", "text", "atomic"],
    &["yaml", "cosign", "store", "oci_ref"],
    &[
        "matrix",
        "schematic",
        "upstream",
        "metrics",
        "inventory",
        "outage",
    ],
    &["known_schematics", "fill"],
    &["pull_list", "verifiers", "cache"],
    &["machineconfig", "factory", "registry", "upgrade"],
    &["datavolume", "compose"],
    &["mirror"],
    &["http"],
    &["cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// `(path, top-level module, code before its tests with comments removed)`.
fn sources() -> Vec<(PathBuf, String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(&src).unwrap().to_str().unwrap().to_string();
            let top = rel
                .split('/')
                .next()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string();
            // The crate root, and unit-test modules kept in files of their
            // own (`#[cfg(test)] mod tests;`), are not layered.
            if top == "lib" || top == "main" || rel.ends_with("/tests.rs") {
                return None;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let code = without_test_items(&text);
            let code: String = code
                .lines()
                .map(|l| l.split("//").next().unwrap())
                .collect::<Vec<_>>()
                .join("\n");
            Some((p, top, code))
        })
        .collect()
}

/// `text` without its `#[cfg(test)]` items (a test module, a helper for
/// tests): each from its attribute to the end of the item (its `;`, or the
/// brace that closes its first `{`). The rest of the file, before and
/// after them, is kept: every rule sees all of a module's own code.
fn without_test_items(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let item = &rest[i..];
        let end = match (item.find('{'), item.find(';')) {
            (Some(b), Some(s)) if s < b => s + 1,
            (None, Some(s)) => s + 1,
            (Some(b), _) => {
                // Braces counted outside string literals and `'{'`, `'}'`
                // and `'"'`.
                let (mut depth, mut end) = (0usize, item.len());
                let mut it = item[b..].char_indices().peekable();
                while let Some((j, c)) = it.next() {
                    match c {
                        '"' => {
                            while let Some((_, c)) = it.next() {
                                match c {
                                    '\\' => {
                                        it.next();
                                    }
                                    '"' => break,
                                    _ => {}
                                }
                            }
                        }
                        '\'' if matches!(it.peek(), Some((_, '{' | '}' | '"'))) => {
                            it.next();
                        }
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + j + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn test_items_are_left_out_and_the_rest_kept() {
    let src = "fn a() {}\n#[cfg(test)]\nmod t { fn x() { if y { let _ = (\"{\", '{', '\"'); } } }\nfn b() {}\n#[cfg(test)]\nmod u;\n#[cfg(test)]\nimpl X for Y {\n fn z() {}\n}\nfn c() {}\n";
    let kept = without_test_items(src);
    assert_eq!(kept, "fn a() {}\n\nfn b() {}\n\n\nfn c() {}\n");
}

/// The `crate::<module>` paths a text names.
fn uses(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + 7..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.insert(name);
        }
    }
    out
}

#[test]
fn nothing_lower_imports_anything_higher() {
    let mut wrong = Vec::new();
    for (path, top, code) in sources() {
        let Some(from) = layer_of(&top) else {
            wrong.push(format!(
                "{}: module {top} is in no layer of LAYERS",
                path.display()
            ));
            continue;
        };
        for used in uses(&code) {
            if used == top {
                continue;
            }
            match layer_of(&used) {
                Some(to) if to < from => {}
                Some(_) => wrong.push(format!(
                    "{}: {top} -> {used} runs up or sideways",
                    path.display()
                )),
                None => wrong.push(format!(
                    "{}: {top} -> {used}, a module in no layer",
                    path.display()
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the code map is broken:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_yaml_parser_only_behind_yaml_and_unsafe_only_where_justified() {
    for (path, top, code) in sources() {
        if top != "yaml" {
            for parser in ["serde_norway", "serde_yaml"] {
                assert!(
                    !code.contains(parser),
                    "{}: {parser} outside yaml",
                    path.display()
                );
            }
        }
        // Only the `setsockopt(SO_RCVLOWAT)` on a socket `conn` owns (no
        // crate in the tree exposes that option), justified where it
        // stands; every other system call goes through `rustix` or `std`.
        if !path.ends_with("store/s3/conn.rs") {
            assert!(
                !code.contains("unsafe"),
                "{}: unsafe outside store/s3/conn.rs",
                path.display()
            );
        }
    }
}

#[test]
fn the_http_edge_names_no_store_type() {
    for (path, top, code) in sources() {
        if top == "http" {
            assert!(
                !code.contains("crate::store") && !code.contains("store::"),
                "{}: the HTTP edge names the store (it holds an Inventory and calls the core)",
                path.display()
            );
            // Nor reaches a store handle through the core's types: no
            // `Store` named, no `.store()` asked (`Fills::store()` is behind
            // `http::state::FillProgress`, which exposes the fills in
            // progress only), no `Fills` held.
            for word in ["Store", "Fills"] {
                let named = code.match_indices(word).any(|(i, _)| {
                    let before = code[..i].chars().next_back();
                    let after = code[i + word.len()..].chars().next();
                    let ident =
                        |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
                    !ident(before) && !ident(after) && before != Some('"')
                });
                let allowed = word == "Fills" && path.ends_with("http/state.rs");
                assert!(
                    !named || allowed,
                    "{}: the HTTP edge names `{word}`",
                    path.display()
                );
            }
            assert!(
                !code.contains(".store()"),
                "{}: the HTTP edge asks for a store handle (`.store()`)",
                path.display()
            );
        }
    }
}

/// A source's path from the repository's root (`src/fill.rs`).
fn relative(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    path.strip_prefix(root).unwrap().display().to_string()
}

/// The `Result<T, String>` types a text names: the error argument (the
/// last of two at the top level of the brackets) is `String`.
fn string_errors(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, _) in code.match_indices("Result<") {
        let rest = &code[i + "Result<".len()..];
        let (mut depth, mut args, mut arg) = (0usize, Vec::new(), String::new());
        let mut prev = ' ';
        for c in rest.chars() {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' if prev == '-' => {}
                '>' | ')' | ']' if depth == 0 => break,
                '>' | ')' | ']' => depth -= 1,
                ',' if depth == 0 => {
                    args.push(std::mem::take(&mut arg));
                    prev = c;
                    continue;
                }
                _ => {}
            }
            arg.push(c);
            prev = c;
        }
        args.push(arg);
        if args.len() == 2 && args[1].trim() == "String" {
            found.push(format!("Result<{}>", args.join(",")));
        }
    }
    found
}

/// One error model: below the CLI edge (whose clap value parsers answer
/// `Result<_, String>`) every error is a type. The files listed are known
/// debts in code this rule's author could not edit (each says why).
#[test]
fn no_string_errors_below_the_cli_edge() {
    const DEBTS: &[(&str, &str)] = &[];
    assert_eq!(
        string_errors(
            "fn f() -> Result<(u16, Duration), String> {} Result<String> Result<Vec<String>, E>"
        ),
        ["Result<(u16, Duration), String>"]
    );
    let mut bad = Vec::new();
    for (path, top, code) in sources() {
        let rel = relative(&path);
        if top == "cli" || DEBTS.iter().any(|(f, _)| *f == rel) {
            continue;
        }
        for t in string_errors(&code) {
            bad.push(format!("{rel}: {t}"));
        }
    }
    assert!(
        bad.is_empty(),
        "errors that are a bare String below the CLI edge (give them a type):\n{}",
        bad.join("\n")
    );
}

/// Each line with its string and character literals blanked (so a brace
/// in a message or a `'{'` does not count).
fn without_literals(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push_str("\"\"");
            }
            '\'' if matches!(chars.peek(), Some('{' | '}')) => {
                chars.next();
                out.push_str("' '");
            }
            _ => out.push(c),
        }
    }
    out
}

/// `(name, first line, length in lines)` of every function in `code`.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<String> = code.lines().map(without_literals).collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let before_ok = words[..at]
            .iter()
            .all(|w| matches!(*w, "pub" | "async" | "const" | "unsafe") || w.starts_with("pub("));
        if !before_ok || at + 1 >= words.len() {
            continue;
        }
        let name: String = words[at + 1]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: from the first `{` at or after the signature to its match.
        let (mut depth, mut opened) = (0i64, false);
        for (j, l) in lines.iter().enumerate().skip(i) {
            if !opened && l.trim_end().ends_with(';') && !l.contains('{') {
                break; // a declaration without a body
            }
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                found.push((name.clone(), i + 1, j - i + 1));
                break;
            }
        }
    }
    found
}

/// No function over 120 lines in `src/` (tests apart); the one listed is a
/// known debt in code this rule's author could not edit (issue 38's scope).
#[test]
fn no_function_over_120_lines() {
    const MAX: usize = 120;
    const DEBTS: &[(&str, &str)] = &[];
    let f = functions("fn a() {\n    let s = \"}\";\n    let c = '{';\n}\nfn b();\n");
    assert_eq!(f, [("a".to_string(), 1, 4)]);
    let mut long = Vec::new();
    for (path, _, code) in sources() {
        let rel = relative(&path);
        for (name, line, n) in functions(&code) {
            let debt = DEBTS.iter().any(|(f, d)| *f == rel && *d == name);
            if n > MAX && !debt {
                long.push(format!("{rel}:{line} {name}: {n} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

/// Store keys are built and read in `store::key` alone (issue 38, item 5):
/// no module outside `src/store` holds a key family's literal (`"oci/`,
/// `"image/{`, `"talosctl/`, `"factory/`, `"schematic/`, `"status/mirror`),
/// builds one with `format!("factory{..}")`, or strips or tests a key's
/// family prefix off a string. (`"image/` alone is also a media type and an
/// export tree's folder: only the key's shape, `"image/{`, is refused.)
#[test]
fn no_module_outside_the_store_builds_or_parses_key_strings() {
    let literals = [
        "\"oci/",
        "\"image/{",
        "\"talosctl/",
        "\"factory/",
        "\"factory{",
        "\"schematic/",
        "\"status/mirror",
    ];
    let parses = ["strip_prefix(\"image/", "starts_with(\"image/"];
    for (path, top, code) in sources() {
        if top == "store" {
            continue;
        }
        for l in literals.iter().chain(&parses) {
            assert!(
                !code.contains(l),
                "{}: holds `{l}`: a store key is built or read outside store::key",
                path.display()
            );
        }
    }
}

/// The store's facade, its read paths and the fills never branch on what
/// kind of backend holds the bytes (issue 38, item 6): each behaviour is a
/// capability of the backend or of its object handle (`stage_object`,
/// `read_ready`/`read_rest`, `keep_open`, `replaced`), and the trait has
/// no local-only hook. `Kind` is for messages and metrics only.
#[test]
fn the_store_facade_never_branches_on_the_backend_kind() {
    let facade = [
        "store/mod.rs",
        "store/objects.rs",
        "store/entries.rs",
        "store/read.rs",
        "store/checked.rs",
        "store/pieces.rs",
        "store/tier.rs",
        "fill.rs",
    ];
    let mut seen = 0;
    for (path, _, code) in sources() {
        let rel = path.to_string_lossy();
        if rel.ends_with("store/backend.rs") {
            for hook in ["local_dir", "fn file(", "upload_outside_lock", "is_remote"] {
                assert!(
                    !code.contains(hook),
                    "{rel}: the Backend trait carries a local-only hook `{hook}`"
                );
            }
        }
        if !facade.iter().any(|f| rel.ends_with(&format!("src/{f}"))) {
            continue;
        }
        seen += 1;
        for branch in [
            "is_remote",
            "local_dir",
            "upload_outside_lock",
            "Kind::",
            ".file()",
            "local::read",
            "LocalObject",
            "store::local",
        ] {
            // (`Kind::` as a word: `io::ErrorKind::` is not the backend's.)
            let found = code.match_indices(branch).any(|(i, _)| {
                !branch.starts_with(char::is_alphabetic)
                    || !code[..i]
                        .chars()
                        .next_back()
                        .is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            assert!(
                !found,
                "{rel}: branches on the backend kind or reaches the local backend (`{branch}`)"
            );
        }
    }
    assert_eq!(seen, facade.len(), "every facade file was read");
}
