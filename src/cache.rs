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
//! - **wait**: another caller is fetching the key ([`Fills::claim`]): its
//!   end is awaited with nothing held, and the store read again;
//! - **miss**: this caller holds the key in the one table and fetches
//!   (the fetch keeps what it got). The key is held across the fetch
//!   alone: the store is read before it is taken, and after taking it only
//!   the record in memory is looked at (a fetch that ended meanwhile made
//!   it fresh: the key is let go and the store read again).
//!
//! Stale-if-error: while the store does not answer, the stored copy (from
//! the local tier) is answered as it is, else the caller's "unavailable"
//! (nothing fetched could be kept); when the fetch fails in a way the
//! caller's rule allows (`may_use_stale`: a 5xx, a timeout, unreachable;
//! never a 4xx the upstream meant), the stored copy of any age. Either way
//! the answer says `stale` (the HTTP edge adds `Warning: 110 - "stale"`)
//! and [`Metrics::stale`] counts it, here only.

use std::future::Future;
use std::time::Duration;

use crate::fill::{Claim, Fills};
use crate::metrics::Metrics;
use crate::store::{Entry, Key};

/// A stored copy as the caller reads it: its value and, where one key
/// holds it, its record (freshness, pin). A copy without a record (a tag
/// list, gathered from many keys) is never fresh.
#[derive(Debug, Clone)]
pub struct Stored<T> {
    pub value: T,
    pub entry: Option<Entry>,
}

/// What a revalidating lookup answered.
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub value: T,
    /// The stored copy, answered because the upstream failed or the store
    /// does not answer.
    pub stale: bool,
    /// The upstream was asked for this answer (a miss), whatever it said.
    pub asked: bool,
}

/// How one kind of thing is revalidated.
pub struct Rules<'a, E> {
    /// The metric's kind (`document`, `manifest`, `referrers`, `tags`).
    pub kind: &'static str,
    /// The key held while fetching (one fetch per key); `None`: not
    /// coalesced (a tag list page: its query is part of it).
    pub key: Option<&'a Key>,
    /// How long a record without `fresh_until` is fresh after `fetched`
    /// (zero: always asked again).
    pub ttl: Duration,
    pub metrics: Option<&'a Metrics>,
    /// May the stored copy answer for this failure of the fetch?
    pub may_use_stale: fn(&E) -> bool,
}

/// The stored copy, if fresh.
fn fresh<T: Clone>(s: &Option<Stored<T>>, ttl: Duration) -> Option<T> {
    s.as_ref()
        .filter(|s| s.entry.as_ref().is_some_and(|e| e.is_fresh(ttl)))
        .map(|s| s.value.clone())
}

/// The revalidating lookup (see the module): `read` reads the stored copy
/// (`Err` when the store holds it and cannot read it now), `fetch` asks
/// the upstream, given the stored copy, and keeps what it got;
/// `unavailable` is the answer while the store does not answer and holds
/// no copy it can read.
pub async fn revalidate<T, E, R, RF, F, FF>(
    fills: &Fills,
    rules: Rules<'_, E>,
    read: R,
    fetch: F,
    unavailable: impl FnOnce() -> E,
) -> Result<Answer<T>, E>
where
    T: Clone,
    E: std::fmt::Debug,
    R: Fn() -> RF,
    RF: Future<Output = Result<Option<Stored<T>>, E>>,
    F: FnOnce(Option<Stored<T>>) -> FF,
    FF: Future<Output = Result<T, E>>,
{
    let hit = |value| Answer {
        value,
        stale: false,
        asked: false,
    };
    let stale = |s: Stored<T>, asked: bool| {
        if let Some(m) = rules.metrics {
            m.stale(rules.kind);
        }
        Answer {
            value: s.value,
            stale: true,
            asked,
        }
    };
    let store = fills.store();
    let (_held, stored) = loop {
        let stored = read().await?;
        if let Some(v) = fresh(&stored, rules.ttl) {
            return Ok(hit(v));
        }
        if !store.available() {
            // Nothing fetched could be kept: the copy as it is, or 503.
            return match stored {
                Some(s) => Ok(stale(s, false)),
                None => Err(unavailable()),
            };
        }
        let Some(key) = rules.key else {
            break (None, stored);
        };
        match fills.claim(key) {
            Claim::Mine(g) => {
                // A fetch that ended between the read and the claim made
                // the record fresh (memory only): read that copy instead.
                if store.entry(key).is_some_and(|e| e.is_fresh(rules.ttl)) {
                    drop(g);
                    continue;
                }
                break (Some(g), stored);
            }
            Claim::Wait(w) => w.await,
        }
    };
    match fetch(stored.clone()).await {
        Ok(value) => Ok(Answer {
            value,
            stale: false,
            asked: true,
        }),
        Err(e) if (rules.may_use_stale)(&e) => match stored {
            Some(s) => {
                let key = rules.key.map(Key::to_string).unwrap_or_default();
                tracing::warn!(kind = rules.kind, key, error = ?e, "the upstream failed; serving the stored copy");
                Ok(stale(s, true))
            }
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Meta, Store};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// A failure of the test's upstream: `true` may be answered stale.
    #[derive(Debug)]
    struct Failed(bool);

    impl std::fmt::Display for Failed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "failed (stale allowed: {})", self.0)
        }
    }

    fn rules<'a>(key: &'a Key, ttl: Duration, m: &'a Metrics) -> Rules<'a, Failed> {
        Rules {
            kind: "document",
            key: Some(key),
            ttl,
            metrics: Some(m),
            may_use_stale: |e: &Failed| e.0,
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
                    |_| async {
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
