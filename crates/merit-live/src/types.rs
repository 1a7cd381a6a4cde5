//! The data of live mode: its configuration, errors, journal events, and what its calls
//! take and return.

use crate::signals::{Record, RetirementPolicy, Signal, UserFeedback};
use merit_core::failure::FailureType;
use merit_core::model::ChatModel;
use merit_core::Status;
use merit_journal::jsonl::JsonlError;
use merit_memory::{Polarity, RetrievalConfig};
use merit_repair::repair::{DatabaseAids, RepairAids};
use merit_sql::{Database, ExecLimits};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How a live memory repairs, finalizes and retires.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Repair budget K.
    pub k: u32,
    /// Most tokens per generation.
    pub max_tokens: u32,
    /// The method-neutral repair aids (as `merit run`'s).
    pub aids: RepairAids,
    /// How long an answer waits for feedback before it is finalized without, in ms.
    pub finalize_after_ms: u64,
    /// When a memory is retired.
    pub retirement: RetirementPolicy,
    /// How precedents are retrieved (MERIT's configuration by default).
    pub retrieval: RetrievalConfig,
    /// Limits of every execution (the row cap bounds what an answer carries).
    pub limits: ExecLimits,
    /// `false` retrieves nothing (the no-memory arm of an experiment; entries are still
    /// written, so the journal is the same kind of record).
    pub use_memory: bool,
    /// `false` keeps no negative entries: an answer that was rejected or never executed
    /// leaves no memory (MERIT's ablation without negative memory). On the Spider train
    /// calibration a 1.5B repairer copied the failed queries negative entries show, and MERIT
    /// without them did better than with them (docs/results/repair/calibration). Default
    /// `true`, as the paper keeps both polarities. Replay follows the journal, so the setting
    /// may change between openings of one memory.
    pub negative_memory: bool,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            k: 7,
            max_tokens: 512,
            aids: RepairAids::default(),
            finalize_after_ms: 24 * 3600 * 1000,
            retirement: RetirementPolicy::default(),
            retrieval: merit_memory::Variant::Merit.config(0),
            limits: ExecLimits {
                timeout: std::time::Duration::from_secs(30),
                max_rows: Some(1_000),
            },
            use_memory: true,
            negative_memory: true,
        }
    }
}

/// Why a live call failed. Nothing is half-written when it does: the journal holds whole
/// events only.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The journal could not be read or written.
    #[error(transparent)]
    Journal(#[from] JsonlError),
    /// The memory refused an entry (embedder failure, dimension mismatch).
    #[error("memory: {0}")]
    Memory(#[from] merit_memory::MemoryError),
    /// The model failed on the initial SQL.
    #[error("the model failed on the initial SQL: {0}")]
    Model(String),
    /// The repair loop failed (model or memory).
    #[error("the repair failed: {0}")]
    Repair(String),
    /// No episode has this id.
    #[error("no answer has episode id {0}")]
    UnknownEpisode(u64),
    /// Feedback for an episode that is already finalized.
    #[error("episode {0} is already finalized; feedback can no longer change it")]
    AlreadyFinalized(u64),
    /// No memory has this id.
    #[error("no memory has id m{0}")]
    UnknownMemory(u64),
    /// The feedback cannot apply (a correction that does not execute, a confirmed error).
    #[error("{0}")]
    Feedback(String),
    /// A journal write failed after the memory had changed; open the memory again.
    #[error(
        "the journal could not be written ({0}); the memory must be opened again before it is used"
    )]
    Broken(String),
    /// The journal's store (a PostgreSQL server) could not be reached or refused a call;
    /// nothing was decided, so the call can be tried again.
    #[error("the memory's journal store {store} failed: {message}")]
    Store {
        /// The store, as its journal describes itself (never a password).
        store: String,
        /// What the server said.
        message: String,
    },
    /// The journal holds events that do not fit together (written by something else).
    #[error("{path}: {message}")]
    Corrupt {
        /// The journal.
        path: PathBuf,
        /// What does not fit.
        message: String,
    },
}

/// One attempt of a live episode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LiveAttempt {
    /// 0 for the initial SQL, k for the k-th revision.
    pub step: u32,
    /// The SQL.
    pub sql: String,
    /// `correct` means "executed" here (live mode has no oracle).
    pub status: Status,
    /// The DBMS error text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The classifier's failure type, for failed attempts that were repaired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_type: Option<FailureType>,
}

/// A memory retrieved into a repair step, with the score it was ranked by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsedMemory {
    /// Memory id (`m<id>` in listings).
    pub id: u64,
    /// Its polarity.
    pub polarity: Polarity,
    /// The hybrid retrieval score: min–max normalised dense and BM25 scores within the
    /// candidate set (the paper's), so a lone candidate scores 0.
    pub score: f64,
    /// The raw cosine similarity of query and memory (comparable across retrievals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f64>,
    /// The repair step it was retrieved for.
    pub step: u32,
}

/// What an ask was, as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Asked {
    /// The episode id.
    pub episode: u64,
    /// When the answer was given (ms since the Unix epoch).
    pub time_ms: u64,
    /// The database asked about (empty: the memory's own).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub database: String,
    /// The request.
    pub question: String,
    /// Extra knowledge given with it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub evidence: String,
    /// The schema text the prompts showed.
    pub schema: String,
    /// Every attempt, initial first.
    pub attempts: Vec<LiveAttempt>,
    /// The memories retrieved, in retrieval order.
    pub used: Vec<UsedMemory>,
}

impl Asked {
    /// The answer: the last attempt.
    pub fn answer(&self) -> &LiveAttempt {
        // An ask always has its initial attempt.
        &self.attempts[self.attempts.len() - 1]
    }

    /// `true` when the answer executed.
    pub fn executed(&self) -> bool {
        self.answer().status.is_correct()
    }
}

/// The events of a live journal, one per line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LiveEvent {
    /// An answer was given.
    Asked(Asked),
    /// The user said something about an answer (acknowledged once this line is written).
    Feedback {
        /// The episode.
        episode: u64,
        /// When.
        time_ms: u64,
        /// What.
        feedback: UserFeedback,
        /// A correction as it executed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        correction: Option<LiveAttempt>,
    },
    /// An episode entered memory (or was found to teach nothing).
    Finalized {
        /// The episode.
        episode: u64,
        /// When.
        time_ms: u64,
        /// Its stream position.
        position: u64,
        /// What decided it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<Signal>,
        /// The entry written, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory: Option<u64>,
    },
    /// A memory was taken out of use.
    Retired {
        /// The memory.
        memory: u64,
        /// When.
        time_ms: u64,
        /// `true` when the retirement policy decided it, `false` for an operator.
        automatic: bool,
        /// Why.
        reason: String,
    },
    /// A retired memory was brought back.
    Restored {
        /// The memory.
        memory: u64,
        /// When.
        time_ms: u64,
    },
}

/// A memory as listings show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryInfo {
    /// Memory id.
    pub id: u64,
    /// Its polarity.
    pub polarity: Polarity,
    /// The failure type of its failing attempt.
    pub failure_type: FailureType,
    /// The question it came from.
    pub question: String,
    /// The failing SQL.
    pub failing_sql: String,
    /// The DBMS error of the failing SQL.
    pub error: Option<String>,
    /// The SQL it led to.
    pub revised_sql: String,
    /// The change between the two.
    pub delta: String,
    /// The episode it came from.
    pub episode: u64,
    /// What decided its polarity.
    pub signal: Signal,
    /// How sure that signal is.
    pub confidence: f64,
    /// Its record since it was committed or restored.
    pub record: Record,
    /// `true` when retired.
    pub retired: bool,
    /// Why it was retired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_because: Option<String>,
}

/// Counts over a live memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LiveStats {
    /// Answers given.
    pub asked: u64,
    /// Answers whose first SQL did not execute.
    pub repaired_attempts: u64,
    /// Answers that executed.
    pub executed: u64,
    /// Answers waiting for feedback or the wait.
    pub pending: u64,
    /// Finalized episodes by signal.
    pub finalized: BTreeMap<String, u64>,
    /// Memories by polarity (retired included).
    pub memories: BTreeMap<String, u64>,
    /// Retired memories.
    pub retired: u64,
}

/// The memory and the users' verdicts after one finalized episode: one point of the growth
/// and accuracy curves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// The episode's stream position (finalization order).
    pub position: u64,
    /// The episode.
    pub episode: u64,
    /// Memories written so far (retired ones included).
    pub memories: u64,
    /// Answers confirmed by their user so far.
    pub confirmed: u64,
    /// Answers that got feedback so far (confirmed, rejected or corrected); the share
    /// confirmed is the accuracy users saw.
    pub with_feedback: u64,
}

/// The answer to an ask.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Answer {
    /// The episode id feedback refers to.
    pub episode: u64,
    /// The answer's SQL.
    pub sql: String,
    /// `true` when it executed.
    pub executed: bool,
    /// The DBMS error when it did not.
    pub error: Option<String>,
    /// Result columns.
    pub columns: Vec<String>,
    /// Result rows (at most the row cap).
    pub rows: Vec<Vec<serde_json::Value>>,
    /// `true` when rows were cut at the cap.
    pub truncated: bool,
    /// Every attempt, initial first.
    pub attempts: Vec<LiveAttempt>,
    /// The memories retrieved, with scores.
    pub memories_used: Vec<UsedMemory>,
}

/// What a finalization did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finalization {
    /// The episode.
    pub episode: u64,
    /// What decided it (`None`: nothing to learn, e.g. a confirmed first answer).
    pub signal: Option<Signal>,
    /// The entry written.
    pub memory: Option<u64>,
    /// Its polarity.
    pub polarity: Option<Polarity>,
    /// Memories retired because of this episode.
    pub retired: Vec<u64>,
}

/// What opening found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenReport {
    /// Journal events replayed.
    pub events: usize,
    /// Bytes of a torn last line that were cut off.
    pub torn_bytes: usize,
    /// Episodes whose acknowledged feedback was finalized only now.
    pub finalized_on_open: usize,
}

/// The question, SQL and model for an ask.
pub struct AskRequest<'a> {
    /// The database asked about, when one memory serves several (an experiment over a
    /// benchmark); `None`: the memory's own.
    pub database: Option<&'a str>,
    /// The request in words.
    pub question: &'a str,
    /// Extra knowledge (BIRD-style evidence); empty when none.
    pub evidence: &'a str,
    /// The database's schema as the prompts show it (`CREATE TABLE` text).
    pub schema: &'a str,
    /// SQL from the caller's own system, to be repaired; `None`: the model writes it.
    pub initial_sql: Option<&'a str>,
}

/// What an ask runs on.
pub struct LiveDeps<'a> {
    /// The chat model of the repairs (and of the initial SQL unless `initial_model`).
    pub model: &'a dyn ChatModel,
    /// A separate model for the initial SQL (`None`: `model`).
    pub initial_model: Option<&'a dyn ChatModel>,
    /// The database the SQL runs on (read-only).
    pub database: &'a dyn Database,
    /// Hints and the decoding grammar, when the aids ask for them.
    pub aids: Option<&'a dyn DatabaseAids>,
}
