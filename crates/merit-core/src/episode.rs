//! What one repair episode leaves behind: the record the experiment layer logs and measures.

use crate::Status;
use serde::{Deserialize, Serialize};

/// SQL as two attempts of one episode are compared: keyword case, runs of whitespace and a
/// trailing `;` do not make two attempts different. String literals are left alone (their
/// case matters). The oscillation metric and the repair loop's repeat guard both use it, so
/// what the guard stops is exactly what the metric would count.
pub fn normalize_attempt_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut in_string = false;
    let mut pending_space = false;
    for c in sql.trim().trim_end_matches(';').trim_end().chars() {
        if in_string {
            out.push(c);
            if c == '\'' {
                in_string = false;
            }
            continue;
        }
        if c.is_whitespace() {
            pending_space = true;
            continue;
        }
        if pending_space && !out.is_empty() {
            out.push(' ');
        }
        pending_space = false;
        if c == '\'' {
            in_string = true;
            out.push(c);
        } else {
            out.extend(c.to_lowercase());
        }
    }
    out
}

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
    /// The classifier's failure type for this attempt, when it failed and a repair followed
    /// (logged by its snake-case name).
    pub failure_type: Option<crate::failure::FailureType>,
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
    /// What the method-neutral repair aids did around this attempt (absent when none was on).
    #[serde(default, skip_serializing_if = "AttemptAids::is_empty")]
    pub aids: AttemptAids,
}

/// What the repair aids (repeat guard, database hints) did around one attempt. Every method of
/// a run gets the same aids, so they never separate one method from another; they are logged
/// so that an episode can be read back exactly as the model saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptAids {
    /// The repeat guard: the step of the earlier attempt that this step's first reply
    /// repeated. The model was asked once more, with the repeat named, and `sql` is its second
    /// reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_of: Option<u32>,
    /// `true` when `sql` still repeats an earlier attempt after the second ask: it was not
    /// sent to the oracle again, and that earlier attempt's feedback stands for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_rejudged: bool,
    /// Hints read from the database for this (failed) attempt's feedback, shown in the next
    /// repair prompt: nearest existing identifiers, tables holding a column, join paths,
    /// whether a literal occurs in its column. Never read from the gold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hints: Vec<String>,
}

impl AttemptAids {
    /// `true` when no aid did anything (the record then serializes as before aids existed).
    pub fn is_empty(&self) -> bool {
        self.repeat_of.is_none() && !self.not_rejudged && self.hints.is_empty()
    }
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
