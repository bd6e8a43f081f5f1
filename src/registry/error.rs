//! [`OciError`], the distribution error a `/v2/` answer carries, and how
//! names, the crate's errors, upstream statuses and failed fetches map to it.

use reqwest::StatusCode;

use super::names::{Digest, NameError};
use crate::upstream::FetchError;

/// An OCI distribution error: HTTP status, error code, message.
#[derive(Debug, Clone)]
pub struct OciError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl OciError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> OciError {
        OciError {
            status,
            code,
            message: message.into(),
        }
    }

    /// The body: `{"errors":[{"code":...,"message":...}]}`.
    pub fn body(&self) -> String {
        serde_json::json!({"errors": [{"code": self.code, "message": self.message}]}).to_string()
    }

    pub(super) fn upstream(msg: impl Into<String>) -> OciError {
        OciError::new(502, "UNAVAILABLE", msg)
    }

    /// The same error with what was being done in front (`reading X: ...`).
    pub(super) fn context(mut self, what: &str) -> OciError {
        self.message = format!("reading {what}: {}", self.message);
        self
    }
}

impl From<NameError> for OciError {
    fn from(e: NameError) -> OciError {
        match e {
            NameError::Invalid(m) => OciError::new(400, "NAME_INVALID", m),
            NameError::Denied(m) => OciError::new(403, "DENIED", m),
            NameError::Reference(m) => OciError::new(400, "MANIFEST_INVALID", m),
            NameError::Digest(m) => OciError::new(400, "DIGEST_INVALID", m),
        }
    }
}

/// The crate's error under the OCI body shape: the status is the one
/// mapping's ([`crate::Error::http_status`]); only the code is OCI's.
impl From<crate::Error> for OciError {
    fn from(e: crate::Error) -> OciError {
        let code = match e {
            crate::Error::BadInput(_) => "UNSUPPORTED",
            crate::Error::Refused(_) => "DENIED",
            crate::Error::NotFound(_) => "NAME_UNKNOWN",
            crate::Error::Upstream(_) | crate::Error::Unavailable(_) => "UNAVAILABLE",
            crate::Error::Io { .. } => "UNKNOWN",
        };
        OciError::new(e.http_status(), code, e.to_string())
    }
}

/// A failed fetch under the OCI body shape: the status is the one
/// mapping's ([`FetchError::http_status`]); only the code is OCI's.
impl From<FetchError> for OciError {
    fn from(e: FetchError) -> OciError {
        let code = match e {
            FetchError::Local(_) => "UNKNOWN",
            _ => "UNAVAILABLE",
        };
        OciError::new(e.http_status(), code, e.to_string())
    }
}

/// How a failed blob fill is told to the client: an upstream registry's
/// own answer through [`check_status`] (its 401, 403 and 429 mean something
/// to the client; a 404 is this blob unknown), anything else as any failed
/// fetch.
pub(super) fn fill_error(e: FetchError, repo: &str, d: &Digest) -> OciError {
    match e {
        FetchError::Status { status: 404, .. } => blob_unknown(repo, d),
        FetchError::Status { status, .. } => match check_status(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            repo,
            d.as_str(),
        ) {
            Err(e) => e,
            Ok(()) => OciError::upstream(format!("upstream answered {status} for blob {d}")),
        },
        other => OciError::from(other),
    }
}

/// A transport failure toward an upstream registry (504 when a bound
/// fired, 502 otherwise): [`OciError::from`] a [`FetchError`].
pub(super) fn fetch_error(e: FetchError) -> OciError {
    OciError::from(e)
}

pub(super) fn check_status(st: StatusCode, repo: &str, reference: &str) -> Result<(), OciError> {
    if st == StatusCode::OK {
        return Ok(());
    }
    if st.is_success() {
        // Nothing here sends `Range`: a 206 (or a 204...) is not the whole object.
        return Err(OciError::upstream(format!(
            "upstream answered {st} for {repo} ({reference}); only 200 is the whole object"
        )));
    }
    if st == StatusCode::UNAUTHORIZED || st == StatusCode::FORBIDDEN {
        return Err(OciError::new(
            403,
            "DENIED",
            format!("upstream refused anonymous access to {repo} ({reference}): {st}"),
        ));
    }
    if st == StatusCode::TOO_MANY_REQUESTS {
        return Err(OciError::new(
            429,
            "TOOMANYREQUESTS",
            format!("upstream rate-limited {repo}"),
        ));
    }
    Err(OciError::upstream(format!(
        "upstream answered {st} for {repo} ({reference})"
    )))
}

pub(super) fn manifest_unknown(repo: &str, reference: &str) -> OciError {
    OciError::new(
        404,
        "MANIFEST_UNKNOWN",
        format!("manifest {repo}:{reference} not known"),
    )
}

pub(super) fn blob_unknown(repo: &str, d: &Digest) -> OciError {
    OciError::new(404, "BLOB_UNKNOWN", format!("blob {d} not known in {repo}"))
}
