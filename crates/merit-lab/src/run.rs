//! Running many streams of repair episodes into a run directory that survives `kill -9`.
//!
//! Layout of a run directory:
//! - `manifest.json`: what was run (written once, atomically; a resume must match it);
//! - `episodes/<method>-seed<seed>.jsonl`: one record per finished episode, append-only;
//! - `memory/<method>-seed<seed>/`: the stream's memory files.
//!
//! The episode logs are the source of truth. On resume, each stream's memory folder is
//! discarded and rebuilt by finalizing the logged episodes again, in order, then the stream
//! continues at the first missing position. An episode interrupted mid-way is simply redone,
//! and since every model reply is deterministic (greedy decoding, reply cache) the resumed run
//! ends exactly as an uninterrupted one would.

use crate::jsonl::{read_records, truncate_torn_tail, Appender, JsonlError};
use crate::stream::stream_order;
use merit_core::episode::EpisodeRecord;
use merit_journal::resume::{Settled, Step};
use merit_journal::settings::SettingsError;
use merit_repair::repair::{
    run_episode, AttemptView, EndedEpisode, EpisodeDeps, EpisodeError, EpisodeSettings,
    FailureClassifier, QuestionView, RepairMemory,
};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One stream: a method under a seed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamSpec {
    /// Method name.
    pub method: String,
    /// Stream seed.
    pub seed: u64,
}

impl StreamSpec {
    /// `<method>-seed<seed>`, the stream's file stem.
    pub fn label(&self) -> String {
        format!("{}-seed{}", self.method, self.seed)
    }
}

/// A question ready for repair: what the agent sees, the schema text and the shared initial SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedQuestion {
    /// The question without gold.
    pub view: QuestionView,
    /// Schema text for prompts.
    pub schema: String,
    /// The shared initial prediction.
    pub initial_sql: String,
    /// What generating the shared initial prediction cost: (prompt, completion) tokens. Every
    /// method's log charges it to the episode's first attempt (one call), as the paper counts
    /// the initial generation in each method's calls and tokens.
    pub initial_tokens: (u64, u64),
}

/// Builds each stream's memory and says whether its method reflects.
pub trait MethodFactory: Sync {
    /// `true` for Reflexion-style methods.
    fn reflects(&self, method: &str) -> bool;

    /// A fresh, empty memory for `stream`, persisting under `folder` (already empty).
    fn memory(
        &self,
        stream: &StreamSpec,
        folder: &Path,
    ) -> Result<Box<dyn RepairMemory + Send>, String>;
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Reading or writing the run directory failed.
    #[error(transparent)]
    Log(#[from] JsonlError),
    /// Other filesystem failure.
    #[error("{path}: {message}")]
    Io {
        /// What was being accessed.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// An episode could not be completed (the run can be resumed after fixing the cause).
    #[error("stream {stream}: {source}")]
    Episode {
        /// The stream.
        stream: String,
        /// The episode error.
        source: EpisodeError,
    },
    /// The directory holds a different run.
    #[error("{0}")]
    Mismatch(String),
    /// A memory could not be created or replayed.
    #[error("stream {stream}: {message}")]
    Memory {
        /// The stream.
        stream: String,
        /// What went wrong.
        message: String,
    },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> RunError + '_ {
    move |error| RunError::Io {
        path: path.to_path_buf(),
        message: error.to_string(),
    }
}

/// Writes `contents` to `path` atomically ([`merit_core::fs::write_atomically`]), as a
/// [`RunError`] naming the file on failure.
pub(crate) fn write_file(path: &Path, contents: &[u8]) -> Result<(), RunError> {
    merit_core::fs::write_atomically(path, contents).map_err(io(path))
}

/// Writes the manifest on a new run, or checks it against the existing one on resume
/// ([`merit_journal::settings::ensure_settings`]).
pub fn ensure_manifest<M: Serialize>(dir: &Path, manifest: &M) -> Result<(), RunError> {
    let path = dir.join("manifest.json");
    match merit_journal::settings::ensure_settings(&path, manifest) {
        Ok(_) => Ok(()),
        Err(SettingsError::Differs { .. }) => Err(RunError::Mismatch(format!(
            "{} describes a different run (other data, model, methods or settings); \
             use a new --out directory or resume with the same settings",
            path.display()
        ))),
        Err(error) => Err(RunError::Io {
            path,
            message: error.to_string(),
        }),
    }
}

/// The episode log of a stream.
pub fn episode_log(dir: &Path, stream: &StreamSpec) -> PathBuf {
    dir.join("episodes")
        .join(format!("{}.jsonl", stream.label()))
}

/// Every logged episode of every stream under `dir`, in stream then position order.
pub fn load_episodes(dir: &Path, streams: &[StreamSpec]) -> Result<Vec<EpisodeRecord>, RunError> {
    let mut all = Vec::new();
    for stream in streams {
        all.extend(read_records::<EpisodeRecord>(&episode_log(dir, stream))?.records);
    }
    Ok(all)
}

/// The attempts of a logged episode as the memory is handed them, each failed one with the
/// label the run's classifier gives it. The log keeps the failure type, not the rule that
/// fired, so the rule comes from classifying again here; a type that differs from the logged
/// one means the log was written by another classifier, and replaying it would build another
/// memory than the run did, so that is refused.
fn attempt_views(
    record: &EpisodeRecord,
    classifier: &dyn FailureClassifier,
) -> Result<Vec<AttemptView>, String> {
    record
        .attempts
        .iter()
        .map(|a| {
            let failure = match a.failure_type {
                None => None,
                Some(logged) => {
                    let label = classifier.classify(a.status, a.error.as_deref());
                    if label.failure_type != logged {
                        return Err(format!(
                            "question {} step {}: the log says failure type {}, this \
                             classifier says {}",
                            record.question_id,
                            a.step,
                            logged.as_str(),
                            label.failure_type.as_str()
                        ));
                    }
                    Some(label)
                }
            };
            Ok(AttemptView {
                step: a.step,
                sql: a.sql.clone(),
                status: a.status,
                error: a.error.clone(),
                failure,
            })
        })
        .collect()
}

/// What to run and where.
#[derive(Debug, Clone, Copy)]
pub struct RunPlan<'a> {
    /// The run directory.
    pub dir: &'a Path,
    /// Streams to run.
    pub streams: &'a [StreamSpec],
    /// The questions, in file order (streams permute them).
    pub questions: &'a [PreparedQuestion],
    /// Episode settings; method, seed and reflection are set per stream.
    pub template: &'a EpisodeSettings,
    /// Streams run at the same time.
    pub parallel: usize,
}

/// Runs (or resumes) one stream to its end.
fn run_stream(
    plan: &RunPlan<'_>,
    stream: &StreamSpec,
    deps: &EpisodeDeps<'_>,
    factory: &dyn MethodFactory,
    on_episode: &(dyn Fn(&StreamSpec, &EpisodeRecord) + Sync),
) -> Result<(), RunError> {
    let (dir, questions, template) = (plan.dir, plan.questions, plan.template);
    let label = stream.label();
    let log = episode_log(dir, stream);
    let loaded = read_records::<EpisodeRecord>(&log)?;
    truncate_torn_tail(&log, loaded.torn_bytes)?;
    let order = stream_order(questions.len(), stream.seed);
    if loaded.records.len() > order.len() {
        return Err(RunError::Mismatch(format!(
            "{} has {} episodes but the stream has {} questions",
            log.display(),
            loaded.records.len(),
            order.len()
        )));
    }
    let memory_dir = dir.join("memory").join(&label);
    if memory_dir.exists() {
        std::fs::remove_dir_all(&memory_dir).map_err(io(&memory_dir))?;
    }
    std::fs::create_dir_all(&memory_dir).map_err(io(&memory_dir))?;
    let memory = factory
        .memory(stream, &memory_dir)
        .map_err(|message| RunError::Memory {
            stream: label.clone(),
            message,
        })?;
    // Locked by whichever of the engine's two threads touches it: the worker running an
    // episode (one at a time) or the caller replaying a logged one.
    let memory = Mutex::new(memory);
    let settings = EpisodeSettings {
        method: stream.method.clone(),
        seed: stream.seed,
        reflect: factory.reflects(&stream.method),
        ..template.clone()
    };
    let mut appender = Appender::open(&log)?;
    let mut logged = loaded.records.into_iter();
    // The log is the truth (merit_journal::resume): the logged prefix replays into the memory
    // exactly as it was learned the first time, the rest runs; one episode at a time, since
    // each one reads what the episodes before it wrote.
    merit_journal::resume::drive(
        order.len(),
        1,
        |position| {
            Ok(match logged.next() {
                Some(record) => Step::Ready(record),
                None => Step::Run(&questions[order[position]]),
            })
        },
        |position, prepared: &PreparedQuestion| {
            let mut memory = memory.lock().unwrap_or_else(|e| e.into_inner());
            let mut record = run_episode(
                &settings,
                deps,
                memory.as_mut(),
                &prepared.view,
                &prepared.schema,
                &prepared.initial_sql,
                position,
            )
            .map_err(|source| RunError::Episode {
                stream: label.clone(),
                source,
            })?;
            if let Some(initial) = record.attempts.first_mut() {
                (initial.prompt_tokens, initial.completion_tokens) = prepared.initial_tokens;
                initial.calls = 1;
            }
            Ok(record)
        },
        |position, settled| {
            let record = match settled {
                Settled::Ready(record) => {
                    let mut memory = memory.lock().unwrap_or_else(|e| e.into_inner());
                    replay(
                        &log,
                        &label,
                        position,
                        &questions[order[position]],
                        &record,
                        deps.classifier,
                        memory.as_mut(),
                    )?;
                    record
                }
                Settled::Ran(record) => {
                    appender.append(&record)?;
                    record
                }
            };
            on_episode(stream, &record);
            Ok(())
        },
    )
}

/// Replays one logged episode into the stream's memory, checking that it is the episode the
/// stream expects at `position` and that the memory writes what the log says it wrote.
fn replay(
    log: &Path,
    label: &str,
    position: usize,
    prepared: &PreparedQuestion,
    record: &EpisodeRecord,
    classifier: &dyn FailureClassifier,
    memory: &mut (dyn RepairMemory + Send),
) -> Result<(), RunError> {
    if record.position != position || record.question_id != prepared.view.id {
        return Err(RunError::Mismatch(format!(
            "{} line {}: expected question {} at position {position}, found {} at {}",
            log.display(),
            position + 1,
            prepared.view.id,
            record.question_id,
            record.position
        )));
    }
    if record.attempts.len() <= 1 {
        return Ok(());
    }
    let views = attempt_views(record, classifier)
        .map_err(|message| RunError::Mismatch(format!("{}: {message}", log.display())))?;
    let written = memory
        .finalize(&EndedEpisode {
            position,
            question: &prepared.view,
            schema: &prepared.schema,
            attempts: &views,
            solved: record.finally_correct(),
        })
        .map_err(|e| RunError::Memory {
            stream: label.to_string(),
            message: e.to_string(),
        })?;
    if written != record.memory_written {
        return Err(RunError::Mismatch(format!(
            "{}: replaying position {position} wrote memory {written:?}, the log says {:?}",
            log.display(),
            record.memory_written
        )));
    }
    Ok(())
}

/// The order streams start in. One at a time, the plan's order. Several at a time, seed by
/// seed (the plan's order within a seed): streams of one seed take the questions in the same
/// order and start from the same initial predictions, so the streams running together send
/// prompts that open alike, which a batched embedded model evaluates once and copies
/// (`merit_models::llama`). Streams are independent, so the order changes no result.
fn schedule(streams: &[StreamSpec], parallel: usize) -> VecDeque<&StreamSpec> {
    let mut order: Vec<&StreamSpec> = streams.iter().collect();
    if parallel > 1 {
        order.sort_by_key(|stream| stream.seed);
    }
    order.into()
}

/// Runs every stream to its end, `parallel` streams at a time (episodes within a stream stay
/// strictly sequential). The first error stops the other streams after their current episode.
pub fn run_streams(
    plan: &RunPlan<'_>,
    deps: &EpisodeDeps<'_>,
    factory: &dyn MethodFactory,
    on_episode: &(dyn Fn(&StreamSpec, &EpisodeRecord) + Sync),
) -> Result<(), RunError> {
    let (streams, parallel) = (plan.streams, plan.parallel);
    let queue = Mutex::new(schedule(streams, parallel));
    let failure: Mutex<Option<RunError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..parallel.clamp(1, streams.len().max(1)) {
            scope.spawn(|| loop {
                if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                let Some(stream) = queue.lock().ok().and_then(|mut q| q.pop_front()) else {
                    return;
                };
                if let Err(error) = run_stream(plan, stream, deps, factory, on_episode) {
                    if let Ok(mut slot) = failure.lock() {
                        slot.get_or_insert(error);
                    }
                    return;
                }
            });
        }
    });
    match failure.into_inner() {
        Ok(Some(error)) => Err(error),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_streams_at_a_time_start_seed_by_seed() {
        let streams: Vec<StreamSpec> = ["iterative", "merit"]
            .iter()
            .flat_map(|method| {
                [0, 1].map(|seed| StreamSpec {
                    method: method.to_string(),
                    seed,
                })
            })
            .collect();
        let names = |order: VecDeque<&StreamSpec>| -> Vec<String> {
            order
                .iter()
                .map(|s| format!("{}-{}", s.method, s.seed))
                .collect()
        };
        assert_eq!(
            names(schedule(&streams, 1)),
            ["iterative-0", "iterative-1", "merit-0", "merit-1"]
        );
        assert_eq!(
            names(schedule(&streams, 2)),
            ["iterative-0", "merit-0", "iterative-1", "merit-1"]
        );
    }
}
