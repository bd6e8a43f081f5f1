//! HTTP client rules for upstreams, and the bound on every wait for one.
//!
//! - [`Limits`]: `--upstream-timeout` is the longest any one step may take
//!   (connecting, the response headers, the next body byte), and
//!   `--upstream-min-rate` the slowest a body may trickle (averaged over
//!   each timeout-long window), so no upstream can hold a fill, a fill
//!   slot or a mirror item for ever. A bound that fires is a
//!   [`FetchError::Timeout`] naming the step and the URL (HTTP 504).
//! - [`Upstream`]: the factory client. Redirects are followed, also to other
//!   hosts, with credentials dropped when the host changes (reqwest removes
//!   `Authorization`, `Cookie` and `Proxy-Authorization` on a cross-host
//!   hop); no compression asked for.
//! - [`open_response`]: upstream answers mapped to what a fill understands
//!   (2xx: a head and a bounded body; 4xx passed through; else failed).
//!
//! ```no_run
//! # async fn demo() -> Result<(), talos_gen::upstream::FetchError> {
//! use talos_gen::upstream::{Upstream, UpstreamConfig, open_response};
//! let up = Upstream::new(UpstreamConfig::default()).expect("client");
//! let resp = up.get("https://factory.talos.dev/versions", &[]).await?;
//! let opened = open_response(resp, up.limits(), &["content-disposition"]).await?; // 4xx/5xx -> Err
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};

/// The upstream Image Factory every default names (`--factory-url`,
/// the cozystack chart's `talos.imageFactoryURL`).
pub const DEFAULT_FACTORY_URL: &str = "https://factory.talos.dev";

/// What the upstream said about the object before its body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    /// Content length, when the upstream sent one.
    pub len: Option<u64>,
    pub content_type: Option<String>,
    /// Facts kept with the object (e.g. `content-disposition`).
    pub meta: BTreeMap<String, String>,
}

/// An upstream's `Retry-After` as it may be passed on: delay-seconds or an
/// HTTP-date (RFC 9110 10.2.3), at most 64 visible ASCII characters;
/// anything else is dropped.
pub fn retry_after(v: Option<&str>) -> Option<String> {
    let v = v?.trim();
    let ok = !v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b' ' | b',' | b':'));
    ok.then(|| v.to_string())
}

/// Why a fetch did not produce an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The upstream answered, but not with the object (e.g. 404): shown to
    /// the client as it came, never cached.
    Status {
        status: u16,
        content_type: Option<String>,
        body: Bytes,
        /// The upstream's `Retry-After` (a 429's, a 503's), passed on.
        retry_after: Option<String>,
    },
    /// The upstream did not answer (or finish) in time.
    Timeout(String),
    /// The upstream failed (5xx, reset, bad length, failed verification).
    Failed(String),
    /// Local trouble (disk).
    Local(String),
    /// The store holds the object but does not answer (a bucket down):
    /// 503, and never a refetch from the upstream.
    Unavailable(String),
}

/// The store holds it but does not answer: 503, never a refetch.
impl From<crate::store::Unavailable> for FetchError {
    fn from(u: crate::store::Unavailable) -> FetchError {
        FetchError::Unavailable(u.0)
    }
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Status { status, body, .. } => {
                let text = crate::text::one_line(&String::from_utf8_lossy(body));
                if text.is_empty() {
                    write!(f, "upstream answered {status}")
                } else {
                    write!(f, "upstream answered {status}: {text}")
                }
            }
            FetchError::Timeout(m)
            | FetchError::Failed(m)
            | FetchError::Local(m)
            | FetchError::Unavailable(m) => f.write_str(m),
        }
    }
}

/// An upstream response being received.
pub struct Opened {
    pub head: Head,
    pub body: BoxStream<'static, Result<Bytes, FetchError>>,
}

/// The bounds on waiting for an upstream (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest one step may take: connecting, the headers, the next body byte.
    pub timeout: Duration,
    /// Bytes per second a body must average over each `timeout` window
    /// (0: no floor).
    pub min_rate: u64,
}

/// `--upstream-timeout`'s default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// `--upstream-min-rate`'s default (bytes per second).
pub const DEFAULT_MIN_RATE: u64 = 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            min_rate: DEFAULT_MIN_RATE,
        }
    }
}

/// `30s`, `1.5s`, `250ms`: a duration as a person reads it.
pub fn fmt_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

impl Limits {
    /// Await the response head of a request to `url`, at most `timeout`.
    pub async fn headers<F>(&self, url: &str, send: F) -> Result<reqwest::Response, FetchError>
    where
        F: Future<Output = Result<reqwest::Response, reqwest::Error>>,
    {
        match tokio::time::timeout(self.timeout, send).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(self.transport_error(url, &e)),
            Err(_) => Err(FetchError::Timeout(format!(
                "timed out after {} waiting for response headers from {}",
                fmt_duration(self.timeout),
                redact(url)
            ))),
        }
    }

    /// A transport failure as a FetchError (timeouts kept apart: HTTP 504).
    pub fn transport_error(&self, url: &str, e: &reqwest::Error) -> FetchError {
        let url = redact(url);
        if e.is_timeout() {
            let step = if e.is_connect() {
                "connecting to"
            } else {
                "waiting for"
            };
            return FetchError::Timeout(format!(
                "timed out after {} {step} {url}",
                fmt_duration(self.timeout)
            ));
        }
        let mut msg = format!("upstream {url}: {e}");
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
        FetchError::Failed(msg)
    }

    /// `resp`'s body with the bounds applied: at most `timeout` between two
    /// chunks, at least `min_rate` bytes/s over each `timeout` window. The
    /// stream ends after its first error.
    pub fn body(
        &self,
        url: &str,
        resp: reqwest::Response,
    ) -> BoxStream<'static, Result<Bytes, FetchError>> {
        self.bound(url, resp.bytes_stream()).boxed()
    }

    /// The bounds applied to any byte stream from `url`.
    pub fn bound<S>(
        &self,
        url: &str,
        body: S,
    ) -> impl Stream<Item = Result<Bytes, FetchError>> + Send + 'static
    where
        S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + Unpin + 'static,
    {
        struct St<S> {
            body: S,
            limits: Limits,
            url: String,
            total: u64,
            window: Instant,
            in_window: u64,
            done: bool,
        }
        let st = St {
            body,
            limits: *self,
            url: redact(url),
            total: 0,
            window: Instant::now(),
            in_window: 0,
            done: false,
        };
        futures::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            let l = st.limits;
            let next = match tokio::time::timeout(l.timeout, st.body.next()).await {
                Err(_) => Err(FetchError::Timeout(format!(
                    "timed out after {} waiting for the next body byte from {} (after {} bytes)",
                    fmt_duration(l.timeout),
                    st.url,
                    st.total
                ))),
                Ok(None) => return None,
                Ok(Some(Err(e))) => Err(l.transport_error(&st.url, &e)),
                Ok(Some(Ok(b))) => {
                    st.total += b.len() as u64;
                    st.in_window += b.len() as u64;
                    let el = st.window.elapsed();
                    if l.min_rate > 0 && el >= l.timeout {
                        let rate = st.in_window as f64 / el.as_secs_f64();
                        if rate < l.min_rate as f64 {
                            Err(FetchError::Timeout(format!(
                                "upstream {} sent {} bytes in {}, below the minimum rate of {} bytes/s (--upstream-min-rate)",
                                st.url,
                                st.in_window,
                                fmt_duration(Duration::from_secs(el.as_secs())),
                                l.min_rate
                            )))
                        } else {
                            st.window = Instant::now();
                            st.in_window = 0;
                            Ok(b)
                        }
                    } else {
                        Ok(b)
                    }
                }
            };
            st.done = next.is_err();
            Some((next, st))
        })
    }

    /// Read a whole (small) body: at most `max` bytes, under the bounds.
    pub async fn read_small(
        &self,
        url: &str,
        resp: reqwest::Response,
        max: usize,
    ) -> Result<Vec<u8>, FetchError> {
        framed(url, &resp)?;
        let mut out = Vec::new();
        let mut s = self.body(url, resp);
        while let Some(b) = s.next().await {
            let b = b?;
            if out.len() + b.len() > max {
                return Err(FetchError::Failed(format!(
                    "upstream {}: answer larger than {max} bytes",
                    redact(url)
                )));
            }
            out.extend_from_slice(&b);
        }
        Ok(out)
    }
}

/// Whether `resp`'s body has a framed end: HTTP/1 without a length or
/// chunks ends where the connection closes, and a cut (at an xz stream's
/// end, or inside a JSON document after a complete value) would look
/// whole. HTTP/2 frames its end. Every body that is kept or parsed
/// ([`open_response`], [`Limits::read_small`]) passes here first.
fn framed(url: &str, resp: &reqwest::Response) -> Result<(), FetchError> {
    let chunked = resp
        .headers()
        .get_all(reqwest::header::TRANSFER_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|t| t.to_ascii_lowercase().contains("chunked"));
    if resp.version() >= reqwest::Version::HTTP_2
        || resp.headers().contains_key(reqwest::header::CONTENT_LENGTH)
        || chunked
    {
        return Ok(());
    }
    Err(FetchError::Failed(format!(
        "upstream {} answered without Content-Length or chunked encoding: the end of the body cannot be told from a cut connection; nothing kept",
        redact(url)
    )))
}

/// A URL without its query (which may carry a token) for messages.
fn redact(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_string()
}

/// Timeouts and limits of the upstream client.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub limits: Limits,
    pub max_redirects: usize,
    pub user_agent: String,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            limits: Limits::default(),
            max_redirects: 10,
            user_agent: format!("talos-gen/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// The upstream HTTP client; cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    limits: Limits,
}

impl Upstream {
    pub fn new(cfg: UpstreamConfig) -> crate::Result<Upstream> {
        let client = reqwest::Client::builder()
            .connect_timeout(cfg.limits.timeout)
            .redirect(reqwest::redirect::Policy::limited(cfg.max_redirects))
            .user_agent(cfg.user_agent)
            .build()
            .map_err(|e| crate::Error::Upstream(format!("building the HTTP client: {e}")))?;
        Ok(Upstream {
            client,
            limits: cfg.limits,
        })
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// GET `url` with extra headers, the head within the timeout.
    pub async fn get(
        &self,
        url: &str,
        headers: &[(&str, &str)],
    ) -> Result<reqwest::Response, FetchError> {
        let mut rb = self.client.get(url);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        self.limits.headers(url, rb.send()).await
    }

    /// POST `body` to `url` with a content type, the head within the timeout.
    pub async fn post(
        &self,
        url: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<reqwest::Response, FetchError> {
        let rb = self
            .client
            .post(url)
            .header("content-type", content_type)
            .body(body);
        self.limits.headers(url, rb.send()).await
    }
}

/// Largest error body kept from an upstream answer.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Read at most `MAX_ERROR_BODY` of an (error) response body, within the
/// bounds (what did not arrive in time is left out).
pub async fn small_body(resp: reqwest::Response, limits: &Limits) -> Bytes {
    let url = resp.url().to_string();
    let mut out = Vec::new();
    let mut s = limits.body(&url, resp);
    while let Some(Ok(b)) = s.next().await {
        let room = MAX_ERROR_BODY - out.len();
        out.extend_from_slice(&b[..b.len().min(room)]);
        if out.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    Bytes::from(out)
}

/// Turn a response into the fill's view: 200 gives the head (length,
/// content type, and the named headers kept as meta) and the bounded body
/// stream; 4xx is passed through as [`FetchError::Status`]; anything else
/// fails. Only a 200 is a whole object: no fill sends `Range`, so a 206
/// (part of the body) or any other 2xx (204, 203, ...) is a failure (502),
/// never stored; so is a 200 whose body's end is not framed (HTTP/1
/// without `Content-Length` or chunked encoding: ended by the connection's
/// close, which a cut looks like).
pub async fn open_response(
    resp: reqwest::Response,
    limits: &Limits,
    keep: &[&str],
) -> Result<Opened, FetchError> {
    let status = resp.status();
    let url = resp.url().to_string();
    let text = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if status == reqwest::StatusCode::OK {
        let mut head = Head {
            len: resp.content_length(),
            content_type: text("content-type"),
            ..Head::default()
        };
        framed(&url, &resp)?;
        // A compressed answer would not be the object's bytes.
        if let Some(enc) = text("content-encoding")
            && !enc.eq_ignore_ascii_case("identity")
        {
            return Err(FetchError::Failed(format!(
                "upstream {}: unexpected content-encoding {enc}",
                redact(&url)
            )));
        }
        for k in keep {
            if let Some(v) = text(k) {
                head.meta.insert(k.to_string(), v);
            }
        }
        let body = limits.body(&url, resp);
        return Ok(Opened { head, body });
    }
    if status.is_client_error() {
        let content_type = text("content-type");
        let resp_headers_retry = text("retry-after");
        let body = small_body(resp, limits).await;
        return Err(FetchError::Status {
            status: status.as_u16(),
            content_type,
            body,
            retry_after: retry_after(resp_headers_retry.as_deref()),
        });
    }
    if status.is_success() {
        return Err(FetchError::Failed(format!(
            "upstream {} answered {status} to a request for the whole object; only 200 is the whole object, nothing stored",
            redact(&url)
        )));
    }
    Err(FetchError::Failed(format!(
        "upstream {} answered {status}",
        redact(&url)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(
        v: Vec<(u64, &'static [u8])>,
    ) -> impl Stream<Item = Result<Bytes, reqwest::Error>> + Send + Unpin {
        Box::pin(futures::stream::iter(v).then(|(ms, b)| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(Bytes::from_static(b))
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_times_out_naming_the_url() {
        let l = Limits {
            timeout: Duration::from_secs(30),
            min_rate: 0,
        };
        let s = l.bound(
            "http://up/x?token=secret",
            chunks(vec![(0, b"ab"), (31_000, b"c")]),
        );
        let got: Vec<_> = s.collect().await;
        assert_eq!(got[0], Ok(Bytes::from_static(b"ab")));
        let e = got[1].clone().unwrap_err();
        assert_eq!(
            e.to_string(),
            "timed out after 30s waiting for the next body byte from http://up/x (after 2 bytes)"
        );
        assert!(matches!(e, FetchError::Timeout(_)));
        assert_eq!(got.len(), 2, "ends after the error");
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_cut_by_the_minimum_rate() {
        let l = Limits {
            timeout: Duration::from_secs(30),
            min_rate: 1024,
        };
        // a byte every 29 s: never silent for a whole timeout, but far too slow
        let v = (0..10).map(|_| (29_000, &b"x"[..])).collect();
        let got: Vec<_> = l.bound("http://up/trickle", chunks(v)).collect().await;
        let e = got.last().unwrap().clone().unwrap_err();
        assert!(
            e.to_string()
                .contains("below the minimum rate of 1024 bytes/s"),
            "{e}"
        );
        assert!(got.len() <= 3, "cut within two windows: {}", got.len());
        // fast enough: never cut
        let v = (0..10).map(|_| (5_000, &[7u8; 8192][..])).collect();
        let got: Vec<_> = l.bound("http://up/ok", chunks(v)).collect().await;
        assert!(got.iter().all(|r| r.is_ok()) && got.len() == 10);
    }

    #[test]
    fn durations_read_as_typed() {
        assert_eq!(fmt_duration(Duration::from_secs(30)), "30s");
        assert_eq!(fmt_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
    }
}
