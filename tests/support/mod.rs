//! Generic helpers for end-to-end tests with real processes on loopback:
//! free ports, children killed on drop, waiting for a port to answer HTTP,
//! required tools, an nginx instance with its own config/prefix/access log,
//! and the `talos-gen serve` service.
//!
//! ```ignore
//! mod support;
//! let ng = support::Nginx::start(root, support::NginxOpts { limit_rate: Some("2m".into()), ..Default::default() });
//! let svc = support::Service::start(&["--cache-dir", dir, "--factory-url", &ng.url()]);
//! ```
#![allow(dead_code)]

pub mod garage;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A generated raw disk (`random_mib` MiB of random bytes, then `zero_mib`
/// MiB of zeros) written to `dir/disk.raw` and compressed with `xz -0`:
/// returns `(raw, xz)`.
pub fn xz_disk(dir: &Path, random_mib: usize, zero_mib: usize) -> (Vec<u8>, Vec<u8>) {
    require_tool("xz");
    let mut raw = vec![0u8; random_mib << 20];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut raw)
        .unwrap();
    raw.extend(std::iter::repeat_n(0u8, zero_mib << 20));
    let raw_path = dir.join("disk.raw");
    std::fs::write(&raw_path, &raw).unwrap();
    let out = Command::new("xz")
        .args(["-0", "-T1", "-c"])
        .arg(&raw_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "xz failed");
    (raw, out.stdout)
}

/// A free loopback port (bound and released; a race is possible but rare).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding an ephemeral loopback port")
}

/// Panic with a clear message when a tool the test needs is not installed.
pub fn require_tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path).chain(["/usr/sbin".into(), "/sbin".into()]) {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "required tool {name:?} is not installed (the test command installs nginx-light, curl, nbdkit, qemu-utils, xz-utils)"
    );
}

/// A tool a test needs that the test command installs (`scripts/test`) but a
/// developer's machine may lack: its path, or `None` after saying SKIP, unless
/// `TALOS_GEN_REQUIRE_REFERENCE=1` (CI), which makes a missing tool fail.
/// Looks on PATH, then in `~/.cargo/bin` (where `cargo install` puts it).
pub fn optional_tool(name: &str, why: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|d| d.join("bin"));
    for dir in std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .chain(cargo_bin)
    {
        let p = dir.join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    if std::env::var("TALOS_GEN_REQUIRE_REFERENCE").as_deref() == Ok("1") {
        panic!("{name:?} is not installed ({why}); TALOS_GEN_REQUIRE_REFERENCE=1 forbids skipping");
    }
    eprintln!("SKIP: {name:?} is not installed ({why}; scripts/test installs it)");
    None
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
}

impl Proc {
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Proc {
            name: name.to_string(),
            child: Some(child),
        }
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// SIGKILL and reap now.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Is it still running?
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Send `GET path` to 127.0.0.1:port; the status code, if any answer came.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let line = std::str::from_utf8(&buf[..n]).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Wait until `GET path` on the port answers anything (or panic after `timeout`).
pub fn wait_http(port: u16, path: &str, timeout: Duration, proc: &mut Proc) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if http_status(port, path).is_some() {
            return;
        }
        if !proc.alive() {
            panic!("{} exited before answering on port {port}", proc.name);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "{} did not answer on port {port} within {timeout:?}",
        proc.name
    );
}

#[derive(Debug, Clone, Default)]
pub struct NginxOpts {
    /// `limit_rate` for every response (e.g. `2m`).
    pub limit_rate: Option<String>,
    /// Extra directives inside `server { }`.
    pub server_extra: String,
    /// Extra directives inside `http { }`.
    pub http_extra: String,
}

/// nginx (single process, `daemon off`) serving `root` on a loopback port,
/// with `Content-Disposition: attachment; filename=<last segment>` as the
/// Image Factory sends it, and an access log the test can count.
pub struct Nginx {
    pub port: u16,
    pub prefix: tempfile::TempDir,
    proc: Proc,
}

impl Nginx {
    pub fn start(root: &Path, opts: NginxOpts) -> Nginx {
        let bin = require_tool("nginx");
        let prefix = tempfile::tempdir().expect("nginx prefix");
        let port = free_port();
        let p = prefix.path().display();
        let limit = opts
            .limit_rate
            .as_deref()
            .map(|r| format!("limit_rate {r};"))
            .unwrap_or_default();
        let conf = format!(
            r#"master_process off;
daemon off;
user root;
error_log {p}/error.log;
pid {p}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log {p}/access.log;
  client_body_temp_path {p}/body;
  proxy_temp_path {p}/proxy;
  sendfile on;
  keepalive_requests 100000;
  types {{ application/x-xz xz; application/zstd zst; application/x-iso9660-image iso; }}
  default_type application/octet-stream;
  {http_extra}
  server {{
    listen 127.0.0.1:{port};
    root {root};
    {limit}
    {server_extra}
    location ~ /([^/]+)$ {{ add_header Content-Disposition "attachment; filename=$1"; }}
  }}
}}
"#,
            root = root.display(),
            http_extra = opts.http_extra,
            server_extra = opts.server_extra,
        );
        let conf_path = prefix.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("writing nginx.conf");
        let mut cmd = Command::new(bin);
        cmd.arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(prefix.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut proc = Proc::spawn("nginx", cmd);
        wait_http(port, "/", Duration::from_secs(10), &mut proc);
        Nginx { port, prefix, proc }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Access log lines that contain `needle` (e.g. `"GET /image/..."`).
    pub fn count(&self, needle: &str) -> usize {
        std::fs::read_to_string(self.prefix.path().join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }

    pub fn stop(&mut self) {
        self.proc.kill();
    }
}

/// `talos-gen serve` on a loopback port.
pub struct Service {
    pub port: u16,
    pub proc: Proc,
    pub log: PathBuf,
    _logdir: tempfile::TempDir,
}

impl Service {
    /// Start with `args` after `serve --listen 127.0.0.1:<port>`; waits for `/healthz`.
    pub fn start(args: &[&str]) -> Service {
        let port = free_port();
        let logdir = tempfile::tempdir().expect("log dir");
        let log = logdir.path().join("serve.log");
        let logf = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(logf);
        let mut proc = Proc::spawn("talos-gen serve", cmd);
        wait_http(port, "/healthz", Duration::from_secs(20), &mut proc);
        Service {
            port,
            proc,
            log,
            _logdir: logdir,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
