//! Memory entries ⟨c, τ, Δ, o, ρ⟩ (paper 000, §3.2 "Online dual-polarity memory").

use crate::delta::SqlDelta;
use crate::failure::FailureType;
use merit_core::Status;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// The memory serialization format this crate reads and writes (the paper's "format version 3").
pub const FORMAT_VERSION: u32 = 3;

/// A position in the query stream. Episode `t` may only use memories from positions `< t`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct StreamPos(pub u64);

impl StreamPos {
    /// A position after every real one: a view there sees the whole memory.
    pub const END: StreamPos = StreamPos(u64::MAX);
}

impl fmt::Display for StreamPos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A memory entry's identifier: assigned in commit order, so ascending ids are older entries.
/// It is the last tie-break of every ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(pub u64);

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}", self.0)
    }
}

impl MemoryId {
    /// Parses `17` or `m17`.
    pub fn parse(text: &str) -> Option<MemoryId> {
        let digits = text.trim().trim_start_matches('m');
        digits.parse().ok().map(MemoryId)
    }
}

/// Whether an entry records a confirmed correction or an observed unsuccessful direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Polarity {
    /// An oracle-confirmed failed-to-correct transition y⁻ → y⁺ of a solved episode.
    Positive,
    /// The final direction y⁽ᴷ⁻¹⁾ → y⁽ᴷ⁾ of an episode that ran out of budget. It only says
    /// the direction failed in its source context.
    Negative,
}

impl Polarity {
    /// `positive` or `negative`.
    pub fn as_str(self) -> &'static str {
        match self {
            Polarity::Positive => "positive",
            Polarity::Negative => "negative",
        }
    }

    /// Both polarities, positive first.
    pub const ALL: [Polarity; 2] = [Polarity::Positive, Polarity::Negative];
}

impl fmt::Display for Polarity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// c: what the source episode observed when its failing attempt was judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FailureContext {
    /// The source question.
    pub question: String,
    /// BIRD's evidence hint (empty for Spider).
    pub evidence: String,
    /// The schema text the source episode was shown; shared between entries of one database.
    #[serde(with = "shared_text")]
    pub schema: Arc<str>,
    /// The unsuccessful SQL y⁻.
    pub failing_sql: String,
    /// The oracle status of y⁻.
    pub status: Status,
    /// The DBMS error of y⁻, when it had one.
    pub error: Option<String>,
}

/// Δ and the attempt it led to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Transition {
    /// The revision y⁺ (positive: oracle-confirmed; negative: the last unsuccessful attempt).
    /// It is model-written SQL, never the reference query.
    pub revised_sql: String,
    /// The oracle status of the revision (`correct` for positive entries).
    pub revised_status: Status,
    /// The DBMS error of the revision, when it had one.
    pub revised_error: Option<String>,
    /// The normalised clause-by-clause change from the failing SQL to the revision.
    pub delta: SqlDelta,
}

/// ρ: where the entry came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Provenance {
    /// Database of the source question.
    pub db_id: String,
    /// Identifier of the source question; retrieval for the same query never returns it.
    pub query_id: String,
    /// Stream position of the source episode.
    pub stream_pos: StreamPos,
    /// Repair step k of the revision (1 = first revision after the initial SQL).
    pub step: u32,
    /// The repair method that produced it (e.g. `merit`).
    pub method: String,
    /// A caller-supplied timestamp; runs that must be bit-identical pass a logical clock.
    pub time: String,
}

/// One memory entry x = ⟨c, τ, Δ, o, ρ⟩.
///
/// Entries are created only by [`crate::Memory::commit`] from a
/// [`crate::FinalizedEpisode`], or loaded from a memory directory; no constructor is public.
/// None of the types an entry is built from carries gold SQL or gold rows, so an entry cannot
/// contain them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct MemoryEntry {
    /// Always [`FORMAT_VERSION`]; first in every JSONL line.
    pub format_version: u32,
    /// Identifier; ascending in commit order.
    pub id: MemoryId,
    /// o: positive or negative.
    pub polarity: Polarity,
    /// τ: the classifier's type of the failing attempt.
    pub failure_type: FailureType,
    /// The classifier rule that produced τ.
    pub failure_rule: String,
    /// c.
    pub context: FailureContext,
    /// Δ and the revision.
    pub transition: Transition,
    /// ρ.
    pub provenance: Provenance,
}

impl MemoryEntry {
    /// The same entry ignoring the caller-supplied timestamp and the id, for detecting an
    /// identical replay of an episode after a resume.
    pub(crate) fn same_content(&self, other: &MemoryEntry) -> bool {
        let mut a = self.clone();
        let mut b = other.clone();
        a.provenance.time.clear();
        b.provenance.time.clear();
        a.id = MemoryId(0);
        b.id = MemoryId(0);
        a == b
    }
}

/// The "observed outcome" of an entry, in words, as the retrieval documents use it.
pub fn outcome_text(entry: &MemoryEntry) -> String {
    match entry.polarity {
        Polarity::Positive => "confirmed correct by the oracle".to_string(),
        Polarity::Negative => format!(
            "still unsuccessful: {}",
            entry.transition.revised_status.as_str()
        ),
    }
}

/// Serde for `Arc<str>` as a plain JSON string (serde's own support needs its `rc` feature).
mod shared_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::sync::Arc;

    pub fn serialize<S: Serializer>(value: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(deserializer).map(Arc::from)
    }
}
