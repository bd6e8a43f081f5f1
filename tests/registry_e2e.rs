//! End-to-end tests of the `/v2/` pull-through with real parts: Debian's
//! distribution registry as the upstream (an image shaped like the Image
//! Factory's installer pushed to it), `talos-gen serve` in front, and skopeo
//! as the client.

mod common;
mod registry_harness;

use registry_harness::*;

const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
const MIB: usize = 1024 * 1024;

fn repo() -> String {
    format!("installer/{SCHEMATIC}")
}

#[tokio::test(flavor = "multi_thread")]
async fn harness_upstream_serves_factory_shaped_image_to_skopeo() {
    let up = DockerRegistry::start();
    let img = push_factory_image(&up.url(), &repo(), "v1.13.6", &[3 * MIB, MIB], 1).await;
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("direct");
    let o = skopeo_copy(&up.host(), &repo(), "v1.13.6", &dest);
    assert!(o.status.success(), "skopeo: {}", String::from_utf8_lossy(&o.stderr));
    let files = dir_contents(&dest);
    assert_eq!(files.get("manifest.json"), Some(&img.index));
    for b in &img.blobs {
        let hexd = b.digest.trim_start_matches("sha256:");
        assert_eq!(files.get(hexd), Some(&b.data), "blob {}", b.digest);
    }
}
