//! The worker generator: the documents Talos' `generate` package writes for
//! a worker under a version contract (`pkg/machinery/config/generate/
//! worker.go`, `registry.go`, `network.go`, `kubernetes.go`, `block.go`,
//! `security_profile.go`), plus the inputs talos-gen adds (resolver,
//! static hosts, node labels, kubelet extraConfig, KubePrism off).

use crate::goyaml::{Map, Node};

use super::contract::{Contract, Gate};
use super::model::Doc;
use super::secrets::Bundle;

/// One registry mirror (`--registry-mirror host=url,...`, or an entry of
/// the chart's `talos.registryMirrors`).
#[derive(Debug, Clone, PartialEq)]
pub struct Mirror {
    pub host: String,
    pub endpoints: Vec<String>,
    pub override_path: Option<bool>,
    pub skip_fallback: Option<bool>,
}

/// Everything the generator needs, already validated.
#[derive(Debug, Clone)]
pub struct Input {
    pub contract: Contract,
    pub cluster_name: String,
    pub endpoint: String,
    /// Without the leading `v`.
    pub kubernetes_version: String,
    pub bundle: Bundle,
    pub additional_sans: Vec<String>,
    pub dns_domain: String,
    pub install_disk: String,
    pub install_image: String,
    pub mirrors: Vec<Mirror>,
    pub pod_subnets: Vec<String>,
    pub service_subnets: Vec<String>,
    /// Overrides `ghcr.io/siderolabs/kubelet:v<kubernetes_version>`.
    pub kubelet_image: Option<String>,
    pub kubelet_extra_config: Option<Node>,
    /// `false`: KubePrism off (written as `enabled: false` before 1.14, no
    /// KubePrismConfig document from 1.14).
    pub kube_prism: bool,
    pub discovery_service: bool,
    pub node_labels: Vec<(String, String)>,
    pub nameservers: Vec<String>,
    pub search_domains: Vec<String>,
    pub extra_hosts: Vec<(String, Vec<String>)>,
    /// An ImageVerificationConfig: image patterns, each with a `publicKey`
    /// rule for this PEM public key (`--image-verification-key`).
    pub image_verification: Option<(Vec<String>, String)>,
    /// `(endpoint host[:port], PEM CA)`, sorted by host: `RegistryTLSConfig`
    /// documents from 1.12, `machine.registries.config.<host>.tls.ca`
    /// (base64) before (`--mirror-ca`).
    pub registry_cas: Vec<(String, String)>,
}

impl Input {
    pub fn new(contract: Contract, bundle: Bundle) -> Input {
        Input {
            contract,
            cluster_name: String::new(),
            endpoint: String::new(),
            kubernetes_version: String::new(),
            bundle,
            additional_sans: Vec::new(),
            dns_domain: "cluster.local".into(),
            install_disk: String::new(),
            install_image: String::new(),
            mirrors: Vec::new(),
            pod_subnets: vec!["10.244.0.0/16".into()],
            service_subnets: vec!["10.96.0.0/12".into()],
            kubelet_image: None,
            kubelet_extra_config: None,
            kube_prism: true,
            discovery_service: true,
            node_labels: Vec::new(),
            nameservers: Vec::new(),
            search_domains: Vec::new(),
            extra_hosts: Vec::new(),
            image_verification: None,
            registry_cas: Vec::new(),
        }
    }

    pub fn kubelet_image(&self) -> String {
        self.kubelet_image
            .clone()
            .unwrap_or_else(|| format!("ghcr.io/siderolabs/kubelet:v{}", self.kubernetes_version))
    }
}

fn strs(v: &[String]) -> Node {
    Node::strs(v.iter().cloned())
}

fn labels(v: &[(String, String)]) -> Node {
    Node::Map(
        v.iter()
            .map(|(k, x)| (k.clone(), Node::str(x.as_str())))
            .collect(),
    )
}

/// Go's `%q` for the strings a disk path can hold.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The worker's documents, in Talos' order: the v1alpha1 config (its
/// `machine` and `cluster` sections), then the multi-document kinds in the
/// order Talos' generator appends them.
pub fn worker(inp: &Input) -> Vec<Doc> {
    let config: Node = Map::new()
        .field("version", "v1alpha1")
        .field("debug", false)
        .field("persist", true)
        .field("machine", machine(inp))
        .field("cluster", cluster(inp))
        .into();
    let mut docs = vec![Doc::V1Alpha1(config)];
    discovery_documents(inp, &mut docs);
    install_document(inp, &mut docs);
    host_dns_document(inp, &mut docs);
    volume_documents(inp, &mut docs);
    registry_documents(inp, &mut docs);
    resolver_documents(inp, &mut docs);
    kubernetes_documents(inp, &mut docs);
    image_verification_document(inp, &mut docs);
    docs
}

/// `machine:` of the v1alpha1 document.
fn machine(inp: &Input) -> Map {
    let c = inp.contract;
    let multidoc_k8s = c.has(Gate::MultidocKubernetes);
    let mut machine = Map::new()
        .field("type", "worker")
        .field("token", inp.bundle.trustdinfo.token.as_str())
        .field(
            "ca",
            Map::new()
                .field("crt", inp.bundle.os_crt())
                .field("key", ""),
        )
        .field("certSANs", strs(&inp.additional_sans));

    if !multidoc_k8s {
        let mut kubelet = Map::new().field("image", inp.kubelet_image());
        if let Some(extra) = &inp.kubelet_extra_config {
            kubelet.push("extraConfig", extra.clone());
        }
        if c.has(Gate::KubeletSeccompDefault) {
            kubelet.push("defaultRuntimeSeccompProfileEnabled", true);
        }
        if c.has(Gate::ManifestsDirectoryDisabled) {
            kubelet.push("disableManifestsDirectory", true);
        }
        machine.push("kubelet", kubelet);
    }

    let legacy_resolver = !c.has(Gate::ResolverDocuments)
        && (!inp.nameservers.is_empty()
            || !inp.search_domains.is_empty()
            || !inp.extra_hosts.is_empty());
    if !c.has(Gate::NoLegacyNetwork) || legacy_resolver {
        let mut network = Map::new();
        if legacy_resolver {
            network = network
                .opt("nameservers", strs(&inp.nameservers))
                .opt("searchDomains", strs(&inp.search_domains));
            if !inp.extra_hosts.is_empty() {
                network.push(
                    "extraHostEntries",
                    Node::Seq(
                        inp.extra_hosts
                            .iter()
                            .map(|(ip, aliases)| {
                                Map::new()
                                    .field("ip", ip.as_str())
                                    .field("aliases", strs(aliases))
                                    .into()
                            })
                            .collect(),
                    ),
                );
            }
        }
        machine.push("network", network);
    }

    if !c.has(Gate::UnattendedInstall) {
        let mut install = Map::new()
            .opt("disk", inp.install_disk.as_str())
            .opt("image", inp.install_image.as_str())
            .field("wipe", false);
        if c.has(Gate::GrubUseUkiCmdline) {
            install.push("grubUseUKICmdline", true);
        }
        machine.push("install", install);
    }

    if let Some(registries) = machine_registries(inp) {
        machine.push("registries", registries);
    }
    machine.push("features", machine_features(inp));
    if !multidoc_k8s && !inp.node_labels.is_empty() {
        machine.push("nodeLabels", labels(&inp.node_labels));
    }
    machine
}

/// `machine.registries` (mirrors and their CAs) before the multi-document
/// registry configs.
fn machine_registries(inp: &Input) -> Option<Map> {
    let c = inp.contract;
    if c.has(Gate::MultidocNetwork) || inp.mirrors.is_empty() {
        return None;
    }
    let mirrors = Node::Map(
        inp.mirrors
            .iter()
            .map(|m| {
                (
                    m.host.clone(),
                    Map::new()
                        .field("endpoints", strs(&m.endpoints))
                        .some("overridePath", m.override_path)
                        .some("skipFallback", m.skip_fallback)
                        .into(),
                )
            })
            .collect(),
    );
    let mut registries = Map::new().field("mirrors", mirrors);
    if !inp.registry_cas.is_empty() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        registries.push(
            "config",
            Node::Map(
                inp.registry_cas
                    .iter()
                    .map(|(host, ca)| {
                        (
                            host.clone(),
                            Map::new()
                                .field("tls", Map::new().field("ca", b64.encode(ca)))
                                .into(),
                        )
                    })
                    .collect(),
            ),
        );
    }
    Some(registries)
}

/// `machine.features`.
fn machine_features(inp: &Input) -> Map {
    let c = inp.contract;
    let multidoc_k8s = c.has(Gate::MultidocKubernetes);
    let mut features = Map::new();
    if !c.has(Gate::MultidocNetwork) {
        features.push("rbac", true);
        if c.has(Gate::StableHostname) {
            features.push("stableHostname", true);
        }
        if c.has(Gate::ApidCheckExtKeyUsage) {
            features.push("apidCheckExtKeyUsage", true);
        }
    }
    if c.has(Gate::DiskQuotaSupport) {
        features.push("diskQuotaSupport", true);
    }
    if !multidoc_k8s {
        if !inp.kube_prism {
            features.push("kubePrism", Map::new().field("enabled", false));
        } else if c.has(Gate::KubePrism) {
            features.push(
                "kubePrism",
                Map::new().field("enabled", true).field("port", 7445i64),
            );
        }
    }
    if c.has(Gate::HostDns) && !c.has(Gate::HostDnsDocument) {
        let mut host_dns = Map::new().field("enabled", true);
        if c.has(Gate::ForwardKubeDnsToHost) {
            host_dns.push("forwardKubeDNSToHost", true);
        }
        features.push("hostDNS", host_dns);
    }
    features
}

/// `cluster:` of the v1alpha1 document.
fn cluster(inp: &Input) -> Map {
    let c = inp.contract;
    let multidoc_k8s = c.has(Gate::MultidocKubernetes);
    let mut cluster = Map::new();
    if !c.has(Gate::DiscoveryDocuments) {
        cluster.push("id", inp.bundle.cluster.id.as_str());
        cluster.push("secret", inp.bundle.cluster.secret.as_str());
    }
    cluster.push("token", inp.bundle.secrets.bootstraptoken.as_str());
    if !multidoc_k8s {
        cluster.push(
            "controlPlane",
            Map::new().field("endpoint", inp.endpoint.as_str()),
        );
        if c.has(Gate::ClusterNameForWorkers) {
            cluster.push("clusterName", inp.cluster_name.as_str());
        }
        cluster.push(
            "network",
            Map::new()
                .field("dnsDomain", inp.dns_domain.as_str())
                .field("podSubnets", strs(&inp.pod_subnets))
                .field("serviceSubnets", strs(&inp.service_subnets)),
        );
        cluster.push(
            "ca",
            Map::new()
                .field("crt", inp.bundle.k8s_crt())
                .field("key", ""),
        );
    }
    if !c.has(Gate::DiscoveryDocuments) {
        let mut registries = Map::new();
        if c.has(Gate::KubernetesDiscoveryDisabled) {
            registries.push("kubernetes", Map::new().field("disabled", true));
        }
        if !inp.discovery_service {
            registries.push("service", Map::new().field("disabled", true));
        }
        cluster.push(
            "discovery",
            Map::new()
                .field("enabled", true)
                .field("registries", registries),
        );
    }

    cluster
}

/// DiscoveryServiceConfig, DiscoveryIdentityConfig.
fn discovery_documents(inp: &Input, docs: &mut Vec<Doc>) {
    let c = inp.contract;
    if c.has(Gate::DiscoveryDocuments) {
        if inp.discovery_service {
            docs.push(Doc::other(
                "DiscoveryServiceConfig",
                Map::new()
                    .field("name", "default")
                    .field("endpoint", "https://discovery.talos.dev/")
                    .into(),
            ));
        }
        docs.push(Doc::other(
            "DiscoveryIdentityConfig",
            Map::new()
                .field("clusterID", inp.bundle.cluster.id.as_str())
                .field("clusterSecret", inp.bundle.cluster.secret.as_str())
                .into(),
        ));
    }
}

/// UnattendedInstallConfig.
fn install_document(inp: &Input, docs: &mut Vec<Doc>) {
    let c = inp.contract;
    if c.has(Gate::UnattendedInstall) && !inp.install_disk.is_empty() {
        docs.push(Doc::other(
            "UnattendedInstallConfig",
            Map::new()
                .field(
                    "installer",
                    Map::new().opt("image", inp.install_image.as_str()),
                )
                .field(
                    "provisioning",
                    Map::new()
                        .field(
                            "diskSelector",
                            Map::new().field(
                                "match",
                                format!("disk.dev_path == {}", go_quote(&inp.install_disk)),
                            ),
                        )
                        .field("wipe", false),
                )
                .into(),
        ));
    }
}

/// A ResolverConfig's body: nameservers, search domains, host DNS.
fn resolver_body(inp: &Input, host_dns: Option<Node>) -> Node {
    let mut m = Map::new();
    if !inp.nameservers.is_empty() {
        m.push(
            "nameservers",
            Node::Seq(
                inp.nameservers
                    .iter()
                    .map(|a| Map::new().field("address", a.as_str()).into())
                    .collect(),
            ),
        );
    }
    if !inp.search_domains.is_empty() {
        m.push(
            "searchDomains",
            Map::new().field("domains", strs(&inp.search_domains)),
        );
    }
    if let Some(h) = host_dns {
        m.push("hostDNS", h);
    }
    m.into()
}

/// ResolverConfig carrying host DNS (from the gate that moved it there).
fn host_dns_document(inp: &Input, docs: &mut Vec<Doc>) {
    let c = inp.contract;
    if c.has(Gate::HostDns) && c.has(Gate::HostDnsDocument) {
        let mut host_dns = Map::new().field("enabled", true);
        if c.has(Gate::ForwardKubeDnsToHost) {
            host_dns.push("forwardKubeDNSToHost", true);
        }
        docs.push(Doc::other(
            "ResolverConfig",
            resolver_body(inp, Some(host_dns.into())),
        ));
    }
}

/// VolumeConfig (EPHEMERAL), FilesystemTrimConfig, SecurityProfileConfig.
fn volume_documents(inp: &Input, docs: &mut Vec<Doc>) {
    let c = inp.contract;
    if c.has(Gate::FilesystemTrim) {
        docs.push(Doc::other(
            "VolumeConfig",
            Map::new()
                .field("name", "EPHEMERAL")
                .field("mount", Map::new().field("secure", true))
                .into(),
        ));
        docs.push(Doc::other(
            "FilesystemTrimConfig",
            Map::new().field("interval", "168h0m0s").into(),
        ));
    }
    if c.has(Gate::WorkloadIsolation) {
        docs.push(Doc::other(
            "SecurityProfileConfig",
            Map::new().field("workloadIsolation", true).into(),
        ));
    }
}

/// RegistryMirrorConfig, RegistryTLSConfig, HostnameConfig.
fn registry_documents(inp: &Input, docs: &mut Vec<Doc>) {
    let c = inp.contract;
    if c.has(Gate::MultidocNetwork) {
        let mut mirrors: Vec<&Mirror> = inp.mirrors.iter().collect();
        mirrors.sort_by(|a, b| a.host.cmp(&b.host));
        for m in mirrors {
            docs.push(Doc::other(
                "RegistryMirrorConfig",
                Map::new()
                    .field("name", m.host.as_str())
                    .field(
                        "endpoints",
                        Node::Seq(
                            m.endpoints
                                .iter()
                                .map(|u| {
                                    Map::new()
                                        .field("url", u.as_str())
                                        .some("overridePath", m.override_path)
                                        .into()
                                })
                                .collect(),
                        ),
                    )
                    .some("skipFallback", m.skip_fallback)
                    .into(),
            ));
        }
        // Talos sorts these documents by kind, then name: the mirrors,
        // then the TLS configs (Go field order: name, clientIdentity, ca,
        // insecureSkipVerify).
        for (host, ca) in &inp.registry_cas {
            docs.push(Doc::other(
                "RegistryTLSConfig",
                Map::new()
                    .field("name", host.as_str())
                    .field("ca", ca.as_str())
                    .into(),
            ));
        }
        docs.push(Doc::other(
            "HostnameConfig",
            Map::new().field("auto", "stable").into(),
        ));
    }
}

/// ResolverConfig (without host DNS), StaticHostConfig.
fn resolver_documents(inp: &Input, docs: &mut Vec<Doc>) {
    let c = inp.contract;
    if c.has(Gate::ResolverDocuments) {
        if !c.has(Gate::HostDnsDocument)
            && (!inp.nameservers.is_empty() || !inp.search_domains.is_empty())
        {
            docs.push(Doc::other("ResolverConfig", resolver_body(inp, None)));
        }
        for (ip, aliases) in &inp.extra_hosts {
            docs.push(Doc::other(
                "StaticHostConfig",
                Map::new()
                    .field("name", ip.as_str())
                    .field("hostnames", strs(aliases))
                    .into(),
            ));
        }
    }
}

/// The Kube* documents of the multi-document Kubernetes config.
fn kubernetes_documents(inp: &Input, docs: &mut Vec<Doc>) {
    if !inp.contract.has(Gate::MultidocKubernetes) {
        return;
    }
    docs.push(Doc::other(
        "KubeClusterConfig",
        Map::new()
            .field("clusterName", inp.cluster_name.as_str())
            .field("endpoint", inp.endpoint.as_str())
            .into(),
    ));
    let mut node = Map::new().field("nodeIP", Node::empty_map());
    if !inp.node_labels.is_empty() {
        node.push("labels", labels(&inp.node_labels));
    }
    docs.push(Doc::other("KubeNodeConfig", node.into()));
    docs.push(Doc::other(
        "KubeletConfig",
        Map::new()
            .field("image", inp.kubelet_image())
            .field(
                "config",
                inp.kubelet_extra_config
                    .clone()
                    .unwrap_or(Node::empty_map()),
            )
            .field("defaultRuntimeSeccompProfileEnabled", true)
            .into(),
    ));
    docs.push(Doc::other(
        "KubeNetworkConfig",
        Map::new()
            .field("dnsDomain", inp.dns_domain.as_str())
            .field("podSubnets", strs(&inp.pod_subnets))
            .field("serviceSubnets", strs(&inp.service_subnets))
            .into(),
    ));
    docs.push(Doc::other(
        "KubeAPIServerCAConfig",
        Map::new()
            .field("acceptedCAs", Node::strs([inp.bundle.k8s_crt_pem()]))
            .into(),
    ));
    if inp.kube_prism {
        docs.push(Doc::other(
            "KubePrismConfig",
            Map::new().field("port", 7445i64).into(),
        ));
    }
}

/// ImageVerificationConfig.
fn image_verification_document(inp: &Input, docs: &mut Vec<Doc>) {
    let c = inp.contract;
    if let Some((patterns, pem)) = &inp.image_verification
        && c.has(Gate::ImageVerification)
    {
        let rules = patterns
            .iter()
            .map(|p| {
                Map::new()
                    .field("image", p.as_str())
                    .field("publicKey", Map::new().field("certificate", pem.as_str()))
                    .into()
            })
            .collect();
        docs.push(Doc::other(
            "ImageVerificationConfig",
            Map::new().field("rules", Node::Seq(rules)).into(),
        ));
    }
}
