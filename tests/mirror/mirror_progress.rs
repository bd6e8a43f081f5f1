//! `mirror sync` on a real terminal, as a person watches it: run inside
//! tmux (Debian `tmux`) against an upstream that hangs before the head and
//! one that stalls half-way (`tests/support/bad_upstream.rs`), with good
//! items finishing (and logging their lines) meanwhile; the pane is read
//! with `tmux capture-pane -p`. An item whose length is unknown is a
//! spinner, never a bar; a stalled item says `stalled` with its elapsed
//! time and no bar; every log line is whole, on a line of its own.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::bad_upstream::BadUpstream;

const S: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

/// The fault a request gets, by the Talos version in its path.
use crate::support::bad_upstream::by_version as fault;

/// A tmux server of our own (`-S`, a socket in the test's directory),
/// killed on drop with all it ran (the server daemonizes, so it is no
/// `Proc`: its command carries the harness's mark instead).
struct Tmux {
    socket: std::path::PathBuf,
    mark: String,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new(support::require_tool("tmux"));
        c.arg("-S").arg(&self.socket).args(["-f", "/dev/null"]);
        c
    }

    /// A detached 250x40 session running `script`.
    fn start(dir: &Path, script: &Path) -> Tmux {
        let mut t = Tmux {
            socket: dir.join("tmux.sock"),
            mark: String::new(),
        };
        let mut new_session = t.cmd();
        t.mark = support::mark_command(&mut new_session);
        let st = new_session
            .args(["new-session", "-d", "-s", "sync", "-x", "250", "-y", "40"])
            .arg(format!("sh {}", script.display()))
            .env_remove("TMUX")
            .status()
            .expect("tmux new-session");
        assert!(st.success(), "tmux new-session: {st}");
        t
    }

    fn capture(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "sync"])
            .output()
            .expect("tmux capture-pane");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
        support::stop_marked("tmux", &self.mark);
    }
}

fn line_of<'a>(pane: &'a str, needle: &str) -> Option<&'a str> {
    pane.lines().find(|l| l.contains(needle))
}

/// `   item  4s ...`: the prefix and an elapsed time such as `4s`.
fn elapsed_of(line: &str) -> Option<u64> {
    let rest = line.trim_start().strip_prefix("item")?.trim_start();
    rest.split_whitespace()
        .next()?
        .strip_suffix('s')?
        .parse()
        .ok()
}

#[test]
fn mirror_sync_progress_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let good = support::xz_disk(dir.path(), 1, 1).1;
    let up = BadUpstream::start(good, Duration::from_millis(300), fault);
    let cfg = dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!(
            "schematics: [{S}]\ntalosVersions: [v1.13.1, v1.13.2, v1.13.6, v1.13.7, v1.13.8]\nimages: [openstack-amd64.raw.xz]\ninstallers: []\n"
        ),
    )
    .unwrap();
    let script = dir.path().join("run.sh");
    let done = dir.path().join("done");
    std::fs::write(
        &script,
        format!(
            "'{}' mirror sync --config '{}' --cache-dir '{}' --factory-url '{}' --upstream-timeout 8s\necho exit=$? > '{}'\nsleep 60\n",
            env!("CARGO_BIN_EXE_talos-gen"),
            cfg.display(),
            dir.path().join("store").display(),
            up.url(),
            done.display()
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    let tmux = Tmux::start(dir.path(), &script);
    let hang = format!("{S}/v1.13.1/");
    let stall = format!("{S}/v1.13.2/");

    // Early: the good items are done and logged; the hanging item (no
    // response head, length unknown) is a spinner, not a bar; the stalled
    // one (Content-Length known, half the body) is a bar, not full.
    let mut early = String::new();
    while t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(200));
        early = tmux.capture();
        if ["v1.13.6/", "v1.13.7/", "v1.13.8/"]
            .iter()
            .all(|v| early.contains(&format!("ok     image /image/{S}/{v}")))
            && t0.elapsed() > Duration::from_millis(1200)
        {
            break;
        }
    }
    let h =
        line_of(&early, &hang).unwrap_or_else(|| panic!("no line for the hanging item:\n{early}"));
    assert!(
        !h.contains('['),
        "unknown length drawn as a bar: {h:?}\n{early}"
    );
    assert!(h.contains("0 B"), "{h:?}");
    assert!(elapsed_of(h).is_some(), "no elapsed time: {h:?}");
    let s =
        line_of(&early, &stall).unwrap_or_else(|| panic!("no line for the stalled item:\n{early}"));
    assert!(
        s.contains("[=") && s.contains(" ]"),
        "a partial bar: {s:?}\n{early}"
    );

    // After STALL_AFTER (3s) without a byte: both say `stalled`, with their
    // elapsed time, and no bar.
    let mut late = String::new();
    while t0.elapsed() < Duration::from_secs(7) {
        std::thread::sleep(Duration::from_millis(200));
        late = tmux.capture();
        let stalled = |n: &str| line_of(&late, n).is_some_and(|l| l.contains("stalled"));
        if stalled(&hang) && stalled(&stall) && t0.elapsed() > Duration::from_millis(4500) {
            break;
        }
    }
    eprintln!("early pane:\n{early}\nlate pane:\n{late}");
    assert!(!done.exists(), "the sync ended before the check:\n{late}");
    for (what, needle) in [("hanging", &hang), ("stalled", &stall)] {
        let l = line_of(&late, needle)
            .unwrap_or_else(|| panic!("no line for the {what} item:\n{late}"));
        assert!(
            l.contains("stalled, no bytes for "),
            "{what}: {l:?}\n{late}"
        );
        assert!(!l.contains('['), "{what}: a bar on a stalled line: {l:?}");
        let e = elapsed_of(l).unwrap_or_else(|| panic!("{what}: no elapsed time: {l:?}"));
        assert!((3..=8).contains(&e), "{what}: elapsed {e}s: {l:?}");
    }
    let s = line_of(&late, &stall).unwrap();
    assert!(
        s.contains(" of "),
        "bytes so far of the known length: {s:?}"
    );

    // Every log line is whole and alone on its line; no bar line holds a
    // piece of a log line.
    for v in ["v1.13.6/", "v1.13.7/", "v1.13.8/"] {
        let name = format!("image /image/{S}/{v}openstack-amd64.raw.xz");
        let l = late
            .lines()
            .find(|l| l.contains(&name))
            .unwrap_or_else(|| panic!("no log line for {v}:\n{late}"));
        assert!(
            l.starts_with(&format!("ok     {name}: fetched 1 object (")),
            "{l:?}\n{late}"
        );
        // Whole to its end: `... in 0.4s` (nothing found stored is not said).
        let took = l.trim_end().rsplit_once(") in ").map(|(_, t)| t);
        assert!(
            took.and_then(|t| t.strip_suffix('s'))
                .is_some_and(|t| t.parse::<f64>().is_ok()),
            "{l:?}\n{late}"
        );
    }
    for l in late.lines() {
        let bar = l.trim_start().starts_with("item ") || l.trim_start().starts_with("total ");
        if bar {
            assert!(
                !l.contains("ok     ") && !l.contains("FAILED"),
                "{l:?}\n{late}"
            );
        } else if !l.trim().is_empty() {
            assert!(
                l.starts_with("ok     ") || l.starts_with("FAILED "),
                "a line that is neither a bar nor a whole log line: {l:?}\n{late}"
            );
        }
    }
    drop(tmux);
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
}
