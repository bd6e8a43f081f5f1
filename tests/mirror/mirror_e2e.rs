//! End-to-end tests of `talos-gen mirror` with real parts: nginx as the
//! factory's `/image` upstream (and `POST /schematics`), Debian's
//! distribution registry as the installer (and extra image) upstream,
//! `talos-gen serve --offline` afterwards, curl and skopeo as clients.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::mirror_site::{MirrorSite, SiteSpec, V};
use crate::support::registry::skopeo_copy_ok;
use crate::support::{Service, ok, talos_gen};

const MIB: usize = 1 << 20;
const SCHEMATIC_YAML: &str = "customization:\n  extraKernelArgs:\n    - mirror-test\n";

/// The mirror site, with `mirror.yaml` naming all of it.
struct Fixture(MirrorSite);

impl std::ops::Deref for Fixture {
    type Target = MirrorSite;
    fn deref(&self) -> &MirrorSite {
        &self.0
    }
}

impl std::ops::DerefMut for Fixture {
    fn deref_mut(&mut self) -> &mut MirrorSite {
        &mut self.0
    }
}

impl Fixture {
    /// nginx publishing two assets (`xz_mib` MiB of random data as xz, and
    /// an ISO), optionally rate-limited; a registry with a two-platform
    /// installer and a `siderolabs/kubelet` image.
    async fn new(xz_mib: usize, rate: Option<&str>) -> Fixture {
        let site = MirrorSite::start(SiteSpec {
            xz_len: xz_mib * MIB,
            iso_len: MIB + 123,
            installer_layers: vec![2 * MIB, MIB],
            seeds: [7, 9, 1, 2],
            rate: rate.map(str::to_string),
            ..SiteSpec::new(SCHEMATIC_YAML)
        })
        .await;
        site.config("mirror.yaml", &site.asset_names());
        Fixture(site)
    }

    fn sync_cmd(&self, config: &str, cache: &str) -> Command {
        let mut c = self.0.sync_cmd(&self.path(config), &self.path(cache));
        c.args(["--concurrency", "4"]).env("RUST_LOG", "warn");
        c
    }

    fn sync(&self, config: &str, cache: &str) -> Output {
        self.sync_cmd(config, cache).output().unwrap()
    }

    fn image_gets(&self) -> usize {
        self.nginx.count("\"GET /image/")
    }

    fn blob_gets(&self) -> usize {
        self.reg.count_gets("/blobs/")
    }

    /// `serve --offline` over `cache` (pinned content survives a tiny size limit).
    fn serve_offline(&self, cache: &str) -> Service {
        let cache = self.path(cache);
        Service::start(&[
            "--offline",
            "--cache-dir",
            cache.to_str().unwrap(),
            "--cache-max-size",
            "1",
            "--mirror-upstream",
            "ghcr.io=https://ghcr.invalid",
        ])
    }

    /// Everything a client would ask, answered by `svc`, checked against the upstream content.
    fn check_served(&self, svc: &Service) -> Vec<(String, Vec<u8>)> {
        let mut answers = Vec::new();
        for (a, bytes) in &self.assets {
            let url = format!("{}/image/{}/{V}/{a}", svc.url(), self.id);
            let got = curl(&url);
            assert_eq!(got.len(), bytes.len(), "{a}");
            assert!(got == *bytes, "{a}: bytes differ");
            answers.push((url, got));
        }
        // The installer, every platform, with skopeo.
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("installer");
        let repo = &self.installer.repo;
        let files = skopeo_copy_ok(&svc.host(), repo, V, &dest, "the installer");
        self.installer.assert_copied(&files, "the installer");
        for (k, v) in files {
            answers.push((format!("skopeo {k}"), v));
        }
        // The extra image through ?ns=, every platform, with curl.
        let base = format!("{}/v2/siderolabs/kubelet", svc.url());
        let idx = curl(&format!("{base}/manifests/v1.35.6?ns=ghcr.io"));
        assert_eq!(idx, self.kubelet.index);
        for (_, m, d) in &self.kubelet.manifests {
            assert_eq!(&curl(&format!("{base}/manifests/{d}?ns=ghcr.io")), m);
        }
        for b in &self.kubelet.blobs {
            assert!(curl(&format!("{base}/blobs/{}?ns=ghcr.io", b.digest)) == b.data);
        }
        answers.push(("kubelet index".into(), idx));
        // The schematic the sync was given as a file is known offline
        // (a store entry, so it also travels through export/import).
        let (_, canonical) = talos_gen::schematic::id_and_canonical(SCHEMATIC_YAML).unwrap();
        let url = format!("{}/schematics/{}", svc.url(), self.id);
        let got = curl(&url);
        assert_eq!(String::from_utf8_lossy(&got), canonical);
        answers.push((url, got));
        answers
    }
}

/// GET `url` (any manifest type accepted); the body of a 2xx answer.
fn curl(url: &str) -> Vec<u8> {
    let r = support::curl(&[
        "--fail",
        "-H",
        "Accept: application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json",
        url,
    ]);
    assert!(r.exit == 0, "curl {url}: {}", r.stderr);
    r.body
}

fn object_paths(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache.join("objects/sha256"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_then_offline_serves_everything_and_resync_fetches_nothing() {
    let mut fx = Fixture::new(3, None).await;
    let o = fx.sync("mirror.yaml", "cache");
    let (stdout, err) = ok(&o, "first sync");
    // Issue 41: a first sync into an empty store says nothing was found
    // stored, and the schematic line says what was done with it.
    assert!(stdout.contains(", 0 found stored (0 B)"), "{stdout}");
    assert!(
        !err.contains("already stored") && !err.contains("found stored"),
        "{err}"
    );
    assert!(
        err.contains("taught to the factory and kept in the store"),
        "{err}"
    );
    assert!(
        stdout.contains("failed") && stdout.contains(" 0 failed"),
        "{stdout}"
    );
    // One line per item (no terminal): 1 schematic + 2 images + installer + kubelet.
    assert_eq!(
        err.lines().filter(|l| l.starts_with("ok ")).count(),
        5,
        "{err}"
    );
    assert_eq!(fx.nginx.count("\"POST /schematics"), 1);
    let (images, blobs) = (fx.image_gets(), fx.blob_gets());
    assert_eq!(images, 2);
    assert_eq!(blobs, fx.installer.blobs.len() + fx.kubelet.blobs.len());

    // Second sync: no upstream artifact GET at all.
    let o = fx.sync("mirror.yaml", "cache");
    let (_, err) = ok(&o, "second sync");
    assert_eq!(fx.image_gets(), images, "re-sync fetched an image again");
    assert_eq!(fx.blob_gets(), blobs, "re-sync fetched a blob again");
    assert!(err.contains("already stored"), "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("fetched 0 objects"));

    // Both upstreams gone: the offline service answers all of it.
    fx.nginx.stop();
    fx.reg.stop();
    let svc = fx.serve_offline("cache");
    fx.check_served(&svc);
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_catches_a_flipped_byte_and_sync_repairs_it() {
    let fx = Fixture::new(2, None).await;
    ok(&fx.sync("mirror.yaml", "cache"), "sync");
    let cache = fx.path("cache");
    let c = cache.to_str().unwrap();
    ok(
        &talos_gen(&["mirror", "verify", "--cache-dir", c]),
        "verify clean",
    );
    // Flip one byte in every 3rd object (images and blobs alike).
    let mut flipped = Vec::new();
    for p in object_paths(&cache).iter().step_by(3) {
        support::flip_middle_byte(p, 0x01);
        flipped.push(p.file_name().unwrap().to_string_lossy().into_owned());
    }
    let o = talos_gen(&["mirror", "verify", "--cache-dir", c]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    for d in &flipped {
        assert!(err.contains(d.as_str()), "verify did not name {d}: {err}");
    }
    let before = (fx.image_gets(), fx.blob_gets());
    ok(&fx.sync("mirror.yaml", "cache"), "repairing sync");
    let after = (fx.image_gets(), fx.blob_gets());
    assert!(
        after.0 + after.1 > before.0 + before.1,
        "nothing was fetched again"
    );
    assert!(after.0 + after.1 - before.0 - before.1 <= flipped.len());
    ok(
        &talos_gen(&["mirror", "verify", "--cache-dir", c]),
        "verify after repair",
    );
    let svc = fx.serve_offline("cache");
    fx.check_served(&svc);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_asset_the_upstream_lacks_fails_by_name_after_the_rest_synced() {
    let fx = Fixture::new(1, None).await;
    let mut images: Vec<String> = fx.assets.iter().map(|a| a.0.clone()).collect();
    images.insert(0, "nocloud-arm64.raw.xz".into());
    fx.config("lacking.yaml", &images);
    let o = fx.sync("lacking.yaml", "cache");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.lines().any(|l| l.contains("failed")
            && l.contains("nocloud-arm64.raw.xz")
            && l.contains("404")),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains(" 1 failed"));
    let svc = fx.serve_offline("cache");
    fx.check_served(&svc);
}

#[tokio::test(flavor = "multi_thread")]
async fn export_import_into_an_empty_dir_serves_the_same() {
    let fx = Fixture::new(1, None).await;
    ok(&fx.sync("mirror.yaml", "cache"), "sync");
    let tar = fx.path("mirror.tar");
    let (c, t) = (fx.path("cache"), tar.to_str().unwrap().to_string());
    ok(
        &talos_gen(&[
            "mirror",
            "export",
            "--cache-dir",
            c.to_str().unwrap(),
            "--output",
            &t,
            "--config",
            fx.path("mirror.yaml").to_str().unwrap(),
        ]),
        "export",
    );
    let empty = fx.path("imported");
    let e = empty.to_str().unwrap();
    ok(
        &talos_gen(&["mirror", "import", &t, "--cache-dir", e]),
        "import",
    );
    ok(
        &talos_gen(&["mirror", "import", &t, "--cache-dir", e]),
        "import again",
    );
    ok(
        &talos_gen(&["mirror", "verify", "--cache-dir", e]),
        "verify imported",
    );
    let a = fx.serve_offline("cache");
    let b = fx.serve_offline("imported");
    let ans_a = fx.check_served(&a);
    let ans_b = fx.check_served(&b);
    assert_eq!(ans_a.len(), ans_b.len());
    for ((_, x), (_, y)) in ans_a.iter().zip(&ans_b) {
        assert!(x == y);
    }
    // A damaged file is refused object by object, nothing unverified appears.
    let mut bytes = std::fs::read(&tar).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    let bad = fx.path("bad.tar");
    std::fs::write(&bad, bytes).unwrap();
    let o = talos_gen(&[
        "mirror",
        "import",
        bad.to_str().unwrap(),
        "--cache-dir",
        fx.path("third").to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    ok(
        &talos_gen(&[
            "mirror",
            "verify",
            "--cache-dir",
            fx.path("third").to_str().unwrap(),
        ]),
        "verify after a bad import",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sync_killed_half_way_resumes_without_refetching_whole_objects() {
    // 6 MiB of xz at 1 MiB/s: the image takes at least 6 s to arrive, so
    // there is a window where some objects are whole and it is not.
    let fx = Fixture::new(6, Some("1m")).await;
    let xz_len = fx.assets[0].1.len() as u64;
    let mut cmd = fx.sync_cmd("mirror.yaml", "cache");
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = support::Proc::spawn("mirror sync", cmd);
    let cache = fx.path("cache");
    let t0 = Instant::now();
    // Kill -9 once some objects are whole while a fill is still part-way
    // through its temp file: an interruption by state, not by a timer, so
    // a loaded machine cannot let the sync finish first.
    // Whole = named by an index entry (the object is renamed into place
    // first, its entry written after).
    let entries = || {
        std::fs::read_dir(cache.join("index"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                    .count()
            })
            .unwrap_or(0)
    };
    let partial_fill = || {
        std::fs::read_dir(cache.join("tmp"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|e| e.metadata().ok())
                    .any(|m| m.len() > 0 && m.len() + MIB as u64 <= xz_len)
            })
            .unwrap_or(false)
    };
    loop {
        if entries() >= 1 && partial_fill() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no moment with whole objects and a part-way fill within 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill();
    let whole: Vec<talos_gen::store::Entry> = talos_gen::store::Store::open(&cache, None)
        .unwrap()
        .entries();
    assert!(!whole.is_empty());
    assert!(
        whole.len() < 2 + 2 * 2 + fx.installer.blobs.len() + fx.kubelet.blobs.len(),
        "the sync was not interrupted half-way"
    );
    ok(&fx.sync("mirror.yaml", "cache"), "resumed sync");
    for e in &whole {
        if let Some(d) = e.key.as_str().strip_prefix("oci/blob/") {
            assert_eq!(
                fx.reg.count_gets(&format!("/blobs/{d}")),
                1,
                "{} fetched twice",
                e.key
            );
        } else if let Some(rest) = e.key.as_str().strip_prefix("image/") {
            let asset = rest.rsplit('/').next().unwrap();
            assert_eq!(
                fx.nginx.count(&format!("/{asset} ")),
                1,
                "{} fetched twice",
                e.key
            );
        }
    }
    for (a, _) in &fx.assets {
        assert!(fx.nginx.count(&format!("/{a} ")) <= 2);
    }
    ok(
        &talos_gen(&["mirror", "verify", "--cache-dir", cache.to_str().unwrap()]),
        "verify",
    );
    let svc = fx.serve_offline("cache");
    fx.check_served(&svc);
}

#[test]
fn shipped_config_and_manifests_are_consistent() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("mirror");
    let cfg = talos_gen::mirror::Config::load(&root.join("mirror.yaml")).unwrap();
    assert_eq!(cfg.versions, ["v1.13.6"]);
    assert_eq!(cfg.images, ["openstack-amd64.raw.xz"]);
    // Issue 21: the `workers:` form, one pool per Cozystack Kubernetes
    // minor; each brings its installer, kubelet and pause.
    assert!(cfg.installers.is_empty() && cfg.extra_images.is_empty());
    let kubelets: Vec<String> = cfg
        .workers
        .iter()
        .map(|w| w.pull.images[1].reference.clone())
        .collect();
    assert_eq!(
        kubelets,
        [
            "ghcr.io/siderolabs/kubelet:v1.35.6",
            "ghcr.io/siderolabs/kubelet:v1.34.9",
            "ghcr.io/siderolabs/kubelet:v1.33.13",
            "ghcr.io/siderolabs/kubelet:v1.32.13",
            "ghcr.io/siderolabs/kubelet:v1.31.14",
        ]
    );
    for w in &cfg.workers {
        let refs: Vec<&str> = w.pull.images.iter().map(|p| p.reference.as_str()).collect();
        assert_eq!(refs.len(), 3, "{refs:?}");
        assert!(
            refs[0].starts_with("factory.talos.dev/installer/"),
            "{refs:?}"
        );
        assert_eq!(refs[2], "registry.k8s.io/pause:3.10.1");
    }
    let text = std::fs::read_to_string(root.join("kubernetes.yaml")).unwrap();
    let docs = talos_gen::yaml::documents_from_str(&text, "kubernetes.yaml").unwrap();
    let kinds: Vec<&str> = docs
        .iter()
        .filter_map(|d| d.get("kind")?.as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "PersistentVolumeClaim",
            "ConfigMap",
            "Deployment",
            "Service",
            "CronJob"
        ]
    );
    // The ConfigMap carries the same items as mirror/mirror.yaml.
    let cm = docs[1]["data"]["mirror.yaml"].as_str().unwrap();
    let in_cm = talos_gen::mirror::Config::parse(cm, &root, "configmap").unwrap();
    assert_eq!(in_cm.items(), cfg.items());
    for (i, kind) in [(2, "Deployment"), (4, "CronJob")] {
        let spec = if kind == "CronJob" {
            &docs[i]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        } else {
            &docs[i]["spec"]["template"]["spec"]
        };
        assert_eq!(
            spec["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{kind}"
        );
        let c = &spec["containers"][0];
        assert!(c["resources"]["requests"]["memory"].is_string(), "{kind}");
        assert!(c["livenessProbe"].is_mapping(), "{kind}");
        let vol = &spec["volumes"][0]["persistentVolumeClaim"]["claimName"];
        assert_eq!(vol.as_str(), Some("talos-gen-cache"), "{kind}");
    }
    // The service is probed for readiness too.
    let d = &docs[2]["spec"]["template"]["spec"]["containers"][0];
    assert!(d["readinessProbe"].is_mapping());
}

/// Index writes into `dir` (a local store's `index/`) while it is watched:
/// every entry write is a rename into place (`IN_MOVED_TO`), counted per
/// entry name by inotify.
struct IndexWrites {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<std::collections::BTreeMap<String, usize>>>,
}

impl IndexWrites {
    fn watch(dir: &Path) -> IndexWrites {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain system calls on a descriptor this helper owns and
        // closes; the event buffer is read within the length read() gave.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify_init1");
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        let wd = unsafe {
            libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_MOVED_TO | libc::IN_CREATE)
        };
        assert!(wd >= 0, "inotify_add_watch {}", dir.display());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut counts = std::collections::BTreeMap::new();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let stopping = flag.load(std::sync::atomic::Ordering::Acquire);
                loop {
                    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                    if n <= 0 {
                        break;
                    }
                    let mut at = 0usize;
                    let head = std::mem::size_of::<libc::inotify_event>();
                    while at + head <= n as usize {
                        let ev: libc::inotify_event =
                            unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
                        let name = &buf[at + head..at + head + ev.len as usize];
                        let name = String::from_utf8_lossy(name)
                            .trim_end_matches('\0')
                            .to_string();
                        *counts.entry(name).or_insert(0) += 1;
                        at += head + ev.len as usize;
                    }
                }
                if stopping {
                    unsafe { libc::close(fd) };
                    return counts;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        IndexWrites {
            stop,
            thread: Some(thread),
        }
    }

    /// Stop watching: writes per entry name.
    fn finish(mut self) -> std::collections::BTreeMap<String, usize> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Every key named by `index`: (entry name, key, pinned).
fn index_keys(cache: &Path) -> Vec<(String, String, bool)> {
    let mut v: Vec<(String, String, bool)> = std::fs::read_dir(cache.join("index"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let en: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                en["key"].as_str().unwrap().to_string(),
                en["pinned"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    v.sort();
    v
}

/// Every key the sync leaves, pinned, written exactly once while `w` watched.
fn assert_one_write_each(cache: &Path, w: IndexWrites, what: &str) -> usize {
    let writes = w.finish();
    let keys = index_keys(cache);
    assert!(!keys.is_empty(), "{what}: nothing stored");
    for (name, key, pinned) in &keys {
        assert!(*pinned, "{what}: {key} not pinned");
        assert_eq!(
            writes.get(name).copied().unwrap_or(0),
            1,
            "{what}: {key} written {} times",
            writes.get(name).copied().unwrap_or(0)
        );
    }
    let names: Vec<&String> = keys.iter().map(|k| &k.0).collect();
    for (name, n) in &writes {
        assert!(
            names.contains(&name),
            "{what}: {name} written {n} times, then gone"
        );
    }
    keys.len()
}

/// A mirror fill commits pinned: one index write per key, never a commit
/// and then a pin. Into an empty store every key the sync leaves was
/// written once; over what `serve` cached before (unpinned), pinning it is
/// its one write.
#[tokio::test(flavor = "multi_thread")]
async fn every_mirror_fill_is_one_index_write() {
    let fx = Fixture::new(1, None).await;
    let cache = fx.path("cache");
    drop(talos_gen::store::Store::open(&cache, None).unwrap());
    let w = IndexWrites::watch(&cache.join("index"));
    let o = fx.sync("mirror.yaml", "cache");
    ok(&o, "sync into an empty store");
    let n = assert_one_write_each(&cache, w, "sync into an empty store");
    eprintln!("an empty store: {n} keys, one write each");

    // `serve` caches the installer, the extra image and an asset first.
    let warm = fx.path("warm");
    let mut svc = Service::start(&[
        "--cache-dir",
        warm.to_str().unwrap(),
        "--factory-url",
        &fx.nginx.url(),
        "--registry-url",
        &fx.reg.url(),
        "--mirror-upstream",
        &format!("ghcr.io={}", fx.reg.url()),
    ]);
    let out = tempfile::tempdir().unwrap();
    let files = skopeo_copy_ok(
        &svc.host(),
        &fx.installer.repo,
        V,
        out.path(),
        "the installer",
    );
    fx.installer.assert_copied(&files, "the installer");
    let base = format!("{}/v2/siderolabs/kubelet", svc.url());
    assert_eq!(
        curl(&format!("{base}/manifests/v1.35.6?ns=ghcr.io")),
        fx.kubelet.index
    );
    let (a, bytes) = &fx.assets[0];
    assert!(curl(&format!("{}/image/{}/{V}/{a}", svc.url(), fx.id)) == *bytes);
    svc.stop();
    let cached = index_keys(&warm);
    assert!(
        cached.iter().all(|(_, _, pinned)| !pinned),
        "serve pinned: {cached:?}"
    );
    let w = IndexWrites::watch(&warm.join("index"));
    let o = fx.sync("mirror.yaml", "warm");
    ok(&o, "sync over serve's cache");
    let n = assert_one_write_each(&warm, w, "sync over serve's cache");
    eprintln!(
        "over serve's cache: {n} keys ({} cached before), one write each",
        cached.len()
    );
}
