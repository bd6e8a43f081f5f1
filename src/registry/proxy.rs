//! The pull-through itself: the [`Registry`] (upstreams, the store, the
//! shared fill, the client), which upstream serves a repository (`?ns=`,
//! `--mirror-upstream`, the installer's `--registry-url`), and blobs through
//! the fill.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};

use super::client::RegistryClient;
use super::error::{OciError, OciKind, blob_unknown, check_answer, fetch_error, fill_error};
use super::layout::{self, blob_key};
use super::names::{self, Digest, MirrorTable, NameError, UpstreamId};
use crate::fill::{FillSpec, Fills, Joined};
use crate::metrics::Metrics;
use crate::store::{Key, Store};
use crate::upstream::{FetchError, Opened};
use crate::upstream::{Limits, open_response};

/// A blob ready to serve: stored, or growing in the shared fill.
pub type Blob = crate::fill::Object;

/// Bound on one blob fill (headers and body).
pub const BLOB_FILL_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long a tag -> digest mapping is trusted before asking the upstream again.
pub const TAG_REVALIDATE: Duration = Duration::from_secs(30);

/// The pull-through: upstreams, the store, the client. Cloned into the
/// flights of [`crate::cache::revalidate`] (a task of their own).
#[derive(Clone)]
pub struct Registry {
    pub(super) store: Store,
    pub(super) fills: Fills,
    metrics: Option<Metrics>,
    pub(super) client: Arc<RegistryClient>,
    installer_url: Option<String>,
    installer_host: Option<String>,
    mirrors: MirrorTable,
    pub(super) offline: bool,
    direct: bool,
    pub(super) revalidate: Duration,
    /// The last reading of [`Registry::held_hosts`].
    held: Arc<Mutex<BTreeSet<String>>>,
}

impl Registry {
    /// `installer_url`: `--registry-url` (or the factory URL);
    /// `mirrors`: the `--mirror-upstream` strings.
    pub fn new(
        fills: Fills,
        metrics: Option<Metrics>,
        installer_url: Option<&str>,
        mirrors: MirrorTable,
        offline: bool,
        limits: Limits,
    ) -> crate::Result<Registry> {
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
            held: Arc::default(),
        })
    }

    /// Change the tag revalidation interval (tests, the mirror job).
    pub fn with_revalidate(mut self, d: Duration) -> Registry {
        self.revalidate = d;
        self
    }

    /// Which upstream serves `repo` for this `ns` (or why none does).
    ///
    /// With `--offline` no upstream is ever contacted, so no
    /// `--mirror-upstream` is needed: an `ns` the store holds objects for
    /// ([`Registry::held_hosts`]: what `mirror sync` put there for
    /// `extraImages` and `workers:`) is answered from the store, any other
    /// is 404 `NAME_UNKNOWN`; unknown content of a held one is 404 too.
    ///
    /// Online, an `ns` with no `--mirror-upstream` that the store holds is
    /// answered from the store alone ([`Registry::store_only`]): what a
    /// sync or an import put there serves its registry whatever the flags
    /// name; a miss there, and any `ns` the store does not hold, stays 403.
    pub fn route(&self, repo: &str, ns: Option<&str>) -> Result<UpstreamId, OciError> {
        match names::route(repo, ns, &self.mirrors, self.installer_host.as_deref()) {
            Err(NameError::Denied(d))
                if let Some(ns) = ns.filter(|n| names::is_registry_host(n)) =>
            {
                if self.holds(ns) {
                    Ok(UpstreamId::Mirror(ns.to_string()))
                } else if !self.offline {
                    Err(NameError::Denied(d).into())
                } else {
                    Err(OciError::new(
                        OciKind::NameUnknown,
                        format!(
                            "the store holds nothing of registry {ns:?} (serve --offline answers what mirror sync stored)"
                        ),
                    ))
                }
            }
            r => Ok(r?),
        }
    }

    /// The `ns` registries the store holds objects for, read off its tag
    /// and referrers keys (`oci/tag/ns=<host>/...`,
    /// `oci/referrers/ns=<host>/...`, see [`layout::held_host`]): every
    /// image `mirror sync` or the pull-through stored is reached through
    /// one of them. Nothing else records them, so an import or a sync on
    /// the same store is seen without a restart.
    pub fn held_hosts(&self) -> BTreeSet<String> {
        let mut hosts = BTreeSet::new();
        for p in crate::store::KeyPrefix::held_for_ns() {
            for e in self.store.entries_with_prefix(&p) {
                if let Some(h) = layout::held_host(&e.key) {
                    hosts.insert(h.to_string());
                }
            }
        }
        hosts
    }

    /// Whether `up` is answered from the store alone: `--offline`, or an
    /// `ns` registry with no `--mirror-upstream` (reached only because the
    /// store holds it, see [`Registry::route`]).
    pub(super) fn store_only(&self, up: &UpstreamId) -> bool {
        self.offline
            || matches!(up, UpstreamId::Mirror(ns) if !self.direct && self.mirrors.get(ns).is_none())
    }

    /// A miss of the store alone: `unknown` offline; online (an `ns` with
    /// no `--mirror-upstream`) 403, as for an `ns` the store does not hold.
    pub(super) fn store_miss(&self, up: &UpstreamId, unknown: OciError) -> OciError {
        match up {
            UpstreamId::Mirror(ns) if !self.offline => OciError::new(
                OciKind::Denied,
                format!(
                    "registry {ns:?} has no --mirror-upstream and the store does not hold this ({})",
                    unknown.message
                ),
            ),
            _ => unknown,
        }
    }

    /// Whether the store holds objects of registry `ns`: from the last
    /// reading of [`Registry::held_hosts`], read again when it says no.
    fn holds(&self, ns: &str) -> bool {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.contains(ns) {
            return true;
        }
        *held = self.held_hosts();
        held.contains(ns)
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
            OciKind::Denied,
            format!("registry {host:?} has no --mirror-upstream"),
        ))
    }

    pub(super) fn base_url(&self, up: &UpstreamId) -> Result<String, OciError> {
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
                    OciKind::Unavailable,
                    "no --registry-url configured for installer images",
                )
            }),
            UpstreamId::Mirror(ns) => self
                .mirrors
                .get(ns)
                // The source image proxy's registry has a default.
                .or((ns == super::source::SOURCE_HOST).then_some(super::source::SOURCE_DEFAULT_URL))
                .ok_or_else(|| OciError::new(OciKind::Denied, format!("ns {ns:?} not configured"))),
        }
    }

    pub(super) fn upstream_url(
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

    /// A blob: from the store, or from the shared fill (one upstream fetch
    /// streamed to every waiting reader, committed only when whole and
    /// verified against the digest); what it fetches is cache.
    pub async fn blob(&self, up: &UpstreamId, repo: &str, d: &Digest) -> Result<Blob, OciError> {
        self.blob_kept(up, repo, d, false).await
    }

    /// [`Registry::blob`], its fill committed pinned when `pin` (the
    /// mirror job's own fills: one index write).
    pub async fn blob_kept(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
        pin: bool,
    ) -> Result<Blob, OciError> {
        let key = blob_key(d);
        self.drop_misnamed(&key).await;
        if self.store_only(up) {
            let held = self.store.open_key(&key).await;
            let held = held.map_err(|e| fill_error(e.into(), repo, d))?;
            return match held {
                Some(obj) => {
                    self.metric(|m| m.hit("blob"));
                    Ok(Blob::Stored(obj))
                }
                None => {
                    let path = miss_path(up, repo, "blobs", d.as_str());
                    self.metric(|m| m.offline_miss("blob", &path));
                    Err(self.store_miss(up, blob_unknown(repo, d)))
                }
            };
        }
        let url = self.upstream_url(up, repo, "blobs", d.as_str())?;
        let client = self.client.clone();
        let scope = scope(repo);
        let expected = d.hex().to_string();
        let idle = self.client.limits().timeout + Duration::from_secs(5);
        let upstream = self.base_url(up)?;
        let joined = self
            .fills
            .join(&key, move || {
                let mut spec = FillSpec::new(move || {
                    Box::pin(async move { open_blob(&client, &url, &scope).await })
                });
                spec.expected_digest = Some(expected);
                spec.kind = "blob";
                spec.timeout = BLOB_FILL_TIMEOUT;
                // The upstream's own bounds fire first; this is the backstop.
                spec.idle_timeout = idle;
                spec.meta.content_type = Some("application/octet-stream".into());
                spec.meta.pinned = pin;
                spec.upstream = Some(upstream);
                spec
            })
            .await
            .map_err(|e| fill_error(e, repo, d))?;
        match &joined {
            Joined::Stored(_) => self.metric(|m| m.hit("blob")),
            Joined::Filling(_) => self.metric(|m| m.miss("blob")),
        }
        joined.object().await.map_err(|e| fill_error(e, repo, d))
    }

    /// A key that names a digest its object does not have (an imported
    /// bundle that lied) is dropped, never served: offline the digest is
    /// unknown, online it is fetched again.
    pub(super) async fn drop_misnamed(&self, key: &Key) {
        if let Some(e) = self.store.entry(key)
            && let Err(why) = layout::check_claim(key, &e.digest)
        {
            tracing::warn!(key = %key, reason = %why, "stored key names another object; dropped, not served");
            // The removal writes the index: on a blocking thread.
            let (store, k) = (self.store.clone(), key.clone());
            match tokio::task::spawn_blocking(move || store.remove(&k)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(key = %key, error = %e, "the misnamed key could not be dropped")
                }
                Err(e) => {
                    tracing::warn!(key = %key, error = %e, "the misnamed key's removal did not run")
                }
            }
        }
    }

    pub(super) fn metric(&self, f: impl FnOnce(&Metrics)) {
        if let Some(m) = &self.metrics {
            f(m);
        }
    }

    /// The metrics this registry counts into, if any.
    pub fn metrics(&self) -> Option<&Metrics> {
        self.metrics.as_ref()
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
    pub async fn stored_blob_size(&self, d: &Digest) -> Result<Option<u64>, OciError> {
        self.drop_misnamed(&blob_key(d)).await;
        match self.store.readable_entry_at(&blob_key(d)).await {
            Ok(e) => Ok(e.map(|e| e.size)),
            // Held but not readable now: the HEAD answers as the GET would (503).
            Err(e) => Err(OciError::from(FetchError::from(e))),
        }
    }

    /// The size of a blob without filling it: from the store, else an upstream HEAD.
    pub async fn blob_size(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
    ) -> Result<u64, OciError> {
        if let Some(n) = self.stored_blob_size(d).await? {
            return Ok(n);
        }
        if self.store_only(up) {
            return Err(self.store_miss(up, blob_unknown(repo, d)));
        }
        self.store_answers()?;
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
        check_answer(&resp, repo, d.as_str())?;
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

/// The `/v2/` path a store-only miss was asked at, for the status page.
pub(super) fn miss_path(up: &UpstreamId, repo: &str, kind: &str, reference: &str) -> String {
    match up {
        UpstreamId::Mirror(ns) => format!("/v2/{repo}/{kind}/{reference}?ns={ns}"),
        UpstreamId::Installer => format!("/v2/{repo}/{kind}/{reference}"),
    }
}

pub(super) fn scope(repo: &str) -> String {
    format!("repository:{repo}:pull")
}
