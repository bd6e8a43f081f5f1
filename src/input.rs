//! Reading a file the user named by a flag (`--config`, `--with-secrets`,
//! `--values`, `--matrix`, `--api-token-file`, `--tls-cert`, ...): like
//! every other input, bounded and never stuck on what is not a file.
//!
//! The file is opened `O_NONBLOCK` (a FIFO without a writer, or a device,
//! never holds the open), then looked at: a regular file (links followed:
//! a Kubernetes Secret or ConfigMap volume is links) is read; a pipe is
//! read only where [`Kind::FileOrPipe`] says so (a shell's `<(...)`, or a
//! FIFO whose writer comes later: waited for, as `cat` does, and read to
//! its end); a device (`/dev/zero`), a directory or a socket is
//! refused. At most `max` bytes are read, also from a file that grows or a
//! pipe that never ends: more is refused, never held in memory.

use std::io::Read;
use std::path::Path;

/// Largest input file read by default: 16 MiB (configs, values, patches
/// and bundles are KiB).
pub const MAX_INPUT: u64 = 16 << 20;

/// What an input may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file only (certificates, keys, the API token).
    File,
    /// A regular file or a pipe (`--values <(helm get values ...)`).
    FileOrPipe,
}

/// `path` opened for reading as the module says (no bound on its size:
/// for a stream the caller reads as it goes, e.g. a `mirror import` tar).
pub fn open(path: &Path, kind: Kind) -> std::io::Result<(Opened, std::fs::Metadata)> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    let ft = meta.file_type();
    let pipe = ft.is_fifo() && kind == Kind::FileOrPipe;
    if !pipe && !ft.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok((
        Opened {
            f,
            pipe,
            started: false,
        },
        meta,
    ))
}

/// Longest a pipe's first writer is waited for: a FIFO nobody opens for
/// writing is bad input after this, never a hang nor an empty file.
pub const PIPE_WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An input opened by [`open`]: a regular file, read as any; or a pipe,
/// read as `cat` reads it: each read waits (`poll`) until its writer
/// wrote or closed, so a writer that opens late is waited for (at most
/// [`PIPE_WRITER_WAIT`] for its first bytes or its close) and its bytes
/// read to their end. (A read of the non-blocking end before any writer
/// opened is an end of file at once: the pipe would be taken for an
/// empty file.)
#[derive(Debug)]
pub struct Opened {
    f: std::fs::File,
    pipe: bool,
    /// A writer was heard from (bytes or a close): no bound from then on.
    started: bool,
}

impl Read for Opened {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use rustix::event::{PollFd, PollFlags, poll};
        loop {
            if self.pipe {
                // Ready when there are bytes, or a writer that opened
                // after us has closed (Linux reports no hang-up for a
                // writer that never came).
                let mut fds = [PollFd::new(&self.f, PollFlags::IN)];
                let first = rustix::event::Timespec {
                    tv_sec: PIPE_WRITER_WAIT.as_secs() as _,
                    tv_nsec: 0,
                };
                match poll(&mut fds, (!self.started).then_some(&first)) {
                    Ok(0) if !self.started => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "a pipe no writer opened within {}s: it stayed empty",
                                PIPE_WRITER_WAIT.as_secs()
                            ),
                        ));
                    }
                    Ok(_) => self.started = true,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            match self.f.read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && self.pipe => continue,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

/// The bytes of `path`, at most `max` of them (see the module).
pub fn read(path: &Path, max: u64, kind: Kind) -> std::io::Result<Vec<u8>> {
    let (f, meta) = open(path, kind)?;
    if meta.file_type().is_file() && meta.len() > max {
        return Err(too_big(max));
    }
    let mut out = Vec::with_capacity(meta.len().min(max) as usize);
    f.take(max + 1).read_to_end(&mut out)?;
    if out.len() as u64 > max {
        return Err(too_big(max));
    }
    Ok(out)
}

/// [`read`], as UTF-8 text.
pub fn read_string(path: &Path, max: u64, kind: Kind) -> std::io::Result<String> {
    String::from_utf8(read(path, max, kind)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

fn too_big(max: u64) -> std::io::Error {
    std::io::Error::other(format!("larger than {max} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_only_bounded() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"hello").unwrap();
        assert_eq!(read(&f, 5, Kind::File).unwrap(), b"hello");
        assert!(
            read(&f, 4, Kind::File)
                .unwrap_err()
                .to_string()
                .contains("larger")
        );
        let e = read(Path::new("/dev/zero"), 10, Kind::FileOrPipe).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read(d.path(), 10, Kind::File).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let fifo = d.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        // No writer: refused at once, not waited on.
        let e = read(&fifo, 10, Kind::File).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(read_string(&f, 10, Kind::File).is_ok());
    }

    /// Issue 50 item 2: a pipe whose writer opens late is read to its end,
    /// never taken for an empty file.
    #[test]
    fn a_pipe_is_read_to_its_end_when_its_writer_comes_late() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || read_string(&fifo, 100, Kind::FileOrPipe))
        };
        // The writer opens only once the reader is waiting on the pipe
        // (its open blocks until then), and writes in two pieces.
        let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        std::io::Write::write_all(&mut w, b"version: ").unwrap();
        std::io::Write::write_all(&mut w, b"\"v1.35\"\n").unwrap();
        drop(w);
        assert_eq!(reader.join().unwrap().unwrap(), "version: \"v1.35\"\n");
    }
}
