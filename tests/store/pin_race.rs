//! Issue 48, item 1, on a real bucket: Garage 2.5 ignores conditional
//! writes, so the store lock (a lease object) orders one process only. A
//! replica's commit of K reads no entry and sends its entry write; a fault
//! proxy before the bucket (tests/support/fault_proxy.rs: a real bucket
//! cannot be made to hold one PUT while other clients go through) holds
//! that write while `mirror sync` writes K pinned, then lets it land. K
//! stays pinned with the mirror's digest: its pin record stands whatever
//! the entry says, and a replica bounded to 1 byte, which evicts all it
//! can at start, leaves K's object in the bucket. (On main, 20169a0: the
//! entry read back `pinned=false`, nothing recorded the pin, and the
//! bounded replica deleted the mirror's object.)

use std::time::Duration;

use crate::support;
use crate::support::factory::{A, Factory, S, V, image_path};
use crate::support::fault_proxy::FaultProxy;
use crate::support::garage::Garage;
use crate::support::{Service, curl, sha256_hex};

const PREFIX: &str = "pinrace";

fn replica(f: &Factory, g: &Garage, endpoint: &str, name: &str, extra: &[&str]) -> Service {
    let spool = f.dir.path().join(format!("spool-{name}"));
    std::fs::create_dir_all(&spool).unwrap();
    Service::builder()
        .arg("--cache-dir")
        .arg(&spool)
        .args(["--factory-url", &f.nginx.url()])
        .args(["--store", &format!("s3://{}/{PREFIX}", g.bucket)])
        .args(["--s3-endpoint", endpoint])
        .args(["--upstream-timeout", "20s"])
        .args(["--local-cache-max-size", "0"])
        .env("AWS_ACCESS_KEY_ID", &g.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &g.secret)
        .args(extra)
        .start()
}

/// The bucket's records of `key`: (entry, pin record), as JSON.
fn records(g: &Garage, key: &str) -> (Option<serde_json::Value>, Option<serde_json::Value>) {
    let hex = sha256_hex(key.as_bytes());
    let read = |name: String| {
        let folder = if name.ends_with(".pin") {
            "pins"
        } else {
            "index"
        };
        let path = format!("{PREFIX}/{folder}/{name}");
        g.list(0, &format!("{PREFIX}/{folder}/"))
            .contains(&path)
            .then(|| serde_json::from_slice(&g.get(0, &path)).unwrap())
    };
    (read(format!("{hex}.json")), read(format!("{hex}.pin")))
}

#[test]
fn a_replica_write_held_past_mirror_sync_never_unpins_the_key() {
    let Some(bin) = support::garage::binary() else {
        return;
    };
    let g = Garage::cluster(&bin, 1);
    let f = Factory::new(2, 0, &[A], None);
    let key = format!("image/{S}/{V}/{A}");
    let hex = sha256_hex(key.as_bytes());
    let proxy = FaultProxy::start(&g.endpoint(0));
    proxy.hold_at("PUT", &format!("/{PREFIX}/index/{hex}.json"));
    let one = replica(&f, &g, &proxy.url(), "one", &[]);
    // A client's GET: the replica fills K and commits it; its entry write
    // is held at the proxy.
    let url = format!("{}{}", one.url(), image_path(A));
    let client = std::thread::spawn(move || curl(&[&url]));
    assert!(
        proxy.wait_held(Duration::from_secs(30)),
        "the replica's entry write never came: {}",
        one.log_text()
    );
    // Meanwhile the mirror job, straight to the bucket, stores K pinned.
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
    let mirrored = sha256_hex(&f.xz);
    let (entry, pin) = records(&g, &key);
    assert_eq!(entry.unwrap()["pinned"], true, "the mirror's entry");
    assert_eq!(pin.unwrap()["digest"], mirrored.as_str());
    // The held write lands.
    proxy.release();
    let r = client.join().unwrap();
    assert_eq!(r.status, 200);
    assert!(r.body == f.xz);
    support::eventually(
        "the replica's late entry write",
        Duration::from_secs(20),
        || records(&g, &key).0.is_some_and(|e| e["pinned"] == false),
    );
    eprintln!("pin race: the replica's entry write landed after the mirror's pin");
    let (_, pin) = records(&g, &key);
    let pin = pin.expect("the pin record stands");
    assert_eq!(
        (pin["pinned"].clone(), pin["digest"].clone()),
        (true.into(), mirrored.clone().into())
    );
    drop(one);
    // A replica bounded to 1 byte evicts every object it may at start:
    // K's stays, pinned.
    let gets = f.gets(A);
    let tiny = replica(&f, &g, &g.endpoint(0), "tiny", &["--cache-max-size", "1"]);
    let object = format!("{PREFIX}/objects/sha256/{mirrored}");
    let url = format!("{}{}", tiny.url(), image_path(A));
    let r = curl(&[&url]);
    assert_eq!(r.status, 200, "{}", tiny.log_text());
    assert!(
        g.list(0, &format!("{PREFIX}/objects/")).contains(&object),
        "the mirror's object was evicted: {}",
        tiny.log_text()
    );
    assert_eq!(f.gets(A), gets, "served from the bucket, not fetched again");
}
