//! The learned parts of MERIT interact on the command line: teacher annotations for the
//! process reward model (`merit interact prm annotate`), the student PRM and its agreement
//! table (`merit interact prm train`), and the PPO selectors (`merit interact train-selector`).
//!
//! Every model call goes through the reply cache, and every random draw comes from a seeded
//! generator, so running a command again replays it: that is how an interrupted annotation
//! or training continues (annotation files are also appended to and skip what they hold).

use crate::models::{chat, embedder, store, ChatArgs, EmbedArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use merit_core::model::Embedder;
use merit_interact::agent::{AgentConfig, ReactAgent};
use merit_interact::memory::{InteractMemory, Level, MemoryConfig, RetrievalConfig};
use merit_interact::prm::{annotate, read_annotations, AnnotationPair, JudgeConfig, RubricJudge};
use merit_interact::runlog::read_log;
use merit_interact::simulator::model::{ModelSimulator, ModelSimulatorConfig};
use merit_interact::{sqlite_backend, EnvConfig, TaskSet};
use merit_learn::holdout::{prm_utilities, HeldOut, PrmRewards};
use merit_learn::selector::{
    decision_shift, PpoConfig, PpoTrainer, SelectionExample, SelectorConfig, SelectorInputs,
    SelectorPolicy,
};
use merit_learn::student::{train_student, SplitBy, StudentPrm, StudentTraining};
use merit_learn::train::{
    score_rules, split_by_task, train_bandit, train_episode_selector, turn_examples,
    EpisodeTraining, TurnExample, UpdateRecord,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What one episode of the agent may cost: the same options for runs, selector training and
/// counterfactual forks, so that a selector trains on episodes like those it is evaluated on.
#[derive(Debug, Clone, Copy, Args)]
pub struct AgentBudgetArgs {
    /// Model calls per episode at most (the protocol's 60; fewer bounds what a small model
    /// that never submits costs).
    #[arg(long, default_value_t = merit_interact::env::DEFAULT_MAX_TURNS)]
    pub max_turns: usize,
    /// Observations are cut to this many characters in the agent's prompt (the log keeps them
    /// whole).
    #[arg(long, default_value_t = 12_000)]
    pub observation_chars: usize,
    /// Tokens one agent reply may generate (a small model that runs on past its action
    /// otherwise spends the whole allowance on every turn).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    /// Fold a word-for-word repeated action into a numbered note instead of a new turn of the
    /// conversation (small models under greedy decoding otherwise copy it until the budget is
    /// gone).
    #[arg(long)]
    pub fold_repeats: bool,
    /// Show the schema with the opening message (a deviation from BIRD-Interact, whose agent
    /// must spend a `get_schema()` first).
    #[arg(long)]
    pub schema_in_opening: bool,
}

impl AgentBudgetArgs {
    /// The agent configuration these options give (text or native actions as the default).
    pub fn agent_config(&self) -> AgentConfig {
        AgentConfig {
            max_turns: self.max_turns,
            observation_chars: self.observation_chars,
            max_tokens: self.max_tokens,
            fold_repeats: self.fold_repeats,
            schema_in_opening: self.schema_in_opening,
            ..AgentConfig::default()
        }
    }
}

/// The process reward model's commands.
#[derive(Debug, Subcommand)]
pub enum PrmCommand {
    /// Teacher rubrics for (state, turn memory) pairs of a memory run (resumable).
    Annotate(AnnotateArgs),
    /// Train the student PRM on annotations (SFT, then GRPO) and write its agreement table.
    Train(PrmTrainArgs),
}

/// Arguments of `merit interact prm annotate`.
#[derive(Debug, Args)]
pub struct AnnotateArgs {
    /// A run directory made with `--memory` (its `episodes.jsonl` gives the states, its
    /// `memory/` the candidate turn memories).
    #[arg(long)]
    run: PathBuf,
    /// Annotation file (appended to; pairs already in it are skipped).
    #[arg(long)]
    out: PathBuf,
    /// Candidates per state (the embedding stage's top k).
    #[arg(long, default_value_t = 10)]
    candidates: usize,
    /// Annotate at most N new pairs in this invocation, taken in a stable pseudo-random order
    /// (spread over states and candidate ranks; a later invocation continues the sample).
    #[arg(long)]
    limit: Option<usize>,
    /// Judge up to K candidates of each state (pairs already in the file count), states taken
    /// in a stable pseudo-random order, instead of drawing pairs independently: the student
    /// then sees memories compared on the same state, which is what a turn selector needs
    /// from it (drawn independently, nearly every state has one judged pair, and a small
    /// student learns to rate the state rather than the memory).
    #[arg(long, value_name = "K")]
    per_state: Option<usize>,
    #[command(flatten)]
    teacher: ChatArgs,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// Arguments of `merit interact prm train`.
#[derive(Debug, Args)]
pub struct PrmTrainArgs {
    /// Annotation files (from `merit interact prm annotate`).
    #[arg(long, required = true, num_args = 1..)]
    annotations: Vec<PathBuf>,
    /// Output folder: `student.safetensors` (+ `.json`), `agreement.md`, `agreement.json`.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the student's initial weights and of both training stages.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Percent of the pairs held out for the agreement table (the rest is split evenly
    /// between SFT and GRPO).
    #[arg(long, default_value_t = 20)]
    held_out_percent: u64,
    /// What the split draws: single pairs (the default), or whole states, so that no state
    /// of the agreement table was seen in training (use it with `annotate --per-state`).
    #[arg(long, value_enum, default_value_t = SplitByArg::Pair)]
    split_by: SplitByArg,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// The unit `prm train` splits annotations by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SplitByArg {
    /// Each (state, memory) pair on its own.
    Pair,
    /// All pairs of a state together.
    State,
}

/// Which selector `train-selector` trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LevelArg {
    /// Before an episode, rewarded by the episode's terminal reward (online rollouts).
    Episode,
    /// Before a turn, rewarded by the student PRM's utility (offline, logged states).
    Turn,
}

/// What a selector network reads (see `merit_learn::selector::SelectorInputs`).
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InputsArg {
    /// Embedding blocks and retrieval features.
    Full,
    /// The retrieval features only.
    Features,
}

/// Arguments of `merit interact train-selector`.
#[derive(Debug, Args)]
pub struct TrainSelectorArgs {
    /// The memory level.
    #[arg(long, value_enum)]
    level: LevelArg,
    /// Episode level: the training task file.
    #[arg(long, required_if_eq("level", "episode"))]
    tasks: Option<PathBuf>,
    /// Episode level: the tasks' database folder.
    #[arg(long, required_if_eq("level", "episode"))]
    db_root: Option<PathBuf>,
    /// Episode level: databases missing beside their metafiles come from
    /// `<DIR>/<db>/<db>.sqlite`.
    #[arg(long)]
    sqlite_dir: Option<PathBuf>,
    /// Episode level: the frozen memory folder the candidates come from (a run's `memory/`).
    #[arg(long, required_if_eq("level", "episode"))]
    memory_from: Option<PathBuf>,
    /// Episode level: turn memory during the training episodes, chosen by this turn-level
    /// checkpoint (or `cosine`), so the episode selector learns under the configuration it is
    /// evaluated with (`--memory learned` reads both levels). Without it the training
    /// episodes have episode memory only.
    #[arg(long)]
    with_turn_selector: Option<PathBuf>,
    /// Episode level: use the first N tasks only.
    #[arg(long)]
    limit: Option<usize>,
    /// Turn level: a run directory made with `--memory` (states from its log, candidates from
    /// its `memory/`).
    #[arg(long, required_if_eq("level", "turn"))]
    run: Option<PathBuf>,
    /// Turn level: the student PRM checkpoint (`student.safetensors`).
    #[arg(long, required_if_eq("level", "turn"))]
    prm: Option<PathBuf>,
    /// Turn level: hold out the states of N training tasks (a seeded draw), train on the
    /// rest, and score the selector's greedy choices on the held-out states against the
    /// untrained network and the fixed rules (always the top candidate, never, oracle).
    #[arg(long, default_value_t = 0)]
    holdout_tasks: usize,
    /// What the network reads about each candidate: `full` (embeddings and retrieval
    /// features) or `features` (the eight retrieval features only: far fewer weights for a
    /// training set of a few hundred states; which one generalises is for `score-selector`
    /// to measure).
    #[arg(long, value_enum, default_value_t = InputsArg::Full)]
    inputs: InputsArg,
    /// Turn level: the reward of injecting nothing (the PRM utility of an unrecommended
    /// memory is at most 0, of a recommended one at least 0).
    #[arg(long, default_value_t = 0.0)]
    none_reward: f64,
    /// Output folder: `<level>.safetensors` (+ `.json`), `<level>-curve.jsonl`,
    /// `<level>-curve.svg`.
    #[arg(long)]
    out: PathBuf,
    /// PPO updates.
    #[arg(long, default_value_t = 20)]
    updates: usize,
    /// Rollouts per update (episodes at the episode level, states at the turn level).
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Seed of the network, the task order and the sampled decisions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Candidates per retrieval (the paper's 10).
    #[arg(long, default_value_t = 10)]
    candidates: usize,
    /// Episode level: the agent's budget in the rollouts (use the evaluation runs' values).
    #[command(flatten)]
    budget: AgentBudgetArgs,
    #[command(flatten)]
    chat: ChatArgs,
    #[command(flatten)]
    embed: EmbedArgs,
}

fn open_memory(dir: &Path, embedder: &dyn Embedder) -> Result<InteractMemory> {
    if !dir.join(merit_interact::memory::EPISODE_FILE).is_file()
        && !dir.join(merit_interact::memory::TURN_FILE).is_file()
    {
        bail!(
            "{} holds no memory files (episodes.jsonl, turns.jsonl); make one with `merit interact run --memory ...`",
            dir.display()
        );
    }
    let (memory, report) = InteractMemory::open(dir, embedder, MemoryConfig::default())
        .with_context(|| format!("cannot open the memory {}", dir.display()))?;
    let _ = report;
    Ok(memory)
}

/// Runs a `prm` subcommand.
pub fn prm(command: PrmCommand) -> Result<()> {
    match command {
        PrmCommand::Annotate(args) => prm_annotate(args),
        PrmCommand::Train(args) => prm_train(args),
    }
}

fn prm_annotate(args: AnnotateArgs) -> Result<()> {
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let records = read_log(&args.run.join("episodes.jsonl"))
        .with_context(|| format!("cannot read the episode log of {}", args.run.display()))?
        .records;
    let memory = open_memory(&args.run.join("memory"), embedder.as_ref())?;
    let retrieval = RetrievalConfig {
        candidates: args.candidates,
        ..RetrievalConfig::default()
    };
    let examples = turn_examples(&records, &memory, embedder.as_ref(), &retrieval)?;
    let state_ids: Vec<String> = examples
        .iter()
        .map(|e| format!("{}#{}", e.instance_id, e.turn))
        .collect();
    let done: std::collections::BTreeSet<(String, u64)> = read_annotations(&args.out)?
        .records
        .into_iter()
        .map(|r| (r.state_id, r.memory_id))
        .collect();
    if args.per_state == Some(0) {
        bail!("--per-state must be at least 1");
    }
    let mut pairs: Vec<AnnotationPair<'_>> = Vec::new();
    for (example, state_id) in examples.iter().zip(&state_ids) {
        for memory in &example.memories {
            if !done.contains(&(state_id.clone(), memory.id)) {
                pairs.push(AnnotationPair {
                    state_id,
                    state: &example.state,
                    memory,
                });
            }
        }
    }
    let total = pairs.len();
    // A stable pseudo-random order (a hash of the pair's ids, ties by position): a limited
    // invocation annotates pairs spread over many states and ranks instead of every candidate
    // of the first few states, and a later invocation continues the same sample.
    pairs.sort_by_cached_key(|pair| {
        merit_core::hash::fnv1a(format!("{}/{}", pair.state_id, pair.memory.id).as_bytes())
    });
    if let Some(per_state) = args.per_state {
        // Grouped by state (a stable order of states), each state filled up to K judged pairs.
        pairs.sort_by_cached_key(|pair| merit_core::hash::fnv1a(pair.state_id.as_bytes()));
        let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
        for (state_id, _) in &done {
            *taken.entry(state_id.as_str()).or_default() += 1;
        }
        pairs.retain(|pair| {
            let count = taken.entry(pair.state_id).or_default();
            *count += 1;
            *count <= per_state
        });
    }
    if let Some(limit) = args.limit {
        pairs.truncate(limit);
    }
    eprintln!(
        "{} states, {} pairs not yet annotated, annotating {} now into {}",
        examples.len(),
        total,
        pairs.len(),
        args.out.display()
    );
    let teacher = chat(&args.teacher, &store)?;
    let judge = RubricJudge::new(teacher, JudgeConfig::default());
    let bar = crate::files::progress_bar(pairs.len(), "annotate");
    let mut report = merit_interact::prm::AnnotateReport::default();
    // Small chunks: the progress bar moves, and every judgement is synced as it is made.
    for chunk in pairs.chunks(16) {
        let one = annotate(&judge, chunk, &args.out)?;
        report.judged += one.judged;
        report.failures += one.failures;
        report.skipped += one.skipped;
        report.calls += one.calls;
        bar.inc(chunk.len() as u64);
        crate::files::log_progress_when_not_a_terminal(&bar, 10);
    }
    bar.finish_and_clear();
    println!(
        "judged {} pairs ({} unusable replies recorded as failures), {} model calls",
        report.judged, report.failures, report.calls
    );
    Ok(())
}

/// A stable split of a pair: 0..100 from its ids (FNV-1a), independent of file order; from
/// the state's id alone when splitting by state.
fn prm_train(args: PrmTrainArgs) -> Result<()> {
    let mut records = Vec::new();
    for file in &args.annotations {
        let loaded = read_annotations(file)
            .with_context(|| format!("cannot read annotations {}", file.display()))?;
        for warning in &loaded.warnings {
            eprintln!("warning: {warning}");
        }
        records.extend(loaded.records);
    }
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let trained = train_student(
        records,
        embedder.as_ref(),
        StudentTraining {
            held_out_percent: args.held_out_percent,
            split_by: match args.split_by {
                SplitByArg::Pair => SplitBy::Pair,
                SplitByArg::State => SplitBy::State,
            },
            seed: args.seed,
        },
    )?;
    let (sft, grpo, held_out) = trained.sizes;
    eprintln!("pairs with a rubric: {sft} SFT, {grpo} GRPO, {held_out} held out");
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    trained
        .student
        .save(&args.out.join("student.safetensors"))?;
    crate::files::write_atomically(
        &args.out.join("agreement.json"),
        serde_json::to_string_pretty(&trained.agreement)?.as_bytes(),
    )?;
    let markdown = trained.agreement.to_markdown();
    crate::files::write_atomically(&args.out.join("agreement.md"), markdown.as_bytes())?;
    print!("{markdown}");
    Ok(())
}

fn write_curve(out: &Path, level: &str, curve: &[UpdateRecord]) -> Result<()> {
    let mut lines = String::new();
    for record in curve {
        lines.push_str(&serde_json::to_string(record)?);
        lines.push('\n');
    }
    crate::files::write_atomically(&out.join(format!("{level}-curve.jsonl")), lines.as_bytes())?;
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for record in curve {
        let x = record.update as f64;
        series
            .entry("mean reward".into())
            .or_default()
            .push((x, record.mean_reward));
        series
            .entry("inject rate".into())
            .or_default()
            .push((x, record.inject_rate));
    }
    let svg = merit_lab::plots::line_chart(
        &format!("{level}-level selector: PPO learning curve"),
        "per update",
        "update",
        &series,
        &["mean reward".to_string(), "inject rate".to_string()],
    );
    crate::files::write_atomically(&out.join(format!("{level}-curve.svg")), svg.as_bytes())
}

/// The turn-level states of a run made with `--memory` (each with its candidates from the
/// run's `memory/`) and the student PRM's utility of every candidate.
fn turn_states_with_utilities(
    run: &Path,
    prm: &Path,
    embedder: &dyn Embedder,
    retrieval: &RetrievalConfig,
) -> Result<(Vec<TurnExample>, Vec<Vec<f64>>)> {
    let records = read_log(&run.join("episodes.jsonl"))?.records;
    let memory = open_memory(&run.join("memory"), embedder)?;
    let examples = turn_examples(&records, &memory, embedder, retrieval)?;
    let student = StudentPrm::load(prm)
        .with_context(|| format!("cannot load the student PRM {}", prm.display()))?;
    let utilities = prm_utilities(&examples, &student, embedder)?;
    eprintln!(
        "{} turn states with candidates from {} episodes",
        examples.len(),
        records.len()
    );
    Ok((examples, utilities))
}

/// Arguments of `merit interact score-selector`.
#[derive(Debug, Args)]
pub struct ScoreSelectorArgs {
    /// A run directory made with `--memory` (states from its log, candidates from its
    /// `memory/`), typically an evaluation run the selectors never trained on.
    #[arg(long)]
    run: PathBuf,
    /// The student PRM checkpoint whose utility values each choice.
    #[arg(long)]
    prm: PathBuf,
    /// Turn-level selector checkpoints to score (one row each).
    #[arg(long = "selector", required = true)]
    selectors: Vec<PathBuf>,
    /// The reward of injecting nothing.
    #[arg(long, default_value_t = 0.0)]
    none_reward: f64,
    /// Candidates per retrieval (the paper's 10).
    #[arg(long, default_value_t = 10)]
    candidates: usize,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// Runs `score-selector`: each checkpoint's greedy turn-level choices on a run's states,
/// valued by the student PRM, beside the fixed rules (always the top candidate, never,
/// oracle). Nothing is trained and no model is called.
pub fn score_selector(args: ScoreSelectorArgs) -> Result<()> {
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let retrieval = RetrievalConfig {
        candidates: args.candidates,
        ..RetrievalConfig::default()
    };
    retrieval.validate()?;
    let (examples, utilities) =
        turn_states_with_utilities(&args.run, &args.prm, embedder.as_ref(), &retrieval)?;
    if examples.is_empty() {
        bail!(
            "{} has no turn state with a memory candidate",
            args.run.display()
        );
    }
    let problems: Vec<SelectionExample> = examples.iter().map(|e| e.example.clone()).collect();
    let rewards = PrmRewards {
        utilities,
        none: args.none_reward,
    };
    let all: Vec<usize> = (0..problems.len()).collect();
    let mut rows = Vec::new();
    let mut fixed = Vec::new();
    for path in &args.selectors {
        let policy = SelectorPolicy::load_for(path, Level::Turn, embedder.dimension())
            .with_context(|| format!("cannot load the turn selector {}", path.display()))?;
        let mut scored = score_rules(
            &path.display().to_string(),
            &policy,
            &problems,
            &all,
            &rewards,
        )?;
        fixed = scored.split_off(1);
        rows.extend(scored);
    }
    rows.extend(fixed);
    println!(
        "Greedy turn-level choices (at most one memory) on the {} states of {}, valued by the \
         student PRM {}:\n\n| rule | states | mean utility | inject rate |\n|---|---:|---:|---:|",
        problems.len(),
        args.run.display(),
        args.prm.display()
    );
    for row in &rows {
        println!(
            "| {} | {} | {:.3} | {:.2} |",
            row.rule, row.states, row.mean_reward, row.inject_rate
        );
    }
    Ok(())
}

/// Runs `train-selector`.
pub fn train_selector(args: TrainSelectorArgs) -> Result<()> {
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let retrieval = RetrievalConfig {
        candidates: args.candidates,
        ..RetrievalConfig::default()
    };
    retrieval.validate()?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let level = match args.level {
        LevelArg::Episode => Level::Episode,
        LevelArg::Turn => Level::Turn,
    };
    let name = match level {
        Level::Episode => "episode",
        Level::Turn => "turn",
    };
    let mut trainer = PpoTrainer::new(
        SelectorConfig::new(level, embedder.dimension()).with_inputs(match args.inputs {
            InputsArg::Full => SelectorInputs::Full,
            InputsArg::Features => SelectorInputs::Features,
        }),
        PpoConfig::default(),
        args.seed,
    )?;
    // Rebuilt from the seed later would do too; kept here so the comparison below is with
    // exactly the network training started from.
    let untrained = trainer.policy()?;
    let bar = crate::files::progress_bar(args.updates, "train-selector");
    let mut curve: Vec<UpdateRecord> = Vec::new();
    let on_update = |record: &UpdateRecord| {
        bar.inc(1);
        bar.set_message(format!(
            "train-selector: mean reward {:.3}, inject rate {:.2}",
            record.mean_reward, record.inject_rate
        ));
        crate::files::log_progress_when_not_a_terminal(&bar, 1);
        curve.push(record.clone());
        if let Err(error) = write_curve(&args.out, name, &curve) {
            eprintln!("warning: cannot write the learning curve: {error}");
        }
    };
    let mut held_out: Option<HeldOut> = None;
    let problems: Vec<SelectionExample> = match args.level {
        LevelArg::Episode => {
            let (Some(tasks), Some(db_root), Some(memory_dir)) =
                (&args.tasks, &args.db_root, &args.memory_from)
            else {
                bail!("--tasks, --db-root and --memory-from are required at the episode level");
            };
            let mut set = TaskSet::load(tasks, db_root)
                .with_context(|| format!("cannot load the tasks of {}", tasks.display()))?;
            if let Some(dir) = &args.sqlite_dir {
                set.use_sqlite_dir(dir);
            }
            let mut ids: Vec<String> = set
                .tasks()
                .iter()
                .map(|t| t.instance_id().to_string())
                .collect();
            if let Some(limit) = args.limit {
                ids.truncate(limit);
            }
            let memory = open_memory(memory_dir, embedder.as_ref())?;
            let turn_selector: Option<Box<dyn merit_interact::memory::Selector>> = match &args
                .with_turn_selector
            {
                None => None,
                Some(path) if path.as_os_str() == "cosine" => {
                    Some(Box::new(merit_interact::memory::CosineSelector::default()))
                }
                Some(path) => Some(Box::new(
                    merit_learn::selector::LearnedSelector::load(
                        path,
                        Level::Turn,
                        embedder.dimension(),
                    )
                    .with_context(|| format!("cannot load the turn selector {}", path.display()))?,
                )),
            };
            let model = chat(&args.chat, &store)?;
            let agent = ReactAgent::new(Arc::clone(&model), args.budget.agent_config());
            let spec = EpisodeTraining {
                set: &set,
                instance_ids: &ids,
                memory: &memory,
                embedder: embedder.as_ref(),
                turn_selector: turn_selector.as_deref(),
                retrieval,
                env: EnvConfig::default(),
                updates: args.updates,
                batch: args.batch,
                seed: args.seed,
            };
            train_episode_selector(
                &spec,
                &mut trainer,
                &agent,
                sqlite_backend,
                |_| ModelSimulator::new(Arc::clone(&model), ModelSimulatorConfig::default()),
                on_update,
            )?
            .examples
        }
        LevelArg::Turn => {
            let (Some(run), Some(prm)) = (&args.run, &args.prm) else {
                bail!("--run and --prm are required at the turn level");
            };
            let (examples, utilities) =
                turn_states_with_utilities(run, prm, embedder.as_ref(), &retrieval)?;
            let all_problems: Vec<_> = examples.iter().map(|e| e.example.clone()).collect();
            let all_rewards = PrmRewards {
                utilities,
                none: args.none_reward,
            };
            let (train_indices, held_indices) = if args.holdout_tasks > 0 {
                let tasks: Vec<&str> = examples.iter().map(|e| e.instance_id.as_str()).collect();
                split_by_task(&tasks, args.holdout_tasks, args.seed)?
            } else {
                ((0..examples.len()).collect(), Vec::new())
            };
            let problems: Vec<_> = train_indices
                .iter()
                .map(|&i| all_problems[i].clone())
                .collect();
            let rewards = all_rewards.subset(&train_indices);
            train_bandit(
                &problems,
                &rewards,
                &mut trainer,
                args.updates,
                args.batch,
                args.seed,
                on_update,
            )?;
            if !held_indices.is_empty() {
                held_out = Some(HeldOut {
                    problems: all_problems,
                    rewards: all_rewards,
                    train: train_indices,
                    held: held_indices,
                });
            }
            problems
        }
    };
    bar.finish_and_clear();
    let checkpoint = args.out.join(format!("{name}.safetensors"));
    trainer.save(&checkpoint)?;
    println!(
        "{name}-level selector: {} updates; checkpoint {}; learning curve {}",
        trainer.updates(),
        checkpoint.display(),
        args.out.join(format!("{name}-curve.svg")).display()
    );
    // The evidence that training changed the selector: its greedy decisions on the problems
    // it trained on, against the untrained network's.
    let shift = decision_shift(&untrained, &trainer.policy()?, &problems, retrieval.inject)?;
    let decisions = args.out.join(format!("{name}-decisions.json"));
    crate::files::write_atomically(&decisions, serde_json::to_string_pretty(&shift)?.as_bytes())?;
    println!(
        "decisions against the untrained network on {} training problems: {} changed ({:.1}%); inject rate {:.2} -> {:.2}; mean P(none) {:.3} -> {:.3}; mean total variation {:.3} ({})",
        shift.problems,
        shift.changed,
        shift.changed_percent(),
        shift.inject_rate_before,
        shift.inject_rate_after,
        shift.mean_none_before,
        shift.mean_none_after,
        shift.mean_total_variation,
        decisions.display()
    );
    if let Some(held_out) = held_out {
        let trained = trainer.policy()?;
        let report = held_out.report(&untrained, &trained)?;
        let path = args.out.join(format!("{name}-holdout.json"));
        crate::files::write_atomically(&path, serde_json::to_string_pretty(&report)?.as_bytes())?;
        print!("{}", report.to_markdown(&path.display().to_string()));
    }
    Ok(())
}

/// Arguments of `merit interact counterfactual`.
#[derive(Debug, Args)]
pub struct CounterfactualArgs {
    /// The run whose logged episodes are forked.
    #[arg(long)]
    run: PathBuf,
    /// The frozen turn t: replies before it are replayed, turn t is the first new one (the
    /// paper's Table 4 freezes turn 7; episodes shorter than t are skipped).
    #[arg(long, default_value_t = 7)]
    turn: usize,
    /// The run's task file.
    #[arg(long)]
    tasks: PathBuf,
    /// The tasks' database folder.
    #[arg(long)]
    db_root: PathBuf,
    /// Databases missing beside their metafiles come from `<DIR>/<db>/<db>.sqlite`.
    #[arg(long)]
    sqlite_dir: Option<PathBuf>,
    /// The frozen memory the selectors choose from.
    #[arg(long)]
    memory_from: PathBuf,
    /// A turn-level checkpoint: adds the learned arm.
    #[arg(long)]
    turn_selector: Option<PathBuf>,
    /// Markdown table written here (and printed); a JSON file of every fork beside it.
    #[arg(long)]
    out: PathBuf,
    /// Fork only the first N logged episodes long enough to reach the frozen turn.
    #[arg(long)]
    limit: Option<usize>,
    /// Every fork is appended here as it finishes, and a later invocation skips the forks
    /// already in it (same task, arm and turn). Default: the `--out` file with the extension
    /// `forks.jsonl`. Delete it to start over after changing the memory or a selector.
    #[arg(long)]
    log: Option<PathBuf>,
    /// The agent's budget in the forks (use the values of the run being forked).
    #[command(flatten)]
    budget: AgentBudgetArgs,
    #[command(flatten)]
    chat: ChatArgs,
    #[command(flatten)]
    embed: EmbedArgs,
}

/// Runs `counterfactual`.
pub fn counterfactual(args: CounterfactualArgs) -> Result<()> {
    use merit_interact::fork::{fork_one, summarise_forks, ForkArm, ForkOutcome, ForkSpec};
    use merit_interact::memory::{Bm25Selector, CosineSelector};
    use merit_interact::runlog::EpisodeRecord;
    use merit_lab::jsonl::{read_records, truncate_torn_tail, Appender};
    use std::collections::{BTreeMap, BTreeSet};
    let store = store(&args.embed)?;
    let embedder = embedder(&args.embed, &store)?;
    let mut set = TaskSet::load(&args.tasks, &args.db_root)
        .with_context(|| format!("cannot load the tasks of {}", args.tasks.display()))?;
    if let Some(dir) = &args.sqlite_dir {
        set.use_sqlite_dir(dir);
    }
    let records = read_log(&args.run.join("episodes.jsonl"))?.records;
    let memory = open_memory(&args.memory_from, embedder.as_ref())?;
    let model = chat(&args.chat, &store)?;
    let agent = ReactAgent::new(Arc::clone(&model), args.budget.agent_config());
    let learned = match &args.turn_selector {
        Some(path) => Some(
            merit_learn::selector::LearnedSelector::load(path, Level::Turn, embedder.dimension())
                .with_context(|| format!("cannot load the selector {}", path.display()))?,
        ),
        None => None,
    };
    let (bm25, cosine) = (Bm25Selector, CosineSelector::default());
    let mut arms = vec![
        ForkArm {
            name: "none".into(),
            selector: None,
        },
        ForkArm {
            name: "bm25".into(),
            selector: Some(&bm25),
        },
        ForkArm {
            name: "cosine".into(),
            selector: Some(&cosine),
        },
    ];
    if let Some(learned) = &learned {
        arms.push(ForkArm {
            name: "learned".into(),
            selector: Some(learned),
        });
    }
    let spec = ForkSpec {
        set: &set,
        records: &records,
        turn: args.turn,
        memory: &memory,
        embedder: embedder.as_ref(),
        retrieval: RetrievalConfig::default(),
        env: EnvConfig::default(),
    };
    let forked: Vec<&EpisodeRecord> = records
        .iter()
        .filter(|r| r.turns.len() >= args.turn.max(1))
        .take(args.limit.unwrap_or(usize::MAX))
        .collect();
    // Forks are minutes each with a local model: each is kept as it finishes, and a rerun
    // after a kill continues with the ones still missing.
    let log = args
        .log
        .clone()
        .unwrap_or_else(|| args.out.with_extension("forks.jsonl"));
    let loaded = read_records::<ForkOutcome>(&log)
        .with_context(|| format!("cannot read the fork log {}", log.display()))?;
    truncate_torn_tail(&log, loaded.torn_bytes)?;
    let wanted: BTreeSet<(&str, &str)> = forked
        .iter()
        .flat_map(|r| {
            arms.iter()
                .map(|a| (r.instance_id.as_str(), a.name.as_str()))
        })
        .collect();
    let mut outcomes: Vec<ForkOutcome> = loaded
        .records
        .into_iter()
        .filter(|o| {
            o.turn == args.turn.max(1) && wanted.contains(&(o.instance_id.as_str(), o.arm.as_str()))
        })
        .collect();
    let done: BTreeSet<(String, String)> = outcomes
        .iter()
        .map(|o| (o.instance_id.clone(), o.arm.clone()))
        .collect();
    let todo: Vec<(&EpisodeRecord, &ForkArm<'_>)> = forked
        .iter()
        .flat_map(|r| arms.iter().map(move |a| (*r, a)))
        .filter(|(r, a)| !done.contains(&(r.instance_id.clone(), a.name.clone())))
        .collect();
    eprintln!(
        "{} episodes reach turn {}; {} forks to run, {} already in {}",
        forked.len(),
        args.turn,
        todo.len(),
        outcomes.len(),
        log.display()
    );
    let mut appender = Appender::open(&log)?;
    let bar = crate::files::progress_bar(todo.len(), "fork");
    for (record, arm) in todo {
        let fork = fork_one(&spec, &agent, arm, record, sqlite_backend, |_| {
            ModelSimulator::new(Arc::clone(&model), ModelSimulatorConfig::default())
        })
        .with_context(|| format!("fork of `{}` with {}", record.instance_id, arm.name))?;
        if let Some(outcome) = fork {
            appender.append(&outcome)?;
            outcomes.push(outcome);
        }
        bar.inc(1);
        crate::files::log_progress_when_not_a_terminal(&bar, 1);
    }
    bar.finish_and_clear();
    // The table's order does not depend on which forks a resumed run found in the log.
    let order: BTreeMap<&str, usize> = forked
        .iter()
        .enumerate()
        .map(|(i, r)| (r.instance_id.as_str(), i))
        .collect();
    let arm_order: BTreeMap<&str, usize> = arms
        .iter()
        .enumerate()
        .map(|(i, a)| (a.name.as_str(), i))
        .collect();
    outcomes.sort_by_key(|o| (order[o.instance_id.as_str()], arm_order[o.arm.as_str()]));
    let names: Vec<String> = arms.iter().map(|a| a.name.clone()).collect();
    let summary = summarise_forks(&outcomes, &names);
    let mut table = format!(
        "Forks at turn {} of the {} logged episodes of {} that reach it.\n\n| turn memory | forks | valid next action % | success % | mean reward |\n|---|---:|---:|---:|---:|\n",
        args.turn,
        forked.len(),
        args.run.display()
    );
    for row in &summary {
        table.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.3} |\n",
            row.arm, row.forks, row.valid_next_action, row.success, row.mean_reward
        ));
    }
    crate::files::write_atomically(&args.out, table.as_bytes())?;
    crate::files::write_atomically(
        &args.out.with_extension("json"),
        serde_json::to_string_pretty(&serde_json::json!({"summary": summary, "forks": outcomes}))?
            .as_bytes(),
    )?;
    print!("{table}");
    Ok(())
}
