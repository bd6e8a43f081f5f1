//! What `/image/{schematic}/{version}/{asset}` means: key validation, the
//! factory's upstream rules, the store key layout for artifacts.
//!
//! - [`ImageKey::parse`] validates the three segments (64-hex schematic,
//!   Talos version, the factory's asset grammar); its store key is
//!   `image/<schematic>/<version>/<asset>`.
//! - [`ImageCache::lookup`] answers from the store or joins/starts a fill
//!   that GETs `<factory>/image/...`. A factory 404 for a schematic the
//!   service knows ([`SchematicLookup`]) is answered by POSTing the
//!   schematic upstream and retrying once. `.xz`, `.gz` and `.zst` artifacts
//!   must decode.
//!   Offline, nothing but the store is consulted.

use std::sync::Arc;
use std::time::Duration;

use crate::fill::{FetchError, FillSpec, Fills, Joined, Object, Opened};
use crate::metrics::Metrics;
use crate::upstream::{Upstream, open_response, small_body};
use crate::version::Version;

/// "Canonical bytes of a schematic this service knows" (from
/// `POST /schematics` or `--schematics-dir`), so the factory can be taught
/// a schematic it answered 404 for.
pub trait SchematicLookup: Send + Sync {
    fn canonical(&self, id: &str) -> Option<Vec<u8>>;
}

/// Any `Fn(id) -> Option<bytes>` is a lookup, e.g. over the schematic
/// registry: `Arc::new(move |id: &str| reg.get(id).ok().flatten().map(String::into_bytes))`.
impl<F> SchematicLookup for F
where
    F: Fn(&str) -> Option<Vec<u8>> + Send + Sync,
{
    fn canonical(&self, id: &str) -> Option<Vec<u8>> {
        self(id)
    }
}

/// Knows no schematics.
pub struct NoSchematics;

impl SchematicLookup for NoSchematics {
    fn canonical(&self, _id: &str) -> Option<Vec<u8>> {
        None
    }
}

/// A validated `/image/...` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageKey {
    pub schematic: String,
    /// Normalised with a leading `v`.
    pub version: String,
    pub asset: String,
}

const MAX_ASSET: usize = 128;

impl ImageKey {
    /// Validate the three path segments; errors name the segment (HTTP 400).
    pub fn parse(schematic: &str, version: &str, asset: &str) -> crate::Result<ImageKey> {
        if !(schematic.len() == 64
            && schematic
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        {
            let shown: String = schematic.chars().take(80).collect();
            return Err(crate::Error::bad_input(format!(
                "schematic: {shown:?} is not a 64-character lowercase hex schematic ID"
            )));
        }
        let v = Version::parse_named(version, "version")?;
        if asset.len() > MAX_ASSET || !valid_asset(asset) {
            let shown: String = asset.chars().take(MAX_ASSET).collect();
            return Err(crate::Error::bad_input(format!(
                "asset: {shown:?} is not an Image Factory asset name (e.g. openstack-amd64.raw.xz)"
            )));
        }
        Ok(ImageKey {
            schematic: schematic.to_string(),
            version: v.to_string(),
            asset: asset.to_string(),
        })
    }

    /// The store key.
    pub fn store_key(&self) -> String {
        format!("image/{}/{}/{}", self.schematic, self.version, self.asset)
    }

    /// The path on the factory.
    pub fn path(&self) -> String {
        format!("/image/{}/{}/{}", self.schematic, self.version, self.asset)
    }

    /// The content type the factory gives this asset (used when the
    /// upstream sent none).
    pub fn content_type(&self) -> &'static str {
        let a = self.asset.as_str();
        if a.ends_with(".xz") {
            "application/x-xz"
        } else if a.ends_with(".gz") {
            "application/gzip"
        } else if a.ends_with(".iso") {
            "application/x-iso9660-image"
        } else if a.ends_with(".qcow2") {
            "application/x-qemu-disk"
        } else if a.ends_with(".zst") {
            "application/zstd"
        } else if a.ends_with(".efi") {
            "application/efi"
        } else if a.ends_with(".tar") {
            "application/x-tar"
        } else {
            "application/octet-stream"
        }
    }
}

fn is_arch(s: &str) -> bool {
    matches!(s, "amd64" | "arm64")
}

fn is_platform(s: &str) -> bool {
    s == "digital-ocean"
        || (!s.is_empty()
            && s.len() <= 32
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

/// `<platform>-<arch>[-secureboot]` (or `<arch>[-secureboot]` when `platform` is false).
fn platform_arch(s: &str, platform: bool) -> bool {
    let s = s.strip_suffix("-secureboot").unwrap_or(s);
    if !platform {
        return is_arch(s);
    }
    match s.rsplit_once('-') {
        Some((p, a)) => is_platform(p) && is_arch(a),
        None => false,
    }
}

/// The factory's asset grammar.
pub fn valid_asset(a: &str) -> bool {
    if let Some(arch) = a.strip_prefix("kernel-") {
        return is_arch(arch);
    }
    if let Some(rest) = a.strip_prefix("cmdline-") {
        return platform_arch(rest, true);
    }
    if let Some(rest) = a.strip_prefix("initramfs-") {
        return rest.strip_suffix(".xz").is_some_and(is_arch);
    }
    if let Some(rest) = a.strip_suffix(".iso") {
        return platform_arch(rest, true);
    }
    if let Some(rest) = a.strip_suffix("-uki.efi") {
        return platform_arch(rest, true);
    }
    if let Some(rest) = a.strip_suffix(".tar")
        && let Some((pre, arch)) = rest.split_once("installer-")
        && (pre.is_empty() || pre.strip_suffix('-').is_some_and(is_platform))
        && platform_arch(arch, false)
    {
        return true;
    }
    // disk images
    let mut base = a;
    for comp in [".tar.gz", ".gz", ".xz", ".zst"] {
        if let Some(b) = base.strip_suffix(comp) {
            base = b;
            break;
        }
    }
    for fmt in [".raw", ".qcow2", ".vhd", ".ova"] {
        if let Some(b) = base.strip_suffix(fmt) {
            return platform_arch(b, true);
        }
    }
    false
}

/// Why an image could not be answered.
#[derive(Debug, Clone)]
pub enum ImageError {
    /// Offline and not in the store.
    NotCached(String),
    Fetch(FetchError),
}

/// The image artifact cache.
#[derive(Clone)]
pub struct ImageCache {
    fills: Fills,
    /// `None` when offline.
    upstream: Option<(Upstream, String)>,
    schematics: Arc<dyn SchematicLookup>,
    metrics: Metrics,
    pub fill_timeout: Duration,
    /// How long a stored factory document is answered without asking
    /// the factory ([`ImageCache::document`]).
    pub metadata_ttl: Duration,
    /// One factory request per document at a time (the others wait and
    /// take what it kept), as artifacts are coalesced by their fill.
    doc_locks: Arc<crate::keyed_locks::KeyedLocks>,
    /// Factory document requests running at once (`--max-concurrent-fills`).
    doc_slots: Option<Arc<tokio::sync::Semaphore>>,
}

impl ImageCache {
    /// `upstream` is the client and the factory base URL, `None` offline.
    pub fn new(
        fills: Fills,
        upstream: Option<(Upstream, String)>,
        schematics: Arc<dyn SchematicLookup>,
        metrics: Metrics,
    ) -> ImageCache {
        ImageCache {
            fills,
            upstream,
            schematics,
            metrics,
            fill_timeout: Duration::from_secs(3600),
            metadata_ttl: DEFAULT_METADATA_TTL,
            doc_locks: Default::default(),
            doc_slots: None,
        }
    }

    /// At most `n` factory document requests at once (the service gives
    /// it `--max-concurrent-fills`, the artifacts' bound).
    pub fn with_document_limit(mut self, n: usize) -> ImageCache {
        self.doc_slots = Some(Arc::new(tokio::sync::Semaphore::new(n.max(1))));
        self
    }

    pub fn fills(&self) -> &Fills {
        &self.fills
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The artifact as a reader sees it: stored, or growing in a fill whose
    /// head is in (a fill that fails before its head is the error).
    pub async fn open(&self, key: &ImageKey) -> Result<Object, ImageError> {
        self.lookup(key, false)
            .await?
            .object()
            .await
            .map_err(ImageError::Fetch)
    }

    /// The stored artifact, or the fill that is fetching it (the schematic
    /// read only on the factory's 404). `pin`: a fill started here commits
    /// pinned (`mirror sync`: one index write).
    pub async fn lookup(&self, key: &ImageKey, pin: bool) -> Result<Joined, ImageError> {
        let schematic = (key.schematic.clone(), self.schematics.clone());
        self.lookup_at(
            &key.store_key(),
            &key.path(),
            Some(schematic),
            key.content_type(),
            || verifier_for(&key.asset),
            pin,
        )
        .await
    }

    /// A talosctl binary as a reader sees it (the same fill as an image).
    pub async fn open_talosctl(&self, key: &TalosctlKey) -> Result<Object, ImageError> {
        self.lookup_talosctl(key, false)
            .await?
            .object()
            .await
            .map_err(ImageError::Fetch)
    }

    /// The stored talosctl binary, or its fill (`pin` as for `lookup`).
    pub async fn lookup_talosctl(&self, k: &TalosctlKey, pin: bool) -> Result<Joined, ImageError> {
        self.lookup_at(
            &k.store_key(),
            &k.path(),
            None,
            "application/octet-stream",
            || None,
            pin,
        )
        .await
    }

    /// `path` on the factory, kept at `skey`; a 404 naming the schematic
    /// teaches the factory `schematic` (`(id, canonical)`) and asks again.
    async fn lookup_at(
        &self,
        skey: &str,
        path: &str,
        schematic: Option<Teach>,
        default_ct: &'static str,
        verifier: impl FnOnce() -> Option<Box<dyn crate::fill::Verifier>>,
        pin: bool,
    ) -> Result<Joined, ImageError> {
        let Some((up, base)) = &self.upstream else {
            let held = self.fills.store().open_key(skey).await;
            return match held.map_err(|e| ImageError::Fetch(FetchError::Unavailable(e.0)))? {
                Some(o) => {
                    self.metrics.hit("image");
                    Ok(Joined::Stored(o))
                }
                None => {
                    self.metrics.offline_miss("image", &format!("/{skey}"));
                    Err(ImageError::NotCached(format!(
                        "{path} is not in the cache and the service is offline"
                    )))
                }
            };
        };
        let spec = || {
            let url = format!("{base}{path}");
            let post_url = format!("{base}/schematics");
            let up = up.clone();
            let idle = up.limits().timeout + Duration::from_secs(5);
            let mut spec = FillSpec::new(move || {
                Box::pin(open_image(up, url, post_url, schematic, default_ct))
            });
            spec.verifier = verifier();
            spec.timeout = self.fill_timeout;
            // The upstream's own bounds fire first; this is the backstop.
            spec.idle_timeout = idle;
            spec.kind = "image";
            spec.meta.pinned = pin;
            spec
        };
        let joined = self.fills.join(skey, spec).await;
        let joined = joined.map_err(ImageError::Fetch)?;
        match &joined {
            Joined::Stored(_) => self.metrics.hit("image"),
            Joined::Filling(_) => self.metrics.miss("image"),
        }
        Ok(joined)
    }
}

/// The image assets the factory's iPXE script for `path` boots (its
/// templates: the UKI for `-secureboot`, else the kernel and initramfs).
pub fn pxe_assets(path: &str) -> Vec<String> {
    match path.strip_suffix("-secureboot") {
        Some(pa) => vec![format!("{pa}-secureboot-uki.efi")],
        None => {
            let arch = path.rsplit('-').next().unwrap_or(path);
            vec![format!("kernel-{arch}"), format!("initramfs-{arch}.xz")]
        }
    }
}

/// The iPXE script with every URL of an image (`http(s)://.../image/...`)
/// pointed at `base` instead of the factory's PXE host.
pub fn rewrite_pxe(script: &str, base: &str) -> String {
    let mut out = String::with_capacity(script.len());
    for (i, line) in script.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let words: Vec<String> = line
            .split(' ')
            .map(|w| {
                let url = w.starts_with("http://") || w.starts_with("https://");
                match w.find("/image/") {
                    Some(at) if url => format!("{base}{}", &w[at..]),
                    _ => w.to_string(),
                }
            })
            .collect();
        out.push_str(&words.join(" "));
    }
    out
}

/// A validated `/talosctl/{version}/{file}` address (`talosctl-<os>-<arch>`,
/// `.exe` on Windows, as the factory names them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TalosctlKey {
    /// Normalised with a leading `v`.
    pub version: String,
    pub file: String,
}

impl TalosctlKey {
    /// Validate both segments (HTTP 400 naming the segment).
    pub fn parse(version: &str, file: &str) -> crate::Result<TalosctlKey> {
        let v = Version::parse_named(version, "version")?;
        let ok = file
            .strip_prefix("talosctl-")
            .map(|r| r.strip_suffix(".exe").unwrap_or(r))
            .and_then(|r| r.split_once('-'))
            .is_some_and(|(os, arch)| {
                let word = |w: &str| {
                    !w.is_empty()
                        && w.len() <= 16
                        && w.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                };
                word(os) && word(arch)
            });
        if !ok {
            let shown: String = file.chars().take(64).collect();
            return Err(crate::Error::bad_input(format!(
                "path: {shown:?} is not a talosctl binary name (e.g. talosctl-linux-amd64, talosctl-windows-amd64.exe)"
            )));
        }
        Ok(TalosctlKey {
            version: v.to_string(),
            file: file.to_string(),
        })
    }

    /// A mirror config entry, `linux-amd64` (or the whole file name).
    pub fn from_platform(version: &str, platform: &str) -> crate::Result<TalosctlKey> {
        let file = if platform.starts_with("talosctl-") {
            platform.to_string()
        } else if platform.starts_with("windows-") && !platform.ends_with(".exe") {
            format!("talosctl-{platform}.exe")
        } else {
            format!("talosctl-{platform}")
        };
        TalosctlKey::parse(version, &file)
    }

    pub fn store_key(&self) -> String {
        format!("talosctl/{}/{}", self.version, self.file)
    }

    pub fn path(&self) -> String {
        format!("/talosctl/{}/{}", self.version, self.file)
    }
}

/// Largest factory document (`/versions`, a key, an extension list) accepted.
const MAX_DOCUMENT: usize = 1 << 20;

/// How long a stored factory document is answered without asking the
/// factory again (`serve --metadata-ttl`).
pub const DEFAULT_METADATA_TTL: Duration = Duration::from_secs(300);

/// What a factory document must look like before it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DocKind {
    /// A JSON list of strings (`/versions`).
    Versions,
    /// A JSON list (the official extensions or overlays of a release).
    List,
    /// PEM with this block label.
    Pem(&'static str),
    /// An iPXE script (`#!ipxe` first).
    Ipxe,
}

/// A small document of the factory that a verifying or browsing client
/// fetches: `/versions`, the cosign signing key, the SecureBoot signing
/// certificate, the official extensions and overlays of a release. Kept in
/// the store under `factory<path>` (`factory/versions`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactoryDoc {
    /// The factory's path, e.g. `/version/v1.13.6/extensions/official`.
    pub path: String,
    kind: DocKind,
}

impl FactoryDoc {
    /// `GET /versions`.
    pub fn versions() -> FactoryDoc {
        FactoryDoc {
            path: "/versions".into(),
            kind: DocKind::Versions,
        }
    }

    /// `GET /oci/cosign/signing-key.pub`: the key the factory signs installers with.
    pub fn cosign_key() -> FactoryDoc {
        FactoryDoc {
            path: "/oci/cosign/signing-key.pub".into(),
            kind: DocKind::Pem("PUBLIC KEY"),
        }
    }

    /// `GET /secureboot/signing-cert.pem`.
    pub fn secureboot_cert() -> FactoryDoc {
        FactoryDoc {
            path: "/secureboot/signing-cert.pem".into(),
            kind: DocKind::Pem("CERTIFICATE"),
        }
    }

    /// `GET /version/{v}/extensions/official` (`v` is checked and gets its
    /// leading `v`, as the factory adds it).
    pub fn extensions(version: &str) -> crate::Result<FactoryDoc> {
        let v = Version::parse_named(version, "version")?;
        Ok(FactoryDoc {
            path: format!("/version/{v}/extensions/official"),
            kind: DocKind::List,
        })
    }

    /// `GET /version/{v}/overlays/official`.
    pub fn overlays(version: &str) -> crate::Result<FactoryDoc> {
        let v = Version::parse_named(version, "version")?;
        Ok(FactoryDoc {
            path: format!("/version/{v}/overlays/official"),
            kind: DocKind::List,
        })
    }

    /// `GET /pxe/{schematic}/{version}/{path}`: the iPXE script booting
    /// `<platform>-<arch>[-secureboot]` (the factory's own grammar: `path`
    /// is a `cmdline-` asset without its prefix).
    pub fn pxe(schematic: &str, version: &str, path: &str) -> crate::Result<FactoryDoc> {
        let k = ImageKey::parse(schematic, version, &format!("cmdline-{path}")).map_err(|_| {
            crate::Error::bad_input(format!(
                "path: {:?} is not <platform>-<arch>[-secureboot] (e.g. metal-amd64)",
                path.chars().take(64).collect::<String>()
            ))
        })?;
        Ok(FactoryDoc {
            path: format!("/pxe/{}/{}/{path}", k.schematic, k.version),
            kind: DocKind::Ipxe,
        })
    }

    /// Is this an iPXE script (a 404 for it is a failure, not a note)?
    pub fn is_pxe(&self) -> bool {
        self.kind == DocKind::Ipxe
    }

    /// What `mirror sync` keeps for a set of Talos releases: `/versions`,
    /// the two signing documents, then each release's extension and
    /// overlay lists. Nothing for no release.
    pub fn for_releases(versions: &[String]) -> Vec<FactoryDoc> {
        if versions.is_empty() {
            return Vec::new();
        }
        let mut out = vec![
            FactoryDoc::versions(),
            FactoryDoc::cosign_key(),
            FactoryDoc::secureboot_cert(),
        ];
        for v in versions {
            for d in [FactoryDoc::extensions(v), FactoryDoc::overlays(v)]
                .into_iter()
                .flatten()
            {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
        out
    }

    /// The store key.
    pub fn store_key(&self) -> String {
        format!("factory{}", self.path)
    }

    /// The content type when the factory sent none.
    fn default_content_type(&self) -> &'static str {
        match self.kind {
            DocKind::Pem(_) => "application/x-pem-file",
            DocKind::Ipxe => "text/plain; charset=utf-8",
            _ => "application/json",
        }
    }

    /// Is `body` this document (so a captive portal's HTML page or a
    /// truncated answer is never kept)?
    fn check(&self, body: &[u8]) -> std::result::Result<(), String> {
        match self.kind {
            DocKind::Versions => serde_json::from_slice::<Vec<String>>(body)
                .map(drop)
                .map_err(|e| format!("not a JSON list of versions: {e}")),
            DocKind::List => serde_json::from_slice::<Vec<serde_json::Value>>(body)
                .map(drop)
                .map_err(|e| format!("not a JSON list: {e}")),
            DocKind::Ipxe => {
                if body.starts_with(b"#!ipxe") {
                    Ok(())
                } else {
                    Err("not an iPXE script (no #!ipxe line)".into())
                }
            }
            DocKind::Pem(label) => match pem::parse_many(body) {
                Ok(blocks) if blocks.first().is_some_and(|b| b.tag() == label) => Ok(()),
                _ => Err(format!("not a PEM {}", label.to_lowercase())),
            },
        }
    }
}

/// A factory document as answered.
#[derive(Debug, Clone)]
pub struct Document {
    pub content_type: String,
    pub body: bytes::Bytes,
    /// The stored copy past `--metadata-ttl`, answered because the factory
    /// could not be asked (the answer says so: `Warning: 110 - "stale"`).
    pub stale: bool,
}

impl ImageCache {
    /// The stored copy of `doc`, with its entry.
    async fn stored_document(&self, doc: &FactoryDoc) -> Option<(crate::store::Entry, Document)> {
        let (entry, body) = self
            .fills
            .store()
            .read_small_key(&doc.store_key(), MAX_DOCUMENT as u64)
            .await?;
        let content_type = entry
            .content_type
            .clone()
            .unwrap_or_else(|| doc.default_content_type().into());
        Some((
            entry,
            Document {
                content_type,
                body,
                stale: false,
            },
        ))
    }

    /// A factory document: the stored copy while younger than `ttl`, else
    /// the factory's (checked, then kept); when the factory cannot be asked
    /// (offline, down, 5xx, a timeout, an answer that is not the document)
    /// the stored copy of any age. A 4xx from the factory is passed
    /// through: it has spoken.
    pub async fn document(&self, doc: &FactoryDoc, ttl: Duration) -> Result<Document, ImageError> {
        let stored = self.stored_document(doc).await;
        if self.upstream.is_none() {
            return stored.map(|(_, d)| d).ok_or_else(|| {
                ImageError::NotCached(format!(
                    "{} is not in the cache and the service is offline",
                    doc.path
                ))
            });
        }
        let fresh = |stored: &Option<(crate::store::Entry, Document)>| {
            stored.as_ref().and_then(|(e, d)| {
                let age = std::time::SystemTime::now()
                    .duration_since(e.fetched_time())
                    .unwrap_or_default();
                (age < ttl).then(|| d.clone())
            })
        };
        if let Some(d) = fresh(&stored) {
            return Ok(d);
        }
        // Coalesced: one factory request per document at a time; who
        // waited takes what it kept.
        let _one = self.doc_locks.lock(&doc.store_key()).await;
        let stored = self.stored_document(doc).await;
        if let Some(d) = fresh(&stored) {
            return Ok(d);
        }
        let _slot = match &self.doc_slots {
            Some(s) => s.clone().acquire_owned().await.ok(),
            None => None,
        };
        match self.fetch_document(doc).await {
            Ok(d) => {
                let pinned = stored.as_ref().is_some_and(|(e, _)| e.pinned);
                if let Err(e) = self.keep_document(doc, &d, pinned).await {
                    tracing::warn!(error = %e, path = %doc.path, "keeping a factory document");
                }
                Ok(d)
            }
            Err(e @ FetchError::Status { .. }) => Err(ImageError::Fetch(e)),
            Err(e) => match stored {
                Some((_, mut d)) => {
                    tracing::warn!(error = %e, path = %doc.path, "serving the stored copy");
                    self.metrics.stale("document");
                    d.stale = true;
                    Ok(d)
                }
                None => Err(ImageError::Fetch(e)),
            },
        }
    }

    /// Ask the factory for `doc` (bounded: at most 1 MiB, under the
    /// upstream limits) and check it is that document. Nothing is stored.
    pub async fn fetch_document(&self, doc: &FactoryDoc) -> Result<Document, FetchError> {
        let Some((up, base)) = &self.upstream else {
            return Err(FetchError::Failed(format!(
                "{}: the service is offline",
                doc.path
            )));
        };
        let url = format!("{base}{}", doc.path);
        let resp = up.get(&url, &[]).await?;
        if resp.status() != reqwest::StatusCode::OK {
            // 4xx passed through, anything else (a 206 too) failed, as for every fetch.
            let st = resp.status();
            return Err(match open_response(resp, up.limits(), &[]).await {
                Err(e) => e,
                Ok(_) => FetchError::Failed(format!("upstream {url} answered {st}")),
            });
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .unwrap_or_else(|| doc.default_content_type().into());
        let body = up.limits().read_small(&url, resp, MAX_DOCUMENT).await?;
        doc.check(&body)
            .map_err(|e| FetchError::Failed(format!("upstream {url}: {e}")))?;
        Ok(Document {
            content_type,
            body: bytes::Bytes::from(body),
            stale: false,
        })
    }

    /// Keep `d` as the stored copy of `doc` (its age starts now).
    pub async fn keep_document(
        &self,
        doc: &FactoryDoc,
        d: &Document,
        pinned: bool,
    ) -> crate::Result<crate::store::Entry> {
        let store = self.fills.store();
        let mut t = store.temp()?;
        t.write_all(&d.body).await?;
        let meta = crate::store::Meta {
            content_type: Some(d.content_type.clone()),
            pinned,
            ..Default::default()
        };
        store.commit(t, &doc.store_key(), meta).await
    }

    /// `GET /versions`: [`ImageCache::document`] with the TTL the service
    /// was given. `(content type, body)`.
    pub async fn versions(&self) -> Result<(String, bytes::Bytes), ImageError> {
        let d = self
            .document(&FactoryDoc::versions(), self.metadata_ttl)
            .await?;
        Ok((d.content_type, d.body))
    }
}

/// The schematic a 404 may ask for (its ID and where to read it): read,
/// off the async threads, only then.
type Teach = (String, Arc<dyn SchematicLookup>);

async fn canonical((id, schematics): Teach) -> Option<(String, Vec<u8>)> {
    let read = move || schematics.canonical(&id).map(|c| (id, c));
    tokio::task::spawn_blocking(read).await.ok().flatten()
}

async fn open_image(
    up: Upstream,
    url: String,
    post_url: String,
    schematic: Option<Teach>,
    default_ct: &'static str,
) -> Result<Opened, FetchError> {
    let keep = ["content-disposition"];
    let resp = up.get(&url, &[]).await?;
    let schematic = match schematic {
        Some(t) if resp.status() == reqwest::StatusCode::NOT_FOUND => canonical(t).await,
        _ => None,
    };
    let resp = if resp.status() == reqwest::StatusCode::NOT_FOUND
        && let Some((id, body)) = schematic
    {
        let first = small_body(resp, up.limits()).await;
        let text = String::from_utf8_lossy(&first);
        if !text.contains("schematic") {
            return Err(FetchError::Status {
                status: 404,
                content_type: Some("text/plain; charset=utf-8".into()),
                body: first,
            });
        }
        tracing::info!(%id, "factory does not know the schematic; posting it");
        let posted = up.post(&post_url, "application/yaml", body).await?;
        if !posted.status().is_success() {
            let st = posted.status();
            let b = small_body(posted, up.limits()).await;
            return Err(FetchError::Failed(format!(
                "teaching the factory schematic {id}: {st}: {}",
                crate::text::one_line(&String::from_utf8_lossy(&b))
            )));
        }
        up.get(&url, &[]).await?
    } else {
        resp
    };
    let mut opened = open_response(resp, up.limits(), &keep).await?;
    if opened.head.content_type.is_none() {
        opened.head.content_type = Some(default_ct.to_string());
    }
    Ok(opened)
}

/// The integrity check an artifact's name calls for: `.xz`, `.gz` and
/// `.zst` streams must decode (CDI decompresses them); others have none
/// beyond length and sha256.
pub fn verifier_for(name: &str) -> Option<Box<dyn crate::fill::Verifier>> {
    if name.ends_with(".xz") {
        crate::verifiers::XzVerifier::new()
            .ok()
            .map(|v| Box::new(v) as Box<dyn crate::fill::Verifier>)
    } else if name.ends_with(".gz") {
        Some(Box::new(crate::verifiers::GzVerifier::new()))
    } else if name.ends_with(".zst") {
        crate::verifiers::ZstdVerifier::new()
            .ok()
            .map(|v| Box::new(v) as Box<dyn crate::fill::Verifier>)
    } else {
        None
    }
}

/// The service's schematic registry (named files and earlier POSTs) is
/// what the factory is taught after a 404.
impl SchematicLookup for crate::schematics::Registry {
    fn canonical(&self, id: &str) -> Option<Vec<u8>> {
        self.get(id).ok().flatten().map(String::into_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

    #[test]
    fn talosctl_keys() {
        let k = TalosctlKey::from_platform("1.11.0", "linux-amd64").unwrap();
        assert_eq!(k.store_key(), "talosctl/v1.11.0/talosctl-linux-amd64");
        let k = TalosctlKey::from_platform("v1.11.0", "windows-amd64").unwrap();
        assert_eq!(k.path(), "/talosctl/v1.11.0/talosctl-windows-amd64.exe");
        for bad in [
            "talosctl",
            "talosctl-linux",
            "linux-amd64",
            "talosctl-../x",
            "talosctl-Linux-amd64",
        ] {
            assert!(TalosctlKey::parse("v1.11.0", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pxe_documents_and_rewrites() {
        let d = FactoryDoc::pxe(S, "1.13.6", "metal-amd64").unwrap();
        assert_eq!(
            d.store_key(),
            format!("factory/pxe/{S}/v1.13.6/metal-amd64")
        );
        assert!(d.is_pxe());
        assert!(d.check(b"#!ipxe\nboot\n").is_ok());
        assert!(d.check(b"<html>").is_err());
        for bad in ["metal", "metal-amd64.iso", "../x", "metal-x86"] {
            assert!(FactoryDoc::pxe(S, "v1.13.6", bad).is_err(), "{bad}");
        }
        assert_eq!(
            pxe_assets("metal-arm64"),
            ["kernel-arm64", "initramfs-arm64.xz"]
        );
        assert_eq!(
            pxe_assets("metal-amd64-secureboot"),
            ["metal-amd64-secureboot-uki.efi"]
        );
        let script = "#!ipxe\n\nimgfree\nkernel https://pxe.factory.talos.dev/image/x/v1/kernel-amd64 talos.platform=metal https://other/keep\ninitrd https://pxe.factory.talos.dev/image/x/v1/initramfs-amd64.xz\nboot\n";
        assert_eq!(
            rewrite_pxe(script, "https://m.example:8443/base"),
            "#!ipxe\n\nimgfree\nkernel https://m.example:8443/base/image/x/v1/kernel-amd64 talos.platform=metal https://other/keep\ninitrd https://m.example:8443/base/image/x/v1/initramfs-amd64.xz\nboot\n"
        );
    }

    #[test]
    fn assets() {
        for a in [
            "openstack-amd64.raw.xz",
            "metal-amd64.raw.zst",
            "nocloud-arm64.raw.xz",
            "metal-amd64-secureboot.raw.xz",
            "aws-amd64.raw.tar.gz",
            "gcp-amd64.raw.tar.gz",
            "vmware-amd64.ova",
            "azure-amd64.vhd.xz",
            "digital-ocean-amd64.raw.gz",
            "metal-amd64.qcow2",
            "kernel-amd64",
            "cmdline-metal-amd64",
            "cmdline-metal-amd64-secureboot",
            "initramfs-arm64.xz",
            "metal-amd64.iso",
            "metal-amd64-secureboot.iso",
            "metal-amd64-secureboot-uki.efi",
            "installer-amd64.tar",
            "installer-arm64-secureboot.tar",
            "metal-installer-amd64.tar",
        ] {
            assert!(valid_asset(a), "{a}");
        }
        for a in [
            "",
            "..",
            "../etc/passwd",
            "openstack-amd64.raw.xz/..",
            "openstack-x86.raw.xz",
            "openstack-amd64.raw.bz2",
            "Openstack-amd64.raw.xz",
            "kernel-riscv",
            "openstack-amd64.raw.xz.sha256",
            "a/b-amd64.raw",
            "open%2fstack-amd64.raw",
            "-amd64.raw",
            "installer-amd64.tar.gz",
        ] {
            assert!(!valid_asset(a), "{a}");
        }
    }

    struct Known(Vec<u8>);
    impl SchematicLookup for Known {
        fn canonical(&self, id: &str) -> Option<Vec<u8>> {
            (id == S).then(|| self.0.clone())
        }
    }

    /// A fake factory (a real nginx cannot show "404 until POSTed"): it
    /// knows no schematic until one is POSTed, then redirects the image to
    /// a second server (another host:port), as the factory does with S3.
    #[tokio::test]
    async fn unknown_schematic_is_posted_and_redirects_followed() {
        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode};
        use axum::routing::{get, post};
        use std::sync::atomic::{AtomicUsize, Ordering};

        #[derive(Clone, Default)]
        struct Fake {
            known: Arc<std::sync::atomic::AtomicBool>,
            gets: Arc<AtomicUsize>,
            auth_seen: Arc<AtomicUsize>,
            cdn: Arc<std::sync::Mutex<String>>,
        }
        async fn listen(r: axum::Router) -> String {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let a = l.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(l, r).await.unwrap() });
            format!("http://{a}")
        }
        let fake = Fake::default();
        let cdn = listen(
            axum::Router::new().route(
                "/blob",
                get(|State(f): State<Fake>, h: HeaderMap| async move {
                    if h.contains_key("authorization") {
                        f.auth_seen.fetch_add(1, Ordering::SeqCst);
                    }
                    (
                        [("content-type", "application/x-iso9660-image")],
                        "ISO-BYTES",
                    )
                })
                .with_state(fake.clone()),
            ),
        )
        .await;
        *fake.cdn.lock().unwrap() = cdn;
        let factory = listen(
            axum::Router::new()
                .route(
                    "/image/{s}/{v}/{a}",
                    get(|State(f): State<Fake>, Path((s, _v, _a)): Path<(String, String, String)>| async move {
                        f.gets.fetch_add(1, Ordering::SeqCst);
                        if !f.known.load(Ordering::SeqCst) {
                            return (StatusCode::NOT_FOUND, [("location", String::new())], format!("schematic ID {s:?} not found"));
                        }
                        let to = format!("{}/blob", f.cdn.lock().unwrap());
                        (StatusCode::FOUND, [("location", to)], String::new())
                    }),
                )
                .route(
                    "/schematics",
                    post(|State(f): State<Fake>, body: String| async move {
                        if body == "customization: {}\n" {
                            f.known.store(true, Ordering::SeqCst);
                            (StatusCode::CREATED, format!("{{\"id\":\"{S}\"}}"))
                        } else {
                            (StatusCode::BAD_REQUEST, "bad".to_string())
                        }
                    }),
                )
                .with_state(fake.clone()),
        )
        .await;
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), None).unwrap();
        let up = Upstream::new(Default::default()).unwrap();
        let key = ImageKey::parse(S, "v1.13.6", "metal-amd64.iso").unwrap();
        // Without the schematic known locally: the 404 passes through.
        let cache = ImageCache::new(
            Fills::new(store.clone()),
            Some((up.clone(), factory.clone())),
            Arc::new(NoSchematics),
            Metrics::new(),
        );
        let Ok(Joined::Filling(h)) = cache.lookup(&key, false).await else {
            panic!("expected a fill")
        };
        assert!(matches!(
            h.wait().await,
            Err(FetchError::Status { status: 404, .. })
        ));
        assert!(!fake.known.load(Ordering::SeqCst));
        // Known locally: posted, retried once, redirect followed.
        let cache = ImageCache::new(
            Fills::new(store.clone()),
            Some((up, factory)),
            Arc::new(Known(b"customization: {}\n".to_vec())),
            Metrics::new(),
        );
        let Ok(Joined::Filling(h)) = cache.lookup(&key, false).await else {
            panic!("expected a fill")
        };
        let e = h.wait().await.unwrap();
        assert_eq!(e.entry.size, 9);
        assert_eq!(
            e.entry.content_type.as_deref(),
            Some("application/x-iso9660-image")
        );
        assert_eq!(fake.gets.load(Ordering::SeqCst), 3);
        assert_eq!(fake.auth_seen.load(Ordering::SeqCst), 0);
        assert!(matches!(
            cache.lookup(&key, false).await,
            Ok(Joined::Stored(_))
        ));
    }

    #[test]
    fn factory_documents() {
        let e = FactoryDoc::extensions("1.13.6").unwrap();
        assert_eq!(e.path, "/version/v1.13.6/extensions/official");
        assert_eq!(e.store_key(), "factory/version/v1.13.6/extensions/official");
        assert_eq!(FactoryDoc::versions().store_key(), "factory/versions");
        assert_eq!(FactoryDoc::extensions("latest").unwrap_err().exit_code(), 2);
        assert_eq!(FactoryDoc::overlays("../x").unwrap_err().exit_code(), 2);
        assert!(e.check(b"[]").is_ok());
        assert!(e.check(b"<html>").is_err());
        assert!(FactoryDoc::versions().check(br#"["v1.13.6"]"#).is_ok());
        assert!(FactoryDoc::versions().check(b"[1]").is_err());
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pem = kp.public_key_pem();
        assert!(FactoryDoc::cosign_key().check(pem.as_bytes()).is_ok());
        assert_eq!(
            FactoryDoc::secureboot_cert().check(pem.as_bytes()),
            Err("not a PEM certificate".into())
        );
        let all = FactoryDoc::for_releases(&["v1.13.6".into(), "1.13.6".into(), "v1.12.0".into()]);
        assert_eq!(all.len(), 7, "{all:?}");
        assert!(FactoryDoc::for_releases(&[]).is_empty());
    }

    #[test]
    fn keys() {
        let k = ImageKey::parse(S, "1.13.6", "openstack-amd64.raw.xz").unwrap();
        assert_eq!(k.version, "v1.13.6");
        assert_eq!(
            k.store_key(),
            format!("image/{S}/v1.13.6/openstack-amd64.raw.xz")
        );
        assert_eq!(k.content_type(), "application/x-xz");
        let bad = [
            (&S.to_uppercase()[..], "v1.13.6", "openstack-amd64.raw.xz"),
            ("..", "v1.13.6", "openstack-amd64.raw.xz"),
            (&S[..63], "v1.13.6", "openstack-amd64.raw.xz"),
            (S, "..", "openstack-amd64.raw.xz"),
            (S, "v1.13.6/../x", "openstack-amd64.raw.xz"),
            (S, "v1.13.6", ".."),
        ];
        for (s, v, a) in bad {
            let e = ImageKey::parse(s, v, a).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{s} {v} {a}");
        }
        let long = "a".repeat(300);
        assert!(ImageKey::parse(S, "v1.13.6", &long).is_err());
        assert!(ImageKey::parse(S, &long, "metal-amd64.iso").is_err());
    }
}
