//! The access log: one line per request, at info, when its body has been
//! sent (or the client went away): method, path, query (`?ns=` is the
//! registry asked for; a credential-looking parameter's value is
//! `REDACTED`, [`redact_query`]), the client (the peer, or
//! with `--trust-forwarded-for` the last `X-Forwarded-For` address, the peer
//! then logged too), status, body bytes sent, duration in milliseconds
//! rounded to microseconds. Never a header, so tokens and secrets stay out
//! of it. `--log-format json` makes each line a JSON object. 5xx answers
//! are also remembered for the status page's last errors, with the reason
//! the answer gave ([`Reason`]: it names the upstream URL). An `/image/`,
//! `/talosctl/`, `/v2/` or factory document answer's `Cache-Status`
//! ([`CacheStatus`]: hit, fwd=miss, stored, fwd=revalidated, fwd=stale,
//! collapsed) is its `cache` field, and is set here to
//! [`CacheStatus::DEFAULT`] (no `fwd`) on such an answer whose handler
//! named none (an error before any lookup, a refusal).

use std::net::SocketAddr;
use std::task::Poll;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::ranges::CacheStatus;
use super::state::AppState;

/// The routes whose every answer carries `Cache-Status`: artifacts,
/// `/v2/` and the factory's documents.
fn cached_route(path: &str) -> bool {
    ["/image/", "/talosctl/", "/v2/", "/version/", "/pxe/"]
        .iter()
        .any(|p| path.starts_with(p))
        || [
            "/v2",
            "/versions",
            "/oci/cosign/signing-key.pub",
            "/secureboot/signing-cert.pem",
        ]
        .contains(&path)
}

/// Give a cached route's answer its `Cache-Status` if the handler did not
/// (plain `talos-gen`: no lookup stood behind it); the value, for the log
/// line. The starting router's answers get it here too.
pub(super) fn cache_status(path: &str, resp: &mut Response) -> Option<String> {
    if !cached_route(path) {
        return None;
    }
    let h = resp.headers_mut();
    if !h.contains_key(CacheStatus::HEADER) {
        h.insert(
            CacheStatus::HEADER,
            axum::http::HeaderValue::from_static(CacheStatus::DEFAULT),
        );
    }
    h.get(CacheStatus::HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Why a 5xx answer failed (its one-line message), carried on the response
/// for the status page's last errors.
#[derive(Clone, Debug)]
pub struct Reason(pub String);

/// The connection's peer, put on every request by [`WithPeer`].
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// A hyper service that puts the connection's [`Peer`] on each request.
#[derive(Clone)]
pub struct WithPeer<S> {
    inner: S,
    peer: SocketAddr,
    busy: super::conns::Busy,
}

impl<S> WithPeer<S> {
    /// `busy`: the connection's requests in flight ([`super::conns`]).
    pub fn new(inner: S, peer: SocketAddr, busy: super::conns::Busy) -> WithPeer<S> {
        WithPeer { inner, peer, busy }
    }
}

impl<S, B> hyper::service::Service<hyper::Request<B>> for WithPeer<S>
where
    S: hyper::service::Service<hyper::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, mut req: hyper::Request<B>) -> Self::Future {
        req.extensions_mut().insert(Peer(self.peer));
        req.extensions_mut().insert(self.busy.clone());
        self.inner.call(req)
    }
}

/// The client to log: the peer, or the last `X-Forwarded-For` address when
/// the proxy in front is trusted (and the header holds one).
fn client(req: &Request, trust_forwarded_for: bool) -> (String, Option<String>) {
    let peer = req.extensions().get::<Peer>().map(|p| p.0.ip().to_string());
    let forwarded = trust_forwarded_for
        .then(|| req.headers().get_all("x-forwarded-for"))
        .and_then(|all| {
            let last = all.iter().filter_map(|v| v.to_str().ok()).next_back()?;
            let addr = last.rsplit(',').next()?.trim();
            addr.parse::<std::net::IpAddr>().ok().map(|a| a.to_string())
        });
    match forwarded {
        Some(f) => (f, peer),
        None => (peer.unwrap_or_else(|| "-".into()), None),
    }
}

/// The query string to log (at most 512 characters): every parameter kept,
/// but the value of one whose name looks like a credential (`token`,
/// `secret`, `password`, `key`, `signature`, `credential`, `auth`, any case)
/// replaced by `REDACTED`; `ns=` and the like are what the operator needs.
pub fn redact_query(q: &str) -> String {
    const SECRET: [&str; 7] = [
        "token",
        "secret",
        "password",
        "key",
        "signature",
        "credential",
        "auth",
    ];
    let q: String = q.chars().take(512).collect();
    q.split('&')
        .map(|pair| {
            let (k, _) = pair.split_once('=').unwrap_or((pair, ""));
            let lower = k.to_ascii_lowercase();
            if pair.contains('=') && SECRET.iter().any(|s| lower.contains(s)) {
                format!("{k}=REDACTED")
            } else {
                pair.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A duration in milliseconds rounded to whole microseconds (`0.703`, not
/// `0.7029500000000001`).
pub fn millis(d: std::time::Duration) -> f64 {
    d.as_nanos().saturating_add(500).saturating_div(1000) as f64 / 1000.0
}

/// The path and query to log: at most 512 characters of the path, the
/// query redacted.
fn asked(uri: &axum::http::Uri) -> (String, String) {
    (
        uri.path().chars().take(512).collect(),
        redact_query(uri.query().unwrap_or("")),
    )
}

/// Remember a 5xx answer for the status page's last errors.
fn record_5xx(st: &AppState, method: &str, path: &str, query: &str, resp: &Response) {
    let status = resp.status().as_u16();
    let asked = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    };
    let why = resp
        .extensions()
        .get::<Reason>()
        .map(|r| format!(": {}", r.0))
        .unwrap_or_default();
    st.metrics
        .record_error(format!("{method} {asked}: HTTP {status}{why}"));
}

/// Middleware: wrap the response body so the line is written when it ends.
/// With the access log filtered out (`RUST_LOG` below info for `access`)
/// no line is built: only a 5xx answer is remembered for the status page.
pub async fn log(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if !tracing::enabled!(target: "access", tracing::Level::INFO) {
        let (method, uri) = (req.method().clone(), req.uri().clone());
        let mut resp = next.run(req).await;
        cache_status(uri.path(), &mut resp);
        if resp.status().as_u16() >= 500 {
            let (path, query) = asked(&uri);
            record_5xx(&st, method.as_str(), &path, &query, &resp);
        }
        return resp;
    }
    let method = req.method().to_string();
    let (path, query) = asked(req.uri());
    let (client, peer) = client(&req, st.cfg.trust_forwarded_for);
    let started = Instant::now();
    let raw_path = req.uri().path().to_string();
    let mut resp = next.run(req).await;
    let cache = cache_status(&raw_path, &mut resp);
    let status = resp.status().as_u16();
    if status >= 500 {
        record_5xx(&st, &method, &path, &query, &resp);
    }
    let (parts, body) = resp.into_parts();
    // hyper stops polling a body once it has sent its Content-Length: then
    // the answer is whole although the body never said it ended.
    let expected = (method != "HEAD")
        .then(|| parts.headers.get(axum::http::header::CONTENT_LENGTH))
        .flatten()
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let body = super::watched::Watched::body(
        body,
        Logged {
            expected,
            line: Some(Line {
                method,
                path,
                query,
                client,
                peer,
                status,
                cache,
                started,
                bytes: 0,
            }),
        },
    );
    Response::from_parts(parts, body)
}

struct Line {
    method: String,
    path: String,
    query: String,
    client: String,
    /// The peer, when `client` came from `X-Forwarded-For`.
    peer: Option<String>,
    status: u16,
    /// The answer's `Cache-Status`, on the routes that carry one.
    cache: Option<String>,
    started: Instant,
    bytes: u64,
}

impl Line {
    fn emit(self, complete: bool) {
        tracing::info!(
            target: "access",
            method = %self.method,
            path = %self.path,
            query = %self.query,
            client = %self.client,
            peer = self.peer.as_deref(),
            status = self.status,
            cache = self.cache.as_deref(),
            bytes = self.bytes,
            duration_ms = millis(self.started.elapsed()),
            complete,
            "request"
        );
    }
}

/// The access log's watch on an answer's body: counts the bytes sent and
/// writes the line once, at the body's end, error or drop.
struct Logged {
    /// The Content-Length the answer declared (not for HEAD).
    expected: Option<u64>,
    /// `None` once written.
    line: Option<Line>,
}

impl super::watched::Watch for Logged {
    fn after(&mut self, polled: &super::watched::Polled) {
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some(line)) = (frame.data_ref(), self.line.as_mut()) {
                    line.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None) => self.emit(true),
            Poll::Ready(Some(Err(_))) => self.emit(false),
            Poll::Pending => {}
        }
    }

    fn dropped(&mut self, ended: bool) {
        let whole = self.whole(ended);
        self.emit(whole);
    }
}

impl Logged {
    /// Was the whole answer sent? Its body ended, or every byte of its
    /// Content-Length went out (HEAD answers and empty bodies may never be
    /// polled to their end; a client that went away leaves a partial body).
    fn whole(&self, ended: bool) -> bool {
        ended
            || self
                .expected
                .is_some_and(|n| self.line.as_ref().is_some_and(|l| l.bytes == n))
    }

    fn emit(&mut self, complete: bool) {
        if let Some(line) = self.line.take() {
            line.emit(complete);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Body, Bytes};
    use http_body_util::BodyExt;

    fn logged(expected: Option<u64>) -> super::super::watched::Watched<Logged> {
        let chunks = [
            Ok::<_, std::io::Error>(Bytes::from_static(b"abc")),
            Ok(Bytes::from_static(b"de")),
        ];
        let watch = Logged {
            expected,
            line: Some(Line {
                method: "GET".into(),
                path: "/x".into(),
                query: String::new(),
                client: "-".into(),
                peer: None,
                status: 200,
                cache: None,
                started: Instant::now(),
                bytes: 0,
            }),
        };
        super::super::watched::Watched {
            inner: Body::from_stream(futures::stream::iter(chunks)),
            watch,
        }
    }

    fn whole(b: &super::super::watched::Watched<Logged>) -> bool {
        b.watch.whole(http_body::Body::is_end_stream(&b.inner))
    }

    #[test]
    fn queries_kept_credentials_redacted() {
        assert_eq!(redact_query("ns=registry.k8s.io"), "ns=registry.k8s.io");
        assert_eq!(
            redact_query("ns=ghcr.io&token=s3cret&X-Amz-Signature=abc&last=x"),
            "ns=ghcr.io&token=REDACTED&X-Amz-Signature=REDACTED&last=x"
        );
        assert_eq!(redact_query(""), "");
        assert_eq!(redact_query("flag"), "flag");
    }

    #[test]
    fn durations_rounded_to_microseconds() {
        use std::time::Duration;
        assert_eq!(millis(Duration::from_nanos(702_950_123)), 702.95);
        assert_eq!(
            format!("{}", millis(Duration::from_nanos(702_950))),
            "0.703"
        );
        assert_eq!(
            format!("{}", millis(Duration::from_nanos(702_499))),
            "0.702"
        );
    }

    /// A body sent up to its Content-Length is whole, although nobody
    /// polled it to its end; one cut before is not.
    #[tokio::test]
    async fn whole_means_every_declared_byte_went_out() {
        let mut b = logged(Some(5));
        assert!(!whole(&b));
        b.frame().await.unwrap().unwrap();
        assert!(!whole(&b), "3 of 5 bytes");
        b.frame().await.unwrap().unwrap();
        assert!(whole(&b), "5 of 5 bytes, never polled to its end");
        let mut b = logged(None);
        b.frame().await.unwrap().unwrap();
        b.frame().await.unwrap().unwrap();
        assert!(!whole(&b), "no length: whole only at its end");
    }
}
