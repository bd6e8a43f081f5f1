//! The small fetches' side of the one table of keys in flight
//! ([`super::Fills`]): what a key in flight is ([`Flight`]: a fill, or a
//! small fetch held by [`super::Fills::claim`]), the guard that holds a
//! fetch's key ([`FetchGuard`]) and the [`Outcome`] it hands to everyone
//! who waited on it. Knows nothing of what is fetched.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::watch;

use super::{FetchError, Phase, Shared};
use crate::outage::{Outages, Retry};
use crate::store::{Entry, Key};

/// What the one keyed table ([`super::Fills`]' in-flight map) holds for a
/// key being fetched: a fill (a body many readers stream while it grows)
/// or a small fetch (a document, a tag, a referrers index, a tag list:
/// its waiters take its [`Outcome`] when it ended).
#[derive(Clone)]
pub(super) enum Flight {
    Fill(Arc<Shared>),
    Fetch(watch::Receiver<Option<Outcome>>),
}

/// What a small fetch found, handed to everyone who waited on it
/// ([`FetchGuard::finish`]): the caller's own `Result`, type-erased (the
/// one table holds flights of every kind); `None` when the fetch ended
/// without one (its holder went away) or the flight was a fill.
pub type Outcome = Arc<dyn std::any::Any + Send + Sync>;

impl Flight {
    /// Resolves when this flight ended (a fill committed or failed, a
    /// fetch's [`FetchGuard`] dropped), with the fetch's outcome.
    pub(super) async fn ended(self) -> Option<Outcome> {
        match self {
            Flight::Fill(sh) => {
                let mut rx = sh.tx.subscribe();
                loop {
                    if matches!(
                        rx.borrow_and_update().phase,
                        Phase::Done(_) | Phase::Failed(_)
                    ) {
                        return None;
                    }
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            }
            Flight::Fetch(mut rx) => {
                while rx.changed().await.is_ok() {}
                rx.borrow().clone()
            }
        }
    }
}

/// The answer of [`Fills::claim`]: this caller fetches, holding the key,
/// or waits for the fetch in flight to end and takes its outcome.
pub enum Claim {
    /// Fetch: no other fetch of the key runs while this is held.
    Mine(FetchGuard),
    /// Another caller is fetching the key: resolves when it ended, with
    /// what it found ([`FetchGuard::finish`]), `None` if nothing.
    Wait(BoxFuture<'static, Option<Outcome>>),
}

/// The key held in the one table for a small fetch; let go when dropped.
pub struct FetchGuard {
    pub(super) flights: Arc<Mutex<HashMap<Key, Flight>>>,
    pub(super) key: Key,
    pub(super) tx: Option<watch::Sender<Option<Outcome>>>,
}

impl FetchGuard {
    /// Resolves when this fetch ended, with its outcome (what the waiters
    /// get), for the holder that handed the fetch to a task.
    pub fn ended(&self) -> BoxFuture<'static, Option<Outcome>> {
        match &self.tx {
            Some(tx) => Box::pin(Flight::Fetch(tx.subscribe()).ended()),
            None => Box::pin(async { None }),
        }
    }

    /// End the fetch with `outcome`: the key leaves the table and every
    /// waiter wakes with it, at once.
    pub fn finish(mut self, outcome: Outcome) {
        if let Some(tx) = &self.tx {
            tx.send_replace(Some(outcome));
        }
        drop(self.tx.take().map(|tx| self.release(tx)));
    }

    /// Take the key out of the table (if it is still this fetch's); the
    /// sender, dropped by the caller after, wakes the waiters.
    fn release(&self, tx: watch::Sender<Option<Outcome>>) -> watch::Sender<Option<Outcome>> {
        let mut map = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Flight::Fetch(rx)) = map.get(&self.key)
            && rx.same_channel(&tx.subscribe())
        {
            map.remove(&self.key);
        }
        tx
    }
}

impl Drop for FetchGuard {
    fn drop(&mut self) {
        // Waiters wake when the sender goes, after the key left the table.
        drop(self.tx.take().map(|tx| self.release(tx)));
    }
}

/// May a fill ask `upstream`? Yes (holding its one retry while it is
/// known down), or a timeout naming it: another fill is asking it again.
pub(super) fn may_ask(
    outages: &Outages,
    upstream: Option<&str>,
) -> Result<Option<Retry>, FetchError> {
    match upstream {
        Some(u) => match outages.try_again(u) {
            Some(r) => Ok(Some(r)),
            None => Err(FetchError::Timeout(outages.refusal(u))),
        },
        None => Ok(None),
    }
}

/// What a fill's end teaches the memory of upstreams down: a timeout
/// marks its upstream, an answer (a 4xx too) forgets it.
pub(super) fn learn(outages: &Outages, upstream: Option<&str>, r: &Result<Entry, FetchError>) {
    match (r, upstream) {
        (Err(FetchError::Timeout(why)), Some(u)) => outages.failed(u, why),
        (Ok(_) | Err(FetchError::Status { .. }), Some(u)) => outages.answered(u),
        _ => {}
    }
}
