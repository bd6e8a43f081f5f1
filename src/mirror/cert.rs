//! `mirror cert`: a private CA and a server certificate for `serve
//! --tls-cert/--tls-key`, so that containerd, skopeo and curl reach the
//! mirror over HTTPS with `ca.crt` as their only trust anchor.
//!
//! Files in the output directory (PEM): `ca.crt`, `ca.key` (the CA: ECDSA
//! P-256, valid [`CA_DAYS`] days, path length 0), `tls.crt`, `tls.key` (the
//! server: ECDSA P-256, valid [`SERVER_DAYS`] days, every `--name` as a DNS
//! or IP subject alternative name, serverAuth). Keys are written 0600. No
//! file is ever replaced: an existing `tls.crt`/`tls.key` is refused, and an
//! existing `ca.crt` + `ca.key` pair issues the new server certificate (a
//! renewal keeps the CA the workers already trust).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Days the CA is valid: ten years, the life of a site.
pub const CA_DAYS: i64 = 3650;
/// Days the server certificate is valid (825: the longest macOS and iOS
/// accept from a private CA; renew with the same CA before it ends).
pub const SERVER_DAYS: i64 = 825;

/// What [`issue`] wrote.
#[derive(Debug)]
pub struct CertReport {
    /// `true` when `ca.crt`/`ca.key` were already there and were used.
    pub reused_ca: bool,
    pub written: Vec<PathBuf>,
    pub not_after: time::OffsetDateTime,
}

/// One `--name`: an IP address, or a DNS name (a leading `*.` allowed).
fn check_name(n: &str) -> Result<()> {
    if n.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    let host = n.strip_prefix("*.").unwrap_or(n);
    let ok = crate::registry::names::is_dns_name(host);
    if ok {
        Ok(())
    } else {
        Err(Error::bad_input(format!(
            "--name {n:?}: not a host name or IP address"
        )))
    }
}

fn random_serial() -> rcgen::SerialNumber {
    let mut serial: [u8; 16] = rand::random();
    serial[0] &= 0x7f; // positive
    serial[0] |= 0x01; // and 16 bytes long
    rcgen::SerialNumber::from_slice(&serial)
}

/// Write the CA (unless one is in `dir`) and a server certificate for `names`.
pub fn issue(dir: &Path, names: &[String]) -> Result<CertReport> {
    use rcgen::{
        CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let reuse = check_output_dir(dir, names)?;
    let (ca_crt, ca_key) = (dir.join("ca.crt"), dir.join("ca.key"));
    let at = |f: &str| dir.join(f);
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("--output-dir {}", dir.display()), e))?;
    let now = time::OffsetDateTime::now_utc();
    // An hour back, for clocks of the clients a little behind.
    let from = now - time::Duration::hours(1);
    let mut written = Vec::new();

    let (ca_cert_pem, ca_key_pair) = if reuse {
        read_ca(&ca_crt, &ca_key)?
    } else {
        new_ca(now)?
    };
    let issuer = Issuer::from_ca_cert_pem(&ca_cert_pem, &ca_key_pair).map_err(|e| {
        Error::bad_input(format!(
            "{}: not a PEM CA certificate: {e}",
            ca_crt.display()
        ))
    })?;

    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(rcgen_err("generating the server key"))?;
    let mut p = CertificateParams::new(names.to_vec())
        .map_err(|e| Error::bad_input(format!("--name: {e}")))?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, names[0].as_str());
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    p.use_authority_key_identifier_extension = true;
    p.not_before = from;
    p.not_after = now + time::Duration::days(SERVER_DAYS);
    p.serial_number = Some(random_serial());
    let cert = p
        .signed_by(&key, &issuer)
        .map_err(rcgen_err("signing the server certificate"))?;

    if !reuse {
        write_new(&ca_crt, ca_cert_pem.as_bytes(), 0o644)?;
        written.push(ca_crt.clone());
        write_new(&ca_key, ca_key_pair.serialize_pem().as_bytes(), 0o600)?;
        written.push(ca_key.clone());
    }
    // The key first: a tls.crt never exists without its key.
    write_new(&at("tls.key"), key.serialize_pem().as_bytes(), 0o600)?;
    written.push(at("tls.key"));
    write_new(&at("tls.crt"), cert.pem().as_bytes(), 0o644)?;
    written.push(at("tls.crt"));
    Ok(CertReport {
        reused_ca: reuse,
        written,
        not_after: p.not_after,
    })
}

/// Refuse bad `--name`s, a server pair already there, or half a CA; whether
/// a whole CA is there to reuse.
fn check_output_dir(dir: &Path, names: &[String]) -> Result<bool> {
    if names.is_empty() {
        return Err(Error::bad_input("--name: at least one host name or IP"));
    }
    for n in names {
        check_name(n)?;
    }
    let at = |f: &str| dir.join(f);
    for f in ["tls.crt", "tls.key"] {
        if at(f).symlink_metadata().is_ok() {
            return Err(Error::refused(format!(
                "--output-dir {}: {f} exists; never overwritten (move it away to issue a new one)",
                dir.display()
            )));
        }
    }
    let (ca_crt, ca_key) = (at("ca.crt"), at("ca.key"));
    match (
        ca_crt.symlink_metadata().is_ok(),
        ca_key.symlink_metadata().is_ok(),
    ) {
        (true, true) => Ok(true),
        (false, false) => Ok(false),
        (has_crt, _) => {
            let (there, absent) = if has_crt {
                ("ca.crt", "ca.key")
            } else {
                ("ca.key", "ca.crt")
            };
            Err(Error::refused(format!(
                "--output-dir {}: {there} exists without {absent}; both or neither",
                dir.display()
            )))
        }
    }
}

/// An rcgen failure, saying what was being made.
fn rcgen_err(what: &str) -> impl Fn(rcgen::Error) -> Error {
    let what = what.to_string();
    move |e: rcgen::Error| Error::refused(format!("{what}: {e}"))
}

/// The CA already in the output directory.
fn read_ca(ca_crt: &Path, ca_key: &Path) -> Result<(String, rcgen::KeyPair)> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| Error::io(format!("reading {}", p.display()), e))
    };
    let cert = read(ca_crt)?;
    let key = rcgen::KeyPair::from_pem(&read(ca_key)?).map_err(|e| {
        Error::bad_input(format!(
            "{}: not a PKCS#8 PEM private key: {e}",
            ca_key.display()
        ))
    })?;
    Ok((cert, key))
}

/// A new CA, valid from an hour before `now` for [`CA_DAYS`].
fn new_ca(now: time::OffsetDateTime) -> Result<(String, rcgen::KeyPair)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(rcgen_err("generating the CA key"))?;
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_err("the CA"))?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "talos-gen mirror CA");
    p.distinguished_name
        .push(DnType::OrganizationName, "talos-gen");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(CA_DAYS);
    p.serial_number = Some(random_serial());
    let cert = p.self_signed(&key).map_err(rcgen_err("signing the CA"))?;
    Ok((cert.pem(), key))
}

/// Create `path` (never replacing anything) through [`crate::atomic`]: a
/// crash never leaves half a key at the path.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    crate::atomic::write_bytes(path, mode, crate::atomic::Replace::Never, bytes).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            Error::refused(format!("{}: exists; never overwritten", path.display()))
        } else {
            Error::io(format!("writing {}", path.display()), e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in [
            "mirror.example",
            "10.0.0.1",
            "::1",
            "*.svc.example",
            "a-b.c",
        ] {
            check_name(ok).unwrap();
        }
        for bad in ["", "a..b", "-a.b", "a b", "http://x", "x_y.example"] {
            assert!(matches!(check_name(bad), Err(Error::BadInput(_))), "{bad}");
        }
    }

    #[test]
    fn issues_then_refuses_then_renews_from_the_ca() {
        let d = tempfile::tempdir().unwrap();
        let names = vec!["mirror.example".to_string(), "127.0.0.1".to_string()];
        let r = issue(d.path(), &names).unwrap();
        assert!(!r.reused_ca);
        assert_eq!(r.written.len(), 4);
        let ca = std::fs::read(d.path().join("ca.crt")).unwrap();
        // Again: refused, nothing touched.
        assert!(matches!(issue(d.path(), &names), Err(Error::Refused(_))));
        assert_eq!(std::fs::read(d.path().join("ca.crt")).unwrap(), ca);
        // Renewal: the server pair moved away, the CA kept.
        std::fs::remove_file(d.path().join("tls.crt")).unwrap();
        std::fs::remove_file(d.path().join("tls.key")).unwrap();
        let r = issue(d.path(), &names).unwrap();
        assert!(r.reused_ca);
        assert_eq!(r.written.len(), 2);
        assert_eq!(std::fs::read(d.path().join("ca.crt")).unwrap(), ca);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Half a CA is refused.
        let e = tempfile::tempdir().unwrap();
        std::fs::write(e.path().join("ca.crt"), &ca).unwrap();
        assert!(matches!(issue(e.path(), &names), Err(Error::Refused(_))));
    }
}
