//! `mirror export` / `mirror import`: one tar file with the index
//! (`talos-gen-mirror.json`, first) and the objects
//! (`objects/sha256/<hex>`); schematics are store entries like the rest
//! (`schematic/<id>`).
//! Import streams every object into a store temp file, checks its sha256
//! and size against its name and the index, and only then commits it, so
//! nothing unverified ever becomes visible. Importing twice is harmless.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Config, open_store, selected_entries};
use crate::error::{Error, Result};
use crate::store::{Entry, Key, Location, Meta, Store};

const INDEX_NAME: &str = "talos-gen-mirror.json";
const FORMAT: u32 = 1;
/// Largest index accepted on import.
const MAX_INDEX: u64 = 256 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct BundleIndex {
    format: u32,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, Default)]
pub struct ExportReport {
    pub keys: usize,
    pub objects: usize,
    pub bytes: u64,
}

/// Write the store at `cache_dir` (all of it, or what `cfg` reaches) to `output`.
/// Items of `cfg` that are not (fully) stored refuse the export, named.
pub fn export(
    store: impl Into<Location>,
    output: &Path,
    cfg: Option<&Config>,
) -> Result<ExportReport> {
    let store = open_store(&store.into())?;
    let entries = selected_entries(&store, cfg)?;
    // One key per object, to open it through the store (chunk-checked).
    let mut objects: BTreeMap<String, (u64, Key)> = BTreeMap::new();
    for e in &entries {
        objects
            .entry(e.digest.clone())
            .or_insert((e.size, e.key.clone()));
    }
    replaceable(output)?;
    // Through [`crate::atomic`]: a temp file of its own beside the output
    // (locked while written; what a killed export left goes), renamed.
    let mut failed = None;
    let mut bytes = 0;
    let written = crate::atomic::write(output, 0o666, crate::atomic::Replace::Yes, |f| {
        let res = write_bundle(&store, &entries, &objects, f, output);
        match res {
            Ok(n) => {
                bytes = n;
                Ok(())
            }
            Err(e) => {
                let stop = std::io::Error::other(e.to_string());
                failed = Some(e);
                Err(stop)
            }
        }
    });
    match (written, failed) {
        (_, Some(e)) => Err(e),
        (Err(e), None) => Err(Error::io(format!("writing {}", output.display()), e)),
        (Ok(()), None) => Ok(ExportReport {
            keys: entries.len(),
            objects: objects.len(),
            bytes,
        }),
    }
}

/// The tar of an export into `f`: the index first, then each object read
/// through the store (every chunk checked); the bytes of the objects.
fn write_bundle(
    store: &Store,
    entries: &[Entry],
    objects: &BTreeMap<String, (u64, Key)>,
    f: &mut std::fs::File,
    output: &Path,
) -> Result<u64> {
    let mut tar = tar::Builder::new(BufWriter::with_capacity(1 << 20, f));
    let werr = |e: std::io::Error| Error::io(format!("writing {}", output.display()), e);
    let index = serde_json::to_vec(&BundleIndex {
        format: FORMAT,
        entries: entries.to_vec(),
    })
    .map_err(|e| Error::io("encoding the index", std::io::Error::other(e)))?;
    append_bytes(&mut tar, INDEX_NAME, &index).map_err(werr)?;
    let mut bytes = 0;
    for (digest, (size, key)) in objects {
        let obj = store
            .lookup(key)
            .map_err(|down| Error::Unavailable(format!("{key}: {down}")))?
            .ok_or_else(|| Error::refused(format!("{key}: its object sha256:{digest} is gone")))?;
        // Every chunk checked as it is read: a rotten object fails the
        // export (and is dropped) instead of travelling.
        let mut f = obj.reader();
        let mut h = tar::Header::new_gnu();
        h.set_size(*size);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(
            &mut h,
            format!("objects/sha256/{digest}"),
            (&mut f).take(*size),
        )
        .map_err(werr)?;
        bytes += size;
    }
    let w = tar.into_inner().map_err(werr)?;
    w.into_inner().map_err(|e| werr(e.into_error()))?;
    Ok(bytes)
}

/// May an export write `output`? When it does not exist, or is a bundle
/// an export wrote (its first member is the index): an export again.
/// Anything else (a user's file, a link, a directory) is never replaced.
fn replaceable(output: &Path) -> Result<()> {
    let refuse = |what: &str| {
        Err(Error::refused(format!(
            "--output {}: {what}; not overwritten (remove it, or give another path)",
            output.display()
        )))
    };
    let meta = match std::fs::symlink_metadata(output) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("--output {}", output.display()), e)),
        Ok(m) => m,
    };
    if meta.file_type().is_symlink() {
        return refuse("a symbolic link");
    }
    if !meta.is_file() {
        return refuse("exists and is not a regular file");
    }
    let first_is_index = std::fs::File::open(output).ok().is_some_and(|f| {
        let mut tar = tar::Archive::new(BufReader::new(f));
        let first = tar.entries().ok().and_then(|mut es| es.next());
        first
            .and_then(|e| e.ok())
            .and_then(|e| e.path().ok().map(|p| p.as_os_str() == INDEX_NAME))
            .unwrap_or(false)
    });
    if !first_is_index {
        return refuse("exists and is not a bundle of mirror export");
    }
    Ok(())
}

fn append_bytes<W: Write>(
    tar: &mut tar::Builder<W>,
    name: &str,
    data: &[u8],
) -> std::io::Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    tar.append_data(&mut h, name, data)
}

#[derive(Debug, Clone, Default)]
pub struct ImportReport {
    pub keys: usize,
    pub objects: usize,
    pub bytes: u64,
    /// Objects whose bytes did not match their name (not imported).
    pub bad: Vec<String>,
    /// Keys whose object the file did not carry (not imported).
    pub missing: Vec<String>,
    /// Keys already in the store with the same object (left as they were).
    pub present: usize,
    /// Stopped before the file's end ([`import_until`]): the object it was
    /// reading then (how far, discarded), and the keys not reached.
    pub interrupted: Option<Interrupted>,
}

/// Where a stopped import stood.
#[derive(Debug, Clone, Default)]
pub struct Interrupted {
    /// The object being read (`sha256:<hex>: X of Y`), if any.
    pub reading: Option<String>,
    /// Keys whose objects were not reached (not imported).
    pub not_reached: usize,
}

impl ImportReport {
    /// The line `mirror import` prints.
    pub fn summary(&self) -> String {
        format!(
            "{} keys, {} objects ({}) imported; {} keys already present",
            self.keys,
            self.objects,
            crate::text::human_size(self.bytes),
            self.present
        )
    }

    /// The one line of a stopped import (after `signal`).
    pub fn interrupted_summary(&self, signal: &str) -> String {
        let i = self.interrupted.clone().unwrap_or_default();
        format!(
            "mirror import: interrupted by {signal}; stored {} keys, {} objects ({}), {} already present; NOT stored: {} keys not reached{}",
            self.keys,
            self.objects,
            crate::text::human_size(self.bytes),
            self.present,
            i.not_reached,
            i.reading
                .map(|r| format!(", the object being read ({r}, discarded)"))
                .unwrap_or_default()
        )
    }
}

/// A reader that counts the bytes read through it (the file's progress).
struct Counting<R> {
    inner: R,
    n: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// Import `file` into the store at `loc`.
pub async fn import(file: &Path, loc: impl Into<Location>) -> Result<ImportReport> {
    let never = std::sync::atomic::AtomicBool::new(false);
    import_until(file, loc, &never, false).await
}

/// [`import`], stopped once `stop` is set (checked between reads: the
/// object being read is discarded, its temp file removed, and the report
/// says where it stood, [`ImportReport::interrupted`]). With `lines`, a
/// progress line every [`super::progress::interval`] on stderr: the
/// file's bytes read of its size, the rate, and the object being read.
pub async fn import_until(
    file: &Path,
    loc: impl Into<Location>,
    stop: &std::sync::atomic::AtomicBool,
    lines: bool,
) -> Result<ImportReport> {
    use std::sync::atomic::Ordering;
    // A file or a pipe (`/dev/stdin`), opened without waiting for a writer.
    let (f, meta) = crate::input::open(file, crate::input::Kind::FileOrPipe)
        .map_err(|e| Error::bad_input(format!("{}: {e}", file.display())))?;
    let file_len = meta.is_file().then_some(meta.len());
    let read_so_far = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let f = Counting {
        inner: f,
        n: read_so_far.clone(),
    };
    let mut ticker = super::progress::Ticker::new();
    let loc = loc.into();
    let store = crate::compose::open_store(loc, None).await?;
    let what = file.display().to_string();
    let bad_input = |m: String| Error::bad_input(format!("{what}: {m}"));
    let mut tar = tar::Archive::new(BufReader::with_capacity(1 << 20, f));
    let mut entries_iter = tar.entries().map_err(|_| {
        bad_input("not a tar file (expected a `talos-gen mirror export` file)".into())
    })?;
    // The index comes first.
    let index = read_index(entries_iter.next(), &what)?;
    let mut report = ImportReport::default();
    let mut by_digest = claimed_objects(index, &mut report);
    let mut known: std::collections::HashSet<String> =
        store.entries().into_iter().map(|e| e.digest).collect();
    let mut buf = vec![0u8; 1 << 20];
    for member in entries_iter {
        if stop.load(Ordering::Relaxed) {
            report.interrupted = Some(Interrupted {
                reading: None,
                not_reached: by_digest.values().map(Vec::len).sum(),
            });
            return Ok(report);
        }
        let mut member = member.map_err(|e| bad_input(format!("reading the tar file: {e}")))?;
        let name = member
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(digest) = name.strip_prefix("objects/sha256/") else {
            continue;
        };
        let Some(entries) = by_digest.remove(digest) else {
            continue; // named by no key: nothing would keep it
        };
        let want = entries[0].size;
        // Only a plain file whose bytes are all in the tar, of the size
        // the index gives: a sparse member (GNU or PAX), a link, a device
        // or a size that differs is refused before a byte is written.
        if let Some(why) = refuse_member(&mut member, want) {
            report.bad.push(format!("{name}: {why}"));
            continue;
        }
        // Written on a blocking thread (the store's spool writer).
        let mut writer = store.temp().await?.into_writer(|_| {});
        let mut ok = true;
        let mut len = 0u64;
        loop {
            if stop.load(Ordering::Relaxed) {
                let reading = format!(
                    "sha256:{digest}: {} of {}",
                    crate::text::human_size(len),
                    crate::text::human_size(want)
                );
                // The writer's file goes with it (its thread ended first).
                drop(writer.finish().await);
                report.interrupted = Some(Interrupted {
                    reading: Some(reading),
                    not_reached: by_digest.values().map(Vec::len).sum::<usize>() + entries.len(),
                });
                return Ok(report);
            }
            if lines && let Some(rate) = ticker.due(read_so_far.load(Ordering::Relaxed)) {
                let read = read_so_far.load(Ordering::Relaxed);
                log_progress(&what, read, file_len, &rate, digest, len, want);
            }
            // The signal's task gets its turn between reads.
            tokio::task::yield_now().await;
            let n = member
                .read(&mut buf)
                .map_err(|e| bad_input(format!("reading {name}: {e}")))?;
            if n == 0 {
                break;
            }
            if len + n as u64 > want {
                ok = false;
                break;
            }
            len += n as u64;
            writer
                .write(bytes::Bytes::copy_from_slice(&buf[..n]))
                .await?;
        }
        let tmp = writer.finish().await?;
        if !ok || tmp.len() != want || tmp.digest() != digest {
            report
                .bad
                .push(format!("sha256:{digest}: bytes do not match its name"));
            continue;
        }
        store_keys(&store, entries, tmp, digest, want, &mut known, &mut report).await?;
    }
    for entries in by_digest.values() {
        for e in entries {
            report.missing.push(e.key.to_string());
        }
    }
    report.missing.sort();
    Ok(report)
}

/// The bundle's index, its first member (refused when it is not one).
fn read_index<R: Read>(
    first: Option<std::io::Result<tar::Entry<'_, R>>>,
    what: &str,
) -> Result<BundleIndex> {
    let bad_input = |m: String| Error::bad_input(format!("{what}: {m}"));
    let mut first = first
        .ok_or_else(|| {
            bad_input("empty, or not a tar file (expected a `talos-gen mirror export` file)".into())
        })?
        .map_err(|e| match e.kind() {
            // A pipe no writer opened (`input::Opened`): said as it is.
            std::io::ErrorKind::TimedOut => bad_input(e.to_string()),
            _ => bad_input("not a tar file (expected a `talos-gen mirror export` file)".into()),
        })?;
    let name = first
        .path()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name != INDEX_NAME || first.size() > MAX_INDEX {
        // A file that is no tar at all parses as garbage names: never
        // echo those bytes to the terminal.
        let shown = if name.len() <= 100 && name.chars().all(|c| c.is_ascii_graphic() || c == ' ') {
            format!(" (its first member is {name:?})")
        } else {
            String::new()
        };
        return Err(bad_input(format!(
            "not a talos-gen mirror export: a tar file made by `talos-gen mirror export` starts with {INDEX_NAME}{shown}"
        )));
    }
    let mut b = Vec::new();
    first
        .read_to_end(&mut b)
        .map_err(|e| bad_input(format!("reading {INDEX_NAME}: {e}")))?;
    let idx: BundleIndex =
        serde_json::from_slice(&b).map_err(|e| bad_input(format!("{INDEX_NAME}: {e}")))?;
    if idx.format != FORMAT {
        return Err(bad_input(format!(
            "{INDEX_NAME}: unknown format {}",
            idx.format
        )));
    }
    Ok(idx)
}

/// The index's entries by object digest, each key once; a key the index
/// gives two objects, or one that names a digest not its object's, is
/// reported bad and left out.
fn claimed_objects(index: BundleIndex, report: &mut ImportReport) -> HashMap<String, Vec<Entry>> {
    // A key the index gives two objects is a contradiction: neither is
    // imported (which one would the bundle's maker have meant?).
    let mut claims: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in &index.entries {
        let c = claims.entry(e.key.as_str()).or_default();
        if !c.contains(&e.digest.as_str()) {
            c.push(e.digest.as_str());
        }
    }
    let mut contradicted: Vec<String> = claims
        .iter()
        .filter(|(_, ds)| ds.len() > 1)
        .map(|(k, _)| k.to_string())
        .collect();
    contradicted.sort();
    for k in &contradicted {
        let ds: Vec<String> = claims[k.as_str()]
            .iter()
            .map(|d| format!("sha256:{d}"))
            .collect();
        report.bad.push(format!(
            "{k}: the index gives it {} objects ({}); not imported",
            ds.len(),
            ds.join(", ")
        ));
    }
    let mut seen: std::collections::HashSet<Key> = Default::default();
    let mut by_digest: HashMap<String, Vec<Entry>> = HashMap::new();
    for e in index.entries {
        if contradicted
            .binary_search_by(|c| c.as_str().cmp(e.key.as_str()))
            .is_ok()
            || !seen.insert(e.key.clone())
        {
            continue;
        }
        // A key that names a digest (a blob, a manifest, a schematic) must
        // name its object's: never imported otherwise, whatever the bytes.
        if let Err(why) = crate::registry::layout::check_claim(&e.key, &e.digest) {
            report.bad.push(why.to_string());
            continue;
        }
        by_digest.entry(e.digest.clone()).or_default().push(e);
    }
    by_digest
}

/// One progress line of an import without a terminal.
fn log_progress(
    what: &str,
    read: u64,
    file_len: Option<u64>,
    rate: &str,
    digest: &str,
    len: u64,
    want: u64,
) {
    super::progress::log_line(&format!(
        "{}; now sha256:{} ({} of {})",
        super::progress::progress_text(what, read, file_len, rate),
        &digest[..12.min(digest.len())],
        crate::text::human_size(len),
        crate::text::human_size(want)
    ));
}

/// Every key of one checked object: present already, committed (the
/// first time the store sees the object) or linked to it.
async fn store_keys(
    store: &Store,
    entries: Vec<Entry>,
    tmp: crate::store::TempObject,
    digest: &str,
    want: u64,
    known: &mut std::collections::HashSet<String>,
    report: &mut ImportReport,
) -> Result<()> {
    let mut tmp = Some(tmp);
    for e in entries {
        if store.entry(&e.key).is_some_and(|x| x.digest == e.digest) {
            report.present += 1;
            if e.pinned {
                store.set_pinned(&e.key, true).await?;
            }
            continue;
        }
        let meta = Meta {
            content_type: e.content_type.clone(),
            pinned: e.pinned,
            meta: e.meta.clone(),
            fresh_for: None,
        };
        if !known.contains(digest) {
            let Some(t) = tmp.take() else {
                continue;
            };
            store.commit(t, &e.key, meta).await?;
            known.insert(digest.to_string());
            // Counted as imported only when this import wrote it.
            report.objects += 1;
            report.bytes += want;
        } else {
            store.link(&e.key, digest, meta).await?;
        }
        report.keys += 1;
    }
    Ok(())
}

/// Why a tar member cannot be an object of `want` bytes, if it cannot:
/// not a regular file (sparse `S`, links, devices, FIFOs, directories), a
/// PAX sparse file (`GNU.sparse.*`), or a header size other than `want`.
/// For a regular member the header size is the bytes the tar holds.
fn refuse_member<R: Read>(member: &mut tar::Entry<'_, R>, want: u64) -> Option<String> {
    let kind = member.header().entry_type();
    if !matches!(kind, tar::EntryType::Regular | tar::EntryType::Continuous) {
        return Some(format!(
            "a {kind:?} member, not a regular file; not imported"
        ));
    }
    if let Ok(Some(pax)) = member.pax_extensions() {
        for ext in pax.flatten() {
            if ext.key().is_ok_and(|k| k.starts_with("GNU.sparse")) {
                return Some("a sparse member (PAX GNU.sparse); not imported".into());
            }
        }
    }
    let real = member.header().entry_size().unwrap_or(u64::MAX);
    if real != want || member.size() != want {
        return Some(format!(
            "{} bytes in the file, the index says {want}; not imported",
            real.min(member.size())
        ));
    }
    None
}
