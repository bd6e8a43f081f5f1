//! `talos-gen mirror sync|verify|export|import`.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct MirrorArgs {
    #[command(subcommand)]
    pub command: MirrorCommand,
}

#[derive(Debug, Subcommand)]
pub enum MirrorCommand {
    /// Fetch everything the config names into the store.
    Sync {
        #[arg(long, env = "TALOS_GEN_CONFIG", value_name = "FILE")]
        config: String,
        #[arg(long, env = "TALOS_GEN_CACHE_DIR", value_name = "DIR")]
        cache_dir: String,
        #[arg(
            long,
            env = "TALOS_GEN_FACTORY_URL",
            default_value = "https://factory.talos.dev"
        )]
        factory_url: String,
        #[arg(long, env = "TALOS_GEN_REGISTRY_URL")]
        registry_url: Option<String>,
        #[arg(
            long,
            env = "TALOS_GEN_MIRROR_UPSTREAM",
            value_name = "NS=URL",
            value_delimiter = ' '
        )]
        mirror_upstream: Vec<String>,
        #[arg(long, env = "TALOS_GEN_CONCURRENCY", default_value_t = 4)]
        concurrency: usize,
        /// A cosign public key (PEM); repeatable. Every installer and image
        /// must then carry a cosign signature one of the keys verifies.
        #[arg(
            long,
            env = "TALOS_GEN_COSIGN_KEY",
            value_name = "FILE",
            value_delimiter = ' '
        )]
        cosign_key: Vec<String>,
        /// Support-matrix data file for `workers:` (instead of the embedded one).
        #[arg(long, env = "TALOS_GEN_MATRIX", value_name = "FILE")]
        matrix: Option<String>,
    },
    /// Print what a sync would fetch (workers expanded); no network.
    Plan {
        #[arg(long, env = "TALOS_GEN_CONFIG", value_name = "FILE")]
        config: String,
        #[arg(long)]
        json: bool,
        /// Support-matrix data file for `workers:` (instead of the embedded one).
        #[arg(long, env = "TALOS_GEN_MATRIX", value_name = "FILE")]
        matrix: Option<String>,
    },
    /// Re-hash every stored object against its digest.
    Verify {
        #[arg(long, env = "TALOS_GEN_CACHE_DIR", value_name = "DIR")]
        cache_dir: String,
    },
    /// Write the objects and the index to one tar file.
    Export {
        #[arg(long, env = "TALOS_GEN_CACHE_DIR", value_name = "DIR")]
        cache_dir: String,
        #[arg(long, value_name = "FILE.tar")]
        output: String,
        #[arg(long, env = "TALOS_GEN_CONFIG", value_name = "FILE")]
        config: Option<String>,
    },
    /// Verify and add the objects of an exported tar file.
    Import {
        file: String,
        #[arg(long, env = "TALOS_GEN_CACHE_DIR", value_name = "DIR")]
        cache_dir: String,
    },
}

/// The config (with `--matrix` for `workers:`); its notes go to stderr.
fn load_config(path: &str, matrix: Option<&str>) -> crate::Result<crate::mirror::Config> {
    let m = crate::matrix::Matrix::load(matrix.map(std::path::Path::new))?;
    let cfg = crate::mirror::Config::load_with(std::path::Path::new(path), &m)?;
    for n in &cfg.notes {
        eprintln!("talos-gen: mirror: {n}");
    }
    Ok(cfg)
}

pub fn run(args: MirrorArgs) -> crate::Result<i32> {
    use crate::mirror;
    use std::path::Path;
    super::serve::init_tracing("text");
    let rt = || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(|e| crate::Error::io("starting the runtime", e))
    };
    match args.command {
        MirrorCommand::Sync {
            config,
            cache_dir,
            factory_url,
            registry_url,
            mirror_upstream,
            concurrency,
            cosign_key,
            matrix,
        } => {
            if concurrency == 0 {
                return Err(crate::Error::bad_input("--concurrency: must be at least 1"));
            }
            let mut cfg = load_config(&config, matrix.as_deref())?;
            for k in &cosign_key {
                let what = format!("--cosign-key {k}");
                let text = super::read_input(k, "--cosign-key")?;
                cfg.cosign_keys
                    .push(crate::cosign::PublicKey::from_pem(&text, &what)?);
            }
            let opts = mirror::SyncOptions {
                factory_url,
                registry_url,
                mirror_upstreams: mirror_upstream,
                concurrency,
                output: mirror::Output::auto(),
            };
            let report = rt()?.block_on(mirror::sync(&cfg, Path::new(&cache_dir), &opts))?;
            println!("{}", report.summary());
            let failed = report.failed();
            for f in &failed {
                eprintln!(
                    "talos-gen: mirror sync: failed: {}: {}",
                    f.name,
                    f.error.as_deref().unwrap_or_default()
                );
            }
            Ok(if failed.is_empty() { 0 } else { 1 })
        }
        MirrorCommand::Plan {
            config,
            json,
            matrix,
        } => {
            let cfg = load_config(&config, matrix.as_deref())?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&cfg.plan_json()).unwrap_or_default()
                );
            } else {
                print!("{}", cfg.plan_text());
            }
            Ok(0)
        }
        MirrorCommand::Verify { cache_dir } => {
            let r = mirror::verify(Path::new(&cache_dir))?;
            println!(
                "mirror verify: {} objects ({}) checked, {} bad",
                r.objects,
                mirror::sync::human(r.bytes),
                r.bad.len()
            );
            for b in &r.bad {
                eprintln!(
                    "talos-gen: mirror verify: bad object sha256:{} ({}): {}; removed, run mirror sync to fetch it again",
                    b.digest,
                    b.keys.join(", "),
                    b.reason
                );
            }
            Ok(if r.bad.is_empty() { 0 } else { 1 })
        }
        MirrorCommand::Export {
            cache_dir,
            output,
            config,
        } => {
            let cfg = config
                .as_deref()
                .map(|c| mirror::Config::load(Path::new(c)))
                .transpose()?;
            let r = mirror::export(Path::new(&cache_dir), Path::new(&output), cfg.as_ref())?;
            println!(
                "mirror export: {} keys, {} objects ({}) written to {output}",
                r.keys,
                r.objects,
                mirror::sync::human(r.bytes)
            );
            Ok(0)
        }
        MirrorCommand::Import { file, cache_dir } => {
            let r = rt()?.block_on(mirror::import(Path::new(&file), Path::new(&cache_dir)))?;
            println!(
                "mirror import: {} keys, {} objects ({}) imported",
                r.keys,
                r.objects,
                mirror::sync::human(r.bytes)
            );
            for b in &r.bad {
                eprintln!(
                    "talos-gen: mirror import: {b}: bytes do not match its name; not imported"
                );
            }
            for k in &r.missing {
                eprintln!(
                    "talos-gen: mirror import: {k}: its object is not in the file; not imported"
                );
            }
            Ok(if r.bad.is_empty() && r.missing.is_empty() {
                0
            } else {
                1
            })
        }
    }
}
