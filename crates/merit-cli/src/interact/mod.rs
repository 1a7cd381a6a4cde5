//! `merit interact`: the interactive system's commands, one module each: task sets
//! (`tasks`: gen, stats, init-db), runs (`run`), reports (`report`: report, summaries, missed),
//! and the learned parts (`learn`: PRM, selectors, counterfactual).

pub mod learn;
mod report;
mod run;
mod tasks;

pub use report::{InteractMissedArgs, InteractReportArgs, InteractSummariesArgs};
pub use run::InteractRunArgs;
pub use tasks::{InteractGenArgs, InteractInitDbArgs, InteractStatsArgs};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use merit_interact::TaskSet;
use std::path::{Path, PathBuf};

/// A task file with its databases, as the commands that read logged episodes back take it.
#[derive(Debug, Args)]
pub struct TaskSetArgs {
    /// The runs' task file (ground truth included).
    #[arg(long)]
    tasks: PathBuf,
    /// The tasks' database folder.
    #[arg(long)]
    db_root: PathBuf,
    /// Databases missing beside their metafiles come from `<DIR>/<db>/<db>.sqlite`.
    #[arg(long)]
    sqlite_dir: Option<PathBuf>,
}

impl TaskSetArgs {
    /// The task set, with `--sqlite-dir` applied.
    fn load(&self) -> Result<TaskSet> {
        load_task_set(&self.tasks, &self.db_root, self.sqlite_dir.as_deref())
    }
}

/// Loads a task file and its metafiles, taking missing SQLite files from `sqlite_dir`.
fn load_task_set(tasks: &Path, db_root: &Path, sqlite_dir: Option<&Path>) -> Result<TaskSet> {
    let mut set = TaskSet::load(tasks, db_root)
        .with_context(|| format!("cannot load the tasks of {}", tasks.display()))?;
    if let Some(dir) = sqlite_dir {
        set.use_sqlite_dir(dir);
    }
    Ok(set)
}

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
    /// In the runs' episodes that failed phase 1, the executed queries the phase-1 judge would
    /// have passed had the agent submitted them (answers found and not submitted).
    Missed(InteractMissedArgs),
    /// Generate tasks SQL first from Spider gold SQL (resumable; appends to OUT/tasks.jsonl).
    /// The model options choose the writing model: the embedded 1.5B writes usable drafts, the
    /// 0.5B default rarely (`--model qwen2.5-coder-1.5b-instruct`).
    Gen(InteractGenArgs),
    /// Prepare a user's own SQLite database for interact tasks: writes its metafiles (schema
    /// with sample rows, empty column meanings and knowledge base) and copies the file, into
    /// OUT/NAME/, so that `--db-root OUT` serves it.
    InitDb(InteractInitDbArgs),
    /// Diversity and quality figures of a generated task set (the paper's augmentation table).
    Stats(InteractStatsArgs),
    /// The process reward model: teacher annotations, the student and its agreement table.
    #[command(subcommand)]
    Prm(learn::PrmCommand),
    /// Train an episode- or turn-level selector with PPO (checkpoint + learning curve).
    TrainSelector(Box<learn::TrainSelectorArgs>),
    /// Score turn-level selector checkpoints on a run's states with the student PRM (no
    /// training, no model calls): the held-out check for states from another split.
    ScoreSelector(Box<learn::ScoreSelectorArgs>),
    /// Fork logged episodes at a frozen turn with no, BM25, cosine and learned turn memory
    /// (next-action validity and final success).
    Counterfactual(Box<learn::CounterfactualArgs>),
}

/// Runs an `interact` subcommand.
pub fn run(command: InteractCommand) -> Result<()> {
    match command {
        InteractCommand::Run(args) => run::run_agent(*args),
        InteractCommand::Report(args) => report::report(args),
        InteractCommand::Summaries(args) => report::summaries(args),
        InteractCommand::Missed(args) => report::missed(args),
        InteractCommand::Gen(args) => tasks::generate(args),
        InteractCommand::InitDb(args) => tasks::init_db(args),
        InteractCommand::Stats(args) => tasks::stats(args),
        InteractCommand::Prm(command) => learn::prm(command),
        InteractCommand::TrainSelector(args) => learn::train_selector(*args),
        InteractCommand::ScoreSelector(args) => learn::score_selector(*args),
        InteractCommand::Counterfactual(args) => learn::counterfactual(*args),
    }
}
