//! `merit serve`: the live-mode HTTP service (`merit_serve`), wired to the models.

use crate::models::{chat_with_parallel, embedder, store, ChatArgs, EmbedArgs};
use anyhow::{Context, Result};
use clap::Args;
use merit_serve::{hash_key, ServeConfig, Service, ServiceModels};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `merit serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The configuration file (TOML: databases, hashed API keys, limits; see the README).
    #[arg(long, required_unless_present = "hash_key")]
    config: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Seconds between sweeps that finalize answers which waited past `finalize_after_secs`.
    #[arg(long, default_value_t = 60)]
    sweep_secs: u64,
    /// Read an API key from standard input, print the SHA-256 the configuration stores for
    /// it, and exit.
    #[arg(long)]
    hash_key: bool,
    /// Concurrent conversations the embedded model decodes together.
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// A separate model for the repairs (embedded, or a model name on the same server); the
    /// main model still writes the initial SQL. The repair results use
    /// qwen2.5-coder-1.5b-instruct here.
    #[arg(long)]
    repair_model: Option<String>,
    /// Path of the repair model's GGUF file (skips pulling).
    #[arg(long, requires = "repair_model")]
    repair_model_path: Option<PathBuf>,
    #[command(flatten)]
    chat: ChatArgs,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// Runs `merit serve`.
pub fn run(args: ServeArgs) -> Result<()> {
    if args.hash_key {
        let mut key = String::new();
        std::io::stdin()
            .read_to_string(&mut key)
            .context("cannot read the key from standard input")?;
        anyhow::ensure!(!key.trim().is_empty(), "standard input holds no key");
        println!("{}", hash_key(&key));
        return Ok(());
    }
    let path = args
        .config
        .as_ref()
        .context("give --config FILE (or --hash-key)")?;
    let config = ServeConfig::load(path)?;
    let store = store(&args.embed)?;
    let parallel = args.parallel.max(1);
    let model = chat_with_parallel(&args.chat, &store, parallel)?;
    let models = match &args.repair_model {
        Some(name) => ServiceModels {
            repair: chat_with_parallel(
                &args.chat.for_model(name, args.repair_model_path.clone()),
                &store,
                parallel,
            )?,
            initial: Some(model),
            embedder: embedder(&args.embed, &store)?,
        },
        None => ServiceModels {
            repair: model,
            initial: None,
            embedder: embedder(&args.embed, &store)?,
        },
    };
    let service = Arc::new(Service::start(config, models)?);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        // The address actually bound (port 0 picks a free one): tests and scripts read it.
        eprintln!(
            "merit serve: listening on http://{}",
            listener.local_addr()?
        );
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        // A clone: the last reference is dropped after the runtime, below.
        merit_serve::serve(
            Arc::clone(&service),
            listener,
            Duration::from_secs(args.sweep_secs.max(1)),
            shutdown,
        )
        .await
        .context("the server stopped")
    });
    // PostgreSQL connections close outside the async runtime: their synchronous driver runs a
    // runtime of its own, which cannot start inside another.
    drop(runtime);
    drop(service);
    served
}
