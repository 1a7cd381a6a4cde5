//! MERIT repair memory (paper 000, §3.1–3.3 and Appendix D): the failure classifier, the
//! causal dual-polarity memory and its format-v3 JSONL store, and type-conditioned hybrid
//! retrieval with explanations.
//!
//! The crate knows nothing about models or prompts. It receives finalized episodes and
//! answers retrieval requests; dense vectors come through [`merit_core::model::Embedder`].
//!
//! # The flow
//! ```text
//! Episode::begin(source, y0) ── record(y1) … ──► finalize(policy) ──► Memory::commit
//!        │                                                              (≤ 1 entry)
//!        └── memory.view_for(&episode).retrieve(&episode.retrieval_query(), &config, embedder)
//! ```
//!
//! # Invariants the types enforce
//! - An entry enters memory only through [`Memory::commit`] (or [`PersistentMemory::commit`])
//!   of a [`FinalizedEpisode`], which only [`Episode::finalize`] creates, or by reopening a
//!   memory directory those commits wrote; apart from deserialization, [`MemoryEntry`] has no
//!   public constructor.
//! - Every read goes through a [`MemoryView`] fixed at a stream position t and a current query:
//!   it sees only entries with source position < t from other queries. An open episode's
//!   attempts are in no memory at all. A view borrows the memory, so nothing is committed
//!   while one is alive.
//! - Episodes are committed in stream order, each position once.
//! - No input type carries gold SQL or gold rows, so no entry, text or file can contain them.
//!
//! Code outside the crate cannot build an entry by hand:
//! ```compile_fail
//! use merit_memory::{MemoryEntry, MemoryId};
//! fn forge(entry: &MemoryEntry) -> MemoryEntry {
//!     MemoryEntry { id: MemoryId(7), ..entry.clone() }
//! }
//! ```
//! nor put anything into a memory except a finalized episode:
//! ```compile_fail
//! use merit_memory::{Memory, MemoryEntry};
//! fn smuggle(memory: &mut Memory, entry: MemoryEntry) {
//!     memory.insert(entry, vec![0.0; 4]);
//! }
//! ```

#![warn(missing_docs)]

pub mod bench;
pub mod classify;
pub mod config;
pub mod delta;
pub mod embed;
pub mod entry;
pub mod episode;
/// The failure taxonomy (defined in `merit-core`, shared by the repair loop and memory).
pub use merit_core::failure;
/// The append-only JSONL layer (moved to `merit-journal`; re-exported for this crate's users).
pub use merit_journal::jsonl;
pub mod memory;
pub mod reference;
pub mod retrieve;
pub mod rng;
pub mod store;
pub mod text;
pub mod validation;

pub use classify::{classify, classify_feedback, Classification};
pub use config::{
    Bm25Params, CandidateRule, DatabaseScope, PoolLayout, Ranking, RetrievalConfig, Variant,
};
pub use delta::{sql_delta, ClauseChange, SqlDelta};
pub use embed::HashEmbedder;
pub use entry::{
    FailureContext, MemoryEntry, MemoryId, Polarity, Provenance, StreamPos, Transition,
    FORMAT_VERSION,
};
pub use episode::{
    Attempt, Episode, EpisodeError, EpisodeSource, FinalizePolicy, FinalizedEpisode,
};
pub use failure::FailureType;
pub use memory::{Memory, MemoryError, MemoryView};
pub use reference::{reference_label, ReferenceError, ReferenceLabel, ReferenceSchema};
pub use retrieve::{
    CandidateScore, Explanation, PoolExplanation, PoolKind, Precedent, Retrieval, RetrievalError,
    RetrievalQuery,
};
pub use store::{load_entries, LoadReport, PersistentMemory};
pub use validation::{table5, ValidationReport};
