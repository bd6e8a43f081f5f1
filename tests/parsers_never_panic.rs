//! Property tests: the version and schematic parsers never panic, whatever
//! they are given, and a parsed schematic's canonical form is stable.

use proptest::prelude::*;
use talos_gen::schematic::Schematic;
use talos_gen::version::Version;

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
        // Excluded: a multi-line string starting with a space inside a
        // sequence. go-yaml writes it as a literal block with the indentation
        // hint `|4` but indents the content by 2 under the dash, which no YAML
        // parser reads back; we reproduce Go's bytes.
        prop_assume!(!args.iter().any(|a| a.contains('\n') && a.starts_with(' ')));
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
