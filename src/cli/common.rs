//! Flags several subcommands share, parsed once here.

use std::time::Duration;

use clap::Args;

use crate::upstream::Limits;

/// The bounds on waiting for an upstream (`serve`, `mirror sync`).
#[derive(Debug, Clone, Args)]
pub struct UpstreamArgs {
    /// Longest any one step of an upstream request may take: connecting,
    /// the response headers, the next body byte (30s, 2m, 1m30s, or plain
    /// seconds).
    /// A stream from the bucket of --store s3:// must also bring 1 MiB
    /// within each timeout.
    #[arg(
        long,
        env = "TALOS_GEN_UPSTREAM_TIMEOUT",
        default_value = duration_text(crate::upstream::DEFAULT_TIMEOUT),
        value_name = "DURATION",
        value_parser = duration_flag
    )]
    pub upstream_timeout: Duration,
    /// Slowest an upstream body may arrive, in bytes per second averaged
    /// over each --upstream-timeout window (a trickle is cut); 0 turns the
    /// floor off. Sizes as for --cache-max-size (1Ki, 64K, 1048576).
    #[arg(
        long,
        env = "TALOS_GEN_UPSTREAM_MIN_RATE",
        default_value = size_text(crate::upstream::DEFAULT_MIN_RATE),
        value_name = "BYTES",
        value_parser = rate_flag
    )]
    pub upstream_min_rate: u64,
}

impl UpstreamArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: self.upstream_timeout,
            min_rate: self.upstream_min_rate,
        }
    }
}

/// Where the store is (`serve`, `mirror sync|verify|export|import`):
/// without `--store`, the `--cache-dir` directory as before; with
/// `--store s3://BUCKET[/PREFIX]`, a bucket, `--cache-dir` only its local
/// spool. Credentials from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Keep the store in an S3 bucket, s3://BUCKET[/PREFIX] (path-style;
    /// credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), with
    /// --cache-dir only the local spool of fills in progress (default: the
    /// store is the --cache-dir directory).
    #[arg(
        long,
        env = "TALOS_GEN_STORE",
        value_name = "s3://BUCKET[/PREFIX]",
        value_parser = store_flag
    )]
    pub store: Option<(String, String)>,
    /// The S3 endpoint, http(s)://HOST[:PORT] (default: AWS S3 of --s3-region).
    #[arg(long, env = "TALOS_GEN_S3_ENDPOINT", value_name = "URL", value_parser = endpoint_flag)]
    pub s3_endpoint: Option<String>,
    /// The S3 region the requests are signed for (default: AWS_REGION, else
    /// AWS_DEFAULT_REGION, else us-east-1).
    #[arg(long, env = "TALOS_GEN_S3_REGION", value_name = "REGION")]
    pub s3_region: Option<String>,
}

/// Which installer and which images a pull list names beyond the
/// required ones (`images`, `upgrade images`).
#[derive(Debug, Clone, Args)]
pub struct InstallerArgs {
    /// Installer repository (default: factory.talos.dev/installer).
    #[arg(long, value_name = "REPO")]
    pub installer_repository: Option<String>,
    /// Use the platform's installer, factory.talos.dev/<P>-installer (default: none, the --installer-repository).
    #[arg(long, value_name = "P")]
    pub platform: Option<String>,
    /// Add the optional images of a cluster whose CNI and add-ons Talos
    /// manages (flannel, kube-proxy, CoreDNS, kube-network-policies).
    #[arg(long, default_value = "false", value_name = "BOOL", action = clap::ArgAction::Set, value_parser = super::common::BoolFlag, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub optional: bool,
}

/// Where a mirror command's store is: `--cache-dir` (the store, or with
/// `--store` only the local spool) and the bucket flags.
#[derive(Debug, Clone, Args)]
pub struct MirrorStoreArgs {
    /// The store directory; required without --store, with it the local
    /// spool (default: talos-gen-spool in the system's temp directory).
    #[arg(
        long,
        env = "TALOS_GEN_CACHE_DIR",
        value_name = "DIR",
        value_parser = cache_dir_flag,
        required_unless_present = "store"
    )]
    pub cache_dir: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
}

impl MirrorStoreArgs {
    /// The store's location; `timeout` bounds every S3 call.
    pub fn location(&self, timeout: Duration) -> crate::Result<crate::store::Location> {
        self.store.location(self.cache_dir.as_deref(), timeout)
    }
}

impl StoreArgs {
    /// The store's location: the bucket (spooling in `cache_dir`, or a
    /// directory under the system's temp dir), else the directory
    /// `cache_dir`. `timeout` bounds every S3 call.
    pub fn location(
        &self,
        cache_dir: Option<&str>,
        timeout: Duration,
    ) -> crate::Result<crate::store::Location> {
        use crate::store::{Location, S3Config};
        match &self.store {
            Some((bucket, prefix)) => Ok(Location::S3(S3Config {
                bucket: bucket.clone(),
                prefix: prefix.clone(),
                endpoint: self.s3_endpoint.clone(),
                region: s3_region(self.s3_region.as_deref(), |k| std::env::var(k).ok()),
                timeout,
                spool: cache_dir
                    .map(Into::into)
                    .unwrap_or_else(|| std::env::temp_dir().join("talos-gen-spool")),
                local_tier: 0,
            })),
            None => match cache_dir {
                Some(d) => Ok(Location::Dir(d.into())),
                None => Err(crate::Error::bad_input(
                    "give --cache-dir DIR (the store directory) or --store s3://BUCKET[/PREFIX]",
                )),
            },
        }
    }
}

/// `--s3-region` when neither it nor `AWS_REGION` / `AWS_DEFAULT_REGION` is given.
pub const DEFAULT_S3_REGION: &str = "us-east-1";

/// The region as AWS tools read it: `--s3-region` (or `TALOS_GEN_S3_REGION`),
/// else `AWS_REGION`, else `AWS_DEFAULT_REGION`, else [`DEFAULT_S3_REGION`];
/// an empty value counts as not given.
pub fn s3_region(flag: Option<&str>, env: impl Fn(&str) -> Option<String>) -> String {
    flag.map(str::to_string)
        .into_iter()
        .chain(env("AWS_REGION"))
        .chain(env("AWS_DEFAULT_REGION"))
        .map(|r| r.trim().to_string())
        .find(|r| !r.is_empty())
        .unwrap_or_else(|| DEFAULT_S3_REGION.into())
}

fn store_flag(s: &str) -> Result<(String, String), String> {
    crate::store::S3Config::parse_url(s.trim()).map_err(|e| e.to_string())
}

fn endpoint_flag(s: &str) -> Result<String, String> {
    let t = s.trim().trim_end_matches('/');
    let rest = t
        .strip_prefix("http://")
        .or_else(|| t.strip_prefix("https://"))
        .ok_or_else(|| format!("{s:?} is not an http:// or https:// URL"))?;
    if rest.is_empty() || rest.contains('/') {
        return Err(format!(
            "{s:?}: give the endpoint only, http(s)://HOST[:PORT] (the bucket goes in --store)"
        ));
    }
    Ok(t.to_string())
}

/// A boolean flag's value, from the command line (`--offline=false`) or its
/// `TALOS_GEN_*` variable: `true`/`false`, `1`/`0`, any case, exactly as
/// the contract says (`yes`, `on`, the empty value, anything else: bad
/// input, exit 2, named with the flag and the variable).
#[derive(Debug, Clone, Copy)]
pub struct BoolFlag;

impl clap::builder::TypedValueParser for BoolFlag {
    type Value = bool;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<bool, clap::Error> {
        parse_bool(&value.to_string_lossy()).ok_or(()).map_err(|_| {
            let flag = arg
                .and_then(|a| a.get_long())
                .map(|l| format!("--{l}"))
                .unwrap_or_else(|| "a boolean flag".into());
            let env = arg
                .and_then(|a| a.get_env())
                .map(|e| format!(" (or {})", e.to_string_lossy()))
                .unwrap_or_default();
            clap::Error::raw(
                clap::error::ErrorKind::InvalidValue,
                format!(
                    "{flag}{env}: {:?} is not a boolean; give true or false, 1 or 0\n",
                    value.to_string_lossy()
                ),
            )
            .with_cmd(cmd)
        })
    }
}

/// The one boolean grammar (flags, variables, the API's query), in `text`.
pub use crate::text::parse_bool;

/// The one grammar of every duration flag: a Go duration (`30s`, `2m`,
/// `1m30s`, `500ms`) or plain seconds (`30`), zero or more.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let ns = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse::<u64>()
            .ok()
            .map(|secs| i128::from(secs) * 1_000_000_000)
    } else {
        crate::machineconfig::duration::parse(t)
    };
    match ns {
        Some(ns) if ns >= 0 => Ok(Duration::from_nanos(ns.min(u64::MAX as i128) as u64)),
        Some(_) => Err(format!("{s:?} must not be negative")),
        None => Err(format!(
            "{s:?} is not a duration (e.g. 30s, 2m, 1m30s, or plain seconds: 30)"
        )),
    }
}

/// A duration flag ([`parse_duration`]) that bounds a wait: more than
/// zero, and at least a millisecond (`1us` would time out every request).
pub fn duration_flag(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{s:?} must be more than zero")),
        d if d < Duration::from_millis(1) => Err(format!(
            "{s:?} is below a millisecond: a bound that short would time out every request (e.g. 500ms, 30s)"
        )),
        d => Ok(d),
    }
}

/// A default duration as a flag takes it (`30s`, `5m`, `1h`), for clap's
/// `default_value` from the core's named const.
pub fn duration_text(d: Duration) -> String {
    match d.as_secs() {
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// A default size as a flag takes it (`1Ki`, `64Mi`, `4096`), for clap's
/// `default_value` from the core's named const.
pub fn size_text(n: u64) -> String {
    for (unit, shift) in [("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if n > 0 && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// A duration flag ([`parse_duration`]) where zero has a meaning (asks
/// every time, the shortest bound).
pub fn duration_or_zero_flag(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

fn rate_flag(s: &str) -> Result<u64, String> {
    parse_size(s)
        .map_err(|_| format!("{s:?} is not a number of bytes per second (e.g. 1Ki, 64K, 0)"))
}

/// Parse a size such as `50Gi`, `10G`, `512Mi`, `100M`, `4096` (bytes).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("{s:?} is not a size (e.g. 50Gi, 10G, 4096)");
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mul: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "k" | "KB" | "kB" => 1000,
        "M" | "MB" => 1000_u64.pow(2),
        "G" | "GB" => 1000_u64.pow(3),
        "T" | "TB" => 1000_u64.pow(4),
        "Ki" | "KiB" => 1 << 10,
        "Mi" | "MiB" => 1 << 20,
        "Gi" | "GiB" => 1 << 30,
        "Ti" | "TiB" => 1 << 40,
        _ => return Err(bad()),
    };
    if !n.is_finite() || n < 0.0 {
        return Err(bad());
    }
    Ok((n * mul as f64) as u64)
}

/// A cache directory: any path but the empty one (which would root the
/// store in the working directory), and not an existing file of another
/// kind (a regular file, a device: "File exists" on creating it said
/// nothing useful).
pub fn cache_dir_flag(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err(
            "the cache directory must not be empty (give a directory, e.g. /var/cache/talos-gen)"
                .into(),
        );
    }
    dir_flag(s)
}

/// A directory flag: a path that is a directory or does not exist yet
/// (made later); an existing file of another kind is bad input naming it.
pub fn dir_flag(s: &str) -> Result<String, String> {
    match std::fs::metadata(s) {
        Ok(m) if !m.is_dir() => Err(format!("{s:?} is {}, not a directory", kind_of_file(&m))),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Err(format!(
            "{s:?}: a folder on its way is a file, not a directory"
        )),
        _ => Ok(s.to_string()),
    }
}

/// An input file flag: `-` (standard input), or a path that is not a
/// directory (a missing file is said when it is read, with its error).
pub fn file_flag(s: &str) -> Result<String, String> {
    match std::fs::metadata(s) {
        Ok(m) if m.is_dir() && s != "-" => Err(format!("{s:?} is a directory; give a file")),
        _ => Ok(s.to_string()),
    }
}

/// `a regular file`, `a directory`, ... for a path's refusal.
fn kind_of_file(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a directory"
    }
}

/// `--listen`: `HOST:PORT` with an IP address or a host name (resolved
/// here, the first IPv4 address first, as Go's net.Listen picks), or
/// `:PORT` (all IPv4 interfaces, 0.0.0.0); `[::1]:8080` for IPv6. The
/// socket address, written back as text.
pub fn listen_flag(s: &str) -> Result<String, String> {
    use std::net::{SocketAddr, ToSocketAddrs};
    let t = s.trim();
    let full = match t.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => t.to_string(),
    };
    if let Ok(a) = full.parse::<SocketAddr>() {
        return Ok(a.to_string());
    }
    let form =
        "give HOST:PORT, e.g. 127.0.0.1:8080, localhost:8080, :8080 (all interfaces) or [::1]:8080";
    let (host, port) = full
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?} has no port; {form}"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{s:?}: the port {port:?} is not a number from 0 to 65535; {form}"))?;
    if host.is_empty() || host.contains(['/', ' ', '[', ']']) {
        return Err(format!("{s:?} is not HOST:PORT; {form}"));
    }
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{s:?}: the host name {host:?} does not resolve ({e})"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .map(|a| a.to_string())
        .ok_or_else(|| format!("{s:?}: the host name {host:?} has no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags() {
        assert_eq!(duration_flag("30s"), Ok(Duration::from_secs(30)));
        for d in [0, 30, 90, 300, 7200] {
            let d = Duration::from_secs(d);
            assert_eq!(duration_or_zero_flag(&duration_text(d)), Ok(d));
        }
        assert_eq!(duration_text(Duration::from_secs(300)), "5m");
        assert_eq!(duration_flag("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration_flag("250ms"), Ok(Duration::from_millis(250)));
        assert!(duration_flag("0s").is_err());
        assert!(duration_flag("0").is_err());
        assert!(
            duration_flag("1us")
                .unwrap_err()
                .contains("below a millisecond")
        );
        assert!(duration_flag("999us").is_err());
        assert_eq!(duration_flag("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(duration_flag("30"), Ok(Duration::from_secs(30)));
        assert_eq!(duration_flag(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(duration_or_zero_flag("0"), Ok(Duration::ZERO));
        assert_eq!(duration_or_zero_flag("0s"), Ok(Duration::ZERO));
        assert!(duration_flag("-5s").is_err());
        assert!(duration_flag("-5").is_err());
        assert!(duration_flag("30x").is_err());
        assert!(duration_flag("").is_err());
        assert!(duration_flag("99999999999999999999999").is_err());
        assert_eq!(rate_flag("1Ki"), Ok(1024));
        for n in [0, 1, 1000, 1024, 1536, 64 << 20, 3 << 30] {
            assert_eq!(parse_size(&size_text(n)), Ok(n), "{}", size_text(n));
        }
        assert_eq!(size_text(1024), "1Ki");
        assert_eq!(rate_flag("0"), Ok(0));
        assert!(rate_flag("fast").is_err());
        assert!(cache_dir_flag("").is_err());
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("50Gi").unwrap(), 50 << 30);
        assert_eq!(parse_size("10G").unwrap(), 10_000_000_000);
        assert_eq!(parse_size("1.5Mi").unwrap(), 3 << 19);
        assert!(parse_size("ten").is_err());
        assert!(parse_size("10X").is_err());
        assert!(cache_dir_flag("  ").is_err());
        let f = tempfile::NamedTempFile::new().unwrap();
        let f = f.path().to_str().unwrap();
        let e = cache_dir_flag(f).unwrap_err();
        assert!(e.contains(f) && e.contains("a regular file"), "{e}");
        assert!(dir_flag("/dev/null").unwrap_err().contains("a device"));
        let under = format!("{f}/store");
        assert!(dir_flag(&under).unwrap_err().contains("not a directory"));
        assert_eq!(dir_flag("/nonexistent/x"), Ok("/nonexistent/x".into()));
        assert!(file_flag("/").unwrap_err().contains("a directory"));
        assert_eq!(file_flag("-"), Ok("-".into()));
        assert_eq!(listen_flag(":8080"), Ok("0.0.0.0:8080".into()));
        assert_eq!(listen_flag("127.0.0.1:80"), Ok("127.0.0.1:80".into()));
        assert_eq!(listen_flag("[::1]:80"), Ok("[::1]:80".into()));
        assert_eq!(listen_flag("localhost:8080"), Ok("127.0.0.1:8080".into()));
        assert!(listen_flag("localhost").is_err());
        assert!(listen_flag("localhost:http").is_err());
        assert!(listen_flag("localhost:99999").is_err());
        assert_eq!(cache_dir_flag("/var/cache/x"), Ok("/var/cache/x".into()));
        assert_eq!(
            store_flag("s3://talos-gen/store"),
            Ok(("talos-gen".into(), "store".into()))
        );
        assert!(store_flag("/var/cache").is_err());
        assert_eq!(
            endpoint_flag("http://127.0.0.1:3900/"),
            Ok("http://127.0.0.1:3900".into())
        );
        assert!(endpoint_flag("127.0.0.1:3900").is_err());
        assert!(endpoint_flag("http://h/bucket").is_err());
        for (t, v) in [
            ("true", true),
            ("TRUE", true),
            ("1", true),
            ("False", false),
            ("0", false),
        ] {
            assert_eq!(parse_bool(t), Some(v), "{t}");
        }
        for t in ["yes", "no", "on", "off", "", " true", "2"] {
            assert_eq!(parse_bool(t), None, "{t:?}");
        }
    }

    /// Issue 21: the region as every AWS tool reads it.
    #[test]
    fn s3_region_from_flag_then_aws_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let both = env(&[
            ("AWS_REGION", "eu-west-3"),
            ("AWS_DEFAULT_REGION", "eu-north-1"),
        ]);
        assert_eq!(s3_region(Some("garage"), both), "garage");
        assert_eq!(s3_region(None, both), "eu-west-3");
        assert_eq!(s3_region(Some(" "), both), "eu-west-3");
        assert_eq!(
            s3_region(None, env(&[("AWS_DEFAULT_REGION", "eu-north-1")])),
            "eu-north-1"
        );
        assert_eq!(
            s3_region(
                None,
                env(&[("AWS_REGION", ""), ("AWS_DEFAULT_REGION", "ap-south-1")])
            ),
            "ap-south-1"
        );
        assert_eq!(s3_region(None, env(&[])), "us-east-1");
    }
}
