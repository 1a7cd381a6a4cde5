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

use crate::entry::{MemoryEntry, Polarity, FORMAT_VERSION};
use crate::episode::FinalizedEpisode;
use crate::memory::{Memory, MemoryError, Prepared};
use merit_core::model::Embedder;
use std::fs::{File, OpenOptions};
use std::io::Write;
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

/// One pool file as read: its entries and how the file ends.
struct PoolFile {
    entries: Vec<(MemoryEntry, usize)>,
    /// Length of the file up to the end of its last good line.
    good_length: u64,
    /// A valid last entry lacks its newline.
    missing_newline: bool,
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

fn read_pool(
    path: &Path,
    polarity: Polarity,
    report: &mut LoadReport,
) -> Result<PoolFile, MemoryError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(io_error(path, error)),
    };
    let mut entries = Vec::new();
    let mut good_length = 0u64;
    let mut missing_newline = false;
    let mut start = 0usize;
    let mut number = 0usize;
    while start < bytes.len() {
        number += 1;
        let (end, terminated) = match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(offset) => (start + offset, true),
            None => (bytes.len(), false),
        };
        let raw = &bytes[start..end];
        let parsed = std::str::from_utf8(raw)
            .map_err(|_| "the line is not valid UTF-8".to_string())
            .and_then(|text| {
                if text.trim().is_empty() {
                    Err("empty line".to_string())
                } else {
                    serde_json::from_str::<MemoryEntry>(text)
                        .map_err(|e| format!("not a memory entry: {e}"))
                }
            });
        match parsed {
            Ok(entry) => {
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
                    let previous: &MemoryEntry = previous;
                    if entry.id <= previous.id {
                        return Err(corrupt(
                            path,
                            number,
                            format!("id {} does not follow id {}", entry.id, previous.id),
                        ));
                    }
                }
                entries.push((entry, number));
                good_length = end as u64 + u64::from(terminated);
                missing_newline = !terminated;
            }
            Err(message) if !terminated => {
                report.warnings.push(format!(
                    "{} line {number}: ignoring a torn last line ({} bytes, no newline): {message}",
                    path.display(),
                    raw.len()
                ));
            }
            Err(message) => return Err(corrupt(path, number, message)),
        }
        start = end + 1;
    }
    Ok(PoolFile {
        entries,
        good_length,
        missing_newline,
    })
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
    files: [PoolWriter; 2],
}

#[derive(Debug)]
struct PoolWriter {
    path: PathBuf,
    file: File,
    length: u64,
}

impl PoolWriter {
    fn open(path: PathBuf, pool: &PoolFile) -> Result<PoolWriter, MemoryError> {
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error(&path, e))?;
        let on_disk = file.metadata().map_err(|e| io_error(&path, e))?.len();
        let mut writer = PoolWriter {
            path,
            file,
            length: pool.good_length,
        };
        if on_disk != pool.good_length {
            // Drop the torn tail so the next entry starts on a line of its own.
            writer
                .file
                .set_len(pool.good_length)
                .and_then(|()| writer.file.sync_all())
                .map_err(|e| io_error(&writer.path, e))?;
        }
        if pool.missing_newline {
            writer.append(b"\n")?;
        }
        Ok(writer)
    }

    /// Appends `bytes` at the end and syncs; on failure, cuts the file back to its previous
    /// length so a partial write never sits in front of later lines.
    fn append(&mut self, bytes: &[u8]) -> Result<(), MemoryError> {
        use std::io::{Seek, SeekFrom};
        let result = self
            .file
            .seek(SeekFrom::Start(self.length))
            .and_then(|_| self.file.write_all(bytes))
            .and_then(|()| self.file.sync_data());
        match result {
            Ok(()) => {
                self.length += bytes.len() as u64;
                Ok(())
            }
            Err(error) => {
                let _ = self.file.set_len(self.length);
                Err(io_error(&self.path, error))
            }
        }
    }
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
        let files = [
            PoolWriter::open(pool_file(&dir, Polarity::Positive), &positive)?,
            PoolWriter::open(pool_file(&dir, Polarity::Negative), &negative)?,
        ];
        // The pool files may have just been created: make their directory entries durable.
        sync_directory(&dir)?;
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
                writer.append(line.as_bytes())?;
                Ok(Some(self.memory.insert(*entry, vector)))
            }
            other => Ok(self.memory.apply(other)),
        }
    }
}

/// Makes a newly created directory entry durable.
fn sync_directory(dir: &Path) -> Result<(), MemoryError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(dir, e))?;
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
    }
    Ok(())
}
