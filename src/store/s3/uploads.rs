//! Unfinished multipart uploads under the store's `objects/`: listed with
//! a signed `GET /<bucket>?uploads&prefix=<prefix>/objects/` (path-style,
//! as the client is configured) and aborted once older than the age asked
//! for. A process killed mid-upload leaves them; the bucket keeps their
//! parts (and bills them) until they are aborted.
//!
//! `object_store` cannot list multipart uploads, so the listing is signed
//! here with its [`AwsAuthorizer`] and the client's own credentials, and
//! sent through its reqwest connector; the abort is `object_store`'s
//! [`MultipartStore::abort_multipart`]. Every call is bounded by the
//! store's timeout ([`S3Backend::call`]); at most [`PAGES`] pages a sweep.
//!
//! The answer is read by hand ([`parse_page`]): five tags of one flat XML
//! document (`Key`, `UploadId`, `Initiated` in each `Upload`, and
//! `IsTruncated` with its next markers) do not call for an XML crate.
//!
//! Only `objects/` is looked at: the store's one multipart writer is an
//! object's upload ([`super::upload`]), and nothing outside what
//! talos-gen writes is touched. An upload in flight is younger than the
//! age (it is never asked below the time an upload takes), and this
//! process's own are skipped whatever their age ([`InFlight`]).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::ClientOptions;
use object_store::aws::AwsAuthorizer;
use object_store::client::{HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjPath;

use super::S3Backend;
use crate::store::backend::Aborted;

/// Pages of 1000 uploads listed per sweep at most (the rest wait for the
/// next sweep).
pub(super) const PAGES: usize = 10;

/// One unfinished upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Upload {
    pub key: String,
    pub id: String,
    /// Seconds since the epoch (`None`: unreadable, never aborted).
    pub initiated: Option<u64>,
}

/// One page of the listing; `next` the markers of the following page.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Page {
    pub uploads: Vec<Upload>,
    pub next: Option<(String, String)>,
}

/// The keys of this process's multipart uploads in flight (with how many
/// on each key).
#[derive(Debug, Default, Clone)]
pub(super) struct InFlight(Arc<Mutex<HashMap<String, usize>>>);

/// Held while an upload to its key runs.
pub(super) struct Entered {
    set: InFlight,
    key: String,
}

impl InFlight {
    pub(super) fn enter(&self, key: &str) -> Entered {
        *self.map().entry(key.to_string()).or_default() += 1;
        Entered {
            set: self.clone(),
            key: key.to_string(),
        }
    }

    fn holds(&self, key: &str) -> bool {
        self.map().contains_key(key)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        let mut map = self.set.map();
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

impl S3Backend {
    /// Abort the unfinished uploads under `objects/` started more than
    /// `older_than` ago.
    pub(super) fn abort_old_uploads(&self, older_than: Duration) -> io::Result<Aborted> {
        let client = self.listing_client()?;
        let mut done = Aborted::default();
        let mut marker = None;
        for _ in 0..PAGES {
            let page = self.list_uploads_page(&client, marker.take())?;
            let old = page.uploads.iter().filter(|u| stale(u, older_than));
            for u in old.filter(|u| !self.uploading.holds(&u.key)) {
                match self.abort_upload(u) {
                    Ok(()) => {
                        tracing::info!(key = %u.key, "aborted an unfinished multipart upload");
                        done.uploads += 1;
                    }
                    Err(e) => {
                        tracing::warn!(key = %u.key, error = %e, "an unfinished multipart upload not aborted");
                        done.failed += 1;
                    }
                }
            }
            match page.next {
                Some(m) => marker = Some(m),
                None => break,
            }
        }
        Ok(done)
    }

    fn listing_client(&self) -> io::Result<object_store::client::HttpClient> {
        let opts = ClientOptions::new()
            .with_timeout(self.cfg.timeout)
            .with_connect_timeout(self.cfg.timeout.min(Duration::from_secs(10)))
            .with_allow_http(self.endpoint().starts_with("http://"));
        ReqwestConnector::default()
            .connect(&opts)
            .map_err(super::io_err)
    }

    /// `http(s)://host:port`, as the client reaches the bucket.
    fn endpoint(&self) -> String {
        match &self.cfg.endpoint {
            Some(e) => e.trim_end_matches('/').to_string(),
            None => format!("https://s3.{}.amazonaws.com", self.cfg.region),
        }
    }

    fn list_uploads_page(
        &self,
        client: &object_store::client::HttpClient,
        marker: Option<(String, String)>,
    ) -> io::Result<Page> {
        let prefix = if self.cfg.prefix.is_empty() {
            "objects/".to_string()
        } else {
            format!("{}/objects/", self.cfg.prefix)
        };
        let mut url = reqwest::Url::parse(&format!("{}/{}", self.endpoint(), self.cfg.bucket))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("uploads", "").append_pair("prefix", &prefix);
            if let Some((key, id)) = &marker {
                q.append_pair("key-marker", key)
                    .append_pair("upload-id-marker", id);
            }
        }
        let (s3, client) = (self.s3.clone(), client.clone());
        let region = self.cfg.region.clone();
        let store = self.cfg.url();
        let body = self.call(async move {
            let cred = s3.credentials().get_credential().await?;
            let mut req = object_store::client::HttpRequest::new(HttpRequestBody::empty());
            *req.uri_mut() = url.as_str().parse().map_err(|e| generic(format!("{e}")))?;
            AwsAuthorizer::new(&cred, "s3", &region).try_authorize(&mut req, None)?;
            let resp = client
                .execute(req)
                .await
                .map_err(|e| generic(e.to_string()))?;
            let status = resp.status();
            let body = resp
                .into_body()
                .bytes()
                .await
                .map_err(|e| generic(e.to_string()))?;
            if !status.is_success() {
                return Err(generic(format!(
                    "listing the multipart uploads of {store}: {status} {}",
                    crate::text::one_line(&String::from_utf8_lossy(&body))
                )));
            }
            Ok(body)
        })?;
        let text = std::str::from_utf8(&body)
            .map_err(|_| io::Error::other("the multipart upload listing is not UTF-8"))?;
        parse_page(text).map_err(io::Error::other)
    }

    fn abort_upload(&self, u: &Upload) -> io::Result<()> {
        let path = ObjPath::parse(&u.key).map_err(|e| io::Error::other(e.to_string()))?;
        let (s3, id) = (self.s3.clone(), u.id.clone());
        self.call(async move { s3.abort_multipart(&path, &id).await })
    }
}

fn generic(msg: String) -> object_store::Error {
    object_store::Error::Generic {
        store: "S3",
        source: msg.into(),
    }
}

/// Started more than `older_than` ago (an unreadable time: never).
fn stale(u: &Upload, older_than: Duration) -> bool {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    u.initiated
        .is_some_and(|t| now.saturating_sub(t) >= older_than.as_secs())
}

/// The text between `<tag>` and `</tag>` of each occurrence in `s`.
fn elements<'a>(s: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

fn first(s: &str, tag: &str) -> Option<String> {
    elements(s, tag).first().map(|v| unescape(v))
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// A listing that is not a ListMultipartUploadsResult one can page on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct BadListing(String);

/// A ListMultipartUploadsResult.
pub(super) fn parse_page(xml: &str) -> Result<Page, BadListing> {
    if !xml.contains("<ListMultipartUploadsResult") {
        return Err(BadListing(format!(
            "the multipart upload listing is not a ListMultipartUploadsResult: {}",
            crate::text::one_line(xml)
        )));
    }
    let mut page = Page::default();
    for u in elements(xml, "Upload") {
        let (Some(key), Some(id)) = (first(u, "Key"), first(u, "UploadId")) else {
            continue;
        };
        let initiated = first(u, "Initiated").and_then(|t| rfc3339_secs(&t));
        page.uploads.push(Upload { key, id, initiated });
    }
    if first(xml, "IsTruncated").as_deref() == Some("true") {
        // Markers sit outside the uploads: read them before the first one.
        let head = xml.split("<Upload>").next().unwrap_or(xml);
        let tail = xml.rsplit("</Upload>").next().unwrap_or(xml);
        let find = |tag| first(head, tag).or_else(|| first(tail, tag));
        match (find("NextKeyMarker"), find("NextUploadIdMarker")) {
            (Some(k), Some(i)) if !k.is_empty() => page.next = Some((k, i)),
            _ => {
                return Err(BadListing(
                    "a truncated multipart upload listing without its next markers".into(),
                ));
            }
        }
    }
    Ok(page)
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` as seconds since the epoch.
fn rfc3339_secs(t: &str) -> Option<u64> {
    let t = t.trim().strip_suffix('Z')?;
    let (date, clock) = t.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i32>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let clock = clock.split('.').next()?;
    let mut c = clock.split(':').map(|p| p.parse::<u8>().ok());
    let (h, min, s) = (c.next()??, c.next()??, c.next()??);
    let month = time::Month::try_from(u8::try_from(m).ok()?).ok()?;
    let date = time::Date::from_calendar_date(y, month, u8::try_from(day).ok()?).ok()?;
    let at = date.with_hms(h, min, s).ok()?.assume_utc();
    u64::try_from(at.unix_timestamp()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Bucket>b</Bucket><KeyMarker></KeyMarker><UploadIdMarker></UploadIdMarker><NextKeyMarker>p/objects/sha256/bb</NextKeyMarker><NextUploadIdMarker>id2</NextUploadIdMarker><Prefix>p/objects/</Prefix><MaxUploads>1000</MaxUploads><IsTruncated>true</IsTruncated><Upload><Key>p/objects/sha256/aa</Key><UploadId>id1</UploadId><Initiator><ID>x</ID></Initiator><Initiated>2026-12-07T21:00:00.000Z</Initiated></Upload><Upload><Key>p/objects/a&amp;b</Key><UploadId>id2</UploadId><Initiated>not a time</Initiated></Upload></ListMultipartUploadsResult>"#;

    #[test]
    fn an_upload_in_flight_is_held_until_it_ends() {
        let set = InFlight::default();
        let a = set.enter("p/objects/sha256/aa");
        let b = set.enter("p/objects/sha256/aa");
        drop(a);
        assert!(set.holds("p/objects/sha256/aa"), "the second still runs");
        drop(b);
        assert!(!set.holds("p/objects/sha256/aa"));
    }

    #[test]
    fn a_listing_page_is_read() {
        let p = parse_page(PAGE).unwrap();
        assert_eq!(p.uploads.len(), 2);
        assert_eq!(p.uploads[0].key, "p/objects/sha256/aa");
        assert_eq!(p.uploads[0].id, "id1");
        assert_eq!(p.uploads[0].initiated, Some(1_796_677_200));
        assert_eq!(p.uploads[1].key, "p/objects/a&b");
        assert_eq!(p.uploads[1].initiated, None, "unreadable: never aborted");
        assert!(!stale(&p.uploads[1], Duration::ZERO));
        assert!(stale(&p.uploads[0], Duration::ZERO));
        assert_eq!(
            p.next,
            Some(("p/objects/sha256/bb".to_string(), "id2".to_string()))
        );
        let last = PAGE.replace("<IsTruncated>true", "<IsTruncated>false");
        assert_eq!(parse_page(&last).unwrap().next, None);
        assert!(parse_page("<html>no</html>").is_err());
        let no_marker = PAGE.replace("NextKeyMarker", "Other");
        assert!(parse_page(&no_marker).is_err());
    }
}
