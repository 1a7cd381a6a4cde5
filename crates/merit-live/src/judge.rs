//! The judge of live mode: the database itself. Production has no gold query, so an attempt
//! "succeeds" when it executes; what it returned is kept for the answer.

use merit_core::{Feedback, Status};
use merit_repair::repair::{Judge, JudgeError};
use merit_sql::{Database, ExecError, ExecLimits, ResultSet};
use std::sync::Mutex;

/// Runs each attempt on one database (read-only, with the limits given) and calls it
/// successful when it executes. The loop then stops at the first executing query: live mode
/// repairs execution errors and timeouts, and the user's feedback decides the rest.
pub struct ExecutionJudge<'a> {
    database: &'a dyn Database,
    limits: ExecLimits,
    last_result: Mutex<Option<(String, ResultSet)>>,
}

impl<'a> ExecutionJudge<'a> {
    /// A judge over `database` with `limits` (the row cap bounds what an answer carries).
    pub fn new(database: &'a dyn Database, limits: ExecLimits) -> ExecutionJudge<'a> {
        ExecutionJudge {
            database,
            limits,
            last_result: Mutex::new(None),
        }
    }

    /// The result of the last attempt that executed, when its SQL is `sql`.
    pub fn result_of(&self, sql: &str) -> Option<ResultSet> {
        let last = self.last_result.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|(judged, _)| judged == sql)
            .map(|(_, result)| result.clone())
    }

    /// Runs `sql` and turns the outcome into feedback (keeping the result when it executed).
    /// A text without any statement (empty, or only comments) is an execution error here, as
    /// the oracle's "empty prediction" is: SQLite runs it without complaint and returns
    /// nothing, which would otherwise end the repairs with a non-answer.
    pub fn execute(&self, sql: &str) -> Feedback {
        if !merit_sql::lex::has_statement(sql) {
            return Feedback {
                status: Status::ExecutionError,
                error: Some(merit_sql::lex::NO_STATEMENT.to_string()),
            };
        }
        match self.database.query(sql, &self.limits) {
            Ok(result) => {
                *self.last_result.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((sql.to_string(), result));
                Feedback::correct()
            }
            Err(error) => feedback_of(&error),
        }
    }
}

/// The feedback an execution error gives: a timeout is its own status, everything else an
/// execution error with the engine's own text.
pub fn feedback_of(error: &ExecError) -> Feedback {
    Feedback {
        status: if error.is_timeout() {
            Status::Timeout
        } else {
            Status::ExecutionError
        },
        error: Some(error.to_string()),
    }
}

impl Judge for ExecutionJudge<'_> {
    fn judge(&self, _question_id: &str, sql: &str) -> Result<Feedback, JudgeError> {
        Ok(self.execute(sql))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_sql::SqliteDatabase;

    #[test]
    fn an_answer_without_a_statement_is_an_error_not_an_empty_success() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/spider/database/concert_singer/concert_singer.sqlite");
        let database = SqliteDatabase::open(&path).unwrap();
        let judge = ExecutionJudge::new(&database, ExecLimits::AGENT);
        for blank in ["", "-- SELECT Name FROM singer", " ; "] {
            let feedback = judge.execute(blank);
            assert_eq!(feedback.status, Status::ExecutionError, "{blank:?}");
            assert_eq!(
                feedback.error.as_deref(),
                Some(merit_sql::lex::NO_STATEMENT)
            );
            assert!(judge.result_of(blank).is_none());
        }
        let sql = "SELECT count(*) FROM singer";
        assert_eq!(judge.execute(sql).status, Status::Correct);
        assert!(judge.result_of(sql).is_some());
    }
}
