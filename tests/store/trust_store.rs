//! The store under the faults an ageing disk and a shared volume bring, with
//! real processes: nginx upstreams, curl clients, two talos-gen processes
//! on one cache dir (one in a PID namespace of its own, as a Deployment
//! and a CronJob are).

use crate::support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{Nginx, NginxOpts, Service, curl, eventually, sha256_hex};

const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
/// A PID namespace of its own, as a pod has. `--kill-child`: when `unshare`
/// is killed (a guard's drop), so is what it forked, which is PID 1 of the
/// namespace and so takes the whole namespace down; without it the `serve`
/// inside outlived the test (issue 24's leftover `serve ... --offline`).
const PIDNS: &[&str] = &["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"];

fn image(v: &str) -> String {
    format!("/image/{S}/{v}/openstack-amd64.raw.xz")
}

/// An upstream tree holding `artifacts` as `/image/<S>/<v>/openstack-amd64.raw.xz`.
fn tree(root: &Path, artifacts: &[(&str, &[u8])]) {
    for (v, b) in artifacts {
        let p = root.join(&image(v)[1..]);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    }
}

fn xz(random_mib: usize, zero_mib: usize) -> Vec<u8> {
    let d = tempfile::tempdir().unwrap();
    support::xz_disk(d.path(), random_mib, zero_mib).1
}

fn object_of(cache: &Path, body: &[u8]) -> std::path::PathBuf {
    cache.join("objects/sha256").join(sha256_hex(body))
}

/// The object for `body` is committed: its bytes and an index entry naming
/// it (the entry is written after the object, so waiting for the object
/// alone can race a process that is stopped right after).
fn committed(cache: &Path, body: &[u8]) -> bool {
    let digest = sha256_hex(body);
    object_of(cache, body).exists()
        && std::fs::read_dir(cache.join("index")).is_ok_and(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(&digest)))
        })
}

fn metric(svc: &Service, name: &str) -> String {
    let m = String::from_utf8(curl(&[&format!("{}/metrics", svc.url())]).body).unwrap();
    m.lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_default()
        .to_string()
}

/// A byte flipped on disk is never served as a clean 200/206: a response
/// that has sent bytes is cut before the bad block; one whose first block
/// is the bad one sends nothing of it and is answered from the object
/// fetched again (offline: 404); the object dropped and counted either way
/// — across a restart.
#[test]
fn a_flipped_byte_on_disk_is_cut_dropped_and_fetched_again() {
    let art = xz(3, 1);
    let root = tempfile::tempdir().unwrap();
    tree(root.path(), &[("v1.13.6", &art)]);
    let ng = Nginx::start(root.path(), NginxOpts::default());
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    let args = ["--cache-dir", dir, "--factory-url", &ng.url()];
    {
        let svc = Service::start(&args);
        let r = curl(&[&format!("{}{}", svc.url(), image("v1.13.6"))]);
        assert_eq!((r.exit, r.status, r.body == art), (0, 200, true));
        // the last byte goes out once verified; the commit follows
        eventually("the commit", Duration::from_secs(10), || {
            committed(cache.path(), &art)
        });
    }
    // rot in the second MiB, while no process runs
    support::flip_byte(&object_of(cache.path(), &art), (1 << 20) + 4321, 0x01);
    let svc = Service::start(&args);
    let url = format!("{}{}", svc.url(), image("v1.13.6"));
    // a range inside the intact first chunk is still right
    let r = curl(&["-r", "0-1023", &url]);
    assert_eq!((r.exit, r.status), (0, 206));
    assert_eq!(r.body, art[..1024]);
    // a range that reaches the rotten chunk from an intact one: cut, not
    // a clean 206, what came before it right
    let r = curl(&["-r", "1000000-1100000", &url]);
    assert_eq!(r.status, 206);
    assert_ne!(r.exit, 0, "a rotten range must not end cleanly: {r:?}");
    assert!(r.body.len() < 100_001 && r.body[..] == art[1_000_000..1_000_000 + r.body.len()]);
    assert_eq!(
        metric(&svc, "talos_gen_store_corrupt_objects_total"),
        "talos_gen_store_corrupt_objects_total 1"
    );
    assert!(!object_of(cache.path(), &art).exists(), "dropped");
    // the next request fetches it again, whole and right
    let r = curl(&[&url]);
    assert_eq!((r.exit, r.status), (0, 200));
    assert_eq!(sha256_hex(&r.body), sha256_hex(&art));
    assert_eq!(ng.count(&format!("GET {}", image("v1.13.6"))), 2);
    eventually("the commit", Duration::from_secs(10), || {
        committed(cache.path(), &art)
    });
    // rotten again, in the block a range starts in: nothing of it goes
    // out; the copy is dropped and the range answered from the object
    // fetched again
    support::flip_byte(&object_of(cache.path(), &art), (1 << 20) + 4321, 0x01);
    let r = curl(&["-r", "1048576-1049599", &url]);
    assert_eq!((r.exit, r.status), (0, 206), "{}", svc.log_text());
    assert_eq!(r.body, art[1048576..1049600]);
    assert_eq!(
        metric(&svc, "talos_gen_store_corrupt_objects_total"),
        "talos_gen_store_corrupt_objects_total 2"
    );
    assert_eq!(ng.count(&format!("GET {}", image("v1.13.6"))), 3);
    eventually("the commit", Duration::from_secs(10), || {
        committed(cache.path(), &art)
    });
    drop(svc);
    // again rotten, whole GET, offline: nothing to fetch it from: 404
    // (the copy dropped), never a byte of it
    support::flip_byte(&object_of(cache.path(), &art), 77, 0x01);
    let svc = Service::start(&["--cache-dir", dir, "--offline"]);
    let url = format!("{}{}", svc.url(), image("v1.13.6"));
    let r = curl(&[&url]);
    assert_eq!(r.status, 404, "{r:?}");
    assert!(r.body.len() < 1000, "a message, not the object");
    assert_eq!(curl(&[&url]).status, 404);
    assert!(svc.log_text().contains("corrupt object in the store"));
}

/// A reader that joined a fill and is still behind when the fill commits
/// reads the rest from the stored object, checked: a byte changed in the
/// committed file ahead of it is never sent in a clean answer (before, it
/// went on reading the file it had followed, unchecked).
#[test]
fn a_reader_behind_a_commit_reads_the_rest_checked() {
    use std::io::Read;
    let art = xz(16, 0);
    let root = tempfile::tempdir().unwrap();
    tree(root.path(), &[("v1.13.6", &art)]);
    let ng = Nginx::start(root.path(), NginxOpts::default());
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    let svc = Service::start(&["--cache-dir", dir, "--factory-url", &ng.url()]);
    // the first request starts the fill; its client reads nothing yet, so
    // the socket holds it back a few MiB into the artifact
    let (mut s, head) =
        support::small_window_get(svc.port, &image("v1.13.6"), Duration::from_secs(20));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", art.len())),
        "{head}"
    );
    eventually("the commit", Duration::from_secs(20), || {
        committed(cache.path(), &art)
    });
    // changed after the commit, near the end: far ahead of the reader
    support::flip_byte(
        &object_of(cache.path(), &art),
        art.len() as u64 - 1000,
        0x01,
    );
    let mut body = Vec::new();
    let _ = s.read_to_end(&mut body);
    assert!(
        body.len() < art.len(),
        "a body with a byte changed after the commit ended whole ({} bytes; wrong: {})",
        body.len(),
        body != art
    );
    assert!(
        body[..] == art[..body.len()],
        "bytes before the cut are right"
    );
    assert_eq!(
        metric(&svc, "talos_gen_store_corrupt_objects_total"),
        "talos_gen_store_corrupt_objects_total 1"
    );
    // fetched again, whole and right
    let r = curl(&[&format!("{}{}", svc.url(), image("v1.13.6"))]);
    assert_eq!((r.exit, r.status), (0, 200));
    assert!(r.body == art);
}

/// A byte another process writes into a fill's spool file while the fill
/// runs, ahead of a reader of the fill, is never sent: the reader checks
/// each block it reads against the CRC32C the fill took of the bytes it
/// received, and its answer is cut there.
#[test]
fn a_byte_changed_in_a_fill_s_file_never_reaches_its_readers() {
    use std::io::Read;
    use support::factory::{A, Factory, image_path};
    // 24 MiB at 8 MiB/s: the fill lasts about three seconds.
    let up = Factory::new(24, 0, &[A], Some("8m"));
    let svc = up.serve(&[]);
    let (mut s, head) =
        support::small_window_get(svc.port, &image_path(A), Duration::from_secs(30));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    // the spool file, once 12 MiB are in: a byte at 10 MiB changes (the
    // reader, reading nothing yet, is a few MiB in at most)
    let spool = || {
        std::fs::read_dir(up.cache().join("tmp"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("fill-")
            })
    };
    eventually("12 MiB spooled", Duration::from_secs(20), || {
        spool().is_some_and(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 12 << 20))
    });
    support::flip_byte(&spool().unwrap(), 10 << 20, 0x01);
    let mut body = Vec::new();
    let _ = s.read_to_end(&mut body);
    let at = body.len();
    assert!(
        at < up.xz.len(),
        "a body with a byte changed in the fill's file ended whole ({at} bytes; wrong: {})",
        body != up.xz
    );
    assert!(body[..] == up.xz[..at], "bytes before the cut are right");
    assert!(at <= 10 << 20, "cut at or before the changed block: {at}");
    // the fill its reader found changed is not stored (it fails at its
    // end): the next GET fetches it again, whole and right
    eventually("the fill refused", Duration::from_secs(20), || {
        svc.log_text().contains("its file changed under the fill")
    });
    let url = format!("{}{}", svc.url(), image_path(A));
    let r = curl(&[&url]);
    assert_eq!((r.exit, r.status), (0, 200), "{}", svc.log_text());
    assert!(r.body == up.xz);
    assert_eq!(
        up.gets(A),
        2,
        "fetched again, not served from a changed file"
    );
    assert!(svc.log_text().contains("its file changed under the fill"));
}

/// Another process truncating a committed object again and again while
/// about 200 clients read ranges of it: the service stays up (no SIGBUS),
/// no response ends cleanly with a wrong byte (each is whole and right, or
/// cut), the truncated object is dropped and counted rather than cut until
/// a restart, and once the truncations stop it is fetched again and served
/// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncations_under_concurrent_ranges_cut_them_and_drop_the_object() {
    let art = xz(8, 0);
    let root = tempfile::tempdir().unwrap();
    tree(root.path(), &[("v1.13.6", &art)]);
    let ng = Nginx::start(root.path(), NginxOpts::default());
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    let mut svc = Service::start(&["--cache-dir", dir, "--factory-url", &ng.url()]);
    let url = format!("{}{}", svc.url(), image("v1.13.6"));
    let r = curl(&[&url]);
    assert_eq!((r.exit, r.status, r.body == art), (0, 200, true));
    eventually("the commit", Duration::from_secs(10), || {
        committed(cache.path(), &art)
    });
    let object = object_of(cache.path(), &art);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // the other process: truncate whatever object file is there, often
    let truncator = {
        let (stop, object) = (stop.clone(), object.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&object) {
                    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                    if len > 0 && f.set_len(len / 2).is_ok() {
                        n += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(15));
            }
            n
        })
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .unwrap();
    let art = std::sync::Arc::new(art);
    let until = Instant::now() + Duration::from_secs(4);
    let mut clients = Vec::new();
    for c in 0..200u64 {
        let (http, url, art) = (http.clone(), url.clone(), art.clone());
        clients.push(tokio::spawn(async move {
            let (mut whole, mut cut, mut wrong) = (0u32, 0u32, 0u32);
            let mut x = c.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            while Instant::now() < until {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = art.len() as u64;
                let a = x % (len - (1 << 20));
                let z = a + (1 << 20) - 1;
                let req = http
                    .get(&url)
                    .header("range", format!("bytes={a}-{z}"))
                    .timeout(Duration::from_secs(20));
                let Ok(r) = req.send().await else {
                    cut += 1;
                    continue;
                };
                let status = r.status().as_u16();
                match r.bytes().await {
                    Ok(b) if status == 206 && b[..] == art[a as usize..=z as usize] => whole += 1,
                    // a clean answer that is not the range: what must never happen
                    Ok(_) if status == 206 || status == 200 => wrong += 1,
                    // the object dropped between requests, being fetched again
                    Ok(_) => cut += 1,
                    Err(_) => cut += 1,
                }
            }
            (whole, cut, wrong)
        }));
    }
    let (mut whole, mut cut, mut wrong) = (0, 0, 0);
    for c in clients {
        let (w, k, x) = c.await.unwrap();
        (whole, cut, wrong) = (whole + w, cut + k, wrong + x);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let truncations = truncator.join().unwrap();
    eprintln!("{truncations} truncations; ranges: {whole} whole, {cut} cut, {wrong} wrong");
    assert!(svc.try_status().is_none(), "serve died: {}", svc.log_text());
    assert_eq!(wrong, 0, "a range ended cleanly with wrong bytes");
    assert!(truncations > 0 && cut > 0, "the fault did not happen");
    assert!(svc.log_text().contains("shorter than its entry"));
    let dropped = metric(&svc, "talos_gen_store_corrupt_objects_total");
    let dropped: u64 = dropped.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(dropped >= 1, "the truncated object was never dropped");
    // quiet again: the file left truncated by the last truncation (if the
    // object was fetched again before it) cuts one more GET and is dropped;
    // then it is fetched again and served whole and right, no restart
    let r = curl(&[&url]);
    if r.exit != 0 {
        assert!(r.body.len() < art.len(), "{r:?}");
        let r = curl(&[&url]);
        assert_eq!((r.exit, r.status), (0, 200), "{}", svc.log_text());
        assert!(r.body == art[..]);
    } else {
        assert_eq!(r.status, 200);
        assert!(r.body == art[..]);
    }
    let r = curl(&[&url]);
    assert_eq!((r.exit, r.status), (0, 200));
    assert!(r.body == art[..]);
}

/// A Range answered from a running fill that later fails its check (a
/// flipped byte with the right length: the xz check fails at the end) is
/// cut, never a clean 206.
#[test]
fn a_range_from_a_fill_that_fails_verification_is_cut() {
    let mut art = xz(4, 0);
    let n = art.len();
    art[n / 2] ^= 0x40; // same length, broken xz
    let root = tempfile::tempdir().unwrap();
    tree(root.path(), &[("v1.13.6", &art)]);
    let ng = Nginx::start(
        root.path(),
        NginxOpts {
            limit_rate: Some("2m".into()),
            ..Default::default()
        },
    );
    let cache = tempfile::tempdir().unwrap();
    let svc = Service::start(&[
        "--cache-dir",
        cache.path().to_str().unwrap(),
        "--factory-url",
        &ng.url(),
    ]);
    let url = format!("{}{}", svc.url(), image("v1.13.6"));
    let whole = std::thread::spawn({
        let url = url.clone();
        move || curl(&[&url])
    });
    // join the running fill once its first MiB is in
    eventually("the fill to stream", Duration::from_secs(20), || {
        std::fs::read_dir(cache.path().join("tmp"))
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.metadata().is_ok_and(|m| m.len() > (1 << 20)))
    });
    let r = curl(&["-r", "0-1023", &url]);
    assert_eq!(r.status, 206);
    assert_ne!(r.exit, 0, "must not be a clean 206: {r:?}");
    assert!(r.body.len() < 1024);
    let w = whole.join().unwrap();
    assert_ne!(w.exit, 0);
    assert_eq!(
        std::fs::read_dir(cache.path().join("objects/sha256"))
            .unwrap()
            .count(),
        0
    );
}

/// `mirror sync` (in a PID namespace of its own) pins what `serve` holds
/// unpinned; `serve` under its size limit then keeps it. Each process's
/// temp files survive the other's start-up.
#[test]
fn two_processes_in_their_own_pid_namespaces_never_undo_each_other() {
    support::require_tool("unshare");
    let boot = xz(3, 0);
    let (a, b, c) = (xz(3, 0), xz(3, 0), xz(3, 0));
    let root = tempfile::tempdir().unwrap();
    tree(
        root.path(),
        &[
            ("v1.13.6", &boot),
            ("v1.13.1", &a),
            ("v1.13.2", &b),
            ("v1.13.3", &c),
        ],
    );
    let slow = tree_dir_with_slow(root.path());
    let ng = Nginx::start(root.path(), NginxOpts::default());
    let ng_slow = Nginx::start(
        slow.path(),
        NginxOpts {
            limit_rate: Some("1m".into()),
            ..Default::default()
        },
    );
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    let limit = format!("{}", boot.len() + a.len() + a.len() / 2);
    let svc = Service::start(&[
        "--cache-dir",
        dir,
        "--factory-url",
        &ng.url(),
        "--cache-max-size",
        &limit,
    ]);
    let get = |v: &str| curl(&[&format!("{}{}", svc.url(), image(v))]);
    assert_eq!(get("v1.13.6").status, 200);
    eventually("the commit", Duration::from_secs(10), || {
        committed(cache.path(), &boot)
    });

    // the CronJob: mirror sync in its own PID namespace pins the artifact
    let cfg = cache
        .path()
        .join("..")
        .join(format!("mirror-{}.yaml", std::process::id()));
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [v1.13.6]\nimages: [openstack-amd64.raw.xz]\ninstallers: []\n"),
    )
    .unwrap();
    let out = Command::new(PIDNS[0])
        .args(&PIDNS[1..])
        .arg(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "sync", "--config"])
        .arg(&cfg)
        .args(["--cache-dir", dir, "--factory-url", &ng.url()])
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&cfg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // serve fills past its limit; the least recently used is the pinned one
    for v in ["v1.13.1", "v1.13.2", "v1.13.3"] {
        assert_eq!(get(v).status, 200);
    }
    assert!(
        object_of(cache.path(), &boot).exists(),
        "the pin set by the other process held"
    );
    assert!(
        !svc.log_text()
            .contains(&format!("evicting digest={}", sha256_hex(&boot)))
    );
    drop(svc);
    let off = Service::start(&["--cache-dir", dir, "--offline"]);
    let r = curl(&[&format!("{}{}", off.url(), image("v1.13.6"))]);
    assert_eq!((r.status, r.body == boot), (200, true));
    drop(off);

    // serve's fill in flight survives a start-up in another PID namespace
    let svc = Service::start(&["--cache-dir", dir, "--factory-url", &ng_slow.url()]);
    let url = format!("{}{}", svc.url(), image("v1.13.4"));
    let slow_get = std::thread::spawn(move || curl(&[&url]));
    eventually("serve's fill to start", Duration::from_secs(20), || {
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count() > 0
    });
    let st = Command::new(PIDNS[0])
        .args(&PIDNS[1..])
        .arg(env!("CARGO_BIN_EXE_talos-gen"))
        .args(["mirror", "verify", "--cache-dir", dir])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let r = slow_get.join().unwrap();
    assert_eq!((r.exit, r.status), (0, 200), "the fill committed");
    let slow_art = std::fs::read(slow.path().join(&image("v1.13.4")[1..])).unwrap();
    eventually("serve's commit", Duration::from_secs(10), || {
        committed(cache.path(), &slow_art)
    });
    assert!(
        !svc.log_text().contains("No such file"),
        "{}",
        svc.log_text()
    );
    drop(svc);

    // and the other way round: a sync's fill survives serve starting in
    // its own PID namespace
    let cfg = cache
        .path()
        .join("..")
        .join(format!("mirror-slow-{}.yaml", std::process::id()));
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [v1.13.5]\nimages: [openstack-amd64.raw.xz]\ninstallers: []\n"),
    )
    .unwrap();
    let mut sync = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
    sync.args(["mirror", "sync", "--config"])
        .arg(&cfg)
        .args(["--cache-dir", dir, "--factory-url", &ng_slow.url()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let sync = support::Proc::spawn("mirror sync", sync);
    eventually("the sync's fill to start", Duration::from_secs(20), || {
        std::fs::read_dir(cache.path().join("tmp")).unwrap().count() > 0
    });
    let pod = Service::start_under(PIDNS, &["--cache-dir", dir, "--offline"]);
    let out = sync.wait_with_output();
    let _ = std::fs::remove_file(&cfg);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = curl(&[&format!("{}{}", pod.url(), image("v1.13.5"))]);
    assert_eq!(r.status, 200, "what the sync stored is served");
}

/// Two slow artifacts for the namespace test, in a tree of their own.
fn tree_dir_with_slow(_fast: &Path) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let (x, y) = (xz(2, 0), xz(2, 0));
    tree(d.path(), &[("v1.13.4", &x), ("v1.13.5", &y)]);
    d
}

/// After a burst of fills larger than `--cache-max-size`, the store holds
/// at most the limit (plus pinned objects and what readers still hold).
#[test]
fn a_burst_does_not_leave_the_store_over_its_limit() {
    let arts: Vec<Vec<u8>> = (0..4).map(|_| xz(6, 0)).collect();
    let each = arts[0]
        .len()
        .max(arts[1].len())
        .max(arts[2].len())
        .max(arts[3].len());
    let root = tempfile::tempdir().unwrap();
    let vs = ["v1.13.1", "v1.13.2", "v1.13.3", "v1.13.4"];
    for (v, a) in vs.iter().zip(&arts) {
        tree(root.path(), &[(v, a)]);
    }
    let ng = Nginx::start(
        root.path(),
        NginxOpts {
            limit_rate: Some("8m".into()),
            ..Default::default()
        },
    );
    let cache = tempfile::tempdir().unwrap();
    let limit = (2 * each + each / 4).to_string();
    let svc = Service::start(&[
        "--cache-dir",
        cache.path().to_str().unwrap(),
        "--factory-url",
        &ng.url(),
        "--cache-max-size",
        &limit,
    ]);
    let handles: Vec<_> = vs
        .iter()
        .map(|v| {
            let url = format!("{}{}", svc.url(), image(v));
            std::thread::spawn(move || curl(&[&url]))
        })
        .collect();
    for h in handles {
        let r = h.join().unwrap();
        assert_eq!((r.exit, r.status), (0, 200));
    }
    let held = || -> u64 {
        std::fs::read_dir(cache.path().join("objects/sha256"))
            .unwrap()
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum()
    };
    let limit: u64 = limit.parse().unwrap();
    eventually("eviction after the burst", Duration::from_secs(10), || {
        held() <= limit
    });
}

/// `--cache-dir ""` (flag or environment) is bad input, and deletes nothing.
#[test]
fn an_empty_cache_dir_is_refused_and_touches_nothing() {
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(cwd.path().join("tmp")).unwrap();
    std::fs::write(cwd.path().join("tmp/fill-1-2"), b"someone else's").unwrap();
    for (args, env) in [
        (vec!["serve", "--cache-dir", ""], None),
        (vec!["serve"], Some("")),
        (vec!["mirror", "verify", "--cache-dir", ""], None),
        (vec!["mirror", "import", "x.tar", "--cache-dir", ""], None),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
        c.args(&args).current_dir(cwd.path());
        if let Some(v) = env {
            c.env("TALOS_GEN_CACHE_DIR", v);
        }
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--cache-dir") && err.contains("must not be empty"),
            "{args:?}: {err}"
        );
    }
    assert!(cwd.path().join("tmp/fill-1-2").exists());
    assert!(!cwd.path().join("objects").exists());
}

/// A FIFO in the cache dir is skipped with a warning, never opened: serve
/// starts and listens.
#[test]
fn a_fifo_in_the_cache_dir_does_not_hang_serve() {
    let cache = tempfile::tempdir().unwrap();
    drop(Service::start(&[
        "--cache-dir",
        cache.path().to_str().unwrap(),
        "--offline",
    ]));
    let fifo = cache
        .path()
        .join("index")
        .join(format!("{}.json", "f".repeat(64)));
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let t = Instant::now();
    let svc = Service::start(&["--cache-dir", cache.path().to_str().unwrap(), "--offline"]);
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(
        svc.log_text().contains("not written by talos-gen"),
        "{}",
        svc.log_text()
    );
    assert!(fifo.exists());
}

/// A tmpfs of `size` mounted for the test (root only), unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let d = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("TALOS_GEN_REQUIRE_REFERENCE").as_deref() != Ok("1"),
                "mounting a tmpfs failed (the full-disk test needs root)"
            );
            support::skip("cannot mount a tmpfs here (not root?)");
            return None;
        }
        Some(Tmpfs(d))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }

    fn free(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// A disk that fills up exactly when the index entry is written (a real
/// ENOSPC on a small tmpfs): the commit fails, and neither the object nor
/// its checksums stay behind as orphans; the store serves on afterwards.
#[tokio::test]
async fn a_full_disk_at_the_index_write_leaves_no_orphan() {
    let Some(fs) = Tmpfs::mount("256k") else {
        return;
    };
    let store = talos_gen::store::Store::open(fs.path(), None).unwrap();
    let k = talos_gen::store::Key::factory_doc("/versions");
    // Leave exactly two pages: one for the object, one for its checksums,
    // none for the index entry.
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![0u8; (fs.free() - 2 * 4096) as usize]).unwrap();
    assert_eq!(fs.free(), 2 * 4096);
    let err = store
        .commit_bytes(
            &k,
            bytes::Bytes::copy_from_slice(&[7u8; 4000]),
            Default::default(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("index entry") && msg.contains("No space left"),
        "{msg}"
    );
    let count = |d: &str| std::fs::read_dir(fs.path().join(d)).unwrap().count();
    assert_eq!(count("objects/sha256"), 0, "no orphaned object");
    assert_eq!(count("sums"), 0, "no orphaned checksums");
    assert_eq!(count("tmp"), 0);
    assert_eq!(count("index"), 0);
    assert!(store.lookup(&k).unwrap().is_none());
    // room again: the same commit goes through
    std::fs::remove_file(&filler).unwrap();
    store
        .commit_bytes(
            &k,
            bytes::Bytes::copy_from_slice(&[7u8; 4000]),
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .lookup(&k)
            .unwrap()
            .unwrap()
            .read_small(8192)
            .unwrap()
            .len(),
        4000
    );
    drop(store);
}

/// `mirror verify` names an object grown by appended bytes and one cut
/// short, and exits 1 because it dropped something; a second run is clean.
#[test]
fn mirror_verify_names_appended_and_truncated_objects_and_exits_1() {
    let art = xz(1, 0);
    let small = b"a small object".to_vec();
    let root = tempfile::tempdir().unwrap();
    tree(root.path(), &[("v1.13.6", &art), ("v1.13.5", &small)]);
    let ng = Nginx::start(root.path(), NginxOpts::default());
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    {
        let svc = Service::start(&["--cache-dir", dir, "--factory-url", &ng.url()]);
        assert_eq!(
            curl(&[&format!("{}{}", svc.url(), image("v1.13.6"))]).status,
            200
        );
        let m = format!("/image/{S}/v1.13.5/metal-amd64.iso");
        std::fs::create_dir_all(root.path().join(&m[1..]).parent().unwrap()).unwrap();
        std::fs::write(root.path().join(&m[1..]), &small).unwrap();
        assert_eq!(curl(&[&format!("{}{m}", svc.url())]).status, 200);
        eventually("the commits", Duration::from_secs(10), || {
            committed(cache.path(), &art) && committed(cache.path(), &small)
        });
    }
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(object_of(cache.path(), &art))
        .unwrap()
        .write_all(b"appended")
        .unwrap();
    std::fs::write(object_of(cache.path(), &small), b"a small").unwrap();
    let verify = || {
        Command::new(env!("CARGO_BIN_EXE_talos-gen"))
            .args(["mirror", "verify", "--cache-dir", dir])
            .output()
            .unwrap()
    };
    let out = verify();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bytes appended"), "{err}");
    assert!(err.contains("truncated"), "{err}");
    assert!(
        err.contains("openstack-amd64.raw.xz") && err.contains("metal-amd64.iso"),
        "{err}"
    );
    let out = verify();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
