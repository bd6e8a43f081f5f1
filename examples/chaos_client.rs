//! The clients and the independent ledger of `bench/chaos.sh`.
//!
//! Clients as the real ones behave, spread at random over the replicas:
//! - `cdi`: a HEAD first, then a whole GET of `/image/<schematic>/<version>/<asset>`
//!   (CDI's HTTP import);
//! - `range`: ranged reads of the same (an nbdkit-curl-like reader);
//! - `slow`: a whole GET read at about 1 MiB/s;
//! - `pull`: containerd: a HEAD of the tag (its `Docker-Content-Digest`),
//!   the index by digest, one platform's manifest, its config and layers,
//!   every one through `/v2/<repo>/...?ns=<registry>`.
//!
//! The ledger knows the true bytes (the script generated them and gives their
//! files), never asks the service: every answer is judged by its status and
//! bytes alone. A 200/206 whose body is whole and equal to the truth (length
//! and sha256; a range its slice) is `ok`; an answer that is cut (a refused or
//! reset connection, a body ended before its length, a timeout, or any 5xx) is
//! a `cut`; anything else (a clean 200/206 with wrong or short bytes, a HEAD
//! with a wrong length or digest, a 4xx for what exists) is `WRONG`, one line
//! each on stderr.
//!
//! Probes: `/healthz` and `/readyz` of every replica every 250 ms; the longest
//! each took, and how many `/readyz` answers were not 200.
//!
//! ```text
//! chaos_client SPEC SECONDS CLIENTS SEED
//! SPEC lines: replica NAME URL | artifact PATH FILE | object DIGEST FILE |
//!             image NS REPO TAG INDEX_DIGEST
//! ```
//! Ends after SECONDS (or on SIGTERM, then with no summary) and prints one
//! `LEDGER key=value...` line.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use sha2::{Digest, Sha256};

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

struct Spec {
    replicas: Vec<(String, String)>,
    artifacts: Vec<(String, Arc<Vec<u8>>)>,
    objects: HashMap<String, Arc<Vec<u8>>>,
    images: Vec<(String, String, String, String)>,
}

#[derive(Default)]
struct Ledger {
    answers: AtomicU64,
    ok: AtomicU64,
    cuts: AtomicU64,
    wrong: AtomicU64,
    timeouts: AtomicU64,
    bytes: AtomicU64,
    heads: AtomicU64,
    whole: AtomicU64,
    ranges: AtomicU64,
    slow: AtomicU64,
    manifests: AtomicU64,
    blobs: AtomicU64,
    healthz_max_ms: AtomicU64,
    readyz_max_ms: AtomicU64,
    readyz_not_ok: AtomicU64,
    probes: AtomicU64,
}

enum Verdict {
    Ok,
    Cut,
    Wrong(String),
}

impl Ledger {
    fn record(&self, v: Verdict, what: &str, replica: &str) {
        self.answers.fetch_add(1, Ordering::Relaxed);
        match v {
            Verdict::Ok => self.ok.fetch_add(1, Ordering::Relaxed),
            Verdict::Cut => self.cuts.fetch_add(1, Ordering::Relaxed),
            Verdict::Wrong(why) => {
                eprintln!("WRONG {replica} {what}: {why}");
                self.wrong.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

fn load(spec: &str) -> Spec {
    let text = std::fs::read_to_string(spec).expect("reading SPEC");
    let mut s = Spec {
        replicas: Vec::new(),
        artifacts: Vec::new(),
        objects: HashMap::new(),
        images: Vec::new(),
    };
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let read = |f: &str| Arc::new(std::fs::read(f).unwrap_or_else(|e| panic!("{f}: {e}")));
        match w.as_slice() {
            ["replica", n, u] => s.replicas.push((n.to_string(), u.to_string())),
            ["artifact", p, f] => s.artifacts.push((p.to_string(), read(f))),
            ["object", d, f] => {
                let b = read(f);
                assert_eq!(&sha256(&b), d, "object {f} does not hash to {d}");
                s.objects.insert(d.to_string(), b);
            }
            ["image", ns, repo, tag, idx] => s.images.push((
                ns.to_string(),
                repo.to_string(),
                tag.to_string(),
                idx.to_string(),
            )),
            [] => {}
            _ => panic!("bad SPEC line: {line}"),
        }
    }
    assert!(
        !s.replicas.is_empty() && !s.artifacts.is_empty(),
        "empty SPEC"
    );
    s
}

fn sha256(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// xorshift: each client its own sequence from the run's seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Send `req`, read its body (at `rate` bytes a second when given), and
/// judge it against `want` (the expected bytes), `status` (200 or 206).
async fn fetch(
    l: &Ledger,
    req: reqwest::RequestBuilder,
    status: u16,
    want: &[u8],
    rate: Option<u64>,
) -> (Verdict, Option<reqwest::header::HeaderMap>) {
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            if e.is_timeout() {
                l.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            return (Verdict::Cut, None);
        }
    };
    let st = resp.status().as_u16();
    let headers = resp.headers().clone();
    if st >= 500 {
        return (Verdict::Cut, Some(headers));
    }
    let mut body = Vec::with_capacity(want.len());
    let mut stream = resp.bytes_stream();
    let started = Instant::now();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => {
                body.extend_from_slice(&b);
                if let Some(rate) = rate {
                    let due = Duration::from_secs_f64(body.len() as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
            Err(e) => {
                if e.is_timeout() {
                    l.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                return (Verdict::Cut, Some(headers));
            }
        }
    }
    l.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    if st != status {
        return (
            Verdict::Wrong(format!("status {st}, expected {status}")),
            Some(headers),
        );
    }
    if body.len() != want.len() {
        return (
            Verdict::Wrong(format!(
                "a clean {st} of {} bytes, expected {}",
                body.len(),
                want.len()
            )),
            Some(headers),
        );
    }
    if body != want {
        return (
            Verdict::Wrong(format!(
                "a clean {st} of the right length with wrong bytes (sha256 {}, expected {})",
                sha256(&body),
                sha256(want)
            )),
            Some(headers),
        );
    }
    (Verdict::Ok, Some(headers))
}

/// A HEAD: 200 with the true length (and digest when `digest`), else judged.
async fn head(
    l: &Ledger,
    req: reqwest::RequestBuilder,
    len: usize,
    digest: Option<&str>,
) -> Verdict {
    l.heads.fetch_add(1, Ordering::Relaxed);
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            if e.is_timeout() {
                l.timeouts.fetch_add(1, Ordering::Relaxed);
            }
            return Verdict::Cut;
        }
    };
    let st = resp.status().as_u16();
    if st >= 500 {
        return Verdict::Cut;
    }
    if st != 200 {
        return Verdict::Wrong(format!("HEAD status {st}"));
    }
    let h = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if h("content-length").and_then(|v| v.parse::<usize>().ok()) != Some(len) {
        return Verdict::Wrong(format!(
            "HEAD Content-Length {:?}, expected {len}",
            h("content-length")
        ));
    }
    if let Some(d) = digest
        && h("docker-content-digest").as_deref() != Some(&format!("sha256:{d}"))
    {
        return Verdict::Wrong(format!(
            "HEAD Docker-Content-Digest {:?}, expected sha256:{d}",
            h("docker-content-digest")
        ));
    }
    Verdict::Ok
}

async fn client(spec: Arc<Spec>, l: Arc<Ledger>, id: usize, seed: u64, deadline: Instant) {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(120))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut rng = Rng((seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
    // Each client keeps one habit, as real clients do.
    let habit = [
        "cdi", "range", "pull", "cdi", "slow", "pull", "range", "cdi",
    ][id % 8];
    while Instant::now() < deadline {
        // A pause between two imports or pulls (real clients are no tight loop).
        tokio::time::sleep(Duration::from_millis(rng.below(300) as u64)).await;
        let (name, base) = &spec.replicas[rng.below(spec.replicas.len())];
        match habit {
            "cdi" | "slow" => {
                let (path, want) = &spec.artifacts[rng.below(spec.artifacts.len())];
                let url = format!("{base}{path}");
                let what = format!("GET {path}");
                let v = head(&l, http.head(&url), want.len(), None).await;
                let cut = matches!(v, Verdict::Cut);
                l.record(v, &format!("HEAD {path}"), name);
                if cut {
                    // CDI retries the whole import after a pause.
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                let rate = (habit == "slow").then_some(1 << 20);
                if rate.is_some() {
                    l.slow.fetch_add(1, Ordering::Relaxed);
                }
                l.whole.fetch_add(1, Ordering::Relaxed);
                let (v, _) = fetch(&l, http.get(&url), 200, want, rate).await;
                l.record(v, &what, name);
            }
            "range" => {
                let (path, want) = &spec.artifacts[rng.below(spec.artifacts.len())];
                let url = format!("{base}{path}");
                for _ in 0..4 {
                    let len = want.len();
                    let start = rng.below(len);
                    let n = 1 + rng.below((256 << 10).min(len - start));
                    let end = start + n - 1;
                    l.ranges.fetch_add(1, Ordering::Relaxed);
                    let req = http
                        .get(&url)
                        .header("Range", format!("bytes={start}-{end}"));
                    let (v, h) = fetch(&l, req, 206, &want[start..=end], None).await;
                    let v = match (v, h) {
                        (Verdict::Ok, Some(h)) => {
                            let cr = h.get("content-range").and_then(|v| v.to_str().ok());
                            if cr == Some(&format!("bytes {start}-{end}/{len}")) {
                                Verdict::Ok
                            } else {
                                Verdict::Wrong(format!("Content-Range {cr:?}"))
                            }
                        }
                        (v, _) => v,
                    };
                    l.record(v, &format!("GET {path} bytes={start}-{end}"), name);
                }
            }
            _ => {
                if spec.images.is_empty() {
                    return;
                }
                let (ns, repo, tag, idx) = &spec.images[rng.below(spec.images.len())];
                let index = &spec.objects[idx];
                let man = |r: &str| format!("{base}/v2/{repo}/manifests/{r}?ns={ns}");
                let v = head(
                    &l,
                    http.head(man(tag)).header("Accept", ACCEPT),
                    index.len(),
                    Some(idx),
                )
                .await;
                let cut = !matches!(v, Verdict::Ok);
                l.record(v, &format!("HEAD {repo}:{tag}"), name);
                if cut {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
                l.manifests.fetch_add(1, Ordering::Relaxed);
                let req = http
                    .get(man(&format!("sha256:{idx}")))
                    .header("Accept", ACCEPT);
                let (v, _) = fetch(&l, req, 200, index, None).await;
                let ok = matches!(v, Verdict::Ok);
                l.record(v, &format!("GET {repo}@{idx}"), name);
                if !ok {
                    continue;
                }
                // One platform of the index, as a node pulls its own.
                let doc: serde_json::Value = serde_json::from_slice(index).unwrap();
                let ms = doc["manifests"].as_array().unwrap();
                let d = ms[rng.below(ms.len())]["digest"].as_str().unwrap();
                let d = d.trim_start_matches("sha256:").to_string();
                let m = &spec.objects[&d];
                l.manifests.fetch_add(1, Ordering::Relaxed);
                let req = http
                    .get(man(&format!("sha256:{d}")))
                    .header("Accept", ACCEPT);
                let (v, _) = fetch(&l, req, 200, m, None).await;
                let ok = matches!(v, Verdict::Ok);
                l.record(v, &format!("GET {repo}@{d}"), name);
                if !ok {
                    continue;
                }
                let doc: serde_json::Value = serde_json::from_slice(m).unwrap();
                let mut blobs = vec![doc["config"]["digest"].as_str().unwrap().to_string()];
                for layer in doc["layers"].as_array().unwrap() {
                    blobs.push(layer["digest"].as_str().unwrap().to_string());
                }
                for b in blobs {
                    let hexd = b.trim_start_matches("sha256:");
                    let want = &spec.objects[hexd];
                    l.blobs.fetch_add(1, Ordering::Relaxed);
                    let url = format!("{base}/v2/{repo}/blobs/{b}?ns={ns}");
                    let (v, _) = fetch(&l, http.get(url), 200, want, None).await;
                    l.record(v, &format!("GET {repo} blob {b}"), name);
                }
            }
        }
    }
}

async fn probe(base: String, l: Arc<Ledger>, deadline: Instant) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    while Instant::now() < deadline {
        for (p, max) in [("healthz", &l.healthz_max_ms), ("readyz", &l.readyz_max_ms)] {
            let t = Instant::now();
            let r = http.get(format!("{base}/{p}")).send().await;
            let ms = t.elapsed().as_millis() as u64;
            l.probes.fetch_add(1, Ordering::Relaxed);
            // A refused connection (a killed replica) is not a slow probe.
            if r.as_ref().is_ok_and(|r| r.status().is_success()) || ms > 100 {
                max.fetch_max(ms, Ordering::Relaxed);
            }
            if p == "readyz" && !r.is_ok_and(|r| r.status().is_success()) {
                l.readyz_not_ok.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 5 {
        eprintln!("usage: chaos_client SPEC SECONDS CLIENTS SEED");
        std::process::exit(2);
    }
    let spec = Arc::new(load(&a[1]));
    let secs: u64 = a[2].parse().expect("SECONDS");
    let clients: usize = a[3].parse().expect("CLIENTS");
    let seed: u64 = a[4].parse().expect("SEED");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let l = Arc::new(Ledger::default());
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut tasks = Vec::new();
        for (_, base) in &spec.replicas {
            tasks.push(tokio::spawn(probe(base.clone(), l.clone(), deadline)));
        }
        for id in 0..clients {
            tasks.push(tokio::spawn(client(
                spec.clone(),
                l.clone(),
                id,
                seed,
                deadline,
            )));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "LEDGER answers={} ok={} cuts={} wrong={} timeouts={} bytes={} heads={} whole={} ranges={} slow={} manifests={} blobs={} probes={} healthz_max_ms={} readyz_max_ms={} readyz_not_ok={}",
        g(&l.answers),
        g(&l.ok),
        g(&l.cuts),
        g(&l.wrong),
        g(&l.timeouts),
        g(&l.bytes),
        g(&l.heads),
        g(&l.whole),
        g(&l.ranges),
        g(&l.slow),
        g(&l.manifests),
        g(&l.blobs),
        g(&l.probes),
        g(&l.healthz_max_ms),
        g(&l.readyz_max_ms),
        g(&l.readyz_not_ok),
    );
}
