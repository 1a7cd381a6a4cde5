//! Append-only JSON Lines files that survive a crash at any point: the one implementation
//! behind the repair memory's pools, the interact memory banks, the PRM annotation file, the
//! interact episode log, task generation's records, live mode's journal and merit-lab's run
//! logs.
//!
//! This module holds the mechanics and the one error type ([`JsonlError`]) of every journal.
//! Each caller keeps its own policy: how a line is parsed (which `format` it expects), what a
//! parsed record must satisfy (ids in order, no pair twice), and how a torn line is worded in
//! its warnings.
//!
//! # Invariants
//! - **One record, one line, one `write_all`.** [`Appender::append`] takes whole lines and
//!   writes them with a single `write_all` on a file opened for appending, so a crash can tear
//!   only the line being written, and that line is always the last one. Writing a record in
//!   pieces would let a crash leave a fragment that a later append turns into a broken line
//!   in the middle of the file.
//! - **Synced before it counts.** Every append ends with `sync_data` and returns only then, so
//!   a caller that makes a record visible (inserts a memory, starts the next task) after
//!   `append` returned never acts on something a power cut could take back. A failed append
//!   cuts the file back to its previous length, so half a line never sits in front of later
//!   ones.
//! - **A torn tail is tolerated only at the end.** Because of the two rules above, the only
//!   damage a crash can do is a last line without its newline. Readers report it as a
//!   [`TornLine`] (with its byte count) and never as an error; [`Appender::resume`] cuts it
//!   off before the first append, so the next record starts on a line of its own. A complete
//!   line (one that has its newline) that does not parse cannot come from a crash, so it is a
//!   [`JsonlError::Corrupt`] naming the file and the line: silently skipping it would lose a
//!   record the writer once confirmed.
//!
//! Under [`Tail::KeepIfParses`] a last line without its newline that does parse is kept as a
//! record (the write finished, only the newline is missing) and [`Appender::resume`] writes
//! the newline before anything else. A file has one writer at a time; nothing here locks.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Why a JSONL file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JsonlError {
    /// Filesystem failure.
    #[error("{path}: {source}")]
    Io {
        /// The file (or its folder).
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// A complete line that does not parse.
    #[error("{path} line {line}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0 for a record that could not be serialized).
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

/// What a last line without its newline is taken to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Always a torn write: it is not parsed, only reported.
    Torn,
    /// Parsed like any other line: kept when it parses (only its newline is missing), a torn
    /// write when it does not.
    KeepIfParses,
}

/// A last line without its newline that was not kept: a write cut short by a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// Its 1-based line number.
    pub line: usize,
    /// Its length in bytes (what [`Appender::resume`] cuts off).
    pub bytes: usize,
    /// Why it did not parse (`None` under [`Tail::Torn`], which does not parse it).
    pub reason: Option<String>,
}

/// How a file ended, as far as a reader got: what [`Appender::resume`] needs to continue it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ending {
    /// Bytes up to the end of the last kept line (its newline included when it has one).
    pub good_length: u64,
    /// The last kept line lacks its newline (only under [`Tail::KeepIfParses`]).
    pub missing_newline: bool,
    /// The torn last line, when there is one.
    pub torn: Option<TornLine>,
}

/// The records of a JSONL file, read lazily, with their line numbers.
///
/// Yields `(line, record)` for every line that `parse` turns into `Some(record)`, skips lines
/// it turns into `None` (blank lines, for callers that allow them), and yields
/// [`JsonlError::Corrupt`] for a complete line it rejects. Stops at a torn last line, which
/// [`Records::ending`] then reports.
pub struct Records<T, F> {
    path: PathBuf,
    bytes: Vec<u8>,
    /// Start of the next unread line.
    start: usize,
    /// Number of the last line read.
    number: usize,
    tail: Tail,
    torn: Option<TornLine>,
    parse: F,
    record: PhantomData<fn() -> T>,
}

/// Opens `path` for reading records with `parse` (a missing file has none). `parse` gets the
/// line's bytes without the newline and returns the record, `None` to skip the line, or why
/// the line is not a record.
pub fn records<T, F>(path: &Path, tail: Tail, parse: F) -> Result<Records<T, F>, JsonlError>
where
    F: FnMut(&[u8]) -> Result<Option<T>, String>,
{
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(io_error(path)(error)),
    };
    Ok(Records {
        path: path.to_path_buf(),
        bytes,
        start: 0,
        number: 0,
        tail,
        torn: None,
        parse,
        record: PhantomData,
    })
}

/// Reads every record of `path` (see [`records`]), for callers with no checks across lines.
pub fn read_all<T, F>(path: &Path, tail: Tail, parse: F) -> Result<(Vec<T>, Ending), JsonlError>
where
    F: FnMut(&[u8]) -> Result<Option<T>, String>,
{
    let mut records = records(path, tail, parse)?;
    let all = records
        .by_ref()
        .map(|next| next.map(|(_, record)| record))
        .collect::<Result<Vec<T>, JsonlError>>()?;
    Ok((all, records.ending()))
}

impl<T, F> Records<T, F> {
    /// How the file ends. Complete once the iterator has returned `None`.
    pub fn ending(&self) -> Ending {
        let torn_bytes = self.torn.as_ref().map_or(0, |t| t.bytes);
        Ending {
            good_length: (self.bytes.len() - torn_bytes) as u64,
            missing_newline: self.torn.is_none() && self.bytes.last().is_some_and(|&b| b != b'\n'),
            torn: self.torn.clone(),
        }
    }
}

impl<T, F> Iterator for Records<T, F>
where
    F: FnMut(&[u8]) -> Result<Option<T>, String>,
{
    type Item = Result<(usize, T), JsonlError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.start < self.bytes.len() {
            self.number += 1;
            let rest = &self.bytes[self.start..];
            let (length, terminated) = match rest.iter().position(|&b| b == b'\n') {
                Some(offset) => (offset, true),
                None => (rest.len(), false),
            };
            let raw = &rest[..length];
            self.start += length + 1;
            let torn = |reason| TornLine {
                line: self.number,
                bytes: length,
                reason,
            };
            if !terminated && self.tail == Tail::Torn {
                self.torn = Some(torn(None));
                return None;
            }
            match (self.parse)(raw) {
                Ok(Some(record)) => return Some(Ok((self.number, record))),
                Ok(None) => {}
                Err(reason) if !terminated => {
                    self.torn = Some(torn(Some(reason)));
                    return None;
                }
                Err(message) => {
                    return Some(Err(JsonlError::Corrupt {
                        path: self.path.clone(),
                        line: self.number,
                        message,
                    }))
                }
            }
        }
        None
    }
}

/// A line as text that holds something: the first check of callers that reject blank lines.
pub fn line_text(raw: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(raw).map_err(|_| "the line is not valid UTF-8".to_string())?;
    if text.trim().is_empty() {
        return Err("empty line".to_string());
    }
    Ok(text)
}

/// Parses a line whose JSON object carries `"format": format`, checking the tag before the
/// record so that a file of another kind is named as such rather than as a missing field.
/// `what` names the record in the message (`"an episode record"`).
pub fn parse_tagged<T: DeserializeOwned>(
    raw: &[u8],
    format: &str,
    what: &str,
) -> Result<T, String> {
    let value: serde_json::Value =
        serde_json::from_slice(raw).map_err(|e| format!("not JSON: {e}"))?;
    let found = value.get("format").and_then(|f| f.as_str()).unwrap_or("");
    if found != format {
        return Err(format!("format `{found}` is not `{format}`"));
    }
    serde_json::from_value(value).map_err(|e| format!("not {what}: {e}"))
}

/// The line of `record` with its newline, ready for [`Appender::append`].
pub fn to_line<T: Serialize + ?Sized>(record: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = serde_json::to_vec(record)?;
    line.push(b'\n');
    Ok(line)
}

/// A JSONL file open for appending whole lines (see the module docs).
#[derive(Debug)]
pub struct Appender {
    path: PathBuf,
    file: File,
    /// The file's length as this writer left it: where a failed append is cut back to.
    length: u64,
}

impl Appender {
    /// Opens (creating it and its folder) `path` for appending after whatever it holds now.
    pub fn open(path: &Path) -> Result<Appender, JsonlError> {
        let file = create(path)?;
        let length = file.metadata().map_err(io_error(path))?.len();
        sync_parent(path)?;
        Ok(Appender {
            path: path.to_path_buf(),
            file,
            length,
        })
    }

    /// Opens (creating it and its folder) `path` to continue the file a reader just read:
    /// cuts off everything after `ending.good_length` (a torn last line) and terminates a
    /// kept last line that lacks its newline.
    pub fn resume(path: &Path, ending: &Ending) -> Result<Appender, JsonlError> {
        let file = create(path)?;
        let on_disk = file.metadata().map_err(io_error(path))?.len();
        if on_disk != ending.good_length {
            cut(&file, path, ending.good_length)?;
        }
        let mut appender = Appender {
            path: path.to_path_buf(),
            file,
            length: ending.good_length,
        };
        if ending.missing_newline {
            appender.append(b"\n")?;
        }
        sync_parent(path)?;
        Ok(appender)
    }

    /// Appends whole lines (each ending in `\n`; usually one record from [`to_line`]) with
    /// one `write_all`, then `sync_data`. On failure the file is cut back to where it was.
    pub fn append(&mut self, lines: &[u8]) -> Result<(), JsonlError> {
        debug_assert!(lines.last() == Some(&b'\n'), "append takes whole lines");
        let result = self
            .file
            .write_all(lines)
            .and_then(|()| self.file.sync_data());
        match result {
            Ok(()) => {
                self.length += lines.len() as u64;
                Ok(())
            }
            Err(error) => {
                // Never leave half a line in front of later ones.
                let _ = self.file.set_len(self.length);
                Err(io_error(&self.path)(error))
            }
        }
    }

    /// Appends `record` as one line ([`to_line`], then [`Appender::append`]). A record that
    /// cannot be serialized (never expected of plain data) is [`JsonlError::Corrupt`] at line 0.
    pub fn append_record<T: Serialize + ?Sized>(&mut self, record: &T) -> Result<(), JsonlError> {
        let line = to_line(record).map_err(|e| JsonlError::Corrupt {
            path: self.path.clone(),
            line: 0,
            message: format!("cannot serialize the record: {e}"),
        })?;
        self.append(&line)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Cuts a torn last line of `torn_bytes` off `path`, so that appends continue after the last
/// full record (nothing to do for 0).
pub fn truncate_torn_tail(path: &Path, torn_bytes: usize) -> Result<(), JsonlError> {
    if torn_bytes == 0 {
        return Ok(());
    }
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_error(path))?;
    let length = file.metadata().map_err(io_error(path))?.len();
    cut(&file, path, length.saturating_sub(torn_bytes as u64))
}

fn create(path: &Path) -> Result<File, JsonlError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io_error(parent))?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_error(path))
}

/// Sets the length and syncs, so the cut is on disk before anything is appended after it.
fn cut(file: &File, path: &Path, length: u64) -> Result<(), JsonlError> {
    file.set_len(length)
        .and_then(|()| file.sync_all())
        .map_err(io_error(path))
}

/// Makes the file's directory entry durable: it may have just been created.
fn sync_parent(path: &Path) -> Result<(), JsonlError> {
    #[cfg(unix)]
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(io_error(parent))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(raw: &[u8]) -> Result<Option<serde_json::Value>, String> {
        let text = line_text(raw)?;
        serde_json::from_str(text)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_torn_tail_is_reported_with_its_bytes_and_cut_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/log.jsonl");
        let mut appender = Appender::open(&path).unwrap();
        for i in 0..3 {
            appender
                .append(&to_line(&serde_json::json!({ "i": i })).unwrap())
                .unwrap();
        }
        drop(appender);
        let good = std::fs::read(&path).unwrap();
        let mut bytes = good.clone();
        bytes.extend_from_slice(b"{\"i\": 3, \"tor");
        std::fs::write(&path, &bytes).unwrap();
        for tail in [Tail::Torn, Tail::KeepIfParses] {
            let (records, ending) = read_all(&path, tail, value).unwrap();
            assert_eq!(records.len(), 3);
            let torn = ending.torn.clone().unwrap();
            assert_eq!((torn.line, torn.bytes), (4, 13));
            assert_eq!(torn.reason.is_some(), tail == Tail::KeepIfParses);
            assert_eq!(ending.good_length, good.len() as u64);
            assert!(!ending.missing_newline);
        }
        let (_, ending) = read_all(&path, Tail::Torn, value).unwrap();
        let mut appender = Appender::resume(&path, &ending).unwrap();
        appender.append(b"{\"i\":3}\n").unwrap();
        let (records, ending) = read_all(&path, Tail::Torn, value).unwrap();
        assert_eq!(records.len(), 4);
        assert_eq!(ending.torn, None);
    }

    #[test]
    fn a_complete_last_line_without_newline_depends_on_the_tail_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "{\"i\":1}\n{\"i\":2}").unwrap();
        let (records, ending) = read_all(&path, Tail::Torn, value).unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(ending.torn.map(|t| t.bytes), Some(7));
        let (records, ending) = read_all(&path, Tail::KeepIfParses, value).unwrap();
        assert_eq!(records.len(), 2);
        assert!(ending.missing_newline && ending.torn.is_none());
        let mut appender = Appender::resume(&path, &ending).unwrap();
        appender.append(b"{\"i\":3}\n").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "{\"i\":1}\n{\"i\":2}\n{\"i\":3}\n");
    }

    #[test]
    fn a_broken_complete_line_is_an_error_naming_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        for text in ["{\"i\":1}\nnot json\n{\"i\":2}\n", "{\"i\":1}\nnot json\n"] {
            std::fs::write(&path, text).unwrap();
            let mut records = records(&path, Tail::KeepIfParses, value).unwrap();
            assert_eq!(records.next().unwrap().unwrap().0, 1);
            let error = records.next().unwrap().unwrap_err();
            assert!(error.to_string().contains("log.jsonl line 2"), "{error}");
        }
    }

    #[test]
    fn skipped_lines_keep_their_numbers_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "\n{\"i\":1}\n").unwrap();
        let skip_blank = |raw: &[u8]| {
            if raw.is_empty() {
                return Ok(None);
            }
            value(raw)
        };
        let lines: Vec<usize> = records(&path, Tail::Torn, skip_blank)
            .unwrap()
            .map(|next| next.unwrap().0)
            .collect();
        assert_eq!(lines, [2]);
        let (records, ending) =
            read_all(&dir.path().join("none.jsonl"), Tail::Torn, value).unwrap();
        assert!(records.is_empty());
        assert_eq!(ending, Ending::default());
    }

    #[test]
    fn tagged_lines_name_a_foreign_format() {
        let parsed: Result<serde_json::Value, String> =
            parse_tagged(b"{\"format\":\"other\"}", "mine", "a record");
        assert_eq!(parsed.unwrap_err(), "format `other` is not `mine`");
        assert!(parse_tagged::<serde_json::Value>(b"{", "mine", "a record")
            .unwrap_err()
            .starts_with("not JSON"));
        assert_eq!(line_text(b" \t").unwrap_err(), "empty line");
        assert_eq!(
            line_text(b"\xff").unwrap_err(),
            "the line is not valid UTF-8"
        );
    }

    #[test]
    fn truncating_cuts_exactly_the_torn_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "{\"i\":1}\n{\"i\"").unwrap();
        truncate_torn_tail(&path, 4).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"i\":1}\n");
        truncate_torn_tail(&path, 0).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"i\":1}\n");
    }
}
