//! Issue 20 item 3: a bundle is checked against the content addresses it
//! claims. A `talos-gen-mirror.json` that maps `oci/blob/sha256:A`,
//! `oci/manifest/sha256:A` or `schematic/A` to an object B is refused at
//! `mirror import` (named, exit 1), a store that holds such a key is bad
//! in `mirror verify`, and `serve --offline` never answers digest A with
//! B's bytes. Sparse, special and oversized tar members are refused before
//! a byte is written (a 10 KiB file claiming a 2 GiB sparse member used to
//! write 2 GiB into the store).

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{Service, curl, sha256_hex};

const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

fn talos_gen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_talos-gen"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn entry(key: &str, digest: &str, size: usize) -> serde_json::Value {
    serde_json::json!({
        "key": key, "digest": digest, "size": size, "content_type": null,
        "fetched": 0, "pinned": true, "meta": {}
    })
}

fn header(name: &str, size: u64, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_entry_type(kind);
    h.set_cksum();
    h
}

/// The bundle's index member naming `entries`.
fn append_index(t: &mut tar::Builder<std::fs::File>, entries: &[serde_json::Value]) {
    let index = serde_json::to_vec(&serde_json::json!({"format": 1, "entries": entries})).unwrap();
    let h = header(
        "talos-gen-mirror.json",
        index.len() as u64,
        tar::EntryType::Regular,
    );
    t.append(&h, &index[..]).unwrap();
}

/// A bundle: the index, then `(member name, bytes)`.
fn bundle(path: &Path, entries: &[serde_json::Value], members: &[(String, Vec<u8>)]) {
    let f = std::fs::File::create(path).unwrap();
    let mut t = tar::Builder::new(f);
    append_index(&mut t, entries);
    for (name, data) in members {
        let h = header(name, data.len() as u64, tar::EntryType::Regular);
        t.append(&h, &data[..]).unwrap();
    }
    t.finish().unwrap();
}

/// The objects of `cache` other than the import's own report (the
/// `status/mirror-sync` document `mirror import` writes, failed or not, so
/// the status page shows it): what a bundle put there.
fn bundle_objects(cache: &Path) -> usize {
    let report_index = cache.join("index").join(format!(
        "{}.json",
        crate::support::sha256_hex(b"status/mirror-sync")
    ));
    let report = std::fs::read_to_string(report_index)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["digest"].as_str().map(str::to_string));
    std::fs::read_dir(cache.join("objects/sha256"))
        .map(|d| {
            d.flatten()
                .filter(|e| Some(e.file_name().to_string_lossy().into_owned()) != report)
                .count()
        })
        .unwrap_or(0)
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = e.metadata().unwrap();
            n += if m.is_dir() {
                dir_bytes(&e.path())
            } else {
                m.len()
            };
        }
    }
    n
}

#[test]
fn a_bundle_that_lies_about_a_digest_is_refused_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let a_bytes = b"the real blob A".to_vec();
    let b_bytes = b"an impostor object B, not A".to_vec();
    let (a, b) = (sha256_hex(&a_bytes), sha256_hex(&b_bytes));
    let tar = dir.path().join("lies.tar");
    bundle(
        &tar,
        &[
            entry(&format!("oci/blob/sha256:{a}"), &b, b_bytes.len()),
            entry(&format!("oci/manifest/sha256:{a}"), &b, b_bytes.len()),
            entry(&format!("schematic/{a}"), &b, b_bytes.len()),
            // The one honest key of the file.
            entry(&format!("oci/blob/sha256:{b}"), &b, b_bytes.len()),
        ],
        &[(format!("objects/sha256/{b}"), b_bytes.clone())],
    );
    let cache = dir.path().join("cache");
    let c = cache.to_str().unwrap();
    let o = talos_gen(&["mirror", "import", tar.to_str().unwrap(), "--cache-dir", c]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    for k in [
        format!("oci/blob/sha256:{a}"),
        format!("oci/manifest/sha256:{a}"),
        format!("schematic/{a}"),
    ] {
        assert!(
            text(&o).contains(&format!(
                "{k} names sha256:{a} but its object is sha256:{b}"
            )),
            "{k}: {}",
            text(&o)
        );
    }
    assert!(text(&o).contains("1 keys, 1 objects"), "{}", text(&o));
    // verify is clean: only the honest key went in.
    let o = talos_gen(&["mirror", "verify", "--cache-dir", c]);
    assert!(o.status.success(), "{}", text(&o));

    // A store that holds such a key anyway (an older talos-gen imported
    // it): verify names it, drops it, exit 1.
    let index = cache.join("index");
    let honest_key = format!("oci/blob/sha256:{b}");
    let lying_key = format!("oci/blob/sha256:{a}");
    let name = |k: &str| index.join(format!("{}.json", sha256_hex(k.as_bytes())));
    let honest = std::fs::read_to_string(name(&honest_key)).unwrap();
    let lying = honest.replace(&honest_key, &lying_key);
    assert_ne!(honest, lying);
    std::fs::write(name(&lying_key), &lying).unwrap();
    // serve --offline never answers A with B's bytes (a HEAD neither).
    {
        let svc = Service::builder()
            .args(["--offline", "--cache-dir", c])
            .start();
        let url = |d: &str| format!("{}/v2/installer/{S}/blobs/sha256:{d}", svc.url());
        let r = curl(&["-I", &url(&a)]);
        assert_eq!(r.status, 404, "HEAD of A");
        let r = curl(&[&url(&a)]);
        assert_eq!(
            r.status,
            404,
            "GET of A: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_ne!(r.body, b_bytes);
        let r = curl(&[&url(&b)]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, b_bytes);
    }
    std::fs::write(name(&lying_key), &lying).unwrap();
    let o = talos_gen(&["mirror", "verify", "--cache-dir", c]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "{lying_key} names sha256:{a} but its object is sha256:{b}"
        )),
        "{}",
        text(&o)
    );
    assert!(!name(&lying_key).exists(), "the lying key is dropped");
    let o = talos_gen(&["mirror", "verify", "--cache-dir", c]);
    assert!(o.status.success(), "verify again: {}", text(&o));
    assert!(name(&honest_key).exists(), "the honest key stays");
}

#[test]
fn sparse_special_and_oversized_members_are_refused_before_a_byte_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let c = cache.to_str().unwrap();
    let two_gib: u64 = 2 << 30;
    let digest = "ab".repeat(32);
    // A GNU sparse member declared 2 GiB, holding one 512-byte block.
    let tar = dir.path().join("sparse.tar");
    {
        let f = std::fs::File::create(&tar).unwrap();
        let mut t = tar::Builder::new(f);
        let entries = [entry(
            &format!("oci/blob/sha256:{digest}"),
            &digest,
            two_gib as usize,
        )];
        append_index(&mut t, &entries);
        let mut h = tar::Header::new_gnu();
        h.set_path(format!("objects/sha256/{digest}")).unwrap();
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_entry_type(tar::EntryType::GNUSparse);
        h.set_size(512);
        {
            let gnu = h.as_gnu_mut().unwrap();
            // One data block at the very end: 2 GiB of hole before it.
            let off = two_gib - 512;
            gnu.sparse[0].set_offset(off);
            gnu.sparse[0].set_length(512);
            gnu.set_real_size(two_gib);
        }
        h.set_cksum();
        t.append(&h, &[7u8; 512][..]).unwrap();
        t.finish().unwrap();
    }
    assert!(std::fs::metadata(&tar).unwrap().len() < 16 << 10);
    // A symbolic link and a FIFO member, and a regular member bigger than
    // the index says, in a second file.
    let small = b"0123456789".to_vec();
    let sd = sha256_hex(&small);
    let tar2 = dir.path().join("special.tar");
    {
        let f = std::fs::File::create(&tar2).unwrap();
        let mut t = tar::Builder::new(f);
        let fifo_digest = "cd".repeat(32);
        let link_digest = "ef".repeat(32);
        let entries = [
            entry(&format!("oci/blob/sha256:{fifo_digest}"), &fifo_digest, 0),
            entry(&format!("oci/blob/sha256:{link_digest}"), &link_digest, 0),
            entry(&format!("oci/blob/sha256:{sd}"), &sd, 4),
        ];
        append_index(&mut t, &entries);
        let h = header(
            &format!("objects/sha256/{fifo_digest}"),
            0,
            tar::EntryType::Fifo,
        );
        t.append(&h, &[][..]).unwrap();
        let mut h = header(
            &format!("objects/sha256/{link_digest}"),
            0,
            tar::EntryType::Symlink,
        );
        h.set_link_name("/etc/passwd").unwrap();
        h.set_cksum();
        t.append(&h, &[][..]).unwrap();
        let h = header(
            &format!("objects/sha256/{sd}"),
            small.len() as u64,
            tar::EntryType::Regular,
        );
        t.append(&h, &small[..]).unwrap();
        t.finish().unwrap();
    }
    for (file, named) in [
        (&tar, vec![format!("objects/sha256/{digest}")]),
        (
            &tar2,
            vec![
                format!("objects/sha256/{}", "cd".repeat(32)),
                format!("objects/sha256/{}", "ef".repeat(32)),
                format!("objects/sha256/{sd}"),
            ],
        ),
    ] {
        let started = std::time::Instant::now();
        let o = talos_gen(&["mirror", "import", file.to_str().unwrap(), "--cache-dir", c]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        for n in &named {
            assert!(text(&o).contains(n.as_str()), "{n}: {}", text(&o));
        }
        assert_eq!(bundle_objects(&cache), 0, "nothing of the bundle stored");
        let spool = dir_bytes(&cache);
        assert!(spool < 1 << 20, "{spool} bytes written under the cache");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "refused at once"
        );
    }
}

/// Hostile pass: `mirror import` of a FIFO nobody writes to used to hang
/// in `open` for ever; a device is refused naming it. Both exit 2 at once.
#[test]
fn import_never_waits_on_a_fifo_or_reads_a_device() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("bundle.tar");
    crate::support::mkfifo(&fifo);
    let cache = dir.path().join("cache");
    let c = cache.to_str().unwrap();
    for (file, why) in [
        (fifo.to_str().unwrap(), "empty"),
        ("/dev/zero", "not a regular file"),
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_talos-gen"))
            .args(["mirror", "import", file, "--cache-dir", c])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if started.elapsed() > std::time::Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(status.and_then(|s| s.code()), Some(2), "{file}: {err}");
        assert!(err.contains(file) && err.contains(why), "{file}: {err}");
    }
}

/// A hostile pass: `mirror export --output` replaced whatever was there (a
/// user's notes, a tar of theirs, the file behind a link). It now writes a
/// new path or a bundle an export wrote before, and refuses anything else
/// (exit 1, the file as it was), through a temp file of its own name.
#[test]
fn export_never_replaces_a_file_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let data = b"an object".to_vec();
    let d = sha256_hex(&data);
    bundle(
        &p("in.tar"),
        &[entry("factory/x/a", &d, data.len())],
        &[(format!("objects/sha256/{d}"), data)],
    );
    let cache = p("cache");
    let o = talos_gen(&[
        "mirror",
        "import",
        p("in.tar").to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let export = |out: &Path| {
        talos_gen(&[
            "mirror",
            "export",
            "--cache-dir",
            cache.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ])
    };
    // A user's file, a tar of theirs, a link to a file, a directory.
    std::fs::write(p("notes.md"), b"my notes").unwrap();
    let mut theirs = tar::Builder::new(std::fs::File::create(p("theirs.tar")).unwrap());
    theirs
        .append(
            &header("photo.jpg", 3, tar::EntryType::Regular),
            &b"jpg"[..],
        )
        .unwrap();
    theirs.finish().unwrap();
    drop(theirs);
    std::os::unix::fs::symlink(p("notes.md"), p("link.tar")).unwrap();
    std::fs::create_dir(p("adir")).unwrap();
    for (name, why) in [
        ("notes.md", "is not a bundle of mirror export"),
        ("theirs.tar", "is not a bundle of mirror export"),
        ("link.tar", "a symbolic link"),
        ("adir", "not a regular file"),
    ] {
        let before = std::fs::read(p(name)).ok();
        let o = export(&p(name));
        assert_eq!(o.status.code(), Some(1), "{name}: {}", text(&o));
        assert!(
            text(&o).contains(why) && text(&o).contains("not overwritten"),
            "{name}: {}",
            text(&o)
        );
        assert_eq!(std::fs::read(p(name)).ok(), before, "{name} as it was");
    }
    assert!(
        std::fs::symlink_metadata(p("link.tar"))
            .unwrap()
            .is_symlink()
    );
    // What a killed export left beside its output goes with the next
    // export to that output; a name of another shape stays.
    std::fs::write(p("out.tar.4242-0badf00d.partial"), b"half a tar").unwrap();
    std::fs::File::options()
        .write(true)
        .open(p("out.tar.4242-0badf00d.partial"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(120))
        .unwrap();
    // One just made (an export that has not locked it yet) stays.
    std::fs::write(p("out.tar.4243-0badf00e.partial"), b"being written").unwrap();
    std::fs::write(p("out.tar.mine.partial"), b"the user's").unwrap();
    // A new path, then the same path again (the export it wrote).
    for _ in 0..2 {
        let o = export(&p("out.tar"));
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = talos_gen(&[
        "mirror",
        "import",
        p("out.tar").to_str().unwrap(),
        "--cache-dir",
        p("again").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // Nothing of the export's own is left beside its output.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "adir",
            "again",
            "cache",
            "in.tar",
            "link.tar",
            "notes.md",
            "out.tar",
            "out.tar.4243-0badf00e.partial",
            "out.tar.mine.partial",
            "theirs.tar"
        ]
    );
}

/// A hostile pass: an index that gives one key two objects was imported
/// without a word (one of the two won). Neither is imported now, the line
/// names the key and both objects (exit 1); the rest of the bundle is.
#[test]
fn a_key_the_index_gives_two_objects_is_not_imported() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        b"object A".to_vec(),
        b"object B".to_vec(),
        b"object C".to_vec(),
    );
    let (da, db, dc) = (sha256_hex(&a), sha256_hex(&b), sha256_hex(&c));
    let tar = dir.path().join("b.tar");
    bundle(
        &tar,
        &[
            entry("factory/x/two", &da, a.len()),
            entry("factory/x/two", &db, b.len()),
            entry("factory/x/one", &dc, c.len()),
            entry("factory/x/one", &dc, c.len()),
        ],
        &[
            (format!("objects/sha256/{da}"), a),
            (format!("objects/sha256/{db}"), b),
            (format!("objects/sha256/{dc}"), c),
        ],
    );
    let cache = dir.path().join("cache");
    let o = talos_gen(&[
        "mirror",
        "import",
        tar.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "factory/x/two: the index gives it 2 objects (sha256:{da}, sha256:{db}); not imported"
        )) || text(&o).contains(&format!(
            "factory/x/two: the index gives it 2 objects (sha256:{db}, sha256:{da}); not imported"
        )),
        "{}",
        text(&o)
    );
    let indexed = |k: &str| {
        cache
            .join("index")
            .join(format!("{}.json", sha256_hex(k.as_bytes())))
            .exists()
    };
    assert!(!indexed("factory/x/two"));
    assert!(indexed("factory/x/one"));
}
