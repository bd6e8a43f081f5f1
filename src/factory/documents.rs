//! The factory's small documents (`/versions`, the cosign signing key, the
//! SecureBoot certificate, a release's official extensions and overlays;
//! iPXE scripts are built in `pxe`): checked before they are kept, one
//! factory request per document at a time, answered from the store while
//! younger than `--metadata-ttl`, and the stored copy of any age (marked
//! stale) when the factory cannot be asked.

use std::time::Duration;

use super::{ImageCache, ImageError};
use crate::cache::{Rules, Served, Stored, revalidate};
use crate::fill::FetchError;
use crate::upstream::open_response;
use crate::version::Version;

/// Largest factory document (`/versions`, a key, an extension list) accepted.
const MAX_DOCUMENT: usize = 1 << 20;

/// How long a stored factory document is answered without asking the
/// factory again (`serve --metadata-ttl`).
pub const DEFAULT_METADATA_TTL: Duration = Duration::from_secs(300);

/// What a factory document must look like before it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DocKind {
    /// A JSON list of strings (`/versions`).
    Versions,
    /// A JSON list (the official extensions or overlays of a release).
    List,
    /// PEM with this block label.
    Pem(&'static str),
    /// An iPXE script (`#!ipxe` first).
    Ipxe,
}

/// A small document of the factory that a verifying or browsing client
/// fetches: `/versions`, the cosign signing key, the SecureBoot signing
/// certificate, the official extensions and overlays of a release. Kept in
/// the store under `factory<path>` (`factory/versions`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactoryDoc {
    /// The factory's path, e.g. `/version/v1.13.6/extensions/official`.
    pub path: String,
    pub(super) kind: DocKind,
}

impl FactoryDoc {
    /// `GET /versions`.
    pub fn versions() -> FactoryDoc {
        FactoryDoc {
            path: "/versions".into(),
            kind: DocKind::Versions,
        }
    }

    /// `GET /oci/cosign/signing-key.pub`: the key the factory signs installers with.
    pub fn cosign_key() -> FactoryDoc {
        FactoryDoc {
            path: "/oci/cosign/signing-key.pub".into(),
            kind: DocKind::Pem("PUBLIC KEY"),
        }
    }

    /// `GET /secureboot/signing-cert.pem`.
    pub fn secureboot_cert() -> FactoryDoc {
        FactoryDoc {
            path: "/secureboot/signing-cert.pem".into(),
            kind: DocKind::Pem("CERTIFICATE"),
        }
    }

    /// `GET /version/{v}/extensions/official` (`v` is checked and gets its
    /// leading `v`, as the factory adds it).
    pub fn extensions(version: &str) -> crate::Result<FactoryDoc> {
        let v = Version::parse_named(version, "version")?;
        Ok(FactoryDoc {
            path: format!("/version/{v}/extensions/official"),
            kind: DocKind::List,
        })
    }

    /// `GET /version/{v}/overlays/official`.
    pub fn overlays(version: &str) -> crate::Result<FactoryDoc> {
        let v = Version::parse_named(version, "version")?;
        Ok(FactoryDoc {
            path: format!("/version/{v}/overlays/official"),
            kind: DocKind::List,
        })
    }

    /// What `mirror sync` keeps for a set of Talos releases: `/versions`,
    /// the two signing documents, then each release's extension and
    /// overlay lists. Nothing for no release.
    pub fn for_releases(versions: &[String]) -> Vec<FactoryDoc> {
        if versions.is_empty() {
            return Vec::new();
        }
        let mut out = vec![
            FactoryDoc::versions(),
            FactoryDoc::cosign_key(),
            FactoryDoc::secureboot_cert(),
        ];
        for v in versions {
            for d in [FactoryDoc::extensions(v), FactoryDoc::overlays(v)]
                .into_iter()
                .flatten()
            {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
        out
    }

    /// The store key.
    pub fn store_key(&self) -> crate::store::Key {
        crate::store::Key::factory_doc(&self.path)
    }

    /// The content type when the factory sent none.
    fn default_content_type(&self) -> &'static str {
        match self.kind {
            DocKind::Pem(_) => "application/x-pem-file",
            DocKind::Ipxe => "text/plain; charset=utf-8",
            _ => "application/json",
        }
    }

    /// Is `body` this document (so a captive portal's HTML page or a
    /// truncated answer is never kept)?
    pub(super) fn check(&self, body: &[u8]) -> std::result::Result<(), NotTheDocument> {
        match self.kind {
            DocKind::Versions => serde_json::from_slice::<Vec<String>>(body)
                .map(drop)
                .map_err(NotTheDocument::Versions),
            DocKind::List => serde_json::from_slice::<Vec<serde_json::Value>>(body)
                .map(drop)
                .map_err(NotTheDocument::List),
            DocKind::Ipxe if body.starts_with(b"#!ipxe") => Ok(()),
            DocKind::Ipxe => Err(NotTheDocument::Ipxe),
            DocKind::Pem(label) => match pem::parse_many(body) {
                Ok(blocks) if blocks.first().is_some_and(|b| b.tag() == label) => Ok(()),
                _ => Err(NotTheDocument::Pem(label.to_lowercase())),
            },
        }
    }
}

/// What a factory's answer was instead of the document asked for.
#[derive(Debug, thiserror::Error)]
pub enum NotTheDocument {
    #[error("not a JSON list of versions: {0}")]
    Versions(serde_json::Error),
    #[error("not a JSON list: {0}")]
    List(serde_json::Error),
    #[error("not an iPXE script (no #!ipxe line)")]
    Ipxe,
    /// The block label asked for, in lower case.
    #[error("not a PEM {0}")]
    Pem(String),
}

/// A factory document as answered.
#[derive(Debug, Clone)]
pub struct Document {
    pub content_type: String,
    pub body: bytes::Bytes,
    /// The stored copy past `--metadata-ttl`, answered because the factory
    /// could not be asked (the answer says so: `Warning: 110 - "stale"`).
    pub stale: bool,
    /// How it was served (`Cache-Status`).
    pub served: Served,
}

impl ImageCache {
    /// The stored copy of `doc`, with its entry; `Err` (503) when the
    /// store holds it but does not answer (a bucket down, no local copy).
    async fn stored_document(
        &self,
        doc: &FactoryDoc,
    ) -> Result<Option<(crate::store::Entry, Document)>, ImageError> {
        let read = self
            .fills
            .store()
            .read_small_at(&doc.store_key(), MAX_DOCUMENT as u64)
            .await;
        let Some((entry, body)) =
            read.map_err(|e| ImageError::Fetch(FetchError::Unavailable(e.0)))?
        else {
            return Ok(None);
        };
        let content_type = entry
            .content_type
            .clone()
            .unwrap_or_else(|| doc.default_content_type().into());
        Ok(Some((
            entry,
            Document {
                content_type,
                body,
                stale: false,
                served: Served::default(),
            },
        )))
    }

    /// A factory document: the stored copy while fresh (`ttl` after it was
    /// fetched), else the factory's (checked, then kept, fresh for `ttl`);
    /// when the factory cannot be asked (down, 5xx, a timeout, an answer
    /// that is not the document) the stored copy of any age, marked stale.
    /// A 4xx from the factory is passed through: it has spoken. While the
    /// store does not answer (a bucket down) the factory is not asked
    /// (nothing could be kept): the copy in the local tier answers,
    /// anything else is 503. Offline: the stored copy or "not cached".
    /// Freshness, one fetch per document and the stale answer are
    /// [`crate::cache::revalidate`]'s.
    pub async fn document(&self, doc: &FactoryDoc, ttl: Duration) -> Result<Document, ImageError> {
        if self.upstream.is_none() {
            return self
                .stored_document(doc)
                .await?
                .map(|(_, d)| d)
                .ok_or_else(|| {
                    ImageError::NotCached(format!(
                        "{} is not in the cache and the service is offline",
                        doc.path
                    ))
                });
        }
        let key = doc.store_key();
        let store = self.fills.store();
        let upstream = self
            .upstream
            .as_ref()
            .map(|(_, b)| b.as_str())
            .unwrap_or("");
        let rules = Rules {
            kind: "document",
            key: Some(&key),
            ttl,
            metrics: Some(&self.metrics),
            // A 4xx is the factory's answer, not a failure.
            may_use_stale: |e: &ImageError| {
                !matches!(e, ImageError::Fetch(FetchError::Status { .. }))
            },
            unanswered: |e: &ImageError| match e {
                ImageError::Fetch(FetchError::Timeout(m) | FetchError::Failed(m)) => {
                    Some(m.clone())
                }
                _ => None,
            },
            upstream,
            unchanged: |a: &Document, b: &Document| a.body == b.body,
            timed_out: |m| ImageError::Fetch(FetchError::Timeout(m)),
        };
        let read = || async {
            Ok(self.stored_document(doc).await?.map(|(entry, d)| Stored {
                value: d,
                entry: Some(entry),
            }))
        };
        let (this, doc_owned) = (self.clone(), doc.clone());
        let fetch = move |last: Option<Stored<Document>>| async move {
            let _slot = match &this.doc_slots {
                Some(s) => s.clone().acquire_owned().await.ok(),
                None => None,
            };
            let doc = &doc_owned;
            let d = this.fetch_document(doc).await.map_err(ImageError::Fetch)?;
            // A pinned (mirrored) document stays pinned when revalidated.
            let pinned = last.and_then(|s| s.entry).is_some_and(|e| e.pinned);
            if let Err(e) = this.keep_document_for(doc, &d, pinned, Some(ttl)).await {
                tracing::warn!(error = %e, path = %doc.path, "keeping a factory document");
            }
            Ok(d)
        };
        let unavailable = || {
            ImageError::Fetch(FetchError::Unavailable(format!(
                "the store {} does not answer; try again",
                store.describe()
            )))
        };
        let a = revalidate(&self.fills, rules, read, fetch, unavailable).await?;
        let served = a.served();
        let mut d = a.value;
        d.stale = a.stale;
        d.served = served;
        Ok(d)
    }

    /// Ask the factory for `doc` (bounded: at most 1 MiB, under the
    /// upstream limits) and check it is that document. Nothing is stored.
    pub async fn fetch_document(&self, doc: &FactoryDoc) -> Result<Document, FetchError> {
        let Some((up, base)) = &self.upstream else {
            return Err(FetchError::Failed(format!(
                "{}: the service is offline",
                doc.path
            )));
        };
        let url = format!("{base}{}", doc.path);
        let resp = up.get(&url, &[]).await?;
        if resp.status() != reqwest::StatusCode::OK {
            // 4xx passed through, anything else (a 206 too) failed, as for every fetch.
            let st = resp.status();
            return Err(match open_response(resp, up.limits(), &[]).await {
                Err(e) => e,
                Ok(_) => FetchError::Failed(format!("upstream {url} answered {st}")),
            });
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .unwrap_or_else(|| doc.default_content_type().into());
        let body = up.limits().read_small(&url, resp, MAX_DOCUMENT).await?;
        doc.check(&body)
            .map_err(|e| FetchError::Failed(format!("upstream {url}: {e}")))?;
        Ok(Document {
            content_type,
            body: bytes::Bytes::from(body),
            stale: false,
            served: Served::default(),
        })
    }

    /// Keep `d` as the stored copy of `doc` (its age starts now; its
    /// freshness the reader's `--metadata-ttl`).
    pub async fn keep_document(
        &self,
        doc: &FactoryDoc,
        d: &Document,
        pinned: bool,
    ) -> crate::Result<crate::store::Entry> {
        self.keep_document_for(doc, d, pinned, None).await
    }

    /// [`ImageCache::keep_document`], fresh for `fresh_for` from now.
    async fn keep_document_for(
        &self,
        doc: &FactoryDoc,
        d: &Document,
        pinned: bool,
        fresh_for: Option<Duration>,
    ) -> crate::Result<crate::store::Entry> {
        let meta = crate::store::Meta {
            content_type: Some(d.content_type.clone()),
            pinned,
            fresh_for,
            ..Default::default()
        };
        self.fills
            .store()
            .commit_bytes(&doc.store_key(), d.body.clone(), meta)
            .await
    }

    /// `GET /versions`: [`ImageCache::document`] with the TTL the service
    /// was given. `(content type, body)`.
    pub async fn versions(&self) -> Result<(String, bytes::Bytes), ImageError> {
        let d = self
            .document(&FactoryDoc::versions(), self.metadata_ttl)
            .await?;
        Ok((d.content_type, d.body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factory_documents() {
        let e = FactoryDoc::extensions("1.13.6").unwrap();
        assert_eq!(e.path, "/version/v1.13.6/extensions/official");
        assert_eq!(
            e.store_key().as_str(),
            "factory/version/v1.13.6/extensions/official"
        );
        assert_eq!(
            FactoryDoc::versions().store_key().as_str(),
            "factory/versions"
        );
        assert_eq!(FactoryDoc::extensions("latest").unwrap_err().exit_code(), 2);
        assert_eq!(FactoryDoc::overlays("../x").unwrap_err().exit_code(), 2);
        assert!(e.check(b"[]").is_ok());
        assert!(e.check(b"<html>").is_err());
        assert!(FactoryDoc::versions().check(br#"["v1.13.6"]"#).is_ok());
        assert!(FactoryDoc::versions().check(b"[1]").is_err());
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pem = kp.public_key_pem();
        assert!(FactoryDoc::cosign_key().check(pem.as_bytes()).is_ok());
        assert_eq!(
            FactoryDoc::secureboot_cert()
                .check(pem.as_bytes())
                .unwrap_err()
                .to_string(),
            "not a PEM certificate"
        );
        let all = FactoryDoc::for_releases(&["v1.13.6".into(), "1.13.6".into(), "v1.12.0".into()]);
        assert_eq!(all.len(), 7, "{all:?}");
        assert!(FactoryDoc::for_releases(&[]).is_empty());
    }
}
