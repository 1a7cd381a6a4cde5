//! The report of MERIT interact runs: what each run directory's log says (success per phase
//! and category, reward, turns, tokens, retrievals, how episodes ended), paired comparisons
//! with a baseline (bootstrap intervals and exact sign tests), and repeated tries read as
//! Pass@k. Read only: a report never touches a log (a torn tail stays for the run to cut).

use crate::stats::BootstrapError;
use merit_interact::memory::Level;
use merit_interact::runlog::{read_log, EpisodeRecord, LogError};
use merit_interact::{Category, EndReason, InjectionRecord, Phase};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Task ids a report leaves out of every figure (e.g. tasks found ill-posed after the runs),
/// so that the same logs can be read with and without them.
pub type ExcludedTasks = BTreeSet<String>;

/// The log file of an interact run directory.
pub const LOG_FILE: &str = "episodes.jsonl";

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InteractReportError {
    /// The folder holds no interact log.
    #[error("{} is not an interact run directory (no {LOG_FILE})", .0.display())]
    NotARun(PathBuf),
    /// The log could not be read.
    #[error("cannot read the log of {}: {source}", dir.display())]
    Log {
        /// The run directory.
        dir: PathBuf,
        /// The journal's error.
        source: LogError,
    },
    /// Runs to pair or to read as tries share no task.
    #[error("{0} have no task in common")]
    NoCommonTasks(String),
    /// Repeated tries need at least one run.
    #[error("no run to read as tries")]
    NoRuns,
    /// The bootstrap could not run.
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
}

/// The records of the run directory `dir`, less those of the `excluded` tasks.
pub fn read_run(
    dir: &Path,
    excluded: &ExcludedTasks,
) -> Result<Vec<EpisodeRecord>, InteractReportError> {
    let log = dir.join(LOG_FILE);
    if !log.is_file() {
        return Err(InteractReportError::NotARun(dir.to_path_buf()));
    }
    Ok(read_log(&log)
        .map_err(|source| InteractReportError::Log {
            dir: dir.to_path_buf(),
            source,
        })?
        .records
        .into_iter()
        .filter(|record| !excluded.contains(&record.instance_id))
        .collect())
}

/// The figures of one run directory.
#[derive(Debug, Serialize)]
pub struct InteractSummary {
    /// The run directory.
    pub run: String,
    /// Episodes logged.
    pub tasks: usize,
    /// Of those, Query tasks.
    pub query_tasks: usize,
    /// Of those, Management tasks.
    pub management_tasks: usize,
    /// Phase-1 success, in percent.
    pub phase1_success: f64,
    /// Phase-2 success, in percent (of every task: one without a follow-up never passes it).
    pub phase2_success: f64,
    /// Tasks with a follow-up and phase-2 success over them, in percent; `None` when the log
    /// does not record which tasks have one (logs written before it did).
    pub follow_ups: Option<(usize, f64)>,
    /// Phase 1 / phase 2 success over Query (read-only) tasks, in percent.
    pub query_success: (f64, f64),
    /// Phase 1 / phase 2 success over Management (write) tasks, in percent.
    pub management_success: (f64, f64),
    /// Mean reward.
    pub mean_reward: f64,
    /// Mean agent turns.
    pub mean_turns: f64,
    /// Agent model calls.
    pub agent_calls: u64,
    /// Simulator model calls.
    pub simulator_calls: u64,
    /// Prompt tokens of agent and simulator.
    pub prompt_tokens: u64,
    /// Generated tokens of agent and simulator.
    pub completion_tokens: u64,
    /// Memory retrievals made (both levels).
    pub retrievals: usize,
    /// Share of episodes that had at least one memory injected, in percent.
    pub episodes_with_memory: f64,
    /// Insight calls spent on memory writing.
    pub insight_calls: u64,
    /// How the episodes ended.
    pub ends: EndCounts,
    /// Episodes in which the agent submitted at least once.
    pub episodes_with_submit: usize,
    /// Steps taken, and those whose action equals the step just before it word for word (a
    /// small greedy agent's loop; memory prompts can feed it).
    pub repeated_steps: (usize, usize),
    /// Episodes with three or more such repeats.
    pub episodes_with_three_repeats: usize,
    /// Turns where the repeat guard asked again instead of taking a repeat, and those whose
    /// second reply repeated an earlier action all the same (then taken: the guard asks once).
    pub repeats_asked_again: (usize, usize),
    /// Submits the forced-submit fallback made in place of a non-submit under the budget's
    /// force-submit flag, and those the judge passed.
    pub fallback_submits: (usize, usize),
    /// Turn-level retrievals: all of them, those that injected a memory, memories injected.
    pub turn_retrievals: (usize, usize, usize),
    /// Episode-level retrievals: all of them, those that injected a memory, memories injected.
    pub episode_retrievals: (usize, usize, usize),
    /// Turn memories injected, and those the same episode had been shown at an earlier turn
    /// (`--turn-memories-once` makes the second 0).
    pub turn_memories_shown_again: (usize, usize),
}

/// Episodes by how they ended (the environment's end reasons; `agent_call_cap` is an episode
/// the agent stopped at its own call budget while the environment was still running).
#[derive(Debug, Default, Serialize)]
pub struct EndCounts {
    /// Solved.
    pub solved: usize,
    /// The budget ran out.
    pub budget_exhausted: usize,
    /// A non-submit action after the budget forced a submit.
    pub submit_refused: usize,
    /// The environment's turn limit.
    pub turn_limit: usize,
    /// The agent's own call cap.
    pub agent_call_cap: usize,
}

/// The figures of every run directory, in order, without the `excluded` tasks.
pub fn summarise(
    runs: &[PathBuf],
    excluded: &ExcludedTasks,
) -> Result<Vec<InteractSummary>, InteractReportError> {
    runs.iter()
        .map(|dir| summarise_one(dir, excluded))
        .collect()
}

fn summarise_one(
    dir: &Path,
    excluded: &ExcludedTasks,
) -> Result<InteractSummary, InteractReportError> {
    let log = dir.join(LOG_FILE);
    if !log.is_file() {
        return Err(InteractReportError::NotARun(dir.to_path_buf()));
    }
    // Read only: a report never touches the log (a torn tail stays for the run to cut).
    let records: Vec<EpisodeRecord> = read_run(dir, excluded)?;
    let n = records.len().max(1) as f64;
    let share = |count: usize| count as f64 / n * 100.0;
    Ok(InteractSummary {
        run: dir.display().to_string(),
        tasks: records.len(),
        query_tasks: records
            .iter()
            .filter(|r| r.category == Category::Query)
            .count(),
        management_tasks: records
            .iter()
            .filter(|r| r.category == Category::Management)
            .count(),
        query_success: category_success(&records, Category::Query),
        management_success: category_success(&records, Category::Management),
        phase1_success: share(
            records
                .iter()
                .filter(|r| r.trajectory.outcome.phase1_passed)
                .count(),
        ),
        phase2_success: share(
            records
                .iter()
                .filter(|r| r.trajectory.outcome.phase2_passed)
                .count(),
        ),
        follow_ups: follow_up_success(&records),
        mean_reward: records
            .iter()
            .map(|r| r.trajectory.outcome.reward)
            .sum::<f64>()
            / n,
        mean_turns: records
            .iter()
            .map(|r| r.trajectory.outcome.turns as f64)
            .sum::<f64>()
            / n,
        agent_calls: records.iter().map(|r| r.agent_usage.calls).sum(),
        simulator_calls: records.iter().map(|r| r.simulator_usage.calls).sum(),
        prompt_tokens: records
            .iter()
            .map(|r| r.agent_usage.prompt_tokens + r.simulator_usage.prompt_tokens)
            .sum(),
        completion_tokens: records
            .iter()
            .map(|r| r.agent_usage.completion_tokens + r.simulator_usage.completion_tokens)
            .sum(),
        retrievals: records.iter().map(|r| r.injections.len()).sum(),
        episodes_with_memory: share(
            records
                .iter()
                .filter(|r| r.injections.iter().any(|i| !i.chosen.is_empty()))
                .count(),
        ),
        insight_calls: records
            .iter()
            .filter_map(|r| r.memory_usage.as_ref())
            .map(|u| u.insight_calls)
            .sum(),
        ends: end_counts(&records),
        episodes_with_submit: records
            .iter()
            .filter(|r| {
                r.trajectory
                    .steps
                    .iter()
                    .any(|step| step.action.name == "submit")
            })
            .count(),
        repeated_steps: (
            records.iter().map(|r| r.trajectory.steps.len()).sum(),
            records.iter().map(repeats_in).sum(),
        ),
        episodes_with_three_repeats: records.iter().filter(|r| repeats_in(r) >= 3).count(),
        repeats_asked_again: guard_reasks(&records),
        fallback_submits: fallback_submits(&records),
        turn_retrievals: retrievals_at(&records, Level::Turn),
        episode_retrievals: retrievals_at(&records, Level::Episode),
        turn_memories_shown_again: turn_memories_shown_again(
            records.iter().map(|r| r.injections.as_slice()),
        ),
    })
}

/// The repeat guard's re-asks, and those answered with a repeat again. A turn's step is the
/// one the environment numbered with the same turn (every agent turn takes one step).
fn guard_reasks(records: &[EpisodeRecord]) -> (usize, usize) {
    let mut asked = 0;
    let mut repeated_anyway = 0;
    for record in records {
        let steps = &record.trajectory.steps;
        for turn in record.turns.iter().filter(|t| t.guarded_repeat.is_some()) {
            asked += 1;
            let Some(at) = steps.iter().position(|step| step.turn == turn.turn) else {
                continue;
            };
            if steps[..at]
                .iter()
                .any(|step| step.action == steps[at].action)
            {
                repeated_anyway += 1;
            }
        }
    }
    (asked, repeated_anyway)
}

/// Episodes that ended with a fallback submit (it is always the last step: a submit under the
/// force-submit flag ends the task), and those whose submit passed its phase.
fn fallback_submits(records: &[EpisodeRecord]) -> (usize, usize) {
    let ended_so: Vec<&EpisodeRecord> = records
        .iter()
        .filter(|r| r.turns.last().is_some_and(|t| t.fallback_submit))
        .collect();
    let passed = ended_so
        .iter()
        .filter(|r| {
            let outcome = &r.trajectory.outcome;
            match r.trajectory.steps.last().map(|step| step.phase) {
                Some(Phase::One) => outcome.phase1_passed,
                Some(Phase::Two) => outcome.phase2_passed,
                None => false,
            }
        })
        .count();
    (ended_so.len(), passed)
}

/// Turn memories injected, and those shown again within their episode (one slice of
/// retrievals per episode).
fn turn_memories_shown_again<'r>(
    episodes: impl Iterator<Item = &'r [InjectionRecord]>,
) -> (usize, usize) {
    let (mut shown, mut again) = (0usize, 0usize);
    for injections in episodes {
        let mut seen: Vec<u64> = Vec::new();
        for injection in injections.iter().filter(|i| i.level == Level::Turn) {
            for &id in &injection.chosen {
                shown += 1;
                if seen.contains(&id) {
                    again += 1;
                } else {
                    seen.push(id);
                }
            }
        }
    }
    (shown, again)
}

/// Steps of an episode whose action (target, name and arguments) equals the step just before.
fn repeats_in(record: &EpisodeRecord) -> usize {
    record
        .trajectory
        .steps
        .windows(2)
        .filter(|pair| pair[0].action == pair[1].action)
        .count()
}

fn end_counts(records: &[EpisodeRecord]) -> EndCounts {
    let mut counts = EndCounts::default();
    for record in records {
        let slot = match record.trajectory.outcome.end {
            EndReason::Solved => &mut counts.solved,
            EndReason::BudgetExhausted => &mut counts.budget_exhausted,
            EndReason::SubmitRefused => &mut counts.submit_refused,
            EndReason::TurnLimit => &mut counts.turn_limit,
            EndReason::Running => &mut counts.agent_call_cap,
        };
        *slot += 1;
    }
    counts
}

/// Retrievals at `level` and how many of them injected something.
fn retrievals_at(records: &[EpisodeRecord], level: Level) -> (usize, usize, usize) {
    let at_level = || {
        records
            .iter()
            .flat_map(|r| &r.injections)
            .filter(move |i| i.level == level)
    };
    (
        at_level().count(),
        at_level().filter(|i| !i.chosen.is_empty()).count(),
        at_level().map(|i| i.chosen.len()).sum(),
    )
}

/// Tasks with a follow-up and the percentage of them whose phase 2 passed (0 when none has
/// one); `None` when a record does not say whether its task has one.
fn follow_up_success(records: &[EpisodeRecord]) -> Option<(usize, f64)> {
    let mut with = 0usize;
    let mut passed = 0usize;
    for record in records {
        if record.has_follow_up? {
            with += 1;
            passed += usize::from(record.trajectory.outcome.phase2_passed);
        }
    }
    Some((with, passed as f64 * 100.0 / with.max(1) as f64))
}

/// Phase 1 and phase 2 success (percent) over the records of one category (0 when none).
fn category_success(records: &[EpisodeRecord], category: Category) -> (f64, f64) {
    let mine: Vec<&EpisodeRecord> = records.iter().filter(|r| r.category == category).collect();
    let n = mine.len().max(1) as f64;
    let count = |pick: fn(&EpisodeRecord) -> bool| mine.iter().filter(|r| pick(r)).count() as f64;
    (
        count(|r| r.trajectory.outcome.phase1_passed) / n * 100.0,
        count(|r| r.trajectory.outcome.phase2_passed) / n * 100.0,
    )
}

/// `part` of `whole` as a percentage with one decimal, or `n/a` of nothing.
fn percent_or_na(part: usize, whole: usize) -> String {
    if whole == 0 {
        "n/a".to_string()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// A category's phase 1 / phase 2 success, or `n/a` when the run has no task of it (a rate of
/// nothing is not 0%).
fn category_cell(tasks: usize, (phase1, phase2): (f64, f64)) -> String {
    if tasks == 0 {
        "n/a".to_string()
    } else {
        format!("{phase1:.1} / {phase2:.1}")
    }
}

/// One run against the baseline on their common tasks.
#[derive(Debug, Serialize)]
pub struct PairedComparison {
    /// The run.
    pub run: String,
    /// The baseline run.
    pub baseline: String,
    /// Tasks in both logs.
    pub common_tasks: usize,
    /// Phase-1 success, run minus baseline.
    pub phase1: crate::stats::PairedDifference,
    /// Phase-2 success, run minus baseline.
    pub phase2: crate::stats::PairedDifference,
}

/// Phase 1 and phase 2 success (1/0) of one task.
type PhaseOutcomes = (u8, u8);

/// Every run except `baseline` paired with it on their common tasks: the phase-1 and phase-2
/// differences with bootstrap intervals (`resamples` draws from `seed`) and sign tests, without
/// the `excluded` tasks.
pub fn compare(
    runs: &[PathBuf],
    baseline: &Path,
    excluded: &ExcludedTasks,
    resamples: usize,
    seed: u64,
) -> Result<Vec<PairedComparison>, InteractReportError> {
    let outcomes = |dir: &Path| -> Result<BTreeMap<String, (u8, u8)>, InteractReportError> {
        Ok(read_run(dir, excluded)?
            .into_iter()
            .map(|r| {
                let o = r.trajectory.outcome;
                (
                    r.instance_id,
                    (u8::from(o.phase1_passed), u8::from(o.phase2_passed)),
                )
            })
            .collect())
    };
    let base = outcomes(baseline)?;
    runs.iter()
        .filter(|run| run.as_path() != baseline)
        .map(|run| {
            let this = outcomes(run)?;
            // Tasks in both logs, in id order, so the pairing does not depend on file order.
            let common: Vec<(&PhaseOutcomes, &PhaseOutcomes)> = this
                .iter()
                .filter_map(|(id, a)| base.get(id).map(|b| (a, b)))
                .collect();
            if common.is_empty() {
                return Err(InteractReportError::NoCommonTasks(format!(
                    "{} and {}",
                    run.display(),
                    baseline.display()
                )));
            }
            let column = |phase: usize| -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
                common
                    .iter()
                    .map(|(a, b)| {
                        let pick = |o: &(u8, u8)| if phase == 1 { o.0 } else { o.1 };
                        (vec![pick(a)], vec![pick(b)])
                    })
                    .unzip()
            };
            let (a1, b1) = column(1);
            let (a2, b2) = column(2);
            Ok(PairedComparison {
                run: run.display().to_string(),
                baseline: baseline.display().to_string(),
                common_tasks: common.len(),
                phase1: crate::stats::paired_cluster_bootstrap(&a1, &b1, resamples, seed)?,
                phase2: crate::stats::paired_cluster_bootstrap(&a2, &b2, resamples, seed)?,
            })
        })
        .collect()
}

/// The comparisons as a Markdown table with a note on the method.
pub fn render_comparisons(comparisons: &[PairedComparison]) -> String {
    let mut out = String::from(
        "| run | vs baseline | common tasks | Δ phase 1 (pp) [95% CI] | phase 1 won / lost | sign test p | p, Holm | Δ phase 2 (pp) [95% CI] | phase 2 won / lost | sign test p |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let holm = crate::stats::holm_adjusted(
        &comparisons
            .iter()
            .map(|c| c.phase1.sign_test_p)
            .collect::<Vec<_>>(),
    );
    for (c, holm_p) in comparisons.iter().zip(holm) {
        out.push_str(&format!(
            "| {} | {} | {} | {:+.1} [{:+.1}, {:+.1}] | {} / {} | {} | {} | {:+.1} [{:+.1}, {:+.1}] | {} / {} | {} |\n",
            c.run,
            c.baseline,
            c.common_tasks,
            c.phase1.delta_pp,
            c.phase1.ci_low_pp,
            c.phase1.ci_high_pp,
            c.phase1.a_better,
            c.phase1.b_better,
            crate::report::format_p(c.phase1.sign_test_p),
            crate::report::format_p(holm_p),
            c.phase2.delta_pp,
            c.phase2.ci_low_pp,
            c.phase2.ci_high_pp,
            c.phase2.a_better,
            c.phase2.b_better,
            crate::report::format_p(c.phase2.sign_test_p),
        ));
    }
    out.push_str(
        "\nTasks resampled with replacement; won / lost counts the tasks this run passed and the \
         baseline failed, and the reverse; the exact two-sided sign test leaves ties out. Phase 2 \
         is counted over every common task: one without a follow-up fails it in both runs (a tie). \
         \"p, Holm\" is the phase-1 p adjusted by Holm's method over the runs of this table, \
         all compared with one baseline.\n",
    );
    out
}

/// The main figures of each run as a Markdown table.
pub fn render(summaries: &[InteractSummary]) -> String {
    let mut out = String::from(
        "| run | tasks (Q/M) | phase 1 % | phase 2 % | phase 2 % of tasks with a follow-up (n) | Q: P1 / P2 % | M: P1 / P2 % | reward | turns | agent calls | simulator calls | tokens (prompt/output) | retrievals | episodes with memory % |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in summaries {
        let follow_ups = match s.follow_ups {
            Some((0, _)) => "n/a (0)".to_string(),
            Some((n, rate)) => format!("{rate:.1} ({n})"),
            None => "n/a".to_string(),
        };
        out.push_str(&format!(
            "| {} | {} ({}/{}) | {:.1} | {:.1} | {} | {} | {} | {:.3} | {:.1} | {} | {} | {}/{} | {} | {:.1} |\n",
            s.run,
            s.tasks,
            s.query_tasks,
            s.management_tasks,
            s.phase1_success,
            s.phase2_success,
            follow_ups,
            category_cell(s.query_tasks, s.query_success),
            category_cell(s.management_tasks, s.management_success),
            s.mean_reward,
            s.mean_turns,
            s.agent_calls,
            s.simulator_calls,
            s.prompt_tokens,
            s.completion_tokens,
            s.retrievals,
            s.episodes_with_memory
        ));
    }
    out
}

/// The second table: how episodes ended and how often memory was actually shown.
/// How the agent behaved in each run, as a Markdown table.
pub fn render_behaviour(summaries: &[InteractSummary]) -> String {
    let mut out = String::from(
        "| run | solved | budget spent at a submit | refused the forced submit | turn limit | agent call cap | episodes with a submit | steps repeating the one before / all | episodes with ≥ 3 repeats | repeats asked again by the guard (repeated anyway) | fallback submits (passed) | turn retrievals with a memory / all (memories shown) | episode retrievals with a memory / all (memories shown) | turn memories shown again in their episode / shown |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for s in summaries {
        let (steps, repeated) = s.repeated_steps;
        let (turn_shown, shown_again) = s.turn_memories_shown_again;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} / {} ({}) | {} | {} ({}) | {} ({}) | {} / {} ({}) | {} / {} ({}) | {} / {} ({}) |\n",
            s.run,
            s.ends.solved,
            s.ends.budget_exhausted,
            s.ends.submit_refused,
            s.ends.turn_limit,
            s.ends.agent_call_cap,
            s.episodes_with_submit,
            repeated,
            steps,
            percent_or_na(repeated, steps),
            s.episodes_with_three_repeats,
            s.repeats_asked_again.0,
            s.repeats_asked_again.1,
            s.fallback_submits.0,
            s.fallback_submits.1,
            s.turn_retrievals.1,
            s.turn_retrievals.0,
            s.turn_retrievals.2,
            s.episode_retrievals.1,
            s.episode_retrievals.0,
            s.episode_retrievals.2,
            shown_again,
            turn_shown,
            percent_or_na(shown_again, turn_shown)
        ));
    }
    out
}

/// Runs read as independent tries of one configuration.
#[derive(Debug, Serialize)]
pub struct RepeatedTries {
    /// Runs read.
    pub runs: usize,
    /// Tasks logged in every run.
    pub common_tasks: usize,
    /// Pass@k of phase 1 for k = 1..runs.
    pub pass_at_k: Vec<f64>,
    /// Phase-1 success rate of each run on the common tasks.
    pub success_per_run: Vec<f64>,
    /// Mean of those rates.
    pub success_mean: f64,
    /// Their sample standard deviation.
    pub success_sd: f64,
}

/// The runs read as independent tries of one configuration (Pass@k over the tasks every
/// run holds, and the spread of success across runs), without the `excluded` tasks.
pub fn repeated_tries(
    runs: &[PathBuf],
    excluded: &ExcludedTasks,
) -> Result<RepeatedTries, InteractReportError> {
    let logs: Vec<BTreeMap<String, bool>> = runs
        .iter()
        .map(|dir| -> Result<_, InteractReportError> {
            Ok(read_run(dir, excluded)?
                .into_iter()
                .map(|r| (r.instance_id, r.trajectory.outcome.phase1_passed))
                .collect())
        })
        .collect::<Result<_, _>>()?;
    let Some((first, rest)) = logs.split_first() else {
        return Err(InteractReportError::NoRuns);
    };
    let passed: Vec<Vec<bool>> = first
        .iter()
        .filter_map(|(id, &pass)| {
            let others: Option<Vec<bool>> = rest.iter().map(|log| log.get(id).copied()).collect();
            others.map(|others| std::iter::once(pass).chain(others).collect())
        })
        .collect();
    let pass_at_k = crate::stats::pass_at_k_curve(&passed)
        .ok_or_else(|| InteractReportError::NoCommonTasks("the runs".to_string()))?;
    let success_per_run: Vec<f64> = (0..runs.len())
        .map(|r| passed.iter().filter(|tries| tries[r]).count() as f64 / passed.len() as f64)
        .collect();
    let (success_mean, success_sd) = crate::stats::mean_and_sample_sd(&success_per_run);
    Ok(RepeatedTries {
        runs: runs.len(),
        common_tasks: passed.len(),
        pass_at_k,
        success_per_run,
        success_mean,
        success_sd,
    })
}

/// The repeated tries as a line and a Pass@k table.
pub fn render_repeated_tries(tries: &RepeatedTries) -> String {
    let mut out = format!(
        "Repeated tries: {} runs on {} common tasks; phase-1 success {:.1}% ± {:.1} (mean ± sd over runs)\n\n| k | Pass@k (phase 1) |\n|---:|---:|\n",
        tries.runs,
        tries.common_tasks,
        100.0 * tries.success_mean,
        100.0 * tries.success_sd
    );
    for (k, value) in tries.pass_at_k.iter().enumerate() {
        out.push_str(&format!("| {} | {:.1}% |\n", k + 1, 100.0 * value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comparison_table_adjusts_phase_one_p_values_over_its_runs() {
        let difference = |p: f64| crate::stats::PairedDifference {
            delta_pp: -5.0,
            ci_low_pp: -10.0,
            ci_high_pp: 0.0,
            resamples: 100,
            a_better: 1,
            b_better: 4,
            sign_test_p: p,
        };
        let comparison = |run: &str, p: f64| PairedComparison {
            run: run.into(),
            baseline: "none".into(),
            common_tasks: 60,
            phase1: difference(p),
            phase2: difference(1.0),
        };
        let table = render_comparisons(&[comparison("cosine", 0.03), comparison("learned", 0.4)]);
        let cells = |run: &str| -> Vec<String> {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| {run} |")))
                .unwrap();
            row.split('|').map(|c| c.trim().to_string()).collect()
        };
        // Columns: run, baseline, tasks, Δ, won/lost, p, p Holm, ...
        assert_eq!(cells("cosine")[6..8], ["0.030", "0.060"], "{table}");
        assert_eq!(cells("learned")[6..8], ["0.400", "0.400"], "{table}");
        assert!(table.contains("| p, Holm |"), "{table}");
    }

    #[test]
    fn a_folder_without_a_log_and_no_runs_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let none = ExcludedTasks::new();
        let error = summarise(&[dir.path().to_path_buf()], &none).unwrap_err();
        assert!(matches!(error, InteractReportError::NotARun(_)), "{error}");
        assert!(error.to_string().contains("not an interact run directory"));
        assert!(matches!(
            repeated_tries(&[], &none).unwrap_err(),
            InteractReportError::NoRuns
        ));
        // An empty log is a run with no episodes: figures of zero tasks, no division by zero.
        std::fs::write(dir.path().join(LOG_FILE), "").unwrap();
        let summary = &summarise(&[dir.path().to_path_buf()], &none).unwrap()[0];
        assert_eq!((summary.tasks, summary.phase1_success), (0, 0.0));
        assert!(render(std::slice::from_ref(summary)).contains("| 0 |"));
    }

    #[test]
    fn a_turn_memory_counts_as_shown_again_only_within_its_episode() {
        let at = |level, chosen: &[u64]| InjectionRecord {
            level,
            turn: 0,
            candidates: chosen.to_vec(),
            chosen: chosen.to_vec(),
            chosen_features: Vec::new(),
            selector: "cosine".into(),
            note: None,
        };
        let first = vec![
            at(Level::Episode, &[3]),
            at(Level::Turn, &[3]),
            at(Level::Turn, &[4]),
            at(Level::Turn, &[]),
            at(Level::Turn, &[4]),
            at(Level::Turn, &[3, 5]),
        ];
        // A new episode starts from nothing shown.
        let second = vec![at(Level::Turn, &[4])];
        let episodes = [first.as_slice(), second.as_slice()];
        assert_eq!(turn_memories_shown_again(episodes.into_iter()), (6, 2));
    }
}
