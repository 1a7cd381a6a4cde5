//! Plain data types shared by every merit crate.
//!
//! This crate has no opinion about models or databases: it names the things the rest of the
//! workspace passes around, in the vocabulary of the papers (question, attempt, oracle status,
//! hardness, ...: [`model`] for the chat model and embedder traits, [`failure`], [`episode`]),
//! plus the small mechanisms every crate shares: [`template`] (the pure
//! `{{slot}}` filler of the repair and interact prompts), [`fs`] (atomic writes and run-folder
//! locks), [`hash`], [`parallel`] and [`optional`] (how test suites treat resources a machine
//! may lack).

#![warn(missing_docs)]

pub mod episode;
pub mod failure;
pub mod fs;
pub mod hash;
pub mod model;
pub mod optional;
pub mod parallel;
pub mod template;

use serde::{Deserialize, Serialize};
use std::fmt;

/// Which benchmark family a question comes from; decides which evaluator is the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Benchmark {
    /// Spider 1.0 (Yu et al. 2018), scored by the test-suite execution match.
    Spider,
    /// BIRD (Li et al. 2023), scored by set-based execution accuracy (EX).
    Bird,
}

impl fmt::Display for Benchmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Benchmark::Spider => "spider",
            Benchmark::Bird => "bird",
        })
    }
}

/// Spider's structural hardness of a gold query, as the official `eval_hardness` assigns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hardness {
    /// At most one component, nothing else.
    Easy,
    /// A few components or "other" features.
    Medium,
    /// Several components, or one nested query.
    Hard,
    /// Everything beyond hard.
    Extra,
}

impl Hardness {
    /// All levels in the order the official script prints them.
    pub const ALL: [Hardness; 4] = [
        Hardness::Easy,
        Hardness::Medium,
        Hardness::Hard,
        Hardness::Extra,
    ];

    /// The lowercase name used in the official output and in the golden vectors.
    pub fn as_str(self) -> &'static str {
        match self {
            Hardness::Easy => "easy",
            Hardness::Medium => "medium",
            Hardness::Hard => "hard",
            Hardness::Extra => "extra",
        }
    }
}

impl fmt::Display for Hardness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// BIRD's difficulty label, given by the dataset rather than computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Difficulty {
    /// `simple` in the dataset files.
    Simple,
    /// `moderate` in the dataset files.
    Moderate,
    /// `challenging` in the dataset files.
    Challenging,
}

impl Difficulty {
    /// All levels in the order the official BIRD script prints them.
    pub const ALL: [Difficulty; 3] = [
        Difficulty::Simple,
        Difficulty::Moderate,
        Difficulty::Challenging,
    ];

    /// The dataset's own spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Difficulty::Simple => "simple",
            Difficulty::Moderate => "moderate",
            Difficulty::Challenging => "challenging",
        }
    }

    /// Parses the dataset's spelling (case-insensitive).
    pub fn parse(text: &str) -> Option<Difficulty> {
        match text.trim().to_ascii_lowercase().as_str() {
            "simple" => Some(Difficulty::Simple),
            "moderate" => Some(Difficulty::Moderate),
            "challenging" => Some(Difficulty::Challenging),
            _ => None,
        }
    }
}

impl fmt::Display for Difficulty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One benchmark question as the agent may see it, plus the gold SQL that only the oracle reads.
///
/// The gold query lives in the same record because every official file format stores it there;
/// the [`merit-eval` oracle] is the only component that is handed it, and it never hands it out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    /// Stable identifier: `<split>-<index>` for loaded benchmark files.
    pub id: String,
    /// Position in the source file (0-based); streams and reports refer to it.
    pub index: usize,
    /// Database identifier, the folder name under the database directory.
    pub db_id: String,
    /// The natural-language request.
    pub question: String,
    /// BIRD's external-knowledge hint; empty for Spider.
    pub evidence: String,
    /// The reference SQL.
    pub gold_sql: String,
    /// BIRD's difficulty label, when the file has one.
    pub difficulty: Option<Difficulty>,
}

/// What the oracle says about one candidate SQL: the only feedback the repair loop receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Same denotation as the gold under the benchmark's official comparison.
    Correct,
    /// Executed, but the result differs from the gold's.
    DenotationMismatch,
    /// The DBMS rejected the query (syntax, unknown column, denied operation, ...).
    ExecutionError,
    /// The query ran past the execution time limit and was interrupted.
    Timeout,
}

impl Status {
    /// `true` only for [`Status::Correct`].
    pub fn is_correct(self) -> bool {
        matches!(self, Status::Correct)
    }

    /// The snake-case name used in logs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Correct => "correct",
            Status::DenotationMismatch => "denotation_mismatch",
            Status::ExecutionError => "execution_error",
            Status::Timeout => "timeout",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The oracle's full answer: a status plus the DBMS's own error text when there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feedback {
    /// The verdict.
    pub status: Status,
    /// The DBMS error message (or the time-limit message); `None` when the query executed.
    pub error: Option<String>,
}

impl Feedback {
    /// Feedback for a query the oracle accepted.
    pub fn correct() -> Feedback {
        Feedback {
            status: Status::Correct,
            error: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difficulty_parses_dataset_spellings_and_rejects_others() {
        assert_eq!(Difficulty::parse("Simple"), Some(Difficulty::Simple));
        assert_eq!(
            Difficulty::parse(" challenging"),
            Some(Difficulty::Challenging)
        );
        assert_eq!(Difficulty::parse("hard"), None);
    }

    #[test]
    fn status_serializes_in_snake_case() {
        let text = serde_json::to_string(&Status::DenotationMismatch).unwrap();
        assert_eq!(text, "\"denotation_mismatch\"");
    }
}
