//! Append-only JSON Lines files that survive `kill -9`.
//!
//! A record is written as one line and fsync'd before the writer moves on, so after a crash
//! the file holds every finished record plus, at worst, one torn last line. Readers drop a
//! torn last line (and can cut it off so the next append starts clean); anything else that is
//! not valid is an error naming the file and line.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why a JSONL file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JsonlError {
    /// Filesystem failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A complete line that does not parse.
    #[error("{path} line {line}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> JsonlError + '_ {
    move |source| JsonlError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What reading a file found.
#[derive(Debug)]
pub struct Loaded<T> {
    /// Every complete record, in file order.
    pub records: Vec<T>,
    /// Bytes of a torn last line that was ignored (0 when the file ended cleanly).
    pub torn_bytes: usize,
}

/// Reads every record of `path` (a missing file is empty). A last line without its newline is
/// a write interrupted by a crash and is ignored; any other bad line is an error.
pub fn read_records<T: DeserializeOwned>(path: &Path) -> Result<Loaded<T>, JsonlError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Loaded {
                records: Vec::new(),
                torn_bytes: 0,
            })
        }
        Err(error) => return Err(io_error(path)(error)),
    };
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut records = Vec::new();
    for (index, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let record = serde_json::from_slice(line).map_err(|e| JsonlError::Corrupt {
            path: path.to_path_buf(),
            line: index + 1,
            message: e.to_string(),
        })?;
        records.push(record);
    }
    Ok(Loaded {
        records,
        torn_bytes: bytes.len() - complete,
    })
}

/// Cuts a torn last line off `path`, so that appends continue after the last full record.
pub fn truncate_torn_tail(path: &Path, torn_bytes: usize) -> Result<(), JsonlError> {
    if torn_bytes == 0 {
        return Ok(());
    }
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_error(path))?;
    let length = file.metadata().map_err(io_error(path))?.len();
    file.set_len(length - torn_bytes as u64)
        .and_then(|()| file.sync_all())
        .map_err(io_error(path))
}

/// An open append-only JSONL file.
pub struct Appender {
    path: PathBuf,
    file: File,
}

impl Appender {
    /// Opens (creating) `path` for appending, creating its folder too.
    pub fn open(path: &Path) -> Result<Appender, JsonlError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io_error(path))?;
        Ok(Appender {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Appends one record as one line and waits until it is on disk.
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<(), JsonlError> {
        let mut line = serde_json::to_vec(record).map_err(|e| JsonlError::Corrupt {
            path: self.path.clone(),
            line: 0,
            message: format!("cannot serialize record: {e}"),
        })?;
        line.push(b'\n');
        // One write call per line: appends from one process never interleave within a line.
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(io_error(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_tail_is_dropped_then_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/log.jsonl");
        let mut appender = Appender::open(&path).unwrap();
        for i in 0..3 {
            appender.append(&serde_json::json!({ "i": i })).unwrap();
        }
        drop(appender);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"i\": 3, \"tor");
        std::fs::write(&path, &bytes).unwrap();
        let loaded: Loaded<serde_json::Value> = read_records(&path).unwrap();
        assert_eq!(loaded.records.len(), 3);
        assert_eq!(loaded.torn_bytes, 13);
        truncate_torn_tail(&path, loaded.torn_bytes).unwrap();
        let mut appender = Appender::open(&path).unwrap();
        appender.append(&serde_json::json!({ "i": 3 })).unwrap();
        let loaded: Loaded<serde_json::Value> = read_records(&path).unwrap();
        assert_eq!(loaded.records.len(), 4);
        assert_eq!(loaded.torn_bytes, 0);
    }

    #[test]
    fn a_corrupt_middle_line_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "{\"i\":1}\nnot json\n{\"i\":2}\n").unwrap();
        let error = read_records::<serde_json::Value>(&path).unwrap_err();
        assert!(error.to_string().contains("log.jsonl line 2"), "{error}");
    }

    #[test]
    fn a_missing_file_is_empty() {
        let loaded: Loaded<serde_json::Value> =
            read_records(Path::new("/nonexistent/merit/log.jsonl")).unwrap();
        assert!(loaded.records.is_empty());
    }
}
