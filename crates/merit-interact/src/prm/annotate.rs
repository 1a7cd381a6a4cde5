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
//! pair recorded twice) is [`AnnotateError::Corrupt`] with the line number.
//!
//! Resuming: a pair is identified by `(state_id, memory_id)`; [`annotate()`] skips every pair
//! already in the file, failures included (the judge is greedy, so asking again would give
//! the same malformed replies). A backend error stops the run with nothing written for the
//! pair at hand, so the next run asks it again.

use super::judge::{memory_text, prm_version, state_text, RubricJudge};
use super::rubric::Rubric;
use crate::memory::{TurnMemory, TurnState};
use merit_core::model::ModelError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
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
    /// Filesystem failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A complete line that is not a valid record.
    #[error("{path} line {line}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A record could not be serialized (not expected; reported instead of panicking).
    #[error("{path}: cannot serialize an annotation: {message}")]
    Serialize {
        /// The file.
        path: PathBuf,
        /// serde's reason.
        message: String,
    },
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

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> AnnotateError + '_ {
    move |source| AnnotateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// An annotation file as read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedAnnotations {
    /// The records, in file order.
    pub records: Vec<AnnotationRecord>,
    /// Warnings (a torn last line) for the caller to show.
    pub warnings: Vec<String>,
    /// Bytes of the file up to the end of the last good record (its newline included when
    /// present).
    good_length: u64,
    /// Whether the last good record lacks its newline.
    missing_newline: bool,
}

/// Reads an annotation file (a missing file has no records).
pub fn read_annotations(path: &Path) -> Result<LoadedAnnotations, AnnotateError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(io_error(path)(error)),
    };
    let mut loaded = LoadedAnnotations::default();
    let mut seen = BTreeSet::new();
    let mut start = 0usize;
    let mut number = 0usize;
    while start < bytes.len() {
        number += 1;
        let (end, terminated) = match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(offset) => (start + offset, true),
            None => (bytes.len(), false),
        };
        match parse_line(&bytes[start..end]) {
            Ok(record) => {
                if !seen.insert((record.state_id.clone(), record.memory_id)) {
                    return Err(AnnotateError::Corrupt {
                        path: path.to_path_buf(),
                        line: number,
                        message: format!(
                            "the pair (state `{}`, memory {}) is recorded twice",
                            record.state_id, record.memory_id
                        ),
                    });
                }
                loaded.records.push(record);
                loaded.good_length = end as u64 + u64::from(terminated);
                loaded.missing_newline = !terminated;
            }
            Err(message) if !terminated => loaded.warnings.push(format!(
                "{} line {number}: ignoring a torn last line ({} bytes, no newline): {message}",
                path.display(),
                end - start
            )),
            Err(message) => {
                return Err(AnnotateError::Corrupt {
                    path: path.to_path_buf(),
                    line: number,
                    message,
                })
            }
        }
        start = end + 1;
    }
    Ok(loaded)
}

fn parse_line(raw: &[u8]) -> Result<AnnotationRecord, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "the line is not valid UTF-8".to_string())?;
    if text.trim().is_empty() {
        return Err("empty line".to_string());
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let format = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
    if format != ANNOTATION_FORMAT {
        return Err(format!("format `{format}` is not `{ANNOTATION_FORMAT}`"));
    }
    let record: AnnotationRecord =
        serde_json::from_value(value).map_err(|e| format!("not an annotation record: {e}"))?;
    if let Judged::Rubric(rubric) = &record.result {
        rubric
            .validate()
            .map_err(|e| format!("invalid rubric: {e}"))?;
    }
    Ok(record)
}

/// An annotation file open for appending, with the set of pairs it already holds.
#[derive(Debug)]
pub struct AnnotationFile {
    path: PathBuf,
    file: File,
    length: u64,
    done: BTreeSet<(String, u64)>,
}

impl AnnotationFile {
    /// Opens (creating when needed) `path`, reads what it holds, and cuts off a torn last
    /// line so the next record starts on a line of its own.
    pub fn open(path: &Path) -> Result<(AnnotationFile, LoadedAnnotations), AnnotateError> {
        let loaded = read_annotations(path)?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(io_error(path))?;
        let on_disk = file.metadata().map_err(io_error(path))?.len();
        let mut opened = AnnotationFile {
            path: path.to_path_buf(),
            file,
            length: loaded.good_length,
            done: loaded
                .records
                .iter()
                .map(|r| (r.state_id.clone(), r.memory_id))
                .collect(),
        };
        if on_disk != loaded.good_length {
            opened
                .file
                .set_len(loaded.good_length)
                .and_then(|()| opened.file.sync_all())
                .map_err(io_error(path))?;
        }
        if loaded.missing_newline {
            opened.write(b"\n")?;
        }
        #[cfg(unix)]
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // The file may have just been created: make its directory entry durable.
            File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(io_error(parent))?;
        }
        Ok((opened, loaded))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
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
                path: self.path.clone(),
                state_id: record.state_id.clone(),
                memory_id: record.memory_id,
            });
        }
        let mut line = serde_json::to_string(record).map_err(|e| AnnotateError::Serialize {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        line.push('\n');
        self.write(line.as_bytes())?;
        self.done.insert(key);
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), AnnotateError> {
        let result = self
            .file
            .seek(SeekFrom::Start(self.length))
            .and_then(|_| self.file.write_all(bytes))
            .and_then(|()| self.file.sync_data());
        match result {
            Ok(()) => {
                self.length += bytes.len() as u64;
                Ok(())
            }
            Err(error) => {
                // Never leave half a line in front of later ones.
                let _ = self.file.set_len(self.length);
                Err(io_error(&self.path)(error))
            }
        }
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
            calls: outcome.calls,
            prompt_tokens: outcome.prompt_tokens,
            completion_tokens: outcome.completion_tokens,
            result,
        })?;
    }
    Ok(report)
}
