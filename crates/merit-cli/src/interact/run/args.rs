//! The arguments of `merit interact run`.

use crate::models::ChatArgs;
use clap::Args;
use merit_interact::memory::Retention;
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `merit interact run`.
#[derive(Debug, Args)]
pub struct InteractRunArgs {
    /// Task file in the BIRD-Interact format (JSONL).
    #[arg(long)]
    pub(super) tasks: PathBuf,
    /// Folder with one folder per database (schema, column meanings, knowledge base, SQLite file).
    #[arg(long)]
    pub(super) db_root: PathBuf,
    /// Ground truth in a separate JSONL file, keyed by instance_id (public releases ship it apart).
    #[arg(long)]
    pub(super) ground_truth: Option<PathBuf>,
    /// Databases missing beside their metafiles are taken from `<DIR>/<db>/<db>.sqlite` (the
    /// Spider layout): committed task sets ship metafiles only.
    #[arg(long)]
    pub(super) sqlite_dir: Option<PathBuf>,
    /// Run the first N tasks only (of those `--every` keeps).
    #[arg(long)]
    pub(super) limit: Option<usize>,
    /// Keep every Nth task of the file (the 1st, the N+1st, ...), before `--limit`: a subset
    /// spread over a file that grew by appending (older and newer tasks alike), where the
    /// first N would all be the oldest.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub(super) every: u16,
    /// Run the tasks on PostgreSQL instead of SQLite: each database's SQLite file is loaded
    /// into a template database on this server (once), and every episode works on a private
    /// clone (`postgres://user@host:port/db`; a role with CREATEDB that is not a superuser).
    #[arg(long)]
    pub(super) pg_url: Option<String>,
    /// Run directory (created, or continued when it holds a log).
    #[arg(long)]
    pub(super) out: PathBuf,
    /// The model of the agent and of the user simulator.
    #[command(flatten)]
    pub(super) chat: ChatArgs,
    /// Who plays the user: the model simulator (needs ground truth), or `human`: you, at
    /// this terminal, answering the agent's questions and accepting or rejecting its answers
    /// (for your own tasks, which need no ground truth; one episode at a time).
    #[arg(long, value_enum, default_value_t = SimulatorArg::Model)]
    pub(super) simulator: SimulatorArg,
    /// A separate model for the user simulator: an embedded model name, or with `--llm-url`
    /// a model name on the same server (default: the agent's model).
    #[arg(long)]
    pub(super) simulator_model: Option<String>,
    /// Path of the simulator's GGUF file (with `--simulator-model`, embedded; skips pulling).
    #[arg(long, requires = "simulator_model")]
    pub(super) simulator_model_path: Option<PathBuf>,
    /// Reply cache folder (default: `$MERIT_HOME/replies`).
    #[arg(long)]
    pub(super) cache: Option<PathBuf>,
    /// How the agent exchanges actions: native tool calls when the server supports them
    /// (auto; the embedded model has none), always the text protocol, or always native.
    #[arg(long, value_enum, default_value_t = ToolCallsArg::Auto)]
    pub(super) tool_calls: ToolCallsArg,
    #[command(flatten)]
    pub(super) budget: crate::interact::learn::AgentBudgetArgs,
    #[command(flatten)]
    pub(super) memory: MemoryArgs,
    /// Which agent: the interactive ReAct agent, or `vanilla`, the non-agentic LLM baseline
    /// (schema and request in, one query per phase out; no questions, no memory).
    #[arg(long, value_enum, default_value_t = AgentArg::React)]
    pub(super) agent: AgentArg,
    /// Sample the agent's replies at this temperature (default 0: greedy). With several
    /// `--sample-seed`s, the runs are the independent tries of Pass@k (`merit interact report
    /// --pass-at-k`).
    #[arg(long, default_value_t = 0.0, value_parser = crate::args::sampling_temperature)]
    pub(super) temperature: f32,
    /// The sampling seed of every agent call (with `--temperature` above 0).
    #[arg(long, default_value_t = 0)]
    pub(super) sample_seed: u64,
    /// The Demo agent: show the first `--demo-count` successful episodes of this episode log
    /// (a training-split run's `episodes.jsonl`) to every episode as fixed worked examples.
    #[arg(long, conflicts_with = "memory")]
    pub(super) demos: Option<PathBuf>,
    /// Demonstrations shown with `--demos`.
    #[arg(long, default_value_t = 2, requires = "demos",
          value_parser = clap::value_parser!(u16).range(1..))]
    pub(super) demo_count: u16,
    /// Episodes run at once; the embedded model decodes their calls together (agent and
    /// simulator alike). Only without memory or with `--frozen-memory` and a selector that
    /// does not learn online: an online memory must see each episode before the next. The log
    /// is written in task order either way; a batched reply can differ from a one-at-a-time
    /// one in a near tie, and the reply cache keeps whichever came first.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub(super) parallel: u16,
}

/// `--simulator` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum SimulatorArg {
    Model,
    Human,
}

/// `--agent` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum AgentArg {
    React,
    Vanilla,
}

/// `--tool-calls` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ToolCallsArg {
    Auto,
    Text,
    Native,
}

/// Which selector chooses among the embedding stage's candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum SelectorKind {
    /// Highest BM25 score against the query (none when no term is shared).
    Bm25,
    /// Highest cosine: the embedding stage's first candidate.
    Cosine,
    /// TopicK baseline: candidates that together cover the request's topics, rare topics
    /// first (static; see `merit_interact::memory::topick`).
    Topick,
    /// The chat model picks from numbered summaries.
    Model,
    /// PPO-trained checkpoints (`--episode-selector`, `--turn-selector`).
    Learned,
    /// MemRL-style baseline: Q-values of memories learned online from episode rewards.
    Memrl,
    /// Memento-style baseline: a linear case-selection score learned online.
    Memento,
}

/// Which finished episodes and steps the memory keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum RetentionArg {
    /// The paper's: successful episodes and their helpful steps; failed episodes leave nothing.
    SuccessfulEpisodes,
    /// Successful episodes, and the helpful steps of every episode, failed ones included
    /// (merit's rule before issue 18).
    PositiveSteps,
    /// Every episode and step, each with its polarity (the paper's Table 7 comparison).
    All,
}

impl From<RetentionArg> for Retention {
    fn from(arg: RetentionArg) -> Retention {
        match arg {
            RetentionArg::SuccessfulEpisodes => Retention::SuccessfulEpisodes,
            RetentionArg::PositiveSteps => Retention::PositiveSteps,
            RetentionArg::All => Retention::All,
        }
    }
}

/// Long-term memory options of `merit interact run`.
#[derive(Debug, Args, Serialize)]
pub(super) struct MemoryArgs {
    /// Long-term memory selector; without it the agent runs with no memory (the baseline).
    #[arg(long, value_enum)]
    pub(super) memory: Option<SelectorKind>,
    /// Do not retrieve episode-level memories (ablation).
    #[arg(long, requires = "memory")]
    pub(super) no_episode_memory: bool,
    /// Do not retrieve turn-level memories (ablation).
    #[arg(long, requires = "memory")]
    pub(super) no_turn_memory: bool,
    /// Memories injected per retrieval, 1 to 5 (the paper's default: 1).
    #[arg(long, default_value_t = 1, requires = "memory")]
    pub(super) inject: usize,
    /// Candidates kept by the embedding stage (the paper's 10).
    #[arg(long, default_value_t = 10, requires = "memory")]
    pub(super) candidates: usize,
    /// Show each turn memory at most once per episode (the turn level retrieves among the
    /// memories not shown yet); without it the same memory may come back every turn.
    // Left out of settings.json when off, so run directories made before it still continue.
    #[arg(long, requires = "memory")]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) turn_memories_once: bool,
    /// Which memories are written: `successful-episodes` (the paper's), `positive-steps`
    /// (also the helpful steps of failed episodes) or `all` (everything, with its polarity).
    #[arg(
        long,
        value_enum,
        default_value = "successful-episodes",
        requires = "memory"
    )]
    pub(super) retention: RetentionArg,
    /// Start from the memory folder of an earlier run (e.g. the training run's `memory/`).
    #[arg(long, requires = "memory")]
    pub(super) memory_from: Option<PathBuf>,
    /// Read the memory but add nothing to it (evaluation on a fixed memory).
    #[arg(long, requires = "memory")]
    pub(super) frozen_memory: bool,
    /// With `--memory learned`: the episode-level checkpoint (`episode.safetensors` from
    /// `merit interact train-selector`), or `cosine` for cosine selection at that level;
    /// required unless `--no-episode-memory`.
    #[arg(long)]
    pub(super) episode_selector: Option<PathBuf>,
    /// With `--memory learned`: the turn-level checkpoint, or `cosine` for cosine selection
    /// at that level; required unless `--no-turn-memory`.
    #[arg(long)]
    pub(super) turn_selector: Option<PathBuf>,
    /// Embedded embedder name.
    #[arg(long, default_value = merit_models::registry::DEFAULT_EMBEDDER)]
    #[serde(skip)]
    pub(super) embedder: String,
    /// OpenAI-compatible embeddings server; default: the embedded embedder.
    #[arg(long, requires = "embed_model")]
    #[serde(skip)]
    pub(super) embed_url: Option<String>,
    /// Embedding model name on the server.
    #[arg(long)]
    #[serde(skip)]
    pub(super) embed_model: Option<String>,
}
