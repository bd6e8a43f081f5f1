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

/// `mirror sync` (or `import`) with stderr to a file (no terminal) and
/// progress lines every half second (`TALOS_GEN_PROGRESS_INTERVAL`, the
/// test's knob; 10 s by default): the running process and its stderr file.
fn no_terminal(args: &[&str], stderr: &Path) -> support::Proc {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_talos-gen"));
    cmd.args(args)
        .env("TALOS_GEN_PROGRESS_INTERVAL", "0.5")
        .stdout(std::fs::File::create(stderr.with_extension("out")).unwrap())
        .stderr(std::fs::File::create(stderr).unwrap());
    support::Proc::spawn("talos-gen mirror", cmd)
}

/// The files in a local store's spool (`tmp/`).
fn spool(store: &Path) -> Vec<String> {
    std::fs::read_dir(store.join("tmp"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// `mirror sync --config <cfg> --cache-dir <store> --factory-url <url>`
/// without a terminal, its stderr into `err`.
fn sync_without_terminal(cfg: &Path, store: &Path, url: &str, err: &Path) -> support::Proc {
    no_terminal(
        &[
            "mirror",
            "sync",
            "--config",
            cfg.to_str().unwrap(),
            "--cache-dir",
            store.to_str().unwrap(),
            "--factory-url",
            url,
        ],
        err,
    )
}

/// `progress <name>: X of Y (P%), R/s` lines in `text`.
fn progress_lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("progress {name}: ")))
        .collect()
}

/// Without a terminal (a CronJob's log) against a rate-limited upstream
/// (nginx `limit_rate`): a line per item in flight every interval, saying
/// how far it is of its known length and at what rate, then the item's own
/// line when it ends.
#[test]
fn mirror_sync_without_a_terminal_says_how_far_each_item_is() {
    use crate::support::factory::{A, Factory, S, V};
    let up = Factory::new(2, 1, &[A], Some("700k"));
    let cfg = up.dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}]\n"),
    )
    .unwrap();
    let err = up.dir.path().join("sync.err");
    let store = up.cache();
    let t0 = Instant::now();
    let mut p = sync_without_terminal(&cfg, &store, &up.nginx.url(), &err);
    let st = p.wait_exit(Duration::from_secs(60)).expect("the sync ends");
    let text = std::fs::read_to_string(&err).unwrap();
    eprintln!("{text}");
    assert_eq!(st.code(), Some(0), "{text}");
    let name = format!("image /image/{S}/{V}/{A}");
    let lines = progress_lines(&text, &name);
    // ~2 MiB at 700 KiB/s: about 3 s, a line every 0.5 s.
    assert!(
        lines.len() >= 3,
        "{:.1}s: {text}",
        t0.elapsed().as_secs_f64()
    );
    let total = talos_gen::text::human_size(up.xz.len() as u64);
    for l in &lines {
        assert!(l.contains(&format!(" of {total} (")), "{l:?}");
        assert!(l.ends_with("/s"), "a rate: {l:?}");
    }
    // The bytes done grow line by line; the item's own line ends it.
    let pct = |l: &str| -> u64 {
        l.rsplit_once(" (")
            .and_then(|(_, r)| r.split_once('%'))
            .and_then(|(p, _)| p.parse().ok())
            .unwrap()
    };
    assert!(pct(lines[lines.len() - 1]) > pct(lines[0]), "{lines:?}");
    let ok = text
        .lines()
        .position(|l| l.starts_with(&format!("ok     {name}: fetched")))
        .unwrap_or_else(|| panic!("no line for the item's end: {text}"));
    let last_progress = text
        .lines()
        .collect::<Vec<_>>()
        .iter()
        .rposition(|l| l.starts_with(&format!("progress {name}")))
        .unwrap();
    assert!(last_progress < ok, "{text}");
}

/// SIGTERM mid-sync (nginx `limit_rate` keeps an item in flight): exit
/// 143 within 10 s, after one line saying what was stored (an item stored
/// before) and what was not (the item in flight, how far it got), and its
/// temp file is gone from the store's spool. SIGINT is 130.
#[test]
fn sigterm_mid_sync_says_what_was_stored_and_leaves_no_temp_file() {
    use crate::support::factory::{A, A2, Factory, S, V};
    // A2 stored first from a quick upstream; A then in flight from a slow one.
    let quick = Factory::new(1, 1, &[A2], None);
    let slow = Factory::new(3, 1, &[A, A2], Some("300k"));
    let store = slow.cache();
    let run = |cfg: &Path, url: &str, err: &Path| sync_without_terminal(cfg, &store, url, err);
    let first = slow.dir.path().join("first.yaml");
    std::fs::write(
        &first,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A2}]\n"),
    )
    .unwrap();
    let mut p = run(
        &first,
        &quick.nginx.url(),
        &slow.dir.path().join("first.err"),
    );
    assert_eq!(
        p.wait_exit(Duration::from_secs(60)).unwrap().code(),
        Some(0)
    );

    for (signal, code) in [("-TERM", 143), ("-INT", 130)] {
        let cfg = slow.dir.path().join("mirror.yaml");
        std::fs::write(
            &cfg,
            format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}, {A2}]\n"),
        )
        .unwrap();
        let err = slow.dir.path().join(format!("sync{signal}.err"));
        let mut p = run(&cfg, &slow.nginx.url(), &err);
        let name = format!("image /image/{S}/{V}/{A}");
        // In flight: a progress line with bytes, and its temp file.
        crate::support::eventually("A in flight", Duration::from_secs(30), || {
            let text = std::fs::read_to_string(&err).unwrap_or_default();
            progress_lines(&text, &name)
                .iter()
                .any(|l| !l.contains(": 0 B of"))
                && !spool(&store).is_empty()
        });
        let st = Command::new("kill")
            .args([signal, &p.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let t = Instant::now();
        let st = p
            .wait_exit(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("still running 10 s after {signal}"));
        eprintln!("{signal}: exit {:?} after {:?}", st.code(), t.elapsed());
        let text = std::fs::read_to_string(&err).unwrap();
        eprintln!("{text}");
        assert_eq!(st.code(), Some(code), "{text}");
        let said: Vec<&str> = text.lines().filter(|l| l.contains("interrupted")).collect();
        assert_eq!(said.len(), 1, "one line: {text}");
        let l = said[0];
        let sig = &signal[1..];
        assert!(
            l.starts_with(&format!(
                "talos-gen: mirror sync: interrupted by SIG{sig} after "
            )),
            "{l}"
        );
        assert!(
            l.contains("stored 1 of ") && l.contains(&format!("/{A2}")),
            "A2 named stored: {l}"
        );
        let not = l
            .split("NOT stored")
            .nth(1)
            .unwrap_or_else(|| panic!("{l}"));
        assert!(
            not.contains(&format!("{name} (")),
            "A named not stored: {l}"
        );
        assert!(not.contains(" fetched, discarded)"), "{l}");
        assert!(
            spool(&store).is_empty(),
            "left in tmp/: {:?}",
            spool(&store)
        );
        // The store is whole: A2 stays, A is not in it.
        let verify = support::run_text(
            &["mirror", "verify", "--cache-dir", store.to_str().unwrap()],
            None,
        );
        assert_eq!(verify.0, 0, "{verify:?}");
        let a = store
            .join("objects/sha256")
            .join(support::sha256_hex(&slow.xz));
        assert!(!a.exists(), "A stored although interrupted");
        let a2 = store
            .join("objects/sha256")
            .join(support::sha256_hex(&quick.xz));
        assert!(a2.exists(), "A2 kept");
    }
}

/// `mirror import` of a tar that comes slowly (a pipe written at ~1 MiB/s):
/// progress lines without a terminal (the file's bytes, the rate, the
/// object being read), then SIGTERM: exit 143 within 10 s after one line
/// naming what was imported and what was not, no temp file left.
#[test]
fn mirror_import_without_a_terminal_says_how_far_and_stops_on_sigterm() {
    use crate::support::factory::{A, Factory, S, V};
    let up = Factory::new(4, 1, &[A], None);
    let cfg = up.dir.path().join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}]\n"),
    )
    .unwrap();
    let (code, _, e) = support::run_text(
        &[
            "mirror",
            "sync",
            "--config",
            cfg.to_str().unwrap(),
            "--cache-dir",
            up.cache().to_str().unwrap(),
            "--factory-url",
            &up.nginx.url(),
        ],
        None,
    );
    assert_eq!(code, 0, "{e}");
    let tar = up.dir.path().join("m.tar");
    let (code, _, e) = support::run_text(
        &[
            "mirror",
            "export",
            "--cache-dir",
            up.cache().to_str().unwrap(),
            "--output",
            tar.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{e}");
    let bytes = std::fs::read(&tar).unwrap();
    let fifo = up.dir.path().join("in.tar");
    crate::support::mkfifo(&fifo);
    let other = up.dir.path().join("other");
    let err = up.dir.path().join("import.err");
    let mut p = no_terminal(
        &[
            "mirror",
            "import",
            fifo.to_str().unwrap(),
            "--cache-dir",
            other.to_str().unwrap(),
        ],
        &err,
    );
    // The writer: 64 KiB every 60 ms until the reader goes.
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
            for c in bytes.chunks(64 << 10) {
                if f.write_all(c).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(60));
            }
        })
    };
    let line = crate::support::eventually_some("a progress line", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&err).unwrap_or_default();
        text.lines()
            .find(|l| l.starts_with("progress ") && l.contains("; now sha256:"))
            .map(str::to_string)
            .ok_or(text)
    });
    assert!(line.contains("so far") || line.contains(" of "), "{line}");
    assert!(line.contains("/s; now sha256:"), "{line}");
    p.term();
    let t = Instant::now();
    let st = p
        .wait_exit(Duration::from_secs(10))
        .expect("import ended within 10 s of SIGTERM");
    eprintln!("import: exit {:?} after {:?}", st.code(), t.elapsed());
    let text = std::fs::read_to_string(&err).unwrap();
    eprintln!("{text}");
    assert_eq!(st.code(), Some(143), "{text}");
    let said: Vec<&str> = text.lines().filter(|l| l.contains("interrupted")).collect();
    assert_eq!(said.len(), 1, "{text}");
    assert!(
        said[0].starts_with("talos-gen: mirror import: interrupted by SIGTERM; stored "),
        "{}",
        said[0]
    );
    assert!(said[0].contains("NOT stored: "), "{}", said[0]);
    assert!(
        said[0].contains("discarded"),
        "the object being read: {}",
        said[0]
    );
    writer.join().unwrap();
    assert!(
        spool(&other).is_empty(),
        "left in tmp/: {:?}",
        spool(&other)
    );
}

/// On a terminal (tmux) against a rate-limited upstream (nginx
/// `limit_rate`): the item's bar grows, and SIGTERM ends the sync with
/// exit 143 and its one line in the pane (kept as
/// `tests/artifacts/mirror-sync-sigterm.pane.txt`).
#[test]
fn mirror_sync_on_a_terminal_then_sigterm() {
    use crate::support::factory::{A, Factory, S, V};
    let up = Factory::new(3, 1, &[A], Some("300k"));
    let dir = up.dir.path();
    let cfg = dir.join("mirror.yaml");
    std::fs::write(
        &cfg,
        format!("schematics: [{S}]\ntalosVersions: [{V}]\nimages: [{A}]\n"),
    )
    .unwrap();
    let (pid, done) = (dir.join("pid"), dir.join("done"));
    let script = dir.join("run.sh");
    std::fs::write(
        &script,
        format!(
            "'{}' mirror sync --config '{}' --cache-dir '{}' --factory-url '{}' &\necho $! > '{}'\nwait $!\necho exit=$? > '{}'\nsleep 60\n",
            env!("CARGO_BIN_EXE_talos-gen"),
            cfg.display(),
            up.cache().display(),
            up.nginx.url(),
            pid.display(),
            done.display()
        ),
    )
    .unwrap();
    let tmux = Tmux::start(dir, &script);
    let name = format!("{S}/{V}/{A}");
    let before = crate::support::eventually_some("a growing bar", Duration::from_secs(20), || {
        let p = tmux.capture();
        match line_of(&p, &name) {
            Some(l) if l.contains("[=") && !l.contains(" 0 B/") => Ok(p),
            _ => Err(p),
        }
    });
    eprintln!("before SIGTERM:\n{before}");
    let pid = std::fs::read_to_string(&pid).unwrap();
    let st = Command::new("kill")
        .args(["-TERM", pid.trim()])
        .status()
        .unwrap();
    assert!(st.success());
    crate::support::eventually("the sync's end", Duration::from_secs(10), || done.exists());
    assert_eq!(std::fs::read_to_string(&done).unwrap().trim(), "exit=143");
    let pane = tmux.capture();
    let artifacts = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(
        artifacts.join("mirror-sync-sigterm.pane.txt"),
        format!("before SIGTERM:\n{before}\nafter:\n{pane}"),
    )
    .unwrap();
    eprintln!("after SIGTERM:\n{pane}");
    let said: Vec<&str> = pane
        .lines()
        .filter(|l| l.contains("interrupted by SIGTERM"))
        .collect();
    assert_eq!(said.len(), 1, "{pane}");
    assert!(said[0].contains("NOT stored"), "{pane}");
    // No bar is left drawn over or after the line.
    assert!(
        !pane.lines().any(|l| l.trim_start().starts_with("item ")),
        "{pane}"
    );
}
