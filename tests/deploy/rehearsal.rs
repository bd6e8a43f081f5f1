//! Issue 21 item 2: the deployment as shipped, rehearsed whole on loopback.
//!
//! The serve Deployment, the mirror CronJob and the import Job are read out
//! of `mirror/kubernetes.yaml` and `mirror/kubernetes-import.yaml` (their
//! args, the ConfigMap they mount) and run as the manifests say: the binary
//! with exactly those flags (podman is not used here: `container_image`
//! already runs the image as the manifests do; this test needs several
//! processes and containerd on one loopback), every mount path a directory
//! of the test (the store PVC one directory for all three), every upstream
//! URL a loopback stand-in (nginx as the factory, with the factory's
//! registry behind it at `/v2/`; docker-registry for ghcr.io and
//! registry.k8s.io) and nothing else; only `--listen` is the test's
//! (127.0.0.1 and a free port, where the manifest says all interfaces).
//!
//! Then a containerd configured from `machineconfig --air-gap-mirror`
//! (its `RegistryMirrorConfig` / `RegistryTLSConfig` documents written as
//! Talos writes `hosts.toml`: with `skipFallback` the one endpoint is the
//! root `server` with its capabilities and CA, no `[host]` table, no
//! fallback; the CA file beside it as `<endpoint host>-ca.crt`) pulls the worker's whole pull list (`talos-gen
//! images`) online; `mirror export`, the import Job on a fresh volume, every
//! upstream stopped, the Deployment with `--offline` (as the README says)
//! and a fresh containerd pulls it all again; the disk image is read as CDI
//! would from the URL the Cozystack values name (`imageFactoryURL` +
//! `/image/<schematicID>/<version>/openstack-amd64.raw.xz`): its `.sha256`
//! as the DataVolume's checksum, then nbdkit's curl plugin + qemu-img.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_norway::Value;

use crate::support::containerd::Containerd;
use crate::support::registry::{PushedImage, Registry, push_factory_image};
use crate::support::{self, Curl, Nginx, NginxOpts, Proc, Service, curl, require_tool, sha256_hex};

fn manifest(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("mirror")
            .join(name),
    )
    .unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// One container of a manifest, as it runs: its args, where each volume is
/// mounted, and what each volume is.
struct Workload {
    args: Vec<String>,
    /// mountPath -> volume name.
    mounts: Vec<(String, String)>,
    /// volume name -> its source (`persistentVolumeClaim`, `secret`, `configMap`).
    volumes: BTreeMap<String, Value>,
}

fn workload(docs: &[Value], kind: &str) -> Workload {
    let d = docs
        .iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"));
    let pod = match kind {
        "Deployment" | "Job" => &d["spec"]["template"]["spec"],
        "CronJob" => &d["spec"]["jobTemplate"]["spec"]["template"]["spec"],
        _ => unreachable!(),
    };
    let c = &pod["containers"][0];
    Workload {
        args: c["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect(),
        mounts: c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["mountPath"].as_str().unwrap().to_string(),
                    m["name"].as_str().unwrap().to_string(),
                )
            })
            .collect(),
        volumes: pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| (v["name"].as_str().unwrap().to_string(), v.clone()))
            .collect(),
    }
}

/// Where the test keeps each volume: a PVC by claim name, a Secret or
/// ConfigMap by its name.
struct Volumes {
    root: PathBuf,
}

impl Volumes {
    fn dir_of(&self, source: &Value) -> PathBuf {
        let name = source["persistentVolumeClaim"]["claimName"]
            .as_str()
            .map(|c| format!("pvc-{c}"))
            .or_else(|| {
                source["secret"]["secretName"]
                    .as_str()
                    .map(|s| format!("secret-{s}"))
            })
            .or_else(|| {
                source["configMap"]["name"]
                    .as_str()
                    .map(|s| format!("configmap-{s}"))
            })
            .unwrap_or_else(|| panic!("a volume this test cannot stand in for: {source:?}"));
        let d = self.root.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}

impl Workload {
    /// The args as they run here: mount paths -> the volumes' directories,
    /// the manifest's upstream URLs -> `upstreams` (any other URL: a
    /// panic, nothing leaves loopback), `--listen` dropped (the harness
    /// gives 127.0.0.1 and a free port; the manifest's port is returned).
    fn as_run(
        &self,
        vols: &Volumes,
        upstreams: &[(&str, String)],
    ) -> (Vec<String>, Option<String>) {
        let mut listen = None;
        let mut out = Vec::new();
        for a in &self.args {
            if let Some(l) = a.strip_prefix("--listen=") {
                listen = Some(l.to_string());
                continue;
            }
            let mut a = a.clone();
            for (path, vol) in &self.mounts {
                if a.contains(path.as_str()) {
                    let dir = vols.dir_of(&self.volumes[vol]);
                    a = a.replace(path.as_str(), &dir.display().to_string());
                }
            }
            for (url, local) in upstreams {
                a = a.replace(url, local);
            }
            assert!(
                !a.contains("https://") && !a.contains("http://") || a.contains("127.0.0.1"),
                "{a}: an upstream this rehearsal has no stand-in for"
            );
            out.push(a);
        }
        (out, listen)
    }
}

fn talos_gen(args: &[String]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(args)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn ok(o: &std::process::Output, what: &str) -> String {
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(
        o.status.success(),
        "{what}: exit {:?}\n{out}{err}",
        o.status.code()
    );
    out.into_owned()
}

fn get(svc: &Service, ca: &Path, path: &str) -> Curl {
    curl(&[
        "--cacert",
        &ca.display().to_string(),
        &format!("{}{path}", svc.url()),
    ])
}

/// Talos' hosts.toml for each `RegistryMirrorConfig` of `config`, with the
/// `RegistryTLSConfig` CA of its endpoint written beside it
/// (`<endpoint host>-ca.crt`, as Talos names it); returns the hosts mirrored.
fn hosts_from_machineconfig(config: &str, dir: &Path) -> Vec<String> {
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(config)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect();
    let cas: BTreeMap<String, String> = docs
        .iter()
        .filter(|d| d["kind"] == "RegistryTLSConfig")
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_string(),
                d["ca"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut hosts = Vec::new();
    for d in docs.iter().filter(|d| d["kind"] == "RegistryMirrorConfig") {
        let registry = d["name"].as_str().unwrap();
        assert_eq!(d["skipFallback"], true, "{registry}: skipFallback");
        let endpoints = d["endpoints"].as_sequence().unwrap();
        assert_eq!(endpoints.len(), 1, "{registry}");
        let url = endpoints[0]["url"].as_str().unwrap();
        let host = url.split("://").nth(1).unwrap().split('/').next().unwrap();
        let ca = cas
            .get(host)
            .unwrap_or_else(|| panic!("no RegistryTLSConfig for {host}: {cas:?}"));
        let d = dir.join(registry);
        std::fs::create_dir_all(&d).unwrap();
        let ca_file = d.join(format!("{host}-ca.crt"));
        std::fs::write(&ca_file, ca).unwrap();
        // Talos (internal/pkg/containers/cri/containerd/hosts.go at
        // v1.13.0): with skipFallback the last endpoint becomes the root
        // entry (`server`, its capabilities and CA at the top level), so a
        // single mirror leaves no `[host]` table and no fallback at all.
        // Debian's containerd 1.6 refuses a hosts.toml without a `[host]`
        // tree ("invalid `host` tree"; Talos ships containerd 2), so the
        // same endpoint is repeated as the one `[host]`, with its CA: still
        // no path to the upstream registry.
        let entry = format!(
            "capabilities = [\"pull\", \"resolve\"]\nca = \"{}\"\n",
            ca_file.display()
        );
        std::fs::write(
            d.join("hosts.toml"),
            format!("server = \"{url}\"\n{entry}\n[host.\"{url}\"]\n{entry}"),
        )
        .unwrap();
        hosts.push(registry.to_string());
    }
    hosts
}

/// The worker's pull list as `talos-gen images` prints it.
fn pull_list(talos: &str, kubernetes: &str, schematic: &str) -> Vec<String> {
    let o = talos_gen(&[
        "images".into(),
        "--talos".into(),
        talos.into(),
        "--kubernetes".into(),
        kubernetes.into(),
        "--schematic".into(),
        schematic.into(),
    ]);
    ok(&o, "images").lines().map(str::to_string).collect()
}

/// CDI's reading of the disk image: the `.sha256` the DataVolume's
/// `checksum` carries, the whole body against it, then nbdkit's curl plugin
/// (readahead, retry) under qemu-img over NBD, trusting the CA as the
/// DataVolume's `certConfigMap` makes CDI do.
fn import_as_cdi(svc: &Service, ca: &Path, path: &str, want: &[u8]) {
    let sum = get(svc, ca, &format!("{path}.sha256"));
    assert_eq!(sum.status, 200, "{path}.sha256");
    let checksum = String::from_utf8_lossy(&sum.body)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        checksum,
        sha256_hex(want),
        "the checksum the DataVolume would carry"
    );
    let body = get(svc, ca, path);
    assert_eq!(
        (body.status, sha256_hex(&body.body)),
        (200, checksum.clone()),
        "{path}"
    );
    let nbdkit = require_tool("nbdkit");
    let qemu_img = require_tool("qemu-img");
    let sockdir = tempfile::tempdir().unwrap();
    let sock = sockdir.path().join("nbd.sock");
    let mut cmd = Command::new(nbdkit);
    cmd.args(["--exit-with-parent", "-f", "-U"])
        .arg(&sock)
        .args(["--filter=readahead", "--filter=retry", "curl"])
        .arg(format!("url={}{path}", svc.url()))
        .arg(format!("cainfo={}", ca.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _nbd = Proc::spawn("nbdkit", cmd);
    let t = Instant::now();
    while !sock.exists() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = Command::new(qemu_img)
        .args(["info", "--output=json"])
        .arg(format!("nbd+unix:///?socket={}", sock.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "qemu-img info: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let size = info["virtual-size"].as_u64().unwrap();
    assert_eq!(size, (want.len() as u64).div_ceil(512) * 512, "{info}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_deployment_serves_a_workers_whole_pull_list_online_and_offline() {
    for t in ["curl", "nginx", "docker-registry"] {
        require_tool(t);
    }
    let work = tempfile::tempdir().unwrap();
    let vols = Volumes {
        root: work.path().join("volumes"),
    };
    let docs = manifest("kubernetes.yaml");
    let serve = workload(&docs, "Deployment");
    let cron = workload(&docs, "CronJob");
    let import = workload(&manifest("kubernetes-import.yaml"), "Job");
    assert_eq!(&serve.args[..1], ["serve"]);
    assert_eq!(&cron.args[..2], ["mirror", "sync"]);
    assert_eq!(&import.args[..2], ["mirror", "import"]);

    // The ConfigMap, as the CronJob mounts it.
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["data"]["mirror.yaml"].is_string())
        .unwrap();
    let cm_dir = vols.dir_of(
        &serde_norway::from_str(&format!(
            "configMap: {{name: {}}}",
            cm["metadata"]["name"].as_str().unwrap()
        ))
        .unwrap(),
    );
    let config_text = cm["data"]["mirror.yaml"].as_str().unwrap();
    std::fs::write(cm_dir.join("mirror.yaml"), config_text).unwrap();
    let config = talos_gen::mirror::Config::parse(config_text, &cm_dir, "ConfigMap").unwrap();
    assert!(!config.workers.is_empty());

    // The TLS Secret: what `mirror cert` writes, as `kubectl create secret tls` keeps it.
    let tls = vols.dir_of(&serde_norway::from_str("secret: {secretName: talos-gen-tls}").unwrap());
    let certs = work.path().join("mirror-cert");
    ok(
        &talos_gen(&[
            "mirror".into(),
            "cert".into(),
            "--output-dir".into(),
            certs.display().to_string(),
            "--name".into(),
            "127.0.0.1".into(),
        ]),
        "mirror cert",
    );
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(certs.join(f), tls.join(f)).unwrap();
    }
    let ca = certs.join("ca.crt");

    // The stand-ins: every image of every worker pool, every disk image.
    let mut inst = Registry::start();
    let mut ghcr = Registry::start();
    let mut k8s = Registry::start();
    let mut pushed: BTreeMap<String, PushedImage> = BTreeMap::new();
    let mut disks: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let factory_root = work.path().join("factory");
    for (i, w) in config.workers.iter().enumerate() {
        for p in &w.pull.images {
            if pushed.contains_key(&p.reference) {
                continue;
            }
            let base = match p.host() {
                "factory.talos.dev" => inst.url(),
                "ghcr.io" => ghcr.url(),
                "registry.k8s.io" => k8s.url(),
                h => panic!("the pull list names {h}, which the rehearsal has no stand-in for"),
            };
            let repo = p.repository().split_once('/').unwrap().1.to_string();
            let img = push_factory_image(
                &base,
                &repo,
                p.tag(),
                &[64 << 10],
                100 + pushed.len() as u64,
            )
            .await;
            pushed.insert(p.reference.clone(), img);
        }
        let path = format!(
            "/image/{}/{}/{}",
            w.disk.schematic, w.disk.version, w.disk.asset
        );
        if let std::collections::btree_map::Entry::Vacant(e) = disks.entry(path) {
            let (_, xz) = support::xz_disk(work.path(), 1, 1 + i);
            let f = factory_root.join(e.key().trim_start_matches('/'));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, &xz).unwrap();
            e.insert(xz);
        }
    }
    // The factory: its files, its registry behind it at /v2/ (one host, as
    // factory.talos.dev is both).
    let mut factory = Nginx::start(
        &factory_root,
        NginxOpts {
            server_extra: format!("location ^~ /v2/ {{ proxy_pass {}; }}", inst.url()),
            ..Default::default()
        },
    );
    let upstreams = [
        ("https://factory.talos.dev", factory.url()),
        ("https://ghcr.io", ghcr.url()),
        ("https://registry.k8s.io", k8s.url()),
    ];

    // The CronJob: `mirror sync` as the manifest runs it.
    let (sync_args, _) = cron.as_run(&vols, &upstreams);
    let o = talos_gen(&sync_args);
    let sync_log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success(),
        "the CronJob's mirror sync: {sync_args:?}\n{sync_log}"
    );

    // The Deployment, online.
    let (serve_args, listen) = serve.as_run(&vols, &upstreams);
    let port: u16 = listen.unwrap().rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(port, 8443, "the Deployment's --listen port");
    let svc = Service::builder()
        .args(&serve_args[1..])
        .tls_ca(&ca)
        .start();

    // A worker as `machineconfig --air-gap-mirror` configures it.
    let w0 = &config.workers[0];
    let schematic = w0.schematic.id.clone();
    let talos = w0.pull.talos.to_string();
    let kubernetes = w0.pull.images[1].tag().trim_start_matches('v').to_string();
    // A worker's config with `svc` as its air-gap mirror (online, then offline).
    let air_gap_config = |svc: &Service| {
        talos_gen(&[
            "machineconfig".into(),
            "--cluster-name".into(),
            "rehearsal".into(),
            "--endpoint".into(),
            "https://10.0.0.1:6443".into(),
            "--talos-version".into(),
            talos.clone(),
            "--kubernetes-version".into(),
            kubernetes.clone(),
            "--schematic".into(),
            schematic.clone(),
            "--air-gap-mirror".into(),
            svc.url(),
            "--mirror-ca".into(),
            ca.display().to_string(),
        ])
    };
    let mc = air_gap_config(&svc);
    let mc = ok(&mc, "machineconfig --air-gap-mirror");
    let hosts_online = work.path().join("hosts-online");
    let mirrored = hosts_from_machineconfig(&mc, &hosts_online);
    let pulls = pull_list(&talos, &kubernetes, &schematic);
    for r in &pulls {
        let host = r.split('/').next().unwrap();
        assert!(
            mirrored.iter().any(|m| m == host),
            "{r}: {host} not mirrored by the config: {mirrored:?}"
        );
    }
    let cd_dir = tempfile::tempdir().unwrap();
    let containerd = Containerd::start(cd_dir.path());
    if let Some(cd) = &containerd {
        for r in &pulls {
            cd.fetch_all(&hosts_online, r);
            cd.assert_holds(r, &pushed[r]);
        }
    }
    let disk_path = format!(
        "/image/{}/{}/{}",
        w0.disk.schematic, w0.disk.version, w0.disk.asset
    );
    // The values' talos.imageFactoryURL is the service's URL.
    import_as_cdi(&svc, &ca, &disk_path, &disks[&disk_path]);
    let status = get(&svc, &ca, "/");
    assert_eq!(status.status, 200);
    let page = String::from_utf8_lossy(&status.body).into_owned();
    assert!(page.contains("mirror sync"), "the sync on the status page");
    let metrics = String::from_utf8_lossy(&get(&svc, &ca, "/metrics").body).into_owned();
    assert!(
        metrics.contains("talos_gen_mirror_last_run_ok 1"),
        "{metrics}"
    );
    drop(svc);

    // Across the gap: export, then the import Job on another site's volume.
    let bundle_dir = work.path().join("carried");
    std::fs::create_dir_all(&bundle_dir).unwrap();
    let store_dir = vols.dir_of(&serve.volumes["cache"]);
    let tar = bundle_dir.join("mirror.tar");
    ok(
        &talos_gen(&[
            "mirror".into(),
            "export".into(),
            "--cache-dir".into(),
            store_dir.display().to_string(),
            "--output".into(),
            tar.display().to_string(),
        ]),
        "mirror export",
    );
    let other = Volumes {
        root: work.path().join("volumes-offline"),
    };
    let bundle_vol = other.dir_of(&import.volumes["bundle"]);
    std::fs::rename(&tar, bundle_vol.join("mirror.tar")).unwrap();
    let (import_args, _) = import.as_run(&other, &upstreams);
    ok(&talos_gen(&import_args), "the import Job");

    // Every upstream gone; the Deployment with --offline on that volume.
    inst.stop();
    ghcr.stop();
    k8s.stop();
    factory.stop();
    // The Secret and the ConfigMap exist on the other site too.
    let other_tls = other.dir_of(&serve.volumes["tls"]);
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(tls.join(f), other_tls.join(f)).unwrap();
    }
    let (mut offline_args, _) = serve.as_run(&other, &upstreams);
    offline_args.push("--offline".into());
    let svc = Service::builder()
        .args(&offline_args[1..])
        .tls_ca(&ca)
        .start();
    let mc = air_gap_config(&svc);
    let hosts_offline = work.path().join("hosts-offline");
    hosts_from_machineconfig(&ok(&mc, "machineconfig offline"), &hosts_offline);
    let cd2_dir = tempfile::tempdir().unwrap();
    if let Some(cd) = Containerd::start(cd2_dir.path()) {
        // Every worker pool of the ConfigMap, not only the first.
        for w in &config.workers {
            let k = w.pull.images[1].tag().trim_start_matches('v').to_string();
            for r in pull_list(&talos, &k, &schematic) {
                cd.fetch_all(&hosts_offline, &r);
                cd.assert_holds(&r, &pushed[&r]);
            }
        }
    }
    import_as_cdi(&svc, &ca, &disk_path, &disks[&disk_path]);
    // The import is on the status page and in /metrics like a sync.
    let page = String::from_utf8_lossy(&get(&svc, &ca, "/").body).into_owned();
    assert!(page.contains("mirror import of"), "{page}");
    assert!(page.contains("mirror.tar"), "the bundle named");
    let metrics = String::from_utf8_lossy(&get(&svc, &ca, "/metrics").body).into_owned();
    assert!(
        metrics.contains("talos_gen_mirror_last_run_ok 1"),
        "{metrics}"
    );
    let log = svc.log_text();
    assert!(!log.contains("ERROR"), "{log}");
}
