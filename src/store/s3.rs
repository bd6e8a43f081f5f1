//! The S3 bucket backend (`--store s3://BUCKET[/PREFIX]`): the store's
//! objects, entries and checksums in an object store every replica shares,
//! through `object_store` (Apache Arrow's S3 client: streaming multipart
//! upload, ranged GET, conditional put), path-style addressing.
//!
//! # Layout under PREFIX
//! - `objects/sha256/<hex>`: object bytes, named by their sha256;
//! - `sums/<hex>`: the object's per-chunk checksums ([`super::sums`]);
//! - `index/<sha256(key)>.json`: one entry per key; its change token is a
//!   hash of the ETag (a rewrite gets a new one), or of last-modified and
//!   size where the store gives no ETag;
//! - `lock`: the lease that is the store lock across replicas (below).
//!
//! The local spool (`--cache-dir`, its `tmp/`) holds fills in progress:
//! readers of a growing fill read the local file; it is never the truth.
//! A verified spool file becomes an object by an upload streamed from the
//! file ([`PART`] bytes a part, at most [`PARTS_IN_FLIGHT`] parts in
//! memory), a multipart upload completed only when every part is there
//! (aborted on any failure), so the bucket never shows part of an object.
//!
//! # The store lock
//! A lease object `lock` written with a conditional put (`If-None-Match:
//! *`, `PutMode::Create`) naming its owner and an expiry ([`LEASE_TTL`]),
//! renewed while held (`If-Match` on its ETag) and deleted on release; a
//! taker waits (bounded by twice `--upstream-timeout`) while another holds
//! it, and takes over a lease whose expiry has passed (a replica that
//! died). [`S3Backend::open`] measures whether the store honours the
//! condition (a second create of the same name must fail): where it does
//! not, the lock orders this process's own threads only and deletions
//! across replicas are not serialized (logged once at start).
//!
//! # Blocking calls
//! The [`Backend`] trait blocks (the store calls it from `spawn_blocking`
//! threads, and a few short calls inline); the backend owns a small
//! multi-threaded tokio runtime of its own: every S3 call is spawned onto
//! it and waited for with `futures::executor::block_on`, which unlike
//! `Handle::block_on` may be called from any thread, an async worker
//! included. Every call is bounded by `--upstream-timeout` (the client's
//! request timeout, its retries, and a `tokio::time::timeout` around it).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    UpdateVersion,
};
use sha2::{Digest, Sha256};

use super::backend::{Backend, Listed, LockGuard, ObjectRead, Span};
use super::local::{Layout, is_hex64, is_index_name};

/// Bytes per multipart part (S3 wants at least 5 MiB but for the last).
pub const PART: usize = 8 << 20;
/// Parts uploading at once (memory per upload: this many parts and one
/// being read).
pub const PARTS_IN_FLIGHT: usize = 2;
/// How long a lease lives unless renewed.
pub const LEASE_TTL: Duration = Duration::from_secs(20);
/// How often a held lease is renewed.
const LEASE_RENEW: Duration = Duration::from_secs(5);

/// Where the bucket is and how to reach it (parsed at the CLI edge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    pub bucket: String,
    /// Without leading or trailing `/` (empty: the bucket's root).
    pub prefix: String,
    /// `http(s)://host:port` (default: AWS for the region).
    pub endpoint: Option<String>,
    pub region: String,
    /// Bound on every S3 call (`--upstream-timeout`).
    pub timeout: Duration,
    /// The local spool directory (`--cache-dir`).
    pub spool: PathBuf,
}

impl S3Config {
    /// Parse `s3://BUCKET[/PREFIX]`; the rest from defaults.
    pub fn parse_url(url: &str) -> Result<(String, String), String> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{url:?} is not s3://BUCKET[/PREFIX]"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
        if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(ok) {
            return Err(format!(
                "{url:?}: {bucket:?} is not a bucket name (3-63 of a-z, 0-9, '-', '.')"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|p| p == "." || p == ".." || (p.is_empty() && !prefix.is_empty()))
        {
            return Err(format!(
                "{url:?}: the prefix {prefix:?} has an empty or dot part"
            ));
        }
        Ok((bucket.to_string(), prefix.to_string()))
    }

    /// `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

/// A store in an S3 bucket.
pub struct S3Backend {
    cfg: S3Config,
    s3: Arc<AmazonS3>,
    /// The client of streams' GETs ([`client`]).
    streams: Arc<AmazonS3>,
    /// `None` only while dropping.
    rt: Option<tokio::runtime::Runtime>,
    spool: Layout,
    /// Orders this process's own holders of the lease.
    local: Mutex<()>,
    /// This process's name in a lease.
    owner: String,
    /// Does the store refuse a second create of one name (`If-None-Match`)?
    conditional_create: bool,
    /// Does it refuse an update with a stale ETag (`If-Match`)?
    conditional_update: bool,
}

fn io_err(e: object_store::Error) -> io::Error {
    use object_store::Error as E;
    let kind = match &e {
        E::NotFound { .. } => io::ErrorKind::NotFound,
        E::AlreadyExists { .. } => io::ErrorKind::AlreadyExists,
        E::Precondition { .. } | E::NotModified { .. } => io::ErrorKind::WouldBlock,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, crate::upstream::one_line(&e.to_string()))
}

/// A change token from what the store says of an entry.
fn token(e_tag: Option<&str>, modified: i64, size: u64) -> u64 {
    let text = match e_tag {
        Some(t) => t.trim_matches('"').to_string(),
        None => format!("{modified}/{size}"),
    };
    let h = Sha256::digest(text.as_bytes());
    u64::from_le_bytes(h[..8].try_into().expect("8 bytes"))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Lease {
    owner: String,
    /// Milliseconds since the epoch.
    expires: u64,
}

/// The S3 client: for `streams`, the one span GETs use (no bound on the
/// whole request, S3Span bounds it; no retries of its own).
fn client(cfg: &S3Config, key: &str, secret: &str, streams: bool) -> io::Result<AmazonS3> {
    let mut opts = ClientOptions::new()
        .with_connect_timeout(cfg.timeout.min(Duration::from_secs(10)))
        .with_pool_idle_timeout(Duration::from_secs(30));
    opts = if streams {
        // A stream's GET lasts as long as its client reads: no bound on
        // the whole request. S3Span bounds the answer and the body's pace
        // itself (reqwest's read timeout would also count the time the GET
        // waits for a slow reader).
        opts.with_timeout_disabled()
    } else {
        opts.with_timeout(cfg.timeout)
    };
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(&cfg.bucket)
        .with_region(&cfg.region)
        .with_access_key_id(key)
        .with_secret_access_key(secret)
        .with_virtual_hosted_style_request(false)
        .with_retry(RetryConfig {
            // A stream reopens its GET itself, from the byte it is at.
            max_retries: if streams { 0 } else { 2 },
            retry_timeout: cfg.timeout,
            backoff: object_store::BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
        });
    if let Ok(t) = std::env::var("AWS_SESSION_TOKEN")
        && !t.is_empty()
    {
        b = b.with_token(t);
    }
    if let Some(e) = &cfg.endpoint {
        if e.starts_with("http://") {
            opts = opts.with_allow_http(true);
        }
        b = b.with_endpoint(e.trim_end_matches('/'));
    }
    b.with_client_options(opts)
        .build()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
}

impl S3Backend {
    /// Connect (credentials from `AWS_ACCESS_KEY_ID` /
    /// `AWS_SECRET_ACCESS_KEY`, optionally `AWS_SESSION_TOKEN`), check the
    /// bucket answers, and measure its conditional puts.
    pub fn open(cfg: S3Config) -> io::Result<S3Backend> {
        let key = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_default();
        let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_default();
        if key.is_empty() || secret.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the S3 store needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment",
            ));
        }
        let s3 = client(&cfg, &key, &secret, false)?;
        let streams = client(&cfg, &key, &secret, true)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("talos-gen-s3")
            .enable_all()
            .build()?;
        let spool = Layout::new(cfg.spool.clone());
        std::fs::create_dir_all(spool.tmp()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("creating the spool {}: {e}", spool.tmp().display()),
            )
        })?;
        let mut me = S3Backend {
            cfg,
            s3: Arc::new(s3),
            streams: Arc::new(streams),
            rt: Some(rt),
            spool,
            local: Mutex::new(()),
            owner: format!(
                "{}-{}-{:08x}",
                hostname(),
                std::process::id(),
                rand::random::<u32>()
            ),
            conditional_create: false,
            conditional_update: false,
        };
        me.measure_conditions()?;
        if me.conditional_create {
            tracing::info!(
                store = %me.describe(),
                takeover = if me.conditional_update { "If-Match" } else { "delete, then create" },
                "the store lock is a lease object written by conditional put"
            );
        } else {
            tracing::warn!(
                store = %me.describe(),
                "this object store ignores If-None-Match on PUT: the store lock orders this process only, deletions across replicas are not serialized"
            );
        }
        Ok(me)
    }

    /// Does the store honour `If-None-Match: *` and `If-Match`? (Also the
    /// first check that the bucket answers with these credentials.)
    fn measure_conditions(&mut self) -> io::Result<()> {
        let probe = self.path(&format!("probe/{}", self.owner));
        let first = self
            .put_bytes(probe.clone(), b"1".to_vec(), PutMode::Create)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("writing to {}: {e}", self.describe()))
            })?;
        let second = self.put_bytes(probe.clone(), b"2".to_vec(), PutMode::Create);
        self.conditional_create =
            matches!(&second, Err(e) if e.kind() == io::ErrorKind::AlreadyExists);
        let stale = UpdateVersion {
            e_tag: Some("\"00000000000000000000000000000000\"".into()),
            version: None,
        };
        let update = self.put_bytes(probe.clone(), b"3".to_vec(), PutMode::Update(stale));
        self.conditional_update = update.is_err() && first.is_some();
        self.delete(probe);
        Ok(())
    }

    fn delete(&self, path: ObjPath) {
        let s3 = self.s3.clone();
        let _ = self.call(async move { s3.delete(&path).await });
    }

    /// What the store measured: (conditional create, conditional update).
    pub fn conditional_puts(&self) -> (bool, bool) {
        (self.conditional_create, self.conditional_update)
    }

    fn path(&self, rel: &str) -> ObjPath {
        if self.cfg.prefix.is_empty() {
            ObjPath::from(rel)
        } else {
            ObjPath::from(format!("{}/{rel}", self.cfg.prefix))
        }
    }

    fn object_path(&self, digest: &str) -> ObjPath {
        self.path(&format!("objects/sha256/{digest}"))
    }

    /// Run `fut` on the backend's runtime, bounded by the timeout; block
    /// this thread (any thread) until it ends.
    fn call<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        self.call_for(self.cfg.timeout, fut)
    }

    fn call_for<T: Send + 'static>(
        &self,
        limit: Duration,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        let rt = self.rt.as_ref().expect("runtime present until drop");
        let task = rt.spawn(async move { tokio::time::timeout(limit, fut).await });
        match futures::executor::block_on(task) {
            Ok(Ok(r)) => r.map_err(io_err),
            Ok(Err(_)) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the object store did not answer within {limit:?}"),
            )),
            Err(e) => Err(io::Error::other(e)),
        }
    }

    fn get_bytes(&self, path: ObjPath) -> io::Result<(Bytes, u64)> {
        let s3 = self.s3.clone();
        self.call(async move {
            let r = s3.get_opts(&path, Default::default()).await?;
            let meta = r.meta.clone();
            let b = r.bytes().await?;
            Ok((
                b,
                token(
                    meta.e_tag.as_deref(),
                    meta.last_modified.timestamp_millis(),
                    meta.size,
                ),
            ))
        })
    }

    fn put_bytes(&self, path: ObjPath, body: Vec<u8>, mode: PutMode) -> io::Result<Option<String>> {
        let s3 = self.s3.clone();
        self.call(async move {
            let r = s3
                .put_opts(
                    &path,
                    PutPayload::from(body),
                    PutOptions {
                        mode,
                        ..Default::default()
                    },
                )
                .await?;
            Ok(r.e_tag)
        })
    }

    fn list(&self, rel: &str) -> io::Result<Vec<object_store::ObjectMeta>> {
        let s3 = self.s3.clone();
        let prefix = self.path(rel);
        // Listing a large bucket takes several pages: a longer bound.
        self.call_for(self.cfg.timeout * 4, async move {
            let mut out = Vec::new();
            let mut s = s3.list(Some(&prefix));
            while let Some(m) = s.next().await {
                out.push(m?);
            }
            Ok(out)
        })
    }

    /// The name after `rel/` of a listed location (`None`: deeper or other).
    fn leaf(&self, rel: &str, m: &object_store::ObjectMeta) -> Option<String> {
        let full = m.location.as_ref();
        let base = self.path(rel);
        let rest = full.strip_prefix(base.as_ref())?.strip_prefix('/')?;
        (!rest.contains('/')).then(|| rest.to_string())
    }

    /// Is the store reachable (a HEAD of the lease, absent or not)?
    pub fn probe(&self, limit: Duration) -> io::Result<()> {
        let s3 = self.s3.clone();
        let p = self.path("lock");
        match self.call_for(
            limit.min(self.cfg.timeout),
            async move { s3.head(&p).await },
        ) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Upload the spool file as `path`: one PUT when it fits a part, else
    /// a multipart upload streamed from the file, aborted on failure.
    fn upload(&self, path: &ObjPath, file: &File, len: u64) -> io::Result<()> {
        let read = |pos: u64, n: usize| -> io::Result<Bytes> {
            let mut buf = vec![0u8; n];
            file.read_exact_at(&mut buf, pos)?;
            Ok(Bytes::from(buf))
        };
        if len <= PART as u64 {
            let body = read(0, len as usize)?;
            let s3 = self.s3.clone();
            let p = path.clone();
            return self
                .call(async move { s3.put(&p, PutPayload::from(body)).await })
                .map(drop);
        }
        let s3 = self.s3.clone();
        let p = path.clone();
        let mut up = self.call(async move { s3.put_multipart(&p).await })?;
        let rt = self.rt.as_ref().expect("runtime present until drop");
        let res = (|| {
            let mut inflight = std::collections::VecDeque::new();
            let mut pos = 0u64;
            while pos < len {
                let n = ((len - pos) as usize).min(PART);
                let body = read(pos, n)?;
                pos += n as u64;
                if inflight.len() >= PARTS_IN_FLIGHT {
                    let h: tokio::task::JoinHandle<_> =
                        inflight.pop_front().expect("a part in flight");
                    wait_part(h)?;
                }
                let part = up.put_part(PutPayload::from(body));
                let limit = self.cfg.timeout;
                inflight
                    .push_back(rt.spawn(async move { tokio::time::timeout(limit, part).await }));
            }
            for h in inflight {
                wait_part(h)?;
            }
            Ok::<_, io::Error>(())
        })();
        // `complete` and `abort` need the upload back on the runtime.
        let (tx, rx) = std::sync::mpsc::channel();
        let limit = self.cfg.timeout;
        let ok = res.is_ok();
        rt.spawn(async move {
            let r = if ok {
                tokio::time::timeout(limit, up.complete())
                    .await
                    .map(|r| r.map(drop))
            } else {
                tokio::time::timeout(limit, up.abort()).await
            };
            let _ = tx.send(r);
        });
        let done = rx
            .recv_timeout(limit + Duration::from_secs(1))
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "completing an upload"))?;
        res?;
        match done {
            Ok(r) => r.map_err(io_err),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("completing an upload did not finish within {limit:?}"),
            )),
        }
    }

    fn read_lease(&self) -> io::Result<Option<(Lease, String)>> {
        let s3 = self.s3.clone();
        let p = self.path("lock");
        let got = self.call(async move {
            let r = s3.get_opts(&p, Default::default()).await?;
            let etag = r.meta.e_tag.clone().unwrap_or_default();
            Ok((r.bytes().await?, etag))
        });
        match got {
            Ok((b, etag)) => Ok(serde_json::from_slice::<Lease>(&b).ok().map(|l| (l, etag))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn lease_body(&self) -> Vec<u8> {
        serde_json::to_vec(&Lease {
            owner: self.owner.clone(),
            expires: now_ms() + LEASE_TTL.as_millis() as u64,
        })
        .expect("a lease encodes")
    }

    /// Take the lease: create it; while another holds it, wait (bounded);
    /// take over one whose holder let it expire.
    fn take_lease(&self) -> io::Result<String> {
        let deadline = std::time::Instant::now() + self.cfg.timeout * 2;
        let mut pause = Duration::from_millis(20);
        loop {
            match self.put_bytes(self.path("lock"), self.lease_body(), PutMode::Create) {
                Ok(etag) => return Ok(etag.unwrap_or_default()),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            if let Some((lease, etag)) = self.read_lease()?
                && lease.expires < now_ms()
            {
                tracing::warn!(holder = %lease.owner, "taking over an expired store lease");
                if self.conditional_update {
                    let v = UpdateVersion {
                        e_tag: Some(etag),
                        version: None,
                    };
                    match self.put_bytes(self.path("lock"), self.lease_body(), PutMode::Update(v)) {
                        Ok(etag) => return Ok(etag.unwrap_or_default()),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(e),
                    }
                } else {
                    let s3 = self.s3.clone();
                    let p = self.path("lock");
                    let _ = self.call(async move { s3.delete(&p).await });
                }
                continue;
            }
            if std::time::Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the store lock of {} stayed taken for {:?}",
                        self.describe(),
                        self.cfg.timeout * 2
                    ),
                ));
            }
            let jitter = Duration::from_millis(rand::random::<u64>() % 20);
            std::thread::sleep(pause + jitter);
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }
}

fn wait_part(
    h: tokio::task::JoinHandle<Result<object_store::Result<()>, tokio::time::error::Elapsed>>,
) -> io::Result<()> {
    match futures::executor::block_on(h) {
        Ok(Ok(r)) => r.map_err(io_err),
        Ok(Err(_)) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "uploading a part timed out",
        )),
        Err(e) => Err(io::Error::other(e)),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "host".into())
}

impl Drop for S3Backend {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics on an async thread.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The held lease: renewed by a task on the backend's runtime, deleted
/// (when still ours) on drop.
struct LeaseGuard<'a> {
    backend: &'a S3Backend,
    _local: MutexGuard<'a, ()>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    renewer: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for LeaseGuard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(h) = self.renewer.take() {
            let _ = futures::executor::block_on(h);
        }
        let b = self.backend;
        // Delete it only if it is still ours (a lease that expired while
        // we were stalled may be another's by now).
        if let Ok(Some((lease, _))) = b.read_lease()
            && lease.owner == b.owner
        {
            let s3 = b.s3.clone();
            let p = b.path("lock");
            let _ = b.call(async move { s3.delete(&p).await });
        }
    }
}

struct LocalGuard<'a>(#[allow(dead_code)] MutexGuard<'a, ()>);

/// An object in the bucket: read by ranged GETs, or a stream's whole span
/// through one GET ([`S3Span`]).
#[derive(Clone)]
struct S3Object {
    s3: Arc<AmazonS3>,
    /// The client of span GETs.
    streams: Arc<AmazonS3>,
    path: ObjPath,
    len: u64,
    timeout: Duration,
    rt: tokio::runtime::Handle,
}

impl ObjectRead for S3Object {
    fn len(&self) -> u64 {
        self.len
    }

    /// A stream's bytes through one GET of the whole span: a ranged GET per
    /// 1 MiB chunk, even 4 of them in flight, reached 0.42x a direct GET
    /// from Garage (`bench/s3.sh`); one GET, about 0.7x.
    fn span(&self, from: u64, to: u64) -> Option<Box<dyn Span>> {
        if from >= to || to > self.len {
            // Chunk by chunk: `read_chunk` says what is wrong.
            return None;
        }
        let mut span = S3Span {
            object: self.clone(),
            pos: from,
            to,
            rx: None,
            buf: Bytes::new(),
            reopens: 0,
            brought: 0,
        };
        span.open();
        Some(Box::new(span))
    }

    fn read_chunk(&self, pos: u64, len: usize) -> io::Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        if pos + len as u64 > self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "stored object is shorter than its entry",
            ));
        }
        let s3 = self.s3.clone();
        let p = self.path.clone();
        let limit = self.timeout;
        let task = self.rt.spawn(async move {
            tokio::time::timeout(limit, s3.get_range(&p, pos..pos + len as u64)).await
        });
        let b = match futures::executor::block_on(task) {
            Ok(Ok(r)) => r.map_err(io_err)?,
            Ok(Err(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("a ranged GET did not finish within {limit:?}"),
                ));
            }
            Err(e) => return Err(io::Error::other(e)),
        };
        if b.len() != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("a ranged GET gave {} bytes of {len}", b.len()),
            ));
        }
        Ok(b)
    }
}

/// Body chunks a span's GET may have in flight ahead of its reader (the
/// HTTP client's reads: up to about 400 KiB each, so about 2 MiB queued).
const SPAN_BUFFER: usize = 4;
/// Times in a row a span opens its GET again, from where it was, after a
/// failed one (a GET that brought [`SPAN_FLOOR`] bytes starts the count
/// anew: a bucket that fails every few KiB is cut, as the floor says).
const SPAN_REOPENS: u32 = 2;
/// A span's GET must bring this many bytes within each timeout (time spent
/// waiting for the reader not counted): the floor a ranged GET per 1 MiB,
/// each bounded by the timeout, used to give.
const SPAN_FLOOR: usize = 1 << 20;

/// `pos..to` of an object read through one GET: a task on the backend's
/// runtime pulls the body into a bounded channel the reader takes from,
/// cut when it brings less than [`SPAN_FLOOR`] bytes in a timeout. A GET
/// that fails part way is opened again from the next byte, at most
/// [`SPAN_REOPENS`] times in a row; the reader dropping the span ends the
/// GET at its next chunk.
struct S3Span {
    object: S3Object,
    pos: u64,
    to: u64,
    rx: Option<tokio::sync::mpsc::Receiver<io::Result<Bytes>>>,
    buf: Bytes,
    reopens: u32,
    /// Bytes the current GET brought.
    brought: usize,
}

impl S3Span {
    fn open(&mut self) {
        self.brought = 0;
        let (tx, rx) = tokio::sync::mpsc::channel(SPAN_BUFFER);
        let (s3, path, limit) = (
            self.object.streams.clone(),
            self.object.path.clone(),
            self.object.timeout,
        );
        let range = self.pos..self.to;
        self.object.rt.spawn(async move {
            let late = |what: &str| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what} did not come within {limit:?}"),
                )
            };
            let opts = object_store::GetOptions {
                range: Some(object_store::GetRange::Bounded(range)),
                ..Default::default()
            };
            let get = tokio::select! {
                r = tokio::time::timeout(limit, s3.get_opts(&path, opts)) => r,
                _ = tx.closed() => return,
            };
            let mut body = match get {
                Ok(Ok(r)) => r.into_stream(),
                Ok(Err(e)) => {
                    let _ = tx.send(Err(io_err(e))).await;
                    return;
                }
                Err(_) => {
                    let _ = tx.send(Err(late("the answer to a GET"))).await;
                    return;
                }
            };
            // The floor: SPAN_FLOOR bytes per `limit` of waiting on the body.
            let (mut budget, mut got) = (limit, 0usize);
            loop {
                let t = tokio::time::Instant::now();
                let next = tokio::select! {
                    r = tokio::time::timeout(budget, body.next()) => r,
                    _ = tx.closed() => return,
                };
                budget = budget.saturating_sub(t.elapsed());
                let item = match next {
                    Ok(Some(Ok(b))) => {
                        got += b.len();
                        if got >= SPAN_FLOOR {
                            (budget, got) = (limit, got % SPAN_FLOOR);
                        }
                        Ok(b)
                    }
                    Ok(Some(Err(e))) => Err(io_err(e)),
                    Ok(None) => return,
                    Err(_) => Err(late(&format!("{SPAN_FLOOR} bytes of a GET"))),
                };
                let failed = item.is_err();
                // A reader gone (the client left) ends the GET here.
                if tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        self.rx = Some(rx);
    }
}

impl Span for S3Span {
    fn next_bytes(&mut self, n: usize) -> io::Result<Bytes> {
        if self.pos + n as u64 > self.to {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a span read past its end",
            ));
        }
        let mut out = bytes::BytesMut::new();
        while out.len() < n {
            if self.buf.is_empty() {
                let got = match self.rx.as_mut() {
                    Some(rx) => rx.blocking_recv(),
                    None => None,
                };
                match got {
                    Some(Ok(b)) => {
                        self.brought += b.len();
                        if self.brought >= SPAN_FLOOR {
                            self.reopens = 0;
                        }
                        self.buf = b;
                    }
                    // Ended or failed before the span's end: again from
                    // the next byte, a bounded number of times.
                    other => {
                        let err = match other {
                            Some(Err(e)) => e,
                            _ => io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "a GET ended before the bytes asked for",
                            ),
                        };
                        if self.reopens >= SPAN_REOPENS {
                            return Err(err);
                        }
                        self.reopens += 1;
                        tracing::warn!(error = %err, "a GET from the bucket failed part way; asking again from where it was");
                        self.open();
                    }
                }
                continue;
            }
            // A chunk that holds the whole read is handed out as it is.
            if out.is_empty() && self.buf.len() >= n {
                self.pos += n as u64;
                return Ok(self.buf.split_to(n));
            }
            if out.capacity() == 0 {
                out.reserve(n);
            }
            let take = (n - out.len()).min(self.buf.len());
            out.extend_from_slice(&self.buf.split_to(take));
            self.pos += take as u64;
        }
        Ok(out.freeze())
    }
}

impl Backend for S3Backend {
    fn describe(&self) -> String {
        self.cfg.url()
    }

    fn local_dir(&self) -> Option<&Path> {
        None
    }

    fn lock(&self) -> io::Result<LockGuard<'_>> {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        if !self.conditional_create {
            return Ok(Box::new(LocalGuard(local)));
        }
        let mut etag = self.take_lease()?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let s3 = self.s3.clone();
        let p = self.path("lock");
        let owner = self.owner.clone();
        let update = self.conditional_update;
        let limit = self.cfg.timeout;
        let rt = self.rt.as_ref().expect("runtime present until drop");
        let renewer = rt.spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = tokio::time::sleep(LEASE_RENEW) => {}
                }
                let body = serde_json::to_vec(&Lease {
                    owner: owner.clone(),
                    expires: now_ms() + LEASE_TTL.as_millis() as u64,
                })
                .expect("a lease encodes");
                let mode = if update {
                    PutMode::Update(UpdateVersion {
                        e_tag: Some(etag.clone()),
                        version: None,
                    })
                } else {
                    PutMode::Overwrite
                };
                let put = s3.put_opts(
                    &p,
                    PutPayload::from(body),
                    PutOptions {
                        mode,
                        ..Default::default()
                    },
                );
                match tokio::time::timeout(limit, put).await {
                    Ok(Ok(r)) => etag = r.e_tag.unwrap_or_default(),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "renewing the store lease failed");
                    }
                    Err(_) => tracing::warn!("renewing the store lease timed out"),
                }
            }
        });
        Ok(Box::new(LeaseGuard {
            backend: self,
            _local: local,
            stop: Some(stop),
            renewer: Some(renewer),
        }))
    }

    fn spool(&self) -> io::Result<(PathBuf, File)> {
        self.spool.locked_temp("fill-")
    }

    fn clean_spool(&self) {
        super::local::clean_temp(&self.spool);
    }

    fn list_objects(&self) -> io::Result<HashMap<String, u64>> {
        let mut out = HashMap::new();
        for m in self.list("objects/sha256")? {
            match self.leaf("objects/sha256", &m) {
                Some(name) if is_hex64(&name) => {
                    out.insert(name, m.size);
                }
                _ => tracing::warn!(location = %m.location, "not written by talos-gen: left alone"),
            }
        }
        Ok(out)
    }

    fn object_len(&self, digest: &str) -> Option<u64> {
        let s3 = self.s3.clone();
        let p = self.object_path(digest);
        self.call(async move { s3.head(&p).await })
            .ok()
            .map(|m| m.size)
    }

    fn object_age(&self, digest: &str) -> Option<Duration> {
        let s3 = self.s3.clone();
        let p = self.object_path(digest);
        let m = self.call(async move { s3.head(&p).await }).ok()?;
        let t =
            UNIX_EPOCH + Duration::from_millis(m.last_modified.timestamp_millis().max(0) as u64);
        Some(t.elapsed().unwrap_or_default())
    }

    fn open_object(&self, digest: &str) -> io::Result<Box<dyn ObjectRead>> {
        let s3 = self.s3.clone();
        let p = self.object_path(digest);
        let m = self.call(async move { s3.head(&p).await })?;
        Ok(Box::new(S3Object {
            s3: self.s3.clone(),
            streams: self.streams.clone(),
            path: self.object_path(digest),
            len: m.size,
            timeout: self.cfg.timeout,
            rt: self.rt.as_ref().expect("runtime present").handle().clone(),
        }))
    }

    fn put_object(&self, spool: &Path, file: File, digest: &str, sums: &[u8]) -> io::Result<bool> {
        let len = file.metadata()?.len();
        // The fill wrote through a write-only descriptor: read it anew.
        let file = super::local::open_regular(spool)?;
        self.put_bytes(
            self.path(&format!("sums/{digest}")),
            sums.to_vec(),
            PutMode::Overwrite,
        )?;
        // Content-addressed: an object of the right length under its
        // digest is these bytes (a replica committed it first).
        if self.object_len(digest) == Some(len) {
            return Ok(true);
        }
        self.upload(&self.object_path(digest), &file, len)?;
        match self.object_len(digest) {
            Some(n) if n == len => Ok(false),
            other => Err(io::Error::other(format!(
                "the uploaded object sha256:{digest} has {other:?} bytes, not {len}"
            ))),
        }
    }

    fn delete_object(&self, digest: &str) {
        for p in [
            self.object_path(digest),
            self.path(&format!("sums/{digest}")),
        ] {
            let s3 = self.s3.clone();
            if let Err(e) = self.call(async move { s3.delete(&p).await })
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(%digest, error = %e, "deleting from the bucket failed");
            }
        }
    }

    fn list_entries(&self) -> io::Result<Vec<Listed>> {
        let mut v = Vec::new();
        for m in self.list("index")? {
            match self.leaf("index", &m) {
                Some(name) if is_index_name(&name) => v.push(Listed {
                    token: token(
                        m.e_tag.as_deref(),
                        m.last_modified.timestamp_millis(),
                        m.size,
                    ),
                    name,
                }),
                _ => tracing::warn!(location = %m.location, "not written by talos-gen: left alone"),
            }
        }
        Ok(v)
    }

    fn read_entry(&self, name: &str) -> Option<(Vec<u8>, u64)> {
        if !is_index_name(name) {
            return None;
        }
        self.get_bytes(self.path(&format!("index/{name}")))
            .ok()
            .map(|(b, t)| (b.to_vec(), t))
    }

    fn write_entry(&self, name: &str, body: &[u8]) -> io::Result<u64> {
        let etag = self.put_bytes(
            self.path(&format!("index/{name}")),
            body.to_vec(),
            PutMode::Overwrite,
        )?;
        match etag {
            Some(t) => Ok(token(Some(&t), 0, 0)),
            // No ETag: the token is what a listing will say.
            None => Ok(self.get_bytes(self.path(&format!("index/{name}")))?.1),
        }
    }

    fn delete_entry(&self, name: &str) {
        let s3 = self.s3.clone();
        let p = self.path(&format!("index/{name}"));
        let _ = self.call(async move { s3.delete(&p).await });
    }

    fn read_sums(&self, digest: &str) -> Option<Vec<u8>> {
        self.get_bytes(self.path(&format!("sums/{digest}")))
            .ok()
            .map(|(b, _)| b.to_vec())
    }

    fn write_sums(&self, digest: &str, body: &[u8]) -> io::Result<()> {
        self.put_bytes(
            self.path(&format!("sums/{digest}")),
            body.to_vec(),
            PutMode::Overwrite,
        )
        .map(drop)
    }

    fn check(&self, limit: Duration) -> io::Result<()> {
        self.probe(limit)
    }

    fn upload_outside_lock(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            S3Config::parse_url("s3://talos-gen/store/a/").unwrap(),
            ("talos-gen".into(), "store/a".into())
        );
        assert_eq!(
            S3Config::parse_url("s3://talos-gen").unwrap(),
            ("talos-gen".into(), String::new())
        );
        assert!(S3Config::parse_url("s3://Talos").is_err());
        assert!(S3Config::parse_url("http://x/y").is_err());
        assert!(S3Config::parse_url("s3://bucket/a//b").is_err());
        assert!(S3Config::parse_url("s3://bucket/../b").is_err());
    }

    #[test]
    fn tokens_follow_the_etag() {
        assert_eq!(token(Some("\"abc\""), 1, 2), token(Some("abc"), 5, 6));
        assert_ne!(token(Some("abc"), 1, 2), token(Some("abd"), 1, 2));
        assert_ne!(token(None, 1, 2), token(None, 1, 3));
    }
}
