//! The command-line edge: parse flags, call the core, print, map errors to
//! the contract's exit codes (0 done, 1 refused, 2 bad input). Each
//! subcommand lives in its own file; nothing here holds domain logic.

use clap::{Parser, Subcommand};

use crate::error::Error;

/// `println!` to standard output through [`write_stdout`]: a reader that
/// closed the pipe (`| head`) is a quiet end, never a panic.
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::cli::write_stdout(&format!("{}\n", format_args!($($t)*)))
    };
}

/// `print!` through [`write_stdout`].
macro_rules! out {
    ($($t:tt)*) => {
        $crate::cli::write_stdout(&format!($($t)*))
    };
}

pub mod common;
pub mod datavolume;
pub mod datavolume_catalog;
pub mod images;
pub mod machineconfig;
pub mod matrix;
pub mod mirror;
pub mod schematic;
pub mod serve;
pub mod upgrade;

#[derive(Debug, Parser)]
#[command(
    name = "talos-gen",
    version,
    about = "Talos worker configs, the support matrix, and a caching proxy for the Talos Image Factory"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The support matrix: which Kubernetes versions each Talos minor runs.
    Matrix(matrix::MatrixArgs),
    /// Schematic IDs and canonical encodings, identical to the Image Factory's.
    Schematic(schematic::SchematicArgs),
    /// The images a worker pulls (installer, kubelet, pause), one per line.
    Images(images::ImagesArgs),
    /// Write a worker machine config (all documents).
    Machineconfig(Box<machineconfig::MachineconfigArgs>),
    /// Kubelet reservations, eviction thresholds and autoscaler capacity for a node group.
    KubeletReservations(machineconfig::ReservationsArgs),
    /// Run the HTTP service: Image Factory cache, OCI pull-through, API.
    Serve(Box<serve::ServeArgs>),
    /// Fill, check and carry the store for air-gapped sites.
    Mirror(mirror::MirrorArgs),
    /// Plan an upgrade by Talos' own rules: its steps, and every image they pull.
    Upgrade(upgrade::UpgradeArgs),
    /// Write the CDI DataVolume that imports a disk image from the service, with its checksum.
    Datavolume(datavolume::DatavolumeArgs),
    /// Print the version and the Talos and Kubernetes ranges the embedded matrix knows.
    Version,
}

/// Examples of the commands whose own file has none (every `--help` ends
/// with examples): command path, text.
const EXAMPLES: &[(&[&str], &str)] = &[
    (
        &["matrix"],
        "Examples:\n  talos-gen matrix\n  talos-gen matrix --json\n  talos-gen matrix check --talos v1.14 --kubernetes v1.35",
    ),
    (
        &["schematic"],
        "Examples:\n  talos-gen schematic id cozystack\n  talos-gen schematic canonical my-schematic.yaml",
    ),
    (
        &["schematic", "canonical"],
        "Examples:\n  talos-gen schematic canonical cozystack\n  talos-gen schematic canonical my-schematic.yaml | sha256sum",
    ),
    (
        &["images"],
        "Examples:\n  # what a Cozystack worker pool pulls (a bare minor: the newest stable release / known patch)\n  talos-gen images --talos v1.14 --kubernetes v1.35 --schematic cozystack\n\n  # through an internal registry, as JSON\n  talos-gen images --talos v1.13.9 --kubernetes v1.35.6 --installer-repository registry.internal/talos/installer --json",
    ),
    (
        &["mirror"],
        "Examples:\n  talos-gen mirror plan --config mirror.yaml\n  talos-gen mirror sync --config mirror.yaml --cache-dir /var/cache/talos-gen\n  talos-gen mirror export --cache-dir /var/cache/talos-gen --output mirror.tar\n  talos-gen mirror import mirror.tar --cache-dir /var/cache/talos-gen",
    ),
    (
        &["mirror", "plan"],
        "Examples:\n  talos-gen mirror plan --config mirror/mirror.yaml\n  talos-gen mirror plan --config mirror.yaml --json | jq '.items | length'",
    ),
    (
        &["mirror", "verify"],
        "Examples:\n  talos-gen mirror verify --cache-dir /var/cache/talos-gen\n  talos-gen mirror verify --store s3://talos-gen/store --s3-endpoint http://s3.internal:3900",
    ),
    (
        &["mirror", "import"],
        "The import is recorded in the store: serve's status page and /metrics show it like a sync.\n\nExamples:\n  talos-gen mirror import /media/usb/mirror.tar --cache-dir /var/cache/talos-gen\n  talos-gen serve --offline --cache-dir /var/cache/talos-gen",
    ),
    (
        &["upgrade"],
        "Examples:\n  talos-gen upgrade plan --from-talos v1.11.6 --from-kubernetes 1.31.4 --to-talos v1.14.6 --to-kubernetes 1.36.3\n  talos-gen upgrade images --from-talos v1.11.6 --from-kubernetes 1.31.4 --to-talos v1.14.6 --to-kubernetes 1.36.3 --schematic cozystack",
    ),
    (
        &["version"],
        "Examples:\n  talos-gen version\n  talos-gen --version",
    ),
];

/// `c` with `text` as the `after_help` of its subcommand at `path`.
fn with_examples(c: clap::Command, path: &[&str], text: &'static str) -> clap::Command {
    match path.split_first() {
        None => c.after_help(text),
        Some((first, rest)) => c.mut_subcommand(*first, |s| with_examples(s, rest, text)),
    }
}

/// The clap command with what derive cannot say: a flag given twice takes
/// the last value (as kubectl and talosctl do), and `--version` prints the
/// ranges the embedded support matrix knows.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    fn last_wins(c: clap::Command) -> clap::Command {
        let names: Vec<String> = c
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        let mut c = c.args_override_self(true);
        for n in names {
            c = c.mut_subcommand(n, last_wins);
        }
        c
    }
    let mut c = last_wins(Cli::command());
    for (path, text) in EXAMPLES {
        c = with_examples(c, path, text);
    }
    // Parsing the matrix costs little, but only `--version` needs it.
    if std::env::args().any(|a| a == "--version") {
        c.long_version(&*Box::leak(version_text().into_boxed_str()))
    } else {
        c
    }
}

/// `talos-gen version`: the crate version and the embedded matrix's ranges.
pub fn version_text() -> String {
    let m = crate::matrix::Matrix::embedded();
    let entries = m.entries();
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return env!("CARGO_PKG_VERSION").to_string();
    };
    let kmin = entries
        .iter()
        .map(|e| e.kubernetes_min.core())
        .min()
        .unwrap_or_default();
    let kmax = entries
        .iter()
        .filter_map(|e| e.supported_minors().last().cloned())
        .max_by_key(|v| {
            crate::version::Version::parse(v)
                .map(|v| v.core())
                .unwrap_or_default()
        })
        .unwrap_or_default();
    // The newest released minor's newest release (a pending minor has
    // no release yet).
    let newest = entries
        .iter()
        .rev()
        .find(|e| e.pending.is_none())
        .and_then(|e| e.newest.as_ref())
        .map(|v| format!(" (newest release {v})"))
        .unwrap_or_default();
    let pending: String = entries
        .iter()
        .filter(|e| e.pending.is_some())
        .map(|e| format!(", {} unreleased", e.talos))
        .collect();
    let kubelet: Vec<String> = m.kubelet_table().map(|(k, _)| k).collect();
    format!(
        "{}\nTalos: {} to {}{newest}{pending}\nKubernetes: v{}.{} to {kmax}\nCozystack kubelet table: {}",
        env!("CARGO_PKG_VERSION"),
        first.talos,
        last.talos,
        kmin.0,
        kmin.1,
        kubelet.join(", ")
    )
}

/// Parse the process arguments, run, and return the exit code.
pub fn main() -> i32 {
    use clap::FromArgMatches;
    let cli = match command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(c) => c,
        Err(e) => {
            // clap prints help/version with exit 0; a usage error is one
            // line (the contract's), exit 2.
            use clap::error::ErrorKind;
            match e.kind() {
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                }
                _ => eprintln!("{}", usage_error_line(&e.render().to_string())),
            }
            return e.exit_code();
        }
    };
    let result = match cli.command {
        Command::Matrix(a) => matrix::run(a),
        Command::Schematic(a) => schematic::run(a),
        Command::Images(a) => images::run(a),
        Command::Machineconfig(a) => machineconfig::run(*a),
        Command::KubeletReservations(a) => machineconfig::run_reservations(a),
        Command::Serve(a) => serve::run(*a),
        Command::Mirror(a) => mirror::run(a),
        Command::Upgrade(a) => upgrade::run(a),
        Command::Datavolume(a) => datavolume::run(a),
        Command::Version => outln!("talos-gen {}", version_text()).map(|_| 0),
    };
    match result {
        Ok(code) => code,
        Err(e) => report(&e),
    }
}

/// clap's usage error as one line: `error: ` and its message, then its
/// tips ("tip: a similar argument exists: '--cache-dir'"), without the
/// usage and the pointer to `--help` that follow.
pub fn usage_error_line(text: &str) -> String {
    let mut line = String::new();
    for l in text.lines() {
        let l = l.trim();
        if l.starts_with("Usage:") || l.starts_with("For more information") {
            break;
        }
        if l.is_empty() {
            continue;
        }
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(l);
    }
    line
}

/// What [`write_stdout`]'s errors are about.
const STDOUT: &str = "writing standard output";

/// Write `text` to standard output and flush it. A closed stdout (the
/// reader of a pipe is gone: `talos-gen matrix --json | head -c 100`) is
/// an error [`report`] ends on quietly with exit 0: what was read was what
/// the reader wanted.
pub fn write_stdout(text: &str) -> crate::Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())
        .and_then(|_| o.flush())
        .map_err(|e| Error::io(STDOUT, e))
}

/// The reader of standard output went away (EPIPE).
fn stdout_closed(e: &Error) -> bool {
    matches!(e, Error::Io { context, source }
        if context == STDOUT && source.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Print one line naming the problem and return its exit code (a closed
/// standard output: nothing printed, exit 0).
pub fn report(e: &Error) -> i32 {
    if stdout_closed(e) {
        return 0;
    }
    eprintln!("talos-gen: {e}");
    e.exit_code()
}

/// [`read_input`] of a YAML (or JSON) file, its structure checked before any
/// parser sees it (`yaml::check_structure`: nesting, node count); the error
/// is one line naming the flag and the file.
pub fn read_yaml_input(path: &str, what: &str) -> crate::Result<String> {
    let text = read_input(path, what)?;
    let name = if path == "-" { "standard input" } else { path };
    crate::yaml::check_structure(&text, &format!("{what} {name}"))?;
    Ok(text)
}

/// Read a file argument, `-` meaning standard input.
pub fn read_input(path: &str, what: &str) -> crate::Result<String> {
    use std::io::Read;
    if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| Error::bad_input(format!("{what}: reading standard input: {e}")))?;
        Ok(s)
    } else {
        // A file or a pipe (`<(...)`), at most 16 MiB; never a device.
        crate::input::read_string(
            std::path::Path::new(path),
            crate::input::MAX_INPUT,
            crate::input::Kind::FileOrPipe,
        )
        .map_err(|e| Error::bad_input(format!("{what}: {path}: {e}")))
    }
}
