//! Clients: `curl` (body, head, status, exit code and timings kept), one
//! raw HTTP/1.1 request, headless Chromium.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Proc, require_tool};

/// What one `curl` run gave.
#[derive(Debug)]
pub struct Curl {
    /// curl's exit code (0: a whole, clean transfer; 18: cut short).
    pub exit: i32,
    pub status: u16,
    /// The response head(s) as received (`-D`).
    pub headers: String,
    pub body: Vec<u8>,
    /// curl's own error message (`-S`), if any.
    pub stderr: String,
    /// Wall time of the run, measured here.
    pub took: Duration,
    /// curl's `time_starttransfer` and `time_total`, in seconds (-1 if unknown).
    pub ttfb: f64,
    pub total: f64,
}

impl Curl {
    /// The last value of response header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim().to_ascii_lowercase() == name).then(|| v.trim().to_string())
        })
    }
}

/// A `curl` running in the background, killed on drop unless waited for.
pub struct CurlChild {
    proc: Proc,
    dir: tempfile::TempDir,
    started: Instant,
}

impl CurlChild {
    /// Where the body is being written.
    pub fn body_path(&self) -> PathBuf {
        self.dir.path().join("body")
    }

    /// Bytes of body received so far.
    pub fn body_len(&self) -> u64 {
        std::fs::metadata(self.body_path())
            .map(|m| m.len())
            .unwrap_or(0)
    }

    pub fn wait(self) -> Curl {
        let out = self.proc.wait_with_output();
        let w = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut it = w.split_whitespace();
        let status = it.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let ttfb = it.next().and_then(|s| s.parse().ok()).unwrap_or(-1.0);
        let total = it.next().and_then(|s| s.parse().ok()).unwrap_or(-1.0);
        let d = self.dir.path();
        Curl {
            exit: out.status.code().unwrap_or(-1),
            status,
            headers: std::fs::read_to_string(d.join("headers")).unwrap_or_default(),
            body: std::fs::read(d.join("body")).unwrap_or_default(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            took: self.started.elapsed(),
            ttfb,
            total,
        }
    }
}

/// Start `curl -sS --path-as-is` with `args` (the URL among them), bounded
/// by `--max-time 60`; head and body go to files of its own.
pub fn curl_spawn(args: &[&str]) -> CurlChild {
    let dir = tempfile::tempdir().expect("curl output dir");
    let mut cmd = Command::new(require_tool("curl"));
    cmd.args(["-sS", "--path-as-is", "--max-time", "60", "-D"])
        .arg(dir.path().join("headers"))
        .arg("-o")
        .arg(dir.path().join("body"))
        .args(["-w", "%{http_code} %{time_starttransfer} %{time_total}"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    CurlChild {
        proc: Proc::spawn("curl", cmd),
        dir,
        started,
    }
}

/// [`curl_spawn`] and wait for it.
pub fn curl(args: &[&str]) -> Curl {
    curl_spawn(args).wait()
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
