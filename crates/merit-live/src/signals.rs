//! What decides a live memory's polarity and confidence, and when a memory is retired.
//!
//! The papers decide polarity with a gold oracle. Live mode has the database (an attempt
//! executes or not) and the user, who may confirm an answer, reject it, correct it with SQL of
//! their own, or say nothing. The rules, in one place:
//!
//! | how the episode ended | entry | polarity | confidence |
//! |---|---|---|---|
//! | the user confirmed the repaired answer | failed attempt → confirmed one | positive | 1.0 |
//! | the user corrected it with SQL that executes | rejected answer → the user's SQL | positive | 0.9 |
//! | no feedback within the wait, the repair executed | failed attempt → executing one | positive | 0.5 |
//! | the user rejected the repaired answer | last failed direction | negative | 1.0 |
//! | no attempt executed within K | last failed direction | negative | 1.0 |
//!
//! The two negative rows write nothing when `LiveConfig::negative_memory` is off.
//!
//! An answer that needed no repair makes no entry unless the user corrects it (as in the
//! papers, an initially correct episode teaches nothing). A correction is the strongest
//! positive signal short of a confirmation: the SQL is the user's, but they did not see it
//! run. An unconfirmed repair only executed, which is what Vanna-style memories store as if it
//! were right; here it is kept with half confidence and retired if answers built on it are
//! rejected later.

use serde::{Deserialize, Serialize};

/// What the user said about an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum UserFeedback {
    /// The answer is right.
    Confirm,
    /// The answer is wrong, with no correction.
    Reject,
    /// The answer is wrong; this SQL is right (it must execute).
    Correct {
        /// The user's SQL.
        sql: String,
    },
}

/// Where an entry's polarity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// The user confirmed the repaired answer.
    UserConfirmed,
    /// The user replaced the answer with SQL of their own that executes.
    UserCorrected,
    /// Nobody objected within the wait and the repaired SQL executes.
    ExecutedUnconfirmed,
    /// The user rejected the repaired answer.
    UserRejected,
    /// No attempt executed within the repair budget.
    ExecutionFailed,
}

impl Signal {
    /// The confidence an entry from this signal starts with (see the module table).
    pub fn confidence(self) -> f64 {
        match self {
            Signal::UserConfirmed | Signal::UserRejected | Signal::ExecutionFailed => 1.0,
            Signal::UserCorrected => 0.9,
            Signal::ExecutedUnconfirmed => 0.5,
        }
    }

    /// `true` when the user said the episode's answer was wrong.
    pub fn answer_was_rejected(self) -> bool {
        matches!(self, Signal::UserRejected | Signal::UserCorrected)
    }
}

/// When a memory is taken out of use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetirementPolicy {
    /// Rejected answers that retrieved a memory before it is retired (0: never retire).
    pub strikes: u32,
}

impl Default for RetirementPolicy {
    fn default() -> Self {
        RetirementPolicy { strikes: 2 }
    }
}

/// How a memory has fared in the answers it was retrieved into since it was committed (or
/// last restored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Answers built with it that the user rejected or corrected.
    pub rejected: u32,
    /// Answers built with it that the user confirmed.
    pub confirmed: u32,
}

impl RetirementPolicy {
    /// `true` when a memory with `record` should be retired: enough rejected answers, and
    /// more of them than confirmed ones (a memory that also helped often is kept).
    pub fn retires(&self, record: Record) -> bool {
        self.strikes > 0 && record.rejected >= self.strikes && record.rejected > record.confirmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retirement_needs_enough_rejections_and_more_than_confirmations() {
        let policy = RetirementPolicy::default();
        let record = |rejected, confirmed| Record {
            rejected,
            confirmed,
        };
        assert!(!policy.retires(record(1, 0)));
        assert!(policy.retires(record(2, 0)));
        assert!(policy.retires(record(3, 2)));
        assert!(!policy.retires(record(2, 2)));
        assert!(!RetirementPolicy { strikes: 0 }.retires(record(9, 0)));
    }

    #[test]
    fn feedback_reads_and_writes_as_tagged_json() {
        let correct = UserFeedback::Correct {
            sql: "SELECT 1".into(),
        };
        let text = serde_json::to_string(&correct).unwrap();
        assert_eq!(text, r#"{"kind":"correct","sql":"SELECT 1"}"#);
        assert_eq!(
            serde_json::from_str::<UserFeedback>(&text).unwrap(),
            correct
        );
        assert_eq!(
            serde_json::from_str::<UserFeedback>(r#"{"kind":"confirm"}"#).unwrap(),
            UserFeedback::Confirm
        );
        assert!(Signal::UserCorrected.answer_was_rejected());
        assert!(!Signal::ExecutedUnconfirmed.answer_was_rejected());
    }
}
