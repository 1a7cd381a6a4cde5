//! `merit interact run`: the agent on a task file, with or without memory, resumable.

use crate::models::reexec_with_bounded_openmp_spin;
use crate::models::{build_embedder, open_store, ChatArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use merit_interact::agent::{AgentConfig, AgentStyle, ReactAgent, ToolCallMode};
use merit_interact::memory::{
    AdvisorConfig, Bm25Selector, CosineSelector, InsightConfig, InsightExtractor, Level,
    MemRlSelector, MementoSelector, MemoryConfig, ModelSelector, OnlineSelector, Retention,
    RetrievalConfig, Selector, StaticDemos, TopicKSelector,
};
use merit_interact::runlog::{
    read_log, run_tasks, run_tasks_with_demos, run_tasks_with_memory, EpisodeRecord, MemoryRun,
    RunSpec,
};
use merit_interact::simulator::model::{ModelSimulator, ModelSimulatorConfig};
use merit_interact::{sqlite_backend, EnvConfig, HumanSimulator, TaskSet, UserSimulator};
use merit_lab::interact::{render, summarise, LOG_FILE};
use merit_learn::selector::LearnedSelector;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `merit interact run`.
#[derive(Debug, Args)]
pub struct InteractRunArgs {
    /// Task file in the BIRD-Interact format (JSONL).
    #[arg(long)]
    tasks: PathBuf,
    /// Folder with one folder per database (schema, column meanings, knowledge base, SQLite file).
    #[arg(long)]
    db_root: PathBuf,
    /// Ground truth in a separate JSONL file, keyed by instance_id (public releases ship it apart).
    #[arg(long)]
    ground_truth: Option<PathBuf>,
    /// Databases missing beside their metafiles are taken from `<DIR>/<db>/<db>.sqlite` (the
    /// Spider layout): committed task sets ship metafiles only.
    #[arg(long)]
    sqlite_dir: Option<PathBuf>,
    /// Run the first N tasks only.
    #[arg(long)]
    limit: Option<usize>,
    /// Run the tasks on PostgreSQL instead of SQLite: each database's SQLite file is loaded
    /// into a template database on this server (once), and every episode works on a private
    /// clone (`postgres://user@host:port/db`; the role needs CREATEDB).
    #[arg(long)]
    pg_url: Option<String>,
    /// Run directory (created, or continued when it holds a log).
    #[arg(long)]
    out: PathBuf,
    /// The model of the agent and of the user simulator.
    #[command(flatten)]
    chat: ChatArgs,
    /// Who plays the user: the model simulator (needs ground truth), or `human`: you, at
    /// this terminal, answering the agent's questions and accepting or rejecting its answers
    /// (for your own tasks, which need no ground truth; one episode at a time).
    #[arg(long, value_enum, default_value_t = SimulatorArg::Model)]
    simulator: SimulatorArg,
    /// A separate model for the user simulator: an embedded model name, or with `--llm-url`
    /// a model name on the same server (default: the agent's model).
    #[arg(long)]
    simulator_model: Option<String>,
    /// Path of the simulator's GGUF file (with `--simulator-model`, embedded; skips pulling).
    #[arg(long, requires = "simulator_model")]
    simulator_model_path: Option<PathBuf>,
    /// Reply cache folder (default: `$MERIT_HOME/replies`).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// How the agent exchanges actions: native tool calls when the server supports them
    /// (auto; the embedded model has none), always the text protocol, or always native.
    #[arg(long, value_enum, default_value_t = ToolCallsArg::Auto)]
    tool_calls: ToolCallsArg,
    #[command(flatten)]
    budget: crate::interact::learn::AgentBudgetArgs,
    #[command(flatten)]
    memory: MemoryArgs,
    /// Which agent: the interactive ReAct agent, or `vanilla`, the non-agentic LLM baseline
    /// (schema and request in, one query per phase out; no questions, no memory).
    #[arg(long, value_enum, default_value_t = AgentArg::React)]
    agent: AgentArg,
    /// Sample the agent's replies at this temperature (default 0: greedy). With several
    /// `--sample-seed`s, the runs are the independent tries of Pass@k (`merit interact report
    /// --pass-at-k`).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// The sampling seed of every agent call (with `--temperature` above 0).
    #[arg(long, default_value_t = 0)]
    sample_seed: u64,
    /// The Demo agent: show the first `--demo-count` successful episodes of this episode log
    /// (a training-split run's `episodes.jsonl`) to every episode as fixed worked examples.
    #[arg(long, conflicts_with = "memory")]
    demos: Option<PathBuf>,
    /// Demonstrations shown with `--demos`.
    #[arg(long, default_value_t = 2, requires = "demos",
          value_parser = clap::value_parser!(u16).range(1..))]
    demo_count: u16,
    /// Episodes run at once; the embedded model decodes their calls together (agent and
    /// simulator alike). Only without memory or with `--frozen-memory` and a selector that
    /// does not learn online: an online memory must see each episode before the next. The log
    /// is written in task order either way; a batched reply can differ from a one-at-a-time
    /// one in a near tie, and the reply cache keeps whichever came first.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    parallel: u16,
}

/// `--simulator` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SimulatorArg {
    Model,
    Human,
}

/// `--agent` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum AgentArg {
    React,
    Vanilla,
}

/// `--tool-calls` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ToolCallsArg {
    Auto,
    Text,
    Native,
}

/// Which selector chooses among the embedding stage's candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
enum SelectorKind {
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
enum RetentionArg {
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
struct MemoryArgs {
    /// Long-term memory selector; without it the agent runs with no memory (the baseline).
    #[arg(long, value_enum)]
    memory: Option<SelectorKind>,
    /// Do not retrieve episode-level memories (ablation).
    #[arg(long, requires = "memory")]
    no_episode_memory: bool,
    /// Do not retrieve turn-level memories (ablation).
    #[arg(long, requires = "memory")]
    no_turn_memory: bool,
    /// Memories injected per retrieval, 1 to 5 (the paper's default: 1).
    #[arg(long, default_value_t = 1, requires = "memory")]
    inject: usize,
    /// Candidates kept by the embedding stage (the paper's 10).
    #[arg(long, default_value_t = 10, requires = "memory")]
    candidates: usize,
    /// Which memories are written: `successful-episodes` (the paper's), `positive-steps`
    /// (also the helpful steps of failed episodes) or `all` (everything, with its polarity).
    #[arg(
        long,
        value_enum,
        default_value = "successful-episodes",
        requires = "memory"
    )]
    retention: RetentionArg,
    /// Start from the memory folder of an earlier run (e.g. the training run's `memory/`).
    #[arg(long, requires = "memory")]
    memory_from: Option<PathBuf>,
    /// Read the memory but add nothing to it (evaluation on a fixed memory).
    #[arg(long, requires = "memory")]
    frozen_memory: bool,
    /// With `--memory learned`: the episode-level checkpoint (`episode.safetensors` from
    /// `merit interact train-selector`), or `cosine` for cosine selection at that level;
    /// required unless `--no-episode-memory`.
    #[arg(long)]
    episode_selector: Option<PathBuf>,
    /// With `--memory learned`: the turn-level checkpoint, or `cosine` for cosine selection
    /// at that level; required unless `--no-turn-memory`.
    #[arg(long)]
    turn_selector: Option<PathBuf>,
    /// Embedded embedder name.
    #[arg(long, default_value = merit_models::registry::DEFAULT_EMBEDDER)]
    #[serde(skip)]
    embedder: String,
    /// OpenAI-compatible embeddings server; default: the embedded embedder.
    #[arg(long, requires = "embed_model")]
    #[serde(skip)]
    embed_url: Option<String>,
    /// Embedding model name on the server.
    #[arg(long)]
    #[serde(skip)]
    embed_model: Option<String>,
}

pub(super) fn run_agent(args: InteractRunArgs) -> Result<()> {
    if !args.chat.is_server() {
        reexec_with_bounded_openmp_spin();
    }
    let mut set = TaskSet::load(&args.tasks, &args.db_root)
        .with_context(|| format!("cannot load the tasks of {}", args.tasks.display()))?;
    if let Some(truth) = &args.ground_truth {
        let merged = set
            .merge_ground_truth(truth)
            .with_context(|| format!("cannot merge ground truth from {}", truth.display()))?;
        eprintln!("ground truth: {merged:?}");
    }
    if let Some(dir) = &args.sqlite_dir {
        let attached = set.use_sqlite_dir(dir);
        eprintln!("{attached} databases taken from {}", dir.display());
    }
    let mut ids: Vec<String> = set
        .tasks()
        .iter()
        .map(|task| task.instance_id().to_string())
        .collect();
    if let Some(limit) = args.limit {
        ids.truncate(limit);
    }
    if ids.is_empty() {
        bail!("{} holds no tasks", args.tasks.display());
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    // One process per run directory (its log is append-only).
    let _lock = crate::files::lock_run_dir(&args.out)?;

    check_run_options(&args)?;
    let parallel = usize::from(args.parallel);
    let store = open_store(args.cache.as_ref())?;
    let model = crate::models::chat_with_parallel(&args.chat, &store, parallel)?;
    let agent = ReactAgent::new(
        Arc::clone(&model),
        AgentConfig {
            tool_calls: match args.tool_calls {
                ToolCallsArg::Auto => ToolCallMode::Auto,
                ToolCallsArg::Text => ToolCallMode::Text,
                ToolCallsArg::Native => ToolCallMode::Native,
            },
            temperature: args.temperature,
            sample_seed: args.sample_seed,
            style: match args.agent {
                AgentArg::React => AgentStyle::React,
                AgentArg::Vanilla => AgentStyle::Vanilla,
            },
            ..args.budget.agent_config()
        },
    );
    let log = args.out.join(LOG_FILE);
    let simulator_model = match &args.simulator_model {
        None => Arc::clone(&model),
        Some(name) => crate::models::chat_with_parallel(
            &args.chat.for_model(name, args.simulator_model_path.clone()),
            &store,
            parallel,
        )?,
    };
    check_run_settings(&args, &model.id(), &simulator_model.id())?;
    let spec = RunSpec {
        set: &set,
        instance_ids: &ids,
        log: &log,
        env: EnvConfig::default(),
        simulator_model: Some(simulator_model.id()),
        episodes_at_once: parallel,
    };
    let bar = crate::files::progress_bar(ids.len(), "interact");
    if args.simulator == SimulatorArg::Human {
        // The bar would redraw over the questions the person is answering.
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let mut passed = 0usize;
    // The online baselines learn from every finished episode; a resumed run first replays
    // what its log holds, so their state is the one an uninterrupted run would have.
    let online: Option<Arc<dyn OnlineSelector>> = match args.memory.memory {
        Some(SelectorKind::Memrl) => Some(Arc::new(MemRlSelector::default())),
        Some(SelectorKind::Memento) => Some(Arc::new(MementoSelector::default())),
        _ => None,
    };
    if let Some(online) = &online {
        for record in read_log(&log)?.records {
            online.learn(&record.injections, record.trajectory.outcome.reward);
        }
    }
    let on_episode = |record: &EpisodeRecord| {
        if let Some(online) = &online {
            online.learn(&record.injections, record.trajectory.outcome.reward);
        }
        passed += usize::from(record.trajectory.outcome.phase1_passed);
        bar.inc(1);
        bar.set_message(format!("interact: phase 1 passed {passed}"));
        crate::files::log_progress_when_not_a_terminal(&bar, 5);
    };
    let make_simulator = |_: &merit_interact::Task| -> Box<dyn UserSimulator + Send> {
        match args.simulator {
            SimulatorArg::Model => Box::new(ModelSimulator::new(
                Arc::clone(&simulator_model),
                ModelSimulatorConfig::default(),
            )),
            // Prompts go to stderr: stdout carries the report.
            SimulatorArg::Human => Box::new(HumanSimulator::new(
                std::io::BufReader::new(std::io::stdin()),
                std::io::stderr(),
            )),
        }
    };
    // The engine is chosen at run time; boxing gives the run one backend type.
    let server = match &args.pg_url {
        Some(url) => Some(
            merit_interact::pg::PostgresServer::new(url)
                .with_context(|| "cannot use the PostgreSQL server of --pg-url".to_string())?,
        ),
        None => None,
    };
    let open_backend = |meta: &merit_interact::DatabaseMeta| -> Result<
        Box<dyn merit_interact::InteractBackend + Send>,
        merit_interact::InteractError,
    > {
        Ok(match &server {
            Some(server) => Box::new(merit_interact::pg::postgres_backend(server, meta)?),
            None => Box::new(sqlite_backend(meta)?),
        })
    };
    let demos = match &args.demos {
        Some(path) => {
            let records = read_log(path)
                .with_context(|| format!("cannot read the demonstrations {}", path.display()))?
                .records;
            Some(
                StaticDemos::from_records(&records, usize::from(args.demo_count))
                    .with_context(|| format!("no demonstrations in {}", path.display()))?,
            )
        }
        None => None,
    };
    let summary = match (args.memory.memory, &demos) {
        (None, Some(demos)) => run_tasks_with_demos(
            &spec,
            &agent,
            demos,
            open_backend,
            make_simulator,
            on_episode,
        ),
        (None, None) => run_tasks(&spec, &agent, open_backend, make_simulator, on_episode),
        (Some(kind), _) => {
            let memory_args = &args.memory;
            let embedder = build_embedder(
                &memory_args.embedder,
                memory_args.embed_url.as_ref(),
                memory_args.embed_model.as_ref(),
                &store,
            )?;
            let selector_for = |level: Level| -> Result<Arc<dyn Selector>> {
                Ok(match kind {
                    SelectorKind::Bm25 => Arc::new(Bm25Selector),
                    SelectorKind::Topick => Arc::new(TopicKSelector),
                    SelectorKind::Cosine => Arc::new(CosineSelector::default()),
                    SelectorKind::Model => Arc::new(ModelSelector::new(Arc::clone(&model), 64)),
                    SelectorKind::Memrl | SelectorKind::Memento => match &online {
                        Some(online) => Arc::clone(online) as Arc<dyn Selector>,
                        None => bail!("an online selector was not built"),
                    },
                    SelectorKind::Learned => {
                        let (path, option, disabled) = match level {
                            Level::Episode => (
                                &memory_args.episode_selector,
                                "--episode-selector",
                                memory_args.no_episode_memory,
                            ),
                            Level::Turn => (
                                &memory_args.turn_selector,
                                "--turn-selector",
                                memory_args.no_turn_memory,
                            ),
                        };
                        match path {
                            // An unused level needs no selector.
                            None if disabled => Arc::new(CosineSelector::default()),
                            None => bail!(
                                "--memory learned needs {option} CHECKPOINT (from `merit \
                                 interact train-selector`), or `{option} cosine` to select by \
                                 cosine at that level"
                            ),
                            Some(path) if path.as_os_str() == "cosine" => {
                                Arc::new(CosineSelector::default())
                            }
                            Some(path) => Arc::new(
                                LearnedSelector::load(path, level, embedder.dimension())
                                    .with_context(|| {
                                        format!("cannot load the selector {}", path.display())
                                    })?,
                            ),
                        }
                    }
                })
            };
            let episode_selector = selector_for(Level::Episode)?;
            let turn_selector = selector_for(Level::Turn)?;
            let extractor = InsightExtractor::new(Arc::clone(&model), InsightConfig::default());
            let retrieval = RetrievalConfig {
                candidates: memory_args.candidates,
                inject: memory_args.inject,
                ..RetrievalConfig::default()
            };
            retrieval.validate()?;
            let memory = MemoryRun {
                dir: args.out.join("memory"),
                base: memory_args.memory_from.clone(),
                config: MemoryConfig {
                    retention: memory_args.retention.into(),
                    ..MemoryConfig::default()
                },
                advisor: AdvisorConfig {
                    episode_level: !memory_args.no_episode_memory,
                    turn_level: !memory_args.no_turn_memory,
                    episode_retrieval: retrieval,
                    turn_retrieval: retrieval,
                },
                embedder: embedder.as_ref(),
                episode_selector: episode_selector.as_ref(),
                turn_selector: turn_selector.as_ref(),
                insight: Some(&extractor),
                write: !memory_args.frozen_memory,
            };
            run_tasks_with_memory(
                &spec,
                &agent,
                &memory,
                open_backend,
                make_simulator,
                on_episode,
            )
        }
    }
    .map_err(|error| {
        anyhow!("{error}\nfinished episodes are logged; run the same command again to continue")
    })?;
    bar.finish_and_clear();
    for warning in &summary.warnings {
        eprintln!("warning: {warning}");
    }
    for skipped in &summary.skipped {
        eprintln!("skipped {}: {}", skipped.instance_id, skipped.reason);
    }
    eprintln!(
        "{} episodes run now, {} already logged, {} skipped; log: {}",
        summary.ran,
        summary.already_logged,
        summary.skipped.len(),
        log.display()
    );
    print!("{}", render(&summarise(std::slice::from_ref(&args.out))?));
    Ok(())
}

/// Refuses `--parallel` above 1 where episodes depend on the ones before them: a memory that
/// is written, or an online selector (MemRL, Memento) that learns from every episode.
fn check_run_options(args: &InteractRunArgs) -> Result<()> {
    if args.simulator == SimulatorArg::Human && args.parallel > 1 {
        bail!("--simulator human answers one episode at a time: drop --parallel");
    }
    if !(args.temperature.is_finite() && (0.0..=2.0).contains(&args.temperature)) {
        bail!("--temperature {} is outside 0 to 2", args.temperature);
    }
    if args.agent == AgentArg::Vanilla && (args.memory.memory.is_some() || args.demos.is_some()) {
        bail!("--agent vanilla takes no --memory or --demos: the baseline sees only the schema and the request");
    }
    if args.parallel <= 1 {
        return Ok(());
    }
    match args.memory.memory {
        None => Ok(()),
        Some(kind @ (SelectorKind::Memrl | SelectorKind::Memento)) => bail!(
            "--parallel {} cannot be used with --memory {}: it learns from every finished \
             episode, so each must finish before the next starts",
            args.parallel,
            format!("{kind:?}").to_lowercase()
        ),
        Some(_) if !args.memory.frozen_memory => bail!(
            "--parallel {} needs --frozen-memory (or no --memory): an online memory must see \
             each episode before the next starts",
            args.parallel
        ),
        Some(_) => Ok(()),
    }
}

const SETTINGS_FILE: &str = "settings.json";

/// What must not change between the invocations of one run directory: the task file, the
/// model, and the memory options. Written on the first invocation; a later one with other
/// settings is refused, since its episodes would not belong to the same experiment.
fn check_run_settings(args: &InteractRunArgs, model_id: &str, simulator_id: &str) -> Result<()> {
    let mut settings = serde_json::json!({
        "tasks": args.tasks,
        "ground_truth": args.ground_truth,
        "model": model_id,
        "tool_calls": format!("{:?}", args.tool_calls).to_lowercase(),
        "max_turns": args.budget.max_turns,
        "observation_chars": args.budget.observation_chars,
        "max_tokens": args.budget.max_tokens,
        "memory": &args.memory,
    });
    // Recorded only when on, so run directories made before these options still continue.
    for (name, on) in [
        ("fold_repeats", args.budget.fold_repeats),
        ("schema_in_opening", args.budget.schema_in_opening),
    ] {
        if on {
            settings[name] = serde_json::Value::Bool(true);
        }
    }
    // Recorded only when on, for the same reason.
    if args.temperature > 0.0 {
        settings["sampling"] =
            serde_json::json!({"temperature": args.temperature, "seed": args.sample_seed});
    }
    if args.agent == AgentArg::Vanilla {
        settings["agent"] = serde_json::Value::String("vanilla".to_string());
    }
    if let Some(demos) = &args.demos {
        settings["demos"] = serde_json::json!({"log": demos, "count": args.demo_count});
    }
    // Recorded only when PostgreSQL is used, for the same reason (the URL is not recorded: it
    // may hold a password, and a run may continue on another server with the same data).
    if args.pg_url.is_some() {
        settings["backend"] = serde_json::Value::String("postgres".to_string());
    }
    // Recorded only when it differs from the agent's, for the same reason.
    if simulator_id != model_id {
        settings["simulator_model"] = serde_json::Value::String(simulator_id.to_string());
    }
    let path = args.out.join(SETTINGS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let recorded: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not valid JSON", path.display()))?;
            if recorded != settings {
                bail!(
                    "{} was started with other settings:\n  recorded: {recorded}\n  now:      {settings}\nuse another --out, or the recorded settings to continue",
                    args.out.display()
                );
            }
            Ok(())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            crate::files::write_atomically(
                &path,
                serde_json::to_string_pretty(&settings)?.as_bytes(),
            )
        }
        Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
}
