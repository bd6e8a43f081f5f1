//! Every process a test starts is stopped when the test panics (issue 24):
//! a test body that panics while holding a `serve`, a `serve` inside a PID
//! namespace of its own (the shape of the leftover `serve ... --offline`
//! found 27 minutes after a suite: `unshare` was killed, what it had forked
//! lived on) and nginx; afterwards none of them is running.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use crate::support::{self, Nginx, NginxOpts, Service, eventually_some};

/// Running processes whose command line has an argument containing `needle`.
fn running_with_arg(needle: &str) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next())
            .is_none_or(|s| s == "Z" || s == "X");
        let args: Vec<String> = cmd
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !zombie && args.iter().any(|a| a.contains(needle)) {
            out.push((pid, args.join(" ")));
        }
    }
    out
}

#[test]
fn a_test_that_panics_holding_services_leaves_no_process_running() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().to_str().unwrap().to_string();
    let (plain, pidns, root) = (
        dir.path().join("plain"),
        dir.path().join("pidns"),
        dir.path().join("root"),
    );
    std::fs::create_dir_all(&root).unwrap();
    // `unshare --pid --fork` as the store tests run a second process, with
    // no --kill-child: the harness itself must stop what `unshare` forked.
    let pidns_ok = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let seen = std::sync::Mutex::new(Vec::new());
    let ng_prefix = std::sync::Mutex::new(String::new());
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let _svc = Service::start(&["--cache-dir", plain.to_str().unwrap(), "--offline"]);
        let _pod = pidns_ok.then(|| {
            Service::start_under(
                &["unshare", "--pid", "--fork", "--mount-proc"],
                &["--cache-dir", pidns.to_str().unwrap(), "--offline"],
            )
        });
        let ng = Nginx::start(&root, NginxOpts::default());
        let prefix = ng.prefix.path().to_str().unwrap().to_string();
        let mut all = running_with_arg(&mark);
        all.extend(running_with_arg(&prefix));
        *seen.lock().unwrap() = all;
        *ng_prefix.lock().unwrap() = prefix;
        panic!("a deliberate panic while holding serve, serve in a PID namespace and nginx");
    }));
    assert!(r.is_err(), "the body panicked");
    let seen = seen.into_inner().unwrap();
    let ng_prefix = ng_prefix.into_inner().unwrap();
    // serve, unshare + the serve it forked (when namespaces work), nginx
    let want = if pidns_ok { 4 } else { 2 };
    assert!(
        seen.len() >= want,
        "the processes were not all seen running: {seen:#?}"
    );
    if !pidns_ok {
        support::skip("unshare --pid does not work here: the PID-namespace part was not run");
    }
    eventually_some(
        "every process the panicking test started to be gone",
        Duration::from_secs(10),
        || {
            let mut left = running_with_arg(&mark);
            left.extend(running_with_arg(&ng_prefix));
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still running: {left:#?}"))
            }
        },
    );
}
