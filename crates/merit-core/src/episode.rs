//! What one repair episode leaves behind: the record the experiment layer logs and measures.

use crate::Status;
use serde::{Deserialize, Serialize};

/// One SQL attempt inside an episode: step 0 is the shared initial prediction, steps 1..=K
/// are repair generations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// 0 for the initial prediction, k for the k-th revision.
    pub step: u32,
    /// The SQL that was judged (as extracted from the model reply).
    pub sql: String,
    /// The oracle's verdict.
    pub status: Status,
    /// The DBMS error text, when there was one.
    pub error: Option<String>,
    /// The classifier's failure type for this attempt, when it failed (by name).
    pub failure_type: Option<String>,
    /// Ids of the memories retrieved for the generation that produced this attempt.
    #[serde(default)]
    pub retrieved: Vec<String>,
    /// Prompt tokens spent producing this attempt (0 for the shared initial prediction).
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion tokens spent producing this attempt.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Model calls spent producing this attempt (a reflection call counts too).
    #[serde(default)]
    pub calls: u32,
}

/// A finished episode: one question at one stream position under one method and seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeRecord {
    /// Method name (e.g. `iterative`, `merit`).
    pub method: String,
    /// Stream seed.
    pub seed: u64,
    /// 0-based position in the stream.
    pub position: usize,
    /// Question id.
    pub question_id: String,
    /// Database id.
    pub db_id: String,
    /// Every attempt in order, the initial prediction first.
    pub attempts: Vec<AttemptRecord>,
    /// Id of the memory entry the episode wrote at finalization, if any.
    #[serde(default)]
    pub memory_written: Option<String>,
    /// Why the repairs stopped before the budget K when the model refused a prompt for good
    /// (e.g. a prompt longer than its context window): the episode then finalizes unsolved
    /// with the attempts it has. Absent for every normally ended episode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
}

impl EpisodeRecord {
    /// `true` when the initial prediction was already correct.
    pub fn initially_correct(&self) -> bool {
        self.attempts
            .first()
            .is_some_and(|attempt| attempt.status.is_correct())
    }

    /// `true` when the last attempt is correct.
    pub fn finally_correct(&self) -> bool {
        self.attempts
            .last()
            .is_some_and(|attempt| attempt.status.is_correct())
    }

    /// `true` when the initial prediction failed and a revision succeeded.
    pub fn repaired(&self) -> bool {
        !self.initially_correct() && self.finally_correct()
    }

    /// Repair generations used (attempts after the initial one).
    pub fn repair_steps(&self) -> usize {
        self.attempts.len().saturating_sub(1)
    }
}
