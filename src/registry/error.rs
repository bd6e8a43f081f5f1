//! [`OciError`], the distribution error a `/v2/` answer carries, and how
//! names, the crate's errors, upstream statuses and failed fetches map to it.

use reqwest::StatusCode;

use super::names::{Digest, NameError};

use crate::upstream::FetchError;

/// What went wrong, in the distribution spec's terms. The HTTP status
/// of each is the edge's one mapping (`http::error::oci_status`), never
/// minted here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OciKind {
    /// A repository name out of grammar, or an encoded path.
    NameInvalid,
    /// A repository (or what the crate calls not found) not known.
    NameUnknown,
    ManifestInvalid,
    ManifestUnknown,
    DigestInvalid,
    BlobUnknown,
    /// Not served: an upstream refused anonymous access, a namespace not
    /// configured.
    Denied,
    /// A query this registry does not take (bad input).
    Unsupported,
    /// A path no `/v2/` route has.
    NoRoute,
    /// A write: the registry is read-only.
    ReadOnly,
    /// Refused by a rule (the crate's `Refused`).
    Refused,
    /// The upstream rate-limited us.
    TooManyRequests,
    /// The upstream failed or answered what is not the object.
    Upstream,
    /// A bound on an upstream wait fired.
    Timeout,
    /// The store holds it but does not answer (a bucket down).
    Unavailable,
    /// The upstream's own answer (a status it sent), passed on.
    Relayed(u16),
    /// Local trouble.
    Internal,
}

impl OciKind {
    /// The code of the OCI body.
    pub fn code(self) -> &'static str {
        match self {
            OciKind::NameInvalid => "NAME_INVALID",
            OciKind::NameUnknown => "NAME_UNKNOWN",
            OciKind::ManifestInvalid => "MANIFEST_INVALID",
            OciKind::ManifestUnknown => "MANIFEST_UNKNOWN",
            OciKind::DigestInvalid => "DIGEST_INVALID",
            OciKind::BlobUnknown => "BLOB_UNKNOWN",
            OciKind::Denied | OciKind::Refused => "DENIED",
            OciKind::Unsupported | OciKind::NoRoute | OciKind::ReadOnly => "UNSUPPORTED",
            OciKind::TooManyRequests => "TOOMANYREQUESTS",
            OciKind::Upstream | OciKind::Timeout | OciKind::Unavailable | OciKind::Relayed(_) => {
                "UNAVAILABLE"
            }
            OciKind::Internal => "UNKNOWN",
        }
    }

    /// Not known here or upstream (an upstream's own 404 included).
    pub fn unknown(self) -> bool {
        matches!(
            self,
            OciKind::NameUnknown
                | OciKind::ManifestUnknown
                | OciKind::BlobUnknown
                | OciKind::Relayed(404)
        )
    }

    /// Our side or the upstream's failed (not the request): what a stored
    /// copy may stand in for.
    pub fn failed(self) -> bool {
        matches!(
            self,
            OciKind::Upstream | OciKind::Timeout | OciKind::Unavailable | OciKind::Internal
        ) || matches!(self, OciKind::Relayed(s) if s >= 500)
    }
}

/// An OCI distribution error: what went wrong and the message.
#[derive(Debug, Clone)]
pub struct OciError {
    pub kind: OciKind,
    pub message: String,
    /// The upstream's `Retry-After` (its 429), passed on to the client.
    pub retry_after: Option<String>,
}

impl OciError {
    pub fn new(kind: OciKind, message: impl Into<String>) -> OciError {
        OciError {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    /// The body: `{"errors":[{"code":...,"message":...}]}`.
    pub fn body(&self) -> String {
        serde_json::json!({"errors": [{"code": self.code(), "message": self.message}]}).to_string()
    }

    pub(super) fn upstream(msg: impl Into<String>) -> OciError {
        OciError::new(OciKind::Upstream, msg)
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
            NameError::Invalid(m) => OciError::new(OciKind::NameInvalid, m),
            NameError::Denied(m) => OciError::new(OciKind::Denied, m),
            NameError::Reference(m) => OciError::new(OciKind::ManifestInvalid, m),
            NameError::Digest(m) => OciError::new(OciKind::DigestInvalid, m),
        }
    }
}

/// The crate's error under the OCI body shape: the kind of the same
/// status (`http::error::status_of`, checked by `http::error`'s
/// `one_mapping` test).
impl From<crate::Error> for OciError {
    fn from(e: crate::Error) -> OciError {
        let kind = match e {
            crate::Error::BadInput(_) => OciKind::Unsupported,
            crate::Error::Refused(_) => OciKind::Refused,
            crate::Error::NotFound(_) => OciKind::NameUnknown,
            crate::Error::Upstream(_) => OciKind::Upstream,
            crate::Error::Unavailable(_) => OciKind::Unavailable,
            crate::Error::Io { .. } => OciKind::Internal,
        };
        OciError::new(kind, e.to_string())
    }
}

/// A failed fetch under the OCI body shape: the kind of the same status
/// (`http::error::fetch_status`); an upstream's answer passed on.
impl From<FetchError> for OciError {
    fn from(e: FetchError) -> OciError {
        let kind = match e {
            FetchError::Status { status, .. } => OciKind::Relayed(status),
            FetchError::Timeout(_) => OciKind::Timeout,
            FetchError::Failed(_) => OciKind::Upstream,
            FetchError::Local(_) => OciKind::Internal,
            FetchError::Unavailable(_) => OciKind::Unavailable,
        };
        let retry_after = match &e {
            FetchError::Status { retry_after, .. } => retry_after.clone(),
            _ => None,
        };
        OciError {
            retry_after,
            ..OciError::new(kind, e.to_string())
        }
    }
}

/// How a failed blob fill is told to the client: an upstream registry's
/// own answer through [`check_status`] (its 401, 403 and 429 mean something
/// to the client; a 404 is this blob unknown), anything else as any failed
/// fetch.
pub(super) fn fill_error(e: FetchError, repo: &str, d: &Digest) -> OciError {
    match e {
        FetchError::Status { status: 404, .. } => blob_unknown(repo, d),
        FetchError::Status {
            status,
            retry_after,
            ..
        } => match check_status(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            repo,
            d.as_str(),
        ) {
            Err(e) => OciError { retry_after, ..e },
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

/// [`check_status`] of an upstream's answer, its `Retry-After` (a 429's)
/// kept for the client.
pub(super) fn check_answer(
    resp: &reqwest::Response,
    repo: &str,
    reference: &str,
) -> Result<(), OciError> {
    check_status(resp.status(), repo, reference).map_err(|e| OciError {
        retry_after: crate::upstream::retry_after(
            resp.headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()),
        ),
        ..e
    })
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
            OciKind::Denied,
            format!("upstream refused anonymous access to {repo} ({reference}): {st}"),
        ));
    }
    if st == StatusCode::TOO_MANY_REQUESTS {
        return Err(OciError::new(
            OciKind::TooManyRequests,
            format!("upstream rate-limited {repo}"),
        ));
    }
    Err(OciError::upstream(format!(
        "upstream answered {st} for {repo} ({reference})"
    )))
}

pub(super) fn manifest_unknown(repo: &str, reference: &str) -> OciError {
    OciError::new(
        OciKind::ManifestUnknown,
        format!("manifest {repo}:{reference} not known"),
    )
}

pub(super) fn blob_unknown(repo: &str, d: &Digest) -> OciError {
    OciError::new(
        OciKind::BlobUnknown,
        format!("blob {d} not known in {repo}"),
    )
}
