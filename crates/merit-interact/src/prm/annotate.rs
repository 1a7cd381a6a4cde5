//! Teacher annotations of (state, memory) pairs: an append-only JSONL file, one record per
//! pair, and a resumable driver.
//!
//! Each line is one [`AnnotationRecord`] (first field `format` =
//! [`ANNOTATION_FORMAT`]): the pair's ids, the two texts the judge saw, the state and the
//! memory themselves, the judge's model and prompt version, the token cost, and either the
//! rubric or the recorded failure. A record is
//! written with one `write` and synced before the next pair is judged, so it counts exactly
//! when its newline is on disk.
//!
//! Loading tolerates one thing: a last line without its newline that does not parse (a write
//! cut short by a kill) is dropped with a warning, and opening for append cuts it off. Any
//! other bad line (broken JSON, another format, an unknown field, a rubric out of range, a
//! pair recorded twice) is `Corrupt` ([`AnnotateError::Journal`]) with the line number. The reading and
//! appending mechanics are shared with the memory files ([`merit_journal::jsonl`]).
//!
//! Resuming: a pair is identified by `(state_id, memory_id)`; [`annotate()`] skips every pair
//! already in the file, failures included (the judge is greedy, so asking again would give
//! the same malformed replies). A backend error stops the run with nothing written for the
//! pair at hand, so the next run asks it again.

use super::judge::{memory_text, prm_version, state_text, RubricJudge};
use super::rubric::Rubric;
use crate::memory::{TurnMemory, TurnState};
use merit_core::model::ModelError;
use merit_journal::jsonl::{self, Appender, Ending, JsonlError, Tail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The `format` of every annotation record this version writes.
pub const ANNOTATION_FORMAT: &str = "merit-interact-prm-annotation-v1";

/// One pair to annotate.
#[derive(Debug, Clone, Copy)]
pub struct AnnotationPair<'a> {
    /// The caller's id of the state (e.g. the turn memory it was taken from, or an episode
    /// and turn); with the memory's id it identifies the pair in the file.
    pub state_id: &'a str,
    /// The current state σ_t.
    pub state: &'a TurnState,
    /// The candidate memory (its `id` is the pair's memory id).
    pub memory: &'a TurnMemory,
}

/// The teacher's verdict on one pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judged {
    /// A valid rubric (boxed: it is ten times the size of a failure).
    Rubric(Box<Rubric>),
    /// Why no valid rubric came back after the retry.
    Failure(String),
}

impl Judged {
    /// The rubric, when there is one.
    pub fn rubric(&self) -> Option<&Rubric> {
        match self {
            Judged::Rubric(rubric) => Some(rubric.as_ref()),
            Judged::Failure(_) => None,
        }
    }
}

/// One line of an annotation file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnotationRecord {
    /// [`ANNOTATION_FORMAT`].
    pub format: String,
    /// The caller's id of the state.
    pub state_id: String,
    /// The id of the turn memory in its bank.
    pub memory_id: u64,
    /// The state as shown to the judge ([`state_text`]).
    pub state_text: String,
    /// The memory as shown to the judge ([`memory_text`]).
    pub memory_text: String,
    /// The state itself, so that anything else about the pair (the student PRM's features)
    /// can be computed from the file alone.
    pub state: TurnState,
    /// The memory itself, for the same reason.
    pub memory: TurnMemory,
    /// The judge's model identifier.
    pub judge_model: String,
    /// The prompt version of the first call (names the template family).
    pub prompt_version: String,
    /// Whether the judge decoded under [`rubric_grammar`](super::rubric::rubric_grammar)
    /// ([`JudgeConfig::grammar`](super::judge::JudgeConfig::grammar)); absent when it did not,
    /// so files written before the option read as they were.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grammar: bool,
    /// Model calls made (0 to 2).
    pub calls: u32,
    /// Prompt tokens over the calls.
    pub prompt_tokens: u64,
    /// Completion tokens over the calls.
    pub completion_tokens: u64,
    /// The rubric or the failure.
    pub result: Judged,
}

/// Why annotating or reading annotations failed.
#[derive(Debug, thiserror::Error)]
pub enum AnnotateError {
    /// The journal file could not be read or written, or holds a bad line (the journals'
    /// one error type: a record that cannot be serialized is `Corrupt` at line 0).
    #[error(transparent)]
    Journal(#[from] JsonlError),
    /// [`AnnotationFile::append`] was given a pair the file already holds.
    #[error("{path}: the pair (state `{state_id}`, memory {memory_id}) is already recorded")]
    Duplicate {
        /// The file.
        path: PathBuf,
        /// The pair's state id.
        state_id: String,
        /// The pair's memory id.
        memory_id: u64,
    },
    /// The judge's backend failed (nothing was recorded for the pair).
    #[error("the judge model failed: {0}")]
    Model(#[from] ModelError),
}

/// An annotation file as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedAnnotations {
    /// The records, in file order.
    pub records: Vec<AnnotationRecord>,
    /// Warnings (a torn last line) for the caller to show.
    pub warnings: Vec<String>,
    /// Where the last good record ends, for [`AnnotationFile::open`] to continue from.
    ending: Ending,
}

/// Reads an annotation file (a missing file has no records).
pub fn read_annotations(path: &Path) -> Result<LoadedAnnotations, AnnotateError> {
    // A complete record whose newline is missing was written whole: keep it.
    let mut lines =
        jsonl::records(path, Tail::KeepIfParses, parse_line).map_err(AnnotateError::from)?;
    let mut loaded = LoadedAnnotations::default();
    let mut seen = BTreeSet::new();
    for next in &mut lines {
        let (number, record) = next.map_err(AnnotateError::from)?;
        if !seen.insert((record.state_id.clone(), record.memory_id)) {
            return Err(AnnotateError::Journal(JsonlError::Corrupt {
                path: path.to_path_buf(),
                line: number,
                message: format!(
                    "the pair (state `{}`, memory {}) is recorded twice",
                    record.state_id, record.memory_id
                ),
            }));
        }
        loaded.records.push(record);
    }
    loaded.ending = lines.ending();
    if let Some(torn) = &loaded.ending.torn {
        loaded.warnings.push(format!(
            "{} line {}: ignoring a torn last line ({} bytes, no newline): {}",
            path.display(),
            torn.line,
            torn.bytes,
            torn.reason.as_deref().unwrap_or_default()
        ));
    }
    Ok(loaded)
}

fn parse_line(raw: &[u8]) -> Result<Option<AnnotationRecord>, String> {
    let text = jsonl::line_text(raw)?;
    let record: AnnotationRecord =
        jsonl::parse_tagged(text.as_bytes(), ANNOTATION_FORMAT, "an annotation record")?;
    if let Judged::Rubric(rubric) = &record.result {
        rubric
            .validate()
            .map_err(|e| format!("invalid rubric: {e}"))?;
    }
    Ok(Some(record))
}

/// An annotation file open for appending, with the set of pairs it already holds.
#[derive(Debug)]
pub struct AnnotationFile {
    appender: Appender,
    done: BTreeSet<(String, u64)>,
}

impl AnnotationFile {
    /// Opens (creating when needed) `path`, reads what it holds, and cuts off a torn last
    /// line so the next record starts on a line of its own.
    pub fn open(path: &Path) -> Result<(AnnotationFile, LoadedAnnotations), AnnotateError> {
        let loaded = read_annotations(path)?;
        let appender = Appender::resume(path, &loaded.ending).map_err(AnnotateError::from)?;
        let done = loaded
            .records
            .iter()
            .map(|r| (r.state_id.clone(), r.memory_id))
            .collect();
        Ok((AnnotationFile { appender, done }, loaded))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.appender.path()
    }

    /// Whether the pair is already recorded.
    pub fn contains(&self, state_id: &str, memory_id: u64) -> bool {
        self.done.contains(&(state_id.to_string(), memory_id))
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// `true` when the file holds no record.
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Appends one record as one synced line. A pair already recorded is refused
    /// ([`AnnotateError::Duplicate`]); the next load would find the file corrupt otherwise.
    pub fn append(&mut self, record: &AnnotationRecord) -> Result<(), AnnotateError> {
        let key = (record.state_id.clone(), record.memory_id);
        if self.done.contains(&key) {
            return Err(AnnotateError::Duplicate {
                path: self.path().to_path_buf(),
                state_id: record.state_id.clone(),
                memory_id: record.memory_id,
            });
        }
        self.appender
            .append_record(record)
            .map_err(AnnotateError::from)?;
        self.done.insert(key);
        Ok(())
    }
}

/// What one [`annotate()`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnnotateReport {
    /// Pairs judged now with a valid rubric.
    pub judged: usize,
    /// Pairs judged now whose replies were unusable (recorded as failures).
    pub failures: usize,
    /// Pairs skipped because the file (or an earlier pair of this call) already had them.
    pub skipped: usize,
    /// Model calls made now.
    pub calls: u64,
    /// Prompt tokens now.
    pub prompt_tokens: u64,
    /// Completion tokens now.
    pub completion_tokens: u64,
    /// Warnings from loading the file (a torn last line).
    pub warnings: Vec<String>,
}

/// Annotates every pair not yet in the file at `path` with `judge`, appending one synced
/// record per pair in input order. A backend error stops the run (records written so far
/// stay; rerun to resume).
pub fn annotate(
    judge: &RubricJudge,
    pairs: &[AnnotationPair<'_>],
    path: &Path,
) -> Result<AnnotateReport, AnnotateError> {
    let (mut file, loaded) = AnnotationFile::open(path)?;
    let mut report = AnnotateReport {
        warnings: loaded.warnings,
        ..AnnotateReport::default()
    };
    for pair in pairs {
        if file.contains(pair.state_id, pair.memory.id) {
            report.skipped += 1;
            continue;
        }
        let state = state_text(pair.state);
        let memory = memory_text(pair.memory);
        let outcome = judge.judge_texts(&state, &memory)?;
        report.calls += u64::from(outcome.calls);
        report.prompt_tokens += outcome.prompt_tokens;
        report.completion_tokens += outcome.completion_tokens;
        let result = match outcome.rubric {
            Ok(rubric) => {
                report.judged += 1;
                Judged::Rubric(Box::new(rubric))
            }
            Err(reason) => {
                report.failures += 1;
                Judged::Failure(reason)
            }
        };
        file.append(&AnnotationRecord {
            format: ANNOTATION_FORMAT.to_string(),
            state_id: pair.state_id.to_string(),
            memory_id: pair.memory.id,
            state_text: state,
            memory_text: memory,
            state: pair.state.clone(),
            memory: pair.memory.clone(),
            judge_model: judge.model_id(),
            prompt_version: prm_version("rubric"),
            grammar: judge.config().grammar,
            calls: outcome.calls,
            prompt_tokens: outcome.prompt_tokens,
            completion_tokens: outcome.completion_tokens,
            result,
        })?;
    }
    Ok(report)
}
