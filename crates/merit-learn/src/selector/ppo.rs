//! The PPO trainer (see the module docs of [`super`] for the objective and its settings).

use super::net::{init_params, param_shapes, Batch, Net};
use super::policy::{sample_batch, validated, SelectorPolicy, TrainingInfo};
use super::{
    Decision, KlControl, LearnError, PpoConfig, SelectionExample, SelectorConfig, Transition,
    UpdateStats,
};
use candle_core::{Device, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::path::Path;

/// Trains one selector (one level) with PPO. Acting and updating alternate: collect a batch
/// of [`Decision`]s with [`PpoTrainer::act_batch`], attach rewards as [`Transition`]s when
/// they are known, call [`PpoTrainer::update`], repeat; then [`PpoTrainer::save`].
pub struct PpoTrainer {
    config: SelectorConfig,
    ppo: PpoConfig,
    /// The trainable tensors in name order (the order AdamW and checkpoints see them).
    vars: Vec<(String, Var)>,
    /// The network over `vars` (shares their storage, so optimizer steps show through).
    net: Net,
    /// The frozen starting network, the anchor of the KL penalty.
    reference: Net,
    optimizer: AdamW,
    /// Mini-batch shuffling; stream 1 of the seed, so it never overlaps initialisation.
    shuffle: ChaCha8Rng,
    kl_coef: f64,
    seed: u64,
    updates: u64,
    optimizer_steps: u64,
}

impl std::fmt::Debug for PpoTrainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PpoTrainer")
            .field("config", &self.config)
            .field("ppo", &self.ppo)
            .field("kl_coef", &self.kl_coef)
            .field("seed", &self.seed)
            .field("updates", &self.updates)
            .field("optimizer_steps", &self.optimizer_steps)
            .finish_non_exhaustive()
    }
}

impl PpoTrainer {
    /// A trainer over a freshly initialised network; `seed` determines the initial weights
    /// and the mini-batch order, so two trainers with equal seeds, settings and data end
    /// with bit-identical weights.
    pub fn new(
        config: SelectorConfig,
        ppo: PpoConfig,
        seed: u64,
    ) -> Result<PpoTrainer, LearnError> {
        config.validate()?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let params = init_params(&config, &mut rng)?;
        PpoTrainer::start(config, ppo, seed, &params, 0, 0)
    }

    /// A trainer that continues from `policy` (e.g. a loaded checkpoint), which also becomes
    /// the KL reference. The optimizer's moments start afresh (they are not checkpointed);
    /// `seed` drives the mini-batch order from here on.
    pub fn resume(
        policy: &SelectorPolicy,
        ppo: PpoConfig,
        seed: u64,
    ) -> Result<PpoTrainer, LearnError> {
        let training = policy.training();
        PpoTrainer::start(
            *policy.config(),
            ppo,
            seed,
            &policy.params,
            training.updates,
            training.optimizer_steps,
        )
    }

    fn start(
        config: SelectorConfig,
        ppo: PpoConfig,
        seed: u64,
        params: &HashMap<String, Tensor>,
        updates: u64,
        optimizer_steps: u64,
    ) -> Result<PpoTrainer, LearnError> {
        config.validate()?;
        ppo.validate()?;
        let reference_params = params
            .iter()
            .map(|(name, t)| Ok((name.clone(), t.copy()?.detach())))
            .collect::<Result<HashMap<_, _>, LearnError>>()?;
        let reference = Net::new(config, &reference_params)?;
        let mut vars = Vec::new();
        for (name, _) in param_shapes(&config) {
            let tensor = params
                .get(&name)
                .ok_or_else(|| LearnError::Config(format!("missing network tensor `{name}`")))?;
            // `Var::from_tensor` copies a non-variable tensor, so the reference stays frozen.
            vars.push((name, Var::from_tensor(tensor)?));
        }
        let live: HashMap<String, Tensor> = vars
            .iter()
            .map(|(name, var)| (name.clone(), var.as_tensor().clone()))
            .collect();
        let net = Net::new(config, &live)?;
        let optimizer = AdamW::new(
            vars.iter().map(|(_, v)| v.clone()).collect(),
            ParamsAdamW {
                lr: ppo.learning_rate,
                weight_decay: ppo.weight_decay,
                ..ParamsAdamW::default()
            },
        )?;
        let mut shuffle = ChaCha8Rng::seed_from_u64(seed);
        shuffle.set_stream(1);
        Ok(PpoTrainer {
            config,
            ppo,
            vars,
            net,
            reference,
            optimizer,
            shuffle,
            kl_coef: ppo.kl.initial(),
            seed,
            updates,
            optimizer_steps,
        })
    }

    /// The network's shape and level.
    pub fn config(&self) -> &SelectorConfig {
        &self.config
    }

    /// The PPO settings.
    pub fn ppo(&self) -> &PpoConfig {
        &self.ppo
    }

    /// The current KL coefficient β.
    pub fn kl_coef(&self) -> f64 {
        self.kl_coef
    }

    /// Updates applied so far (including those of a resumed checkpoint).
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Samples an option for `example` from the current policy with `rng`, recording its
    /// log-probability and the value estimate for the later update.
    pub fn act<R: Rng + ?Sized>(
        &self,
        example: &SelectionExample,
        rng: &mut R,
    ) -> Result<Decision, LearnError> {
        let mut decisions = self.act_batch(std::slice::from_ref(example), rng)?;
        decisions
            .pop()
            .ok_or_else(|| LearnError::Example("the network returned no row".into()))
    }

    /// [`PpoTrainer::act`] for many examples in one forward pass (one draw from `rng` per
    /// example, in order: the same decisions as acting one by one with the same generator).
    pub fn act_batch<R: Rng + ?Sized>(
        &self,
        examples: &[SelectionExample],
        rng: &mut R,
    ) -> Result<Vec<Decision>, LearnError> {
        sample_batch(&self.net, examples, rng)
    }

    /// A frozen copy of the current policy (for evaluation, a [`super::LearnedSelector`], or
    /// saving): later updates do not change it.
    pub fn policy(&self) -> Result<SelectorPolicy, LearnError> {
        let params = self
            .vars
            .iter()
            .map(|(name, var)| Ok((name.clone(), var.as_tensor().copy()?.detach())))
            .collect::<Result<HashMap<_, _>, LearnError>>()?;
        SelectorPolicy::from_params(self.config, params, self.training_info())
    }

    fn training_info(&self) -> TrainingInfo {
        TrainingInfo {
            seed: self.seed,
            updates: self.updates,
            optimizer_steps: self.optimizer_steps,
            kl_coef: self.kl_coef,
            ppo: self.ppo,
        }
    }

    /// Saves the current policy as a checkpoint (see [`SelectorPolicy::save`]).
    pub fn save(&self, weights: &Path) -> Result<(), LearnError> {
        self.policy()?.save(weights)
    }

    /// One PPO update on a batch of transitions (see the module docs): advantages from the
    /// recorded values, [`PpoConfig::ppo_epochs`] shuffled passes of mini-batch AdamW steps on
    /// the clipped objective with value, entropy and KL terms, then the KL controller.
    pub fn update(&mut self, transitions: &[Transition]) -> Result<UpdateStats, LearnError> {
        if transitions.is_empty() {
            return Err(LearnError::EmptyBatch);
        }
        for (index, t) in transitions.iter().enumerate() {
            check_transition(t, &self.config)
                .map_err(|message| LearnError::Transition { index, message })?;
        }
        let examples: Vec<SelectionExample> =
            transitions.iter().map(|t| t.example.clone()).collect();
        let refs = validated(&examples, &self.config)?;
        let (reference_logprobs, _) = self.reference.evaluate(&refs)?;

        let n = transitions.len();
        let returns: Vec<f32> = transitions.iter().map(|t| t.reward as f32).collect();
        let mut advantages: Vec<f32> = transitions
            .iter()
            .map(|t| t.reward as f32 - t.decision.value)
            .collect();
        if self.ppo.normalize_advantages && n > 1 {
            let mean = advantages.iter().map(|&a| f64::from(a)).sum::<f64>() / n as f64;
            let var = advantages
                .iter()
                .map(|&a| (f64::from(a) - mean).powi(2))
                .sum::<f64>()
                / n as f64;
            let scale = 1.0 / (var.sqrt() + 1e-8);
            for a in &mut advantages {
                *a = ((f64::from(*a) - mean) * scale) as f32;
            }
        }

        let kl_coef = self.kl_coef;
        let mut sums = Sums::default();
        let mut order: Vec<usize> = (0..n).collect();
        for _ in 0..self.ppo.ppo_epochs {
            order.shuffle(&mut self.shuffle);
            for chunk in order.chunks(self.ppo.mini_batch) {
                let mini = MiniBatch {
                    transitions,
                    indices: chunk,
                    advantages: &advantages,
                    returns: &returns,
                    reference: &reference_logprobs,
                };
                let step = self.step(&mini, kl_coef)?;
                sums.add(&step, chunk.len());
                self.optimizer_steps += 1;
            }
        }
        // The updated policy's distance from the reference on this batch: what the next
        // rollouts will see, so what the adaptive controller reacts to.
        let (current, _) = self.net.evaluate(&refs)?;
        let kl_after = current
            .iter()
            .zip(&reference_logprobs)
            .map(|(p, q)| exact_kl(p, q))
            .sum::<f64>()
            / n as f64;
        let stats = sums.stats(
            returns.iter().map(|&r| f64::from(r)).sum::<f64>() / n as f64,
            kl_coef,
            kl_after,
        );
        if let KlControl::Adaptive {
            target, horizon, ..
        } = self.ppo.kl
        {
            let error = (kl_after / target - 1.0).clamp(-0.2, 0.2);
            self.kl_coef *= 1.0 + error * n as f64 / horizon;
        }
        self.updates += 1;
        Ok(stats)
    }

    /// One optimizer step on one mini-batch; returns the terms measured before the step.
    fn step(&mut self, mini: &MiniBatch<'_>, kl_coef: f64) -> Result<StepTerms, LearnError> {
        let device = &Device::Cpu;
        let b = mini.indices.len();
        let chosen: Vec<&SelectionExample> = mini
            .indices
            .iter()
            .map(|&i| &mini.transitions[i].example)
            .collect();
        let batch = Batch::new(&chosen, &self.config)?;
        let width = batch.width + 1;
        let mut one_hot = vec![0f32; b * width];
        let mut reference = vec![0f32; b * width];
        let mut old = Vec::with_capacity(b);
        let mut advantages = Vec::with_capacity(b);
        let mut returns = Vec::with_capacity(b);
        for (row, &i) in mini.indices.iter().enumerate() {
            let t = &mini.transitions[i];
            let option = t.decision.choice.map_or(0, |c| c + 1);
            one_hot[row * width + option] = 1.0;
            let r = &mini.reference[i];
            reference[row * width..row * width + r.len()].copy_from_slice(r);
            old.push(t.decision.logprob);
            advantages.push(mini.advantages[i]);
            returns.push(mini.returns[i]);
        }
        let one_hot = Tensor::from_vec(one_hot, (b, width), device)?;
        let reference = Tensor::from_vec(reference, (b, width), device)?;
        let old = Tensor::from_vec(old, b, device)?;
        let advantages = Tensor::from_vec(advantages, b, device)?;
        let returns = Tensor::from_vec(returns, b, device)?;

        let (logits, values) = self.net.forward(&batch)?;
        let logprobs = candle_nn::ops::log_softmax(&logits, 1)?;
        let probs = logprobs.exp()?;
        let logprob = (&logprobs * &one_hot)?.sum(1)?;
        let ratio = (logprob - &old)?.exp()?;
        let clip = self.ppo.clip;
        let unclipped = (&ratio * &advantages)?;
        let clipped = (ratio.clamp(1.0 - clip, 1.0 + clip)? * &advantages)?;
        let policy_loss = unclipped.minimum(&clipped)?.mean_all()?.neg()?;
        let value_loss = (&values - &returns)?.sqr()?.mean_all()?;
        // Padding slots have p = 0 and finite log p, and are masked besides.
        let entropy = (&probs * &logprobs)?
            .mul(&batch.option_mask)?
            .sum(1)?
            .mean_all()?
            .neg()?;
        let kl = (&probs * (&logprobs - &reference)?)?
            .mul(&batch.option_mask)?
            .sum(1)?
            .mean_all()?;
        let loss = (&policy_loss
            + (&value_loss * self.ppo.value_coef)?
            + (&entropy * -self.ppo.entropy_coef)?
            + (&kl * kl_coef)?)?;

        let ratios = ratio.to_vec1::<f32>()?;
        let clipped_count = ratios
            .iter()
            .filter(|&&r| f64::from(r) < 1.0 - clip || f64::from(r) > 1.0 + clip)
            .count();
        let terms = StepTerms {
            policy_loss: f64::from(policy_loss.to_scalar::<f32>()?),
            value_loss: f64::from(value_loss.to_scalar::<f32>()?),
            entropy: f64::from(entropy.to_scalar::<f32>()?),
            kl: f64::from(kl.to_scalar::<f32>()?),
            clip_fraction: clipped_count as f64 / b as f64,
        };
        self.optimizer.backward_step(&loss)?;
        Ok(terms)
    }
}

/// KL(p ‖ q) in nats between two distributions given as log-probabilities of equal length.
fn exact_kl(p: &[f32], q: &[f32]) -> f64 {
    p.iter()
        .zip(q)
        .map(|(&lp, &lq)| {
            let (lp, lq) = (f64::from(lp), f64::from(lq));
            lp.exp() * (lp - lq)
        })
        .sum()
}

/// Why a transition cannot be trained on, or `Ok`.
fn check_transition(t: &Transition, config: &SelectorConfig) -> Result<(), String> {
    t.example.validate(config).map_err(|e| e.to_string())?;
    if let Some(choice) = t.decision.choice {
        if choice >= t.example.candidates.len() {
            return Err(format!(
                "choice {choice} but the example has {} candidates",
                t.example.candidates.len()
            ));
        }
    }
    if !(t.decision.logprob.is_finite() && t.decision.logprob <= 0.0) {
        return Err(format!("log-probability {} is not ≤ 0", t.decision.logprob));
    }
    if !t.decision.value.is_finite() {
        return Err("the recorded value is not finite".into());
    }
    if !t.reward.is_finite() {
        return Err(format!("reward {} is not finite", t.reward));
    }
    Ok(())
}

struct MiniBatch<'a> {
    transitions: &'a [Transition],
    indices: &'a [usize],
    advantages: &'a [f32],
    returns: &'a [f32],
    reference: &'a [Vec<f32>],
}

struct StepTerms {
    policy_loss: f64,
    value_loss: f64,
    entropy: f64,
    kl: f64,
    clip_fraction: f64,
}

/// Size-weighted sums of the step terms.
#[derive(Default)]
struct Sums {
    weight: f64,
    policy_loss: f64,
    value_loss: f64,
    entropy: f64,
    kl: f64,
    clip_fraction: f64,
    steps: usize,
}

impl Sums {
    fn add(&mut self, step: &StepTerms, size: usize) {
        let w = size as f64;
        self.weight += w;
        self.policy_loss += w * step.policy_loss;
        self.value_loss += w * step.value_loss;
        self.entropy += w * step.entropy;
        self.kl += w * step.kl;
        self.clip_fraction += w * step.clip_fraction;
        self.steps += 1;
    }

    fn stats(&self, mean_reward: f64, kl_coef: f64, kl_after: f64) -> UpdateStats {
        let w = self.weight.max(1.0);
        UpdateStats {
            policy_loss: self.policy_loss / w,
            value_loss: self.value_loss / w,
            entropy: self.entropy / w,
            kl: self.kl / w,
            kl_after,
            clip_fraction: self.clip_fraction / w,
            mean_reward,
            kl_coef,
            steps: self.steps,
        }
    }
}
