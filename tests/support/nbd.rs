//! CDI's importer's way of reading an HTTP source: nbdkit's curl plugin
//! (with the readahead and retry filters, no xz filter: the bytes as the
//! server sends them) on a Unix socket, and qemu-img over NBD.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Proc, require_tool};

/// nbdkit serving `url` on a socket of its own, killed on drop.
pub struct NbdCurl {
    sock: PathBuf,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

impl NbdCurl {
    /// Start nbdkit for `url` and wait for its socket.
    pub fn start(url: &str) -> NbdCurl {
        let nbdkit = require_tool("nbdkit");
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("nbd.sock");
        let mut cmd = Command::new(nbdkit);
        cmd.args(["--exit-with-parent", "-f", "-U"])
            .arg(&sock)
            .args(["--filter=readahead", "--filter=retry", "curl"])
            .arg(format!("url={url}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = Proc::spawn("nbdkit", cmd);
        let t = Instant::now();
        while !sock.exists() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        NbdCurl {
            sock,
            _proc: proc,
            _dir: dir,
        }
    }

    /// `nbd+unix:///?socket=...`.
    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    /// `qemu-img info --output=json` over NBD (asserted to succeed).
    pub fn info(&self) -> serde_json::Value {
        let out = Command::new(require_tool("qemu-img"))
            .args(["info", "--output=json"])
            .arg(self.uri())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "qemu-img info failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `qemu-img convert -f raw -O raw` of the NBD export into `dest`
    /// (asserted to succeed): the source's bytes, padded with zeros to
    /// whole 512-byte sectors.
    pub fn convert(&self, dest: &Path) {
        let out = Command::new(require_tool("qemu-img"))
            .args(["convert", "-f", "raw", "-O", "raw"])
            .arg(self.uri())
            .arg(dest)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "qemu-img convert failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
