//! The Demo agent's static demonstrations (paper 003's "Demo Agent" baseline).
//!
//! BIRD-Interact ships fixed demonstrations for its own tasks; merit's generated task sets
//! have none, so the demonstrations are built the way the paper's baseline uses them, from a
//! fixed set of trajectories: the first `count` successful episodes of a training-split run's
//! log, in log order. Every episode gets the same text with its opening message (one
//! [`InjectionRecord`] at the episode level, selector `demo`, ids = indices in the log); a
//! demonstration of the very task being run is left out, so no episode sees its own
//! solution. Nothing is retrieved or learned, and there is no turn-level advice.

use super::Level;
use crate::agent::parse::render_turn;
use crate::agent::{AgentError, Injection, InjectionRecord, MemoryAdvisor};
use crate::env::TrajectoryStep;
use crate::prompts::fill;
use crate::runlog::EpisodeRecord;
use crate::task::PublicTask;
use std::fmt::Write as _;

/// The demonstrations' message, appended to the opening.
pub const AGENT_DEMOS: &str = include_str!("../../prompts/agent_demos.txt");

/// Turns shown per demonstration at most (the rest are counted).
const DEMO_TURNS: usize = 12;
/// Characters of one observation in a demonstration.
const DEMO_OBSERVATION_CHARS: usize = 240;

/// One demonstration: its source and its rendered text.
#[derive(Debug, Clone, PartialEq)]
struct Demo {
    /// Index of the record in the source log.
    index: u64,
    instance_id: String,
    text: String,
}

/// Fixed demonstrations for every episode (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct StaticDemos {
    demos: Vec<Demo>,
}

/// Why demonstrations could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// No demonstration was asked for.
    #[error("at least one demonstration must be asked for")]
    NoneAsked,
    /// The log holds no successful episode.
    #[error("the demonstration log holds no successful episode (of {records} records)")]
    NoSuccess {
        /// Records read.
        records: usize,
    },
}

impl StaticDemos {
    /// The first `count` successful episodes of `records` (a run's log, in order).
    pub fn from_records(records: &[EpisodeRecord], count: usize) -> Result<StaticDemos, DemoError> {
        if count == 0 {
            return Err(DemoError::NoneAsked);
        }
        let demos: Vec<Demo> = records
            .iter()
            .enumerate()
            .filter(|(_, record)| record.trajectory.outcome.reward > 0.0)
            .take(count)
            .map(|(index, record)| Demo {
                index: index as u64,
                instance_id: record.instance_id.clone(),
                text: render_demo(record),
            })
            .collect();
        if demos.is_empty() {
            return Err(DemoError::NoSuccess {
                records: records.len(),
            });
        }
        Ok(StaticDemos { demos })
    }

    /// The source tasks of the demonstrations, in order.
    pub fn instance_ids(&self) -> Vec<&str> {
        self.demos.iter().map(|d| d.instance_id.as_str()).collect()
    }
}

/// A demonstration: the request, then each turn as the agent wrote it (text-protocol form)
/// with the start of what it returned, then how it ended.
fn render_demo(record: &EpisodeRecord) -> String {
    let trajectory = &record.trajectory;
    let mut out = String::new();
    let _ = writeln!(out, "Database: {}", trajectory.task.selected_database);
    let _ = writeln!(out, "User question: {}", trajectory.task.amb_user_query);
    for step in trajectory.steps.iter().take(DEMO_TURNS) {
        let thought = step.thought.as_deref().unwrap_or("");
        let _ = writeln!(out, "{}", render_turn(thought, &step.action));
        let _ = writeln!(
            out,
            "Observation: {}",
            super::cut(&step.observation, DEMO_OBSERVATION_CHARS)
        );
    }
    let more = trajectory.steps.len().saturating_sub(DEMO_TURNS);
    if more > 0 {
        let _ = writeln!(out, "({more} more turns)");
    }
    let _ = write!(
        out,
        "Result: {}",
        super::episode::outcome_line(&trajectory.outcome)
    );
    out
}

impl MemoryAdvisor for StaticDemos {
    fn before_episode(&mut self, task: &PublicTask) -> Result<Option<Injection>, AgentError> {
        let shown: Vec<&Demo> = self
            .demos
            .iter()
            .filter(|demo| demo.instance_id != task.instance_id)
            .collect();
        let mut body = String::new();
        for (n, demo) in shown.iter().enumerate() {
            let _ = writeln!(body, "[Example {}]\n{}\n", n + 1, demo.text.trim_end());
        }
        let text = if body.is_empty() {
            String::new()
        } else {
            fill(AGENT_DEMOS.trim_end(), &[("demos", body.trim_end())])
        };
        let ids: Vec<u64> = shown.iter().map(|demo| demo.index).collect();
        Ok(Some(Injection {
            text,
            record: InjectionRecord {
                level: Level::Episode,
                turn: 0,
                candidates: ids.clone(),
                chosen: ids,
                chosen_features: Vec::new(),
                selector: "demo".to_string(),
                note: None,
            },
        }))
    }

    fn before_turn(
        &mut self,
        _task: &PublicTask,
        _steps: &[TrajectoryStep],
    ) -> Result<Option<Injection>, AgentError> {
        Ok(None)
    }
}
