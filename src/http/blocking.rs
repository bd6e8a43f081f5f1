//! CPU work a request brings (parsing its body, generating a config from
//! it) runs here, off the async workers: on tokio's blocking pool, at most
//! [`PARSERS`] at a time. A costly body then stalls only the requests that
//! queue behind it for a permit, never `/healthz`, the probes or the
//! streams the workers serve. (`yaml::check_structure` bounds each body's
//! cost before its parser runs; this bounds how many run at once.)

use tokio::sync::Semaphore;

use crate::error::Error;

/// Request bodies parsed at once (the machine has few cores; the rest of
/// the blocking pool stays free for the store's calls).
pub const PARSERS: usize = 2;

static PERMITS: Semaphore = Semaphore::const_new(PARSERS);

/// Run `work` on the blocking pool once a permit is free; its result, or a
/// 500 naming `what` if it panicked.
pub async fn run<T, F>(what: &'static str, work: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, Error> + Send + 'static,
{
    // the semaphore is never closed, so acquire cannot fail
    let _permit = PERMITS.acquire().await.ok();
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(Error::io(what, std::io::Error::other(e.to_string()))))
}
