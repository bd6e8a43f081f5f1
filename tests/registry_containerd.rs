//! containerd's own client pulling through the `/v2/` service as a Talos
//! worker would: `hosts.toml` names the service as the mirror for ghcr.io and
//! factory.talos.dev, so containerd sends `?ns=<registry>`. Needs Debian's
//! `containerd` (run as root, with a private root/state/socket); skipped with
//! a message when it is absent or cannot start.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::registry::*;
use support::{Proc, Service};

const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

struct Containerd {
    sock: String,
    _proc: Proc,
}

fn start_containerd(dir: &Path) -> Option<Containerd> {
    if Command::new("containerd")
        .arg("--version")
        .output()
        .is_err()
        || Command::new("ctr").arg("--version").output().is_err()
    {
        eprintln!("SKIP: containerd/ctr not installed (apt-get install -y containerd)");
        return None;
    }
    let sock = dir.join("containerd.sock").display().to_string();
    let cfg = format!(
        "version = 2\nroot = \"{r}/root\"\nstate = \"{r}/state\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{r}/ttrpc.sock\"\n[debug]\n  address = \"{r}/debug.sock\"\n",
        r = dir.display()
    );
    let cfg_path = dir.join("config.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
    let mut cmd = Command::new("containerd");
    cmd.arg("--config")
        .arg(&cfg_path)
        .stdout(Stdio::null())
        .stderr(log);
    let c = Containerd {
        sock,
        _proc: Proc::try_spawn("containerd", cmd).ok()?,
    };
    let start = Instant::now();
    loop {
        let ok = Command::new("ctr")
            .args(["--address", &c.sock, "version"])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if ok {
            return Some(c);
        }
        if start.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "SKIP: containerd did not start here: {}",
                std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
            );
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn hosts_toml(dir: &Path, registry: &str, mirror: &str) {
    let d = dir.join(registry);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("hosts.toml"),
        format!("server = \"{mirror}\"\n\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
    )
    .unwrap();
}

fn ctr(c: &Containerd, args: &[&str]) -> std::process::Output {
    Command::new("ctr")
        .args(["--address", &c.sock])
        .args(args)
        .output()
        .expect("run ctr")
}

#[tokio::test(flavor = "multi_thread")]
async fn containerd_pulls_through_the_service_with_hosts_toml() {
    let work = tempfile::tempdir().unwrap();
    let Some(cd) = start_containerd(work.path()) else {
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
    let hosts_s = hosts.display().to_string();

    for (reference, img) in [
        ("ghcr.io/siderolabs/kubelet:v1.35.6".to_string(), &kubelet),
        (
            format!("factory.talos.dev/{installer_repo}:v1.13.6"),
            &installer,
        ),
    ] {
        let o = ctr(
            &cd,
            &[
                "content",
                "fetch",
                "--all-platforms",
                "--hosts-dir",
                &hosts_s,
                &reference,
            ],
        );
        assert!(
            o.status.success(),
            "ctr content fetch {reference}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        // Every blob and manifest is in containerd's content store, byte for byte.
        let mut want: Vec<(String, Vec<u8>)> = img
            .blobs
            .iter()
            .map(|b| (b.digest.clone(), b.data.clone()))
            .collect();
        want.push((img.index_digest.clone(), img.index.clone()));
        for (_, m, d) in &img.manifests {
            want.push((d.clone(), m.clone()));
        }
        for (d, data) in want {
            let o = ctr(&cd, &["content", "get", &d]);
            assert!(o.status.success(), "ctr content get {d}");
            assert!(
                o.stdout == data,
                "{reference}: {d} differs in containerd's store"
            );
        }
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
