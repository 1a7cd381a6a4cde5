//! A frozen selector policy: what a checkpoint holds and inference uses.

use super::net::{param_shapes, Net};
use super::{Decision, LearnError, PpoConfig, SelectionExample, SelectorConfig};
use candle_core::Tensor;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// How a policy came to be; stored in the checkpoint's sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TrainingInfo {
    /// The seed of the run that initialised (or resumed) the network.
    pub seed: u64,
    /// PPO updates ([`super::PpoTrainer::update`] calls) applied since initialisation.
    pub updates: u64,
    /// AdamW steps applied since initialisation.
    pub optimizer_steps: u64,
    /// The KL coefficient β after the last update.
    pub kl_coef: f64,
    /// The PPO settings of the run.
    pub ppo: PpoConfig,
}

/// A policy's distribution over the options of one example.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionProbabilities {
    /// P("inject nothing").
    pub none: f32,
    /// P(candidate i), in candidate order.
    pub candidates: Vec<f32>,
}

impl OptionProbabilities {
    /// The greedy choice for at most `limit` memories: the candidates more probable than
    /// "none", most probable first (ties: lower index first), at most `limit` of them. Empty
    /// when "none" is at least as probable as every candidate (a tie goes to "none", the
    /// cautious option) or `limit` is 0.
    pub fn choose(&self, limit: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.candidates.len())
            .filter(|&i| self.candidates[i] > self.none)
            .collect();
        order.sort_by(|&a, &b| {
            self.candidates[b]
                .total_cmp(&self.candidates[a])
                .then(a.cmp(&b))
        });
        order.truncate(limit);
        order
    }
}

/// A trained (or freshly initialised) selector network, frozen: it computes probabilities,
/// greedy choices and samples, and saves to or loads from a checkpoint. It is `Send + Sync`
/// (its tensors are immutable, reference-counted CPU buffers), so one policy can serve
/// retrievals from several threads.
#[derive(Debug, Clone)]
pub struct SelectorPolicy {
    pub(crate) net: Net,
    /// The tensors, by name (frozen copies, never variables).
    pub(crate) params: HashMap<String, Tensor>,
    pub(crate) training: TrainingInfo,
}

impl SelectorPolicy {
    /// Assembles a policy from frozen tensors (checked against the shapes `config` needs).
    pub(crate) fn from_params(
        config: SelectorConfig,
        params: HashMap<String, Tensor>,
        training: TrainingInfo,
    ) -> Result<SelectorPolicy, LearnError> {
        config.validate()?;
        let net = Net::new(config, &params)?;
        Ok(SelectorPolicy {
            net,
            params,
            training,
        })
    }

    /// An untrained policy initialised from `seed` exactly as [`super::PpoTrainer::new`]
    /// initialises it (nearly uniform over the options).
    pub fn untrained(
        config: SelectorConfig,
        ppo: PpoConfig,
        seed: u64,
    ) -> Result<SelectorPolicy, LearnError> {
        super::PpoTrainer::new(config, ppo, seed)?.policy()
    }

    /// The network's shape and level.
    pub fn config(&self) -> &SelectorConfig {
        self.net.config()
    }

    /// How the policy was trained.
    pub fn training(&self) -> &TrainingInfo {
        &self.training
    }

    /// The policy's distribution over "none" and each candidate of `example`.
    pub fn probabilities(
        &self,
        example: &SelectionExample,
    ) -> Result<OptionProbabilities, LearnError> {
        let mut all = self.probabilities_batch(std::slice::from_ref(example))?;
        all.pop()
            .ok_or_else(|| LearnError::Example("the network returned no row".into()))
    }

    /// [`SelectorPolicy::probabilities`] for many examples in one batched forward pass.
    pub fn probabilities_batch(
        &self,
        examples: &[SelectionExample],
    ) -> Result<Vec<OptionProbabilities>, LearnError> {
        let refs = validated(examples, self.config())?;
        let (logprobs, _) = self.net.evaluate(&refs)?;
        Ok(logprobs
            .into_iter()
            .map(|row| OptionProbabilities {
                none: row[0].exp(),
                candidates: row[1..].iter().map(|l| l.exp()).collect(),
            })
            .collect())
    }

    /// The greedy choice of at most `limit` candidates (see [`OptionProbabilities::choose`]).
    pub fn choose(
        &self,
        example: &SelectionExample,
        limit: usize,
    ) -> Result<Vec<usize>, LearnError> {
        if example.candidates.is_empty() {
            example.validate(self.config())?;
            return Ok(Vec::new());
        }
        Ok(self.probabilities(example)?.choose(limit))
    }

    /// Samples one option from the policy (as the trainer's rollouts do).
    pub fn sample<R: Rng + ?Sized>(
        &self,
        example: &SelectionExample,
        rng: &mut R,
    ) -> Result<Decision, LearnError> {
        let mut decisions = sample_batch(&self.net, std::slice::from_ref(example), rng)?;
        decisions
            .pop()
            .ok_or_else(|| LearnError::Example("the network returned no row".into()))
    }

    /// A 64-bit FNV-1a hash of the tensors (names and little-endian values, in name order):
    /// equal for equal weights, so it names a trained policy.
    pub fn fingerprint(&self) -> Result<u64, LearnError> {
        let mut hash = merit_core::hash::Fnv1a::new();
        for (name, _) in param_shapes(self.config()) {
            let tensor = self
                .params
                .get(&name)
                .ok_or_else(|| LearnError::Config(format!("missing network tensor `{name}`")))?;
            hash.write(name.as_bytes());
            for value in tensor.flatten_all()?.to_vec1::<f32>()? {
                hash.write(&value.to_le_bytes());
            }
        }
        Ok(hash.finish())
    }

    /// Every tensor's values in name order, flattened (for comparing two policies).
    pub fn parameters(&self) -> Result<Vec<(String, Vec<f32>)>, LearnError> {
        param_shapes(self.config())
            .into_iter()
            .map(|(name, _)| {
                let tensor = self.params.get(&name).ok_or_else(|| {
                    LearnError::Config(format!("missing network tensor `{name}`"))
                })?;
                Ok((name, tensor.flatten_all()?.to_vec1::<f32>()?))
            })
            .collect()
    }
}

/// Validates every example against `config`, naming the first bad one.
pub(crate) fn validated<'e>(
    examples: &'e [SelectionExample],
    config: &SelectorConfig,
) -> Result<Vec<&'e SelectionExample>, LearnError> {
    examples
        .iter()
        .enumerate()
        .map(|(i, e)| match e.validate(config) {
            Ok(()) => Ok(e),
            Err(LearnError::Example(message)) if examples.len() > 1 => {
                Err(LearnError::Example(format!("example {i}: {message}")))
            }
            Err(error) => Err(error),
        })
        .collect()
}

/// Samples one decision per example from `net` in one batched forward pass; the generator
/// is used once per example, in order, so a seeded generator gives reproducible rollouts.
pub(crate) fn sample_batch<R: Rng + ?Sized>(
    net: &Net,
    examples: &[SelectionExample],
    rng: &mut R,
) -> Result<Vec<Decision>, LearnError> {
    let refs = validated(examples, net.config())?;
    let (logprobs, values) = net.evaluate(&refs)?;
    Ok(logprobs
        .iter()
        .zip(values)
        .map(|(row, value)| {
            let option = sample_option(row, rng.random::<f64>());
            Decision {
                choice: option.checked_sub(1),
                logprob: row[option],
                value,
            }
        })
        .collect())
}

/// Inverse-CDF sampling of an option from its log-probabilities with `u` in [0, 1); rounding
/// that leaves the cumulative sum below `u` falls back to the last option with mass.
fn sample_option(logprobs: &[f32], u: f64) -> usize {
    let mut cumulative = 0.0f64;
    let mut last = 0;
    for (i, &l) in logprobs.iter().enumerate() {
        let p = f64::from(l).exp();
        if p > 0.0 {
            last = i;
        }
        cumulative += p;
        if u < cumulative {
            return i;
        }
    }
    last
}
