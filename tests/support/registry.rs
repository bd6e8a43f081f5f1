//! Debian's distribution registry (`docker-registry`) on loopback as a
//! child process (killed on drop), an image shaped like the Image
//! Factory's installer pushed to it over the plain registry API, cosign
//! signatures pushed the classic way, and skopeo as the client.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{Proc, free_port, random_bytes, require_tool, sha256_digest, wait_http};

pub const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const DOCKER_LAYER: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// Debian's distribution registry on 127.0.0.1, storage in a temp dir.
/// With `proxy_of`, it runs in pull-through proxy mode (`proxy: remoteurl:`).
pub struct Registry {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub log: PathBuf,
    proc: Proc,
}

impl Registry {
    pub fn start() -> Registry {
        Self::start_with(None)
    }

    pub fn start_proxy(remote: &str) -> Registry {
        Self::start_with(Some(remote))
    }

    fn start_with(proxy_of: Option<&str>) -> Registry {
        let extra = proxy_of
            .map(|r| format!("proxy:\n  remoteurl: {r}\n"))
            .unwrap_or_default();
        Self::start_custom(None, &extra)
    }

    /// A registry over `storage` (default: a fresh dir), with `extra` YAML
    /// appended to its config (auth, middleware, proxy).
    pub fn start_custom(storage: Option<&Path>, extra: &str) -> Registry {
        let bin = require_tool("docker-registry");
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let storage = storage
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.path().join("storage"));
        std::fs::create_dir_all(&storage).expect("storage dir");
        let mut cfg = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
            storage.display()
        );
        cfg.push_str(extra);
        let cfg_path = dir.path().join("config.yml");
        std::fs::write(&cfg_path, cfg).expect("write registry config");
        let log = dir.path().join("registry.log");
        let logf = std::fs::File::create(&log).expect("log file");
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(logf.try_clone().expect("log clone"))
            .stderr(logf);
        let mut proc = Proc::spawn("docker-registry", cmd);
        wait_http(port, "/v2/", Duration::from_secs(20), &mut proc);
        Registry {
            dir,
            port,
            log,
            proc,
        }
    }

    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        self.proc.kill();
    }

    /// Access-log lines of GET requests whose path contains `needle`.
    pub fn count_gets(&self, needle: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"GET ") && l.contains(needle))
            .count()
    }
}

/// One pushed blob.
#[derive(Clone, Debug)]
pub struct Blob {
    pub digest: String,
    pub media_type: String,
    pub data: Vec<u8>,
}

/// The image pushed: an OCI index over two Docker schema-2 manifests.
#[derive(Clone, Debug)]
pub struct PushedImage {
    pub repo: String,
    pub tag: String,
    pub index: Vec<u8>,
    pub index_digest: String,
    /// (platform arch, manifest bytes, digest)
    pub manifests: Vec<(String, Vec<u8>, String)>,
    pub blobs: Vec<Blob>,
}

impl PushedImage {
    /// Every manifest and blob of the image, the index first: (digest, bytes).
    pub fn contents(&self) -> Vec<(String, Vec<u8>)> {
        let mut all = vec![(self.index_digest.clone(), self.index.clone())];
        all.extend(
            self.manifests
                .iter()
                .map(|(_, m, d)| (d.clone(), m.clone())),
        );
        all.extend(
            self.blobs
                .iter()
                .map(|b| (b.digest.clone(), b.data.clone())),
        );
        all
    }

    /// `skopeo copy --all` of this image through `host` (its repository and
    /// tag) into `dest`, copied byte for byte (`what` names the copy in a
    /// failure).
    pub fn pulled_through(&self, host: &str, dest: &Path, what: &str) {
        let files = skopeo_copy_ok(host, &self.repo, &self.tag, dest, what);
        self.assert_copied(&files, what);
    }

    /// `files` (a `skopeo copy --all ... dir:` directory read with
    /// [`dir_contents`]) hold the image byte for byte: the index as
    /// `manifest.json`, each platform's manifest as `<hex>.manifest.json`,
    /// each blob as `<hex>`; `what` names the copy in a failure.
    pub fn assert_copied(&self, files: &BTreeMap<String, Vec<u8>>, what: &str) {
        assert!(
            files.get("manifest.json") == Some(&self.index),
            "{what}: manifest.json is not the index"
        );
        for (arch, m, d) in &self.manifests {
            let h = d.trim_start_matches("sha256:");
            assert!(
                files.get(&format!("{h}.manifest.json")) == Some(m),
                "{what}: the {arch} manifest {d} differs"
            );
        }
        for b in &self.blobs {
            let h = b.digest.trim_start_matches("sha256:");
            assert!(files.get(h) == Some(&b.data), "{what}: blob {}", b.digest);
        }
    }
}

/// `<base>/v2/<repo>/<path>?ns=<ns>`, as containerd asks a mirror.
pub fn ns_url(base: &str, repo: &str, path: &str, ns: &str) -> String {
    format!("{base}/v2/{repo}/{path}?ns={ns}")
}

/// `GET` [`ns_url`] of `blob` answers 200 with its bytes.
pub async fn assert_ns_blob(http: &reqwest::Client, base: &str, repo: &str, ns: &str, blob: &Blob) {
    let url = ns_url(base, repo, &format!("blobs/{}", blob.digest), ns);
    let r = super::send(http.get(&url)).await;
    assert_eq!(r.status, 200, "{url}");
    assert!(r.body == blob.data, "{url}: the bytes differ");
}

/// Push one blob to `repo` (monolithic upload); its digest.
pub async fn push_blob(client: &reqwest::Client, base: &str, repo: &str, data: &[u8]) -> String {
    let digest = sha256_digest(data);
    let r = client
        .post(format!("{base}/v2/{repo}/blobs/uploads/"))
        .send()
        .await
        .expect("start upload");
    assert_eq!(
        r.status().as_u16(),
        202,
        "start upload: {:?}",
        r.text().await
    );
    let loc = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .expect("upload location")
        .to_string();
    let loc = if loc.starts_with('/') {
        format!("{base}{loc}")
    } else {
        loc
    };
    let sep = if loc.contains('?') { '&' } else { '?' };
    let r = client
        .put(format!("{loc}{sep}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(data.to_vec())
        .send()
        .await
        .expect("finish upload");
    assert_eq!(
        r.status().as_u16(),
        201,
        "finish upload: {:?}",
        r.text().await
    );
    digest
}

/// PUT a manifest under `reference`.
pub async fn push_manifest(
    client: &reqwest::Client,
    base: &str,
    repo: &str,
    reference: &str,
    media_type: &str,
    body: &[u8],
) {
    let r = client
        .put(format!("{base}/v2/{repo}/manifests/{reference}"))
        .header("content-type", media_type)
        .body(body.to_vec())
        .send()
        .await
        .expect("put manifest");
    assert_eq!(
        r.status().as_u16(),
        201,
        "put manifest: {:?}",
        r.text().await
    );
}

/// Push a factory-shaped installer image to `base` under `repo:tag`.
/// `layer_sizes` per architecture (amd64, arm64); `seed` varies the content.
pub async fn push_factory_image(
    base: &str,
    repo: &str,
    tag: &str,
    layer_sizes: &[usize],
    seed: u64,
) -> PushedImage {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let mut blobs = Vec::new();
    let mut manifests = Vec::new();
    let mut entries = Vec::new();
    for (ai, arch) in ["amd64", "arm64"].iter().enumerate() {
        let mut layers = Vec::new();
        let mut diff_ids = Vec::new();
        for (li, size) in layer_sizes.iter().enumerate() {
            let data = random_bytes(*size, seed * 1000 + (ai as u64) * 100 + li as u64 + 1);
            let digest = push_blob(&client, base, repo, &data).await;
            diff_ids.push(digest.clone());
            layers.push(serde_json::json!({
                "mediaType": DOCKER_LAYER, "size": data.len(), "digest": digest
            }));
            blobs.push(Blob {
                digest,
                media_type: DOCKER_LAYER.into(),
                data,
            });
        }
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": arch, "os": "linux",
            "config": {"Entrypoint": ["/bin/installer"], "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "created": "2026-01-01T00:00:00Z"
        }))
        .expect("config json");
        let config_digest = push_blob(&client, base, repo, &config).await;
        blobs.push(Blob {
            digest: config_digest.clone(),
            media_type: DOCKER_CONFIG.into(),
            data: config.clone(),
        });
        // Pretty-printed on purpose: byte-for-byte serving must keep it.
        let manifest = serde_json::to_vec_pretty(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {"mediaType": DOCKER_CONFIG, "size": config.len(), "digest": config_digest},
            "layers": layers,
        }))
        .expect("manifest json");
        let mdigest = sha256_digest(&manifest);
        push_manifest(&client, base, repo, &mdigest, DOCKER_MANIFEST, &manifest).await;
        entries.push(serde_json::json!({
            "mediaType": DOCKER_MANIFEST, "size": manifest.len(), "digest": mdigest,
            "platform": {"architecture": arch, "os": "linux"}
        }));
        manifests.push((arch.to_string(), manifest, mdigest));
    }
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": INDEX_TYPE,
        "manifests": entries,
    }))
    .expect("index json");
    let index_digest = sha256_digest(&index);
    push_manifest(&client, base, repo, tag, INDEX_TYPE, &index).await;
    PushedImage {
        repo: repo.into(),
        tag: tag.into(),
        index,
        index_digest,
        manifests,
        blobs,
    }
}

/// `skopeo copy --all docker://<host>/<repo>:<tag> dir:<dest>` over plain HTTP.
pub fn skopeo_copy(host: &str, repo: &str, reference: &str, dest: &Path) -> std::process::Output {
    let sep = if reference.starts_with("sha256:") {
        '@'
    } else {
        ':'
    };
    Command::new(require_tool("skopeo"))
        .args([
            "copy",
            "--all",
            "--src-tls-verify=false",
            "--retry-times",
            "0",
        ])
        .arg(format!("docker://{host}/{repo}{sep}{reference}"))
        .arg(format!("dir:{}", dest.display()))
        .output()
        .expect("run skopeo (apt-get install -y skopeo)")
}

/// [`skopeo_copy`], asserted to succeed (`what` names the copy in the
/// message); the files it wrote ([`dir_contents`]).
pub fn skopeo_copy_ok(
    host: &str,
    repo: &str,
    reference: &str,
    dest: &Path,
    what: &str,
) -> BTreeMap<String, Vec<u8>> {
    let o = skopeo_copy(host, repo, reference, dest);
    assert!(
        o.status.success(),
        "{what}: skopeo copy {host}/{repo} {reference}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    dir_contents(dest)
}

/// Every file of a directory: name -> bytes (flat; skopeo's dir: is flat).
pub fn dir_contents(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("read dir") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        m.insert(name, std::fs::read(e.path()).expect("read file"));
    }
    m
}

/// Push a cosign signature of `image_digest` the classic way: a manifest
/// tagged `sha256-<hex>.sig` in `repo` whose one layer is the simple-signing
/// payload, with `signature` (DER, base64-encoded here) in its annotation.
/// `sign` gets the payload bytes.
pub async fn push_cosign_signature(
    base: &str,
    repo: &str,
    reference: &str,
    image_digest: &str,
    sign: impl Fn(&[u8]) -> Vec<u8>,
) -> String {
    use base64::Engine;
    let client = reqwest::Client::new();
    let payload = talos_gen::cosign::simple_signing_payload(reference, image_digest);
    let payload_digest = push_blob(&client, base, repo, payload.as_bytes()).await;
    let config = b"{}".to_vec();
    let config_digest = push_blob(&client, base, repo, &config).await;
    let sig = base64::engine::general_purpose::STANDARD.encode(sign(payload.as_bytes()));
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": config.len(), "digest": config_digest},
        "layers": [{
            "mediaType": talos_gen::cosign::SIMPLE_SIGNING_MEDIA_TYPE,
            "size": payload.len(),
            "digest": payload_digest,
            "annotations": {talos_gen::cosign::SIGNATURE_ANNOTATION: sig},
        }],
    }))
    .expect("signature manifest");
    let tag = talos_gen::cosign::signature_tag(image_digest);
    push_manifest(
        &client,
        base,
        repo,
        &tag,
        "application/vnd.oci.image.manifest.v1+json",
        &manifest,
    )
    .await;
    tag
}

/// The mirror job's options (as a library call) with `up` as the factory,
/// the installer registry and `ghcr.io`'s `--mirror-upstream`, quiet.
pub fn sync_options(up: &Registry, concurrency: usize) -> talos_gen::mirror::SyncOptions {
    talos_gen::mirror::SyncOptions {
        factory_url: up.url(),
        registry_url: Some(up.url()),
        mirror_upstreams: talos_gen::registry::MirrorTable::parse(&[format!(
            "ghcr.io={}",
            up.url()
        )])
        .unwrap(),
        concurrency,
        output: talos_gen::mirror::Output::Quiet,
        limits: Default::default(),
    }
}
