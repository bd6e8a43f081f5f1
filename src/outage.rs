//! How a request treats another's flight, and what the flights know of
//! their upstreams: the bound on a wait (`--upstream-timeout` plus a
//! second), the grace of stale-while-revalidate
//! (`serve --stale-while-revalidate`), and a short memory of the
//! upstreams that did not answer ([`Outages::failed`]: a flight's failure,
//! or the prober's finding), so that while one is known down a stale
//! copy answers at once and a cold key fails fast, and one request at a
//! time ([`Outages::try_again`]) asks it again.
//!
//! Memory only, per process; an upstream is named by its base URL (the
//! factory URL, a registry's origin). Nothing here is held across I/O.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a failure is remembered after the last one ([`Outages::failed`]).
pub const MEMORY: Duration = Duration::from_secs(10);

/// `serve --stale-while-revalidate`'s default: how long past its freshness
/// a stored document or tag answers at once while one background fetch
/// refreshes it. Off: a copy past `--tag-revalidate` or `--metadata-ttl`
/// waits for the upstream's answer (a changed tag is seen at once), as
/// before the flag; the mirror job never answers stale.
pub const DEFAULT_STALE_WHILE_REVALIDATE: Duration = Duration::ZERO;

/// What is known of one upstream that did not answer.
struct Down {
    /// Forgotten after this.
    until: Instant,
    /// The last failure, one line (it names the URL).
    why: String,
    /// A request is asking it again now.
    trying: bool,
}

/// The flights' policy and memory; cheap to clone (one per service).
#[derive(Clone)]
pub struct Outages {
    /// The longest a request waits on a flight (its own or another's).
    wait: Duration,
    /// Stale-while-revalidate's grace past freshness.
    grace: Duration,
    /// How long a failure is remembered ([`MEMORY`]; zero: never).
    memory: Duration,
    down: Arc<Mutex<HashMap<String, Down>>>,
}

/// The one request that asks a known-down upstream again; let go when
/// dropped (the next one may then try).
pub struct Retry {
    outages: Outages,
    upstream: String,
    /// This request took the upstream's one retry (it was known down).
    took: bool,
}

impl Drop for Retry {
    fn drop(&mut self) {
        if !self.took {
            return;
        }
        if let Some(d) = self.outages.lock().get_mut(&self.upstream) {
            d.trying = false;
        }
    }
}

impl Outages {
    /// Waits bounded by `upstream_timeout` plus a second; `grace` the
    /// stale-while-revalidate window.
    pub fn new(upstream_timeout: Duration, grace: Duration) -> Outages {
        Outages {
            wait: upstream_timeout + Duration::from_secs(1),
            grace,
            memory: MEMORY,
            down: Arc::default(),
        }
    }

    /// Remember no failure: every request asks (the mirror job, whose
    /// items each try their upstream and report what they found).
    pub fn without_memory(mut self) -> Outages {
        self.memory = Duration::ZERO;
        self
    }

    /// The longest a request waits on a flight.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Stale-while-revalidate's grace.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Down>> {
        self.down.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `upstream` did not answer (`why`, one line): remembered for [`MEMORY`].
    pub fn failed(&self, upstream: &str, why: &str) {
        if self.memory.is_zero() {
            return;
        }
        let mut map = self.lock();
        let until = Instant::now() + self.memory;
        let d = map.entry(upstream.to_string()).or_insert(Down {
            until,
            why: String::new(),
            trying: false,
        });
        d.until = until;
        d.why = why.to_string();
    }

    /// `upstream` answered: forgotten.
    pub fn answered(&self, upstream: &str) {
        self.lock().remove(upstream);
    }

    /// The last failure of `upstream` while it is known down.
    pub fn down(&self, upstream: &str) -> Option<String> {
        let mut map = self.lock();
        match map.get(upstream) {
            Some(d) if d.until > Instant::now() => Some(d.why.clone()),
            Some(_) => {
                map.remove(upstream);
                None
            }
            None => None,
        }
    }

    /// Why a request is refused while another asks `upstream` again:
    /// one line naming it and its last failure.
    pub fn refusal(&self, upstream: &str) -> String {
        format!(
            "upstream {upstream} is not answering ({}); asked again one request at a time",
            self.down(upstream)
                .unwrap_or_else(|| "its last request failed".into())
        )
    }

    /// May this request ask `upstream`? Always while it is not known
    /// down (`Some`, holding nothing); while it is, only one request at a
    /// time (`None`: another is asking it now).
    pub fn try_again(&self, upstream: &str) -> Option<Retry> {
        let mut map = self.lock();
        let now = Instant::now();
        let mut took = false;
        if let Some(d) = map.get_mut(upstream).filter(|d| d.until > now) {
            if d.trying {
                return None;
            }
            d.trying = true;
            took = true;
        }
        Some(Retry {
            outages: self.clone(),
            upstream: upstream.to_string(),
            took,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure is remembered, one request at a time asks again, and an
    /// answer forgets it.
    #[test]
    fn one_retry_at_a_time_while_down() {
        let o = Outages::new(Duration::from_secs(3), Duration::ZERO);
        assert_eq!(o.wait(), Duration::from_secs(4));
        let u = "http://127.0.0.1:1";
        assert!(o.down(u).is_none());
        let a = o.try_again(u).expect("not down: anyone asks");
        let b = o.try_again(u).expect("not down: anyone asks");
        drop((a, b));
        o.failed(u, "timed out");
        assert_eq!(o.down(u).as_deref(), Some("timed out"));
        let r = o.try_again(u).expect("the first asks again");
        assert!(o.try_again(u).is_none(), "one at a time");
        drop(r);
        assert!(o.try_again(u).is_some(), "the next may, once it ended");
        o.answered(u);
        assert!(o.down(u).is_none());
        let o = o.without_memory();
        o.failed(u, "timed out");
        assert!(o.down(u).is_none() && o.try_again(u).is_some());
    }
}
