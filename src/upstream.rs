//! HTTP client rules for upstreams: redirects (followed, also to other
//! hosts, with credentials dropped when the host changes — reqwest removes
//! `Authorization`, `Cookie` and `Proxy-Authorization` on a cross-host
//! hop), short connect timeout, a bound on silence while reading, no
//! compression asked for, and the mapping of upstream answers to
//! [`FetchError`]s a fill understands.
//!
//! ```no_run
//! # async fn demo() -> Result<(), talos_gen::fill::FetchError> {
//! use talos_gen::upstream::{Upstream, UpstreamConfig, open_response};
//! let up = Upstream::new(UpstreamConfig::default()).expect("client");
//! let resp = up.get("https://factory.talos.dev/versions", &[]).await?;
//! let opened = open_response(resp, &["content-disposition"]).await?; // 4xx/5xx -> Err
//! # Ok(()) }
//! ```

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use crate::fill::{FetchError, Head, Opened};

/// Timeouts and limits of the upstream client.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// TCP + TLS connect.
    pub connect_timeout: Duration,
    /// Longest silence while waiting for headers or body bytes (the factory
    /// builds an uncached asset before it sends headers: minutes).
    pub read_timeout: Duration,
    pub max_redirects: usize,
    pub user_agent: String,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(600),
            max_redirects: 10,
            user_agent: format!("talos-gen/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// The upstream HTTP client; cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
}

impl Upstream {
    pub fn new(cfg: UpstreamConfig) -> crate::Result<Upstream> {
        let client = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .read_timeout(cfg.read_timeout)
            .redirect(reqwest::redirect::Policy::limited(cfg.max_redirects))
            .user_agent(cfg.user_agent)
            .build()
            .map_err(|e| crate::Error::Upstream(format!("building the HTTP client: {e}")))?;
        Ok(Upstream { client })
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// GET `url` with extra headers; transport failures become FetchErrors.
    pub async fn get(
        &self,
        url: &str,
        headers: &[(&str, &str)],
    ) -> Result<reqwest::Response, FetchError> {
        let mut rb = self.client.get(url);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        rb.send().await.map_err(|e| transport_error(url, &e))
    }

    /// POST `body` to `url` with a content type.
    pub async fn post(
        &self,
        url: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<reqwest::Response, FetchError> {
        self.client
            .post(url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .map_err(|e| transport_error(url, &e))
    }
}

/// A transport failure as a FetchError (timeouts kept apart: HTTP 504).
pub fn transport_error(url: &str, e: &reqwest::Error) -> FetchError {
    let mut msg = format!("upstream {url}: {e}");
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    if e.is_timeout() {
        FetchError::Timeout(msg)
    } else {
        FetchError::Failed(msg)
    }
}

/// Largest error body kept from an upstream answer.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Read at most `MAX_ERROR_BODY` of an (error) response body.
pub async fn small_body(resp: reqwest::Response) -> Bytes {
    let mut out = Vec::new();
    let mut s = resp.bytes_stream();
    while let Some(Ok(b)) = s.next().await {
        let room = MAX_ERROR_BODY - out.len();
        out.extend_from_slice(&b[..b.len().min(room)]);
        if out.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    Bytes::from(out)
}

/// Turn a response into the fill's view: 2xx gives the head (length,
/// content type, and the named headers kept as meta) and the body stream;
/// 4xx is passed through as [`FetchError::Status`]; anything else fails.
pub async fn open_response(resp: reqwest::Response, keep: &[&str]) -> Result<Opened, FetchError> {
    let status = resp.status();
    let url = resp.url().to_string();
    if status.is_success() {
        let h = resp.headers();
        let text = |name: &str| {
            h.get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let mut head = Head {
            len: resp.content_length(),
            content_type: text("content-type"),
            ..Head::default()
        };
        // A compressed answer would not be the object's bytes.
        if let Some(enc) = text("content-encoding")
            && !enc.eq_ignore_ascii_case("identity")
        {
            return Err(FetchError::Failed(format!(
                "upstream {url}: unexpected content-encoding {enc}"
            )));
        }
        for k in keep {
            if let Some(v) = text(k) {
                head.meta.insert(k.to_string(), v);
            }
        }
        let u = url.clone();
        let body = resp
            .bytes_stream()
            .map(move |r| r.map_err(|e| transport_error(&u, &e)))
            .boxed();
        return Ok(Opened { head, body });
    }
    if status.is_client_error() {
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = small_body(resp).await;
        return Err(FetchError::Status {
            status: status.as_u16(),
            content_type,
            body,
        });
    }
    Err(FetchError::Failed(format!(
        "upstream {url} answered {status}"
    )))
}
