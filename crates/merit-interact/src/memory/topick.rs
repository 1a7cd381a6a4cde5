//! TopicK: the topic-coverage static retrieval baseline of paper 003 (Kweon et al., 2025).
//!
//! TopicK picks demonstrations that together cover the topics of the input, favouring topics
//! the model knows least, and stops rewarding a topic once a chosen demonstration covers it.
//! This is our reading of that method for the interact memory, written from its description:
//!
//! 1. **Topics** of a text are its content terms: the BM25 tokens (`[a-z0-9_]` runs, so schema
//!    identifiers such as `air_temp` stay whole) of at least three characters that are not
//!    common English function words, nor the field labels of the turn-state signature. The
//!    query's topics come from the request (episode level) or the state signature (turn
//!    level); a candidate's from its summary.
//! 2. **Weights.** The original estimates how well the model knows each topic from its own
//!    output probabilities; the chat models here give no such scores, so the proxy is how
//!    rarely the candidate pool covers the topic: `w(t) = ln(1 + n / (1 + df(t)))` over the
//!    `n` candidates. A topic every memory mentions (the database's main table) teaches little;
//!    one few memories cover is where a demonstration adds most.
//! 3. **Greedy coverage.** Repeatedly choose the candidate whose not-yet-covered query topics
//!    weigh most (ties: embedding rank), mark its topics covered, and continue up to the limit.
//!    A candidate that adds no uncovered topic is never chosen, so nothing is injected when no
//!    candidate shares a topic with the query (as the BM25 selector does).
//!
//! It is static (nothing is learned) and reads only what every selector reads.

use super::select::{SelectError, Selection, SelectionInput, Selector};
use std::collections::{BTreeMap, BTreeSet};

/// Words too common to be a topic.
const STOP_WORDS: &[&str] = &[
    "all", "and", "any", "are", "but", "can", "did", "does", "each", "for", "from", "had", "has",
    "have", "her", "his", "how", "into", "its", "many", "more", "most", "not", "of", "one", "only",
    "our", "out", "per", "than", "that", "the", "their", "them", "then", "there", "these", "they",
    "this", "those", "was", "were", "what", "when", "where", "which", "who", "whose", "why",
    "will", "with", "would", "you", "your",
];

/// The field labels of the turn-state signature (`INIT:`, `PREV_ACT:`, `PREV_OBS:`, and the
/// `(none)` of a first step): every turn query and every turn memory's summary holds them, so
/// as topics they would give every candidate a gain and TopicK would never decline to inject.
const TEMPLATE_WORDS: &[&str] = &["init", "prev_act", "prev_obs", "none"];

/// The topics of `text` (see the module docs).
pub fn topics(text: &str) -> BTreeSet<String> {
    merit_memory::text::bm25_tokens(text)
        .into_iter()
        .filter(|token| {
            token.len() >= 3
                && !STOP_WORDS.contains(&token.as_str())
                && !TEMPLATE_WORDS.contains(&token.as_str())
        })
        .collect()
}

/// The TopicK selector (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicKSelector;

impl Selector for TopicKSelector {
    fn name(&self) -> String {
        "topick".to_string()
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        let wanted = topics(input.query);
        let covers: Vec<BTreeSet<String>> = input
            .candidates
            .iter()
            .map(|c| topics(&c.summary).intersection(&wanted).cloned().collect())
            .collect();
        let mut pool_frequency: BTreeMap<&str, usize> = BTreeMap::new();
        for topic in covers.iter().flatten() {
            *pool_frequency.entry(topic.as_str()).or_default() += 1;
        }
        let n = input.candidates.len() as f64;
        let weight = |topic: &str| {
            let df = pool_frequency.get(topic).copied().unwrap_or(0) as f64;
            (1.0 + n / (1.0 + df)).ln()
        };
        let mut covered: BTreeSet<&str> = BTreeSet::new();
        let mut chosen: Vec<usize> = Vec::new();
        while chosen.len() < input.limit {
            let mut best: Option<(f64, usize, usize)> = None;
            for (index, topics) in covers.iter().enumerate() {
                if chosen.contains(&index) {
                    continue;
                }
                let gain: f64 = topics
                    .iter()
                    .filter(|t| !covered.contains(t.as_str()))
                    .map(|t| weight(t))
                    .sum();
                let rank = input.candidates[index].features.rank;
                let better = match best {
                    None => gain > 0.0,
                    Some((best_gain, best_rank, _)) => {
                        gain > best_gain || (gain == best_gain && rank < best_rank)
                    }
                };
                if better {
                    best = Some((gain, rank, index));
                }
            }
            let Some((_, _, index)) = best else { break };
            covered.extend(covers[index].iter().map(String::as_str));
            chosen.push(index);
        }
        Ok(Selection { chosen, note: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{CandidateFeatures, Level, SelectorCandidate};

    fn candidate(rank: usize, summary: &str) -> SelectorCandidate<'static> {
        SelectorCandidate {
            id: rank as u64,
            summary: summary.to_string(),
            embedding: &[],
            features: CandidateFeatures {
                rank,
                cosine: 0.0,
                cosine_normalized: 0.0,
                bm25: 0.0,
                bm25_normalized: 0.0,
                positive: true,
                episode_reward: 1.0,
                age: 1,
            },
        }
    }

    fn select(query: &str, candidates: &[SelectorCandidate<'_>], limit: usize) -> Vec<usize> {
        TopicKSelector
            .select(&SelectionInput {
                level: Level::Episode,
                query,
                query_embedding: &[],
                candidates,
                limit,
            })
            .unwrap()
            .chosen
    }

    #[test]
    fn topics_are_content_terms_with_identifiers_whole() {
        let found = topics("How many of the observatories have an air_temp above 20?");
        let expected: BTreeSet<String> = ["observatories", "air_temp", "above"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn coverage_prefers_rare_topics_and_rewards_each_topic_once() {
        let query = "average air_temp of observatories by region";
        let candidates = [
            // Covers only the common topic.
            candidate(1, "count observatories"),
            // Covers the rare topic and the common one.
            candidate(2, "average air_temp of observatories"),
            // The same topics again: nothing new once the second is chosen.
            candidate(3, "air_temp average observatories"),
            // The remaining topic.
            candidate(4, "observatories grouped by region"),
        ];
        assert_eq!(select(query, &candidates, 1), vec![1]);
        // The second pick covers what is still uncovered (region), not a duplicate.
        assert_eq!(select(query, &candidates, 2), vec![1, 3]);
        // Once every topic is covered, nothing more is added.
        assert_eq!(select(query, &candidates, 4), vec![1, 3]);
    }

    #[test]
    fn ties_go_to_the_embedding_rank_and_no_shared_topic_selects_nothing() {
        let candidates = [
            candidate(2, "stations north"),
            candidate(1, "stations south"),
        ];
        assert_eq!(select("list the stations", &candidates, 1), vec![1]);
        assert!(select("payroll of employees", &candidates, 3).is_empty());
    }

    #[test]
    fn the_turn_signature_labels_are_not_topics() {
        let state = |request: &str| {
            crate::memory::TurnState {
                initial_request: request.to_string(),
                current_request: request.to_string(),
                previous_action: None,
                previous_observation: None,
            }
            .signature()
        };
        let expected: BTreeSet<String> = ["payroll".to_string()].into();
        assert_eq!(topics(&state("payroll")), expected);
        // A turn memory of another subject shares only the labels: nothing is injected.
        let memory = candidate(1, &format!("{}\nACTION: get_schema()", state("stations")));
        assert!(select(&state("payroll"), &[memory], 2).is_empty());
    }
}
