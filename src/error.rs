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
    /// Local I/O failed: exit 1, HTTP 500.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn bad_input(msg: impl fmt::Display) -> Self {
        Error::BadInput(msg.to_string())
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
