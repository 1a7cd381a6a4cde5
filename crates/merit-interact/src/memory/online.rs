//! Two online-learning selector baselines (issue 7): a **MemRL-style** value selector and a
//! **Memento-style** case selector. Both learn during a run from the terminal reward of each
//! finished episode, without training the agent's model, and both are deterministic.
//!
//! - [`MemRlSelector`]: the embedding stage is the semantic pre-filter; each memory carries a
//!   Q-value, updated after every episode that injected it by `Q ← Q + α·(r − Q)`; candidates
//!   are ranked by `(1 − λ)·normalised cosine + λ·Q` with λ = 0.8 (the value ranks, the
//!   similarity mostly breaks ties). Q starts optimistic (1.0), so every
//!   memory is tried before its value is trusted (exploration without a random draw).
//! - [`MementoSelector`]: a parametric case selector: a linear score `w · φ` over the
//!   candidate's retrieval features φ ([`CandidateFeatures::to_array`] and a bias), starting
//!   as plain cosine, trained online by least mean squares towards the episode reward of each
//!   injected case; it injects the best-scoring case, or none when no score is positive.
//!
//! What they learn from is the episode's [`InjectionRecord`]s (the chosen memory ids and their
//! features are logged), so a resumed run rebuilds their state by replaying the log
//! ([`OnlineSelector::learn`] for each logged episode, in order).
//!
//! Deviations: MemRL and Memento are described for episode-level case memories with LLM
//! agents; here both serve either level, their retrieval features are this crate's, and the
//! update rules are the simplest of their kind (one-step value update, linear LMS).

use super::retrieve::CandidateFeatures;
use super::select::{Level, SelectError, Selection, SelectionInput, Selector};
use crate::agent::InjectionRecord;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// A selector that learns from finished episodes.
pub trait OnlineSelector: Selector {
    /// Learns from one finished episode: its retrievals (as logged) and its terminal reward.
    fn learn(&self, injections: &[InjectionRecord], reward: f64);
}

/// MemRL-style: Q-values over memories (see the module docs).
#[derive(Debug)]
pub struct MemRlSelector {
    /// Step size α of the value update.
    pub alpha: f64,
    /// Weight λ of the value against similarity.
    pub lambda: f64,
    /// Value of a memory never injected yet.
    pub initial: f64,
    values: Mutex<BTreeMap<(Level, u64), f64>>,
}

impl Default for MemRlSelector {
    fn default() -> MemRlSelector {
        MemRlSelector {
            alpha: 0.3,
            lambda: 0.8,
            initial: 1.0,
            values: Mutex::new(BTreeMap::new()),
        }
    }
}

impl MemRlSelector {
    /// The current value of memory `id` at `level`.
    pub fn value(&self, level: Level, id: u64) -> f64 {
        let values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        values.get(&(level, id)).copied().unwrap_or(self.initial)
    }
}

impl Selector for MemRlSelector {
    fn name(&self) -> String {
        "memrl".to_string()
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        let score = |i: usize| {
            let c = &input.candidates[i];
            (1.0 - self.lambda) * c.features.cosine_normalized
                + self.lambda * self.value(input.level, c.id)
        };
        let mut order: Vec<usize> = (0..input.candidates.len()).collect();
        // Best score first; ties keep the embedding rank.
        order.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
        order.truncate(input.limit);
        Ok(Selection {
            chosen: order,
            note: None,
        })
    }
}

impl OnlineSelector for MemRlSelector {
    fn learn(&self, injections: &[InjectionRecord], reward: f64) {
        let mut values = self.values.lock().unwrap_or_else(|p| p.into_inner());
        for injection in injections {
            for &id in &injection.chosen {
                let value = values.entry((injection.level, id)).or_insert(self.initial);
                *value += self.alpha * (reward - *value);
            }
        }
    }
}

/// Length of the Memento-style feature vector: the retrieval features and a bias.
const PHI: usize = CandidateFeatures::LEN + 1;

fn phi(features: &CandidateFeatures) -> [f64; PHI] {
    let mut out = [1.0; PHI];
    for (slot, value) in out.iter_mut().zip(features.to_array()) {
        *slot = f64::from(value);
    }
    out
}

/// Memento-style: a linear case-selection score learned online (see the module docs).
#[derive(Debug)]
pub struct MementoSelector {
    /// Step size of the LMS update.
    pub learning_rate: f64,
    weights: Mutex<BTreeMap<Level, [f64; PHI]>>,
}

impl Default for MementoSelector {
    fn default() -> MementoSelector {
        MementoSelector {
            learning_rate: 0.05,
            weights: Mutex::new(BTreeMap::new()),
        }
    }
}

impl MementoSelector {
    /// The starting weights: the score is the raw cosine (index 1 of the feature layout).
    fn initial() -> [f64; PHI] {
        let mut w = [0.0; PHI];
        w[1] = 1.0;
        w
    }

    /// The current weights at `level` (features in [`CandidateFeatures::to_array`] order, then
    /// the bias).
    pub fn weights(&self, level: Level) -> [f64; PHI] {
        let weights = self.weights.lock().unwrap_or_else(|p| p.into_inner());
        weights.get(&level).copied().unwrap_or_else(Self::initial)
    }

    fn score(w: &[f64; PHI], features: &CandidateFeatures) -> f64 {
        w.iter().zip(phi(features)).map(|(a, b)| a * b).sum()
    }
}

impl Selector for MementoSelector {
    fn name(&self) -> String {
        "memento".to_string()
    }

    fn select(&self, input: &SelectionInput<'_>) -> Result<Selection, SelectError> {
        let w = self.weights(input.level);
        let mut order: Vec<usize> = (0..input.candidates.len())
            .filter(|&i| Self::score(&w, &input.candidates[i].features) > 0.0)
            .collect();
        order.sort_by(|&a, &b| {
            let (sa, sb) = (
                Self::score(&w, &input.candidates[a].features),
                Self::score(&w, &input.candidates[b].features),
            );
            sb.total_cmp(&sa).then(a.cmp(&b))
        });
        order.truncate(input.limit);
        Ok(Selection {
            chosen: order,
            note: None,
        })
    }
}

impl OnlineSelector for MementoSelector {
    fn learn(&self, injections: &[InjectionRecord], reward: f64) {
        let mut weights = self.weights.lock().unwrap_or_else(|p| p.into_inner());
        for injection in injections {
            let w = weights.entry(injection.level).or_insert_with(Self::initial);
            for features in &injection.chosen_features {
                let x = phi(features);
                let error = reward - Self::score(w, features);
                for (wi, xi) in w.iter_mut().zip(x) {
                    *wi += self.learning_rate * error * xi;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SelectorCandidate;

    fn features(rank: usize, cosine: f64, positive: bool) -> CandidateFeatures {
        CandidateFeatures {
            rank,
            cosine,
            cosine_normalized: if rank == 1 { 1.0 } else { 0.0 },
            bm25: 0.0,
            bm25_normalized: 0.0,
            positive,
            episode_reward: 0.7,
            age: 1,
        }
    }

    /// Two candidates: memory 10 (the nearer, rank 1) and memory 20.
    fn choose(selector: &dyn Selector) -> Vec<usize> {
        let embedding = [1.0_f32, 0.0];
        let candidates = [
            SelectorCandidate {
                id: 10,
                summary: String::new(),
                embedding: &embedding,
                features: features(1, 0.9, true),
            },
            SelectorCandidate {
                id: 20,
                summary: String::new(),
                embedding: &embedding,
                features: features(2, 0.6, false),
            },
        ];
        let input = SelectionInput {
            level: Level::Episode,
            query: "q",
            query_embedding: &embedding,
            candidates: &candidates,
            limit: 1,
        };
        selector.select(&input).unwrap().chosen
    }

    fn injected(id: u64, features: CandidateFeatures) -> InjectionRecord {
        InjectionRecord {
            level: Level::Episode,
            turn: 0,
            candidates: vec![10, 20],
            chosen: vec![id],
            chosen_features: vec![features],
            selector: "test".into(),
            note: None,
        }
    }

    #[test]
    fn memrl_leaves_a_memory_that_keeps_failing_for_one_not_yet_tried() {
        let memrl = MemRlSelector::default();
        assert_eq!(choose(&memrl), [0], "equal values: the nearer memory");
        for _ in 0..3 {
            memrl.learn(&[injected(10, features(1, 0.9, true))], 0.0);
        }
        assert!(memrl.value(Level::Episode, 10) < 0.5);
        assert_eq!(
            memrl.value(Level::Episode, 20),
            1.0,
            "untried keeps its optimism"
        );
        assert_eq!(choose(&memrl), [1]);
        // The turn level keeps its own values.
        assert_eq!(memrl.value(Level::Turn, 10), 1.0);
    }

    #[test]
    fn memento_learns_which_features_pay_and_can_decline() {
        let memento = MementoSelector::default();
        assert_eq!(choose(&memento), [0], "starts as cosine");
        // Injecting the positive, nearer case never pays; the other one does.
        for _ in 0..200 {
            memento.learn(&[injected(10, features(1, 0.9, true))], 0.0);
            memento.learn(&[injected(20, features(2, 0.6, false))], 1.0);
        }
        assert_eq!(choose(&memento), [1]);
        // When nothing pays, it injects nothing.
        let declining = MementoSelector::default();
        for _ in 0..200 {
            declining.learn(&[injected(10, features(1, 0.9, true))], -0.5);
            declining.learn(&[injected(20, features(2, 0.6, false))], -0.5);
        }
        assert!(choose(&declining).is_empty());
        assert_ne!(
            declining.weights(Level::Episode),
            MementoSelector::initial()
        );
    }
}
