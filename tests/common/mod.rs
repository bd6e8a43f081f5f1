//! Shared support for integration tests: the reference data in `../shared`,
//! and running the `talos-gen` binary.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// `../shared` beside the repository (or `TALOS_GEN_REFERENCE_DIR`). When it
/// is absent the test says so and is skipped (`None`), unless
/// `TALOS_GEN_REQUIRE_REFERENCE=1`, which makes it fail instead (CI sets it).
pub fn reference_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("TALOS_GEN_REFERENCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    if dir.join("spec").is_dir() {
        return Some(dir);
    }
    if std::env::var("TALOS_GEN_REQUIRE_REFERENCE").as_deref() == Ok("1") {
        panic!(
            "reference data not found at {} (set TALOS_GEN_REFERENCE_DIR); TALOS_GEN_REQUIRE_REFERENCE=1 forbids skipping",
            dir.display()
        );
    }
    eprintln!("SKIP: reference data not found at {}", dir.display());
    None
}

/// The built `talos-gen` binary.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talos-gen"))
}

/// Run `talos-gen args...` with `stdin` fed in; returns the output.
pub fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn talos-gen");
    {
        let mut sin = child.stdin.take().expect("stdin");
        if let Some(data) = stdin {
            sin.write_all(data).expect("write stdin");
        }
    }
    child.wait_with_output().expect("wait talos-gen")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
