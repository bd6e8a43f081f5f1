//! `/pxe/{schematic}/{version}/{path}`: the factory's iPXE script as a
//! document ([`FactoryDoc::pxe`]), the image assets it boots, and the script
//! with its URLs pointed at this service.

use super::ImageKey;
use super::documents::{DocKind, FactoryDoc};

impl FactoryDoc {
    /// `GET /pxe/{schematic}/{version}/{path}`: the iPXE script booting
    /// `<platform>-<arch>[-secureboot]` (the factory's own grammar: `path`
    /// is a `cmdline-` asset without its prefix).
    pub fn pxe(schematic: &str, version: &str, path: &str) -> crate::Result<FactoryDoc> {
        let k = ImageKey::parse(schematic, version, &format!("cmdline-{path}")).map_err(|_| {
            crate::Error::bad_input(format!(
                "path: {:?} is not <platform>-<arch>[-secureboot] (e.g. metal-amd64)",
                path.chars().take(64).collect::<String>()
            ))
        })?;
        Ok(FactoryDoc {
            path: format!("/pxe/{}/{}/{path}", k.schematic, k.version),
            kind: DocKind::Ipxe,
        })
    }

    /// Is this an iPXE script (a 404 for it is a failure, not a note)?
    pub fn is_pxe(&self) -> bool {
        self.kind == DocKind::Ipxe
    }
}

/// The image assets the factory's iPXE script for `path` boots (its
/// templates: the UKI for `-secureboot`, else the kernel and initramfs).
pub fn pxe_assets(path: &str) -> Vec<String> {
    match path.strip_suffix("-secureboot") {
        Some(pa) => vec![format!("{pa}-secureboot-uki.efi")],
        None => {
            let arch = path.rsplit('-').next().unwrap_or(path);
            vec![format!("kernel-{arch}"), format!("initramfs-{arch}.xz")]
        }
    }
}

/// The iPXE script with every URL of an image (`http(s)://.../image/...`)
/// pointed at `base` instead of the factory's PXE host.
pub fn rewrite_pxe(script: &str, base: &str) -> String {
    let mut out = String::with_capacity(script.len());
    for (i, line) in script.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let words: Vec<String> = line
            .split(' ')
            .map(|w| {
                let url = w.starts_with("http://") || w.starts_with("https://");
                match w.find("/image/") {
                    Some(at) if url => format!("{base}{}", &w[at..]),
                    _ => w.to_string(),
                }
            })
            .collect();
        out.push_str(&words.join(" "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

    #[test]
    fn pxe_documents_and_rewrites() {
        let d = FactoryDoc::pxe(S, "1.13.6", "metal-amd64").unwrap();
        assert_eq!(
            d.store_key(),
            crate::store::Key::factory_doc(&format!("/pxe/{S}/v1.13.6/metal-amd64"))
        );
        assert!(d.is_pxe());
        assert!(d.check(b"#!ipxe\nboot\n").is_ok());
        assert!(d.check(b"<html>").is_err());
        for bad in ["metal", "metal-amd64.iso", "../x", "metal-x86"] {
            assert!(FactoryDoc::pxe(S, "v1.13.6", bad).is_err(), "{bad}");
        }
        assert_eq!(
            pxe_assets("metal-arm64"),
            ["kernel-arm64", "initramfs-arm64.xz"]
        );
        assert_eq!(
            pxe_assets("metal-amd64-secureboot"),
            ["metal-amd64-secureboot-uki.efi"]
        );
        let script = "#!ipxe\n\nimgfree\nkernel https://pxe.factory.talos.dev/image/x/v1/kernel-amd64 talos.platform=metal https://other/keep\ninitrd https://pxe.factory.talos.dev/image/x/v1/initramfs-amd64.xz\nboot\n";
        assert_eq!(
            rewrite_pxe(script, "https://m.example:8443/base"),
            "#!ipxe\n\nimgfree\nkernel https://m.example:8443/base/image/x/v1/kernel-amd64 talos.platform=metal https://other/keep\ninitrd https://m.example:8443/base/image/x/v1/initramfs-amd64.xz\nboot\n"
        );
    }
}
