//! Two-stage retrieval (paper 003, §5.1–5.2 and appendix C: "the embedding retriever returns
//! 10 candidates, and the selector injects at most one memory").
//!
//! 1. **Candidates.** Every memory visible to the view (earlier stream positions, other task
//!    instances) is scored by the cosine of its unit key vector with the unit query vector
//!    (`merit_memory::retrieve::dot`); the best [`RetrievalConfig::candidates`] are kept,
//!    ordered by cosine descending and, on equal cosine, by insertion order (older first).
//! 2. **Features.** BM25 of the query's lexical text against each candidate's, with the
//!    candidate set as the corpus (`merit_memory::retrieve::bm25_corpus_scores`, the repair
//!    retrieval's formula, k1 = 1.2, b = 0.75), and both channels min–max normalised within
//!    the candidates (`merit_memory::retrieve::min_max`).
//! 3. **Selection.** The [`Selector`] sees the query, the candidates' summaries, embeddings
//!    and features, and returns at most [`RetrievalConfig::inject`] of them (or none). Its
//!    answer is cleaned before use: indices out of range and repeats are dropped, and only
//!    the first `inject` are kept, so no selector can inject more than allowed.

use super::select::{SelectError, Selection, SelectionInput, Selector, SelectorCandidate};
use super::store::{BankView, MemoryRecord};
use super::Polarity;
pub use crate::agent::advice::CandidateFeatures;
use merit_core::model::{Embedder, ModelError};
use merit_memory::config::Bm25Params;
use merit_memory::memory::normalized;
use merit_memory::retrieve::{bm25_corpus_scores, dot, min_max, unique_terms};
use merit_memory::text::bm25_tokens;
use serde::{Deserialize, Serialize};

/// The most memories one retrieval may inject (the paper's retrieval-size study: 1–5).
pub const MAX_INJECT: usize = 5;

/// What a retrieval is asked with: the request (episode level) or the state (turn level).
pub trait MemoryQuery {
    /// The text embedded and compared with the memories' keys.
    fn key_text(&self) -> String;
    /// The text BM25 compares with the memories' lexical texts.
    fn lexical_text(&self) -> String;
    /// The text a prompted selector is shown as the current request or state.
    fn prompt_text(&self) -> String;
}

/// Sizes of the two stages.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetrievalConfig {
    /// Candidates kept by the embedding stage (the paper's 10).
    pub candidates: usize,
    /// Memories the selector may inject at most (the paper's 1; 1–5 allowed).
    pub inject: usize,
    /// BM25 parameters of the lexical feature.
    pub bm25: Bm25Params,
}

impl Default for RetrievalConfig {
    fn default() -> RetrievalConfig {
        RetrievalConfig {
            candidates: 10,
            inject: 1,
            bm25: Bm25Params::default(),
        }
    }
}

impl RetrievalConfig {
    /// Checks the sizes.
    pub fn validate(&self) -> Result<(), RetrievalError> {
        if self.candidates == 0 {
            return Err(RetrievalError::Config(
                "the embedding stage must keep at least one candidate".into(),
            ));
        }
        if !(1..=MAX_INJECT).contains(&self.inject) {
            return Err(RetrievalError::Config(format!(
                "a retrieval injects 1 to {MAX_INJECT} memories, not {}",
                self.inject
            )));
        }
        Ok(())
    }
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
    /// The selector failed (a model backend error).
    #[error(transparent)]
    Select(#[from] SelectError),
}

/// One candidate of a retrieval.
#[derive(Debug, Clone)]
pub struct Candidate<'b, R> {
    /// Position of the entry in its bank.
    pub index: usize,
    /// The memory.
    pub entry: &'b R,
    /// Its unit key vector.
    pub embedding: &'b [f32],
    /// Its retrieval features.
    pub features: CandidateFeatures,
}

/// The result of one retrieval: the candidates, best cosine first, and the selector's choice.
#[derive(Debug, Clone)]
pub struct Retrieved<'b, R> {
    /// The embedding stage's candidates in rank order.
    pub candidates: Vec<Candidate<'b, R>>,
    /// Indices into `candidates` of the memories to inject, in the selector's order.
    pub chosen: Vec<usize>,
    /// The selector's name (empty when there was nothing to select from).
    pub selector: String,
    /// The selector's remark, e.g. why a model's reply was unusable.
    pub note: Option<String>,
}

impl<'b, R> Retrieved<'b, R> {
    /// The memories to inject, in the selector's order.
    pub fn injected(&self) -> impl Iterator<Item = &Candidate<'b, R>> {
        self.chosen.iter().filter_map(|&i| self.candidates.get(i))
    }
}

impl<'b, R: MemoryRecord> BankView<'b, R> {
    /// Stages 1 and 2: the best candidates by cosine with their features. `query_vector` is
    /// scaled to unit length first.
    pub fn candidates(
        &self,
        query: &dyn MemoryQuery,
        query_vector: &[f32],
        config: &RetrievalConfig,
    ) -> Result<Vec<Candidate<'b, R>>, RetrievalError> {
        config.validate()?;
        let bank = self.bank();
        let unit = normalized(query_vector.to_vec(), bank.dimension())
            .map_err(|e| RetrievalError::Vector(e.to_string()))?;
        let mut scored: Vec<(usize, f64)> = self
            .visible()
            .map(|i| (i, dot(&unit, bank.vector_of(i))))
            .collect();
        // Cosine descending; equal cosines keep insertion order (bank index ascending).
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(config.candidates);
        let terms = unique_terms(&query.lexical_text());
        let documents: Vec<Vec<String>> = scored
            .iter()
            .map(|&(i, _)| bm25_tokens(&bank.entries()[i].lexical_text()))
            .collect();
        let (bm25, _) = bm25_corpus_scores(&terms, &documents, config.bm25);
        let cosines: Vec<f64> = scored.iter().map(|&(_, c)| c).collect();
        let cosine_norm = min_max(&cosines);
        let bm25_norm = min_max(&bm25);
        let position = self.position();
        Ok(scored
            .iter()
            .enumerate()
            .map(|(j, &(i, cosine))| {
                let entry = &bank.entries()[i];
                Candidate {
                    index: i,
                    entry,
                    embedding: bank.vector_of(i),
                    features: CandidateFeatures {
                        rank: j + 1,
                        cosine,
                        cosine_normalized: cosine_norm[j],
                        bm25: bm25[j],
                        bm25_normalized: bm25_norm[j],
                        positive: entry.polarity() == Polarity::Positive,
                        episode_reward: entry.episode_reward(),
                        age: position.0.saturating_sub(entry.stream_pos().0),
                    },
                }
            })
            .collect())
    }
}

/// Retrieves for `query`: embeds its key text with `embedder`, then
/// [`retrieve_with_vector`]. Nothing is embedded when the view is empty.
pub fn retrieve<'b, R: MemoryRecord>(
    view: &BankView<'b, R>,
    query: &dyn MemoryQuery,
    embedder: &dyn Embedder,
    selector: &dyn Selector,
    config: &RetrievalConfig,
) -> Result<Retrieved<'b, R>, RetrievalError> {
    config.validate()?;
    if view.is_empty() {
        return Ok(empty());
    }
    let vector = embedder
        .embed(&[query.key_text()])?
        .pop()
        .ok_or_else(|| RetrievalError::Vector("the embedder returned no vector".into()))?;
    retrieve_with_vector(view, query, &vector, selector, config)
}

fn empty<'b, R>() -> Retrieved<'b, R> {
    Retrieved {
        candidates: Vec::new(),
        chosen: Vec::new(),
        selector: String::new(),
        note: None,
    }
}

/// Like [`retrieve`] with a precomputed query vector.
pub fn retrieve_with_vector<'b, R: MemoryRecord>(
    view: &BankView<'b, R>,
    query: &dyn MemoryQuery,
    query_vector: &[f32],
    selector: &dyn Selector,
    config: &RetrievalConfig,
) -> Result<Retrieved<'b, R>, RetrievalError> {
    let candidates = view.candidates(query, query_vector, config)?;
    if candidates.is_empty() {
        return Ok(empty());
    }
    let unit = normalized(query_vector.to_vec(), view.bank().dimension())
        .map_err(|e| RetrievalError::Vector(e.to_string()))?;
    let shown: Vec<SelectorCandidate<'_>> = candidates
        .iter()
        .map(|c| SelectorCandidate {
            id: c.entry.id(),
            summary: c.entry.summary(),
            embedding: c.embedding,
            features: c.features,
        })
        .collect();
    let prompt_text = query.prompt_text();
    let input = SelectionInput {
        level: R::LEVEL,
        query: &prompt_text,
        query_embedding: &unit,
        candidates: &shown,
        limit: config.inject,
    };
    let Selection { chosen, note } = selector.select(&input)?;
    let mut kept: Vec<usize> = Vec::with_capacity(config.inject);
    for index in chosen {
        if index < candidates.len() && !kept.contains(&index) && kept.len() < config.inject {
            kept.push(index);
        }
    }
    Ok(Retrieved {
        candidates,
        chosen: kept,
        selector: selector.name(),
        note,
    })
}
