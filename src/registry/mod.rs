//! What `/v2/` means: repository and reference validation, manifests and
//! blobs by digest, tag revalidation, `?ns=` mirrors.
//!
//! The pull-through keeps everything in the shared [`Store`], under the
//! keys of [`layout`] (manifests and blobs by digest, tag links).
//!
//! Objects by digest are immutable: once verified (sha256 of the bytes equals
//! the digest) they are served without asking the upstream again. A tag is
//! revalidated after [`TAG_REVALIDATE`]; when the upstream cannot be reached
//! (or fails with 5xx), the last known mapping is served.

pub mod client;
pub mod layout;
pub mod names;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};

use crate::fill::{FetchError, FillHandle, FillSpec, Fills, Head, Joined, Opened};
use crate::metrics::Metrics;
use crate::store::{Meta, Store, StoredObject};
use crate::upstream::{Limits, open_response};
use client::{MANIFEST_ACCEPT, RegistryClient};
use layout::{blob_key, manifest_key, tag_key};
pub use names::{Digest, MirrorTable, NameError, Reference, UpstreamId};

/// How long a tag -> digest mapping is trusted before asking the upstream again.
pub const TAG_REVALIDATE: Duration = Duration::from_secs(30);
/// Largest manifest accepted from an upstream (distribution's own limit is 4 MiB).
pub const MAX_MANIFEST: usize = 4 << 20;

/// An OCI distribution error: HTTP status, error code, message.
#[derive(Debug, Clone)]
pub struct OciError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl OciError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> OciError {
        OciError {
            status,
            code,
            message: message.into(),
        }
    }

    /// The body: `{"errors":[{"code":...,"message":...}]}`.
    pub fn body(&self) -> String {
        serde_json::json!({"errors": [{"code": self.code, "message": self.message}]}).to_string()
    }

    fn upstream(msg: impl Into<String>) -> OciError {
        OciError::new(502, "UNAVAILABLE", msg)
    }

    /// The same error with what was being done in front (`reading X: ...`).
    fn context(mut self, what: &str) -> OciError {
        self.message = format!("reading {what}: {}", self.message);
        self
    }
}

impl From<NameError> for OciError {
    fn from(e: NameError) -> OciError {
        match e {
            NameError::Invalid(m) => OciError::new(400, "NAME_INVALID", m),
            NameError::Denied(m) => OciError::new(403, "DENIED", m),
            NameError::Reference(m) => OciError::new(400, "MANIFEST_INVALID", m),
            NameError::Digest(m) => OciError::new(400, "DIGEST_INVALID", m),
        }
    }
}

impl From<crate::Error> for OciError {
    fn from(e: crate::Error) -> OciError {
        match e {
            crate::Error::BadInput(m) => OciError::new(400, "UNSUPPORTED", m),
            crate::Error::Refused(m) => OciError::new(403, "DENIED", m),
            crate::Error::NotFound(m) => OciError::new(404, "NAME_UNKNOWN", m),
            crate::Error::Upstream(m) => OciError::upstream(m),
            e @ crate::Error::Io { .. } => OciError::new(500, "UNKNOWN", e.to_string()),
        }
    }
}

/// A manifest ready to serve.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub digest: Digest,
    pub media_type: String,
    pub body: Bytes,
}

/// A blob ready to serve.
pub enum Blob {
    /// Committed in the store.
    Stored(StoredObject),
    /// Being fetched: read it from the growing fill (its head is known).
    Filling(FillHandle, Head),
}

/// Bound on one blob fill (headers and body).
pub const BLOB_FILL_TIMEOUT: Duration = Duration::from_secs(3600);

/// The pull-through: upstreams, the store, the client.
pub struct Registry {
    store: Store,
    fills: Fills,
    metrics: Option<Metrics>,
    client: Arc<RegistryClient>,
    installer_url: Option<String>,
    installer_host: Option<String>,
    mirrors: MirrorTable,
    offline: bool,
    direct: bool,
    revalidate: Duration,
    locks: KeyedLocks,
}

impl Registry {
    /// `installer_url`: `--registry-url` (or the factory URL);
    /// `mirrors`: the `--mirror-upstream` strings.
    pub fn new(
        fills: Fills,
        metrics: Option<Metrics>,
        installer_url: Option<&str>,
        mirrors: &[String],
        offline: bool,
        limits: Limits,
    ) -> crate::Result<Registry> {
        let mirrors = MirrorTable::parse(mirrors).map_err(crate::Error::bad_input)?;
        let installer_url = installer_url
            .map(|u| {
                names::check_base_url(u)
                    .map_err(|e| crate::Error::bad_input(format!("--registry-url: {e}")))
            })
            .transpose()?;
        let installer_host = installer_url.as_deref().and_then(names::url_host);
        Ok(Registry {
            store: fills.store().clone(),
            fills,
            metrics,
            client: Arc::new(RegistryClient::new(limits)?),
            installer_url,
            installer_host,
            mirrors,
            offline,
            direct: false,
            revalidate: TAG_REVALIDATE,
            locks: KeyedLocks::default(),
        })
    }

    /// Change the tag revalidation interval (tests, the mirror job).
    pub fn with_revalidate(mut self, d: Duration) -> Registry {
        self.revalidate = d;
        self
    }

    /// Which upstream serves `repo` for this `ns` (or why none does).
    ///
    /// With `--offline` no upstream is ever contacted, so any valid `ns` is
    /// answered from what the store holds for it (what `mirror sync` put
    /// there for `extraImages`); unknown content is 404.
    pub fn route(&self, repo: &str, ns: Option<&str>) -> Result<UpstreamId, OciError> {
        match names::route(repo, ns, &self.mirrors, self.installer_host.as_deref()) {
            Err(NameError::Denied(_))
                if self.offline && ns.is_some_and(names::is_registry_host) =>
            {
                Ok(UpstreamId::Mirror(ns.unwrap_or_default().to_string()))
            }
            r => Ok(r?),
        }
    }

    /// Let the registry reach registries that have no
    /// `--mirror-upstream` at their own host (`https://<host>`; docker.io at
    /// registry-1.docker.io). For the mirror job, never for `serve`.
    pub fn allow_direct_upstreams(mut self) -> Registry {
        self.direct = true;
        self
    }

    /// The upstream for an image reference's registry host (`ghcr.io`):
    /// its `--mirror-upstream`, else the installer upstream when the host is
    /// `--registry-url`'s, else the host itself (only with
    /// [`Registry::allow_direct_upstreams`]).
    pub fn upstream_for_host(&self, host: &str) -> Result<UpstreamId, OciError> {
        if self.mirrors.get(host).is_some() {
            return Ok(UpstreamId::Mirror(host.to_string()));
        }
        if self.installer_host.as_deref() == Some(host) {
            return Ok(UpstreamId::Installer);
        }
        if self.direct || self.offline {
            return Ok(UpstreamId::Mirror(host.to_string()));
        }
        Err(OciError::new(
            403,
            "DENIED",
            format!("registry {host:?} has no --mirror-upstream"),
        ))
    }

    fn base_url(&self, up: &UpstreamId) -> Result<String, OciError> {
        if let UpstreamId::Mirror(ns) = up
            && self.mirrors.get(ns).is_none()
            && self.direct
        {
            return Ok(match ns.as_str() {
                "docker.io" | "index.docker.io" => "https://registry-1.docker.io".to_string(),
                _ => format!("https://{ns}"),
            });
        }
        self.configured_base_url(up).map(str::to_string)
    }

    fn configured_base_url(&self, up: &UpstreamId) -> Result<&str, OciError> {
        match up {
            UpstreamId::Installer => self.installer_url.as_deref().ok_or_else(|| {
                OciError::new(
                    503,
                    "UNAVAILABLE",
                    "no --registry-url configured for installer images",
                )
            }),
            UpstreamId::Mirror(ns) => self
                .mirrors
                .get(ns)
                .ok_or_else(|| OciError::new(403, "DENIED", format!("ns {ns:?} not configured"))),
        }
    }

    /// The manifest `reference` names in `repo` on upstream `up`.
    pub async fn manifest(
        &self,
        up: &UpstreamId,
        repo: &str,
        reference: &Reference,
    ) -> Result<Manifest, OciError> {
        match reference {
            Reference::Digest(d) => self.manifest_by_digest(up, repo, d).await,
            Reference::Tag(t) => self.manifest_by_tag(up, repo, t).await,
        }
    }

    /// A stored manifest, if any.
    async fn stored_manifest(&self, d: &Digest) -> Option<Manifest> {
        let obj = self.store.get(&manifest_key(d))?;
        let media_type = obj
            .entry
            .content_type
            .clone()
            .unwrap_or_else(|| "application/vnd.oci.image.manifest.v1+json".into());
        // Checked against its digest by the read; a rotten one is dropped.
        let body = match obj.read_small(MAX_MANIFEST as u64) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(%d, error = %e, "reading a stored manifest");
                return None;
            }
        };
        Some(Manifest {
            digest: d.clone(),
            media_type,
            body,
        })
    }

    async fn manifest_by_digest(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
    ) -> Result<Manifest, OciError> {
        if let Some(m) = self.stored_manifest(d).await {
            self.metric(|x| x.hit("manifest"));
            return Ok(m);
        }
        if self.offline {
            self.metric(|x| x.offline_miss("manifest"));
            return Err(manifest_unknown(repo, d.as_str()));
        }
        self.metric(|x| x.miss("manifest"));
        let key = manifest_key(d);
        let _g = self.locks.lock(&key).await;
        if let Some(m) = self.stored_manifest(d).await {
            return Ok(m);
        }
        match self.fetch_manifest(up, repo, d.as_str(), Some(d)).await? {
            Some(m) => Ok(m),
            None => Err(manifest_unknown(repo, d.as_str())),
        }
    }

    async fn manifest_by_tag(
        &self,
        up: &UpstreamId,
        repo: &str,
        tag: &str,
    ) -> Result<Manifest, OciError> {
        let key = tag_key(up, repo, tag);
        let known = |store: &Store| {
            store.entry(&key).and_then(|e| {
                let fresh = SystemTime::now()
                    .duration_since(e.fetched_time())
                    .map(|age| age < self.revalidate)
                    .unwrap_or(true);
                Digest::from_hex(&e.digest).map(|d| (d, fresh))
            })
        };
        if let Some((d, fresh)) = known(&self.store)
            && (fresh || self.offline)
            && let Some(m) = self.stored_manifest(&d).await
        {
            self.metric(|x| x.hit("manifest"));
            return Ok(m);
        }
        if self.offline {
            self.metric(|x| x.offline_miss("manifest"));
            return Err(manifest_unknown(repo, tag));
        }
        self.metric(|x| x.miss("manifest"));
        let _g = self.locks.lock(&key).await;
        let last = known(&self.store);
        if let Some((d, true)) = &last
            && let Some(m) = self.stored_manifest(d).await
        {
            return Ok(m);
        }
        let stale = |why: &OciError| {
            tracing::warn!(repo, tag, error = %why.message, "upstream unavailable; serving the last known tag mapping");
        };
        // With a known mapping, a HEAD is enough when the digest is unchanged.
        if let Some((d, _)) = &last {
            match self.head_manifest_digest(up, repo, tag).await {
                Ok(Some(now)) if now == *d => {
                    if let Some(m) = self.stored_manifest(d).await {
                        self.link_tag(&key, &m).await;
                        return Ok(m);
                    }
                }
                Ok(_) => {}
                Err(e) if e.status >= 500 => {
                    if let Some(m) = self.stored_manifest(d).await {
                        stale(&e);
                        return Ok(m);
                    }
                    return Err(e);
                }
                Err(_) => {}
            }
        }
        match self.fetch_manifest(up, repo, tag, None).await {
            Ok(Some(m)) => {
                self.link_tag(&key, &m).await;
                Ok(m)
            }
            Ok(None) => Err(manifest_unknown(repo, tag)),
            Err(e) if e.status >= 500 => match &last {
                Some((d, _)) => match self.stored_manifest(d).await {
                    Some(m) => {
                        stale(&e);
                        Ok(m)
                    }
                    None => Err(e),
                },
                None => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    async fn link_tag(&self, key: &str, m: &Manifest) {
        // A pinned (mirrored) tag stays pinned when revalidated.
        let pinned = self.store.entry(key).is_some_and(|e| e.pinned);
        let meta = Meta {
            content_type: Some(m.media_type.clone()),
            pinned,
            ..Meta::default()
        };
        if let Err(e) = self.store.link(key, m.digest.hex(), meta).await {
            tracing::warn!(key, error = %e, "recording a tag mapping");
        }
    }

    fn upstream_url(
        &self,
        up: &UpstreamId,
        repo: &str,
        kind: &str,
        reference: &str,
    ) -> Result<String, OciError> {
        Ok(format!(
            "{}/v2/{repo}/{kind}/{reference}",
            self.base_url(up)?
        ))
    }

    /// `HEAD` the manifest: its `Docker-Content-Digest`, if the upstream gives one.
    async fn head_manifest_digest(
        &self,
        up: &UpstreamId,
        repo: &str,
        tag: &str,
    ) -> Result<Option<Digest>, OciError> {
        let url = self.upstream_url(up, repo, "manifests", tag)?;
        let resp = self
            .client
            .send(
                Method::HEAD,
                &url,
                Some(MANIFEST_ACCEPT),
                &HeaderMap::new(),
                &scope(repo),
            )
            .await
            .map_err(fetch_error)?;
        let st = resp.status();
        if st.is_server_error() {
            return Err(OciError::upstream(format!(
                "upstream answered {st} for {repo}:{tag}"
            )));
        }
        if !st.is_success() {
            return Ok(None);
        }
        Ok(resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| Digest::parse(v).ok()))
    }

    /// GET a manifest from upstream, verify it, commit it. `Ok(None)`: 404.
    async fn fetch_manifest(
        &self,
        up: &UpstreamId,
        repo: &str,
        reference: &str,
        expect: Option<&Digest>,
    ) -> Result<Option<Manifest>, OciError> {
        let url = self.upstream_url(up, repo, "manifests", reference)?;
        let t0 = std::time::Instant::now();
        let resp = self
            .client
            .send(
                Method::GET,
                &url,
                Some(MANIFEST_ACCEPT),
                &HeaderMap::new(),
                &scope(repo),
            )
            .await
            .map_err(fetch_error)?;
        let st = resp.status();
        if st == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        check_status(st, repo, reference)?;
        let media_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let header_digest = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = self
            .client
            .limits()
            .read_small(&url, resp, MAX_MANIFEST)
            .await
            .map_err(|e| fetch_error(e).context(&format!("manifest {repo}:{reference}")))?;
        let digest = Digest::of(&body);
        if let Some(e) = expect
            && *e != digest
        {
            return Err(OciError::upstream(format!(
                "upstream manifest for {repo}@{e} hashes to {digest}; not served"
            )));
        }
        if let Some(h) = &header_digest
            && h.starts_with("sha256:")
            && h != digest.as_str()
        {
            return Err(OciError::upstream(format!(
                "upstream manifest {repo}:{reference} hashes to {digest} but Docker-Content-Digest says {h}; not served"
            )));
        }
        let media_type = media_type
            .filter(|m| {
                !m.is_empty() && m != "application/octet-stream" && !m.starts_with("text/plain")
            })
            .or_else(|| media_type_field(&body))
            .unwrap_or_else(|| "application/vnd.oci.image.manifest.v1+json".to_string());
        let m = Manifest {
            digest,
            media_type,
            body: Bytes::from(body),
        };
        self.commit_manifest(&m).await?;
        self.metric(|x| x.upstream_fetch("manifest", true, t0.elapsed()));
        tracing::info!(repo, reference, digest = %m.digest, ms = t0.elapsed().as_millis() as u64, "manifest fetched");
        Ok(Some(m))
    }

    async fn commit_manifest(&self, m: &Manifest) -> Result<(), OciError> {
        let key = manifest_key(&m.digest);
        if self.store.entry(&key).is_some() {
            return Ok(());
        }
        let mut tmp = self.store.temp()?;
        tmp.write_all(&m.body).await?;
        let meta = Meta {
            content_type: Some(m.media_type.clone()),
            ..Meta::default()
        };
        self.store.commit(tmp, &key, meta).await?;
        Ok(())
    }

    /// A blob: from the store, or from the shared fill (one upstream fetch
    /// streamed to every waiting reader, committed only when whole and
    /// verified against the digest).
    pub async fn blob(&self, up: &UpstreamId, repo: &str, d: &Digest) -> Result<Blob, OciError> {
        let key = blob_key(d);
        if self.offline {
            return match self.store.get(&key) {
                Some(obj) => {
                    self.metric(|m| m.hit("blob"));
                    Ok(Blob::Stored(obj))
                }
                None => {
                    self.metric(|m| m.offline_miss("blob"));
                    Err(blob_unknown(repo, d))
                }
            };
        }
        let url = self.upstream_url(up, repo, "blobs", d.as_str())?;
        let client = self.client.clone();
        let scope = scope(repo);
        let expected = d.hex().to_string();
        let idle = self.client.limits().timeout + Duration::from_secs(5);
        let joined = self.fills.join(&key, move || {
            let mut spec = FillSpec::new(move || {
                Box::pin(async move { open_blob(&client, &url, &scope).await })
            });
            spec.expected_digest = Some(expected);
            spec.kind = "blob";
            spec.timeout = BLOB_FILL_TIMEOUT;
            // The upstream's own bounds fire first; this is the backstop.
            spec.idle_timeout = idle;
            spec.meta.content_type = Some("application/octet-stream".into());
            spec
        });
        match joined {
            Joined::Stored(obj) => {
                self.metric(|m| m.hit("blob"));
                Ok(Blob::Stored(obj))
            }
            Joined::Filling(mut h) => {
                self.metric(|m| m.miss("blob"));
                let head = h.head().await.map_err(|e| fill_error(e, repo, d))?;
                Ok(Blob::Filling(h, head))
            }
        }
    }

    fn metric(&self, f: impl FnOnce(&Metrics)) {
        if let Some(m) = &self.metrics {
            f(m);
        }
    }

    /// Count bytes sent to a client.
    pub fn served(&self, kind: &str, bytes: u64) {
        self.metric(|m| m.served(kind, bytes));
    }

    /// Count a response by status.
    pub fn response(&self, status: u16) {
        self.metric(|m| m.response("registry", status));
    }

    /// Whether a blob is already stored (no upstream call), and its size.
    pub fn stored_blob_size(&self, d: &Digest) -> Option<u64> {
        self.store.entry(&blob_key(d)).map(|e| e.size)
    }

    /// The size of a blob without filling it: from the store, else an upstream HEAD.
    pub async fn blob_size(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
    ) -> Result<u64, OciError> {
        if let Some(n) = self.stored_blob_size(d) {
            return Ok(n);
        }
        if self.offline {
            return Err(blob_unknown(repo, d));
        }
        let url = self.upstream_url(up, repo, "blobs", d.as_str())?;
        let resp = self
            .client
            .send(Method::HEAD, &url, None, &HeaderMap::new(), &scope(repo))
            .await
            .map_err(fetch_error)?;
        let st = resp.status();
        if st == StatusCode::NOT_FOUND {
            return Err(blob_unknown(repo, d));
        }
        check_status(st, repo, d.as_str())?;
        // Not `content_length()`: for a HEAD answer that is the (empty) body's size.
        resp.headers()
            .get(reqwest::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| OciError::upstream(format!("upstream HEAD of blob {d} gave no length")))
    }
}

/// Open an upstream blob for the fill: follow redirects and challenges,
/// refuse non-2xx answers (never cached), stream the body.
async fn open_blob(client: &RegistryClient, url: &str, scope: &str) -> Result<Opened, FetchError> {
    let resp = client
        .send(Method::GET, url, None, &HeaderMap::new(), scope)
        .await?;
    let mut opened = open_response(resp, client.limits(), &[]).await?;
    opened.head.content_type = Some("application/octet-stream".into());
    Ok(opened)
}

/// How a failed blob fill is told to the client.
fn fill_error(e: FetchError, repo: &str, d: &Digest) -> OciError {
    match e {
        FetchError::Status { status: 404, .. } => blob_unknown(repo, d),
        FetchError::Status { status, .. } => match check_status(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            repo,
            d.as_str(),
        ) {
            Err(e) => e,
            Ok(()) => OciError::upstream(format!("upstream answered {status} for blob {d}")),
        },
        FetchError::Timeout(m) => OciError::new(504, "UNAVAILABLE", m),
        FetchError::Failed(m) => OciError::upstream(m),
        FetchError::Local(m) => OciError::new(500, "UNKNOWN", m),
    }
}

fn scope(repo: &str) -> String {
    format!("repository:{repo}:pull")
}

/// A transport failure toward an upstream registry: 504 when a bound
/// fired, 502 otherwise.
fn fetch_error(e: FetchError) -> OciError {
    match e {
        FetchError::Timeout(m) => OciError::new(504, "UNAVAILABLE", m),
        other => OciError::upstream(other.to_string()),
    }
}

fn check_status(st: StatusCode, repo: &str, reference: &str) -> Result<(), OciError> {
    if st.is_success() {
        return Ok(());
    }
    if st == StatusCode::UNAUTHORIZED || st == StatusCode::FORBIDDEN {
        return Err(OciError::new(
            403,
            "DENIED",
            format!("upstream refused anonymous access to {repo} ({reference}): {st}"),
        ));
    }
    if st == StatusCode::TOO_MANY_REQUESTS {
        return Err(OciError::new(
            429,
            "TOOMANYREQUESTS",
            format!("upstream rate-limited {repo}"),
        ));
    }
    Err(OciError::upstream(format!(
        "upstream answered {st} for {repo} ({reference})"
    )))
}

/// The `mediaType` field of a manifest body, when the upstream sent no usable Content-Type.
fn media_type_field(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct M {
        #[serde(rename = "mediaType")]
        media_type: Option<String>,
    }
    serde_json::from_slice::<M>(body).ok()?.media_type
}

fn manifest_unknown(repo: &str, reference: &str) -> OciError {
    OciError::new(
        404,
        "MANIFEST_UNKNOWN",
        format!("manifest {repo}:{reference} not known"),
    )
}

fn blob_unknown(repo: &str, d: &Digest) -> OciError {
    OciError::new(404, "BLOB_UNKNOWN", format!("blob {d} not known in {repo}"))
}

/// One async mutex per key, so one upstream fetch runs per key at a time.
#[derive(Default)]
struct KeyedLocks {
    map: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl KeyedLocks {
    async fn lock(&self, key: &str) -> KeyedGuard<'_> {
        let m = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(key.to_string()).or_default().clone()
        };
        let guard = m.clone().lock_owned().await;
        KeyedGuard {
            locks: self,
            key: key.to_string(),
            guard: Some(guard),
        }
    }
}

struct KeyedGuard<'a> {
    locks: &'a KeyedLocks,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for KeyedGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.locks.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = map.get(&self.key)
            && Arc::strong_count(m) == 1
        {
            map.remove(&self.key);
        }
    }
}
