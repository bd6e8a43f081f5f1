//! The KubeVirt CDI `DataVolume` (`cdi.kubevirt.io/v1beta1`) that imports
//! one worker pool's disk image from this service: `spec.source.http.url`
//! on `/image/<schematic>/<version>/<platform>-<arch>.raw.xz`, `checksum:
//! sha256:<hex>` (CDI 1.65 and later check it against the bytes they
//! download; written only for such a CDI, [`cdi`]) from that artifact's
//! `.sha256`, an optional `certConfigMap` (the CA of an HTTPS mirror), and
//! a `storage` request (left out: the raw disk's size plus headroom,
//! [`size`], read from the image's xz index, [`xz_index`]).
//!
//! The shape follows CDI's v1beta1 types (`DataVolumeSourceHTTP`: `url`,
//! `certConfigMap`, `checksum`; `StorageSpec`: `resources.requests.storage`,
//! `storageClassName`). Pure: the caller reads the checksum and the raw
//! size (the CLI over HTTP, the service from its own store) and hands them
//! in; written with the one YAML emitter.
//!
//! The golden layout (Cozystack's shared worker image: one import per
//! schematic and release into a shared namespace, every worker disk a
//! clone of it): with `golden`, the import lands in `namespace` and a CDI
//! `DataSource` (`spec.source.pvc`: the import's PVC) names it; a
//! [`ClonePlan`] writes a worker's `DataVolume` whose `spec.sourceRef` is
//! that DataSource (CDI clones the PVC; no `spec.source`, no download).
//!
//! With [`Profile::Cozystack`], Cozystack's own layout instead
//! ([`cozystack`]): the catalog's golden `talos-worker-<schematicID>-<version>`
//! in `cozy-public`, and worker disks cloning it with `spec.source.pvc`.
//! Every document carries only the fields of the CDI named ([`cdi`]).

pub mod catalog;
pub mod cdi;
pub mod check;
pub mod cozystack;
pub mod size;
pub mod xz_index;

use crate::error::{Error, Result};
use crate::factory::ImageKey;
use crate::goyaml::{Map, Node};

/// Default platform and architecture of the disk image (as `workers:`).
pub const DEFAULT_PLATFORM: &str = "openstack";
pub const DEFAULT_ARCH: &str = "amd64";

/// How the fields are named in messages: the CLI's flags or the query's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    Flags,
    Query,
}

impl Names {
    fn of(self, field: Field) -> &'static str {
        use Field::*;
        match (self, field) {
            (Names::Flags, BaseUrl) => "--base-url",
            (Names::Flags, Schematic) => "--schematic",
            (Names::Flags, TalosVersion) => "--talos-version",
            (Names::Flags, Platform) => "--platform",
            (Names::Flags, Arch) => "--arch",
            (Names::Flags, Name) => "--name",
            (Names::Flags, Size) => "--size",
            (Names::Flags, StorageClass) => "--storage-class",
            (Names::Flags, CertConfigMap) => "--cert-configmap",
            (Names::Flags, Namespace) => "--namespace",
            (Names::Flags, CloneFrom) => "--clone-from",
            (Names::Flags, Golden) => "--golden",
            (Names::Flags, Profile) => "--profile",
            (Names::Flags, CdiVersion) => "--cdi-version",
            (Names::Query, BaseUrl) => "--public-url",
            (Names::Query, Schematic) => "schematic",
            (Names::Query, TalosVersion) => "talosVersion",
            (Names::Query, Platform) => "platform",
            (Names::Query, Arch) => "arch",
            (Names::Query, Name) => "name",
            (Names::Query, Size) => "size",
            (Names::Query, StorageClass) => "storageClass",
            (Names::Query, CertConfigMap) => "certConfigMap",
            (Names::Query, Namespace) => "namespace",
            (Names::Query, CloneFrom) => "cloneFrom",
            (Names::Query, Golden) => "golden",
            (Names::Query, Profile) => "profile",
            (Names::Query, CdiVersion) => "cdiVersion",
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Field {
    BaseUrl,
    Schematic,
    TalosVersion,
    Platform,
    Arch,
    Name,
    Size,
    StorageClass,
    CertConfigMap,
    Namespace,
    CloneFrom,
    Golden,
    Profile,
    CdiVersion,
}

/// Whose layout the documents follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Profile {
    /// talos-gen's own: an import named by `name`; golden with a `DataSource`.
    #[default]
    Plain,
    /// Cozystack's worker image catalog ([`cozystack`]).
    Cozystack,
}

impl Profile {
    /// `cozystack` (the one profile), named `what` in errors.
    pub fn parse(s: &str, what: &str) -> Result<Profile> {
        match s {
            "cozystack" => Ok(Profile::Cozystack),
            other => Err(Error::bad_input(format!(
                "{what}: {:?} is not a profile (cozystack)",
                shown(other)
            ))),
        }
    }
}

/// What a user asks for, as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    /// The service's base URL (`https://talos-gen.example:8443`).
    pub base_url: String,
    /// A 64-hex schematic ID, or the name of a schematic the caller knows (`cozystack`).
    pub schematic: String,
    pub talos_version: String,
    pub platform: Option<String>,
    pub arch: Option<String>,
    /// Empty: not given (required but with the Cozystack golden, which
    /// has the catalog's name).
    pub name: String,
    /// Empty: not given (required but with the Cozystack golden).
    pub size: String,
    pub storage_class: Option<String>,
    pub cert_configmap: Option<String>,
    /// `metadata.namespace` of the documents (default: none, the
    /// namespace they are applied in); required with `golden`.
    pub namespace: Option<String>,
    /// Also a `DataSource` naming the import's PVC: the golden image.
    pub golden: bool,
    pub profile: Profile,
    /// The CDI the cluster runs (default [`cdi::DEFAULT`]).
    pub cdi_version: Option<String>,
}

/// A checked request: the artifact and everything the document says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The disk image.
    pub key: ImageKey,
    /// `<base>/image/<schematic>/<version>/<asset>`.
    pub url: String,
    /// The request, its names and sizes checked.
    pub req: Request,
    pub cdi: cdi::Cdi,
    /// With [`Profile::Cozystack`] and `golden`: the catalog entry rendered.
    pub catalog: Option<cozystack::Golden>,
    /// The raw disk's uncompressed size, once read ([`Plan::with_raw_size`]).
    pub raw_size: Option<u64>,
}

/// A `DataVolume` (`cdi.kubevirt.io/v1beta1`) named `name` with `spec`.
fn data_volume(name: &str, namespace: Option<&str>, spec: Map) -> Node {
    Map::new()
        .field("apiVersion", "cdi.kubevirt.io/v1beta1")
        .field("kind", "DataVolume")
        .field("metadata", metadata(name, namespace))
        .field("spec", spec)
        .into()
}

/// `{"requests": {"storage": size}}` and the class, as CDI's `StorageSpec`.
fn storage(size: &str, class: Option<&str>) -> Map {
    Map::new()
        .field(
            "resources",
            Map::new().field("requests", Map::new().field("storage", size)),
        )
        .some("storageClassName", class)
}

/// `metadata`: the name and, when given, the namespace.
fn metadata(name: &str, namespace: Option<&str>) -> Map {
    Map::new().field("name", name).some("namespace", namespace)
}

/// Documents as YAML: one, or several each after `---`.
fn yaml_of(docs: &[Node]) -> String {
    let texts: Vec<String> = docs.iter().map(crate::goyaml::to_string).collect();
    texts.join("---\n")
}

/// Documents as JSON: one object, or a `v1` `List` of them (what `kubectl
/// apply -f` takes).
fn json_docs(docs: &[Node]) -> serde_json::Value {
    match docs {
        [one] => json_of(one),
        many => serde_json::json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": many.iter().map(json_of).collect::<Vec<_>>(),
        }),
    }
}

impl Plan {
    /// The storage from the raw disk's size (`raw` bytes): the size asked
    /// when it holds the disk (refused, exit 1, naming both, when it does
    /// not), else that size plus [`size::headroom`].
    pub fn with_raw_size(mut self, raw: u64, names: Names) -> Result<Plan> {
        let storage = size::storage_for(&self.req.size, raw, names.of(Field::Size))?;
        if let Some(g) = &mut self.catalog {
            g.storage = storage.clone();
        }
        self.req.size = storage;
        self.raw_size = Some(raw);
        Ok(self)
    }

    /// Where the artifact's sha256 is published (`<url>.sha256`).
    pub fn checksum_url(&self) -> String {
        format!("{}.sha256", self.url)
    }

    /// The `DataVolume` with `sha256` (64 lowercase hex) as its checksum
    /// where the CDI has the field.
    pub fn document(&self, sha256: &str) -> Node {
        let checksum = self
            .cdi
            .has_http_checksum()
            .then(|| format!("sha256:{sha256}"));
        if let Some(g) = &self.catalog {
            return cozystack::golden_document(g, checksum.as_deref());
        }
        let http = Map::new()
            .field("url", self.url.as_str())
            .some("certConfigMap", self.req.cert_configmap.as_deref())
            .some("checksum", checksum);
        data_volume(
            &self.req.name,
            self.req.namespace.as_deref(),
            Map::new()
                .field("source", Map::new().field("http", http))
                .field(
                    "storage",
                    storage(&self.req.size, self.req.storage_class.as_deref()),
                ),
        )
    }

    /// The golden image's `DataSource` (`cdi.kubevirt.io/v1beta1`): in the
    /// import's namespace, named as it, its `spec.source.pvc` the PVC CDI
    /// makes for the import (named as the DataVolume). `None` unless golden.
    pub fn data_source(&self) -> Option<Node> {
        if self.catalog.is_some() {
            return None;
        }
        let ns = self.req.namespace.as_deref().filter(|_| self.req.golden)?;
        Some(
            Map::new()
                .field("apiVersion", "cdi.kubevirt.io/v1beta1")
                .field("kind", "DataSource")
                .field("metadata", metadata(&self.req.name, Some(ns)))
                .field(
                    "spec",
                    Map::new().field(
                        "source",
                        Map::new().field(
                            "pvc",
                            Map::new()
                                .field("name", self.req.name.as_str())
                                .field("namespace", ns),
                        ),
                    ),
                )
                .into(),
        )
    }

    /// Every document: the `DataVolume`, then the golden `DataSource`.
    pub fn documents(&self, sha256: &str) -> Vec<Node> {
        let mut docs = vec![self.document(sha256)];
        docs.extend(self.data_source());
        docs
    }

    /// The documents as YAML (two, `---` between, when golden).
    pub fn to_yaml(&self, sha256: &str) -> String {
        yaml_of(&self.documents(sha256))
    }

    /// The documents as JSON: the DataVolume, or a `List` of both when golden.
    pub fn to_json(&self, sha256: &str) -> serde_json::Value {
        json_docs(&self.documents(sha256))
    }
}

/// A worker disk cloned from a golden image, as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloneRequest {
    /// `NAMESPACE/NAME` of the golden image's `DataSource`.
    pub clone_from: String,
    pub name: String,
    pub size: String,
    pub storage_class: Option<String>,
    /// `metadata.namespace` of the worker's DataVolume (default: none).
    pub namespace: Option<String>,
    /// [`Profile::Cozystack`]: `spec.source.pvc` of the catalog's golden
    /// (`NAMESPACE/NAME` its PVC) instead of a DataSource's `sourceRef`;
    /// `size` may be empty (the chart's 20Gi).
    pub profile: Profile,
}

/// A checked [`CloneRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClonePlan {
    pub source_namespace: String,
    pub source_name: String,
    /// The request, its names and size checked.
    pub req: CloneRequest,
}

impl ClonePlan {
    /// The worker's `DataVolume`: `spec.sourceRef` the DataSource, no
    /// `spec.source`; Cozystack's: `spec.source.pvc` the golden's PVC.
    pub fn document(&self) -> Node {
        if self.req.profile == Profile::Cozystack {
            return cozystack::worker_document(
                &self.req.name,
                self.req.namespace.as_deref(),
                &self.source_namespace,
                &self.source_name,
                &self.req.size,
                self.req.storage_class.as_deref(),
            );
        }
        data_volume(
            &self.req.name,
            self.req.namespace.as_deref(),
            Map::new()
                .field(
                    "sourceRef",
                    Map::new()
                        .field("kind", "DataSource")
                        .field("name", self.source_name.as_str())
                        .field("namespace", self.source_namespace.as_str()),
                )
                .field(
                    "storage",
                    storage(&self.req.size, self.req.storage_class.as_deref()),
                ),
        )
    }

    pub fn to_yaml(&self) -> String {
        yaml_of(&[self.document()])
    }

    pub fn to_json(&self) -> serde_json::Value {
        json_docs(&[self.document()])
    }
}

/// Check a clone request.
pub fn clone_plan(req: &CloneRequest, names: Names) -> Result<ClonePlan> {
    let n = |f| names.of(f);
    let (ns, source) = req.clone_from.split_once('/').ok_or_else(|| {
        Error::bad_input(format!(
            "{}: {:?} is not NAMESPACE/NAME of a DataSource (e.g. cozy-public/talos-v1.13.6-cozystack)",
            n(Field::CloneFrom),
            shown(&req.clone_from)
        ))
    })?;
    check_label(ns, n(Field::CloneFrom), "namespace")?;
    check_subdomain(source, n(Field::CloneFrom), "DataSource")?;
    need(&req.name, n(Field::Name))?;
    check_subdomain(&req.name, n(Field::Name), "DataVolume")?;
    let mut req = req.clone();
    if req.size.is_empty() && req.profile == Profile::Cozystack {
        req.size = cozystack::DEFAULT_WORKER_DISK.into();
    }
    need(&req.size, n(Field::Size))?;
    check_size(&req.size, n(Field::Size))?;
    if let Some(sc) = &req.storage_class {
        check_subdomain(sc, n(Field::StorageClass), "StorageClass")?;
    }
    if let Some(own) = &req.namespace {
        check_label(own, n(Field::Namespace), "namespace")?;
    }
    Ok(ClonePlan {
        source_namespace: ns.to_string(),
        source_name: source.to_string(),
        req,
    })
}

/// A value that must be given (empty: it was not).
fn need(value: &str, what: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::bad_input(format!("{what}: missing (required)")));
    }
    Ok(())
}

fn check_size(size: &str, what: &str) -> Result<()> {
    if is_storage_quantity(size) {
        Ok(())
    } else {
        Err(Error::bad_input(format!(
            "{what}: {:?} is not a Kubernetes quantity of storage above zero (e.g. 20Gi, 500M)",
            shown(size)
        )))
    }
}

/// A DNS-1123 label (what Kubernetes names namespaces by): lowercase
/// letters, digits and `-`, starting and ending alphanumeric, at most 63.
fn check_label(s: &str, what: &str, kind: &str) -> Result<()> {
    if s.len() <= 63 && !s.contains('.') && check_subdomain(s, what, kind).is_ok() {
        Ok(())
    } else {
        Err(Error::bad_input(format!(
            "{what}: {:?} is not a {kind} name (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)",
            shown(s)
        )))
    }
}

fn json_of(n: &Node) -> serde_json::Value {
    use serde_json::Value;
    match n {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::from(*i),
        Node::UInt(u) => Value::from(*u),
        Node::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Node::Str(s) => Value::String(s.clone()),
        Node::Seq(v) => Value::Array(v.iter().map(json_of).collect()),
        Node::Map(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), json_of(v))).collect()),
    }
}

/// Check `req`; `resolve` turns a schematic name (`cozystack`) into its ID.
pub fn plan(req: &Request, names: Names, resolve: &dyn Fn(&str) -> Option<String>) -> Result<Plan> {
    let n = |f| names.of(f);
    let base = crate::registry::names::check_base_url(&req.base_url)
        .map_err(|e| Error::bad_input(format!("{}: {e}", n(Field::BaseUrl))))?;
    let schematic = if crate::schematic::is_valid_id(&req.schematic) {
        req.schematic.clone()
    } else {
        resolve(&req.schematic).ok_or_else(|| {
            Error::bad_input(format!(
                "{}: {:?} is neither a 64-character lowercase hex schematic ID nor the name of a known schematic (e.g. cozystack)",
                n(Field::Schematic),
                shown(&req.schematic)
            ))
        })?
    };
    let version = crate::version::Version::parse_named(&req.talos_version, n(Field::TalosVersion))?;
    let platform = req.platform.as_deref().unwrap_or(DEFAULT_PLATFORM);
    crate::pull_list::check_platform(platform, n(Field::Platform))?;
    let arch = req.arch.as_deref().unwrap_or(DEFAULT_ARCH);
    if !matches!(arch, "amd64" | "arm64") {
        return Err(Error::bad_input(format!(
            "{}: {:?} is not amd64 or arm64",
            n(Field::Arch),
            shown(arch)
        )));
    }
    let key = ImageKey::parse(
        &schematic,
        &version.to_string(),
        &format!("{platform}-{arch}.raw.xz"),
    )?;
    let cdi = cdi::Cdi::parse(req.cdi_version.as_deref(), n(Field::CdiVersion))?;
    if req.profile == Profile::Cozystack {
        let catalog =
            cozystack::golden_of_request(req, names, &base, &schematic, &version.to_string())?;
        return Ok(Plan {
            url: catalog.url.clone(),
            key,
            req: req.clone(),
            cdi,
            catalog: Some(catalog),
            raw_size: None,
        });
    }
    need(&req.name, n(Field::Name))?;
    check_subdomain(&req.name, n(Field::Name), "DataVolume")?;
    // Left out: the raw disk's size and headroom ([`Plan::with_raw_size`]).
    if !req.size.is_empty() {
        check_size(&req.size, n(Field::Size))?;
    }
    match (&req.namespace, req.golden) {
        (Some(ns), _) => check_label(ns, n(Field::Namespace), "namespace")?,
        (None, true) => {
            return Err(Error::bad_input(format!(
                "{}: needs {} (the shared namespace of the golden image, e.g. cozy-public)",
                n(Field::Golden),
                n(Field::Namespace)
            )));
        }
        (None, false) => {}
    }
    if let Some(sc) = &req.storage_class {
        check_subdomain(sc, n(Field::StorageClass), "StorageClass")?;
    }
    if let Some(cm) = &req.cert_configmap {
        check_subdomain(cm, n(Field::CertConfigMap), "ConfigMap")?;
    }
    Ok(Plan {
        url: format!("{base}{}", key.path()),
        key,
        req: req.clone(),
        cdi,
        catalog: None,
        raw_size: None,
    })
}

/// Why a `.sha256` answer gives no checksum for the asset.
#[derive(Debug, thiserror::Error)]
pub enum ChecksumLineError {
    /// The first line is not `<64 hex>  <name>` (shown, at most 80 characters).
    #[error("not a sha256 line (<64 hex>  <name>): {0:?}")]
    NotSha256Line(String),
    /// The line is for another asset.
    #[error("it names {named:?}, not {asset:?}")]
    OtherAsset { named: String, asset: String },
}

/// The sha256 of a `.sha256` answer (`<hex>  <asset>\n`, as `sha256sum`
/// writes it and this service serves it); `asset` must be the name in it
/// when one is given.
pub fn parse_sha256_file(body: &str, asset: &str) -> Result<String, ChecksumLineError> {
    let line = body.lines().next().unwrap_or("").trim();
    let mut parts = line.split_whitespace();
    let hex = parts.next().unwrap_or("");
    if !crate::text::is_hex64(hex) {
        return Err(ChecksumLineError::NotSha256Line(shown(line)));
    }
    if let Some(name) = parts.next()
        && name.trim_start_matches('*') != asset
    {
        return Err(ChecksumLineError::OtherAsset {
            named: shown(name),
            asset: asset.to_string(),
        });
    }
    Ok(hex.to_string())
}

/// Read the artifact's sha256 from `plan.checksum_url()` (the CLI's way:
/// over HTTP, from the service the DataVolume will import from). Every
/// wait is bounded by `timeout` (connecting, the answer's head, each body
/// byte); anything but a sha256 line for the artifact is refused (exit 1)
/// naming the URL.
pub async fn fetch_checksum(plan: &Plan, timeout: std::time::Duration) -> Result<String> {
    use crate::upstream::{Limits, Upstream, UpstreamConfig};
    let url = plan.checksum_url();
    // The URL said once: the client's errors repeat it (`upstream URL:
    // error sending request for url (URL): ...`).
    let fail = |why: String| {
        let why = why
            .replace(&format!("upstream {url}: "), "")
            .replace(&format!(" for url ({url})"), "")
            .replace(&url, "it");
        Error::Upstream(format!("reading the checksum from {url}: {why}"))
    };
    let up = Upstream::new(UpstreamConfig {
        limits: Limits {
            timeout,
            min_rate: 0,
        },
        ..UpstreamConfig::default()
    })?;
    let resp = up.get(&url, &[]).await.map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    let body = up
        .limits()
        .read_small(&url, resp, 4096)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        return Err(fail(format!(
            "answered {status}: {}",
            shown(text.lines().next().unwrap_or("").trim())
        )));
    }
    parse_sha256_file(&text, &plan.key.asset).map_err(|e| fail(e.to_string()))
}

fn shown(s: &str) -> String {
    s.chars().take(80).collect()
}

/// A DNS-1123 subdomain (what Kubernetes names objects by): lowercase
/// letters, digits, `-` and `.`, starting and ending alphanumeric, at most
/// 253 characters.
fn check_subdomain(s: &str, what: &str, kind: &str) -> Result<()> {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 253
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-' || c == b'.')
        && s.split('.')
            .all(|l| !l.is_empty() && alnum(l.as_bytes()[0]) && alnum(l.as_bytes()[l.len() - 1]));
    if ok {
        Ok(())
    } else {
        Err(Error::bad_input(format!(
            "{what}: {:?} is not a {kind} name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)",
            shown(s)
        )))
    }
}

/// A Kubernetes quantity (`resource.Quantity`'s grammar: a number, then a
/// binary-SI suffix `Ki..Ei`, a decimal-SI one `m`, `k`, `M`..`E`, or an
/// exponent `e<n>`/`E<n>`) with no sign and a value above zero: a size.
pub fn is_storage_quantity(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let mut digits = 0;
    let mut nonzero = false;
    while i < b.len() && b[i].is_ascii_digit() {
        nonzero |= b[i] != b'0';
        digits += 1;
        i += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            nonzero |= b[i] != b'0';
            digits += 1;
            i += 1;
        }
    }
    if digits == 0 || !nonzero {
        return false;
    }
    let suffix = &s[i..];
    if matches!(
        suffix,
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "m" | "k" | "M" | "G" | "T" | "P" | "E"
    ) {
        return true;
    }
    // An exponent: e or E, an optional sign, digits.
    let Some(exp) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    !exp.is_empty() && exp.len() <= 3 && exp.bytes().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    fn req() -> Request {
        Request {
            base_url: "https://talos-gen.example:8443/".into(),
            schematic: S.into(),
            talos_version: "1.13.6".into(),
            name: "worker-disk".into(),
            size: "20Gi".into(),
            ..Default::default()
        }
    }

    fn none(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn document() {
        let hex = "ab".repeat(32);
        // The default CDI (v1.64.0, Cozystack's) has no checksum field.
        let p = plan(&req(), Names::Flags, &none).unwrap();
        assert!(!p.to_yaml(&hex).contains("checksum"), "{}", p.to_yaml(&hex));
        let mut with_checksum = req();
        with_checksum.cdi_version = Some("v1.65.0".into());
        let p = plan(&with_checksum, Names::Flags, &none).unwrap();
        assert_eq!(
            p.url,
            format!("https://talos-gen.example:8443/image/{S}/v1.13.6/openstack-amd64.raw.xz")
        );
        assert_eq!(p.checksum_url(), format!("{}.sha256", p.url));
        assert_eq!(
            p.to_yaml(&hex),
            format!(
                "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata:\n    name: worker-disk\nspec:\n    source:\n        http:\n            url: {}\n            checksum: sha256:{hex}\n    storage:\n        resources:\n            requests:\n                storage: 20Gi\n",
                p.url
            )
        );
        let mut r = req();
        r.platform = Some("nocloud".into());
        r.arch = Some("arm64".into());
        r.storage_class = Some("replicated".into());
        r.cert_configmap = Some("talos-gen-ca".into());
        let p = plan(&r, Names::Query, &none).unwrap();
        let j = p.to_json(&hex);
        assert_eq!(
            j["spec"]["source"]["http"]["url"],
            format!("https://talos-gen.example:8443/image/{S}/v1.13.6/nocloud-arm64.raw.xz")
        );
        assert_eq!(j["spec"]["source"]["http"]["certConfigMap"], "talos-gen-ca");
        assert_eq!(j["spec"]["storage"]["storageClassName"], "replicated");
        assert_eq!(
            j["spec"]["storage"]["resources"]["requests"]["storage"],
            "20Gi"
        );
    }

    #[test]
    fn golden_and_clone() {
        let hex = "ab".repeat(32);
        let mut r = req();
        r.name = "talos-v1.13.6-cozystack".into();
        r.golden = true;
        let e = plan(&r, Names::Flags, &none).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--golden: needs --namespace (the shared namespace of the golden image, e.g. cozy-public)"
        );
        r.namespace = Some("cozy-public".into());
        let p = plan(&r, Names::Flags, &none).unwrap();
        let y = p.to_yaml(&hex);
        let (dv, ds) = y.split_once("---\n").unwrap();
        assert!(dv.starts_with("apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata:\n    name: talos-v1.13.6-cozystack\n    namespace: cozy-public\nspec:\n"), "{y}");
        assert_eq!(
            ds,
            "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataSource\nmetadata:\n    name: talos-v1.13.6-cozystack\n    namespace: cozy-public\nspec:\n    source:\n        pvc:\n            name: talos-v1.13.6-cozystack\n            namespace: cozy-public\n"
        );
        let j = p.to_json(&hex);
        assert_eq!(j["kind"], "List");
        assert_eq!(
            j["items"][1]["spec"]["source"]["pvc"]["namespace"],
            "cozy-public"
        );
        // A namespace alone places the one DataVolume.
        r.golden = false;
        let p = plan(&r, Names::Flags, &none).unwrap();
        assert_eq!(p.to_json(&hex)["metadata"]["namespace"], "cozy-public");
        assert!(!p.to_yaml(&hex).contains("---"));
        r.namespace = Some("Cozy.Public".into());
        let e = plan(&r, Names::Query, &none).unwrap_err();
        assert!(e.to_string().starts_with("namespace: "), "{e}");

        let c = CloneRequest {
            clone_from: "cozy-public/talos-v1.13.6-cozystack".into(),
            name: "md0-disk-0".into(),
            size: "20Gi".into(),
            storage_class: Some("replicated".into()),
            namespace: None,
            profile: Profile::Plain,
        };
        let p = clone_plan(&c, Names::Flags).unwrap();
        assert_eq!(
            p.to_yaml(),
            "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata:\n    name: md0-disk-0\nspec:\n    sourceRef:\n        kind: DataSource\n        name: talos-v1.13.6-cozystack\n        namespace: cozy-public\n    storage:\n        resources:\n            requests:\n                storage: 20Gi\n        storageClassName: replicated\n"
        );
        for (f, flag, query) in [
            (
                (|c: &mut CloneRequest| c.clone_from = "nons".into()) as fn(&mut CloneRequest),
                "--clone-from",
                "cloneFrom",
            ),
            (
                |c| c.clone_from = "a.b/x".into(),
                "--clone-from",
                "cloneFrom",
            ),
            (
                |c| c.clone_from = "ns/X".into(),
                "--clone-from",
                "cloneFrom",
            ),
            (|c| c.name = "".into(), "--name", "name"),
            (|c| c.size = "20GB".into(), "--size", "size"),
            (
                |c| c.storage_class = Some("-".into()),
                "--storage-class",
                "storageClass",
            ),
            (
                |c| c.namespace = Some("x_y".into()),
                "--namespace",
                "namespace",
            ),
        ] {
            let mut c = c.clone();
            f(&mut c);
            let e = clone_plan(&c, Names::Flags).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().starts_with(&format!("{flag}: ")), "{e}");
            let e = clone_plan(&c, Names::Query).unwrap_err();
            assert!(e.to_string().starts_with(&format!("{query}: ")), "{e}");
        }
    }

    #[test]
    fn schematic_names() {
        let mut r = req();
        r.schematic = "cozystack".into();
        let p = plan(&r, Names::Flags, &|n| {
            (n == "cozystack").then(|| S.to_string())
        })
        .unwrap();
        assert_eq!(p.key.schematic, S);
        r.schematic = "nope".into();
        let e = plan(&r, Names::Query, &none).unwrap_err();
        assert!(e.to_string().starts_with("schematic: \"nope\""), "{e}");
    }

    #[test]
    fn bad_input() {
        for (f, (flag, query)) in [
            (
                (|r: &mut Request| r.base_url = "ftp://x".into()) as fn(&mut Request),
                ("--base-url", "--public-url"),
            ),
            (
                |r| r.talos_version = "one".into(),
                ("--talos-version", "talosVersion"),
            ),
            (
                |r| r.platform = Some("Open Stack".into()),
                ("--platform", "platform"),
            ),
            (|r| r.arch = Some("riscv".into()), ("--arch", "arch")),
            (|r| r.name = "Worker_Disk".into(), ("--name", "name")),
            (|r| r.name = "".into(), ("--name", "name")),
            (|r| r.size = "20GB".into(), ("--size", "size")),
            (|r| r.size = "0Gi".into(), ("--size", "size")),
            (|r| r.size = "-1Gi".into(), ("--size", "size")),
            (
                |r| r.storage_class = Some("a..b".into()),
                ("--storage-class", "storageClass"),
            ),
            (
                |r| r.cert_configmap = Some("-ca".into()),
                ("--cert-configmap", "certConfigMap"),
            ),
        ] {
            let mut r = req();
            f(&mut r);
            let e = plan(&r, Names::Flags, &none).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().starts_with(&format!("{flag}: ")), "{e}");
            let e = plan(&r, Names::Query, &none).unwrap_err();
            assert!(e.to_string().starts_with(&format!("{query}: ")), "{e}");
        }
    }

    #[test]
    fn quantities() {
        for ok in [
            "20Gi", "1", "1.5Ti", "500M", "0.5Gi", "1e9", "1E3", "2k", "10m", ".5Gi", "1.",
        ] {
            assert!(is_storage_quantity(ok), "{ok}");
        }
        for bad in [
            "", "0", "0.0Gi", "Gi", "20GB", "20gi", "-1", "+1", "1 Gi", "1e", "1.2.3", "1Ki1", ".",
        ] {
            assert!(!is_storage_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn sha256_files() {
        let hex = "0f".repeat(32);
        let a = "openstack-amd64.raw.xz";
        assert_eq!(parse_sha256_file(&format!("{hex}  {a}\n"), a).unwrap(), hex);
        assert_eq!(parse_sha256_file(&format!("{hex} *{a}\n"), a).unwrap(), hex);
        assert_eq!(parse_sha256_file(&format!("{hex}\n"), a).unwrap(), hex);
        assert!(parse_sha256_file(&format!("{hex}  other.raw.xz\n"), a).is_err());
        assert!(parse_sha256_file("<html>", a).is_err());
        assert!(parse_sha256_file(&hex.to_uppercase(), a).is_err());
    }
}
