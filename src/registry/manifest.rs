//! Manifests: by digest from the store or the upstream (verified against
//! the digest, and against `Docker-Content-Digest`, before they are
//! committed byte for byte), tags revalidated after [`super::TAG_REVALIDATE`] with
//! the last known mapping served when the upstream fails.
//!
//! While the store does not answer (a bucket down), what it holds in the
//! local tier is served as it is (a tag's last known mapping, not
//! revalidated: nothing fetched could be kept), and the rest is 503 at
//! once: never fetched again from the upstream, never 404.

use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};

use super::client::MANIFEST_ACCEPT;
use super::error::{OciError, OciKind, check_answer, fetch_error, manifest_unknown};
use super::layout::{manifest_key, tag_key};
use super::names::{Digest, Reference, UpstreamId};
use super::proxy::{Registry, miss_path, scope};
use crate::cache::{Rules, Served, Stored, revalidate};
use crate::fill::Claim;
use crate::store::{Key, Meta};

/// The manifest types that list platform manifests (an OCI image index,
/// a Docker manifest list).
pub const INDEX_TYPES: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// Does a client whose `Accept` headers are `accept` take a manifest of
/// `media_type`? A single-platform manifest always (as distribution serves
/// it); an index only to a client that names its type (or `*/*`,
/// `application/*`), or that sent no `Accept`: a client that accepts only
/// Docker v2 single-platform manifests is never sent an index (distribution
/// answers it 404, `MANIFEST_UNKNOWN`).
pub fn accepts<'a>(accept: impl IntoIterator<Item = &'a str>, media_type: &str) -> bool {
    let essence = |t: &str| {
        t.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    };
    if !INDEX_TYPES.contains(&essence(media_type).as_str()) {
        return true;
    }
    let mut any = false;
    for t in accept.into_iter().flat_map(|h| h.split(',')).map(essence) {
        any = true;
        if t == "*/*" || t == "application/*" || t == essence(media_type) {
            return true;
        }
    }
    !any
}

/// The refusal of an index to a client that does not accept one.
pub fn not_accepted(repo: &str, reference: &str, media_type: &str) -> OciError {
    OciError::new(
        OciKind::ManifestUnknown,
        format!(
            "manifest {repo}:{reference} is an index ({media_type}), and the request's Accept takes no index; ask with Accept: {media_type}"
        ),
    )
}

/// Largest manifest accepted from an upstream (distribution's own limit is 4 MiB).
pub const MAX_MANIFEST: usize = 4 << 20;

/// A manifest ready to serve.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub digest: Digest,
    pub media_type: String,
    pub body: Bytes,
    /// The stored manifest of a tag, answered because the upstream failed
    /// (the answer says so: `Warning: 110 - "stale"`).
    pub stale: bool,
    /// Fetched from the upstream for this answer (and kept), not read
    /// from the store (`Cache-Status: talos-gen; fwd=miss; stored`).
    pub fetched: bool,
    /// How a tag's manifest was served (`Cache-Status`).
    pub served: Served,
}

impl Registry {
    /// The manifest `reference` names in `repo` on upstream `up`; what it
    /// fetches is cache (unpinned).
    pub async fn manifest(
        &self,
        up: &UpstreamId,
        repo: &str,
        reference: &Reference,
    ) -> Result<Manifest, OciError> {
        self.manifest_kept(up, repo, reference, false).await
    }

    /// [`Registry::manifest`], committing what it fetches (the manifest,
    /// and a tag's mapping) pinned when `pin` (the mirror job's own fills:
    /// one index write each, never a commit and then a pin).
    pub async fn manifest_kept(
        &self,
        up: &UpstreamId,
        repo: &str,
        reference: &Reference,
        pin: bool,
    ) -> Result<Manifest, OciError> {
        match reference {
            Reference::Digest(d) => self.manifest_by_digest(up, repo, d, pin).await,
            Reference::Tag(t) => self.manifest_by_tag(up, repo, t, pin).await,
        }
    }

    /// A stored manifest, if any; `Err` (503) when the store holds it but
    /// cannot read it now.
    async fn stored_manifest(&self, d: &Digest) -> Result<Option<Manifest>, OciError> {
        self.drop_misnamed(&manifest_key(d)).await;
        // Checked against its digest by the read (off the async threads);
        // a rotten one is dropped.
        let Some((entry, body)) = self
            .store
            .read_small_at(&manifest_key(d), MAX_MANIFEST as u64)
            .await
            .map_err(|e| OciError::new(OciKind::Unavailable, e.0))?
        else {
            return Ok(None);
        };
        let media_type = entry
            .content_type
            .clone()
            .unwrap_or_else(|| "application/vnd.oci.image.manifest.v1+json".into());
        Ok(Some(Manifest {
            digest: d.clone(),
            media_type,
            body,
            stale: false,
            fetched: false,
            served: Served::default(),
        }))
    }

    /// 503 while the store does not answer: what it does not hold in the
    /// local tier is not fetched (it could not be kept).
    pub(super) fn store_answers(&self) -> Result<(), OciError> {
        if self.store.available() {
            return Ok(());
        }
        Err(OciError::new(
            OciKind::Unavailable,
            format!(
                "the store {} does not answer; try again",
                self.store.describe()
            ),
        ))
    }

    async fn manifest_by_digest(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
        pin: bool,
    ) -> Result<Manifest, OciError> {
        if let Some(m) = self.stored_manifest(d).await? {
            self.metric(|x| x.hit("manifest"));
            return Ok(m);
        }
        if self.store_only(up) {
            let path = miss_path(up, repo, "manifests", d.as_str());
            self.metric(|x| x.offline_miss("manifest", &path));
            return Err(self.store_miss(up, manifest_unknown(repo, d.as_str())));
        }
        self.store_answers()?;
        self.metric(|x| x.miss("manifest"));
        // One fetch per digest (the one table of keys in flight); who
        // waited reads the store again with nothing held. The key is held
        // across the fetch alone: after taking it, only the index in
        // memory is looked at.
        let key = manifest_key(d);
        let mut tries = 0;
        let g = loop {
            tries += 1;
            match self.fills.claim(&key) {
                // (An entry whose manifest cannot be read is fetched again.)
                Claim::Mine(g) if tries > 2 || self.store.entry(&key).is_none() => break g,
                Claim::Mine(g) => drop(g),
                // The flight's outcome is this request's too: never
                // fetched again for it; waited on for one bound at most.
                Claim::Wait(w) => {
                    match tokio::time::timeout(self.fills.outages().wait(), w).await {
                        Ok(Some(o)) => {
                            if let Some(r) = o.downcast_ref::<Result<Option<Manifest>, OciError>>()
                            {
                                return shared(r, repo, d);
                            }
                        }
                        Ok(None) => {}
                        Err(_) => {
                            return Err(OciError::new(
                                OciKind::Timeout,
                                format!(
                                    "upstream {} gave no answer for {repo}@{d} within {}s",
                                    self.base_url(up)?,
                                    self.fills.outages().wait().as_secs()
                                ),
                            ));
                        }
                    }
                }
            }
            if let Some(m) = self.stored_manifest(d).await? {
                return Ok(m);
            }
        };
        let r = self
            .fetch_manifest(up, repo, d.as_str(), Some(d), pin)
            .await;
        g.finish(std::sync::Arc::new(r.clone()));
        shared(&r, repo, d)
    }

    /// A tag's manifest: the last known mapping while fresh
    /// (`--tag-revalidate`), else revalidated (a HEAD when a mapping is
    /// known: an unchanged digest is the stored manifest, its mapping
    /// refreshed; else a GET), the stored one answered stale when the
    /// upstream fails. Freshness, one revalidation per tag and the stale
    /// answer are [`crate::cache::revalidate`]'s; store-only upstreams
    /// answer from the store alone.
    async fn manifest_by_tag(
        &self,
        up: &UpstreamId,
        repo: &str,
        tag: &str,
        pin: bool,
    ) -> Result<Manifest, OciError> {
        let key = tag_key(up, repo, tag);
        let read = || async {
            // A mapping another process stored (the mirror job, a replica)
            // is read in first; a store that does not answer is 503, never
            // "no such tag".
            let Some(e) = self
                .store
                .entry_at(&key)
                .await
                .map_err(|e| OciError::new(OciKind::Unavailable, e.0))?
            else {
                return Ok(None);
            };
            let Some(d) = Digest::from_hex(&e.digest) else {
                return Ok(None);
            };
            Ok(self.stored_manifest(&d).await?.map(|m| Stored {
                value: m,
                entry: Some(e),
            }))
        };
        if self.store_only(up) {
            if let Some(s) = read().await? {
                self.metric(|x| x.hit("manifest"));
                return Ok(s.value);
            }
            let path = miss_path(up, repo, "manifests", tag);
            self.metric(|x| x.offline_miss("manifest", &path));
            return Err(self.store_miss(up, manifest_unknown(repo, tag)));
        }
        let this = self.clone();
        let (up_owned, repo_owned, tag_owned, key_owned) =
            (up.clone(), repo.to_string(), tag.to_string(), key.clone());
        let fetch = move |last: Option<Stored<Manifest>>| async move {
            let (up, repo, tag, key) = (&up_owned, &repo_owned[..], &tag_owned[..], &key_owned);
            // With a known mapping, a HEAD is enough when the digest is unchanged.
            if let Some(s) = &last {
                match this.head_manifest_digest(up, repo, tag).await {
                    Ok(Some(now)) if now == s.value.digest => {
                        this.link_tag(key, &s.value, pin).await;
                        return Ok(s.value.clone());
                    }
                    Ok(_) => {}
                    Err(e) if e.kind.failed() => return Err(e),
                    Err(_) => {}
                }
            }
            match this.fetch_manifest(up, repo, tag, None, pin).await? {
                Some(m) => {
                    this.link_tag(key, &m, pin).await;
                    Ok(m)
                }
                None => Err(manifest_unknown(repo, tag)),
            }
        };
        let upstream = self.base_url(up)?;
        let rules = Rules {
            kind: "manifest",
            key: Some(&key),
            ttl: self.revalidate,
            metrics: self.metrics(),
            may_use_stale: |e: &OciError| e.kind.failed(),
            unanswered,
            upstream: &upstream,
            unchanged: |a: &Manifest, b: &Manifest| a.digest == b.digest,
            timed_out: |m| OciError::new(OciKind::Timeout, m),
        };
        let unavailable = || {
            self.store_answers().err().unwrap_or_else(|| {
                OciError::new(OciKind::Unavailable, "the store does not answer; try again")
            })
        };
        let a = revalidate(&self.fills, rules, read, fetch, unavailable).await?;
        self.metric(|x| {
            if a.asked {
                x.miss("manifest")
            } else {
                x.hit("manifest")
            }
        });
        let served = a.served();
        let mut m = a.value;
        m.stale = a.stale;
        m.served = served;
        Ok(m)
    }

    /// Record `key` -> `m` (pinned when `pin`). Not while the store does
    /// not answer (the write would wait on it, and the mapping it has is
    /// the one served).
    async fn link_tag(&self, key: &Key, m: &Manifest, pin: bool) {
        if !self.store.available() {
            return;
        }
        // A pinned (mirrored) tag stays pinned when revalidated; what the
        // mirror job pins is fresh for the reader's own interval.
        let pinned = pin || self.store.entry(key).is_some_and(|e| e.pinned);
        let meta = Meta {
            content_type: Some(m.media_type.clone()),
            pinned,
            fresh_for: (!pin).then_some(self.revalidate),
            ..Meta::default()
        };
        if let Err(e) = self.store.link(key, m.digest.hex(), meta).await {
            tracing::warn!(key = %key, error = %e, "recording a tag mapping");
        }
    }

    /// Ask the upstream for the manifest `reference` of `repo` (every
    /// manifest type accepted); the URL asked and the answer, whatever its
    /// status.
    async fn ask_manifest(
        &self,
        method: Method,
        up: &UpstreamId,
        repo: &str,
        reference: &str,
    ) -> Result<(String, reqwest::Response), OciError> {
        let url = self.upstream_url(up, repo, "manifests", reference)?;
        let resp = self
            .client
            .send(
                method,
                &url,
                Some(MANIFEST_ACCEPT),
                &HeaderMap::new(),
                &scope(repo),
            )
            .await
            .map_err(fetch_error)?;
        Ok((url, resp))
    }

    /// `HEAD` the manifest: its `Docker-Content-Digest`, if the upstream gives one.
    async fn head_manifest_digest(
        &self,
        up: &UpstreamId,
        repo: &str,
        tag: &str,
    ) -> Result<Option<Digest>, OciError> {
        let (_, resp) = self.ask_manifest(Method::HEAD, up, repo, tag).await?;
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
        pin: bool,
    ) -> Result<Option<Manifest>, OciError> {
        let t0 = std::time::Instant::now();
        let (url, resp) = self.ask_manifest(Method::GET, up, repo, reference).await?;
        let st = resp.status();
        if st == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        check_answer(&resp, repo, reference)?;
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
            stale: false,
            fetched: true,
            served: Served::default(),
        };
        self.commit_manifest(&m, pin).await?;
        self.metric(|x| {
            x.upstream_fetch(
                "manifest",
                manifest_key(&m.digest).as_str(),
                None,
                t0.elapsed(),
            )
        });
        tracing::info!(repo, reference, digest = %m.digest, ms = t0.elapsed().as_millis() as u64, "manifest fetched");
        Ok(Some(m))
    }

    async fn commit_manifest(&self, m: &Manifest, pin: bool) -> Result<(), OciError> {
        let key = manifest_key(&m.digest);
        if self.store.entry(&key).is_some() {
            return Ok(());
        }
        let meta = Meta {
            content_type: Some(m.media_type.clone()),
            pinned: pin,
            ..Meta::default()
        };
        self.store.commit_bytes(&key, m.body.clone(), meta).await?;
        Ok(())
    }
}

/// A manifest-by-digest flight's outcome as one request's answer.
fn shared(
    r: &Result<Option<Manifest>, OciError>,
    repo: &str,
    d: &Digest,
) -> Result<Manifest, OciError> {
    match r {
        Ok(Some(m)) => Ok(m.clone()),
        Ok(None) => Err(manifest_unknown(repo, d.as_str())),
        Err(e) => Err(e.clone()),
    }
}

/// The upstream did not answer (a timeout, unreachable, a 5xx): its line,
/// for the memory of upstreams down ([`crate::outage`]); the store's own
/// failure is not the upstream's.
pub(super) fn unanswered(e: &OciError) -> Option<String> {
    let upstream = matches!(e.kind, OciKind::Upstream | OciKind::Timeout)
        || matches!(e.kind, OciKind::Relayed(s) if s >= 500);
    upstream.then(|| e.message.clone())
}

/// The `mediaType` field of a manifest body, when the upstream sent no usable Content-Type.
pub fn media_type_field(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct M {
        #[serde(rename = "mediaType")]
        media_type: Option<String>,
    }
    serde_json::from_slice::<M>(body).ok()?.media_type
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_only_to_a_client_that_accepts_one() {
        let oci = "application/vnd.oci.image.index.v1+json";
        let list = "application/vnd.docker.distribution.manifest.list.v2+json";
        let v2 = "application/vnd.docker.distribution.manifest.v2+json";
        assert!(!accepts([v2], oci));
        assert!(!accepts([v2], list));
        assert!(accepts([v2], v2));
        assert!(accepts([], oci));
        assert!(accepts(["*/*"], oci));
        assert!(accepts(
            [v2, "application/vnd.oci.image.index.v1+json;q=0.5"],
            oci
        ));
        assert!(accepts(
            [
                "application/vnd.oci.image.manifest.v1+json, APPLICATION/VND.DOCKER.DISTRIBUTION.MANIFEST.LIST.V2+JSON"
            ],
            list
        ));
        assert!(!accepts([v2], &format!("{oci}; charset=utf-8")));
    }
}
