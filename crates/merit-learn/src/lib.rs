//! The learned parts of MERIT interact (paper 003, §5.2–5.3), small enough to train on CPU.
//!
//! The paper fine-tunes a 4B language model with LoRA on GPUs for its selectors and its
//! student process reward model. Here each is a small network over what the retrieval layer
//! already computes (unit embeddings and [`merit_interact::memory::CandidateFeatures`]),
//! trained with `candle` on the CPU; checkpoints are safetensors files a later run loads.
//!
//! - [`selector`]: the policy/value network, PPO, and the learned selector that implements
//!   [`merit_interact::memory::Selector`].
//! - [`student`]: the student PRM distilled from the rubric teacher's annotations.
//! - [`train`]: the selectors' training loops: online PPO for the episode level (agent
//!   rollouts, terminal rewards) and the offline loop the turn level uses.
//! - [`holdout`]: the turn level end to end: the student PRM's rewards, tasks held out, and
//!   the trained selector scored against the untrained one and the fixed rules.

#![warn(missing_docs)]

pub mod holdout;
pub mod selector;
pub mod student;
pub mod train;

use candle_core::Tensor;
use std::collections::HashMap;
use std::path::Path;

/// Writes `tensors` to `path` as a safetensors file, atomically through
/// [`merit_core::fs::write_atomically`], and returns the bytes written (checkpoints hash them
/// for their sidecar).
///
/// The tensors are serialized in memory rather than with `candle_core::safetensors::save`:
/// that writes through a temporary file of its own (`.tmpXXXXXX`) that a killed process leaves
/// behind and that the run folder's leftover sweep cannot recognise as ours.
pub(crate) fn save_safetensors(
    tensors: &HashMap<String, Tensor>,
    path: &Path,
) -> Result<Vec<u8>, String> {
    let bytes = safetensors::serialize(tensors, None).map_err(|e| e.to_string())?;
    merit_core::fs::write_atomically(path, &bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}
