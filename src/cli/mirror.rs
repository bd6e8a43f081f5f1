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

pub fn run(_args: MirrorArgs) -> crate::Result<i32> {
    Err(crate::Error::refused("mirror: not implemented yet"))
}
