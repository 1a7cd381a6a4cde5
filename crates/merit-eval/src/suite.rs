//! Evaluating many pairs at once, and reporting them the way the official scripts print.

use crate::evaluator::{Evaluator, Verdict};
use merit_core::{Difficulty, Hardness};
use merit_data::DatabaseDir;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One (gold, prediction) pair to evaluate.
#[derive(Debug, Clone, PartialEq)]
pub struct PairInput {
    /// Database the pair runs on.
    pub db_id: String,
    /// Gold SQL.
    pub gold: String,
    /// Predicted SQL.
    pub pred: String,
    /// BIRD difficulty, when known.
    pub difficulty: Option<Difficulty>,
}

/// Which verdicts to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Spider's execution match.
    pub spider: bool,
    /// BIRD's EX.
    pub bird: bool,
    /// Spider hardness of the gold.
    pub hardness: bool,
}

/// The verdicts for one pair.
#[derive(Debug, Clone, PartialEq)]
pub struct PairResult {
    /// `false` when the database was not found (then every verdict is `None`).
    pub available: bool,
    /// Spider's verdict, if asked for.
    pub spider: Option<Verdict>,
    /// BIRD's verdict, if asked for.
    pub bird: Option<Verdict>,
    /// Spider hardness of the gold, if asked for and parseable.
    pub hardness: Option<Hardness>,
}

/// Evaluates `pairs` in parallel (input order is kept) and calls `on_done` after each.
pub fn evaluate_pairs(
    evaluator: &Evaluator,
    databases: &DatabaseDir,
    pairs: &[PairInput],
    checks: Checks,
    on_done: &(dyn Fn() + Sync),
) -> Vec<PairResult> {
    pairs
        .par_iter()
        .map(|pair| {
            let result = match databases.locate(&pair.db_id) {
                Err(_) => PairResult {
                    available: false,
                    spider: None,
                    bird: None,
                    hardness: None,
                },
                Ok(path) => PairResult {
                    available: true,
                    spider: checks
                        .spider
                        .then(|| evaluator.spider_exec(&path, &pair.gold, &pair.pred)),
                    bird: checks
                        .bird
                        .then(|| evaluator.bird_ex(&path, &pair.gold, &pair.pred)),
                    hardness: if checks.hardness {
                        evaluator.spider_hardness(&path, &pair.gold)
                    } else {
                        None
                    },
                },
            };
            on_done();
            result
        })
        .collect()
}

/// The machine-readable summary printed by `merit eval --json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Examples evaluated (databases available).
    pub n: usize,
    /// Examples scored 1.
    pub correct: usize,
    /// `correct / n` (0 when `n` is 0).
    pub accuracy: f64,
    /// Examples skipped because their database is missing.
    pub unavailable: usize,
}

impl Summary {
    /// Summarises the verdicts picked by `verdict` (unavailable pairs counted apart).
    pub fn of(results: &[PairResult], verdict: impl Fn(&PairResult) -> Option<&Verdict>) -> Self {
        let unavailable = results.iter().filter(|r| !r.available).count();
        let scored: Vec<u8> = results
            .iter()
            .filter(|r| r.available)
            .filter_map(|r| verdict(r).map(Verdict::score))
            .collect();
        let n = scored.len();
        let correct = scored.iter().map(|&s| s as usize).sum();
        Summary {
            n,
            correct,
            accuracy: if n == 0 {
                0.0
            } else {
                correct as f64 / n as f64
            },
            unavailable,
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Tally {
    count: usize,
    correct: usize,
}

impl Tally {
    fn add(&mut self, score: u8) {
        self.count += 1;
        self.correct += score as usize;
    }

    fn accuracy(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.correct as f64 / self.count as f64
        }
    }
}

/// The Spider script's table: counts and execution accuracy by hardness, then `all`.
///
/// Pairs whose gold the reference parser cannot parse have no hardness; the reference would
/// stop on them, here they count in `all` and are listed on a separate line.
pub fn spider_table(results: &[PairResult]) -> String {
    let mut levels: BTreeMap<Hardness, Tally> = BTreeMap::new();
    let mut all = Tally::default();
    let mut unparsed = 0usize;
    for result in results.iter().filter(|r| r.available) {
        let Some(verdict) = &result.spider else {
            continue;
        };
        let score = verdict.score();
        all.add(score);
        match result.hardness {
            Some(level) => levels.entry(level).or_default().add(score),
            None => unparsed += 1,
        }
    }
    let tallies: Vec<Tally> = Hardness::ALL
        .iter()
        .map(|level| levels.get(level).copied().unwrap_or_default())
        .chain([all])
        .collect();
    let mut out = String::new();
    let _ = write!(out, "{:20} ", "");
    let headers: Vec<String> = ["easy", "medium", "hard", "extra", "all"]
        .iter()
        .map(|h| format!("{h:20}"))
        .collect();
    let _ = writeln!(out, "{}", headers.join(" "));
    let counts: Vec<String> = tallies.iter().map(|t| format!("{:<20}", t.count)).collect();
    let _ = writeln!(out, "{:20} {}", "count", counts.join(" "));
    let _ = writeln!(
        out,
        "=====================   EXECUTION ACCURACY     ====================="
    );
    let scores: Vec<String> = tallies
        .iter()
        .map(|t| format!("{:<20.3}", t.accuracy()))
        .collect();
    let _ = writeln!(out, "{:20} {}", "execution", scores.join(" "));
    if unparsed > 0 {
        let _ = writeln!(
            out,
            "({unparsed} gold queries have no hardness: the reference parser cannot parse them)"
        );
    }
    out
}

/// The BIRD script's table: counts and accuracy (in percent) by difficulty, then `total`.
pub fn bird_table(results: &[PairResult], inputs: &[PairInput]) -> String {
    let mut levels: BTreeMap<Difficulty, Tally> = BTreeMap::new();
    let mut total = Tally::default();
    for (result, input) in results.iter().zip(inputs) {
        if !result.available {
            continue;
        }
        let Some(verdict) = &result.bird else {
            continue;
        };
        let score = verdict.score();
        total.add(score);
        if let Some(level) = input.difficulty {
            levels.entry(level).or_default().add(score);
        }
    }
    let tallies: Vec<Tally> = Difficulty::ALL
        .iter()
        .map(|level| levels.get(level).copied().unwrap_or_default())
        .chain([total])
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:20} {:20} {:20} {:20} {:20}",
        "", "simple", "moderate", "challenging", "total"
    );
    let counts: Vec<String> = tallies.iter().map(|t| format!("{:<20}", t.count)).collect();
    let _ = writeln!(out, "{:20} {}", "count", counts.join(" "));
    let _ = writeln!(
        out,
        "======================================    ACCURACY    ====================================="
    );
    let scores: Vec<String> = tallies
        .iter()
        .map(|t| format!("{:<20.2}", t.accuracy() * 100.0))
        .collect();
    let _ = writeln!(out, "{:20} {}", "accuracy", scores.join(" "));
    out
}
