//! The error returned where `process_sql` would raise.

use std::fmt;

/// `process_sql` would raise on this query (an `assert`, `IndexError`, `KeyError` or
/// `ValueError` in the Python code), so the official `evaluate()` would crash on it as a gold.
///
/// `token_index` is the position in the token list (after tokenization and the `!=`/`>=`/`<=`
/// merge) where the Python code gave up, `token` the token there when one exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SpiderParseError {
    reason: String,
    token_index: Option<usize>,
    token: Option<String>,
}

impl SpiderParseError {
    /// An error not tied to a token position (e.g. unbalanced quotes).
    pub(crate) fn general(reason: impl Into<String>) -> Self {
        SpiderParseError {
            reason: reason.into(),
            token_index: None,
            token: None,
        }
    }

    /// An error at token `index`, `token` being the token there (`None`: past the end).
    pub(crate) fn at(reason: impl Into<String>, index: usize, token: Option<&str>) -> Self {
        SpiderParseError {
            reason: reason.into(),
            token_index: Some(index),
            token: token.map(str::to_string),
        }
    }

    /// What went wrong, in words.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Token position where parsing stopped, when the error is tied to one.
    pub fn token_index(&self) -> Option<usize> {
        self.token_index
    }

    /// The token at [`token_index`](Self::token_index), `None` when the query ended first.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }
}

impl fmt::Display for SpiderParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "process_sql cannot parse this query: {}", self.reason)?;
        match (self.token_index, &self.token) {
            (Some(i), Some(t)) => write!(f, " (token {i}: `{t}`)"),
            (Some(i), None) => write!(f, " (token {i}: past the end of the query)"),
            _ => Ok(()),
        }
    }
}
