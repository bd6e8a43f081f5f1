//! Room for fills under `--cache-max-size` that holds on disk: a fill
//! holds its bytes ([`Reservation`]) only when they fit beside what the
//! store holds and every other fill holds, after least recently used
//! objects were evicted for them; otherwise it waits for room (a fill
//! committed, a reader gone, an eviction round ended), up to a bound, and
//! is refused at once when it can never fit (more than the bound less
//! what is pinned). So a burst of cold fills whose reservations alone
//! exceed the bound runs as room allows, never past it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Entry, Key, Meta, Reservation, Store, TempObject};
use crate::error::{Error, Result};

/// Why a fill got no room.
#[derive(Debug, thiserror::Error)]
pub enum NoRoom {
    /// It can never fit: larger than `--cache-max-size` less what is pinned.
    #[error(
        "{len} bytes do not fit in --cache-max-size {max} bytes ({pinned} of them pinned): not stored"
    )]
    Never { len: u64, max: u64, pinned: u64 },
    /// No room was made within the wait (everything else in use).
    #[error(
        "no room for {len} bytes within --cache-max-size {max} bytes after {}s (the store is full of objects in use)",
        waited.as_secs()
    )]
    Full {
        len: u64,
        max: u64,
        waited: Duration,
    },
}

/// How long a waiting fill sleeps at most before it looks again (a
/// wake-up it missed between its look and its wait).
const LOOK_AGAIN: Duration = Duration::from_millis(100);

impl Store {
    /// Hold `len` bytes for a fill against `--cache-max-size`, evicting
    /// for them, waiting up to `wait` for room (see the module doc).
    pub async fn reserve_room(
        &self,
        len: u64,
        wait: Duration,
    ) -> std::result::Result<Reservation, NoRoom> {
        let mut r = self.no_room_held();
        self.grow_room(&mut r, len, wait).await?;
        Ok(r)
    }

    /// Hold `more` bytes on top of `r` (a fill of unknown length as its
    /// bytes arrive), as [`Store::reserve_room`].
    pub async fn grow_room(
        &self,
        r: &mut Reservation,
        more: u64,
        wait: Duration,
    ) -> std::result::Result<(), NoRoom> {
        let Some(max) = self.inner.max_size else {
            self.inner.in_flight.fetch_add(more, Ordering::AcqRel);
            r.len += more;
            return Ok(());
        };
        let pinned = self.pinned_bytes();
        let whole = r.len + more;
        if whole > max.saturating_sub(pinned) {
            return Err(NoRoom::Never {
                len: whole,
                max,
                pinned,
            });
        }
        let started = Instant::now();
        loop {
            let woken = self.inner.room_freed.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.try_hold(more, max) {
                r.len += more;
                return Ok(());
            }
            // Make room: one eviction round for these bytes, awaited.
            let store = self.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || store.evict_for(None, more)).await {
                tracing::warn!(error = %e, "an eviction for a fill did not run");
            }
            if self.try_hold(more, max) {
                r.len += more;
                return Ok(());
            }
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(NoRoom::Full {
                    len: whole,
                    max,
                    waited: started.elapsed(),
                });
            }
            let _ = tokio::time::timeout(left.min(LOOK_AGAIN), woken).await;
        }
    }

    /// [`Store::commit`] of a fill that holds `room`: let go only once the
    /// object counts itself, so no other fill takes the room its file
    /// still holds on disk meanwhile.
    pub async fn commit_held(
        &self,
        tmp: TempObject,
        key: &Key,
        meta: Meta,
        room: Reservation,
    ) -> Result<Entry> {
        let store = self.clone();
        let key = key.clone();
        tokio::task::spawn_blocking(move || store.commit_now(tmp, &key, meta, Some(room)))
            .await
            .map_err(|e| Error::io("commit task", std::io::Error::other(e)))?
    }

    /// Take `n` bytes into the fills' holdings if they fit beside the
    /// committed objects and every other holding.
    fn try_hold(&self, n: u64, max: u64) -> bool {
        let total = self.total_size();
        self.inner
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (total + held + n <= max).then_some(held + n)
            })
            .is_ok()
    }

    /// Bytes of objects some key pins (never evicted).
    fn pinned_bytes(&self) -> u64 {
        let st = self.lock();
        st.objects
            .values()
            .filter(|o| {
                o.keys
                    .iter()
                    .any(|k| st.keys.get(k).is_some_and(|e| e.pinned))
            })
            .map(|o| o.size)
            .sum()
    }
}
