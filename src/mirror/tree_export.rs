//! `mirror export --format http|oci`: the store written as directory
//! trees other tools read, beside the `tar` of [`super::bundle`].
//!
//! - `http`: a static tree any HTTP file server can serve at
//!   `talos.imageFactoryURL`: `image/<schematic>/<version>/<asset>` with
//!   `<asset>.sha256` beside it, `schematics/<id>`, and the factory's
//!   documents at their paths.
//! - `oci`: an OCI image layout holding the installers and images, each
//!   named in `index.json` by its full reference, as `skopeo copy
//!   oci:PATH:REF` and `ctr import` read it.
//!
//! `--output` is written in place, one file at a time through
//! [`crate::atomic`], and locked for the whole export. It must be absent,
//! empty, or a previous export of the same format (one holding [`MARKER`],
//! the files and sha256s that export wrote): an export never writes into a
//! directory it did not make. Unchanged files are kept, files the previous
//! export wrote and this one does not are removed, others never touched.
//! The marker is written first (changing files without a digest, so an
//! interrupted export is redone) and last. Every object is streamed from
//! the store with its sha256 checked; a mismatch stops the export, naming
//! the key.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use super::{Config, Item, tag_key};
use crate::error::{Error, Result};
use crate::factory::{FactoryDoc, ImageKey};
use crate::registry::{Digest, UpstreamId};
use crate::store::{Entry, Key, KeyKind, Store};

/// The file naming what an export wrote.
pub const MARKER: &str = "talos-gen-export.json";

/// `mirror export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One tar file for `mirror import` (the default).
    Tar,
    /// A static tree for any HTTP file server (`talos.imageFactoryURL`).
    Http,
    /// An OCI image layout (skopeo, ctr, a registry's own tools).
    Oci,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Tar => "tar",
            Format::Http => "http",
            Format::Oci => "oci",
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    format: String,
    complete: bool,
    /// Relative path -> sha256 hex ("" while it may be changing).
    files: BTreeMap<String, String>,
}

/// What a tree export did.
#[derive(Debug, Clone, Default)]
pub struct TreeReport {
    /// Artifacts (`http`) or image references (`oci`) written.
    pub items: usize,
    /// Files the tree holds, and their bytes.
    pub files: usize,
    pub bytes: u64,
    /// Files copied by this run (the others were already there, unchanged).
    pub copied: usize,
    pub copied_bytes: u64,
    /// Files of the previous export removed.
    pub removed: usize,
    /// What the store holds that this format does not carry, or holds
    /// incompletely (named for stderr).
    pub left_out: Vec<String>,
}

/// Where a file's bytes come from.
enum Source {
    /// A store object (streamed, its sha256 checked on the way).
    Object {
        key: Key,
        size: u64,
    },
    Bytes(Vec<u8>),
}

struct Planned {
    digest: String,
    source: Source,
}

/// Export the store at `cache_dir` (all of it, or what `cfg` reaches) to
/// the directory `output` as `format` (`Http` or `Oci`).
pub fn export_tree(
    store: impl Into<crate::store::Location>,
    output: &Path,
    cfg: Option<&Config>,
    format: Format,
) -> Result<TreeReport> {
    let store = super::open_store(&store.into())?;
    let entries = super::selected_entries(&store, cfg)?;
    let mut report = TreeReport::default();
    let plan = match format {
        Format::Http => plan_http(&entries, cfg, &mut report),
        Format::Oci => plan_oci(&store, cfg, &mut report)?,
        Format::Tar => {
            return Err(Error::bad_input(
                "--format tar writes a file: use mirror export without a tree format",
            ));
        }
    };
    write_tree(&store, output, format, plan, &mut report)?;
    Ok(report)
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// The `http` tree: artifacts with their `.sha256`, schematics, the
/// factory's documents. Keys are re-validated before they become paths.
fn plan_http(
    entries: &[Entry],
    cfg: Option<&Config>,
    report: &mut TreeReport,
) -> BTreeMap<String, Planned> {
    let mut plan = BTreeMap::new();
    let object = |e: &Entry| Planned {
        digest: e.digest.clone(),
        source: Source::Object {
            key: e.key.clone(),
            size: e.size,
        },
    };
    let mut oci = 0;
    for e in entries {
        match e.key.kind() {
            KeyKind::Image {
                schematic,
                version,
                asset,
            } => {
                let Ok(k) = ImageKey::parse(schematic, version, asset) else {
                    continue;
                };
                if k.store_key() != e.key {
                    continue;
                }
                let rel = k.store_key().to_string();
                let sum = format!("{}  {}\n", e.digest, k.asset).into_bytes();
                plan.insert(
                    format!("{rel}.sha256"),
                    Planned {
                        digest: sha256_hex(&sum),
                        source: Source::Bytes(sum),
                    },
                );
                plan.insert(rel, object(e));
                report.items += 1;
            }
            KeyKind::Talosctl { version, file } => {
                let Ok(k) = crate::factory::TalosctlKey::parse(version, file) else {
                    continue;
                };
                if k.store_key() == e.key {
                    plan.insert(k.store_key().to_string(), object(e));
                    report.items += 1;
                }
            }
            KeyKind::Schematic { id } if crate::schematic::is_valid_id(id) => {
                plan.insert(format!("schematics/{id}"), object(e));
            }
            KeyKind::FactoryDoc { path } => {
                if let Some(doc) = factory_doc(path) {
                    plan.insert(doc.path.trim_start_matches('/').to_string(), object(e));
                }
            }
            KeyKind::OciTag { .. } => oci += 1,
            _ => {}
        }
    }
    if let Some(cfg) = cfg {
        oci = cfg
            .items()
            .iter()
            .filter(|i| !matches!(i, Item::Image(_) | Item::Talosctl(_)))
            .count();
    }
    if oci > 0 {
        report.left_out.push(format!(
            "{oci} installer and image references (OCI) are not part of an http tree; export them with --format oci (or tar)"
        ));
    }
    plan
}

/// The factory document a stored path names, only when it is one.
fn factory_doc(path: &str) -> Option<FactoryDoc> {
    let doc = match path {
        "/versions" => FactoryDoc::versions(),
        p if p == FactoryDoc::cosign_key().path => FactoryDoc::cosign_key(),
        p if p == FactoryDoc::secureboot_cert().path => FactoryDoc::secureboot_cert(),
        p if p.starts_with("/pxe/") => {
            let mut it = p["/pxe/".len()..].splitn(3, '/');
            let (s, v, a) = (it.next()?, it.next()?, it.next()?);
            FactoryDoc::pxe(s, v, a).ok()?
        }
        p => {
            let rest = p.strip_prefix("/version/")?;
            let (v, what) = rest.split_once('/')?;
            match what {
                "extensions/official" => FactoryDoc::extensions(v).ok()?,
                "overlays/official" => FactoryDoc::overlays(v).ok()?,
                _ => return None,
            }
        }
    };
    (doc.path == path).then_some(doc)
}

/// One image reference of the layout: its name and top manifest.
struct OciRef {
    name: String,
    top: Digest,
}

/// The references to write: a config's installers and images (with their
/// stored cosign signatures), or every tag the store holds.
fn oci_refs(store: &Store, cfg: Option<&Config>) -> Vec<OciRef> {
    let host_of = |up: &UpstreamId| match up {
        UpstreamId::Installer => crate::pull_list::FACTORY_HOST.to_string(),
        UpstreamId::Mirror(ns) => ns.clone(),
    };
    let tag_digest = |up: &UpstreamId, repo: &str, tag: &str| -> Option<Digest> {
        store
            .entry(&tag_key(up, repo, tag))
            .and_then(|e| Digest::from_hex(&e.digest))
    };
    let mut out = Vec::new();
    match cfg {
        Some(cfg) => {
            for item in cfg.items() {
                let (up, repo, reference) = match item {
                    Item::Image(_) | Item::Talosctl(_) => continue,
                    Item::Installer { repo, tag } => (UpstreamId::Installer, repo, tag),
                    Item::Extra(x) => (UpstreamId::Mirror(x.host.clone()), x.repo, x.reference),
                };
                let host = host_of(&up);
                let (name, top) = match reference.strip_prefix("sha256:").and_then(Digest::from_hex)
                {
                    Some(d) => (format!("{host}/{repo}@{reference}"), Some(d)),
                    None => (
                        format!("{host}/{repo}:{reference}"),
                        tag_digest(&up, &repo, &reference),
                    ),
                };
                let Some(top) = top else { continue };
                let sig = crate::cosign::signature_tag(top.as_str());
                if let Some(d) = tag_digest(&up, &repo, &sig) {
                    out.push(OciRef {
                        name: format!("{host}/{repo}:{sig}"),
                        top: d,
                    });
                }
                out.push(OciRef { name, top });
            }
        }
        None => {
            for e in store.entries() {
                let KeyKind::OciTag {
                    upstream: up,
                    repo,
                    tag,
                } = e.key.kind()
                else {
                    continue;
                };
                let host = match up {
                    "installer" => crate::pull_list::FACTORY_HOST.to_string(),
                    u => match u.strip_prefix("ns=") {
                        Some(ns) => ns.to_string(),
                        None => continue,
                    },
                };
                if !crate::registry::names::is_repository(repo)
                    || !crate::registry::names::is_tag(tag)
                {
                    continue;
                }
                let Some(top) = Digest::from_hex(&e.digest) else {
                    continue;
                };
                out.push(OciRef {
                    name: format!("{host}/{repo}:{tag}"),
                    top,
                });
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The `oci` layout: every manifest and blob each reference reaches, and
/// `index.json` naming the references. A reference whose manifests or
/// blobs are not all stored is left out (named).
fn plan_oci(
    store: &Store,
    cfg: Option<&Config>,
    report: &mut TreeReport,
) -> Result<BTreeMap<String, Planned>> {
    let mut plan: BTreeMap<String, Planned> = BTreeMap::new();
    let mut index = Vec::new();
    for r in oci_refs(store, cfg) {
        let reached = crate::registry::layout::reach_stored(store, vec![r.top.clone()]);
        if !reached.complete {
            report.left_out.push(format!(
                "{}: not every manifest and blob of it is stored (mirror sync it first); left out",
                r.name
            ));
            continue;
        }
        // The walk starts at the top manifest: it is the first object.
        let top = reached.objects.first().map(|(_, e)| e);
        let Some((top_type, size)) = top.and_then(|e| Some((media_type(store, e)?, e.size))) else {
            report.left_out.push(format!(
                "{}: its manifest could not be read; left out",
                r.name
            ));
            continue;
        };
        let files = reached.objects.iter().map(|(d, e)| blob_file(d, e));
        for (rel, p) in files {
            plan.entry(rel).or_insert(p);
        }
        index.push(serde_json::json!({
            "mediaType": top_type,
            "digest": r.top.as_str(),
            "size": size,
            "annotations": {
                "org.opencontainers.image.ref.name": r.name,
                "io.containerd.image.name": r.name,
            },
        }));
        report.items += 1;
    }
    let index = serde_json::to_vec_pretty(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": index,
    }))
    .map_err(|e| Error::io("encoding index.json", std::io::Error::other(e)))?;
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec();
    for (rel, bytes) in [("index.json", index), ("oci-layout", layout)] {
        plan.insert(
            rel.to_string(),
            Planned {
                digest: sha256_hex(&bytes),
                source: Source::Bytes(bytes),
            },
        );
    }
    Ok(plan)
}

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// A stored manifest's media type: as the registry served it, else its
/// own `mediaType` field, else OCI's (the field is optional there); `None`
/// only when the manifest cannot be read.
fn media_type(store: &Store, e: &Entry) -> Option<String> {
    if let Some(ct) = &e.content_type
        && ct.starts_with("application/vnd.")
    {
        return Some(ct.clone());
    }
    // (not read, the store silent included: left out, and said so)
    let body = store
        .lookup(&e.key)
        .ok()??
        .read_small(crate::registry::MAX_MANIFEST as u64)
        .ok()?;
    Some(crate::registry::media_type_field(&body).unwrap_or_else(|| OCI_MANIFEST.to_string()))
}

fn blob_file(d: &Digest, e: &Entry) -> (String, Planned) {
    (
        format!("blobs/sha256/{}", d.hex()),
        Planned {
            digest: e.digest.clone(),
            source: Source::Object {
                key: e.key.clone(),
                size: e.size,
            },
        },
    )
}

fn read_marker(root: &Path) -> Option<Marker> {
    let b = std::fs::read(root.join(MARKER)).ok()?;
    serde_json::from_slice(&b).ok()
}

/// Remove the temp files a killed export left beside the files it was
/// writing (`rels`, and the marker): one look at each directory, under
/// the export's lock (so every unlocked temp file is a dead writer's, of
/// any age). Files of other names are never touched.
fn sweep_leftovers<'a>(root: &Path, rels: impl Iterator<Item = &'a String>) {
    let mut dirs: BTreeMap<PathBuf, std::collections::BTreeSet<String>> = BTreeMap::new();
    for rel in rels
        .map(String::as_str)
        .chain([MARKER])
        .filter(|r| safe_rel(r))
    {
        let p = root.join(rel);
        if let (Some(d), Some(n)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) {
            dirs.entry(d.to_path_buf())
                .or_default()
                .insert(n.to_string());
        }
    }
    for (dir, names) in &dirs {
        crate::atomic::sweep_leftovers(dir, |t| names.contains(t), std::time::Duration::ZERO);
    }
}

/// `root` (made when absent) locked (`flock` on the directory) for the
/// whole export: a second export into it waits for the first, then finds
/// its marker, never its files half made. Not a directory: `None`, for
/// [`prepare`] to refuse.
fn lock_output(root: &Path) -> Result<Option<std::fs::File>> {
    let shown = root.display();
    match std::fs::symlink_metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(root)
            .map_err(|e| Error::io(format!("--output {shown}: creating it"), e))?,
        Ok(m) if m.is_dir() => {}
        _ => return Ok(None),
    }
    let d = std::fs::File::open(root).map_err(|e| Error::io(format!("--output {shown}"), e))?;
    d.lock()
        .map_err(|e| Error::io(format!("--output {shown}: locking it"), e))?;
    Ok(Some(d))
}

/// May the export write into `root`? Returns the previous export's marker
/// (an empty one for a new or empty directory).
fn prepare(root: &Path, format: Format) -> Result<Marker> {
    let shown = root.display();
    let fresh = Marker {
        format: format.name().into(),
        complete: false,
        files: BTreeMap::new(),
    };
    match std::fs::symlink_metadata(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(root)
                .map_err(|e| Error::io(format!("--output {shown}: creating it"), e))?;
            return Ok(fresh);
        }
        Err(e) => return Err(Error::io(format!("--output {shown}"), e)),
        Ok(m) if !m.is_dir() => {
            return Err(Error::bad_input(format!(
                "--output {shown}: not a directory (--format {} writes a directory)",
                format.name()
            )));
        }
        Ok(_) => {}
    }
    let empty = std::fs::read_dir(root)
        .map_err(|e| Error::io(format!("--output {shown}"), e))?
        .next()
        .is_none();
    if empty {
        return Ok(fresh);
    }
    match read_marker(root) {
        Some(m) if m.format == format.name() => Ok(m),
        Some(m) => Err(Error::refused(format!(
            "--output {shown}: holds a --format {} export; give another directory (or remove it) for --format {}",
            m.format,
            format.name()
        ))),
        None => Err(Error::refused(format!(
            "--output {shown}: not empty and not a talos-gen export (it has no {MARKER}); refusing to write into it"
        ))),
    }
}

/// A relative path made only of plain segments.
fn safe_rel(rel: &str) -> bool {
    !rel.is_empty()
        && rel
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains('\0'))
}

fn write_marker(root: &Path, m: &Marker) -> Result<()> {
    let b = serde_json::to_vec_pretty(m)
        .map_err(|e| Error::io("encoding the export marker", std::io::Error::other(e)))?;
    write_file(&root.join(MARKER), |f| f.write_all(&b))
}

/// Write `path` through [`crate::atomic`] (a temp file of its own beside
/// it, fsynced, renamed, the directory fsynced): two exports into one
/// directory at once never write one temp file.
fn write_file(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<()> {
    let res = (|| {
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p)?;
        }
        crate::atomic::write(path, 0o666, crate::atomic::Replace::Yes, fill)
    })();
    res.map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

/// Copy a store object to `dst`, checking its sha256 and size on the way.
fn copy_object(store: &Store, key: &Key, digest: &str, size: u64, dst: &Path) -> Result<()> {
    let obj = store
        .lookup(key)
        .map_err(|down| Error::Unavailable(format!("{key}: {down}")))?
        .ok_or_else(|| {
            Error::refused(format!(
                "{key}: no longer in the store (evicted while exporting?); run the export again"
            ))
        })?;
    // Read through the store: every chunk checked against its checksum.
    let mut f = obj.reader();
    let mut bad = None;
    write_file(dst, |out| {
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut n_total = 0u64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            n_total += n as u64;
            h.update(&buf[..n]);
            out.write_all(&buf[..n])?;
        }
        let got = hex::encode(h.finalize());
        if got != digest || n_total != size {
            bad = Some(got);
            return Err(std::io::Error::other("mismatch"));
        }
        Ok(())
    })
    .map_err(|e| match &bad {
        Some(got) => Error::refused(format!(
            "{key}: the stored object hashes to sha256:{got}, not sha256:{digest}; run talos-gen mirror verify (it drops it) and mirror sync"
        )),
        None => e,
    })?;
    Ok(())
}

fn write_tree(
    store: &Store,
    root: &Path,
    format: Format,
    plan: BTreeMap<String, Planned>,
    report: &mut TreeReport,
) -> Result<()> {
    let locked = lock_output(root)?;
    if locked.is_some() {
        // A first export killed while writing its marker left only that:
        // not a directory of someone else's.
        crate::atomic::sweep_leftovers(root, |t| t == MARKER, std::time::Duration::ZERO);
    }
    let old = prepare(root, format)?;
    sweep_leftovers(root, old.files.keys().chain(plan.keys()));
    // First the marker that names everything this run may leave behind.
    let mut interim = Marker {
        format: format.name().into(),
        complete: false,
        files: BTreeMap::new(),
    };
    for (rel, d) in &old.files {
        let same = plan.get(rel).is_some_and(|p| &p.digest == d);
        interim
            .files
            .insert(rel.clone(), if same { d.clone() } else { String::new() });
    }
    for rel in plan.keys() {
        interim.files.entry(rel.clone()).or_default();
    }
    write_marker(root, &interim)?;

    let mut done = BTreeMap::new();
    for (rel, p) in &plan {
        if !safe_rel(rel) || rel == MARKER {
            continue;
        }
        let dst = root.join(rel);
        let size = match &p.source {
            Source::Object { size, .. } => *size,
            Source::Bytes(b) => b.len() as u64,
        };
        let unchanged = old.files.get(rel) == Some(&p.digest)
            && std::fs::symlink_metadata(&dst).is_ok_and(|m| m.is_file() && m.len() == size);
        if !unchanged {
            match &p.source {
                Source::Object { key, size } => copy_object(store, key, &p.digest, *size, &dst)?,
                Source::Bytes(b) => write_file(&dst, |f| f.write_all(b))?,
            }
            report.copied += 1;
            report.copied_bytes += size;
        }
        report.files += 1;
        report.bytes += size;
        done.insert(rel.clone(), p.digest.clone());
    }
    // What the previous export wrote and this one did not.
    for rel in old.files.keys().filter(|r| !done.contains_key(*r)) {
        if !safe_rel(rel) || rel == MARKER {
            continue;
        }
        let p = root.join(rel);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file())
            && std::fs::remove_file(&p).is_ok()
        {
            report.removed += 1;
        }
        // Directories it leaves empty go too (never the root).
        let mut dir = p.parent();
        while let Some(d) = dir {
            if d == root || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }
    write_marker(
        root,
        &Marker {
            format: format.name().into(),
            complete: true,
            files: done,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factory_paths_only_when_they_are_one() {
        assert!(factory_doc("/versions").is_some());
        assert!(factory_doc("/version/v1.13.6/extensions/official").is_some());
        assert!(factory_doc("/version/1.13.6/extensions/official").is_none());
        assert!(factory_doc("/version/../../x/extensions/official").is_none());
        assert!(factory_doc("/version/v1.13.6/other").is_none());
        assert!(factory_doc("/etc/passwd").is_none());
        assert!(safe_rel("image/a/b"));
        assert!(!safe_rel("image/../b") && !safe_rel("/x") && !safe_rel("a//b"));
    }

    /// What a killed export left beside the files it was writing goes
    /// with the next export into that directory (of any age: the export
    /// holds the directory's lock); a file of another name stays.
    #[test]
    fn a_killed_exports_temp_files_go_with_the_next_export() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path().join("cache"), None).unwrap();
        let root = d.path().join("www");
        let plan = |body: &[u8]| {
            let mut p = BTreeMap::new();
            p.insert(
                "image/s/v1.13.6/a.iso".to_string(),
                Planned {
                    digest: hex::encode(Sha256::digest(body)),
                    source: Source::Bytes(body.to_vec()),
                },
            );
            p
        };
        let mut r = TreeReport::default();
        // A first export killed while writing its marker.
        std::fs::create_dir(&root).unwrap();
        std::fs::write(
            root.join("talos-gen-export.json.4241-Zz000000.partial"),
            b"{",
        )
        .unwrap();
        write_tree(&store, &root, Format::Http, plan(b"one"), &mut r).unwrap();
        let dir = root.join("image/s/v1.13.6");
        for n in [
            "a.iso.4242-0badf00d.partial",
            "talos-gen-export.json.4242-Zz000000.partial",
            "a.iso.mine.partial",
            "b.iso.4242-0badf00d.partial",
        ] {
            let at = if n.starts_with("talos-gen-export") {
                &root
            } else {
                &dir
            };
            std::fs::write(at.join(n), b"half").unwrap();
        }
        write_tree(&store, &root, Format::Http, plan(b"two"), &mut r).unwrap();
        let names = |p: &Path| {
            let mut v: Vec<String> = std::fs::read_dir(p)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            names(&dir),
            ["a.iso", "a.iso.mine.partial", "b.iso.4242-0badf00d.partial"]
        );
        assert_eq!(names(&root), ["image", MARKER]);
        assert_eq!(std::fs::read(dir.join("a.iso")).unwrap(), b"two");
    }

    #[test]
    fn refuses_a_directory_it_did_not_write() {
        let d = tempfile::tempdir().unwrap();
        assert!(prepare(&d.path().join("new"), Format::Http).is_ok());
        assert!(prepare(d.path().join("new").as_path(), Format::Http).is_ok());
        std::fs::write(d.path().join("new/notes.txt"), "mine").unwrap();
        let e = prepare(&d.path().join("new"), Format::Http).unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert!(e.to_string().contains("not a talos-gen export"), "{e}");
        let f = d.path().join("file");
        std::fs::write(&f, "x").unwrap();
        assert_eq!(prepare(&f, Format::Oci).unwrap_err().exit_code(), 2);
        let m = d.path().join("m");
        std::fs::create_dir(&m).unwrap();
        write_marker(
            &m,
            &Marker {
                format: "oci".into(),
                complete: true,
                files: BTreeMap::new(),
            },
        )
        .unwrap();
        assert!(prepare(&m, Format::Oci).is_ok());
        assert_eq!(prepare(&m, Format::Http).unwrap_err().exit_code(), 1);
    }
}
