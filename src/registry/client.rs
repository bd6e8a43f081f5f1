//! The upstream side of the pull-through: one HTTP client that speaks to OCI
//! registries as an anonymous puller.
//!
//! Why reqwest and not oci-client: oci-client's `pull_manifest_raw` does not
//! return the upstream's `Content-Type`, which must be served unchanged;
//! its blob streams cannot be handed to the shared fill as a plain byte
//! stream with the upstream's headers; it addresses registries by host only
//! (no base URL with a path, http/https chosen per host by a separate
//! table); and it follows redirects inside reqwest, so a bearer challenge
//! from the host a redirect lands on (the factory 307s to another registry)
//! cannot be answered for that host alone. The few rules needed here are
//! small: manual redirects, a per-origin token cache, Accept headers.
//!
//! Rules:
//! - redirects (301, 302, 303, 307, 308) are followed by hand, at most 10;
//!   a token is only ever sent to the origin (scheme, host, port) whose
//!   challenge it answered, so credentials never cross to another host;
//! - `401` with `WWW-Authenticate: Bearer realm=..,service=..,scope=..` is
//!   answered once with an anonymous token from the realm, cached per
//!   origin and scope until it expires;
//! - every wait is bounded by the upstream [`Limits`] (connecting, each
//!   response head, each body byte); a bound that fires is
//!   [`FetchError::Timeout`] (HTTP 504), other transport failures
//!   [`FetchError::Failed`] (502).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Method, Response, StatusCode, Url};

use crate::upstream::{FetchError, Limits};

/// Largest token answer read.
const MAX_TOKEN_BODY: usize = 64 * 1024;

/// Every manifest type a Talos installer or a containerd pull may meet.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.docker.distribution.manifest.v2+json";

const MAX_REDIRECTS: usize = 10;

/// An anonymous registry client with a token cache.
pub struct RegistryClient {
    http: reqwest::Client,
    limits: Limits,
    tokens: Mutex<HashMap<(String, String), (String, Instant)>>,
}

impl RegistryClient {
    /// The bounds every request of this client keeps.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn new(limits: Limits) -> crate::Result<RegistryClient> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(limits.timeout)
            .user_agent(concat!("talos-gen/", env!("CARGO_PKG_VERSION")))
            .no_gzip()
            .build()
            .map_err(|e| crate::Error::Upstream(format!("building the registry client: {e}")))?;
        Ok(RegistryClient {
            http,
            limits,
            tokens: Mutex::new(HashMap::new()),
        })
    }

    /// Send `method url` (with `accept` and extra headers), following
    /// redirects and answering bearer challenges; `scope` is the token scope
    /// asked for when a challenge names none (`repository:<repo>:pull`).
    /// Returns the final response whatever its status.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        accept: Option<&str>,
        extra: &HeaderMap,
        scope: &str,
    ) -> Result<Response, FetchError> {
        let mut url = Url::parse(url)
            .map_err(|e| FetchError::Failed(format!("upstream URL {url:?}: {e}")))?;
        let mut challenged = false;
        let mut hops = 0;
        loop {
            let origin = origin(&url);
            let mut req = self.http.request(method.clone(), url.clone());
            if let Some(a) = accept {
                req = req.header(ACCEPT, a);
            }
            for (k, v) in extra {
                req = req.header(k, v);
            }
            if let Some(tok) = self.cached_token(&origin, scope) {
                req = req.header(AUTHORIZATION, format!("Bearer {tok}"));
            }
            let resp = self.limits.headers(url.as_str(), req.send()).await?;
            let status = resp.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                hops += 1;
                if hops > MAX_REDIRECTS {
                    return Err(FetchError::Failed(format!(
                        "more than {MAX_REDIRECTS} redirects from {url}"
                    )));
                }
                let loc = resp
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        FetchError::Failed(format!("{status} from {url} without a Location"))
                    })?;
                let next = url.join(loc).map_err(|e| {
                    FetchError::Failed(format!("bad Location {loc:?} from {url}: {e}"))
                })?;
                if !matches!(next.scheme(), "http" | "https") {
                    return Err(FetchError::Failed(format!("redirect to {next} refused")));
                }
                tracing::debug!(from = %url, to = %next, "following upstream redirect");
                url = next;
                challenged = false;
                continue;
            }
            if status == StatusCode::UNAUTHORIZED && !challenged {
                let challenge = resp
                    .headers()
                    .get_all(WWW_AUTHENTICATE)
                    .iter()
                    .filter_map(|v| v.to_str().ok())
                    .find_map(parse_bearer_challenge);
                if let Some(ch) = challenge {
                    challenged = true;
                    let scope_for = ch.scope.clone().unwrap_or_else(|| scope.to_string());
                    self.fetch_token(&origin, scope, &ch, &scope_for).await?;
                    continue;
                }
            }
            return Ok(resp);
        }
    }

    fn cached_token(&self, origin: &str, scope: &str) -> Option<String> {
        let mut t = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let key = (origin.to_string(), scope.to_string());
        match t.get(&key) {
            Some((tok, exp)) if *exp > Instant::now() => Some(tok.clone()),
            Some(_) => {
                t.remove(&key);
                None
            }
            None => None,
        }
    }

    async fn fetch_token(
        &self,
        origin: &str,
        scope: &str,
        ch: &Challenge,
        scope_for: &str,
    ) -> Result<(), FetchError> {
        let mut realm = Url::parse(&ch.realm)
            .map_err(|e| FetchError::Failed(format!("token realm {:?}: {e}", ch.realm)))?;
        if !matches!(realm.scheme(), "http" | "https") {
            return Err(FetchError::Failed(format!("token realm {realm} refused")));
        }
        {
            let mut q = realm.query_pairs_mut();
            if let Some(s) = &ch.service {
                q.append_pair("service", s);
            }
            q.append_pair("scope", scope_for);
        }
        // Anonymous: no credentials to the realm; its redirects are followed
        // by a plain GET (nothing secret to leak).
        let resp = self
            .limits
            .headers(realm.as_str(), self.http.get(realm.clone()).send())
            .await?;
        if !resp.status().is_success() {
            return Err(FetchError::Failed(format!(
                "token endpoint {realm} answered {}",
                resp.status()
            )));
        }
        #[derive(serde::Deserialize)]
        struct Tok {
            token: Option<String>,
            access_token: Option<String>,
            expires_in: Option<u64>,
        }
        let body = self
            .limits
            .read_small(realm.as_str(), resp, MAX_TOKEN_BODY)
            .await?;
        let t: Tok = serde_json::from_slice(&body)
            .map_err(|e| FetchError::Failed(format!("token endpoint {realm}: bad JSON: {e}")))?;
        let tok = t
            .token
            .or(t.access_token)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| FetchError::Failed(format!("token endpoint {realm} gave no token")))?;
        if HeaderValue::from_str(&format!("Bearer {tok}")).is_err() {
            return Err(FetchError::Failed(format!(
                "token endpoint {realm} gave an unusable token"
            )));
        }
        // Registries default to 60 s; keep a margin.
        let life = Duration::from_secs(t.expires_in.unwrap_or(60).clamp(10, 3600) - 5);
        let mut m = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(
            (origin.to_string(), scope.to_string()),
            (tok, Instant::now() + life),
        );
        Ok(())
    }
}

/// `scheme://host:port` of a URL (what tokens are bound to).
pub fn origin(u: &Url) -> String {
    format!(
        "{}://{}:{}",
        u.scheme(),
        u.host_str().unwrap_or(""),
        u.port_or_known_default().unwrap_or(0)
    )
}

/// A parsed `WWW-Authenticate: Bearer ...` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub realm: String,
    pub service: Option<String>,
    pub scope: Option<String>,
}

/// Parse `Bearer realm="...",service="...",scope="..."` (quoted or token values).
pub fn parse_bearer_challenge(h: &str) -> Option<Challenge> {
    let h = h.trim();
    let (scheme, rest) = h.split_once(char::is_whitespace)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut params: HashMap<String, String> = HashMap::new();
    let mut s = rest.trim();
    while !s.is_empty() {
        let (k, after) = s.split_once('=')?;
        let k = k.trim().trim_start_matches(',').trim().to_ascii_lowercase();
        let after = after.trim_start();
        let (v, remaining) = if let Some(q) = after.strip_prefix('"') {
            let mut out = String::new();
            let mut chars = q.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            out.push(n);
                        }
                    }
                    '"' => {
                        end = Some(i + 1);
                        break;
                    }
                    _ => out.push(c),
                }
            }
            (out, &q[end?..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        params.insert(k, v);
        s = remaining.trim_start().trim_start_matches(',').trim_start();
    }
    Some(Challenge {
        realm: params.remove("realm")?,
        service: params.remove("service"),
        scope: params.remove("scope"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges() {
        let c = parse_bearer_challenge(
            r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:siderolabs/kubelet:pull""#,
        )
        .unwrap();
        assert_eq!(c.realm, "https://ghcr.io/token");
        assert_eq!(c.service.as_deref(), Some("ghcr.io"));
        assert_eq!(
            c.scope.as_deref(),
            Some("repository:siderolabs/kubelet:pull")
        );
        let c = parse_bearer_challenge(r#"bearer realm=http://x/t, scope="a,b""#).unwrap();
        assert_eq!(c.realm, "http://x/t");
        assert_eq!(c.scope.as_deref(), Some("a,b"));
        assert_eq!(c.service, None);
        assert!(parse_bearer_challenge(r#"Basic realm="x""#).is_none());
        assert!(parse_bearer_challenge("Bearer service=x").is_none());
        assert!(parse_bearer_challenge(r#"Bearer realm="unterminated"#).is_none());
    }

    #[test]
    fn origins() {
        let a = Url::parse("https://ghcr.io/v2/x").unwrap();
        let b = Url::parse("https://ghcr.io:443/token").unwrap();
        let c = Url::parse("https://pkg-containers.githubusercontent.com/x").unwrap();
        assert_eq!(origin(&a), origin(&b));
        assert_ne!(origin(&a), origin(&c));
    }
}
