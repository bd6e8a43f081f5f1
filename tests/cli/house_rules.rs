//! The invariants of ARCHITECTURE.md that a scan of `src/` can check:
//! nothing lower imports anything higher (the code map's layers below),
//! the YAML parser (`serde_norway`) only behind `yaml`, `unsafe` only where ARCHITECTURE.md says,
//! the HTTP edge names no store type, no error is a bare `String` below
//! the CLI edge, no function runs over 120 lines (tests included), no file over 800 lines of code, no module doc over 30 lines, no import cycle, and the pure modules reach no I/O. A new module fails here until it is placed in a layer (and
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

/// Every `.rs` file of `src/` with its whole text (tests included), each
/// line cut at its `//`: `(path, text)`.
fn every_source_file() -> Vec<(PathBuf, String)> {
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
    let mut files = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// Lines of code of a file's own text, its tests left out: the lines that
/// are not blank and not a plain `//` comment (doc comments count: they
/// are what a reader of the module reads).
fn lines_of_code(text: &str) -> usize {
    without_test_items(text)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !l.starts_with("//") || l.starts_with("///") || l.starts_with("//!"))
        .count()
}

/// No file of `src/` over 800 lines of code before its tests (issue 51):
/// a module that grows past it is split into focused ones.
#[test]
fn no_file_over_800_lines_of_code() {
    const MAX: usize = 800;
    assert_eq!(
        lines_of_code("//! doc\n\n// note\nfn a() {}\n#[cfg(test)]\nmod tests {\n fn b() {}\n}\n"),
        2
    );
    let mut big = Vec::new();
    for (path, text) in every_source_file() {
        let rel = relative(&path);
        if rel.ends_with("/tests.rs") {
            continue;
        }
        let n = lines_of_code(&text);
        if n > MAX {
            big.push(format!("{rel}: {n} lines of code"));
        }
    }
    assert!(
        big.is_empty(),
        "files over {MAX} lines of code before their tests (split them):\n{}",
        big.join("\n")
    );
}

/// No function over 120 lines anywhere in `src/`, its unit tests included
/// (issue 51: a test is read as often as the code it holds).
#[test]
fn no_function_over_120_lines_tests_included() {
    const MAX: usize = 120;
    let f = functions("fn a() {\n    let s = \"}\";\n    let c = '{';\n}\nfn b();\n");
    assert_eq!(f, [("a".to_string(), 1, 4)]);
    let mut long = Vec::new();
    for (path, text) in every_source_file() {
        let rel = relative(&path);
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        for (name, line, n) in functions(&code) {
            if n > MAX {
                long.push(format!("{rel}:{line} {name}: {n} lines"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX} lines, tests included (split them into named steps):\n{}",
        long.join("\n")
    );
}

/// The module path of a file of `src/` (`store::entries` for
/// `store/entries.rs`, `store` for `store/mod.rs`); `None` for the crate
/// root and unit-test files.
fn module_path(path: &Path) -> Option<Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rel = path
        .strip_prefix(&src)
        .ok()?
        .to_str()?
        .trim_end_matches(".rs");
    let mut segs: Vec<String> = rel.split('/').map(str::to_string).collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    if segs == ["lib"] || segs == ["main"] || segs.last().is_some_and(|s| s == "tests") {
        return None;
    }
    Some(segs)
}

/// The paths a text names from `crate::`, `super::` and `self::`, as
/// module segments from the crate root (a `{a, b::c}` group expanded),
/// resolved against `at`, the naming module's own path.
fn named_paths(code: &str, at: &[String]) -> Vec<Vec<String>> {
    fn path_at(s: &str) -> (Vec<String>, usize) {
        let mut segs = Vec::new();
        let mut i = 0;
        loop {
            let word: String = s[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if word.is_empty() {
                return (segs, i);
            }
            i += word.len();
            segs.push(word);
            if s[i..].starts_with("::") && !s[i + 2..].starts_with('{') {
                i += 2;
            } else {
                return (segs, i);
            }
        }
    }
    fn group(s: &str, base: &[String], out: &mut Vec<Vec<String>>) -> usize {
        // `s` starts after a `{`; answers the length up to its `}`.
        let mut i = 0;
        while i < s.len() {
            let c = s[i..].chars().next().unwrap();
            if c == '}' {
                return i + 1;
            }
            if c.is_ascii_alphabetic() || c == '_' {
                let (segs, n) = path_at(&s[i..]);
                i += n;
                let mut full = base.to_vec();
                full.extend(segs);
                if s[i..].starts_with("::{") {
                    i += 3 + group(&s[i + 3..], &full, out);
                } else {
                    out.push(full);
                }
                continue;
            }
            i += c.len_utf8();
        }
        s.len()
    }
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (i, _) in code.match_indices(start) {
            if code[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            {
                continue; // `super::super::x` is read from its first `super`
            }
            let mut base: Vec<String> = match start {
                "crate::" => Vec::new(),
                "self::" => at.to_vec(),
                _ => at[..at.len().saturating_sub(1)].to_vec(),
            };
            let mut rest = &code[i + start.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            if let Some(r) = rest.strip_prefix('{') {
                group(r, &base, &mut out);
                continue;
            }
            let (segs, n) = path_at(rest);
            base.extend(segs);
            if rest[n..].starts_with("::{") {
                group(&rest[n + 3..], &base, &mut out);
            } else {
                out.push(base);
            }
        }
    }
    out
}

/// `module -> the modules it names`, between files of `src/` (tests apart),
/// leaving out a module's own ancestors and descendants (a parent declares
/// and re-exports its children; a child uses its parent's items).
fn module_graph() -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(Vec<String>, String)> = every_source_file()
        .into_iter()
        .filter_map(|(p, text)| {
            let segs = module_path(&p)?;
            let code: String = without_test_items(&text)
                .lines()
                .map(|l| without_literals(l.split("//").next().unwrap()))
                .collect::<Vec<_>>()
                .join("\n");
            Some((segs, code))
        })
        .collect();
    let names: BTreeSet<String> = files.iter().map(|(s, _)| s.join("::")).collect();
    let related = |a: &str, b: &str| {
        a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
    };
    let mut graph = std::collections::BTreeMap::new();
    for (segs, code) in &files {
        let me = segs.join("::");
        let mut to = BTreeSet::new();
        for p in named_paths(code, segs) {
            // The longest module the path starts with.
            if let Some(m) = (1..=p.len())
                .rev()
                .map(|k| p[..k].join("::"))
                .find(|m| names.contains(m))
                && !related(&me, &m)
            {
                to.insert(m);
            }
        }
        graph.insert(me, to);
    }
    graph
}

#[test]
fn named_paths_resolve_groups_super_and_self() {
    let at = ["store".to_string(), "entries".to_string()];
    let got = named_paths(
        "use super::{objects::Obj, read};\nuse crate::fill::{Fills, x::{A, y}};\nlet a = self::inner::f(); super::super::cache::f();",
        &at,
    );
    let got: Vec<String> = got.iter().map(|p| p.join("::")).collect();
    for want in [
        "store::objects::Obj",
        "store::read",
        "fill::Fills",
        "fill::x::A",
        "fill::x::y",
        "store::entries::inner::f",
        "cache::f",
    ] {
        assert!(got.contains(&want.to_string()), "{want} in {got:?}");
    }
}

/// No module imports one that imports it back, directly or around a
/// longer loop (issue 51): a cycle is one module in two files; either
/// merge them or move what both need below both.
#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = module_graph();
    assert!(
        graph.len() > 50,
        "the graph was read ({} modules)",
        graph.len()
    );
    let mut cycles = std::collections::BTreeMap::new();
    for (from, tos) in &graph {
        for to in tos {
            // A way back from `to` to `from`, breadth first.
            let mut prev = std::collections::BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([to.clone()]);
            prev.insert(to.clone(), None::<String>);
            while let Some(m) = queue.pop_front() {
                if &m == from {
                    let mut loop_ = vec![from.clone()];
                    let mut at = prev[&m].clone();
                    while let Some(p) = at {
                        loop_.push(p.clone());
                        at = prev[&p].clone();
                    }
                    loop_.reverse();
                    loop_.insert(0, from.clone());
                    let mut key = loop_[..loop_.len() - 1].to_vec();
                    key.sort();
                    cycles.entry(key).or_insert(loop_.join(" -> "));
                    break;
                }
                for n in graph.get(&m).into_iter().flatten() {
                    if !prev.contains_key(n) {
                        prev.insert(n.clone(), Some(m.clone()));
                        queue.push_back(n.clone());
                    }
                }
            }
        }
    }
    let shown: Vec<String> = cycles.into_values().collect();
    assert!(
        shown.is_empty(),
        "modules that import each other:\n{}",
        shown.join("\n")
    );
}

/// The pure modules (issue 51): what they compute is a function of their
/// inputs, so they import nothing that does I/O, constants included: no
/// module that reads or writes files, the store or the network, and no I/O
/// of the standard library or tokio. Held over every module they reach.
#[test]
fn pure_modules_import_nothing_that_does_io() {
    const PURE: &[&str] = &["machineconfig", "matrix", "schematic", "upgrade"];
    const IO_MODULES: &[&str] = &[
        "atomic",
        "input",
        "store",
        "upstream",
        "metrics",
        "inventory",
        "known_schematics",
        "fill",
        "cache",
        "verifiers",
        "factory",
        "registry",
        "datavolume",
        "compose",
        "mirror",
        "http",
        "cli",
    ];
    const IO_CALLS: &[&str] = &[
        "std::fs",
        "std::process",
        "std::env",
        "std::net::Tcp",
        "std::net::Udp",
        "std::io::stdin",
        "std::io::stdout",
        "tokio",
        "reqwest",
        "File::",
    ];
    // The top-level modules each top-level module names.
    let mut uses_of: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    let mut code_of: std::collections::BTreeMap<String, String> = Default::default();
    for (path, top, code) in sources() {
        uses_of.entry(top.clone()).or_default().extend(uses(&code));
        let e = code_of.entry(top).or_default();
        e.push_str(&format!("\n// {}\n", path.display()));
        e.push_str(&code);
    }
    let mut reach: Vec<String> = PURE.iter().map(|s| s.to_string()).collect();
    let mut i = 0;
    while i < reach.len() {
        for u in uses_of.get(&reach[i]).into_iter().flatten() {
            if !reach.contains(u) {
                reach.push(u.clone());
            }
        }
        i += 1;
    }
    let mut bad = Vec::new();
    for m in &reach {
        if IO_MODULES.contains(&m.as_str()) {
            bad.push(format!("a pure module reaches {m}, which does I/O"));
        }
        for call in IO_CALLS {
            if code_of.get(m).is_some_and(|c| c.contains(call)) {
                bad.push(format!("{m} (reached from a pure module) uses {call}"));
            }
        }
    }
    assert!(
        reach.len() > PURE.len(),
        "the pure modules' imports were read"
    );
    assert!(
        bad.is_empty(),
        "pure modules reach I/O:\n{}",
        bad.join("\n")
    );
}

/// The chart's default factory URL, written in the pure
/// `machineconfig::cozystack`, is the service's default upstream.
#[test]
fn the_charts_default_factory_url_is_the_services() {
    assert_eq!(
        talos_gen::machineconfig::cozystack::DEFAULT_IMAGE_FACTORY_URL,
        talos_gen::upstream::DEFAULT_FACTORY_URL
    );
}

/// ARCHITECTURE.md names only what exists (issue 51): every file or folder
/// it names in backticks (`src/...`, `tests/...`, `bench/...`,
/// `scripts/...`, `docs/...`) is there, and every test it names as
/// `FILE::test_name` is a function of that file.
#[test]
fn architecture_md_names_only_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let (mut files, mut tests, mut missing) = (0, 0, Vec::new());
    for (n, tok) in text.split('`').enumerate() {
        if n % 2 == 0 {
            continue; // outside backticks
        }
        let tok = tok.trim();
        if ![
            "src/",
            "tests/",
            "bench/",
            "scripts/",
            "docs/",
            "matrix/",
            "examples/",
        ]
        .iter()
        .any(|p| tok.starts_with(p))
            || tok.contains(' ')
        {
            continue;
        }
        let (file, test) = match tok.split_once(".rs::") {
            Some((f, t)) => (format!("{f}.rs"), Some(t)),
            None => (tok.trim_end_matches('/').to_string(), None),
        };
        let p = root.join(&file);
        if !p.exists() {
            missing.push(format!("`{tok}`: no {file}"));
            continue;
        }
        files += 1;
        if let Some(t) = test {
            tests += 1;
            let name = t.rsplit("::").next().unwrap();
            let body = std::fs::read_to_string(&p).unwrap();
            if !body.contains(&format!("fn {name}(")) {
                missing.push(format!("`{tok}`: no fn {name} in {file}"));
            }
        }
    }
    assert!(
        files > 20 && tests > 10,
        "the map names files ({files}) and tests ({tests})"
    );
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what is not there:\n{}",
        missing.join("\n")
    );
}

/// Module docs say what and why in at most 30 lines (issue 51): history
/// belongs in the commit log, figures in `docs/`.
#[test]
fn no_module_doc_over_30_lines() {
    const MAX: usize = 30;
    let mut long = Vec::new();
    for (path, text) in every_source_file() {
        let n = text.lines().take_while(|l| l.starts_with("//!")).count();
        if n > MAX {
            long.push(format!("{}: {n} lines of module doc", relative(&path)));
        }
    }
    assert!(
        long.is_empty(),
        "module docs over {MAX} lines:\n{}",
        long.join("\n")
    );
}
