//! Selectors: the second stage of retrieval, all behind one trait.
//!
//! | selector | chooses |
//! |---|---|
//! | [`Bm25Selector`] | the candidates with the highest BM25 score (ties: embedding rank); none when no candidate shares a term with the query |
//! | [`CosineSelector`] | the candidates with the highest cosine (the embedding stage's order), optionally only above a threshold |
//! | [`ModelSelector`] | what a chat model picks from numbered summaries (`memory_select_episode.txt`, `memory_select_turn.txt`) |
//! | [`super::TopicKSelector`] | greedy coverage of the query's topics, rare topics first (the TopicK baseline) |
//! | learned (PPO), `merit_learn::selector::LearnedSelector` | a small policy network over [`SelectorCandidate::embedding`], [`SelectionInput::query_embedding`] and [`CandidateFeatures::to_array`] |
//!
//! A selector answers indices into [`SelectionInput::candidates`], best first, or nothing.
//! It may answer more than [`SelectionInput::limit`] or out-of-range indices; the retrieval
//! cleans the answer, so a selector cannot inject more than allowed.
//!
//! # The prompted selector's reply
//! One line `SELECTED: 2`, `SELECTED: 1, 3` or `SELECTED: none`. The reader skips a
//! `<think>` block, ignores case, markdown emphasis, code quotes and a list marker around the
//! line, takes the first line that starts with `SELECTED:`, and accepts ids written as `2`,
//! `[2]` or `#2`, separated by commas or spaces. Repeated ids count once; ids beyond the
//! limit are dropped. No such line, an empty list, a word that is not an id, or an id outside
//! the list makes the reply malformed, and a malformed reply selects nothing.

use super::memory_version;
use super::retrieve::CandidateFeatures;
pub use crate::agent::advice::Level;
use crate::prompts::fill;
use merit_core::model::{ChatMessage, ChatModel, ChatRequest, Decoding, ModelError};
use std::fmt::Write as _;
use std::sync::Arc;

/// The prompted selector's message at the episode level.
pub const MEMORY_SELECT_EPISODE: &str = include_str!("../../prompts/memory_select_episode.txt");
/// The prompted selector's message at the turn level.
pub const MEMORY_SELECT_TURN: &str = include_str!("../../prompts/memory_select_turn.txt");

/// One candidate as a selector sees it.
#[derive(Debug, Clone)]
pub struct SelectorCandidate<'a> {
    /// The memory's id in its bank (stable across runs that rebuild the same bank).
    pub id: u64,
    /// The compact summary of the memory (what a prompted selector reads).
    pub summary: String,
    /// The memory's unit key vector.
    pub embedding: &'a [f32],
    /// Its retrieval features.
    pub features: CandidateFeatures,
}

/// What a selector decides on.
#[derive(Debug, Clone)]
pub struct SelectionInput<'a> {
    /// Episode or turn level.
    pub level: Level,
    /// The current request (episode level) or state signature (turn level).
    pub query: &'a str,
    /// The unit embedding of the query's key text.
    pub query_embedding: &'a [f32],
    /// The candidates, in embedding rank order.
    pub candidates: &'a [SelectorCandidate<'a>],
    /// How many may be chosen at most.
    pub limit: usize,
}

/// A selector's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Indices into the candidates, best first; empty for none.
    pub chosen: Vec<usize>,
    /// A remark, e.g. why a model's reply was not used.
    pub note: Option<String>,
}

/// Why a selector could not answer (a malformed model reply is not an error: it selects
/// nothing).
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The selector's model failed (transport, server, unavailable).
    #[error("the selector model failed: {0}")]
    Model(#[from] ModelError),
}

/// The second stage of retrieval.
pub trait Selector: Send + Sync {
    /// A stable name, e.g. `bm25` or `model:<model id>`.
    fn name(&self) -> String;

    /// Chooses candidates for the input (see the module docs).
    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError>;
}

/// Chooses by BM25 score (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bm25Selector;

impl Selector for Bm25Selector {
    fn name(&self) -> String {
        "bm25".to_string()
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        let mut order: Vec<usize> = (0..input.candidates.len())
            .filter(|&i| input.candidates[i].features.bm25 > 0.0)
            .collect();
        order.sort_by(|&a, &b| {
            let (fa, fb) = (&input.candidates[a].features, &input.candidates[b].features);
            fb.bm25.total_cmp(&fa.bm25).then(fa.rank.cmp(&fb.rank))
        });
        order.truncate(input.limit);
        Ok(Selection {
            chosen: order,
            note: None,
        })
    }
}

/// Chooses by cosine similarity (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CosineSelector {
    /// Candidates below this cosine are never chosen (`None`: no threshold).
    pub min_cosine: Option<f64>,
}

impl Selector for CosineSelector {
    fn name(&self) -> String {
        "cosine".to_string()
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        let mut order: Vec<usize> = (0..input.candidates.len())
            .filter(|&i| {
                self.min_cosine
                    .is_none_or(|min| input.candidates[i].features.cosine >= min)
            })
            .collect();
        order.sort_by(|&a, &b| {
            let (fa, fb) = (&input.candidates[a].features, &input.candidates[b].features);
            fb.cosine.total_cmp(&fa.cosine).then(fa.rank.cmp(&fb.rank))
        });
        order.truncate(input.limit);
        Ok(Selection {
            chosen: order,
            note: None,
        })
    }
}

/// Asks a chat model to choose (see the module docs for the reply format).
pub struct ModelSelector {
    model: Arc<dyn ChatModel>,
    max_tokens: u32,
}

impl std::fmt::Debug for ModelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSelector")
            .field("model", &self.model.id())
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

impl ModelSelector {
    /// A selector asking `model` (pass the cached model), greedy, at most `max_tokens`
    /// tokens per reply (room for a reasoning model's `<think>` block).
    pub fn new(model: Arc<dyn ChatModel>, max_tokens: u32) -> ModelSelector {
        ModelSelector { model, max_tokens }
    }

    /// The request for `input`.
    pub fn request(&self, input: &SelectionInput<'_>) -> ChatRequest {
        let mut listing = String::new();
        for (i, candidate) in input.candidates.iter().enumerate() {
            let _ = writeln!(listing, "[{}]\n{}\n", i + 1, candidate.summary.trim_end());
        }
        let (template, name) = match input.level {
            Level::Episode => (MEMORY_SELECT_EPISODE, "select-episode"),
            Level::Turn => (MEMORY_SELECT_TURN, "select-turn"),
        };
        let limit = input.limit.to_string();
        ChatRequest {
            messages: vec![ChatMessage::user(fill(
                template.trim_end(),
                &[
                    ("limit", &limit),
                    ("query", input.query),
                    ("candidates", listing.trim_end()),
                ],
            ))],
            decoding: Decoding {
                max_tokens: self.max_tokens,
                ..Decoding::default()
            },
            prompt_version: memory_version(name),
            tools: Vec::new(),
        }
    }
}

impl Selector for ModelSelector {
    fn name(&self) -> String {
        format!("model:{}", self.model.id())
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        if input.candidates.is_empty() {
            return Ok(Selection::default());
        }
        let reply = match self.model.chat(&self.request(input)) {
            Ok(reply) => reply,
            // Deterministic (the prompt is too long): select nothing rather than fail.
            Err(ModelError::InvalidRequest(reason)) => {
                return Ok(Selection {
                    chosen: Vec::new(),
                    note: Some(format!("the model refused the request: {reason}")),
                })
            }
            Err(error) => return Err(SelectError::Model(error)),
        };
        Ok(
            match parse_selection(&reply.text, input.candidates.len(), input.limit) {
                Ok(chosen) => Selection { chosen, note: None },
                Err(reason) => Selection {
                    chosen: Vec::new(),
                    note: Some(format!("malformed selection, none injected: {reason}")),
                },
            },
        )
    }
}

/// Reads a `SELECTED:` reply into 0-based indices (see the module docs). `count` is the
/// number of candidates shown, `limit` the most that may be chosen.
pub fn parse_selection(reply: &str, count: usize, limit: usize) -> Result<Vec<usize>, String> {
    let mut text = reply;
    if let Some(end) = text.find("</think>") {
        text = &text[end + "</think>".len()..];
    } else if text.contains("<think>") {
        return Err("the reply ends inside a <think> block".to_string());
    }
    let decoration = |c: char| matches!(c, '*' | '_' | '`' | '#' | '>' | '-') || c.is_whitespace();
    let line = text
        .lines()
        .map(|l| l.trim_matches(decoration))
        .find(|l| {
            l.get(..9)
                .is_some_and(|head| head.eq_ignore_ascii_case("selected:"))
        })
        .ok_or("no line starts with SELECTED:")?;
    let rest = line[9..].trim_matches(|c: char| decoration(c) || c == '.');
    if rest.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let mut chosen = Vec::new();
    for token in rest
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
    {
        let id = token.trim_matches(|c: char| matches!(c, '[' | ']' | '#' | '*' | '`' | '.'));
        let number: usize = id
            .parse()
            .map_err(|_| format!("`{token}` is not a candidate number"))?;
        if number == 0 || number > count {
            return Err(format!("{number} is not among the candidates 1 to {count}"));
        }
        if !chosen.contains(&(number - 1)) {
            chosen.push(number - 1);
        }
    }
    if chosen.is_empty() {
        return Err("SELECTED: lists no candidate (write `SELECTED: none` to choose none)".into());
    }
    chosen.truncate(limit);
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::insight::{MEMORY_INSIGHT, MEMORY_INSIGHT_RETRY};
    use crate::prompts::slots;

    #[test]
    fn memory_templates_have_exactly_their_documented_slots() {
        let readme = include_str!("../../prompts/README.md");
        for (template, expected) in [
            (MEMORY_INSIGHT, &["request", "outcome", "steps"][..]),
            (MEMORY_INSIGHT_RETRY, &["error"][..]),
            (MEMORY_SELECT_EPISODE, &["limit", "query", "candidates"][..]),
            (MEMORY_SELECT_TURN, &["limit", "query", "candidates"][..]),
        ] {
            assert_eq!(slots(template), expected);
            for slot in expected {
                assert!(readme.contains(&format!("`{slot}`")), "{slot} undocumented");
            }
            let values: Vec<(&str, &str)> = expected.iter().map(|s| (*s, "v")).collect();
            assert!(!fill(template, &values).contains("{{"));
        }
    }

    #[test]
    fn selections_are_read_robustly() {
        assert_eq!(parse_selection("SELECTED: 2", 3, 1), Ok(vec![1]));
        assert_eq!(parse_selection("selected: [3], [1]", 3, 5), Ok(vec![2, 0]));
        assert_eq!(
            parse_selection("<think>maybe 1</think>\n**SELECTED: #2, 2 3**", 3, 5),
            Ok(vec![1, 2])
        );
        assert_eq!(
            parse_selection("Reasoning...\nSELECTED: none.", 3, 1),
            Ok(vec![])
        );
        assert_eq!(parse_selection("`SELECTED: 1 2 3`", 3, 2), Ok(vec![0, 1]));
        assert_eq!(parse_selection("- SELECTED: 1", 3, 1), Ok(vec![0]));
    }

    #[test]
    fn malformed_selections_are_errors() {
        for reply in [
            "",
            "2",
            "I pick 2",
            "SELECTED:",
            "SELECTED: two",
            "SELECTED: 4",
            "SELECTED: 0",
            "SELECTED: 1, x",
            "<think>SELECTED: 1",
            "SELECTÉD: 1",
        ] {
            assert!(parse_selection(reply, 3, 1).is_err(), "{reply:?}");
        }
    }
}
