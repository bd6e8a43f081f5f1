//! The Go struct tables: for every Talos struct a worker config uses, its
//! YAML fields in Go struct order with their Go type shape, `omitempty` and
//! `merge:"replace"` tags; and the multi-document kinds.

use super::{Field, Kind, StructDef, Ty};

/// `yaml:"name,omitempty"`
const fn o(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty,
        omitempty: true,
        replace: false,
    }
}
/// `yaml:"name"`
const fn r(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty,
        omitempty: false,
        replace: false,
    }
}
/// `yaml:"name" merge:"replace"`
const fn rr(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty,
        omitempty: false,
        replace: true,
    }
}

const PBOOL: Ty = Ty::Ptr(&Ty::Bool);
const PINT: Ty = Ty::Ptr(&Ty::Int);
const PSTR: Ty = Ty::Ptr(&Ty::Str);
const STRS: Ty = Ty::Seq(&Ty::Str);
const SMAP: Ty = Ty::Map(&Ty::Str);

const fn st(name: &'static str, fields: &'static [Field]) -> StructDef {
    StructDef { name, fields }
}

// ---- x509 (siderolabs/crypto) -------------------------------------------

pub const CERT_AND_KEY: StructDef = st(
    "PEMEncodedCertificateAndKey",
    &[r("crt", Ty::Str), r("key", Ty::Str)],
);
const CERT: StructDef = st("PEMEncodedCertificate", &[r("crt", Ty::Str)]);
const KEY: StructDef = st("PEMEncodedKey", &[r("key", Ty::Str)]);

// ---- v1alpha1 ----------------------------------------------------------

pub const CONFIG: StructDef = st(
    "v1alpha1.Config",
    &[
        r("version", Ty::Str),
        o("debug", PBOOL),
        o("persist", PBOOL),
        r("machine", Ty::PtrStruct(&MACHINE)),
        r("cluster", Ty::PtrStruct(&CLUSTER)),
    ],
);

pub const MACHINE: StructDef = st(
    "MachineConfig",
    &[
        r("type", Ty::Str),
        r("token", Ty::Str),
        o("ca", Ty::PtrStruct(&CERT_AND_KEY)),
        o("acceptedCAs", Ty::Seq(&Ty::PtrStruct(&CERT))),
        r("certSANs", STRS),
        o("controlPlane", Ty::PtrStruct(&MACHINE_CONTROL_PLANE)),
        o("kubelet", Ty::PtrStruct(&KUBELET)),
        o("pods", Ty::Seq(&Ty::Free)),
        o("network", Ty::PtrStruct(&NETWORK)),
        o("disks", Ty::Seq(&Ty::PtrStruct(&MACHINE_DISK))),
        o("install", Ty::PtrStruct(&INSTALL)),
        o("files", Ty::Seq(&Ty::PtrStruct(&MACHINE_FILE))),
        o("env", SMAP),
        o("time", Ty::PtrStruct(&TIME)),
        o("sysctls", SMAP),
        o("sysfs", SMAP),
        o("registries", Ty::Struct(&REGISTRIES)),
        o(
            "systemDiskEncryption",
            Ty::PtrStruct(&SYSTEM_DISK_ENCRYPTION),
        ),
        o("features", Ty::PtrStruct(&FEATURES)),
        o("udev", Ty::PtrStruct(&UDEV)),
        o("logging", Ty::PtrStruct(&LOGGING)),
        o("kernel", Ty::PtrStruct(&KERNEL)),
        o("seccompProfiles", Ty::Seq(&Ty::PtrStruct(&SECCOMP_PROFILE))),
        o("baseRuntimeSpecOverrides", Ty::Free),
        o("nodeLabels", SMAP),
        o("nodeAnnotations", SMAP),
        o("nodeTaints", SMAP),
    ],
);

const SECCOMP_PROFILE: StructDef = st(
    "MachineSeccompProfile",
    &[r("name", Ty::Str), r("value", Ty::Free)],
);

pub const CLUSTER: StructDef = st(
    "ClusterConfig",
    &[
        o("id", Ty::Str),
        o("secret", Ty::Str),
        o("controlPlane", Ty::PtrStruct(&CONTROL_PLANE)),
        o("clusterName", Ty::Str),
        o("network", Ty::PtrStruct(&CLUSTER_NETWORK)),
        o("token", Ty::Str),
        o("aescbcEncryptionSecret", Ty::Str),
        o("secretboxEncryptionSecret", Ty::Str),
        o("ca", Ty::PtrStruct(&CERT_AND_KEY)),
        o("acceptedCAs", Ty::Seq(&Ty::PtrStruct(&CERT))),
        o("aggregatorCA", Ty::PtrStruct(&CERT_AND_KEY)),
        o("serviceAccount", Ty::PtrStruct(&KEY)),
        o("apiServer", Ty::PtrStruct(&API_SERVER)),
        o("controllerManager", Ty::PtrStruct(&CONTROLLER_MANAGER)),
        o("proxy", Ty::PtrStruct(&PROXY)),
        o("scheduler", Ty::PtrStruct(&SCHEDULER)),
        o("discovery", Ty::PtrStruct(&CLUSTER_DISCOVERY)),
        o("etcd", Ty::PtrStruct(&ETCD)),
        o("coreDNS", Ty::PtrStruct(&COREDNS)),
        o(
            "externalCloudProvider",
            Ty::PtrStruct(&EXTERNAL_CLOUD_PROVIDER),
        ),
        o("extraManifests", STRS),
        o("extraManifestHeaders", SMAP),
        o("inlineManifests", Ty::Seq(&Ty::Struct(&INLINE_MANIFEST))),
        o("adminKubeconfig", Ty::PtrStruct(&ADMIN_KUBECONFIG)),
        o("allowSchedulingOnMasters", PBOOL),
        o("allowSchedulingOnControlPlanes", PBOOL),
    ],
);

const LINUX_ID_MAPPING: StructDef = st(
    "LinuxIDMapping",
    &[
        r("containerID", Ty::Int),
        r("hostID", Ty::Int),
        r("size", Ty::Int),
    ],
);

const EXTRA_MOUNT: StructDef = st(
    "ExtraMount",
    &[
        r("destination", Ty::Str),
        o("type", Ty::Str),
        o("source", Ty::Str),
        o("options", STRS),
        o("uidMappings", Ty::Seq(&Ty::Struct(&LINUX_ID_MAPPING))),
        o("gidMappings", Ty::Seq(&Ty::Struct(&LINUX_ID_MAPPING))),
    ],
);

const MACHINE_CONTROL_PLANE: StructDef = st(
    "MachineControlPlaneConfig",
    &[
        o("controllerManager", Ty::PtrStruct(&DISABLED)),
        o("scheduler", Ty::PtrStruct(&DISABLED)),
    ],
);
const DISABLED: StructDef = st("MachineDisabledConfig", &[o("disabled", PBOOL)]);

pub const KUBELET: StructDef = st(
    "KubeletConfig",
    &[
        o("image", Ty::Str),
        o("clusterDNS", STRS),
        o("extraArgs", Ty::Args),
        o("extraMounts", Ty::Seq(&Ty::Struct(&EXTRA_MOUNT))),
        o("extraConfig", Ty::Free),
        o("credentialProviderConfig", Ty::Free),
        o("defaultRuntimeSeccompProfileEnabled", PBOOL),
        o("registerWithFQDN", PBOOL),
        o("nodeIP", Ty::PtrStruct(&VALID_SUBNETS)),
        o("skipNodeRegistration", PBOOL),
        o("disableManifestsDirectory", PBOOL),
    ],
);
const VALID_SUBNETS: StructDef = st("KubeletNodeIPConfig", &[o("validSubnets", STRS)]);

pub const NETWORK: StructDef = st(
    "NetworkConfig",
    &[
        o("hostname", Ty::Str),
        o("interfaces", Ty::Keyed(&DEVICE, "interface")),
        o("nameservers", STRS),
        o("searchDomains", STRS),
        o("extraHostEntries", Ty::Seq(&Ty::PtrStruct(&EXTRA_HOST))),
        o("kubespan", Ty::PtrStruct(&NETWORK_KUBESPAN)),
        o("disableSearchDomain", PBOOL),
    ],
);

pub const EXTRA_HOST: StructDef = st("ExtraHost", &[r("ip", Ty::Str), r("aliases", STRS)]);

const DEVICE: StructDef = st(
    "Device",
    &[
        o("interface", Ty::Str),
        o("deviceSelector", Ty::PtrStruct(&DEVICE_SELECTOR)),
        o("addresses", STRS),
        o("cidr", Ty::Str),
        o("routes", Ty::Seq(&Ty::PtrStruct(&ROUTE))),
        o("bond", Ty::PtrStruct(&BOND)),
        o("bridge", Ty::PtrStruct(&BRIDGE)),
        o("bridgePort", Ty::PtrStruct(&BRIDGE_PORT)),
        o("vlans", Ty::Keyed(&VLAN, "vlanId")),
        o("mtu", Ty::Int),
        o("dhcp", PBOOL),
        o("ignore", PBOOL),
        o("dummy", PBOOL),
        o("dhcpOptions", Ty::PtrStruct(&DHCP_OPTIONS)),
        o("wireguard", Ty::PtrStruct(&WIREGUARD)),
        o("vip", Ty::PtrStruct(&VIP)),
    ],
);
const DEVICE_SELECTOR: StructDef = st(
    "NetworkDeviceSelector",
    &[
        o("busPath", Ty::Str),
        o("hardwareAddr", Ty::Str),
        o("permanentAddr", Ty::Str),
        o("pciID", Ty::Str),
        o("driver", Ty::Str),
        o("physical", PBOOL),
    ],
);
const DHCP_OPTIONS: StructDef = st(
    "DHCPOptions",
    &[
        r("routeMetric", Ty::Int),
        o("ipv4", PBOOL),
        o("ipv6", PBOOL),
        o("duidv6", Ty::Str),
    ],
);
const WIREGUARD: StructDef = st(
    "DeviceWireguardConfig",
    &[
        o("privateKey", Ty::Str),
        o("listenPort", Ty::Int),
        o("firewallMark", Ty::Int),
        o("peers", Ty::Seq(&Ty::PtrStruct(&WIREGUARD_PEER))),
    ],
);
const WIREGUARD_PEER: StructDef = st(
    "DeviceWireguardPeer",
    &[
        o("publicKey", Ty::Str),
        o("endpoint", Ty::Str),
        o("persistentKeepaliveInterval", Ty::Dur),
        o("allowedIPs", STRS),
    ],
);
const VIP: StructDef = st(
    "DeviceVIPConfig",
    &[
        o("ip", Ty::Str),
        o("equinixMetal", Ty::PtrStruct(&API_TOKEN)),
        o("hcloud", Ty::PtrStruct(&API_TOKEN)),
    ],
);
const API_TOKEN: StructDef = st("VIPAPIToken", &[r("apiToken", Ty::Str)]);
const BOND: StructDef = st(
    "Bond",
    &[
        r("interfaces", STRS),
        o("deviceSelectors", Ty::Seq(&Ty::Struct(&DEVICE_SELECTOR))),
        o("arpIPTarget", STRS),
        r("mode", Ty::Str),
        o("xmitHashPolicy", Ty::Str),
        o("lacpRate", Ty::Str),
        o("adActorSystem", Ty::Str),
        o("arpValidate", Ty::Str),
        o("arpAllTargets", Ty::Str),
        o("primary", Ty::Str),
        o("primaryReselect", Ty::Str),
        o("failOverMac", Ty::Str),
        o("adSelect", Ty::Str),
        o("miimon", Ty::Int),
        o("updelay", Ty::Int),
        o("downdelay", Ty::Int),
        o("arpInterval", Ty::Int),
        o("resendIgmp", Ty::Int),
        o("minLinks", Ty::Int),
        o("lpInterval", Ty::Int),
        o("packetsPerSlave", Ty::Int),
        o("numPeerNotif", Ty::Int),
        o("tlbDynamicLb", Ty::Int),
        o("allSlavesActive", Ty::Int),
        o("useCarrier", PBOOL),
        o("adActorSysPrio", Ty::Int),
        o("adUserPortKey", Ty::Int),
        o("peerNotifyDelay", Ty::Int),
    ],
);
const BRIDGE: StructDef = st(
    "Bridge",
    &[
        r("interfaces", STRS),
        o("stp", Ty::PtrStruct(&ENABLED)),
        o("vlan", Ty::PtrStruct(&BRIDGE_VLAN)),
    ],
);
const ENABLED: StructDef = st("Enabled", &[o("enabled", PBOOL)]);
const BRIDGE_VLAN: StructDef = st("BridgeVLAN", &[o("vlanFiltering", PBOOL)]);
const BRIDGE_PORT: StructDef = st("BridgePort", &[o("master", Ty::Str)]);
const VLAN: StructDef = st(
    "Vlan",
    &[
        o("addresses", STRS),
        o("cidr", Ty::Str),
        r("routes", Ty::Seq(&Ty::PtrStruct(&ROUTE))),
        o("dhcp", PBOOL),
        r("vlanId", Ty::Int),
        o("mtu", Ty::Int),
        o("vip", Ty::PtrStruct(&VIP)),
        o("dhcpOptions", Ty::PtrStruct(&DHCP_OPTIONS)),
    ],
);
const ROUTE: StructDef = st(
    "Route",
    &[
        r("network", Ty::Str),
        r("gateway", Ty::Str),
        o("source", Ty::Str),
        o("metric", Ty::Int),
        o("mtu", Ty::Int),
    ],
);
const NETWORK_KUBESPAN: StructDef = st(
    "NetworkKubeSpan",
    &[
        o("enabled", PBOOL),
        o("advertiseKubernetesNetworks", PBOOL),
        o("allowDownPeerBypass", PBOOL),
        o("harvestExtraEndpoints", PBOOL),
        o("mtu", PINT),
        o("filters", Ty::PtrStruct(&KUBESPAN_FILTERS)),
    ],
);
const KUBESPAN_FILTERS: StructDef = st(
    "KubeSpanFilters",
    &[o("endpoints", STRS), o("excludeAdvertisedNetworks", STRS)],
);

pub const INSTALL: StructDef = st(
    "InstallConfig",
    &[
        o("disk", Ty::Str),
        o("diskSelector", Ty::PtrStruct(&INSTALL_DISK_SELECTOR)),
        o("extraKernelArgs", STRS),
        o("image", Ty::Str),
        o("extensions", Ty::Seq(&Ty::Struct(&INSTALL_EXTENSION))),
        o("bootloader", PBOOL),
        r("wipe", PBOOL),
        o("legacyBIOSSupport", PBOOL),
        o("grubUseUKICmdline", PBOOL),
    ],
);
const INSTALL_DISK_SELECTOR: StructDef = st(
    "InstallDiskSelector",
    &[
        o("size", Ty::Scalar),
        o("name", Ty::Str),
        o("model", Ty::Str),
        o("serial", Ty::Str),
        o("modalias", Ty::Str),
        o("uuid", Ty::Str),
        o("wwid", Ty::Str),
        o("type", Ty::Str),
        o("busPath", Ty::Str),
    ],
);
const INSTALL_EXTENSION: StructDef = st("InstallExtensionConfig", &[r("image", Ty::Str)]);
const TIME: StructDef = st(
    "TimeConfig",
    &[
        o("disabled", PBOOL),
        o("servers", STRS),
        o("bootTimeout", Ty::Dur),
    ],
);
pub const REGISTRIES: StructDef = st(
    "RegistriesConfig",
    &[
        o("mirrors", Ty::Map(&Ty::PtrStruct(&LEGACY_MIRROR))),
        o("config", Ty::Map(&Ty::PtrStruct(&LEGACY_REGISTRY_CONFIG))),
    ],
);
pub const LEGACY_MIRROR: StructDef = st(
    "RegistryMirrorConfig",
    &[
        r("endpoints", STRS),
        o("overridePath", PBOOL),
        o("skipFallback", PBOOL),
    ],
);
const LEGACY_REGISTRY_CONFIG: StructDef = st(
    "RegistryConfig",
    &[
        o("tls", Ty::PtrStruct(&LEGACY_REGISTRY_TLS)),
        o("auth", Ty::PtrStruct(&REGISTRY_AUTH_FIELDS)),
    ],
);
const REGISTRY_AUTH_FIELDS: StructDef = st(
    "RegistryAuthConfig",
    &[
        o("username", Ty::Str),
        o("password", Ty::Str),
        o("auth", Ty::Str),
        o("identityToken", Ty::Str),
    ],
);
const LEGACY_REGISTRY_TLS: StructDef = st(
    "RegistryTLSConfig",
    &[
        o("clientIdentity", Ty::PtrStruct(&CERT_AND_KEY)),
        o("ca", Ty::Str),
        o("insecureSkipVerify", PBOOL),
    ],
);
const SYSTEM_DISK_ENCRYPTION: StructDef = st(
    "SystemDiskEncryptionConfig",
    &[
        o("state", Ty::PtrStruct(&ENCRYPTION)),
        o("ephemeral", Ty::PtrStruct(&ENCRYPTION)),
    ],
);
const ENCRYPTION: StructDef = st(
    "EncryptionConfig",
    &[
        r("provider", Ty::Str),
        r("keys", Ty::Seq(&Ty::PtrStruct(&ENCRYPTION_KEY))),
        o("cipher", Ty::Str),
        o("keySize", Ty::Int),
        o("blockSize", Ty::Int),
        o("options", STRS),
    ],
);
const ENCRYPTION_KEY: StructDef = st(
    "EncryptionKey",
    &[
        o("static", Ty::PtrStruct(&KEY_STATIC)),
        o("nodeID", Ty::PtrStruct(&EMPTY)),
        o("kms", Ty::PtrStruct(&KEY_KMS)),
        r("slot", Ty::Int),
        o("tpm", Ty::PtrStruct(&KEY_TPM)),
    ],
);
const EMPTY: StructDef = st("Empty", &[]);
const KEY_STATIC: StructDef = st("EncryptionKeyStatic", &[o("passphrase", Ty::Str)]);
const KEY_KMS: StructDef = st("EncryptionKeyKMS", &[r("endpoint", Ty::Str)]);
const KEY_TPM: StructDef = st(
    "EncryptionKeyTPM",
    &[o("checkSecurebootStatusOnEnroll", PBOOL)],
);
pub const FEATURES: StructDef = st(
    "FeaturesConfig",
    &[
        o("rbac", PBOOL),
        o("stableHostname", PBOOL),
        o("kubernetesTalosAPIAccess", Ty::PtrStruct(&TALOS_API_ACCESS)),
        o("apidCheckExtKeyUsage", PBOOL),
        o("diskQuotaSupport", PBOOL),
        o("kubePrism", Ty::PtrStruct(&KUBE_PRISM)),
        o("hostDNS", Ty::PtrStruct(&HOST_DNS)),
        o("imageCache", Ty::PtrStruct(&IMAGE_CACHE)),
        o("nodeAddressSortAlgorithm", Ty::Str),
    ],
);
const KUBE_PRISM: StructDef = st("KubePrism", &[o("enabled", PBOOL), o("port", Ty::Int)]);
const IMAGE_CACHE: StructDef = st("ImageCacheConfig", &[o("localEnabled", PBOOL)]);
const TALOS_API_ACCESS: StructDef = st(
    "KubernetesTalosAPIAccessConfig",
    &[
        o("enabled", PBOOL),
        o("allowedRoles", STRS),
        o("allowedKubernetesNamespaces", STRS),
    ],
);
pub const HOST_DNS: StructDef = st(
    "HostDNSConfig",
    &[
        o("enabled", PBOOL),
        o("forwardKubeDNSToHost", PBOOL),
        o("resolveMemberNames", PBOOL),
    ],
);
const UDEV: StructDef = st("UdevConfig", &[o("rules", STRS)]);
const LOGGING: StructDef = st(
    "LoggingConfig",
    &[r(
        "destinations",
        Ty::Seq(&Ty::Struct(&LOGGING_DESTINATION)),
    )],
);
const LOGGING_DESTINATION: StructDef = st(
    "LoggingDestination",
    &[
        r("endpoint", PSTR),
        r("format", Ty::Str),
        o("extraTags", SMAP),
    ],
);
const KERNEL: StructDef = st(
    "KernelConfig",
    &[o("modules", Ty::Seq(&Ty::PtrStruct(&KERNEL_MODULE)))],
);
const KERNEL_MODULE: StructDef = st(
    "KernelModuleConfig",
    &[r("name", Ty::Str), o("parameters", STRS)],
);
const MACHINE_DISK: StructDef = st(
    "MachineDisk",
    &[
        o("device", Ty::Str),
        o("partitions", Ty::Seq(&Ty::PtrStruct(&DISK_PARTITION))),
    ],
);
const DISK_PARTITION: StructDef = st(
    "DiskPartition",
    &[o("size", Ty::Scalar), o("mountpoint", Ty::Str)],
);
const MACHINE_FILE: StructDef = st(
    "MachineFile",
    &[
        r("content", Ty::Str),
        r("permissions", Ty::Scalar),
        r("path", Ty::Str),
        r("op", Ty::Str),
    ],
);

pub const CONTROL_PLANE: StructDef = st(
    "ControlPlaneConfig",
    &[r("endpoint", PSTR), o("localAPIServerPort", Ty::Int)],
);
pub const CLUSTER_NETWORK: StructDef = st(
    "ClusterNetworkConfig",
    &[
        o("cni", Ty::PtrStruct(&CNI)),
        r("dnsDomain", Ty::Str),
        rr("podSubnets", STRS),
        rr("serviceSubnets", STRS),
    ],
);
const CNI: StructDef = st(
    "CNIConfig",
    &[
        o("name", Ty::Str),
        o("urls", STRS),
        o("flannel", Ty::PtrStruct(&FLANNEL)),
    ],
);
const FLANNEL: StructDef = st(
    "FlannelCNIConfig",
    &[o("extraArgs", STRS), o("kubeNetworkPoliciesEnabled", PBOOL)],
);
const RESOURCES: StructDef = st(
    "ResourcesConfig",
    &[o("requests", Ty::Free), o("limits", Ty::Free)],
);
const VOLUME_MOUNT: StructDef = st(
    "VolumeMountConfig",
    &[
        r("hostPath", Ty::Str),
        r("mountPath", Ty::Str),
        o("readonly", Ty::Bool),
    ],
);
const ADMISSION_PLUGIN: StructDef = st(
    "AdmissionPluginConfig",
    &[r("name", Ty::Str), r("configuration", Ty::Free)],
);
const AUTHORIZER: StructDef = st(
    "AuthorizationConfigAuthorizerConfig",
    &[
        r("type", Ty::Str),
        r("name", Ty::Str),
        o("webhook", Ty::Free),
    ],
);
const API_SERVER: StructDef = st(
    "APIServerConfig",
    &[
        o("image", Ty::Str),
        o("extraArgs", Ty::Args),
        o("extraVolumes", Ty::Seq(&Ty::Struct(&VOLUME_MOUNT))),
        o("env", SMAP),
        o("certSANs", STRS),
        o("disablePodSecurityPolicy", PBOOL),
        o("admissionControl", Ty::Keyed(&ADMISSION_PLUGIN, "name")),
        Field {
            name: "auditPolicy",
            ty: Ty::Free,
            omitempty: true,
            replace: true,
        },
        o("resources", Ty::PtrStruct(&RESOURCES)),
        o("authorizationConfig", Ty::Seq(&Ty::PtrStruct(&AUTHORIZER))),
    ],
);
const CONTROLLER_MANAGER: StructDef = st(
    "ControllerManagerConfig",
    &[
        o("image", Ty::Str),
        o("extraArgs", Ty::Args),
        o("extraVolumes", Ty::Seq(&Ty::Struct(&VOLUME_MOUNT))),
        o("env", SMAP),
        o("resources", Ty::PtrStruct(&RESOURCES)),
    ],
);
const PROXY: StructDef = st(
    "ProxyConfig",
    &[
        o("disabled", PBOOL),
        o("image", Ty::Str),
        o("mode", Ty::Str),
        o("extraArgs", Ty::Args),
    ],
);
const SCHEDULER: StructDef = st(
    "SchedulerConfig",
    &[
        o("image", Ty::Str),
        o("extraArgs", Ty::Args),
        o("extraVolumes", Ty::Seq(&Ty::Struct(&VOLUME_MOUNT))),
        o("env", SMAP),
        o("resources", Ty::PtrStruct(&RESOURCES)),
        o("config", Ty::Free),
    ],
);
const ETCD: StructDef = st(
    "EtcdConfig",
    &[
        o("image", Ty::Str),
        r("ca", Ty::PtrStruct(&CERT_AND_KEY)),
        o("extraArgs", Ty::Args),
        o("subnet", Ty::Str),
        o("advertisedSubnets", STRS),
        o("listenSubnets", STRS),
    ],
);
const COREDNS: StructDef = st("CoreDNS", &[o("disabled", PBOOL), o("image", Ty::Str)]);
const EXTERNAL_CLOUD_PROVIDER: StructDef = st(
    "ExternalCloudProviderConfig",
    &[o("enabled", PBOOL), o("manifests", STRS)],
);
const INLINE_MANIFEST: StructDef = st(
    "ClusterInlineManifest",
    &[r("name", Ty::Str), r("contents", Ty::Str)],
);
const ADMIN_KUBECONFIG: StructDef = st("AdminKubeconfigConfig", &[o("certLifetime", Ty::Dur)]);
pub const CLUSTER_DISCOVERY: StructDef = st(
    "ClusterDiscoveryConfig",
    &[
        o("enabled", PBOOL),
        r("registries", Ty::Struct(&DISCOVERY_REGISTRIES)),
    ],
);
const DISCOVERY_REGISTRIES: StructDef = st(
    "DiscoveryRegistriesConfig",
    &[
        r("kubernetes", Ty::Struct(&REGISTRY_KUBERNETES)),
        r("service", Ty::Struct(&REGISTRY_SERVICE)),
    ],
);
const REGISTRY_KUBERNETES: StructDef = st("RegistryKubernetesConfig", &[o("disabled", PBOOL)]);
const REGISTRY_SERVICE: StructDef = st(
    "RegistryServiceConfig",
    &[o("disabled", PBOOL), o("endpoint", Ty::Str)],
);

// ---- multi-document kinds ----------------------------------------------

const REGISTRY_MIRROR: StructDef = st(
    "RegistryMirrorConfig",
    &[
        r("name", Ty::Str),
        o("endpoints", Ty::Seq(&Ty::Struct(&REGISTRY_ENDPOINT))),
        o("skipFallback", PBOOL),
    ],
);
const REGISTRY_ENDPOINT: StructDef = st(
    "RegistryEndpoint",
    &[r("url", Ty::Str), o("overridePath", PBOOL)],
);
const REGISTRY_AUTH: StructDef = st(
    "RegistryAuthConfig",
    &[
        r("name", Ty::Str),
        o("username", Ty::Str),
        o("password", Ty::Str),
        o("auth", Ty::Str),
        o("identityToken", Ty::Str),
    ],
);
const META_CERT_AND_KEY: StructDef = st(
    "CertificateAndKey",
    &[o("cert", Ty::Str), o("key", Ty::Str)],
);
const REGISTRY_TLS: StructDef = st(
    "RegistryTLSConfig",
    &[
        r("name", Ty::Str),
        o("clientIdentity", Ty::PtrStruct(&META_CERT_AND_KEY)),
        o("ca", Ty::Str),
        o("insecureSkipVerify", PBOOL),
    ],
);
const HOSTNAME: StructDef = st("HostnameConfig", &[o("auto", PSTR), o("hostname", Ty::Str)]);
const RESOLVER: StructDef = st(
    "ResolverConfig",
    &[
        o("nameservers", Ty::Seq(&Ty::Struct(&NAMESERVER))),
        o("searchDomains", Ty::Struct(&SEARCH_DOMAINS)),
        o("hostDNS", Ty::Struct(&HOST_DNS)),
    ],
);
const NAMESERVER: StructDef = st(
    "NameserverConfig",
    &[
        r("address", Ty::Str),
        o("protocol", Ty::Str),
        o("tlsServerName", Ty::Str),
    ],
);
const SEARCH_DOMAINS: StructDef = st(
    "SearchDomainsConfig",
    &[o("domains", STRS), o("disableDefault", PBOOL)],
);
const IMAGE_VERIFICATION: StructDef = st(
    "ImageVerificationConfig",
    &[o("rules", Ty::Keyed(&IMAGE_VERIFICATION_RULE, "image"))],
);
/// `security.ImageVerificationRuleV1Alpha1` (Talos v1.13:
/// pkg/machinery/config/types/security/image_verification.go); rules merge
/// by `image`, as its `ImageVerificationRules.Merge`.
const IMAGE_VERIFICATION_RULE: StructDef = st(
    "ImageVerificationRule",
    &[
        o("image", Ty::Str),
        o("skip", PBOOL),
        o("deny", PBOOL),
        o("keyless", Ty::PtrStruct(&IMAGE_KEYLESS_VERIFIER)),
        o("publicKey", Ty::PtrStruct(&IMAGE_PUBLIC_KEY_VERIFIER)),
    ],
);
const IMAGE_KEYLESS_VERIFIER: StructDef = st(
    "ImageKeylessVerifier",
    &[
        o("issuer", Ty::Str),
        o("subject", Ty::Str),
        o("subjectRegex", Ty::Str),
    ],
);
const IMAGE_PUBLIC_KEY_VERIFIER: StructDef =
    st("ImagePublicKeyVerifier", &[o("certificate", Ty::Str)]);
const STATIC_HOST: StructDef = st(
    "StaticHostConfig",
    &[r("name", Ty::Str), r("hostnames", STRS)],
);
const KUBESPAN: StructDef = st(
    "KubeSpanConfig",
    &[
        o("enabled", PBOOL),
        o("advertiseKubernetesNetworks", PBOOL),
        o("allowDownPeerBypass", PBOOL),
        o("harvestExtraEndpoints", PBOOL),
        o("mtu", PINT),
        o("filters", Ty::PtrStruct(&KUBESPAN_FILTERS)),
    ],
);
const SYSCTL: StructDef = st("SysctlConfig", &[r("params", SMAP)]);
const DISCOVERY_SERVICE: StructDef = st(
    "DiscoveryServiceConfig",
    &[r("name", Ty::Str), r("endpoint", Ty::Str)],
);
const DISCOVERY_IDENTITY: StructDef = st(
    "DiscoveryIdentityConfig",
    &[r("clusterID", Ty::Str), r("clusterSecret", Ty::Str)],
);
const VOLUME: StructDef = st(
    "VolumeConfig",
    &[
        r("name", Ty::Str),
        o("provisioning", Ty::Free),
        o("filesystem", Ty::Free),
        o("encryption", Ty::Free),
        o("mount", Ty::Struct(&VOLUME_MOUNT_SPEC)),
        o("trim", Ty::Free),
        o("scrub", Ty::Free),
    ],
);
const VOLUME_MOUNT_SPEC: StructDef = st(
    "MountSpec",
    &[o("secure", PBOOL), o("disableAccessTime", PBOOL)],
);
const FILESYSTEM_TRIM: StructDef = st("FilesystemTrimConfig", &[o("interval", Ty::Dur)]);
const SECURITY_PROFILE: StructDef = st("SecurityProfileConfig", &[o("workloadIsolation", PBOOL)]);
const UNATTENDED_INSTALL: StructDef = st(
    "UnattendedInstallConfig",
    &[
        o("reboot", PBOOL),
        r("installer", Ty::Struct(&INSTALLER_SPEC)),
        r("provisioning", Ty::Struct(&PROVISIONING_SPEC)),
    ],
);
const INSTALLER_SPEC: StructDef = st("InstallerSpec", &[o("image", Ty::Str)]);
const PROVISIONING_SPEC: StructDef = st(
    "ProvisioningSpec",
    &[
        o("diskSelector", Ty::Struct(&DISK_SELECTOR_SPEC)),
        o("wipe", PBOOL),
    ],
);
const DISK_SELECTOR_SPEC: StructDef = st("DiskSelectorSpec", &[o("match", Ty::Str)]);
const KUBE_CLUSTER: StructDef = st(
    "KubeClusterConfig",
    &[r("clusterName", Ty::Str), r("endpoint", Ty::Str)],
);
const KUBE_NODE: StructDef = st(
    "KubeNodeConfig",
    &[
        o("skipNodeRegistration", PBOOL),
        o("registerWithFQDN", PBOOL),
        r("nodeIP", Ty::Struct(&VALID_SUBNETS)),
        o("labels", SMAP),
        o("annotations", SMAP),
        o("taints", SMAP),
    ],
);
const KUBE_KUBELET: StructDef = st(
    "KubeletConfig",
    &[
        r("image", Ty::Str),
        r("config", Ty::Free),
        o("extraArgs", Ty::Args),
        o("clusterDNS", STRS),
        o("defaultRuntimeSeccompProfileEnabled", PBOOL),
    ],
);
const KUBE_NETWORK: StructDef = st(
    "KubeNetworkConfig",
    &[
        r("dnsDomain", Ty::Str),
        rr("podSubnets", STRS),
        rr("serviceSubnets", STRS),
        o("nodeCIDRMaskSizeIPv4", Ty::Int),
        o("nodeCIDRMaskSizeIPv6", Ty::Int),
    ],
);
const KUBE_API_SERVER_CA: StructDef = st(
    "KubeAPIServerCAConfig",
    &[
        o("issuingCA", Ty::PtrStruct(&META_CERT_AND_KEY)),
        o("acceptedCAs", STRS),
    ],
);
const KUBE_PRISM_DOC: StructDef = st(
    "KubePrismConfig",
    &[r("port", Ty::Int), o("tlsServerName", Ty::Str)],
);

const fn kind(
    kind: &'static str,
    named: bool,
    def: &'static StructDef,
    schema: &'static str,
) -> Kind {
    Kind {
        kind,
        named,
        def,
        schema,
    }
}

/// Every multi-document kind this generator writes or accepts in patches.
pub const KINDS: &[Kind] = &[
    kind(
        "RegistryMirrorConfig",
        true,
        &REGISTRY_MIRROR,
        "cri.RegistryMirrorConfigV1Alpha1",
    ),
    kind(
        "RegistryAuthConfig",
        true,
        &REGISTRY_AUTH,
        "cri.RegistryAuthConfigV1Alpha1",
    ),
    kind(
        "RegistryTLSConfig",
        true,
        &REGISTRY_TLS,
        "cri.RegistryTLSConfigV1Alpha1",
    ),
    kind(
        "HostnameConfig",
        false,
        &HOSTNAME,
        "network.HostnameConfigV1Alpha1",
    ),
    kind(
        "ResolverConfig",
        false,
        &RESOLVER,
        "network.ResolverConfigV1Alpha1",
    ),
    kind(
        "StaticHostConfig",
        true,
        &STATIC_HOST,
        "network.StaticHostConfigV1Alpha1",
    ),
    kind(
        "KubeSpanConfig",
        false,
        &KUBESPAN,
        "network.KubeSpanConfigV1Alpha1",
    ),
    kind(
        "SysctlConfig",
        false,
        &SYSCTL,
        "runtime.SysctlConfigV1Alpha1",
    ),
    kind(
        "DiscoveryServiceConfig",
        true,
        &DISCOVERY_SERVICE,
        "cluster.DiscoveryServiceConfigV1Alpha1",
    ),
    kind(
        "DiscoveryIdentityConfig",
        false,
        &DISCOVERY_IDENTITY,
        "cluster.DiscoveryIdentityConfigV1Alpha1",
    ),
    kind("VolumeConfig", true, &VOLUME, "block.VolumeConfigV1Alpha1"),
    kind(
        "FilesystemTrimConfig",
        false,
        &FILESYSTEM_TRIM,
        "block.FilesystemTrimConfigV1Alpha1",
    ),
    kind(
        "SecurityProfileConfig",
        false,
        &SECURITY_PROFILE,
        "runtime.SecurityProfileConfigV1Alpha1",
    ),
    kind(
        "UnattendedInstallConfig",
        false,
        &UNATTENDED_INSTALL,
        "runtime.UnattendedInstallConfigV1Alpha1",
    ),
    kind(
        "KubeClusterConfig",
        false,
        &KUBE_CLUSTER,
        "k8s.KubeClusterConfigV1Alpha1",
    ),
    kind(
        "KubeNodeConfig",
        false,
        &KUBE_NODE,
        "k8s.KubeNodeConfigV1Alpha1",
    ),
    kind(
        "KubeletConfig",
        false,
        &KUBE_KUBELET,
        "k8s.KubeletConfigV1Alpha1",
    ),
    kind(
        "KubeNetworkConfig",
        false,
        &KUBE_NETWORK,
        "k8s.KubeNetworkConfigV1Alpha1",
    ),
    kind(
        "KubeAPIServerCAConfig",
        false,
        &KUBE_API_SERVER_CA,
        "k8s.KubeAPIServerCAConfigV1Alpha1",
    ),
    kind(
        "KubePrismConfig",
        false,
        &KUBE_PRISM_DOC,
        "k8s.KubePrismConfigV1Alpha1",
    ),
    // Not in Talos' published JSON schemas (v1.13.9, v1.14.0-rc.1) although
    // Talos accepts it from v1.13; the name is what the schema would use.
    kind(
        "ImageVerificationConfig",
        false,
        &IMAGE_VERIFICATION,
        "security.ImageVerificationConfigV1Alpha1",
    ),
];
