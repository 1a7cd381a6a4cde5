//! The dual-level memory of MERIT interact (paper 003, §5.1–5.2): episode-level memories of
//! finished attempts and turn-level memories of single steps, each retrieved in two stages
//! (embedding candidates, then a [`Selector`]).
//!
//! ```text
//! finished Trajectory ──► InsightExtractor (one model call, one retry) ──► Insight
//!          │                                                                  │
//!          └──────────────► InteractMemory::commit(position, trajectory, insight, embedder)
//!                                 ├─► episode bank: one EpisodeMemory (key: the request)
//!                                 └─► turn bank: one TurnMemory per step (key: the state signature)
//!
//! before an episode:  memory.episodes_at(t, id) ─► retrieve(query = request)    ─► ≤ N injected
//! before each turn:   memory.turns_at(t, id)    ─► retrieve(query = TurnState)  ─► ≤ N injected
//! ```
//!
//! # What is shared with the repair memory
//! One embedding, BM25 and causality layer serves both systems: cosine is
//! `merit_memory::retrieve::dot` over vectors scaled by `merit_memory::memory::normalized`,
//! BM25 is `merit_memory::retrieve::bm25_corpus_scores` (the same formula and parameters as the
//! repair retrieval, with the candidate set as the corpus), tokens are
//! `merit_memory::text::bm25_tokens`, and positions are `merit_memory::StreamPos`.
//!
//! # Invariants
//! - **Causality.** Every read goes through a [`BankView`] fixed at a stream position t and the
//!   current task instance: it sees only memories whose source episode was committed at a
//!   position before t, and never one from the same instance. Episodes are committed in stream
//!   order, each position at most once, and only once they have ended, so the current
//!   episode's own steps are in no memory while it runs.
//! - **Memories are built from trajectories only.** A [`Trajectory`] holds
//!   the public task and what the agent was shown; no hidden task field has a path into an
//!   entry (the integration tests plant markers in the ground truth and search the files).
//!   Entries have no public constructor (`#[non_exhaustive]`).
//! - **Files are append-only** (`episodes.jsonl`, `turns.jsonl`; one synced line per entry),
//!   see [`store`].
//!
//! # Where the learned selectors are
//! The PPO-trained selectors of §5.2 live in the `merit-learn` crate (`LearnedSelector`, which
//! keeps candle out of this crate). They implement [`Selector`] like the others:
//! [`SelectionInput`] carries the query embedding, every candidate's embedding and its
//! [`CandidateFeatures`] (with [`CandidateFeatures::to_array`] as a fixed layout for a policy
//! network), so a learned policy needs nothing else from this module.

pub mod advisor;
pub mod demo;
pub mod episode;
pub mod insight;
pub mod online;
pub mod retrieve;
pub mod select;
pub mod store;
pub mod topick;
pub mod turn;

pub use advisor::{AdvisorConfig, RetrievalAdvisor};
pub use demo::{DemoError, StaticDemos};
pub use episode::{EpisodeMemory, EpisodeQuery, EpisodeStep};
pub use insight::{InfoGap, Insight, InsightConfig, InsightExtractor, InsightOutcome};
pub use online::{MemRlSelector, MementoSelector, OnlineSelector};
pub use retrieve::{
    retrieve, retrieve_with_vector, Candidate, CandidateFeatures, MemoryQuery, RetrievalConfig,
    RetrievalError, Retrieved,
};
pub use select::{
    Bm25Selector, CosineSelector, Level, ModelSelector, SelectError, Selection, SelectionInput,
    Selector, SelectorCandidate,
};
pub use store::{Bank, BankView, LoadReport, MemoryRecord, EPISODE_FILE, TURN_FILE};
pub use topick::TopicKSelector;
pub use turn::{action_skeleton, mask_literals, TurnMemory, TurnState};

pub use merit_memory::{Polarity, StreamPos};

use crate::env::Trajectory;
use merit_core::model::{Embedder, ModelError};
use merit_journal::jsonl::JsonlError;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The template family of the memory prompts (insight extraction, the prompted selector);
/// bump it whenever a `memory_*.txt` template changes.
pub const MEMORY_PROMPT_FAMILY: &str = "merit-interact-memory-v1";

/// The `prompt_version` of a memory request made from template `name`.
pub fn memory_version(name: &str) -> String {
    format!("{MEMORY_PROMPT_FAMILY}/{name}")
}

/// Which finished episodes and steps are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Retention {
    /// Experience of successful trajectories only, as the paper keeps it: an episode that
    /// earned a reward becomes an episode memory, and its steps whose action did what it was
    /// for become turn memories; a failed episode leaves nothing. The default.
    ///
    /// A step that failed inside a successful episode is left out too: the paper uses
    /// "positive-only memories by default" (its implementation details) and describes the
    /// same setting as retrieving "only memories from successful trajectories" (Table 7);
    /// such a step is a negative memory from a successful trajectory, which only the first
    /// reading would exclude, so both are honoured by keeping positive steps of successful
    /// episodes. `All` keeps it, labelled negative.
    #[default]
    SuccessfulEpisodes,
    /// Positive memories from every episode: episodes that earned a reward, and the steps
    /// whose action did what it was for in any episode, failed ones included (merit's rule
    /// before issue 18; the name `positive_only` in older run settings means this).
    #[serde(alias = "positive_only")]
    PositiveSteps,
    /// Every episode and every step, each labelled with its polarity (the paper's Table 7
    /// comparison).
    All,
}

impl Retention {
    /// Whether a memory of `polarity` from an episode of `episode` polarity is kept.
    pub fn keeps(self, episode: Polarity, polarity: Polarity) -> bool {
        match self {
            Retention::SuccessfulEpisodes => {
                episode == Polarity::Positive && polarity == Polarity::Positive
            }
            Retention::PositiveSteps => polarity == Polarity::Positive,
            Retention::All => true,
        }
    }
}

/// Settings of memory writing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryConfig {
    /// Which memories are kept.
    pub retention: Retention,
    /// Observations are cut to this many characters in an episode memory.
    pub episode_observation_chars: usize,
    /// Observations and user answers are cut to this many characters in a turn memory.
    pub turn_observation_chars: usize,
}

impl Default for MemoryConfig {
    fn default() -> MemoryConfig {
        MemoryConfig {
            retention: Retention::SuccessfulEpisodes,
            episode_observation_chars: 400,
            turn_observation_chars: 300,
        }
    }
}

/// Why the memory could not be read, written or extended.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The journal file could not be read or written, or holds a bad line (the journals'
    /// one error type: a record that cannot be serialized is `Corrupt` at line 0).
    #[error(transparent)]
    Journal(#[from] JsonlError),
    /// The embedder failed.
    #[error("the embedder failed: {0}")]
    Embedding(#[from] ModelError),
    /// The embedder returned an unusable vector.
    #[error("bad vector: {0}")]
    Vector(String),
    /// Episodes must be committed in stream order, each position once.
    #[error("cannot commit stream position {position}: position {last} is already committed (episodes are committed in stream order, each once)")]
    OutOfOrder {
        /// The position offered.
        position: StreamPos,
        /// The last committed position.
        last: StreamPos,
    },
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> MemoryError + '_ {
    move |source| {
        MemoryError::Journal(JsonlError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// What one commit stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReport {
    /// Id of the episode memory, when one was kept.
    pub episode: Option<u64>,
    /// Ids of the turn memories kept.
    pub turns: Vec<u64>,
}

/// Both memory banks of one run, in memory or backed by a folder.
#[derive(Debug)]
pub struct InteractMemory {
    episodes: Bank<EpisodeMemory>,
    turns: Bank<TurnMemory>,
    config: MemoryConfig,
    /// The last committed stream position, including commits that kept nothing.
    last: Option<StreamPos>,
}

impl InteractMemory {
    /// An empty memory that lives only in this process.
    pub fn in_memory(embedder: &dyn Embedder, config: MemoryConfig) -> InteractMemory {
        InteractMemory {
            episodes: Bank::new(embedder.dimension()),
            turns: Bank::new(embedder.dimension()),
            config,
            last: None,
        }
    }

    /// Opens (creating when needed) the memory folder `dir`: `episodes.jsonl` and
    /// `turns.jsonl`, every entry re-embedded with `embedder` (vectors are not stored).
    pub fn open(
        dir: &Path,
        embedder: &dyn Embedder,
        config: MemoryConfig,
    ) -> Result<(InteractMemory, LoadReport), MemoryError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let mut report = LoadReport::default();
        let episodes = Bank::open(&dir.join(EPISODE_FILE), embedder, &mut report)?;
        let turns = Bank::open(&dir.join(TURN_FILE), embedder, &mut report)?;
        let last = episodes.last_position().max(turns.last_position());
        Ok((
            InteractMemory {
                episodes,
                turns,
                config,
                last,
            },
            report,
        ))
    }

    /// The settings.
    pub fn config(&self) -> &MemoryConfig {
        &self.config
    }

    /// The last committed stream position (a resumed run continues after it).
    pub fn last_committed(&self) -> Option<StreamPos> {
        self.last
    }

    /// Every episode memory, in commit order (for inspection; retrieval goes through views).
    pub fn episode_bank(&self) -> &Bank<EpisodeMemory> {
        &self.episodes
    }

    /// Every turn memory, in commit order.
    pub fn turn_bank(&self) -> &Bank<TurnMemory> {
        &self.turns
    }

    /// The episode memories an episode at stream position `position` on task `instance_id`
    /// may see.
    pub fn episodes_at<'m>(
        &'m self,
        position: StreamPos,
        instance_id: &'m str,
    ) -> BankView<'m, EpisodeMemory> {
        self.episodes.view_at(position, instance_id)
    }

    /// The turn memories an episode at stream position `position` on task `instance_id` may
    /// see.
    pub fn turns_at<'m>(
        &'m self,
        position: StreamPos,
        instance_id: &'m str,
    ) -> BankView<'m, TurnMemory> {
        self.turns.view_at(position, instance_id)
    }

    /// Turns a finished episode into memories: one episode memory (with `insight`, from
    /// [`InsightExtractor`]) and one turn memory per step, filtered by the retention rule,
    /// appended (and synced) before they become visible. Call it once the agent loop has
    /// returned (whatever ended it), never during the episode. `position` must follow every
    /// committed position.
    ///
    /// A crash between the two files can leave a position in one bank only; memory files
    /// are derived data, and a resumed run rebuilds them from the episode log.
    pub fn commit(
        &mut self,
        position: StreamPos,
        trajectory: &Trajectory,
        insight: Option<Insight>,
        embedder: &dyn Embedder,
    ) -> Result<CommitReport, MemoryError> {
        if let Some(last) = self.last {
            if position <= last {
                return Err(MemoryError::OutOfOrder { position, last });
            }
        }
        let retention = self.config.retention;
        let episode = EpisodeMemory::from_trajectory(position, trajectory, insight, &self.config);
        let turns: Vec<TurnMemory> =
            TurnMemory::from_trajectory(position, trajectory, &self.config)
                .into_iter()
                .filter(|t| retention.keeps(episode.polarity, t.polarity))
                .collect();
        let keep_episode = retention.keeps(episode.polarity, episode.polarity);
        // Turns first: the episode line is the last thing a commit writes.
        let turn_ids = self.turns.append(turns, embedder)?;
        let episode_id = if keep_episode {
            self.episodes.append(vec![episode], embedder)?.pop()
        } else {
            None
        };
        self.last = Some(position);
        Ok(CommitReport {
            episode: episode_id,
            turns: turn_ids,
        })
    }
}

/// Cuts `text` after `limit` characters, marking the cut.
pub(crate) fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!("{} …", text[..end].trim_end()),
        None => text.to_string(),
    }
}

/// An observation without the environment's bookkeeping lines (budget note, end notes),
/// which say nothing about the action's result.
pub(crate) fn observation_body(observation: &str) -> String {
    observation
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            !(line.starts_with("[Budget:")
                || line.starts_with("[Task finished.")
                || line.starts_with("The turn limit is reached;"))
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}
