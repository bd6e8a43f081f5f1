//! The one revalidating lookup: freshness, coalescing, revalidation and
//! stale-if-error written once, for every small thing the service keeps
//! and asks again about (a factory document, a tag's manifest, a
//! referrers index, a tag list). Bodies that are streamed (artifacts,
//! talosctl, blobs) go through [`Fills::join`], over the same table of
//! keys in flight.
//!
//! A lookup ([`revalidate`]) answers:
//! - **hit**: the stored copy while it is fresh ([`Entry::is_fresh`]: its
//!   record's `fresh_until`, or `fetched` + the caller's TTL for a record
//!   without one);
//! - **flight**: else one fetch per key ([`Fills::claim`]), run in a task
//!   of its own (it ends even when its requester went away), whose
//!   outcome every request that waited on it takes ([`Outcome`]): the new
//!   copy, or the failure (a waiter with a stored copy answers it stale;
//!   one without gets the error). No waiter fetches again for a flight it
//!   waited on, and no wait on another's flight lasts longer than
//!   [`Outages::wait`] (`--upstream-timeout` plus a second): past it, the
//!   stored copy stale, or a timeout naming the upstream. The holder waits
//!   for its own fetch, each step of which the upstream's limits bound.
//! - **stale while revalidating**: a copy past its freshness by less than
//!   the grace (`serve --stale-while-revalidate`) answers at once while
//!   the flight refreshes it in the background.
//!
//! A failed flight's upstream is remembered a short while
//! ([`crate::outage`]): meanwhile a stored copy answers stale at once, a
//! cold key fails at once (504 naming the upstream and its last failure),
//! and one request at a time asks the upstream again.
//!
//! Stale-if-error: while the store does not answer, the stored copy (from
//! the local tier) is answered as it is, else the caller's "unavailable"
//! (nothing fetched could be kept); when the fetch fails in a way the
//! caller's rule allows (`may_use_stale`: a 5xx, a timeout, unreachable;
//! never a 4xx the upstream meant), the stored copy of any age. Either way
//! the answer says `stale` (the HTTP edge adds `Warning: 110`) and
//! [`Metrics::stale`] counts it, here only.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::fill::{Claim, FetchGuard, Fills, Outcome};
use crate::metrics::Metrics;
use crate::outage::{Outages, Retry};
use crate::store::{Entry, Key};

/// A stored copy as the caller reads it: its value and, where one key
/// holds it, its record (freshness, pin). A copy without a record (a tag
/// list, gathered from many keys) is never fresh.
#[derive(Debug, Clone)]
pub struct Stored<T> {
    pub value: T,
    pub entry: Option<Entry>,
}

/// How an answer came to be (the edge's `Cache-Status`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum How {
    /// The stored copy, fresh: nothing asked.
    #[default]
    Hit,
    /// The upstream's copy, fetched for this answer (and kept).
    Fetched,
    /// The upstream was asked and confirmed the stored copy.
    Revalidated,
    /// The stored copy past its freshness (`stale`): the upstream failed,
    /// is known down, or is being asked in the background.
    Stale,
}

/// How an answer was served, for the edge's `Cache-Status`: what
/// happened, and whether another request's flight served it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    pub how: How,
    pub collapsed: bool,
}

impl<T> Answer<T> {
    /// How it was served.
    pub fn served(&self) -> Served {
        Served {
            how: self.how,
            collapsed: self.collapsed,
        }
    }
}

/// What a revalidating lookup answered.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub value: T,
    /// The stored copy, answered because the upstream failed, is known
    /// down, or is being asked again in the background, or the store does
    /// not answer.
    pub stale: bool,
    /// The upstream was asked for this answer (a miss), whatever it said.
    pub asked: bool,
    pub how: How,
    /// Served by another request's flight (its outcome shared).
    pub collapsed: bool,
}

/// How one kind of thing is revalidated.
pub struct Rules<'a, T, E> {
    /// The metric's kind (`document`, `manifest`, `referrers`, `tags`).
    pub kind: &'static str,
    /// The key held while fetching (one fetch per key); `None`: not
    /// coalesced.
    pub key: Option<&'a Key>,
    /// How long a record without `fresh_until` is fresh after `fetched`
    /// (zero: always asked again).
    pub ttl: Duration,
    pub metrics: Option<&'a Metrics>,
    /// May the stored copy answer for this failure of the fetch?
    pub may_use_stale: fn(&E) -> bool,
    /// Is this failure the upstream not answering (a timeout, unreachable,
    /// a 5xx)? Its one line, to be remembered ([`Outages::failed`]).
    pub unanswered: fn(&E) -> Option<String>,
    /// The upstream asked (its base URL), as [`Outages`] names it.
    pub upstream: &'a str,
    /// Is the fetched copy the stored one (the upstream confirmed it)?
    pub unchanged: fn(&T, &T) -> bool,
    /// The error of a request that cannot wait longer or that an upstream
    /// known down refuses at once: a timeout (504), the message given.
    pub timed_out: fn(String) -> E,
}

/// The stored copy, if fresh.
fn fresh<T: Clone>(s: &Option<Stored<T>>, ttl: Duration) -> Option<T> {
    s.as_ref()
        .filter(|s| s.entry.as_ref().is_some_and(|e| e.is_fresh(ttl)))
        .map(|s| s.value.clone())
}

/// Is the stored copy past its freshness by less than `grace` (a record
/// without `fresh_until` and a zero TTL never is: always asked)?
fn within_grace<T>(s: &Option<Stored<T>>, ttl: Duration, grace: Duration) -> bool {
    let Some(e) = s.as_ref().and_then(|s| s.entry.as_ref()) else {
        return false;
    };
    if grace.is_zero() || (e.fresh_until.is_none() && ttl.is_zero()) {
        return false;
    }
    let until = e
        .fresh_until
        .map(|u| UNIX_EPOCH + Duration::from_secs(u))
        .unwrap_or_else(|| UNIX_EPOCH + Duration::from_secs(e.fetched) + ttl);
    SystemTime::now() < until + grace
}

/// The revalidating lookup (see the module): `read` reads the stored copy
/// (`Err` when the store holds it and cannot read it now), `fetch` asks
/// the upstream, given the stored copy, and keeps what it got (a future
/// of its own: it runs in a task); `unavailable` is the answer while the
/// store does not answer and holds no copy it can read.
pub async fn revalidate<T, E, R, RF, F, FF>(
    fills: &Fills,
    rules: Rules<'_, T, E>,
    read: R,
    fetch: F,
    unavailable: impl FnOnce() -> E,
) -> Result<Answer<T>, E>
where
    T: Clone + Send + Sync + 'static,
    E: Clone + std::fmt::Debug + Send + Sync + 'static,
    R: Fn() -> RF,
    RF: Future<Output = Result<Option<Stored<T>>, E>>,
    F: FnOnce(Option<Stored<T>>) -> FF,
    FF: Future<Output = Result<T, E>> + Send + 'static,
{
    let lookup = Lookup {
        rules: &rules,
        outages: fills.outages(),
    };
    let store = fills.store();
    let mut fetch = Some(fetch);
    loop {
        let stored = read().await?;
        if let Some(v) = fresh(&stored, rules.ttl) {
            return Ok(lookup.answer(v, How::Hit, false));
        }
        if !store.available() {
            // Nothing fetched could be kept: the copy as it is, or 503.
            return match stored {
                Some(s) => Ok(lookup.stale(s, false)),
                None => Err(unavailable()),
            };
        }
        let down = lookup.outages.down(rules.upstream);
        let at_once = down.is_some() || within_grace(&stored, rules.ttl, lookup.outages.grace());
        let Some(key) = rules.key else {
            let Some(fetch) = fetch.take() else {
                return lookup.ran_out(stored);
            };
            return lookup.uncoalesced(stored, down, fetch).await;
        };
        let (wait, mine) = match fills.claim(key) {
            Claim::Mine(g) => {
                // A fetch that ended between the read and the claim made
                // the record fresh (memory only): read that copy instead.
                if store.entry(key).is_some_and(|e| e.is_fresh(rules.ttl)) {
                    drop(g);
                    continue;
                }
                let Some(retry) = lookup.outages.try_again(rules.upstream) else {
                    // Another request is asking the upstream known down.
                    return lookup.refused(stored, down);
                };
                let Some(fetch) = fetch.take() else {
                    // Its own flight ended with no outcome (its task
                    // failed): not asked twice for one request.
                    drop((g, retry));
                    return lookup.ran_out(stored);
                };
                let wait = g.ended();
                tokio::spawn(lookup.fly(g, retry, fetch(stored.clone())));
                (wait, true)
            }
            Claim::Wait(w) => (w, false),
        };
        if at_once {
            // Known down, or within the grace: the stored copy now (the
            // flight refreshes it); a cold key fails at once while down.
            if let Some(s) = stored {
                lookup.note_stale(down.as_deref());
                return Ok(lookup.stale(s, mine));
            }
            if !mine {
                return lookup.refused(None, down);
            }
        }
        // The holder waits for its own fetch (each of its steps bounded by
        // the upstream's limits: a long list of pages is not cut); a
        // waiter on another's, one timeout plus a second at most.
        let bound = match mine {
            true => Duration::MAX,
            false => lookup.outages.wait(),
        };
        match tokio::time::timeout(bound, wait).await {
            Ok(Some(outcome)) => {
                if let Some(r) = lookup.settle(&outcome, stored, mine) {
                    return r;
                }
            }
            // The flight left no outcome (its task failed): read again.
            Ok(None) => {}
            Err(_) => return lookup.ran_out(stored),
        }
    }
}

/// One lookup's rules and the flights' policy.
struct Lookup<'a, 'r, T, E> {
    rules: &'a Rules<'r, T, E>,
    outages: &'a Outages,
}

impl<T, E> Lookup<'_, '_, T, E>
where
    T: Clone + Send + Sync + 'static,
    E: Clone + std::fmt::Debug + Send + Sync + 'static,
{
    fn answer(&self, value: T, how: How, collapsed: bool) -> Answer<T> {
        Answer {
            value,
            stale: how == How::Stale,
            asked: matches!(how, How::Fetched | How::Revalidated),
            how,
            collapsed,
        }
    }

    /// The stored copy, stale (counted here only).
    fn stale(&self, s: Stored<T>, asked: bool) -> Answer<T> {
        if let Some(m) = self.rules.metrics {
            m.stale(self.rules.kind);
        }
        Answer {
            asked,
            ..self.answer(s.value, How::Stale, false)
        }
    }

    /// What an upstream known down answers at once: the stored copy
    /// stale, or its failure (a cold key).
    fn refused(&self, stored: Option<Stored<T>>, down: Option<String>) -> Result<Answer<T>, E> {
        match stored {
            Some(s) => {
                self.note_stale(down.as_deref());
                Ok(self.stale(s, false))
            }
            None => Err((self.rules.timed_out)(match down {
                Some(why) => format!(
                    "upstream {} is not answering ({why}); asked again one request at a time",
                    self.rules.upstream
                ),
                None => self.outages.refusal(self.rules.upstream),
            })),
        }
    }

    /// Say why the stored copy answers without waiting: the upstream is
    /// known down (`why`, its last failure), or within the grace.
    fn note_stale(&self, down: Option<&str>) {
        let key = self.rules.key.map(Key::to_string).unwrap_or_default();
        let (kind, upstream) = (self.rules.kind, self.rules.upstream);
        match down {
            Some(why) => {
                tracing::warn!(
                    kind,
                    key,
                    upstream,
                    why,
                    "the upstream is known down; serving the stored copy"
                )
            }
            None => {
                tracing::debug!(
                    kind,
                    key,
                    "serving the stored copy while one fetch revalidates it"
                )
            }
        }
    }

    /// The wait ran out: the stored copy stale, or a timeout naming the upstream.
    fn ran_out(&self, stored: Option<Stored<T>>) -> Result<Answer<T>, E> {
        match stored {
            Some(s) => Ok(self.stale(s, true)),
            None => Err((self.rules.timed_out)(format!(
                "upstream {} gave no answer within {}s",
                self.rules.upstream,
                self.outages.wait().as_secs()
            ))),
        }
    }

    /// The answer from a flight's outcome; `None`: not this lookup's kind
    /// (read again).
    fn settle(
        &self,
        outcome: &Outcome,
        stored: Option<Stored<T>>,
        mine: bool,
    ) -> Option<Result<Answer<T>, E>> {
        let r = outcome.downcast_ref::<Result<T, E>>()?;
        Some(match r {
            Ok(v) => {
                let same = stored
                    .as_ref()
                    .is_some_and(|s| (self.rules.unchanged)(&s.value, v));
                let how = if same { How::Revalidated } else { How::Fetched };
                Ok(self.answer(v.clone(), how, !mine))
            }
            Err(e) => self.failed(e.clone(), stored, !mine),
        })
    }

    /// A failed fetch: the stored copy where the rule allows, else the error.
    fn failed(&self, e: E, stored: Option<Stored<T>>, collapsed: bool) -> Result<Answer<T>, E> {
        match stored {
            Some(s) if (self.rules.may_use_stale)(&e) => {
                let key = self.rules.key.map(Key::to_string).unwrap_or_default();
                if !collapsed {
                    tracing::warn!(kind = self.rules.kind, key, error = ?e, "the upstream failed; serving the stored copy");
                }
                Ok(self.stale(s, true))
            }
            _ => Err(e),
        }
    }

    /// What the upstream's answer teaches the memory of upstreams down.
    fn learn(
        outages: &Outages,
        upstream: &str,
        unanswered: fn(&E) -> Option<String>,
        r: &Result<T, E>,
    ) {
        match r.as_ref().err().and_then(unanswered) {
            Some(why) => outages.failed(upstream, &crate::text::one_line(&why)),
            None => outages.answered(upstream),
        }
    }

    /// The flight, in a task of its own: the fetch, what it teaches the
    /// memory, and its outcome to every waiter.
    fn fly<FF>(
        &self,
        g: FetchGuard,
        retry: Retry,
        fetch: FF,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        FF: Future<Output = Result<T, E>> + Send + 'static,
    {
        let outages = self.outages.clone();
        let upstream = self.rules.upstream.to_string();
        let unanswered = self.rules.unanswered;
        async move {
            let r = fetch.await;
            Self::learn(&outages, &upstream, unanswered, &r);
            drop(retry);
            g.finish(Arc::new(r));
        }
    }

    /// A lookup that is not coalesced: asked inline (one request at a
    /// time while the upstream is known down), bounded like a flight.
    async fn uncoalesced<FF>(
        &self,
        stored: Option<Stored<T>>,
        down: Option<String>,
        fetch: impl FnOnce(Option<Stored<T>>) -> FF,
    ) -> Result<Answer<T>, E>
    where
        FF: Future<Output = Result<T, E>> + Send + 'static,
    {
        let Some(retry) = self.outages.try_again(self.rules.upstream) else {
            return self.refused(stored, down);
        };
        let f = fetch(stored.clone());
        let r = match tokio::time::timeout(self.outages.wait(), f).await {
            Ok(r) => r,
            Err(_) => return self.ran_out(stored),
        };
        Self::learn(self.outages, self.rules.upstream, self.rules.unanswered, &r);
        drop(retry);
        match r {
            Ok(v) => {
                let same = stored
                    .as_ref()
                    .is_some_and(|s| (self.rules.unchanged)(&s.value, &v));
                let how = if same { How::Revalidated } else { How::Fetched };
                Ok(self.answer(v, how, false))
            }
            Err(e) => self.failed(e, stored, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Meta, Store};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A failure of the test's upstream: `true` may be answered stale.
    #[derive(Debug, Clone)]
    struct Failed(bool);

    impl std::fmt::Display for Failed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "failed (stale allowed: {})", self.0)
        }
    }

    fn rules<'a>(key: &'a Key, ttl: Duration, m: &'a Metrics) -> Rules<'a, bytes::Bytes, Failed> {
        Rules {
            kind: "document",
            key: Some(key),
            ttl,
            metrics: Some(m),
            may_use_stale: |e: &Failed| e.0,
            // Not remembered here (see `an_upstream_known_down_...`).
            unanswered: |_: &Failed| None,
            upstream: "http://upstream.test",
            unchanged: |a, b| a == b,
            timed_out: |_| Failed(false),
        }
    }

    async fn read(store: &Store, key: &Key) -> Result<Option<Stored<bytes::Bytes>>, Failed> {
        Ok(store
            .read_small_at(key, 1 << 20)
            .await
            .map_err(|_| Failed(false))?
            .map(|(e, b)| Stored {
                value: b,
                entry: Some(e),
            }))
    }

    /// Eight lookups of one key at once while it is not fresh ask the
    /// upstream once: the others wait for that fetch, then read what it
    /// kept. A fresh copy asks nothing; past its `fresh_until` it is asked
    /// again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_misses_of_one_key_fetch_once() {
        let dir = tempfile::tempdir().unwrap();
        let fills = Fills::new(Store::open(dir.path(), None).unwrap());
        let m = Metrics::default();
        let key = Key::factory_doc("/versions");
        let asked = Arc::new(AtomicUsize::new(0));
        let lookup = |ttl: Duration| {
            let (fills, key, m, asked) = (fills.clone(), key.clone(), m.clone(), asked.clone());
            async move {
                let store = fills.store().clone();
                revalidate(
                    &fills,
                    rules(&key, ttl, &m),
                    || read(&store, &key),
                    {
                        let (asked, store, key) = (asked.clone(), store.clone(), key.clone());
                        move |_| async move {
                            asked.fetch_add(1, SeqCst);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            let meta = Meta {
                                fresh_for: Some(ttl),
                                ..Meta::default()
                            };
                            store
                                .commit_bytes(&key, bytes::Bytes::from_static(b"[]"), meta)
                                .await
                                .map_err(|_| Failed(false))?;
                            Ok(bytes::Bytes::from_static(b"[]"))
                        }
                    },
                    || Failed(false),
                )
                .await
            }
        };
        let all: Vec<_> = (0..8)
            .map(|_| tokio::spawn(lookup(Duration::from_secs(60))))
            .collect();
        for a in all {
            let a = a.await.unwrap().unwrap();
            assert_eq!(&a.value[..], b"[]");
            assert!(!a.stale);
        }
        assert_eq!(asked.load(SeqCst), 1, "one upstream fetch for 8 misses");
        assert_eq!(fills.running(), 0);
        // Fresh: nothing asked.
        let a = lookup(Duration::from_secs(60)).await.unwrap();
        assert!(!a.asked);
        assert_eq!(asked.load(SeqCst), 1);
        // The record says until when it is fresh.
        let e = fills.store().entry(&key).unwrap();
        assert_eq!(e.fresh_until, Some(e.fetched + 60));
        // The record's `fresh_until` decides, not the reader's TTL: a copy
        // kept fresh for 0 s is asked again (and kept fresh for 60 s).
        let stale_now = Meta {
            fresh_for: Some(Duration::ZERO),
            ..Meta::default()
        };
        fills
            .store()
            .commit_bytes(&key, bytes::Bytes::from_static(b"[1]"), stale_now)
            .await
            .unwrap();
        assert!(lookup(Duration::from_secs(60)).await.unwrap().asked);
        assert!(!lookup(Duration::from_secs(60)).await.unwrap().asked);
        assert_eq!(asked.load(SeqCst), 2);
        // A record without one is fresh for the reader's TTL.
        fills
            .store()
            .commit_bytes(&key, bytes::Bytes::from_static(b"[2]"), Meta::default())
            .await
            .unwrap();
        assert!(!lookup(Duration::from_secs(60)).await.unwrap().asked);
        assert!(lookup(Duration::ZERO).await.unwrap().asked);
        assert_eq!(asked.load(SeqCst), 3);
    }

    /// Stale-if-error through the one path: a failure the rule allows
    /// answers the stored copy, marked stale and counted once; one it does
    /// not is the error; with nothing stored, the error.
    #[tokio::test]
    async fn stale_if_error_answers_the_stored_copy_and_counts_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let fills = Fills::new(Store::open(dir.path(), None).unwrap());
        let store = fills.store().clone();
        let m = Metrics::default();
        let key = Key::factory_doc("/versions");
        let failing = |allowed: bool| {
            let (fills, key, m, store) = (fills.clone(), key.clone(), m.clone(), store.clone());
            async move {
                revalidate(
                    &fills,
                    rules(&key, Duration::ZERO, &m),
                    || read(&store, &key),
                    |_| async move { Err::<bytes::Bytes, _>(Failed(allowed)) },
                    || Failed(false),
                )
                .await
            }
        };
        assert!(failing(true).await.is_err(), "nothing stored: the error");
        store
            .commit_bytes(&key, bytes::Bytes::from_static(b"old"), Meta::default())
            .await
            .unwrap();
        let a = failing(true).await.unwrap();
        assert!(a.stale && a.asked);
        assert_eq!(&a.value[..], b"old");
        assert!(
            m.render()
                .contains("talos_gen_stale_answers_total{kind=\"document\"} 1"),
            "{}",
            m.render()
        );
        assert!(
            failing(false).await.is_err(),
            "a failure the rule does not allow"
        );
        assert!(
            m.render()
                .contains("talos_gen_stale_answers_total{kind=\"document\"} 1")
        );
    }
    /// A lookup of `key` on `fills` whose fetch counts itself in `asked`,
    /// waits `delay` (for ever when `None`), then answers `result`.
    fn flight_lookup(
        fills: &Fills,
        key: &Key,
        asked: &Arc<AtomicUsize>,
        delay: Option<Duration>,
        result: Result<&'static [u8], Failed>,
        remember: bool,
    ) -> impl Future<Output = Result<Answer<bytes::Bytes>, Failed>> + Send + 'static {
        let (fills, key, asked) = (fills.clone(), key.clone(), asked.clone());
        async move {
            let m = Metrics::default();
            let store = fills.store().clone();
            let mut r = rules(&key, Duration::ZERO, &m);
            if remember {
                r.unanswered = |e: &Failed| e.0.then(|| "refused".to_string());
            }
            revalidate(
                &fills,
                r,
                || read(&store, &key),
                move |_| async move {
                    asked.fetch_add(1, SeqCst);
                    match delay {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending::<()>().await,
                    }
                    result.map(bytes::Bytes::from_static)
                },
                || Failed(false),
            )
            .await
        }
    }

    /// Sixteen lookups of one key at once share one flight's outcome:
    /// its failure is every waiter's answer (the stored copy, stale, for
    /// each; the error with nothing stored); its new copy theirs too,
    /// marked collapsed. One upstream fetch each time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_take_the_flights_outcome_and_never_fetch_again() {
        let dir = tempfile::tempdir().unwrap();
        let fills = Fills::new(Store::open(dir.path(), None).unwrap());
        let key = Key::factory_doc("/versions");
        let burst = |result: Result<&'static [u8], Failed>| {
            let asked = Arc::new(AtomicUsize::new(0));
            let all: Vec<_> = (0..16)
                .map(|_| {
                    let d = Some(Duration::from_millis(300));
                    tokio::spawn(flight_lookup(
                        &fills,
                        &key,
                        &asked,
                        d,
                        result.clone(),
                        false,
                    ))
                })
                .collect();
            async move {
                let mut out = Vec::new();
                for a in all {
                    out.push(a.await.unwrap());
                }
                (asked.load(SeqCst), out)
            }
        };
        let (asked, out) = burst(Err(Failed(true))).await;
        assert_eq!(asked, 1, "one fetch for 16 lookups of a cold key");
        assert!(out.iter().all(|a| a.is_err()), "the flight's error for all");
        fills
            .store()
            .commit_bytes(&key, bytes::Bytes::from_static(b"old"), Meta::default())
            .await
            .unwrap();
        let (asked, out) = burst(Err(Failed(true))).await;
        assert_eq!(asked, 1, "one fetch for 16 lookups of a stale key");
        for a in out {
            let a = a.unwrap();
            assert!(a.stale && &a.value[..] == b"old");
        }
        let (asked, out) = burst(Ok(b"new")).await;
        assert_eq!(asked, 1);
        let out: Vec<_> = out.into_iter().map(Result::unwrap).collect();
        assert!(out.iter().all(|a| &a.value[..] == b"new" && !a.stale));
        assert_eq!(out.iter().filter(|a| !a.collapsed).count(), 1, "one holder");
        assert!(out.iter().all(|a| a.how == How::Fetched));
        // The upstream confirming the stored copy: revalidated.
        let (_, out) = burst(Ok(b"old")).await;
        let a = out.into_iter().next().unwrap().unwrap();
        assert_eq!((a.how, a.stale), (How::Revalidated, false));
    }

    /// No wait on another's flight outlasts the bound (the upstream
    /// timeout plus a second) while the fetch never ends: the timeout
    /// naming the upstream (the stored copy, stale, where there is one);
    /// one fetch. (The holder waits for its own fetch, whose steps the
    /// upstream's limits bound; this one never ends: it is stopped.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waits_on_a_flight_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let outages = Outages::new(Duration::ZERO, Duration::ZERO);
        let fills = Fills::new(Store::open(dir.path(), None).unwrap()).with_outages(outages);
        let key = Key::factory_doc("/versions");
        let asked = Arc::new(AtomicUsize::new(0));
        let holder = tokio::spawn(flight_lookup(&fills, &key, &asked, None, Ok(b"x"), false));
        while asked.load(SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let t0 = std::time::Instant::now();
        let all: Vec<_> = (0..8)
            .map(|_| tokio::spawn(flight_lookup(&fills, &key, &asked, None, Ok(b"x"), false)))
            .collect();
        for a in all {
            assert!(a.await.unwrap().is_err());
        }
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert!(took >= Duration::from_secs(1), "{took:?}");
        assert_eq!(asked.load(SeqCst), 1);
        assert!(!holder.is_finished());
        holder.abort();
        fills
            .store()
            .commit_bytes(&key, bytes::Bytes::from_static(b"old"), Meta::default())
            .await
            .unwrap();
        let stale = flight_lookup(&fills, &key, &asked, None, Ok(b"x"), false).await;
        assert!(
            stale.unwrap().stale,
            "waited the bound, then the stored copy"
        );
        assert_eq!(
            asked.load(SeqCst),
            1,
            "the flight still runs: no second fetch"
        );
    }

    /// A failure is remembered: while the upstream is known down a cold
    /// key fails at once and a stored one answers stale at once, and one
    /// request at a time asks again; an answer forgets it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upstream_known_down_answers_at_once_and_is_asked_one_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let fills = Fills::new(Store::open(dir.path(), None).unwrap());
        let asked = Arc::new(AtomicUsize::new(0));
        let (a, b) = (Key::factory_doc("/a"), Key::factory_doc("/b"));
        let fail = Err(Failed(true));
        let first = flight_lookup(&fills, &a, &asked, Some(Duration::ZERO), fail.clone(), true);
        assert!(first.await.is_err());
        assert!(fills.outages().down("http://upstream.test").is_some());
        // One retry in flight (slow), another cold key at once: refused.
        let slow = Some(Duration::from_millis(500));
        let retry = tokio::spawn(flight_lookup(&fills, &a, &asked, slow, fail.clone(), true));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = std::time::Instant::now();
        let e = flight_lookup(&fills, &b, &asked, slow, fail.clone(), true).await;
        assert!(e.is_err() && t0.elapsed() < Duration::from_millis(200));
        fills
            .store()
            .commit_bytes(&b, bytes::Bytes::from_static(b"kept"), Meta::default())
            .await
            .unwrap();
        let s = flight_lookup(&fills, &b, &asked, slow, fail.clone(), true).await;
        assert!(s.unwrap().stale && t0.elapsed() < Duration::from_millis(400));
        assert!(retry.await.unwrap().is_err());
        assert_eq!(asked.load(SeqCst), 2, "the first and the one retry");
        // The upstream answers: forgotten.
        let ok = flight_lookup(&fills, &a, &asked, Some(Duration::ZERO), Ok(b"x"), true);
        assert!(ok.await.is_ok());
        assert!(fills.outages().down("http://upstream.test").is_none());
    }

    /// Within the grace past its freshness a stored copy answers at once,
    /// stale, while one background fetch refreshes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stale_while_revalidate_answers_at_once_and_refreshes_once() {
        let dir = tempfile::tempdir().unwrap();
        let outages = Outages::new(Duration::from_secs(3), Duration::from_secs(60));
        let fills = Fills::new(Store::open(dir.path(), None).unwrap()).with_outages(outages);
        let key = Key::factory_doc("/versions");
        let meta = Meta {
            fresh_for: Some(Duration::ZERO),
            ..Meta::default()
        };
        fills
            .store()
            .commit_bytes(&key, bytes::Bytes::from_static(b"old"), meta)
            .await
            .unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let t0 = std::time::Instant::now();
        let slow = Some(Duration::from_millis(500));
        for _ in 0..8 {
            let a = flight_lookup(&fills, &key, &asked, slow, Ok(b"[]"), false)
                .await
                .unwrap();
            assert!(a.stale && &a.value[..] == b"old");
        }
        assert!(
            t0.elapsed() < Duration::from_millis(400),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(asked.load(SeqCst), 1, "one background fetch");
        // (The test's fetch keeps nothing: the outcome is what the flight found.)
    }

    /// Fills and small fetches share one table: a key held for a fetch
    /// makes a second claim wait and a `join` of it wait too (then find
    /// what the fetch kept, starting no fill); the fills' count and status
    /// list fills only; the key is free again once the guard is dropped.
    #[tokio::test]
    async fn fills_and_fetches_share_one_table_of_keys() {
        let dir = tempfile::tempdir().unwrap();
        let fills = Fills::new(Store::open(dir.path(), None).unwrap());
        let key = Key::oci_blob("sha256:ab");
        let Claim::Mine(g) = fills.claim(&key) else {
            panic!("a free key is this caller's");
        };
        assert!(matches!(fills.claim(&key), Claim::Wait(_)));
        assert_eq!(fills.running(), 0);
        assert!(fills.in_progress().is_empty());
        let (f, k) = (fills.clone(), key.clone());
        let joined = tokio::spawn(async move {
            let j = f
                .join(&k, || -> crate::fill::FillSpec {
                    unreachable!("no fill: it was kept")
                })
                .await;
            matches!(j, Ok(crate::fill::Joined::Stored(_)))
        });
        tokio::task::yield_now().await;
        assert!(!joined.is_finished(), "the join waits for the fetch");
        fills
            .store()
            .commit_bytes(&key, bytes::Bytes::from_static(b"x"), Meta::default())
            .await
            .unwrap();
        drop(g);
        assert!(joined.await.unwrap(), "the join found what the fetch kept");
        assert!(matches!(fills.claim(&key), Claim::Mine(_)));
    }
}
