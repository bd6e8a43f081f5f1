//! Shared parts of the operations tests (`tests/ops_*.rs`): a generated xz
//! artifact published by nginx as the upstream factory, a `talos-gen serve`
//! child whose exit status the test can read (SIGTERM tests), and /proc
//! readings (RSS, open file descriptors).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

#[path = "../support/mod.rs"]
pub mod support;

pub use support::{Nginx, NginxOpts, free_port, require_tool};

pub const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
pub const V: &str = "v1.13.6";
pub const A: &str = "openstack-amd64.raw.xz";
pub const A2: &str = "metal-amd64.raw.xz";

pub fn image_path(asset: &str) -> String {
    format!("/image/{S}/{V}/{asset}")
}

pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// A generated raw disk (`random_mib` random MiB then 1 MiB of zeros),
/// xz-compressed, published as `/image/S/V/A` and `/image/S/V/A2` by nginx.
pub struct Upstream {
    pub dir: tempfile::TempDir,
    pub xz: Vec<u8>,
    pub nginx: Nginx,
}

impl Upstream {
    pub fn new(random_mib: usize, rate: Option<&str>) -> Upstream {
        let dir = tempfile::tempdir().unwrap();
        let (_, xz) = support::xz_disk(dir.path(), random_mib, 1);
        let root = dir.path().join("root");
        let d = root.join(format!("image/{S}/{V}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(A), &xz).unwrap();
        std::fs::write(d.join(A2), &xz).unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        let nginx = Nginx::start(
            &root,
            NginxOpts {
                limit_rate: rate.map(str::to_string),
                ..Default::default()
            },
        );
        Upstream { dir, xz, nginx }
    }

    pub fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    /// `talos-gen serve` on this upstream's cache dir with nginx as the
    /// factory, plus `extra` flags, logging at info.
    pub fn serve(&self, extra: &[&str]) -> Serve {
        let cache = self.cache();
        let factory = self.nginx.url();
        let mut args = vec![
            "--cache-dir",
            cache.to_str().unwrap(),
            "--factory-url",
            &factory,
        ];
        args.extend_from_slice(extra);
        Serve::start(&args, "info")
    }
}

/// `talos-gen serve` as a child the test owns: SIGKILLed on drop, but the
/// test may SIGTERM it and read its exit status.
pub struct Serve {
    pub port: u16,
    pub child: Option<Child>,
    pub log: PathBuf,
    _logdir: tempfile::TempDir,
}

impl Serve {
    /// `serve --listen 127.0.0.1:<port> args...` with `RUST_LOG=rust_log`; waits for `/healthz`.
    pub fn start(args: &[&str], rust_log: &str) -> Serve {
        let port = free_port();
        let logdir = tempfile::tempdir().unwrap();
        let log = logdir.path().join("serve.log");
        let logf = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(logf)
            .spawn()
            .expect("starting talos-gen serve");
        let mut s = Serve {
            port,
            child: Some(child),
            log,
            _logdir: logdir,
        };
        let start = Instant::now();
        while support::http_status(port, "/healthz") != Some(200) {
            if let Some(st) = s.try_status() {
                panic!("serve exited with {st}: {}", s.log_text());
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "serve did not come up: {}",
                s.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Send SIGTERM.
    pub fn term(&self) {
        let st = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Wait for exit up to `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(s) = self.try_status() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Resident set size of `pid` in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// One raw HTTP/1.1 request; (status, headers, body). Reads to EOF (`Connection: close`).
pub fn raw_request(port: u16, req: &[u8], timeout: Duration) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(timeout)).unwrap();
    s.write_all(req).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(buf.len());
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head, buf[split..].to_vec())
}

/// `curl -s` GET; (status, body).
pub fn curl(url: &str, extra: &[&str]) -> (u16, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("body");
    let o = Command::new("curl")
        .args(["-s", "--max-time", "60", "-o"])
        .arg(&out)
        .args(["-w", "%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .expect("curl");
    let code = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    (code, std::fs::read(&out).unwrap_or_default())
}

/// Headless Chromium with a fresh profile, every background service off.
pub fn chromium(extra: &[&str], profile: &Path) -> std::process::Output {
    let bin = require_tool("chromium");
    Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .expect("running chromium")
}

/// Anonymous resident memory of `pid` in KiB (heap; excludes mapped files).
pub fn rss_anon_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
