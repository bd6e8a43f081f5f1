//! The one harness of the integration tests: each of the six test binaries
//! (`tests/<group>/main.rs`) says `mod support;`, its modules take what
//! they need from here through `crate::support`.
//!
//! - processes killed on drop ([`Proc`]), free loopback ports
//!   ([`free_port`]), waiting for a port to answer HTTP ([`wait_http`]),
//!   required tools ([`require_tool`]), hashes ([`sha256_hex`],
//!   [`sha256_digest`]), generated data ([`random_bytes`], [`xz_disk`],
//!   [`xz_bytes`]), rot on disk ([`flip_byte`], [`flip_middle_byte`]);
//! - `talos-gen` itself: [`run`], [`run_text`] (code, stdout, stderr),
//!   [`talos_gen`] and [`ok`] (asserted success) for CLI calls ([`cli`]), and
//!   [`Service`] (`talos-gen serve` on loopback, one builder for every way a
//!   test starts it) in [`service`];
//! - the reference data in `../shared` ([`reference_dir`]: skip, or fail
//!   under `TALOS_GEN_REQUIRE_REFERENCE=1`);
//! - clients: [`curl`] / [`curl_spawn`], [`raw_request`], [`chromium`], and
//!   reqwest through [`send`] (a whole [`Answer`] in one call, [`http`]);
//! - real upstreams: [`Nginx`] ([`nginx`]), a generated xz artifact
//!   published by nginx as the factory ([`factory::Factory`]), Debian's
//!   docker-registry with factory-shaped images pushed to it ([`registry`]:
//!   `push_factory_image`, `skopeo_copy_ok`, `PushedImage::assert_copied`),
//!   both as one site to mirror from ([`mirror_site::MirrorSite`]), and a
//!   misbehaving upstream for what nginx cannot show ([`bad_upstream`]);
//! - containerd as a worker's image client, `hosts.toml` mirrors, `ctr`,
//!   `fetch_all` / `assert_holds` ([`containerd`]);
//! - `/proc` readings ([`rss_kib`], [`rss_anon_kib`], [`fd_count`]);
//!   [`small_window_client`] (a slow reader that really holds the sender).
//!
//! ```ignore
//! mod support;
//! let ng = support::Nginx::start(root, support::NginxOpts { limit_rate: Some("2m".into()), ..Default::default() });
//! let svc = support::Service::start(&["--cache-dir", dir, "--factory-url", &ng.url()]);
//! let svc = support::Service::builder().arg("--offline").env("TALOS_GEN_X", "y").start();
//! ```
#![allow(dead_code, unused_imports)]

pub mod bad_upstream;
pub mod cli;
pub mod containerd;
pub mod curl;
pub mod factory;
pub mod http;
pub mod mirror_site;
pub mod nginx;
pub mod reference;
pub mod registry;
pub mod service;

pub use cli::{bin, ok, run, run_text, stderr, stdout, talos_gen};
pub use curl::{Curl, CurlChild, chromium, curl, curl_spawn, raw_request};
pub use http::{Answer, send};
pub use nginx::{Nginx, NginxOpts};
pub use reference::reference_dir;
pub use service::{Service, ServiceBuilder};

pub mod garage;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

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
        "required tool {name:?} is not installed (scripts/test installs the Debian packages the tests need)"
    );
}

/// sha256 hex of `b`.
pub fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// `sha256:<hex>` of `b`, as OCI digests are written.
pub fn sha256_digest(b: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(b))
}

/// `n` deterministic pseudo-random bytes (xorshift: cheap, incompressible
/// enough, the same for the same `seed`).
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(n);
    out
}

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

/// `data` compressed as xz (preset 0), in memory.
pub fn xz_bytes(data: &[u8]) -> Vec<u8> {
    let mut e = xz2::write::XzEncoder::new(Vec::new(), 0);
    e.write_all(data).expect("xz in memory");
    e.finish().expect("xz in memory")
}

/// XOR the byte at offset `at` of the file at `path` with `mask`, in place
/// (same length: rot a checksum or a digest cannot see from the size).
pub fn flip_byte(path: &Path, at: u64, mask: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("opening {} to flip a byte: {e}", path.display()));
    let mut b = [0u8];
    f.read_exact_at(&mut b, at)
        .expect("reading the byte to flip");
    f.write_all_at(&[b[0] ^ mask], at)
        .expect("writing the flipped byte");
}

/// [`flip_byte`] at the middle of the file.
pub fn flip_middle_byte(path: &Path, mask: u8) {
    let len = std::fs::metadata(path).expect("file to flip").len();
    flip_byte(path, len / 2, mask);
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

/// A child process killed (SIGKILL) and reaped on drop; the test may also
/// SIGTERM it and read its exit status.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
}

impl Proc {
    pub fn spawn(name: &str, cmd: Command) -> Proc {
        Proc::try_spawn(name, cmd).unwrap_or_else(|e| panic!("starting {name}: {e}"))
    }

    /// [`Proc::spawn`], the error returned (for tests that skip without the tool).
    pub fn try_spawn(name: &str, mut cmd: Command) -> std::io::Result<Proc> {
        Ok(Proc {
            name: name.to_string(),
            child: Some(cmd.spawn()?),
        })
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

    /// Send SIGTERM.
    pub fn term(&self) {
        let st = Command::new("kill")
            .args(["-TERM", &self.id().to_string()])
            .status()
            .expect("running kill");
        assert!(st.success(), "kill -TERM {}", self.id());
    }

    /// Its exit status, if it has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
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

    /// Is it still running?
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The child, to wait for its output (it is no longer killed on drop).
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("running")
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

/// Wait until `GET path` on the port answers anything (or panic after
/// `timeout`, or as soon as `proc` exits).
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

/// Resident set size of `pid` in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

/// Anonymous resident memory of `pid` in KiB (heap; excludes mapped files).
pub fn rss_anon_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "RssAnon:")
}

fn proc_status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A loopback connection to `port` whose receive buffer is 4 KiB, so a
/// client that reads slowly (or not at all) really holds the sender back
/// (loopback buffers can otherwise swallow tens of MiB).
pub fn small_window_client(port: u16) -> std::net::TcpStream {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor we own; on success the
    // descriptor is handed to TcpStream, which closes it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let size: libc::c_int = 4096;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &size as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            &addr as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        std::net::TcpStream::from_raw_fd(fd)
    }
}

/// Open file descriptors of `pid`.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}
