//! The Garage test cluster itself (tests/support/garage.rs), with curl as
//! the S3 client (`--aws-sigv4`): three nodes on loopback, replication
//! factor 3; an object put through one node is read whole through another,
//! and with one node down the cluster still reads and writes. The S3 store
//! backend's tests build on this cluster.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Instant;

use crate::support::garage::Garage;
use sha2::{Digest, Sha256};

/// curl with SigV4 for the cluster's key, `-sS` and `--fail-with-body`.
/// `payload` is the body's SHA-256 (hex): S3 wants it in
/// `x-amz-content-sha256`, which curl (7.88) does not add by itself; curl
/// signs it with the other headers.
fn s3(g: &Garage, payload: &str, args: &[&str]) -> Output {
    Command::new(support::require_tool("curl"))
        .args(["-sS", "--fail-with-body", "--max-time", "30"])
        .arg("-H")
        .arg(format!("x-amz-content-sha256: {payload}"))
        .arg("--aws-sigv4")
        .arg(format!("aws:amz:{}:s3", g.region))
        .arg("--user")
        .arg(format!("{}:{}", g.key_id, g.secret))
        .args(args)
        .output()
        .expect("running curl")
}

fn put(g: &Garage, node: usize, key: &str, file: &Path) {
    let url = format!("{}/{}/{key}", g.endpoint(node), g.bucket);
    let body = std::fs::read(file).unwrap();
    let sha = hex::encode(Sha256::digest(&body));
    let data = format!("@{}", file.display());
    let out = s3(g, &sha, &["-X", "PUT", "--data-binary", &data, &url]);
    assert!(
        out.status.success(),
        "PUT {url}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn get(g: &Garage, node: usize, key: &str) -> Vec<u8> {
    let url = format!("{}/{}/{key}", g.endpoint(node), g.bucket);
    let out = s3(g, &hex::encode(Sha256::digest(b"")), &[&url]);
    assert!(
        out.status.success(),
        "GET {url}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn random(len: usize) -> Vec<u8> {
    use std::io::Read;
    let mut v = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut v)
        .unwrap();
    v
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && Sha256::digest(a) == Sha256::digest(b)
}

#[test]
fn three_nodes_replicate_and_survive_one_down() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let t = Instant::now();
    let mut g = Garage::cluster(&bin, 3);
    eprintln!("garage: 3-node cluster up in {:?}", t.elapsed());
    assert_eq!(g.endpoints().len(), 3);
    let dir = tempfile::tempdir().unwrap();

    // 3 MiB + 1: several Garage blocks (1 MiB each) and a short last one.
    let a = random((3 << 20) + 1);
    let a_path = dir.path().join("a");
    std::fs::write(&a_path, &a).unwrap();
    put(&g, 0, "objects/a", &a_path);
    assert!(same(&get(&g, 2, "objects/a"), &a), "a through node 2");

    // Without credentials the bucket is closed.
    let anon = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("{}/{}/objects/a", g.endpoint(1), g.bucket))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&anon.stdout), "403");

    eprintln!("garage: a put and got at {:?}", t.elapsed());
    g.stop_node(1);
    assert!(same(&get(&g, 0, "objects/a"), &a), "a with node 1 down");
    eprintln!("garage: first get with node 1 down at {:?}", t.elapsed());
    assert!(
        same(&get(&g, 2, "objects/a"), &a),
        "a via node 2, node 1 down"
    );
    let b = random(200 << 10);
    let b_path = dir.path().join("b");
    std::fs::write(&b_path, &b).unwrap();
    put(&g, 0, "objects/b", &b_path);
    assert!(
        same(&get(&g, 2, "objects/b"), &b),
        "b written with node 1 down"
    );

    eprintln!("garage: node 1 down, a got and b put at {:?}", t.elapsed());
    // Node 1 comes back and serves both, also what was written without it.
    g.start_node(1);
    eprintln!("garage: node 1 back at {:?}", t.elapsed());
    assert!(
        same(&get(&g, 1, "objects/a"), &a),
        "a via the restarted node"
    );
    assert!(
        same(&get(&g, 1, "objects/b"), &b),
        "b via the restarted node"
    );
    eprintln!("garage: whole test {:?}", t.elapsed());
}
