//! Waiting on a condition instead of sleeping: [`eventually`] polls until
//! the condition holds or a deadline passes, and then fails naming what was
//! awaited, for how long, and (with [`eventually_some`]) what was last seen.
//! Every wait of the suite goes through here; a fixed sleep is only right
//! where the sleep *is* the point ("nothing happens within N s"), and says
//! so in a comment.
//!
//! ```ignore
//! support::eventually("the commit", Duration::from_secs(20), || committed(dir));
//! let n = support::eventually_some("two hits", Duration::from_secs(10), || {
//!     let n = hits(&svc);
//!     (n >= 2).then_some(n).ok_or(format!("hits={n}"))
//! });
//! ```

use std::time::{Duration, Instant};

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(20);

/// Poll `cond` until it is true; panic after `timeout`, naming `what`.
pub fn eventually(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    eventually_some(what, timeout, || {
        if cond() { Ok(()) } else { Err(String::new()) }
    })
}

/// Poll `probe` until it gives `Ok(v)`, then return `v`; after `timeout`,
/// panic naming `what` and the last `Err` it gave (what was seen instead).
pub fn eventually_some<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        let last = match probe() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if start.elapsed() >= timeout {
            if last.is_empty() {
                panic!("timed out after {timeout:?} waiting for {what}");
            }
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        std::thread::sleep(POLL);
    }
}
