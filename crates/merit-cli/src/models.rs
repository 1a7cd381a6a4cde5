//! Model wiring for every command: where merit keeps its files, how an embedded model is
//! found and loaded, and the `--llm-url`/`--embed-url` options that put a server in its
//! place, each behind the reply cache. Commands take their models from here and nowhere else.

use anyhow::{anyhow, Context, Result};
use clap::Args;
use merit_core::model::{ChatModel, Embedder};
use merit_models::cache::{CachedChat, CachedEmbedder, ReplyStore};
use merit_models::embed::{MiniLmConfig, MiniLmEmbedder};
use merit_models::llama::{LlamaChat, LlamaConfig};
use merit_models::openai::{OpenAiChat, OpenAiConfig, OpenAiEmbedder};
use merit_models::registry::{ensure_model, ModelFiles, PullEvent, PullOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Default context window of `merit run` with the embedded model: room for a seven-step
/// history over the largest Spider schemas (4,096 overflowed on Spider dev question 635).
pub const RUN_CONTEXT_SIZE: u32 = 16_384;

/// How long an OpenMP thread of llama.cpp spins at a barrier before it sleeps, in libgomp's
/// spin iterations (about 100 per microsecond): long enough to cover the wait between two
/// operations of one token on an idle machine, far shorter than a scheduler time slice.
///
/// Measured on the 2-core machine (0.5B model, generation tok/s, issue 17):
/// idle, PASSIVE (no spin) 28.4, 1,000 spins 46.8, 3,000 spins 50.0, ACTIVE (spin forever)
/// 51.0; with four busy processes beside it, PASSIVE 16.5, 1,000 spins 12.4, 3,000 spins 9.2,
/// 10,000 spins 4.2, ACTIVE 4.0.
pub const OPENMP_SPIN_COUNT: u32 = 3_000;

/// Restarts the process with a bounded OpenMP spin (`OMP_WAIT_POLICY=PASSIVE` with
/// `GOMP_SPINCOUNT` = [`OPENMP_SPIN_COUNT`]) unless `OMP_WAIT_POLICY` is already set.
///
/// llama.cpp runs its CPU threads under OpenMP, whose threads wait at the many barriers of
/// each token. libgomp's default spins for about 3 ms before sleeping: when other processes
/// hold the cores (parallel builds, other experiments) a waiting thread burns whole time
/// slices and generation collapses (measured on 2 shared cores: 1 token/s instead of 22).
/// The passive policy alone (sleep at once) fixed that but cost 45% of generation speed on an
/// idle machine, since every barrier became a futex sleep and wake-up. A short spin keeps
/// nearly all of the idle speed and bounds what a waiting thread can waste under load. libgomp
/// reads these variables once, when the program starts, so they cannot be changed from inside
/// the process: the only way is to start again with them set. Call this first thing in a
/// command, before it has done anything else. Setting `OMP_WAIT_POLICY` yourself (to any
/// value, with or without `GOMP_SPINCOUNT`) skips the restart.
pub fn reexec_with_bounded_openmp_spin() {
    if std::env::var_os("OMP_WAIT_POLICY").is_some() {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let Ok(executable) = std::env::current_exe() else {
            return;
        };
        let mut command = std::process::Command::new(executable);
        command
            .args(std::env::args_os().skip(1))
            .env("OMP_WAIT_POLICY", "PASSIVE");
        if std::env::var_os("GOMP_SPINCOUNT").is_none() {
            command.env("GOMP_SPINCOUNT", OPENMP_SPIN_COUNT.to_string());
        }
        let error = command.exec();
        // `exec` only returns when it failed; carry on with the default policy.
        tracing::debug!("could not restart with a bounded OpenMP spin: {error}");
    }
}

/// How an embedded chat model is loaded, beyond its name and file.
#[derive(Debug, Clone, Copy)]
pub struct ChatLoad {
    /// Context window of one conversation, in tokens.
    pub context_size: u32,
    /// CPU threads (`None`: every core).
    pub threads: Option<usize>,
    /// KV caches kept side by side for conversations that alternate on the model (an
    /// interact run's agent and user simulator, Reflexion's reflection and repair prompts).
    pub cache_slots: usize,
    /// Conversations decoded together (continuous batching; 1: one call at a time).
    pub parallel: usize,
    /// Prompt-lookup decoding on greedy calls (`LlamaConfig::prompt_lookup` with its default
    /// parameters).
    pub prompt_lookup: bool,
}

impl ChatLoad {
    /// One conversation at a time, one cache, every core.
    pub fn new(context_size: u32) -> ChatLoad {
        ChatLoad {
            context_size,
            threads: None,
            cache_slots: 1,
            parallel: 1,
            prompt_lookup: false,
        }
    }
}

/// Finds (or fetches, with a progress bar) the named chat model and loads it.
pub fn load_chat_model(
    name: &str,
    model_path: Option<&Path>,
    context_size: u32,
) -> Result<LlamaChat> {
    load_chat_model_with(name, model_path, ChatLoad::new(context_size))
}

/// Loads a chat model with every option of [`ChatLoad`].
pub fn load_chat_model_with(
    name: &str,
    model_path: Option<&Path>,
    load: ChatLoad,
) -> Result<LlamaChat> {
    let files = pull(name, model_path)?;
    let mut config = LlamaConfig::new(files.main_file())
        .with_name(files.name.clone())
        .with_context_size(load.context_size)
        .with_cache_slots(load.cache_slots)
        .with_parallel(load.parallel)
        .with_prompt_lookup(load.prompt_lookup);
    if let Some(threads) = load.threads {
        config = config.with_threads(threads);
    }
    let started = Instant::now();
    let chat = LlamaChat::load(config)?;
    tracing::info!(
        "loaded {} in {:.1} s",
        chat.id(),
        started.elapsed().as_secs_f64()
    );
    Ok(chat)
}

/// Finds (or fetches) the named embedder and loads it.
pub fn load_embedder(name: &str, model_path: Option<&Path>) -> Result<MiniLmEmbedder> {
    let files = pull(name, model_path)?;
    let mut config = MiniLmConfig::from_dir(&files.dir);
    for (slot, file) in [
        (&mut config.weights, "model.safetensors"),
        (&mut config.tokenizer, "tokenizer.json"),
        (&mut config.config, "config.json"),
    ] {
        if let Some(path) = files.file(file) {
            *slot = path.to_path_buf();
        }
    }
    Ok(MiniLmEmbedder::load_with(config)?)
}

/// The model's files through the registry: the user's path, the cache, then the network,
/// showing download progress on stderr.
pub(crate) fn pull(name: &str, model_path: Option<&Path>) -> Result<ModelFiles> {
    let options = PullOptions {
        model_path: model_path.map(Path::to_path_buf),
        ..PullOptions::default()
    };
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut progress = |event: PullEvent| match event {
        PullEvent::Trying { source } => eprintln!("fetching {name} from {source} ..."),
        PullEvent::Progress { done, total, .. } => {
            let bar = bar.get_or_insert_with(|| {
                let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
                bar.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {eta}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                bar
            });
            bar.set_position(done);
        }
        PullEvent::SourceFailed { source, error } => {
            if let Some(bar) = bar.take() {
                bar.abandon();
            }
            eprintln!("{source} failed: {error}");
        }
        PullEvent::Ready { .. } => {
            if let Some(bar) = bar.take() {
                bar.finish_and_clear();
            }
        }
        PullEvent::Verifying { .. } => {}
    };
    ensure_model(name, &options, &mut progress).map_err(|error| anyhow!("{error}"))
}

pub(crate) fn merit_home() -> PathBuf {
    if let Some(home) = std::env::var_os("MERIT_HOME") {
        return PathBuf::from(home);
    }
    std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache").join("merit"))
        .unwrap_or_else(|| PathBuf::from(".merit"))
}

/// The chat model of a command: a server, or an embedded GGUF model.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// OpenAI-compatible chat server; default: the embedded model.
    #[arg(long, requires = "llm_model")]
    pub(crate) llm_url: Option<String>,
    /// Model name on the chat server.
    #[arg(long)]
    pub(crate) llm_model: Option<String>,
    /// Embedded chat model name.
    #[arg(long, default_value = merit_models::registry::DEFAULT_CHAT_MODEL)]
    pub(crate) model: String,
    /// Path of the embedded chat model's GGUF file (skips pulling).
    #[arg(long)]
    pub(crate) model_path: Option<PathBuf>,
    /// KV caches of the embedded main model (1 to 8): one per conversation that takes turns on
    /// it (an interact run's agent and user simulator), so that neither re-reads its whole
    /// conversation after the other spoke; commands with one conversation can set 1. Each
    /// costs one context's memory; a `--simulator-model` or `--repair-model` gets one.
    #[arg(long, default_value_t = 2)]
    pub(crate) cache_slots: usize,
    /// Prompt-lookup decoding on the embedded models' greedy calls (as `merit run
    /// --prompt-lookup`): drafts copied from the prompt, checked in one batch; replies are
    /// greedy decoding's up to batched rounding. Off by default.
    #[arg(long)]
    pub(crate) prompt_lookup: bool,
}

/// The embedder of a command: a server, or the embedded MiniLM.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Embedded embedder name.
    #[arg(long, default_value = merit_models::registry::DEFAULT_EMBEDDER)]
    pub(crate) embedder: String,
    /// OpenAI-compatible embeddings server; default: the embedded embedder.
    #[arg(long, requires = "embed_model")]
    pub(crate) embed_url: Option<String>,
    /// Embedding model name on the server.
    #[arg(long)]
    pub(crate) embed_model: Option<String>,
    /// Reply cache folder (default: `$MERIT_HOME/replies`).
    #[arg(long)]
    pub(crate) cache: Option<PathBuf>,
}

impl ChatArgs {
    /// The same backend with another model: an embedded model `name` (at `path` when given,
    /// with one cache slot), or model `name` on the same server.
    pub fn for_model(&self, name: &str, path: Option<PathBuf>) -> ChatArgs {
        ChatArgs {
            llm_url: self.llm_url.clone(),
            llm_model: self.llm_url.as_ref().map(|_| name.to_string()),
            model: name.to_string(),
            model_path: path,
            cache_slots: 1,
            prompt_lookup: self.prompt_lookup,
        }
    }

    /// Whether the model is a server (no embedded model to load).
    pub fn is_server(&self) -> bool {
        self.llm_url.is_some()
    }
}

/// The reply cache at `cache`, or `$MERIT_HOME/replies`.
pub fn open_store(cache: Option<&PathBuf>) -> Result<Arc<ReplyStore>> {
    Ok(Arc::new(
        ReplyStore::open(
            cache
                .cloned()
                .unwrap_or_else(|| merit_home().join("replies")),
        )
        .context("cannot open the reply cache")?,
    ))
}

/// The reply cache of `args` (its `--cache`, or the default).
pub(crate) fn store(args: &EmbedArgs) -> Result<Arc<ReplyStore>> {
    open_store(args.cache.as_ref())
}

/// The chat model of `args` behind the reply cache `store`.
pub fn chat(args: &ChatArgs, store: &Arc<ReplyStore>) -> Result<Arc<dyn ChatModel>> {
    chat_with_parallel(args, store, 1)
}

/// [`chat`] for `parallel` concurrent callers: an embedded model decodes up to that many
/// conversations together (continuous batching); a server is unaffected.
pub fn chat_with_parallel(
    args: &ChatArgs,
    store: &Arc<ReplyStore>,
    parallel: usize,
) -> Result<Arc<dyn ChatModel>> {
    let live: Arc<dyn ChatModel> = match (&args.llm_url, &args.llm_model) {
        (Some(url), Some(name)) => Arc::new(OpenAiChat::new(OpenAiConfig::new(url, name))?),
        _ => {
            reexec_with_bounded_openmp_spin();
            Arc::new(load_chat_model_with(
                &args.model,
                args.model_path.as_deref(),
                ChatLoad {
                    cache_slots: args.cache_slots,
                    parallel,
                    prompt_lookup: args.prompt_lookup,
                    ..ChatLoad::new(RUN_CONTEXT_SIZE)
                },
            )?)
        }
    };
    Ok(Arc::new(CachedChat::from_arc(live, Arc::clone(store))))
}

/// The embedder of `args` behind its reply cache.
pub fn embedder_for(args: &EmbedArgs) -> Result<Arc<dyn Embedder>> {
    embedder(args, &store(args)?)
}

/// The embedder behind the reply cache.
pub fn embedder(args: &EmbedArgs, store: &Arc<ReplyStore>) -> Result<Arc<dyn Embedder>> {
    build_embedder(
        &args.embedder,
        args.embed_url.as_ref(),
        args.embed_model.as_ref(),
        store,
    )
}

/// An embedder behind the reply cache: the server `url` with `model` when given, else the
/// embedded embedder `name`.
pub fn build_embedder(
    name: &str,
    url: Option<&String>,
    model: Option<&String>,
    store: &Arc<ReplyStore>,
) -> Result<Arc<dyn Embedder>> {
    let live: Arc<dyn Embedder> = match (url, model) {
        (Some(url), Some(name)) => {
            Arc::new(OpenAiEmbedder::new(OpenAiConfig::new(url, name), None)?)
        }
        _ => Arc::new(load_embedder(name, None)?),
    };
    Ok(Arc::new(CachedEmbedder::from_arc(live, Arc::clone(store))))
}
