//! Schematics: strict parsing, the canonical encoding (via `goyaml`) and the
//! sha256 ID, identical to the Image Factory's.
//!
//! The factory (`pkg/schematic` in siderolabs/image-factory) decodes the
//! document with known-fields checking into Go structs and re-encodes them
//! with `go.yaml.in/yaml/v4`'s `Marshal` (v3 defaults: 4-space indent, legacy
//! quoting). The ID is the lowercase hex sha256 of those bytes. This module
//! reproduces both halves:
//! - decoding: unknown fields, duplicate keys and wrong types are errors;
//!   scalars given where Go wants a string are taken as their text, as Go
//!   does (`extraKernelArgs: [1]` is `"1"`); `null` is the zero value; meta
//!   keys must be integers in 0..255; `bootloader` is one of `none`,
//!   `dual-boot`, `sd-boot`, `grub` (any case); `owner` is rejected (the
//!   factory accepts it only in its Enterprise edition);
//! - encoding: Go struct field order, `omitempty` rules (zero strings,
//!   empty lists, false, 0 and all-zero structs left out; `customization`
//!   always written), overlay options with map keys in Go's sort order.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::goyaml::{self, Flavor, Map, Node, go_float};

/// Largest schematic document accepted (the HTTP route answers 413 above it).
pub const MAX_SIZE: usize = 1024 * 1024;

/// A decoded schematic.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schematic {
    pub overlay: Overlay,
    pub customization: Customization,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overlay {
    pub image: String,
    pub name: String,
    /// Free-form options, already in emission form (keys sorted as Go sorts them).
    pub options: Vec<(String, Node)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Customization {
    pub embedded_machine_configuration: String,
    pub extra_kernel_args: Vec<String>,
    pub meta: Vec<MetaValue>,
    pub official_extensions: Vec<String>,
    pub bootloader: Bootloader,
    pub secureboot: SecureBoot,
    /// Disk image sector size in bytes (0: unset, the factory's default 512).
    pub disk_image_sector_size: u64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetaValue {
    pub key: u8,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SecureBoot {
    pub enroll_keys: String,
    pub include_well_known_certificates: bool,
}

/// The bootloader of disk images (Talos' `imageropts.BootloaderKind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Bootloader {
    #[default]
    None,
    DualBoot,
    SdBoot,
    Grub,
}

impl Bootloader {
    pub fn as_str(self) -> &'static str {
        match self {
            Bootloader::None => "none",
            Bootloader::DualBoot => "dual-boot",
            Bootloader::SdBoot => "sd-boot",
            Bootloader::Grub => "grub",
        }
    }
    fn parse(s: &str) -> Option<Bootloader> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Some(Bootloader::None),
            "dual-boot" => Some(Bootloader::DualBoot),
            "sd-boot" => Some(Bootloader::SdBoot),
            "grub" => Some(Bootloader::Grub),
            _ => None,
        }
    }
}

// ---- strict decoding -------------------------------------------------------

/// A string field as Go's yaml decodes it: any scalar's text.
#[derive(Debug, Default)]
struct GoStr(String);

impl<'de> Deserialize<'de> for GoStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<GoStr, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GoStr;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<GoStr, E> {
                Ok(GoStr(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<GoStr, E> {
                Ok(GoStr(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<GoStr, E> {
                Ok(GoStr(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<GoStr, E> {
                Ok(GoStr(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<GoStr, E> {
                Ok(GoStr(go_float(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// `Option<GoStr>`: null is Go's zero value.
type OptStr = Option<GoStr>;

fn s(v: OptStr) -> String {
    v.map(|g| g.0).unwrap_or_default()
}

/// An unsigned integer field as Go decodes it (integers, integral floats, null = 0).
#[derive(Debug, Default)]
struct GoUint(u64);

impl<'de> Deserialize<'de> for GoUint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<GoUint, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GoUint;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a non-negative integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<GoUint, E> {
                Ok(GoUint(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<GoUint, E> {
                u64::try_from(v)
                    .map(GoUint)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<GoUint, E> {
                if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 1.8e19 {
                    Ok(GoUint(v as u64))
                } else {
                    Err(E::custom(format!("{v} is not a non-negative integer")))
                }
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<GoUint, E> {
                Ok(GoUint(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// A bool field as Go decodes it (also YAML 1.1 `yes`/`no`/`on`/`off`/`y`/`n`).
#[derive(Debug, Default)]
struct GoBool(bool);

impl<'de> Deserialize<'de> for GoBool {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<GoBool, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GoBool;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a boolean")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<GoBool, E> {
                Ok(GoBool(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<GoBool, E> {
                match v {
                    "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Ok(GoBool(true)),
                    "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Ok(GoBool(false)),
                    _ => Err(E::invalid_type(de::Unexpected::Str(v), &self)),
                }
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<GoBool, E> {
                Ok(GoBool(false))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSchematic {
    #[serde(default)]
    owner: OptStr,
    #[serde(default)]
    overlay: Option<RawOverlay>,
    #[serde(default)]
    customization: Option<RawCustomization>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawOverlay {
    #[serde(default)]
    image: OptStr,
    #[serde(default)]
    name: OptStr,
    #[serde(default)]
    options: Option<crate::yaml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCustomization {
    #[serde(default)]
    embedded_machine_configuration: OptStr,
    #[serde(default)]
    extra_kernel_args: Option<Vec<OptStr>>,
    #[serde(default)]
    meta: Option<Vec<Option<RawMeta>>>,
    #[serde(default)]
    system_extensions: Option<RawExtensions>,
    #[serde(default)]
    bootloader: OptStr,
    #[serde(default)]
    secureboot: Option<RawSecureBoot>,
    #[serde(default)]
    disk_image: Option<RawDiskImage>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMeta {
    #[serde(default)]
    key: Option<GoUint>,
    #[serde(default)]
    value: OptStr,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawExtensions {
    #[serde(default)]
    official_extensions: Option<Vec<OptStr>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSecureBoot {
    #[serde(default)]
    enroll_keys: OptStr,
    #[serde(default)]
    include_well_known_certificates: Option<GoBool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDiskImage {
    #[serde(default)]
    sector_size: Option<GoUint>,
}

fn strs(v: Option<Vec<OptStr>>) -> Vec<String> {
    v.unwrap_or_default().into_iter().map(s).collect()
}

impl Schematic {
    /// Parse a schematic (YAML or JSON) strictly. Every problem is bad input
    /// (exit 2, HTTP 400) whose message names the field at fault.
    pub fn parse(text: &str) -> Result<Schematic> {
        const WHAT: &str = "schematic";
        if text.len() > MAX_SIZE {
            return Err(Error::bad_input(format!(
                "{WHAT}: larger than {MAX_SIZE} bytes"
            )));
        }
        if crate::yaml::documents_from_str(text, WHAT)?.is_empty() {
            return Err(Error::bad_input(format!(
                "{WHAT}: empty document (write {{}} for the vanilla schematic)"
            )));
        }
        let raw: RawSchematic = crate::yaml::from_str(text, WHAT)?;
        if !s(raw.owner).is_empty() {
            return Err(Error::bad_input(
                "schematic: owner: the owner field is only supported in the Image Factory's Enterprise edition",
            ));
        }
        let overlay = match raw.overlay {
            None => Overlay::default(),
            Some(o) => Overlay {
                image: s(o.image),
                name: s(o.name),
                options: match o.options {
                    None | Some(crate::yaml::Value::Null) => Vec::new(),
                    Some(crate::yaml::Value::Mapping(m)) => {
                        match options_node(&crate::yaml::Value::Mapping(m), "overlay.options")? {
                            Node::Map(entries) => entries,
                            _ => Vec::new(),
                        }
                    }
                    Some(_) => {
                        return Err(Error::bad_input(
                            "schematic: overlay.options: expected a mapping",
                        ));
                    }
                },
            },
        };
        let c = raw.customization.unwrap_or_default();
        let mut meta = Vec::new();
        for (i, m) in c.meta.unwrap_or_default().into_iter().enumerate() {
            let m = m.unwrap_or_default();
            let key = m.key.map(|k| k.0).unwrap_or(0);
            let key = u8::try_from(key).map_err(|_| {
                Error::bad_input(format!(
                    "schematic: customization.meta[{i}].key: {key} is outside 0..255"
                ))
            })?;
            meta.push(MetaValue {
                key,
                value: s(m.value),
            });
        }
        let bootloader_text = s(c.bootloader);
        let bootloader = if bootloader_text.is_empty() {
            Bootloader::None
        } else {
            Bootloader::parse(&bootloader_text).ok_or_else(|| {
                Error::bad_input(format!(
                    "schematic: customization.bootloader: {bootloader_text:?} is not one of none, dual-boot, sd-boot, grub"
                ))
            })?
        };
        let sb = c.secureboot.unwrap_or_default();
        Ok(Schematic {
            overlay,
            customization: Customization {
                embedded_machine_configuration: s(c.embedded_machine_configuration),
                extra_kernel_args: strs(c.extra_kernel_args),
                meta,
                official_extensions: strs(c.system_extensions.and_then(|e| e.official_extensions)),
                bootloader,
                secureboot: SecureBoot {
                    enroll_keys: s(sb.enroll_keys),
                    include_well_known_certificates: sb
                        .include_well_known_certificates
                        .is_some_and(|b| b.0),
                },
                disk_image_sector_size: c.disk_image.and_then(|d| d.sector_size).map_or(0, |u| u.0),
            },
        })
    }

    /// The tree the factory's `Marshal` writes, in Go struct order with
    /// `omitempty` applied.
    pub fn to_node(&self) -> Node {
        let c = &self.customization;
        let overlay = &self.overlay;
        let overlay_zero =
            overlay.image.is_empty() && overlay.name.is_empty() && overlay.options.is_empty();
        let meta: Vec<Node> = c
            .meta
            .iter()
            .map(|m| {
                Map::new()
                    .field("key", m.key)
                    .field("value", m.value.as_str())
                    .into()
            })
            .collect();
        let extensions = Map::new().opt("officialExtensions", Node::strs(&c.official_extensions));
        let secureboot = Map::new()
            .opt("enrollKeys", c.secureboot.enroll_keys.as_str())
            .opt(
                "includeWellKnownCertificates",
                c.secureboot.include_well_known_certificates,
            );
        let disk = Map::new().opt("sectorSize", c.disk_image_sector_size);
        let customization = Map::new()
            .opt(
                "embeddedMachineConfiguration",
                c.embedded_machine_configuration.as_str(),
            )
            .opt("extraKernelArgs", Node::strs(&c.extra_kernel_args))
            .opt("meta", meta)
            .opt("systemExtensions", extensions)
            .opt(
                "bootloader",
                match c.bootloader {
                    Bootloader::None => "",
                    b => b.as_str(),
                },
            )
            .opt("secureboot", secureboot)
            .opt("diskImage", disk);
        Map::new()
            .some(
                "overlay",
                (!overlay_zero).then(|| {
                    Map::new()
                        .field("image", overlay.image.as_str())
                        .field("name", overlay.name.as_str())
                        .opt("options", Node::Map(overlay.options.clone()))
                }),
            )
            .field("customization", customization)
            .into()
    }

    /// The canonical YAML whose sha256 is the ID.
    pub fn canonical(&self) -> String {
        goyaml::to_string_flavor(&self.to_node(), Flavor::V4)
    }

    /// The 64-hex schematic ID.
    pub fn id(&self) -> String {
        id_of(self.canonical().as_bytes())
    }
}

/// Lowercase hex sha256 of `bytes`.
pub fn id_of(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Parse `text` and return `(id, canonical)`.
pub fn id_and_canonical(text: &str) -> Result<(String, String)> {
    let sch = Schematic::parse(text)?;
    let canonical = sch.canonical();
    Ok((id_of(canonical.as_bytes()), canonical))
}

/// True for a well-formed schematic ID: 64 lowercase hex digits.
pub fn is_valid_id(id: &str) -> bool {
    crate::text::is_hex64(id)
}

/// Convert free-form option values into emission form: mappings with keys
/// in Go's sort order, Go's number formatting.
fn options_node(v: &crate::yaml::Value, at: &str) -> Result<Node> {
    use crate::yaml::Value;
    Ok(match v {
        Value::Null => Node::Null,
        Value::Bool(b) => Node::Bool(*b),
        Value::Number(n) => {
            crate::yaml::integer_node(n).unwrap_or_else(|| Node::Float(n.as_f64().unwrap_or(0.0)))
        }
        Value::String(s) => Node::Str(s.clone()),
        Value::Sequence(items) => Node::Seq(
            items
                .iter()
                .enumerate()
                .map(|(i, x)| options_node(x, &format!("{at}[{i}]")))
                .collect::<Result<_>>()?,
        ),
        Value::Mapping(m) => {
            let mut entries: Vec<(String, Node)> = Vec::with_capacity(m.len());
            for (k, x) in m {
                let Value::String(key) = k else {
                    return Err(Error::bad_input(format!(
                        "schematic: {at}: only string keys are supported"
                    )));
                };
                let node = options_node(x, &format!("{at}.{key}"))?;
                entries.push((key.clone(), node));
            }
            crate::goyaml::sort_go_map(&mut entries);
            Node::Map(entries)
        }
        Value::Tagged(_) => {
            return Err(Error::bad_input(format!(
                "schematic: {at}: YAML tags are not supported"
            )));
        }
    })
}

/// The named schematics compiled into the binary (`schematics/`).
pub const EMBEDDED: &[(&str, &str)] = &[
    ("cozystack", include_str!("../schematics/cozystack.yaml")),
    ("vanilla", include_str!("../schematics/vanilla.yaml")),
];

/// The ID of an embedded schematic named `name` (`cozystack`, `vanilla`),
/// so that a name is taken wherever a schematic ID is (`--schematic`,
/// `talos.schematicID`, the mirror config); `None` for anything else.
pub fn embedded_id(name: &str) -> Option<&'static str> {
    static IDS: std::sync::OnceLock<Vec<(&'static str, String)>> = std::sync::OnceLock::new();
    IDS.get_or_init(|| {
        EMBEDDED
            .iter()
            .filter_map(|(n, text)| Some((*n, id_and_canonical(text).ok()?.0)))
            .collect()
    })
    .iter()
    .find(|(n, _)| *n == name.trim())
    .map(|(_, id)| id.as_str())
}

/// `s` as a schematic ID: an embedded schematic's name becomes its ID,
/// anything else is kept as given (and checked by the caller).
pub fn id_or_name(s: &str) -> &str {
    embedded_id(s).unwrap_or(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
    const COZYSTACK: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    fn id(text: &str) -> String {
        id_and_canonical(text).unwrap().0
    }
    fn canon(text: &str) -> String {
        id_and_canonical(text).unwrap().1
    }
    fn err(text: &str) -> String {
        let e = Schematic::parse(text).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{text:?}: {e}");
        e.to_string()
    }

    #[test]
    fn published_vectors() {
        assert_eq!(id("{}"), VANILLA);
        assert_eq!(id("customization: {}"), VANILLA);
        assert_eq!(canon("{}"), "customization: {}\n");
        assert_eq!(
            id(
                "customization:\n  systemExtensions:\n    officialExtensions:\n      - siderolabs/qemu-guest-agent\n"
            ),
            COZYSTACK
        );
        assert_eq!(id(include_str!("../schematics/cozystack.yaml")), COZYSTACK);
        assert_eq!(id(include_str!("../schematics/vanilla.yaml")), VANILLA);
    }

    /// Vectors published in the Image Factory's own tests (pkg/schematic).
    #[test]
    fn factory_test_vectors() {
        for (text, want) in [
            (r#"customization: {"extraKernelArgs": []}"#, VANILLA),
            (
                r#"{"customization": {"extraKernelArgs": ["noapic", "nolapic"]}}"#,
                "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
            ),
            (
                r#"{"customization": {"extraKernelArgs": ["noapic", "nolapic"], "systemExtensions": {}}}"#,
                "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c",
            ),
            (
                r#"{"customization": {"meta": [{"key": 10, "value": "foo"}], "extraKernelArgs": [], "systemExtensions": {}}}"#,
                "d308a2a5ee2277bed5fbaa104fcbc8d59122abfa737df987a95b4ca763459a7f",
            ),
            (
                r#"{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"}}"#,
                "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9",
            ),
            (
                r#"{"overlay": {"name": "rpi_generic", "image": "siderolabs/sbc-raspberrypi"},"customization":{}}"#,
                "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9",
            ),
            (
                r#"{"customization":{"secureboot": {"includeWellKnownCertificates": true}}}"#,
                "fa8e05f142a851d3ee568eb0a8e5841eaf6b0ebc8df9a63df16ac5ed2c04f3e6",
            ),
            (
                "customization:\n  diskImage:\n    sectorSize: 4096\n",
                "92833e9ddd9bb9e11b2464fa5525429f01866306d52ebd882ee08d7918f6d1ea",
            ),
        ] {
            assert_eq!(id(text), want, "{text}");
        }
    }

    #[test]
    fn field_order_and_omitempty() {
        let text = "customization:\n  diskImage: {sectorSize: 4096}\n  secureboot: {includeWellKnownCertificates: true, enrollKeys: force}\n  bootloader: SD-BOOT\n  systemExtensions: {officialExtensions: [b, a]}\n  meta: [{value: x, key: 0x0a}, {key: 255}]\n  extraKernelArgs: [console=ttyS0, net.ifnames=0]\n  embeddedMachineConfiguration: \"machine:\\n  type: worker\\n\"\noverlay:\n  options: {b10: 1, b9: true, a: [x]}\n  name: rpi\n  image: siderolabs/sbc\n";
        let want = "\
overlay:
    image: siderolabs/sbc
    name: rpi
    options:
        a:
            - x
        b9: true
        b10: 1
customization:
    embeddedMachineConfiguration: |
        machine:
          type: worker
    extraKernelArgs:
        - console=ttyS0
        - net.ifnames=0
    meta:
        - key: 10
          value: x
        - key: 255
          value: \"\"
    systemExtensions:
        officialExtensions:
            - b
            - a
    bootloader: sd-boot
    secureboot:
        enrollKeys: force
        includeWellKnownCertificates: true
    diskImage:
        sectorSize: 4096
";
        assert_eq!(canon(text), want);
    }

    #[test]
    fn rules() {
        // Extension order is kept and changes the ID.
        let ab = id("customization: {systemExtensions: {officialExtensions: [a, b]}}");
        let ba = id("customization: {systemExtensions: {officialExtensions: [b, a]}}");
        assert_ne!(ab, ba);
        // Key order in the input does not matter; overlay always precedes customization.
        assert_eq!(
            id("customization: {extraKernelArgs: [x]}\noverlay: {image: i, name: n}"),
            id("overlay: {name: n, image: i}\ncustomization: {extraKernelArgs: [x]}")
        );
        assert!(canon("customization: {}\noverlay: {image: i, name: n}").starts_with("overlay:\n"));
        // An overlay with only options still writes image and name (not omitempty).
        assert_eq!(
            canon("overlay: {options: {k: v}}"),
            "overlay:\n    image: \"\"\n    name: \"\"\n    options:\n        k: v\ncustomization: {}\n"
        );
        // Empty or zero parts are omitted.
        assert_eq!(
            id(
                "overlay: {options: {}}\ncustomization: {secureboot: {includeWellKnownCertificates: false}, diskImage: {sectorSize: 0}, bootloader: none, meta: [], systemExtensions: {officialExtensions: []}}"
            ),
            VANILLA
        );
        // Bootloader values.
        for (b, w) in [
            ("grub", "grub"),
            ("dual-boot", "dual-boot"),
            ("GRUB", "grub"),
        ] {
            assert_eq!(
                canon(&format!("customization: {{bootloader: {b}}}")),
                format!("customization:\n    bootloader: {w}\n")
            );
        }
        // Null is the zero value.
        assert_eq!(
            id("overlay: ~\ncustomization: {extraKernelArgs: ~, bootloader: null}"),
            VANILLA
        );
        // JSON and YAML of the same schematic agree.
        assert_eq!(
            id(
                r#"{"customization":{"systemExtensions":{"officialExtensions":["siderolabs/qemu-guest-agent"]}}}"#
            ),
            COZYSTACK
        );
    }

    #[test]
    fn scalars_into_strings_as_go_does() {
        assert_eq!(
            canon("customization: {extraKernelArgs: [1, true, 0x10, \"x\", 'yes', '', 'a: b']}"),
            "customization:\n    extraKernelArgs:\n        - \"1\"\n        - \"true\"\n        - \"0x10\"\n        - x\n        - 'yes'\n        - \"\"\n        - 'a: b'\n"
        );
        assert_eq!(
            canon(
                r##"{"customization":{"extraKernelArgs":["{\"a\":1}", " lead", "trail ", "0123", "#x"]}}"##
            ),
            "customization:\n    extraKernelArgs:\n        - '{\"a\":1}'\n        - ' lead'\n        - 'trail '\n        - \"0123\"\n        - '#x'\n"
        );
    }

    #[test]
    fn rejects_with_the_field_named() {
        assert!(err("customization: {foo: 1}").contains("foo"));
        assert!(err("bogus: 1").contains("bogus"));
        assert!(err("customization: {systemExtensions: {extensions: [a]}}").contains("extensions"));
        assert!(
            err("customization: {meta: [{key: 256, value: x}]}")
                .contains("customization.meta[0].key: 256 is outside 0..255")
        );
        assert!(err("customization: {meta: [{key: -1, value: x}]}").contains("key"));
        assert!(err("customization: {meta: [{key: ten}]}").contains("meta"));
        assert!(err("owner: alice").contains("owner"));
        assert!(err("customization: {extraKernelArgs: noapic}").contains("extraKernelArgs"));
        assert!(err("customization: []").contains("customization"));
        assert!(err("customization: {bootloader: lilo}").contains("bootloader"));
        assert!(err("customization: {diskImage: {sectorSize: big}}").contains("sectorSize"));
        assert!(
            err("customization: {secureboot: {includeWellKnownCertificates: maybe}}")
                .contains("includeWellKnownCertificates")
        );
        assert!(err("customization: {}\ncustomization: {}").contains("customization"));
        assert!(err("[1, 2]").contains("schematic"));
        assert!(err("").contains("empty"));
        assert!(err("# only a comment\n").contains("empty"));
        assert!(err("{").contains("schematic"));
        assert!(err("overlay: {options: [1]}").contains("overlay.options"));
    }

    #[test]
    fn go_key_order() {
        let mut keys = vec!["b10", "b9", "a", "B", "_x", "a1", "a01", "1", "10", "2"];
        keys.sort_by(|a, b| crate::goyaml::go_key_cmp(a, b));
        // Traced by hand through yaml's keyList.Less: '_' is neither letter nor
        // digit, so it counts as the number 0 against a digit and sorts before
        // a letter.
        assert_eq!(
            keys,
            vec!["_x", "1", "2", "10", "B", "a", "a1", "a01", "b9", "b10"]
        );
    }

    #[test]
    fn ids() {
        assert!(is_valid_id(VANILLA));
        assert!(!is_valid_id(&VANILLA.to_uppercase()));
        assert!(!is_valid_id("../etc/passwd"));
        assert!(!is_valid_id(&VANILLA[1..]));
    }
}
