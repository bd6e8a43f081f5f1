//! `serve --tls-cert/--tls-key` with real clients: `talos-gen mirror cert`
//! writes the CA and the server pair; curl (`--cacert`), skopeo
//! (`--src-cert-dir`) and containerd's `ctr` (`ca = ...` in hosts.toml)
//! pull through the HTTPS service from nginx (the factory) and
//! docker-registry; a renewed pair renamed over the served files is used
//! for new connections without a restart.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::registry::{Registry, dir_contents, push_factory_image};
use crate::support::{Nginx, NginxOpts, Service, random_bytes, require_tool, run, sha256_hex};

const V: &str = "v1.13.6";
const SCHEMATIC: &str = "ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515";

/// curl's exit code and body for `url` trusting `ca` (none: the system roots).
fn curl_tls(url: &str, ca: Option<&Path>) -> (i32, Vec<u8>) {
    let mut c = Command::new(require_tool("curl"));
    c.args(["-sS", "--fail", "--max-time", "30"]);
    if let Some(ca) = ca {
        c.arg("--cacert").arg(ca);
    }
    let o = c.arg(url).output().unwrap();
    (o.status.code().unwrap_or(-1), o.stdout)
}

#[tokio::test(flavor = "multi_thread")]
async fn curl_skopeo_and_ctr_pull_over_tls_and_a_renewed_pair_is_picked_up() {
    require_tool("skopeo");
    require_tool("docker-registry");
    let work = tempfile::tempdir().unwrap();
    let tls = work.path().join("tls");
    support::mirror_cert(&tls);
    // Issued again into the same directory: refused, nothing replaced.
    let before = std::fs::read(tls.join("tls.crt")).unwrap();
    let o = run(
        &[
            "mirror",
            "cert",
            "--output-dir",
            &tls.display().to_string(),
            "--name",
            "x.example",
        ],
        None,
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(std::fs::read(tls.join("tls.crt")).unwrap(), before);

    // The factory (nginx) with one artifact, and a registry.
    let root = work.path().join("root");
    let d = root.join(format!("image/{SCHEMATIC}/{V}"));
    std::fs::create_dir_all(&d).unwrap();
    let iso = random_bytes((1 << 20) + 77, 3);
    std::fs::write(d.join("metal-amd64.iso"), &iso).unwrap();
    let nginx = Nginx::start(&root, NginxOpts::default());
    let reg = Registry::start();
    let installer_repo = format!("installer/{SCHEMATIC}");
    let installer = push_factory_image(&reg.url(), &installer_repo, V, &[2 << 20], 21).await;
    let kubelet =
        push_factory_image(&reg.url(), "siderolabs/kubelet", "v1.35.6", &[1 << 20], 22).await;

    let svc = Service::builder()
        .tls(&tls)
        .arg("--cache-dir")
        .arg(work.path().join("cache"))
        .args(["--factory-url", &nginx.url()])
        .args(["--registry-url", &reg.url()])
        .args(["--mirror-upstream", &format!("ghcr.io={}", reg.url())])
        .start();
    assert!(svc.url().starts_with("https://"));
    let ca = tls.join("ca.crt");

    // curl: the artifact over HTTPS, byte for byte; not without the CA.
    let url = format!("{}/image/{SCHEMATIC}/{V}/metal-amd64.iso", svc.url());
    let (code, body) = curl_tls(&url, Some(&ca));
    assert_eq!(code, 0);
    assert_eq!(sha256_hex(&body), sha256_hex(&iso));
    let (code, _) = curl_tls(&url, None);
    assert_eq!(code, 60, "curl without the CA must fail verification");
    // Plain HTTP on the TLS port is no answer.
    assert_eq!(support::http_status(svc.port, "/healthz"), None);

    // skopeo: the installer, every platform, verified with the CA in a cert dir.
    let certs = work.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::copy(&ca, certs.join("ca.crt")).unwrap();
    let dest = work.path().join("skopeo");
    let o = Command::new("skopeo")
        .args(["copy", "--all", "--retry-times", "0", "--src-cert-dir"])
        .arg(&certs)
        .arg(format!("docker://{}/{installer_repo}:{V}", svc.host()))
        .arg(format!("dir:{}", dest.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "skopeo: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = dir_contents(&dest);
    for b in &installer.blobs {
        let name = b.digest.trim_start_matches("sha256:");
        assert_eq!(got.get(name), Some(&b.data), "blob {name}");
    }

    // containerd: ghcr.io through the HTTPS mirror, hosts.toml naming the CA.
    let cd_dir = work.path().join("containerd");
    std::fs::create_dir_all(&cd_dir).unwrap();
    if let Some(cd) = support::containerd::Containerd::start(&cd_dir) {
        let hosts = work.path().join("hosts");
        support::containerd::hosts_toml_with(
            &hosts,
            "ghcr.io",
            &svc.url(),
            &format!("  ca = \"{}\"\n", ca.display()),
        );
        let o = cd.ctr(&[
            "content",
            "fetch",
            "--all-platforms",
            "--hosts-dir",
            &hosts.display().to_string(),
            "ghcr.io/siderolabs/kubelet:v1.35.6",
        ]);
        assert!(
            o.status.success(),
            "ctr over TLS: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        for b in &kubelet.blobs {
            let o = cd.ctr(&["content", "get", &b.digest]);
            assert!(
                o.stdout == b.data,
                "{} differs in containerd's store",
                b.digest
            );
        }
    }

    // Renewal: a pair from another CA renamed over the served files (as a
    // Secret update swaps them); new connections get it, no restart.
    let tls2 = work.path().join("tls2");
    support::mirror_cert(&tls2);
    let pid = svc.pid();
    let t0 = Instant::now();
    std::fs::rename(tls2.join("tls.key"), tls.join("tls.key")).unwrap();
    std::fs::rename(tls2.join("tls.crt"), tls.join("tls.crt")).unwrap();
    let health = format!("{}/healthz", svc.url());
    while curl_tls(&health, Some(&tls2.join("ca.crt"))).0 != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the renewed certificate was not picked up: {}",
            svc.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("renewed pair served after {:?}", t0.elapsed());
    assert_eq!(
        curl_tls(&health, Some(&ca)).0,
        60,
        "the old CA no longer verifies it"
    );
    assert_eq!(svc.pid(), pid);
    assert!(
        svc.log_text().contains("tls certificate reloaded"),
        "{}",
        svc.log_text()
    );

    // A broken pair (a key of another certificate) keeps the one in use.
    let tls3 = work.path().join("tls3");
    support::mirror_cert(&tls3);
    std::fs::rename(tls3.join("tls.key"), tls.join("tls.key")).unwrap();
    let t0 = Instant::now();
    while !svc.log_text().contains("do not load") {
        assert!(t0.elapsed() < Duration::from_secs(10), "{}", svc.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(curl_tls(&health, Some(&tls2.join("ca.crt"))).0, 0);
}

#[test]
fn bad_tls_flags_are_one_line_and_exit_2() {
    let work = tempfile::tempdir().unwrap();
    let tls = work.path().join("tls");
    support::mirror_cert(&tls);
    let cache = work.path().join("cache").display().to_string();
    let crt = tls.join("tls.crt").display().to_string();
    let cakey = tls.join("ca.key").display().to_string();
    // The CA's key does not go with the server certificate.
    let o = run(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--cache-dir",
            &cache,
            "--tls-cert",
            &crt,
            "--tls-key",
            &cakey,
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--tls-key") && err.contains("does not go with"),
        "{err}"
    );
    // One without the other: clap says so.
    let o = run(&["serve", "--cache-dir", &cache, "--tls-cert", &crt], None);
    assert_eq!(o.status.code(), Some(2));
    // --name that is no host: exit 2 naming it.
    let o = run(
        &[
            "mirror",
            "cert",
            "--output-dir",
            &work.path().join("x").display().to_string(),
            "--name",
            "a b",
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\"a b\""));
}

/// Issue 20 item 6: the TLS files are read like every other input. At
/// start, a FIFO as `--tls-key` (it used to hang `serve` for ever), a
/// device and a file over 1 MiB are exit 2 naming the file. While serving,
/// a certificate swapped for a link to `/dev/zero` (it used to be read
/// without end, 1.9 GB, and wedge the reload and SIGTERM) keeps the old
/// pair, logs one line, and SIGTERM still stops the service.
#[test]
fn tls_files_are_regular_bounded_and_never_block() {
    let work = tempfile::tempdir().unwrap();
    let tls = work.path().join("tls");
    support::mirror_cert(&tls);
    let cache = work.path().join("cache").display().to_string();
    let crt = tls.join("tls.crt").display().to_string();
    let key = tls.join("tls.key").display().to_string();
    let fifo = work.path().join("key.fifo");
    crate::support::mkfifo(&fifo);
    let big = work.path().join("big.crt");
    std::fs::write(&big, vec![b'A'; (1 << 20) + 1]).unwrap();
    let fifo_s = fifo.display().to_string();
    let big_s = big.display().to_string();
    for (flag, cert_arg, key_arg, named, why) in [
        (
            "--tls-key",
            crt.as_str(),
            fifo_s.as_str(),
            fifo_s.as_str(),
            "not a regular file",
        ),
        (
            "--tls-cert",
            "/dev/zero",
            key.as_str(),
            "/dev/zero",
            "not a regular file",
        ),
        (
            "--tls-cert",
            big_s.as_str(),
            key.as_str(),
            big_s.as_str(),
            "larger than",
        ),
    ] {
        let errf = work.path().join("serve.err");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--cache-dir", &cache])
            .args(["--tls-cert", cert_arg, "--tls-key", key_arg])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&errf).unwrap());
        let mut p = support::Proc::spawn("talos-gen serve", cmd);
        let status = p.wait_exit(Duration::from_secs(30));
        let err = std::fs::read_to_string(&errf).unwrap_or_default();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(2),
            "{flag} {named}: exit 2 at once: {err}"
        );
        assert!(
            err.contains(flag) && err.contains(named) && err.contains(why),
            "{flag} {named}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }

    // While serving: the certificate becomes a link to /dev/zero.
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(&cache)
        .tls(&tls)
        .start();
    let ca = tls.join("ca.crt");
    let health = format!("{}/healthz", svc.url());
    assert_eq!(curl_tls(&health, Some(&ca)).0, 0);
    let good = work.path().join("good.crt");
    std::fs::copy(tls.join("tls.crt"), &good).unwrap();
    let link = tls.join("zero.link");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    std::fs::rename(&link, tls.join("tls.crt")).unwrap();
    let start = Instant::now();
    let said = |svc: &Service| {
        svc.log_text()
            .lines()
            .filter(|l| l.contains("do not load"))
            .count()
    };
    while said(&svc) == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the bad reload is logged: {}",
            svc.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = svc.log_text();
    let line = log.lines().find(|l| l.contains("do not load")).unwrap();
    assert!(line.contains("not a regular file"), "{line}");
    assert_eq!(
        curl_tls(&health, Some(&ca)).0,
        0,
        "the old pair stays in use"
    );
    // The reload task is not wedged: the good pair put back is reloaded,
    // and the bad one was said once.
    std::fs::copy(&good, tls.join("back.crt")).unwrap();
    std::fs::rename(tls.join("back.crt"), tls.join("tls.crt")).unwrap();
    while !svc.log_text().contains("tls certificate reloaded") {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the good pair is reloaded: {}",
            svc.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(said(&svc), 1, "one line: {}", svc.log_text());
    assert_eq!(
        curl_tls(&health, Some(&ca)).0,
        0,
        "the old pair stays in use"
    );
    let rss = support::rss_kib(svc.pid());
    assert!(
        rss < 200 * 1024,
        "RSS {rss} KiB: nothing read from /dev/zero"
    );
    assert_eq!(
        svc.terminate(Duration::from_secs(30)),
        Some(0),
        "SIGTERM stops it"
    );
}

/// An upstream behind a private CA (nginx serving the factory's tree over
/// TLS with a pair from `mirror cert`): trusted where `SSL_CERT_FILE`
/// names a bundle holding the CA (the system's roots and that variable,
/// as for the bucket), refused otherwise with an answer that says why in
/// one line, the bytes never served.
#[test]
fn an_upstream_behind_a_private_ca_is_trusted_through_ssl_cert_file() {
    let f = support::factory::Factory::new(2, 0, &[support::factory::A], None);
    let tls = f.dir.path().join("tls");
    support::mirror_cert(&tls);
    let port = support::free_port();
    let _front = support::Nginx::start(
        &f.root(),
        support::NginxOpts {
            http_extra: format!(
                "server {{ listen 127.0.0.1:{port} ssl; root {root}; \
                 ssl_certificate {crt}; ssl_certificate_key {key}; }}",
                root = f.root().display(),
                crt = tls.join("tls.crt").display(),
                key = tls.join("tls.key").display(),
            ),
            ..Default::default()
        },
    );
    let upstream = format!("https://127.0.0.1:{port}");
    let path = support::factory::image_path(support::factory::A);
    let serve = |name: &str, ca: Option<&Path>| {
        let cache = f.dir.path().join(name);
        std::fs::create_dir_all(&cache).unwrap();
        let mut b = support::Service::builder()
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--factory-url", &upstream]);
        if let Some(ca) = ca {
            b = b.env("SSL_CERT_FILE", &ca.display().to_string());
        }
        b.start()
    };

    let trusted = serve("trusted", Some(&tls.join("ca.crt")));
    let r = support::curl(&[&format!("{}{path}", trusted.url())]);
    assert_eq!((r.exit, r.status), (0, 200), "{}", trusted.log_text());
    assert!(
        r.body == f.xz,
        "the artifact through an upstream the CA vouches for"
    );

    let untrusted = serve("untrusted", None);
    let r = support::curl(&[&format!("{}{path}", untrusted.url())]);
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert!(r.status >= 500, "{} {body}", r.status);
    assert!(r.body != f.xz);
    assert!(
        body.to_lowercase().contains("certificate"),
        "the answer says why: {body}"
    );
    assert_eq!(body.trim().lines().count(), 1, "{body}");
    eprintln!("untrusted upstream: {} {}", r.status, body.trim());
}
