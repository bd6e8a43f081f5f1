//! Property tests (stable toolchain, proptest) over every parser that sees
//! network or file input: `/image` path segments, `Range` headers (the
//! `/image` parser and the `/v2/` blob one), versions, schematics, the
//! machineconfig request body with its values file, secrets bundle and
//! patches, OCI names/digests/references, `--mirror-upstream` tables and
//! image references (the mirror config's `extraImages`), `/talosctl` and
//! `/pxe` paths and the iPXE rewrite. Each must return a
//! value or an error, never panic, and what it accepts must satisfy the
//! obvious invariants; a parsed schematic's canonical form is stable.
//!
//! Failure seeds proptest saved are in `tests/proptest-regressions/parsers.txt`
//! (where proptest reads them for this file; it runs them before new cases).

use axum::http::HeaderValue;
use proptest::prelude::*;
use talos_gen::factory::ImageKey;
use talos_gen::http::image::{RangeAsk, parse_range};
use talos_gen::machineconfig::{Request, cozystack, duration, patch, quantity, secrets};
use talos_gen::registry::names;
use talos_gen::schematic::Schematic;
use talos_gen::version::Version;

/// Strings made of the pieces attackers and typos use on paths.
fn path_segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,80}",
        "[a-f0-9]{60,68}",
        "v?[0-9]{1,3}\\.[0-9]{1,3}(\\.[0-9]{1,3})?(-[a-z0-9.]{0,10})?",
        "[a-z0-9._-]{0,40}\\.(raw\\.xz|iso|qcow2|tar\\.gz|raw\\.zst)(\\.sha256)?",
        prop::collection::vec(
            prop_oneof![
                Just("..".to_string()),
                Just("%2e%2e".to_string()),
                Just("%2F".to_string()),
                Just("/".to_string()),
                Just("\\".to_string()),
                Just("\0".to_string()),
                Just("%00".to_string()),
                "[a-z0-9]{1,8}",
            ],
            0..6
        )
        .prop_map(|v| v.concat()),
    ]
}

/// YAML-ish documents built from the keys the request body knows.
fn yamlish() -> impl Strategy<Value = String> {
    let keys = prop_oneof![
        Just("clusterName"),
        Just("endpoint"),
        Just("talosVersion"),
        Just("kubernetesVersion"),
        Just("instanceType"),
        Just("values"),
        Just("version"),
        Just("talos"),
        Just("kubelet"),
        Just("resources"),
        Just("cpu"),
        Just("memory"),
        Just("systemReservedMemory"),
        Just("gpus"),
        Just("roles"),
        Just("registryMirrors"),
        Just("schematicID"),
        Just("configPatches"),
        Just("machine"),
        Just("cluster"),
        Just("$patch"),
        Just("secrets"),
        Just("nameservers"),
        Just("bogus"),
        Just("network"),
        Just("interfaces"),
        Just("kind"),
        Just("apiVersion"),
    ];
    let vals = prop_oneof![
        Just("{}"),
        Just("[]"),
        Just("~"),
        Just("1"),
        Just("-1"),
        Just("1e400"),
        Just("v1.13"),
        Just("v1.35.0"),
        Just("999999999999999999999"),
        Just("u1.medium"),
        Just("'4'"),
        Just("8Gi"),
        Just("-5Mi"),
        Just("1.5"),
        Just("true"),
        Just("[a, {b: c}]"),
        Just("{$patch: delete}"),
        Just("delete"),
        Just("[{interface: eth0, $patch: delete}, {$patch: delete}]"),
        Just("{a: {$patch: delete}, b: [{$patch: delete}]}"),
        Just("&a [*a]"),
        Just("*a"),
        Just("!!binary aGk="),
        Just("\"\\u0000\""),
        Just("https://x:6443"),
        Just("|\n  multi\n  line"),
    ];
    prop::collection::vec((keys, vals, 0usize..4), 1..8).prop_map(|items| {
        let mut doc = String::new();
        for (k, v, depth) in items {
            doc.push_str(&"  ".repeat(depth));
            doc.push_str(k);
            doc.push_str(": ");
            doc.push_str(v);
            doc.push('\n');
        }
        doc
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    #[test]
    fn image_path_segments(s in path_segment(), v in path_segment(), a in path_segment()) {
        if let Ok(k) = ImageKey::parse(&s, &v, &a) {
            // Whatever is accepted stays one path segment each, no traversal.
            // The typed key parses back to itself (`store::Key::kind`).
            prop_assert_eq!(k.store_key().kind().key(), k.store_key());
            let key = k.store_key().to_string();
            prop_assert!(!key.contains(".."), "{key}");
            prop_assert!(!key.contains('\\') && !key.contains('\0') && !key.contains('%'), "{key}");
            prop_assert_eq!(key.split('/').count(), 4, "{}", key);
        }
    }

    #[test]
    fn talosctl_and_pxe_paths(v in path_segment(), a in prop_oneof![
        path_segment(),
        "talosctl-[a-z0-9./-]{0,20}(\\.exe)?",
        "[a-z0-9]{1,10}-(amd64|arm64|x86)(-secureboot)?",
    ]) {
        // No segment that walks (`export --format http` makes paths of keys).
        let walks = |k: &str| k.split('/').any(|p| p.is_empty() || p == "." || p == "..")
            || k.contains('%') || k.contains('\\') || k.contains('\0');
        if let Ok(k) = talos_gen::factory::TalosctlKey::parse(&v, &a) {
            prop_assert_eq!(k.store_key().kind().key(), k.store_key());
            let key = k.store_key().to_string();
            prop_assert!(!walks(&key), "{key}");
            prop_assert_eq!(key.split('/').count(), 3, "{}", key);
        }
        let id = "0".repeat(64);
        if let Ok(d) = talos_gen::factory::FactoryDoc::pxe(&id, &v, &a) {
            prop_assert_eq!(d.store_key().kind().key(), d.store_key());
            let key = d.store_key().to_string();
            prop_assert!(!walks(&key), "{key}");
            prop_assert_eq!(key.split('/').count(), 5, "{}", key);
        }
        // The rewrite never panics and keeps every line.
        let out = talos_gen::factory::rewrite_pxe(&a, "https://m.example");
        prop_assert_eq!(out.lines().count(), a.lines().count());
    }

    #[test]
    fn range_headers(h in prop_oneof![
        "\\PC{0,40}",
        "bytes=[0-9]{0,21}-[0-9]{0,21}",
        "bytes= ?-?[0-9]{0,5} ?- ?[0-9]{0,5}(,[0-9]{0,3}-[0-9]{0,3})?",
    ], len in prop_oneof![Just(0u64), 0u64..10_000, Just(u64::MAX)]) {
        match parse_range(&h, len) {
            RangeAsk::Partial(r) => {
                prop_assert!(r.start < r.end, "{h} -> {r:?}");
                prop_assert!(r.end <= len, "{h} -> {r:?} over {len}");
            }
            RangeAsk::Full | RangeAsk::Unsatisfiable => {}
        }
    }

    #[test]
    fn registry_range_headers(
        h in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..40),
            "\\PC{0,40}".prop_map(String::into_bytes),
            "bytes=[0-9]{0,21}-[0-9]{0,21}".prop_map(String::into_bytes),
            "[ \\t]?bytes= ?[-+]?[0-9]{0,5} ?- ?[-+]?[0-9]{0,5}(,[0-9]{0,3}-[0-9]{0,3})?[ \\t]?".prop_map(String::into_bytes),
        ],
        size in prop_oneof![Just(0u64), Just(1u64), 0u64..10_000, Just(u64::MAX - 1), Just(u64::MAX)],
    ) {
        // Whatever bytes arrive as the header (most are not a valid
        // HeaderValue; those that are may still not be text).
        let value = HeaderValue::from_bytes(&h).ok();
        // The one Range parser (shared by /image and /v2 blobs), on the same
        // text: a half-open range inside the body.
        if let Some(text) = value.as_ref().and_then(|v| v.to_str().ok()) {
            match parse_range(text, size) {
                RangeAsk::Partial(r) => {
                    prop_assert!(r.start < r.end, "{text} -> {r:?}");
                    prop_assert!(r.end <= size, "{text} -> {r:?} over {size}");
                }
                RangeAsk::Full | RangeAsk::Unsatisfiable => {}
            }
        }
    }

    #[test]
    fn versions(s in prop_oneof!["\\PC{0,40}", "v?[0-9]{1,25}(\\.[0-9]{0,25}){0,3}(-[\\PC]{0,10})?"]) {
        let _ = Version::parse(&s);
        if let Ok(v) = Version::parse_named(&s, "talosVersion") {
            prop_assert_eq!(Version::parse(&v.to_string()).ok(), Some(v));
        }
    }

    #[test]
    fn schematics(doc in prop_oneof![yamlish(), "\\PC{0,200}"]) {
        if let Ok(s) = Schematic::parse(&doc) {
            let c = s.canonical();
            prop_assert_eq!(Schematic::parse(&c).map(|s| s.canonical()).ok(), Some(c));
        }
    }

    #[test]
    fn machineconfig_request_body_and_values(doc in yamlish()) {
        // The POST body, as the HTTP handler reads it.
        let _ = talos_gen::yaml::from_str::<Request>(&doc, "body");
        // The same text as a values file.
        if let Ok(v) = talos_gen::yaml::value_from_str(&doc, "values") {
            let _ = cozystack::Values::from_value(v, "values");
        }
        let _ = secrets::Bundle::parse(&doc, "secrets");
    }

    #[test]
    fn patches_parse_and_apply(p in yamlish()) {
        let base = "version: v1alpha1\nmachine:\n  type: worker\n  kubelet: {}\ncluster:\n  network: {}\n";
        let mut cfg = Vec::new();
        patch::apply(&mut cfg, patch::parse(base, "base").expect("base config parses"), "base")
            .expect("base config applies");
        if let Ok(pt) = patch::parse(&p, "patch") {
            let _ = patch::apply(&mut cfg, pt, "patch");
        }
    }

    #[test]
    fn json_patches_parse_and_apply(
        ops in prop::collection::vec(
            (
                prop_oneof![Just("add"), Just("remove"), Just("replace"), Just("move"), Just("copy"), Just("test"), Just("bogus")],
                prop_oneof![Just("/machine"), Just("/machine/type"), Just("/machine/kubelet/extraArgs"), Just("/cluster/network/podSubnets/-"), Just("/cluster/network/podSubnets/0"), Just("/version"), Just(""), Just("/"), Just("/x~1y"), Just("machine")],
                prop_oneof![Just("1"), Just("\"s\""), Just("null"), Just("{}"), Just("[]"), Just("{\"a\": [1, {\"b\": null}]}"), Just("true")],
            ),
            0..6,
        )
    ) {
        let base = "version: v1alpha1\nmachine:\n  type: worker\n  kubelet: {}\ncluster:\n  network: {podSubnets: [10.0.0.0/8]}\n";
        let mut cfg = Vec::new();
        patch::apply(&mut cfg, patch::parse(base, "base").expect("base config parses"), "base")
            .expect("base config applies");
        let list: Vec<String> = ops
            .iter()
            .map(|(op, path, v)| format!("{{\"op\": \"{op}\", \"path\": \"{path}\", \"from\": \"{path}\", \"value\": {v}}}"))
            .collect();
        let text = format!("[{}]", list.join(", "));
        if let Ok(pt) = patch::parse(&text, "patch") {
            let _ = patch::apply(&mut cfg, pt, "patch");
        }
    }

    #[test]
    fn quantities_and_durations(s in prop_oneof!["\\PC{0,30}", "-?[0-9]{0,25}(\\.[0-9]{0,25})?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|m|e[0-9]{1,4}|%)?", "([0-9]{1,20}(ns|us|ms|s|m|h)){0,4}"]) {
        if quantity::is_memory(&s) {
            let _ = quantity::to_float(&s);
        }
        if quantity::is_cpu(&s) {
            let _ = quantity::cpu_millis_f(&s);
            let _ = quantity::cpu_millis_int(&s);
        }
        if let Some(ns) = duration::parse(&s) {
            let _ = duration::format(ns);
        }
        let _ = talos_gen::cli::common::parse_size(&s);
    }

    #[test]
    fn oci_names(s in prop_oneof![
        "\\PC{0,80}",
        "sha256:[a-f0-9]{60,68}",
        "[a-z0-9]{1,10}(:[0-9]{1,6})?(/[a-z0-9._-]{1,12}){0,4}(:[A-Za-z0-9._-]{0,20})?(@sha256:[a-f0-9]{64})?",
    ]) {
        if let Ok(d) = names::Digest::parse(&s) {
            prop_assert!(s.starts_with("sha256:") || s.starts_with("sha512:"), "{s} -> {d:?}");
        }
        let _ = names::Reference::parse(&s);
        let _ = names::is_repository(&s);
        let _ = names::is_installer_repository(&s);
        let _ = names::is_registry_host(&s);
        let _ = talos_gen::oci_ref::ImageRef::parse(&s).map(|r| r.normalised());
        let _ = names::check_base_url(&s);
        let _ = names::url_host(&s);
    }

    #[test]
    fn mirror_upstream_tables(items in prop::collection::vec(prop_oneof![
        "\\PC{0,40}",
        "[a-z0-9.:-]{0,20}=https?://[a-z0-9.:-]{0,20}(/[a-z]{0,5})?",
        "=[a-z]{0,5}",
        "[a-z]{0,5}=",
    ], 0..5)) {
        let _ = names::MirrorTable::parse(&items);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn version_parser_never_panics(s in "\\PC{0,80}") {
        let _ = Version::parse(&s);
    }

    #[test]
    fn version_like_strings(s in "v?[0-9]{1,12}(\\.[0-9]{0,12}){0,4}([-+][a-z0-9.+-]{0,8})?") {
        if let Ok(v) = Version::parse(&s) {
            // What parses prints back and parses to the same version.
            prop_assert_eq!(Version::parse(&v.to_string()).unwrap(), v);
        }
    }

    #[test]
    fn schematic_parser_never_panics(s in "\\PC{0,200}") {
        let _ = Schematic::parse(&s);
    }

    #[test]
    fn schematic_yaml_like_input(
        keys in proptest::collection::vec(
            prop_oneof![
                Just("customization"), Just("overlay"), Just("owner"), Just("meta"),
                Just("key"), Just("value"), Just("extraKernelArgs"), Just("systemExtensions"),
                Just("officialExtensions"), Just("bootloader"), Just("secureboot"),
                Just("diskImage"), Just("sectorSize"), Just("options"), Just("image"), Just("name"),
            ],
            1..6,
        ),
        vals in proptest::collection::vec(
            prop_oneof![
                Just("{}"), Just("[]"), Just("~"), Just("1"), Just("-1"), Just("256"),
                Just("true"), Just("'x'"), Just("[a, b]"), Just("{key: 3, value: v}"),
                Just("[{key: 300}]"), Just("\"a\\nb\""), Just("0x1F"), Just("1.5"), Just("&a x"),
                Just("*a"), Just("!!binary aGk="), Just("grub"),
            ],
            1..6,
        ),
    ) {
        let mut doc = String::new();
        for (i, k) in keys.iter().enumerate() {
            doc.push_str(&"  ".repeat(i));
            doc.push_str(k);
            doc.push_str(": ");
            if let Some(v) = vals.get(i)
                && i + 1 == keys.len()
            {
                doc.push_str(v);
            }
            doc.push('\n');
        }
        if let Ok(s) = Schematic::parse(&doc) {
            // The canonical form parses back to the same schematic and ID.
            let canonical = s.canonical();
            let again = Schematic::parse(&canonical).expect("canonical form parses");
            prop_assert_eq!(again.canonical(), canonical);
        }
    }

    #[test]
    fn schematic_strings_round_trip(args in proptest::collection::vec("(?s).{0,20}", 0..4)) {
        // Any extension/kernel-arg strings survive the canonical encoding:
        // decoding the canonical YAML yields the same values (Go quoting works).
        // Excluded: a multi-line string whose first non-empty line starts
        // with a space; go-yaml v4 writes bytes that read back otherwise and
        // we reproduce Go's bytes. Two cases: (1) the string starts with the
        // space: the literal block gets the hint `|4` but its content is
        // indented by 2 under the dash, which no YAML parser reads back;
        // (2) the string starts with line breaks: v4 writes no hint (go-yaml
        // issue #65), so a reader takes the indentation from that line and
        // drops its leading space (`"\n a"` reads back as `"\na"`).
        prop_assume!(!args.iter().any(|a| go_v4_loses_leading_space(a)));
        let s = Schematic {
            customization: talos_gen::schematic::Customization {
                extra_kernel_args: args.clone(),
                official_extensions: args.clone(),
                ..Default::default()
            },
            ..Default::default()
        };
        let canonical = s.canonical();
        let back = Schematic::parse(&canonical).expect("canonical form parses");
        prop_assert_eq!(&back.customization.extra_kernel_args, &args);
        prop_assert_eq!(back.canonical(), canonical);
    }
}

/// True for a multi-line string whose first non-empty line starts with a
/// space: go-yaml v4's literal block for it does not read back as written
/// (see `schematic_strings_round_trip`).
fn go_v4_loses_leading_space(s: &str) -> bool {
    s.contains('\n')
        && s.split(['\n', '\r'])
            .find(|line| !line.is_empty())
            .is_some_and(|line| line.starts_with(' '))
}
