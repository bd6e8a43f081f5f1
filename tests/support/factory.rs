//! A generated xz artifact published by nginx as the upstream Image
//! Factory, and `talos-gen serve` in front of it.

use std::path::PathBuf;

use super::{Nginx, NginxOpts, Service};

pub const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
pub const V: &str = "v1.13.6";
pub const A: &str = "openstack-amd64.raw.xz";
pub const A2: &str = "metal-amd64.raw.xz";

/// `/image/S/V/<asset>`.
pub fn image_path(asset: &str) -> String {
    format!("/image/{S}/{V}/{asset}")
}

/// A raw disk (`random_mib` random MiB, then `zero_mib` MiB of zeros) in
/// `dir/disk.raw`, xz-compressed and published as `/image/S/V/<asset>` for
/// each of `assets` by nginx under `dir/root` (limited to `rate`); an empty
/// `dir/cache` for the service.
pub struct Factory {
    pub dir: tempfile::TempDir,
    pub raw: Vec<u8>,
    pub xz: Vec<u8>,
    pub nginx: Nginx,
}

impl Factory {
    pub fn new(random_mib: usize, zero_mib: usize, assets: &[&str], rate: Option<&str>) -> Factory {
        let dir = tempfile::tempdir().unwrap();
        let (raw, xz) = super::xz_disk(dir.path(), random_mib, zero_mib);
        let root = dir.path().join("root");
        let d = root.join(format!("image/{S}/{V}"));
        std::fs::create_dir_all(&d).unwrap();
        for a in assets {
            std::fs::write(d.join(a), &xz).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        let nginx = Nginx::start(
            &root,
            NginxOpts {
                limit_rate: rate.map(str::to_string),
                ..Default::default()
            },
        );
        Factory {
            dir,
            raw,
            xz,
            nginx,
        }
    }

    /// What nginx serves.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// `talos-gen serve` on [`Factory::cache`] with nginx as the factory, plus `extra`.
    pub fn serve(&self, extra: &[&str]) -> Service {
        Service::builder()
            .arg("--cache-dir")
            .arg(self.cache())
            .args(["--factory-url", &self.nginx.url()])
            .args(extra)
            .start()
    }

    /// Upstream GETs of `/image/S/V/<asset>`.
    pub fn gets(&self, asset: &str) -> usize {
        self.nginx.count(&format!("\"GET {} ", image_path(asset)))
    }
}
