//! Eviction (`--cache-max-size`): least-recently-used objects that no
//! reader holds and no key pins go, after the index is re-read under the
//! store lock; and a reader's release, which runs a round when the store
//! is over its bound (or its view of other processes' writes is old).

use std::sync::atomic::Ordering;

use super::Store;
use super::entries::REFRESH_EVERY;

impl Store {
    /// Evict least-recently-used objects that no reader holds and no key
    /// pins until the total is within the limit. `keep` is never evicted.
    /// Before deciding, the index is re-read under the store lock, so an
    /// object another process pinned (or re-pointed a key to) is kept.
    /// Blocking: call it off the async threads.
    pub fn evict(&self, keep: Option<&str>) {
        self.evict_for(keep, 0)
    }

    /// [`Store::evict`] until `extra` more bytes fit within the limit too
    /// (a fill waiting for room, `store::room`); whoever waits for room
    /// is woken after.
    pub(super) fn evict_for(&self, keep: Option<&str>, extra: u64) {
        let Some(max) = self.inner.max_size else {
            return;
        };
        let max = max.saturating_sub(extra);
        self.evict_to(keep, max);
        self.inner.room_freed.notify_waiters();
    }

    fn evict_to(&self, keep: Option<&str>, max: u64) {
        {
            let st = self.lock();
            let fresh = st.last_refresh.is_some_and(|t| t.elapsed() < REFRESH_EVERY);
            if st.total + self.in_flight() <= max && fresh {
                return;
            }
        }
        let Ok(_lock) = self.lock_store() else {
            return;
        };
        // Nothing is evicted on a view the backend did not confirm (an
        // object another process pinned meanwhile would go).
        if self.refresh().is_err() {
            return;
        }
        loop {
            // The victim leaves memory with its keys in one hold of the
            // state lock (no reader can lease it after the choice); its
            // entries and bytes are deleted after, unlocked.
            let (digest, taken) = {
                let mut st = self.lock();
                if st.total + self.in_flight() <= max {
                    break;
                }
                let victim = st
                    .objects
                    .iter()
                    .filter(|(d, o)| {
                        o.readers == 0
                            && Some(d.as_str()) != keep
                            && !o
                                .keys
                                .iter()
                                .any(|k| st.keys.get(k).is_some_and(|e| e.pinned))
                    })
                    .min_by_key(|(_, o)| o.last_used)
                    .map(|(d, o)| (d.clone(), o.keys.clone()));
                let Some((digest, keys)) = victim else {
                    break;
                };
                let taken: Vec<_> = keys
                    .iter()
                    .filter_map(|k| st.take_key(k.as_str()))
                    .collect();
                (digest, taken)
            };
            tracing::info!(%digest, "evicting");
            if let Err(e) = self.delete_taken(taken) {
                // Out of memory already: what stays is swept as an orphan.
                tracing::warn!(%digest, error = %e, "evicting: a deletion failed");
            }
        }
    }

    /// A reader's lease ended.
    pub(super) fn release(&self, digest: &str, born: u64) {
        let over = {
            let mut st = self.lock();
            if let Some(o) = st.objects.get_mut(digest)
                && o.born == born
            {
                o.readers = o.readers.saturating_sub(1);
            }
            // Over the bound in this view, or a view a second old: another
            // process (the mirror job, an import) may have written since,
            // and its objects count against the bound too (the round reads
            // them in under the store lock, at most once a second).
            let stale = st.last_refresh.is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
            self.inner
                .max_size
                .is_some_and(|m| st.total + self.in_flight() > m || stale)
        };
        // A burst's objects become evictable as their readers leave. One
        // eviction runs at a time; a release during it asks for another
        // round, so the last reader to leave is never missed.
        if !over {
            return;
        }
        self.inner.evict_again.store(true, Ordering::Release);
        if !self.inner.evicting.swap(true, Ordering::AcqRel) {
            let store = self.clone();
            let run = move || {
                loop {
                    store.inner.evict_again.store(false, Ordering::Release);
                    store.evict(None);
                    store.inner.evicting.store(false, Ordering::Release);
                    // A release between the round and the flag: go again
                    // unless that release started its own round.
                    if !store.inner.evict_again.load(Ordering::Acquire)
                        || store.inner.evicting.swap(true, Ordering::AcqRel)
                    {
                        break;
                    }
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn_blocking(run);
                }
                Err(_) => run(),
            }
        }
    }
}
