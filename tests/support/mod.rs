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
//!   [`talos_gen`] and [`ok`] (asserted success) for CLI calls ([`cli`]),
//!   [`mirror_sync`] (`mirror sync --config --cache-dir`), [`carry`] (a
//!   store exported and imported into another, across the gap),
//!   [`serve_listening`] (serve's `listening` line, or its exit),
//!   [`mirror_cert`] (a CA and a pair for loopback, for TLS services and
//!   upstreams), and [`Service`] (`talos-gen serve` on loopback, one builder for every way a
//!   test starts it, `api_token` among its options) in [`service`];
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
//! - CDI's importer's reading of an HTTP source: nbdkit's curl plugin and
//!   qemu-img `info` / `convert` over NBD ([`nbd::NbdCurl`]);
//! - `/proc` readings ([`rss_kib`], [`rss_anon_kib`], [`fd_count`]);
//!   [`small_window_client`] (a slow reader that really holds the sender);
//! - waiting on a condition, never a fixed sleep ([`eventually`],
//!   [`eventually_some`], in [`wait`]);
//! - skips recorded for the run's summary ([`skip`]).
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
pub mod fault_proxy;
pub mod http;
pub mod mirror_site;
pub mod nbd;
pub mod nginx;
pub mod reference;
pub mod registry;
pub mod service;
pub mod wait;

pub use cli::{
    bin, carry, mirror_cert, mirror_sync, ok, run, run_text, serve_listening, stderr, stdout,
    talos_gen,
};
pub use curl::{Curl, CurlChild, chromium, curl, curl_spawn, raw_request};
pub use http::{Answer, send};
pub use nginx::{Nginx, NginxOpts};
pub use reference::reference_dir;
pub use service::{Service, ServiceBuilder};
pub use wait::{eventually, eventually_some};

pub mod garage;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// A free loopback port (bound and released), never one this process
/// handed out before: the kernel may give a released port again, and two
/// servers of one test run (two Garage nodes, say) would then race for it.
/// Another process may still take it between the release and the bind.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("binding an ephemeral loopback port");
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
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

/// A file `name` holding `text` in a new temp folder: the folder (removed
/// when dropped) and the file's path as a string (for a command line).
pub fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path.to_str().unwrap().to_string())
}

/// A FIFO at `path` (`mkfifo`), asserted made.
pub fn mkfifo(path: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", path.display());
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
    skip(&format!(
        "{name:?} is not installed ({why}; scripts/test installs it)"
    ));
    None
}

/// The environment variable naming, on every process the harness starts,
/// the test that started it: `<binary>::<test>` (e.g.
/// `store-1a2b3c::trust_store::two_processes_one_store`). `scripts/test`'s
/// final check reads it from `/proc/<pid>/environ` to name a leftover.
pub const OWNER_ENV: &str = "TALOS_GEN_TEST_OWNER";
/// The checkout whose suite started the process (`CARGO_MANIFEST_DIR`), so
/// that the final check of one checkout never touches another's processes.
pub const CHECKOUT_ENV: &str = "TALOS_GEN_TEST_CHECKOUT";
/// A mark unique to one [`Proc`] (`<test binary pid>.<n>`), inherited by
/// everything it starts: what [`Proc`]'s drop sweeps for, so a grandchild
/// that outlives its parent (the `serve` inside `unshare --pid --fork`
/// once `unshare` is killed, the leftover of issue 24) is stopped too.
pub const PROC_ENV: &str = "TALOS_GEN_TEST_PROC";

/// `<binary>::<test>` of the running test (libtest names each test's
/// thread after the test).
pub fn test_owner() -> String {
    let bin = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "?".into());
    let thread = std::thread::current();
    format!("{bin}::{}", thread.name().unwrap_or("?"))
}

/// Mark `cmd` as started by this test (see [`OWNER_ENV`], [`CHECKOUT_ENV`],
/// [`PROC_ENV`]); returns the [`PROC_ENV`] mark. [`Proc`] does this for
/// every child; a guard of another kind (a daemon that forks, e.g. a tmux
/// server) marks its command with it and calls [`stop_marked`] on drop.
pub fn mark_command(cmd: &mut Command) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = format!(
        "{}.{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    cmd.env(OWNER_ENV, test_owner())
        .env(CHECKOUT_ENV, env!("CARGO_MANIFEST_DIR"))
        .env(PROC_ENV, &id);
    id
}

/// The pids of running processes whose environment holds `NAME=value`
/// (zombies and unreadable ones skipped).
pub fn pids_with_env(name: &str, value: &str) -> Vec<u32> {
    let needle = format!("{name}={value}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() || !pid_alive(pid) {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// SIGKILL every process whose environment carries the [`PROC_ENV`] mark
/// `mark`, until none is left (bounded: 5 s; `name` says whose they were
/// if some will not go).
pub fn stop_marked(name: &str, mark: &str) {
    let start = Instant::now();
    loop {
        let left = pids_with_env(PROC_ENV, mark);
        if left.is_empty() {
            return;
        }
        if start.elapsed() > Duration::from_secs(5) {
            eprintln!("{name}: processes {left:?} did not stop within 5 s of SIGKILL");
            return;
        }
        for pid in left {
            // SAFETY: kill(2) with a pid read from /proc and a signal
            // number; no memory is shared.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Is `pid` a running process (not absent, not a zombie)?
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // the state is the first field after the parenthesised name
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// A child process killed (SIGKILL) and reaped on drop, on success and on
/// panic alike, together with everything it started (every process whose
/// environment carries this guard's [`PROC_ENV`] mark: a wrapper's child
/// that outlives the wrapper, a server's workers); the test may also
/// SIGTERM it and read its exit status. Every long-running process a test
/// starts goes through this guard (or a harness type holding one).
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    mark: String,
}

impl Proc {
    pub fn spawn(name: &str, cmd: Command) -> Proc {
        Proc::try_spawn(name, cmd).unwrap_or_else(|e| panic!("starting {name}: {e}"))
    }

    /// [`Proc::spawn`], the error returned (for tests that skip without the tool).
    pub fn try_spawn(name: &str, mut cmd: Command) -> std::io::Result<Proc> {
        let mark = mark_command(&mut cmd);
        Ok(Proc {
            name: name.to_string(),
            child: Some(cmd.spawn()?),
            mark,
        })
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The child itself (its pipes, e.g. `stdin.take()`); it stays guarded.
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("running")
    }

    /// SIGKILL and reap now, then stop what it left behind (see [`Proc`]).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.sweep();
    }

    /// SIGKILL every process that carries this guard's mark.
    fn sweep(&self) {
        stop_marked(&self.name, &self.mark);
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

    /// Wait for it to exit and collect its piped output; what it left
    /// behind is stopped afterwards, as on drop.
    pub fn wait_with_output(mut self) -> std::process::Output {
        let out = self
            .child
            .take()
            .expect("running")
            .wait_with_output()
            .unwrap_or_else(|e| panic!("waiting for {}: {e}", self.name));
        self.sweep();
        out
    }

    /// The child, to wait for its output (it is no longer killed on drop;
    /// prefer [`Proc::wait_with_output`], which keeps it guarded).
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

/// A GET of `path` from a [`small_window_client`] (its receive buffer fixed
/// small, so the server's writes wait on it): the stream, positioned at the
/// body, and the answer's head (lower case).
pub fn small_window_get(port: u16, path: &str, timeout: Duration) -> (std::net::TcpStream, String) {
    use std::io::{Read, Write};
    let mut s = small_window_client(port);
    s.set_read_timeout(Some(timeout)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "the answer's head ended early");
        head.push(b[0]);
    }
    (s, String::from_utf8_lossy(&head).to_lowercase())
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

/// Where every skip of a run is recorded, one line each:
/// `target/tmp/test-skips.txt` (`CARGO_TARGET_TMPDIR`). `scripts/test`
/// prints it as one summary at the end of the run and clears it first.
pub fn skips_file() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-skips.txt")
}

/// Skip the running test, loudly: say `SKIP: <why>` on stderr and record
/// `<binary>::<test>: <why>` in [`skips_file`] for the run's summary. The
/// caller returns right after. (Under `TALOS_GEN_REQUIRE_REFERENCE=1` the
/// callers fail instead of skipping, before they get here.)
pub fn skip(why: &str) {
    eprintln!("SKIP: {why}");
    let line = format!("{}: {}\n", test_owner(), why.replace('\n', " "));
    let path = skips_file();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // one write of one short line on an O_APPEND file: lines of tests
    // running at the same time do not interleave
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
