//! `talos-gen serve` on loopback: one builder for every way a test starts it.
//!
//! ```ignore
//! let svc = Service::start(&["--cache-dir", dir, "--offline"]);
//! let pod = Service::builder().under(&["unshare", "--pid", "--fork", "--mount-proc"]).args(&args).start();
//! let svc = Service::builder().arg("--cache-dir").arg(cache.path()).rust_log("debug").start();
//! ```

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{Proc, free_port, http_status};

/// How `--listen` is given.
#[derive(Debug, Clone)]
enum Listen {
    /// `--listen <prefix><free port>` (default prefix `127.0.0.1:`).
    Port(String),
    /// `--listen 127.0.0.1:0`; the port is read from the `listening` log line.
    Zero,
}

/// Options for [`Service`]; [`ServiceBuilder::start`] starts it.
#[derive(Debug, Clone)]
pub struct ServiceBuilder {
    args: Vec<OsString>,
    envs: Vec<(String, String)>,
    wrapper: Vec<String>,
    rust_log: String,
    listen: Listen,
    /// Served over TLS: the CA certificate that checks it.
    tls_ca: Option<PathBuf>,
}

/// `talos-gen serve` on a loopback port, its stderr in a log file of its
/// own (printed when the test panics while it runs). SIGKILLed on drop; the
/// test may SIGTERM it and read its exit status.
pub struct Service {
    pub port: u16,
    pub proc: Proc,
    pub log: PathBuf,
    /// `Some(CA)`: the service answers HTTPS (see [`ServiceBuilder::tls`]).
    pub tls_ca: Option<PathBuf>,
    _logdir: tempfile::TempDir,
}

impl ServiceBuilder {
    /// One argument after `serve --listen ...`.
    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    /// Arguments after `serve --listen ...`.
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// An environment variable (e.g. a `TALOS_GEN_*` setting).
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.push((k.into(), v.into()));
        self
    }

    /// Run under `wrapper` (e.g. `unshare --pid --fork --mount-proc`, as a
    /// pod of its own would run it).
    pub fn under(mut self, wrapper: &[&str]) -> Self {
        self.wrapper = wrapper.iter().map(|s| s.to_string()).collect();
        self
    }

    /// `RUST_LOG` (default `info`).
    pub fn rust_log(mut self, filter: &str) -> Self {
        self.rust_log = filter.into();
        self
    }

    /// `--listen <prefix><port>` instead of `127.0.0.1:<port>` (e.g. `:`
    /// for every interface); the port is still a free one.
    pub fn listen_prefix(mut self, prefix: &str) -> Self {
        self.listen = Listen::Port(prefix.into());
        self
    }

    /// `--listen 127.0.0.1:0`: the service picks its port and says it in
    /// its `listening` log line, which is where the port is read from.
    pub fn listen_port_zero(mut self) -> Self {
        self.listen = Listen::Zero;
        self
    }

    /// Serve HTTPS with `DIR/tls.crt` and `DIR/tls.key` (as `talos-gen
    /// mirror cert` writes them, for 127.0.0.1); `/healthz` is then
    /// checked with curl and `DIR/ca.crt`, and [`Service::url`] is https.
    pub fn tls(mut self, dir: &std::path::Path) -> Self {
        self.args.push("--tls-cert".into());
        self.args.push(dir.join("tls.crt").into());
        self.args.push("--tls-key".into());
        self.args.push(dir.join("tls.key").into());
        self.tls_ca = Some(dir.join("ca.crt"));
        self
    }

    /// `--api-token-file DIR/token`, the file written with `contents`
    /// (the token, with or without its newline).
    pub fn api_token(mut self, dir: &std::path::Path, contents: &str) -> Self {
        let file = dir.join("token");
        std::fs::write(&file, contents).unwrap();
        self.args.push("--api-token-file".into());
        self.args.push(file.into());
        self
    }

    /// HTTPS whose `--tls-cert`/`--tls-key` the args already give (a
    /// manifest's own flags): `/healthz` is checked with curl and `ca`, and
    /// [`Service::url`] is https.
    pub fn tls_ca(mut self, ca: &std::path::Path) -> Self {
        self.tls_ca = Some(ca.to_path_buf());
        self
    }

    /// Start it and wait until `/healthz` answers 200 (a panic with its log
    /// if it exits first or takes more than 20 s).
    pub fn start(self) -> Service {
        let port = free_port();
        let listen = match &self.listen {
            Listen::Port(prefix) => format!("{prefix}{port}"),
            Listen::Zero => "127.0.0.1:0".to_string(),
        };
        let logdir = tempfile::tempdir().expect("log dir");
        let log = logdir.path().join("serve.log");
        let logf = std::fs::File::create(&log).expect("log file");
        // TALOS_GEN_BIN_UNDER_TEST: another build of talos-gen (a before
        // figure against main's binary); this crate's own by default.
        let bin = std::env::var_os("TALOS_GEN_BIN_UNDER_TEST")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_talos-gen").into());
        let mut cmd = match self.wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.arg("serve")
            .arg("--listen")
            .arg(listen)
            .args(&self.args)
            .env("RUST_LOG", &self.rust_log)
            .env("NO_COLOR", "1")
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(logf);
        let mut svc = Service {
            port,
            proc: Proc::spawn("talos-gen serve", cmd),
            log,
            tls_ca: self.tls_ca.clone(),
            _logdir: logdir,
        };
        let start = Instant::now();
        let timeout = Duration::from_secs(20);
        if let Listen::Zero = self.listen {
            svc.port = loop {
                if let Some(p) = listening_port(&svc.log_text()) {
                    break p;
                }
                svc.check_starting(start, timeout);
            };
        }
        while svc.healthz() != Some(200) {
            svc.check_starting(start, timeout);
        }
        svc
    }
}

/// The port of the `listening` line, in the text or the JSON log format.
fn listening_port(log: &str) -> Option<u16> {
    let line = log.lines().find(|l| l.contains("listening"))?;
    let (_, rest) = line
        .split_once("\"local\":\"")
        .or_else(|| line.split_once("local="))?;
    let addr = rest.split(['"', ' ']).next()?;
    addr.rsplit_once(':')?.1.parse().ok()
}

impl Service {
    pub fn builder() -> ServiceBuilder {
        ServiceBuilder {
            args: Vec::new(),
            envs: Vec::new(),
            wrapper: Vec::new(),
            rust_log: "info".into(),
            listen: Listen::Port("127.0.0.1:".into()),
            tls_ca: None,
        }
    }

    /// `GET /healthz`'s status (over TLS with curl when it is served so).
    fn healthz(&self) -> Option<u16> {
        let Some(ca) = &self.tls_ca else {
            return http_status(self.port, "/healthz");
        };
        let o = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
                "--cacert",
            ])
            .arg(ca)
            .arg(format!("{}/healthz", self.url()))
            .output()
            .ok()?;
        String::from_utf8_lossy(&o.stdout).trim().parse().ok()
    }

    /// Start with `args` after `serve --listen 127.0.0.1:<port>`; waits for `/healthz`.
    pub fn start(args: &[&str]) -> Service {
        Service::builder().args(args).start()
    }

    /// The same, run under `wrapper` (see [`ServiceBuilder::under`]).
    pub fn start_under(wrapper: &[&str], args: &[&str]) -> Service {
        Service::builder().under(wrapper).args(args).start()
    }

    fn check_starting(&mut self, start: Instant, timeout: Duration) {
        if let Some(st) = self.proc.try_status() {
            panic!("talos-gen serve exited with {st}: {}", self.log_text());
        }
        assert!(
            start.elapsed() < timeout,
            "talos-gen serve did not come up within {timeout:?}: {}",
            self.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls_ca.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:<port>`, as registry clients name it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.proc.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL now.
    pub fn stop(&mut self) {
        self.proc.kill();
    }

    /// Send SIGTERM.
    pub fn term(&self) {
        self.proc.term();
    }

    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.proc.try_status()
    }

    /// Wait for exit up to `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        self.proc.wait_exit(limit)
    }

    /// SIGTERM, then its exit code; panics if it has not exited within `limit`.
    pub fn terminate(mut self, limit: Duration) -> Option<i32> {
        self.term();
        match self.wait_exit(limit) {
            Some(st) => st.code(),
            None => panic!(
                "talos-gen serve did not stop within {limit:?} of SIGTERM: {}",
                self.log_text()
            ),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "--- talos-gen serve on port {} (last lines of its log):",
                self.port
            );
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
    }
}
