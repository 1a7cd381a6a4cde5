//! The failure taxonomy of MERIT repair (paper 000, §3.2) and the classifier's label.
//!
//! It lives here, below both the repair loop and the memory, so that one attempt's label is
//! computed once (by `merit_memory::classify`) and travels as this enum from the classifier
//! through the prompt, the episode log and retrieval into the memory entry.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The coarse failure category the classifier assigns to an unsuccessful attempt.
///
/// The categories are a retrieval prior, not a diagnosis: the classifier sees only the
/// oracle status and the DBMS's own error text, so an executable-but-wrong query is always
/// [`FailureType::ResultMismatch`] whatever its real cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureType {
    /// The query executed but its denotation differs from the reference.
    ResultMismatch,
    /// A reference to a table, column or alias that does not exist or is ambiguous.
    SchemaLinking,
    /// Misuse of aggregate (or window) functions, GROUP BY or HAVING.
    Aggregation,
    /// A value or type problem: incompatible comparison, bad literal, wrong operand shape.
    FilterValue,
    /// The DBMS failed while running the query: timeouts, refused operations, overflow.
    Execution,
    /// The text is not valid SQL for the engine (parse errors, unknown functions, malformed
    /// clause references).
    Syntax,
    /// A non-empty DBMS error that no rule recognises.
    Unknown,
}

impl FailureType {
    /// Every category, in the order the paper lists them.
    pub const ALL: [FailureType; 7] = [
        FailureType::ResultMismatch,
        FailureType::SchemaLinking,
        FailureType::Aggregation,
        FailureType::FilterValue,
        FailureType::Execution,
        FailureType::Syntax,
        FailureType::Unknown,
    ];

    /// The snake-case name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureType::ResultMismatch => "result_mismatch",
            FailureType::SchemaLinking => "schema_linking",
            FailureType::Aggregation => "aggregation",
            FailureType::FilterValue => "filter_value",
            FailureType::Execution => "execution",
            FailureType::Syntax => "syntax",
            FailureType::Unknown => "unknown",
        }
    }

    /// The paper's spelling, used in prompts, retrieval texts and tables.
    pub fn label(self) -> &'static str {
        match self {
            FailureType::ResultMismatch => "Result Mismatch",
            FailureType::SchemaLinking => "Schema Linking",
            FailureType::Aggregation => "Aggregation",
            FailureType::FilterValue => "Filter/Value",
            FailureType::Execution => "Execution",
            FailureType::Syntax => "Syntax",
            FailureType::Unknown => "Unknown",
        }
    }

    /// Position in [`FailureType::ALL`]; handy for confusion matrices.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Parses the snake-case name, the paper's label or a kebab-case name, ignoring case.
    pub fn parse(text: &str) -> Option<FailureType> {
        let wanted: String = text
            .trim()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .map(|c| c.to_ascii_lowercase())
            .collect();
        FailureType::ALL.into_iter().find(|kind| {
            let name: String = kind.as_str().chars().filter(|c| *c != '_').collect();
            name == wanted
        })
    }
}

impl fmt::Display for FailureType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The classifier's answer for one unsuccessful attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Classification {
    /// The assigned category.
    pub failure_type: FailureType,
    /// The id of the rule that fired (a status rule, a text rule, or `fallback-unknown`).
    pub rule: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_parse() {
        for kind in FailureType::ALL {
            assert_eq!(FailureType::parse(kind.as_str()), Some(kind));
            assert_eq!(FailureType::parse(kind.label()), Some(kind));
            assert_eq!(FailureType::ALL[kind.index()], kind);
        }
        assert_eq!(
            FailureType::parse("schema-linking"),
            Some(FailureType::SchemaLinking)
        );
        assert_eq!(FailureType::parse("joins"), None);
    }

    #[test]
    fn serializes_in_snake_case() {
        let text = serde_json::to_string(&FailureType::FilterValue).unwrap();
        assert_eq!(text, "\"filter_value\"");
    }
}
