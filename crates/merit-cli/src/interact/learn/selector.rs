//! `merit interact train-selector|score-selector`: the PPO selectors and their checks.

use super::{open_memory, AgentBudgetArgs};
use crate::models::{chat, embedder, store, ChatArgs, EmbedArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use merit_core::model::Embedder;
use merit_interact::agent::ReactAgent;
use merit_interact::memory::{Level, RetrievalConfig};
use merit_interact::runlog::read_log;
use merit_interact::simulator::model::{ModelSimulator, ModelSimulatorConfig};
use merit_interact::{sqlite_backend, EnvConfig};
use merit_learn::holdout::{prm_utilities, train_turn_selector, HeldOut, PrmRewards};
use merit_learn::selector::{
    decision_shift, PpoConfig, PpoTrainer, SelectionExample, SelectorConfig, SelectorInputs,
    SelectorPolicy,
};
use merit_learn::student::StudentPrm;
use merit_learn::train::{
    score_rules, train_episode_selector, turn_examples, EpisodeTraining, TurnExample, UpdateRecord,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Episode level, with `--with-turn-selector`: each turn memory shown at most once per
    /// training episode, as `merit interact run --turn-memories-once` shows them.
    #[arg(long, requires = "with_turn_selector")]
    turn_memories_once: bool,
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
    /// `<level>-curve.svg`, `<level>-decisions.json`, and with `--holdout-tasks`
    /// `<level>-holdout.json`.
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

fn write_curve(out: &Path, level: &str, curve: &[UpdateRecord]) -> Result<()> {
    let mut lines = String::new();
    for record in curve {
        lines.push_str(&serde_json::to_string(record)?);
        lines.push('\n');
    }
    crate::files::write_result_file(&out.join(format!("{level}-curve.jsonl")), lines.as_bytes())?;
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
    crate::files::write_result_file(&out.join(format!("{level}-curve.svg")), svg.as_bytes())
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
    // One training per output folder (and the leftovers of a killed one are cleared).
    let _lock = crate::files::lock_run_dir(&args.out)?;
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
            let set = crate::interact::load_task_set(tasks, db_root, args.sqlite_dir.as_deref())?;
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
                turn_memories_once: args.turn_memories_once,
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
            let training = train_turn_selector(
                &examples,
                utilities,
                args.none_reward,
                args.holdout_tasks,
                &mut trainer,
                args.updates,
                args.batch,
                args.seed,
                on_update,
            )?;
            held_out = training.held_out;
            training.problems
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
    crate::files::write_result_file(&decisions, serde_json::to_string_pretty(&shift)?.as_bytes())?;
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
        crate::files::write_result_file(&path, serde_json::to_string_pretty(&report)?.as_bytes())?;
        print!("{}", report.to_markdown(&path.display().to_string()));
    }
    Ok(())
}
