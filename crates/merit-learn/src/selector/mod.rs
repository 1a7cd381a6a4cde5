//! PPO-trained memory selectors (paper 003, §5.2 and appendix C).
//!
//! Retrieval in MERIT interact has two stages: the embedding stage keeps the 10 nearest
//! memories, then a *selector* decides which of them (usually at most one, possibly none) is
//! injected into the agent's prompt. The paper learns that selector with PPO at both memory
//! levels: the episode-level selector is rewarded with the episode's terminal reward, the
//! turn-level one with the process reward model's score of the chosen state–memory pair.
//! This module is that machinery, once, for both levels: an episode selector and a turn
//! selector are two [`SelectorPolicy`] checkpoints of the same network.
//!
//! ```text
//!  SelectionInput (retrieval) ──► SelectionExample (owned) ──► PpoTrainer::act ──► Decision
//!                                                                                     │
//!      reward later (episode: terminal reward; turn: PRM score) ──► Transition ◄──────┘
//!                                                                       │
//!                            PpoTrainer::update(&[Transition]) ◄────────┘ ──► UpdateStats
//!                                         │
//!          PpoTrainer::save ──► <name>.safetensors + <name>.json ──► SelectorPolicy::load
//!                                                                        │
//!                                                   LearnedSelector (merit_interact Selector)
//! ```
//!
//! # The network
//! Each candidate *i* becomes one input row (`3·d + 8` numbers for embedding dimension *d*):
//!
//! | block | size | why |
//! |---|---|---|
//! | `d · (q ⊙ cᵢ)` | d | which directions query and memory agree on (their sum is the cosine) |
//! | `√d · \|q − cᵢ\|` | d | where they differ |
//! | `√d · cᵢ` | d | what the memory is about, independently of the query |
//! | [`CandidateFeatures::to_array`] | 8 | rank, cosine, BM25, polarity, source reward, age |
//!
//! The scale factors make every block's entries O(1) for unit vectors, whatever *d* is. A
//! features-only network ([`SelectorInputs::Features`]) reads the last block alone. A
//! shared trunk (two `tanh` layers of [`SelectorConfig::hidden`] units) maps each row to a
//! hidden state *hᵢ*; a linear policy head gives one logit per candidate. The pooled state
//! *p* (mean of the *hᵢ*; zero when there is no candidate) gives the learned **"inject
//! nothing"** logit (a linear head, so "none" can depend on how good the candidates look as
//! a whole) and, through a small MLP, the value *V(s)* used as the PPO baseline. The policy
//! is the softmax over `[none, candidate 1, …, candidate K]`; padding in a batch is masked.
//! The policy and none heads start near zero, so an untrained policy is close to uniform.
//!
//! # PPO
//! Each selection is a one-step decision (a contextual bandit): its return is its reward,
//! and its advantage is `reward − V(s)` (normalised over the batch). One [`PpoTrainer::update`]
//! runs [`PpoConfig::ppo_epochs`] passes over the batch in shuffled mini-batches of
//! [`PpoConfig::mini_batch`], one AdamW step each, minimising
//!
//! ```text
//! L = −E[min(r·A, clip(r, 1−ε, 1+ε)·A)] + c_v·E[(V − R)²] − c_e·E[H(π)] + β·E[KL(π ‖ π_ref)]
//! ```
//!
//! with `r = π(a|s) / π_old(a|s)`, ε = 0.2, c_v = 0.2, c_e = 0.01 and β starting at 0.02 (the
//! paper's values). The KL term is computed exactly over all options (there are at most
//! K + 1), against the *reference policy*: the network the trainer started from (the initial
//! weights, or the checkpoint training resumed from), frozen. β is fixed by default
//! ([`KlControl::Fixed`]); [`KlControl::Adaptive`] is the controller of Ziegler et al. (2019):
//! after each update `β ← β·(1 + clip(KL/target − 1, −0.2, 0.2)·n/horizon)` for a batch of
//! *n* transitions, where KL is the updated policy's mean exact KL from the reference on that
//! batch ([`UpdateStats::kl_after`]).
//!
//! Everything random comes from seeded `ChaCha8Rng`s: the weights from the seed, the
//! mini-batch order from a second stream of the same seed, the actions from the caller's
//! generator. candle's own initialisers are not used, because they draw from an unseeded
//! generator. candle's CPU kernels give the same bits for the same shapes, so a training run
//! is bit-reproducible for a seed on one machine and build. A CPU with other SIMD kernels may
//! round differently.
//!
//! # Deviations from the paper
//! - **A small network instead of a LoRA-tuned 4B LLM.** The paper's selectors are
//!   Qwen3-4B-Instruct with LoRA, reading the state and text summaries of the candidates.
//!   Here the policy reads only what the retrieval already computes (unit embeddings and the
//!   eight [`CandidateFeatures`]), with one hidden size of 64 by default: it trains in seconds
//!   on a CPU and needs no GPU, but it cannot read the memories' text.
//! - **CPU, candle, f32.** No Ray, no rollout workers; rollouts are batched forwards.
//! - **Learning rate 1e-3 instead of 1e-7.** 1e-7 is a LoRA rate for a 4B model; a freshly
//!   initialised network of about 83k parameters (at d = 384) trained with AdamW needs an
//!   ordinary rate ([`PpoConfig::default`]). Weight decay is AdamW's default 0.01.
//! - **Batch sizes.** The paper's batch of 128 rollouts is the number of transitions passed
//!   to one [`PpoTrainer::update`] (the caller decides; [`PAPER_BATCH_SIZE`]), its mini-batch
//!   16 and PPO epoch count 2 are the defaults; "4 epochs" over the training data is the
//!   caller's loop.
//! - **The reference policy is the starting network.** For the paper it is the pretrained
//!   LLM, a meaningful prior. Trained from scratch, the reference is the near-uniform initial
//!   network, so the KL term mostly keeps the policy from collapsing early (like a second
//!   entropy bonus); resuming from a checkpoint makes that checkpoint the prior.
//! - **Single-step returns, no GAE, unclipped value loss, no gradient clipping.** With one
//!   decision per reward there is nothing to discount or bootstrap.
//! - **The optimizer state is not checkpointed.** A checkpoint is the policy (what inference
//!   needs); resuming training restarts AdamW's moments.

mod checkpoint;
mod learned;
mod net;
mod policy;
mod ppo;
mod shift;

pub use checkpoint::{Sidecar, CHECKPOINT_FORMAT};
pub use learned::LearnedSelector;
pub use policy::{OptionProbabilities, SelectorPolicy, TrainingInfo};
pub use ppo::PpoTrainer;
pub use shift::{decision_shift, DecisionShift};

use merit_interact::memory::{CandidateFeatures, Level, SelectionInput};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The paper's PPO batch size: transitions per [`PpoTrainer::update`] it was trained with.
pub const PAPER_BATCH_SIZE: usize = 128;

/// The largest embedding dimension accepted (guards allocations against a corrupt sidecar).
pub const MAX_EMBEDDING_DIM: usize = 8192;

/// The largest hidden size accepted.
pub const MAX_HIDDEN: usize = 4096;

/// The shape of a selector network; stored in every checkpoint's sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectorConfig {
    /// The memory level the selector is for (episode and turn selectors are separate
    /// checkpoints).
    pub level: Level,
    /// Length of the query and candidate embeddings (384 for all-MiniLM-L6-v2).
    pub embedding_dim: usize,
    /// Width of the hidden layers.
    pub hidden: usize,
    /// What each candidate's input row holds (checkpoints from before this field read as
    /// [`SelectorInputs::Full`], the only network they could be).
    #[serde(default)]
    pub inputs: SelectorInputs,
}

/// What a selector network reads about each candidate.
///
/// The full row lets the network learn *which* memories help *which* states, but its
/// `3·d` embedding entries dwarf the eight features; trained on the few hundred logged
/// states a CPU run produces, it fits the training states and not new ones (the full
/// MERIT arm of `docs/results/interact` skips memory at 26% of its training states and 6%
/// of unseen ones). The features-only row is the small-data alternative: a policy over
/// how good the match looks (rank, cosine, BM25, polarity, source reward, age), with
/// `8·h + h² + …` parameters instead of `(3d + 8)·h + …`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SelectorInputs {
    /// Embedding blocks and retrieval features (`3·d + 8` numbers; the default).
    #[default]
    Full,
    /// The eight retrieval features only.
    Features,
}

impl SelectorConfig {
    /// A configuration for `level` and embedding dimension `embedding_dim`, hidden size 64.
    pub fn new(level: Level, embedding_dim: usize) -> SelectorConfig {
        SelectorConfig {
            level,
            embedding_dim,
            hidden: 64,
            inputs: SelectorInputs::Full,
        }
    }

    /// The same configuration reading `inputs`.
    pub fn with_inputs(self, inputs: SelectorInputs) -> SelectorConfig {
        SelectorConfig { inputs, ..self }
    }

    /// Checks the sizes.
    pub fn validate(&self) -> Result<(), LearnError> {
        if !(1..=MAX_EMBEDDING_DIM).contains(&self.embedding_dim) {
            return Err(LearnError::Config(format!(
                "the embedding dimension must be 1 to {MAX_EMBEDDING_DIM}, not {}",
                self.embedding_dim
            )));
        }
        if !(1..=MAX_HIDDEN).contains(&self.hidden) {
            return Err(LearnError::Config(format!(
                "the hidden size must be 1 to {MAX_HIDDEN}, not {}",
                self.hidden
            )));
        }
        Ok(())
    }

    /// Length of one candidate's input row: `3·embedding_dim + CandidateFeatures::LEN`, or
    /// `CandidateFeatures::LEN` for a features-only network.
    pub fn input_len(&self) -> usize {
        match self.inputs {
            SelectorInputs::Full => 3 * self.embedding_dim + CandidateFeatures::LEN,
            SelectorInputs::Features => CandidateFeatures::LEN,
        }
    }
}

/// How the KL coefficient β evolves (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KlControl {
    /// β stays at this value.
    Fixed {
        /// β.
        coef: f64,
    },
    /// Ziegler et al.'s proportional controller towards a target KL.
    Adaptive {
        /// β before the first update.
        initial: f64,
        /// The KL (nats per decision) the controller steers towards.
        target: f64,
        /// Transitions over which β may change by a factor of about e^0.2.
        horizon: f64,
    },
}

impl KlControl {
    /// β before the first update.
    pub fn initial(&self) -> f64 {
        match *self {
            KlControl::Fixed { coef } => coef,
            KlControl::Adaptive { initial, .. } => initial,
        }
    }
}

/// PPO settings (the defaults are the paper's where it gives them; see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PpoConfig {
    /// AdamW learning rate (default 1e-3; the paper's 1e-7 is for LoRA on a 4B model).
    pub learning_rate: f64,
    /// AdamW decoupled weight decay (default 0.01).
    pub weight_decay: f64,
    /// Passes over each batch (the paper's "PPO epoch count": 2).
    pub ppo_epochs: usize,
    /// Transitions per optimizer step (the paper's 16).
    pub mini_batch: usize,
    /// Clipping range ε of the probability ratio (0.2).
    pub clip: f64,
    /// Value-loss coefficient c_v (0.2).
    pub value_coef: f64,
    /// Entropy-bonus coefficient c_e (0.01).
    pub entropy_coef: f64,
    /// The KL penalty against the reference policy (fixed β = 0.02 by default).
    pub kl: KlControl,
    /// Whether advantages are normalised to mean 0 and standard deviation 1 per update.
    pub normalize_advantages: bool,
}

impl Default for PpoConfig {
    fn default() -> PpoConfig {
        PpoConfig {
            learning_rate: 1e-3,
            weight_decay: 0.01,
            ppo_epochs: 2,
            mini_batch: 16,
            clip: 0.2,
            value_coef: 0.2,
            entropy_coef: 0.01,
            kl: KlControl::Fixed { coef: 0.02 },
            normalize_advantages: true,
        }
    }
}

impl PpoConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), LearnError> {
        let bad = |what: &str, value: f64| {
            Err(LearnError::Config(format!("invalid PPO {what}: {value}")))
        };
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad("learning rate", self.learning_rate);
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad("weight decay", self.weight_decay);
        }
        if !(self.clip.is_finite() && self.clip > 0.0 && self.clip < 1.0) {
            return bad("clipping range", self.clip);
        }
        for (what, value) in [
            ("value coefficient", self.value_coef),
            ("entropy coefficient", self.entropy_coef),
            ("initial KL coefficient", self.kl.initial()),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return bad(what, value);
            }
        }
        if let KlControl::Adaptive {
            target, horizon, ..
        } = self.kl
        {
            if !(target.is_finite() && target > 0.0) {
                return bad("KL target", target);
            }
            if !(horizon.is_finite() && horizon > 0.0) {
                return bad("KL horizon", horizon);
            }
        }
        if self.ppo_epochs == 0 || self.mini_batch == 0 {
            return Err(LearnError::Config(
                "PPO needs at least one epoch and a mini-batch of at least one".into(),
            ));
        }
        Ok(())
    }
}

/// One candidate of a [`SelectionExample`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExampleCandidate {
    /// The memory's unit key vector.
    pub embedding: Vec<f32>,
    /// Its retrieval features.
    pub features: CandidateFeatures,
}

/// An owned selection problem: what the trainer acts on and a transition keeps until its
/// reward arrives (a [`SelectionInput`] borrows from the memory bank, which may change).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectionExample {
    /// Episode or turn level.
    pub level: Level,
    /// The unit embedding of the query's key text.
    pub query_embedding: Vec<f32>,
    /// The candidates, in embedding rank order.
    pub candidates: Vec<ExampleCandidate>,
}

impl SelectionExample {
    /// Copies what a policy needs out of a retrieval's selector input (the query text and
    /// summaries are not used by the network).
    pub fn from_input(input: &SelectionInput<'_>) -> SelectionExample {
        SelectionExample {
            level: input.level,
            query_embedding: input.query_embedding.to_vec(),
            candidates: input
                .candidates
                .iter()
                .map(|c| ExampleCandidate {
                    embedding: c.embedding.to_vec(),
                    features: c.features,
                })
                .collect(),
        }
    }

    /// Checks the example against a network shape: the level, every vector's length, and
    /// that every number the network reads is finite.
    pub fn validate(&self, config: &SelectorConfig) -> Result<(), LearnError> {
        if self.level != config.level {
            return Err(LearnError::Example(format!(
                "a {}-level example given to a {}-level selector",
                level_name(self.level),
                level_name(config.level)
            )));
        }
        let dim = config.embedding_dim;
        if self.query_embedding.len() != dim {
            return Err(LearnError::Example(format!(
                "the query embedding has {} dimensions, the selector expects {dim}",
                self.query_embedding.len()
            )));
        }
        if self.query_embedding.iter().any(|x| !x.is_finite()) {
            return Err(LearnError::Example(
                "the query embedding is not finite".into(),
            ));
        }
        for (i, c) in self.candidates.iter().enumerate() {
            if c.embedding.len() != dim {
                return Err(LearnError::Example(format!(
                    "candidate {i}'s embedding has {} dimensions, the selector expects {dim}",
                    c.embedding.len()
                )));
            }
            if c.embedding.iter().any(|x| !x.is_finite())
                || c.features.to_array().iter().any(|x| !x.is_finite())
            {
                return Err(LearnError::Example(format!(
                    "candidate {i} has a non-finite embedding or feature"
                )));
            }
        }
        Ok(())
    }
}

/// What the policy did on one example.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The chosen candidate (an index into [`SelectionExample::candidates`]), or `None` for
    /// "inject nothing".
    pub choice: Option<usize>,
    /// ln π_old(choice | example) under the policy that acted.
    pub logprob: f32,
    /// The value head's estimate V(example) when acting.
    pub value: f32,
}

/// A decision with its reward: the unit of PPO data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transition {
    /// The selection problem.
    pub example: SelectionExample,
    /// What the acting policy chose, with its log-probability and value.
    pub decision: Decision,
    /// The reward: the episode's terminal reward (episode level) or the process reward of
    /// the chosen memory (turn level).
    pub reward: f64,
}

/// What one [`PpoTrainer::update`] did (losses are means over its optimizer steps, weighted
/// by mini-batch size, measured before each step).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UpdateStats {
    /// The clipped surrogate loss (negated objective).
    pub policy_loss: f64,
    /// The mean squared error of the value head.
    pub value_loss: f64,
    /// The policy's mean entropy over its options (nats).
    pub entropy: f64,
    /// The mean exact KL(π ‖ π_ref) per decision (nats), measured before each step.
    pub kl: f64,
    /// KL(π ‖ π_ref) of the updated policy on this batch (what the adaptive controller
    /// reads).
    pub kl_after: f64,
    /// The fraction of transitions whose ratio lay outside [1 − ε, 1 + ε].
    pub clip_fraction: f64,
    /// The mean reward of the batch.
    pub mean_reward: f64,
    /// β used during this update (the controller changes it afterwards).
    pub kl_coef: f64,
    /// Optimizer steps taken.
    pub steps: usize,
}

/// Why a selector could not be built, trained, saved or loaded.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    /// An invalid network or PPO setting.
    #[error("invalid selector configuration: {0}")]
    Config(String),
    /// An example that does not fit the network.
    #[error("invalid selection example: {0}")]
    Example(String),
    /// A transition that cannot be trained on.
    #[error("invalid transition {index}: {message}")]
    Transition {
        /// Its position in the batch.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// `update` was given no transitions.
    #[error("cannot update the policy on an empty batch")]
    EmptyBatch,
    /// A checkpoint file does not exist.
    #[error("{path}: checkpoint file not found")]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// Filesystem failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The JSON sidecar is not a valid checkpoint description.
    #[error("{path}: bad checkpoint sidecar: {message}")]
    Sidecar {
        /// The sidecar file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The checkpoint is for another level than the caller needs.
    #[error(
        "{path}: the checkpoint is a {found:?}-level selector, a {expected:?}-level one is needed"
    )]
    LevelMismatch {
        /// The sidecar file.
        path: PathBuf,
        /// The level needed.
        expected: Level,
        /// The checkpoint's level.
        found: Level,
    },
    /// The checkpoint's dimensions differ from what the caller or its sidecar says.
    #[error("{path}: {what} is {found}, expected {expected}")]
    DimensionMismatch {
        /// The file.
        path: PathBuf,
        /// Which dimension (e.g. "the embedding dimension", "tensor `trunk0.weight`'s shape").
        what: String,
        /// What was expected.
        expected: String,
        /// What the file holds.
        found: String,
    },
    /// The safetensors file is unreadable, incomplete, or not the one the sidecar describes.
    #[error("{path}: bad checkpoint weights: {message}")]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A tensor operation failed (not expected for validated inputs).
    #[error("tensor computation failed: {0}")]
    Candle(#[from] candle_core::Error),
}

/// The name of a level in files, names and messages.
pub(crate) fn level_name(level: Level) -> &'static str {
    match level {
        Level::Episode => "episode",
        Level::Turn => "turn",
    }
}
