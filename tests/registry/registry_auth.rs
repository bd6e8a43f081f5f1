//! The upstream as ghcr.io and the factory show it: anonymous bearer-token
//! challenges and blob redirects to another host. Real parts: Debian's
//! distribution registry with `auth: token` (tokens checked against a
//! certificate bundle) and the `redirect` storage middleware, nginx serving
//! the redirected blobs and refusing any request that carries credentials,
//! and a small token endpoint (what Docker's token servers do: sign a JWT
//! for the asked scope) written here.

use std::sync::{Arc, Mutex};

use crate::support::registry::*;
use crate::support::{Nginx, NginxOpts, Service};
use base64::Engine;

const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";
const SERVICE: &str = "test-registry";
const ISSUER: &str = "test-issuer";

fn b64url(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

struct TokenServer {
    port: u16,
    /// (authorization header present, scope) per request.
    seen: Arc<Mutex<Vec<(bool, String)>>>,
    root_pem: String,
    _task: tokio::task::JoinHandle<()>,
}

async fn token_server() -> TokenServer {
    use axum::extract::{Query, State};
    use axum::http::HeaderMap;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};

    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let cert = rcgen::CertificateParams::new(vec!["token-issuer".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let rng = ring::rand::SystemRandom::new();
    let signer =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &key.serialize_der(), &rng)
            .unwrap();
    let x5c = base64::engine::general_purpose::STANDARD.encode(cert.der());
    let seen: Arc<Mutex<Vec<(bool, String)>>> = Arc::default();

    struct St {
        signer: EcdsaKeyPair,
        x5c: String,
        seen: Arc<Mutex<Vec<(bool, String)>>>,
    }
    let st = Arc::new(St {
        signer,
        x5c,
        seen: seen.clone(),
    });
    async fn issue(
        State(st): State<Arc<St>>,
        headers: HeaderMap,
        Query(q): Query<std::collections::HashMap<String, String>>,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let scope = q.get("scope").cloned().unwrap_or_default();
        st.seen
            .lock()
            .unwrap()
            .push((headers.contains_key("authorization"), scope.clone()));
        // scope = repository:<name>:<actions>
        let mut parts = scope.splitn(3, ':');
        let (typ, name, actions) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [st.x5c]});
        let claims = serde_json::json!({
            "iss": ISSUER, "sub": "", "aud": SERVICE,
            "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": format!("{now}-{}", st.seen.lock().unwrap().len()),
            "access": [{"type": typ, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}],
        });
        let signing_input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let sig = st
            .signer
            .sign(&ring::rand::SystemRandom::new(), signing_input.as_bytes())
            .unwrap();
        let token = format!("{signing_input}.{}", b64url(sig.as_ref()));
        axum::Json(serde_json::json!({"token": token, "expires_in": 300})).into_response()
    }
    let app = axum::Router::new()
        .route("/token", axum::routing::get(issue))
        .with_state(st);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    TokenServer {
        port,
        seen,
        root_pem: cert.pem(),
        _task: task,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_challenges_and_cross_host_redirects_without_credentials() {
    // Push over plain HTTP into a storage dir, then serve that storage with
    // token auth and blob redirects to nginx.
    let repo = format!("installer/{SCHEMATIC}");
    let storage_dir = tempfile::tempdir().unwrap();
    let img = {
        let plain = Registry::start_custom(Some(storage_dir.path()), "");
        push_factory_image(&plain.url(), &repo, "v1.13.6", &[3 << 20, 1 << 20], 21).await
    };
    // nginx serving the storage; any request with credentials is refused.
    let ngx = Nginx::start(
        storage_dir.path(),
        NginxOpts {
            refuse_credentials: true,
            ..Default::default()
        },
    );
    let tok = token_server().await;
    let bundle = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(bundle.path(), &tok.root_pem).unwrap();
    let extra = format!(
        "auth:\n  token:\n    realm: http://127.0.0.1:{}/token\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\nmiddleware:\n  storage:\n    - name: redirect\n      options:\n        baseurl: http://127.0.0.1:{}/\n",
        tok.port,
        bundle.path().display(),
        ngx.port
    );
    let up = Registry::start_custom(Some(storage_dir.path()), &extra);

    // The upstream really challenges and redirects.
    let r = reqwest::Client::new()
        .get(format!("{}/v2/{repo}/manifests/v1.13.6", up.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        r.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer realm=")
    );

    let cache = tempfile::tempdir().unwrap();
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(cache.path())
        .args(["--registry-url", &up.url()])
        .start();
    let out = tempfile::tempdir().unwrap();
    let via = out.path().join("via");
    let o = skopeo_copy(&svc.host(), &repo, "v1.13.6", &via);
    assert!(
        o.status.success(),
        "skopeo via service: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let files = dir_contents(&via);
    assert_eq!(files.get("manifest.json"), Some(&img.index));
    for b in &img.blobs {
        assert_eq!(
            files.get(b.digest.trim_start_matches("sha256:")),
            Some(&b.data),
            "{}",
            b.digest
        );
    }

    // Tokens were asked for anonymously, for the repository's pull scope.
    let seen = tok.seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|(auth, _)| !auth),
        "credentials sent to the token endpoint"
    );
    assert!(
        seen.iter()
            .all(|(_, s)| s == &format!("repository:{repo}:pull")),
        "{seen:?}"
    );
    // Every blob came from nginx (the redirect target) with no credentials:
    // nginx answers 403 to any request carrying Authorization.
    let log = ngx.access_log();
    for b in &img.blobs {
        let hex = b.digest.trim_start_matches("sha256:");
        let lines: Vec<_> = log.lines().filter(|l| l.contains(hex)).collect();
        assert_eq!(lines.len(), 1, "blob {hex} via nginx: {lines:?}");
        assert!(lines[0].contains("\" 200 "), "{}", lines[0]);
    }
}
