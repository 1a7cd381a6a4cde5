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

#![warn(missing_docs)]

pub mod holdout;
pub mod selector;
pub mod student;
pub mod train;
