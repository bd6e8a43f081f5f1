//! containerd's own client pulling through the `/v2/` service as a Talos
//! worker would: `hosts.toml` names the service as the mirror for ghcr.io and
//! factory.talos.dev, so containerd sends `?ns=<registry>`. Needs Debian's
//! `containerd` (run as root, with a private root/state/socket); skipped with
//! a message when it is absent or cannot start.

use std::time::{Duration, Instant};

use crate::support::Service;
use crate::support::containerd::{Containerd, hosts_toml};
use crate::support::registry::*;

const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

#[tokio::test(flavor = "multi_thread")]
async fn containerd_pulls_through_the_service_with_hosts_toml() {
    let work = tempfile::tempdir().unwrap();
    let Some(cd) = Containerd::start(work.path()) else {
        return;
    };
    let up = Registry::start();
    let kubelet =
        push_factory_image(&up.url(), "siderolabs/kubelet", "v1.35.6", &[2 << 20], 11).await;
    let installer_repo = format!("installer/{SCHEMATIC}");
    let installer = push_factory_image(
        &up.url(),
        &installer_repo,
        "v1.13.6",
        &[3 << 20, 1 << 20],
        12,
    )
    .await;
    let cache = work.path().join("cache");
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(&cache)
        .args(["--registry-url", &up.url()])
        .args(["--mirror-upstream", &format!("ghcr.io={}", up.url())])
        .args([
            "--mirror-upstream",
            &format!("factory.talos.dev={}", up.url()),
        ])
        .start();
    let hosts = work.path().join("hosts");
    hosts_toml(&hosts, "ghcr.io", &svc.url());
    hosts_toml(&hosts, "factory.talos.dev", &svc.url());

    for (reference, img) in [
        ("ghcr.io/siderolabs/kubelet:v1.35.6".to_string(), &kubelet),
        (
            format!("factory.talos.dev/{installer_repo}:v1.13.6"),
            &installer,
        ),
    ] {
        cd.fetch_all(&hosts, &reference);
        // Every blob and manifest is in containerd's content store, byte for byte.
        cd.assert_holds(&reference, img);
        // ... and came through the service: it is in the service's store.
        for b in &img.blobs {
            let obj = cache
                .join("objects/sha256")
                .join(b.digest.trim_start_matches("sha256:"));
            // The fill commits durably just after its last byte went out.
            let t0 = Instant::now();
            while !obj.exists() && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(obj.exists(), "{} not in the service's store", b.digest);
        }
    }
}
