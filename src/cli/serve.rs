//! `talos-gen serve`: build the service state from flags and run the HTTP edge.

use std::time::Duration;

use clap::Args;

use crate::compose::ServiceConfig;
use crate::http::ServeConfig;

const SERVE_EXAMPLES: &str = "\
Status page: http://ADDR/ ; metrics: /metrics ; probes: /healthz, /readyz.

Examples:
  # The Image Factory cache, OCI pull-through and API on all interfaces
  talos-gen serve --listen :8080 --cache-dir /var/cache/talos-gen \\
    --mirror-upstream ghcr.io=https://ghcr.io,docker.io=https://registry-1.docker.io

  # Air-gapped: answer only from a mirrored store, never contact an upstream
  # (the registries the store holds are known without --mirror-upstream)
  talos-gen serve --offline --cache-dir /var/cache/talos-gen

  # Replicas sharing one S3 bucket (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)
  talos-gen serve --store s3://talos-gen/store --s3-endpoint http://s3.internal:3900 \\
    --cache-dir /var/cache/talos-gen

  # The same from the environment (every flag has a TALOS_GEN_* variable)
  TALOS_GEN_OFFLINE=true TALOS_GEN_CACHE_DIR=/data talos-gen serve

  # HTTPS with a certificate from `talos-gen mirror cert` (renewed files are picked up)
  talos-gen serve --listen :8443 --tls-cert tls/tls.crt --tls-key tls/tls.key

  # Behind an ingress that only it can reach: log the client X-Forwarded-For names
  talos-gen serve --listen :8080 --cache-dir /var/cache/talos-gen --trust-forwarded-for";

#[derive(Debug, Args)]
#[command(after_help = SERVE_EXAMPLES)]
pub struct ServeArgs {
    /// Address to listen on, HOST:PORT (an IP address, or a host name
    /// resolved at start, its first IPv4 address first); `:PORT` means all
    /// interfaces (0.0.0.0).
    #[arg(long, env = "TALOS_GEN_LISTEN", default_value = "127.0.0.1:8080", value_name = "ADDR", value_parser = super::common::listen_flag)]
    pub listen: String,
    /// The store (cache) directory, created when missing; with --store, only
    /// the local spool of fills in progress.
    #[arg(long, env = "TALOS_GEN_CACHE_DIR", default_value = "talos-gen-cache", value_name = "DIR", value_parser = super::common::cache_dir_flag)]
    pub cache_dir: String,
    /// The upstream Image Factory (http or https).
    #[arg(long, env = "TALOS_GEN_FACTORY_URL", default_value = crate::compose::DEFAULT_FACTORY_URL, value_name = "URL")]
    pub factory_url: String,
    /// Upstream OCI registry for installer images (default: the factory URL).
    #[arg(long, env = "TALOS_GEN_REGISTRY_URL", value_name = "URL")]
    pub registry_url: Option<String>,
    /// Never contact an upstream; answer from the store only. `--offline`
    /// alone means true; a value (also TALOS_GEN_OFFLINE): true/false, 1/0.
    #[arg(long, env = "TALOS_GEN_OFFLINE", default_value = "false")]
    #[arg(value_name = "BOOL", action = clap::ArgAction::Set, value_parser = super::common::BoolFlag, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub offline: bool,
    /// Evict least-recently-used, unpinned objects above this size, e.g. 50Gi (default: no limit).
    #[arg(long, env = "TALOS_GEN_CACHE_MAX_SIZE", value_name = "SIZE", value_parser = super::common::parse_size)]
    pub cache_max_size: Option<u64>,
    /// With --store: bucket objects kept on --cache-dir as well (the local tier: hot objects at local speed, and served while the bucket is slow or gone; least recently used out; the bucket stays the truth), at most this size; 0 turns it off.
    #[arg(long, env = "TALOS_GEN_LOCAL_CACHE_MAX_SIZE", value_name = "SIZE", value_parser = super::common::parse_size, default_value = "10Gi")]
    pub local_cache_max_size: u64,
    /// Named schematic files (default: the embedded `schematics/`).
    #[arg(long, env = "TALOS_GEN_SCHEMATICS_DIR", value_name = "DIR", value_parser = super::common::dir_flag)]
    pub schematics_dir: Option<String>,
    /// Use this support-matrix data file (default: the embedded one).
    #[arg(long, env = "TALOS_GEN_MATRIX", value_name = "FILE", value_parser = super::common::file_flag)]
    pub matrix: Option<String>,
    /// Upstreams for `?ns=` mirror requests, ns=URL; repeatable or comma-separated (default: none).
    #[arg(
        long,
        env = "TALOS_GEN_MIRROR_UPSTREAM",
        value_name = "NS=URL",
        value_delimiter = ','
    )]
    pub mirror_upstream: Vec<String>,
    /// How long in-flight requests may take to finish after SIGTERM
    /// (durations here and below: 30s, 2m, 1m30s, or plain seconds).
    #[arg(long, env = "TALOS_GEN_SHUTDOWN_TIMEOUT", default_value = "30s", value_name = "DURATION", value_parser = super::common::duration_or_zero_flag)]
    pub shutdown_timeout: Duration,
    /// File holding the bearer token required by `/api/v1/` writes (default: no token required).
    #[arg(long, env = "TALOS_GEN_API_TOKEN_FILE", value_name = "FILE", value_parser = super::common::file_flag)]
    pub api_token_file: Option<String>,
    /// How long a tag -> digest mapping of `/v2/` is trusted before the upstream is asked again.
    #[arg(
        long,
        env = "TALOS_GEN_TAG_REVALIDATE",
        default_value = super::common::duration_text(crate::compose::TAG_REVALIDATE),
        value_name = "DURATION",
        value_parser = super::common::duration_or_zero_flag
    )]
    pub tag_revalidate: Duration,
    /// How long a stored factory document (`/versions`, the signing key and
    /// certificate, the official extension and overlay lists) is answered
    /// before the factory is asked again; 0 asks every time. Whatever the
    /// age, the stored copy answers when the factory cannot (or `--offline`).
    #[arg(
        long,
        env = "TALOS_GEN_METADATA_TTL",
        default_value = super::common::duration_text(crate::compose::DEFAULT_METADATA_TTL),
        value_name = "DURATION",
        value_parser = super::common::duration_or_zero_flag
    )]
    pub metadata_ttl: Duration,
    /// How long past its freshness (`--tag-revalidate`, `--metadata-ttl`) a
    /// stored tag or factory document answers at once, marked stale, while
    /// one background fetch refreshes it (RFC 5861); 0 waits for the
    /// upstream's answer.
    #[arg(
        long,
        env = "TALOS_GEN_STALE_WHILE_REVALIDATE",
        default_value = super::common::duration_text(crate::compose::DEFAULT_STALE_WHILE_REVALIDATE),
        value_name = "DURATION",
        value_parser = super::common::duration_or_zero_flag
    )]
    pub stale_while_revalidate: Duration,
    /// How long a client has to send a request head; also how long an idle
    /// keep-alive connection stays open (at least 1s).
    #[arg(long, env = "TALOS_GEN_HEADER_READ_TIMEOUT", default_value = "15s", value_name = "DURATION", value_parser = super::common::duration_or_zero_flag)]
    pub header_read_timeout: Duration,
    /// How long a response write may stay blocked (the client stopped
    /// reading) before the connection is closed (at least 1s).
    #[arg(long, env = "TALOS_GEN_WRITE_TIMEOUT", default_value = "60s", value_name = "DURATION", value_parser = super::common::duration_or_zero_flag)]
    pub write_timeout: Duration,
    /// How long a client has to send a request body whole, from the end of
    /// its head (more than zero, at most 1h); past it: 408 and the
    /// connection closed.
    #[arg(long, env = "TALOS_GEN_BODY_READ_TIMEOUT", default_value = "30s", value_name = "DURATION", value_parser = body_read_timeout_flag)]
    pub body_read_timeout: Duration,
    /// Connections open at once; past it the oldest idle one (a keep-alive,
    /// a head still arriving) is closed for the new one, and with every one
    /// busy the new one is closed (default: three quarters of the open-file
    /// limit)
    #[arg(long, env = "TALOS_GEN_MAX_CONNECTIONS", value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: Option<u64>,
    /// Upstream fills (image and blob downloads) running at once; more wait.
    #[arg(long, env = "TALOS_GEN_MAX_CONCURRENT_FILLS", default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100000))]
    pub max_concurrent_fills: u64,
    #[command(flatten)]
    pub store: super::common::StoreArgs,
    #[command(flatten)]
    pub upstream: super::common::UpstreamArgs,
    /// Serve HTTPS on --listen with this PEM certificate (chain); with
    /// --tls-key. Both files are looked at every 2 s and a renewed pair (a
    /// Secret updated in place) is used for new connections without a
    /// restart. `talos-gen mirror cert` writes one (default: plain HTTP).
    #[arg(long, env = "TALOS_GEN_TLS_CERT", value_name = "FILE", requires = "tls_key", value_parser = super::common::file_flag)]
    pub tls_cert: Option<String>,
    /// The PEM private key of --tls-cert (default: none, plain HTTP).
    #[arg(long, env = "TALOS_GEN_TLS_KEY", value_name = "FILE", requires = "tls_cert", value_parser = super::common::file_flag)]
    pub tls_key: Option<String>,
    /// The base URL clients reach this service at (e.g.
    /// https://talos-gen.example:8443), written into answers that carry
    /// URLs (the iPXE script of /pxe/). Default: each request's
    /// X-Forwarded-Proto and X-Forwarded-Host, else its Host header and
    /// this listener's scheme.
    #[arg(long, env = "TALOS_GEN_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
    /// Behind a reverse proxy or ingress: log each request's client as the
    /// last address of its X-Forwarded-For (the one the proxy in front
    /// added) instead of the connection's peer (logged as well). Only for a
    /// listener that the proxy alone can reach: a client can write the header.
    #[arg(long, env = "TALOS_GEN_TRUST_FORWARDED_FOR", default_value = "false")]
    #[arg(value_name = "BOOL", action = clap::ArgAction::Set, value_parser = super::common::BoolFlag, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub trust_forwarded_for: bool,
    /// Log format on stderr (one access log line per request at info).
    #[arg(long, env = "TALOS_GEN_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,
}

pub fn run(args: ServeArgs) -> crate::Result<i32> {
    init_tracing(&args.log_format);
    let mut store = args
        .store
        .location(Some(&args.cache_dir), args.upstream.upstream_timeout)?;
    if let crate::store::Location::S3(c) = &mut store {
        c.local_tier = args.local_cache_max_size;
    }
    let service = ServiceConfig {
        store,
        cache_max_size: args.cache_max_size,
        factory_url: args.factory_url.trim_end_matches('/').to_string(),
        registry_url: args
            .registry_url
            .map(|u| u.trim_end_matches('/').to_string()),
        mirror_upstreams: crate::registry::MirrorTable::parse(&args.mirror_upstream)?,
        offline: args.offline,
        schematics_dir: args.schematics_dir.map(Into::into),
        tag_revalidate: args.tag_revalidate,
        metadata_ttl: args.metadata_ttl,
        stale_while_revalidate: args.stale_while_revalidate,
        max_concurrent_fills: Some(args.max_concurrent_fills as usize),
        limits: args.upstream.limits(),
        direct_upstreams: false,
        remember_outages: true,
    };
    let cfg = ServeConfig {
        service,
        listen: args.listen,
        matrix: args.matrix.map(Into::into),
        shutdown_timeout: args.shutdown_timeout,
        api_token_file: args.api_token_file.map(Into::into),
        header_read_timeout: args.header_read_timeout.max(Duration::from_secs(1)),
        write_timeout: args.write_timeout.max(Duration::from_secs(1)),
        body_read_timeout: args.body_read_timeout,
        max_connections: args
            .max_connections
            .map_or_else(crate::http::conns::Connections::default_max, |n| n as usize),
        tls: match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => Some(crate::http::tls::TlsFiles {
                cert: cert.into(),
                key: key.into(),
            }),
            _ => None,
        },
        public_url: match args.public_url {
            Some(u) => Some(public_url(&u)?),
            None => None,
        },
        trust_forwarded_for: args.trust_forwarded_for,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| crate::Error::io("starting the runtime", e))?;
    rt.block_on(crate::http::serve(cfg))?;
    Ok(0)
}

/// Whether the log is coloured: on a terminal, unless `NO_COLOR` is set
/// to anything but the empty string (no-color.org).
fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// `--body-read-timeout`: more than zero, at most an hour.
fn body_read_timeout_flag(s: &str) -> Result<Duration, String> {
    match super::common::duration_flag(s)? {
        d if d > Duration::from_secs(3600) => Err(format!("{s:?} is more than 1h")),
        d => Ok(d),
    }
}

/// `--public-url`: http(s)://HOST[:PORT][/PATH], kept without a trailing `/`.
fn public_url(u: &str) -> crate::Result<String> {
    let bad = |why: &str| crate::Error::bad_input(format!("--public-url {u:?}: {why}"));
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .ok_or_else(|| bad("must start with http:// or https://"))?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || host.contains(['?', '#', '@', ' ']) || u.contains(['?', '#']) {
        return Err(bad("expected http(s)://HOST[:PORT][/PATH]"));
    }
    Ok(u.trim_end_matches('/').to_string())
}

/// Structured logs on stderr; `RUST_LOG` filters (default `info`).
pub fn init_tracing(format: &str) {
    init_tracing_at(format, "info")
}

/// [`init_tracing`] with another default level (`RUST_LOG` still wins).
pub fn init_tracing_at(format: &str, default: &str) {
    init_tracing_with(format, default, std::io::stderr)
}

/// [`init_tracing_at`] writing through `writer` (`mirror` writes around its
/// progress bars, `crate::mirror::progress::log_writer`).
pub fn init_tracing_with<W>(format: &str, default: &str, writer: W)
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    use tracing_subscriber::EnvFilter;
    // The TLS verifier's own error lines are left out by default: the
    // error they explain reaches the log or the terminal with its cause
    // (`text::error_line`), once.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default},rustls_platform_verifier=off")));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR").as_deref(),
        ));
    let _ = if format == "json" {
        b.json().try_init()
    } else {
        b.try_init()
    };
}

#[cfg(test)]
mod tests {
    use super::colour;
    use std::ffi::OsStr;

    /// Issue 50 item 10: `NO_COLOR` (any value but the empty one) turns
    /// the log's colours off, on a terminal too.
    #[test]
    fn no_color_is_honoured() {
        assert!(colour(true, None));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(true, Some(OsStr::new("yes"))));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(false, None));
    }
}
