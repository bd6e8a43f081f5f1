//! `mirror verify`: re-hash every stored object against its digest. A bad
//! object is named and dropped with every key naming it, so the service
//! never serves it and the next `sync` fetches it again.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};
use crate::store::Store;

/// One object that failed.
#[derive(Debug, Clone)]
pub struct BadObject {
    pub digest: String,
    pub keys: Vec<String>,
    pub reason: String,
}

#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    pub objects: usize,
    pub bytes: u64,
    pub bad: Vec<BadObject>,
}

/// sha256 of a file, streamed.
pub fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let r = f.read(&mut buf)?;
        if r == 0 {
            break;
        }
        h.update(&buf[..r]);
        n += r as u64;
    }
    Ok((hex::encode(h.finalize()), n))
}

/// Re-hash every object of the store at `cache_dir` (several threads).
pub fn verify(cache_dir: &Path) -> Result<VerifyReport> {
    if !cache_dir.is_dir() {
        return Err(Error::bad_input(format!(
            "--cache-dir {}: not a directory",
            cache_dir.display()
        )));
    }
    let store = Store::open(cache_dir, None)?;
    let mut by_digest: BTreeMap<String, (u64, Vec<String>)> = BTreeMap::new();
    for e in store.entries() {
        let v = by_digest
            .entry(e.digest.clone())
            .or_insert((e.size, Vec::new()));
        v.1.push(e.key);
    }
    let work: Vec<(String, u64, Vec<String>, Option<PathBuf>)> = by_digest
        .into_iter()
        .map(|(d, (size, keys))| {
            let p = store.object_path(&d);
            (d, size, keys, p)
        })
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
                    let Some((digest, size, keys, path)) = job else {
                        break;
                    };
                    let reason = match path.as_deref().map(hash_file) {
                        None => Some("malformed digest".to_string()),
                        Some(Err(e)) => Some(format!("unreadable: {e}")),
                        Some(Ok((h, n))) if h != digest || n != size => Some(format!(
                            "bytes hash to sha256:{h} ({n} bytes), expected {size} bytes"
                        )),
                        Some(Ok((_, n))) => {
                            let mut r = report.lock().unwrap_or_else(|p| p.into_inner());
                            r.bytes += n;
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
                            });
                    }
                }
            });
        }
    });
    let mut report = report.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut bad = bad.into_inner().unwrap_or_else(|p| p.into_inner());
    bad.sort_by(|a, b| a.digest.cmp(&b.digest));
    for b in &bad {
        for k in &b.keys {
            store.remove(k);
        }
    }
    report.bad = bad;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn flipped_byte_is_found_and_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), None).unwrap();
        for (k, body) in [("a", &b"hello"[..]), ("b", &b"world"[..])] {
            let mut t = store.temp().unwrap();
            t.write_all(body).await.unwrap();
            store.commit(t, k, Default::default()).await.unwrap();
        }
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
}
