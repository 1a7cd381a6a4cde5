//! The agent's memory advisor over the dual-level memory: two-stage retrieval before the
//! episode (episode level, keyed by the request) and before every turn (turn level, keyed by
//! the state signature), rendered with `agent_memory_episode.txt` / `agent_memory_turn.txt`.
//!
//! The advisor reads the memory through views fixed at the episode's stream position and task
//! instance, so it sees only episodes committed before this one and never one of the same
//! task; it never writes (the run commits once the episode has ended).

use super::episode::EpisodeQuery;
use super::retrieve::{retrieve, RetrievalConfig, Retrieved};
use super::select::{Level, Selector};
use super::store::MemoryRecord;
use super::turn::{TurnMemory, TurnState};
use super::{InteractMemory, Polarity, StreamPos};
use crate::agent::{AgentError, Injection, InjectionRecord, MemoryAdvisor};
use crate::env::TrajectoryStep;
use crate::prompts::fill;
use crate::task::PublicTask;
use merit_core::model::Embedder;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Appended to the opening message when episode memories are injected.
pub const AGENT_MEMORY_EPISODE: &str = include_str!("../../prompts/agent_memory_episode.txt");
/// Appended to the newest user message when turn memories are injected.
pub const AGENT_MEMORY_TURN: &str = include_str!("../../prompts/agent_memory_turn.txt");

/// Which levels are read and how much each injects (the paper's ablations switch a level off).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdvisorConfig {
    /// Retrieve episode memories before the episode.
    pub episode_level: bool,
    /// Retrieve turn memories before every turn.
    pub turn_level: bool,
    /// Stage sizes at the episode level.
    pub episode_retrieval: RetrievalConfig,
    /// Stage sizes at the turn level.
    pub turn_retrieval: RetrievalConfig,
    /// Show each turn memory at most once per episode: the turn level retrieves among the
    /// memories this episode has not been shown yet. The paper retrieves before every turn and
    /// is silent on repeats; with the 1.5B agent the state barely changes from one turn to the
    /// next, the same memory came back in 84% of turn retrievals of issue 18's cosine arm, and
    /// after a memory came back the agent repeated its last step 80-85% of the time (42-55%
    /// after one it had not seen). Off by default (the paper's plain retrieval); absent from
    /// configurations written before it, which read as off.
    #[serde(default)]
    pub turn_memories_once: bool,
}

impl Default for AdvisorConfig {
    fn default() -> AdvisorConfig {
        AdvisorConfig {
            episode_level: true,
            turn_level: true,
            episode_retrieval: RetrievalConfig::default(),
            turn_retrieval: RetrievalConfig::default(),
            turn_memories_once: false,
        }
    }
}

/// Serves one episode at stream position `position` from `memory`.
pub struct RetrievalAdvisor<'m> {
    memory: &'m InteractMemory,
    embedder: &'m dyn Embedder,
    episode_selector: &'m dyn Selector,
    turn_selector: &'m dyn Selector,
    config: AdvisorConfig,
    position: StreamPos,
    /// Turn memories injected so far in this episode, in order (read only with
    /// [`AdvisorConfig::turn_memories_once`]).
    shown_turn_memories: Vec<u64>,
}

impl std::fmt::Debug for RetrievalAdvisor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetrievalAdvisor")
            .field("episode_selector", &self.episode_selector.name())
            .field("turn_selector", &self.turn_selector.name())
            .field("config", &self.config)
            .field("position", &self.position)
            .field("shown_turn_memories", &self.shown_turn_memories)
            .finish()
    }
}

impl<'m> RetrievalAdvisor<'m> {
    /// An advisor for the episode at `position`.
    pub fn new(
        memory: &'m InteractMemory,
        embedder: &'m dyn Embedder,
        episode_selector: &'m dyn Selector,
        turn_selector: &'m dyn Selector,
        config: AdvisorConfig,
        position: StreamPos,
    ) -> RetrievalAdvisor<'m> {
        RetrievalAdvisor {
            memory,
            embedder,
            episode_selector,
            turn_selector,
            config,
            position,
            shown_turn_memories: Vec::new(),
        }
    }
}

/// The record of a retrieval at `turn` (0: episode level).
fn record_of<R: MemoryRecord>(
    level: Level,
    turn: usize,
    found: &Retrieved<'_, R>,
) -> InjectionRecord {
    InjectionRecord {
        level,
        turn,
        candidates: found.candidates.iter().map(|c| c.entry.id()).collect(),
        chosen: found.injected().map(|c| c.entry.id()).collect(),
        chosen_features: found.injected().map(|c| c.features).collect(),
        selector: found.selector.clone(),
        note: found.note.clone(),
    }
}

fn memory_error(error: impl std::fmt::Display) -> AgentError {
    AgentError::Memory(error.to_string())
}

/// The turn-level hint for the chosen steps.
pub fn render_turn_hint<'a>(chosen: impl IntoIterator<Item = &'a TurnMemory>) -> String {
    let mut body = String::new();
    let (mut positive, mut negative) = (false, false);
    for (n, memory) in chosen.into_iter().enumerate() {
        let label = match memory.polarity {
            Polarity::Positive => {
                positive = true;
                "POSITIVE"
            }
            Polarity::Negative => {
                negative = true;
                "NEGATIVE"
            }
        };
        let _ = writeln!(
            body,
            "[{}] action: {}\n    result: {}\n    outcome: {label}",
            n + 1,
            memory.action_skeleton,
            memory.result.replace('\n', "\n    ")
        );
    }
    if body.is_empty() {
        return String::new();
    }
    // Not "worth repeating", which can be read as "repeat your last step": the 1.5B agent
    // already repeats its last step word for word in over half its turns.
    let advice = match (positive, negative) {
        (true, false) => "it worked there; consider a step like it now",
        (false, true) => "it failed there; avoid a step like it",
        _ => "follow or avoid each as marked",
    };
    fill(
        AGENT_MEMORY_TURN.trim_end(),
        &[("advice", advice), ("memories", body.trim_end())],
    )
}

impl MemoryAdvisor for RetrievalAdvisor<'_> {
    fn before_episode(&mut self, task: &PublicTask) -> Result<Option<Injection>, AgentError> {
        if !self.config.episode_level {
            return Ok(None);
        }
        let view = self.memory.episodes_at(self.position, &task.instance_id);
        let query = EpisodeQuery {
            request: task.amb_user_query.clone(),
        };
        let found = retrieve(
            &view,
            &query,
            self.embedder,
            self.episode_selector,
            &self.config.episode_retrieval,
        )
        .map_err(memory_error)?;
        let mut body = String::new();
        for (n, candidate) in found.injected().enumerate() {
            let _ = writeln!(
                body,
                "[{}] {}",
                n + 1,
                candidate.entry.summary().replace('\n', "\n    ")
            );
        }
        let text = if body.is_empty() {
            String::new()
        } else {
            fill(
                AGENT_MEMORY_EPISODE.trim_end(),
                &[("memories", body.trim_end())],
            )
        };
        Ok(Some(Injection {
            text,
            record: record_of(Level::Episode, 0, &found),
        }))
    }

    fn before_turn(
        &mut self,
        task: &PublicTask,
        steps: &[TrajectoryStep],
    ) -> Result<Option<Injection>, AgentError> {
        if !self.config.turn_level {
            return Ok(None);
        }
        let excluded: &[u64] = if self.config.turn_memories_once {
            &self.shown_turn_memories
        } else {
            &[]
        };
        let view = self
            .memory
            .turns_at(self.position, &task.instance_id)
            .excluding(excluded);
        // The same function builds stored states, so live and stored states compare directly.
        let state = TurnState::at(task, steps, self.memory.config().turn_observation_chars);
        let found = retrieve(
            &view,
            &state,
            self.embedder,
            self.turn_selector,
            &self.config.turn_retrieval,
        )
        .map_err(memory_error)?;
        let injection = Injection {
            text: render_turn_hint(found.injected().map(|c| c.entry)),
            record: record_of(Level::Turn, steps.len() + 1, &found),
        };
        self.shown_turn_memories
            .extend_from_slice(&injection.record.chosen);
        Ok(Some(injection))
    }
}
