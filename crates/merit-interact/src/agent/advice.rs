//! What the agent records of the memory it was shown: the level of a retrieval and the
//! numbers a selector saw about each injected memory. Defined on the agent's side of the
//! [`super::MemoryAdvisor`] boundary, so the agent needs nothing from the memory's modules;
//! the memory re-exports both.

use serde::{Deserialize, Serialize};

/// Which memory level a retrieval is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Before an episode: whole earlier attempts.
    Episode,
    /// Before a turn: single earlier steps.
    Turn,
}

/// The numbers a selector may use about one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CandidateFeatures {
    /// 1-based rank in the embedding stage.
    pub rank: usize,
    /// Cosine similarity of query and key.
    pub cosine: f64,
    /// Cosine min–max normalised within the candidates (all equal → 0).
    pub cosine_normalized: f64,
    /// BM25 score with the candidates as the corpus.
    pub bm25: f64,
    /// BM25 min–max normalised within the candidates (all equal → 0).
    pub bm25_normalized: f64,
    /// Whether the memory is positive.
    pub positive: bool,
    /// Reward of the memory's source episode.
    pub episode_reward: f64,
    /// Stream positions between the source episode and the current one; with a frozen
    /// memory, between the source episode and the end of the memory (its last entry's
    /// position + 1), which is how selector training measures it.
    pub age: u64,
}

impl CandidateFeatures {
    /// Length of [`CandidateFeatures::to_array`].
    pub const LEN: usize = 8;

    /// A fixed numeric layout for a policy network: 1/rank, cosine, normalised cosine,
    /// ln(1 + BM25), normalised BM25, positive (0/1), episode reward, ln(1 + age).
    pub fn to_array(&self) -> [f32; CandidateFeatures::LEN] {
        [
            1.0 / self.rank.max(1) as f32,
            self.cosine as f32,
            self.cosine_normalized as f32,
            self.bm25.max(0.0).ln_1p() as f32,
            self.bm25_normalized as f32,
            f32::from(u8::from(self.positive)),
            self.episode_reward as f32,
            (self.age as f64).ln_1p() as f32,
        ]
    }
}
