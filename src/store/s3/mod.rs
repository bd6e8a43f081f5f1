//! The S3 bucket backend (`--store s3://BUCKET[/PREFIX]`): the store's
//! objects, entries and checksums in a bucket every replica shares, through
//! `object_store` (streaming multipart upload, ranged GET, conditional
//! put), path-style addressing.
//!
//! Layout under PREFIX: `objects/sha256/<hex>` (bytes), `sums/<hex>`
//! (per-chunk checksums, [`super::sums`]), `index/<sha256(key)>.json` (one
//! entry per key; its change token a hash of the ETag, or of last-modified
//! and size), `pins/<sha256(key)>.pin` (a pinned key's record, written only
//! by a pinning write: `store::pins`), `lock` (the store lock's lease).
//!
//! The local spool (`--cache-dir`, its `tmp/`) holds fills in progress and
//! is never the truth: a verified spool file becomes an object by a
//! multipart upload streamed from the file ([`PART`] bytes a part, at most
//! [`PARTS_IN_FLIGHT`] in memory), completed only when every part is there,
//! so the bucket never shows part of an object.
//!
//! The store lock ([`lock`]): a lease object written with a conditional
//! put, renewed while held, taken over once expired. [`S3Backend::open`]
//! measures whether the store honours the condition; where it does not,
//! the lock orders this process's threads only (logged at start).
//!
//! Parts: this file (config, client, [`Backend`] calls), [`upload`],
//! [`lock`], [`span`] (reads), [`conn`] (the span GETs' client).
//!
//! The [`Backend`] calls block (the store calls them only from blocking
//! threads): each is spawned onto the backend's own small runtime and
//! waited for with `futures::executor::block_on`, bounded by
//! `--upstream-timeout`. A stream's span is the one read that does not
//! block: its GET is polled by its reader, each wait bounded.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
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

use super::backend::{Backend, Kind, Listed, LockGuard, ObjectRead, Publish};
use super::local::{Layout, is_hex64, is_index_name};
use super::pins::is_pin_name;
use super::sums::Sums;
use super::tier::Tier;

mod conn;
mod lock;
mod span;
mod upload;
mod uploads;

pub use lock::LEASE_TTL;
use span::S3Object;
pub use upload::{PART, PARTS_IN_FLIGHT};

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
    /// Bytes of the local tier under the spool (`serve
    /// --local-cache-max-size`; 0: none, every read from the bucket).
    pub local_tier: u64,
}

/// A `--store` URL that is not `s3://BUCKET[/PREFIX]` (the line says how).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadUrl(String);

impl S3Config {
    /// Parse `s3://BUCKET[/PREFIX]`; the rest from defaults.
    pub fn parse_url(url: &str) -> Result<(String, String), BadUrl> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| BadUrl(format!("{url:?} is not s3://BUCKET[/PREFIX]")))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
        if bucket.len() < 3 || bucket.len() > 63 || !bucket.chars().all(ok) {
            return Err(BadUrl(format!(
                "{url:?}: {bucket:?} is not a bucket name (3-63 of a-z, 0-9, '-', '.')"
            )));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|p| p == "." || p == ".." || (p.is_empty() && !prefix.is_empty()))
        {
            return Err(BadUrl(format!(
                "{url:?}: the prefix {prefix:?} has an empty or dot part"
            )));
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
    /// The local tier (`--local-cache-max-size`): copies of objects on
    /// the spool volume, kept and dropped by this backend alone.
    tier: Option<Arc<Tier>>,
    /// This process's multipart uploads in flight (never aborted by a sweep).
    uploading: uploads::InFlight,
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
    io::Error::new(kind, crate::text::error_line(&e))
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

/// The S3 client: for `streams`, the one span GETs use (no bound on the
/// whole request, S3Span bounds it; no retries of its own).
fn client(cfg: &S3Config, key: &str, secret: &str, streams: bool) -> io::Result<AmazonS3> {
    let connect_timeout = cfg.timeout.min(Duration::from_secs(10));
    let mut opts = ClientOptions::new()
        .with_connect_timeout(connect_timeout)
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
        let (http, https) = (e.starts_with("http://"), e.starts_with("https://"));
        if http {
            opts = opts.with_allow_http(true);
        }
        // Span GETs through the client that marks its sockets ([`conn`]),
        // unless a proxy is configured for the endpoint's scheme (reqwest
        // honours it; that client does not), or `bench/s3.sh` compares
        // `object_store`'s own GET ([`span::plain_get`], a bench-only build).
        if streams && (http || https) && !proxied(https) && !span::plain_get() {
            let tls = if https {
                Some(conn::tls_connector()?)
            } else {
                None
            };
            b = b.with_http_connector(conn::SpanClient::new(
                connect_timeout,
                span::SPAN_FLOOR,
                tls,
            ));
        }
        b = b.with_endpoint(e.trim_end_matches('/'));
    }
    b.with_client_options(opts)
        .build()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
}

/// Whether the environment names a proxy for HTTP, or with `https` for
/// HTTPS (reqwest's system proxy).
fn proxied(https: bool) -> bool {
    let scheme: &[&str] = if https {
        &["https_proxy", "HTTPS_PROXY"]
    } else {
        &["http_proxy", "HTTP_PROXY"]
    };
    scheme
        .iter()
        .chain(&["all_proxy", "ALL_PROXY"])
        .any(|v| std::env::var(v).is_ok_and(|p| !p.is_empty()))
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
            tier: None,
            uploading: Default::default(),
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

    /// Keep copies of its objects in a local tier in `dir` (on the spool
    /// volume), bounded by `max` bytes.
    pub(super) fn with_tier(mut self, dir: PathBuf, max: u64) -> io::Result<S3Backend> {
        let (s3, streams) = (self.s3.clone(), self.streams.clone());
        let prefix = self.cfg.prefix.clone();
        let timeout = self.cfg.timeout;
        let rt = self.rt.as_ref().expect("runtime present").handle().clone();
        let open: super::tier::Opener = Arc::new(move |digest: &str, len: u64| {
            let rel = format!("objects/sha256/{digest}");
            let path = if prefix.is_empty() {
                ObjPath::from(rel)
            } else {
                ObjPath::from(format!("{prefix}/{rel}"))
            };
            Box::new(S3Object {
                s3: s3.clone(),
                streams: streams.clone(),
                path,
                len,
                timeout,
                rt: rt.clone(),
            }) as Box<dyn ObjectRead>
        });
        self.tier = Some(Arc::new(Tier::open(dir, max)?.reading(open)));
        Ok(self)
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

    /// An object's metadata: `Ok(None)` when the bucket says it is not
    /// there, `Err` when it did not answer.
    fn head_object(&self, digest: &str) -> io::Result<Option<object_store::ObjectMeta>> {
        let s3 = self.s3.clone();
        let p = self.object_path(digest);
        match self.call(async move { s3.head(&p).await }) {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
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

    /// Where the index record `name` is: `index/` for an entry, `pins/`
    /// for a pin record.
    fn record_path(&self, name: &str) -> ObjPath {
        let folder = if is_pin_name(name) { "pins" } else { "index" };
        self.path(&format!("{folder}/{name}"))
    }

    /// Delete `p`: `Ok` when the bucket confirmed it gone (or it was not
    /// there), `Err` when it did not answer.
    fn delete_path(&self, p: ObjPath) -> io::Result<()> {
        let s3 = self.s3.clone();
        match self.call(async move { s3.delete(&p).await }) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
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

impl Backend for S3Backend {
    fn describe(&self) -> String {
        self.cfg.url()
    }

    fn abort_stale_uploads(&self, older_than: Duration) -> io::Result<super::backend::Aborted> {
        self.abort_old_uploads(older_than)
    }

    fn kind(&self) -> Kind {
        Kind::Bucket
    }

    fn lock(&self) -> io::Result<LockGuard<'_>> {
        self.take_lock()
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

    fn object_len(&self, digest: &str) -> io::Result<Option<u64>> {
        Ok(self.head_object(digest)?.map(|m| m.size))
    }

    fn object_age(&self, digest: &str) -> io::Result<Option<Duration>> {
        Ok(self.head_object(digest)?.map(|m| {
            let t = UNIX_EPOCH
                + Duration::from_millis(m.last_modified.timestamp_millis().max(0) as u64);
            t.elapsed().unwrap_or_default()
        }))
    }

    /// No round trip: the length is the index's (objects are immutable);
    /// a missing object shows at its first read.
    fn open_object(&self, digest: &str, len: u64) -> io::Result<Box<dyn ObjectRead>> {
        if let Some(copy) = self.tier.as_ref().and_then(|t| t.open_copy(digest, len)) {
            return Ok(copy);
        }
        Ok(Box::new(S3Object {
            s3: self.s3.clone(),
            streams: self.streams.clone(),
            path: self.object_path(digest),
            len,
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
        if self.object_len(digest)? == Some(len) {
            return Ok(true);
        }
        self.upload(&self.object_path(digest), &file, len)?;
        match self.object_len(digest)? {
            Some(n) if n == len => Ok(false),
            other => Err(io::Error::other(format!(
                "the uploaded object sha256:{digest} has {other:?} bytes, not {len}"
            ))),
        }
    }

    fn delete_object(&self, digest: &str) -> io::Result<()> {
        if let Some(t) = &self.tier {
            t.remove(digest);
        }
        for p in [
            self.object_path(digest),
            self.path(&format!("sums/{digest}")),
        ] {
            self.delete_path(p)?;
        }
        Ok(())
    }

    fn list_entries(&self) -> io::Result<Vec<Listed>> {
        let mut v = Vec::new();
        let folders: [(&str, super::local::NameCheck); 2] =
            [("index", is_index_name), ("pins", is_pin_name)];
        for (folder, ours) in folders {
            for m in self.list(folder)? {
                match self.leaf(folder, &m) {
                    Some(name) if ours(&name) => v.push(Listed {
                        token: token(
                            m.e_tag.as_deref(),
                            m.last_modified.timestamp_millis(),
                            m.size,
                        ),
                        name,
                    }),
                    _ => {
                        tracing::warn!(location = %m.location, "not written by talos-gen: left alone")
                    }
                }
            }
        }
        Ok(v)
    }

    fn read_entry(&self, name: &str) -> io::Result<Option<(Vec<u8>, u64)>> {
        if !is_index_name(name) && !is_pin_name(name) {
            return Ok(None);
        }
        match self.get_bytes(self.record_path(name)) {
            Ok((b, t)) => Ok(Some((b.to_vec(), t))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn write_entry(&self, name: &str, body: &[u8]) -> io::Result<u64> {
        let etag = self.put_bytes(self.record_path(name), body.to_vec(), PutMode::Overwrite)?;
        match etag {
            Some(t) => Ok(token(Some(&t), 0, 0)),
            // No ETag: the token is what a listing will say.
            None => Ok(self.get_bytes(self.record_path(name))?.1),
        }
    }

    fn delete_entry(&self, name: &str) -> io::Result<()> {
        self.delete_path(self.record_path(name))
    }

    fn read_sums(&self, digest: &str) -> io::Result<Option<Vec<u8>>> {
        match self.get_bytes(self.path(&format!("sums/{digest}"))) {
            Ok((b, _)) => Ok(Some(b.to_vec())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
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

    fn call_bound(&self) -> Duration {
        self.cfg.timeout
    }

    fn retain_copies(&self, keep: &dyn Fn(&str, u64) -> bool) {
        if let Some(t) = &self.tier {
            t.keep_only(keep);
        }
    }

    fn holds_copy(&self, digest: &str, size: u64) -> bool {
        self.tier.as_ref().is_some_and(|t| t.holds(digest, size))
    }

    fn drop_copy(&self, digest: &str) {
        if let Some(t) = &self.tier {
            t.remove(digest);
        }
    }

    fn read_through(&self, digest: &str, size: u64, sums: Arc<Sums>) {
        if let Some(t) = &self.tier {
            t.want(digest, size, sums);
        }
    }

    /// The upload runs before the store lock, so replicas do not wait on
    /// each other's uploads; under the lock the object is checked again
    /// (another replica may have deleted it meanwhile) and uploaded again
    /// if it went.
    fn stage_object<'a>(
        &'a self,
        spool: &'a Path,
        file: File,
        digest: &'a str,
        sums: &'a [u8],
    ) -> io::Result<Publish<'a>> {
        let len = file.metadata()?.len();
        let existed = self.put_object(spool, file, digest, sums)?;
        Ok(Box::new(move || {
            let existed = if self.object_len(digest)? == Some(len) {
                existed
            } else {
                let file = super::local::open_regular(spool)?;
                self.put_object(spool, file, digest, sums)?
            };
            // Verified on local disk already: the tier's copy.
            if let Some(t) = &self.tier {
                t.adopt_spool(spool, digest, len);
            }
            Ok(existed)
        }))
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
