//! The user-simulator boundary (protocol §8).
//!
//! The simulator is on the user's side of the table: it may read the hidden material, and the
//! environment hands it exactly that through a [`SimulatorContext`], which only the environment
//! can build. It is stateless: each `ask` gets the question and the context, no dialogue history
//! and nothing of the agent's database work. Whatever it returns is shown to the agent verbatim,
//! so keeping gold SQL out of replies is the simulator's policy: [`model::ModelSimulator`] is
//! the model-driven two-step simulator with a post-filter; [`ScriptedSimulator`] is for tests.

pub mod human;
pub mod model;

use crate::task::{AmbiguityMap, PublicTask, Task};
use serde::{Deserialize, Serialize};

/// Which phase a question is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Phase {
    /// The ambiguous opening question.
    One,
    /// The follow-up, after phase 1 passed.
    Two,
}

/// What a simulator may know when answering one question. Built by the environment only.
pub struct SimulatorContext<'a> {
    pub(crate) task: &'a Task,
    pub(crate) phase: Phase,
    pub(crate) schema: &'a str,
    pub(crate) empty_map: &'a AmbiguityMap,
}

impl std::fmt::Debug for SimulatorContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimulatorContext")
            .field("instance_id", &self.task.instance_id())
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

impl<'a> SimulatorContext<'a> {
    /// The public task.
    pub fn public(&self) -> &'a PublicTask {
        self.task.public()
    }
    /// The phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// The clear question: `query` in phase 1 (falling back to the ambiguous question when the
    /// record has none, as in mini-interact), `follow_up.query` in phase 2.
    pub fn clear_query(&self) -> &'a str {
        let hidden = self.task.hidden();
        match self.phase {
            Phase::One => hidden
                .clear_query
                .as_deref()
                .filter(|q| !q.trim().is_empty())
                .unwrap_or(&self.task.public().amb_user_query),
            Phase::Two => hidden
                .follow_up
                .as_ref()
                .map_or("", |follow_up| follow_up.query.as_str()),
        }
    }
    /// The ambiguity map: the task's in phase 1, empty in phase 2.
    pub fn ambiguity(&self) -> &'a AmbiguityMap {
        match self.phase {
            Phase::One => &self.task.hidden().ambiguity,
            Phase::Two => self.empty_map,
        }
    }
    /// The gold SQL of the current phase (empty when the ground truth is withheld).
    pub fn gold_sql(&self) -> &'a [String] {
        let hidden = self.task.hidden();
        match self.phase {
            Phase::One => &hidden.phase1.sol_sql,
            Phase::Two => hidden
                .follow_up
                .as_ref()
                .map_or(&[], |follow_up| follow_up.truth.sol_sql.as_slice()),
        }
    }
    /// The database schema text.
    pub fn schema(&self) -> &'a str {
        self.schema
    }
}

/// Why a simulator could not answer (shown to operators, not to the agent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SimulatorError(pub String);

/// What a simulator spent and decided over an episode. Counts only: nothing here says *which*
/// ambiguity was asked about, so it may be logged beside a trajectory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimulatorUsage {
    /// `ask` actions answered.
    pub asks: u64,
    /// Model calls made.
    pub calls: u64,
    /// Of those, answered from the reply cache.
    pub cached_calls: u64,
    /// Prompt tokens over all calls.
    pub prompt_tokens: u64,
    /// Generated tokens over all calls.
    pub completion_tokens: u64,
    /// Questions mapped to a labelled ambiguity.
    pub labeled: u64,
    /// Questions mapped to a gold segment outside the map.
    pub unlabeled: u64,
    /// Questions judged out of scope.
    pub unanswerable: u64,
    /// Step-1 replies that could not be read (refused).
    pub malformed: u64,
    /// Step-2 replies refused by the post-filter (gold SQL or hidden question copied).
    pub filtered: u64,
}

/// Answers the agent's `ask` actions.
pub trait UserSimulator {
    /// One reply to one question.
    fn reply(
        &mut self,
        question: &str,
        context: &SimulatorContext<'_>,
    ) -> Result<String, SimulatorError>;

    /// What the simulator spent so far (for the run log). Simulators without a model report
    /// zeros.
    fn usage(&self) -> SimulatorUsage {
        SimulatorUsage::default()
    }

    /// Whether this user can judge a submission when the task has no ground truth (a person
    /// at the terminal can; a simulated user, who only knows the hidden answer, cannot).
    fn judges_without_truth(&self) -> bool {
        false
    }

    /// The user's verdict on a submission to a task without ground truth: `sql` and a preview
    /// of what it returned. Only called when [`UserSimulator::judges_without_truth`] holds.
    fn verdict(&mut self, sql: &str, preview: &str) -> Result<UserVerdict, SimulatorError> {
        let _ = (sql, preview);
        Err(SimulatorError(
            "this user cannot judge submissions without ground truth".to_string(),
        ))
    }
}

/// A user's own verdict on a submission (tasks without ground truth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserVerdict {
    /// The user accepts the answer.
    Accept,
    /// The user rejects it, with what they said (possibly empty).
    Reject(String),
}

/// The refusal the simulator gives to questions it must not answer.
pub const OUT_OF_SCOPE_REPLY: &str =
    "Sorry, I can't help with that; it is outside what I can clarify about my request.";

/// A simulator for tests: rules `(substring, reply)` are tried in order against the question
/// (case-insensitive); the first match answers; no match gets [`OUT_OF_SCOPE_REPLY`]. It records
/// every question it was asked.
#[derive(Debug, Clone, Default)]
pub struct ScriptedSimulator {
    rules: Vec<(String, String)>,
    /// Every question received, in order.
    pub asked: Vec<String>,
}

impl ScriptedSimulator {
    /// A simulator with these rules.
    pub fn new(rules: Vec<(String, String)>) -> ScriptedSimulator {
        ScriptedSimulator {
            rules,
            asked: Vec::new(),
        }
    }
}

impl UserSimulator for ScriptedSimulator {
    fn reply(
        &mut self,
        question: &str,
        _context: &SimulatorContext<'_>,
    ) -> Result<String, SimulatorError> {
        self.asked.push(question.to_string());
        let lowered = question.to_lowercase();
        Ok(self
            .rules
            .iter()
            .find(|(needle, _)| lowered.contains(&needle.to_lowercase()))
            .map_or_else(
                || OUT_OF_SCOPE_REPLY.to_string(),
                |(_, reply)| reply.clone(),
            ))
    }

    fn usage(&self) -> SimulatorUsage {
        SimulatorUsage {
            asks: self.asked.len() as u64,
            ..SimulatorUsage::default()
        }
    }
}

impl<S: UserSimulator + ?Sized> UserSimulator for Box<S> {
    fn reply(
        &mut self,
        question: &str,
        context: &SimulatorContext<'_>,
    ) -> Result<String, SimulatorError> {
        (**self).reply(question, context)
    }

    fn usage(&self) -> SimulatorUsage {
        (**self).usage()
    }

    fn judges_without_truth(&self) -> bool {
        (**self).judges_without_truth()
    }

    fn verdict(&mut self, sql: &str, preview: &str) -> Result<UserVerdict, SimulatorError> {
        (**self).verdict(sql, preview)
    }
}

impl<S: UserSimulator + ?Sized> UserSimulator for &mut S {
    fn reply(
        &mut self,
        question: &str,
        context: &SimulatorContext<'_>,
    ) -> Result<String, SimulatorError> {
        (**self).reply(question, context)
    }

    fn usage(&self) -> SimulatorUsage {
        (**self).usage()
    }

    fn judges_without_truth(&self) -> bool {
        (**self).judges_without_truth()
    }

    fn verdict(&mut self, sql: &str, preview: &str) -> Result<UserVerdict, SimulatorError> {
        (**self).verdict(sql, preview)
    }
}
