//! A small load client for `bench/load.sh` (wrk cannot send HEAD: it waits
//! for a body). `CLIENTS` tasks, each with its own keep-alive connection,
//! rotate through the request kinds for `SECONDS`, read every body to the
//! end, and count anything but the expected status as an error.
//!
//! ```text
//! loadgen BASE CLIENTS SECONDS KINDS ARTIFACT SIZE MANIFEST BLOB...
//!   KINDS: comma list of get,range,head,blob
//! ```
//! Prints one `LOAD` line: requests, errors, req/s, p50/p90/p99/max ms, bytes.

use std::time::{Duration, Instant};

use futures::StreamExt;

const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json";

#[derive(Clone, Copy)]
enum Kind {
    Get,
    Range,
    Head,
    Blob,
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 9 {
        eprintln!("usage: loadgen BASE CLIENTS SECONDS KINDS ARTIFACT SIZE MANIFEST BLOB...");
        std::process::exit(2);
    }
    let base = a[1].clone();
    let clients: usize = a[2].parse().expect("CLIENTS");
    let secs: u64 = a[3].parse().expect("SECONDS");
    let kinds: Vec<Kind> = a[4]
        .split(',')
        .map(|k| match k {
            "get" => Kind::Get,
            "range" => Kind::Range,
            "head" => Kind::Head,
            "blob" => Kind::Blob,
            _ => panic!("unknown kind {k}"),
        })
        .collect();
    let artifact = a[5].clone();
    let size: u64 = a[6].parse().expect("SIZE");
    let manifest = a[7].clone();
    let blobs: Vec<String> = a[8..].to_vec();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients {
            // One client per task: one keep-alive connection each, like wrk.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap();
            let (base, artifact, manifest, blobs, kinds) = (
                base.clone(),
                artifact.clone(),
                manifest.clone(),
                blobs.clone(),
                kinds.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut lat: Vec<u32> = Vec::new();
                let (mut errors, mut bytes) = (0u64, 0u64);
                let mut n = c; // stagger the rotation across clients
                let mut seed = (c as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                while Instant::now() < deadline {
                    n += 1;
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let kind = kinds[n % kinds.len()];
                    let (req, want) = match kind {
                        Kind::Get => (client.get(format!("{base}{artifact}")), 200),
                        Kind::Range => {
                            let start = seed % size.saturating_sub(65536).max(1);
                            (
                                client
                                    .get(format!("{base}{artifact}"))
                                    .header("Range", format!("bytes={start}-{}", start + 65535)),
                                206,
                            )
                        }
                        Kind::Head => (
                            client
                                .head(format!("{base}{manifest}"))
                                .header("Accept", ACCEPT),
                            200,
                        ),
                        Kind::Blob => (
                            client.get(format!("{base}{}", blobs[(n / kinds.len()) % blobs.len()])),
                            200,
                        ),
                    };
                    let t = Instant::now();
                    match req.send().await {
                        Ok(resp) => {
                            let ok = resp.status().as_u16() == want;
                            let mut body = resp.bytes_stream();
                            let mut failed = false;
                            while let Some(chunk) = body.next().await {
                                match chunk {
                                    Ok(b) => bytes += b.len() as u64,
                                    Err(_) => {
                                        failed = true;
                                        break;
                                    }
                                }
                            }
                            if !ok || failed {
                                errors += 1;
                            }
                        }
                        Err(_) => errors += 1,
                    }
                    lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                (lat, errors, bytes)
            }));
        }
        let mut all = Vec::new();
        let (mut errors, mut bytes) = (0, 0);
        for t in tasks {
            let (l, e, b) = t.await.unwrap();
            all.extend(l);
            errors += e;
            bytes += b;
        }
        let took = started.elapsed().as_secs_f64();
        all.sort_unstable();
        let pct = |p: f64| -> f64 {
            if all.is_empty() {
                return 0.0;
            }
            let i = ((all.len() as f64 * p).ceil() as usize).clamp(1, all.len()) - 1;
            all[i] as f64 / 1000.0
        };
        println!(
            "LOAD requests={} errors={} rps={:.0} p50_ms={:.1} p90_ms={:.1} p99_ms={:.1} max_ms={:.1} bytes={} secs={:.1}",
            all.len(),
            errors,
            all.len() as f64 / took,
            pct(0.50),
            pct(0.90),
            pct(0.99),
            pct(1.0),
            bytes,
            took
        );
    });
}
