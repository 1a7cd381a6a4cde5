//! The oracle: the only component that holds gold SQL, and it never hands it out.
//!
//! The repair loop asks "is this candidate right for question Q?" and receives a [`Feedback`]
//! (status plus the DBMS's error text). Gold queries and gold rows stay inside: there is no
//! accessor for them, and errors name question ids, never gold text.

use crate::evaluator::{Evaluator, FetchPrediction, Verdict};
use merit_core::{Benchmark, Feedback, Question, Status};
use merit_data::{Availability, DatabaseDir};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why the oracle could not judge a candidate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OracleError {
    /// The question id is not one the oracle was built with.
    #[error("unknown question id {0}")]
    UnknownQuestion(String),
    /// The question's database is missing under the database directory.
    #[error("question {question_id}: database {db_id} is unavailable")]
    Unavailable {
        /// The question.
        question_id: String,
        /// Its database.
        db_id: String,
    },
    /// The gold query itself fails; the question cannot be judged.
    #[error("question {0}: the gold query fails to execute, so no candidate can be judged")]
    GoldFails(String),
}

struct GoldRecord {
    db_path: Option<PathBuf>,
    db_id: String,
    gold_sql: String,
}

/// Judges candidate SQL against hidden gold queries with the benchmark's official comparison.
pub struct Oracle {
    benchmark: Benchmark,
    evaluator: Arc<Evaluator>,
    golds: HashMap<String, GoldRecord>,
}

impl std::fmt::Debug for Oracle {
    // Hand-written so that a debug print can never show a gold query.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oracle")
            .field("benchmark", &self.benchmark)
            .field("questions", &self.golds.len())
            .finish()
    }
}

impl Oracle {
    /// Builds an oracle for `questions`, locating their databases under `databases`.
    /// Questions whose database is missing stay known but are reported as unavailable.
    pub fn new(
        benchmark: Benchmark,
        evaluator: Arc<Evaluator>,
        questions: &[Question],
        databases: &DatabaseDir,
    ) -> (Oracle, Availability) {
        let availability = databases.availability(questions);
        let golds = questions
            .iter()
            .map(|question| {
                let record = GoldRecord {
                    db_path: databases.locate(&question.db_id).ok(),
                    db_id: question.db_id.clone(),
                    gold_sql: question.gold_sql.clone(),
                };
                (question.id.clone(), record)
            })
            .collect();
        let oracle = Oracle {
            benchmark,
            evaluator,
            golds,
        };
        (oracle, availability)
    }

    /// The benchmark whose comparison this oracle applies.
    pub fn benchmark(&self) -> Benchmark {
        self.benchmark
    }

    /// Executes every available gold once, in parallel, so later judgements only run the
    /// candidate. Returns the ids of questions whose gold fails.
    pub fn warm_up(&self) -> Vec<String> {
        let mut failing: Vec<String> = self
            .golds
            .par_iter()
            .filter_map(|(id, record)| {
                let path = record.db_path.as_ref()?;
                // Judging the gold against itself fills the gold cache as a side effect.
                let verdict = self.verdict(path, &record.gold_sql, &record.gold_sql);
                matches!(verdict, Verdict::GoldError(_)).then(|| id.clone())
            })
            .collect();
        failing.sort();
        failing
    }

    fn verdict(&self, path: &std::path::Path, gold: &str, candidate: &str) -> Verdict {
        match self.benchmark {
            Benchmark::Spider => self.evaluator.spider_exec(path, gold, candidate),
            Benchmark::Bird => self.evaluator.bird_ex(path, gold, candidate),
        }
    }

    /// Judges `candidate_sql` for the question `question_id`.
    pub fn judge(&self, question_id: &str, candidate_sql: &str) -> Result<Feedback, OracleError> {
        let (record, path) = self.gold_of(question_id)?;
        let verdict = self.verdict(path, &record.gold_sql, candidate_sql);
        self.feedback(question_id, verdict)
    }

    /// [`Oracle::judge`] with the candidate executed on a copy of the question's database
    /// on another engine (PostgreSQL): `fetch(sql, gold_rows)` runs the normalised candidate
    /// there (see [`Evaluator::spider_exec_with`]); its errors are that engine's. Spider only:
    /// BIRD's comparison is not offered on a copy.
    pub fn judge_with(
        &self,
        question_id: &str,
        candidate_sql: &str,
        fetch: &FetchPrediction<'_>,
    ) -> Result<Feedback, OracleError> {
        let (record, path) = self.gold_of(question_id)?;
        let verdict = self
            .evaluator
            .spider_exec_with(path, &record.gold_sql, candidate_sql, fetch);
        self.feedback(question_id, verdict)
    }

    /// The gold record of `question_id` and its database file.
    fn gold_of(&self, question_id: &str) -> Result<(&GoldRecord, &Path), OracleError> {
        let record = self
            .golds
            .get(question_id)
            .ok_or_else(|| OracleError::UnknownQuestion(question_id.to_string()))?;
        let path = record
            .db_path
            .as_deref()
            .ok_or_else(|| OracleError::Unavailable {
                question_id: question_id.to_string(),
                db_id: record.db_id.clone(),
            })?;
        Ok((record, path))
    }

    /// The database id of a question the oracle knows.
    pub fn db_id(&self, question_id: &str) -> Option<&str> {
        self.golds.get(question_id).map(|r| r.db_id.as_str())
    }

    fn feedback(&self, question_id: &str, verdict: Verdict) -> Result<Feedback, OracleError> {
        let feedback = match verdict {
            Verdict::Match => Feedback::correct(),
            Verdict::Mismatch | Verdict::Undecided => Feedback {
                status: Status::DenotationMismatch,
                error: None,
            },
            Verdict::PredictionError(message) => Feedback {
                status: Status::ExecutionError,
                error: Some(message),
            },
            Verdict::EmptyPrediction => Feedback {
                status: Status::ExecutionError,
                error: Some(merit_sql::lex::NO_STATEMENT.to_string()),
            },
            Verdict::PredictionTimeout => Feedback {
                status: Status::Timeout,
                error: Some(format!(
                    "query exceeded the {:?} time limit and was interrupted",
                    self.evaluator.config().query_timeout
                )),
            },
            Verdict::GoldError(_) => return Err(OracleError::GoldFails(question_id.to_string())),
        };
        Ok(feedback)
    }
}
