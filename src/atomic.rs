//! The one way a command writes a file (`machineconfig -o` and
//! `--output-secrets`, `datavolume -o`, `mirror export` in all three
//! formats, `mirror cert`): a reader of the path sees the old file or the
//! new one whole, never half of one, and a crash leaves no half file at the
//! path.
//!
//! 1. A temp file beside the target, `<name>.<pid>-<8 random>.partial`
//!    (created new: never an existing file, never a link followed; two
//!    writers of one target each have their own), locked (`flock`) while it
//!    is written, so a second writer of the same target, sweeping what a
//!    killed writer left, never takes it.
//! 2. Written, `fsync`ed.
//! 3. Moved over the target (`rename`; or, for a file that must never be
//!    replaced, a move that fails when the target exists: `RENAME_NOREPLACE`
//!    or a hard link), then the directory `fsync`ed so the move survives a
//!    crash.
//!
//! On any failure the temp file is removed. What a killed writer left
//! (same shape of name, regular file, no process holding its lock, older
//! than a minute) is removed by the next writer of the same target;
//! nothing else beside it is touched. The store's own files are written by
//! `store::local`'s `write_atomic` (temp files in the store's `tmp/`, under
//! the store's lock), not here.

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

/// May the write replace a file already at the target?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Yes (the rename replaces it in one step).
    Yes,
    /// Never: the write fails with `AlreadyExists`, the existing file as it
    /// was, even when another writer made it a moment ago.
    Never,
}

/// How old a leftover temp file must be before a later writer removes it
/// (one just made may not be locked yet by the writer making it).
const LEFTOVER_AGE: Duration = Duration::from_secs(60);

/// Write `target` as the module says: `fill` writes the temp file (created
/// with `mode`, less the umask). The target's directory must exist. What a
/// killed writer of the same target left goes first (a caller writing many
/// files into a directory it holds locked may sweep it once itself,
/// [`sweep_leftovers`]; what is left for this name is then nothing).
pub fn write(
    target: &Path,
    mode: u32,
    replace: Replace,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let (dir, name) = split(target)?;
    if let Some(name) = name.to_str() {
        sweep_leftovers(dir, |t| t == name, LEFTOVER_AGE);
    }
    let mut prefix = name.to_os_string();
    prefix.push(format!(".{}-", std::process::id()));
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".partial")
        .rand_bytes(8)
        .permissions(std::fs::Permissions::from_mode(mode))
        .tempfile_in(dir)?;
    tmp.as_file().lock()?;
    fill(tmp.as_file_mut())?;
    tmp.as_file().sync_all()?;
    match replace {
        Replace::Yes => tmp.persist(target).map(drop).map_err(|e| e.error)?,
        Replace::Never => tmp
            .persist_noclobber(target)
            .map(drop)
            .map_err(|e| e.error)?,
    }
    sync_dir(dir)
}

/// [`write`] of `bytes`.
pub fn write_bytes(target: &Path, mode: u32, replace: Replace, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    write(target, mode, replace, |f| f.write_all(bytes))
}

/// The target's directory (`.` for a bare name) and file name.
fn split(target: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    let name = target.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file name", target.display()),
        )
    })?;
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok((dir, name))
}

/// `fsync` of a directory, so a rename in it survives a crash. A
/// filesystem that cannot sync a directory (`EINVAL`) has nothing to sync.
fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir)?.sync_all() {
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Ok(()),
        r => r,
    }
}

/// The target `file` is a temp file of (`<target>.<pid>-<8 letters or
/// digits>.partial`), if it is one.
fn temp_target(file: &str) -> Option<&str> {
    let (target, tail) = file.strip_suffix(".partial")?.rsplit_once('.')?;
    let (pid, rand) = tail.split_once('-')?;
    let shaped = !target.is_empty()
        && !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && rand.len() == 8
        && rand.bytes().all(|b| b.is_ascii_alphanumeric());
    shaped.then_some(target)
}

/// Remove what killed writers left in `dir`: a temp file of the module's
/// shape whose target `ours` accepts, a regular file, at least `min_age`
/// old (one just made may not be locked yet by the writer making it; zero
/// for a caller that holds a lock no other writer gets past), that no
/// process holds locked (a running writer holds its own). Nothing else is
/// touched. Best effort.
pub fn sweep_leftovers(dir: &Path, ours: impl Fn(&str) -> bool, min_age: Duration) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let file = e.file_name();
        if !file.to_str().and_then(temp_target).is_some_and(&ours)
            || !e.file_type().is_ok_and(|t| t.is_file())
        {
            continue;
        }
        let young = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age < min_age);
        if young && !min_age.is_zero() {
            continue;
        }
        if let Ok(f) = File::open(e.path())
            && f.try_lock().is_ok()
        {
            tracing::info!(path = %e.path().display(), "removing what an interrupted write left");
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_whole_replaces_or_never_and_leaves_nothing_beside() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("out.yaml");
        write_bytes(&t, 0o600, Replace::Yes, b"one").unwrap();
        assert_eq!(std::fs::read(&t).unwrap(), b"one");
        assert_eq!(
            std::fs::metadata(&t).unwrap().permissions().mode() & 0o777,
            0o600
        );
        write_bytes(&t, 0o600, Replace::Yes, b"two").unwrap();
        assert_eq!(std::fs::read(&t).unwrap(), b"two");
        let e = write_bytes(&t, 0o600, Replace::Never, b"three").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&t).unwrap(), b"two");
        // A failing fill leaves the target as it was and no temp file.
        let e = write(&t, 0o600, Replace::Yes, |f| {
            use std::io::Write;
            f.write_all(b"half")?;
            Err(io::Error::other("stop"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "stop");
        assert_eq!(std::fs::read(&t).unwrap(), b"two");
        assert_eq!(names(d.path()), ["out.yaml"]);
        // A link at the target is replaced by the file, never followed.
        let other = d.path().join("other");
        std::fs::write(&other, b"theirs").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        write_bytes(&link, 0o644, Replace::Yes, b"mine").unwrap();
        assert_eq!(std::fs::read(&other).unwrap(), b"theirs");
        assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
    }

    /// Two writers of one target at once (the fixed `<path>.partial` of
    /// `tree_export` made them write one temp file): each writes its own,
    /// and the target is one of them whole.
    #[test]
    fn concurrent_writers_of_one_target_never_mix() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("asset.raw.xz");
        let bodies: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i; 1 << 20]).collect();
        std::thread::scope(|s| {
            for b in &bodies {
                let t = &t;
                s.spawn(move || {
                    for _ in 0..4 {
                        write(t, 0o644, Replace::Yes, |f| {
                            use std::io::Write;
                            // In pieces, so the writers interleave.
                            for c in b.chunks(64 << 10) {
                                f.write_all(c)?;
                                std::thread::yield_now();
                            }
                            Ok(())
                        })
                        .unwrap();
                    }
                });
            }
        });
        let got = std::fs::read(&t).unwrap();
        assert!(bodies.contains(&got), "a mixed file");
        assert_eq!(names(d.path()), ["asset.raw.xz"]);
        // Never: of writers racing to make one file, one wins, the rest
        // are refused (a secrets bundle made twice at once).
        let once = d.path().join("secrets.yaml");
        let won: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8u8)
                .map(|i| {
                    let once = &once;
                    s.spawn(move || write_bytes(once, 0o600, Replace::Never, &[i; 4096]).is_ok())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap() as usize).sum()
        });
        assert_eq!(won, 1);
        assert_eq!(std::fs::read(&once).unwrap().len(), 4096);
    }

    #[test]
    fn a_killed_writers_leftover_goes_with_the_next_write_and_nothing_else() {
        let d = tempfile::tempdir().unwrap();
        let p = |n: &str| d.path().join(n);
        let old = std::time::SystemTime::now() - Duration::from_secs(120);
        let aged = |n: &str| {
            std::fs::write(p(n), b"x").unwrap();
            File::options()
                .write(true)
                .open(p(n))
                .unwrap()
                .set_modified(old)
                .unwrap();
        };
        aged("out.tar.4242-0badf00d.partial"); // a killed writer's
        aged("out.tar.4244-Ab3dE9zq.partial"); // a killed writer's
        aged("out.tar.4245-running.partial"); // not the shape (7 letters)
        aged("out.tar.x.4246-0badf00d.partial"); // another target's
        aged("out.tar.mine.partial"); // the user's
        aged("out.tar.4247-1badf00d.partial"); // held by a running writer
        let held = File::open(p("out.tar.4247-1badf00d.partial")).unwrap();
        held.lock().unwrap();
        std::fs::write(p("out.tar.4243-0badf00e.partial"), b"y").unwrap(); // just made
        write_bytes(&p("out.tar"), 0o644, Replace::Yes, b"tar").unwrap();
        assert_eq!(
            names(d.path()),
            [
                "out.tar",
                "out.tar.4243-0badf00e.partial",
                "out.tar.4245-running.partial",
                "out.tar.4247-1badf00d.partial",
                "out.tar.mine.partial",
                "out.tar.x.4246-0badf00d.partial",
            ]
        );
        drop(held);
        assert_eq!(temp_target("a.1-abcdefgh.partial"), Some("a"));
        assert_eq!(temp_target("a.b.1-abcdefgh.partial"), Some("a.b"));
        assert_eq!(temp_target("a.-abcdefgh.partial"), None);
        assert_eq!(temp_target("a.1-abc.defg.partial"), None);
        assert_eq!(temp_target(".1-abcdefgh.partial"), None);
        assert_eq!(temp_target("a.1-abcdefgh"), None);
    }
}
