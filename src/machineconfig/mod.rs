//! Worker machine configs: typed documents, contract gates, the Cozystack
//! profile, kubelet reservations, patches and secrets. Never touches the
//! network, the store or files: the CLI and HTTP edges read inputs and
//! hand them over as a [`Request`].

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::version::Version;
use crate::yaml::Value;

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

pub use reservations::Reservations;

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
    pub instance_type: Option<String>,
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub system_reserved_memory: Option<String>,
    pub kube_reserved_memory: Option<String>,
    pub system_reserved_cpu: Option<String>,
    pub kube_reserved_cpu: Option<String>,
    pub eviction_hard_memory: Option<String>,
    pub eviction_soft_memory: Option<String>,
    /// `--air-gap-mirror URL`: a mirror with `skipFallback` for every
    /// registry host of the worker's pull list.
    pub air_gap_mirror: Option<String>,
    /// `--image-verification-key`: the PEM public key text.
    pub image_verification_key: Option<String>,
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

/// Generate the worker config for a request.
pub fn generate(req: &Request) -> Result<Output> {
    generate_with(req, crate::matrix::Matrix::embedded())
}

/// [`generate`] against a given support matrix (`--matrix FILE`, or the
/// service's).
pub fn generate_with(req: &Request, matrix: &crate::matrix::Matrix) -> Result<Output> {
    let mut warnings = Vec::new();
    let cozy = match nonempty(&req.profile) {
        None => None,
        Some("cozystack") => {
            let values = match &req.values {
                Some(v) => cozystack::Values::from_value(as_tree(v, "--values")?, "--values")?,
                None => cozystack::Values::defaults(),
            };
            Some(values)
        }
        Some(other) => {
            return Err(Error::bad_input(format!(
                "--profile: unknown profile {other:?} (known: cozystack)"
            )));
        }
    };
    if cozy.is_none() && req.values.is_some() {
        return Err(Error::bad_input(
            "--values: only used with --profile cozystack",
        ));
    }

    // Versions.
    let talos_text = nonempty(&req.talos_version)
        .map(str::to_string)
        .or_else(|| cozy.as_ref().map(|c| c.talos_version.clone()))
        .unwrap_or_else(|| cozystack::DEFAULT_TALOS_VERSION.to_string());
    let talos = Version::parse_named(&talos_text, "--talos-version")?;
    let contract = contract::Contract::from_version(&talos)?;

    let k8s_text: String = match (nonempty(&req.kubernetes_version), &cozy) {
        (Some(k), Some(_))
            if Version::parse_named(k, "--kubernetes-version")?
                .patch
                .is_none() =>
        {
            let v = Version::parse_named(k, "--kubernetes-version")?;
            support::kubelet_patch(matrix, &v).map_err(Error::refused)?
        }
        (Some(k), _) => k.to_string(),
        (None, Some(c)) => {
            let v = Version::parse_named(&c.version, "--values: version")?;
            support::kubelet_patch(matrix, &v).map_err(Error::refused)?
        }
        (None, None) => support::default_kubernetes(matrix, &talos).ok_or_else(|| {
            Error::bad_input("--kubernetes-version: no default for this Talos version")
        })?,
    };
    let k8s = Version::parse_named(&k8s_text, "--kubernetes-version")?;
    let k8s_plain = k8s_text.trim().trim_start_matches('v').to_string();

    // The support matrix (and the chart's own guard for the profile).
    let mut refusal = support::check_pair(matrix, &talos, &k8s).err();
    if let Some(c) = &cozy {
        let talos_minor = talos.minor_string();
        if let Some((_, allowed)) = support::CHART_TALOS_GUARD
            .iter()
            .find(|(m, _)| *m == talos_minor)
        {
            let k_minor = k8s.minor_string();
            if !allowed.contains(&k_minor.as_str()) {
                refusal = Some(format!(
                    "Kubernetes {} is not supported by Talos {}. Supported versions: [{}]. Bump 'version' or set talos.version explicitly.",
                    if nonempty(&req.kubernetes_version).is_some() {
                        k_minor.clone()
                    } else {
                        c.version.clone()
                    },
                    talos_text,
                    allowed.join(" ")
                ));
            }
        }
    }
    if let Some(msg) = refusal {
        if req.force {
            warnings.push(format!("warning: {msg} (written anyway: --force)"));
        } else {
            return Err(Error::refused(format!(
                "{msg} (use --force to write it anyway)"
            )));
        }
    }

    // Secrets.
    let bundle = match &req.secrets {
        Some(Value::String(text)) => secrets::Bundle::parse_cached(text, "--with-secrets")?
            .as_ref()
            .clone(),
        Some(tree) => secrets::Bundle::from_value(tree.clone(), "secrets")?,
        None => secrets::Bundle::generate()?,
    };

    let cluster_name =
        nonempty(&req.cluster_name).ok_or_else(|| Error::bad_input("--cluster-name: required"))?;
    let endpoint =
        nonempty(&req.endpoint).ok_or_else(|| Error::bad_input("--endpoint: required"))?;
    check_url(endpoint, "--endpoint")?;

    let mut inp = generate::Input::new(contract, bundle);
    inp.cluster_name = cluster_name.to_string();
    inp.endpoint = endpoint.to_string();
    inp.kubernetes_version = k8s_plain.clone();
    inp.additional_sans = req.additional_sans.clone();

    if let Some(c) = &cozy {
        inp.install_disk = cozystack::INSTALL_DISK.to_string();
        let mut values = c.clone();
        values.talos_version = talos_text.clone();
        if let Some(s) = nonempty(&req.schematic) {
            values.schematic_id = s.to_string();
        }
        if let Some(r) = nonempty(&req.installer_repository) {
            values.installer_repository = r.to_string();
        }
        inp.install_image = values.install_image();
        inp.kubelet_image = Some(format!("ghcr.io/siderolabs/kubelet:v{k8s_plain}"));
        inp.kube_prism = false;
        inp.discovery_service = false;
        inp.pod_subnets = vec![cozystack::POD_SUBNET.to_string()];
        inp.service_subnets = vec![cozystack::SERVICE_SUBNET.to_string()];
        inp.mirrors = c.registry_mirrors.clone();
        if c.gpu {
            inp.node_labels.push(("gpu".into(), "on".into()));
        }
        let pick = |flag: &Option<String>, value: &Option<String>| {
            nonempty(flag).map(str::to_string).or_else(|| value.clone())
        };
        let sized_by_flags = nonempty(&req.cpu).is_some() || nonempty(&req.memory).is_some();
        let r = reservations::compute(
            &reservations::Input {
                instance_type: nonempty(&req.instance_type)
                    .map(str::to_string)
                    .or_else(|| {
                        if sized_by_flags {
                            None
                        } else {
                            c.instance_type.clone()
                        }
                    }),
                cpu: pick(&req.cpu, &c.cpu),
                memory: pick(&req.memory, &c.memory),
                system_reserved_memory: pick(
                    &req.system_reserved_memory,
                    &c.system_reserved_memory,
                ),
                kube_reserved_memory: pick(&req.kube_reserved_memory, &c.kube_reserved_memory),
                system_reserved_cpu: pick(&req.system_reserved_cpu, &c.system_reserved_cpu),
                kube_reserved_cpu: pick(&req.kube_reserved_cpu, &c.kube_reserved_cpu),
                eviction_hard_memory: pick(&req.eviction_hard_memory, &c.eviction_hard_memory),
                eviction_soft_memory: pick(&req.eviction_soft_memory, &c.eviction_soft_memory),
            },
            "kubelet: ",
        )?;
        inp.kubelet_extra_config = Some(r.kubelet_extra_config());
    } else {
        let any_reservation = [
            &req.instance_type,
            &req.cpu,
            &req.memory,
            &req.system_reserved_memory,
            &req.kube_reserved_memory,
            &req.system_reserved_cpu,
            &req.kube_reserved_cpu,
            &req.eviction_hard_memory,
            &req.eviction_soft_memory,
        ]
        .iter()
        .any(|v| nonempty(v).is_some());
        if any_reservation {
            let r = reservations::compute(
                &reservations::Input {
                    instance_type: req.instance_type.clone(),
                    cpu: req.cpu.clone(),
                    memory: req.memory.clone(),
                    system_reserved_memory: req.system_reserved_memory.clone(),
                    kube_reserved_memory: req.kube_reserved_memory.clone(),
                    system_reserved_cpu: req.system_reserved_cpu.clone(),
                    kube_reserved_cpu: req.kube_reserved_cpu.clone(),
                    eviction_hard_memory: req.eviction_hard_memory.clone(),
                    eviction_soft_memory: req.eviction_soft_memory.clone(),
                },
                "kubelet: ",
            )?;
            inp.kubelet_extra_config = Some(r.kubelet_extra_config());
        }
        if let Some(s) = nonempty(&req.schematic) {
            let repo = nonempty(&req.installer_repository)
                .unwrap_or(cozystack::DEFAULT_INSTALLER_REPOSITORY);
            inp.install_image = format!("{}/{s}:{talos_text}", repo.trim_end_matches('/'));
        } else if nonempty(&req.installer_repository).is_some() {
            return Err(Error::bad_input(
                "--installer-repository: needs --schematic",
            ));
        }
    }

    if let Some(d) = &req.install_disk {
        inp.install_disk = d.clone();
    }
    if let Some(i) = &req.install_image {
        inp.install_image = i.clone();
    }
    if let Some(d) = nonempty(&req.dns_domain) {
        inp.dns_domain = d.to_string();
    }
    for m in &req.registry_mirror {
        let m = parse_mirror(m)?;
        inp.mirrors.retain(|x| x.host != m.host);
        inp.mirrors.push(m);
    }
    air_gap(req, matrix, &talos, &mut inp)?;
    for ns in &req.nameserver {
        if ns.parse::<std::net::IpAddr>().is_err() {
            return Err(Error::bad_input(format!(
                "--nameserver: {ns:?} is not an IP address"
            )));
        }
        inp.nameservers.push(ns.clone());
    }
    inp.search_domains = req.search_domain.clone();
    for e in &req.extra_host_entry {
        inp.extra_hosts.push(parse_host_entry(e)?);
    }

    let mut docs = generate::worker(&inp);
    for (i, p) in req.config_patch.iter().enumerate() {
        let what = format!("--config-patch #{}", i + 1);
        let patch_docs = match p {
            Value::String(text) => patch::parse(text, &what)?,
            tree => patch::parse_values(vec![tree.clone()], &what)?,
        };
        patch::apply(&mut docs, patch_docs, &what)?;
    }

    Ok(Output {
        config: model::render(&docs),
        bundle: inp.bundle,
        warnings,
    })
}

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
            let r = crate::images::repository_of(p).to_string();
            if !patterns.contains(&r) {
                patterns.push(r);
            }
        }
        inp.image_verification = Some((patterns, k.pem().to_string()));
    }
    Ok(())
}

impl Output {
    /// The secrets bundle in talosctl's format (`--output-secrets`).
    pub fn secrets_yaml(&self) -> String {
        self.bundle.to_yaml()
    }
}

/// The flags/fields of `kubelet-reservations`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ReservationsRequest {
    pub instance_type: Option<String>,
    pub memory: Option<String>,
    pub cpu: Option<String>,
    pub system_reserved_memory: Option<String>,
    pub kube_reserved_memory: Option<String>,
    pub system_reserved_cpu: Option<String>,
    pub kube_reserved_cpu: Option<String>,
    pub eviction_hard_memory: Option<String>,
    pub eviction_soft_memory: Option<String>,
}

/// `talos-gen kubelet-reservations`.
pub fn kubelet_reservations(req: &ReservationsRequest) -> Result<Reservations> {
    if nonempty(&req.instance_type).is_none()
        && (nonempty(&req.memory).is_none() || nonempty(&req.cpu).is_none())
    {
        return Err(Error::bad_input(
            "kubelet-reservations: give --instance-type, or both --memory and --cpu",
        ));
    }
    reservations::compute(
        &reservations::Input {
            instance_type: req.instance_type.clone(),
            cpu: req.cpu.clone(),
            memory: req.memory.clone(),
            system_reserved_memory: req.system_reserved_memory.clone(),
            kube_reserved_memory: req.kube_reserved_memory.clone(),
            system_reserved_cpu: req.system_reserved_cpu.clone(),
            kube_reserved_cpu: req.kube_reserved_cpu.clone(),
            eviction_hard_memory: req.eviction_hard_memory.clone(),
            eviction_soft_memory: req.eviction_soft_memory.clone(),
        },
        "",
    )
}
