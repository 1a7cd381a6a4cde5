//! The model boundary: what the agent asks of a chat model and of an embedder.
//!
//! Only traits and plain data live here, so that the agent, the memory and the experiment
//! layer can depend on them without knowing which backend (an OpenAI-compatible server, an
//! in-process GGUF model, a test double, a reply cache) answers.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Who wrote a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model (the repair prompts use none).
    System,
    /// The caller.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Author.
    pub role: Role,
    /// Text.
    pub content: String,
}

impl ChatMessage {
    /// A user message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::User,
            content: content.into(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::System,
            content: content.into(),
        }
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Decoding parameters. The papers use greedy decoding throughout, which is the default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decoding {
    /// Sampling temperature; `0.0` means greedy.
    pub temperature: f32,
    /// Upper bound on generated tokens.
    pub max_tokens: u32,
    /// Strings that end generation (not included in the reply).
    pub stop: Vec<String>,
    /// Seed sent to backends that sample, so that even non-greedy runs repeat.
    pub seed: u64,
}

impl Default for Decoding {
    fn default() -> Decoding {
        Decoding {
            temperature: 0.0,
            max_tokens: 512,
            stop: Vec::new(),
            seed: 0,
        }
    }
}

/// One chat call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// How to decode.
    pub decoding: Decoding,
    /// Identifier of the prompt template that produced the messages (part of cache keys).
    pub prompt_version: String,
}

/// A model's answer with its cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatReply {
    /// Generated text.
    pub text: String,
    /// Tokens in the prompt, as the backend counted them.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Wall time of the live call (for a cached reply: of the original call).
    #[serde(with = "duration_millis")]
    pub latency: Duration,
    /// `true` when the reply came from the reply cache rather than the model.
    #[serde(default)]
    pub cached: bool,
}

/// Why a model call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The backend could not be reached or the connection broke.
    #[error("cannot reach the model backend: {0}")]
    Transport(String),
    /// The backend answered with an error status.
    #[error("the model backend answered {status}: {body}")]
    Server {
        /// HTTP status (or 0 for in-process backends).
        status: u16,
        /// The error body, shortened.
        body: String,
    },
    /// The reply could not be understood.
    #[error("malformed reply from the model backend: {0}")]
    Malformed(String),
    /// The model is not available (weights missing, failed to load).
    #[error("model unavailable: {0}")]
    Unavailable(String),
    /// The request itself is invalid (e.g. longer than the context window).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

/// A chat model. Implementations must be deterministic under greedy decoding.
pub trait ChatModel: Send + Sync {
    /// A stable identifier of backend and model, e.g. `llama.cpp:qwen2.5-coder-0.5b-instruct`.
    fn id(&self) -> String;

    /// Generates one reply.
    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError>;
}

/// A sentence embedder returning L2-normalised vectors.
pub trait Embedder: Send + Sync {
    /// A stable identifier of backend and model, e.g. `candle:all-MiniLM-L6-v2`.
    fn id(&self) -> String;

    /// Length of every vector.
    fn dimension(&self) -> usize;

    /// Embeds `texts`, one unit-length vector per text, in order.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError>;
}

mod duration_millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(value.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}
