//! The paper's measures (Tables 1 and 3), computed from episode records.

use merit_core::episode::{normalize_attempt_sql, EpisodeRecord};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// Everything measured on one (method, seed) run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    /// Questions in the stream.
    pub questions: usize,
    /// Questions whose final SQL is correct.
    pub correct: usize,
    /// `correct / questions`, in percent.
    pub accuracy_pct: f64,
    /// Questions whose initial prediction was wrong.
    pub initial_failures: usize,
    /// Initial failures that a revision fixed.
    pub repaired: usize,
    /// Mean repair generations per initial failure (a failed episode counts the steps it took:
    /// K, or fewer when its repairs stopped early).
    pub steps_per_initial_failure: f64,
    /// Revisions that repeat an earlier attempt of the same episode, in percent of revisions.
    pub oscillation_pct: f64,
    /// Prompt tokens over the run, the shared initial generation included (as the paper
    /// counts it; logs written before it was recorded carry 0 for it).
    pub prompt_tokens: u64,
    /// Completion tokens over the run, the initial generation included.
    pub completion_tokens: u64,
    /// Model calls over the run: the initial generation (one per question) and every repair
    /// and reflection call.
    pub calls: u64,
    /// The part of `calls` spent on repairs and reflections.
    #[serde(default)]
    pub repair_calls: u64,
    /// The part of the tokens spent on repairs and reflections (prompt + completion).
    #[serde(default)]
    pub repair_tokens: u64,
}

/// Measures one run from its episodes (one per question).
pub fn run_metrics(episodes: &[EpisodeRecord]) -> RunMetrics {
    let questions = episodes.len();
    let correct = episodes.iter().filter(|e| e.finally_correct()).count();
    let failures: Vec<&EpisodeRecord> =
        episodes.iter().filter(|e| !e.initially_correct()).collect();
    let repaired = failures.iter().filter(|e| e.finally_correct()).count();
    let steps: usize = failures.iter().map(|e| e.repair_steps()).sum();
    let mut revisions = 0usize;
    let mut oscillations = 0usize;
    for episode in &failures {
        let mut seen = HashSet::new();
        for attempt in &episode.attempts {
            let normalized = normalize_attempt_sql(&attempt.sql);
            if attempt.step > 0 {
                revisions += 1;
                if seen.contains(&normalized) {
                    oscillations += 1;
                }
            }
            seen.insert(normalized);
        }
    }
    let percent = |part: usize, whole: usize| {
        if whole == 0 {
            0.0
        } else {
            part as f64 / whole as f64 * 100.0
        }
    };
    let attempts = episodes.iter().flat_map(|e| &e.attempts);
    RunMetrics {
        questions,
        correct,
        accuracy_pct: percent(correct, questions),
        initial_failures: failures.len(),
        repaired,
        steps_per_initial_failure: if failures.is_empty() {
            0.0
        } else {
            steps as f64 / failures.len() as f64
        },
        oscillation_pct: percent(oscillations, revisions),
        prompt_tokens: attempts.clone().map(|a| a.prompt_tokens).sum(),
        completion_tokens: attempts.clone().map(|a| a.completion_tokens).sum(),
        calls: attempts.clone().map(|a| u64::from(a.calls)).sum(),
        repair_calls: attempts
            .clone()
            .filter(|a| a.step > 0)
            .map(|a| u64::from(a.calls))
            .sum(),
        repair_tokens: attempts
            .filter(|a| a.step > 0)
            .map(|a| a.prompt_tokens + a.completion_tokens)
            .sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_core::episode::AttemptRecord;
    use merit_core::Status;

    fn attempt(step: u32, sql: &str, status: Status) -> AttemptRecord {
        AttemptRecord {
            step,
            sql: sql.to_string(),
            status,
            error: None,
            failure_type: None,
            retrieved: Vec::new(),
            prompt_tokens: if step == 0 { 0 } else { 100 },
            completion_tokens: if step == 0 { 0 } else { 10 },
            calls: u32::from(step > 0),
            aids: Default::default(),
        }
    }

    fn episode(attempts: Vec<AttemptRecord>) -> EpisodeRecord {
        EpisodeRecord {
            method: "merit".into(),
            seed: 0,
            position: 0,
            question_id: "q".into(),
            db_id: "db".into(),
            attempts,
            memory_written: None,
            stopped_early: None,
        }
    }

    #[test]
    fn calls_and_tokens_include_the_initial_generation_and_repair_calls_do_not() {
        let mut initial = attempt(0, "SELECT 1", Status::DenotationMismatch);
        (
            initial.prompt_tokens,
            initial.completion_tokens,
            initial.calls,
        ) = (600, 40, 1);
        let repaired = episode(vec![
            initial.clone(),
            attempt(1, "SELECT 2", Status::Correct),
        ]);
        let mut correct_at_once = initial;
        correct_at_once.status = Status::Correct;
        let m = run_metrics(&[repaired, episode(vec![correct_at_once])]);
        assert_eq!(m.calls, 3, "two initial generations and one repair");
        assert_eq!(m.repair_calls, 1);
        assert_eq!(m.prompt_tokens, 600 + 600 + 100);
        assert_eq!(m.repair_tokens, 110);
    }

    #[test]
    fn normalization_ignores_case_space_and_semicolon_but_not_literals() {
        assert_eq!(
            normalize_attempt_sql("SELECT  a\nFROM t WHERE x = 'Ab  C' ;"),
            "select a from t where x = 'Ab  C'"
        );
        assert_ne!(
            normalize_attempt_sql("SELECT 'a'"),
            normalize_attempt_sql("SELECT 'A'")
        );
    }

    #[test]
    fn metrics_follow_their_definitions() {
        use Status::*;
        let episodes = vec![
            episode(vec![attempt(0, "SELECT 1", Correct)]),
            episode(vec![
                attempt(0, "SELECT a FROM t", DenotationMismatch),
                attempt(1, "SELECT b FROM t", ExecutionError),
                attempt(2, "select a from t;", DenotationMismatch),
                attempt(3, "SELECT c FROM t", Correct),
            ]),
            episode(vec![
                attempt(0, "SELECT x", ExecutionError),
                attempt(1, "SELECT y", ExecutionError),
                attempt(2, "SELECT y", ExecutionError),
            ]),
        ];
        let m = run_metrics(&episodes);
        assert_eq!(m.questions, 3);
        assert_eq!(m.correct, 2);
        assert!((m.accuracy_pct - 66.666_666_666_666_67).abs() < 1e-9);
        assert_eq!(m.initial_failures, 2);
        assert_eq!(m.repaired, 1);
        assert!((m.steps_per_initial_failure - 2.5).abs() < 1e-12);
        // Revisions: 3 + 2 = 5; repeats: "select a from t" and the second "SELECT y".
        assert!((m.oscillation_pct - 40.0).abs() < 1e-12);
        assert_eq!(m.calls, 5);
        assert_eq!(m.prompt_tokens, 500);
        assert_eq!(m.completion_tokens, 50);
    }
}
