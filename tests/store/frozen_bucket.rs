//! A frozen bucket (a real Garage node stopped with SIGSTOP: connections
//! accepted, nothing answered) under `serve --store s3://...`: the probes,
//! `/metrics` and the status page keep answering at once, `/readyz` turns
//! 503, an object in the local tier is served whole (an artifact; an OCI
//! image pulled once, by skopeo and containerd; factory documents and
//! schematics), one only in the bucket fails in bounded time with 503
//! (never fetched again from the upstream), and serving resumes within
//! seconds of SIGCONT, no restart.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support;
use crate::support::containerd::{Containerd, hosts_toml};
use crate::support::factory::{A, A2, Factory, S, image_path};
use crate::support::garage::Garage;
use crate::support::registry::{Registry, push_factory_image, skopeo_copy};
use crate::support::{Service, curl, sha256_hex};

const PREFIX: &str = "frozen";

fn replica(f: &Factory, g: &Garage, name: &str, extra: &[&str]) -> (Service, PathBuf) {
    let spool = f.dir.path().join(format!("spool-{name}"));
    std::fs::create_dir_all(&spool).unwrap();
    let svc = Service::builder()
        .arg("--cache-dir")
        .arg(&spool)
        .args(["--factory-url", &f.nginx.url()])
        .args(["--store", &format!("s3://{}/{PREFIX}", g.bucket)])
        .args(["--s3-endpoint", &g.endpoint(0)])
        .args(["--upstream-timeout", "2s"])
        .env("AWS_ACCESS_KEY_ID", &g.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &g.secret)
        .args(extra)
        .start();
    (svc, spool)
}

fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
    t.elapsed()
}

/// One GET: (status, body, how long).
fn timed(url: &str) -> (u16, Vec<u8>, Duration) {
    let t = Instant::now();
    let r = curl(&["--max-time", "30", url]);
    (r.status, r.body, t.elapsed())
}

#[test]
fn a_frozen_bucket_leaves_the_service_answering() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(3, 1, &[A, A2], None);
    // A2 of other bytes than A (one object each).
    let a2 = support::xz_bytes(&support::random_bytes(2 << 20, 7));
    std::fs::write(f.root().join(&image_path(A2)[1..]), &a2).unwrap();

    // Replica `two` (no local tier) fills both artifacts into the bucket.
    let (two, _) = replica(&f, &g, "two", &["--local-cache-max-size", "0"]);
    for a in [A, A2] {
        let r = curl(&[&format!("{}{}", two.url(), image_path(a))]);
        assert_eq!(r.status, 200, "{}", two.log_text());
    }
    eventually("both commits", Duration::from_secs(20), || {
        g.list(0, &format!("{PREFIX}/index/")).len() == 2
    });
    drop(two);

    // Replica `one` knows both from the bucket; A is read once, so it is
    // copied into its local tier; A2 is not.
    let (one, spool) = replica(&f, &g, "one", &[]);
    let a_url = format!("{}{}", one.url(), image_path(A));
    let a2_url = format!("{}{}", one.url(), image_path(A2));
    let (st, body, _) = timed(&a_url);
    assert_eq!(st, 200);
    assert!(body == f.xz);
    let copy = spool.join("tier").join(sha256_hex(&f.xz));
    eventually(
        "the local tier's copy of A",
        Duration::from_secs(20),
        || std::fs::metadata(&copy).is_ok_and(|m| m.len() == f.xz.len() as u64),
    );
    let gets_before = (f.gets(A), f.gets(A2));

    g.freeze(0);
    let frozen_at = Instant::now();
    // A request stuck on the frozen bucket meanwhile.
    let stuck = {
        let u = a2_url.clone();
        std::thread::spawn(move || timed(&u))
    };

    for path in ["/healthz", "/metrics", "/"] {
        for _ in 0..5 {
            let (st, _, took) = timed(&format!("{}{path}", one.url()));
            assert_eq!(st, 200, "{path} while the bucket is frozen");
            eprintln!("frozen: {path} in {took:?}");
            // 100 ms is the bar; the margin is for a loaded machine.
            assert!(took < Duration::from_millis(750), "{path} took {took:?}");
        }
    }
    // /readyz answers from what the background prober found: 503 within
    // 5 s of the freeze (`probes_answer_from_state_while_the_bucket_is_frozen`
    // holds its 100 ms).
    eventually("/readyz 503", Duration::from_secs(10), || {
        curl(&["--max-time", "30", &format!("{}/readyz", one.url())]).status == 503
    });
    eprintln!("frozen: /readyz 503 after {:?}", frozen_at.elapsed());
    assert!(
        frozen_at.elapsed() < Duration::from_secs(5),
        "{:?}",
        frozen_at.elapsed()
    );

    // The local tier serves A whole; A2 fails, bounded, with 503.
    let (st, body, took) = timed(&a_url);
    eprintln!("frozen: A (local tier) {st} in {took:?}");
    assert_eq!(st, 200);
    assert!(body == f.xz, "A whole from the local tier");
    let (st, _, took) = timed(&a2_url);
    eprintln!("frozen: A2 (bucket only) {st} in {took:?}");
    assert_eq!(st, 503);
    assert!(took < Duration::from_secs(12), "{took:?}");
    // The store gate's 503 in each route family's shape (issue 39): OCI on
    // `/v2/`, JSON on `/api/v1/`, text elsewhere; `Retry-After` on all.
    let u = one.url();
    for (args, shape) in [
        (
            vec![format!("{u}/v2/siderolabs/installer/tags/list")],
            "oci",
        ),
        (
            vec![format!(
                "{u}/api/v1/datavolume?cloneFrom=n/g&name=w&size=1Gi"
            )],
            "json",
        ),
        (
            vec![
                "-X".into(),
                "POST".into(),
                "--data-binary".into(),
                "customization: {}".into(),
                format!("{u}/schematics"),
            ],
            "text",
        ),
        (vec![a2_url.clone()], "text"),
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = curl(&[&["--max-time", "30"], &args[..]].concat());
        let what = args.last().unwrap();
        assert_eq!(r.status, 503, "{what}");
        assert_eq!(r.header("retry-after").as_deref(), Some("5"), "{what}");
        let ct = r.header("content-type").unwrap_or_default();
        let body = String::from_utf8_lossy(&r.body).into_owned();
        match shape {
            "oci" => {
                let j: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(j["errors"][0]["code"], "UNAVAILABLE", "{what}: {body}");
                assert_eq!(ct, "application/json", "{what}");
            }
            "json" => {
                let j: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert!(j["error"].is_string(), "{what}: {body}");
                assert_eq!(ct, "application/json", "{what}");
            }
            _ => assert!(ct.starts_with("text/plain"), "{what}: {ct}"),
        }
    }
    let (stuck, _, took) = stuck.join().unwrap();
    eprintln!("frozen: the request stuck on the bucket ended: {stuck} in {took:?}");
    assert_ne!(stuck, 200, "A2 cannot have come from the frozen bucket");
    // Its GET's answer waited one timeout (2 s), then 503: a bucket that
    // does not answer is not asked again (a reopen per timeout was 6 s).
    assert_eq!(stuck, 503);
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        (f.gets(A), f.gets(A2)),
        gets_before,
        "nothing the store holds was fetched again upstream"
    );

    g.thaw(0);
    let back = eventually("A2 served again", Duration::from_secs(15), || {
        curl(&["--max-time", "10", &a2_url]).status == 200
    });
    eprintln!("thawed: A2 served again after {back:?}");
    assert!(back < Duration::from_secs(8), "{back:?}");
    let (st, body, _) = timed(&a2_url);
    assert_eq!(st, 200);
    assert!(body == a2, "A2 whole");
    let r = curl(&[&format!("{}/readyz", one.url())]);
    assert_eq!(r.status, 200);
    assert_eq!((f.gets(A), f.gets(A2)), gets_before);
}

/// Requests the upstream registry saw for `repo` (GET and HEAD, from its
/// access log).
fn upstream_asks(up: &Registry, repo: &str) -> usize {
    std::fs::read_to_string(&up.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.contains(&format!("\"GET /v2/{repo}/")) || l.contains(&format!("\"HEAD /v2/{repo}/"))
        })
        .count()
}

/// An OCI image pulled once through a replica (skopeo), the factory's
/// documents and a schematic it read: while the bucket is frozen they are
/// answered from its local tier, whole and checked, by skopeo and
/// containerd alike, with no request to the upstreams; what only the
/// bucket holds is 503 (not 404, not fetched again); all of it serves again
/// after SIGCONT.
#[test]
fn an_image_pulled_once_pulls_again_while_the_bucket_is_frozen() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(1, 0, &[], None);
    // The factory's documents, as nginx publishes them.
    std::fs::write(f.root().join("versions"), br#"["v1.13.6","v1.13.5"]"#).unwrap();
    let ext = f.root().join("version/v1.13.6/extensions");
    std::fs::create_dir_all(&ext).unwrap();
    std::fs::write(ext.join("official"), b"[]").unwrap();
    let up = Registry::start();
    let repo = format!("installer/{S}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let img = rt.block_on(push_factory_image(
        &up.url(),
        &repo,
        "v1.13.6",
        &[300 << 10, 40 << 10],
        11,
    ));
    let other = rt.block_on(push_factory_image(
        &up.url(),
        &repo,
        "v1.13.5",
        &[100 << 10],
        12,
    ));
    let reg = ["--registry-url", &up.url()];
    let out = tempfile::tempdir().unwrap();
    let (id, canonical) = talos_gen::schematic::id_and_canonical(
        "customization:\n  extraKernelArgs:\n    - frozen-bucket\n",
    )
    .unwrap();

    // Replica `two` (no local tier) fills all of it into the bucket.
    let (two, _) = replica(
        &f,
        &g,
        "two",
        &[&["--local-cache-max-size", "0"][..], &reg].concat(),
    );
    for (tag, im) in [("v1.13.6", &img), ("v1.13.5", &other)] {
        im.pulled_through(&two.host(), &out.path().join(tag), "via two");
    }
    for doc in ["/versions", "/version/v1.13.6/extensions/official"] {
        let r = curl(&[&format!("{}{doc}", two.url())]);
        assert_eq!(r.status, 200, "{doc}: {}", two.log_text());
    }
    let r = curl(&[
        "-X",
        "POST",
        "--data-binary",
        &canonical,
        &format!("{}/schematics", two.url()),
    ]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    drop(two);

    // Replica `one` pulls the image once (skopeo) and reads /versions and
    // the schematic: each object it read is copied into its local tier.
    let (one, spool) = replica(&f, &g, "one", &reg);
    img.pulled_through(&one.host(), &out.path().join("one"), "via one");
    let versions = curl(&[&format!("{}/versions", one.url())]);
    assert_eq!(versions.status, 200);
    let schematic_url = format!("{}/schematics/{id}", one.url());
    let r = curl(&[&schematic_url]);
    assert_eq!(r.status, 200);
    assert_eq!(String::from_utf8_lossy(&r.body), canonical);
    let tier = spool.join("tier");
    let mut wanted: Vec<String> = img
        .contents()
        .iter()
        .map(|(d, _)| d.trim_start_matches("sha256:").to_string())
        .collect();
    wanted.push(sha256_hex(&versions.body));
    wanted.push(id.clone());
    eventually(
        "the local tier's copies of all one read",
        Duration::from_secs(30),
        || wanted.iter().all(|d| tier.join(d).is_file()),
    );
    let asks_before = upstream_asks(&up, &repo);
    let docs_before = f.nginx.count("\"GET /version");

    g.freeze(0);
    // From the background prober's state: 503 within 5 s of the freeze.
    let down = eventually("/readyz 503", Duration::from_secs(10), || {
        curl(&["--max-time", "30", &format!("{}/readyz", one.url())]).status == 503
    });
    assert!(down < Duration::from_secs(5), "{down:?}");

    // skopeo pulls the whole image from the local tier.
    let t = Instant::now();
    img.pulled_through(
        &one.host(),
        &out.path().join("frozen"),
        "via one, the bucket frozen",
    );
    eprintln!("frozen: skopeo pulled the image in {:?}", t.elapsed());
    // containerd too, through the mirror path a Talos worker uses.
    let cd_dir = tempfile::tempdir().unwrap();
    if let Some(cd) = Containerd::start(cd_dir.path()) {
        let hosts = cd_dir.path().join("hosts");
        hosts_toml(&hosts, "factory.talos.dev", &one.url());
        let reference = format!("factory.talos.dev/{repo}:v1.13.6");
        let t = Instant::now();
        cd.fetch_all(&hosts, &reference);
        eprintln!("frozen: containerd fetched the image in {:?}", t.elapsed());
        cd.assert_holds(&reference, &img);
    }
    // The document and the schematic it read.
    let (st, body, took) = timed(&format!("{}/versions", one.url()));
    eprintln!("frozen: /versions {st} in {took:?}");
    assert_eq!((st, body), (200, versions.body.clone()));
    let (st, body, _) = timed(&schematic_url);
    assert_eq!(st, 200);
    assert_eq!(String::from_utf8_lossy(&body), canonical);

    // What only the bucket holds: 503 in bounded time, never 404.
    let base = format!("{}/v2/{repo}", one.url());
    let accept = "Accept: application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json";
    let (arch, _, m) = &other.manifests[0];
    for url in [
        format!("{base}/manifests/v1.13.5"),
        format!("{base}/manifests/{}", other.index_digest),
        format!("{base}/manifests/{m}"),
        format!("{base}/blobs/{}", other.blobs[0].digest),
        format!("{}/version/v1.13.6/extensions/official", one.url()),
    ] {
        let t = Instant::now();
        let r = curl(&["--max-time", "30", "-H", accept, &url]);
        eprintln!("frozen: {url} ({arch}) {} in {:?}", r.status, t.elapsed());
        assert_eq!(r.status, 503, "{url}");
        assert!(
            t.elapsed() < Duration::from_secs(12),
            "{url}: {:?}",
            t.elapsed()
        );
    }
    // A HEAD answers as the GET would: 503 for a blob only the bucket
    // holds (not 200 from the entry in memory), 200 for one in the tier.
    for (blob, want, what) in [
        (&other.blobs[0], 503, "a blob only the frozen bucket holds"),
        (&img.blobs[0], 200, "a blob in the local tier"),
    ] {
        let url = format!("{base}/blobs/{}", blob.digest);
        let r = curl(&["-I", "--max-time", "30", &url]);
        assert_eq!(r.status, want, "HEAD of {what}");
    }
    let o = skopeo_copy(&one.host(), &repo, "v1.13.5", &out.path().join("other"));
    assert!(
        !o.status.success(),
        "the other image cannot come from a frozen bucket"
    );
    assert_eq!(
        upstream_asks(&up, &repo),
        asks_before,
        "the upstream registry was asked while the bucket was frozen"
    );
    assert_eq!(f.nginx.count("\"GET /version"), docs_before);

    g.thaw(0);
    let back = eventually(
        "the other image served again",
        Duration::from_secs(15),
        || {
            curl(&[
                "--max-time",
                "10",
                "-H",
                accept,
                &format!("{base}/manifests/{}", other.index_digest),
            ])
            .status
                == 200
        },
    );
    eprintln!("thawed: the other image's index served again after {back:?}");
    other.pulled_through(&one.host(), &out.path().join("thawed"), "thawed");
}

/// curl's own `time_total` of one GET: (status, seconds).
fn probe_time(url: &str) -> (u16, f64) {
    let r = curl(&["--max-time", "30", url]);
    (r.status, r.total)
}

/// The probes answer from state the service keeps (the background prober,
/// `http::ops`): with the bucket frozen, `/healthz`, `/readyz`, `/metrics`
/// and the status page each answer within 100 ms (curl's own time; the
/// best of five, and none over 750 ms on a loaded machine); `/readyz` is
/// 503 within 5 s of the freeze and 200 within 5 s of SIGCONT.
#[test]
fn probes_answer_from_state_while_the_bucket_is_frozen() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(1, 1, &[A], None);
    let (one, _) = replica(&f, &g, "one", &[]);
    let url = |p: &str| format!("{}{p}", one.url());
    assert_eq!(curl(&[&url("/readyz")]).status, 200);

    g.freeze(0);
    let t = Instant::now();
    let down = eventually("/readyz 503", Duration::from_secs(10), || {
        curl(&["--max-time", "1", &url("/readyz")]).status == 503
    });
    eprintln!("frozen: /readyz 503 after {down:?}");
    assert!(down < Duration::from_secs(5), "{down:?}");
    for path in ["/healthz", "/readyz", "/metrics", "/"] {
        let times: Vec<f64> = (0..5)
            .map(|_| {
                let (st, took) = probe_time(&url(path));
                let want = if path == "/readyz" { 503 } else { 200 };
                assert_eq!(st, want, "{path} while the bucket is frozen");
                took
            })
            .collect();
        eprintln!("frozen: {path} in {times:?} s");
        let best = times.iter().cloned().fold(f64::MAX, f64::min);
        assert!(best < 0.1, "{path}: {times:?}");
        assert!(times.iter().all(|t| *t < 0.75), "{path}: {times:?}");
    }
    // The page says why it is not ready.
    let page = String::from_utf8_lossy(&curl(&[&url("/")]).body).into_owned();
    assert!(page.contains("not ready (503) until it answers"), "{page}");
    assert!(t.elapsed() < Duration::from_secs(30));

    g.thaw(0);
    let up = eventually("/readyz 200", Duration::from_secs(10), || {
        curl(&["--max-time", "1", &url("/readyz")]).status == 200
    });
    eprintln!("thawed: /readyz 200 after {up:?}");
    assert!(up < Duration::from_secs(5), "{up:?}");
}

/// The entry a key has in the bucket (its index entry, parsed).
fn bucket_entry(g: &Garage, prefix: &str, key: &str) -> Option<serde_json::Value> {
    g.list(0, &format!("{prefix}/index/"))
        .iter()
        .find_map(|name| {
            let v: serde_json::Value = serde_json::from_slice(&g.get(0, name)).ok()?;
            (v["key"] == key).then_some(v)
        })
}

/// A key `mirror sync` stored (pinned) after a replica started, so the
/// replica never read it: while the bucket is frozen, asking that replica
/// for it is 503 within the store's bound, for every request waiting, and
/// the factory is never asked (before, "the bucket did not answer" was
/// read as "absent": the replica fetched the key from the factory and, once
/// the bucket came back, its commit wrote over the mirror's pinned entry,
/// pointing it at the factory's new bytes). After SIGCONT the entry is
/// still pinned with the mirror's digest though the factory now serves
/// other bytes, and the replica serves the mirror's.
#[test]
fn a_mirrored_key_is_never_fetched_again_or_repointed_while_the_bucket_is_frozen() {
    use support::factory::{S, V};
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(2, 0, &[A], None);
    let (one, _) = replica(&f, &g, "one", &[]);
    // The mirror job fills the bucket after the replica started.
    let cfg = f.dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}]\ninstallers: []\n"),
    )
    .unwrap();
    let spool = f.dir.path().join("spool-mirror");
    std::fs::create_dir_all(&spool).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "sync", "--config", cfg.to_str().unwrap()])
        .args(["--factory-url", &f.nginx.url()])
        .args(["--store", &format!("s3://{}/{PREFIX}", g.bucket)])
        .args(["--s3-endpoint", &g.endpoint(0)])
        .arg("--cache-dir")
        .arg(&spool)
        .env("AWS_ACCESS_KEY_ID", &g.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &g.secret)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let key = format!("image/{S}/{V}/{A}");
    let mirrored = sha256_hex(&f.xz);
    let e = bucket_entry(&g, PREFIX, &key).expect("the mirror's entry");
    assert_eq!(
        (e["digest"].as_str(), e["pinned"].as_bool()),
        (Some(&*mirrored), Some(true))
    );
    // The factory now serves other bytes under the same name.
    let other = support::xz_bytes(&support::random_bytes(1 << 20, 99));
    std::fs::write(f.root().join(&image_path(A)[1..]), &other).unwrap();
    let gets_before = f.gets(A);

    g.freeze(0);
    let url = format!("{}{}", one.url(), image_path(A));
    let askers: Vec<_> = (0..8)
        .map(|_| {
            let u = url.clone();
            std::thread::spawn(move || timed(&u))
        })
        .collect();
    for a in askers {
        let (st, _, took) = a.join().unwrap();
        eprintln!("frozen: a key only the bucket holds, never read here: {st} in {took:?}");
        assert_eq!(st, 503, "{}", one.log_text());
        // One store bound (2 s) and a margin for a loaded machine.
        assert!(took < Duration::from_secs(6), "{took:?}");
    }
    // Asked again while still frozen: at once (the store is known down,
    // and the service's prober, not the request, probes it), every time.
    for _ in 0..5 {
        let (st, _, took) = timed(&url);
        eprintln!("frozen, asked again: {st} in {took:?}");
        assert_eq!(st, 503);
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
    assert_eq!(
        f.gets(A),
        gets_before,
        "the factory was asked for a key the store holds"
    );

    g.thaw(0);
    let back = eventually("the key served again", Duration::from_secs(15), || {
        curl(&["--max-time", "10", &url]).status == 200
    });
    eprintln!("thawed: served again after {back:?}");
    let (st, body, _) = timed(&url);
    assert_eq!(st, 200);
    assert!(
        body == f.xz,
        "the mirror's bytes, not the factory's new ones"
    );
    assert_eq!(
        f.gets(A),
        gets_before,
        "the factory was asked for a key the store holds"
    );
    let e = bucket_entry(&g, PREFIX, &key).expect("the mirror's entry");
    assert_eq!(
        (e["digest"].as_str(), e["pinned"].as_bool()),
        (Some(&*mirrored), Some(true)),
        "the mirror's entry stays pinned with its digest"
    );
}

/// A replica started while its bucket does not answer waits for it rather
/// than exit (a pod would crash-loop through the outage): it listens, alive
/// (`/healthz` 200) and not ready (`/readyz` 503 saying why), every other
/// route 503 with `Retry-After` in its family's shape, and once the bucket
/// answers it opens the store and serves, no restart.
#[test]
fn a_replica_started_on_a_frozen_bucket_waits_for_it_not_ready() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(1, 1, &[A], None);
    g.freeze(0);
    let t = Instant::now();
    let (mut one, _) = replica(&f, &g, "one", &[]);
    eprintln!("frozen at start: /healthz 200 after {:?}", t.elapsed());
    let base = one.url();
    let url = |p: &str| format!("{base}{p}");
    let r = curl(&["-i", &url("/readyz")]);
    assert_eq!(r.status, 503);
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert!(text.contains("not ready: the store did not open"), "{text}");
    let r = curl(&["-i", &url(&image_path(A))]);
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after").as_deref(), Some("5"));
    let r = curl(&[&url("/v2/siderolabs/installer/manifests/v1.13.6")]);
    assert_eq!(r.status, 503);
    let oci: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(oci["errors"][0]["code"], "UNAVAILABLE", "{oci}");
    assert!(one.log_text().contains("waiting for the store"));
    assert!(one.try_status().is_none(), "the replica exited");

    g.thaw(0);
    let up = eventually("/readyz 200", Duration::from_secs(30), || {
        curl(&["--max-time", "2", &url("/readyz")]).status == 200
    });
    eprintln!("thawed: /readyz 200 after {up:?}");
    // Ready within 5 s of the bucket's return (it opens it every 2 s).
    assert!(up < Duration::from_secs(5), "{up:?}");
    let (st, body, _) = timed(&url(&image_path(A)));
    assert_eq!(st, 200, "{}", one.log_text());
    assert!(body == f.xz);
    assert!(one.log_text().contains("listening"));
}

/// A store-only registry (`--offline`) reads the bucket as every other
/// path does: while it does not answer, a tag this replica never read, the
/// tag list of a repository it knows no tag of, and a referrers index are
/// 503 (the store may hold them), never 404 or an empty index answered 200;
/// once it answers, the tag another replica stored is served.
#[test]
fn a_store_only_registry_answers_503_not_absent_while_the_bucket_is_frozen() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(1, 0, &[], None);
    let up = Registry::start();
    let repo = format!("installer/{S}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let img = rt.block_on(push_factory_image(
        &up.url(),
        &repo,
        "v1.13.6",
        &[64 << 10],
        21,
    ));
    // The offline replica starts first: what `two` stores next it has
    // never read.
    let (off, _) = replica(&f, &g, "off", &["--offline", "--registry-url", &up.url()]);
    let (two, _) = replica(
        &f,
        &g,
        "two",
        &["--local-cache-max-size", "0", "--registry-url", &up.url()],
    );
    let out = tempfile::tempdir().unwrap();
    img.pulled_through(&two.host(), &out.path().join("two"), "via two");
    drop(two);
    let digest = img.index_digest.clone();
    let base = format!("{}/v2/{repo}", off.url());
    let accept = "Accept: application/vnd.oci.image.index.v1+json";

    g.freeze(0);
    let asks = [
        format!("{base}/manifests/v1.13.6"),
        format!("{base}/tags/list"),
        format!("{base}/referrers/{digest}"),
    ];
    for url in &asks {
        let t = Instant::now();
        let r = curl(&["--max-time", "30", "-H", accept, url]);
        eprintln!(
            "frozen, store-only: {url}: {} in {:?}",
            r.status,
            t.elapsed()
        );
        assert_eq!(
            r.status,
            503,
            "{url}: {}\n{}",
            String::from_utf8_lossy(&r.body),
            off.log_text()
        );
        assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    }

    g.thaw(0);
    eventually(
        "the tag served after the thaw",
        Duration::from_secs(15),
        || curl(&["--max-time", "10", "-H", accept, &asks[0]]).status == 200,
    );
    let r = curl(&["--max-time", "10", "-H", accept, &asks[0]]);
    assert_eq!(sha256_hex(&r.body), digest.trim_start_matches("sha256:"));
}
