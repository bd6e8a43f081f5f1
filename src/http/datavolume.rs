//! `GET /api/v1/datavolume?schematic=&talosVersion=&name=&size=[&platform=&arch=&storageClass=&certConfigMap=&format=json]`:
//! the CDI `DataVolume` `talos-gen datavolume` writes, its URL on this
//! service (`--public-url`, else the request's own, [`super::factory::base_url`])
//! and its checksum the sha256 of the artifact as this service stores it
//! (the same the `.sha256` route answers: the fill runs first when it is
//! not stored yet). Thin: parse the query, ask [`crate::datavolume`] and
//! the image cache, answer YAML (or JSON).
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

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::Answered;
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

pub async fn get(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let json = q.get("format").map(String::as_str) == Some("json");
    // An error in the format asked: `{"error": ...}` with `format=json`
    // (the fill's too), else the one line of text the YAML answer's reader
    // expects ([`super::error::PlainText`]: not made JSON by the API's shape).
    let fail = |e: &dyn Answered| match json {
        true => super::error::json_of(e),
        false => super::error::PlainText::answer(e),
    };
    if let Err(e) = check_keys(&q) {
        return fail(&e);
    }
    if let Some(from) = q.get("cloneFrom") {
        return match clone(&q, from) {
            Ok(p) => answer(json, p.to_json(), p.to_yaml()),
            Err(e) => fail(&e),
        };
    }
    let plan = match plan(&st, &q, &headers) {
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
    let mut resp = answer(json, plan.to_json(&sha), plan.to_yaml(&sha));
    if let Some(raw) = plan.raw_size {
        resp.headers_mut().insert(RAW_SIZE, raw.into());
    }
    resp
}

/// The raw disk's uncompressed size in bytes (read from the image's xz
/// index), on every import answer.
pub const RAW_SIZE: &str = "x-talos-gen-raw-disk-size";

fn answer(json: bool, j: serde_json::Value, yaml: String) -> Response {
    if json {
        axum::Json(j).into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/yaml")],
            yaml,
        )
            .into_response()
    }
}

fn clone(q: &HashMap<String, String>, from: &str) -> crate::Result<datavolume::ClonePlan> {
    if let Some(k) = IMPORT_ONLY.iter().find(|k| q.contains_key(**k)) {
        return Err(Error::bad_input(format!(
            "{k}: not with cloneFrom (a clone reads the golden image's DataSource, not an import)"
        )));
    }
    datavolume::clone_plan(
        &datavolume::CloneRequest {
            clone_from: from.to_string(),
            name: q.get("name").cloned().unwrap_or_default(),
            size: q.get("size").cloned().unwrap_or_default(),
            storage_class: q.get("storageClass").cloned(),
            namespace: q.get("namespace").cloned(),
            profile: profile(q)?,
        },
        Names::Query,
    )
}

/// `profile=cozystack`, else talos-gen's own layout.
fn profile(q: &HashMap<String, String>) -> crate::Result<datavolume::Profile> {
    match q.get("profile") {
        Some(p) => datavolume::Profile::parse(p, "profile"),
        None => Ok(datavolume::Profile::Plain),
    }
}

fn check_keys(q: &HashMap<String, String>) -> crate::Result<()> {
    if let Some(k) = q.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(Error::bad_input(format!(
            "{:?}: not a query parameter of /api/v1/datavolume (known: {})",
            k.chars().take(64).collect::<String>(),
            KEYS.join(", ")
        )));
    }
    if let Some(f) = q
        .get("format")
        .filter(|f| !matches!(f.as_str(), "yaml" | "json"))
    {
        return Err(Error::bad_input(format!(
            "format: {:?} is not yaml or json",
            f.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

fn plan(
    st: &AppState,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> crate::Result<datavolume::Plan> {
    let golden = match q.get("golden").map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(Error::bad_input(format!(
                "golden: {:?} is not true or false",
                other.chars().take(64).collect::<String>()
            )));
        }
    };
    let need = |k: &str| {
        q.get(k)
            .cloned()
            .ok_or_else(|| Error::bad_input(format!("{k}: missing query parameter")))
    };
    let req = Request {
        base_url: super::factory::base_url(st, headers),
        schematic: need("schematic")?,
        talos_version: need("talosVersion")?,
        platform: q.get("platform").cloned(),
        arch: q.get("arch").cloned(),
        name: q.get("name").cloned().unwrap_or_default(),
        size: q.get("size").cloned().unwrap_or_default(),
        storage_class: q.get("storageClass").cloned(),
        cert_configmap: q.get("certConfigMap").cloned(),
        namespace: q.get("namespace").cloned(),
        golden,
        profile: profile(q)?,
        cdi_version: q.get("cdiVersion").cloned(),
    };
    datavolume::plan(&req, Names::Query, &|n| {
        st.schematics.id_by_name(n).map(str::to_string)
    })
}
