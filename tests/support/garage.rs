//! Garage (an S3-compatible distributed object store; AGPL-3.0, run only as
//! separate processes, never linked) as a cluster on loopback for tests:
//! one `garage server` per node, each with its own config, metadata and data
//! directories in a tempdir and its own RPC and S3 ports, one shared
//! `rpc_secret`, `replication_factor = 3` (with the default `consistent`
//! mode: reads and writes need 2 of the 3 copies, so one node may be down).
//!
//! ```ignore
//! let Some(bin) = support::garage::binary() else { return };
//! let g = support::garage::Garage::cluster(&bin, 3);
//! g.endpoint(0); g.bucket; g.key_id; g.secret; g.region;
//! g.stop_node(1); g.start_node(1);
//! g.freeze(0); g.thaw(0); // SIGSTOP / SIGCONT: a hung bucket
//! ```
//!
//! Set up as an operator would: `garage server` per node, `garage node id`,
//! `garage node connect`, `garage layout assign` + `layout apply`,
//! `garage bucket create`, `garage key create`, `garage bucket allow`.
//! Everything is killed (SIGKILL) on drop; the tempdir goes with it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::Digest;

use super::{Proc, free_port, optional_tool};

/// The `garage` binary, or `None` (SKIP) unless `TALOS_GEN_REQUIRE_REFERENCE=1`.
pub fn binary() -> Option<PathBuf> {
    optional_tool("garage", "the S3 tests run a Garage cluster")
}

/// The region every node announces (the S3 backend's `--s3-region` default).
pub const REGION: &str = "us-east-1";
/// The bucket made by [`Garage::cluster`].
pub const BUCKET: &str = "talos-gen";
const KEY_NAME: &str = "talos-gen-test";

struct Node {
    config: PathBuf,
    log: PathBuf,
    rpc_port: u16,
    s3_port: u16,
    proc: Option<Proc>,
}

pub struct Garage {
    bin: PathBuf,
    nodes: Vec<Node>,
    pub bucket: String,
    pub key_id: String,
    pub secret: String,
    pub region: String,
    pub dir: tempfile::TempDir,
}

impl Garage {
    /// Start `n` nodes (replication factor `min(n, 3)`), connect them, apply
    /// a layout with every node in its own zone, then create the bucket
    /// [`BUCKET`] and a key allowed to read, write and own it.
    pub fn cluster(bin: &Path, n: usize) -> Garage {
        assert!(n >= 1);
        let dir = tempfile::tempdir().expect("garage tempdir");
        // 32 random bytes, hex: the cluster's shared RPC secret.
        let mut secret = [0u8; 32];
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut secret))
            .expect("random rpc_secret");
        let rpc_secret = hex::encode(secret);
        let rf = n.min(3);
        let mut nodes = Vec::new();
        for i in 0..n {
            let root = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(root.join("meta")).unwrap();
            std::fs::create_dir_all(root.join("data")).unwrap();
            let rpc_port = free_port();
            let s3_port = free_port();
            let config = root.join("garage.toml");
            // Garage 2.x configuration keys (garage_util::config::Config).
            let text = format!(
                r#"metadata_dir = "{root}/meta"
data_dir = "{root}/data"
db_engine = "lmdb"
replication_factor = {rf}
consistency_mode = "consistent"
rpc_bind_addr = "127.0.0.1:{rpc_port}"
rpc_public_addr = "127.0.0.1:{rpc_port}"
rpc_secret = "{rpc_secret}"

[s3_api]
s3_region = "{REGION}"
api_bind_addr = "127.0.0.1:{s3_port}"
"#,
                root = root.display(),
            );
            std::fs::write(&config, text).unwrap();
            nodes.push(Node {
                config,
                log: root.join("server.log"),
                rpc_port,
                s3_port,
                proc: None,
            });
        }
        let mut g = Garage {
            bin: bin.to_path_buf(),
            nodes,
            bucket: BUCKET.to_string(),
            key_id: String::new(),
            secret: String::new(),
            region: REGION.to_string(),
            dir,
        };
        for i in 0..n {
            g.spawn(i);
        }
        let ids: Vec<String> = (0..n).map(|i| g.node_id(i)).collect();
        for i in 0..n {
            g.wait_s3(i);
        }
        // Every node connects to every other one: a node's own outgoing
        // connections are what it counts a peer up by, and the peering loop
        // would take its time to open them.
        for i in 0..n {
            for (j, id) in ids.iter().enumerate() {
                if i != j {
                    // `<full id>@127.0.0.1:<rpc port>`, as `garage node id -q` prints it
                    g.retry(i, &["node", "connect", id], Duration::from_secs(30));
                }
            }
        }
        for (i, id) in ids.iter().enumerate() {
            let short = id.split('@').next().unwrap();
            g.ok(
                0,
                &[
                    "layout",
                    "assign",
                    "-z",
                    &format!("z{i}"),
                    "-c",
                    "1G",
                    short,
                ],
            );
        }
        g.ok(0, &["layout", "apply", "--version", "1"]);
        // The layout reaches the other nodes over RPC; the bucket and key
        // tables need a quorum of them, so retry until it has.
        g.retry(0, &["bucket", "create", BUCKET], Duration::from_secs(60));
        let key = g.ok(0, &["key", "create", KEY_NAME]);
        let text = String::from_utf8_lossy(&key.stdout).into_owned();
        g.key_id = field(&text, "Key ID:");
        g.secret = field(&text, "Secret key:");
        g.ok(
            0,
            &[
                "bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", KEY_NAME,
            ],
        );
        for i in 0..n {
            g.wait_s3(i);
            g.wait_healthy(i);
        }
        g
    }

    /// The S3 endpoint of node `i` (path-style: `{endpoint}/{bucket}/{key}`).
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[i].s3_port)
    }

    /// curl through node `i` with SigV4 for the cluster's key (`-sS`,
    /// `--max-time 30`); `payload` is the body's SHA-256 (hex), which S3
    /// wants in `x-amz-content-sha256` (curl signs it with the other
    /// headers). `path` is `/<bucket>/<key>` or `/<bucket>?query`.
    pub fn curl(&self, i: usize, payload: &str, args: &[&str], path: &str) -> Output {
        Command::new(super::require_tool("curl"))
            .args(["-sS", "--max-time", "30"])
            .arg("-H")
            .arg(format!("x-amz-content-sha256: {payload}"))
            .arg("--aws-sigv4")
            .arg(format!("aws:amz:{}:s3", self.region))
            .arg("--user")
            .arg(format!("{}:{}", self.key_id, self.secret))
            .args(args)
            .arg(format!("{}{path}", self.endpoint(i)))
            .stdin(Stdio::null())
            .output()
            .expect("running curl")
    }

    /// The keys under `prefix` in the bucket (ListObjectsV2 through node `i`).
    pub fn list(&self, i: usize, prefix: &str) -> Vec<String> {
        let empty = hex::encode(sha2::Sha256::digest(b""));
        let mut keys = Vec::new();
        let mut token = String::new();
        loop {
            let mut q = format!(
                "/{}?list-type=2&prefix={}",
                self.bucket,
                prefix.replace('/', "%2F")
            );
            if !token.is_empty() {
                q.push_str(&format!("&continuation-token={token}"));
            }
            let out = self.curl(i, &empty, &["--fail-with-body"], &q);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                out.status.success(),
                "list {prefix}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            for part in text.split("<Key>").skip(1) {
                keys.push(part.split("</Key>").next().unwrap_or("").to_string());
            }
            match text.split_once("<NextContinuationToken>") {
                Some((_, rest)) => {
                    token = rest
                        .split("</NextContinuationToken>")
                        .next()
                        .unwrap_or("")
                        .to_string();
                    token = token
                        .replace('+', "%2B")
                        .replace('/', "%2F")
                        .replace('=', "%3D");
                }
                None => return keys,
            }
        }
    }

    /// The object `key` of the bucket, through node `i`.
    pub fn get(&self, i: usize, key: &str) -> Vec<u8> {
        let empty = hex::encode(sha2::Sha256::digest(b""));
        let out = self.curl(
            i,
            &empty,
            &["--fail-with-body"],
            &format!("/{}/{key}", self.bucket),
        );
        assert!(
            out.status.success(),
            "GET {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Write `body` as the object `key` (a plain PUT through node `i`).
    pub fn put(&self, i: usize, key: &str, body: &[u8]) {
        let f = self.dir.path().join(format!("put-{}", rand_name()));
        std::fs::write(&f, body).unwrap();
        let sha = hex::encode(sha2::Sha256::digest(body));
        let data = format!("@{}", f.display());
        let out = self.curl(
            i,
            &sha,
            &["--fail-with-body", "-X", "PUT", "--data-binary", &data],
            &format!("/{}/{key}", self.bucket),
        );
        let _ = std::fs::remove_file(&f);
        assert!(
            out.status.success(),
            "PUT {key}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Delete the object `key` (through node `i`).
    pub fn delete(&self, i: usize, key: &str) {
        let empty = hex::encode(sha2::Sha256::digest(b""));
        let out = self.curl(
            i,
            &empty,
            &["--fail-with-body", "-X", "DELETE"],
            &format!("/{}/{key}", self.bucket),
        );
        assert!(
            out.status.success(),
            "DELETE {key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Every node's S3 endpoint.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.nodes.len()).map(|i| self.endpoint(i)).collect()
    }

    /// Kill node `i` (SIGKILL: a crash, not a clean stop). The others
    /// notice at their next ping (Garage pings every 15 s): until then a
    /// request that waits on the dead node takes that long (about 8 s here),
    /// then quorum from the other two answers it.
    pub fn stop_node(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].proc.take() {
            p.kill();
        }
    }

    /// Freeze node `i` (SIGSTOP): its sockets stay open and connections
    /// are still accepted, but nothing answers, as a hung bucket.
    pub fn freeze(&self, i: usize) {
        self.signal(i, libc::SIGSTOP);
    }

    /// Let a frozen node `i` go on (SIGCONT).
    pub fn thaw(&self, i: usize) {
        self.signal(i, libc::SIGCONT);
    }

    fn signal(&self, i: usize, sig: libc::c_int) {
        let p = self.nodes[i].proc.as_ref().expect("node running");
        // SAFETY: a signal to a child process we started and still hold.
        assert_eq!(unsafe { libc::kill(p.id() as libc::pid_t, sig) }, 0);
    }

    /// Start node `i` again on its own directories and ports; it finds its
    /// peers from the peer list it kept. Waits until its S3 port answers
    /// and every running node sees every running node.
    pub fn start_node(&mut self, i: usize) {
        assert!(self.nodes[i].proc.is_none(), "node {i} is running");
        self.spawn(i);
        let id = self.node_id(i);
        self.wait_s3(i);
        // Reconnect at once both ways (the others would retry on their own,
        // after a backoff of tens of seconds).
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|&j| j != i && self.nodes[j].proc.is_some())
            .collect();
        for &j in &running {
            let other = self.node_id(j);
            self.retry(i, &["node", "connect", &other], Duration::from_secs(30));
            self.retry(j, &["node", "connect", &id], Duration::from_secs(30));
        }
        for j in (0..self.nodes.len()).filter(|&j| self.nodes[j].proc.is_some()) {
            self.wait_healthy(j);
        }
    }

    /// Until node `i` reports itself connected to every storage node that
    /// is running (`json-api GetClusterHealth`); all of them running: status
    /// `healthy`.
    pub fn wait_healthy(&self, i: usize) {
        let up = self.nodes.iter().filter(|n| n.proc.is_some()).count() as u64;
        let all = up == self.nodes.len() as u64;
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < Duration::from_secs(60) {
            let out = self.cli(i, &["json-api", "GetClusterHealth"]);
            if out.status.success() {
                let h: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                if h["storageNodesUp"].as_u64() == Some(up) && (!all || h["status"] == "healthy") {
                    return;
                }
                last = h.to_string();
            } else {
                last = String::from_utf8_lossy(&out.stderr).into_owned();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("garage node {i} not connected to the {up} running nodes: {last}");
    }

    /// `garage -c <node i's config> args...`, its output (status not checked).
    pub fn cli(&self, i: usize, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .arg("-c")
            .arg(&self.nodes[i].config)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .output()
            .expect("running garage")
    }

    /// Node `i`'s server log (for failure messages).
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.nodes[i].log).unwrap_or_default()
    }

    fn spawn(&mut self, i: usize) {
        let node = &self.nodes[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap();
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-c")
            .arg(&node.config)
            .arg("server")
            .env("RUST_LOG", "garage=info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let p = Proc::spawn(&format!("garage node {i}"), cmd);
        self.nodes[i].proc = Some(p);
    }

    /// `garage node id -q` of node `i` (read from its metadata directory),
    /// retried until the server has written its key there.
    fn node_id(&mut self, i: usize) -> String {
        let start = Instant::now();
        loop {
            let out = self.cli(i, &["node", "id", "-q"]);
            if out.status.success() {
                let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
                assert!(
                    id.ends_with(&format!("@127.0.0.1:{}", self.nodes[i].rpc_port)),
                    "{id}"
                );
                return id;
            }
            let alive = self.nodes[i].proc.as_mut().is_some_and(|p| p.alive());
            if !alive || start.elapsed() > Duration::from_secs(30) {
                panic!(
                    "garage node {i} did not start (alive: {alive}): {}\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    self.log(i)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ok(&self, i: usize, args: &[&str]) -> Output {
        let out = self.cli(i, args);
        assert!(
            out.status.success(),
            "garage {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn retry(&self, i: usize, args: &[&str], timeout: Duration) -> Output {
        let start = Instant::now();
        loop {
            let out = self.cli(i, args);
            if out.status.success() {
                return out;
            }
            if start.elapsed() > timeout {
                panic!(
                    "garage {args:?} kept failing for {timeout:?}: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Until node `i`'s S3 API answers a signed-less request at all (any
    /// status: 403 for an anonymous GET is an answer).
    fn wait_s3(&mut self, i: usize) {
        let port = self.nodes[i].s3_port;
        let start = Instant::now();
        while super::http_status(port, "/").is_none() {
            if start.elapsed() > Duration::from_secs(30) {
                panic!("garage node {i} S3 API not answering:\n{}", self.log(i));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn rand_name() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The value after `label` on its line of `garage key create`'s table.
fn field(text: &str, label: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("no {label:?} in garage key create output:\n{text}"))
}
