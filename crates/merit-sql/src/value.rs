//! The value model: exactly what the DBMS returned, nothing coerced.

use serde::{Deserialize, Serialize};

/// One cell of a result row, kept exactly as SQLite stores it.
///
/// Text stays as raw bytes because SQLite does not validate encodings: a database may hold
/// invalid UTF-8, and the two official evaluators treat that differently (Spider drops the
/// bad bytes, BIRD fails the query). Deciding how to decode belongs to the evaluator, not here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A 64-bit integer.
    Integer(i64),
    /// An IEEE-754 double.
    Real(f64),
    /// Text, as the bytes stored in the database (normally UTF-8).
    Text(Vec<u8>),
    /// A blob.
    Blob(Vec<u8>),
}

impl Value {
    /// Text as UTF-8 when it is valid, for display and prompts.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// A short human-readable rendering for feedback shown to a model or a person.
    pub fn display(&self) -> String {
        match self {
            Value::Null => "NULL".to_string(),
            Value::Integer(i) => i.to_string(),
            Value::Real(f) => f.to_string(),
            Value::Text(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::Blob(bytes) => format!("<blob {} bytes>", bytes.len()),
        }
    }
}

impl From<rusqlite::types::ValueRef<'_>> for Value {
    fn from(value: rusqlite::types::ValueRef<'_>) -> Value {
        use rusqlite::types::ValueRef;
        match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(bytes) => Value::Text(bytes.to_vec()),
            ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
        }
    }
}
