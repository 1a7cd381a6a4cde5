//! Type-conditioned hybrid retrieval (paper 000, §3.2 "Causal, type-conditioned retrieval"
//! and Appendix D).
//!
//! For each pool (positive and negative, or one unified pool):
//! 1. the legal pool L: entries visible to the view, of the pool's polarity, within the
//!    database scope;
//! 2. the candidate set C: the same-type subset T when the rule allows it and |T| ≥ 3,
//!    otherwise L;
//! 3. dense score: cosine of unit vectors (exact, see below); BM25 score over C as the corpus
//!    (N = |C|, df and the average length counted in C; each distinct query term counted
//!    once, as the paper's sum over w ∈ q reads; k1 = 1.2, b = 0.75);
//! 4. both min–max normalised within C (all-equal → 0), combined
//!    `0.75·d̂ + 0.25·b̂` (+ the type-match bonus of the reliability-aware variant);
//! 5. ordered by score, then dense desc, BM25 desc, type match desc, memory id asc; only
//!    the pool's quota is kept.
//!
//! Scoring is exact. Speed comes from layout and from bounds, never from approximation in
//! what is returned: a pool that keeps only its top scans the cosines with a fast f32 sum
//! whose error is bounded, and computes exactly every candidate that could still reach the top
//! or hold the range's ends (`bounded_dense`); the result is bit for bit the full exact
//! scan's (tested against it in `tests/bounded_scan.rs`). The memory keeps its
//! postings and vectors per (polarity, failure type) group, in stream order, so a pool reads
//! only its own groups, front to back, and stops at the first entry from position t or later.
//! When no entry of those groups was filtered out (current query, database scope), a term's
//! document frequency is the length of its posting prefix and needs no counting.

use crate::config::{
    Bm25Params, CandidateRule, DatabaseScope, PoolLayout, Ranking, RetrievalConfig,
};
use crate::entry::{MemoryEntry, MemoryId, Polarity, StreamPos};
use crate::failure::FailureType;
use crate::memory::{normalized, posting_group, MemoryError, MemoryView, Posting, GROUPS, NO_ID};
use crate::rng::SplitMix64;
use crate::text::{bm25_tokens, query_bm25_text, query_dense_text};
use merit_core::model::{Embedder, ModelError};
use merit_core::Status;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt::Write as _;

/// What the current repair step asks the memory: the retrieval context u⁽ᵏ⁾.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetrievalQuery {
    /// The current question.
    pub question: String,
    /// The current (failing) SQL.
    pub sql: String,
    /// Its oracle status.
    pub status: Status,
    /// Its DBMS error, if any.
    pub error: Option<String>,
    /// The classifier's type τ⁽ᵏ⁻¹⁾ of the current attempt.
    pub failure_type: FailureType,
    /// The current database (for database-scope ablations).
    pub db_id: String,
    /// Repair step k the retrieval is for (seeds the random-order ablation).
    pub step: u32,
}

/// Why a retrieval failed.
#[derive(Debug, thiserror::Error)]
pub enum RetrievalError {
    /// The query could not be embedded.
    #[error("the embedder failed on the retrieval query: {0}")]
    Embedding(#[from] ModelError),
    /// The query vector is unusable.
    #[error("bad query vector: {0}")]
    Vector(String),
    /// The configuration is invalid.
    #[error("invalid retrieval configuration: {0}")]
    Config(String),
}

/// Which pool a candidate was ranked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolKind {
    /// Positive entries.
    Positive,
    /// Negative entries.
    Negative,
    /// Both polarities together (Dynamic RAG).
    Unified,
}

impl PoolKind {
    fn name(self) -> &'static str {
        match self {
            PoolKind::Positive => "positive",
            PoolKind::Negative => "negative",
            PoolKind::Unified => "unified",
        }
    }
}

/// Every number behind one candidate's rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CandidateScore {
    /// The entry.
    pub id: MemoryId,
    /// Its polarity.
    pub polarity: Polarity,
    /// Its failure type.
    pub failure_type: FailureType,
    /// Whether its type equals the query's predicted type.
    pub type_match: bool,
    /// Raw cosine similarity; `None` when the dense channel is off.
    pub dense: Option<f64>,
    /// Min–max normalised cosine within the candidate set.
    pub dense_normalized: Option<f64>,
    /// Raw BM25 score; `None` when the lexical channel is off.
    pub bm25: Option<f64>,
    /// Min–max normalised BM25 within the candidate set.
    pub bm25_normalized: Option<f64>,
    /// Type-match bonus added (reliability-aware variant), else 0.
    pub bonus: f64,
    /// The final ranking score (0 for random ordering).
    pub score: f64,
    /// 1-based rank within its pool.
    pub rank: usize,
    /// Whether the entry is among the retrieved ones.
    pub selected: bool,
}

/// A retrieved memory: the entry and why it was chosen.
#[derive(Debug, Clone)]
pub struct Precedent<'m> {
    /// The entry.
    pub entry: &'m MemoryEntry,
    /// Its scores.
    pub score: CandidateScore,
}

/// The result of one retrieval: pools in order (positive, negative; or unified), each by rank.
#[derive(Debug, Clone, Default)]
pub struct Retrieval<'m> {
    /// The retrieved precedents.
    pub precedents: Vec<Precedent<'m>>,
}

impl<'m> Retrieval<'m> {
    /// Precedents with positive polarity, best first.
    pub fn positives(&self) -> impl Iterator<Item = &Precedent<'m>> {
        self.precedents
            .iter()
            .filter(|p| p.entry.polarity == Polarity::Positive)
    }

    /// Precedents with negative polarity, best first.
    pub fn negatives(&self) -> impl Iterator<Item = &Precedent<'m>> {
        self.precedents
            .iter()
            .filter(|p| p.entry.polarity == Polarity::Negative)
    }

    /// The ids, in order.
    pub fn ids(&self) -> Vec<MemoryId> {
        self.precedents.iter().map(|p| p.entry.id).collect()
    }
}

/// One pool of an explanation: sizes, the rule applied, and every candidate ranked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolExplanation {
    /// Which pool.
    pub pool: PoolKind,
    /// How many entries it contributes at most.
    pub quota: usize,
    /// |L|: legal entries of the pool.
    pub legal: usize,
    /// |T|: legal entries of the query's type.
    pub typed: usize,
    /// Whether C = T (otherwise C = L).
    pub type_filtered: bool,
    /// Whether same-type candidates received the soft bonus.
    pub bonus_active: bool,
    /// BM25 corpus size N = |C|.
    pub bm25_documents: usize,
    /// BM25 average document length over C (0 when C is empty).
    pub bm25_average_length: f64,
    /// Every candidate in rank order.
    pub candidates: Vec<CandidateScore>,
}

/// Why each memory was (or was not) retrieved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// The view's stream position.
    pub position: StreamPos,
    /// The policy name.
    pub config: String,
    /// The query's predicted failure type.
    pub failure_type: FailureType,
    /// The dense query text.
    pub dense_query: String,
    /// The BM25 query text.
    pub bm25_query: String,
    /// The pools in order.
    pub pools: Vec<PoolExplanation>,
}

impl Explanation {
    /// A plain-text table per pool.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let position = if self.position == StreamPos::END {
            "after the end of the stream".to_string()
        } else {
            format!("at stream position {}", self.position)
        };
        let _ = writeln!(
            out,
            "retrieval {position} with policy {}; predicted type {}",
            self.config, self.failure_type
        );
        for pool in &self.pools {
            let _ = writeln!(
                out,
                "\n{} pool: |L| = {}, |T| = {}, candidate set = {}, quota = {}{}; BM25 N = {}, avgdl = {:.3}",
                pool.pool.name(),
                pool.legal,
                pool.typed,
                if pool.type_filtered { "T (same type)" } else { "L (whole legal pool)" },
                pool.quota,
                if pool.bonus_active { ", type bonus on" } else { "" },
                pool.bm25_documents,
                pool.bm25_average_length,
            );
            let _ = writeln!(
                out,
                "{:>4}  {:<8} {:<3} {:<16} {:>5} {:>9} {:>7} {:>9} {:>7} {:>6} {:>8}",
                "rank",
                "id",
                "sel",
                "type",
                "match",
                "dense",
                "d_norm",
                "bm25",
                "b_norm",
                "bonus",
                "score"
            );
            for c in &pool.candidates {
                let number = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
                let _ = writeln!(
                    out,
                    "{:>4}  {:<8} {:<3} {:<16} {:>5} {:>9} {:>7} {:>9} {:>7} {:>6.3} {:>8.4}",
                    c.rank,
                    c.id.to_string(),
                    if c.selected { "*" } else { "" },
                    c.failure_type.as_str(),
                    if c.type_match { "yes" } else { "no" },
                    number(c.dense),
                    number(c.dense_normalized),
                    number(c.bm25),
                    number(c.bm25_normalized),
                    c.bonus,
                    c.score,
                );
            }
        }
        out
    }
}

impl<'m> MemoryView<'m> {
    /// Retrieves precedents for `query`, embedding the dense query text with `embedder` when
    /// the policy uses the dense channel.
    pub fn retrieve(
        &self,
        query: &RetrievalQuery,
        config: &RetrievalConfig,
        embedder: &dyn Embedder,
    ) -> Result<Retrieval<'m>, RetrievalError> {
        let vector = self.query_vector(query, config, embedder)?;
        self.retrieve_with_vector(query, vector.as_deref(), config)
    }

    /// Like [`MemoryView::retrieve`] with a precomputed query vector (`None` is allowed when
    /// the policy does not use the dense channel).
    pub fn retrieve_with_vector(
        &self,
        query: &RetrievalQuery,
        query_vector: Option<&[f32]>,
        config: &RetrievalConfig,
    ) -> Result<Retrieval<'m>, RetrievalError> {
        self.retrieve_ranked(query, query_vector, config, Scan::Bounded)
    }

    /// Like [`MemoryView::retrieve_with_vector`] with the exact cosine computed for every
    /// candidate instead of the bounded scan (`bounded_dense` in this module). The result is
    /// the same; this is the reference that scan is benchmarked and tested against.
    pub fn retrieve_with_vector_full_scan(
        &self,
        query: &RetrievalQuery,
        query_vector: Option<&[f32]>,
        config: &RetrievalConfig,
    ) -> Result<Retrieval<'m>, RetrievalError> {
        self.retrieve_ranked(query, query_vector, config, Scan::Full)
    }

    fn retrieve_ranked(
        &self,
        query: &RetrievalQuery,
        query_vector: Option<&[f32]>,
        config: &RetrievalConfig,
        scan: Scan,
    ) -> Result<Retrieval<'m>, RetrievalError> {
        let pools = self.rank(query, query_vector, config, scan, false)?;
        let memory = self.memory;
        let precedents = pools
            .into_iter()
            .flat_map(|pool| pool.candidates)
            .filter(|c| c.selected)
            .filter_map(|score| {
                let index = memory
                    .entries
                    .binary_search_by_key(&score.id, |e| e.id)
                    .ok()?;
                Some(Precedent {
                    entry: &memory.entries[index],
                    score,
                })
            })
            .collect();
        Ok(Retrieval { precedents })
    }

    /// Ranks every candidate of every pool and reports all the numbers.
    pub fn explain(
        &self,
        query: &RetrievalQuery,
        config: &RetrievalConfig,
        embedder: &dyn Embedder,
    ) -> Result<Explanation, RetrievalError> {
        let vector = self.query_vector(query, config, embedder)?;
        self.explain_with_vector(query, vector.as_deref(), config)
    }

    /// Like [`MemoryView::explain`] with a precomputed query vector.
    pub fn explain_with_vector(
        &self,
        query: &RetrievalQuery,
        query_vector: Option<&[f32]>,
        config: &RetrievalConfig,
    ) -> Result<Explanation, RetrievalError> {
        let pools = self.rank(query, query_vector, config, Scan::Full, true)?;
        Ok(Explanation {
            position: self.position(),
            config: config.name.clone(),
            failure_type: query.failure_type,
            dense_query: query_dense_text(query),
            bm25_query: query_bm25_text(query),
            pools,
        })
    }

    fn query_vector(
        &self,
        query: &RetrievalQuery,
        config: &RetrievalConfig,
        embedder: &dyn Embedder,
    ) -> Result<Option<Vec<f32>>, RetrievalError> {
        if !config.uses_dense() {
            return Ok(None);
        }
        let mut vectors = embedder.embed(&[query_dense_text(query)])?;
        let vector = vectors
            .pop()
            .ok_or_else(|| RetrievalError::Vector("the embedder returned no vector".into()))?;
        Ok(Some(vector))
    }

    fn rank(
        &self,
        query: &RetrievalQuery,
        query_vector: Option<&[f32]>,
        config: &RetrievalConfig,
        scan: Scan,
        explain_all: bool,
    ) -> Result<Vec<PoolExplanation>, RetrievalError> {
        config.validate().map_err(RetrievalError::Config)?;
        let query_vector = match (config.uses_dense(), query_vector) {
            (false, _) => None,
            (true, None) => {
                return Err(RetrievalError::Vector(
                    "the policy uses the dense channel but no query vector was given".into(),
                ))
            }
            (true, Some(vector)) => Some(
                normalized(vector.to_vec(), self.memory.dimension()).map_err(|e| match e {
                    MemoryError::Dimension { expected, got } => {
                        RetrievalError::Vector(format!("expected {expected} dimensions, got {got}"))
                    }
                    other => RetrievalError::Vector(other.to_string()),
                })?,
            ),
        };
        let query_terms = unique_terms(&query_bm25_text(query));
        let pools: Vec<(PoolKind, Option<Polarity>, usize)> = match config.pools {
            PoolLayout::ByPolarity { positive, negative } => vec![
                (PoolKind::Positive, Some(Polarity::Positive), positive),
                (PoolKind::Negative, Some(Polarity::Negative), negative),
            ],
            PoolLayout::Unified { top } => vec![(PoolKind::Unified, None, top)],
        };
        let context = RankContext {
            view: self,
            query,
            query_vector: query_vector.as_deref(),
            query_terms: &query_terms,
            config,
            current_db: self.memory.database_id(&query.db_id),
            scan,
        };
        let mut out = Vec::new();
        for (number, (kind, polarity, quota)) in pools.into_iter().enumerate() {
            if quota == 0 {
                continue;
            }
            out.push(context.rank_pool(number as u64, kind, polarity, quota, explain_all));
        }
        Ok(out)
    }
}

/// Distinct BM25 terms of the query, in order of first occurrence (the summation order).
pub fn unique_terms(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    bm25_tokens(text)
        .into_iter()
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

struct RankContext<'a, 'm> {
    view: &'a MemoryView<'m>,
    query: &'a RetrievalQuery,
    query_vector: Option<&'a [f32]>,
    query_terms: &'a [String],
    config: &'a RetrievalConfig,
    current_db: u32,
    scan: Scan,
}

/// How the dense channel of a pool is scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// [`bounded_dense`] where it applies (a pool that keeps only its top).
    Bounded,
    /// The exact cosine of every candidate.
    Full,
}

impl RankContext<'_, '_> {
    fn rank_pool(
        &self,
        pool_number: u64,
        kind: PoolKind,
        polarity: Option<Polarity>,
        quota: usize,
        explain_all: bool,
    ) -> PoolExplanation {
        let memory = self.view.memory;
        let wanted_type = self.query.failure_type;
        let mut legal: Vec<u32> = Vec::new();
        let mut typed: Vec<u32> = Vec::new();
        let cutoff = self.view.cutoff();
        // Group by group (polarity, then type), each in storage order: candidates come out
        // in the order their vectors are stored.
        for side in Polarity::ALL {
            if polarity.is_some_and(|wanted| wanted != side) {
                continue;
            }
            for kind in FailureType::ALL {
                let members = &memory.group_members[usize::from(posting_group(side, kind))];
                let end = members.partition_point(|&i| (i as usize) < cutoff);
                for &index in &members[..end] {
                    let index = index as usize;
                    if !self.view.is_legal_index(index) {
                        continue;
                    }
                    let db = memory.source_db[index];
                    let in_scope = match self.config.scope {
                        DatabaseScope::Any => true,
                        DatabaseScope::SameDatabase => db == self.current_db && db != NO_ID,
                        DatabaseScope::CrossDatabase => db != self.current_db,
                    };
                    if !in_scope {
                        continue;
                    }
                    legal.push(index as u32);
                    if kind == wanted_type {
                        typed.push(index as u32);
                    }
                }
            }
        }
        let (use_typed, bonus) = match &self.config.candidates {
            CandidateRule::TypeFilter { min_typed } => (typed.len() >= *min_typed, 0.0),
            CandidateRule::ReliabilityAware {
                high_reliability,
                min_typed,
                bonus,
            } => {
                if high_reliability.contains(&wanted_type) {
                    (typed.len() >= *min_typed, 0.0)
                } else {
                    (false, *bonus)
                }
            }
            CandidateRule::AllLegal => (false, 0.0),
        };
        let (legal_count, typed_count) = (legal.len(), typed.len());
        let candidates = if use_typed { typed } else { legal };
        let mut pool = PoolExplanation {
            pool: kind,
            quota,
            legal: legal_count,
            typed: typed_count,
            type_filtered: use_typed,
            bonus_active: bonus != 0.0,
            bm25_documents: candidates.len(),
            bm25_average_length: 0.0,
            candidates: Vec::new(),
        };
        if candidates.is_empty() {
            return pool;
        }
        match self.config.ranking {
            Ranking::Random { seed } => {
                let mut order = candidates;
                order.sort_unstable();
                let mut rng = SplitMix64::new(
                    seed ^ SplitMix64::mix(self.view.position().0)
                        ^ SplitMix64::mix(u64::from(self.query.step).wrapping_add(1 << 32))
                        ^ SplitMix64::mix(pool_number.wrapping_add(1 << 48)),
                );
                // Fisher–Yates over candidates in id order, so the order depends only on the
                // seed and the candidate set.
                for i in (1..order.len()).rev() {
                    let j = (rng.next() % (i as u64 + 1)) as usize;
                    order.swap(i, j);
                }
                let shown = if explain_all {
                    order.len()
                } else {
                    quota.min(order.len())
                };
                pool.candidates = order[..shown]
                    .iter()
                    .enumerate()
                    .map(|(rank, &index)| {
                        let index = index as usize;
                        CandidateScore {
                            id: memory.entries[index].id,
                            polarity: memory.polarity[index],
                            failure_type: memory.failure_type[index],
                            type_match: memory.failure_type[index] == wanted_type,
                            dense: None,
                            dense_normalized: None,
                            bm25: None,
                            bm25_normalized: None,
                            bonus: 0.0,
                            score: 0.0,
                            rank: rank + 1,
                            selected: rank < quota,
                        }
                    })
                    .collect();
            }
            Ranking::Hybrid {
                dense_weight,
                bm25_weight,
            } => {
                let groups: Vec<u8> = Polarity::ALL
                    .into_iter()
                    .filter(|p| polarity.is_none_or(|wanted| wanted == *p))
                    .flat_map(|p| {
                        FailureType::ALL
                            .into_iter()
                            .filter(move |t| !use_typed || *t == wanted_type)
                            .map(move |t| posting_group(p, t))
                    })
                    .collect();
                let lexical =
                    (bm25_weight != 0.0).then(|| self.bm25_scores(&candidates, &groups, cutoff));
                if let Some((_, average)) = &lexical {
                    pool.bm25_average_length = *average;
                }
                let lexical = lexical.map(|(scores, _)| scores);
                let lexical_norm = lexical.as_deref().map(min_max);
                let type_match: Vec<bool> = candidates
                    .iter()
                    .map(|&i| memory.failure_type[i as usize] == wanted_type)
                    .collect();
                let bonus_of = |j: usize| if type_match[j] { bonus } else { 0.0 };
                // The combined score of candidate j with normalised cosine `d`: one expression
                // for the exact scores and for the bounds of the bounded scan.
                let combine = |d: f64, j: usize| {
                    let b = lexical_norm.as_ref().map_or(0.0, |v| v[j]);
                    dense_weight * d + bm25_weight * b + bonus_of(j)
                };
                // Which candidates are scored in full (`ranked_set`, positions in
                // `candidates`), their exact cosines, and the cosine range of the whole set.
                let query_vector = self.query_vector.filter(|_| dense_weight != 0.0);
                let (ranked_set, dense, dense_range) = match query_vector {
                    None => ((0..candidates.len()).collect::<Vec<usize>>(), None, None),
                    Some(q) => {
                        let bounded = (self.scan == Scan::Bounded
                            && !explain_all
                            && quota < candidates.len())
                        .then(|| {
                            bounded_dense(memory, q, &candidates, dense_weight, quota, &combine)
                        })
                        .flatten();
                        match bounded {
                            Some(scan) => (scan.survivors, Some(scan.dense), Some(scan.range)),
                            None => {
                                let dense = dense_scores(memory, q, &candidates);
                                let range = min_max_range(&dense);
                                ((0..candidates.len()).collect(), Some(dense), Some(range))
                            }
                        }
                    }
                };
                let dense_norm: Option<Vec<f64>> =
                    dense.as_ref().zip(dense_range).map(|(values, (min, max))| {
                        values.iter().map(|&v| normalize(v, min, max)).collect()
                    });
                let score: Vec<f64> = ranked_set
                    .iter()
                    .enumerate()
                    .map(|(r, &j)| combine(dense_norm.as_ref().map_or(0.0, |v| v[r]), j))
                    .collect();
                let keys: Vec<RankKey> = ranked_set
                    .iter()
                    .enumerate()
                    .map(|(r, &j)| RankKey {
                        score: score[r],
                        dense: dense.as_ref().map_or(0.0, |v| v[r]),
                        bm25: lexical.as_ref().map_or(0.0, |v| v[j]),
                        type_match: type_match[j],
                        id: memory.entries[candidates[j] as usize].id,
                    })
                    .collect();
                let type_tiebreak = self.config.type_tiebreak;
                let order = |a: &usize, b: &usize| rank_order(&keys[*a], &keys[*b], type_tiebreak);
                let mut ranked: Vec<usize> = (0..ranked_set.len()).collect();
                if explain_all || quota >= ranked.len() {
                    ranked.sort_by(order);
                } else {
                    // Only the top `quota` are needed: partition around the quota-th, then
                    // sort that prefix.
                    ranked.select_nth_unstable_by(quota - 1, order);
                    ranked.truncate(quota);
                    ranked.sort_by(order);
                }
                pool.candidates = ranked
                    .iter()
                    .enumerate()
                    .map(|(rank, &r)| {
                        let j = ranked_set[r];
                        let index = candidates[j] as usize;
                        CandidateScore {
                            id: memory.entries[index].id,
                            polarity: memory.polarity[index],
                            failure_type: memory.failure_type[index],
                            type_match: type_match[j],
                            dense: dense.as_ref().map(|v| v[r]),
                            dense_normalized: dense_norm.as_ref().map(|v| v[r]),
                            bm25: lexical.as_ref().map(|v| v[j]),
                            bm25_normalized: lexical_norm.as_ref().map(|v| v[j]),
                            bonus: bonus_of(j),
                            score: score[r],
                            rank: rank + 1,
                            selected: rank < quota,
                        }
                    })
                    .collect();
            }
        }
        pool
    }

    /// BM25 of the query against every candidate, with the candidate set as the corpus.
    /// Returns the scores (in candidate order) and the average document length.
    fn bm25_scores(&self, candidates: &[u32], groups: &[u8], cutoff: usize) -> (Vec<f64>, f64) {
        let memory = self.view.memory;
        let params = self.config.bm25;
        let n = candidates.len();
        let total_length: u64 = candidates
            .iter()
            .map(|&i| u64::from(memory.doc_len[i as usize]))
            .sum();
        let average = total_length as f64 / n as f64;
        // The length part of g(w, m) depends only on the document: computed once per
        // candidate, and so is the whole g for tf = 1, by far the most common count.
        let length_norm: Vec<f64> = candidates
            .iter()
            .map(|&i| bm25_length_norm(f64::from(memory.doc_len[i as usize]), average, params))
            .collect();
        let g_single: Vec<f64> = length_norm
            .iter()
            .map(|&norm| bm25_tf_weight(1.0, norm, params))
            .collect();
        // Candidates come group by group, each group's members in storage order. When no
        // member of the searched groups below the cutoff was filtered out (current query,
        // database scope), the candidates are exactly those members: a posting's candidate
        // number is its group's base plus its position in the group, and a term's document
        // frequency is the length of its posting prefixes.
        let mut bases = [usize::MAX; GROUPS];
        let mut members_below_cutoff = 0;
        for &g in groups {
            bases[usize::from(g)] = members_below_cutoff;
            members_below_cutoff +=
                memory.group_members[usize::from(g)].partition_point(|&i| (i as usize) < cutoff);
        }
        let complete = members_below_cutoff == n;
        // Otherwise a table from storage index to candidate number tells who is in.
        let slot = if complete {
            Vec::new()
        } else {
            let mut slot = vec![u32::MAX; memory.entries.len()];
            for (j, &i) in candidates.iter().enumerate() {
                slot[i as usize] = j as u32;
            }
            slot
        };
        let mut scores = vec![0.0f64; n];
        let mut lists: Vec<(usize, &[Posting])> = Vec::with_capacity(groups.len());
        for term in self.query_terms {
            let Some(&term_id) = memory.terms.get(term) else {
                continue;
            };
            // Only the posting groups that can hold candidates, and only up to the view's
            // cutoff (postings are in storage order, which is stream order).
            lists.clear();
            lists.extend(
                memory.postings[term_id as usize]
                    .iter()
                    .filter(|g| groups.contains(&g.group))
                    .map(|g| {
                        let end = g.list.partition_point(|p| (p.doc as usize) < cutoff);
                        (bases[usize::from(g.group)], &g.list[..end])
                    }),
            );
            let df = if complete {
                lists.iter().map(|(_, list)| list.len()).sum::<usize>()
            } else {
                lists
                    .iter()
                    .flat_map(|(_, list)| list.iter())
                    .filter(|p| slot[p.doc as usize] != u32::MAX)
                    .count()
            };
            if df == 0 {
                continue;
            }
            let idf = bm25_idf(n, df);
            let weight = |j: usize, tf: u32| {
                if tf == 1 {
                    g_single[j]
                } else {
                    bm25_tf_weight(f64::from(tf), length_norm[j], params)
                }
            };
            for &(base, list) in &lists {
                if complete {
                    for posting in list {
                        let j = base + posting.member as usize;
                        scores[j] += idf * weight(j, posting.tf);
                    }
                } else {
                    for posting in list {
                        let j = slot[posting.doc as usize];
                        if j != u32::MAX {
                            let j = j as usize;
                            scores[j] += idf * weight(j, posting.tf);
                        }
                    }
                }
            }
        }
        (scores, average)
    }
}

/// BM25's inverse document frequency of a term found in `df` of `n` documents:
/// `ln(1 + (N − df + 0.5)/(df + 0.5))`.
pub fn bm25_idf(n: usize, df: usize) -> f64 {
    (1.0 + (n as f64 - df as f64 + 0.5) / (df as f64 + 0.5)).ln()
}

/// The length part of BM25's saturation for a document of `length` tokens in a corpus whose
/// average length is `average`: `k1·(1 − b + b·length/avgdl)`.
pub fn bm25_length_norm(length: f64, average: f64, params: Bm25Params) -> f64 {
    params.k1 * (1.0 - params.b + params.b * length / average)
}

/// The saturated term frequency `tf·(k1 + 1)/(tf + length_norm)` (see [`bm25_length_norm`]).
pub fn bm25_tf_weight(tf: f64, length_norm: f64, params: Bm25Params) -> f64 {
    tf * (params.k1 + 1.0) / (tf + length_norm)
}

/// BM25 of one query against every document of a small corpus given as token lists, with that
/// corpus as the collection (N = number of documents, df and the average length counted in
/// it; each distinct query term once, as in [`MemoryView::retrieve`]). Returns the scores in
/// document order and the average document length (0 for an empty corpus). This is the same
/// formula as the memory's posting-list scorer, for callers that rank their own candidates
/// (the interact memory's selectors).
pub fn bm25_corpus_scores(
    query_terms: &[String],
    documents: &[Vec<String>],
    params: Bm25Params,
) -> (Vec<f64>, f64) {
    let n = documents.len();
    if n == 0 {
        return (Vec::new(), 0.0);
    }
    let total: usize = documents.iter().map(Vec::len).sum();
    let average = total as f64 / n as f64;
    let mut scores = vec![0.0f64; n];
    let mut seen = HashSet::new();
    for term in query_terms.iter().filter(|t| seen.insert(t.as_str())) {
        let counts: Vec<usize> = documents
            .iter()
            .map(|doc| doc.iter().filter(|t| *t == term).count())
            .collect();
        let df = counts.iter().filter(|&&c| c > 0).count();
        if df == 0 {
            continue;
        }
        let idf = bm25_idf(n, df);
        for (j, &tf) in counts.iter().enumerate() {
            if tf > 0 {
                let norm = bm25_length_norm(documents[j].len() as f64, average, params);
                scores[j] += idf * bm25_tf_weight(tf as f64, norm, params);
            }
        }
    }
    (scores, average)
}

/// What a candidate is ordered by.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RankKey {
    score: f64,
    /// Raw cosine (0 when the channel is off).
    dense: f64,
    /// Raw BM25 (0 when the channel is off).
    bm25: f64,
    type_match: bool,
    id: MemoryId,
}

/// The paper's order: score desc, then dense desc, BM25 desc, type match desc (when the
/// policy is typed), memory id asc. Ids are unique, so the order is total.
fn rank_order(a: &RankKey, b: &RankKey, type_tiebreak: bool) -> Ordering {
    b.score
        .total_cmp(&a.score)
        .then(b.dense.total_cmp(&a.dense))
        .then(b.bm25.total_cmp(&a.bm25))
        .then(if type_tiebreak {
            b.type_match.cmp(&a.type_match)
        } else {
            Ordering::Equal
        })
        .then(a.id.cmp(&b.id))
}

/// Cosine similarity of the unit query vector with every candidate's unit vector.
fn dense_scores(memory: &crate::memory::Memory, query: &[f32], candidates: &[u32]) -> Vec<f64> {
    let mut out = vec![0.0f64; candidates.len()];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            unsafe { dense_scan_avx2(memory, query, candidates, &mut out) };
            return out;
        }
    }
    dense_scan(memory, query, candidates, &mut out);
    out
}

/// The exact scan, written so the compiler vectorises it.
#[inline(always)]
fn dense_scan(memory: &crate::memory::Memory, query: &[f32], candidates: &[u32], out: &mut [f64]) {
    for (slot, &i) in out.iter_mut().zip(candidates) {
        *slot = dot(query, memory.vector(i as usize));
    }
}

/// The same scan compiled for AVX2. The arithmetic is identical lane by lane (no fused
/// multiply-add, same summation order), so results are bit-identical to [`dense_scan`];
/// only the register width changes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dense_scan_avx2(
    memory: &crate::memory::Memory,
    query: &[f32],
    candidates: &[u32],
    out: &mut [f64],
) {
    dense_scan(memory, query, candidates, out)
}

/// Lanes of the dot product: independent partial sums keep the adders busy.
const LANES: usize = 32;

/// Dot product in 32 f32 lanes, summed in f64 in a fixed order so the result is the same on
/// every run and every x86-64 machine. For unit vectors it is their cosine similarity.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    let mut lanes = [0.0f32; LANES];
    let chunks_a = a.chunks_exact(LANES);
    let chunks_b = b.chunks_exact(LANES);
    let tail: f64 = chunks_a
        .remainder()
        .iter()
        .zip(chunks_b.remainder())
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum();
    for (x, y) in chunks_a.zip(chunks_b) {
        for lane in 0..LANES {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    lanes.iter().map(|&v| f64::from(v)).sum::<f64>() + tail
}

/// Min–max normalisation; all-equal scores map to 0.
pub fn min_max(values: &[f64]) -> Vec<f64> {
    let (min, max) = min_max_range(values);
    values.iter().map(|&v| normalize(v, min, max)).collect()
}

/// The smallest and largest value (infinities for an empty slice).
fn min_max_range(values: &[f64]) -> (f64, f64) {
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// `value` min–max normalised into a range; 0 when the range is empty. Monotone in `value`
/// (each floating-point step is), which [`bounded_dense`] relies on.
fn normalize(value: f64, min: f64, max: f64) -> f64 {
    if max > min {
        (value - min) / (max - min)
    } else {
        0.0
    }
}

/// The outcome of [`bounded_dense`].
struct BoundedScan {
    /// Positions in the candidate list that can be among the pool's top, ascending.
    survivors: Vec<usize>,
    /// Their exact cosines ([`dot`]), in the same order.
    dense: Vec<f64>,
    /// The exact smallest and largest cosine over all candidates.
    range: (f64, f64),
}

/// The dense channel for a pool that keeps only its top `quota`, computed exactly where it
/// matters and approximately elsewhere, with the same result as the exact scan of every
/// candidate.
///
/// Why: the exact cosine ([`dot`]) sums its 32 lanes one after the other in f64, a chain of
/// dependent additions that costs more than the products themselves; at 10,000 entries that
/// chain was half of a retrieval. The approximation ([`dot_approx`]) sums in f32 as a tree and
/// differs from the exact value by at most [`approximation_error`]. That bound decides who is
/// computed exactly: every candidate that can hold the smallest or the largest cosine (the
/// min–max normalisation needs both), and every candidate whose best possible score reaches
/// the `quota`-th best worst possible score, which includes the whole true top (each of the
/// `quota` candidates with the highest worst-case scores scores at least that). The scores
/// are monotone in the cosine (`dense_weight > 0`, and [`normalize`] and `combine` round
/// monotonically), so bounds on cosines are bounds on scores. Ranking the survivors with
/// their exact values then gives exactly the top the full scan gives, ties included.
///
/// Returns `None` (the caller scans exactly) when the bound does not apply: a non-positive
/// weight, a non-finite approximation, or a dimension too large for the bound.
fn bounded_dense(
    memory: &crate::memory::Memory,
    query: &[f32],
    candidates: &[u32],
    dense_weight: f64,
    quota: usize,
    combine: &dyn Fn(f64, usize) -> f64,
) -> Option<BoundedScan> {
    if dense_weight.is_nan() || dense_weight <= 0.0 || quota == 0 {
        return None;
    }
    let error = approximation_error(memory.dimension())?;
    let approx = approximate_dense(memory, query, candidates);
    let (mut low, mut high) = (f64::INFINITY, f64::NEG_INFINITY);
    for &a in &approx {
        if !a.is_finite() {
            return None;
        }
        low = low.min(f64::from(a));
        high = high.max(f64::from(a));
    }
    let exact_at = |j: usize| dot(query, memory.vector(candidates[j] as usize));
    // NaN marks "not computed exactly"; exact cosines of unit vectors are finite.
    let mut exact = vec![f64::NAN; candidates.len()];
    // Only a candidate whose approximation is within twice the bound of the smallest (largest)
    // approximation can hold the smallest (largest) cosine.
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    for (j, &a) in approx.iter().enumerate() {
        let a = f64::from(a);
        let near_min = a <= low + 2.0 * error;
        let near_max = a >= high - 2.0 * error;
        if near_min || near_max {
            let value = exact_at(j);
            exact[j] = value;
            if near_min {
                min = min.min(value);
            }
            if near_max {
                max = max.max(value);
            }
        }
    }
    let bound = |j: usize, offset: f64| {
        let value = if exact[j].is_nan() {
            f64::from(approx[j]) + offset
        } else {
            exact[j]
        };
        combine(normalize(value, min, max), j)
    };
    let mut worst: Vec<f64> = (0..candidates.len()).map(|j| bound(j, -error)).collect();
    let threshold = *worst
        .select_nth_unstable_by(quota - 1, |a, b| b.total_cmp(a))
        .1;
    let survivors: Vec<usize> = (0..candidates.len())
        .filter(|&j| bound(j, error) >= threshold)
        .collect();
    let dense = survivors
        .iter()
        .map(|&j| {
            if exact[j].is_nan() {
                exact_at(j)
            } else {
                exact[j]
            }
        })
        .collect();
    Some(BoundedScan {
        survivors,
        dense,
        range: (min, max),
    })
}

/// A bound on the difference between [`dot_approx`] and [`dot`] for vectors of at most unit
/// length (the memory's and the query's, see [`normalized`]); `None` past any sensible
/// dimension.
///
/// Each product passes through at most `m = dimension/32 + 40` f32 roundings in either
/// function (its multiplication, the additions of its lane, the lane tree or the f64
/// conversion, the remainder's additions), so each result is within `γ_m·Σ|xᵢyᵢ|` of the
/// true dot product, `γ_m = m·u/(1 − m·u)` with `u = 2⁻²⁴`, and `Σ|xᵢyᵢ| ≤ ‖x‖‖y‖ ≤ 1` up to
/// the normalisation's own rounding. Twice `γ_m` bounds the difference; the bound used is
/// twice that again, as margin for the f64 steps and the normalisation.
fn approximation_error(dimension: usize) -> Option<f64> {
    let roundings = (dimension / LANES + 40) as f64;
    let unit = f64::from(f32::EPSILON) / 2.0;
    let gamma = roundings * unit / (1.0 - roundings * unit);
    (roundings * unit < 0.01).then_some(4.0 * gamma)
}

/// [`dot_approx`] of the query with every candidate; with AVX2 and FMA, an explicit SIMD
/// loop instead.
fn approximate_dense(
    memory: &crate::memory::Memory,
    query: &[f32],
    candidates: &[u32],
) -> Vec<f32> {
    let mut out = vec![0.0f32; candidates.len()];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && query.len() == memory.dimension()
        {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above, and every vector
            // has the query's length.
            unsafe { approximate_scan_avx2_fma(memory, query, candidates, &mut out) };
            return out;
        }
    }
    for (slot, &i) in out.iter_mut().zip(candidates) {
        *slot = dot_approx(query, memory.vector(i as usize));
    }
    out
}

/// [`dot_approx_avx2_fma`] of the query with every candidate.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `query` must have the memory's dimension.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn approximate_scan_avx2_fma(
    memory: &crate::memory::Memory,
    query: &[f32],
    candidates: &[u32],
    out: &mut [f32],
) {
    for (slot, &i) in out.iter_mut().zip(candidates) {
        // SAFETY: the caller's guarantees; every stored vector has the memory's dimension.
        *slot = unsafe { dot_approx_avx2_fma(query, memory.vector(i as usize)) };
    }
}

/// [`dot_approx`]'s arithmetic in AVX2 registers, with fused multiply-adds (fewer roundings,
/// so the same bound holds). Written with intrinsics because the compiler does not vectorise
/// the lane loop well: it kept [`dot_approx`]'s 32 lanes as two-float pieces with stack
/// spills, and the scan stayed half of a 10,000-entry retrieval. The result only chooses
/// which candidates are computed exactly, so it need not match any other code bit for bit.
///
/// # Safety
/// The CPU must support AVX2 and FMA, and `a` and `b` must have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn dot_approx_avx2_fma(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_castps256_ps128, _mm256_extractf128_ps, _mm256_fmadd_ps,
        _mm256_loadu_ps, _mm256_setzero_ps, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_movehl_ps,
        _mm_shuffle_ps,
    };
    debug_assert_eq!(a.len(), b.len());
    let length = a.len().min(b.len());
    let body = length - length % LANES;
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    // SAFETY: `k + 31 < body <= length`, within both slices, so every load reads inside
    // them; the rest are register operations the CPU supports.
    let mut total = unsafe {
        let mut sums = [_mm256_setzero_ps(); 4];
        let mut k = 0;
        while k < body {
            for (part, sum) in sums.iter_mut().enumerate() {
                let at = k + 8 * part;
                *sum = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(at)),
                    _mm256_loadu_ps(pb.add(at)),
                    *sum,
                );
            }
            k += LANES;
        }
        let eight = _mm256_add_ps(
            _mm256_add_ps(sums[0], sums[1]),
            _mm256_add_ps(sums[2], sums[3]),
        );
        let four = _mm_add_ps(
            _mm256_castps256_ps128(eight),
            _mm256_extractf128_ps(eight, 1),
        );
        let two = _mm_add_ps(four, _mm_movehl_ps(four, four));
        _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)))
    };
    for k in body..length {
        total += a[k] * b[k];
    }
    total
}

/// The dot product in f32 throughout: the 32 lanes of [`dot`], summed as a tree of
/// independent additions instead of a chain. Within [`approximation_error`] of [`dot`].
#[inline(always)]
fn dot_approx(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let chunks_a = a.chunks_exact(LANES);
    let chunks_b = b.chunks_exact(LANES);
    let mut tail = 0.0f32;
    for (&x, &y) in chunks_a.remainder().iter().zip(chunks_b.remainder()) {
        tail += x * y;
    }
    for (x, y) in chunks_a.zip(chunks_b) {
        for lane in 0..LANES {
            lanes[lane] += x[lane] * y[lane];
        }
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for lane in 0..width {
            lanes[lane] += lanes[lane + width];
        }
    }
    lanes[0] + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_fall_to_dense_then_bm25_then_type_then_id() {
        let key = |score, dense, bm25, type_match, id| RankKey {
            score,
            dense,
            bm25,
            type_match,
            id: MemoryId(id),
        };
        let mut keys = [
            key(0.5, 0.1, 9.0, true, 0),
            key(0.5, 0.2, 0.0, false, 7),
            key(0.5, 0.1, 9.0, false, 1),
            key(0.5, 0.1, 8.0, true, 2),
            key(0.9, 0.0, 0.0, false, 9),
            key(0.5, 0.1, 9.0, false, 3),
        ];
        keys.sort_by(|a, b| rank_order(a, b, true));
        let ids: Vec<u64> = keys.iter().map(|k| k.id.0).collect();
        assert_eq!(ids, vec![9, 7, 0, 1, 3, 2]);
        // Untyped policies (Dynamic RAG) skip the type-match step.
        keys.sort_by(|a, b| rank_order(a, b, false));
        let ids: Vec<u64> = keys.iter().map(|k| k.id.0).collect();
        assert_eq!(ids, vec![9, 7, 0, 1, 3, 2]);
        let mut untyped = [key(0.5, 0.1, 9.0, false, 1), key(0.5, 0.1, 9.0, true, 4)];
        untyped.sort_by(|a, b| rank_order(a, b, false));
        assert_eq!(untyped[0].id, MemoryId(1));
        untyped.sort_by(|a, b| rank_order(a, b, true));
        assert_eq!(untyped[0].id, MemoryId(4));
    }

    #[test]
    fn corpus_bm25_matches_a_hand_computation() {
        let doc = |s: &str| s.split(' ').map(str::to_string).collect::<Vec<_>>();
        let documents = vec![doc("a b a"), doc("b c"), doc("c")];
        let query = vec!["a".to_string(), "c".to_string(), "a".to_string()];
        let params = Bm25Params::default();
        let (scores, average) = bm25_corpus_scores(&query, &documents, params);
        assert!((average - 2.0).abs() < 1e-15);
        let g = |tf: f64, len: f64| tf * 2.2 / (tf + 1.2 * (1.0 - 0.75 + 0.75 * len / 2.0));
        let idf_a = (1.0f64 + 2.5 / 1.5).ln();
        let idf_c = (1.0f64 + 1.5 / 2.5).ln();
        // "a" counts once although the query repeats it.
        assert!((scores[0] - idf_a * g(2.0, 3.0)).abs() < 1e-12);
        assert!((scores[1] - idf_c * g(1.0, 2.0)).abs() < 1e-12);
        assert!((scores[2] - idf_c * g(1.0, 1.0)).abs() < 1e-12);
        assert_eq!(bm25_corpus_scores(&query, &[], params), (Vec::new(), 0.0));
    }

    #[test]
    fn min_max_maps_equal_scores_to_zero() {
        assert_eq!(min_max(&[2.0, 2.0]), vec![0.0, 0.0]);
        assert_eq!(min_max(&[1.0, 3.0, 2.0]), vec![0.0, 1.0, 0.5]);
    }

    #[test]
    fn approximate_dot_products_stay_within_the_bound() {
        let mut rng = SplitMix64::new(11);
        let mut unit = |dimension: usize, scale: f64| -> Vec<f32> {
            let raw: Vec<f64> = (0..dimension)
                .map(|_| ((rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale)
                .collect();
            let norm = raw.iter().map(|v| v * v).sum::<f64>().sqrt();
            raw.iter().map(|v| (v / norm) as f32).collect()
        };
        let mut largest_ratio = 0.0f64;
        for dimension in [1, 7, 31, 32, 33, 100, 384, 768, 1536] {
            let bound = approximation_error(dimension).expect("a bound for this dimension");
            assert!(bound < 1e-4, "bound {bound} at {dimension} dimensions");
            for case in 0..200 {
                let a = unit(dimension, 1.0);
                // Every fourth pair nearly parallel: the largest products, the largest error.
                let b = if case % 4 == 0 {
                    a.clone()
                } else {
                    unit(dimension, 1.0)
                };
                let exact = dot(&a, &b);
                let mut approximations = vec![f64::from(dot_approx(&a, &b))];
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: features checked just above; equal lengths.
                    approximations.push(f64::from(unsafe { dot_approx_avx2_fma(&a, &b) }));
                }
                for approx in approximations {
                    let difference = (approx - exact).abs();
                    assert!(difference <= bound, "{difference} > {bound} at {dimension}");
                    largest_ratio = largest_ratio.max(difference / bound);
                }
            }
        }
        // The bound is loose by design, but not so loose that it is meaningless.
        assert!(
            largest_ratio > 1e-4,
            "largest error / bound = {largest_ratio}"
        );
    }

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..75).map(|i| i as f32 * 0.25).collect();
        let b: Vec<f32> = (0..75).map(|i| 1.0 - i as f32 * 0.125).collect();
        let plain: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        assert!((dot(&a, &b) - plain).abs() < 1e-9);
    }
}
