//! Running the `talos-gen` binary as a CLI.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The built `talos-gen` binary.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_talos-gen"))
}

/// Run `talos-gen args...` with `stdin` fed in; returns the output.
pub fn run(args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = super::Proc::spawn("talos-gen", cmd);
    {
        let mut sin = child.child().stdin.take().expect("stdin");
        if let Some(data) = stdin {
            sin.write_all(data).expect("write stdin");
        }
    }
    child.wait_with_output()
}

/// `talos-gen mirror cert` into `dir`: `ca.crt`, `tls.crt` and `tls.key`
/// for 127.0.0.1 and localhost (a TLS service or upstream on loopback).
pub fn mirror_cert(dir: &std::path::Path) {
    let d = dir.display().to_string();
    let o = run(
        &[
            "mirror",
            "cert",
            "--output-dir",
            &d,
            "--name",
            "127.0.0.1",
            "--name",
            "localhost",
        ],
        None,
    );
    assert!(
        o.status.success(),
        "mirror cert: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// [`run`], as `(exit code, stdout, stderr)` (-1 when killed by a signal).
pub fn run_text(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let out = run(args, stdin);
    (out.status.code().unwrap_or(-1), stdout(&out), stderr(&out))
}

/// `talos-gen args...` with `RUST_LOG=warn` and no stdin; the output.
pub fn talos_gen(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run talos-gen")
}

/// Assert that `o` (a step named `what`) exited 0, showing its exit code,
/// stdout and stderr if not; `(stdout, stderr)`.
pub fn ok(o: &Output, what: &str) -> (String, String) {
    let (out, err) = (stdout(o), stderr(o));
    assert!(
        o.status.success(),
        "{what} failed ({:?}): {out}\n{err}",
        o.status.code()
    );
    (out, err)
}

/// Start `talos-gen serve` with a fresh `--cache-dir` and `args` (after
/// `serve`), the environment changed by `env` (a `None` value removes the
/// variable), and read its log to the `listening` line: that line (the
/// service is stopped then), or its exit code and what it logged before.
pub fn serve_listening(
    args: &[&str],
    env: &[(&str, Option<&str>)],
) -> Result<String, (i32, String)> {
    use std::io::BufRead;
    let cache = tempfile::tempdir().unwrap();
    let mut c = Command::new(bin());
    c.args(["serve", "--cache-dir"])
        .arg(cache.path())
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let mut child = super::Proc::spawn("talos-gen serve", c);
    let stderr = child.child().stderr.take().unwrap();
    let mut seen = String::new();
    for line in std::io::BufReader::new(stderr).lines() {
        let line = line.unwrap();
        if line.contains("listening") {
            child.kill();
            return Ok(line);
        }
        seen.push_str(&line);
        seen.push('\n');
    }
    let code = child
        .wait_exit(std::time::Duration::from_secs(20))
        .and_then(|st| st.code())
        .unwrap_or(-1);
    Err((code, seen))
}

/// `talos-gen mirror sync --config CONFIG --cache-dir CACHE extra...`.
pub fn mirror_sync(config: &Path, cache: &Path, extra: &[&str]) -> Output {
    let head = [
        "mirror",
        "sync",
        "--config",
        config.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    talos_gen(&[&head[..], extra].concat())
}

/// Carry a store across the gap: `mirror export` of `from` (limited to
/// `config` when given) into the tar `bundle`, then `mirror import` of it
/// into `to`; each step must succeed.
pub fn carry(from: &Path, bundle: &Path, to: &Path, config: Option<&Path>) {
    let mut export = vec![
        "mirror",
        "export",
        "--cache-dir",
        from.to_str().unwrap(),
        "--output",
        bundle.to_str().unwrap(),
    ];
    if let Some(c) = config {
        export.extend(["--config", c.to_str().unwrap()]);
    }
    ok(&talos_gen(&export), "mirror export");
    let import = [
        "mirror",
        "import",
        bundle.to_str().unwrap(),
        "--cache-dir",
        to.to_str().unwrap(),
    ];
    ok(&talos_gen(&import), "mirror import");
}
