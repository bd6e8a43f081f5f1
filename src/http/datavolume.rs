//! `GET /api/v1/datavolume?schematic=&talosVersion=&name=&size=[&platform=&arch=&storageClass=&certConfigMap=&format=json]`:
//! the CDI `DataVolume` `talos-gen datavolume` writes, its URL on this
//! service (`--public-url`, else the request's own, [`super::factory::base_url`])
//! and its checksum the sha256 of the artifact as this service stores it
//! (the same the `.sha256` route answers: the fill runs first when it is
//! not stored yet). Thin: parse the query, ask [`crate::datavolume`] and
//! the image cache, answer YAML (or JSON).
//!
//! Every refusal is `{"error": ...}` (the query read as on every
//! `/api/v1/` route, [`Params`]). A `talosVersion` without a patch
//! (`v1.13`) is the newest release of that minor the support matrix knows,
//! said in a `Warning: 299`.
//!
//! `golden=true&namespace=NS`: the import in NS and the `DataSource` naming
//! it (two YAML documents; JSON a `List`). `cloneFrom=NS/NAME&name=&size=
//! [&storageClass=&namespace=]`: a worker's DataVolume cloned from that
//! DataSource; it reads nothing from the store.
//!
//! `profile=cozystack` (with `golden=true` or `cloneFrom`): Cozystack's
//! catalog layout; `cdiVersion=` the CDI whose fields are written. An
//! import answer's storage, when `size` is left out, is the raw disk's size
//! (the stored artifact's xz index) plus headroom, and the answer carries
//! that size in `x-talos-gen-raw-disk-size`.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::Answered;
use super::query::Params;
use super::state::AppState;
use crate::datavolume::{self, Names, Request};
use crate::error::Error;

const KEYS: &[&str] = &[
    "schematic",
    "talosVersion",
    "name",
    "size",
    "platform",
    "arch",
    "storageClass",
    "certConfigMap",
    "namespace",
    "golden",
    "cloneFrom",
    "profile",
    "cdiVersion",
    "format",
];

/// What a `cloneFrom` request may not carry (they describe an import).
const IMPORT_ONLY: &[&str] = &[
    "schematic",
    "talosVersion",
    "platform",
    "arch",
    "certConfigMap",
    "golden",
];

/// The answer: YAML (or JSON with `format=json`); every refusal, the
/// fill's too, `{"error": ...}` as on every `/api/v1/` route.
pub async fn get(
    State(st): State<AppState>,
    Query(q): Query<Vec<(String, String)>>,
    headers: HeaderMap,
) -> Response {
    let fail = |e: &dyn Answered| super::error::json_of(e);
    let (q, json) = match Params::new(q, KEYS, &[]).and_then(|q| check_format(&q).map(|j| (q, j))) {
        Ok(q) => q,
        Err(e) => return fail(&e),
    };
    if let Some(from) = q.get("cloneFrom") {
        return match clone(&q, from) {
            Ok(p) => answer(json, p.to_json(), p.to_yaml(), None),
            Err(e) => fail(&e),
        };
    }
    let (plan, note) = match plan(&st, &q, &headers) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let stored = match st.images.open(&plan.key).await {
        Ok(obj) => match obj.complete().await {
            Ok(stored) => stored,
            Err(e) => return fail(&e),
        },
        Err(e) => return fail(&e),
    };
    let sha = stored.entry.digest.clone();
    let reopen = || async {
        let obj = st.images.open(&plan.key).await;
        match obj {
            Ok(o) => o
                .complete()
                .await
                .map_err(|e| Error::Upstream(e.to_string())),
            Err(crate::factory::ImageError::Fetch(e)) => Err(Error::Upstream(e.to_string())),
            Err(crate::factory::ImageError::NotCached(m)) => Err(Error::Upstream(m)),
        }
    };
    let raw = datavolume::size::stored_raw_size(stored, reopen, &plan.url).await;
    let plan = match raw.and_then(|r| plan.clone().with_raw_size(r, Names::Query)) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let mut resp = answer(json, plan.to_json(&sha), plan.to_yaml(&sha), note);
    if let Some(raw) = plan.raw_size {
        resp.headers_mut().insert(RAW_SIZE, raw.into());
    }
    resp
}

/// The raw disk's uncompressed size in bytes (read from the image's xz
/// index), on every import answer.
pub const RAW_SIZE: &str = "x-talos-gen-raw-disk-size";

/// The documents; a bare minor's note as a `Warning: 299` (as
/// `/api/v1/machineconfig` carries its notes).
fn answer(json: bool, j: serde_json::Value, yaml: String, note: Option<String>) -> Response {
    let mut r = if json {
        axum::Json(j).into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/yaml")],
            yaml,
        )
            .into_response()
    };
    if let Some(v) = note.and_then(|n| {
        HeaderValue::from_str(&format!("299 talos-gen \"{}\"", n.replace('"', "'"))).ok()
    }) {
        r.headers_mut().append(header::WARNING, v);
    }
    r
}

fn clone(q: &Params, from: &str) -> crate::Result<datavolume::ClonePlan> {
    if let Some(k) = IMPORT_ONLY.iter().find(|k| q.has(k)) {
        return Err(Error::bad_input(format!(
            "{k}: not with cloneFrom (a clone reads the golden image's DataSource, not an import)"
        )));
    }
    let opt = |k: &str| q.get(k).map(str::to_string);
    datavolume::clone_plan(
        &datavolume::CloneRequest {
            clone_from: from.to_string(),
            name: opt("name").unwrap_or_default(),
            size: opt("size").unwrap_or_default(),
            storage_class: opt("storageClass"),
            namespace: opt("namespace"),
            profile: profile(q)?,
        },
        Names::Query,
    )
}

/// `profile=cozystack`, else talos-gen's own layout.
fn profile(q: &Params) -> crate::Result<datavolume::Profile> {
    match q.get("profile") {
        Some(p) => datavolume::Profile::parse(p, "profile"),
        None => Ok(datavolume::Profile::Plain),
    }
}

/// `format`: `yaml` (the default) or `json`; true for JSON.
fn check_format(q: &Params) -> crate::Result<bool> {
    match q.get("format") {
        None | Some("yaml") => Ok(false),
        Some("json") => Ok(true),
        Some(f) => Err(Error::bad_input(format!(
            "format: {} is not yaml or json",
            crate::text::clip_quoted(&format!("{f:?}"))
        ))),
    }
}

fn plan(
    st: &AppState,
    q: &Params,
    headers: &HeaderMap,
) -> crate::Result<(datavolume::Plan, Option<String>)> {
    let golden = q.flag("golden")?;
    let need = |k: &str| {
        q.get(k)
            .map(str::to_string)
            .ok_or_else(|| Error::bad_input(format!("{k}: missing query parameter")))
    };
    // A bare minor (`v1.13`) is the newest release of it the matrix
    // knows, as for `machineconfig`; the note rides on the answer.
    let (talos_version, note) = st
        .matrix
        .release_of(&need("talosVersion")?, "talosVersion")?;
    let opt = |k: &str| q.get(k).map(str::to_string);
    let req = Request {
        base_url: super::factory::base_url(st, headers),
        schematic: need("schematic")?,
        talos_version,
        platform: opt("platform"),
        arch: opt("arch"),
        name: opt("name").unwrap_or_default(),
        size: opt("size").unwrap_or_default(),
        storage_class: opt("storageClass"),
        cert_configmap: opt("certConfigMap"),
        namespace: opt("namespace"),
        golden,
        profile: profile(q)?,
        cdi_version: opt("cdiVersion"),
    };
    let plan = datavolume::plan(&req, Names::Query, &|n| {
        st.schematics.id_by_name(n).map(str::to_string)
    })?;
    Ok((plan, note))
}
