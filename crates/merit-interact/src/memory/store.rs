//! One memory bank per level: entries in commit order, their unit key vectors, the causal
//! views, and the append-only JSONL file behind them.
//!
//! ```text
//! <dir>/episodes.jsonl   one EpisodeMemory per line, in commit order
//! <dir>/turns.jsonl      one TurnMemory per line, in commit order
//! ```
//!
//! Each line is a JSON object whose first field is `format`. Appending writes whole lines
//! with one `write` and syncs before the entries become visible, so an entry counts as
//! committed exactly when its newline is on disk. Loading tolerates one thing: a last line
//! without its newline that does not parse (a write cut short by a crash) is dropped with a
//! warning, and reopening for append cuts it off. Anything else (a broken or empty line,
//! another format, an unknown field, ids not counting up from 0, stream positions going
//! backwards) is `Corrupt` ([`MemoryError::Journal`]) naming the file and the line. Vectors are not
//! stored: loading re-embeds every key with the embedder at hand, as the repair memory does.
//! The reading and appending mechanics are the repair memory's ([`merit_journal::jsonl`]);
//! this module adds what a bank must satisfy.

use super::{Level, MemoryError, Polarity, StreamPos};
use merit_core::model::Embedder;
use merit_journal::jsonl::{self, Appender, Ending, JsonlError, Tail};
use merit_memory::memory::normalized;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;

/// File name of the episode-level bank.
pub const EPISODE_FILE: &str = "episodes.jsonl";
/// File name of the turn-level bank.
pub const TURN_FILE: &str = "turns.jsonl";

/// What a bank needs to know about its entries.
pub trait MemoryRecord: Serialize + DeserializeOwned {
    /// The `format` every entry of this kind carries.
    const FORMAT: &'static str;
    /// Which level the entries belong to.
    const LEVEL: Level;
    /// The entry's `format` field.
    fn format(&self) -> &str;
    /// The id assigned at commit (0, 1, 2, … in commit order).
    fn id(&self) -> u64;
    /// Sets the id (only the bank does, at commit).
    #[doc(hidden)]
    fn set_id(&mut self, id: u64);
    /// Stream position of the source episode.
    fn stream_pos(&self) -> StreamPos;
    /// The source task instance.
    fn instance_id(&self) -> &str;
    /// Positive or negative.
    fn polarity(&self) -> Polarity;
    /// Reward of the source episode.
    fn episode_reward(&self) -> f64;
    /// The text whose embedding is the entry's retrieval key.
    fn key_text(&self) -> String;
    /// The text BM25 compares the query with.
    fn lexical_text(&self) -> String;
    /// The compact summary shown to a prompted selector (and, later, injected as a hint).
    fn summary(&self) -> String;
}

/// What opening a memory folder found besides the entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Warnings (torn last lines) for the caller to show.
    pub warnings: Vec<String>,
    /// Episode memories loaded.
    pub episodes: usize,
    /// Turn memories loaded.
    pub turns: usize,
}

/// One level's memories and key vectors, optionally backed by a file.
#[derive(Debug)]
pub struct Bank<R> {
    entries: Vec<R>,
    /// Unit key vectors, `dimension` floats per entry, in entry order.
    vectors: Vec<f32>,
    dimension: usize,
    writer: Option<Appender>,
}

impl<R: MemoryRecord> Bank<R> {
    /// An empty bank for `dimension`-dimensional keys, not backed by a file.
    pub fn new(dimension: usize) -> Bank<R> {
        Bank {
            entries: Vec::new(),
            vectors: Vec::new(),
            dimension,
            writer: None,
        }
    }

    /// Loads `path` (a missing file is an empty bank), embeds every key, and opens the file
    /// for appending.
    pub fn open(
        path: &Path,
        embedder: &dyn Embedder,
        report: &mut LoadReport,
    ) -> Result<Bank<R>, MemoryError> {
        let loaded = read_bank::<R>(path)?;
        report.warnings.extend(loaded.warnings);
        match R::LEVEL {
            Level::Episode => report.episodes += loaded.entries.len(),
            Level::Turn => report.turns += loaded.entries.len(),
        }
        let mut bank = Bank::new(embedder.dimension());
        let vectors = bank.embed(&loaded.entries, embedder)?;
        bank.entries = loaded.entries;
        bank.vectors = vectors;
        bank.writer = Some(Appender::resume(path, &loaded.ending).map_err(MemoryError::from)?);
        Ok(bank)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when the bank holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry in commit order (for inspection; retrieval goes through views).
    pub fn entries(&self) -> &[R] {
        &self.entries
    }

    /// Dimension of the key vectors.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// The unit key vector of entry `index` (`None` past the end).
    pub fn vector(&self, index: usize) -> Option<&[f32]> {
        self.vectors
            .get(index * self.dimension..(index + 1) * self.dimension)
    }

    /// The key vector of an entry known to exist (indices from this bank's own listing).
    pub(crate) fn vector_of(&self, index: usize) -> &[f32] {
        self.vector(index).unwrap_or(&[])
    }

    /// The stream position of the newest entry.
    pub fn last_position(&self) -> Option<StreamPos> {
        self.entries.last().map(MemoryRecord::stream_pos)
    }

    /// The entries visible to an episode at `position` on task `instance_id`: source position
    /// before `position`, another instance.
    pub fn view_at<'b>(&'b self, position: StreamPos, instance_id: &'b str) -> BankView<'b, R> {
        // Entries are in stream order, so the visible ones are a prefix minus one instance.
        let cutoff = self.entries.partition_point(|e| e.stream_pos() < position);
        BankView {
            bank: self,
            position,
            instance_id,
            cutoff,
            excluded: &[],
        }
    }

    fn embed(&self, entries: &[R], embedder: &dyn Embedder) -> Result<Vec<f32>, MemoryError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = entries.iter().map(MemoryRecord::key_text).collect();
        let vectors = embedder.embed(&texts)?;
        if vectors.len() != texts.len() {
            return Err(MemoryError::Vector(format!(
                "the embedder returned {} vectors for {} texts",
                vectors.len(),
                texts.len()
            )));
        }
        let mut flat = Vec::with_capacity(texts.len() * self.dimension);
        for vector in vectors {
            let unit = normalized(vector, self.dimension)
                .map_err(|e| MemoryError::Vector(e.to_string()))?;
            flat.extend_from_slice(&unit);
        }
        Ok(flat)
    }

    /// Assigns ids, embeds, writes (and syncs) the entries, then makes them visible. All
    /// entries must come from one episode, at a position after every stored one.
    pub(crate) fn append(
        &mut self,
        mut entries: Vec<R>,
        embedder: &dyn Embedder,
    ) -> Result<Vec<u64>, MemoryError> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let first = self.entries.len() as u64;
        for (offset, entry) in entries.iter_mut().enumerate() {
            entry.set_id(first + offset as u64);
        }
        let vectors = self.embed(&entries, embedder)?;
        if let Some(writer) = &mut self.writer {
            // The episode's entries go out in one write, so a crash can tear only the file's
            // last line.
            let mut text = Vec::new();
            for entry in &entries {
                let line = jsonl::to_line(entry).map_err(|e| JsonlError::Corrupt {
                    path: writer.path().to_path_buf(),
                    line: 0,
                    message: format!("cannot serialize a memory entry: {e}"),
                })?;
                text.extend_from_slice(&line);
            }
            writer.append(&text).map_err(MemoryError::from)?;
        }
        let ids = entries.iter().map(MemoryRecord::id).collect();
        self.entries.extend(entries);
        self.vectors.extend(vectors);
        Ok(ids)
    }
}

/// A bank as seen from one stream position and task instance: the causal boundary. Every
/// retrieval goes through one.
#[derive(Debug, Clone, Copy)]
pub struct BankView<'b, R> {
    bank: &'b Bank<R>,
    position: StreamPos,
    instance_id: &'b str,
    cutoff: usize,
    /// Ids hidden from this view besides the current instance's (see [`BankView::excluding`]).
    excluded: &'b [u64],
}

impl<'b, R: MemoryRecord> BankView<'b, R> {
    /// The same view without the entries whose ids are in `ids` (the turn memories an
    /// episode has already been shown, with `AdvisorConfig::turn_memories_once`).
    pub fn excluding(self, ids: &'b [u64]) -> BankView<'b, R> {
        BankView {
            excluded: ids,
            ..self
        }
    }

    /// The view's stream position.
    pub fn position(&self) -> StreamPos {
        self.position
    }

    /// The current task instance, whose memories are never visible.
    pub fn instance_id(&self) -> &'b str {
        self.instance_id
    }

    /// The bank.
    pub fn bank(&self) -> &'b Bank<R> {
        self.bank
    }

    /// Indices (into the bank) of the visible entries, in commit order.
    pub fn visible(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.cutoff).filter(|&i| {
            let entry = &self.bank.entries[i];
            entry.instance_id() != self.instance_id && !self.excluded.contains(&entry.id())
        })
    }

    /// The visible entries, in commit order.
    pub fn entries(&self) -> impl Iterator<Item = &'b R> + '_ {
        let bank = self.bank;
        self.visible().map(move |i| &bank.entries[i])
    }

    /// Number of visible entries.
    pub fn len(&self) -> usize {
        self.visible().count()
    }

    /// `true` when nothing is visible.
    pub fn is_empty(&self) -> bool {
        self.visible().next().is_none()
    }
}

/// A bank file as read.
struct Loaded<R> {
    entries: Vec<R>,
    ending: Ending,
    warnings: Vec<String>,
}

fn corrupt(path: &Path, line: usize, message: impl Into<String>) -> MemoryError {
    MemoryError::Journal(JsonlError::Corrupt {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    })
}

fn read_bank<R: MemoryRecord>(path: &Path) -> Result<Loaded<R>, MemoryError> {
    // A complete entry whose newline is missing was written whole: keep it.
    let mut lines =
        jsonl::records(path, Tail::KeepIfParses, parse_line::<R>).map_err(MemoryError::from)?;
    let mut entries: Vec<R> = Vec::new();
    for next in &mut lines {
        let (number, entry) = next.map_err(MemoryError::from)?;
        let expected = entries.len() as u64;
        if entry.id() != expected {
            return Err(corrupt(
                path,
                number,
                format!(
                    "id {} where id {expected} was expected (ids count up from 0 in commit order)",
                    entry.id()
                ),
            ));
        }
        if let Some(previous) = entries.last() {
            let same_episode = previous.stream_pos() == entry.stream_pos()
                && previous.instance_id() == entry.instance_id();
            if entry.stream_pos() < previous.stream_pos()
                || (entry.stream_pos() == previous.stream_pos() && !same_episode)
            {
                return Err(corrupt(
                    path,
                    number,
                    format!(
                        "stream position {} (task `{}`) does not follow position {} (task `{}`); entries must be committed in stream order, one episode per position",
                        entry.stream_pos(),
                        entry.instance_id(),
                        previous.stream_pos(),
                        previous.instance_id()
                    ),
                ));
            }
            if R::LEVEL == Level::Episode && entry.stream_pos() == previous.stream_pos() {
                return Err(corrupt(
                    path,
                    number,
                    format!(
                        "a second episode memory for stream position {}",
                        entry.stream_pos()
                    ),
                ));
            }
        }
        entries.push(entry);
    }
    let ending = lines.ending();
    let warnings = ending
        .torn
        .iter()
        .map(|torn| {
            format!(
                "{} line {}: ignoring a torn last line ({} bytes, no newline): {}",
                path.display(),
                torn.line,
                torn.bytes,
                torn.reason.as_deref().unwrap_or_default()
            )
        })
        .collect();
    Ok(Loaded {
        entries,
        ending,
        warnings,
    })
}

fn parse_line<R: MemoryRecord>(raw: &[u8]) -> Result<Option<R>, String> {
    let text = jsonl::line_text(raw)?;
    jsonl::parse_tagged(text.as_bytes(), R::FORMAT, "a memory entry").map(Some)
}
