//! HTTPS for `serve --tls-cert FILE --tls-key FILE`: a rustls acceptor whose
//! certificate follows the files.
//!
//! **Reload by polling, every [`POLL`].** A task stats both files (device,
//! inode, size, mtime, following links) and, when either changed, reads and
//! checks the pair again; the handshake itself ([`Reloading::resolve`])
//! only clones an `Arc`. Polling rather than inotify (`notify`) because a
//! Kubernetes Secret volume is renewed by swapping a `..data` symlink to a
//! new directory, which an inotify watch on the files never sees (it
//! watches the old inodes), and because two `stat`s every few seconds cost
//! nothing and work on every filesystem; checking in `resolve` would put
//! blocking file I/O on every handshake. A pair that does not load (half
//! written, the key of another certificate) is logged once and the
//! certificate in use is kept; it is tried again when the files change
//! again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use crate::error::{Error, Result};

/// How often the files are looked at.
pub const POLL: Duration = Duration::from_secs(2);

/// The two files, as the user named them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What a file looked like when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp(Vec<Option<(u64, u64, u64, SystemTime)>>);

fn stamp(files: &TlsFiles) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    Stamp(
        [&files.cert, &files.key]
            .iter()
            .map(|p| {
                let m = std::fs::metadata(p).ok()?;
                Some((m.dev(), m.ino(), m.len(), m.modified().ok()?))
            })
            .collect(),
    )
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Read and check the pair: PEM certificates (the server's first, then
/// any intermediates) and a PEM private key (PKCS#8, SEC1 or PKCS#1) that
/// belongs to the first certificate. Errors name the flag and file.
pub fn load(files: &TlsFiles) -> Result<(Arc<CertifiedKey>, String)> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let read = |flag: &str, p: &Path| {
        read_bounded(p).map_err(|e| Error::bad_input(format!("{flag} {}: {e}", p.display())))
    };
    let cert_pem = read("--tls-cert", &files.cert)?;
    let key_pem = read("--tls-key", &files.key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| {
            Error::bad_input(format!(
                "--tls-cert {}: not PEM certificates: {e:?}",
                files.cert.display()
            ))
        })?;
    let Some(first) = chain.first() else {
        return Err(Error::bad_input(format!(
            "--tls-cert {}: no CERTIFICATE in it",
            files.cert.display()
        )));
    };
    let about = describe(first);
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        Error::bad_input(format!(
            "--tls-key {}: not a PEM private key: {e:?}",
            files.key.display()
        ))
    })?;
    let ck = CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
        Error::bad_input(format!(
            "--tls-key {}: does not go with --tls-cert {}: {e}",
            files.key.display(),
            files.cert.display()
        ))
    })?;
    Ok((Arc::new(ck), about))
}

/// Largest certificate chain or key file read: 1 MiB (a chain is a few KiB).
pub const MAX_FILE: u64 = 1 << 20;

/// A certificate or key file, read like every other input
/// ([`crate::input`]): opened without blocking (a FIFO or a device never
/// holds the open), only a regular file (links followed: a Secret volume
/// is links), at most [`MAX_FILE`] bytes, also when it grows while being
/// read. So neither the start nor the reload task ever waits on, or reads
/// without end from, a FIFO or `/dev/zero` put in a file's place.
fn read_bounded(p: &Path) -> std::io::Result<Vec<u8>> {
    crate::input::read(p, MAX_FILE, crate::input::Kind::File)
}

/// `names ..., valid until ...` of a certificate, for the log.
fn describe(der: &[u8]) -> String {
    use x509_parser::prelude::*;
    let Ok((_, c)) = parse_x509_certificate(der) else {
        return "an unreadable certificate".into();
    };
    let names: Vec<String> = c
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|s| {
            s.value
                .general_names
                .iter()
                .map(|n| match n {
                    GeneralName::DNSName(d) => d.to_string(),
                    GeneralName::IPAddress(b) => match b.len() {
                        4 => std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*b).unwrap()).to_string(),
                        16 => {
                            std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*b).unwrap()).to_string()
                        }
                        _ => "?".into(),
                    },
                    other => format!("{other:?}"),
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "names {}, valid until {}",
        if names.is_empty() {
            "(none)".into()
        } else {
            names.join(", ")
        },
        c.validity().not_after
    )
}

/// The certificate in use, swapped by the poll task.
#[derive(Debug)]
pub struct Reloading {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

impl Reloading {
    /// Load the pair (an error stops `serve`: exit 2).
    pub fn new(files: TlsFiles) -> Result<Arc<Reloading>> {
        let (ck, about) = load(&files)?;
        tracing::info!(cert = %files.cert.display(), "tls certificate loaded: {about}");
        Ok(Arc::new(Reloading {
            files,
            current: RwLock::new(ck),
        }))
    }

    /// Look at the files every `every` until the returned task is aborted.
    pub fn watch(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut loaded = stamp(&me.files);
            let mut failed: Option<Stamp> = None;
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let files = me.files.clone();
                let Ok(now) = tokio::task::spawn_blocking(move || stamp(&files)).await else {
                    continue;
                };
                if now == loaded || failed.as_ref() == Some(&now) {
                    continue;
                }
                let files = me.files.clone();
                let r = tokio::task::spawn_blocking(move || load(&files)).await;
                match r {
                    Ok(Ok((ck, about))) => {
                        *me.current.write().unwrap_or_else(|e| e.into_inner()) = ck;
                        tracing::info!(cert = %me.files.cert.display(), "tls certificate reloaded: {about}");
                        loaded = now;
                        failed = None;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "tls certificate files changed but do not load; the previous certificate stays in use");
                        failed = Some(now);
                    }
                    Err(_) => {}
                }
            }
        })
    }

    /// The acceptor (HTTP/1.1 only, as the server is).
    pub fn acceptor(self: &Arc<Self>) -> Result<tokio_rustls::TlsAcceptor> {
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::refused(format!("tls: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_a_pair_and_names_the_file_at_fault() {
        let d = tempfile::tempdir().unwrap();
        crate::mirror::cert::issue(d.path(), &["localhost".into()]).unwrap();
        let files = TlsFiles {
            cert: d.path().join("tls.crt"),
            key: d.path().join("tls.key"),
        };
        let (_, about) = load(&files).unwrap();
        assert!(about.contains("localhost"), "{about}");
        // The CA's key does not go with the server certificate.
        let wrong = TlsFiles {
            key: d.path().join("ca.key"),
            ..files.clone()
        };
        let e = load(&wrong).unwrap_err().to_string();
        assert!(e.contains("does not go with"), "{e}");
        let missing = TlsFiles {
            cert: d.path().join("nope.crt"),
            ..files
        };
        let e = load(&missing).unwrap_err().to_string();
        assert!(e.starts_with("--tls-cert "), "{e}");
    }
}
