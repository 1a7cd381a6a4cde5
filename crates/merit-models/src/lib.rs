//! Model backends behind the traits of [`merit_core::model`].
//!
//! - [`openai`]: client for OpenAI-compatible servers (vLLM, llama.cpp, Ollama, OpenAI);
//! - [`cache`]: the persistent, content-addressed reply cache and call accounting;
//! - [`registry`]: known models, where their weights come from, `pull`;
//! - [`llama`]: in-process GGUF chat models through llama.cpp, with prefix (KV-cache) reuse;
//! - [`embed`]: in-process sentence embeddings (all-MiniLM-L6-v2) through candle.

#![warn(missing_docs)]

pub mod cache;
#[cfg(feature = "embedded")]
pub mod embed;
#[cfg(feature = "embedded")]
pub mod llama;
pub mod openai;
pub mod registry;
