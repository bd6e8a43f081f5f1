//! containerd (Debian's) as a Talos worker's image client: run as root with
//! a private root, state and socket under a test directory, killed on drop;
//! `hosts.toml` mirrors and `ctr` against its socket.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Proc;
use super::registry::PushedImage;

pub struct Containerd {
    pub sock: String,
    _proc: Proc,
}

impl Containerd {
    /// containerd on a socket in `dir` (its config, root and state there
    /// too); `None`, with a SKIP line, when it is absent or cannot start.
    pub fn start(dir: &Path) -> Option<Containerd> {
        if Command::new("containerd")
            .arg("--version")
            .output()
            .is_err()
            || Command::new("ctr").arg("--version").output().is_err()
        {
            super::skip("containerd/ctr not installed (apt-get install -y containerd)");
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
            if c.ctr(&["version"]).status.success() {
                return Some(c);
            }
            if start.elapsed() > Duration::from_secs(15) {
                super::skip(&format!(
                    "containerd did not start here: {}",
                    std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
                ));
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `ctr --address <sock> <args>`.
    pub fn ctr(&self, args: &[&str]) -> std::process::Output {
        Command::new("ctr")
            .args(["--address", &self.sock])
            .args(args)
            .output()
            .expect("run ctr")
    }
}

impl Containerd {
    /// `ctr content fetch --all-platforms --hosts-dir <hosts> <reference>`,
    /// asserted to succeed.
    pub fn fetch_all(&self, hosts: &Path, reference: &str) {
        let hosts = hosts.display().to_string();
        self.fetch(&["--all-platforms", "--hosts-dir", &hosts], reference);
    }

    /// `ctr content fetch <options> <reference>`, asserted to succeed.
    pub fn fetch(&self, options: &[&str], reference: &str) {
        let mut args = vec!["content", "fetch"];
        args.extend(options);
        args.push(reference);
        let o = self.ctr(&args);
        assert!(
            o.status.success(),
            "ctr content fetch {reference}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Every manifest and blob of `img` (pulled as `reference`) is in
    /// containerd's content store, byte for byte.
    pub fn assert_holds(&self, reference: &str, img: &PushedImage) {
        for (d, data) in img.contents() {
            let o = self.ctr(&["content", "get", &d]);
            assert!(o.status.success(), "{reference}: ctr content get {d}");
            assert!(
                o.stdout == data,
                "{reference}: {d} differs in containerd's store"
            );
        }
    }
}

/// `dir/<registry>/hosts.toml` naming `mirror` as the one host (pull and
/// resolve) for `registry`, as Talos writes it for a registry mirror.
pub fn hosts_toml(dir: &Path, registry: &str, mirror: &str) {
    hosts_toml_with(dir, registry, mirror, "");
}

/// The same, with `extra` lines in its host table (e.g. `ca = "/path/ca.crt"`).
pub fn hosts_toml_with(dir: &Path, registry: &str, mirror: &str, extra: &str) {
    let d = dir.join(registry);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("hosts.toml"),
        format!("server = \"{mirror}\"\n\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n{extra}"),
    )
    .unwrap();
}
