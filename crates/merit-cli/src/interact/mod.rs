//! `merit interact run` and `merit interact report`: the interactive agent on
//! BIRD-Interact-format tasks, with the model-driven user simulator and optionally the
//! dual-level long-term memory, in a resumable run directory; and the summary of such runs.

pub mod learn;

use crate::models::reexec_with_bounded_openmp_spin;
use crate::models::{build_embedder, chat, open_store, ChatArgs};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
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
use merit_lab::interact::{
    compare, render, render_behaviour, render_comparisons, render_repeated_tries, repeated_tries,
    summarise, LOG_FILE,
};
use merit_learn::selector::LearnedSelector;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;

/// The interactive system's commands.
#[derive(Debug, Subcommand)]
pub enum InteractCommand {
    /// Run the agent on a task file, with or without memory (resumable: finished tasks are skipped).
    Run(Box<InteractRunArgs>),
    /// Success per phase, reward, turns, tokens of one or more run directories.
    Report(InteractReportArgs),
    /// One JSON line per logged episode of a run (task, outcome, actions, injected memory
    /// ids): the compact record committed beside results.
    Summaries(InteractSummariesArgs),
    /// Generate tasks SQL first from Spider gold SQL (resumable; appends to OUT/tasks.jsonl).
    Gen(InteractGenArgs),
    /// Prepare a user's own SQLite database for interact tasks: writes its metafiles (schema
    /// with sample rows, empty column meanings and knowledge base) and copies the file, into
    /// OUT/NAME/, so that `--db-root OUT` serves it.
    InitDb(InteractInitDbArgs),
    /// Diversity and quality figures of a generated task set (the paper's augmentation table).
    Stats(InteractStatsArgs),
    /// The process reward model: teacher annotations, the student and its agreement table.
    #[command(subcommand)]
    Prm(crate::interact::learn::PrmCommand),
    /// Train an episode- or turn-level selector with PPO (checkpoint + learning curve).
    TrainSelector(Box<crate::interact::learn::TrainSelectorArgs>),
    /// Score turn-level selector checkpoints on a run's states with the student PRM (no
    /// training, no model calls): the held-out check for states from another split.
    ScoreSelector(Box<crate::interact::learn::ScoreSelectorArgs>),
    /// Fork logged episodes at a frozen turn with no, BM25, cosine and learned turn memory
    /// (next-action validity and final success).
    Counterfactual(Box<crate::interact::learn::CounterfactualArgs>),
}

/// Arguments of `merit interact gen`.
#[derive(Debug, Args)]
pub struct InteractGenArgs {
    /// Seed SQL: a Spider question file (`train.json`, `dev.json`) or a `SQL<TAB>db_id` file.
    #[arg(long)]
    seeds: PathBuf,
    /// Split name used in seed ids (`train`, `dev`).
    #[arg(long)]
    split: String,
    /// Spider `tables.json` of the seeds' databases.
    #[arg(long)]
    tables: PathBuf,
    /// Folder with `<db_id>/<db_id>.sqlite`.
    #[arg(long)]
    db_dir: PathBuf,
    /// Output folder: `tasks.jsonl` (with ground truth), rejections, per-database metafiles.
    #[arg(long)]
    out: PathBuf,
    /// Write at most N new records in this invocation (a later one continues).
    #[arg(long)]
    limit: Option<usize>,
    /// Use at most N seeds, taken one database at a time in turn (so the records come from
    /// as many databases as possible); default: every seed in file order.
    #[arg(long)]
    seed_sample: Option<usize>,
    /// Also copy each database's SQLite file beside its metafiles.
    #[arg(long)]
    copy_databases: bool,
    /// Give query tasks a phase-2 follow-up where one applies (a count, the first three, or
    /// the number of different values of the first answer; its SQL is the ground truth).
    #[arg(long)]
    follow_ups: bool,
    /// Also make Management (write) tasks: a DELETE or UPDATE from each query target that
    /// filters one table, judged by state checks (Python test cases) the reference change
    /// passes.
    #[arg(long)]
    writes: bool,
    /// The writing model (the 1.5B embedded model writes usable drafts; the 0.5B rarely).
    #[command(flatten)]
    chat: ChatArgs,
    /// Reply cache folder (default: `$MERIT_HOME/replies`).
    #[arg(long)]
    cache: Option<PathBuf>,
}

/// Arguments of `merit interact stats`.
#[derive(Debug, Args)]
pub struct InteractStatsArgs {
    /// Generated task file(s) (`tasks.jsonl` from `merit interact gen`); one row each.
    #[arg(required = true)]
    tasks: Vec<PathBuf>,
    /// Folder with `<db_id>/<db_id>.sqlite` to execute each gold SQL on.
    #[arg(long)]
    db_dir: PathBuf,
    /// Seed SQL files (a Spider question file) to report the same structure figures for.
    #[arg(long)]
    seeds: Vec<PathBuf>,
    /// Embedder for the mean pairwise cosine distance.
    #[command(flatten)]
    embed: crate::models::EmbedArgs,
    /// Print JSON instead of Markdown.
    #[arg(long)]
    json: bool,
}

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
    #[arg(long, default_value_t = 2, requires = "demos")]
    demo_count: usize,
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

/// Arguments of `merit interact init-db`.
#[derive(Debug, Args)]
pub struct InteractInitDbArgs {
    /// The SQLite database file.
    #[arg(long)]
    sqlite: PathBuf,
    /// The database's name in task files (`selected_database`); default: the file's stem.
    #[arg(long)]
    name: Option<String>,
    /// Database root to write into (`OUT/NAME/NAME_schema.txt`, ..., `OUT/NAME/NAME.sqlite`).
    #[arg(long)]
    out: PathBuf,
}

/// Arguments of `merit interact summaries`.
#[derive(Debug, Args)]
pub struct InteractSummariesArgs {
    /// The run directory.
    run: PathBuf,
    /// Write the lines to this file (atomically) instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Arguments of `merit interact report`.
#[derive(Debug, Args)]
pub struct InteractReportArgs {
    /// Run directories.
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// Print JSON instead of a Markdown table.
    #[arg(long)]
    json: bool,
    /// Compare every run with this one on their common tasks: paired differences of phase 1
    /// and phase 2 success with 95% bootstrap intervals (tasks resampled).
    #[arg(long)]
    baseline: Option<PathBuf>,
    /// Treat the runs as independent tries of one configuration (e.g. sampled runs with
    /// different `--sample-seed`s): Pass@k of phase 1 for k = 1..number of runs over the tasks
    /// every run holds, and the mean and sd of the success rate across runs.
    #[arg(long)]
    pass_at_k: bool,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 10_000)]
    resamples: usize,
    /// Bootstrap seed.
    #[arg(long, default_value_t = 0)]
    bootstrap_seed: u64,
}

/// Runs an `interact` subcommand.
pub fn run(command: InteractCommand) -> Result<()> {
    match command {
        InteractCommand::Run(args) => run_agent(*args),
        InteractCommand::Report(args) => report(args),
        InteractCommand::Summaries(args) => summaries(args),
        InteractCommand::Gen(args) => generate(args),
        InteractCommand::InitDb(args) => init_db(args),
        InteractCommand::Stats(args) => stats(args),
        InteractCommand::Prm(command) => crate::interact::learn::prm(command),
        InteractCommand::TrainSelector(args) => crate::interact::learn::train_selector(*args),
        InteractCommand::ScoreSelector(args) => crate::interact::learn::score_selector(*args),
        InteractCommand::Counterfactual(args) => crate::interact::learn::counterfactual(*args),
    }
}

fn init_db(args: InteractInitDbArgs) -> Result<()> {
    let name = match &args.name {
        Some(name) => name.clone(),
        None => args
            .sqlite
            .file_stem()
            .and_then(|stem| stem.to_str())
            .map(str::to_string)
            .ok_or_else(|| {
                anyhow!(
                    "give --name: {} has no usable file name",
                    args.sqlite.display()
                )
            })?,
    };
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        bail!("--name {name:?} cannot be a folder name");
    }
    let schema = merit_interact::gen::schema_of_sqlite(&args.sqlite, &name)?;
    let dir = merit_interact::gen::write_spider_metafiles(&args.out, &schema, &args.sqlite, true)?;
    eprintln!(
        "{name}: {} tables; metafiles and database written to {} (use --db-root {})",
        schema.tables.len(),
        dir.display(),
        args.out.display()
    );
    Ok(())
}

fn generate(args: InteractGenArgs) -> Result<()> {
    use merit_interact::gen;
    if !args.chat.is_server() {
        reexec_with_bounded_openmp_spin();
    }
    let mut seeds = gen::load_seeds(&args.seeds, &args.split)?;
    if let Some(count) = args.seed_sample {
        seeds = gen::spread_over_databases(seeds, count);
    }
    let schemas: std::collections::BTreeMap<String, merit_data::DatabaseSchema> =
        merit_data::load_tables(&args.tables)?
            .into_iter()
            .map(|schema| (schema.db_id.clone(), schema))
            .collect();
    let databases = merit_data::DatabaseDir::new(&args.db_dir);
    let (targets, perturbed) =
        gen::perturb_seeds(&seeds, &schemas, &databases, &gen::PerturbConfig::default())?;
    eprintln!(
        "{} seeds -> {} executable targets with rows ({perturbed:?})",
        seeds.len(),
        targets.len()
    );
    let (targets, extended) = gen::extend_targets(
        targets,
        &schemas,
        &databases,
        gen::Extensions {
            follow_ups: args.follow_ups,
            writes: args.writes,
        },
        gen::PerturbConfig::default().timeout,
    )?;
    if args.follow_ups || args.writes {
        eprintln!("extended: {extended:?}");
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let model = chat(&args.chat, &open_store(args.cache.as_ref())?)?;
    let output = args.out.join("tasks.jsonl");
    let config = gen::GenConfig {
        max_new_records: args.limit,
        ..gen::GenConfig::default()
    };
    // The environment needs each database's metafiles beside the task file. They are written
    // as soon as a database has its first record (and for records of earlier runs now), so a
    // task file cut short by a kill is usable as it stands.
    let mut with_metafiles: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut ensure_metafiles = |db: &str| -> Result<()> {
        if with_metafiles.contains(db) {
            return Ok(());
        }
        let (Some(schema), Ok(file)) = (schemas.get(db), databases.locate(db)) else {
            bail!("database {db} of a generated task is not under --tables/--db-dir");
        };
        gen::write_spider_metafiles(&args.out, schema, &file, args.copy_databases)?;
        with_metafiles.insert(db.to_string());
        Ok(())
    };
    for task in gen::read_generated(&output)? {
        ensure_metafiles(&task.selected_database)?;
    }
    let bar = crate::files::progress_bar(targets.len(), "targets");
    let mut written = 0usize;
    let mut metafile_error: Option<anyhow::Error> = None;
    let report = gen::generate_tasks(
        &targets,
        &schemas,
        model.as_ref(),
        &output,
        &config,
        &mut |target, outcome| {
            if matches!(outcome, gen::TargetOutcome::Written) {
                written += 1;
                if let Err(error) = ensure_metafiles(&target.db_id) {
                    metafile_error.get_or_insert(error);
                }
            }
            bar.inc(1);
            bar.set_message(format!("targets: {written} written"));
            crate::files::log_progress_when_not_a_terminal(&bar, 10);
        },
    )?;
    bar.finish_and_clear();
    if let Some(error) = metafile_error {
        return Err(error);
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}

fn stats(args: InteractStatsArgs) -> Result<()> {
    use merit_interact::gen;
    let databases = merit_data::DatabaseDir::new(&args.db_dir);
    let embedder = crate::models::embedder_for(&args.embed)?;
    let mut rows = Vec::new();
    for file in &args.tasks {
        let tasks = gen::read_generated(file)
            .with_context(|| format!("cannot read generated tasks {}", file.display()))?;
        let figures = gen::compute_stats(
            &tasks,
            &databases,
            Some(embedder.as_ref()),
            std::time::Duration::from_secs(30),
        )?;
        rows.push((file.display().to_string(), Some(figures), None));
    }
    for file in &args.seeds {
        let seeds = gen::load_seeds(file, "seed")?;
        let structure = gen::stats::structure_stats(seeds.iter().map(|s| s.sql.as_str()));
        rows.push((file.display().to_string(), None, Some(structure)));
    }
    if args.json {
        let value: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, figures, structure)| {
                serde_json::json!({"file": name, "generated": figures, "seeds": structure})
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "| set | records | execution rate % | non-empty | distinct skeletons | JOIN % | window % | Self-BLEU-3 (amb / clear) | mean pairwise cosine distance |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (name, figures, structure) in &rows {
        match (figures, structure) {
            (Some(f), _) => println!(
                "| {name} | {} | {:.1} | {} | {} | {:.1} | {:.1} | {:.3} / {:.3} | {} |",
                f.tasks,
                f.execution_rate * 100.0,
                f.non_empty,
                f.structure.distinct_skeletons,
                f.structure.join_share * 100.0,
                f.structure.window_share * 100.0,
                f.self_bleu3_amb,
                f.self_bleu3_clear,
                f.mean_pairwise_cosine_distance
                    .map_or("-".to_string(), |d| format!("{d:.3}"))
            ),
            (None, Some(s)) => println!(
                "| {name} (seeds) | {} | - | - | {} | {:.1} | {:.1} | - | - |",
                s.queries,
                s.distinct_skeletons,
                s.join_share * 100.0,
                s.window_share * 100.0
            ),
            (None, None) => {}
        }
    }
    Ok(())
}

fn run_agent(args: InteractRunArgs) -> Result<()> {
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
                StaticDemos::from_records(&records, args.demo_count)
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

fn report(args: InteractReportArgs) -> Result<()> {
    let summaries = summarise(&args.runs)?;
    let comparisons = match &args.baseline {
        Some(baseline) => compare(&args.runs, baseline, args.resamples, args.bootstrap_seed)?,
        None => Vec::new(),
    };
    let tries = match args.pass_at_k {
        true => Some(repeated_tries(&args.runs)?),
        false => None,
    };
    if args.json {
        let report = serde_json::json!({
            "runs": summaries, "comparisons": comparisons, "repeated_tries": tries,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&summaries));
        println!();
        print!("{}", render_behaviour(&summaries));
        if !comparisons.is_empty() {
            println!();
            print!("{}", render_comparisons(&comparisons));
        }
        if let Some(tries) = &tries {
            println!();
            print!("{}", render_repeated_tries(tries));
        }
    }
    Ok(())
}

fn summaries(args: InteractSummariesArgs) -> Result<()> {
    let log = args.run.join(LOG_FILE);
    let loaded =
        read_log(&log).with_context(|| format!("cannot read the log {}", log.display()))?;
    let mut text = String::new();
    for record in &loaded.records {
        text.push_str(&serde_json::to_string(
            &merit_interact::EpisodeSummary::of(record),
        )?);
        text.push('\n');
    }
    match &args.out {
        Some(path) => merit_core::fs::write_atomically(path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}
