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
    /// The result of a native tool call, answering [`ChatMessage::tool_call_id`].
    Tool,
}

/// A tool the model may call natively (OpenAI-style function calling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The function name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments object.
    pub parameters: serde_json::Value,
}

/// A native tool call written by the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCall {
    /// The backend's id of the call; the tool result message refers to it.
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments as the model wrote them: a JSON object in text (it may be malformed).
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Author.
    pub role: Role,
    /// Text.
    pub content: String,
    /// Native tool calls of an assistant message (empty in the text protocol; omitted from
    /// the serialized form then, so cache keys of plain conversations do not change).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a [`Role::Tool`] message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A user message.
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(Role::User, content)
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(Role::System, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(Role::Assistant, content)
    }

    /// An assistant message that made native tool calls.
    pub fn assistant_with_tools(content: impl Into<String>, calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage {
            tool_calls: calls,
            ..ChatMessage::plain(Role::Assistant, content)
        }
    }

    /// The result of the native tool call `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            tool_call_id: Some(call_id.into()),
            ..ChatMessage::plain(Role::Tool, content)
        }
    }

    fn plain(role: Role, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
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
    /// A GBNF grammar (llama.cpp's format, start rule `root`) the reply must follow: the
    /// embedded backend decodes greedily among the tokens the grammar allows; an
    /// OpenAI-compatible request carries it as llama.cpp's server reads it (`grammar`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<String>,
}

impl Default for Decoding {
    fn default() -> Decoding {
        Decoding {
            temperature: 0.0,
            max_tokens: 512,
            stop: Vec::new(),
            seed: 0,
            grammar: None,
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
    /// Tools offered for native calls; empty for the text protocol. Only backends whose
    /// [`ChatModel::supports_tools`] is true use them; the others ignore them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
}

impl ChatRequest {
    /// A request without tools.
    pub fn new(
        messages: Vec<ChatMessage>,
        decoding: Decoding,
        prompt_version: impl Into<String>,
    ) -> ChatRequest {
        ChatRequest {
            messages,
            decoding,
            prompt_version: prompt_version.into(),
            tools: Vec::new(),
        }
    }
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
    /// Native tool calls in the reply (empty in the text protocol).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
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

    /// Whether the backend passes [`ChatRequest::tools`] to the model and returns native
    /// [`ChatReply::tool_calls`]. Callers use the text protocol when it does not.
    fn supports_tools(&self) -> bool {
        false
    }
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
