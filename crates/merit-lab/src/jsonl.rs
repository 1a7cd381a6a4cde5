//! Append-only JSON Lines files that survive `kill -9`: the run directory's view of
//! [`merit_journal::jsonl`], which holds the mechanics and their invariants.
//!
//! A record is written as one line and fsync'd before the writer moves on, so after a crash
//! the file holds every finished record plus, at worst, one torn last line. Readers drop a
//! torn last line (and can cut it off so the next append starts clean); anything else that is
//! not valid is an error naming the file and line.

use merit_journal::jsonl::{self as shared, Tail};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;

pub use merit_journal::jsonl::{truncate_torn_tail, JsonlError};

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
    let parse = |raw: &[u8]| {
        if raw.is_empty() {
            return Ok(None);
        }
        serde_json::from_slice(raw)
            .map(Some)
            .map_err(|e| e.to_string())
    };
    let (records, ending) = shared::read_all(path, Tail::Torn, parse)?;
    Ok(Loaded {
        records,
        torn_bytes: ending.torn.map_or(0, |torn| torn.bytes),
    })
}

/// An open append-only JSONL file.
pub struct Appender {
    inner: shared::Appender,
}

impl Appender {
    /// Opens (creating) `path` for appending, creating its folder too.
    pub fn open(path: &Path) -> Result<Appender, JsonlError> {
        shared::Appender::open(path).map(|inner| Appender { inner })
    }

    /// Appends one record as one line and waits until it is on disk.
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<(), JsonlError> {
        self.inner.append_record(record)
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
