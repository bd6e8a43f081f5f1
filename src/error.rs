//! The crate's error type and its mapping to the contract's exit codes:
//! 0 done, 1 refused (a valid question whose answer is no, or an upstream
//! that failed), 2 bad input (unparsable file, malformed value).

use std::fmt;

/// One error; its message is one line that names the field or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: exit 2, HTTP 400.
    #[error("{0}")]
    BadInput(String),
    /// A valid question whose answer is no: exit 1, HTTP 422 (or as the route says).
    #[error("{0}")]
    Refused(String),
    /// Not found (HTTP 404; exit 1 on the CLI).
    #[error("{0}")]
    NotFound(String),
    /// An upstream failed: exit 1, HTTP 502.
    #[error("{0}")]
    Upstream(String),
    /// The store holds it but does not answer now (a bucket down): exit 1,
    /// HTTP 503. Never a reason to fetch it again.
    #[error("{0}")]
    Unavailable(String),
    /// Local I/O failed: exit 1, HTTP 500.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A serde message without the crate's internal type names: `expected
/// struct RawOverlay` becomes `expected a mapping`, `expected enum X`
/// `expected one of the allowed values`.
pub fn plain_serde(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find(['s', 'e']) {
        let (head, tail) = rest.split_at(i);
        out.push_str(head);
        let at_word = out.is_empty() || out.ends_with(|c: char| !c.is_alphanumeric());
        let (kw, say) = if tail.starts_with("struct ") {
            ("struct ", "a mapping")
        } else if tail.starts_with("enum ") {
            ("enum ", "one of the allowed values")
        } else {
            ("", "")
        };
        if at_word && !kw.is_empty() {
            let after = &tail[kw.len()..];
            let n = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            if n > 0 && after.starts_with(|c: char| c.is_ascii_uppercase()) {
                out.push_str(say);
                rest = &after[n..];
                continue;
            }
        }
        let mut chars = tail.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out.push_str(rest);
    out
}

impl Error {
    pub fn bad_input(msg: impl fmt::Display) -> Self {
        Error::BadInput(plain_serde(&msg.to_string()))
    }
    pub fn refused(msg: impl fmt::Display) -> Self {
        Error::Refused(msg.to_string())
    }
    pub fn io(context: impl fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            context: context.to_string(),
            source,
        }
    }
    /// The process exit code the contract gives this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::BadInput(_) => 2,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_internal_type_names() {
        assert_eq!(
            super::plain_serde(
                "overlay: invalid type: sequence, expected struct RawOverlay at line 2"
            ),
            "overlay: invalid type: sequence, expected a mapping at line 2"
        );
        assert_eq!(
            super::plain_serde(
                "body: invalid type: string \"x\", expected struct ReservationsRequest"
            ),
            "body: invalid type: string \"x\", expected a mapping"
        );
        assert_eq!(
            super::plain_serde("a destructive structure"),
            "a destructive structure"
        );
        assert_eq!(
            super::plain_serde("expected enum Mode"),
            "expected one of the allowed values"
        );
    }
}
