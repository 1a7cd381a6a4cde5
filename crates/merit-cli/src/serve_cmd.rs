//! `merit serve` and `merit mcp`: the live-mode service (`merit_serve`) wired to the models,
//! over HTTP (JSON API and MCP at `/mcp`) or as an MCP server on standard input and output.

use crate::models::{chat_with_parallel, embedder, store, ChatArgs, EmbedArgs};
use anyhow::{Context, Result};
use clap::Args;
use merit_serve::{hash_key, ServeConfig, Service, ServiceModels};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What both serving commands start: the configuration and the models.
#[derive(Debug, Args)]
pub struct ServiceArgs {
    /// The configuration file (TOML: databases, hashed API keys, limits; see the README).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Seconds between sweeps that finalize answers which waited past `finalize_after_secs`.
    #[arg(long, default_value_t = 60)]
    sweep_secs: u64,
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

/// Arguments of `merit serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Read an API key from standard input, print the SHA-256 the configuration stores for
    /// it, and exit.
    #[arg(long)]
    hash_key: bool,
    #[command(flatten)]
    service: ServiceArgs,
}

/// Arguments of `merit mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The environment variable holding the API key every tool call acts as (a key on the
    /// command line would show in the process list).
    #[arg(long, default_value = "MERIT_API_KEY")]
    api_key_env: String,
    #[command(flatten)]
    service: ServiceArgs,
}

/// Loads the configuration and the models and starts the service.
fn start(args: &ServiceArgs) -> Result<Arc<Service>> {
    let path = args
        .config
        .as_ref()
        .context("give --config FILE (the service's TOML configuration)")?;
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
    Ok(Arc::new(Service::start(config, models)?))
}

/// Runs `merit mcp`: the MCP tools on standard input and output, as the key in
/// `--api-key-env`.
pub fn mcp(args: McpArgs) -> Result<()> {
    let key = std::env::var(&args.api_key_env).with_context(|| {
        format!(
            "set {} to the API key the MCP tools act as (one of the configuration's keys)",
            args.api_key_env
        )
    })?;
    let service = start(&args.service)?;
    let caller = service.authenticate(Some(&format!("Bearer {key}")))?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let sweep = Duration::from_secs(args.service.sweep_secs.max(1));
    let served = runtime.block_on(merit_serve::mcp::serve_stdio(
        Arc::clone(&service),
        caller,
        sweep,
    ));
    // As in `run`: PostgreSQL connections close outside the async runtime.
    drop(runtime);
    drop(service);
    served.map_err(anyhow::Error::msg)
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
    anyhow::ensure!(
        args.service.config.is_some(),
        "give --config FILE (or --hash-key)"
    );
    let service = start(&args.service)?;
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
            Duration::from_secs(args.service.sweep_secs.max(1)),
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
