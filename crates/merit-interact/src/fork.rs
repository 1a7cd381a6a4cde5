//! The counterfactual at a frozen turn (paper 003, Table 4): logged episodes are forked at
//! turn t, each fork replaying the same first t − 1 replies (so all reach the same state) and
//! then continuing with a different turn-level memory: none, or a selector's choice from the
//! same frozen memory. Each fork reports whether its next action (turn t) was valid and
//! whether the episode finally succeeded.
//!
//! Episode-level memory is off in every arm, so the arms differ only in the turn level. A
//! next action is *valid* when it is a known action that did what it was for
//! ([`crate::memory::turn::step_polarity`] is positive: no SQL error, no unknown action, no
//! unanswered question, no failed submission).

use crate::agent::{AgentError, NoMemory, ReactAgent};
use crate::backend::InteractBackend;
use crate::env::{EnvConfig, Environment};
use crate::error::InteractError;
use crate::memory::turn::step_polarity;
use crate::memory::{
    AdvisorConfig, InteractMemory, Polarity, RetrievalAdvisor, RetrievalConfig, Selector, StreamPos,
};
use crate::meta::DatabaseMeta;
use crate::runlog::EpisodeRecord;
use crate::simulator::UserSimulator;
use crate::task::{Task, TaskSet};
use merit_core::model::Embedder;
use merit_journal::jsonl::{self, Appender, JsonlError, Tail};
use merit_journal::resume::{Settled, Step};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// One arm of the counterfactual: its name and turn-level selector (`None`: no memory).
pub struct ForkArm<'a> {
    /// Shown in the table.
    pub name: String,
    /// The turn-level selector; `None` runs the fork without memory.
    pub selector: Option<&'a dyn Selector>,
}

/// The earliest turn a fork can freeze: turn-level memory is first consulted before turn 2
/// (the first turn has no intermediate state), so at turn 1 every arm would be the same.
pub const FIRST_FORK_TURN: usize = 2;

/// What to fork.
pub struct ForkSpec<'a> {
    /// The tasks of the logged episodes.
    pub set: &'a TaskSet,
    /// The logged episodes to fork; those with fewer than `turn` turns are skipped.
    pub records: &'a [EpisodeRecord],
    /// The frozen turn t (1-based): replies 1..t−1 are replayed, turn t is the first new one.
    /// Values below [`FIRST_FORK_TURN`] are read as it.
    pub turn: usize,
    /// The frozen memory the selectors choose from.
    pub memory: &'a InteractMemory,
    /// Embeds the states.
    pub embedder: &'a dyn Embedder,
    /// Stage sizes.
    pub retrieval: RetrievalConfig,
    /// Environment settings (those of the logged run).
    pub env: EnvConfig,
}

/// One fork's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkOutcome {
    /// The task.
    pub instance_id: String,
    /// The arm.
    pub arm: String,
    /// The frozen turn t the fork started from.
    pub turn: usize,
    /// Whether turn t's action was valid (see the module docs); false when the episode
    /// ended before it.
    pub next_action_valid: bool,
    /// Whether phase 1 was passed in the end.
    pub phase1_passed: bool,
    /// The final reward.
    pub reward: f64,
}

/// An arm's totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForkSummary {
    /// The arm.
    pub arm: String,
    /// Forks run.
    pub forks: usize,
    /// Share of forks whose next action was valid, in percent.
    pub valid_next_action: f64,
    /// Share of forks that passed phase 1, in percent.
    pub success: f64,
    /// Mean reward.
    pub mean_reward: f64,
}

/// Why a counterfactual run stopped. Forks already logged stay; rerun to continue.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The fork log could not be read or written.
    #[error(transparent)]
    Log(#[from] JsonlError),
    /// A fork failed (model backend down, database IO).
    #[error("fork of `{instance_id}` with {arm}: {source}")]
    Fork {
        /// The forked task.
        instance_id: String,
        /// The arm.
        arm: String,
        /// The failure.
        source: AgentError,
    },
}

/// What [`fork_episodes`] found and did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ForkRun {
    /// Every fork, episode by episode and, within one, in the order of the arms (whether it
    /// was found in the log or run now), so the table does not depend on where a run resumed.
    pub outcomes: Vec<ForkOutcome>,
    /// Forks found in the log and not run again.
    pub already_logged: usize,
    /// Forks run now.
    pub ran: usize,
}

/// Forks every logged episode of `spec.records` that reaches the frozen turn, once per arm
/// (see the module docs), keeping each fork in the JSONL file `log` as it finishes: forks are
/// minutes each with a local model, so a run killed at any point and started again with the
/// same log runs only the forks it does not hold (same task, arm and turn; lines for other
/// tasks, arms or turns are left alone). `make_backend` opens a fresh database per fork;
/// `make_simulator` builds the simulator (a cached model simulator repeats the logged answers
/// for the replayed turns); `on_fork` sees every fork as it is settled, with `true` when it
/// ran now.
#[allow(clippy::too_many_arguments)]
pub fn fork_episodes<B, S>(
    spec: &ForkSpec<'_>,
    agent: &ReactAgent,
    arms: &[ForkArm<'_>],
    log: &Path,
    make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError> + Send,
    make_simulator: impl FnMut(&Task) -> S + Send,
    mut on_fork: impl FnMut(&ForkOutcome, bool),
) -> Result<ForkRun, ForkError>
where
    B: InteractBackend,
    S: UserSimulator,
{
    let turn = spec.turn.max(FIRST_FORK_TURN);
    let parse = |raw: &[u8]| {
        if raw.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice::<ForkOutcome>(raw)
            .map(Some)
            .map_err(|e| e.to_string())
    };
    let (logged, ending) = jsonl::read_all(log, Tail::Torn, parse)?;
    let mut logged: BTreeMap<(String, String), ForkOutcome> = logged
        .into_iter()
        .filter(|o| o.turn == turn)
        .map(|o| ((o.instance_id.clone(), o.arm.clone()), o))
        .rev() // the first line of a pair logged twice wins
        .collect();
    let mut appender = Appender::resume(log, &ending)?;
    let pairs: Vec<(&EpisodeRecord, &ForkArm<'_>)> = spec
        .records
        .iter()
        .filter(|record| record.turns.len() >= turn)
        .flat_map(|record| arms.iter().map(move |arm| (record, arm)))
        .collect();
    // The engine's workers need `Sync` factories; forks run one at a time, so the lock is
    // never contended.
    let factories = Mutex::new((make_backend, make_simulator));
    let mut run = ForkRun::default();
    merit_journal::resume::drive(
        pairs.len(),
        1,
        |index| {
            let (record, arm) = pairs[index];
            Ok(
                match logged.remove(&(record.instance_id.clone(), arm.name.clone())) {
                    Some(outcome) => Step::Ready(outcome),
                    None => Step::Run(()),
                },
            )
        },
        |index, ()| {
            let (record, arm) = pairs[index];
            let mut factories = factories.lock().unwrap_or_else(|e| e.into_inner());
            let (make_backend, make_simulator) = &mut *factories;
            fork_one(spec, agent, arm, record, make_backend, make_simulator).map_err(|source| {
                ForkError::Fork {
                    instance_id: record.instance_id.clone(),
                    arm: arm.name.clone(),
                    source,
                }
            })
        },
        |_, settled| {
            match settled {
                Settled::Ready(outcome) => {
                    run.already_logged += 1;
                    on_fork(&outcome, false);
                    run.outcomes.push(outcome);
                }
                Settled::Ran(Some(outcome)) => {
                    appender.append_record(&outcome)?;
                    run.ran += 1;
                    on_fork(&outcome, true);
                    run.outcomes.push(outcome);
                }
                // The task or its database is not in the set: nothing to fork.
                Settled::Ran(None) => {}
            }
            Ok(())
        },
    )?;
    Ok(run)
}

/// The counterfactual's Markdown table: one row per arm of `summary`.
pub fn fork_table(summary: &[ForkSummary], turn: usize, episodes: usize, run: &str) -> String {
    let mut table = format!(
        "Forks at turn {turn} of the {episodes} logged episodes of {run} that reach it.\n\n\
         | turn memory | forks | valid next action % | success % | mean reward |\n\
         |---|---:|---:|---:|---:|\n"
    );
    for row in summary {
        table.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {:.3} |\n",
            row.arm, row.forks, row.valid_next_action, row.success, row.mean_reward
        ));
    }
    table
}

/// Forks one logged episode in one arm: `None` when the episode is shorter than the frozen
/// turn or its task (or database) is not in the set. The building block of
/// [`fork_episodes`].
pub fn fork_one<B, S>(
    spec: &ForkSpec<'_>,
    agent: &ReactAgent,
    arm: &ForkArm<'_>,
    record: &EpisodeRecord,
    mut make_backend: impl FnMut(&DatabaseMeta) -> Result<B, InteractError>,
    mut make_simulator: impl FnMut(&Task) -> S,
) -> Result<Option<ForkOutcome>, AgentError>
where
    B: InteractBackend,
    S: UserSimulator,
{
    let turn = spec.turn.max(FIRST_FORK_TURN);
    if record.turns.len() < turn {
        return Ok(None);
    }
    let Some(task) = spec.set.get(&record.instance_id) else {
        return Ok(None);
    };
    let Some(meta) = spec.set.database(task.database()) else {
        return Ok(None);
    };
    let prefix = &record.turns[..turn - 1];
    let mut env = Environment::new(
        task,
        Arc::clone(meta),
        make_backend(meta)?,
        make_simulator(task),
        spec.env.clone(),
    )?;
    let result = match arm.selector {
        None => agent.run_from_prefix(&mut env, &mut NoMemory, prefix)?,
        Some(selector) => {
            // The memory's end: every committed episode is an earlier one for the fork.
            let position = StreamPos(spec.memory.last_committed().map_or(0, |p| p.0 + 1));
            let mut advisor = RetrievalAdvisor::new(
                spec.memory,
                spec.embedder,
                selector,
                selector,
                AdvisorConfig {
                    episode_level: false,
                    turn_level: true,
                    episode_retrieval: spec.retrieval,
                    turn_retrieval: spec.retrieval,
                    // The fork compares the selectors' choice at one turn (the first after the
                    // prefix, where nothing has been shown yet); what follows is not scored.
                    turn_memories_once: false,
                },
                position,
            );
            agent.run_from_prefix(&mut env, &mut advisor, prefix)?
        }
    };
    let next = result.trajectory.steps.get(turn - 1);
    Ok(Some(ForkOutcome {
        instance_id: record.instance_id.clone(),
        arm: arm.name.clone(),
        turn,
        next_action_valid: next.is_some_and(|step| {
            crate::agent::parse::is_known_name(&step.action.name)
                && step_polarity(step) == Polarity::Positive
        }),
        phase1_passed: result.trajectory.outcome.phase1_passed,
        reward: result.trajectory.outcome.reward,
    }))
}

/// Totals per arm, in the order of `arms`.
pub fn summarise_forks(outcomes: &[ForkOutcome], arms: &[String]) -> Vec<ForkSummary> {
    arms.iter()
        .map(|arm| {
            let mine: Vec<&ForkOutcome> = outcomes.iter().filter(|o| &o.arm == arm).collect();
            let n = mine.len().max(1) as f64;
            ForkSummary {
                arm: arm.clone(),
                forks: mine.len(),
                valid_next_action: mine.iter().filter(|o| o.next_action_valid).count() as f64 / n
                    * 100.0,
                success: mine.iter().filter(|o| o.phase1_passed).count() as f64 / n * 100.0,
                mean_reward: mine.iter().map(|o| o.reward).sum::<f64>() / n,
            }
        })
        .collect()
}
