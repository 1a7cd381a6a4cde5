//! How much training changed a selector's decisions: the evidence that a checkpoint is not
//! the untrained network under another name.
//!
//! Both policies (usually the freshly initialised one, rebuilt from the training seed, and
//! the trained checkpoint) make their greedy choice on the same selection problems; the shift
//! counts the problems where the choice differs and how far the distributions moved.

use super::{LearnError, SelectionExample, SelectorPolicy};
use serde::{Deserialize, Serialize};

/// The decisions of two policies on the same problems.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionShift {
    /// Problems compared (those with at least one candidate).
    pub problems: usize,
    /// Problems where the greedy choices (at most `limit` memories) differ.
    pub changed: usize,
    /// Share of problems where the first policy injects something.
    pub inject_rate_before: f64,
    /// Share of problems where the second policy injects something.
    pub inject_rate_after: f64,
    /// Mean total-variation distance between the two distributions over
    /// `[none, candidate 1, …]` (0: identical, 1: disjoint).
    pub mean_total_variation: f64,
    /// Mean probability of "inject nothing" under the first policy.
    pub mean_none_before: f64,
    /// Mean probability of "inject nothing" under the second policy.
    pub mean_none_after: f64,
}

impl DecisionShift {
    /// The share of problems whose decision changed, in percent (0 with no problem).
    pub fn changed_percent(&self) -> f64 {
        if self.problems == 0 {
            0.0
        } else {
            100.0 * self.changed as f64 / self.problems as f64
        }
    }
}

/// Compares the greedy decisions (at most `limit` memories) of `before` and `after` on
/// `examples`; problems without candidates are skipped (both policies must inject nothing).
pub fn decision_shift(
    before: &SelectorPolicy,
    after: &SelectorPolicy,
    examples: &[SelectionExample],
    limit: usize,
) -> Result<DecisionShift, LearnError> {
    let problems: Vec<SelectionExample> = examples
        .iter()
        .filter(|example| !example.candidates.is_empty())
        .cloned()
        .collect();
    let mut shift = DecisionShift {
        problems: problems.len(),
        changed: 0,
        inject_rate_before: 0.0,
        inject_rate_after: 0.0,
        mean_total_variation: 0.0,
        mean_none_before: 0.0,
        mean_none_after: 0.0,
    };
    if problems.is_empty() {
        return Ok(shift);
    }
    let first = before.probabilities_batch(&problems)?;
    let second = after.probabilities_batch(&problems)?;
    for (p, q) in first.iter().zip(&second) {
        let (choice_p, choice_q) = (p.choose(limit), q.choose(limit));
        shift.changed += usize::from(choice_p != choice_q);
        shift.inject_rate_before += f64::from(u8::from(!choice_p.is_empty()));
        shift.inject_rate_after += f64::from(u8::from(!choice_q.is_empty()));
        shift.mean_none_before += f64::from(p.none);
        shift.mean_none_after += f64::from(q.none);
        let distance: f64 = std::iter::once((p.none, q.none))
            .chain(
                p.candidates
                    .iter()
                    .copied()
                    .zip(q.candidates.iter().copied()),
            )
            .map(|(a, b)| f64::from((a - b).abs()))
            .sum();
        shift.mean_total_variation += distance / 2.0;
    }
    let n = problems.len() as f64;
    shift.inject_rate_before /= n;
    shift.inject_rate_after /= n;
    shift.mean_total_variation /= n;
    shift.mean_none_before /= n;
    shift.mean_none_after /= n;
    Ok(shift)
}
