//! What a verifying client lists besides manifests and blobs: a
//! repository's tags (`/v2/<repo>/tags/list`) and a manifest's referrers
//! (`/v2/<repo>/referrers/<digest>`, OCI distribution 1.1).
//!
//! Tags: online the upstream's whole list (its `Link` pages followed on
//! the same origin, up to [`MAX_TAG_PAGES`], never kept in part), kept in
//! the store as such under [`tag_list_key`] and answered from it when the
//! upstream cannot answer (5xx, unreachable, a bound fired), stale; with
//! no whole list kept, the error: never the tags that happen to be
//! stored, as if the upstream had listed them. One upstream request per
//! repository at a time, its list every waiter's answer
//! ([`crate::cache::revalidate`]). Every view is in lexical order and
//! paginated here (`n`, `last`, `Link`), whatever the upstream does. A
//! registry answered from the store alone (offline, an `ns` with no
//! upstream) lists the tags the store holds for the repository (its
//! `oci/tag/<upstream>/<repo>:` keys): there the store is the registry. A
//! repository with none is 404 `NAME_UNKNOWN`.
//!
//! Referrers: online the upstream's index, checked (an index whose every
//! descriptor has a sha256 digest) and kept in the store under
//! [`referrers_key`], so that later and offline it is answered from there.
//! An upstream without the API (any 4xx but 429: a 1.1 registry never
//! answers 404 here) gives the stored index, else the empty one; an
//! upstream that fails (429, 5xx, unreachable) the stored one, else the
//! error. A paginated index (`Link`) is followed to its last page on the
//! same origin and kept whole, never in part. Offline: the stored index,
//! else the empty one (the API never
//! answers 404). `artifactType=` filters here, whatever the source, and says
//! so (`OCI-Filters-Applied`).

use bytes::Bytes;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};

use super::error::{OciError, OciKind, check_answer, fetch_error};
use super::layout::{Malformed, manifest_refs, referrers_key, tag_list_key, tag_prefix};
use super::manifest::unanswered;
use super::names::{self, Digest, UpstreamId};
use super::proxy::{Registry, scope};
use crate::cache::{Rules, Served, Stored, revalidate};
use crate::store::{Key, Meta};

/// The media type of a referrers answer.
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// Largest tag list or referrers index read from an upstream.
pub const MAX_LIST: usize = 4 << 20;
/// Most pages of one referrers index followed.
pub const MAX_REFERRER_PAGES: usize = 16;
/// Most pages of one upstream tag list followed.
pub const MAX_TAG_PAGES: usize = 64;

/// The referrers index of a manifest that has none.
pub fn empty_index() -> Bytes {
    Bytes::from_static(
        br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#,
    )
}

/// `?n=&last=` of a tag list request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagQuery {
    pub n: Option<usize>,
    pub last: Option<String>,
}

/// One page of a tag list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagList {
    pub name: String,
    pub tags: Vec<String>,
    /// The query of the next page (`Link: <...?n=..&last=..>; rel="next"`).
    pub next: Option<TagQuery>,
    /// The last whole list kept, answered because the upstream failed.
    pub stale: bool,
    /// How it was served (`Cache-Status`).
    pub served: Served,
}

impl TagList {
    /// `{"name": ..., "tags": [...]}`.
    pub fn body(&self) -> String {
        serde_json::json!({"name": self.name, "tags": self.tags}).to_string()
    }
}

/// A referrers answer.
#[derive(Debug, Clone)]
pub struct Referrers {
    /// The image index.
    pub body: Bytes,
    /// Whether `artifactType` was applied.
    pub filtered: bool,
    /// The stored index, answered because the upstream failed.
    pub stale: bool,
    /// Where the index came from.
    pub source: ReferrersSource,
    /// How it was served (`Cache-Status`).
    pub served: Served,
}

/// Where a referrers index came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferrersSource {
    Upstream,
    Stored,
    /// The stored index, because the upstream failed.
    Stale,
    /// Neither the upstream (no API, or offline) nor the store has one.
    Empty,
}

impl Registry {
    /// A page of the tags of `repo` on `up`.
    pub async fn tags(
        &self,
        up: &UpstreamId,
        repo: &str,
        q: &TagQuery,
    ) -> Result<TagList, OciError> {
        if let Some(l) = &q.last
            && !names::is_tag(l)
        {
            return Err(OciError::new(
                OciKind::Unsupported,
                format!(
                    "last={:?} is not a tag",
                    l.chars().take(80).collect::<String>()
                ),
            ));
        }
        if self.store_only(up) {
            return self.stored_tags(up, repo, q);
        }
        // Always asked (never fresh), one request per repository at a
        // time, the last whole list kept when the upstream fails.
        let key = tag_list_key(up, repo);
        let upstream = self.base_url(up)?;
        let rules = Rules {
            kind: "tags",
            key: Some(&key),
            ttl: std::time::Duration::ZERO,
            metrics: self.metrics(),
            may_use_stale: |e: &OciError| e.kind.failed(),
            unanswered,
            upstream: &upstream,
            unchanged: |a: &Vec<String>, b: &Vec<String>| a == b,
            timed_out: |m| OciError::new(OciKind::Timeout, m),
        };
        let read = || async {
            Ok(self.stored_tag_list(&key).await?.map(|tags| Stored {
                value: tags,
                entry: None,
            }))
        };
        let this = self.clone();
        let (up_owned, repo_owned, key_owned) = (up.clone(), repo.to_string(), key.clone());
        let fetch = move |_| async move {
            let tags = this.upstream_tags(&up_owned, &repo_owned).await?;
            this.keep_tag_list(&key_owned, &repo_owned, &tags).await?;
            Ok(tags)
        };
        let unavailable = || {
            self.store_answers().err().unwrap_or_else(|| {
                OciError::new(OciKind::Unavailable, "the store does not answer; try again")
            })
        };
        let a = revalidate(&self.fills, rules, read, fetch, unavailable).await?;
        let mut t = page(repo, a.value.clone(), q);
        t.stale = a.stale;
        t.served = a.served();
        Ok(t)
    }

    /// The last whole tag list kept for a repository (sorted); `Err`
    /// (503) when the store may hold it and does not answer.
    async fn stored_tag_list(&self, key: &Key) -> Result<Option<Vec<String>>, OciError> {
        let Some((_, body)) = self
            .store
            .read_small_at(key, MAX_LIST as u64)
            .await
            .map_err(|e| OciError::new(OciKind::Unavailable, e.0))?
        else {
            return Ok(None);
        };
        let list: Listed = serde_json::from_slice(&body).map_err(|e| {
            OciError::new(OciKind::Internal, format!("the stored tag list {key}: {e}"))
        })?;
        Ok(Some(list.tags.unwrap_or_default()))
    }

    /// Keep `tags` as the last whole list of `repo` (unless it holds that
    /// list already; a pinned key stays pinned).
    async fn keep_tag_list(&self, key: &Key, repo: &str, tags: &[String]) -> Result<(), OciError> {
        let body = serde_json::json!({"name": repo, "tags": tags}).to_string();
        let old = self.store.entry(key);
        if old
            .as_ref()
            .is_some_and(|e| e.digest == Digest::of(body.as_bytes()).hex())
        {
            return Ok(());
        }
        let meta = Meta {
            content_type: Some("application/json".into()),
            pinned: old.is_some_and(|e| e.pinned),
            ..Meta::default()
        };
        self.store
            .commit_bytes(key, Bytes::from(body), meta)
            .await?;
        Ok(())
    }

    /// The tags stored for `repo` (sorted), one page of them.
    pub fn stored_tags(
        &self,
        up: &UpstreamId,
        repo: &str,
        q: &TagQuery,
    ) -> Result<TagList, OciError> {
        let prefix = tag_prefix(up, repo);
        let all: Vec<String> = self
            .store
            .entries_with_prefix(&prefix)
            .into_iter()
            .filter_map(|e| prefix.rest(&e.key).map(str::to_string))
            .collect();
        // The tags in memory are what this process has read of the index:
        // while the store does not answer, none known is 503 (the store
        // may hold some), never "not known".
        let down = self.store_answers().err();
        if all.is_empty() {
            if let Some(e) = down {
                return Err(e);
            }
            return Err(OciError::new(
                OciKind::NameUnknown,
                format!("repository {repo} is not known (no tag of it is stored)"),
            ));
        }
        Ok(page(repo, all, q))
    }

    /// The upstream's whole tag list of `repo`, sorted: its `Link` pages
    /// followed on the same origin up to [`MAX_TAG_PAGES`], never a part
    /// of it (a page that fails, a link off the origin or back to a page
    /// read, too many pages or over [`MAX_LIST`] bytes is the error).
    async fn upstream_tags(&self, up: &UpstreamId, repo: &str) -> Result<Vec<String>, OciError> {
        let first = self.upstream_url(up, repo, "tags", "list")?;
        let bad = |m: String| OciError::upstream(format!("upstream tag list of {repo}: {m}"));
        let (mut url, mut seen, mut total, mut tags) = (first.clone(), Vec::new(), 0, Vec::new());
        loop {
            seen.push(url.clone());
            let resp = self
                .client
                .send(
                    Method::GET,
                    &url,
                    Some("application/json"),
                    &HeaderMap::new(),
                    &scope(repo),
                )
                .await
                .map_err(fetch_error)?;
            let st = resp.status();
            if st == StatusCode::NOT_FOUND {
                return Err(OciError::new(
                    OciKind::NameUnknown,
                    format!("repository {repo} is not known upstream"),
                ));
            }
            check_answer(&resp, repo, "tags/list")?;
            let links: Vec<String> = resp
                .headers()
                .get_all(reqwest::header::LINK)
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_string))
                .collect();
            let next = next_link(&url, links.iter().map(String::as_str))
                .map_err(|e| bad(e.to_string()))?;
            let body = self
                .client
                .limits()
                .read_small(&url, resp, MAX_LIST)
                .await
                .map_err(|e| fetch_error(e).context(&format!("the tag list of {repo}")))?;
            total += body.len();
            let page: Listed = serde_json::from_slice(&body)
                .map_err(|e| bad(format!("not {{\"name\", \"tags\"}}: {e}")))?;
            tags.extend(page.tags.unwrap_or_default());
            let Some(next) = next else {
                tags.sort();
                tags.dedup();
                return Ok(tags);
            };
            if total > MAX_LIST {
                return Err(bad(format!("the pages add up to over {MAX_LIST} bytes")));
            }
            if !same_origin(&first, &next) {
                return Err(bad(format!("the next page {next} is on another origin")));
            }
            if seen.contains(&next) {
                return Err(bad(format!("the next page {next} was read already")));
            }
            if seen.len() >= MAX_TAG_PAGES {
                return Err(bad(format!("more than {MAX_TAG_PAGES} pages")));
            }
            url = next;
        }
    }

    /// The referrers of manifest `d` in `repo`, filtered by `artifact_type`.
    pub async fn referrers(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
        artifact_type: Option<&str>,
    ) -> Result<Referrers, OciError> {
        let (body, source, served) = self.referrers_lookup(up, repo, d, false).await?;
        let stale = source == ReferrersSource::Stale;
        let Some(at) = artifact_type else {
            return Ok(Referrers {
                body,
                filtered: false,
                stale,
                source,
                served,
            });
        };
        let mut v: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            OciError::new(OciKind::Internal, format!("a stored referrers index: {e}"))
        })?;
        if let Some(list) = v.get_mut("manifests").and_then(|m| m.as_array_mut()) {
            list.retain(|m| m.get("artifactType").and_then(|t| t.as_str()) == Some(at));
        }
        Ok(Referrers {
            body: Bytes::from(v.to_string()),
            filtered: true,
            stale,
            source,
            served,
        })
    }

    /// The whole referrers index of `d` and where it came from. With
    /// `keep_empty` (the mirror job) an empty answer is stored too, so the
    /// store records that the manifest was asked about, and what is kept
    /// is committed pinned (one index write).
    pub async fn referrers_index(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
        keep_empty: bool,
    ) -> Result<(Bytes, ReferrersSource), OciError> {
        let (body, source, _) = self.referrers_lookup(up, repo, d, keep_empty).await?;
        Ok((body, source))
    }

    /// [`Registry::referrers_index`], and how it was served.
    async fn referrers_lookup(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
        keep_empty: bool,
    ) -> Result<(Bytes, ReferrersSource, Served), OciError> {
        let key = referrers_key(up, repo, d);
        if self.store_only(up) {
            let (b, s) = match self.stored_index(&key).await? {
                Some(b) => (b, ReferrersSource::Stored),
                None => (empty_index(), ReferrersSource::Empty),
            };
            return Ok((b, s, Served::default()));
        }
        // Always asked (no freshness: ttl zero), one request per index at
        // a time, the stored one when the upstream fails: the one path.
        let upstream = self.base_url(up)?;
        let rules = Rules {
            kind: "referrers",
            key: Some(&key),
            ttl: std::time::Duration::ZERO,
            metrics: self.metrics(),
            may_use_stale: |_: &OciError| true,
            unanswered,
            upstream: &upstream,
            unchanged: |a: &(Bytes, ReferrersSource), b: &(Bytes, ReferrersSource)| a.0 == b.0,
            timed_out: |m| OciError::new(OciKind::Timeout, m),
        };
        let read = || async {
            Ok(self.stored_index(&key).await?.map(|b| Stored {
                value: (b, ReferrersSource::Stored),
                entry: None,
            }))
        };
        let this = self.clone();
        let (up_owned, repo_owned, d_owned, key_owned) =
            (up.clone(), repo.to_string(), d.clone(), key.clone());
        let fetch = move |last: Option<Stored<(Bytes, ReferrersSource)>>| async move {
            let (this, key) = (&this, &key_owned);
            let fallback = |stored: Option<Bytes>| match stored {
                Some(b) => (b, ReferrersSource::Stored),
                None => (empty_index(), ReferrersSource::Empty),
            };
            let answer = match this
                .upstream_referrers(&up_owned, &repo_owned, &d_owned)
                .await?
            {
                Some(body) => {
                    this.keep_index(key, &body, keep_empty).await?;
                    return Ok((body, ReferrersSource::Upstream));
                }
                // No API upstream.
                None => fallback(last.map(|s| s.value.0)),
            };
            if keep_empty && answer.1 == ReferrersSource::Empty {
                this.keep_index(key, &answer.0, keep_empty).await?;
            }
            Ok(answer)
        };
        let unavailable = || {
            self.store_answers().err().unwrap_or_else(|| {
                OciError::new(OciKind::Unavailable, "the store does not answer; try again")
            })
        };
        let a = revalidate(&self.fills, rules, read, fetch, unavailable).await?;
        let served = a.served();
        let (body, source) = a.value;
        Ok((
            body,
            if a.stale {
                ReferrersSource::Stale
            } else {
                source
            },
            served,
        ))
    }

    /// `Ok(None)`: the upstream has no referrers API (a 4xx but 429). A
    /// paginated answer (`Link: <...>; rel="next"`) is followed page by page,
    /// on the same origin only, up to [`MAX_REFERRER_PAGES`], and the pages'
    /// descriptors merged into one index: never a partial one (a page that
    /// fails, a link off the origin or back to a page already read, too many
    /// pages, or a merged index over [`MAX_LIST`] is the error).
    async fn upstream_referrers(
        &self,
        up: &UpstreamId,
        repo: &str,
        d: &Digest,
    ) -> Result<Option<Bytes>, OciError> {
        let first = self.upstream_url(up, repo, "referrers", d.as_str())?;
        let what = format!("the referrers of {repo}@{d}");
        let bad = |m: String| OciError::upstream(format!("upstream referrers of {repo}@{d}: {m}"));
        let mut url = first.clone();
        let mut seen = vec![url.clone()];
        let mut merged: Option<serde_json::Value> = None;
        let mut total = 0;
        loop {
            let resp = self
                .client
                .send(
                    Method::GET,
                    &url,
                    Some(INDEX_MEDIA_TYPE),
                    &HeaderMap::new(),
                    &scope(repo),
                )
                .await
                .map_err(fetch_error)?;
            let st = resp.status();
            if merged.is_none() && st.is_client_error() && st != StatusCode::TOO_MANY_REQUESTS {
                return Ok(None);
            }
            check_answer(&resp, repo, &format!("referrers/{d}"))?;
            let links = resp
                .headers()
                .get_all(reqwest::header::LINK)
                .iter()
                .map(|v| {
                    v.to_str()
                        .map_err(|_| bad("a Link header that is not text".into()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let next = next_link(&url, links.iter().copied()).map_err(|e| bad(e.to_string()))?;
            let body = self
                .client
                .limits()
                .read_small(&url, resp, MAX_LIST)
                .await
                .map_err(|e| fetch_error(e).context(&what))?;
            check_index(&body).map_err(|e| bad(e.to_string()))?;
            total += body.len();
            if total > MAX_LIST {
                return Err(bad(format!("the pages add up to over {MAX_LIST} bytes")));
            }
            let Some(next) = next else {
                let Some(mut all) = merged else {
                    // One page: kept byte for byte.
                    return Ok(Some(Bytes::from(body)));
                };
                add_page(&mut all, &body).map_err(|e| bad(e.to_string()))?;
                let out = all.to_string();
                if out.len() > MAX_LIST {
                    return Err(bad(format!("the merged index is over {MAX_LIST} bytes")));
                }
                return Ok(Some(Bytes::from(out)));
            };
            match &mut merged {
                None => {
                    merged = Some(serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?)
                }
                Some(all) => add_page(all, &body).map_err(|e| bad(e.to_string()))?,
            }
            if !same_origin(&first, &next) {
                return Err(bad(format!("the next page {next} is on another origin")));
            }
            if seen.contains(&next) {
                return Err(bad(format!("the next page {next} was read already")));
            }
            if seen.len() >= MAX_REFERRER_PAGES {
                return Err(bad(format!("more than {MAX_REFERRER_PAGES} pages")));
            }
            seen.push(next.clone());
            url = next;
        }
    }

    /// The stored referrers index (read off the async threads); `Err`
    /// (503) when the store may hold it and does not answer: never taken
    /// for "none stored" (an empty index answered 200 would be a clean
    /// wrong answer).
    async fn stored_index(&self, key: &Key) -> Result<Option<Bytes>, OciError> {
        Ok(self
            .store
            .read_small_at(key, MAX_LIST as u64)
            .await
            .map_err(|e| OciError::new(OciKind::Unavailable, e.0))?
            .map(|(_, b)| b))
    }

    /// Store `body` under `key` unless it holds those bytes already; a
    /// pinned (mirrored) key stays pinned, and `pin` pins it.
    async fn keep_index(&self, key: &Key, body: &[u8], pin: bool) -> Result<(), OciError> {
        let old = self.store.entry(key);
        if old
            .as_ref()
            .is_some_and(|e| e.digest == Digest::of(body).hex())
        {
            return Ok(());
        }
        let meta = Meta {
            content_type: Some(INDEX_MEDIA_TYPE.into()),
            pinned: pin || old.is_some_and(|e| e.pinned),
            ..Meta::default()
        };
        self.store
            .commit_bytes(key, bytes::Bytes::copy_from_slice(body), meta)
            .await?;
        Ok(())
    }
}

/// An image index whose every descriptor has a sha256 digest.
fn check_index(body: &[u8]) -> Result<(), Malformed> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| Malformed(format!("not an image index: {e}")))?;
    if !v.get("manifests").is_some_and(|m| m.is_array()) {
        return Err(Malformed("not an image index: no manifests list".into()));
    }
    manifest_refs(body).map(drop)
}

/// One page of `all` (sorted here): the tags after `last`, at most `n`.
fn page(repo: &str, mut all: Vec<String>, q: &TagQuery) -> TagList {
    all.sort();
    all.dedup();
    if let Some(l) = &q.last {
        all.retain(|t| t.as_str() > l.as_str());
    }
    let mut next = None;
    if let Some(n) = q.n
        && all.len() > n
    {
        all.truncate(n);
        next = all.last().map(|l| TagQuery {
            n: Some(n),
            last: Some(l.clone()),
        });
    }
    TagList {
        name: repo.to_string(),
        tags: all,
        next,
        stale: false,
        served: Served::default(),
    }
}

/// A tag list's body (`{"name", "tags"}`), upstream or stored.
#[derive(serde::Deserialize)]
struct Listed {
    tags: Option<Vec<String>>,
}

/// The URL of the link whose relation is `next` among a response's `Link`
/// values (RFC 8288: one header or several, each a comma-separated list of
/// `<URL>; param=value...`), resolved against the page it came with;
/// `None` when none is. A value that is not such a list is an error.
fn next_link<'a>(
    base: &str,
    links: impl IntoIterator<Item = &'a str>,
) -> Result<Option<String>, Malformed> {
    let mut found = None;
    for value in links {
        let bad = || {
            Malformed(format!(
                "a Link header that is not <URL>; rel=...: {value:?}"
            ))
        };
        let mut rest = value.trim();
        while !rest.is_empty() {
            let (target, after) = rest
                .strip_prefix('<')
                .and_then(|r| r.split_once('>'))
                .ok_or_else(bad)?;
            let (params, tail) = after.split_once(',').unwrap_or((after, ""));
            rest = tail.trim_start();
            let is_next = params.split(';').any(|p| {
                p.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("rel")
                        && v.trim()
                            .trim_matches('"')
                            .split_ascii_whitespace()
                            .any(|r| r.eq_ignore_ascii_case("next"))
                })
            });
            if is_next && found.is_none() {
                let url = reqwest::Url::parse(base)
                    .and_then(|b| b.join(target))
                    .map_err(|_| bad())?;
                found = Some(url.to_string());
            }
        }
    }
    Ok(found)
}

/// Do two URLs share scheme, host and port?
fn same_origin(a: &str, b: &str) -> bool {
    match (reqwest::Url::parse(a), reqwest::Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

/// Append one referrers page's descriptors to the merged index.
fn add_page(all: &mut serde_json::Value, page: &[u8]) -> Result<(), Malformed> {
    let page: serde_json::Value =
        serde_json::from_slice(page).map_err(|e| Malformed(e.to_string()))?;
    let more = page
        .get("manifests")
        .and_then(|m| m.as_array())
        .cloned()
        .unwrap_or_default();
    all.get_mut("manifests")
        .and_then(|m| m.as_array_mut())
        .ok_or_else(|| Malformed("not an image index: no manifests list".into()))?
        .extend(more);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pages() {
        let all = tags(&["v2", "v1", "sha256-x.sig", "v3"]);
        let p = page("a", all.clone(), &TagQuery::default());
        assert_eq!(p.tags, tags(&["sha256-x.sig", "v1", "v2", "v3"]));
        assert_eq!(p.next, None);
        let q = TagQuery {
            n: Some(2),
            last: None,
        };
        let p = page("a", all.clone(), &q);
        assert_eq!(p.tags, tags(&["sha256-x.sig", "v1"]));
        let next = p.next.unwrap();
        assert_eq!(next.last.as_deref(), Some("v1"));
        let p = page("a", all.clone(), &next);
        assert_eq!(p.tags, tags(&["v2", "v3"]));
        assert_eq!(p.next, None);
        assert_eq!(
            page(
                "a",
                all,
                &TagQuery {
                    n: Some(0),
                    last: None
                }
            )
            .tags,
            Vec::<String>::new()
        );
        assert_eq!(
            TagList {
                name: "a/b".into(),
                tags: tags(&["v1"]),
                next: None,
                stale: false,
                served: Served::default(),
            }
            .body(),
            r#"{"name":"a/b","tags":["v1"]}"#
        );
    }

    #[test]
    fn referrer_pages() {
        let base = "http://r:5000/v2/a/referrers/sha256:00";
        let next = |links: &[&str]| next_link(base, links.iter().copied());
        let page = |q: &str| Ok(Some(format!("http://r:5000/v2/a/referrers/sha256:00?{q}")));
        assert_eq!(
            next(&[r#"</v2/a/referrers/sha256:00?n=1&last=x>; rel="next""#]),
            page("n=1&last=x")
        );
        // Several links, in one header or several: the one whose rel is next.
        assert_eq!(
            next(&[r#"<?last=a>; rel="prev", <?last=c>; rel="next""#]),
            page("last=c")
        );
        assert_eq!(
            next(&[r#"<?last=a>; rel="prev""#, r#"<?last=c>; rel=next"#]),
            page("last=c")
        );
        assert_eq!(
            next(&[r#"<?last=c>; title="x"; rel="prev next""#]),
            page("last=c")
        );
        assert_eq!(next(&[r#"<?p=2>; rel="prev""#]), Ok(None));
        assert_eq!(next(&[r#"<?p=2>; rel="next-archive""#]), Ok(None));
        assert_eq!(next(&[]), Ok(None));
        assert!(next(&["garbage"]).is_err());
        assert!(next(&[r#"<?p=2>; rel="prev", garbage"#]).is_err());
        assert!(same_origin(base, "http://r:5000/v2/b"));
        assert!(!same_origin(base, "http://r:5001/v2/a"));
        assert!(!same_origin(base, "https://r:5000/v2/a"));
        assert!(!same_origin(base, "http://evil/v2/a"));
        let d = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        let mut all = serde_json::json!({"schemaVersion": 2, "manifests": [{"digest": d('a')}]});
        let page = serde_json::json!({"manifests": [{"digest": d('b')}]}).to_string();
        add_page(&mut all, page.as_bytes()).unwrap();
        assert_eq!(all["manifests"].as_array().unwrap().len(), 2);
        assert!(add_page(&mut serde_json::json!({}), page.as_bytes()).is_err());
    }

    #[test]
    fn indexes() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert!(check_index(&empty_index()).is_ok());
        let ok = format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{d}","size":3,"artifactType":"x"}}]}}"#
        );
        assert!(check_index(ok.as_bytes()).is_ok());
        assert!(check_index(b"{}").is_err());
        assert!(check_index(b"<html>").is_err());
        assert!(check_index(br#"{"manifests":[{"digest":"md5:x"}]}"#).is_err());
    }
}
