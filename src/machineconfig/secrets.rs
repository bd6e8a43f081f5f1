//! The talosctl secrets bundle: read (`--with-secrets`), generate fresh
//! (Talos' formats: `gen secrets`), and write (`--output-secrets`) in the
//! layout talosctl reads.
//!
//! Formats, as Talos generates them (`pkg/machinery/config/generate/secrets`):
//! trustd and bootstrap tokens `[0-9a-z]{6}.[0-9a-z]{16}`; cluster id
//! (URL-safe base64) and secret (standard base64) of 32 random bytes; the
//! secretbox encryption secret 32 random bytes, standard base64; CAs valid
//! ten years: Ed25519 for Talos (O=talos), ECDSA P-256 for Kubernetes
//! (O=kubernetes), etcd (O=etcd) and the aggregator (CN=front-proxy); the
//! service-account key ECDSA P-256 (Talos writes RSA from 1.7 on; the
//! key is for control planes and never reaches a worker config). Keys are
//! PEM in the blocks Go's x509 package reads: `EC PRIVATE KEY` (SEC 1) and
//! `ED25519 PRIVATE KEY` (PKCS #8).

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::goyaml::{Map, Node};

/// A certificate and key, each base64 of PEM, as the bundle stores them.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CertKey {
    #[serde(default)]
    pub crt: String,
    #[serde(default)]
    pub key: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KeyOnly {
    #[serde(default)]
    pub key: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub secret: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Secrets {
    #[serde(default)]
    pub bootstraptoken: String,
    #[serde(default)]
    pub secretboxencryptionsecret: String,
    #[serde(default)]
    pub aescbcencryptionsecret: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrustdInfo {
    #[serde(default)]
    pub token: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Certs {
    #[serde(default)]
    pub etcd: Option<CertKey>,
    #[serde(default)]
    pub k8s: Option<CertKey>,
    #[serde(default)]
    pub k8saggregator: Option<CertKey>,
    #[serde(default)]
    pub k8sserviceaccount: Option<KeyOnly>,
    #[serde(default)]
    pub os: Option<CertKey>,
}

/// A talosctl secrets bundle.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    pub cluster: Cluster,
    pub secrets: Secrets,
    pub trustdinfo: TrustdInfo,
    pub certs: Certs,
}

fn is_token(s: &str) -> bool {
    let ok = |p: &str, n: usize| {
        p.len() == n
            && p.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
    };
    match s.split_once('.') {
        Some((a, b)) => ok(a, 6) && ok(b, 16),
        None => false,
    }
}

impl Bundle {
    /// Parse a bundle file's text, checking what a worker config needs.
    pub fn parse(text: &str, what: &str) -> Result<Bundle> {
        let b: Bundle = crate::yaml::from_str(text, what)?;
        b.checked(what)
    }

    /// [`Bundle::parse`] behind a small cache of recently seen bundle
    /// texts (a service answers many requests with the same bundle; the
    /// cache holds at most 16 and compares whole texts).
    pub fn parse_cached(text: &str, what: &str) -> Result<std::sync::Arc<Bundle>> {
        use std::sync::{Arc, Mutex, OnceLock};
        type Cache = Mutex<Vec<(String, Arc<Bundle>)>>;
        static CACHE: OnceLock<Cache> = OnceLock::new();
        let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
        if let Ok(c) = cache.lock()
            && let Some((_, b)) = c.iter().find(|(t, _)| t == text)
        {
            return Ok(b.clone());
        }
        let b = Arc::new(Bundle::parse(text, what)?);
        if let Ok(mut c) = cache.lock() {
            if c.len() >= 16 {
                c.remove(0);
            }
            c.push((text.to_string(), b.clone()));
        }
        Ok(b)
    }

    /// A bundle given as a parsed tree.
    pub fn from_value(v: crate::yaml::Value, what: &str) -> Result<Bundle> {
        let b: Bundle = crate::yaml::from_value(v, what)?;
        b.checked(what)
    }

    fn checked(self, what: &str) -> Result<Bundle> {
        let b = self;
        let need = |v: &str, field: &str| -> Result<()> {
            if v.is_empty() {
                Err(Error::bad_input(format!("{what}: {field} is missing")))
            } else {
                Ok(())
            }
        };
        need(&b.cluster.id, "cluster.id")?;
        need(&b.cluster.secret, "cluster.secret")?;
        if !is_token(&b.trustdinfo.token) {
            return Err(Error::bad_input(format!(
                "{what}: trustdinfo.token is not a token of the form [0-9a-z]{{6}}.[0-9a-z]{{16}}"
            )));
        }
        if !is_token(&b.secrets.bootstraptoken) {
            return Err(Error::bad_input(format!(
                "{what}: secrets.bootstraptoken is not a token of the form [0-9a-z]{{6}}.[0-9a-z]{{16}}"
            )));
        }
        for (field, ck) in [("certs.os", &b.certs.os), ("certs.k8s", &b.certs.k8s)] {
            let Some(ck) = ck else {
                return Err(Error::bad_input(format!("{what}: {field} is missing")));
            };
            let pem = STANDARD
                .decode(ck.crt.trim())
                .map_err(|_| Error::bad_input(format!("{what}: {field}.crt is not base64")))?;
            if !pem.starts_with(b"-----BEGIN CERTIFICATE-----") {
                return Err(Error::bad_input(format!(
                    "{what}: {field}.crt is not a PEM certificate"
                )));
            }
        }
        Ok(b)
    }

    /// The OS (Talos) CA certificate, base64 PEM.
    pub fn os_crt(&self) -> &str {
        self.certs.os.as_ref().map(|c| c.crt.as_str()).unwrap_or("")
    }

    /// The Kubernetes CA certificate, base64 PEM.
    pub fn k8s_crt(&self) -> &str {
        self.certs
            .k8s
            .as_ref()
            .map(|c| c.crt.as_str())
            .unwrap_or("")
    }

    /// The Kubernetes CA certificate as PEM text.
    pub fn k8s_crt_pem(&self) -> String {
        STANDARD
            .decode(self.k8s_crt().trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default()
    }

    /// A fresh, complete bundle.
    pub fn generate() -> Result<Bundle> {
        let now = time::OffsetDateTime::now_utc();
        let ca = |alg: &'static rcgen::SignatureAlgorithm, org: Option<&str>, cn: Option<&str>| {
            new_ca(alg, org, cn, now)
        };
        let os = ca(&rcgen::PKCS_ED25519, Some("talos"), None)?;
        let k8s = ca(&rcgen::PKCS_ECDSA_P256_SHA256, Some("kubernetes"), None)?;
        let etcd = ca(&rcgen::PKCS_ECDSA_P256_SHA256, Some("etcd"), None)?;
        let aggregator = ca(&rcgen::PKCS_ECDSA_P256_SHA256, None, Some("front-proxy"))?;
        let sa = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
            .map_err(|e| Error::refused(format!("generating the service-account key: {e}")))?;
        Ok(Bundle {
            cluster: Cluster {
                id: URL_SAFE.encode(random_bytes(32)),
                secret: STANDARD.encode(random_bytes(32)),
            },
            secrets: Secrets {
                bootstraptoken: token(),
                secretboxencryptionsecret: STANDARD.encode(random_bytes(32)),
                aescbcencryptionsecret: String::new(),
            },
            trustdinfo: TrustdInfo { token: token() },
            certs: Certs {
                etcd: Some(etcd),
                k8s: Some(k8s),
                k8saggregator: Some(aggregator),
                k8sserviceaccount: Some(KeyOnly {
                    key: STANDARD.encode(ec_key_pem(&sa)),
                }),
                os: Some(os),
            },
        })
    }

    /// The bundle in talosctl's layout.
    pub fn to_yaml(&self) -> String {
        let ck = |c: &Option<CertKey>| -> Node {
            let c = c.clone().unwrap_or_default();
            Map::new().field("crt", c.crt).field("key", c.key).into()
        };
        let mut certs = Map::new();
        if self.certs.etcd.is_some() {
            certs.push("etcd", ck(&self.certs.etcd));
        }
        if self.certs.k8s.is_some() {
            certs.push("k8s", ck(&self.certs.k8s));
        }
        if self.certs.k8saggregator.is_some() {
            certs.push("k8saggregator", ck(&self.certs.k8saggregator));
        }
        if let Some(sa) = &self.certs.k8sserviceaccount {
            certs.push(
                "k8sserviceaccount",
                Map::new().field("key", sa.key.as_str()),
            );
        }
        if self.certs.os.is_some() {
            certs.push("os", ck(&self.certs.os));
        }
        let doc: Node = Map::new()
            .field(
                "cluster",
                Map::new()
                    .field("id", self.cluster.id.as_str())
                    .field("secret", self.cluster.secret.as_str()),
            )
            .field(
                "secrets",
                Map::new()
                    .field("bootstraptoken", self.secrets.bootstraptoken.as_str())
                    .opt(
                        "secretboxencryptionsecret",
                        self.secrets.secretboxencryptionsecret.as_str(),
                    )
                    .opt(
                        "aescbcencryptionsecret",
                        self.secrets.aescbcencryptionsecret.as_str(),
                    ),
            )
            .field(
                "trustdinfo",
                Map::new().field("token", self.trustdinfo.token.as_str()),
            )
            .field("certs", certs)
            .into();
        crate::goyaml::to_string(&doc)
    }
}

fn random_bytes(n: usize) -> Vec<u8> {
    use rand::Rng;
    let mut buf = vec![0u8; n];
    rand::rng().fill_bytes(&mut buf);
    buf
}

/// `[0-9a-z]{6}.[0-9a-z]{16}`, bytes >= 252 rejected so every character is
/// equally likely (as Talos does).
fn token() -> String {
    const CHARS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let pick = |n: usize| -> String {
        let mut out = String::with_capacity(n);
        while out.len() < n {
            for b in random_bytes(n * 2) {
                if b < 252 && out.len() < n {
                    out.push(CHARS[b as usize % CHARS.len()] as char);
                }
            }
        }
        out
    };
    let a = pick(6);
    let b = pick(16);
    format!("{a}.{b}")
}

fn new_ca(
    alg: &'static rcgen::SignatureAlgorithm,
    org: Option<&str>,
    cn: Option<&str>,
    now: time::OffsetDateTime,
) -> Result<CertKey> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
    };
    let err = |e: rcgen::Error| Error::refused(format!("generating a CA: {e}"));
    let key = rcgen::KeyPair::generate_for(alg).map_err(err)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(o) = org {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    if let Some(c) = cn {
        params.distinguished_name.push(DnType::CommonName, c);
    }
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.not_before = now;
    params.not_after = now + time::Duration::hours(87600);
    let mut serial = random_bytes(16);
    serial[0] &= 0x7f;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    let cert = params.self_signed(&key).map_err(err)?;
    let key_pem = if std::ptr::eq(alg, &rcgen::PKCS_ED25519) {
        ed25519_key_pem(&key)
    } else {
        ec_key_pem(&key)
    };
    Ok(CertKey {
        crt: STANDARD.encode(cert.pem()),
        key: STANDARD.encode(key_pem),
    })
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or(""));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// SEC 1 `ECPrivateKey` with the P-256 curve named, as Go writes it.
fn ec_key_pem(key: &rcgen::KeyPair) -> String {
    let pkcs8 = key.serialize_der();
    let scalar = find(&pkcs8, &[0x02, 0x01, 0x01, 0x04, 0x20])
        .map(|i| &pkcs8[i + 5..i + 37])
        .unwrap_or(&[]);
    let public = key.public_key_raw();
    let mut der = vec![0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20];
    der.extend_from_slice(scalar);
    der.extend_from_slice(&[
        0xa0, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0xa1, 0x44, 0x03,
        0x42, 0x00,
    ]);
    der.extend_from_slice(public);
    pem("EC PRIVATE KEY", &der)
}

/// PKCS #8 v1 Ed25519 key under the label Talos uses.
fn ed25519_key_pem(key: &rcgen::KeyPair) -> String {
    let pkcs8 = key.serialize_der();
    let seed = find(&pkcs8, &[0x04, 0x22, 0x04, 0x20])
        .map(|i| &pkcs8[i + 4..i + 36])
        .unwrap_or(&[]);
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend_from_slice(seed);
    pem("ED25519 PRIVATE KEY", &der)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_bundle_round_trips() {
        let b = Bundle::generate().unwrap();
        assert!(is_token(&b.trustdinfo.token));
        assert!(is_token(&b.secrets.bootstraptoken));
        assert_eq!(URL_SAFE.decode(&b.cluster.id).unwrap().len(), 32);
        assert_eq!(STANDARD.decode(&b.cluster.secret).unwrap().len(), 32);
        let text = b.to_yaml();
        let back = Bundle::parse(&text, "bundle").unwrap();
        assert_eq!(back, b);
        let os_key =
            String::from_utf8(STANDARD.decode(&b.certs.os.as_ref().unwrap().key).unwrap()).unwrap();
        assert!(os_key.starts_with("-----BEGIN ED25519 PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI"));
        let k8s_key =
            String::from_utf8(STANDARD.decode(&b.certs.k8s.as_ref().unwrap().key).unwrap())
                .unwrap();
        assert!(k8s_key.starts_with("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI"));
    }
}
