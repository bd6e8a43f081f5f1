//! What a replica answers while its store does not open (a bucket that did
//! not answer at start): it is alive (`/healthz` 200, so a liveness probe
//! does not restart it), not ready (`/readyz` 503 saying why), and every
//! other route is 503 with `Retry-After`, in its family's shape (OCI on
//! `/v2/`, JSON on `/api/`), with `Cache-Status: talos-gen` on a cached
//! route's (nothing was asked). `serve` opens the store again meanwhile and
//! then answers with the full router.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::get;

/// The starting answers; `why` is what the last try to open the store found.
pub fn router(why: Arc<Mutex<String>>) -> Router {
    let not_ready = move || {
        let why = why.lock().unwrap_or_else(|p| p.into_inner()).clone();
        async move { refusal(format!("not ready: the store did not open: {why}")) }
    };
    Router::new()
        .route("/healthz", get(super::ops::healthz))
        .route("/readyz", get(not_ready))
        .fallback(|| async { refusal("starting: the store did not open yet; try again".into()) })
        .layer(axum::middleware::from_fn(super::error::shape))
        .layer(axum::middleware::from_fn(cache_status))
        .layer(axum::middleware::from_fn(super::conns::track))
}

/// A cached route's answer says it never went upstream (`Cache-Status`).
async fn cache_status(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path().to_string();
    let mut r = next.run(req).await;
    super::access::cache_status(&path, &mut r);
    r
}

/// 503, `Retry-After: 5`, one line.
fn refusal(line: String) -> Response {
    let mut r = super::error::text(StatusCode::SERVICE_UNAVAILABLE, line);
    r.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica whose store did not open answers 503 on every cached
    /// route with `Cache-Status: talos-gen` (nothing looked up, nothing
    /// asked upstream: no `fwd`); `/healthz` carries none.
    #[tokio::test]
    async fn a_starting_replicas_refusals_say_they_never_went_upstream() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let why = Arc::new(Mutex::new("the bucket gave no answer".to_string()));
        let server = tokio::spawn(async move { axum::serve(l, router(why)).await });
        let c = reqwest::Client::new();
        for path in [
            "/v2/a/manifests/v1?ns=ghcr.io",
            "/versions",
            "/image/x/v1.13.6/metal-amd64.iso",
        ] {
            let r = c.get(format!("http://{addr}{path}")).send().await.unwrap();
            assert_eq!(r.status(), 503, "{path}");
            assert_eq!(r.headers()["cache-status"], "talos-gen", "{path}");
        }
        let r = c
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("cache-status").is_none());
        server.abort();
    }
}
