//! The whole worker, air-gapped, with real parts: three docker-registry
//! upstreams (an internal installer registry that is not the factory, one
//! standing in for ghcr.io behind nginx, which adds an OCI 1.1 referrers
//! answer docker-registry 2.8 lacks, and one for registry.k8s.io) holding the
//! installer, kubelet and pause image of a `workers:` entry, each cosign-signed
//! with a key made here, plus one image signed with another key; nginx as the
//! factory (the disk image and its signing key). `mirror sync --cosign-key`
//! refuses the forged image and keeps the rest, `mirror export --config`
//! carries the worker, `mirror import` fills a fresh cache, every upstream
//! is stopped, and `serve --offline` with no `--mirror-upstream` answers the
//! `.sig` manifests (verified here with the key), `tags/list`, `referrers`
//! and the factory's key, and containerd pulls all three through
//! `hosts.toml` for factory.talos.dev, ghcr.io and registry.k8s.io.
//!
//! The online half: `serve` with `--registry-url` at the internal registry
//! answers `?ns=factory.talos.dev`, passes the upstream's tag list (its
//! pagination too) and referrers through, answers an empty index where the
//! upstream has no referrers API, and keeps answering both from the store
//! when the upstream is gone.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use crate::support::containerd::{Containerd, hosts_toml};
use crate::support::registry::*;
use crate::support::{Curl, Nginx, NginxOpts, Service, curl, require_tool, sha256_digest};
use rcgen::{KeyPair, PKCS_ECDSA_P256_SHA256, SigningKey};
use talos_gen::mirror::Item;

const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
const V: &str = "v1.13.6";
const SBOM_TYPE: &str = "application/vnd.example.sbom.v1";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// An image of the worker's pull list: where containerd asks for it, and
/// what was pushed.
struct Pulled {
    /// `ns` containerd sends (`factory.talos.dev`, `ghcr.io`, `registry.k8s.io`).
    host: String,
    repo: String,
    tag: String,
    image: PushedImage,
    sig_tag: String,
}

impl Pulled {
    fn reference(&self) -> String {
        format!("{}/{}:{}", self.host, self.repo, self.tag)
    }
}

struct Site {
    dir: tempfile::TempDir,
    key_pem: String,
    inst: Registry,
    ghcr: Registry,
    ghcr_front: Nginx,
    k8s: Registry,
    factory: Nginx,
    /// installer, kubelet, pause.
    pulls: Vec<Pulled>,
    /// The referrer of the kubelet (an SBOM artifact with `subject`) and
    /// the referrers index the ghcr.io front answers for it.
    sbom: (String, Vec<u8>),
    referrers: String,
}

/// Push an OCI artifact manifest whose `subject` is `image`; its digest and bytes.
async fn push_sbom(base: &str, repo: &str, image: &PushedImage) -> (String, Vec<u8>) {
    let client = reqwest::Client::new();
    let config = b"{}".to_vec();
    let config_digest = push_blob(&client, base, repo, &config).await;
    let sbom = br#"{"spdxVersion":"SPDX-2.3","name":"kubelet"}"#.to_vec();
    let sbom_digest = push_blob(&client, base, repo, &sbom).await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": SBOM_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": "application/spdx+json", "digest": sbom_digest, "size": sbom.len()}],
        "subject": {"mediaType": INDEX_TYPE, "digest": image.index_digest, "size": image.index.len()},
    }))
    .unwrap();
    let digest = sha256_digest(&manifest);
    push_manifest(&client, base, repo, &digest, OCI_MANIFEST, &manifest).await;
    (digest, manifest)
}

impl Site {
    async fn new() -> Site {
        require_tool("curl");
        require_tool("nginx");
        let dir = tempfile::tempdir().unwrap();
        let good = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let other = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let key_pem = good.public_key_pem();
        std::fs::write(dir.path().join("cosign.pub"), &key_pem).unwrap();

        // The worker's pull list, as mirror sync expands it.
        let worker =
            format!("workers:\n  - talos: {V}\n    kubernetes: v1.35\n    schematic: {S}\n");
        std::fs::write(dir.path().join("worker.yaml"), &worker).unwrap();
        std::fs::write(
            dir.path().join("mirror.yaml"),
            format!("{worker}extraImages: [ghcr.io/siderolabs/forged:v1]\n"),
        )
        .unwrap();
        let cfg = talos_gen::mirror::Config::parse(&worker, dir.path(), "cfg").unwrap();
        let refs: Vec<(String, String, String)> = cfg.workers[0]
            .oci
            .iter()
            .map(|i| match i {
                Item::Installer { repo, tag } => {
                    ("factory.talos.dev".to_string(), repo.clone(), tag.clone())
                }
                Item::Extra(x) => (x.host.clone(), x.repo.clone(), x.reference.clone()),
                Item::Image(_) | Item::Talosctl(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            refs.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
            ["factory.talos.dev", "ghcr.io", "registry.k8s.io"],
            "{refs:?}"
        );

        let inst = Registry::start();
        let ghcr = Registry::start();
        let k8s = Registry::start();
        let mut pulls = Vec::new();
        for (i, (host, repo, tag)) in refs.into_iter().enumerate() {
            let base = match host.as_str() {
                "factory.talos.dev" => inst.url(),
                "ghcr.io" => ghcr.url(),
                _ => k8s.url(),
            };
            let image = push_factory_image(&base, &repo, &tag, &[200_000], 70 + i as u64).await;
            let sig_tag = push_cosign_signature(
                &base,
                &repo,
                &format!("{host}/{repo}"),
                &image.index_digest,
                |p| good.sign(p).unwrap(),
            )
            .await;
            pulls.push(Pulled {
                host,
                repo,
                tag,
                image,
                sig_tag,
            });
        }
        let forged = push_factory_image(&ghcr.url(), "siderolabs/forged", "v1", &[4096], 79).await;
        push_cosign_signature(
            &ghcr.url(),
            "siderolabs/forged",
            "ghcr.io/siderolabs/forged",
            &forged.index_digest,
            |p| other.sign(p).unwrap(),
        )
        .await;
        let kubelet = &pulls[1];
        let sbom = push_sbom(&ghcr.url(), &kubelet.repo, &kubelet.image).await;
        let referrers = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [{
                "mediaType": OCI_MANIFEST, "digest": sbom.0, "size": sbom.1.len(),
                "artifactType": SBOM_TYPE,
            }],
        })
        .to_string();
        // ghcr.io: docker-registry behind nginx, which answers the
        // referrers API for the kubelet (docker-registry 2.8 has none).
        let empty = dir.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let ghcr_front = Nginx::start(
            &empty,
            NginxOpts {
                server_extra: format!(
                    "location = /v2/{}/referrers/{} {{ default_type {INDEX_TYPE}; return 200 '{referrers}'; }}\n    location ^~ /v2/ {{ proxy_pass {}; }}",
                    kubelet.repo,
                    kubelet.image.index_digest,
                    ghcr.url()
                ),
                ..Default::default()
            },
        );

        // The factory: the worker's disk image and the signing key.
        let root = dir.path().join("factory");
        let img = root.join(format!("image/{S}/{V}"));
        std::fs::create_dir_all(&img).unwrap();
        let (_, xz) = support::xz_disk(dir.path(), 1, 1);
        std::fs::write(img.join("openstack-amd64.raw.xz"), xz).unwrap();
        std::fs::create_dir_all(root.join("oci/cosign")).unwrap();
        std::fs::write(root.join("oci/cosign/signing-key.pub"), &key_pem).unwrap();
        let factory = Nginx::start(&root, NginxOpts::default());
        Site {
            dir,
            key_pem,
            inst,
            ghcr,
            ghcr_front,
            k8s,
            factory,
            pulls,
            sbom,
            referrers,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn talos_gen(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_talos-gen"))
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    }

    fn stop_upstreams(&mut self) {
        self.inst.stop();
        self.ghcr.stop();
        self.ghcr_front.stop();
        self.k8s.stop();
        self.factory.stop();
    }
}

fn get(svc: &Service, path: &str) -> Curl {
    curl(&[&format!("{}{path}", svc.url())])
}

fn json(c: &Curl) -> serde_json::Value {
    serde_json::from_slice(&c.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&c.body)))
}

fn tags(c: &Curl) -> Vec<String> {
    assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
    serde_json::from_value(json(c)["tags"].clone()).unwrap()
}

fn referrer_count(c: &Curl) -> usize {
    assert_eq!(c.status, 200, "{}", String::from_utf8_lossy(&c.body));
    assert_eq!(
        c.header("content-type").as_deref(),
        Some(INDEX_TYPE),
        "{}",
        c.headers
    );
    json(c)["manifests"].as_array().expect("manifests").len()
}

fn error_code(c: &Curl) -> String {
    json(c)["errors"][0]["code"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The `.sig` manifest of `p` as `svc` answers it, verified offline with
/// the key (payload blob read from `svc` too).
fn verify_signature(svc: &Service, p: &Pulled, key_pem: &str) {
    let ns = &p.host;
    let sig = get(
        svc,
        &format!("/v2/{}/manifests/{}?ns={ns}", p.repo, p.sig_tag),
    );
    assert_eq!(
        sig.status,
        200,
        "{}: {}",
        p.sig_tag,
        String::from_utf8_lossy(&sig.body)
    );
    let key = talos_gen::cosign::PublicKey::from_pem(key_pem, "cosign.pub").unwrap();
    talos_gen::cosign::verify_manifest(&sig.body, &p.image.index_digest, &[key], |d| {
        let b = get(svc, &format!("/v2/{}/blobs/{d}?ns={ns}", p.repo));
        if b.status == 200 {
            Ok(b.body)
        } else {
            Err(format!("payload {d}: {}", b.status))
        }
    })
    .unwrap_or_else(|e| panic!("{}: {e}", p.reference()));
}

#[tokio::test(flavor = "multi_thread")]
async fn online_registry_surface_passes_through_and_falls_back_to_the_store() {
    let mut site = Site::new().await;
    let cache = site.path("online-cache");
    // No --mirror-upstream for factory.talos.dev: the installer registry is
    // --registry-url, an internal one.
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(&cache)
        .args(["--factory-url", &site.factory.url()])
        .args(["--registry-url", &site.inst.url()])
        .args([
            "--mirror-upstream",
            &format!("ghcr.io={}", site.ghcr_front.url()),
        ])
        .start();
    let (installer, kubelet) = (&site.pulls[0], &site.pulls[1]);

    let m = get(
        &svc,
        &format!(
            "/v2/{}/manifests/{}?ns=factory.talos.dev",
            installer.repo, installer.tag
        ),
    );
    assert_eq!(m.status, 200, "{}", String::from_utf8_lossy(&m.body));
    assert_eq!(m.body, installer.image.index);
    verify_signature(&svc, installer, &site.key_pem);

    // The upstream's tag list, and its pagination with ns kept.
    let kt = format!("/v2/{}/tags/list?ns=ghcr.io", kubelet.repo);
    let mut want = vec![kubelet.sig_tag.clone(), kubelet.tag.clone()];
    want.sort();
    // Lexical, whatever order the upstream (docker-registry) lists them in.
    let all = tags(&get(&svc, &kt));
    assert_eq!(all, want);
    let first = get(
        &svc,
        &format!("/v2/{}/tags/list?n=1&ns=ghcr.io", kubelet.repo),
    );
    assert_eq!(tags(&first), want[..1]);
    let link = first.header("link").expect("a Link to the next page");
    let next = link
        .strip_prefix('<')
        .and_then(|l| l.split_once('>'))
        .map(|(u, rest)| {
            assert!(rest.contains("rel=\"next\""), "{link}");
            u.to_string()
        })
        .expect("Link: <...>");
    assert!(next.contains("ns=ghcr.io"), "{next}");
    assert_eq!(tags(&get(&svc, &next)), want[1..]);

    // Referrers: the upstream's index, filtered on request.
    let rp = format!(
        "/v2/{}/referrers/{}?ns=ghcr.io",
        kubelet.repo, kubelet.image.index_digest
    );
    let r = get(&svc, &rp);
    assert_eq!(referrer_count(&r), 1);
    assert_eq!(String::from_utf8_lossy(&r.body), site.referrers);
    assert_eq!(r.header("oci-filters-applied"), None);
    let f = get(
        &svc,
        &format!("{rp}&artifactType={}", SBOM_TYPE.replace('+', "%2B")),
    );
    assert_eq!(referrer_count(&f), 1);
    assert_eq!(
        f.header("oci-filters-applied").as_deref(),
        Some("artifactType")
    );
    let f = get(&svc, &format!("{rp}&artifactType=application/x-other"));
    assert_eq!(referrer_count(&f), 0);
    assert_eq!(
        f.header("oci-filters-applied").as_deref(),
        Some("artifactType")
    );
    // An upstream without the API (docker-registry): an empty index.
    let e = get(
        &svc,
        &format!(
            "/v2/{}/referrers/{}?ns=factory.talos.dev",
            installer.repo, installer.image.index_digest
        ),
    );
    assert_eq!(referrer_count(&e), 0);
    // A registry that is not configured stays refused online.
    let d = get(&svc, "/v2/library/nginx/tags/list?ns=docker.io");
    assert_eq!((d.status, error_code(&d)), (403, "DENIED".to_string()));

    // The upstream gone: the stored referrers index, and the last whole
    // tag list the upstream gave (the .sig tag included, though only
    // v1.35.6 has a stored mapping), stale.
    let km = get(
        &svc,
        &format!("/v2/{}/manifests/{}?ns=ghcr.io", kubelet.repo, kubelet.tag),
    );
    assert_eq!(km.status, 200);
    site.ghcr_front.stop();
    let r2 = get(&svc, &rp);
    assert_eq!(r2.status, 200, "{}", String::from_utf8_lossy(&r2.body));
    assert_eq!(r2.body, r.body, "the stored referrers index");
    let t = get(&svc, &kt);
    assert_eq!(tags(&t), want);
    assert_eq!(t.header("warning").as_deref(), Some("110 - \"stale\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_pulls_everything_offline_from_an_imported_mirror() {
    let mut site = Site::new().await;
    let work = tempfile::tempdir().unwrap();
    let containerd = Containerd::start(work.path());
    let (a, b) = (site.path("cache-a"), site.path("cache-b"));
    let (a_s, b_s) = (a.display().to_string(), b.display().to_string());

    // 1. sync: the worker with its signatures and referrers; the forged image refused.
    let o = site.talos_gen(&[
        "mirror",
        "sync",
        "--config",
        &site.path("mirror.yaml").display().to_string(),
        "--cache-dir",
        &a_s,
        "--factory-url",
        &site.factory.url(),
        "--registry-url",
        &site.inst.url(),
        "--mirror-upstream",
        &format!("ghcr.io={}", site.ghcr_front.url()),
        "--mirror-upstream",
        &format!("registry.k8s.io={}", site.k8s.url()),
        "--cosign-key",
        &site.path("cosign.pub").display().to_string(),
        "--concurrency",
        "4",
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(
        err.lines().any(
            |l| l.starts_with("FAILED image ghcr.io/siderolabs/forged:v1")
                && l.contains("does not verify")
        ),
        "{err}"
    );
    for p in &site.pulls {
        let name = if p.host == "factory.talos.dev" {
            // Named as `mirror plan` names it (issue 41).
            format!("ok     installer {}/{}:{}", p.host, p.repo, p.tag)
        } else {
            format!("ok     image {}", p.reference())
        };
        assert!(err.contains(&name), "{name} not in\n{err}");
    }
    assert!(
        site.ghcr_front.count(&format!(
            "GET /v2/{}/referrers/{}",
            site.pulls[1].repo, site.pulls[1].image.index_digest
        )) >= 1,
        "the sync never asked for the kubelet's referrers"
    );

    // 2. export what the worker needs; 3. import it into a fresh cache.
    let tar = site.path("talos-mirror.tar").display().to_string();
    let o = site.talos_gen(&[
        "mirror",
        "export",
        "--cache-dir",
        &a_s,
        "--config",
        &site.path("worker.yaml").display().to_string(),
        "--output",
        &tar,
    ]);
    assert!(
        o.status.success(),
        "export: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = site.talos_gen(&["mirror", "import", &tar, "--cache-dir", &b_s]);
    assert!(
        o.status.success(),
        "import: {}",
        String::from_utf8_lossy(&o.stderr)
    );

    // 4. every upstream stopped; serve --offline with no --mirror-upstream.
    site.stop_upstreams();
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(&b)
        .arg("--offline")
        .start();

    // The .sig manifests, verified with the key; tags/list; referrers.
    for p in &site.pulls {
        verify_signature(&svc, p, &site.key_pem);
        let t = tags(&get(
            &svc,
            &format!("/v2/{}/tags/list?ns={}", p.repo, p.host),
        ));
        let mut want = vec![p.sig_tag.clone(), p.tag.clone()];
        want.sort();
        assert_eq!(t, want, "{}", p.reference());
        let r = get(
            &svc,
            &format!(
                "/v2/{}/referrers/{}?ns={}",
                p.repo, p.image.index_digest, p.host
            ),
        );
        let want = if p.host == "ghcr.io" { 1 } else { 0 };
        assert_eq!(referrer_count(&r), want, "{}", p.reference());
    }
    let kubelet = &site.pulls[1];
    let rp = format!(
        "/v2/{}/referrers/{}?ns=ghcr.io",
        kubelet.repo, kubelet.image.index_digest
    );
    assert_eq!(
        String::from_utf8_lossy(&get(&svc, &rp).body),
        site.referrers
    );
    let f = get(&svc, &format!("{rp}&artifactType={SBOM_TYPE}"));
    assert_eq!(referrer_count(&f), 1);
    assert_eq!(
        f.header("oci-filters-applied").as_deref(),
        Some("artifactType")
    );
    // The referrer itself, and its blobs, came along.
    let m = get(
        &svc,
        &format!("/v2/{}/manifests/{}?ns=ghcr.io", kubelet.repo, site.sbom.0),
    );
    assert_eq!(m.status, 200);
    assert_eq!(m.body, site.sbom.1);
    for d in talos_gen::registry::layout::manifest_refs(&m.body)
        .unwrap()
        .blobs
    {
        let b = get(
            &svc,
            &format!("/v2/{}/blobs/{}?ns=ghcr.io", kubelet.repo, d.0),
        );
        assert_eq!(b.status, 200, "{}", d.0);
    }
    // The refused image is not there; a registry the store never held is unknown.
    let f = get(&svc, "/v2/siderolabs/forged/manifests/v1?ns=ghcr.io");
    assert_eq!(
        (f.status, error_code(&f)),
        (404, "MANIFEST_UNKNOWN".to_string())
    );
    let d = get(&svc, "/v2/library/nginx/manifests/latest?ns=docker.io");
    assert_eq!(
        (d.status, error_code(&d)),
        (404, "NAME_UNKNOWN".to_string())
    );
    let d = get(&svc, "/v2/siderolabs/none/tags/list?ns=ghcr.io");
    assert_eq!(
        (d.status, error_code(&d)),
        (404, "NAME_UNKNOWN".to_string())
    );
    // The factory's key.
    let k = get(&svc, "/oci/cosign/signing-key.pub");
    assert_eq!(k.status, 200);
    assert_eq!(String::from_utf8_lossy(&k.body), site.key_pem);

    // 5. containerd, configured as a Talos worker, pulls all three.
    let Some(cd) = containerd else {
        return;
    };
    let hosts = work.path().join("hosts");
    for h in ["factory.talos.dev", "ghcr.io", "registry.k8s.io"] {
        hosts_toml(&hosts, h, &svc.url());
    }
    for p in &site.pulls {
        let reference = p.reference();
        cd.fetch_all(&hosts, &reference);
        cd.assert_holds(&reference, &p.image);
    }
    let log = svc.log_text();
    assert!(!log.contains("ERROR"), "{log}");
}
