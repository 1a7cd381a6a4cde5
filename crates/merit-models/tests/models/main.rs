//! The integration tests of merit-models, as one test binary.
//!
//! Every binary that links this crate carries llama.cpp and candle, so each separate test file
//! cost a long link and a few hundred megabytes of disk in CI; one binary with a module per
//! topic costs one.

mod cache_kill;
mod cache_store;
#[cfg(feature = "embedded")]
mod embed_minilm;
#[cfg(feature = "embedded")]
mod llama_batched;
#[cfg(feature = "embedded")]
mod llama_chat;
mod openai_client;
mod openai_real_server;
mod registry_pull;
mod registry_real_pull;
