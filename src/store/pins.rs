//! Pins recorded apart from the entries replicas write, so no writer can
//! undo a pin: a pinned key has a **pin record** (`pins/<sha256(key)>.pin`,
//! apart from its entry `index/<sha256(key)>.json`, the same [`Entry`] with
//! `pinned: true`), written and deleted only by a pinning write (the
//! mirror job, `set_pinned`, a token holder's schematic). A cached copy
//! (a fill, a link) writes the entry only, never the pin record.
//!
//! Why: the store lock orders the processes of one store only where the
//! backend honours conditional writes (`s3::lock`); a bucket that ignores
//! them (Garage 2.5 ignores `If-None-Match` and `If-Match` alike) lets a
//! replica's entry write, decided before the mirror pinned the key, land
//! after it. That write replaces the entry, never the pin record: a key
//! whose pin record stands is pinned, with the pin record's digest,
//! whatever its entry says, until a pinning write of `pinned: false`
//! writes the entry unpinned and then deletes the record.
//!
//! A pinned write writes the pin record first, then the entry (pinned
//! too, so an entry alone still says what a store written before pin
//! records says: an entry written with `pinned: true` by an older
//! talos-gen reads as pinned).

use super::names::index_name;
pub(super) use super::names::{is_pin_name, pin_name, pinned_entries};
use super::{Entry, Store};
use crate::error::{Error, Result};

impl Store {
    /// `key`'s pin record as the backend holds it now, with its change
    /// token, when its object is there; `Err` when the backend did not
    /// answer (never taken for "not pinned"). Blocking.
    pub(super) fn read_pin(&self, key: &str) -> Result<Option<(Entry, u64)>> {
        let b = self.backend();
        let name = pin_name(key);
        let Some((body, token)) = self
            .answered(b.read_entry(&name))
            .map_err(|e| self.did_not_answer(e))?
        else {
            return Ok(None);
        };
        let Ok(mut en) = super::names::parse_entry(&name, &body) else {
            return Ok(None);
        };
        en.pinned = true;
        let len = self
            .answered(b.object_len(&en.digest))
            .map_err(|e| self.did_not_answer(e))?;
        Ok((len == Some(en.size)).then_some((en, token)))
    }

    /// Write `entry`'s records (the caller holds the store lock): a pinned
    /// one's pin record first, then the entry; an unpinned one's entry,
    /// then, when `was_pinned` (a pin record stood), the pin record is
    /// deleted. The entry's new change token; `Err` names the record the
    /// backend did not take (what was written before it stands).
    pub(super) fn write_records(&self, entry: &Entry, was_pinned: bool) -> Result<u64> {
        let b = self.backend();
        let key = entry.key.as_str();
        let body = serde_json::to_vec_pretty(entry)
            .map_err(|e| Error::io("encoding an index entry", std::io::Error::other(e)))?;
        let failed = |what: &str, e| {
            Error::io(
                format!("writing the {what} of {} in {}", entry.key, self.describe()),
                e,
            )
        };
        if entry.pinned {
            let name = pin_name(key);
            let token = self
                .answered(b.write_entry(&name, &body))
                .map_err(|e| failed("pin record", e))?;
            let mut st = self.lock();
            st.seen.insert(name, token);
            st.pins.insert(key.to_string());
        }
        let token = self
            .answered(b.write_entry(&index_name(key), &body))
            .map_err(|e| failed("index entry", e))?;
        self.lock().written += 1;
        if !entry.pinned && was_pinned {
            let name = pin_name(key);
            self.answered(b.delete_entry(&name))
                .map_err(|e| failed("unpinning (deleting the pin record)", e))?;
            let mut st = self.lock();
            st.seen.remove(&name);
            st.pins.remove(key);
        }
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::super::backend::Hooked;
    use super::super::{Meta, Store};
    use std::sync::{Arc, Condvar, Mutex};

    fn meta(pinned: bool) -> Meta {
        Meta {
            pinned,
            ..Meta::default()
        }
    }

    /// A gate a backend call waits at: `held` once a call reached it,
    /// `open` lets it (and every later one) through.
    #[derive(Default)]
    struct Gate {
        state: Mutex<(bool, bool)>,
        cv: Condvar,
    }

    impl Gate {
        fn wait_here(&self) {
            let mut s = self.state.lock().unwrap();
            s.0 = true;
            self.cv.notify_all();
            while !s.1 {
                s = self.cv.wait(s).unwrap();
            }
        }
        fn wait_held(&self) {
            let mut s = self.state.lock().unwrap();
            while !s.0 {
                s = self
                    .cv
                    .wait_timeout(s, std::time::Duration::from_secs(10))
                    .unwrap()
                    .0;
            }
        }
        fn open(&self) {
            self.state.lock().unwrap().1 = true;
            self.cv.notify_all();
        }
    }

    /// A replica on a store whose lock orders nothing (as a bucket that
    /// ignores conditional writes), its entry writes of `key` held at `gate`.
    /// (A fake backend: a real bucket cannot be made to hold one PUT while
    /// another process writes; `tests/store/pin_race.rs` does it with a
    /// fault proxy in front of Garage.)
    fn replica(dir: &std::path::Path, key: &str, gate: &Arc<Gate>, max: Option<u64>) -> Store {
        let (g, name) = (gate.clone(), super::super::names::index_name(key));
        let b = Hooked {
            no_lock: true,
            on_write: Box::new(move |n| {
                if n == name {
                    g.wait_here()
                }
            }),
            ..Hooked::new(dir)
        };
        Store::with_backend(Box::new(b), max).unwrap()
    }

    /// Issue 48, item 1: a replica's commit of K read no entry and sent its
    /// write; the write is held while `mirror sync` (another process) writes
    /// K pinned; then it lands. K stays pinned with the mirror's digest, for
    /// every process, and an eviction by the replica keeps its object.
    /// (On main, 20169a0: K read back `pinned=false` with the replica's
    /// digest.)
    #[tokio::test(flavor = "multi_thread")]
    async fn a_replica_write_held_past_a_mirror_pin_never_unpins_it() {
        let dir = tempfile::tempdir().unwrap();
        let gate = Arc::new(Gate::default());
        let serve = replica(dir.path(), "k", &gate, Some(8));
        let mirror = Store::open(dir.path(), None).unwrap();
        let s = serve.clone();
        let write = tokio::spawn(async move {
            s.commit_bytes("k", b"the replica's copy"[..].into(), meta(false))
                .await
        });
        let g = gate.clone();
        tokio::task::spawn_blocking(move || g.wait_held())
            .await
            .unwrap();
        let pinned = mirror
            .commit_bytes("k", b"the mirror's copy"[..].into(), meta(true))
            .await
            .unwrap();
        assert!(pinned.pinned);
        gate.open();
        write.await.unwrap().unwrap();
        // Every process that reads the store now: pinned, the mirror's digest.
        let fresh = Store::open(dir.path(), None).unwrap();
        let e = fresh.entry("k").expect("k is held");
        assert!(e.pinned, "the replica's late write unpinned k");
        assert_eq!(e.digest, pinned.digest);
        // The replica itself, once it reads the index again (as its
        // eviction does, under the lock): pinned, its object kept.
        let s = serve.clone();
        tokio::task::spawn_blocking(move || s.evict(None))
            .await
            .unwrap();
        let seen = serve.entry("k").unwrap();
        assert!(seen.pinned && seen.digest == pinned.digest, "{seen:?}");
        assert!(fresh.object_path(&pinned.digest).unwrap().exists());
        // A later cached write of k by the replica changes nothing.
        let again = serve
            .commit_bytes("k", b"another copy"[..].into(), meta(false))
            .await
            .unwrap();
        assert_eq!(again.digest, pinned.digest);
        assert!(again.pinned);
    }

    /// Only a pinning write unpins: the mirror's unpin writes the entry
    /// unpinned, then deletes the pin record, and another process reads
    /// the key unpinned (evictable) after.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_mirror_unpin_is_seen_by_every_process() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = Store::open(dir.path(), None).unwrap();
        let e = mirror
            .commit_bytes("k", b"bytes"[..].into(), meta(true))
            .await
            .unwrap();
        let serve = Store::open(dir.path(), None).unwrap();
        assert!(serve.entry("k").unwrap().pinned);
        let pin = dir.path().join("pins").join(super::pin_name("k"));
        assert!(pin.exists(), "a pin record beside the entry");
        mirror.set_pinned("k", false).await.unwrap();
        assert!(!pin.exists(), "the pin record goes with the unpin");
        let s = serve.clone();
        tokio::task::spawn_blocking(move || s.refresh().unwrap())
            .await
            .unwrap();
        let now = serve.entry("k").unwrap();
        assert!(!now.pinned, "{now:?}");
        assert_eq!(now.digest, e.digest);
        assert!(
            !Store::open(dir.path(), None)
                .unwrap()
                .entry("k")
                .unwrap()
                .pinned
        );
    }

    /// A store written before pin records: an entry with `pinned: true` and
    /// no pin record still reads as pinned, and a cached write does not
    /// replace it.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_entry_pinned_by_an_older_talos_gen_still_reads_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let old = Store::open(dir.path(), None).unwrap();
        let e = old
            .commit_bytes("k", b"old bytes"[..].into(), meta(true))
            .await
            .unwrap();
        drop(old);
        // What an older talos-gen left: the entry alone.
        std::fs::remove_file(dir.path().join("pins").join(super::pin_name("k"))).unwrap();
        let serve = Store::open(dir.path(), None).unwrap();
        assert!(serve.entry("k").unwrap().pinned);
        let stands = serve
            .commit_bytes("k", b"new bytes"[..].into(), meta(false))
            .await
            .unwrap();
        assert!(stands.pinned && stands.digest == e.digest, "{stands:?}");
        assert!(
            Store::open(dir.path(), None)
                .unwrap()
                .entry("k")
                .unwrap()
                .pinned
        );
    }

    /// `Store::remove` says what it did: a deletion the backend did not
    /// confirm is an error, never a silent `()`.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_removal_the_backend_refused_is_an_error_not_silence() {
        let dir = tempfile::tempdir().unwrap();
        let b = Hooked {
            refuse_deletes: true,
            ..Hooked::new(dir.path())
        };
        let store = Store::with_backend(Box::new(b), None).unwrap();
        store
            .commit_bytes("k", b"bytes"[..].into(), meta(true))
            .await
            .unwrap();
        let s = store.clone();
        let r = tokio::task::spawn_blocking(move || s.remove("k"))
            .await
            .unwrap();
        assert!(r.is_err(), "{r:?}");
        let s = store.clone();
        let gone = tokio::task::spawn_blocking(move || s.remove("never-stored"))
            .await
            .unwrap();
        assert!(!gone.unwrap(), "a key never held: nothing removed");
    }
}
