//! The one error type of this crate.

use std::path::{Path, PathBuf};
use thiserror::Error;

/// Why a benchmark file could not be loaded.
///
/// Every variant carries the file, and where it can the place inside it (1-based line, or the
/// JSON path of the offending record/field), because the person reading the message has to go
/// and fix that file: "invalid input" alone would send them hunting through 9,000 records.
/// Loaders never panic on bad input; every problem ends up here.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file could not be opened or read at all (missing, permission denied, a directory...).
    #[error("{}: cannot read the file: {source}", file.display())]
    Io {
        /// The file that was asked for.
        file: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A problem tied to one line of the file: a malformed line in a line-oriented file, bytes
    /// that are not UTF-8, or a file that is empty (reported at line 1).
    #[error("{} line {line}: {message}", file.display())]
    Line {
        /// The file.
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong, in words.
        message: String,
    },
    /// The file is not valid JSON; serde_json's own description plus where it stopped.
    #[error("{} line {line} column {column}: invalid JSON: {message}", file.display())]
    JsonSyntax {
        /// The file.
        file: PathBuf,
        /// 1-based line where parsing stopped.
        line: usize,
        /// 1-based column (in bytes) where parsing stopped.
        column: usize,
        /// The parser's message, without its own position suffix.
        message: String,
    },
    /// Valid JSON with the wrong shape: a missing field, a wrong type, an index out of range...
    /// `path` is a JSONPath-like locator such as `[17].question` or `["abc"]`.
    #[error("{} at {path}: {message}", file.display())]
    Record {
        /// The file.
        file: PathBuf,
        /// Where in the JSON document, e.g. `[3].primary_keys[2]`.
        path: String,
        /// What is wrong, in words.
        message: String,
    },
}

impl DataError {
    /// The file the error is about; every variant has one.
    pub fn file(&self) -> &Path {
        match self {
            DataError::Io { file, .. }
            | DataError::Line { file, .. }
            | DataError::JsonSyntax { file, .. }
            | DataError::Record { file, .. } => file,
        }
    }

    pub(crate) fn line(file: &Path, line: usize, message: impl Into<String>) -> DataError {
        DataError::Line {
            file: file.to_path_buf(),
            line,
            message: message.into(),
        }
    }

    pub(crate) fn record(
        file: &Path,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> DataError {
        DataError::Record {
            file: file.to_path_buf(),
            path: path.into(),
            message: message.into(),
        }
    }
}
