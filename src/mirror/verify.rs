//! `mirror verify`: re-hash every stored object against its digest. A bad
//! object is named and dropped with every key naming it, so the service
//! never serves it and the next `sync` fetches it again. What the store
//! itself dropped when it opened (an object truncated, grown by appended
//! bytes, or gone) is named too. Objects without chunk checksums (written
//! by an older talos-gen) get them, from bytes just proven whole.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::error::{Error, Result};

/// One object that failed.
#[derive(Debug, Clone)]
pub struct BadObject {
    pub digest: String,
    pub keys: Vec<crate::store::Key>,
    pub reason: String,
    /// The drop took: the bytes (or, for a misnamed key, the key) are gone.
    pub removed: bool,
}

#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    pub objects: usize,
    pub bytes: u64,
    pub bad: Vec<BadObject>,
    /// Entries the store dropped as it opened (one line each).
    pub dropped_at_open: Vec<String>,
    /// Objects whose chunk checksums were missing or wrong, now rewritten.
    pub sums_written: usize,
    /// Objects that could not be read whole (the store did not answer, a
    /// read failed): nothing is known of their bytes, so nothing is
    /// removed (`removed` is false); a later run checks them.
    pub unread: Vec<BadObject>,
}

impl VerifyReport {
    /// Did the run drop anything (so `mirror verify` exits 1)?
    pub fn dropped_anything(&self) -> bool {
        !self.bad.is_empty() || !self.dropped_at_open.is_empty()
    }

    /// Was every object read and found whole (else `mirror verify` exits 1)?
    pub fn all_checked_whole(&self) -> bool {
        !self.dropped_anything() && self.unread.is_empty()
    }
}

/// What re-hashing one object came to.
enum Hashed {
    /// Read whole: its sha256, its length, its chunk checksums.
    Whole(String, u64, crate::store::sums::Sums),
    /// The store says the object is not there (keys naming bytes that are
    /// gone): bad, confirmed.
    Missing(Error),
    /// The read did not complete (the store did not answer, an I/O error):
    /// nothing learnt about the bytes, nothing removed on it.
    Unread(String),
}

/// Read one object whole and hash it (the bytes as they are: their real
/// length, unchecked).
fn hash(store: &crate::store::Store, digest: &str) -> Hashed {
    let o = match store.open_raw(digest) {
        Ok(o) => o,
        Err(e @ Error::NotFound(_)) => return Hashed::Missing(e),
        Err(e) => return Hashed::Unread(e.to_string()),
    };
    let n = o.len();
    match crate::store::hash_and_sum(&*o) {
        Ok((h, sums)) => Hashed::Whole(h, n, sums),
        Err(e) => Hashed::Unread(crate::text::error_line(&e)),
    }
}

/// Re-hash every object of the store at `cache_dir` (several threads).
pub fn verify(loc: impl Into<crate::store::Location>) -> Result<VerifyReport> {
    let loc = loc.into();
    if let Some(dir) = loc.dir()
        && !dir.is_dir()
    {
        return Err(Error::bad_input(format!(
            "--cache-dir {}: not a directory",
            dir.display()
        )));
    }
    // A directory that is not a store is refused as export and prune do
    // (opening it would make the store's folders in it).
    let store = super::open_store(&loc)?;
    Ok(check(&store))
}

/// Re-hash every object of `store`: what [`verify`] runs once the store is
/// open. An object is dropped only on a whole read that proves it bad.
fn check(store: &crate::store::Store) -> VerifyReport {
    let mut by_digest: BTreeMap<String, (u64, Vec<crate::store::Key>)> = BTreeMap::new();
    // A key that names a digest (blob, manifest, schematic) whose object
    // has another is bad whatever the bytes: named, and the key dropped
    // (the object stays for the keys that name it rightly).
    let mut misnamed = Vec::new();
    for e in store.entries() {
        if let Err(why) = crate::registry::layout::check_claim(&e.key, &e.digest) {
            misnamed.push(BadObject {
                digest: e.digest.clone(),
                keys: vec![e.key.clone()],
                reason: why.to_string(),
                removed: false,
            });
            continue;
        }
        let v = by_digest
            .entry(e.digest.clone())
            .or_insert((e.size, Vec::new()));
        v.1.push(e.key);
    }
    let work: Vec<(String, u64, Vec<crate::store::Key>)> = by_digest
        .into_iter()
        .map(|(d, (size, keys))| (d, size, keys))
        .collect();
    let next = Mutex::new(work.into_iter());
    let bad = Mutex::new(Vec::new());
    let report = Mutex::new(VerifyReport::default());
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let job = next.lock().unwrap_or_else(|p| p.into_inner()).next();
                    let Some((digest, size, keys)) = job else {
                        break;
                    };
                    let reason = match hash(store, &digest) {
                        Hashed::Unread(why) => {
                            report
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .unread
                                .push(BadObject {
                                    digest,
                                    keys,
                                    reason: why,
                                    removed: false,
                                });
                            continue;
                        }
                        Hashed::Missing(e) => Some(format!("unreadable: {e}")),
                        Hashed::Whole(_, n, _) if n > size => Some(format!(
                            "{} bytes appended ({n} bytes, expected {size})",
                            n - size
                        )),
                        Hashed::Whole(_, n, _) if n < size => {
                            Some(format!("truncated ({n} bytes, expected {size})"))
                        }
                        Hashed::Whole(h, _, _) if h != digest => {
                            Some(format!("bytes hash to sha256:{h}, not to their name"))
                        }
                        Hashed::Whole(_, n, sums) => {
                            // (checksums that could not be read are written
                            // again: they are proven by the read above)
                            let stored = store.stored_sums(&digest).ok().flatten();
                            if stored.as_ref() != Some(&sums)
                                && store.write_sums(&digest, &sums).is_ok()
                            {
                                report
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .sums_written += 1;
                            }
                            report.lock().unwrap_or_else(|p| p.into_inner()).bytes += n;
                            None
                        }
                    };
                    report.lock().unwrap_or_else(|p| p.into_inner()).objects += 1;
                    if let Some(reason) = reason {
                        bad.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(BadObject {
                                digest,
                                keys,
                                reason,
                                removed: false,
                            });
                    }
                }
            });
        }
    });
    let mut report = report.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut bad = bad.into_inner().unwrap_or_else(|p| p.into_inner());
    bad.sort_by(|a, b| a.digest.cmp(&b.digest));
    for b in &mut bad {
        b.removed = store.drop_object(&b.digest, &b.reason);
    }
    for m in &mut misnamed {
        tracing::warn!(key = %m.keys[0], reason = %m.reason, "dropping a misnamed key");
        m.removed = match store.remove(&m.keys[0]) {
            Ok(_) => store.entry(&m.keys[0]).map(|e| e.digest).as_ref() != Some(&m.digest),
            Err(e) => {
                tracing::warn!(key = %m.keys[0], error = %e, "the misnamed key could not be dropped");
                false
            }
        };
    }
    bad.extend(misnamed);
    report.bad = bad;
    report.dropped_at_open = store.dropped_at_open().to_vec();
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// A store at `dir` holding each `(key, body)`.
    async fn stored(dir: &std::path::Path, items: &[(&str, &[u8])]) -> Store {
        let store = Store::open(dir, None).unwrap();
        for (k, body) in items {
            let body = bytes::Bytes::copy_from_slice(body);
            store
                .commit_bytes(*k, body, Default::default())
                .await
                .unwrap();
        }
        store
    }

    /// An object that cannot be read (the bucket did not answer: a test
    /// backend whose opens time out, as a frozen bucket's would at that
    /// moment, which a real one cannot be made to do at a chosen step of
    /// the run) is named as not read, never dropped: its keys and bytes
    /// stay, and the run exits 1.
    #[tokio::test]
    async fn an_object_that_cannot_be_read_is_never_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = stored(dir.path(), &[("a", b"hello"), ("b", b"world")]).await;
        drop(store);
        let hooked = crate::store::backend::Hooked {
            unanswered_opens: true,
            ..crate::store::backend::Hooked::new(dir.path())
        };
        let store = Store::with_backend(Box::new(hooked), None).unwrap();
        let r = tokio::task::spawn_blocking(move || check(&store))
            .await
            .unwrap();
        assert!(r.bad.is_empty(), "{:?}", r.bad);
        assert_eq!(r.unread.len(), 2, "{:?}", r.unread);
        assert!(
            r.unread
                .iter()
                .all(|u| u.reason.contains("did not answer") && !u.removed)
        );
        assert!(!r.all_checked_whole());
        let store = Store::open(dir.path(), None).unwrap();
        for k in ["a", "b"] {
            let o = store.lookup(k).unwrap().expect(k);
            assert_eq!(o.read_small(64).unwrap().len(), 5);
        }
        assert!(verify(dir.path()).unwrap().all_checked_whole());
    }

    #[tokio::test]
    async fn flipped_byte_is_found_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = stored(dir.path(), &[("a", b"hello"), ("b", b"world")]).await;
        let e = store.entry("a").unwrap();
        drop(store);
        let r = verify(dir.path()).unwrap();
        assert!(r.bad.is_empty());
        assert_eq!(r.objects, 2);
        std::fs::write(dir.path().join("objects/sha256").join(&e.digest), b"jello").unwrap();
        let r = verify(dir.path()).unwrap();
        assert_eq!(r.bad.len(), 1);
        assert_eq!(r.bad[0].keys, ["a"]);
        let store = Store::open(dir.path(), None).unwrap();
        assert!(store.entry("a").is_none());
        assert!(store.entry("b").is_some());
    }

    /// Appended bytes and truncation are named (the store drops such
    /// entries as it opens; verify reports what it dropped) and make the
    /// run count as having dropped something.
    #[tokio::test]
    async fn appended_and_truncated_objects_are_named() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let items: [(&str, &[u8]); 3] = [("grown", b"hello"), ("cut", b"world!"), ("ok", b"fine")];
        let store = stored(dir.path(), &items).await;
        let grown = store.entry("grown").unwrap().digest;
        let cut = store.entry("cut").unwrap().digest;
        drop(store);
        let objects = dir.path().join("objects/sha256");
        std::fs::OpenOptions::new()
            .append(true)
            .open(objects.join(&grown))
            .unwrap()
            .write_all(b" extra")
            .unwrap();
        std::fs::write(objects.join(&cut), b"wor").unwrap();
        let r = verify(dir.path()).unwrap();
        assert!(r.dropped_anything());
        let all = r.dropped_at_open.join("\n");
        assert!(
            all.contains("grown") && all.contains("bytes appended"),
            "{all}"
        );
        assert!(all.contains("cut") && all.contains("truncated"), "{all}");
        assert_eq!(r.objects, 1, "only the intact one is left to hash");
        let r = verify(dir.path()).unwrap();
        assert!(!r.dropped_anything(), "the second run finds nothing more");
    }

    /// Objects without chunk checksums (an older release) get them.
    #[tokio::test]
    async fn missing_checksums_are_added() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        let e = store
            .commit_bytes(
                "k",
                bytes::Bytes::copy_from_slice(b"old object"),
                Default::default(),
            )
            .await
            .unwrap();
        drop(store);
        std::fs::remove_file(dir.path().join("sums").join(&e.digest)).unwrap();
        let r = verify(dir.path()).unwrap();
        assert_eq!(r.sums_written, 1);
        assert!(!r.dropped_anything());
        assert!(dir.path().join("sums").join(&e.digest).exists());
    }
}
