//! The policy/value network: parameter layout, deterministic initialisation, input rows and
//! the batched forward pass (see the module docs of [`super`] for the architecture).

use super::{LearnError, SelectionExample, SelectorConfig, SelectorInputs};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Linear, Module};
use merit_interact::memory::CandidateFeatures;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// Added to the logits of padding slots: far below any real logit, yet finite, so that
/// `0 · log p` terms stay 0 instead of NaN.
const MASKED: f32 = -1e9;

/// The tensors of a network, in the order they are initialised, saved and optimised.
/// `(name, fan_in, rows, cols)`; a bias is a vector of `rows`.
pub(crate) fn layers(config: &SelectorConfig) -> [(&'static str, usize, usize); 6] {
    let h = config.hidden;
    [
        ("trunk0", config.input_len(), h),
        ("trunk1", h, h),
        ("policy", h, 1),
        ("none", h, 1),
        ("value0", h, h),
        ("value1", h, 1),
    ]
}

/// Every tensor name with its shape, sorted by name (the checkpoint's content).
pub(crate) fn param_shapes(config: &SelectorConfig) -> Vec<(String, Vec<usize>)> {
    let mut shapes = Vec::new();
    for (name, fan_in, out) in layers(config) {
        shapes.push((format!("{name}.weight"), vec![out, fan_in]));
        shapes.push((format!("{name}.bias"), vec![out]));
    }
    shapes.sort();
    shapes
}

/// Fresh parameters from `rng`: LeCun-uniform weights (variance 1/fan-in, right for `tanh`),
/// zero biases, and output heads 100× smaller so the first policy is nearly uniform and the
/// first value nearly 0. candle's own initialisers draw from an unseeded generator, so the
/// values are drawn here, in [`layers`] order, to make initialisation reproducible.
pub(crate) fn init_params(
    config: &SelectorConfig,
    rng: &mut ChaCha8Rng,
) -> Result<HashMap<String, Tensor>, LearnError> {
    let mut params = HashMap::new();
    for (name, fan_in, out) in layers(config) {
        let mut bound = (3.0 / fan_in as f64).sqrt();
        if matches!(name, "policy" | "none" | "value1") {
            bound *= 0.01;
        }
        let weights: Vec<f32> = (0..out * fan_in)
            .map(|_| ((rng.random::<f64>() * 2.0 - 1.0) * bound) as f32)
            .collect();
        params.insert(
            format!("{name}.weight"),
            Tensor::from_vec(weights, (out, fan_in), &Device::Cpu)?,
        );
        params.insert(
            format!("{name}.bias"),
            Tensor::zeros(out, DType::F32, &Device::Cpu)?,
        );
    }
    Ok(params)
}

/// The network over a set of tensors (trainable variables or frozen copies).
#[derive(Debug, Clone)]
pub(crate) struct Net {
    config: SelectorConfig,
    trunk0: Linear,
    trunk1: Linear,
    policy: Linear,
    none: Linear,
    value0: Linear,
    value1: Linear,
}

impl Net {
    /// Builds the network from `params`, which must hold every tensor of
    /// [`param_shapes`] (checked here too, so a bad map is an error, not a panic later).
    pub(crate) fn new(
        config: SelectorConfig,
        params: &HashMap<String, Tensor>,
    ) -> Result<Net, LearnError> {
        for (name, shape) in param_shapes(&config) {
            let tensor = params
                .get(&name)
                .ok_or_else(|| LearnError::Config(format!("missing network tensor `{name}`")))?;
            if tensor.dims() != shape.as_slice() {
                return Err(LearnError::Config(format!(
                    "network tensor `{name}` has shape {:?}, expected {shape:?}",
                    tensor.dims()
                )));
            }
        }
        let linear = |name: &str| {
            Linear::new(
                params[&format!("{name}.weight")].clone(),
                Some(params[&format!("{name}.bias")].clone()),
            )
        };
        Ok(Net {
            config,
            trunk0: linear("trunk0"),
            trunk1: linear("trunk1"),
            policy: linear("policy"),
            none: linear("none"),
            value0: linear("value0"),
            value1: linear("value1"),
        })
    }

    /// The network's shape.
    pub(crate) fn config(&self) -> &SelectorConfig {
        &self.config
    }

    /// Logits `[B, K+1]` (column 0 is "none", column 1 + i candidate i, padding masked) and
    /// values `[B]` for a batch.
    pub(crate) fn forward(&self, batch: &Batch) -> Result<(Tensor, Tensor), LearnError> {
        let h = self.trunk0.forward(&batch.rows)?.tanh()?;
        let h = self.trunk1.forward(&h)?.tanh()?; // [B, K, H]
        let candidate_logits = self.policy.forward(&h)?.squeeze(2)?; // [B, K]
        let candidate_logits = (candidate_logits + &batch.padding)?;
        // Masked mean over the real candidates; an example without candidates pools to 0.
        let pooled = h
            .broadcast_mul(&batch.mask.unsqueeze(2)?)?
            .sum(1)?
            .broadcast_mul(&batch.inverse_count)?; // [B, H]
        let none_logit = self.none.forward(&pooled)?; // [B, 1]
        let logits = Tensor::cat(&[&none_logit, &candidate_logits], 1)?;
        let value = self
            .value1
            .forward(&self.value0.forward(&pooled)?.tanh()?)?
            .squeeze(1)?;
        Ok((logits, value))
    }

    /// Log-probabilities of every option (row `b` has `1 + candidates` entries, "none"
    /// first) and values, for examples that were already validated.
    pub(crate) fn evaluate(
        &self,
        examples: &[&SelectionExample],
    ) -> Result<(Vec<Vec<f32>>, Vec<f32>), LearnError> {
        let mut logprobs = Vec::with_capacity(examples.len());
        let mut values = Vec::with_capacity(examples.len());
        // Bounded chunks keep the input tensor small whatever the caller passes.
        for chunk in examples.chunks(256) {
            let batch = Batch::new(chunk, &self.config)?;
            let (logits, value) = self.forward(&batch)?;
            let rows = candle_nn::ops::log_softmax(&logits, 1)?.to_vec2::<f32>()?;
            for (row, example) in rows.into_iter().zip(chunk) {
                logprobs.push(row[..=example.candidates.len()].to_vec());
            }
            values.extend(value.to_vec1::<f32>()?);
        }
        Ok((logprobs, values))
    }
}

/// A padded batch of examples: `K` is the most candidates any example has (at least 1, so
/// tensors are never empty).
#[derive(Debug)]
pub(crate) struct Batch {
    /// Input rows `[B, K, input_len]` (zeros for padding).
    pub(crate) rows: Tensor,
    /// 1 for a real candidate, 0 for padding `[B, K]`.
    pub(crate) mask: Tensor,
    /// 0 for a real candidate, [`MASKED`] for padding `[B, K]`.
    pub(crate) padding: Tensor,
    /// 1 / max(1, candidates) `[B, 1]`.
    pub(crate) inverse_count: Tensor,
    /// 1 for a real option (none and candidates), 0 for padding `[B, K+1]`.
    pub(crate) option_mask: Tensor,
    /// `K`.
    pub(crate) width: usize,
}

impl Batch {
    /// Builds the padded batch (examples must already be validated against `config`).
    pub(crate) fn new(
        examples: &[&SelectionExample],
        config: &SelectorConfig,
    ) -> Result<Batch, LearnError> {
        let b = examples.len();
        let width = examples
            .iter()
            .map(|e| e.candidates.len())
            .max()
            .unwrap_or(0)
            .max(1);
        let len = config.input_len();
        let mut rows = vec![0f32; b * width * len];
        let mut mask = vec![0f32; b * width];
        let mut padding = vec![MASKED; b * width];
        let mut inverse_count = vec![1f32; b];
        let mut option_mask = vec![0f32; b * (width + 1)];
        for (e, example) in examples.iter().enumerate() {
            let count = example.candidates.len();
            inverse_count[e] = 1.0 / count.max(1) as f32;
            option_mask[e * (width + 1)..e * (width + 1) + count + 1].fill(1.0);
            for (i, candidate) in example.candidates.iter().enumerate() {
                mask[e * width + i] = 1.0;
                padding[e * width + i] = 0.0;
                let start = (e * width + i) * len;
                let row = &mut rows[start..start + len];
                match config.inputs {
                    SelectorInputs::Full => write_row(
                        row,
                        &example.query_embedding,
                        &candidate.embedding,
                        &candidate.features,
                    ),
                    SelectorInputs::Features => row.copy_from_slice(&candidate.features.to_array()),
                }
            }
        }
        let device = &Device::Cpu;
        Ok(Batch {
            rows: Tensor::from_vec(rows, (b, width, len), device)?,
            mask: Tensor::from_vec(mask, (b, width), device)?,
            padding: Tensor::from_vec(padding, (b, width), device)?,
            inverse_count: Tensor::from_vec(inverse_count, (b, 1), device)?,
            option_mask: Tensor::from_vec(option_mask, (b, width + 1), device)?,
            width,
        })
    }
}

/// One candidate's input row (see the table in the module docs of [`super`]).
fn write_row(row: &mut [f32], query: &[f32], candidate: &[f32], features: &CandidateFeatures) {
    let d = query.len();
    let (scale, root) = (d as f32, (d as f32).sqrt());
    for j in 0..d {
        let (q, c) = (query[j], candidate[j]);
        row[j] = scale * q * c;
        row[d + j] = root * (q - c).abs();
        row[2 * d + j] = root * c;
    }
    row[3 * d..].copy_from_slice(&features.to_array());
}
