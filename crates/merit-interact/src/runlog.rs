//! The episode log of an interact run, and the resumable driver that writes it.
//!
//! The log is an append-only JSON Lines file, one [`EpisodeRecord`] per finished episode. Each
//! record is written as one line with one `write` call and fsync'd before the next task starts,
//! so a killed run leaves every finished episode plus, at worst, one torn last line. On load, a
//! last line without its newline is dropped with a warning (and cut off before appending, so the
//! next record starts on a clean line); any other line that does not parse, carries another
//! format, or repeats an instance id is an error naming the file and the line. The mechanics
//! are the memory files' ([`merit_journal::jsonl`]); this module adds what a log must satisfy.
//!
//! [`run_tasks`] skips every task already in the log and appends the others as they finish:
//! kill it at any point and run it again with the same arguments to continue.
//!
//! # With long-term memory
//! [`run_tasks_with_memory`] also keeps a dual-level memory ([`MemoryRun`]). Task `i` of the
//! list is stream position `first + i`, where `first` follows the last position of the base
//! memory (0 without one). Per task: retrieve through a [`RetrievalAdvisor`] fixed at that
//! position, run the episode, draw its insight (one model call, cached), append the record
//! (with the insight and every retrieval), and only then commit the episode to the memory.
//! The memory folder is derived data: every start rebuilds it from the base memory and the
//! records already in the log (no model calls: the insight is in the record; embeddings come
//! from the embedder's cache), so a kill between the log line and the memory commit, or in
//! the middle of a commit, loses nothing.
//!
//! What a record holds is public by construction: the [`Trajectory`] (public task, the agent's
//! actions and thoughts, the observations it was shown), the agent's raw replies, and usage
//! counts. No hidden field has a path into it (`HiddenTask` is not `Serialize`); the leak test
//! searches a whole log file for planted ground-truth markers.

use crate::agent::{
    AgentError, AgentStop, AgentTurn, AgentUsage, EpisodeResult, InjectionRecord, ReactAgent,
};
use crate::backend::InteractBackend;
use crate::env::{EnvConfig, Environment, Trajectory};
use crate::error::InteractError;
use crate::memory::{
    AdvisorConfig, Insight, InsightExtractor, InteractMemory, MemoryConfig, MemoryError, Retention,
    RetrievalAdvisor, Selector, StaticDemos, StreamPos, EPISODE_FILE, TURN_FILE,
};
use crate::meta::DatabaseMeta;
use crate::prompts::PROMPT_FAMILY;
use crate::simulator::{SimulatorUsage, UserSimulator};
use crate::task::{Category, Task, TaskSet};
use merit_core::model::{Embedder, ModelError};
use merit_journal::jsonl::{self, Appender, Ending, JsonlError, Tail};
use merit_journal::resume::{Settled, Step};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The `format` of every record this version writes.
pub const EPISODE_FORMAT: &str = "merit-interact-episode-v1";

/// One finished episode, as logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// [`EPISODE_FORMAT`].
    pub format: String,
    /// The task id (also inside the trajectory; here for quick resume scans).
    pub instance_id: String,
    /// Query or Management, for the BI/DM split of the report.
    pub category: Category,
    /// Whether the task has a follow-up (a phase 2), so that phase-2 success can be counted
    /// over the tasks that have one. Absent in logs written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub has_follow_up: Option<bool>,
    /// The agent model's identifier.
    pub agent_model: String,
    /// The simulator model's identifier, when a model simulator was used.
    pub simulator_model: Option<String>,
    /// The prompt family of agent and simulator.
    pub prompt_family: String,
    /// The environment's trajectory and outcome.
    pub trajectory: Trajectory,
    /// Every agent model reply.
    pub turns: Vec<AgentTurn>,
    /// The agent's model usage.
    pub agent_usage: AgentUsage,
    /// The simulator's usage (counts only).
    pub simulator_usage: SimulatorUsage,
    /// Why the agent loop stopped.
    pub stop: AgentStop,
    /// Every memory retrieval of the episode (absent without memory).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injections: Vec<InjectionRecord>,
    /// The insight drawn from the episode for its episode memory (absent without memory, or
    /// when the episode was not kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insight: Option<Insight>,
    /// Model usage of memory writing (insight extraction), when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_usage: Option<MemoryUsage>,
}

/// Model calls spent on writing memory for one episode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryUsage {
    /// Insight calls (0 to 2).
    pub insight_calls: u64,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Their completion tokens.
    pub completion_tokens: u64,
    /// Why no insight was stored although one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insight_failure: Option<String>,
}

impl EpisodeRecord {
    /// A record of `result` for `task`.
    pub fn new(
        task: &Task,
        agent_model: String,
        simulator_model: Option<String>,
        result: EpisodeResult,
    ) -> EpisodeRecord {
        EpisodeRecord {
            format: EPISODE_FORMAT.to_string(),
            instance_id: task.instance_id().to_string(),
            category: task.category(),
            has_follow_up: Some(task.has_follow_up()),
            agent_model,
            simulator_model,
            prompt_family: PROMPT_FAMILY.to_string(),
            trajectory: result.trajectory,
            turns: result.turns,
            agent_usage: result.agent_usage,
            simulator_usage: result.simulator_usage,
            stop: result.stop,
            injections: result.injections,
            insight: None,
            memory_usage: None,
        }
    }
}

/// Why the log could not be read or written: the journals' one error type. A record that
/// cannot be serialized (never expected) is a `Corrupt` error at line 0; a task logged twice
/// is `Corrupt` at its second line.
pub type LogError = JsonlError;

/// What reading a log found.
#[derive(Debug, Clone, Default)]
pub struct LoadedLog {
    /// Every complete record, in file order.
    pub records: Vec<EpisodeRecord>,
    /// Bytes of a torn last line that was ignored (0 when the file ended cleanly).
    pub torn_bytes: usize,
    /// Human-readable warnings (a torn last line) for the caller to show.
    pub warnings: Vec<String>,
}

/// Reads every record of `path`; a missing file is an empty log. See the module docs for what
/// is tolerated.
pub fn read_log(path: &Path) -> Result<LoadedLog, LogError> {
    read_log_to_end(path).map(|(loaded, _)| loaded)
}

fn read_log_to_end(path: &Path) -> Result<(LoadedLog, Ending), LogError> {
    let parse = |raw: &[u8]| {
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        jsonl::parse_tagged(raw, EPISODE_FORMAT, "an episode record").map(Some)
    };
    // A record is logged once its newline is on disk: a last line without one is torn.
    let mut lines = jsonl::records(path, Tail::Torn, parse)?;
    let mut loaded = LoadedLog::default();
    let mut seen = BTreeSet::new();
    for next in &mut lines {
        let (line, record): (usize, EpisodeRecord) = next?;
        if !seen.insert(record.instance_id.clone()) {
            return Err(LogError::Corrupt {
                path: path.to_path_buf(),
                line,
                message: format!(
                    "task `{}` is logged twice (were two runs writing this log?)",
                    record.instance_id
                ),
            });
        }
        loaded.records.push(record);
    }
    let ending = lines.ending();
    loaded.torn_bytes = ending.torn.as_ref().map_or(0, |torn| torn.bytes);
    if loaded.torn_bytes > 0 {
        loaded.warnings.push(format!(
            "{}: the last line ({} bytes) is incomplete, probably cut by a crash; it is ignored and its task will run again",
            path.display(),
            loaded.torn_bytes
        ));
    }
    Ok((loaded, ending))
}

/// An episode log open for appending.
#[derive(Debug)]
pub struct EpisodeLog {
    appender: Appender,
}

impl EpisodeLog {
    /// Reads `path` (creating it and its folder when absent), cuts off a torn last line, and
    /// opens it for appending. Returns the records already there.
    pub fn open(path: &Path) -> Result<(EpisodeLog, LoadedLog), LogError> {
        let (loaded, ending) = read_log_to_end(path)?;
        let appender = Appender::resume(path, &ending)?;
        Ok((EpisodeLog { appender }, loaded))
    }

    /// Appends one record as one line and waits until it is on disk.
    pub fn append(&mut self, record: &EpisodeRecord) -> Result<(), LogError> {
        self.appender.append_record(record)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.appender.path()
    }
}

/// What to run: the tasks (in order), where to log, and the episode settings.
#[derive(Debug, Clone)]
pub struct RunSpec<'a> {
    /// The task set (tasks and their database metafiles).
    pub set: &'a TaskSet,
    /// The ids to run, in order.
    pub instance_ids: &'a [String],
    /// The episode log.
    pub log: &'a Path,
    /// Environment settings of every episode.
    pub env: EnvConfig,
    /// The simulator model's identifier, recorded in each record.
    pub simulator_model: Option<String>,
    /// Episodes run at once (1: one after another). More than one only without memory
    /// writes (no memory, or a frozen one): an online memory must see each episode before
    /// the next starts. Concurrent episodes share the agent's model, which batches their
    /// calls when it can; the log is written in list order either way.
    pub episodes_at_once: usize,
}

/// A task that was not run, and why (it is not logged, so a later run tries it again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedTask {
    /// The task id.
    pub instance_id: String,
    /// Why (database missing, no ground truth).
    pub reason: String,
}

/// What [`run_tasks`] did.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Tasks found in the log and not run again.
    pub already_logged: usize,
    /// Episodes run and logged now.
    pub ran: usize,
    /// Tasks that could not be run.
    pub skipped: Vec<SkippedTask>,
    /// Warnings from loading the log.
    pub warnings: Vec<String>,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The log could not be read or written.
    #[error(transparent)]
    Log(#[from] LogError),
    /// An id is not in the task set.
    #[error("task `{0}` is not in the task set")]
    UnknownTask(String),
    /// The memory could not be rebuilt or extended.
    #[error("memory: {0}")]
    Memory(#[from] MemoryError),
    /// The insight model failed (transport, server). Finished episodes are logged; rerun to
    /// resume.
    #[error("task `{instance_id}`: the insight model failed: {source}")]
    Insight {
        /// The task.
        instance_id: String,
        /// The failure.
        source: ModelError,
    },
    /// Several episodes at once were asked of a run whose memory is written.
    #[error(
        "{at_once} episodes at once need a memory that is not written (no memory, or a frozen \
         one): an online memory must see each episode before the next starts"
    )]
    ConcurrentMemoryWrites {
        /// The episodes asked for at once.
        at_once: usize,
    },
    /// An episode failed for a reason that would fail the next one too (model backend down,
    /// database IO). Finished episodes are logged; rerun to resume.
    #[error("task `{instance_id}`: {source}")]
    Episode {
        /// The task.
        instance_id: String,
        /// The failure.
        source: AgentError,
    },
}

/// Runs every task of `spec` that its log does not hold yet, one after another, logging each
/// finished episode before starting the next. `make_backend` opens a task's database (e.g.
/// [`crate::sqlite_backend`]); `make_simulator` builds a fresh simulator per task;
/// `on_episode` sees each new record (for progress). Tasks whose database is unavailable, or
/// that have no ground truth while the simulator cannot judge answers itself, are skipped and
/// reported; other failures stop the run.
pub fn run_tasks<B, S>(
    spec: &RunSpec<'_>,
    agent: &ReactAgent,
    make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError>,
    make_simulator: impl FnMut(&Task) -> S,
    on_episode: impl FnMut(&EpisodeRecord),
) -> Result<RunSummary, RunError>
where
    B: InteractBackend + Send,
    S: UserSimulator + Send,
{
    run_tasks_inner(
        spec,
        agent,
        None,
        None,
        make_backend,
        make_simulator,
        on_episode,
    )
}

/// [`run_tasks`] for the Demo agent: every episode gets the same static demonstrations with
/// its opening message (see [`StaticDemos`]).
pub fn run_tasks_with_demos<B, S>(
    spec: &RunSpec<'_>,
    agent: &ReactAgent,
    demos: &StaticDemos,
    make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError>,
    make_simulator: impl FnMut(&Task) -> S,
    on_episode: impl FnMut(&EpisodeRecord),
) -> Result<RunSummary, RunError>
where
    B: InteractBackend + Send,
    S: UserSimulator + Send,
{
    run_tasks_inner(
        spec,
        agent,
        None,
        Some(demos),
        make_backend,
        make_simulator,
        on_episode,
    )
}

/// The long-term memory of a run (see the module docs).
pub struct MemoryRun<'a> {
    /// The run's memory folder; rebuilt at every start.
    pub dir: PathBuf,
    /// The memory folder of an earlier run to start from (copied, never written).
    pub base: Option<PathBuf>,
    /// Retention and cut sizes of memory writing.
    pub config: MemoryConfig,
    /// Which levels are read, and the stage sizes.
    pub advisor: AdvisorConfig,
    /// Keys memories and queries (pass the cached embedder).
    pub embedder: &'a dyn Embedder,
    /// Second stage at the episode level.
    pub episode_selector: &'a dyn Selector,
    /// Second stage at the turn level.
    pub turn_selector: &'a dyn Selector,
    /// Draws the insight of kept episodes; `None` stores episode memories without one.
    pub insight: Option<&'a InsightExtractor>,
    /// `false` freezes the memory: episodes read it but add nothing (evaluation on a fixed
    /// bank).
    pub write: bool,
}

impl std::fmt::Debug for MemoryRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRun")
            .field("dir", &self.dir)
            .field("base", &self.base)
            .field("config", &self.config)
            .field("advisor", &self.advisor)
            .field("episode_selector", &self.episode_selector.name())
            .field("turn_selector", &self.turn_selector.name())
            .field("write", &self.write)
            .finish()
    }
}

/// Rebuilds the run's memory folder from the base memory (see the module docs); returns the
/// memory and the stream position of the run's first task.
fn rebuild_memory(memory: &MemoryRun<'_>) -> Result<(InteractMemory, StreamPos), MemoryError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MemoryError::Journal(JsonlError::Io { path, source })
    };
    std::fs::create_dir_all(&memory.dir).map_err(io(&memory.dir))?;
    for file in [EPISODE_FILE, TURN_FILE] {
        let target = memory.dir.join(file);
        match std::fs::remove_file(&target) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io(&target)(error)),
        }
        if let Some(base) = &memory.base {
            let source = base.join(file);
            if source.exists() {
                // Copy to a temporary name first and put it in place whole: a kill mid-copy
                // must not leave a torn file that the next start would read as memories.
                let temporary = merit_core::fs::temporary_beside(&target);
                if let Err(error) = std::fs::copy(&source, &temporary) {
                    let _ = std::fs::remove_file(&temporary);
                    return Err(io(&source)(error));
                }
                merit_core::fs::persist(&temporary, &target).map_err(io(&target))?;
            }
        }
    }
    let (opened, _) = InteractMemory::open(&memory.dir, memory.embedder, memory.config.clone())?;
    let first = opened
        .last_committed()
        .map_or(StreamPos(0), |p| StreamPos(p.0 + 1));
    Ok((opened, first))
}

/// Like [`run_tasks`], with the long-term memory `memory` read before and during every
/// episode and extended after it (see the module docs).
pub fn run_tasks_with_memory<B, S>(
    spec: &RunSpec<'_>,
    agent: &ReactAgent,
    memory: &MemoryRun<'_>,
    make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError>,
    make_simulator: impl FnMut(&Task) -> S,
    on_episode: impl FnMut(&EpisodeRecord),
) -> Result<RunSummary, RunError>
where
    B: InteractBackend + Send,
    S: UserSimulator + Send,
{
    run_tasks_inner(
        spec,
        agent,
        Some(memory),
        None,
        make_backend,
        make_simulator,
        on_episode,
    )
}

/// Commits a finished (or logged) episode to the run's memory.
fn commit_record(
    memory: &mut InteractMemory,
    run: &MemoryRun<'_>,
    position: StreamPos,
    record: &EpisodeRecord,
) -> Result<(), MemoryError> {
    if run.write {
        memory.commit(
            position,
            &record.trajectory,
            record.insight.clone(),
            run.embedder,
        )?;
    }
    Ok(())
}

/// A task of the list that settles without running.
enum ReadyTask {
    /// Already in the log: commit it to the memory again, write nothing.
    Logged(Box<EpisodeRecord>),
    /// Not run, with the reason.
    Skipped(SkippedTask),
}

/// What a worker runs: one episode of `task` on its own backend and simulator.
struct EpisodeWork<'t, B, S> {
    task: &'t Task,
    meta: &'t Arc<DatabaseMeta>,
    backend: B,
    simulator: S,
}

/// What a worker's episode came to: finished, or skipped for a reason found while running.
type WorkedTask<'t> = Result<(&'t Task, Box<EpisodeResult>), SkippedTask>;

fn run_tasks_inner<B, S>(
    spec: &RunSpec<'_>,
    agent: &ReactAgent,
    memory_run: Option<&MemoryRun<'_>>,
    demos: Option<&StaticDemos>,
    mut make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError>,
    mut make_simulator: impl FnMut(&Task) -> S,
    mut on_episode: impl FnMut(&EpisodeRecord),
) -> Result<RunSummary, RunError>
where
    B: InteractBackend + Send,
    S: UserSimulator + Send,
{
    let at_once = spec.episodes_at_once.max(1);
    if at_once > 1 && memory_run.is_some_and(|run| run.write) {
        return Err(RunError::ConcurrentMemoryWrites { at_once });
    }
    let (mut log, loaded) = EpisodeLog::open(spec.log)?;
    let mut done: BTreeMap<String, EpisodeRecord> = loaded
        .records
        .into_iter()
        .map(|r| (r.instance_id.clone(), r))
        .collect();
    let mut summary = RunSummary {
        warnings: loaded.warnings,
        ..RunSummary::default()
    };
    let (bank, first) = match memory_run {
        Some(run) => {
            let (bank, first) = rebuild_memory(run)?;
            (Some(std::sync::RwLock::new(bank)), first)
        }
        None => (None, StreamPos(0)),
    };
    let bank = bank.as_ref();
    let position = |index: usize| StreamPos(first.0 + index as u64);
    let task_of = |index: usize| {
        let id = &spec.instance_ids[index];
        spec.set
            .get(id)
            .ok_or_else(|| RunError::UnknownTask(id.clone()))
    };
    let skipped = |index: usize, reason: String| SkippedTask {
        instance_id: spec.instance_ids[index].clone(),
        reason,
    };
    // The engine (merit_journal::resume) runs episodes `at_once` at a time and settles them
    // in list order whatever order they finish in: the log of a concurrent run is the log of
    // a sequential one. With one at a time (the only way a written memory runs), each episode
    // is committed before the next starts, as strict causality requires.
    merit_journal::resume::drive(
        spec.instance_ids.len(),
        at_once,
        |index| {
            let task = task_of(index)?;
            if let Some(record) = done.remove(task.instance_id()) {
                return Ok(Step::Ready(ReadyTask::Logged(Box::new(record))));
            }
            let skip = |reason: String| Ok(Step::Ready(ReadyTask::Skipped(skipped(index, reason))));
            let Some(meta) = spec.set.database(task.database()) else {
                return skip(format!("database `{}` is not loaded", task.database()));
            };
            let simulator = make_simulator(task);
            // Without ground truth only a user who judges answers themselves can run it.
            if !task.has_ground_truth() && !simulator.judges_without_truth() {
                return skip("it has no ground truth to judge a submission".into());
            }
            match make_backend(meta) {
                Ok(backend) => Ok(Step::Run(EpisodeWork {
                    task,
                    meta,
                    backend,
                    simulator,
                })),
                Err(error @ InteractError::DatabaseUnavailable { .. }) => skip(error.to_string()),
                Err(error) => Err(RunError::Episode {
                    instance_id: task.instance_id().to_string(),
                    source: AgentError::Environment(error),
                }),
            }
        },
        |index, work: EpisodeWork<'_, B, S>| -> Result<WorkedTask<'_>, RunError> {
            let task = work.task;
            let episode = (|| -> Result<EpisodeResult, AgentError> {
                let mut env = Environment::new(
                    task,
                    Arc::clone(work.meta),
                    work.backend,
                    work.simulator,
                    spec.env.clone(),
                )?;
                match (memory_run, bank) {
                    (Some(run), Some(bank)) => {
                        // Read-locked for the episode; a commit (one at a time only) waits
                        // for it.
                        let bank = bank.read().unwrap_or_else(|e| e.into_inner());
                        // A frozen memory is seen from just after its last entry by every
                        // task: it holds nothing newer, so the view is the same, and a
                        // memory's age (a learned selector's input) is then what selector
                        // training measured (`merit_learn`: from the bank's end), instead of
                        // growing by one with each evaluation task.
                        let view_position = if run.write { position(index) } else { first };
                        let mut advisor = RetrievalAdvisor::new(
                            &bank,
                            run.embedder,
                            run.episode_selector,
                            run.turn_selector,
                            run.advisor,
                            view_position,
                        );
                        agent.run_with_memory(&mut env, &mut advisor)
                    }
                    _ => match demos {
                        Some(demos) => agent.run_with_memory(&mut env, &mut demos.clone()),
                        None => agent.run(&mut env),
                    },
                }
            })();
            match episode {
                Ok(result) => Ok(Ok((task, Box::new(result)))),
                Err(AgentError::Environment(
                    error @ (InteractError::DatabaseUnavailable { .. }
                    | InteractError::NoGroundTruth { .. }),
                )) => Ok(Err(skipped(index, error.to_string()))),
                // Episodes settled before it are logged; the rest rerun on resume.
                Err(source) => Err(RunError::Episode {
                    instance_id: task.instance_id().to_string(),
                    source,
                }),
            }
        },
        |index, settled| {
            match settled {
                Settled::Ready(ReadyTask::Logged(record)) => {
                    if let (Some(run), Some(bank)) = (memory_run, bank) {
                        let mut bank = bank.write().unwrap_or_else(|e| e.into_inner());
                        commit_record(&mut bank, run, position(index), &record)?;
                    }
                    summary.already_logged += 1;
                }
                Settled::Ready(ReadyTask::Skipped(task)) | Settled::Ran(Err(task)) => {
                    summary.skipped.push(task)
                }
                Settled::Ran(Ok((task, result))) => {
                    let record = finish_record(
                        spec,
                        agent,
                        memory_run,
                        bank,
                        position(index),
                        task,
                        *result,
                        &mut log,
                    )?;
                    summary.ran += 1;
                    on_episode(&record);
                }
            }
            Ok(())
        },
    )?;
    Ok(summary)
}

/// Logs a finished episode (with its insight when the memory keeps it) and commits it to
/// the memory: the log line first, since the memory is rebuilt from the log, never the
/// reverse.
#[allow(clippy::too_many_arguments)]
fn finish_record(
    spec: &RunSpec<'_>,
    agent: &ReactAgent,
    memory_run: Option<&MemoryRun<'_>>,
    bank: Option<&std::sync::RwLock<InteractMemory>>,
    position: StreamPos,
    task: &Task,
    result: EpisodeResult,
    log: &mut EpisodeLog,
) -> Result<EpisodeRecord, RunError> {
    let mut record =
        EpisodeRecord::new(task, agent.model_id(), spec.simulator_model.clone(), result);
    let (Some(run), Some(bank)) = (memory_run, bank) else {
        log.append(&record)?;
        return Ok(record);
    };
    let mut bank = bank.write().unwrap_or_else(|e| e.into_inner());
    let kept = bank.config().retention == Retention::All || record.trajectory.outcome.reward > 0.0;
    if let (true, true, Some(extractor)) = (run.write, kept, run.insight) {
        let outcome =
            extractor
                .extract(&record.trajectory)
                .map_err(|source| RunError::Insight {
                    instance_id: record.instance_id.clone(),
                    source,
                })?;
        let failure = outcome.insight.as_ref().err().cloned();
        record.insight = outcome.insight.ok();
        record.memory_usage = Some(MemoryUsage {
            insight_calls: u64::from(outcome.calls),
            prompt_tokens: outcome.prompt_tokens,
            completion_tokens: outcome.completion_tokens,
            insight_failure: failure,
        });
    }
    log.append(&record)?;
    commit_record(&mut bank, run, position, &record)?;
    Ok(record)
}

/// One episode in a line: what a reader needs to check a claim about a run without its full
/// log (task, outcome, the actions in order, what memory was injected where).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeSummary {
    /// The task.
    pub instance_id: String,
    /// Query or Management.
    pub category: Category,
    /// Phase 1 passed.
    pub phase1: bool,
    /// Phase 2 passed.
    pub phase2: bool,
    /// The reward.
    pub reward: f64,
    /// How it ended (the environment's reason).
    pub end: crate::env::EndReason,
    /// Why the agent stopped.
    pub stop: AgentStop,
    /// Agent calls.
    pub turns: usize,
    /// Every action, as `name` (with the phase when it is 2), in order.
    pub actions: Vec<String>,
    /// Every retrieval that injected something: `(level, turn, memory ids)`.
    pub injected: Vec<(crate::memory::Level, usize, Vec<u64>)>,
}

impl EpisodeSummary {
    /// The summary of a logged episode.
    pub fn of(record: &EpisodeRecord) -> EpisodeSummary {
        let outcome = &record.trajectory.outcome;
        EpisodeSummary {
            instance_id: record.instance_id.clone(),
            category: record.category,
            phase1: outcome.phase1_passed,
            phase2: outcome.phase2_passed,
            reward: outcome.reward,
            end: outcome.end,
            stop: record.stop.clone(),
            turns: outcome.turns,
            actions: record
                .trajectory
                .steps
                .iter()
                .map(|step| match step.phase {
                    crate::simulator::Phase::One => step.action.name.clone(),
                    crate::simulator::Phase::Two => format!("{} (phase 2)", step.action.name),
                })
                .collect(),
            injected: record
                .injections
                .iter()
                .filter(|i| !i.chosen.is_empty())
                .map(|i| (i.level, i.turn, i.chosen.clone()))
                .collect(),
        }
    }
}
