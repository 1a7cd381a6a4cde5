//! Missed answers: in logged episodes that failed phase 1, the queries the agent ran with
//! `execute` that the phase-1 judge would have passed had the agent submitted them.
//!
//! Why: a small agent often finds the answer and then never submits it (it runs the same query
//! again until the budget is gone, or asks the user whether anything else is wanted), or
//! submits a different query. Success rates alone cannot tell that failure from never finding
//! the answer, and a memory arm can change either. Each distinct phase-1 query of a failed
//! episode is judged by the environment's own judge ([`Environment::would_pass_phase1`]: a
//! reset copy, nothing charged or told), so "would have passed" means exactly what a submit
//! would have earned. Phase 2 is left out: its follow-up appears only after a passing phase 1,
//! which these episodes never had.

use crate::runlog::EpisodeRecord;
use merit_interact_env::{
    ActionCall, DatabaseMeta, EnvConfig, Environment, InteractBackend, InteractError, Phase,
    Target, Task, TaskSet, UserSimulator,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one failed episode had among its phase-1 queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedEpisode {
    /// The task id.
    pub instance_id: String,
    /// Distinct phase-1 `execute` queries judged.
    pub queries_judged: usize,
    /// The first turn whose executed query would have passed, if any.
    pub first_passing_turn: Option<usize>,
    /// Whether the agent submitted anything in phase 1 after that turn (a different query,
    /// since the submission failed).
    pub submitted_after: bool,
}

/// A run's failed episodes, sorted by outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissedAnswers {
    /// The run's name as given.
    pub run: String,
    /// Episodes in the log.
    pub episodes: usize,
    /// Episodes that failed phase 1 and could be judged.
    pub failed: usize,
    /// Failed episodes whose task is not in the task set, or whose database is not there or
    /// cannot be opened: not judged.
    pub not_judged: usize,
    /// Failed episodes with at least one passing executed query.
    pub with_a_passing_query: usize,
    /// Of those, the episodes that submitted a different query afterwards.
    pub submitted_another: usize,
    /// Of those, the episodes that never submitted after it.
    pub never_submitted: usize,
    /// Every judged failed episode, in log order.
    pub details: Vec<FailedEpisode>,
}

/// The phase-1 `execute` queries of an episode, distinct, each with the first turn it ran at.
fn phase1_queries(record: &EpisodeRecord) -> Vec<(usize, &str)> {
    let mut first_turn: BTreeMap<&str, usize> = BTreeMap::new();
    for step in &record.trajectory.steps {
        if step.phase != Phase::One || !is_execute(&step.action) {
            continue;
        }
        if let Some(sql) = step.action.args.first() {
            first_turn.entry(sql.as_str()).or_insert(step.turn);
        }
    }
    let mut queries: Vec<(usize, &str)> = first_turn.into_iter().map(|(q, t)| (t, q)).collect();
    queries.sort();
    queries
}

fn is_execute(action: &ActionCall) -> bool {
    action.target == Target::Environment && action.name == "execute"
}

fn is_submit(action: &ActionCall) -> bool {
    action.target == Target::User && action.name == "submit"
}

/// Judges the failed episodes of one run. `make_backend` opens a task's database as the run
/// did; `make_simulator` only has to exist (the judge never asks the user).
pub fn missed_answers<B, S>(
    run: &str,
    set: &TaskSet,
    records: &[EpisodeRecord],
    env: &EnvConfig,
    mut make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError>,
    mut make_simulator: impl FnMut(&Task) -> S,
) -> Result<MissedAnswers, InteractError>
where
    B: InteractBackend,
    S: UserSimulator,
{
    let mut summary = MissedAnswers {
        run: run.to_string(),
        episodes: records.len(),
        failed: 0,
        not_judged: 0,
        with_a_passing_query: 0,
        submitted_another: 0,
        never_submitted: 0,
        details: Vec::new(),
    };
    for record in records {
        if record.trajectory.outcome.phase1_passed {
            continue;
        }
        let found = set
            .get(&record.instance_id)
            .and_then(|task| Some((task, set.database(task.database())?)));
        let Some((task, meta)) = found else {
            summary.not_judged += 1;
            continue;
        };
        // A database that cannot be opened here leaves its episodes unjudged, as a run skips
        // them; any other failure is an error.
        let opened = make_backend(meta).and_then(|backend| {
            Environment::new(
                task,
                Arc::clone(meta),
                backend,
                make_simulator(task),
                env.clone(),
            )
        });
        let mut environment = match opened {
            Ok(environment) => environment,
            Err(InteractError::DatabaseUnavailable { .. }) => {
                summary.not_judged += 1;
                continue;
            }
            Err(error) => return Err(error),
        };
        summary.failed += 1;
        let queries = phase1_queries(record);
        let mut first_passing_turn = None;
        for (turn, sql) in &queries {
            if environment.would_pass_phase1(sql)? {
                first_passing_turn = Some(*turn);
                break;
            }
        }
        let submitted_after = first_passing_turn.is_some_and(|passing| {
            record
                .trajectory
                .steps
                .iter()
                .any(|s| s.phase == Phase::One && s.turn > passing && is_submit(&s.action))
        });
        if first_passing_turn.is_some() {
            summary.with_a_passing_query += 1;
            if submitted_after {
                summary.submitted_another += 1;
            } else {
                summary.never_submitted += 1;
            }
        }
        summary.details.push(FailedEpisode {
            instance_id: record.instance_id.clone(),
            queries_judged: queries.len(),
            first_passing_turn,
            submitted_after,
        });
    }
    Ok(summary)
}

/// One Markdown row per run.
pub fn render_missed(runs: &[MissedAnswers]) -> String {
    let mut table = String::from(
        "| run | episodes | failed phase 1 (judged) | ran a query that would have passed | then submitted another | never submitted after it | not judged (task or database missing) |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs {
        table.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            run.run,
            run.episodes,
            run.failed,
            run.with_a_passing_query,
            run.submitted_another,
            run.never_submitted,
            run.not_judged
        ));
    }
    table.push_str(
        "\nEach distinct phase-1 `execute` query of a failed episode is judged by the environment's phase-1 judge, as a submit would have been (a reset copy of the database; nothing charged).\n",
    );
    table
}
