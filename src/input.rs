//! Reading a file the user named by a flag (`--config`, `--with-secrets`,
//! `--values`, `--matrix`, `--api-token-file`, `--tls-cert`, ...): like
//! every other input, bounded and never stuck on what is not a file.
//!
//! The file is opened `O_NONBLOCK` (a FIFO without a writer, or a device,
//! never holds the open), then looked at: a regular file (links followed:
//! a Kubernetes Secret or ConfigMap volume is links) is read; a pipe is
//! read only where [`Kind::FileOrPipe`] says so (a shell's `<(...)`, which
//! has a writer); a device (`/dev/zero`), a directory or a socket is
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
pub fn open(path: &Path, kind: Kind) -> std::io::Result<(std::fs::File, std::fs::Metadata)> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = f.metadata()?;
    let ft = meta.file_type();
    if ft.is_fifo() && kind == Kind::FileOrPipe {
        // Reads of a pipe wait for its writer, as `cat` does.
        if let Ok(fl) = rustix::fs::fcntl_getfl(&f) {
            let _ = rustix::fs::fcntl_setfl(&f, fl - rustix::fs::OFlags::NONBLOCK);
        }
    } else if !ft.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok((f, meta))
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
}
