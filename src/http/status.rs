//! `GET /`: the status page, HTML rendered with tera (no JavaScript):
//! version, the store and the upstreams, whether each answers and what
//! that means for readiness (only the store counts), the store's contents
//! (stored artifacts and installer tags with size, sha256, fetch time and
//! last use), fills in progress, and the support matrix. Rendered from
//! state the service keeps ([`super::ops::Probes`], the inventory, the
//! metrics): a page view sends no request upstream and never waits on the
//! store.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::ops::display_url;
use super::state::AppState;

const TEMPLATE: &str = include_str!("../../templates/status.html");

#[derive(Serialize, Clone)]
struct UpstreamRow {
    role: String,
    url: String,
    state: String,
    class: &'static str,
    /// What the state means for `/readyz`.
    readiness: String,
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
    schematic: String,
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
    schematic: String,
    phase: &'static str,
    written: String,
    len: String,
    age: String,
    rate: String,
}

#[derive(Serialize)]
struct MatrixRow {
    talos: String,
    minors: String,
    default: String,
    newest: String,
    released: String,
}

#[derive(Serialize)]
struct Setting {
    name: &'static str,
    value: String,
}

#[derive(Serialize)]
struct CountRow {
    kind: String,
    hits: u64,
    misses: u64,
    offline: u64,
}

#[derive(Serialize)]
struct ErrorRow {
    when: String,
    what: String,
}

#[derive(Serialize)]
struct SyncRow {
    kind: String,
    bundle: Option<String>,
    carried: Option<String>,
    finished: String,
    ok: bool,
    summary: String,
    failed: Vec<crate::mirror::report::FailedItem>,
    releases: Vec<ReleaseRow>,
}

#[derive(Serialize)]
struct ReleaseRow {
    release: String,
    stored: String,
    size: String,
    what: String,
}

/// The name of a known schematic among a key's names (as the store
/// parses them), if any.
fn schematic_label(key_names: Vec<&str>, names: &std::collections::HashMap<&str, &str>) -> String {
    key_names
        .into_iter()
        .find_map(|seg| names.get(seg).copied())
        .unwrap_or_default()
        .to_string()
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

use crate::inventory::Listed;
use crate::text::{human_duration, human_size};

fn when(secs: Option<u64>) -> String {
    match secs {
        Some(s) if s > 0 => httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(s)),
        _ => "-".to_string(),
    }
}

/// What an upstream's state means for readiness (the same for each: none
/// is needed to be ready).
const UPSTREAM_READINESS: &str = "not needed for /readyz (only the store is): while it does not answer, what the store holds is served and only misses fail";

/// "3s ago" for a probe that ended at `at`.
fn ago(at: SystemTime) -> String {
    let d = SystemTime::now().duration_since(at).unwrap_or_default();
    format!("checked {}s ago", d.as_secs())
}

/// The store's row and each upstream's, from what the background prober
/// last found: no request is made for the page.
fn upstream_rows(st: &AppState, found: &super::ops::Found) -> Vec<UpstreamRow> {
    let ready = !matches!(&found.store, Some(s) if s.result.is_err()) && st.store.available();
    let store_state = match &found.store {
        None => "not checked yet".to_string(),
        Some(p) => match &p.result {
            Ok(()) => format!("answers ({})", ago(p.at)),
            Err(e) => format!("does not answer: {e} ({})", ago(p.at)),
        },
    };
    let mut rows = vec![UpstreamRow {
        role: "store".into(),
        url: st.store.describe(),
        state: store_state,
        class: if ready { "ok" } else { "down" },
        readiness: if ready {
            "needed for /readyz: ready".into()
        } else {
            "needed for /readyz: not ready (503) until it answers".into()
        },
    }];
    for u in &found.upstreams {
        let (state, class) = match (&u.result, st.cfg.offline) {
            (_, true) => ("offline: not contacted".to_string(), "off"),
            (None, false) => ("not asked yet".to_string(), "off"),
            (Some(Ok((status, took))), false) => (
                format!(
                    "answers (HTTP {status} in {} ms, {})",
                    took.as_millis(),
                    u.at.map(ago).unwrap_or_default()
                ),
                "ok",
            ),
            (Some(Err(e)), false) => (
                format!(
                    "does not answer ({e}; {})",
                    u.at.map(ago).unwrap_or_default()
                ),
                "warn",
            ),
        };
        rows.push(UpstreamRow {
            role: u.role.clone(),
            url: u.url.clone(),
            state,
            class,
            readiness: UPSTREAM_READINESS.into(),
        });
    }
    rows
}

/// Render the page for the current state.
/// Each part's rows are built by a function of their own, then the template.
pub async fn render(st: &AppState) -> Result<String, tera::Error> {
    let found = st.probes.found();
    let upstreams = upstream_rows(st, &found);
    let names: std::collections::HashMap<&str, &str> =
        st.schematics.names().map(|(n, id)| (id, n)).collect();
    let (store, artifacts, tags) = store_rows(st, &names);
    let fills = fill_rows(st, &names);
    let matrix = matrix_rows(st);
    let settings = settings(st);
    let (counts, errors, misses) = metric_rows(st);
    let sync = sync_row(found.mirror_run);
    let uptime = SystemTime::now()
        .duration_since(st.started)
        .unwrap_or_default();
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
    ctx.insert("settings", &settings);
    ctx.insert("counts", &counts);
    ctx.insert("errors", &errors);
    ctx.insert("misses", &misses);
    ctx.insert("sync", &sync);
    ctx.insert("uptime", &human_duration(uptime));
    ctx.insert("started", &httpdate::fmt_http_date(st.started).to_string());
    tera().render("status.html", &ctx)
}

/// The store's row and its artifact and tag rows.
fn store_rows(
    st: &AppState,
    names: &std::collections::HashMap<&str, &str>,
) -> (StoreRow, Vec<ObjectRow>, Vec<ObjectRow>) {
    let entries = st.store.keys();
    let totals = st.store.totals();
    let row = |name: String, e: &crate::inventory::StoredKey| ObjectRow {
        schematic: schematic_label(e.key.names(), names),
        name,
        size: human_size(e.size),
        bytes: e.size,
        sha256: e.digest.clone(),
        fetched: when(Some(e.fetched)),
        used: when(e.last_use),
        pinned: if e.pinned { "yes" } else { "" },
    };
    let mut artifacts = Vec::new();
    let mut tags = Vec::new();
    let (mut manifests, mut blobs, mut schematics, mut pinned) = (0, 0, 0, 0);
    for e in &entries {
        if e.pinned {
            pinned += 1;
        }
        match e.listed() {
            Listed::Artifact(name) => artifacts.push(row(name, e)),
            Listed::Tag(name) => tags.push(row(name, e)),
            Listed::Manifest => manifests += 1,
            Listed::Blob => blobs += 1,
            Listed::Schematic => schematics += 1,
            Listed::Other => {}
        }
    }
    let store = StoreRow {
        dir: st.store.describe(),
        size: human_size(totals.bytes),
        max: st.store.max_size().map(human_size),
        objects: totals.objects,
        keys: entries.len(),
        pinned,
        manifests,
        blobs,
        schematics,
    };
    (store, artifacts, tags)
}

/// The fills running now.
fn fill_rows(st: &AppState, names: &std::collections::HashMap<&str, &str>) -> Vec<FillRow> {
    st.fills
        .in_progress()
        .into_iter()
        .map(|f| {
            let age = f.started.elapsed();
            let rate = if f.written > 0 && age.as_secs_f64() > 0.0 {
                format!(
                    "{}/s",
                    human_size((f.written as f64 / age.as_secs_f64()) as u64)
                )
            } else {
                "-".into()
            };
            FillRow {
                schematic: schematic_label(f.key.names(), names),
                key: f.key.to_string(),
                phase: f.phase,
                written: human_size(f.written),
                len: f.len.map(human_size).unwrap_or_else(|| "?".into()),
                age: human_duration(age),
                rate,
            }
        })
        .collect()
}

/// The support matrix, a row per Talos minor.
fn matrix_rows(st: &AppState) -> Vec<MatrixRow> {
    st.matrix
        .entries()
        .iter()
        .map(|e| {
            let minors = e.supported_minors();
            MatrixRow {
                talos: e.talos.to_string(),
                // Compact: the first and last minor of the window.
                minors: match (minors.first(), minors.last()) {
                    (Some(a), Some(b)) if a != b => format!("{a} – {b}"),
                    (Some(a), _) => a.clone(),
                    _ => String::new(),
                },
                default: e.default_latest.to_string(),
                newest: e.newest.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                released: e
                    .released
                    .as_deref()
                    .map(|r| r.split(' ').next().unwrap_or(r).to_string())
                    .unwrap_or_default(),
            }
        })
        .collect()
}

/// The settings the service runs with, as an operator reads them.
fn settings(st: &AppState) -> Vec<Setting> {
    let cfg = &st.cfg;
    vec![
        Setting {
            name: "offline",
            value: if cfg.offline {
                "yes: no upstream is ever contacted".into()
            } else {
                "no".into()
            },
        },
        Setting {
            name: "cache limit",
            value: st
                .store
                .max_size()
                .map(human_size)
                .unwrap_or_else(|| "none (--cache-max-size)".into()),
        },
        Setting {
            name: "factory",
            value: display_url(&cfg.factory_url),
        },
        Setting {
            name: "installer registry",
            value: display_url(cfg.registry_url.as_deref().unwrap_or(&cfg.factory_url)),
        },
        Setting {
            name: "mirror upstreams",
            value: if cfg.mirror_upstreams.iter().next().is_none() {
                "none (--mirror-upstream)".into()
            } else {
                cfg.mirror_upstreams
                    .iter()
                    .map(|(ns, u)| format!("{ns}={}", display_url(u)))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        },
        Setting {
            name: "concurrent fills",
            value: match cfg.max_concurrent_fills {
                Some(n) => format!("at most {n}"),
                None => "no cap".into(),
            },
        },
        Setting {
            name: "tag revalidation",
            value: format!("every {}s", cfg.tag_revalidate.as_secs()),
        },
        Setting {
            name: "factory documents",
            value: format!("asked again after {}s", cfg.metadata_ttl.as_secs()),
        },
        Setting {
            name: "stale while revalidating",
            value: match cfg.stale_while_revalidate.as_secs() {
                0 => "off: past its freshness a copy waits for the upstream".into(),
                s => format!("up to {s}s past its freshness, refreshed in the background"),
            },
        },
        Setting {
            name: "API writes",
            value: if st.api_token.is_some() {
                "need the bearer token".into()
            } else {
                "open (no --api-token-file)".into()
            },
        },
    ]
}

/// The cache counts, the last errors and the last offline misses.
fn metric_rows(st: &AppState) -> (Vec<CountRow>, Vec<ErrorRow>, Vec<ErrorRow>) {
    let counts: Vec<CountRow> = st
        .metrics
        .cache_counts()
        .into_iter()
        .map(|(kind, hits, misses, offline)| CountRow {
            kind,
            hits,
            misses,
            offline,
        })
        .collect();
    let errors: Vec<ErrorRow> = st
        .metrics
        .recent_errors()
        .into_iter()
        .map(|(t, what)| ErrorRow {
            when: httpdate::fmt_http_date(t),
            what,
        })
        .collect();
    let misses: Vec<ErrorRow> = st
        .metrics
        .recent_misses()
        .into_iter()
        .map(|(t, what)| ErrorRow {
            when: httpdate::fmt_http_date(t),
            what,
        })
        .collect();
    (counts, errors, misses)
}

/// The last `mirror sync` or `mirror import`, as the prober last read it
/// from the store.
fn sync_row(run: Option<crate::mirror::report::SyncStatus>) -> Option<SyncRow> {
    run.map(|s| SyncRow {
        kind: s.kind,
        bundle: s.bundle,
        carried: s.carried_sync.map(|t| when(Some(t))),
        finished: when(Some(s.finished)),
        ok: s.ok,
        summary: s.summary,
        failed: s.failed,
        releases: s
            .releases
            .into_iter()
            .map(|r| ReleaseRow {
                stored: format!("{} of {} items", r.stored, r.items),
                size: format!(
                    "{} ({} objects)",
                    crate::text::human_size(r.bytes),
                    r.objects
                ),
                what: r.what,
                release: r.release,
            })
            .collect(),
    })
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
            tracing::error!(error = %e, "rendering the status page");
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
