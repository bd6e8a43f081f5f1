//! `POST /api/v1/machineconfig` and `POST /api/v1/kubelet-reservations`.
//!
//! Bodies are JSON or YAML with the flags' names in camelCase (the
//! envelope: `{"clusterName": ..., "values": ..., "secrets": ...}`). A
//! machineconfig request with query parameters instead takes the flags
//! from them (`?clusterName=&endpoint=&profile=cozystack...`, the same
//! camelCase names) and its body as the values file as it is (YAML or
//! JSON). Configs and bundles carry secrets: neither request nor response
//! bodies are ever logged, and error messages name fields, not their
//! secret values; errors name the API's fields, never the CLI's flags.

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::state::AppState;
use crate::error::Error;
use crate::machineconfig::{self, Request, ReservationsRequest};

fn error_response(e: Error) -> Response {
    super::error::JsonError(e).into_response()
}

fn body_text(body: &Bytes) -> Result<&str, Error> {
    std::str::from_utf8(body).map_err(|_| Error::bad_input("body: not UTF-8"))
}

/// A JSON body (it starts with `{`) is read with the JSON parser, anything
/// else as YAML; both name the field at fault. Either passes the cheap
/// structural check (`yaml::check_structure`: depth, nodes) first. Called
/// off the async workers (`blocking`).
fn parse_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Error> {
    let text = body_text(body)?;
    crate::yaml::check_structure(text, "body")?;
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| Error::bad_input(format!("body: {e}")))
    } else {
        crate::yaml::from_str(text, "body")
    }
}

/// The request's fields (query parameters, or keys of the body envelope),
/// as [`Request`] names them: the CLI's flags in camelCase.
pub const FIELDS: &[&str] = &[
    "clusterName",
    "endpoint",
    "profile",
    "talosVersion",
    "kubernetesVersion",
    "secrets",
    "additionalSans",
    "dnsDomain",
    "installDisk",
    "installImage",
    "registryMirror",
    "configPatch",
    "force",
    "schematic",
    "installerRepository",
    "values",
    "nameserver",
    "searchDomain",
    "extraHostEntry",
    "instanceType",
    "cpu",
    "memory",
    "systemReservedMemory",
    "kubeReservedMemory",
    "systemReservedCpu",
    "kubeReservedCpu",
    "evictionHardMemory",
    "evictionSoftMemory",
    "airGapMirror",
    "imageVerificationKey",
    "mirrorCa",
];

/// Query parameters that repeat (as the flags do); `additionalSans` also
/// takes a comma-separated list.
const LISTS: &[&str] = &[
    "additionalSans",
    "registryMirror",
    "configPatch",
    "nameserver",
    "searchDomain",
    "extraHostEntry",
];

/// The request of a query-parameter call: the flags from `query`, the
/// body (the values file as it is, YAML or JSON; empty: none) as `values`.
fn query_request(query: &[(String, String)], body: &Bytes) -> Result<Request, Error> {
    use serde_json::{Map, Value as J};
    if let Some((k, _)) = query
        .iter()
        .find(|(k, _)| matches!(k.as_str(), "secrets" | "withSecrets" | "values"))
    {
        return Err(Error::bad_input(match k.as_str() {
            "values" => {
                "values: with query parameters the body is the values file; not a query parameter"
                    .to_string()
            }
            k => format!(
                "{k}: not a query parameter (a URL is logged); send the secrets in the JSON envelope's \"secrets\" with \"values\" beside it"
            ),
        }));
    }
    let q = super::query::Params::new(query.to_vec(), FIELDS, LISTS)?;
    let mut m = Map::new();
    for (k, v) in q.pairs() {
        match k.as_str() {
            "force" => {
                m.insert(k.clone(), J::Bool(super::query::flag(k, v)?));
            }
            k if LISTS.contains(&k) => {
                let list = m
                    .entry(k.to_string())
                    .or_insert_with(|| J::Array(Vec::new()));
                if let J::Array(items) = list {
                    if k == "additionalSans" {
                        items.extend(v.split(',').map(|s| J::String(s.to_string())));
                    } else {
                        items.push(J::String(v.clone()));
                    }
                }
            }
            k => {
                m.insert(k.to_string(), J::String(v.clone()));
            }
        }
    }
    let text = body_text(body)?;
    if !text.trim().is_empty() {
        crate::yaml::check_structure(text, "body")?;
        m.insert("values".into(), J::String(text.to_string()));
    }
    serde_json::from_value(J::Object(m)).map_err(|e| Error::bad_input(format!("query: {e}")))
}

/// A CLI flag named in a core error (`--cluster-name: required`) as the
/// API field it is (`clusterName: required`); `--values` is `body` when
/// the body is the values file. Flags the API has no field for are left.
fn api_names(msg: &str, values_is_body: bool) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let n = after
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'))
            .unwrap_or(after.len());
        let flag = &after[..n];
        let mut camel = String::new();
        let mut up = false;
        for c in flag.chars() {
            if c == '-' {
                up = true;
            } else if up {
                camel.push(c.to_ascii_uppercase());
                up = false;
            } else {
                camel.push(c);
            }
        }
        let name = match camel.as_str() {
            "withSecrets" => Some("secrets"),
            "values" if values_is_body => Some("body"),
            c => FIELDS.iter().find(|f| **f == c).copied(),
        };
        match name {
            // `-o/--output` and the like: no API field, left as written.
            Some(name) if !out.ends_with('/') => out.push_str(name),
            _ => {
                out.push_str("--");
                out.push_str(flag);
            }
        }
        rest = &after[n..];
    }
    out.push_str(rest);
    out
}

/// [`api_names`] over an error's message, its kind kept.
fn with_api_names(e: Error, values_is_body: bool) -> Error {
    let f = |m: String| api_names(&m, values_is_body);
    match e {
        Error::BadInput(m) => Error::BadInput(f(m)),
        Error::Refused(m) => Error::Refused(f(m)),
        Error::NotFound(m) => Error::NotFound(f(m)),
        Error::Upstream(m) => Error::Upstream(f(m)),
        Error::Unavailable(m) => Error::Unavailable(f(m)),
        other => other,
    }
}

/// The body envelope, its error saying what to do when the body is a
/// values file sent without query parameters.
fn envelope(body: &Bytes) -> Result<Request, Error> {
    parse_body::<Request>(body).map_err(|e| {
        let msg = e.to_string();
        let chart_key = crate::machineconfig::cozystack::CHART_KEYS
            .iter()
            .filter(|k| !FIELDS.contains(k))
            .any(|k| msg.contains(&format!("unknown field `{k}`")));
        if chart_key {
            Error::bad_input(format!(
                "{msg} (a values file as it is? give the fields as query parameters: ?clusterName=...&endpoint=...&profile=cozystack)"
            ))
        } else {
            e
        }
    })
}

/// `POST /api/v1/machineconfig`: answers the config as `application/yaml`.
/// With query parameters the body is the values file (see the module).
pub async fn generate(
    State(state): State<AppState>,
    Query(query): Query<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    let st = state.clone();
    let result = super::blocking::run("generating the config", move || {
        let values_is_body = !query.is_empty();
        let req = if values_is_body {
            query_request(&query, &body)
        } else {
            envelope(&body)
        };
        req.and_then(|req| machineconfig::generate_with(&req, &st.matrix))
            .map_err(|e| with_api_names(e, values_is_body))
    })
    .await;
    match result {
        Ok(out) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/yaml"),
            );
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            for w in &out.warnings {
                let text = format!("299 talos-gen \"{}\"", w.replace('"', "'"));
                if let Ok(v) = HeaderValue::from_str(&text) {
                    headers.append(header::WARNING, v);
                }
            }
            (StatusCode::OK, headers, out.config).into_response()
        }
        Err(e) => error_response(e),
    }
}

/// `POST /api/v1/kubelet-reservations`: answers JSON with the contract's fields.
/// It takes no query parameter (one given is 400, as on every `/api/v1/` route).
pub async fn reservations(Query(query): Query<Vec<(String, String)>>, body: Bytes) -> Response {
    if let Err(e) = super::query::Params::new(query, &[], &[]) {
        return error_response(e);
    }
    let result = super::blocking::run("computing the reservations", move || {
        parse_body::<ReservationsRequest>(&body)
            .and_then(|req| machineconfig::kubelet_reservations(&req))
            .map_err(|e| with_api_names(e, false))
    })
    .await;
    match result {
        Ok(r) => match serde_json::to_string(&r) {
            Ok(json) => (
                StatusCode::OK,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                json,
            )
                .into_response(),
            Err(e) => error_response(Error::refused(format!("encoding JSON: {e}"))),
        },
        Err(e) => error_response(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_api_fields() {
        assert_eq!(
            api_names("--cluster-name: required", false),
            "clusterName: required"
        );
        assert_eq!(
            api_names("--values: talos.version: bad", true),
            "body: talos.version: bad"
        );
        assert_eq!(api_names("--values: x", false), "values: x");
        assert_eq!(
            api_names("--with-secrets: not a bundle", false),
            "secrets: not a bundle"
        );
        assert_eq!(
            api_names("--config-patch #2: unknown field", false),
            "configPatch #2: unknown field"
        );
        assert_eq!(api_names("-o/--output: x", false), "-o/--output: x");
        assert_eq!(api_names("--no-such-flag x", false), "--no-such-flag x");
        assert_eq!(api_names("a -- b", false), "a -- b");
    }

    #[test]
    fn query_parameters_make_the_request() {
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let body = Bytes::from_static(b"instanceType: u1.xlarge\ncluster: demo\n");
        let r = query_request(
            &q(&[
                ("clusterName", "c1"),
                ("endpoint", "https://c1:6443"),
                ("profile", "cozystack"),
                ("additionalSans", "a,b"),
                ("additionalSans", "c"),
                ("nameserver", "1.1.1.1"),
                ("force", "true"),
            ]),
            &body,
        )
        .unwrap();
        assert_eq!(r.cluster_name.as_deref(), Some("c1"));
        assert_eq!(r.additional_sans, vec!["a", "b", "c"]);
        assert_eq!(r.nameserver, vec!["1.1.1.1"]);
        assert!(r.force);
        assert!(matches!(r.values, Some(crate::yaml::Value::String(_))));
        let e = query_request(&q(&[("clusterNam", "c1")]), &body).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown query parameter \"clusterNam\" (nearest known: \"clusterName\")"
        );
        let e = query_request(&q(&[("secrets", "x")]), &body).unwrap_err();
        assert!(
            e.to_string().starts_with("secrets: not a query parameter"),
            "{e}"
        );
        let e = query_request(&q(&[("force", "yes")]), &body).unwrap_err();
        assert!(e.to_string().starts_with("force:"), "{e}");
        let e =
            query_request(&q(&[("clusterName", "a"), ("clusterName", "b")]), &body).unwrap_err();
        assert!(
            e.to_string().starts_with("clusterName: given 2 times"),
            "{e}"
        );
        let r = query_request(&q(&[("force", "TRUE")]), &body).unwrap();
        assert!(r.force);
    }
}
