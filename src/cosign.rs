//! Cosign key-based signatures, verified offline, as `cosign verify --key`
//! does for a signature stored the classic way (the `sha256-<hex>.sig` tag
//! beside the image):
//!
//! - the signature manifest's layers are simple-signing payloads
//!   (`application/vnd.dev.cosign.simplesigning.v1+json`), each with its
//!   base64 signature in the `dev.cosignproject.cosign/signature` annotation;
//! - a layer is good when the ECDSA P-256 / SHA-256 signature (ASN.1 DER, as
//!   cosign writes it) verifies over the payload bytes with one of the keys
//!   and the payload's `critical.image.docker-manifest-digest` is the
//!   image's manifest digest.
//!
//! Keys are PEM `PUBLIC KEY` (SubjectPublicKeyInfo) files, what `cosign
//! generate-key-pair` writes to `cosign.pub`. The cryptography is `ring`'s
//! (already in the tree through rustls and rcgen); `x509-parser` reads the
//! SubjectPublicKeyInfo. No network, no transparency log (Talos' own
//! offline public-key verification sets `IgnoreTlog` the same way).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

use crate::error::{Error, Result};

/// The annotation on a signature layer that holds the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The media type of a simple-signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// `critical.type` of a cosign payload.
pub const PAYLOAD_TYPE: &str = "cosign container image signature";

/// id-ecPublicKey (RFC 5480) and the prime256v1 curve.
const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";

/// One trusted public key.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// Where it came from (the file), for messages.
    pub name: String,
    /// The uncompressed EC point (65 bytes).
    point: Vec<u8>,
    /// The PEM text, normalised (for `ImageVerificationConfig`).
    pem: String,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.name)
    }
}

impl PublicKey {
    /// Parse a PEM `PUBLIC KEY` holding an ECDSA P-256 key; `name` (the
    /// flag and file) prefixes every error. Bad input (exit 2) otherwise.
    pub fn from_pem(text: &str, name: &str) -> Result<PublicKey> {
        let bad = |why: String| Error::bad_input(format!("{name}: {why}"));
        let blocks = pem::parse_many(text).map_err(|e| bad(format!("not PEM: {e}")))?;
        let block = match blocks.as_slice() {
            [b] => b,
            [] => return Err(bad("no PEM block (want -----BEGIN PUBLIC KEY-----)".into())),
            _ => return Err(bad("more than one PEM block; give one key per file".into())),
        };
        if block.tag() != "PUBLIC KEY" {
            return Err(bad(format!(
                "a {:?} PEM block; want PUBLIC KEY (cosign.pub)",
                block.tag()
            )));
        }
        use x509_parser::prelude::FromDer;
        let (rest, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(block.contents())
            .map_err(|e| bad(format!("not a SubjectPublicKeyInfo: {e}")))?;
        if !rest.is_empty() {
            return Err(bad("trailing bytes after the key".into()));
        }
        if spki.algorithm.algorithm.to_id_string() != OID_EC_PUBLIC_KEY {
            return Err(bad(format!(
                "key algorithm {} is not ECDSA (cosign's key-based signatures are ECDSA P-256)",
                spki.algorithm.algorithm.to_id_string()
            )));
        }
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            .map(|o| o.to_id_string());
        if curve.as_deref() != Some(OID_P256) {
            return Err(bad(format!(
                "EC curve {} is not P-256",
                curve.unwrap_or_else(|| "(none)".into())
            )));
        }
        let point = spki.subject_public_key.data.to_vec();
        if point.len() != 65 || point[0] != 4 {
            return Err(bad("the EC point is not an uncompressed P-256 point".into()));
        }
        Ok(PublicKey {
            name: name.to_string(),
            point,
            pem: pem::encode(block).trim_end().replace("\r\n", "\n"),
        })
    }

    /// The key as one PEM block (no trailing newline).
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Does `signature` (ASN.1 DER ECDSA) verify over `message` with this key?
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_ASN1,
            &self.point,
        )
        .verify(message, signature)
        .is_ok()
    }
}

/// The tag of an image's signature: `sha256-<hex>.sig` for `sha256:<hex>`.
pub fn signature_tag(manifest_digest: &str) -> String {
    let (alg, hex) = manifest_digest
        .split_once(':')
        .unwrap_or(("sha256", manifest_digest));
    format!("{alg}-{hex}.sig")
}

/// A layer of a signature manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLayer {
    /// The payload blob's digest (`sha256:...`).
    pub digest: String,
    pub media_type: String,
    /// The base64 signature of the annotation (absent: an unsigned layer).
    pub signature: Option<String>,
}

/// Why a signature does not vouch for an image (each one line; `mirror
/// sync` puts the signature's `repo:tag` before it).
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error("the signature manifest is not an image manifest: {0}")]
    NotManifest(serde_json::Error),
    #[error("the signature manifest has no layers")]
    NoLayers,
    #[error("no {SIGNATURE_ANNOTATION} annotation")]
    NoAnnotation,
    #[error("the signature annotation is not base64: {0}")]
    NotBase64(base64::DecodeError),
    #[error("no --cosign-key given")]
    NoKey,
    /// No key verifies it: the keys' names, joined.
    #[error("the signature does not verify with {0}")]
    NoKeyVerifies(String),
    #[error("the payload is not a simple-signing payload: {0}")]
    NotPayload(serde_json::Error),
    #[error("the payload signs {signed}, not the image's manifest {manifest}")]
    OtherImage { signed: String, manifest: String },
    /// A payload could not be read: the reader's line.
    #[error("{0}")]
    Payload(String),
    /// No layer verifies: each layer's digest and why.
    #[error("{}", layers_line(.0))]
    Layers(Vec<(String, SignatureError)>),
}

/// Every layer's reason, `; `-joined; a lone layer's reason is said as
/// it is, unless it is about the layer itself (no annotation).
fn layers_line(why: &[(String, SignatureError)]) -> String {
    why.iter()
        .map(|(digest, e)| match e {
            SignatureError::NoAnnotation => format!("layer {digest}: {e}"),
            _ if why.len() > 1 => format!("layer {digest}: {e}"),
            _ => e.to_string(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The layers of a signature manifest (`sha256-<hex>.sig`).
pub fn signature_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, SignatureError> {
    #[derive(Deserialize)]
    struct Layer {
        #[serde(rename = "mediaType", default)]
        media_type: String,
        digest: String,
        #[serde(default)]
        annotations: std::collections::BTreeMap<String, String>,
    }
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(default)]
        layers: Vec<Layer>,
    }
    let m: Manifest = serde_json::from_slice(manifest).map_err(SignatureError::NotManifest)?;
    Ok(m.layers
        .into_iter()
        .map(|l| SignatureLayer {
            signature: l.annotations.get(SIGNATURE_ANNOTATION).cloned(),
            digest: l.digest,
            media_type: l.media_type,
        })
        .collect())
}

/// The digest a simple-signing payload signs (`critical.image.docker-manifest-digest`).
pub fn payload_digest(payload: &[u8]) -> Result<String, SignatureError> {
    #[derive(Deserialize)]
    struct Image {
        #[serde(rename = "docker-manifest-digest")]
        digest: String,
    }
    #[derive(Deserialize)]
    struct Critical {
        image: Image,
    }
    #[derive(Deserialize)]
    struct Payload {
        critical: Critical,
    }
    let p: Payload = serde_json::from_slice(payload).map_err(SignatureError::NotPayload)?;
    Ok(p.critical.image.digest)
}

/// Verify one payload and its base64 signature for the image whose
/// manifest digest is `manifest_digest`: `Ok(key name)` when a key
/// verifies it and the payload names that digest, otherwise why not.
pub fn verify_payload(
    payload: &[u8],
    signature_b64: &str,
    manifest_digest: &str,
    keys: &[PublicKey],
) -> Result<String, SignatureError> {
    let sig = STANDARD
        .decode(signature_b64.trim())
        .map_err(SignatureError::NotBase64)?;
    let Some(key) = keys.iter().find(|k| k.verifies(payload, &sig)) else {
        return Err(if keys.is_empty() {
            SignatureError::NoKey
        } else {
            SignatureError::NoKeyVerifies(
                keys.iter()
                    .map(|k| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            )
        });
    };
    let signed = payload_digest(payload)?;
    if signed != manifest_digest {
        return Err(SignatureError::OtherImage {
            signed,
            manifest: manifest_digest.to_string(),
        });
    }
    Ok(key.name.clone())
}

/// Verify a signature manifest whose layers are read by `payload_of`
/// (digest -> bytes): `Ok(key name)` when any layer verifies, otherwise
/// the reasons, one per layer.
pub fn verify_manifest<E: std::fmt::Display>(
    sig_manifest: &[u8],
    manifest_digest: &str,
    keys: &[PublicKey],
    mut payload_of: impl FnMut(&str) -> Result<Vec<u8>, E>,
) -> Result<String, SignatureError> {
    let layers = signature_layers(sig_manifest)?;
    if layers.is_empty() {
        return Err(SignatureError::NoLayers);
    }
    let mut why = Vec::new();
    for l in &layers {
        let r = match &l.signature {
            None => Err(SignatureError::NoAnnotation),
            Some(sig) => payload_of(&l.digest)
                .map_err(|e| SignatureError::Payload(e.to_string()))
                .and_then(|payload| verify_payload(&payload, sig, manifest_digest, keys)),
        };
        match r {
            Ok(k) => return Ok(k),
            Err(e) => why.push((l.digest.clone(), e)),
        }
    }
    Err(SignatureError::Layers(why))
}

/// The simple-signing payload cosign writes for `reference` at `digest`
/// (tests and tools that sign).
pub fn simple_signing_payload(reference: &str, digest: &str) -> String {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": reference},
            "image": {"docker-manifest-digest": digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, PKCS_ECDSA_P384_SHA384, SigningKey};

    const D: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const E: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn key() -> (KeyPair, PublicKey) {
        let kp = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let pk = PublicKey::from_pem(&kp.public_key_pem(), "--cosign-key k.pub").unwrap();
        (kp, pk)
    }

    fn sign(kp: &KeyPair, payload: &[u8]) -> String {
        STANDARD.encode(kp.sign(payload).unwrap())
    }

    #[test]
    fn a_good_signature_verifies() {
        let (kp, pk) = key();
        let payload = simple_signing_payload("ghcr.io/siderolabs/kubelet", D);
        let sig = sign(&kp, payload.as_bytes());
        assert_eq!(
            verify_payload(payload.as_bytes(), &sig, D, std::slice::from_ref(&pk)).unwrap(),
            "--cosign-key k.pub"
        );
        assert!(pk.pem().starts_with("-----BEGIN PUBLIC KEY-----\n"));
        assert!(pk.pem().ends_with("-----END PUBLIC KEY-----"));
    }

    #[test]
    fn bad_signatures_fail() {
        let (kp, pk) = key();
        let (_, other) = key();
        let payload = simple_signing_payload("r", D);
        let sig = sign(&kp, payload.as_bytes());
        // another key
        let e =
            verify_payload(payload.as_bytes(), &sig, D, std::slice::from_ref(&other)).unwrap_err();
        assert!(e.to_string().contains("does not verify"), "{e}");
        // either key of several
        assert!(verify_payload(payload.as_bytes(), &sig, D, &[other, pk.clone()]).is_ok());
        // a changed payload
        let mut changed = payload.clone().into_bytes();
        changed[5] ^= 1;
        assert!(verify_payload(&changed, &sig, D, std::slice::from_ref(&pk)).is_err());
        // a good signature of a payload for another image
        let e = verify_payload(payload.as_bytes(), &sig, E, std::slice::from_ref(&pk)).unwrap_err();
        assert!(e.to_string().contains("not the image's manifest"), "{e}");
        // not base64; a payload that is not simple signing
        assert!(verify_payload(payload.as_bytes(), "!!", D, std::slice::from_ref(&pk)).is_err());
        let junk = b"{}";
        let s = sign(&kp, junk);
        assert!(verify_payload(junk, &s, D, std::slice::from_ref(&pk)).is_err());
        assert!(verify_payload(payload.as_bytes(), &sig, D, &[]).is_err());
    }

    #[test]
    fn manifests() {
        let (kp, pk) = key();
        let payload = simple_signing_payload("r", D);
        let sig = sign(&kp, payload.as_bytes());
        let pd = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": E, "size": 2},
            "layers": [
                {"mediaType": SIMPLE_SIGNING_MEDIA_TYPE, "digest": "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd", "size": 1},
                {"mediaType": SIMPLE_SIGNING_MEDIA_TYPE, "digest": pd, "size": payload.len(),
                 "annotations": {SIGNATURE_ANNOTATION: sig}},
            ],
        })
        .to_string();
        let layers = signature_layers(manifest.as_bytes()).unwrap();
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[1].signature.as_deref(), Some(sig.as_str()));
        let read = |d: &str| {
            if d == pd {
                Ok(payload.clone().into_bytes())
            } else {
                Err("absent".to_string())
            }
        };
        assert!(verify_manifest(manifest.as_bytes(), D, std::slice::from_ref(&pk), read).is_ok());
        let e =
            verify_manifest(manifest.as_bytes(), E, std::slice::from_ref(&pk), read).unwrap_err();
        assert!(
            e.to_string()
                .contains("no dev.cosignproject.cosign/signature annotation"),
            "{e}"
        );
        assert!(verify_manifest(b"[]", D, std::slice::from_ref(&pk), read).is_err());
        assert!(verify_manifest(br#"{"layers":[]}"#, D, &[pk], read).is_err());
        assert_eq!(signature_tag(D), format!("sha256-{}.sig", "a".repeat(64)));
    }

    /// A real `cosign.pub` (Talos' test key, v1.13.9:internal/pkg/containers/
    /// image/verify/internal/cosign/testdata/cosign.pub) parses as P-256.
    #[test]
    fn a_real_cosign_pub_parses() {
        let text = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE2R86DQt5DWf2vSX7+rAbFyvZPtWW\n3AQkDCbr2KLv7ktWMgDgUR+Py+OV91p1P34T72yhm2QqLYqlFLAKDD+udA==\n-----END PUBLIC KEY-----\n";
        let k = PublicKey::from_pem(text, "k").unwrap();
        assert_eq!(k.point.len(), 65);
        assert_eq!(k.pem(), text.trim_end());
    }

    #[test]
    fn key_files() {
        let bad = |t: &str| PublicKey::from_pem(t, "--cosign-key f").unwrap_err();
        for t in [
            "",
            "hello",
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
        ] {
            let e = bad(t);
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().starts_with("--cosign-key f: "), "{e}");
        }
        // a private key, a P-384 key, two keys
        let kp = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        assert!(bad(&kp.serialize_pem()).to_string().contains("PUBLIC KEY"));
        let p384 = KeyPair::generate_for(&PKCS_ECDSA_P384_SHA384).unwrap();
        assert!(bad(&p384.public_key_pem()).to_string().contains("P-256"));
        let two = format!("{}{}", kp.public_key_pem(), kp.public_key_pem());
        assert!(bad(&two).to_string().contains("more than one"));
    }
}
