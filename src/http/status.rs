//! `GET /`: the status page, HTML rendered with tera (no JavaScript):
//! version, upstreams and whether they answer, the store (stored artifacts
//! and installer tags with size, sha256, fetch time and last use), fills in
//! progress, and the support matrix.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::AppState;

const TEMPLATE: &str = include_str!("../../templates/status.html");

/// How long an upstream probe result is reused.
const PROBE_TTL: Duration = Duration::from_secs(30);
/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Serialize, Clone)]
struct UpstreamRow {
    role: String,
    url: String,
    state: String,
    class: &'static str,
}

#[derive(Serialize)]
struct StoreRow {
    dir: String,
    size: String,
    max: Option<String>,
    objects: usize,
    keys: usize,
    pinned: usize,
    manifests: usize,
    blobs: usize,
    schematics: usize,
}

#[derive(Serialize)]
struct ObjectRow {
    name: String,
    size: String,
    bytes: u64,
    sha256: String,
    fetched: String,
    used: String,
    pinned: &'static str,
}

#[derive(Serialize)]
struct FillRow {
    key: String,
    phase: &'static str,
    written: String,
    len: String,
}

#[derive(Serialize)]
struct MatrixRow {
    talos: String,
    minors: String,
    default: String,
    released: String,
}

fn tera() -> &'static tera::Tera {
    static T: OnceLock<tera::Tera> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = tera::Tera::new();
        // The template is part of the binary and tested; a failure here is a build bug.
        t.add_raw_template("status.html", TEMPLATE)
            .expect("templates/status.html parses");
        t
    })
}

/// `1.5 GiB`-style sizes.
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn when(secs: Option<u64>) -> String {
    match secs {
        Some(s) if s > 0 => httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s)),
        _ => "-".to_string(),
    }
}

/// A URL for display: no user info, no query.
fn display_url(u: &str) -> String {
    match reqwest::Url::parse(u) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string()
        }
        Err(_) => "(unparsable URL)".to_string(),
    }
}

/// What to probe: (role, base URL, path to ask).
fn upstream_targets(st: &AppState) -> Vec<(String, String, &'static str)> {
    let cfg = &st.cfg;
    let mut v = vec![("Image Factory".to_string(), cfg.factory_url.clone(), "/")];
    let reg = cfg.registry_url.clone().unwrap_or(cfg.factory_url.clone());
    v.push(("installer registry".to_string(), reg, "/v2/"));
    for m in &cfg.mirror_upstreams {
        if let Some((ns, url)) = m.split_once('=') {
            v.push((
                format!("mirror {ns}"),
                url.trim_end_matches('/').to_string(),
                "/v2/",
            ));
        }
    }
    v
}

async fn probe_all(st: &AppState) -> Vec<UpstreamRow> {
    let targets = upstream_targets(st);
    let Some(up) = &st.upstream else {
        return targets
            .into_iter()
            .map(|(role, url, _)| UpstreamRow {
                role,
                url: display_url(&url),
                state: "offline: not contacted".into(),
                class: "off",
            })
            .collect();
    };
    type Probed = Option<(Instant, Vec<UpstreamRow>)>;
    static CACHE: OnceLock<Mutex<Probed>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(None));
    if let Some((t, rows)) = &*cache.lock().unwrap_or_else(|p| p.into_inner())
        && t.elapsed() < PROBE_TTL
        && rows.len() == targets.len()
    {
        return rows.clone();
    }
    let client = up.client().clone();
    let probes = targets.into_iter().map(|(role, url, path)| {
        let client = client.clone();
        async move {
            let started = Instant::now();
            let res = client
                .get(format!("{url}{path}"))
                .timeout(PROBE_TIMEOUT)
                .send()
                .await;
            let (state, class) = match res {
                Ok(r) => (
                    format!(
                        "answers (HTTP {} in {} ms)",
                        r.status().as_u16(),
                        started.elapsed().as_millis()
                    ),
                    "ok",
                ),
                Err(e) if e.is_timeout() => (
                    format!("no answer within {}s", PROBE_TIMEOUT.as_secs()),
                    "down",
                ),
                Err(e) if e.is_connect() => ("does not answer (connect failed)".into(), "down"),
                Err(_) => ("does not answer".into(), "down"),
            };
            UpstreamRow {
                role,
                url: display_url(&url),
                state,
                class,
            }
        }
    });
    let rows = futures::future::join_all(probes).await;
    *cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), rows.clone()));
    rows
}

/// Render the page for the current state.
pub async fn render(st: &AppState) -> Result<String, String> {
    let upstreams = probe_all(st).await;
    let entries = st.store.entries();
    let row = |name: String, e: &crate::store::Entry| ObjectRow {
        name,
        size: human_size(e.size),
        bytes: e.size,
        sha256: e.digest.clone(),
        fetched: when(Some(e.fetched)),
        used: when(st.store.last_use(&e.digest)),
        pinned: if e.pinned { "yes" } else { "" },
    };
    let mut artifacts = Vec::new();
    let mut tags = Vec::new();
    let (mut manifests, mut blobs, mut schematics, mut pinned) = (0, 0, 0, 0);
    for e in &entries {
        if e.pinned {
            pinned += 1;
        }
        if let Some(rest) = e.key.strip_prefix("image/") {
            artifacts.push(row(rest.to_string(), e));
        } else if let Some(rest) = e.key.strip_prefix("oci/tag/") {
            tags.push(row(rest.to_string(), e));
        } else if e.key.starts_with("oci/manifest/") {
            manifests += 1;
        } else if e.key.starts_with("oci/blob/") {
            blobs += 1;
        } else if e.key.starts_with(crate::schematic::STORE_PREFIX) {
            schematics += 1;
        }
    }
    let store = StoreRow {
        dir: st.store.dir().display().to_string(),
        size: human_size(st.store.total_size()),
        max: st.store.max_size().map(human_size),
        objects: st.store.object_count(),
        keys: entries.len(),
        pinned,
        manifests,
        blobs,
        schematics,
    };
    let fills: Vec<FillRow> = st
        .fills
        .in_progress()
        .into_iter()
        .map(|f| FillRow {
            key: f.key,
            phase: f.phase,
            written: human_size(f.written),
            len: f.len.map(human_size).unwrap_or_else(|| "?".into()),
        })
        .collect();
    let matrix: Vec<MatrixRow> = st
        .matrix
        .entries()
        .iter()
        .map(|e| MatrixRow {
            talos: e.talos.to_string(),
            minors: e.supported_minors().join(", "),
            default: e.default_latest.to_string(),
            released: e.released.clone().unwrap_or_default(),
        })
        .collect();
    let mut ctx = tera::Context::new();
    ctx.insert("version", env!("CARGO_PKG_VERSION"));
    ctx.insert(
        "now",
        &httpdate::fmt_http_date(SystemTime::now()).to_string(),
    );
    ctx.insert("upstreams", &upstreams);
    ctx.insert("store", &store);
    ctx.insert("fills", &fills);
    ctx.insert("artifacts", &artifacts);
    ctx.insert("tags", &tags);
    ctx.insert("matrix", &matrix);
    tera()
        .render("status.html", &ctx)
        .map_err(|e| format!("rendering the status page: {e}"))
}

pub async fn page(State(st): State<AppState>) -> Response {
    match render(&st).await {
        Ok(html) => (
            [
                (header::CONTENT_TYPE, "text/html; charset=utf-8"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            html,
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "status page");
            (StatusCode::INTERNAL_SERVER_ERROR, "error: status page\n").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_and_sizes() {
        let _ = tera();
        assert_eq!(human_size(10), "10 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(
            display_url("https://user:pw@example.com/x?token=1"),
            "https://example.com/x"
        );
    }
}
