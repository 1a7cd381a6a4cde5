//! The causal memory: entries enter only by committing a finalized episode, and are read only
//! through a [`MemoryView`] fixed at a stream position.

use crate::delta::sql_delta;
use crate::entry::{
    FailureContext, MemoryEntry, MemoryId, Polarity, Provenance, StreamPos, Transition,
    FORMAT_VERSION,
};
use crate::episode::{Episode, FinalizedEpisode};
use crate::failure::FailureType;
use crate::text::{bm25_tokens, entry_bm25_text, entry_dense_text};
use merit_core::model::{Embedder, ModelError};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Why a commit or a load failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The embedder failed.
    #[error("the embedder failed: {0}")]
    Embedding(#[from] ModelError),
    /// The embedder's vectors do not have the memory's dimension.
    #[error(
        "embedding dimension mismatch: the memory holds {expected}-dimensional vectors, got {got}"
    )]
    Dimension {
        /// The memory's dimension.
        expected: usize,
        /// What the embedder produced.
        got: usize,
    },
    /// The embedder returned NaN or infinity.
    #[error("the embedder returned a non-finite value")]
    NonFinite,
    /// Episodes must be committed in stream order, each position once.
    #[error("episode at stream position {position} committed after position {last}; episodes must be committed in stream order")]
    OutOfOrder {
        /// The position being committed.
        position: StreamPos,
        /// The last position already committed.
        last: StreamPos,
    },
    /// The same position was committed again with a different outcome.
    #[error("stream position {position} was already committed with a different outcome")]
    ConflictingReplay {
        /// The position.
        position: StreamPos,
    },
    /// Reading or writing a memory file failed.
    #[error("{path}: {message}")]
    Io {
        /// The file or folder.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A memory file holds something other than valid entries.
    #[error("{path} line {line}: {message}")]
    Corrupt {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// No entry has this id.
    #[error("no memory entry has id {0}")]
    UnknownEntry(MemoryId),
}

/// Maps strings to small integers so that legality checks compare integers.
#[derive(Debug, Default, Clone)]
struct Interner {
    ids: HashMap<String, u32>,
}

impl Interner {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.ids.len() as u32;
        self.ids.insert(name.to_string(), id);
        id
    }

    /// The id of `name`, or a value no entry carries.
    fn lookup(&self, name: &str) -> u32 {
        self.ids.get(name).copied().unwrap_or(NO_ID)
    }
}

/// An interned id that no entry has.
pub(crate) const NO_ID: u32 = u32::MAX;

/// One posting of the inverted index: entry `doc` holds the term `tf` times.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Posting {
    /// Storage index of the entry.
    pub(crate) doc: u32,
    /// Position of the entry within its (polarity, type) group.
    pub(crate) member: u32,
    /// Term frequency.
    pub(crate) tf: u32,
}

/// The postings of one term within one (polarity, failure type) group, in storage order.
///
/// Retrieval ranks one pool of one polarity, often one type, so grouping the postings lets
/// BM25 walk only the entries that can be candidates.
#[derive(Debug, Clone)]
pub(crate) struct GroupPostings {
    pub(crate) group: u8,
    pub(crate) list: Vec<Posting>,
}

/// Number of (polarity, failure type) groups.
pub(crate) const GROUPS: usize = 2 * FailureType::ALL.len();

/// The posting group of an entry: polarity and failure type.
pub(crate) fn posting_group(polarity: Polarity, failure_type: FailureType) -> u8 {
    let side = match polarity {
        Polarity::Positive => 0,
        Polarity::Negative => 1,
    };
    (side * FailureType::ALL.len() + failure_type.index()) as u8
}

/// An online dual-polarity memory with its dense and lexical indexes.
///
/// Entries are stored in commit order; per-entry metadata lives in parallel arrays so that
/// the legality scan touches a few bytes per entry.
#[derive(Debug, Clone)]
pub struct Memory {
    dimension: usize,
    pub(crate) entries: Vec<MemoryEntry>,
    pub(crate) source_pos: Vec<u64>,
    pub(crate) source_query: Vec<u32>,
    pub(crate) source_db: Vec<u32>,
    pub(crate) polarity: Vec<Polarity>,
    pub(crate) failure_type: Vec<FailureType>,
    /// Whether each entry is retired (kept, but never retrieved); see [`Memory::set_retired`].
    retired: Vec<bool>,
    /// Posting group ([`posting_group`]) of each entry.
    pub(crate) group_of: Vec<u8>,
    /// Storage indices of each group's entries, ascending.
    pub(crate) group_members: Vec<Vec<u32>>,
    /// Unit-length dense vectors, `dimension` floats per entry, stored per group in member
    /// order: a pool's candidates are read front to back, which the memory system streams
    /// much faster than scattered vectors.
    pub(crate) group_vectors: Vec<Vec<f32>>,
    /// Position of each entry within its group.
    pub(crate) offset_in_group: Vec<u32>,
    pub(crate) terms: HashMap<String, u32>,
    /// Per term id, its postings split by [`posting_group`].
    pub(crate) postings: Vec<Vec<GroupPostings>>,
    pub(crate) doc_len: Vec<u32>,
    queries: Interner,
    databases: Interner,
    schemas: HashSet<Arc<str>>,
    last_finalized: Option<StreamPos>,
    next_id: u64,
}

/// What committing an episode will do, computed before anything changes.
pub(crate) enum Prepared {
    /// The episode adds no entry.
    Nothing(StreamPos),
    /// The episode was already committed with this very entry (a resumed run replaying it).
    Replay(MemoryId),
    /// A new entry and its vector.
    New(Box<MemoryEntry>, Vec<f32>),
}

impl Memory {
    /// An empty memory for vectors of `dimension` floats.
    pub fn new(dimension: usize) -> Memory {
        Memory {
            dimension,
            entries: Vec::new(),
            source_pos: Vec::new(),
            source_query: Vec::new(),
            source_db: Vec::new(),
            polarity: Vec::new(),
            failure_type: Vec::new(),
            retired: Vec::new(),
            group_of: Vec::new(),
            group_members: vec![Vec::new(); GROUPS],
            group_vectors: vec![Vec::new(); GROUPS],
            offset_in_group: Vec::new(),
            terms: HashMap::new(),
            postings: Vec::new(),
            doc_len: Vec::new(),
            queries: Interner::default(),
            databases: Interner::default(),
            schemas: HashSet::new(),
            last_finalized: None,
            next_id: 0,
        }
    }

    /// An empty memory sized for `embedder`'s vectors.
    pub fn for_embedder(embedder: &dyn Embedder) -> Memory {
        Memory::new(embedder.dimension())
    }

    /// Dimension of the dense vectors.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// Number of entries (of both polarities, at every position).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` when no entry was committed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The last stream position committed, if any.
    pub fn last_finalized(&self) -> Option<StreamPos> {
        self.last_finalized
    }

    /// Adds the entry of a finalized episode (if it has one) and returns its id.
    ///
    /// Episodes must arrive in stream order. Committing the same position again with an
    /// identical outcome (a resumed run replaying its last episode) returns the existing id;
    /// a different outcome is an error.
    pub fn commit(
        &mut self,
        episode: FinalizedEpisode,
        embedder: &dyn Embedder,
    ) -> Result<Option<MemoryId>, MemoryError> {
        let prepared = self.prepare(episode, embedder)?;
        Ok(self.apply(prepared))
    }

    /// Carries out a prepared commit.
    pub(crate) fn apply(&mut self, prepared: Prepared) -> Option<MemoryId> {
        match prepared {
            Prepared::Nothing(position) => {
                self.last_finalized = Some(position);
                None
            }
            Prepared::Replay(id) => Some(id),
            Prepared::New(entry, vector) => Some(self.insert(*entry, vector)),
        }
    }

    /// Retires the entry `id` (`true`) or restores it (`false`). A retired entry stays in the
    /// memory and in views' [`MemoryView::get`], but no retrieval sees it: it leaves every
    /// pool and every BM25 corpus. Used by live mode, where a memory that later answers were
    /// rejected with can be taken out of use and brought back; benchmark runs never retire.
    /// Returns the previous state; an unknown id is an error.
    pub fn set_retired(&mut self, id: MemoryId, retired: bool) -> Result<bool, MemoryError> {
        let index = self
            .entries
            .binary_search_by_key(&id, |e| e.id)
            .map_err(|_| MemoryError::UnknownEntry(id))?;
        Ok(std::mem::replace(&mut self.retired[index], retired))
    }

    /// `true` when the entry `id` exists and is retired.
    pub fn is_retired(&self, id: MemoryId) -> bool {
        self.entries
            .binary_search_by_key(&id, |e| e.id)
            .is_ok_and(|index| self.retired[index])
    }

    /// A view for retrievals at stream position `position` on behalf of `current_query`:
    /// it sees only entries from earlier positions and other queries.
    pub fn view_at(&self, position: StreamPos, current_query: &str) -> MemoryView<'_> {
        MemoryView {
            memory: self,
            position,
            excluded_query: self.queries.lookup(current_query),
        }
    }

    /// The view an open episode retrieves through: its own position and query.
    pub fn view_for(&self, episode: &Episode) -> MemoryView<'_> {
        let source = episode.source();
        self.view_at(source.stream_pos, &source.query_id)
    }

    /// A view past the end of the stream that excludes no query: every entry. For offline
    /// inspection (`merit memory ls`), never for a repair episode.
    pub fn view_all(&self) -> MemoryView<'_> {
        MemoryView {
            memory: self,
            position: StreamPos::END,
            excluded_query: NO_ID,
        }
    }

    /// Approximate heap bytes held: entry texts, vectors, index and metadata.
    pub fn heap_bytes(&self) -> usize {
        let strings: usize = self
            .entries
            .iter()
            .map(|e| {
                let c = &e.context;
                let t = &e.transition;
                let p = &e.provenance;
                let delta: usize = t
                    .delta
                    .changes
                    .iter()
                    .map(|change| {
                        change.clause.capacity()
                            + change.removed.iter().map(String::capacity).sum::<usize>()
                            + change.added.iter().map(String::capacity).sum::<usize>()
                            + (change.removed.capacity() + change.added.capacity())
                                * std::mem::size_of::<String>()
                    })
                    .sum();
                c.question.capacity()
                    + c.evidence.capacity()
                    + c.failing_sql.capacity()
                    + c.error.as_ref().map_or(0, String::capacity)
                    + e.failure_rule.capacity()
                    + t.revised_sql.capacity()
                    + t.revised_error.as_ref().map_or(0, String::capacity)
                    + delta
                    + p.db_id.capacity()
                    + p.query_id.capacity()
                    + p.method.capacity()
                    + p.time.capacity()
            })
            .sum();
        let schemas: usize = self.schemas.iter().map(|s| s.len() + 16).sum();
        let entries = self.entries.capacity() * std::mem::size_of::<MemoryEntry>();
        let metadata = self.source_pos.capacity() * 8
            + (self.source_query.capacity() + self.source_db.capacity() + self.doc_len.capacity())
                * 4
            + self.polarity.capacity()
            + self.failure_type.capacity();
        let vectors: usize = self
            .group_vectors
            .iter()
            .map(|v| v.capacity() * 4)
            .sum::<usize>()
            + self
                .group_members
                .iter()
                .map(|m| m.capacity() * 4)
                .sum::<usize>()
            + self.offset_in_group.capacity() * 4
            + self.group_of.capacity();
        let postings: usize = self
            .postings
            .iter()
            .map(|groups| {
                groups
                    .iter()
                    .map(|g| g.list.capacity() * std::mem::size_of::<Posting>() + 32)
                    .sum::<usize>()
                    + groups.capacity() * std::mem::size_of::<GroupPostings>()
            })
            .sum();
        let terms: usize = self.terms.keys().map(|k| k.capacity() + 40).sum();
        strings + schemas + entries + metadata + vectors + postings + terms
    }

    pub(crate) fn prepare(
        &self,
        episode: FinalizedEpisode,
        embedder: &dyn Embedder,
    ) -> Result<Prepared, MemoryError> {
        let FinalizedEpisode { source, transition } = episode;
        let position = source.stream_pos;
        let entry = transition.map(|t| {
            // The label the attempt was classified with when it was made. A transition always
            // starts from a failed attempt (a correct one ends the episode), so it has one.
            let (failure_type, rule) = t
                .before
                .failure()
                .map(|c| (c.failure_type, c.rule))
                .unwrap_or((FailureType::Unknown, crate::classify::RULE_FALLBACK));
            let delta = sql_delta(&t.before.sql, &t.after.sql);
            MemoryEntry {
                format_version: FORMAT_VERSION,
                id: MemoryId(self.next_id),
                polarity: t.polarity,
                failure_type,
                failure_rule: rule.to_string(),
                context: FailureContext {
                    question: source.question.clone(),
                    evidence: source.evidence.clone(),
                    schema: self.shared_schema(&source.schema),
                    failing_sql: t.before.sql,
                    status: t.before.feedback.status,
                    error: t.before.feedback.error,
                },
                transition: Transition {
                    revised_sql: t.after.sql,
                    revised_status: t.after.feedback.status,
                    revised_error: t.after.feedback.error,
                    delta,
                },
                provenance: Provenance {
                    db_id: source.db_id.clone(),
                    query_id: source.query_id.clone(),
                    stream_pos: position,
                    step: t.step,
                    method: source.method.clone(),
                    time: source.time.clone(),
                },
            }
        });
        if let Some(last) = self.last_finalized {
            if position < last {
                return Err(MemoryError::OutOfOrder { position, last });
            }
            if position == last {
                let existing = self
                    .entries
                    .last()
                    .filter(|e| e.provenance.stream_pos == position);
                return match (existing, entry) {
                    (None, None) => Ok(Prepared::Nothing(position)),
                    (Some(old), Some(new)) if old.same_content(&new) => {
                        Ok(Prepared::Replay(old.id))
                    }
                    _ => Err(MemoryError::ConflictingReplay { position }),
                };
            }
        }
        let Some(entry) = entry else {
            return Ok(Prepared::Nothing(position));
        };
        let vector = self.embed_entry(&entry, embedder)?;
        Ok(Prepared::New(Box::new(entry), vector))
    }

    /// The interned copy of a schema text, or a new shared one.
    fn shared_schema(&self, schema: &str) -> Arc<str> {
        match self.schemas.get(schema) {
            Some(shared) => Arc::clone(shared),
            None => Arc::from(schema),
        }
    }

    pub(crate) fn embed_entry(
        &self,
        entry: &MemoryEntry,
        embedder: &dyn Embedder,
    ) -> Result<Vec<f32>, MemoryError> {
        let mut vectors = embedder.embed(&[entry_dense_text(entry)])?;
        let vector = vectors.pop().ok_or(MemoryError::Dimension {
            expected: self.dimension,
            got: 0,
        })?;
        normalized(vector, self.dimension)
    }

    /// Appends an entry and indexes it. The caller has checked order and embedded it.
    pub(crate) fn insert(&mut self, mut entry: MemoryEntry, vector: Vec<f32>) -> MemoryId {
        let schema = self.shared_schema(&entry.context.schema);
        self.schemas.insert(Arc::clone(&schema));
        entry.context.schema = schema;
        let id = entry.id;
        let doc = self.entries.len() as u32;
        let tokens = bm25_tokens(&entry_bm25_text(&entry));
        let mut counts: Vec<(u32, u32)> = Vec::new();
        let mut seen: HashMap<u32, usize> = HashMap::new();
        for token in &tokens {
            let next = self.terms.len() as u32;
            let term = *self.terms.entry(token.clone()).or_insert(next);
            if term as usize == self.postings.len() {
                self.postings.push(Vec::new());
            }
            match seen.get(&term) {
                Some(&at) => counts[at].1 += 1,
                None => {
                    seen.insert(term, counts.len());
                    counts.push((term, 1));
                }
            }
        }
        let group = posting_group(entry.polarity, entry.failure_type);
        let member = self.group_members[usize::from(group)].len() as u32;
        for (term, tf) in counts {
            let groups = &mut self.postings[term as usize];
            let at = match groups.iter().position(|g| g.group == group) {
                Some(at) => at,
                None => {
                    groups.push(GroupPostings {
                        group,
                        list: Vec::new(),
                    });
                    groups.len() - 1
                }
            };
            groups[at].list.push(Posting { doc, member, tf });
        }
        self.doc_len.push(tokens.len() as u32);
        let members = &mut self.group_members[usize::from(group)];
        self.offset_in_group.push(members.len() as u32);
        members.push(doc);
        self.group_of.push(group);
        self.group_vectors[usize::from(group)].extend_from_slice(&vector);
        self.source_pos.push(entry.provenance.stream_pos.0);
        let query = self.queries.intern(&entry.provenance.query_id);
        self.source_query.push(query);
        let db = self.databases.intern(&entry.provenance.db_id);
        self.source_db.push(db);
        self.polarity.push(entry.polarity);
        self.failure_type.push(entry.failure_type);
        self.retired.push(false);
        self.last_finalized = Some(
            self.last_finalized
                .map_or(entry.provenance.stream_pos, |last| {
                    last.max(entry.provenance.stream_pos)
                }),
        );
        self.next_id = self.next_id.max(id.0 + 1);
        self.entries.push(entry);
        id
    }

    /// The unit vector of the entry at storage index `index`.
    pub(crate) fn vector(&self, index: usize) -> &[f32] {
        let group = usize::from(self.group_of[index]);
        let start = self.offset_in_group[index] as usize * self.dimension;
        &self.group_vectors[group][start..start + self.dimension]
    }

    /// Interned id of a database name, or [`NO_ID`].
    pub(crate) fn database_id(&self, db_id: &str) -> u32 {
        self.databases.lookup(db_id)
    }

    /// Rebuilds a memory from stored entries (already checked for order and uniqueness).
    pub(crate) fn from_entries(
        dimension: usize,
        entries: Vec<MemoryEntry>,
        embedder: &dyn Embedder,
    ) -> Result<Memory, MemoryError> {
        let mut memory = Memory::new(dimension);
        if embedder.dimension() != dimension {
            return Err(MemoryError::Dimension {
                expected: dimension,
                got: embedder.dimension(),
            });
        }
        const BATCH: usize = 64;
        let mut pending = entries.into_iter().peekable();
        while pending.peek().is_some() {
            let batch: Vec<MemoryEntry> = pending.by_ref().take(BATCH).collect();
            let texts: Vec<String> = batch.iter().map(entry_dense_text).collect();
            let vectors = embedder.embed(&texts)?;
            if vectors.len() != batch.len() {
                return Err(MemoryError::Embedding(ModelError::Malformed(format!(
                    "asked for {} vectors, got {}",
                    batch.len(),
                    vectors.len()
                ))));
            }
            for (entry, vector) in batch.into_iter().zip(vectors) {
                let vector = normalized(vector, dimension)?;
                memory.insert(entry, vector);
            }
        }
        Ok(memory)
    }
}

/// Checks a vector's length and values and scales it to unit length (a zero vector stays
/// zero: it is equally dissimilar to everything).
pub fn normalized(mut vector: Vec<f32>, dimension: usize) -> Result<Vec<f32>, MemoryError> {
    if vector.len() != dimension {
        return Err(MemoryError::Dimension {
            expected: dimension,
            got: vector.len(),
        });
    }
    if vector.iter().any(|v| !v.is_finite()) {
        return Err(MemoryError::NonFinite);
    }
    let norm: f64 = vector
        .iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 && norm != 1.0 {
        for v in &mut vector {
            *v = (f64::from(*v) / norm) as f32;
        }
    }
    Ok(vector)
}

/// The memory as visible at one stream position to one query: the causal boundary.
///
/// An entry is legal only if its source position is strictly before the view's position and
/// its source query is not the view's query. Every retrieval and every listing goes through
/// a view, so no code path can hand a repair episode an entry from its own query or from the
/// future. The view borrows the memory, so nothing can be committed while it exists.
#[derive(Debug, Clone, Copy)]
pub struct MemoryView<'m> {
    pub(crate) memory: &'m Memory,
    position: StreamPos,
    excluded_query: u32,
}

impl<'m> MemoryView<'m> {
    /// The stream position t of the view.
    pub fn position(&self) -> StreamPos {
        self.position
    }

    /// Number of stored entries from positions before the view's: entries are stored in
    /// stream order, so every visible entry has a storage index below this.
    pub(crate) fn cutoff(&self) -> usize {
        self.memory
            .source_pos
            .partition_point(|&pos| pos < self.position.0)
    }

    /// `true` when the entry at storage index `index` is visible: from an earlier position and
    /// another query. Listings and [`MemoryView::get`] see retired entries too.
    fn is_visible_index(&self, index: usize) -> bool {
        self.memory.source_pos[index] < self.position.0
            && self.memory.source_query[index] != self.excluded_query
    }

    /// `true` when the entry at storage index `index` may be retrieved: visible and not
    /// retired.
    pub(crate) fn is_legal_index(&self, index: usize) -> bool {
        self.is_visible_index(index) && !self.memory.retired[index]
    }

    /// The visible entries in commit order.
    pub fn entries(&self) -> impl Iterator<Item = &'m MemoryEntry> + '_ {
        let memory = self.memory;
        (0..memory.entries.len())
            .filter(move |&i| self.is_visible_index(i))
            .map(move |i| &memory.entries[i])
    }

    /// Number of visible entries.
    pub fn len(&self) -> usize {
        (0..self.memory.entries.len())
            .filter(|&i| self.is_visible_index(i))
            .count()
    }

    /// `true` when nothing is visible.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A visible entry by id.
    pub fn get(&self, id: MemoryId) -> Option<&'m MemoryEntry> {
        let memory = self.memory;
        let index = memory.entries.binary_search_by_key(&id, |e| e.id).ok()?;
        self.is_visible_index(index).then(|| &memory.entries[index])
    }
}
