//! Small helpers to read typed fields out of parsed JSON with errors that name the field.
//!
//! Task records are read through `serde_json::Value` rather than derived `Deserialize`
//! because serde's messages quote the offending value, and in a task or ground-truth file that
//! value can be gold SQL. These helpers report the JSON path and the expected shape only.

use crate::error::LoadError;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Where a record came from, to build [`LoadError`]s.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) path: &'a Path,
    pub(crate) line: usize,
}

impl At<'_> {
    pub(crate) fn field(&self, field: impl Into<String>, problem: &'static str) -> LoadError {
        LoadError::Field {
            path: self.path.to_path_buf(),
            line: self.line,
            field: field.into(),
            problem,
        }
    }
}

/// Parses one JSON document, keeping only the position of a syntax error.
pub(crate) fn parse(text: &str, path: &Path, line: usize) -> Result<Value, LoadError> {
    serde_json::from_str(text).map_err(|error| LoadError::Json {
        path: path.to_path_buf(),
        // For a one-line record the parser's line is 1; report the file's line instead.
        line: if line == 0 { error.line() } else { line },
        column: error.column(),
    })
}

/// Reads a whole file as UTF-8 text.
pub(crate) fn read_text(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: PathBuf::from(path),
        source,
    })
}

pub(crate) fn object<'v>(
    value: &'v Value,
    at: At<'_>,
    field: &str,
) -> Result<&'v Map<String, Value>, LoadError> {
    value
        .as_object()
        .ok_or_else(|| at.field(field, "must be a JSON object"))
}

pub(crate) fn req_str(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<String, LoadError> {
    match map.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(at.field(join(prefix, key), "must be a string")),
        None => Err(at.field(join(prefix, key), "is missing")),
    }
}

pub(crate) fn opt_str(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<String>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(at.field(join(prefix, key), "must be a string")),
    }
}

pub(crate) fn opt_bool(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<bool>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(at.field(join(prefix, key), "must be true or false")),
    }
}

pub(crate) fn opt_int(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<i64>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| at.field(join(prefix, key), "must be an integer")),
    }
}

/// A field that is a list of strings or a single string (upstream writes `sol_sql` both ways);
/// absent or null is the empty list.
pub(crate) fn str_list(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<Vec<String>>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| at.field(join(prefix, key), "must hold strings only"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(at.field(join(prefix, key), "must be a string or a list of strings")),
    }
}

pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}
