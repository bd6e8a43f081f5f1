//! nginx (Debian's nginx-light) serving a directory on loopback.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Proc, free_port, require_tool, wait_http};

#[derive(Debug, Clone, Default)]
pub struct NginxOpts {
    /// `limit_rate` for every response (e.g. `2m`).
    pub limit_rate: Option<String>,
    /// Answer 403 to any request that carries `Authorization` (a redirect
    /// target that must never be sent credentials).
    pub refuse_credentials: bool,
    /// Extra directives inside `server { }`.
    pub server_extra: String,
    /// Extra directives inside `http { }`.
    pub http_extra: String,
}

/// nginx (single process, `daemon off`) serving `root` on a loopback port,
/// with `Content-Disposition: attachment; filename=<last segment>` as the
/// Image Factory sends it, and an access log the test can read.
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
        let refuse = if opts.refuse_credentials {
            "if ($http_authorization) { return 403; }"
        } else {
            ""
        };
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
  fastcgi_temp_path {p}/fastcgi;
  uwsgi_temp_path {p}/uwsgi;
  scgi_temp_path {p}/scgi;
  sendfile on;
  keepalive_requests 100000;
  types {{ application/x-xz xz; application/zstd zst; application/x-iso9660-image iso; }}
  default_type application/octet-stream;
  {http_extra}
  server {{
    listen 127.0.0.1:{port};
    root {root};
    {limit}
    {refuse}
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

    /// The access log so far.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.prefix.path().join("access.log")).unwrap_or_default()
    }

    /// Access log lines that contain `needle` (e.g. `"GET /image/..."`).
    pub fn count(&self, needle: &str) -> usize {
        self.access_log()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }

    pub fn stop(&mut self) {
        self.proc.kill();
    }
}
