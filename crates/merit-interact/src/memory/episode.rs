//! Episode-level memories: one finished attempt, its outcome and the lessons drawn from it,
//! keyed by the embedding of the user's request.

use super::insight::Insight;
use super::retrieve::MemoryQuery;
use super::store::MemoryRecord;
use super::turn::action_skeleton;
use super::{cut, Level, MemoryConfig, Polarity, StreamPos};
use crate::action::ActionCall;
use crate::env::{Outcome, Trajectory};
use crate::simulator::Phase;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The `format` of every episode memory this version writes.
pub const EPISODE_MEMORY_FORMAT: &str = "merit-interact-memory-episode-v1";

/// Actions listed in an episode summary at most (the rest are counted).
const SUMMARY_ACTIONS: usize = 12;
/// Characters of one action skeleton in a summary.
const SUMMARY_ACTION_CHARS: usize = 160;

/// One step of a stored episode: the action and (the start of) what it returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodeStep {
    /// 1-based agent call number.
    pub turn: usize,
    /// The phase it was taken in.
    pub phase: Phase,
    /// The action, as the agent wrote it.
    pub action: ActionCall,
    /// The observation, cut to [`MemoryConfig::episode_observation_chars`].
    pub observation: String,
}

/// A finished attempt as remembered. Built only from a [`Trajectory`] (public by
/// construction) by [`super::InteractMemory::commit`], or read back from a memory file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct EpisodeMemory {
    /// [`EPISODE_MEMORY_FORMAT`].
    pub format: String,
    /// Commit order within the episode bank.
    pub id: u64,
    /// The source task.
    pub instance_id: String,
    /// Its database.
    pub database: String,
    /// Stream position of the source episode.
    pub stream_pos: StreamPos,
    /// Positive when the episode earned a reward.
    pub polarity: Polarity,
    /// The user's request as the agent saw it (the retrieval key).
    pub request: String,
    /// Every step.
    pub steps: Vec<EpisodeStep>,
    /// How it ended.
    pub outcome: Outcome,
    /// The lessons drawn by the insight model; `None` when it gave no usable answer.
    pub insight: Option<Insight>,
}

impl EpisodeMemory {
    pub(crate) fn from_trajectory(
        position: StreamPos,
        trajectory: &Trajectory,
        insight: Option<Insight>,
        config: &MemoryConfig,
    ) -> EpisodeMemory {
        EpisodeMemory {
            format: EPISODE_MEMORY_FORMAT.to_string(),
            id: 0,
            instance_id: trajectory.task.instance_id.clone(),
            database: trajectory.task.selected_database.clone(),
            stream_pos: position,
            polarity: if trajectory.outcome.reward > 0.0 {
                Polarity::Positive
            } else {
                Polarity::Negative
            },
            request: trajectory.task.amb_user_query.clone(),
            steps: trajectory
                .steps
                .iter()
                .map(|step| EpisodeStep {
                    turn: step.turn,
                    phase: step.phase,
                    action: step.action.clone(),
                    observation: cut(&step.observation, config.episode_observation_chars),
                })
                .collect(),
            outcome: trajectory.outcome,
            insight,
        }
    }
}

/// One line on how an episode ended, for summaries and the insight prompt.
pub(crate) fn outcome_line(outcome: &Outcome) -> String {
    let result = match (outcome.phase1_passed, outcome.phase2_passed) {
        (true, true) => "solved both phases",
        (true, false) => "solved phase 1 only",
        _ => "not solved",
    };
    format!(
        "{result} (reward {}) after {} turns, {} coins spent, ended: {:?}",
        outcome.reward, outcome.turns, outcome.budget_spent, outcome.end
    )
}

impl MemoryRecord for EpisodeMemory {
    const FORMAT: &'static str = EPISODE_MEMORY_FORMAT;
    const LEVEL: Level = Level::Episode;

    fn format(&self) -> &str {
        &self.format
    }
    fn id(&self) -> u64 {
        self.id
    }
    fn set_id(&mut self, id: u64) {
        self.id = id;
    }
    fn stream_pos(&self) -> StreamPos {
        self.stream_pos
    }
    fn instance_id(&self) -> &str {
        &self.instance_id
    }
    fn polarity(&self) -> Polarity {
        self.polarity
    }
    fn episode_reward(&self) -> f64 {
        self.outcome.reward
    }

    fn key_text(&self) -> String {
        self.request.clone()
    }

    fn lexical_text(&self) -> String {
        let mut text = self.request.clone();
        if let Some(insight) = &self.insight {
            for line in insight.worked.iter().chain(&insight.failed) {
                text.push('\n');
                text.push_str(line);
            }
            text.push('\n');
            text.push_str(&insight.key_insight);
        }
        text
    }

    fn summary(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "request: {}", self.request);
        let _ = writeln!(out, "database: {}", self.database);
        let _ = writeln!(out, "result: {}", outcome_line(&self.outcome));
        let skeletons = self
            .steps
            .iter()
            .map(|s| cut(&action_skeleton(&s.action), SUMMARY_ACTION_CHARS));
        let _ = writeln!(out, "actions: {}", action_line(skeletons, SUMMARY_ACTIONS));
        if let Some(insight) = &self.insight {
            if !insight.worked.is_empty() {
                let _ = writeln!(out, "worked: {}", insight.worked.join("; "));
            }
            if !insight.failed.is_empty() {
                let _ = writeln!(out, "failed: {}", insight.failed.join("; "));
            }
            let _ = writeln!(out, "key insight: {}", insight.key_insight);
            for gap in &insight.info_gaps {
                let _ = writeln!(
                    out,
                    "clarified ({}): {} -> {}",
                    gap.key, gap.question, gap.answer
                );
            }
        }
        out.trim_end().to_string()
    }
}

/// The actions of an episode summary: at most `limit` entries joined by arrows, a run of
/// word-for-word equal consecutive steps shown once with its count, and the steps left out
/// counted. The small agent's episodes are full of such runs (one stored success called
/// `get_all_column_meanings()` three times in a row, twice), and a prompt that shows a loop
/// invites the agent reading it to loop too.
fn action_line(skeletons: impl IntoIterator<Item = String>, limit: usize) -> String {
    let mut runs: Vec<(String, usize)> = Vec::new();
    for skeleton in skeletons {
        match runs.last_mut() {
            Some((last, count)) if *last == skeleton => *count += 1,
            _ => runs.push((skeleton, 1)),
        }
    }
    let mut line = runs
        .iter()
        .take(limit)
        .map(|(skeleton, count)| match count {
            1 => skeleton.clone(),
            _ => format!("{skeleton} (×{count} in a row)"),
        })
        .collect::<Vec<_>>()
        .join(" -> ");
    let more: usize = runs.iter().skip(limit).map(|(_, count)| count).sum();
    if more > 0 {
        let _ = write!(line, " -> … ({more} more)");
    }
    line
}

/// What the episode level is asked before an episode starts: the new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpisodeQuery {
    /// The user's request as the agent sees it.
    pub request: String,
}

impl MemoryQuery for EpisodeQuery {
    fn key_text(&self) -> String {
        self.request.clone()
    }
    fn lexical_text(&self) -> String {
        self.request.clone()
    }
    fn prompt_text(&self) -> String {
        self.request.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::action_line;

    fn line(steps: &[&str], limit: usize) -> String {
        action_line(steps.iter().map(|s| s.to_string()), limit)
    }

    #[test]
    fn a_run_of_equal_steps_is_shown_once_with_its_count() {
        assert_eq!(
            line(
                &["GET_SCHEMA", "MEANINGS", "MEANINGS", "MEANINGS", "SUBMIT"],
                12
            ),
            "GET_SCHEMA -> MEANINGS (×3 in a row) -> SUBMIT"
        );
        // Equal steps apart from each other are separate entries.
        assert_eq!(line(&["A", "B", "A"], 12), "A -> B -> A");
        assert_eq!(line(&[], 12), "");
    }

    #[test]
    fn steps_past_the_limit_are_counted_not_listed() {
        // Three entries shown; the two entries left out hold four steps.
        assert_eq!(
            line(&["A", "B", "B", "C", "D", "D", "D", "E"], 3),
            "A -> B (×2 in a row) -> C -> … (4 more)"
        );
    }
}
