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

/// One path component of an OCI repository: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn is_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
            return false;
        }
    }
    true
}

/// A registry host as image references carry it: `host[:port]`.
fn is_host(s: &str) -> bool {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (s, None),
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|c| c.is_ascii_digit()));
    port_ok
        && !host.is_empty()
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// An installer repository as `talos.installerRepository` holds it:
/// `host[:port]/path` (no tag, no trailing slash), e.g. `factory.talos.dev/installer`.
fn check_repository(r: &str, what: &str) -> Result<()> {
    let bad = |why: &str| {
        Error::bad_input(format!(
            "{what}: {r:?} is not an image repository ({why}; e.g. factory.talos.dev/installer)"
        ))
    };
    let r = r.strip_suffix('/').unwrap_or(r);
    let (host, path) = r.split_once('/').ok_or_else(|| bad("expected host/path"))?;
    if !is_host(host) {
        return Err(bad("the registry host is not host[:port]"));
    }
    if r.len() > 255 || !path.split('/').all(is_component) {
        return Err(bad("lowercase path components separated by single slashes"));
    }
    Ok(())
}

/// A whole image reference, `[host/]repo:tag` or `...@sha256:<hex>`.
fn check_image(image: &str, what: &str) -> Result<()> {
    let bad = |why: &str| {
        Error::bad_input(format!(
            "{what}: {image:?} is not an image reference ({why})"
        ))
    };
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    if let Some(d) = digest {
        let hex = d
            .strip_prefix("sha256:")
            .ok_or_else(|| bad("the digest is not sha256:<64 hex>"))?;
        if !crate::schematic::is_valid_id(hex) {
            return Err(bad("the digest is not sha256:<64 hex>"));
        }
    }
    let last = name.rsplit('/').next().unwrap_or("");
    let (repo, tag) = match last.rsplit_once(':') {
        Some((_, t)) => (&name[..name.len() - t.len() - 1], Some(t)),
        None => (name, None),
    };
    if let Some(t) = tag {
        let b = t.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 128
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if !ok {
            return Err(bad(&format!(
                "tag {t:?}: letters, digits, '_', '.', '-' only"
            )));
        }
    }
    let path = match repo.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            if !is_host(first) {
                return Err(bad("the registry host is not host[:port]"));
            }
            rest
        }
        _ => repo,
    };
    if !path.split('/').all(is_component) {
        return Err(bad("lowercase path components separated by single slashes"));
    }
    Ok(())
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

/// [`generate`] against a given support matrix (`--matrix FILE`, or the
/// service's).
pub fn generate_with(req: &Request, matrix: &crate::matrix::Matrix) -> Result<Output> {
    // An embedded schematic's name (`cozystack`) is taken for its ID.
    let named;
    let req = match req
        .schematic
        .as_deref()
        .and_then(crate::schematics::embedded_id)
    {
        Some(id) => {
            named = Request {
                schematic: Some(id.to_string()),
                ..req.clone()
            };
            &named
        }
        None => req,
    };
    let mut warnings = Vec::new();
    let cozy = match nonempty(&req.profile) {
        None => None,
        Some("cozystack") => {
            let values = match &req.values {
                Some(v) => cozystack::Values::from_value(as_tree(v, "--values")?, "--values")?,
                None => cozystack::Values::defaults(),
            };
            warnings.extend(values.warnings.iter().cloned());
            let mut values = values;
            if let Some(id) = crate::schematics::embedded_id(&values.schematic_id) {
                values.schematic_id = id.to_string();
            }
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
    let talos_flag = nonempty(&req.talos_version);
    let (talos_text, talos_what) = match (talos_flag, &cozy) {
        (Some(t), _) => (t.to_string(), "--talos-version"),
        (None, Some(c)) => (c.talos_version.clone(), "--values: talos.version"),
        (None, None) => (
            cozystack::DEFAULT_TALOS_VERSION.to_string(),
            "--talos-version",
        ),
    };
    let talos = Version::parse_named(&talos_text, talos_what)?;
    let contract = contract::Contract::from_version(&talos)?;
    // The Talos release image tags name: never a bare minor (the factory
    // publishes no `:v1.13`). The version itself when it has a patch, else
    // the values' release of that minor, else the matrix's newest (noted).
    let release = |notes: &mut Vec<String>| -> Result<String> {
        if talos.build {
            return Err(Error::bad_input(format!(
                "{talos_what}: {talos_text:?}: an image tag cannot carry build metadata (+...); give the release ({}) or --install-image",
                tag_text(talos_text.split('+').next().unwrap_or_default())
            )));
        }
        if talos.patch.is_some() {
            return Ok(tag_text(&talos_text));
        }
        if let Some(c) = &cozy
            && let Ok(v) = Version::parse(&c.talos_version)
            && v.patch.is_some()
            && v.minor_key() == talos.minor_key()
        {
            return Ok(tag_text(&c.talos_version));
        }
        match support::newest_release(matrix, &talos) {
            Some(v) => {
                notes.push(format!(
                    "note: {talos_what} {talos_text} has no patch; the install image uses {v}, the newest {} release the support matrix knows (give a full release to choose another)",
                    talos.minor_string()
                ));
                Ok(v)
            }
            None => Err(Error::bad_input(format!(
                "{talos_what}: {talos_text:?} has no patch and the support matrix knows no {} release: give the full release for the install image (e.g. {}.0)",
                talos.minor_string(),
                talos.minor_string()
            ))),
        }
    };

    let k8s_text: String = match (nonempty(&req.kubernetes_version), &cozy) {
        (Some(k), Some(_))
            if Version::parse_named(k, "--kubernetes-version")?
                .patch
                .is_none() =>
        {
            let v = Version::parse_named(k, "--kubernetes-version")?;
            support::kubelet_patch(matrix, &v).map_err(Error::refused)?
        }
        (Some(k), _) => {
            let v = Version::parse_named(k, "--kubernetes-version")?;
            if v.patch.is_some() {
                k.to_string()
            } else {
                // A bare minor is never written as a tag: the patch the
                // data knows (as `images` resolves it), else refused.
                let release_default = matrix
                    .images()
                    .lookup(&talos)
                    .ok()
                    .and_then(|l| l.release.kubernetes.clone());
                match matrix.kubernetes_patch(&v, release_default.as_ref()) {
                    Some((p, from)) => {
                        warnings.push(format!(
                            "note: --kubernetes-version {k} has no patch; using {p}, {from} (give a full version to choose another)"
                        ));
                        p.to_string()
                    }
                    None => {
                        return Err(Error::bad_input(format!(
                            "--kubernetes-version: {k:?} has no patch and the data knows no Kubernetes {} release: give a full version (e.g. {}.0)",
                            v.minor_string(),
                            v.minor_string()
                        )));
                    }
                }
            }
        }
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
    if cozy.is_some() {
        let talos_minor = talos.minor_string();
        if let Some((_, allowed)) = support::CHART_TALOS_GUARD
            .iter()
            .find(|(m, _)| *m == talos_minor)
        {
            let k_minor = k8s.minor_string();
            if !allowed.contains(&k_minor.as_str()) {
                refusal = Some(format!(
                    "Kubernetes {k8s} is not supported by Talos {talos} (the Cozystack chart's guard). Supported versions: {}. Bump 'version' or set talos.version explicitly.",
                    allowed.join(", ")
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

    // Image references, checked before anything is written.
    if let Some(s) = nonempty(&req.schematic) {
        check_schematic(s, "--schematic")?;
    }
    if let Some(r) = nonempty(&req.installer_repository) {
        check_repository(r, "--installer-repository")?;
    }
    if let Some(c) = &cozy {
        if nonempty(&req.schematic).is_none() {
            check_schematic(&c.schematic_id, "--values: talos.schematicID")?;
        }
        if nonempty(&req.installer_repository).is_none() {
            check_repository(
                &c.installer_repository,
                "--values: talos.installerRepository",
            )?;
        }
    }
    if let Some(i) = nonempty(&req.install_image) {
        check_image(i, "--install-image")?;
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
    // An explicit --install-image (even '') replaces any default image.
    let needs_image = req.install_image.is_none();

    let flag_names = reservations::Names::flags();
    if let Some(c) = &cozy {
        inp.install_disk = cozystack::INSTALL_DISK.to_string();
        let mut values = c.clone();
        values.talos_version = if needs_image {
            release(&mut warnings)?
        } else {
            talos_text.clone()
        };
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
        // A flag wins over the values, and is named as typed.
        let (flags, values) = (req.sizing.fields(), c.sizing.fields());
        let picked: [(Option<String>, String); 9] =
            std::array::from_fn(|i| match nonempty(flags[i]) {
                Some(f) => (Some(f.to_string()), flag_names.fields()[i].clone()),
                None => {
                    let key = reservations::KEYS[i];
                    let name = match key {
                        "instanceType" => key.to_string(),
                        "cpu" | "memory" => format!("resources.{key}"),
                        _ => format!("kubelet.{key}"),
                    };
                    (values[i].clone(), name)
                }
            });
        let sized_by_flags =
            nonempty(&req.sizing.cpu).is_some() || nonempty(&req.sizing.memory).is_some();
        let mut input = reservations::Input {
            given: Sizing::from_array(picked.clone().map(|p| p.0)),
            names: Sizing::from_array(picked.map(|p| p.1)),
        };
        if sized_by_flags {
            check_sizing(
                (nonempty(&input.given.cpu), "--cpu"),
                (nonempty(&input.given.memory), "--memory"),
            )?;
            // Resources from the flags size the node, not the values'
            // instance type.
            if nonempty(&req.sizing.instance_type).is_none() {
                input.given.instance_type = None;
            }
        }
        let r = reservations::compute(&input, "kubelet: ")?;
        inp.kubelet_extra_config = Some(r.kubelet_extra_config());
    } else {
        inp.install_disk = TALOSCTL_INSTALL_DISK.to_string();
        let any_reservation = req.sizing.fields().iter().any(|v| nonempty(v).is_some());
        if any_reservation {
            check_sizing(
                (nonempty(&req.sizing.cpu), "--cpu"),
                (nonempty(&req.sizing.memory), "--memory"),
            )?;
            let input = reservations::Input {
                given: req.sizing.clone(),
                names: flag_names,
            };
            let r = reservations::compute(&input, "kubelet: ")?;
            inp.kubelet_extra_config = Some(r.kubelet_extra_config());
        }
        if let Some(s) = nonempty(&req.schematic) {
            let repo = nonempty(&req.installer_repository)
                .unwrap_or(cozystack::DEFAULT_INSTALLER_REPOSITORY);
            if needs_image {
                inp.install_image = format!(
                    "{}/{s}:{}",
                    repo.trim_end_matches('/'),
                    release(&mut warnings)?
                );
            }
        } else if nonempty(&req.installer_repository).is_some() {
            return Err(Error::bad_input(
                "--installer-repository: needs --schematic",
            ));
        } else if needs_image {
            // talosctl gen config's default installer for this release.
            let repo = if contract.has(contract::Gate::FactoryInstaller) {
                TALOSCTL_INSTALLER_1_14
            } else {
                TALOSCTL_INSTALLER
            };
            inp.install_image = format!("{repo}:{}", release(&mut warnings)?);
        }
    }
    if needs_image {
        check_image(&inp.install_image, talos_what)?;
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
    mirror_ca(req, &mut inp)?;
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
