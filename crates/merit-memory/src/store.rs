//! Format-v3 JSONL persistence: one file per polarity in a memory directory.
//!
//! ```text
//! <dir>/positive.jsonl   one positive MemoryEntry per line, in commit order
//! <dir>/negative.jsonl   one negative MemoryEntry per line, in commit order
//! ```
//!
//! Every line is a JSON object whose first field is `"format_version": 3`, followed by `id`,
//! `polarity`, `failure_type`, `failure_rule`, `context`, `transition` and `provenance` (the
//! field order of [`MemoryEntry`]). Files are append-only; every commit writes one whole line
//! and syncs it to disk before the entry becomes visible in memory, so an entry counts as
//! committed exactly when its newline is on disk.
//!
//! Loading tolerates one thing: an unterminated last line that does not parse (a write cut
//! short by a crash) is dropped with a warning, and reopening for append truncates it away.
//! Anything else (a line that is not a valid entry, a wrong format version, an entry in the
//! wrong file, ids or stream positions out of commit order) is an error naming file and line.
//! The reading and appending mechanics, and why they are safe, are in [`merit_journal::jsonl`]; this
//! module adds what a pool must satisfy.

use crate::entry::{MemoryEntry, Polarity, FORMAT_VERSION};
use crate::episode::FinalizedEpisode;
use crate::memory::{Memory, MemoryError, Prepared};
use merit_core::model::Embedder;
use merit_journal::jsonl::{self, Appender, Ending, JsonlError, Tail};
use std::path::{Path, PathBuf};

/// File name of the positive pool.
pub const POSITIVE_FILE: &str = "positive.jsonl";
/// File name of the negative pool.
pub const NEGATIVE_FILE: &str = "negative.jsonl";

/// The file that holds entries of `polarity`.
pub fn pool_file(dir: &Path, polarity: Polarity) -> PathBuf {
    dir.join(match polarity {
        Polarity::Positive => POSITIVE_FILE,
        Polarity::Negative => NEGATIVE_FILE,
    })
}

/// The JSONL line of an entry, without its newline.
pub fn serialize_entry(entry: &MemoryEntry) -> String {
    // Serializing plain structs of strings, integers and enums into a String cannot fail.
    serde_json::to_string(entry).unwrap_or_default()
}

/// What loading found besides the entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Human-readable warnings (torn last lines).
    pub warnings: Vec<String>,
    /// Positive entries loaded.
    pub positive: usize,
    /// Negative entries loaded.
    pub negative: usize,
}

/// One pool file as read: its entries (with their line numbers) and how the file ends.
struct PoolFile {
    entries: Vec<(MemoryEntry, usize)>,
    ending: Ending,
}

fn io_error(path: &Path, error: impl std::fmt::Display) -> MemoryError {
    MemoryError::Io {
        path: path.display().to_string(),
        message: error.to_string(),
    }
}

fn corrupt(path: &Path, line: usize, message: impl Into<String>) -> MemoryError {
    MemoryError::Corrupt {
        path: path.display().to_string(),
        line,
        message: message.into(),
    }
}

fn from_jsonl(error: JsonlError) -> MemoryError {
    match error {
        JsonlError::Io { path, source } => io_error(&path, source),
        JsonlError::Corrupt {
            path,
            line,
            message,
        } => corrupt(&path, line, message),
    }
}

/// A pool line: a memory entry, or why it is not one (format and order are checked after).
fn parse_entry(raw: &[u8]) -> Result<Option<MemoryEntry>, String> {
    let text = jsonl::line_text(raw)?;
    serde_json::from_str::<MemoryEntry>(text)
        .map(Some)
        .map_err(|e| format!("not a memory entry: {e}"))
}

fn read_pool(
    path: &Path,
    polarity: Polarity,
    report: &mut LoadReport,
) -> Result<PoolFile, MemoryError> {
    // A complete entry whose newline is missing was written whole: keep it.
    let mut lines = jsonl::records(path, Tail::KeepIfParses, parse_entry).map_err(from_jsonl)?;
    let mut entries: Vec<(MemoryEntry, usize)> = Vec::new();
    for next in &mut lines {
        let (number, entry) = next.map_err(from_jsonl)?;
        if entry.format_version != FORMAT_VERSION {
            return Err(corrupt(
                path,
                number,
                format!(
                    "format version {} (this build reads version {FORMAT_VERSION})",
                    entry.format_version
                ),
            ));
        }
        if entry.polarity != polarity {
            return Err(corrupt(
                path,
                number,
                format!("a {} entry in the {polarity} file", entry.polarity),
            ));
        }
        if let Some((previous, _)) = entries.last() {
            if entry.id <= previous.id {
                return Err(corrupt(
                    path,
                    number,
                    format!("id {} does not follow id {}", entry.id, previous.id),
                ));
            }
        }
        entries.push((entry, number));
    }
    let ending = lines.ending();
    if let Some(torn) = &ending.torn {
        report.warnings.push(format!(
            "{} line {}: ignoring a torn last line ({} bytes, no newline): {}",
            path.display(),
            torn.line,
            torn.bytes,
            torn.reason.as_deref().unwrap_or_default()
        ));
    }
    Ok(PoolFile { entries, ending })
}

/// Reads both pool files of `dir` (missing files are empty pools) and checks that together
/// they form one append-only history: unique ids, stream positions increasing with the ids.
/// Returns the entries in id order.
pub fn load_entries(dir: &Path) -> Result<(Vec<MemoryEntry>, LoadReport), MemoryError> {
    let (entries, report, _) = load_pools(dir)?;
    Ok((entries, report))
}

type Loaded = (Vec<MemoryEntry>, LoadReport, [PoolFile; 2]);

fn load_pools(dir: &Path) -> Result<Loaded, MemoryError> {
    if !dir.is_dir() {
        return Err(io_error(dir, "not a memory directory (no such folder)"));
    }
    let mut report = LoadReport::default();
    let mut positive = read_pool(
        &pool_file(dir, Polarity::Positive),
        Polarity::Positive,
        &mut report,
    )?;
    let mut negative = read_pool(
        &pool_file(dir, Polarity::Negative),
        Polarity::Negative,
        &mut report,
    )?;
    report.positive = positive.entries.len();
    report.negative = negative.entries.len();
    let mut all: Vec<(MemoryEntry, Polarity, usize)> = positive
        .entries
        .drain(..)
        .map(|(e, line)| (e, Polarity::Positive, line))
        .chain(
            negative
                .entries
                .drain(..)
                .map(|(e, line)| (e, Polarity::Negative, line)),
        )
        .collect();
    all.sort_by_key(|(e, _, _)| e.id);
    for pair in all.windows(2) {
        let (earlier, _, _) = &pair[0];
        let (later, polarity, line) = &pair[1];
        let path = pool_file(dir, *polarity);
        if later.id == earlier.id {
            return Err(corrupt(
                &path,
                *line,
                format!("id {} is used twice", later.id),
            ));
        }
        if later.provenance.stream_pos <= earlier.provenance.stream_pos {
            return Err(corrupt(
                &path,
                *line,
                format!(
                    "entry {} comes from stream position {}, not after entry {} (position {}); \
                     entries must be committed in stream order, one per episode",
                    later.id,
                    later.provenance.stream_pos,
                    earlier.id,
                    earlier.provenance.stream_pos
                ),
            ));
        }
    }
    for warning in &report.warnings {
        tracing::warn!("{warning}");
    }
    let entries = all.into_iter().map(|(e, _, _)| e).collect();
    Ok((entries, report, [positive, negative]))
}

/// A [`Memory`] backed by a memory directory: every commit is appended and synced first.
#[derive(Debug)]
pub struct PersistentMemory {
    memory: Memory,
    dir: PathBuf,
    /// The positive and the negative pool file.
    files: [Appender; 2],
}

impl PersistentMemory {
    /// Opens (creating if needed) the memory directory `dir` and loads its entries,
    /// embedding each with `embedder`.
    pub fn open(
        dir: impl AsRef<Path>,
        embedder: &dyn Embedder,
    ) -> Result<(PersistentMemory, LoadReport), MemoryError> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        let (entries, report, [positive, negative]) = load_pools(&dir)?;
        let memory = Memory::from_entries(embedder.dimension(), entries, embedder)?;
        // Resuming cuts a torn last line off and syncs the folder, whose entries for the pool
        // files may have just been created.
        let files = [
            Appender::resume(&pool_file(&dir, Polarity::Positive), &positive.ending)
                .map_err(from_jsonl)?,
            Appender::resume(&pool_file(&dir, Polarity::Negative), &negative.ending)
                .map_err(from_jsonl)?,
        ];
        Ok((PersistentMemory { memory, dir, files }, report))
    }

    /// The in-memory state, for views.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }

    /// The memory directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Like [`Memory::commit`], writing the entry to its pool file (synced) before it becomes
    /// visible.
    pub fn commit(
        &mut self,
        episode: FinalizedEpisode,
        embedder: &dyn Embedder,
    ) -> Result<Option<crate::entry::MemoryId>, MemoryError> {
        match self.memory.prepare(episode, embedder)? {
            Prepared::New(entry, vector) => {
                let mut line = serialize_entry(&entry);
                line.push('\n');
                let writer = match entry.polarity {
                    Polarity::Positive => &mut self.files[0],
                    Polarity::Negative => &mut self.files[1],
                };
                writer.append(line.as_bytes()).map_err(from_jsonl)?;
                Ok(Some(self.memory.insert(*entry, vector)))
            }
            other => Ok(self.memory.apply(other)),
        }
    }
}
