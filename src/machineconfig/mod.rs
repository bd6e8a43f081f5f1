//! Worker machine configs: typed documents, contract gates, the Cozystack
//! profile, kubelet reservations, patches and secrets. Never touches the
//! network, the store or files: the CLI and HTTP edges read inputs and
//! hand them over as a [`Request`].

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::version::Version;
use crate::yaml::Value;

mod assemble;
mod chart_schema;
pub mod contract;
pub mod cozystack;
pub mod duration;
pub mod generate;
pub mod instancetypes;
pub mod model;
pub mod patch;
pub mod quantity;
pub mod reservations;
pub mod secrets;
pub mod support;

pub use reservations::{Reservations, Sizing};

/// Everything `talos-gen machineconfig` is told, with files already read.
/// Field names are the flags' in camelCase (the HTTP body uses them).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Request {
    pub talos_version: Option<String>,
    pub kubernetes_version: Option<String>,
    pub cluster_name: Option<String>,
    pub endpoint: Option<String>,
    /// A talosctl secrets bundle (YAML text or the parsed tree); absent:
    /// fresh secrets are generated.
    #[serde(alias = "withSecrets")]
    pub secrets: Option<Value>,
    pub additional_sans: Vec<String>,
    pub dns_domain: Option<String>,
    pub install_disk: Option<String>,
    pub install_image: Option<String>,
    /// `host=url[,url...]`
    #[serde(alias = "registryMirrors")]
    pub registry_mirror: Vec<String>,
    /// Each a YAML text (one or more documents) or a parsed document.
    #[serde(alias = "configPatches")]
    pub config_patch: Vec<Value>,
    pub force: bool,
    pub schematic: Option<String>,
    pub installer_repository: Option<String>,
    pub profile: Option<String>,
    /// One pool's values (YAML text or the parsed tree).
    pub values: Option<Value>,
    #[serde(alias = "nameservers")]
    pub nameserver: Vec<String>,
    #[serde(alias = "searchDomains")]
    pub search_domain: Vec<String>,
    /// `IP=alias[,alias...]`
    #[serde(alias = "extraHostEntries")]
    pub extra_host_entry: Vec<String>,
    /// `instanceType`, `cpu`, `memory` and the kubelet overrides.
    #[serde(flatten)]
    pub sizing: Sizing,
    /// `--air-gap-mirror URL`: a mirror with `skipFallback` for every
    /// registry host of the worker's pull list.
    pub air_gap_mirror: Option<String>,
    /// `--image-verification-key`: the PEM public key text.
    pub image_verification_key: Option<String>,
    /// `--mirror-ca`: the PEM CA certificate(s) every https mirror
    /// endpoint the config writes is trusted with.
    pub mirror_ca: Option<String>,
}

/// What `generate` produced.
#[derive(Debug, Clone)]
pub struct Output {
    /// All documents, `---`-separated.
    pub config: String,
    /// The secrets bundle used (see [`Output::secrets_yaml`]).
    pub bundle: secrets::Bundle,
    /// Warnings for stderr (an unsupported pair written with `force`).
    pub warnings: Vec<String>,
}

fn nonempty(v: &Option<String>) -> Option<&str> {
    v.as_deref().filter(|s| !s.is_empty())
}

/// A text-or-tree input as a tree.
fn as_tree(v: &Value, what: &str) -> Result<Value> {
    match v {
        Value::String(s) => crate::yaml::value_from_str(s, what),
        other => Ok(other.clone()),
    }
}

fn parse_mirror(s: &str) -> Result<generate::Mirror> {
    let bad = || Error::bad_input(format!("--registry-mirror: {s:?} is not host=url[,url...]"));
    let (host, urls) = s.split_once('=').ok_or_else(bad)?;
    if host.is_empty() || urls.is_empty() {
        return Err(bad());
    }
    let endpoints: Vec<String> = urls.split(',').map(str::to_string).collect();
    for e in &endpoints {
        check_url(e, "--registry-mirror")?;
    }
    Ok(generate::Mirror {
        host: host.to_string(),
        endpoints,
        override_path: None,
        skip_fallback: None,
    })
}

fn check_url(u: &str, what: &str) -> Result<()> {
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .ok_or_else(|| Error::bad_input(format!("{what}: {u:?} is not an http(s) URL")))?;
    if rest.is_empty() || rest.starts_with('/') || u.chars().any(char::is_whitespace) {
        return Err(Error::bad_input(format!(
            "{what}: {u:?} is not an http(s) URL with a host"
        )));
    }
    Ok(())
}

fn parse_host_entry(s: &str) -> Result<(String, Vec<String>)> {
    let bad = || {
        Error::bad_input(format!(
            "--extra-host-entry: {s:?} is not IP=alias[,alias...]"
        ))
    };
    let (ip, aliases) = s.split_once('=').ok_or_else(bad)?;
    if ip.parse::<std::net::IpAddr>().is_err() {
        return Err(Error::bad_input(format!(
            "--extra-host-entry: {ip:?} is not an IP address"
        )));
    }
    let aliases: Vec<String> = aliases
        .split(',')
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    if aliases.is_empty() {
        return Err(bad());
    }
    Ok((ip.to_string(), aliases))
}

/// talosctl's default installer repository up to Talos 1.13
/// (`images.DefaultInstallerImageRepository`, `talosctl gen config
/// --install-image` at v1.13.9).
pub const TALOSCTL_INSTALLER: &str = "ghcr.io/siderolabs/installer";
/// talosctl's default installer repository from Talos 1.14
/// (`images.InstallerImageRepository("metal")` at v1.14.0-rc.1: the factory's
/// metal installer of the vanilla schematic).
pub const TALOSCTL_INSTALLER_1_14: &str = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
/// talosctl's `--install-disk` default.
pub const TALOSCTL_INSTALL_DISK: &str = "/dev/sda";

/// `v` + the version as typed (without its own `v`): the form image tags use.
fn tag_text(text: &str) -> String {
    format!("v{}", text.trim().trim_start_matches('v'))
}

/// An installer repository as `talos.installerRepository` holds it:
/// `host[:port]/path` (no tag, no trailing slash), e.g. `factory.talos.dev/installer`.
fn check_repository(r: &str, what: &str) -> Result<()> {
    use crate::oci_ref::{MAX_REPO_LEN, RefError, is_registry_host, is_repository};
    let bad = |why: &dyn std::fmt::Display| {
        Error::bad_input(format!(
            "{what}: {r:?} is not an image repository ({why}; e.g. factory.talos.dev/installer)"
        ))
    };
    let r = r.strip_suffix('/').unwrap_or(r);
    let (host, path) = r
        .split_once('/')
        .ok_or_else(|| bad(&"expected host/path"))?;
    if !is_registry_host(host) {
        return Err(bad(&RefError::Host));
    }
    if r.len() > MAX_REPO_LEN || !is_repository(path) {
        return Err(bad(&RefError::Repository));
    }
    Ok(())
}

/// A whole image reference, `[host/]repo:tag` or `...@sha256:<hex>`.
fn check_image(image: &str, what: &str) -> Result<()> {
    crate::oci_ref::ImageRef::parse(image)
        .map(drop)
        .map_err(|why| {
            Error::bad_input(format!(
                "{what}: {image:?} is not an image reference ({why})"
            ))
        })
}

fn check_schematic(id: &str, what: &str) -> Result<()> {
    if crate::schematic::is_valid_id(id) {
        Ok(())
    } else {
        let shown: String = id.chars().take(80).collect();
        Err(Error::bad_input(format!(
            "{what}: {shown:?} is not a schematic ID (64 lowercase hex digits, as `talos-gen schematic id` prints)"
        )))
    }
}

/// `--cpu` and `--memory` size a node together (as `resources.cpu` and
/// `resources.memory` do in the chart, and as `kubelet-reservations`
/// requires): one without the other is bad input naming both.
fn check_sizing(cpu: (Option<&str>, &str), memory: (Option<&str>, &str)) -> Result<()> {
    match (cpu.0, memory.0) {
        (Some(c), None) => Err(Error::bad_input(format!(
            "{} {c} without {}: give both, or neither (an instance type sizes the node then)",
            cpu.1, memory.1
        ))),
        (None, Some(m)) => Err(Error::bad_input(format!(
            "{} {m} without {}: give both, or neither (an instance type sizes the node then)",
            memory.1, cpu.1
        ))),
        _ => Ok(()),
    }
}

/// Generate the worker config for a request.
pub fn generate(req: &Request) -> Result<Output> {
    generate_with(req, crate::matrix::Matrix::embedded())
}

pub use assemble::generate_with;

/// The registry host of an image reference (`docker.io` without one).
fn registry_host(reference: &str) -> &str {
    match reference.split_once('/') {
        Some((h, _)) if h.contains('.') || h.contains(':') || h == "localhost" => h,
        _ => "docker.io",
    }
}

/// `--air-gap-mirror` and `--image-verification-key`: the worker's pull
/// list (the install image and kubelet the config writes, the release's
/// pause image) pointed at one mirror, and verified with one key.
fn air_gap(
    req: &Request,
    matrix: &crate::matrix::Matrix,
    talos: &Version,
    inp: &mut generate::Input,
) -> Result<()> {
    let mirror = nonempty(&req.air_gap_mirror);
    let key = nonempty(&req.image_verification_key);
    if mirror.is_none() && key.is_none() {
        return Ok(());
    }
    if key.is_some() && !inp.contract.has(contract::Gate::ImageVerification) {
        return Err(Error::bad_input(format!(
            "--image-verification-key: the ImageVerificationConfig document needs Talos v1.13 or later; the config is for {talos}"
        )));
    }
    let pause = support::pause_image(matrix, talos).map_err(|e| match e {
        Error::Refused(m) => Error::refused(format!(
            "{}: {m}",
            if mirror.is_some() {
                "--air-gap-mirror"
            } else {
                "--image-verification-key"
            }
        )),
        e => e,
    })?;
    let mut pulls: Vec<String> = Vec::new();
    if !inp.install_image.is_empty() {
        pulls.push(inp.install_image.clone());
    }
    pulls.push(inp.kubelet_image());
    pulls.push(pause);
    if let Some(url) = mirror {
        check_url(url, "--air-gap-mirror")?;
        let mut hosts: Vec<&str> = pulls.iter().map(|p| registry_host(p)).collect();
        hosts.sort();
        hosts.dedup();
        for h in hosts {
            // An explicit --registry-mirror or talos.registryMirrors entry wins.
            if !inp.mirrors.iter().any(|m| m.host == h) {
                inp.mirrors.push(generate::Mirror {
                    host: h.to_string(),
                    endpoints: vec![url.trim_end_matches('/').to_string()],
                    override_path: None,
                    skip_fallback: Some(true),
                });
            }
        }
    }
    if let Some(text) = key {
        let k = crate::cosign::PublicKey::from_pem(text, "--image-verification-key")?;
        let mut patterns: Vec<String> = Vec::new();
        for p in &pulls {
            let r = crate::oci_ref::repository_of(p).to_string();
            if !patterns.contains(&r) {
                patterns.push(r);
            }
        }
        inp.image_verification = Some((patterns, k.pem().to_string()));
    }
    Ok(())
}

/// `--mirror-ca`: the CA for every https endpoint of every mirror the
/// config writes (`--registry-mirror`, `talos.registryMirrors`,
/// `--air-gap-mirror`), named by the endpoint's `host[:port]` as Talos
/// matches it.
fn mirror_ca(req: &Request, inp: &mut generate::Input) -> Result<()> {
    let Some(text) = nonempty(&req.mirror_ca) else {
        return Ok(());
    };
    let blocks = pem::parse_many(text)
        .map_err(|e| Error::bad_input(format!("--mirror-ca: not PEM: {e}")))?;
    if blocks.is_empty() {
        return Err(Error::bad_input(
            "--mirror-ca: no CERTIFICATE block in it (expected a PEM CA certificate, e.g. ca.crt of `talos-gen mirror cert`)",
        ));
    }
    for b in &blocks {
        if b.tag() != "CERTIFICATE" {
            return Err(Error::bad_input(format!(
                "--mirror-ca: a {} block; expected CERTIFICATE blocks only",
                b.tag()
            )));
        }
        x509_parser::parse_x509_certificate(b.contents()).map_err(|e| {
            Error::bad_input(format!(
                "--mirror-ca: a CERTIFICATE that does not parse: {e}"
            ))
        })?;
    }
    // Talos writes the PEM as given; one trailing newline, as ca.crt has.
    let ca = format!("{}\n", text.trim());
    let mut hosts: Vec<String> = Vec::new();
    for m in &inp.mirrors {
        for e in &m.endpoints {
            if let Some(rest) = e.strip_prefix("https://") {
                let host = rest.split('/').next().unwrap_or(rest).to_string();
                if !host.is_empty() && !hosts.contains(&host) {
                    hosts.push(host);
                }
            }
        }
    }
    if hosts.is_empty() {
        return Err(Error::bad_input(
            "--mirror-ca: the config writes no https:// mirror endpoint to trust it for (give --air-gap-mirror https://... or --registry-mirror host=https://...)",
        ));
    }
    hosts.sort();
    inp.registry_cas = hosts.into_iter().map(|h| (h, ca.clone())).collect();
    Ok(())
}

impl Output {
    /// The secrets bundle in talosctl's format (`--output-secrets`).
    pub fn secrets_yaml(&self) -> String {
        self.bundle.to_yaml()
    }
}

/// The flags/fields of `kubelet-reservations`.
pub type ReservationsRequest = Sizing;

/// `talos-gen kubelet-reservations`.
pub fn kubelet_reservations(req: &ReservationsRequest) -> Result<Reservations> {
    check_sizing(
        (nonempty(&req.cpu), "--cpu"),
        (nonempty(&req.memory), "--memory"),
    )?;
    if nonempty(&req.instance_type).is_none() && nonempty(&req.memory).is_none() {
        return Err(Error::bad_input(
            "kubelet-reservations: give --instance-type, or both --memory and --cpu",
        ));
    }
    let input = reservations::Input {
        given: req.clone(),
        names: reservations::Names::flags(),
    };
    reservations::compute(&input, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_with_an_unknown_field_is_refused_by_name() {
        let req: Request = serde_json::from_str(
            r#"{"talosVersion":"v1.13.9","cpu":"2","memory":"4Gi","registryMirrors":["a=http://b"]}"#,
        )
        .unwrap();
        assert_eq!(req.sizing.cpu.as_deref(), Some("2"));
        assert_eq!(req.sizing.memory.as_deref(), Some("4Gi"));
        assert_eq!(req.registry_mirror, ["a=http://b"]);
        for body in [r#"{"cpu":"2","cpus":"3"}"#, r#"{"cpus":"3"}"#] {
            let err = serde_json::from_str::<Request>(body)
                .unwrap_err()
                .to_string();
            assert!(err.contains("unknown field `cpus`"), "{body}: {err}");
        }
        let err = serde_json::from_str::<ReservationsRequest>(r#"{"cpus":"3"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `cpus`"), "{err}");
    }

    /// A body may give sizes as numbers (`cpu: 2`), in YAML and in JSON,
    /// whether the sizing is flattened (`machineconfig`) or the whole body
    /// (`kubelet-reservations`); anything else names the key.
    #[test]
    fn sizing_fields_take_numbers_and_name_the_key_at_fault() {
        let yaml = "clusterName: x\nendpoint: https://e:6443\ncpu: 2\nmemory: 4Gi\nsystemReservedCpu: 0.5\nkubeReservedMemory: ~\n";
        let req: Request = crate::yaml::from_str(yaml, "body").unwrap();
        assert_eq!(req.cluster_name.as_deref(), Some("x"));
        assert_eq!(req.sizing.cpu.as_deref(), Some("2"));
        assert_eq!(req.sizing.memory.as_deref(), Some("4Gi"));
        assert_eq!(req.sizing.system_reserved_cpu.as_deref(), Some("0.5"));
        assert_eq!(req.sizing.kube_reserved_memory, None);
        let r: ReservationsRequest =
            crate::yaml::from_str("cpu: 2\nmemory: 1Gi\n", "body").unwrap();
        assert_eq!(r.cpu.as_deref(), Some("2"));
        let r: ReservationsRequest = serde_json::from_str(r#"{"cpu":1.5,"memory":"1Gi"}"#).unwrap();
        assert_eq!(r.cpu.as_deref(), Some("1.5"));
        for body in ["cpu: [1]\n", "clusterName: x\ncpu: {a: 1}\n"] {
            for err in [
                crate::yaml::from_str::<Request>(body, "body")
                    .unwrap_err()
                    .to_string(),
                crate::yaml::from_str::<ReservationsRequest>(
                    body.trim_start_matches("clusterName: x\n"),
                    "body",
                )
                .unwrap_err()
                .to_string(),
            ] {
                assert!(
                    err.contains("cpu: expected a quantity (text or a number), got a"),
                    "{body:?}: {err}"
                );
            }
        }
        let err = crate::yaml::from_str::<ReservationsRequest>("cpu: 1\ncpus: 2\n", "body")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown field `cpus`, expected one of `instanceType`"),
            "{err}"
        );
        let err = serde_json::from_str::<Request>(r#"{"cpu":"1","cpu":"2"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate field `cpu`"), "{err}");
    }
}
