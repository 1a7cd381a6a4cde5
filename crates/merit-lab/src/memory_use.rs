//! What a memory method's retrievals put in front of its repair steps, read from the episode
//! logs alone (the report's Table 6, beyond the paper's tables).
//!
//! Every repair attempt logs the ids of the memories retrieved for it, and every episode the
//! id of the memory it wrote. The episode that wrote a memory says what it holds: positive
//! when that episode was repaired (its final transition), negative when it was not (its last
//! failed direction), with the failure type of the attempt the transition starts from (the
//! second-to-last attempt, as [`merit_memory::episode::Episode::finalize`] takes it) and the
//! episode's database. So for each repair step the table can say whether a positive precedent
//! was in the prompt, whether one had the step's own failure type, whether one came from the
//! same database, and how the step ended.
//!
//! The two success rates are descriptive, not an effect of memory: steps that saw a positive
//! precedent come later in the stream (the memory is empty at the start) and differ from the
//! others in ways the table does not control. What memory changes is measured by the paired
//! comparison of Table 2.

use merit_core::episode::EpisodeRecord;
use merit_core::failure::FailureType;
use serde::Serialize;
use std::collections::BTreeMap;

/// One run's (method × seed) memory use.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunMemoryUse {
    /// Memories the run wrote, positive and negative.
    pub positive_written: usize,
    /// See `positive_written`.
    pub negative_written: usize,
    /// Repair attempts (step 1 and later).
    pub repair_steps: usize,
    /// Repair steps whose prompt held at least one positive precedent.
    pub with_positive: usize,
    /// Repair steps with a positive precedent of the failure type being repaired.
    pub with_typed_positive: usize,
    /// Repair steps with a positive precedent from the same database.
    pub with_same_database_positive: usize,
    /// Of `with_positive`, the steps whose attempt was correct.
    pub correct_with_positive: usize,
    /// Of the repair steps without a positive precedent, those whose attempt was correct.
    pub correct_without_positive: usize,
    /// Retrieved ids that no episode of the run wrote (none in a well-formed run).
    pub unknown_ids: usize,
}

/// What the episode that wrote a memory says about it.
struct Written<'e> {
    positive: bool,
    failure_type: Option<FailureType>,
    db_id: &'e str,
}

/// The memory use of one run's episodes; `None` when no repair step retrieved anything (a
/// method without memory).
pub fn run_memory_use(episodes: &[&EpisodeRecord]) -> Option<RunMemoryUse> {
    if !episodes
        .iter()
        .flat_map(|e| &e.attempts)
        .any(|attempt| !attempt.retrieved.is_empty())
    {
        return None;
    }
    let mut written: BTreeMap<&str, Written<'_>> = BTreeMap::new();
    let mut result = RunMemoryUse::default();
    for episode in episodes {
        let Some(id) = &episode.memory_written else {
            continue;
        };
        // A later episode can name an entry that already exists (a duplicate transition folded
        // into it): the entry is what its first writer made.
        if written.contains_key(id.as_str()) {
            continue;
        }
        let positive = episode.finally_correct() && !episode.initially_correct();
        if positive {
            result.positive_written += 1;
        } else {
            result.negative_written += 1;
        }
        let from = episode.attempts.len().checked_sub(2);
        written.insert(
            id.as_str(),
            Written {
                positive,
                failure_type: from.and_then(|at| episode.attempts[at].failure_type),
                db_id: &episode.db_id,
            },
        );
    }
    for episode in episodes {
        for (step, attempt) in episode.attempts.iter().enumerate().skip(1) {
            result.repair_steps += 1;
            let repairing = episode.attempts[step - 1].failure_type;
            let mut positives = Vec::new();
            for id in &attempt.retrieved {
                match written.get(id.as_str()) {
                    Some(memory) if memory.positive => positives.push(memory),
                    Some(_) => {}
                    None => result.unknown_ids += 1,
                }
            }
            let correct = attempt.status.is_correct();
            if positives.is_empty() {
                result.correct_without_positive += usize::from(correct);
                continue;
            }
            result.with_positive += 1;
            result.correct_with_positive += usize::from(correct);
            if repairing.is_some() && positives.iter().any(|m| m.failure_type == repairing) {
                result.with_typed_positive += 1;
            }
            if positives.iter().any(|m| m.db_id == episode.db_id) {
                result.with_same_database_positive += 1;
            }
        }
    }
    Some(result)
}

/// A method's memory use, means over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryUse {
    /// Method name.
    pub method: String,
    /// Per-seed figures, in seed order.
    pub runs: Vec<RunMemoryUse>,
    /// Mean positive memories written.
    pub positive_written_mean: f64,
    /// Mean negative memories written.
    pub negative_written_mean: f64,
    /// Mean repair steps.
    pub repair_steps_mean: f64,
    /// Mean share of repair steps with a positive precedent, percent.
    pub with_positive_pct: f64,
    /// Mean share with a positive precedent of the failure type being repaired, percent.
    pub with_typed_positive_pct: f64,
    /// Mean share with a positive precedent from the same database, percent.
    pub with_same_database_positive_pct: f64,
    /// Correct steps among those with a positive precedent, pooled over seeds, percent
    /// (`None` when there was none).
    pub correct_with_positive_pct: Option<f64>,
    /// Correct steps among those without, pooled over seeds, percent.
    pub correct_without_positive_pct: Option<f64>,
}

/// Summarises the runs (seed order) of `method`; `None` when none of them used memory.
pub fn memory_use(method: &str, runs: &[RunMemoryUse]) -> Option<MemoryUse> {
    if runs.is_empty() {
        return None;
    }
    let mean =
        |f: &dyn Fn(&RunMemoryUse) -> f64| runs.iter().map(f).sum::<f64>() / runs.len() as f64;
    let share = |part: usize, whole: usize| part as f64 * 100.0 / whole.max(1) as f64;
    let pooled = |part: usize, whole: usize| (whole > 0).then(|| share(part, whole));
    let total = |f: &dyn Fn(&RunMemoryUse) -> usize| runs.iter().map(f).sum::<usize>();
    Some(MemoryUse {
        method: method.to_string(),
        positive_written_mean: mean(&|r| r.positive_written as f64),
        negative_written_mean: mean(&|r| r.negative_written as f64),
        repair_steps_mean: mean(&|r| r.repair_steps as f64),
        with_positive_pct: mean(&|r| share(r.with_positive, r.repair_steps)),
        with_typed_positive_pct: mean(&|r| share(r.with_typed_positive, r.repair_steps)),
        with_same_database_positive_pct: mean(&|r| {
            share(r.with_same_database_positive, r.repair_steps)
        }),
        correct_with_positive_pct: pooled(
            total(&|r| r.correct_with_positive),
            total(&|r| r.with_positive),
        ),
        correct_without_positive_pct: pooled(
            total(&|r| r.correct_without_positive),
            total(&|r| r.repair_steps - r.with_positive),
        ),
        runs: runs.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_core::episode::AttemptRecord;
    use merit_core::Status;

    fn attempt(
        step: u32,
        status: Status,
        failure: Option<FailureType>,
        retrieved: &[&str],
    ) -> AttemptRecord {
        AttemptRecord {
            step,
            sql: format!("SELECT {step}"),
            status,
            error: None,
            failure_type: failure,
            retrieved: retrieved.iter().map(|id| id.to_string()).collect(),
            prompt_tokens: 0,
            completion_tokens: 0,
            calls: 1,
            aids: Default::default(),
        }
    }

    fn episode(
        position: usize,
        db: &str,
        attempts: Vec<AttemptRecord>,
        wrote: Option<&str>,
    ) -> EpisodeRecord {
        EpisodeRecord {
            method: "merit".into(),
            seed: 0,
            position,
            question_id: format!("q{position}"),
            db_id: db.into(),
            attempts,
            memory_written: wrote.map(str::to_string),
            stopped_early: None,
        }
    }

    #[test]
    fn steps_are_counted_by_what_their_precedents_hold() {
        use FailureType::{ResultMismatch as Mismatch, SchemaLinking as Linking};
        let fail = Status::ExecutionError;
        let ok = Status::Correct;
        let episodes = [
            // Repaired at step 1 from a schema-linking failure: positive m0 (db a).
            episode(
                0,
                "a",
                vec![
                    attempt(0, fail, Some(Linking), &[]),
                    attempt(1, ok, None, &[]),
                ],
                Some("m0"),
            ),
            // Unrepaired: negative m1 (db b), its last direction from a mismatch.
            episode(
                1,
                "b",
                vec![
                    attempt(0, Status::DenotationMismatch, Some(Mismatch), &[]),
                    attempt(1, Status::DenotationMismatch, Some(Mismatch), &["m0"]),
                ],
                Some("m1"),
            ),
            // Two steps: the first sees m0 (same type, same db) and fails, the second sees
            // only the negative m1 and an id nobody wrote, and succeeds.
            episode(
                2,
                "a",
                vec![
                    attempt(0, fail, Some(Linking), &[]),
                    attempt(1, fail, Some(Linking), &["m0", "m1"]),
                    attempt(2, ok, None, &["m1", "m9"]),
                ],
                Some("m2"),
            ),
            // Initially correct: nothing written, no repair step.
            episode(3, "a", vec![attempt(0, ok, None, &[])], None),
        ];
        let refs: Vec<&EpisodeRecord> = episodes.iter().collect();
        let run = run_memory_use(&refs).expect("memory was used");
        assert_eq!(
            run,
            RunMemoryUse {
                positive_written: 2,
                negative_written: 1,
                repair_steps: 4,
                with_positive: 2,
                // Episode 1 repairs a mismatch with a schema-linking precedent; episode 2's
                // first step repairs schema linking with one.
                with_typed_positive: 1,
                with_same_database_positive: 1,
                correct_with_positive: 0,
                correct_without_positive: 2,
                unknown_ids: 1,
            }
        );
        let summary = memory_use("merit", &[run.clone(), run]).unwrap();
        assert_eq!(summary.with_positive_pct, 50.0);
        assert_eq!(summary.correct_with_positive_pct, Some(0.0));
        assert_eq!(summary.correct_without_positive_pct, Some(100.0));
        // Without retrievals (Iterative) there is nothing to say.
        let plain = [episode(
            0,
            "a",
            vec![
                attempt(0, fail, Some(Linking), &[]),
                attempt(1, ok, None, &[]),
            ],
            None,
        )];
        assert_eq!(run_memory_use(&plain.iter().collect::<Vec<_>>()), None);
    }
}
