//! The schematics the service knows: the named ones and every one POSTed
//! since, kept in the store. Lives here, above `store` and `schematic`, so
//! the schematic module itself (parse, canonical form, ID) touches no
//! storage.

use crate::error::{Error, Result};
use crate::schematic::{MAX_SIZE, Schematic, id_and_canonical, id_of, is_valid_id};

pub use crate::schematic::{EMBEDDED, embedded_id, id_or_name};

/// Schematics the service knows: the named ones (from `--schematics-dir`,
/// default the embedded `schematics/`), kept in memory, and every one POSTed
/// since, kept in the [`Store`](crate::store::Store) under
/// `schematic/<id>` (canonical bytes) so they survive restarts, `mirror
/// verify` and `mirror export`; pinned (kept through eviction) when
/// `mirror sync` stored them or a POST did that carried the API token (or
/// came to a service without `--api-token-file`), else cache. The object's sha256 is the
/// schematic ID itself; reading it re-checks that.
pub struct KnownSchematics {
    store: crate::store::Store,
    /// id -> canonical YAML of the named schematics.
    named: std::collections::HashMap<String, String>,
    /// name -> id.
    names: std::collections::BTreeMap<String, String>,
}

/// The store key of a schematic (`schematic/<id>`).
pub fn store_key(id: &str) -> crate::store::Key {
    crate::store::Key::schematic(id)
}

impl KnownSchematics {
    /// Load the named schematics; POSTed ones live in `store`.
    /// A named file that does not parse is bad input naming the file.
    pub fn open(
        store: crate::store::Store,
        schematics_dir: Option<&std::path::Path>,
    ) -> Result<KnownSchematics> {
        let mut files: Vec<(String, String)> = Vec::new();
        match schematics_dir {
            None => {
                for (name, text) in EMBEDDED {
                    files.push((name.to_string(), text.to_string()));
                }
            }
            Some(dir) => {
                let what = format!("--schematics-dir {}", dir.display());
                let rd =
                    std::fs::read_dir(dir).map_err(|e| Error::bad_input(format!("{what}: {e}")))?;
                let mut paths: Vec<std::path::PathBuf> = rd
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| {
                        p.is_file()
                            && matches!(
                                p.extension().and_then(|x| x.to_str()),
                                Some("yaml" | "yml" | "json")
                            )
                    })
                    .collect();
                paths.sort();
                for p in paths {
                    let name = p
                        .file_stem()
                        .and_then(|x| x.to_str())
                        .unwrap_or_default()
                        .to_string();
                    let meta = std::fs::metadata(&p)
                        .map_err(|e| Error::bad_input(format!("{what}: {}: {e}", p.display())))?;
                    if meta.len() > MAX_SIZE as u64 {
                        return Err(Error::bad_input(format!(
                            "{what}: {}: larger than {MAX_SIZE} bytes",
                            p.display()
                        )));
                    }
                    let text = std::fs::read_to_string(&p)
                        .map_err(|e| Error::bad_input(format!("{what}: {}: {e}", p.display())))?;
                    files.push((name, text));
                }
            }
        }
        let mut named = std::collections::HashMap::new();
        let mut names = std::collections::BTreeMap::new();
        for (name, text) in files {
            let (id, canonical) = id_and_canonical(&text)
                .map_err(|e| Error::bad_input(format!("schematic file {name:?}: {e}")))?;
            names.insert(name, id.clone());
            named.insert(id, canonical);
        }
        Ok(KnownSchematics {
            store,
            named,
            names,
        })
    }

    /// Named schematics: `(name, id)`, sorted by name.
    pub fn names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.names.iter().map(|(n, i)| (n.as_str(), i.as_str()))
    }

    /// The ID of a named schematic (`cozystack`, `vanilla`, ...).
    pub fn id_by_name(&self, name: &str) -> Option<&str> {
        self.names.get(name).map(String::as_str)
    }

    /// Store a schematic; returns `(id, canonical)`. `pinned`: kept
    /// through eviction (`mirror sync`, a POST with the API token);
    /// otherwise a cache object, counted in `--cache-max-size` and evicted
    /// like any other (an unauthenticated POST). A stored one is left as
    /// it is, but pinned when asked (a pin is never taken away here).
    pub async fn put(&self, schematic: &Schematic, pinned: bool) -> Result<(String, String)> {
        let canonical = schematic.canonical();
        let id = id_of(canonical.as_bytes());
        // Stored even when it is also a named one: the named set can change
        // with --schematics-dir, what was POSTed stays known.
        let key = store_key(&id);
        match self.store.entry(&key) {
            Some(e) if e.digest == id => {
                if pinned && !e.pinned {
                    self.store.set_pinned(&key, true).await?;
                }
            }
            _ => {
                let meta = crate::store::Meta {
                    content_type: Some("application/yaml".into()),
                    pinned,
                    ..Default::default()
                };
                self.store
                    .commit_bytes(&key, canonical.clone().into_bytes().into(), meta)
                    .await?;
            }
        }
        Ok((id, canonical))
    }

    /// The canonical bytes of a known schematic; `None` when unknown.
    /// `id` must be 64 lowercase hex digits (bad input otherwise); nothing
    /// touches the store before that check. Reads one small object.
    pub fn get(&self, id: &str) -> Result<Option<String>> {
        if !is_valid_id(id) {
            return Err(Error::bad_input(format!(
                "invalid schematic ID {:?}: expected 64 lowercase hex digits",
                id.chars().take(80).collect::<String>()
            )));
        }
        if let Some(c) = self.named.get(id) {
            return Ok(Some(c.clone()));
        }
        let key = store_key(id);
        // Held but out of reach (a bucket down, no local copy): 503, never 404.
        let Some(obj) = self
            .store
            .lookup(&key)
            .map_err(|e| Error::Unavailable(e.0))?
        else {
            return Ok(None);
        };
        if obj.entry.size > MAX_SIZE as u64 {
            return Ok(None);
        }
        // A rotten object is dropped by the read: unknown again.
        let Ok(bytes) = obj.read_small(MAX_SIZE as u64) else {
            return Ok(None);
        };
        let bytes = bytes.to_vec();
        if id_of(&bytes) != id {
            tracing::warn!(%id, "stored schematic does not hash to its ID; dropping it");
            self.store.remove(&key);
            return Ok(None);
        }
        Ok(String::from_utf8(bytes).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VANILLA: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
    const COZYSTACK: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

    #[tokio::test]
    async fn registry_persists_and_checks_ids() {
        use crate::store::Store;
        let tmp = tempfile::tempdir().unwrap();
        let open = || KnownSchematics::open(Store::open(tmp.path(), None).unwrap(), None).unwrap();
        let r = open();
        assert_eq!(r.id_by_name("cozystack"), Some(COZYSTACK));
        assert_eq!(
            r.get(VANILLA).unwrap().as_deref(),
            Some("customization: {}\n")
        );
        let sch = Schematic::parse("customization: {extraKernelArgs: [a]}").unwrap();
        let (id, canonical) = r.put(&sch, true).await.unwrap();
        // Idempotent; an unpinned put never takes the pin away.
        assert_eq!(r.put(&sch, false).await.unwrap().0, id);
        drop(r);
        let store = Store::open(tmp.path(), Some(1)).unwrap();
        // Pinned: a 1-byte limit keeps it; its object is named by the ID.
        store.evict(None);
        let e = store.entry(&store_key(&id)).unwrap();
        assert!(e.pinned);
        assert_eq!(e.digest, id);
        let r = KnownSchematics::open(store.clone(), None).unwrap();
        assert_eq!(r.get(&id).unwrap().as_deref(), Some(canonical.as_str()));
        assert_eq!(r.get(&"0".repeat(64)).unwrap(), None);
        assert_eq!(r.get("../../etc/passwd").unwrap_err().exit_code(), 2);
        // A corrupted stored object is not served, and is dropped.
        let path = store.object_path(&id).unwrap();
        let mut b = std::fs::read(&path).unwrap();
        b[0] ^= 1;
        std::fs::write(&path, b).unwrap();
        assert_eq!(r.get(&id).unwrap(), None);
        assert!(store.entry(&store_key(&id)).is_none());
        // --schematics-dir: named files, and a bad one names itself.
        let dir = tmp.path().join("named");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("mine.yaml"),
            "customization: {extraKernelArgs: [b]}",
        )
        .unwrap();
        let r = KnownSchematics::open(store.clone(), Some(&dir)).unwrap();
        assert!(r.id_by_name("mine").is_some());
        assert!(r.id_by_name("cozystack").is_none());
        std::fs::write(dir.join("bad.yaml"), "nope: 1").unwrap();
        let Err(e) = KnownSchematics::open(store, Some(&dir)) else {
            panic!("a bad named schematic was accepted");
        };
        assert!(e.to_string().contains("bad"), "{e}");
    }
}
