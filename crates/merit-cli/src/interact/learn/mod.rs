//! The learned parts of MERIT interact on the command line: teacher annotations for the
//! process reward model (`merit interact prm annotate`), the student PRM and its agreement
//! table (`merit interact prm train`), and the PPO selectors (`merit interact train-selector`).
//!
//! Every model call goes through the reply cache, and every random draw comes from a seeded
//! generator, so running a command again replays it: that is how an interrupted annotation
//! or training continues (annotation files are also appended to and skip what they hold).

mod counterfactual;
mod prm;
mod selector;

pub use counterfactual::{counterfactual, CounterfactualArgs};
pub use prm::{prm, PrmCommand};
pub use selector::{score_selector, train_selector, ScoreSelectorArgs, TrainSelectorArgs};

use anyhow::{bail, Context, Result};
use clap::Args;
use merit_core::model::Embedder;
use merit_interact::agent::AgentConfig;
use merit_interact::memory::{InteractMemory, MemoryConfig};
use std::path::Path;

/// What one episode of the agent may cost: the same options for runs, selector training and
/// counterfactual forks, so that a selector trains on episodes like those it is evaluated on.
#[derive(Debug, Clone, Copy, Args)]
pub struct AgentBudgetArgs {
    /// Model calls per episode at most (the protocol's 60; fewer bounds what a small model
    /// that never submits costs).
    #[arg(long, default_value_t = merit_interact::env::DEFAULT_MAX_TURNS)]
    pub max_turns: usize,
    /// Observations are cut to this many characters in the agent's prompt (the log keeps them
    /// whole).
    #[arg(long, default_value_t = 12_000)]
    pub observation_chars: usize,
    /// Tokens one agent reply may generate (a small model that runs on past its action
    /// otherwise spends the whole allowance on every turn).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    /// Fold a word-for-word repeated action into a numbered note instead of a new turn of the
    /// conversation (small models under greedy decoding otherwise copy it until the budget is
    /// gone).
    #[arg(long)]
    pub fold_repeats: bool,
    /// Before taking an action the episode already took word for word, ask the model once
    /// more with a note (the repeat is not taken and costs no budget; text protocol only).
    #[arg(long)]
    pub repeat_guard: bool,
    /// Sampling temperature of the repeat guard's second call (0: greedy, as every other
    /// call; greedy, a small model mostly writes the same repeat again). Seeded with
    /// --sample-seed where the command has it.
    #[arg(long, default_value_t = 0.0, requires = "repeat_guard", value_parser = crate::args::sampling_temperature)]
    pub repeat_guard_temperature: f32,
    /// When the budget is spent and the model's next action is not a submit (which ends the
    /// task unsubmitted), submit the phase's newest query that ran without an error instead.
    #[arg(long)]
    pub forced_submit_fallback: bool,
    /// Show the schema with the opening message (a deviation from BIRD-Interact, whose agent
    /// must spend a `get_schema()` first).
    #[arg(long)]
    pub schema_in_opening: bool,
}

impl AgentBudgetArgs {
    /// The agent configuration these options give (text or native actions as the default).
    pub fn agent_config(&self) -> AgentConfig {
        AgentConfig {
            max_turns: self.max_turns,
            observation_chars: self.observation_chars,
            max_tokens: self.max_tokens,
            fold_repeats: self.fold_repeats,
            repeat_guard: self.repeat_guard,
            repeat_guard_temperature: self.repeat_guard_temperature,
            forced_submit_fallback: self.forced_submit_fallback,
            schema_in_opening: self.schema_in_opening,
            ..AgentConfig::default()
        }
    }
}

pub(super) fn open_memory(dir: &Path, embedder: &dyn Embedder) -> Result<InteractMemory> {
    if !dir.join(merit_interact::memory::EPISODE_FILE).is_file()
        && !dir.join(merit_interact::memory::TURN_FILE).is_file()
    {
        bail!(
            "{} holds no memory files (episodes.jsonl, turns.jsonl); make one with `merit interact run --memory ...`",
            dir.display()
        );
    }
    let (memory, report) = InteractMemory::open(dir, embedder, MemoryConfig::default())
        .with_context(|| format!("cannot open the memory {}", dir.display()))?;
    let _ = report;
    Ok(memory)
}
