//! A request to a worker config, in the stages talos-gen runs them: the
//! profile and its values, the versions (a bare minor resolved, never written
//! as a tag), the support matrix, the image references (checked before
//! anything is written), the secrets, the generator's input (the profile's
//! or talosctl's defaults, then the flags over them), the documents and the
//! patches.

use crate::error::{Error, Result};
use crate::version::Version;
use crate::yaml::Value;

use super::reservations::{self, Sizing};
use super::{
    Output, Request, TALOSCTL_INSTALL_DISK, TALOSCTL_INSTALLER, TALOSCTL_INSTALLER_1_14, air_gap,
    as_tree, check_image, check_repository, check_schematic, check_sizing, check_url, contract,
    cozystack, generate, mirror_ca, model, nonempty, parse_host_entry, parse_mirror, patch,
    secrets, support, tag_text,
};

/// [`super::generate`] against a given support matrix (`--matrix FILE`, or
/// the service's).
pub fn generate_with(req: &Request, matrix: &crate::matrix::Matrix) -> Result<Output> {
    let named;
    let req = match named_schematic(req) {
        Some(r) => {
            named = r;
            &named
        }
        None => req,
    };
    let mut warnings = Vec::new();
    let cozy = profile(req)?;
    let inputs = Inputs {
        req,
        cozy: cozy.as_ref(),
        matrix,
    };
    let v = Versions::resolve(inputs, &mut warnings)?;
    check_support(inputs, &v, &mut warnings)?;
    check_references(req, cozy.as_ref())?;
    let bundle = secrets_bundle(req)?;

    let cluster_name =
        nonempty(&req.cluster_name).ok_or_else(|| Error::bad_input("--cluster-name: required"))?;
    let endpoint =
        nonempty(&req.endpoint).ok_or_else(|| Error::bad_input("--endpoint: required"))?;
    check_url(endpoint, "--endpoint")?;
    let mut inp = generate::Input::new(v.contract, bundle);
    inp.cluster_name = cluster_name.to_string();
    inp.endpoint = endpoint.to_string();
    inp.kubernetes_version = v.k8s_plain.clone();
    inp.additional_sans = req.additional_sans.clone();
    let w = Worker {
        inputs,
        v: &v,
        inp: &mut inp,
        warnings: &mut warnings,
    };
    match &cozy {
        Some(c) => profile_input(w, c)?,
        None => plain_input(w)?,
    }
    // An explicit --install-image (even '') replaces any default image.
    if req.install_image.is_none() {
        check_image(&inp.install_image, v.talos_what)?;
    }
    flags_over_defaults(req, matrix, &v, &mut inp)?;

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

/// An embedded schematic's name (`cozystack`) taken for its ID: the
/// request with the ID, when the name was given.
fn named_schematic(req: &Request) -> Option<Request> {
    let id = req
        .schematic
        .as_deref()
        .and_then(crate::schematic::embedded_id)?;
    Some(Request {
        schematic: Some(id.to_string()),
        ..req.clone()
    })
}

/// A values file that holds nothing (empty, only comments, a pipe that
/// brought nothing) is never a config: bad input, not the chart's defaults.
fn non_empty(tree: Value) -> Result<Value> {
    match tree {
        Value::Null => Err(Error::bad_input(
            "--values: the file holds no values (empty, or only comments); give the pool's values, or leave --values out for the chart's defaults",
        )),
        t => Ok(t),
    }
}

/// The profile's values (`--profile cozystack`, `--values`); none without
/// the profile.
fn profile(req: &Request) -> Result<Option<cozystack::Values>> {
    let cozy = match nonempty(&req.profile) {
        None => None,
        Some("cozystack") => {
            let mut values = match &req.values {
                Some(v) => cozystack::Values::from_value_in(
                    non_empty(as_tree(v, "--values")?)?,
                    "--values",
                    v.as_str(),
                )?,
                None => cozystack::Values::defaults(),
            };
            if let Some(id) = crate::schematic::embedded_id(&values.schematic_id) {
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
    Ok(cozy)
}

/// The Talos and Kubernetes versions a request means, each named by where
/// it came from.
struct Versions {
    talos: Version,
    talos_text: String,
    talos_what: &'static str,
    contract: contract::Contract,
    k8s: Version,
    /// Without the leading `v`.
    k8s_plain: String,
    /// The values' Talos release (for a bare `--talos-version` minor).
    values_release: Option<String>,
}

/// The worker being written: from its inputs and versions, into `inp`,
/// with the warnings said so far.
struct Worker<'a> {
    inputs: Inputs<'a>,
    v: &'a Versions,
    inp: &'a mut generate::Input,
    warnings: &'a mut Vec<String>,
}

type Parts<'a> = (
    &'a Request,
    &'a crate::matrix::Matrix,
    &'a Versions,
    &'a mut generate::Input,
    &'a mut Vec<String>,
);

impl<'a> Worker<'a> {
    /// The request, the matrix, the versions, the input, the warnings.
    fn parts(self) -> Parts<'a> {
        let Inputs { req, matrix, .. } = self.inputs;
        (req, matrix, self.v, self.inp, self.warnings)
    }
}

/// What a config's versions are decided from: the request, the chart's
/// profile (with `--values`), the matrix.
#[derive(Clone, Copy)]
struct Inputs<'a> {
    req: &'a Request,
    cozy: Option<&'a cozystack::Values>,
    matrix: &'a crate::matrix::Matrix,
}

impl Versions {
    fn resolve(inputs: Inputs<'_>, warnings: &mut Vec<String>) -> Result<Versions> {
        let Inputs { req, cozy, .. } = inputs;
        let (talos_text, talos_what) = match (nonempty(&req.talos_version), cozy) {
            (Some(t), _) => (t.to_string(), "--talos-version"),
            (None, Some(c)) => (c.talos_version.clone(), "--values: talos.version"),
            (None, None) => (
                cozystack::DEFAULT_TALOS_VERSION.to_string(),
                "--talos-version",
            ),
        };
        let talos = Version::parse_named(&talos_text, talos_what)?;
        let contract = contract::Contract::from_version(&talos)?;
        let k8s_text = kubernetes_version(inputs, &talos, warnings)?;
        let k8s = Version::parse_named(&k8s_text, "--kubernetes-version")?;
        let k8s_plain = k8s_text.trim().trim_start_matches('v').to_string();
        Ok(Versions {
            talos,
            talos_text,
            talos_what,
            contract,
            k8s,
            k8s_plain,
            values_release: cozy.map(|c| c.talos_version.clone()),
        })
    }

    /// The Talos release image tags name: never a bare minor (the factory
    /// publishes no `:v1.13`). The version itself when it has a patch, else
    /// the values' release of that minor, else the matrix's newest (noted).
    fn release_tag(
        &self,
        matrix: &crate::matrix::Matrix,
        notes: &mut Vec<String>,
    ) -> Result<String> {
        let (talos, talos_text, talos_what) = (&self.talos, &self.talos_text, self.talos_what);
        if talos.patch.is_some() {
            return Ok(tag_text(talos_text));
        }
        if let Some(r) = &self.values_release
            && let Ok(v) = Version::parse(r)
            && v.patch.is_some()
            && v.minor_key() == talos.minor_key()
        {
            return Ok(tag_text(r));
        }
        match support::newest_release(matrix, talos) {
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
    }
}

/// The Kubernetes version written: the flag (a bare minor resolved to a
/// patch the data knows, never written as a tag), else the values' (the
/// Cozystack kubelet table's patch), else the release's default.
fn kubernetes_version(
    inputs: Inputs<'_>,
    talos: &Version,
    warnings: &mut Vec<String>,
) -> Result<String> {
    let Inputs { req, cozy, matrix } = inputs;
    Ok(match (nonempty(&req.kubernetes_version), cozy) {
        (Some(k), Some(_))
            if Version::parse_named(k, "--kubernetes-version")?
                .patch
                .is_none() =>
        {
            let v = Version::parse_named(k, "--kubernetes-version")?;
            support::kubelet_patch(matrix, &v)?
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
                    .lookup(talos)
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
            support::kubelet_patch(matrix, &v)?
        }
        (None, None) => support::default_kubernetes(matrix, talos).ok_or_else(|| {
            Error::bad_input("--kubernetes-version: no default for this Talos version")
        })?,
    })
}

/// The support matrix (and the chart's own guard for the profile): a pair
/// it refuses is refused, or written with a warning under `--force`.
fn check_support(inputs: Inputs<'_>, v: &Versions, warnings: &mut Vec<String>) -> Result<()> {
    let Inputs { req, cozy, matrix } = inputs;
    let (talos, k8s) = (&v.talos, &v.k8s);
    warnings.extend(matrix.pending_note(talos));
    let mut refusal = support::check_pair(matrix, talos, k8s)
        .err()
        .map(|e| e.to_string());
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
    match refusal {
        Some(msg) if req.force => {
            warnings.push(format!("warning: {msg} (written anyway: --force)"));
            Ok(())
        }
        Some(msg) => Err(Error::refused(format!(
            "{msg} (use --force to write it anyway)"
        ))),
        None => Ok(()),
    }
}

/// Image references, checked before anything is written.
fn check_references(req: &Request, cozy: Option<&cozystack::Values>) -> Result<()> {
    if let Some(s) = nonempty(&req.schematic) {
        check_schematic(s, "--schematic")?;
    }
    if let Some(r) = nonempty(&req.installer_repository) {
        check_repository(r, "--installer-repository")?;
    }
    if let Some(c) = cozy {
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
    Ok(())
}

/// The secrets bundle: given (text or tree), else a fresh one.
fn secrets_bundle(req: &Request) -> Result<secrets::Bundle> {
    Ok(match &req.secrets {
        Some(Value::String(text)) => secrets::Bundle::parse_cached(text, "--with-secrets")?
            .as_ref()
            .clone(),
        Some(tree) => secrets::Bundle::from_value(tree.clone(), "secrets")?,
        None => secrets::Bundle::generate()?,
    })
}

/// The profile's worker: the chart's disk, installer, kubelet, networks,
/// mirrors and labels, and its kubelet reservations (a flag wins over the
/// values, and is named as typed).
fn profile_input(w: Worker<'_>, c: &cozystack::Values) -> Result<()> {
    let (req, matrix, v, inp, warnings) = w.parts();
    let needs_image = req.install_image.is_none();
    inp.install_disk = cozystack::INSTALL_DISK.to_string();
    let mut values = c.clone();
    values.talos_version = if needs_image {
        v.release_tag(matrix, warnings)?
    } else {
        v.talos_text.clone()
    };
    if let Some(s) = nonempty(&req.schematic) {
        values.schematic_id = s.to_string();
    }
    if let Some(r) = nonempty(&req.installer_repository) {
        values.installer_repository = r.to_string();
    }
    inp.install_image = values.install_image();
    inp.kubelet_image = Some(format!("ghcr.io/siderolabs/kubelet:v{}", v.k8s_plain));
    inp.kube_prism = false;
    inp.discovery_service = false;
    inp.pod_subnets = vec![cozystack::POD_SUBNET.to_string()];
    inp.service_subnets = vec![cozystack::SERVICE_SUBNET.to_string()];
    inp.mirrors = c.registry_mirrors.clone();
    if c.gpu {
        inp.node_labels.push(("gpu".into(), "on".into()));
    }
    let flag_names = reservations::Names::flags();
    let (flags, values) = (req.sizing.fields(), c.sizing.fields());
    let picked: [(Option<String>, String); 9] = std::array::from_fn(|i| match nonempty(flags[i]) {
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
    Ok(())
}

/// A plain worker, as `talosctl gen config` writes it: `/dev/sda`, the
/// release's default installer (or `<repository>/<schematic>:<release>`),
/// kubelet reservations only when a sizing flag is given.
fn plain_input(w: Worker<'_>) -> Result<()> {
    let (req, matrix, v, inp, warnings) = w.parts();
    let needs_image = req.install_image.is_none();
    inp.install_disk = TALOSCTL_INSTALL_DISK.to_string();
    let any_reservation = req.sizing.fields().iter().any(|v| nonempty(v).is_some());
    if any_reservation {
        check_sizing(
            (nonempty(&req.sizing.cpu), "--cpu"),
            (nonempty(&req.sizing.memory), "--memory"),
        )?;
        let input = reservations::Input {
            given: req.sizing.clone(),
            names: reservations::Names::flags(),
        };
        let r = reservations::compute(&input, "kubelet: ")?;
        inp.kubelet_extra_config = Some(r.kubelet_extra_config());
    }
    if let Some(s) = nonempty(&req.schematic) {
        let repo =
            nonempty(&req.installer_repository).unwrap_or(cozystack::DEFAULT_INSTALLER_REPOSITORY);
        if needs_image {
            inp.install_image = format!(
                "{}/{s}:{}",
                repo.trim_end_matches('/'),
                v.release_tag(matrix, warnings)?
            );
        }
    } else if nonempty(&req.installer_repository).is_some() {
        return Err(Error::bad_input(
            "--installer-repository: needs --schematic",
        ));
    } else if needs_image {
        // talosctl gen config's default installer for this release.
        let repo = if v.contract.has(contract::Gate::FactoryInstaller) {
            TALOSCTL_INSTALLER_1_14
        } else {
            TALOSCTL_INSTALLER
        };
        inp.install_image = format!("{repo}:{}", v.release_tag(matrix, warnings)?);
    }
    Ok(())
}

/// The flags over the defaults: disk, image, DNS domain, mirrors, the air
/// gap and its CA, resolvers and static hosts.
fn flags_over_defaults(
    req: &Request,
    matrix: &crate::matrix::Matrix,
    v: &Versions,
    inp: &mut generate::Input,
) -> Result<()> {
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
    air_gap(req, matrix, &v.talos, inp)?;
    mirror_ca(req, inp)?;
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
    Ok(())
}
