//! The student process reward model: a small network distilled from the rubric teacher
//! (`merit_interact::prm`), cheap enough to score every (state, memory) pair the turn-level
//! selector considers during PPO.
//!
//! # What it sees
//! A [`PairInput`]: the embeddings of the two texts the teacher saw
//! (`merit_interact::prm::state_text` and `memory_text`, embedded by the caller with the
//! crate's embedder, 384-d for all-MiniLM-L6-v2) and four [`PairFeatures`] computed from the
//! pair itself. Both vectors are scaled to unit length and then by √d (components of order
//! one whatever d is) and mapped by one shared linear projection P (d → k, k = 32 by
//! default): a siamese encoder, so both texts live in one space and the parameter count stays
//! small (about 24 000 at the defaults), which matters on a few thousand annotated pairs. The
//! hidden layer sees `[Ps, Pm, Ps⊙Pm, |Ps−Pm|, cos(s, m), features]` (4k + 1 + 4 numbers):
//! the product and the difference give it direct access to agreement between the texts.
//!
//! # What it predicts
//! One hidden ReLU layer, then per principle a categorical distribution over the scores 0..=5
//! (seven heads of six logits) and per flag a Bernoulli (one logit each). The emitted
//! [`Rubric`] takes the most probable score of each head and each flag at p > 0.5.
//!
//! **The texts of a student rubric are not written judgements.** Every `reason`, the
//! summary and the usage note are fixed template sentences generated from the predicted
//! scores and flags ([`StudentPrediction::rubric`]); they carry no information beyond the
//! numbers. The student's format validity is therefore 100 % by construction (scores come
//! from six classes, texts from templates); [`agreement`](agreement::agreement) still checks
//! every emitted rubric with `Rubric::validate` and reports the figure.
//!
//! # Training ([`train`])
//! Supervised first (cross-entropy on the teacher's scores and flags), then a GRPO-style
//! refinement against the teacher with a structured matching reward, a clipped policy
//! gradient and a KL term to the SFT policy. Seeded with ChaCha8, deterministic for a seed.
//! Checkpoints ([`checkpoint`]) are a safetensors file and a JSON sidecar, each written
//! atomically.

pub mod agreement;
pub mod checkpoint;
pub mod pipeline;
pub mod train;

pub use agreement::{agreement, student_agreement, AgreementRow, AgreementTable};
pub use checkpoint::{sidecar_path, CheckpointMeta, TensorMeta, STUDENT_FORMAT};
pub use pipeline::{bucket, train_student, SplitBy, StudentTraining, TrainedStudent};
pub use train::{
    decision_reward, examples_from_annotations, matching_reward, mean_matching_reward, train_grpo,
    train_sft, Decisions, GrpoConfig, RewardWeights, SftConfig, TrainExample, TrainReport,
};

use candle_core::{DType, Device, Tensor, Var, D};
use merit_interact::memory::{Polarity, TurnMemory, TurnState};
use merit_interact::prm::{Feedback, Flags, Judgement, Principle, Principles, Rubric, MAX_SCORE};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Number of rubric principles (one categorical head each).
pub const PRINCIPLES: usize = 7;
/// Number of score classes per principle (0..=5).
pub const SCORE_CLASSES: usize = MAX_SCORE as usize + 1;
/// Number of flags (one Bernoulli head each).
pub const FLAGS: usize = 2;
/// Number of hand-made pair features.
pub const FEATURES: usize = 4;

/// Why the student could not be built, run, trained, saved or loaded.
#[derive(Debug, thiserror::Error)]
pub enum StudentError {
    /// A tensor operation failed (shapes are checked first, so this is not expected).
    #[error("tensor operation failed: {0}")]
    Candle(#[from] candle_core::Error),
    /// Input that does not fit the model (wrong length, not finite, zero vector, no data).
    #[error("bad input: {0}")]
    Input(String),
    /// The embedder failed while turning annotations into examples.
    #[error("the embedder failed: {0}")]
    Embedding(#[from] merit_core::model::ModelError),
    /// Filesystem failure.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A checkpoint that cannot be used.
    #[error("{path}: {message}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Shape of the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudentConfig {
    /// Length of each embedding (384 for all-MiniLM-L6-v2).
    pub dimension: usize,
    /// Width k of the shared projection of both embeddings.
    pub projection: usize,
    /// Width of the hidden layer.
    pub hidden: usize,
    /// Seed of the initial weights.
    pub seed: u64,
}

impl Default for StudentConfig {
    fn default() -> StudentConfig {
        StudentConfig {
            dimension: 384,
            projection: 32,
            hidden: 64,
            seed: 0,
        }
    }
}

impl StudentConfig {
    /// Length of the hidden layer's input row: `[Ps, Pm, Ps⊙Pm, |Ps−Pm|, cos, features]`.
    pub fn pair_width(&self) -> usize {
        4 * self.projection + 1 + FEATURES
    }

    /// Number of outputs: seven six-way heads and two flag logits.
    pub fn output_width(&self) -> usize {
        PRINCIPLES * SCORE_CLASSES + FLAGS
    }
}

/// Which training the weights have had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Seeded initial weights (the "vanilla" row of the agreement table).
    Untrained,
    /// After supervised fine-tuning.
    Sft,
    /// After SFT and the GRPO refinement.
    Grpo,
}

/// Simple facts about a pair that the embeddings carry poorly.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairFeatures {
    /// The memory's step did what it was for (`Polarity::Positive`).
    pub memory_positive: bool,
    /// Reward of the memory's source episode, clamped to [0, 1].
    pub episode_reward: f32,
    /// Both states follow the same kind of action (the first word of the skeletons, e.g.
    /// `EXECUTE`), or both are at the first turn.
    pub same_previous_tool: bool,
    /// Jaccard overlap of the word sets of the two current requests, in [0, 1].
    pub request_overlap: f32,
}

impl PairFeatures {
    /// The features of `memory` as a candidate for `state`.
    pub fn from_pair(state: &TurnState, memory: &TurnMemory) -> PairFeatures {
        let tool = |action: &Option<String>| {
            action
                .as_deref()
                .map(|a| a.split([' ', '(', ':']).next().unwrap_or("").to_string())
        };
        PairFeatures {
            memory_positive: memory.polarity == Polarity::Positive,
            episode_reward: (memory.episode_reward as f32).clamp(0.0, 1.0),
            same_previous_tool: tool(&state.previous_action) == tool(&memory.state.previous_action),
            request_overlap: jaccard(&state.current_request, &memory.state.current_request),
        }
    }

    /// The features as network inputs, in field order (booleans as 0 or 1).
    pub fn to_array(&self) -> [f32; FEATURES] {
        [
            f32::from(u8::from(self.memory_positive)),
            self.episode_reward,
            f32::from(u8::from(self.same_previous_tool)),
            self.request_overlap,
        ]
    }
}

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn jaccard(a: &str, b: &str) -> f32 {
    let (a, b) = (words(a), words(b));
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f32 / union as f32
}

/// One (state, memory) pair as the student sees it. The caller embeds the two texts.
#[derive(Debug, Clone, PartialEq)]
pub struct PairInput {
    /// Embedding of the state text.
    pub state: Vec<f32>,
    /// Embedding of the memory text.
    pub memory: Vec<f32>,
    /// The pair's features.
    pub features: PairFeatures,
}

/// The student's distributions for one pair.
#[derive(Debug, Clone, PartialEq)]
pub struct StudentPrediction {
    /// Per principle (in `Principle::ALL` order), the probability of each score 0..=5.
    pub scores: [[f32; SCORE_CLASSES]; PRINCIPLES],
    /// Per flag (`recommend_injection`, `use_as_warning_only`), the probability of `true`.
    pub flags: [f32; FLAGS],
}

impl StudentPrediction {
    /// The most probable decisions: the mode of each score head (ties to the lower score) and
    /// each flag at p > 0.5.
    pub fn decisions(&self) -> Decisions {
        let mut scores = [0u8; PRINCIPLES];
        for (head, probs) in self.scores.iter().enumerate() {
            let mut best = 0;
            for class in 1..SCORE_CLASSES {
                if probs[class] > probs[best] {
                    best = class;
                }
            }
            scores[head] = best as u8;
        }
        Decisions {
            scores,
            flags: self.flags.map(|p| p > 0.5),
        }
    }

    /// The expected score of each principle under its distribution.
    pub fn expected_scores(&self) -> [f32; PRINCIPLES] {
        self.scores.map(|probs| {
            probs
                .iter()
                .enumerate()
                .map(|(class, p)| class as f32 * p)
                .sum()
        })
    }

    /// The emitted rubric: [`StudentPrediction::decisions`] with template texts (see the
    /// module docs: the texts are generated from the numbers, not written judgements).
    pub fn rubric(&self) -> Rubric {
        decisions_rubric(&self.decisions())
    }
}

/// A full [`Rubric`] for `decisions`, its texts generated from templates.
pub fn decisions_rubric(decisions: &Decisions) -> Rubric {
    let judgements = Principle::ALL.map(|principle| {
        let score = decisions.scores[principle.index()].min(MAX_SCORE);
        Judgement {
            score,
            reason: format!(
                "Student estimate {score}/5 ({}) for {}.",
                ["none", "very weak", "weak", "acceptable", "strong", "ideal"][usize::from(score)],
                principle.measures()
            ),
        }
    });
    let [recommend, warning] = decisions.flags;
    let overall = decisions.scores[Principle::OverallUtility.index()].min(MAX_SCORE);
    let (summary, how_to_use) = match (recommend, warning) {
        (true, true) => (
            format!("Student estimate: overall utility {overall}/5; worth showing as a warning."),
            "Warn: show it as a mistake not to repeat in this state.",
        ),
        (true, false) => (
            format!("Student estimate: overall utility {overall}/5; worth showing as guidance."),
            "Copy: show it as a pattern to follow in this state.",
        ),
        (false, _) => (
            format!("Student estimate: overall utility {overall}/5; not worth showing here."),
            "Skip: do not show it in this state.",
        ),
    };
    Rubric {
        principles: Principles::from_array(judgements),
        flags: Flags {
            recommend_injection: recommend,
            use_as_warning_only: warning,
        },
        feedback: Feedback {
            one_sentence_summary: summary,
            how_to_use: how_to_use.to_string(),
        },
    }
}

/// A batch of inputs as tensors: both embeddings (unit length times √d) and the rest.
#[derive(Debug, Clone)]
pub(crate) struct Encoded {
    /// `[n, d]`.
    state: Tensor,
    /// `[n, d]`.
    memory: Tensor,
    /// `[n, 1 + FEATURES]`: the cosine, then the features.
    extra: Tensor,
}

impl Encoded {
    /// The rows `indices` (a u32 tensor).
    pub(crate) fn select(&self, indices: &Tensor) -> Result<Encoded, StudentError> {
        Ok(Encoded {
            state: self.state.index_select(indices, 0)?,
            memory: self.memory.index_select(indices, 0)?,
            extra: self.extra.index_select(indices, 0)?,
        })
    }
}

/// The student network and its weights (CPU, f32).
#[derive(Debug)]
pub struct StudentPrm {
    config: StudentConfig,
    stage: Stage,
    /// `[projection, dimension]`, shared by both embeddings.
    project: Var,
    /// `[hidden, pair_width]`.
    w1: Var,
    /// `[hidden]`.
    b1: Var,
    /// `[output_width, hidden]`.
    w2: Var,
    /// `[output_width]`.
    b2: Var,
}

/// Names of the tensors in a checkpoint, in a fixed order.
pub(crate) const TENSOR_NAMES: [&str; 5] = [
    "project.weight",
    "hidden.weight",
    "hidden.bias",
    "out.weight",
    "out.bias",
];

impl StudentPrm {
    /// An untrained student with weights drawn from `config.seed` (uniform in ±1/√fan-in,
    /// the usual default for linear layers).
    pub fn new(config: StudentConfig) -> Result<StudentPrm, StudentError> {
        if config.dimension == 0 || config.projection == 0 || config.hidden == 0 {
            return Err(StudentError::Input(
                "the embedding dimension, the projection and the hidden width must be positive"
                    .into(),
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let (dimension, projection) = (config.dimension, config.projection);
        let (input, hidden, output) = (config.pair_width(), config.hidden, config.output_width());
        let mut uniform = |count: usize, fan_in: usize| -> Vec<f32> {
            let bound = 1.0 / (fan_in as f32).sqrt();
            (0..count)
                .map(|_| rng.random_range(-bound..bound))
                .collect()
        };
        let project = uniform(projection * dimension, dimension);
        let w1 = uniform(hidden * input, input);
        let b1 = uniform(hidden, input);
        let w2 = uniform(output * hidden, hidden);
        let b2 = uniform(output, hidden);
        let var = |data: Vec<f32>, shape: &[usize]| -> Result<Var, StudentError> {
            Ok(Var::from_tensor(&Tensor::from_vec(
                data,
                shape,
                &Device::Cpu,
            )?)?)
        };
        Ok(StudentPrm {
            project: var(project, &[projection, dimension])?,
            w1: var(w1, &[hidden, input])?,
            b1: var(b1, &[hidden])?,
            w2: var(w2, &[output, hidden])?,
            b2: var(b2, &[output])?,
            config,
            stage: Stage::Untrained,
        })
    }

    /// Builds a student from its tensors in [`TENSOR_NAMES`] order (shapes checked).
    pub(crate) fn from_tensors(
        config: StudentConfig,
        stage: Stage,
        tensors: [Tensor; 5],
    ) -> Result<StudentPrm, StudentError> {
        let expected = [
            vec![config.projection, config.dimension],
            vec![config.hidden, config.pair_width()],
            vec![config.hidden],
            vec![config.output_width(), config.hidden],
            vec![config.output_width()],
        ];
        for ((tensor, shape), name) in tensors.iter().zip(&expected).zip(TENSOR_NAMES) {
            if tensor.dims() != shape.as_slice() || tensor.dtype() != DType::F32 {
                return Err(StudentError::Input(format!(
                    "tensor {name} is {:?} {:?}, expected f32 {shape:?}",
                    tensor.dtype(),
                    tensor.dims()
                )));
            }
        }
        let [project, w1, b1, w2, b2] = tensors;
        // A fresh copy: never share storage with another student's variables.
        let var = |t: Tensor| Var::from_tensor(&t.to_device(&Device::Cpu)?.detach());
        Ok(StudentPrm {
            project: var(project)?,
            w1: var(w1)?,
            b1: var(b1)?,
            w2: var(w2)?,
            b2: var(b2)?,
            config,
            stage,
        })
    }

    /// An independent copy (new variables, same values): the frozen reference of GRPO.
    pub fn try_clone(&self) -> Result<StudentPrm, StudentError> {
        StudentPrm::from_tensors(self.config.clone(), self.stage, self.tensors())
    }

    /// The shape and seed.
    pub fn config(&self) -> &StudentConfig {
        &self.config
    }

    /// Which training the weights have had.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    pub(crate) fn set_stage(&mut self, stage: Stage) {
        self.stage = stage;
    }

    /// The weight tensors in [`TENSOR_NAMES`] order.
    pub(crate) fn tensors(&self) -> [Tensor; 5] {
        [&self.project, &self.w1, &self.b1, &self.w2, &self.b2].map(|v| v.as_tensor().clone())
    }

    /// The trainable variables.
    pub(crate) fn vars(&self) -> Vec<Var> {
        vec![
            self.project.clone(),
            self.w1.clone(),
            self.b1.clone(),
            self.w2.clone(),
            self.b2.clone(),
        ]
    }

    /// The tensors of `inputs` (see the module docs), checked.
    pub(crate) fn encode(&self, inputs: &[PairInput]) -> Result<Encoded, StudentError> {
        let d = self.config.dimension;
        let scale = (d as f32).sqrt();
        let n = inputs.len();
        let mut states = Vec::with_capacity(n * d);
        let mut memories = Vec::with_capacity(n * d);
        let mut extra = Vec::with_capacity(n * (1 + FEATURES));
        for (index, input) in inputs.iter().enumerate() {
            let s = unit(&input.state, d, index, "state")?;
            let m = unit(&input.memory, d, index, "memory")?;
            let features = input.features.to_array();
            if features.iter().any(|f| !f.is_finite()) {
                return Err(StudentError::Input(format!(
                    "input {index}: a feature is not finite"
                )));
            }
            extra.push(s.iter().zip(&m).map(|(a, b)| a * b).sum());
            extra.extend(features);
            states.extend(s.iter().map(|x| x * scale));
            memories.extend(m.iter().map(|x| x * scale));
        }
        Ok(Encoded {
            state: Tensor::from_vec(states, (n, d), &Device::Cpu)?,
            memory: Tensor::from_vec(memories, (n, d), &Device::Cpu)?,
            extra: Tensor::from_vec(extra, (n, 1 + FEATURES), &Device::Cpu)?,
        })
    }

    /// Log-probabilities of the score heads `[n, 7, 6]` and of the flags `[n, 2, 2]` (class 1
    /// is `true`; its logit is the network's, class 0's is fixed at 0, so the flag is a
    /// Bernoulli with that logit).
    pub(crate) fn log_probs(&self, x: &Encoded) -> Result<(Tensor, Tensor), StudentError> {
        let n = x.state.dim(0)?;
        let projection = self.project.as_tensor().t()?;
        let ps = x.state.matmul(&projection)?;
        let pm = x.memory.matmul(&projection)?;
        let product = (&ps * &pm)?;
        let distance = (&ps - &pm)?.abs()?;
        let pair = Tensor::cat(&[&ps, &pm, &product, &distance, &x.extra], 1)?;
        let hidden = pair
            .matmul(&self.w1.as_tensor().t()?)?
            .broadcast_add(self.b1.as_tensor())?
            .relu()?;
        let out = hidden
            .matmul(&self.w2.as_tensor().t()?)?
            .broadcast_add(self.b2.as_tensor())?;
        let scores = out.narrow(1, 0, PRINCIPLES * SCORE_CLASSES)?.reshape((
            n,
            PRINCIPLES,
            SCORE_CLASSES,
        ))?;
        let flag_logits = out
            .narrow(1, PRINCIPLES * SCORE_CLASSES, FLAGS)?
            .unsqueeze(2)?;
        let zeros = flag_logits.zeros_like()?;
        let flags = Tensor::cat(&[&zeros, &flag_logits], 2)?;
        Ok((
            candle_nn::ops::log_softmax(&scores, D::Minus1)?,
            candle_nn::ops::log_softmax(&flags, D::Minus1)?,
        ))
    }

    /// The distributions for each input, in order.
    pub fn predict(&self, inputs: &[PairInput]) -> Result<Vec<StudentPrediction>, StudentError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let x = self.encode(inputs)?;
        let (scores, flags) = self.log_probs(&x)?;
        let scores = scores.exp()?.to_vec3::<f32>()?;
        let flags = flags.exp()?.to_vec3::<f32>()?;
        Ok(scores
            .into_iter()
            .zip(flags)
            .map(|(heads, flag_heads)| StudentPrediction {
                scores: std::array::from_fn(|h| std::array::from_fn(|c| heads[h][c])),
                flags: std::array::from_fn(|f| flag_heads[f][1]),
            })
            .collect())
    }

    /// The emitted rubric for each input (see [`StudentPrediction::rubric`]).
    pub fn rubrics(&self, inputs: &[PairInput]) -> Result<Vec<Rubric>, StudentError> {
        Ok(self
            .predict(inputs)?
            .iter()
            .map(StudentPrediction::rubric)
            .collect())
    }
}

/// `vector` scaled to unit length, checked.
fn unit(
    vector: &[f32],
    dimension: usize,
    index: usize,
    what: &str,
) -> Result<Vec<f32>, StudentError> {
    if vector.len() != dimension {
        return Err(StudentError::Input(format!(
            "input {index}: the {what} vector has {} numbers, the model takes {dimension}",
            vector.len()
        )));
    }
    if vector.iter().any(|x| !x.is_finite()) {
        return Err(StudentError::Input(format!(
            "input {index}: the {what} vector is not finite"
        )));
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        return Err(StudentError::Input(format!(
            "input {index}: the {what} vector is zero"
        )));
    }
    Ok(vector.iter().map(|x| x / norm).collect())
}
