//! The Dockerfile's image, built and run here with podman as the manifests in
//! mirror/ run it. No base image can be pulled, so the test makes both of
//! the Dockerfile's inputs locally (`--pull=never`):
//! - `RUNTIME_IMAGE`: an image from scratch holding what distroless cc holds
//!   for this binary: the shared libraries `ldd` names, the CA certificates,
//!   a passwd/group entry for 65532;
//! - `BINARY_FROM`: an image from scratch holding `/out/talos-gen` (the
//!   binary this test build made on the host, see `image_binary`) and
//!   `/out/var/cache/talos-gen`, so the build stage is skipped.
//!
//! Then the container runs as UID 65532 with a read-only root filesystem,
//! no capabilities, the store on a volume (a host directory), listening on
//! 0.0.0.0:8080 published on a loopback port (`-p 127.0.0.1:PORT:8080`,
//! slirp4netns: the host side is loopback only, and the service is
//! given no reachable upstream): `/healthz`, `/readyz`, `POST /schematics`
//! then `GET /schematics/<id>`, SIGTERM (`podman stop`) exits 0 well
//! before the kill timeout; a second container on the same volume, offline,
//! serves the stored schematic again.
//!
//! Sandbox notes: podman here refuses the default ulimits, hence
//! `--ulimit nofile=1024:1024 --ulimit nproc=4096:4096` on build and run.

use crate::support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

const ULIMITS: [&str; 4] = [
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=4096:4096",
];
const UID: u32 = 65532;

/// Images and containers this test made, removed on drop.
struct Podman {
    bin: PathBuf,
    tag: String,
    images: Vec<String>,
    containers: Vec<String>,
}

impl Podman {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .output()
            .expect("running podman")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "podman {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `podman build` of `containerfile` in `context` as `localhost/<name>:<tag>`.
    fn build(&mut self, name: &str, containerfile: &Path, context: &Path, args: &[&str]) -> String {
        let image = format!("localhost/{name}:{}", self.tag);
        let mut a = vec!["build", "--pull=never", "--quiet"];
        a.extend(ULIMITS);
        a.extend(args);
        let cf = containerfile.to_str().unwrap();
        let ctx = context.to_str().unwrap();
        a.extend(["-f", cf, "-t", &image, ctx]);
        self.ok(&a);
        self.images.push(image.clone());
        image
    }

    /// `podman run -d` as the manifests run the image; the container's name.
    fn start(&mut self, image: &str, port: u16, cache: &Path, args: &[&str]) -> String {
        let name = format!("talos-gen-test-{}-{}", self.tag, self.containers.len());
        let publish = format!("127.0.0.1:{port}:8080");
        let volume = format!("{}:/var/cache/talos-gen", cache.display());
        let mut a = vec!["run", "-d", "--pull=never", "--name", &name];
        a.extend(ULIMITS);
        a.extend([
            "--user",
            "65532:65532",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--network",
            "slirp4netns:port_handler=rootlesskit",
            "-p",
            &publish,
            "-v",
            &volume,
            // nothing upstream is reachable from inside (and none is needed)
            "-e",
            "TALOS_GEN_FACTORY_URL=http://127.0.0.1:9",
            image,
        ]);
        a.extend(args);
        self.ok(&a);
        self.containers.push(name.clone());
        name
    }

    fn logs(&self, name: &str) -> String {
        let out = self.run(&["logs", name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// Wait for `/healthz` 200 on the published port (or panic with the logs).
    fn wait_healthy(&self, name: &str, port: u16) {
        let start = Instant::now();
        while support::http_status(port, "/healthz") != Some(200) {
            let running = self.run(&["inspect", "-f", "{{.State.Running}}", name]);
            if String::from_utf8_lossy(&running.stdout).trim() == "false"
                || start.elapsed() > Duration::from_secs(30)
            {
                panic!("{name} not healthy on {port}:\n{}", self.logs(name));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `podman stop -t 30` (SIGTERM, the image's STOPSIGNAL); the exit code
    /// and how long it took.
    fn stop(&self, name: &str) -> (i64, Duration) {
        let t = Instant::now();
        self.ok(&["stop", "-t", "30", name]);
        let took = t.elapsed();
        let code = self.ok(&["inspect", "-f", "{{.State.ExitCode}}", name]);
        (code.parse().unwrap(), took)
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = self.run(&["rm", "-f", "-v", c]);
        }
        for i in self.images.iter().rev() {
            let _ = self.run(&["rmi", "-f", i]);
        }
    }
}

/// The binary the image carries: the one this test build made
/// (`CARGO_BIN_EXE_talos-gen`), or `TALOS_GEN_IMAGE_BINARY` when set (a
/// release build, say). The Dockerfile's build stage (`cargo build
/// --release`) is skipped either way (`BINARY_FROM`); what this test
/// checks is the image's runtime stage and how the manifests run it (user,
/// read-only root, volume, probes, SIGTERM), which the optimization level
/// does not change. A release build here cost 7 min 50 s of a cold
/// 20 min `.ci/run` on 2 cores, for no assertion it could change.
fn image_binary() -> PathBuf {
    match std::env::var_os("TALOS_GEN_IMAGE_BINARY") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_BIN_EXE_talos-gen")),
    }
}

/// The shared libraries `ldd` lists for `bin`, with the dynamic loader.
fn shared_libraries(bin: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(bin).output().expect("running ldd");
    assert!(out.status.success(), "ldd {}", bin.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)"; vdso has no file
            let path = l.split_whitespace().find(|w| w.starts_with('/'))?;
            Some(PathBuf::from(path))
        })
        .collect()
}

/// Copy `src` to `root` + `src`'s absolute path (following links).
fn copy_into(root: &Path, src: &Path) {
    let dst = root.join(src.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(src, &dst).unwrap_or_else(|e| panic!("copying {}: {e}", src.display()));
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).expect("chown (the test runs as root)");
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(files(&p));
        } else {
            v.push(p);
        }
    }
    v
}

fn curl(args: &[&str]) -> (u16, Vec<u8>) {
    let out = Command::new(support::require_tool("curl"))
        .args(["-sS", "--max-time", "20", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("running curl");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut body = out.stdout;
    let nl = body.iter().rposition(|&b| b == b'\n').unwrap();
    let code = std::str::from_utf8(&body[nl + 1..])
        .unwrap()
        .parse()
        .unwrap();
    body.truncate(nl);
    (code, body)
}

#[test]
fn image_builds_and_runs_as_the_manifests_run_it() {
    let Some(podman) = support::optional_tool("podman", "builds and runs the image") else {
        return;
    };
    if Command::new("id").arg("-u").output().unwrap().stdout != b"0\n" {
        // rootless podman needs subuid ranges and its own setup; CI is root.
        if std::env::var("TALOS_GEN_REQUIRE_REFERENCE").as_deref() == Ok("1") {
            panic!("container_image needs root (rootful podman)");
        }
        support::skip("container_image needs root (rootful podman)");
        return;
    }
    let t0 = Instant::now();
    let bin = image_binary();
    let t_bin = t0.elapsed();
    let dir = tempfile::tempdir().unwrap();
    let mut p = Podman {
        bin: podman,
        tag: format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ),
        images: Vec::new(),
        containers: Vec::new(),
    };

    // RUNTIME_IMAGE: libraries, CA certificates, the 65532 user; no shell.
    let rt = dir.path().join("runtime");
    let rootfs = rt.join("rootfs");
    for lib in shared_libraries(&bin) {
        copy_into(&rootfs, &lib);
    }
    copy_into(&rootfs, Path::new("/etc/ssl/certs/ca-certificates.crt"));
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").unwrap();
    std::fs::write(rt.join("Containerfile"), "FROM scratch\nCOPY rootfs/ /\n").unwrap();
    let runtime = p.build(
        "talos-gen-test-runtime",
        &rt.join("Containerfile"),
        &rt,
        &[],
    );

    // BINARY_FROM: the host-built binary where the build stage leaves it.
    let bi = dir.path().join("binary");
    std::fs::create_dir_all(bi.join("out/var/cache/talos-gen")).unwrap();
    std::fs::copy(&bin, bi.join("out/talos-gen")).unwrap();
    std::fs::write(bi.join("Containerfile"), "FROM scratch\nCOPY out/ /out/\n").unwrap();
    let binary = p.build("talos-gen-test-binary", &bi.join("Containerfile"), &bi, &[]);

    // The project's Dockerfile, with an empty context: the build stage (the
    // only one that reads the context) is skipped.
    let ctx = dir.path().join("context");
    std::fs::create_dir_all(&ctx).unwrap();
    let dockerfile = Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile");
    let rt_arg = format!("RUNTIME_IMAGE={runtime}");
    let bin_arg = format!("BINARY_FROM={binary}");
    let t = Instant::now();
    let image = p.build(
        "talos-gen-test",
        &dockerfile,
        &ctx,
        &["--build-arg", &rt_arg, "--build-arg", &bin_arg],
    );
    let t_build = t.elapsed();
    let user = p.ok(&["image", "inspect", "-f", "{{.Config.User}}", &image]);
    assert_eq!(user, "65532:65532");
    let entry = p.ok(&["image", "inspect", "-f", "{{.Config.Entrypoint}}", &image]);
    assert_eq!(entry, "[/usr/local/bin/talos-gen]");
    let stop_signal = p.ok(&["image", "inspect", "-f", "{{.Config.StopSignal}}", &image]);
    assert_eq!(stop_signal, "SIGTERM");

    // The store on a volume owned by the image's user, as fsGroup makes it.
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    chown(&cache, UID);

    // First run: the image's own defaults (CMD serve, ENV listen 0.0.0.0:8080).
    let port = support::free_port();
    let t = Instant::now();
    let c1 = p.start(&image, port, &cache, &[]);
    p.wait_healthy(&c1, port);
    let t_up = t.elapsed();
    let ro = p.ok(&["inspect", "-f", "{{.HostConfig.ReadonlyRootfs}}", &c1]);
    assert_eq!(ro, "true");
    let url = format!("http://127.0.0.1:{port}");
    assert_eq!(curl(&[&format!("{url}/readyz")]).0, 200);

    let schematic = "customization:\n  systemExtensions:\n    officialExtensions:\n      - siderolabs/qemu-guest-agent\n";
    let (code, body) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/yaml",
        "--data-binary",
        schematic,
        &format!("{url}/schematics"),
    ]);
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let created: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let (code, stored) = curl(&[&format!("{url}/schematics/{id}")]);
    assert_eq!(code, 200);
    assert_eq!(hex::encode(Sha256::digest(&stored)), id);

    // What the service wrote is on the volume, as the container's user.
    let written = files(&cache);
    assert!(!written.is_empty(), "nothing stored on the volume");
    for f in &written {
        assert_eq!(std::fs::metadata(f).unwrap().uid(), UID, "{}", f.display());
    }

    let (code, took) = p.stop(&c1);
    let logs = p.logs(&c1);
    assert_eq!(code, 0, "exit code after SIGTERM:\n{logs}");
    assert!(
        took < Duration::from_secs(15),
        "stop took {took:?}:\n{logs}"
    );
    let t_stop = took;

    // Second run on the same volume with the manifest's args, offline: the
    // schematic is served from the store.
    let port2 = support::free_port();
    let c2 = p.start(
        &image,
        port2,
        &cache,
        &[
            "serve",
            "--listen=0.0.0.0:8080",
            "--cache-dir=/var/cache/talos-gen",
            "--offline",
        ],
    );
    p.wait_healthy(&c2, port2);
    let (code, again) = curl(&[&format!("http://127.0.0.1:{port2}/schematics/{id}")]);
    assert_eq!(code, 200);
    assert_eq!(again, stored);
    let (code, _) = p.stop(&c2);
    assert_eq!(code, 0, "{}", p.logs(&c2));

    eprintln!(
        "container_image: binary {t_bin:?}, image build {t_build:?}, up {t_up:?}, stop {t_stop:?}, whole {:?}",
        t0.elapsed()
    );
}
