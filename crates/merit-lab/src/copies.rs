//! A repair experiment on copies of the benchmark's databases on another engine (PostgreSQL):
//! the model sees the copy's schema and dialect, every candidate runs on the copy (so the
//! feedback and the failure types are that engine's), and the oracle compares the candidate's
//! rows there with the gold rows from the benchmark's own SQLite file under Spider's
//! comparison ([`merit_eval::Oracle::judge_with`]). A copy has none of the test-suite's
//! sibling databases, so the verdict is plain execution match on the one database.

use merit_core::Feedback;
use merit_eval::evaluator::fetch_prediction_rows;
use merit_eval::Oracle;
use merit_repair::repair::{Judge, JudgeError};
use merit_sql::{Database, ExecLimits};
use std::collections::HashMap;

/// The copies of an experiment's databases on one other engine.
pub struct DatabaseCopies {
    /// The engine's name, recorded in the run's manifest (`postgres`).
    pub engine: String,
    /// Each database id's copy.
    pub databases: HashMap<String, Box<dyn Database>>,
    /// Each copy's schema text, as the model sees it (the engine's own types and names).
    pub schemas: HashMap<String, String>,
}

impl std::fmt::Debug for DatabaseCopies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseCopies")
            .field("engine", &self.engine)
            .field("databases", &self.databases.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Judges candidates on the copies (see the module docs).
pub struct CopyJudge<'a> {
    /// The oracle of the experiment's questions.
    pub oracle: &'a Oracle,
    /// The copies.
    pub copies: &'a DatabaseCopies,
    /// Limits of each candidate's execution.
    pub limits: ExecLimits,
}

impl Judge for CopyJudge<'_> {
    fn judge(&self, question_id: &str, sql: &str) -> Result<Feedback, JudgeError> {
        let db_id = self
            .oracle
            .db_id(question_id)
            .ok_or_else(|| JudgeError(format!("unknown question {question_id}")))?;
        let copy = self.copies.databases.get(db_id).ok_or_else(|| {
            JudgeError(format!(
                "no {} copy of database {db_id}",
                self.copies.engine
            ))
        })?;
        let fetch = |sql: &str, gold_len: usize| {
            fetch_prediction_rows(copy.as_ref(), sql, &self.limits, gold_len)
        };
        self.oracle
            .judge_with(question_id, sql, &fetch)
            .map_err(|e| JudgeError(e.to_string()))
    }
}
