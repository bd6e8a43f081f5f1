//! `/image/{schematic}/{version}/{asset}` and `/talosctl/{version}/{file}`:
//! the keys (validated segments, store key, factory path, content type),
//! the lookup that answers from the store or one fill, the factory's
//! 404-then-POST rule, and the integrity check an artifact's name calls for.

use std::sync::Arc;
use std::time::Duration;

use super::{ImageCache, ImageError, SchematicLookup};
use crate::fill::{FetchError, FillSpec, Joined, Object, Opened};
use crate::store::Key;
use crate::upstream::{Upstream, open_response, small_body};
use crate::version::Version;

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
        if !crate::text::is_hex64(schematic) {
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
    pub fn store_key(&self) -> Key {
        Key::image(&self.schematic, &self.version, &self.asset)
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

    pub fn store_key(&self) -> Key {
        Key::talosctl(&self.version, &self.file)
    }

    pub fn path(&self) -> String {
        format!("/talosctl/{}/{}", self.version, self.file)
    }
}

impl ImageCache {
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
        skey: &Key,
        path: &str,
        schematic: Option<Teach>,
        default_ct: &'static str,
        verifier: impl FnOnce() -> Option<Box<dyn crate::fill::Verifier>>,
        pin: bool,
    ) -> Result<Joined, ImageError> {
        let Some((up, base)) = &self.upstream else {
            let held = self.fills.store().open_key(skey).await;
            return match held.map_err(|e| ImageError::Fetch(e.into()))? {
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
            spec.upstream = Some(base.clone());
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
                retry_after: None,
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
/// A decoder that could not be set up fails the fill it guards
/// ([`crate::verifiers::NoDecoder`]), never leaves it unchecked.
pub fn verifier_for(name: &str) -> Option<Box<dyn crate::fill::Verifier>> {
    use crate::fill::Verifier;
    use crate::verifiers::{NoDecoder, XzVerifier, ZstdVerifier};
    fn boxed<V: Verifier + 'static>(
        v: Result<V, crate::verifiers::StreamError>,
    ) -> Box<dyn Verifier> {
        match v {
            Ok(v) => Box::new(v),
            Err(e) => Box::new(NoDecoder(e)),
        }
    }
    if name.ends_with(".xz") {
        Some(boxed(XzVerifier::new()))
    } else if name.ends_with(".gz") {
        Some(Box::new(crate::verifiers::GzVerifier::new()))
    } else if name.ends_with(".zst") {
        Some(boxed(ZstdVerifier::new()))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::factory::NoSchematics;
    use crate::fill::Fills;
    use crate::metrics::Metrics;

    const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

    #[test]
    fn talosctl_keys() {
        let k = TalosctlKey::from_platform("1.11.0", "linux-amd64").unwrap();
        assert_eq!(
            k.store_key(),
            Key::talosctl("v1.11.0", "talosctl-linux-amd64")
        );
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
    fn keys() {
        let k = ImageKey::parse(S, "1.13.6", "openstack-amd64.raw.xz").unwrap();
        assert_eq!(k.version, "v1.13.6");
        assert_eq!(
            k.store_key(),
            Key::image(S, "v1.13.6", "openstack-amd64.raw.xz")
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
