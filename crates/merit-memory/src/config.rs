//! Retrieval policies as configuration: MERIT, its type-reliability-aware variant, Dynamic
//! RAG and the paper's ablations are all one [`RetrievalConfig`] each (paper 000, §3.3, §5,
//! Appendix D–E).

use crate::failure::FailureType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// BM25 saturation and length-normalisation parameters.
///
/// The paper gives the formula but not the values. Its IDF, `ln(1 + (N − df + 0.5)/(df + 0.5))`,
/// is Lucene's, so Lucene's defaults are used with it: k1 = 1.2, b = 0.75.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Params {
    /// Term-frequency saturation k1.
    pub k1: f64,
    /// Length normalisation b (0 = none, 1 = full).
    pub b: f64,
}

impl Default for Bm25Params {
    fn default() -> Bm25Params {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

/// How memory is split into ranked pools and how many entries each contributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PoolLayout {
    /// Positive and negative entries ranked separately (MERIT: 3 + 1).
    ByPolarity {
        /// Entries taken from the positive pool.
        positive: usize,
        /// Entries taken from the negative pool.
        negative: usize,
    },
    /// One pool of every legal entry regardless of polarity (Dynamic RAG: 4).
    Unified {
        /// Entries taken.
        top: usize,
    },
}

/// Which legal entries of a pool are ranked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CandidateRule {
    /// The same-type entries when there are at least `min_typed` of them, else the whole
    /// legal pool (MERIT's C = T if |T| ≥ 3 else L).
    TypeFilter {
        /// Smallest typed pool that is used on its own.
        min_typed: usize,
    },
    /// Hard type filter only for high-reliability predicted types; other types rank the whole
    /// legal pool and same-type entries get `bonus` added to their score (§3.3).
    ReliabilityAware {
        /// Types with h(τ) = 1.
        high_reliability: Vec<FailureType>,
        /// Smallest typed pool used on its own (for high-reliability types).
        min_typed: usize,
        /// The soft type-match bonus for lower-reliability types.
        bonus: f64,
    },
    /// Every legal entry, whatever its type.
    AllLegal,
}

/// How candidates are ordered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Ranking {
    /// `dense_weight · d̂ + bm25_weight · b̂` (+ bonus) with the paper's tie-breaks. A channel
    /// with weight 0 is not computed at all.
    Hybrid {
        /// Weight of the min–max normalised cosine similarity.
        dense_weight: f64,
        /// Weight of the min–max normalised BM25 score.
        bm25_weight: f64,
    },
    /// A seeded random order of the candidate set ("random same type"). The order depends
    /// only on the seed, the stream position, the repair step and the pool.
    Random {
        /// Seed of the run.
        seed: u64,
    },
}

/// Which databases' memories a retrieval may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatabaseScope {
    /// Any database.
    Any,
    /// Only memories from other databases than the current one.
    CrossDatabase,
    /// Only memories from the current database.
    SameDatabase,
}

/// A complete retrieval policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrievalConfig {
    /// Name for logs and manifests.
    pub name: String,
    /// Pools and quotas.
    pub pools: PoolLayout,
    /// Candidate-set rule within each pool.
    pub candidates: CandidateRule,
    /// Ordering.
    pub ranking: Ranking,
    /// Database restriction.
    pub scope: DatabaseScope,
    /// BM25 parameters.
    pub bm25: Bm25Params,
    /// Whether type agreement is a tie-break (after dense and BM25, before the id). Dynamic
    /// RAG is untyped and skips it.
    pub type_tiebreak: bool,
}

/// The named policies of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Full MERIT: polarity pools 3 + 1, hard type filter with fallback, 0.75/0.25 hybrid.
    Merit,
    /// MERIT (type-reliability-aware), §3.3.
    TypeReliability,
    /// Dynamic RAG: one untyped pool, top 4, same hybrid ranking.
    DynamicRag,
    /// Ablation: no negative memories are retrieved.
    PositiveOnly,
    /// Ablation: no type filter (whole legal pool of each polarity).
    NoTypeFilter,
    /// Ablation: BM25 only.
    NoDense,
    /// Ablation: dense only.
    NoBm25,
    /// Ablation: the typed candidate set in a seeded random order.
    RandomSameType,
    /// Ablation: only memories of other databases.
    CrossDatabaseOnly,
    /// Ablation: only memories of the same database.
    SameDatabaseOnly,
}

/// The paper's weights.
const DENSE_WEIGHT: f64 = 0.75;
const BM25_WEIGHT: f64 = 0.25;
/// Smallest same-type pool used on its own.
const MIN_TYPED: usize = 3;

/// Predicted types treated as high-reliability by the type-reliability-aware variant.
///
/// The paper predefines h(τ) without listing it. These two are the types whose classifier
/// labels the validation (`merit classify --validate`, README) finds precise: Schema Linking
/// and Syntax keep ≥ 0.8 precision against the reference labels, while Result Mismatch lumps
/// every semantic error together (about half its labels are something else) and the other
/// types are too rare among failures to earn trust.
pub const HIGH_RELIABILITY_TYPES: [FailureType; 2] =
    [FailureType::SchemaLinking, FailureType::Syntax];

impl Variant {
    /// Every variant.
    pub const ALL: [Variant; 10] = [
        Variant::Merit,
        Variant::TypeReliability,
        Variant::DynamicRag,
        Variant::PositiveOnly,
        Variant::NoTypeFilter,
        Variant::NoDense,
        Variant::NoBm25,
        Variant::RandomSameType,
        Variant::CrossDatabaseOnly,
        Variant::SameDatabaseOnly,
    ];

    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Merit => "merit",
            Variant::TypeReliability => "type-reliability",
            Variant::DynamicRag => "dynamic-rag",
            Variant::PositiveOnly => "positive-only",
            Variant::NoTypeFilter => "no-type-filter",
            Variant::NoDense => "no-dense",
            Variant::NoBm25 => "no-bm25",
            Variant::RandomSameType => "random-same-type",
            Variant::CrossDatabaseOnly => "cross-database-only",
            Variant::SameDatabaseOnly => "same-database-only",
        }
    }

    /// Parses a kebab-case name.
    pub fn parse(text: &str) -> Option<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == text.trim())
    }

    /// The configuration of this variant; `seed` only matters for [`Variant::RandomSameType`].
    pub fn config(self, seed: u64) -> RetrievalConfig {
        let merit = RetrievalConfig {
            name: self.name().to_string(),
            pools: PoolLayout::ByPolarity {
                positive: 3,
                negative: 1,
            },
            candidates: CandidateRule::TypeFilter {
                min_typed: MIN_TYPED,
            },
            ranking: Ranking::Hybrid {
                dense_weight: DENSE_WEIGHT,
                bm25_weight: BM25_WEIGHT,
            },
            scope: DatabaseScope::Any,
            bm25: Bm25Params::default(),
            type_tiebreak: true,
        };
        match self {
            Variant::Merit => merit,
            Variant::TypeReliability => RetrievalConfig {
                candidates: CandidateRule::ReliabilityAware {
                    high_reliability: HIGH_RELIABILITY_TYPES.to_vec(),
                    min_typed: MIN_TYPED,
                    bonus: 0.10,
                },
                ..merit
            },
            Variant::DynamicRag => RetrievalConfig {
                pools: PoolLayout::Unified { top: 4 },
                candidates: CandidateRule::AllLegal,
                type_tiebreak: false,
                ..merit
            },
            Variant::PositiveOnly => RetrievalConfig {
                pools: PoolLayout::ByPolarity {
                    positive: 3,
                    negative: 0,
                },
                ..merit
            },
            Variant::NoTypeFilter => RetrievalConfig {
                candidates: CandidateRule::AllLegal,
                ..merit
            },
            Variant::NoDense => RetrievalConfig {
                ranking: Ranking::Hybrid {
                    dense_weight: 0.0,
                    bm25_weight: 1.0,
                },
                ..merit
            },
            Variant::NoBm25 => RetrievalConfig {
                ranking: Ranking::Hybrid {
                    dense_weight: 1.0,
                    bm25_weight: 0.0,
                },
                ..merit
            },
            Variant::RandomSameType => RetrievalConfig {
                ranking: Ranking::Random { seed },
                ..merit
            },
            Variant::CrossDatabaseOnly => RetrievalConfig {
                scope: DatabaseScope::CrossDatabase,
                ..merit
            },
            Variant::SameDatabaseOnly => RetrievalConfig {
                scope: DatabaseScope::SameDatabase,
                ..merit
            },
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl RetrievalConfig {
    /// Full MERIT.
    pub fn merit() -> RetrievalConfig {
        Variant::Merit.config(0)
    }

    /// `true` when the dense channel contributes (and a query vector is needed).
    pub fn uses_dense(&self) -> bool {
        matches!(self.ranking, Ranking::Hybrid { dense_weight, .. } if dense_weight != 0.0)
    }

    /// `true` when the BM25 channel contributes.
    pub fn uses_bm25(&self) -> bool {
        matches!(self.ranking, Ranking::Hybrid { bm25_weight, .. } if bm25_weight != 0.0)
    }

    /// Checks that weights and bonus are finite numbers.
    pub fn validate(&self) -> Result<(), String> {
        let finite = |name: &str, value: f64| {
            if value.is_finite() {
                Ok(())
            } else {
                Err(format!("{name} must be a finite number, got {value}"))
            }
        };
        if let Ranking::Hybrid {
            dense_weight,
            bm25_weight,
        } = self.ranking
        {
            finite("dense_weight", dense_weight)?;
            finite("bm25_weight", bm25_weight)?;
        }
        if let CandidateRule::ReliabilityAware { bonus, .. } = self.candidates {
            finite("bonus", bonus)?;
        }
        finite("k1", self.bm25.k1)?;
        finite("b", self.bm25.b)?;
        if self.bm25.k1 < 0.0 || !(0.0..=1.0).contains(&self.bm25.b) {
            return Err(format!(
                "BM25 needs k1 ≥ 0 and 0 ≤ b ≤ 1, got k1 = {}, b = {}",
                self.bm25.k1, self.bm25.b
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_round_trip_and_configs_validate() {
        for variant in Variant::ALL {
            assert_eq!(Variant::parse(variant.name()), Some(variant));
            let config = variant.config(7);
            assert_eq!(config.name, variant.name());
            config.validate().unwrap();
            let json = serde_json::to_string(&config).unwrap();
            let back: RetrievalConfig = serde_json::from_str(&json).unwrap();
            assert_eq!(back, config);
        }
    }

    #[test]
    fn merit_uses_the_papers_numbers() {
        let config = RetrievalConfig::merit();
        assert_eq!(
            config.pools,
            PoolLayout::ByPolarity {
                positive: 3,
                negative: 1
            }
        );
        assert_eq!(
            config.candidates,
            CandidateRule::TypeFilter { min_typed: 3 }
        );
        assert_eq!(
            config.ranking,
            Ranking::Hybrid {
                dense_weight: 0.75,
                bm25_weight: 0.25
            }
        );
        assert!(config.uses_dense() && config.uses_bm25());
        assert!(!Variant::NoDense.config(0).uses_dense());
        assert!(!Variant::NoBm25.config(0).uses_bm25());
    }
}
