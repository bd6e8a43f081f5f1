//! The HTTP edge: routes, typed state, limits, graceful stop. Handlers are
//! thin: they validate the request, call the core, and shape the answer.
//! Each route family lives in its own file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{MethodRouter, get, post};

use crate::error::{Error, Result};

pub mod access;
pub mod api;
pub mod blocking;
pub mod conns;
pub mod datavolume;
pub mod error;
pub mod query;
pub mod ranges;
pub mod state;

pub use state::{AppState, Shared};
pub mod factory;
pub mod image;
pub mod limits;
pub mod machineconfig;
pub mod metrics;
pub mod ops;
pub mod registry;
pub mod schematics;
pub mod stale;
pub mod starting;
pub mod status;
pub mod tls;
pub mod token;
pub mod watched;

/// Everything `serve` was told, already parsed by the CLI edge: the
/// service's own config ([`crate::compose::ServiceConfig`], handed whole to
/// the composition root, its fields read through `Deref`) and what only
/// the HTTP edge uses.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub service: crate::compose::ServiceConfig,
    pub listen: String,
    pub matrix: Option<PathBuf>,
    pub shutdown_timeout: Duration,
    pub api_token_file: Option<PathBuf>,
    /// Time a client has to send a request head (also the keep-alive idle limit).
    pub header_read_timeout: Duration,
    /// A response write blocked this long (the client stopped reading) ends the connection.
    pub write_timeout: Duration,
    /// Time a client has to send a request body whole, from the end of its head (408 past it).
    pub body_read_timeout: Duration,
    /// Connections open at once; past it the oldest idle one closes for a new one (`conns`).
    pub max_connections: usize,
    /// Serve HTTPS with this certificate and key (re-read when they change).
    pub tls: Option<tls::TlsFiles>,
    /// The base URL clients reach the service at (`--public-url`), for the
    /// URLs written into answers (the iPXE script); `None`: from each
    /// request's `X-Forwarded-Proto`/`X-Forwarded-Host`, else its `Host`.
    pub public_url: Option<String>,
    /// Log the client as the proxy in front names it (the last address of
    /// `X-Forwarded-For`, `--trust-forwarded-for`) instead of the peer.
    pub trust_forwarded_for: bool,
}

impl std::ops::Deref for ServeConfig {
    type Target = crate::compose::ServiceConfig;
    fn deref(&self) -> &crate::compose::ServiceConfig {
        &self.service
    }
}

/// One route: its template, the status codes it answers when all goes
/// well, its policy, and its handler. The `http_requests` and
/// `http_request_duration_seconds` series of each (template, code) exist
/// from start, at zero ([`crate::metrics::Metrics::declare_route`]).
#[derive(Clone, Copy)]
pub struct Route {
    pub path: &'static str,
    pub ok: &'static [u16],
    pub policy: Policy,
    pub handler: fn() -> MethodRouter<AppState>,
}

const fn route(
    path: &'static str,
    ok: &'static [u16],
    policy: Policy,
    handler: fn() -> MethodRouter<AppState>,
) -> Route {
    Route {
        path,
        ok,
        policy,
        handler,
    }
}

/// The one route table: each route declared once, with its policy
/// ([`limits::enforce`] applies it by the matched template). Request
/// bodies are bounded apart from it: 1 MiB ([`limits::BODY_LIMIT`], and
/// the schematic's own `MAX_SIZE`).
pub const ROUTES: &[Route] = &[
    route("/", &[200], policy(Writes::None, Gate::Open), || {
        get(status::page)
    }),
    route("/healthz", &[200], policy(Writes::None, Gate::Open), || {
        get(ops::healthz)
    }),
    route("/readyz", &[200], policy(Writes::None, Gate::Open), || {
        get(ops::readyz)
    }),
    route("/metrics", &[200], policy(Writes::None, Gate::Open), || {
        get(metrics::metrics)
    }),
    route(
        "/api/v1/matrix",
        &[200],
        policy(Writes::Token, Gate::Open),
        || get(api::matrix),
    ),
    route(
        "/api/v1/matrix/check",
        &[200],
        policy(Writes::Token, Gate::Open),
        || get(api::matrix_check),
    ),
    route(
        "/api/v1/upgrade-plan",
        &[200],
        policy(Writes::Token, Gate::Open),
        || get(api::upgrade_plan),
    ),
    route(
        "/api/v1/machineconfig",
        &[200],
        policy(Writes::Token, Gate::Open),
        || post(machineconfig::generate),
    ),
    route(
        "/api/v1/kubelet-reservations",
        &[200],
        policy(Writes::Token, Gate::Open),
        || post(machineconfig::reservations),
    ),
    // Reads (or fills) the artifact whose checksum it writes.
    route(
        "/api/v1/datavolume",
        &[200],
        policy(Writes::Token, Gate::Always),
        || get(datavolume::get),
    ),
    route(
        "/schematics",
        &[201],
        policy(Writes::PinnedWithToken, Gate::Always),
        || post(schematics::create),
    ),
    route(
        "/schematics/{id}",
        &[200],
        policy(Writes::None, Gate::ReadsThrough),
        || get(schematics::get),
    ),
    // The API version check: reads nothing.
    route("/v2/", &[200], policy(Writes::None, Gate::Open), || {
        get(registry::v2_root)
    }),
    route(
        "/v2/{*rest}",
        &[200, 206],
        policy(Writes::None, Gate::OciReadsThrough),
        || get(registry::v2_tail),
    ),
    route(
        "/versions",
        &[200],
        policy(Writes::None, Gate::ReadsThrough),
        || get(image::versions),
    ),
    route(
        "/oci/cosign/signing-key.pub",
        &[200],
        policy(Writes::None, Gate::ReadsThrough),
        || get(factory::cosign_key),
    ),
    route(
        "/secureboot/signing-cert.pem",
        &[200],
        policy(Writes::None, Gate::ReadsThrough),
        || get(factory::secureboot_cert),
    ),
    route(
        "/version/{version}/extensions/official",
        &[200],
        policy(Writes::None, Gate::ReadsThrough),
        || get(factory::extensions),
    ),
    route(
        "/version/{version}/overlays/official",
        &[200],
        policy(Writes::None, Gate::ReadsThrough),
        || get(factory::overlays),
    ),
    route(
        "/image/{schematic}/{version}/{asset}",
        &[200, 206],
        policy(Writes::None, Gate::ReadsThrough),
        || get(image::get_image),
    ),
    route(
        "/talosctl/{version}/{path}",
        &[200, 206],
        policy(Writes::None, Gate::ReadsThrough),
        || get(image::get_talosctl),
    ),
    route(
        "/pxe/{schematic}/{version}/{path}",
        &[200],
        policy(Writes::None, Gate::ReadsThrough),
        || get(factory::pxe),
    ),
];

/// Who may write through a route, and what a write may keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    /// The route only reads (GET/HEAD); what a read fills from an upstream
    /// is cache: unpinned, counted in `--cache-max-size`, evicted LRU.
    None,
    /// With `--api-token-file`, every write (any method but
    /// GET/HEAD/OPTIONS) needs `Authorization: Bearer <token>`: 401
    /// otherwise. It stores nothing (`/api/v1/...` answers are computed).
    Token,
    /// Open to every client, as the Image Factory's `POST /schematics` is.
    /// With `--api-token-file`, what it stores is pinned (kept through
    /// eviction) only when the request carries the token; without it, it
    /// is cache: unpinned, counted in `--cache-max-size` and evictable, so
    /// no unauthenticated client can grow the store past its limit.
    /// Without `--api-token-file` every client is trusted alike: pinned.
    /// (What the mirror config names, `mirror sync` pins.)
    PinnedWithToken,
}

/// Whether a route waits on the store: while the store (an S3 bucket) does
/// not answer, a gated request is answered 503 at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Never gated: the probes, metrics, the status page, the computed API.
    Open,
    /// Gated.
    Always,
    /// GET/HEAD go on to the core, which serves what the bucket's local
    /// tier holds and answers 503 at once for the rest; other methods gated.
    ReadsThrough,
    /// As `ReadsThrough` for manifest and blob reads
    /// (`/v2/.../manifests/...`, `/v2/.../blobs/...`: an image pulled once
    /// pulls again from the local tier); tags lists and referrers gated.
    OciReadsThrough,
}

/// The policy of one route: its row of [`ROUTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub writes: Writes,
    pub gate: Gate,
}

impl Policy {
    /// Is this request answered 503 while the store does not answer?
    pub fn gated(&self, method: &axum::http::Method, path: &str) -> bool {
        let read = matches!(*method, axum::http::Method::GET | axum::http::Method::HEAD);
        match self.gate {
            Gate::Open => false,
            Gate::Always => true,
            Gate::ReadsThrough => !read,
            Gate::OciReadsThrough => {
                !(read && (path.contains("/blobs/") || path.contains("/manifests/")))
            }
        }
    }
}

const fn policy(writes: Writes, gate: Gate) -> Policy {
    Policy { writes, gate }
}

/// The policy of a route template; a route missing from the table gets the
/// strictest (writes need the token, gated by the store).
pub fn route_policy(template: &str) -> Policy {
    ROUTES
        .iter()
        .find(|r| r.path == template)
        .map(|r| r.policy)
        .unwrap_or(policy(Writes::Token, Gate::Always))
}

/// All routes.
pub fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for r in ROUTES {
        for status in r.ok {
            state.metrics.declare_route(r.path, *status);
        }
        router = router.route(r.path, (r.handler)());
    }
    router
        // Buffering extractors (the POST endpoints) stop at 1 MiB: 413.
        // (`POST /schematics` reads its body under the same limit itself.)
        .layer(axum::extract::DefaultBodyLimit::max(limits::BODY_LIMIT))
        // The route policy table: token, what a write may pin, store gate.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::enforce,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::track,
        ))
        // A write's body arrives whole within the body read timeout (408).
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::body_deadline,
        ))
        .fallback(api::not_found)
        // One Host (RFC 9112 3.2), before any route reads it.
        .layer(axum::middleware::from_fn(limits::one_host))
        // A long target 414, large header fields 431.
        .layer(axum::middleware::from_fn(limits::head_size))
        // Every refusal in its route family's shape (OCI, JSON, text).
        .layer(axum::middleware::from_fn(error::shape))
        // Every answer, 401 and 413 included, gets its line.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::log,
        ))
        // Outermost: the connection is busy until the answer's body is done.
        .layer(axum::middleware::from_fn(conns::track))
        .with_state(state)
}

/// Bytes hyper queues for one connection before it stops asking the body
/// for more (its default, about 400 KiB, made a stalled reader hold that
/// much; this bounds it, with a 1 MiB stored window still queued whole).
/// Also the read buffer, so at least [`limits::HEAD_BUFFER`].
pub const WRITE_QUEUE: usize = 80 << 10;

/// The address `--listen` names: `:8080` means all interfaces, as Go
/// programs (and kubectl) read it.
fn listen_addr(listen: &str) -> Result<SocketAddr> {
    let full = match listen.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => listen.to_string(),
    };
    full.parse()
        .map_err(|e| Error::bad_input(format!("--listen: {listen:?}: {e}")))
}

/// HTTP/1 as every connection is served: bounded heads and queues.
fn http1(cfg: &ServeConfig) -> hyper::server::conn::http1::Builder {
    let mut http = hyper::server::conn::http1::Builder::new();
    const _: () = assert!(limits::HEAD_BUFFER <= WRITE_QUEUE);
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .max_header_size(limits::HEAD_BUFFER)
        .max_buf_size(WRITE_QUEUE)
        .max_headers(limits::MAX_HEADERS)
        .keep_alive(true);
    http
}

/// Let requests in flight finish, up to `--shutdown-timeout`.
async fn drain(graceful: hyper_util::server::graceful::GracefulShutdown, limit: Duration) {
    tracing::info!(
        connections = graceful.count(),
        timeout_secs = limit.as_secs(),
        "draining"
    );
    match tokio::time::timeout(limit, graceful.shutdown()).await {
        Ok(()) => tracing::info!("stopped"),
        Err(_) => tracing::warn!(
            timeout_secs = limit.as_secs(),
            "stopped with requests still in flight (--shutdown-timeout)"
        ),
    }
}

/// Bind, serve until SIGTERM or Ctrl-C, then drain. A bucket that does
/// not answer at start is waited for (listening, not ready, opened again
/// every [`STORE_RETRY`]) rather than an exit: under a pod controller a
/// replica would otherwise crash-loop, with a growing back-off, through a
/// bucket outage.
pub async fn serve(cfg: ServeConfig) -> Result<()> {
    let addr = listen_addr(&cfg.listen)?;
    // A certificate that does not load stops here, before anything listens.
    let tls = match &cfg.tls {
        Some(files) => Some(tls::Reloading::new(files.clone())?),
        None => None,
    };
    let first = match AppState::new(cfg.clone()).await {
        Err(e) if !matches!(e, Error::Unavailable(_)) => return Err(e),
        first => first,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::io(format!("--listen: binding {addr}"), e))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("listener address", e))?;
    let acc = Accepting {
        tls: tls.as_ref().map(|t| t.acceptor()).transpose()?,
        listener,
        http: http1(&cfg),
        write_timeout: cfg.write_timeout,
        handshake_limit: cfg.header_read_timeout,
        conns: conns::Connections::new(cfg.max_connections),
        graceful: hyper_util::server::graceful::GracefulShutdown::new(),
    };
    let _reload = tls.as_ref().map(|t| AbortOnDrop(t.watch(tls::POLL)));
    let stop = shutdown_signal();
    tokio::pin!(stop);
    let state = match first {
        Ok(state) => state,
        Err(e) => {
            tracing::warn!(%local, store = %cfg.store.describe(), error = %e, "waiting for the store: listening, not ready; opening it again every {}s", STORE_RETRY.as_secs());
            let why = Arc::new(std::sync::Mutex::new(e.to_string()));
            tokio::select! {
                state = open_again(cfg.clone(), why.clone()) => state,
                () = acc.serve(starting::router(why)) => unreachable!("the accept loop never ends"),
                _ = &mut stop => {
                    acc.drain(cfg.shutdown_timeout).await;
                    return Ok(());
                }
            }
        }
    };
    tracing::info!(
        %local,
        store = %state.store.describe(),
        upstreams = %ops::upstream_summary(&state.cfg),
        offline = state.cfg.offline,
        tls = acc.tls.is_some(),
        "listening"
    );
    tokio::select! {
        () = acc.serve(router(state.clone())) => {}
        _ = &mut stop => {}
    }
    // Stop accepting; let requests in flight finish, up to the timeout.
    acc.drain(state.cfg.shutdown_timeout).await;
    Ok(())
}

/// How often a store that did not open at start is opened again: the
/// replica is ready within about this long of the store's return (the
/// bound is 5 s; at 5 s the chaos run saw 5.1 s).
pub const STORE_RETRY: Duration = Duration::from_secs(2);

/// Open the service again until the store answers; `why` says what the
/// last try found (the starting answers show it).
async fn open_again(cfg: ServeConfig, why: Arc<std::sync::Mutex<String>>) -> AppState {
    loop {
        tokio::time::sleep(STORE_RETRY).await;
        match AppState::new(cfg.clone()).await {
            Ok(state) => return state,
            Err(e) => {
                tracing::warn!(error = %e, "waiting for the store");
                *why.lock().unwrap_or_else(|p| p.into_inner()) = e.to_string();
            }
        }
    }
}

/// The listener and how each connection it accepts is served.
struct Accepting {
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    http: hyper::server::conn::http1::Builder,
    write_timeout: Duration,
    /// A TLS handshake's bound (as a request head's).
    handshake_limit: Duration,
    conns: Arc<conns::Connections>,
    graceful: hyper_util::server::graceful::GracefulShutdown,
}

impl Accepting {
    /// Accept connections and serve `app` on each, for ever.
    async fn serve(&self, app: Router) {
        loop {
            let (tcp, peer) = match self.listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            self.connection(tcp, peer, &app);
        }
    }

    /// Serve one accepted connection on its own task.
    fn connection(&self, tcp: tokio::net::TcpStream, peer: SocketAddr, app: &Router) {
        // Past --max-connections the oldest idle connection closes for
        // this one; with every one busy, this one is closed.
        let Some(admitted) = self.conns.admit() else {
            tracing::warn!(%peer, "connection closed: every open connection has a request in flight (--max-connections)");
            return;
        };
        let _ = tcp.set_nodelay(true);
        let guarded = limits::WriteGuard::new(tcp, self.write_timeout);
        let svc = access::WithPeer::new(
            hyper_util::service::TowerToHyperService::new(app.clone()),
            peer,
            admitted.busy.clone(),
        );
        let http = self.http.clone();
        let Some(acceptor) = &self.tls else {
            let io = hyper_util::rt::TokioIo::new(guarded);
            let conn = self.graceful.watch(http.serve_connection(io, svc));
            tokio::spawn(until_closed(conn, admitted, peer));
            return;
        };
        // The handshake runs in the connection's task, bounded like a
        // request head; the connection is drained on stop like any other.
        let (acceptor, watcher) = (acceptor.clone(), self.graceful.watcher());
        let handshake_limit = self.handshake_limit;
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(handshake_limit, acceptor.accept(guarded)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(peer = %peer, error = %e, "tls handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(peer = %peer, "tls handshake timed out");
                    return;
                }
            };
            let io = hyper_util::rt::TokioIo::new(tls);
            until_closed(
                watcher.watch(http.serve_connection(io, svc)),
                admitted,
                peer,
            )
            .await;
        });
    }

    /// Stop accepting; let requests in flight finish, up to `limit`.
    async fn drain(self, limit: Duration) {
        drop(self.listener);
        drain(self.graceful, limit).await;
    }
}

/// Serve one connection until it ends, or until [`conns`] closes it for a
/// newer one (dropping the connection closes its socket); then it leaves
/// the table.
async fn until_closed<E: std::fmt::Display>(
    conn: impl std::future::Future<Output = std::result::Result<(), E>>,
    admitted: conns::Conn,
    peer: SocketAddr,
) {
    tokio::select! {
        r = conn => if let Err(e) = r {
            tracing::debug!(error = %e, "connection ended");
        },
        _ = admitted.close.notified() => {
            tracing::debug!(%peer, "idle connection closed for a new one (--max-connections)");
        }
    }
}

/// Aborts the task when dropped (the certificate poll ends with `serve`).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutdown signal received");
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_route_declared_once() {
        for r in super::ROUTES {
            let rows = super::ROUTES.iter().filter(|o| o.path == r.path).count();
            assert_eq!(rows, 1, "{}: declared {rows} times", r.path);
        }
    }
}
