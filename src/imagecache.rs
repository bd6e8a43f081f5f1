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
        }
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
        self.lookup(key)?.object().await.map_err(ImageError::Fetch)
    }

    /// The stored artifact, or the fill that is fetching it.
    pub fn lookup(&self, key: &ImageKey) -> Result<Joined, ImageError> {
        let skey = key.store_key();
        let Some((up, base)) = &self.upstream else {
            return match self.fills.store().get(&skey) {
                Some(o) => {
                    self.metrics.hit("image");
                    Ok(Joined::Stored(o))
                }
                None => {
                    self.metrics.offline_miss("image");
                    Err(ImageError::NotCached(format!(
                        "{} is not in the cache and the service is offline",
                        key.path()
                    )))
                }
            };
        };
        let joined = self.fills.join(&skey, || {
            let url = format!("{base}{}", key.path());
            let post_url = format!("{base}/schematics");
            let up = up.clone();
            let idle = up.limits().timeout + Duration::from_secs(5);
            let schematic = self.schematics.canonical(&key.schematic);
            let id = key.schematic.clone();
            let default_ct = key.content_type();
            let mut spec = FillSpec::new(move || {
                Box::pin(open_image(up, url, post_url, id, schematic, default_ct))
            });
            spec.verifier = verifier_for(&key.asset);
            spec.timeout = self.fill_timeout;
            // The upstream's own bounds fire first; this is the backstop.
            spec.idle_timeout = idle;
            spec.kind = "image";
            spec
        });
        match &joined {
            Joined::Stored(_) => self.metrics.hit("image"),
            Joined::Filling(_) => self.metrics.miss("image"),
        }
        Ok(joined)
    }
}

/// Store key of the last `/versions` answer.
const VERSIONS_KEY: &str = "factory/versions";
/// Largest `/versions` body accepted.
const MAX_VERSIONS: usize = 1 << 20;

impl ImageCache {
    /// `GET /versions`: the factory's list (kept in the store), or the
    /// stored copy when the factory cannot be asked. `(content type, body)`.
    pub async fn versions(&self) -> Result<(String, bytes::Bytes), ImageError> {
        let store = self.fills.store().clone();
        let stored = || -> Option<(String, bytes::Bytes)> {
            let o = store.get(VERSIONS_KEY)?;
            let ct = o
                .entry
                .content_type
                .clone()
                .unwrap_or_else(|| "application/json".into());
            Some((ct, o.read_small(MAX_VERSIONS as u64).ok()?))
        };
        let Some((up, base)) = &self.upstream else {
            return stored().ok_or_else(|| {
                ImageError::NotCached(
                    "/versions is not in the cache and the service is offline".into(),
                )
            });
        };
        let url = format!("{base}/versions");
        let fetched = async {
            let resp = up.get(&url, &[]).await?;
            let opened = open_response(resp, up.limits(), &[]).await?;
            let mut body = Vec::new();
            let mut s = opened.body;
            while let Some(b) = futures::StreamExt::next(&mut s).await {
                body.extend_from_slice(&b?);
                if body.len() > MAX_VERSIONS {
                    return Err(FetchError::Failed(format!(
                        "upstream {url}: answer too large"
                    )));
                }
            }
            serde_json::from_slice::<Vec<String>>(&body).map_err(|e| {
                FetchError::Failed(format!("upstream {url}: not a JSON list of versions: {e}"))
            })?;
            let ct = opened
                .head
                .content_type
                .unwrap_or_else(|| "application/json".into());
            Ok((ct, bytes::Bytes::from(body)))
        }
        .await;
        match fetched {
            Ok((ct, body)) => {
                let keep = async {
                    let mut t = store.temp()?;
                    t.write_all(&body).await?;
                    let meta = crate::store::Meta {
                        content_type: Some(ct.clone()),
                        ..Default::default()
                    };
                    store.commit(t, VERSIONS_KEY, meta).await
                };
                if let Err(e) = keep.await {
                    tracing::warn!(error = %e, "keeping /versions");
                }
                Ok((ct, body))
            }
            Err(e) => match stored() {
                Some(x) => {
                    tracing::warn!(error = %e, "serving the stored /versions");
                    Ok(x)
                }
                None => Err(ImageError::Fetch(e)),
            },
        }
    }
}

async fn open_image(
    up: Upstream,
    url: String,
    post_url: String,
    id: String,
    schematic: Option<Vec<u8>>,
    default_ct: &'static str,
) -> Result<Opened, FetchError> {
    let keep = ["content-disposition"];
    let resp = up.get(&url, &[]).await?;
    let resp = if resp.status() == reqwest::StatusCode::NOT_FOUND
        && let Some(body) = schematic
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
                String::from_utf8_lossy(&b).trim()
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
        let Ok(Joined::Filling(h)) = cache.lookup(&key) else {
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
        let Ok(Joined::Filling(h)) = cache.lookup(&key) else {
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
        assert!(matches!(cache.lookup(&key), Ok(Joined::Stored(_))));
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
