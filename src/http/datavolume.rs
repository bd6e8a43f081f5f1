//! `GET /api/v1/datavolume?schematic=&talosVersion=&name=&size=[&platform=&arch=&storageClass=&certConfigMap=&format=json]`:
//! the CDI `DataVolume` `talos-gen datavolume` writes, its URL on this
//! service (`--public-url`, else the request's own, [`super::factory::base_url`])
//! and its checksum the sha256 of the artifact as this service stores it
//! (the same the `.sha256` route answers: the fill runs first when it is
//! not stored yet). Thin: parse the query, ask [`crate::datavolume`] and
//! the image cache, answer YAML (or JSON).

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::JsonError;
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
    "format",
];

pub async fn get(
    State(st): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let json = q.get("format").map(String::as_str) == Some("json");
    let fail = |e: Error| {
        if json {
            JsonError(e).into_response()
        } else {
            e.into_response()
        }
    };
    let plan = match plan(&st, &q, &headers) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    let sha = match st.images.open(&plan.key).await {
        Ok(obj) => match obj.complete().await {
            Ok(stored) => stored.entry.digest.clone(),
            Err(e) => return e.into_response(),
        },
        Err(e) => return e.into_response(),
    };
    if json {
        axum::Json(plan.to_json(&sha)).into_response()
    } else {
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/yaml")],
            plan.to_yaml(&sha),
        )
            .into_response()
    }
}

fn plan(
    st: &AppState,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
) -> crate::Result<datavolume::Plan> {
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
        name: need("name")?,
        size: need("size")?,
        storage_class: q.get("storageClass").cloned(),
        cert_configmap: q.get("certConfigMap").cloned(),
    };
    datavolume::plan(&req, Names::Query, &|n| {
        st.schematics.id_by_name(n).map(str::to_string)
    })
}
