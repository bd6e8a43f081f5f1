//! The bearer token `/api/v1/` writes require with `--api-token-file`
//! ([`super::limits::enforce`] asks it, by the route policy table). The comparison is
//! constant-time (both sides hashed to 32 bytes first, so not even the
//! length leaks); neither the token nor the header is ever logged or
//! printed (`Debug` is redacted).

use std::path::Path;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::{Error, Result};

/// The bearer token the `/api/v1/` writes require. Holds only its sha256.
#[derive(Clone)]
pub struct ApiToken {
    hash: [u8; 32],
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(<redacted>)")
    }
}

impl ApiToken {
    /// Read the token from `path`: the file's content without surrounding
    /// whitespace; an empty or unreadable file is bad input.
    pub fn from_file(path: &Path) -> Result<ApiToken> {
        // A regular file of at most 64 KiB (never a FIFO or /dev/zero).
        let text = crate::input::read_string(path, 64 << 10, crate::input::Kind::File)
            .map_err(|e| Error::bad_input(format!("--api-token-file: {}: {e}", path.display())))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(Error::bad_input(format!(
                "--api-token-file: {}: the file holds no token",
                path.display()
            )));
        }
        if token.chars().any(|c| c.is_control() || c == ' ') {
            return Err(Error::bad_input(format!(
                "--api-token-file: {}: the token holds spaces or control characters",
                path.display()
            )));
        }
        Ok(ApiToken::new(token))
    }

    pub fn new(token: &str) -> ApiToken {
        ApiToken {
            hash: Sha256::digest(token.as_bytes()).into(),
        }
    }

    /// Does the `Authorization` header value carry this token?
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let Some(v) = authorization else {
            return false;
        };
        let presented = match v.get(..7) {
            Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &v[7..],
            _ => return false,
        };
        let presented = presented.trim_ascii();
        let h: [u8; 32] = Sha256::digest(presented).into();
        bool::from(h.ct_eq(&self.hash))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_compare() {
        let t = ApiToken::new("s3cret");
        assert!(t.accepts(Some(b"Bearer s3cret")));
        assert!(t.accepts(Some(b"bearer s3cret")));
        assert!(!t.accepts(Some(b"Bearer s3cre")));
        assert!(!t.accepts(Some(b"Bearer s3cret2")));
        assert!(!t.accepts(Some(b"Basic s3cret")));
        assert!(!t.accepts(Some(b"s3cret")));
        assert!(!t.accepts(Some(b"")));
        assert!(!t.accepts(None));
        assert_eq!(format!("{t:?}"), "ApiToken(<redacted>)");
    }
}
