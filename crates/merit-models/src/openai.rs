//! A client for OpenAI-compatible servers: vLLM, llama.cpp's `llama-server`, Ollama, OpenAI.
//!
//! [`OpenAiChat`] speaks `POST {base}/v1/chat/completions`, [`OpenAiEmbedder`] speaks
//! `POST {base}/v1/embeddings`. Each has its own [`OpenAiConfig`], so chat and embeddings can
//! come from different servers (a common setup: a big chat model on vLLM, a small encoder
//! elsewhere).
//!
//! The traits are synchronous on purpose (the experiment layer runs streams on threads), so the
//! client uses `reqwest`'s blocking API. TLS is rustls: no OpenSSL on the build machine.
//!
//! # Retries
//! A call is retried when the failure is plausibly transient: HTTP 408, 429 and 5xx, timeouts,
//! refused or broken connections. The wait before attempt `n + 1` is
//! `initial_backoff * multiplier^(n - 1)`, capped at `max_backoff`; when the server sends a
//! `Retry-After` header (seconds), the wait is at least that long (still capped). With the
//! defaults (5 attempts, 0.5 s, ×2, cap 20 s) the waits are 0.5, 1, 2 and 4 s. There is no
//! jitter: runs are meant to be repeatable, and one experiment rarely has enough concurrent
//! streams to stampede a server. Other failures (400, 401, 404, a malformed body) are not
//! retried: repeating them cannot help. After the last attempt the error says what happened
//! and how many attempts were made.

use merit_core::model::{ChatModel, ChatReply, ChatRequest, Embedder, ModelError, Role, ToolCall};
use serde_json::{json, Map, Value as Json};
use std::time::{Duration, Instant};

/// The environment variable read for the API key when the configuration names none.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// Longest error body kept in a [`ModelError`]; servers sometimes answer with whole HTML pages.
const MAX_ERROR_BODY: usize = 600;

/// When and how often a failed call is tried again (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; `1` disables retries. `0` is treated as `1`.
    pub max_attempts: u32,
    /// Wait after the first failed attempt.
    pub initial_backoff: Duration,
    /// Factor applied to the wait after each further failure.
    pub multiplier: f64,
    /// Upper bound on any single wait, `Retry-After` included.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial_backoff: Duration::from_millis(500),
            multiplier: 2.0,
            max_backoff: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based) before the next one, given the
    /// server's `Retry-After` if it sent one.
    pub fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exponent = attempt.saturating_sub(1).min(64) as i32;
        let factor = self.multiplier.max(1.0).powi(exponent);
        let computed = self.initial_backoff.as_secs_f64() * factor;
        let cap = self.max_backoff.as_secs_f64();
        let mut wait = if computed.is_finite() {
            computed.min(cap)
        } else {
            cap
        };
        if let Some(hint) = retry_after {
            wait = wait.max(hint.as_secs_f64().min(cap));
        }
        Duration::from_secs_f64(wait.max(0.0))
    }

    /// The whole schedule of waits for a call that fails every time (without `Retry-After`).
    pub fn schedule(&self) -> Vec<Duration> {
        (1..self.max_attempts.max(1))
            .map(|attempt| self.backoff(attempt, None))
            .collect()
    }
}

/// Where and how to reach one OpenAI-compatible endpoint.
#[derive(Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Server root, e.g. `http://127.0.0.1:8080` (a trailing `/v1` is accepted too).
    pub base_url: String,
    /// Model name sent in every request (`model` field).
    pub model: String,
    /// Name of the environment variable holding the API key; when that variable is unset or
    /// empty, no `Authorization` header is sent (local servers need none).
    pub api_key_env: String,
    /// Limit on one whole request, connection and reply included.
    pub request_timeout: Duration,
    /// Limit on establishing the connection.
    pub connect_timeout: Duration,
    /// Retry schedule.
    pub retry: RetryPolicy,
    /// Overrides [`ChatModel::id`] / [`Embedder::id`] (part of reply-cache keys); default
    /// `openai:{model}`.
    pub id: Option<String>,
    /// Extra top-level fields merged into every request body (server-specific options such as
    /// `top_k`); they never override the fields the client sets itself.
    pub extra_body: Map<String, Json>,
    /// Largest reply body read, in bytes; a larger one is a malformed reply (a broken or
    /// hostile server must not make the client hold gigabytes). Default 16 MiB.
    pub max_body_bytes: u64,
}

/// [`OpenAiConfig::max_body_bytes`] by default: far above any chat or embedding reply.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Spelled out so that a future `api_key` field could never be printed by accident.
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry", &self.retry)
            .field("id", &self.id)
            .field("extra_body", &self.extra_body)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish()
    }
}

impl OpenAiConfig {
    /// A configuration with the defaults: key from `OPENAI_API_KEY`, 300 s per request (a slow
    /// CPU server can take minutes on a long prompt), 10 s to connect, [`RetryPolicy::default`].
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: DEFAULT_API_KEY_ENV.to_string(),
            request_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            id: None,
            extra_body: Map::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }

    /// The full URL of an API path such as `chat/completions`.
    pub fn endpoint(&self, path: &str) -> String {
        let base = self.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        format!("{base}/v1/{}", path.trim_start_matches('/'))
    }

    fn identity(&self) -> String {
        self.id
            .clone()
            .unwrap_or_else(|| format!("openai:{}", self.model))
    }
}

/// The HTTP plumbing shared by chat and embeddings: one connection pool, the key, retries.
struct Transport {
    config: OpenAiConfig,
    client: reqwest::blocking::Client,
    api_key: Option<String>,
}

impl Transport {
    fn new(config: OpenAiConfig) -> Result<Transport, ModelError> {
        let url = config.endpoint("models");
        match reqwest::Url::parse(&url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
            Ok(parsed) => {
                return Err(ModelError::InvalidRequest(format!(
                    "base URL {:?} has scheme {:?}; only http and https are supported",
                    config.base_url,
                    parsed.scheme()
                )))
            }
            Err(error) => {
                return Err(ModelError::InvalidRequest(format!(
                    "base URL {:?} is not a valid URL: {error}",
                    config.base_url
                )))
            }
        }
        if config.model.trim().is_empty() {
            return Err(ModelError::InvalidRequest(
                "the model name is empty".to_string(),
            ));
        }
        let client = reqwest::blocking::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|error| {
                ModelError::Unavailable(format!("cannot set up the HTTP client: {error}"))
            })?;
        let api_key = std::env::var(&config.api_key_env)
            .ok()
            .map(|key| key.trim().to_string())
            .filter(|key| !key.is_empty());
        Ok(Transport {
            config,
            client,
            api_key,
        })
    }

    /// POSTs `body` to `path`, retrying transient failures; returns the parsed JSON reply and
    /// the wall time of the whole call (waits between attempts included: that is what the
    /// caller waited).
    fn post(&self, path: &str, body: &Json) -> Result<(Json, Duration), ModelError> {
        let url = self.config.endpoint(path);
        let started = Instant::now();
        let max_attempts = self.config.retry.max_attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match self.attempt(&url, body) {
                Ok(reply) => return Ok((reply, started.elapsed())),
                Err(failure) => failure,
            };
            if !failure.retryable || attempt >= max_attempts {
                let error = failure.error;
                if !failure.retryable {
                    return Err(error);
                }
                let note = format!(
                    "gave up after {attempt} attempt{} in {:.1} s",
                    if attempt == 1 { "" } else { "s" },
                    started.elapsed().as_secs_f64()
                );
                return Err(annotate(error, &note));
            }
            let wait = self.config.retry.backoff(attempt, failure.retry_after);
            tracing::warn!(
                url = %url,
                attempt,
                max_attempts,
                wait_ms = wait.as_millis() as u64,
                "model call failed, retrying: {}",
                failure.error
            );
            std::thread::sleep(wait);
        }
    }

    fn attempt(&self, url: &str, body: &Json) -> Result<Json, Failure> {
        let mut request = self.client.post(url).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().map_err(|error| Failure {
            // Every send error is a transport problem (refused, reset, timed out, DNS); the
            // URL itself was checked when the client was built.
            error: ModelError::Transport(describe_reqwest(url, &error)),
            retryable: true,
            retry_after: None,
        })?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<f64>().ok())
            .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
            .map(Duration::from_secs_f64);
        // Reading the body can fail too (connection cut mid-reply, or the timeout hits). It is
        // read up to the size limit, and must be UTF-8: a reply that is neither is the
        // server's fault and is not retried (the same request would get the same answer).
        let limit = self.config.max_body_bytes;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(response, limit.saturating_add(1)),
            &mut bytes,
        )
        .map_err(|error| Failure {
            error: ModelError::Transport(format!("{url}: the reply was cut off: {error}")),
            retryable: true,
            retry_after: None,
        })?;
        let too_large = bytes.len() as u64 > limit;
        if too_large && status.is_success() {
            return Err(Failure {
                error: ModelError::Malformed(format!(
                    "{url} answered {status} with a body larger than {limit} bytes"
                )),
                retryable: false,
                retry_after: None,
            });
        }
        let text = if !status.is_success() {
            // An error body is only shown to the user: its status decides what happens.
            let text = String::from_utf8_lossy(&bytes).into_owned();
            if too_large {
                format!("(a body larger than {limit} bytes) {}", shorten(&text))
            } else {
                text
            }
        } else {
            String::from_utf8(bytes).map_err(|error| Failure {
                error: ModelError::Malformed(format!(
                    "{url} answered {status} with a body that is not UTF-8 ({error})"
                )),
                retryable: false,
                retry_after: None,
            })?
        };
        if status.is_success() {
            return serde_json::from_str(&text).map_err(|error| Failure {
                error: ModelError::Malformed(format!(
                    "{url} answered {status} with a body that is not JSON ({error}): {}",
                    shorten(&text)
                )),
                retryable: false,
                retry_after: None,
            });
        }
        let code = status.as_u16();
        let message = error_message(&text);
        let retryable = code == 408 || code == 429 || status.is_server_error();
        let error = match code {
            400 | 413 | 422 => {
                ModelError::InvalidRequest(format!("{url} answered {code}: {message}"))
            }
            _ => ModelError::Server {
                status: code,
                body: message,
            },
        };
        Err(Failure {
            error,
            retryable,
            retry_after,
        })
    }
}

/// One failed attempt and whether another could succeed.
struct Failure {
    error: ModelError,
    retryable: bool,
    retry_after: Option<Duration>,
}

/// Appends `note` (e.g. the attempt count) to an error's message.
fn annotate(error: ModelError, note: &str) -> ModelError {
    match error {
        ModelError::Transport(message) => ModelError::Transport(format!("{message} ({note})")),
        ModelError::Server { status, body } => ModelError::Server {
            status,
            body: format!("{body} ({note})"),
        },
        ModelError::Malformed(message) => ModelError::Malformed(format!("{message} ({note})")),
        ModelError::Unavailable(message) => ModelError::Unavailable(format!("{message} ({note})")),
        ModelError::InvalidRequest(message) => {
            ModelError::InvalidRequest(format!("{message} ({note})"))
        }
    }
}

/// A reqwest error with its causes, which carry the useful part ("connection refused").
fn describe_reqwest(url: &str, error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut text = format!("{what}: POST {url}");
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(error);
    let mut seen = 0;
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
        seen += 1;
        if seen > 4 {
            break;
        }
    }
    text
}

/// The human part of an OpenAI-style error body (`{"error": {"message": ...}}`), else the
/// body itself, shortened.
fn error_message(body: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Json>(body) {
        let message = json
            .pointer("/error/message")
            .or_else(|| json.get("error").filter(|value| value.is_string()))
            .or_else(|| json.get("message"))
            .and_then(Json::as_str);
        if let Some(message) = message {
            return shorten(message);
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        "(empty body)".to_string()
    } else {
        shorten(trimmed)
    }
}

fn shorten(text: &str) -> String {
    if text.len() <= MAX_ERROR_BODY {
        return text.to_string();
    }
    let mut end = MAX_ERROR_BODY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// Merges `extra` into `body` without overriding what the client set.
fn merge_extra(body: &mut Json, extra: &Map<String, Json>) {
    if let Json::Object(fields) = body {
        for (key, value) in extra {
            fields.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
}

/// A chat model behind `/v1/chat/completions`.
pub struct OpenAiChat {
    transport: Transport,
}

impl std::fmt::Debug for OpenAiChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("config", &self.transport.config)
            .field("authenticated", &self.transport.api_key.is_some())
            .finish()
    }
}

impl OpenAiChat {
    /// Prepares the client (reads the API key from the environment now); contacts nothing.
    pub fn new(config: OpenAiConfig) -> Result<OpenAiChat, ModelError> {
        Ok(OpenAiChat {
            transport: Transport::new(config)?,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.transport.config
    }

    /// The JSON body sent for `request` (public so that tests and logs can show it).
    pub fn request_body(&self, request: &ChatRequest) -> Json {
        let messages: Vec<Json> = request
            .messages
            .iter()
            .map(|message| {
                let role = match message.role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                    Role::Tool => "tool",
                };
                let mut out = json!({"role": role, "content": message.content});
                if !message.tool_calls.is_empty() {
                    out["tool_calls"] = message
                        .tool_calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            })
                        })
                        .collect();
                }
                if let Some(id) = &message.tool_call_id {
                    out["tool_call_id"] = json!(id);
                }
                out
            })
            .collect();
        let decoding = &request.decoding;
        let mut body = json!({
            "model": self.transport.config.model,
            "messages": messages,
            "temperature": decoding.temperature,
            "seed": decoding.seed,
            "max_tokens": decoding.max_tokens,
            "stream": false,
        });
        if !decoding.stop.is_empty() {
            body["stop"] = json!(decoding.stop);
        }
        // llama.cpp's server reads a GBNF grammar under this name; servers that do not know
        // it ignore it (vLLM's guided decoding takes another grammar format).
        if let Some(grammar) = &decoding.grammar {
            body["grammar"] = json!(grammar);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|tool| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.parameters,
                        },
                    })
                })
                .collect();
        }
        merge_extra(&mut body, &self.transport.config.extra_body);
        body
    }
}

impl ChatModel for OpenAiChat {
    fn id(&self) -> String {
        self.transport.config.identity()
    }

    /// The chat-completions API defines `tools`; a server started without tool support
    /// (vLLM without `--enable-auto-tool-choice`, llama.cpp's server without `--jinja`)
    /// answers such a request with an error, and callers fall back to text.
    fn supports_tools(&self) -> bool {
        true
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        if request.messages.is_empty() {
            return Err(ModelError::InvalidRequest(
                "a chat request needs at least one message".to_string(),
            ));
        }
        let body = self.request_body(request);
        let (reply, latency) = self.transport.post("chat/completions", &body)?;
        parse_chat_reply(&reply, latency)
    }
}

/// Reads text, usage and native tool calls out of a chat-completions reply (what a server
/// answered, untrusted: anything malformed is a [`ModelError::Malformed`] naming the part).
pub fn parse_chat_reply(reply: &Json, latency: Duration) -> Result<ChatReply, ModelError> {
    let choice = reply
        .get("choices")
        .and_then(Json::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| {
            ModelError::Malformed(format!(
                "chat reply has no choices: {}",
                shorten(&reply.to_string())
            ))
        })?;
    let text = match choice.pointer("/message/content") {
        Some(Json::String(text)) => text.clone(),
        // Some servers send `null` content when the model produced nothing.
        Some(Json::Null) => String::new(),
        _ => {
            return Err(ModelError::Malformed(format!(
                "chat reply has no message content: {}",
                shorten(&choice.to_string())
            )))
        }
    };
    let count = |field: &str| -> Result<u32, ModelError> {
        match reply.get("usage").and_then(|usage| usage.get(field)) {
            None | Some(Json::Null) => Ok(0),
            Some(value) => value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    ModelError::Malformed(format!("usage.{field} is not a count: {value}"))
                }),
        }
    };
    if reply.get("usage").is_none() {
        tracing::warn!("chat reply carries no usage; token counts recorded as 0");
    }
    Ok(ChatReply {
        text,
        prompt_tokens: count("prompt_tokens")?,
        completion_tokens: count("completion_tokens")?,
        latency,
        cached: false,
        tool_calls: parse_tool_calls(choice)?,
    })
}

/// The native tool calls of a choice (`message.tool_calls`); none when absent or null.
fn parse_tool_calls(choice: &Json) -> Result<Vec<ToolCall>, ModelError> {
    let calls = match choice.pointer("/message/tool_calls") {
        None | Some(Json::Null) => return Ok(Vec::new()),
        Some(Json::Array(calls)) => calls,
        Some(other) => {
            return Err(ModelError::Malformed(format!(
                "message.tool_calls is not a list: {}",
                shorten(&other.to_string())
            )))
        }
    };
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let name = call
                .pointer("/function/name")
                .and_then(Json::as_str)
                .ok_or_else(|| {
                    ModelError::Malformed(format!(
                        "tool call {index} has no function name: {}",
                        shorten(&call.to_string())
                    ))
                })?;
            // The API sends arguments as a JSON string; some servers send the object itself.
            let arguments = match call.pointer("/function/arguments") {
                Some(Json::String(text)) => text.clone(),
                None | Some(Json::Null) => "{}".to_string(),
                Some(object) => object.to_string(),
            };
            let id = call
                .get("id")
                .and_then(Json::as_str)
                .map_or_else(|| format!("call_{index}"), str::to_string);
            Ok(ToolCall {
                id,
                name: name.to_string(),
                arguments,
            })
        })
        .collect()
}

/// An embedder behind `/v1/embeddings`; vectors are L2-normalised on arrival.
pub struct OpenAiEmbedder {
    transport: Transport,
    dimension: usize,
    batch_size: usize,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("config", &self.transport.config)
            .field("dimension", &self.dimension)
            .field("batch_size", &self.batch_size)
            .finish()
    }
}

impl OpenAiEmbedder {
    /// Texts sent per request by default; servers cap batch sizes, 64 is safe for all of them.
    pub const DEFAULT_BATCH_SIZE: usize = 64;

    /// Connects: with `dimension` given, contacts nothing and checks every reply against it;
    /// without, embeds one probe text to learn the dimension (the trait reports it up front).
    pub fn new(
        config: OpenAiConfig,
        dimension: Option<usize>,
    ) -> Result<OpenAiEmbedder, ModelError> {
        let transport = Transport::new(config)?;
        let mut embedder = OpenAiEmbedder {
            transport,
            dimension: dimension.unwrap_or(0),
            batch_size: Self::DEFAULT_BATCH_SIZE,
        };
        if dimension == Some(0) {
            return Err(ModelError::InvalidRequest(
                "embedding dimension 0 is not a dimension".to_string(),
            ));
        }
        if dimension.is_none() {
            let probe = embedder.embed_batch(&["dimension probe".to_string()])?;
            embedder.dimension = probe[0].len();
        }
        Ok(embedder)
    }

    /// Sets how many texts go into one request (at least 1).
    pub fn with_batch_size(mut self, batch_size: usize) -> OpenAiEmbedder {
        self.batch_size = batch_size.max(1);
        self
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.transport.config
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut body = json!({
            "model": self.transport.config.model,
            "input": texts,
            "encoding_format": "float",
        });
        merge_extra(&mut body, &self.transport.config.extra_body);
        let (reply, _latency) = self.transport.post("embeddings", &body)?;
        let data = reply.get("data").and_then(Json::as_array).ok_or_else(|| {
            ModelError::Malformed(format!(
                "embeddings reply has no data array: {}",
                shorten(&reply.to_string())
            ))
        })?;
        if data.len() != texts.len() {
            return Err(ModelError::Malformed(format!(
                "asked for {} embeddings, got {}",
                texts.len(),
                data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (position, item) in data.iter().enumerate() {
            // `index` says which input a vector belongs to; servers may reorder.
            let index = match item.get("index") {
                Some(value) => value
                    .as_u64()
                    .map(|i| i as usize)
                    .filter(|i| *i < texts.len())
                    .ok_or_else(|| ModelError::Malformed(format!("bad embedding index {value}")))?,
                None => position,
            };
            let raw = item.get("embedding").and_then(Json::as_array).ok_or_else(|| {
                ModelError::Malformed(format!(
                    "embedding {index} is not an array of numbers (only encoding_format=float is supported)"
                ))
            })?;
            let mut vector = Vec::with_capacity(raw.len());
            for value in raw {
                let number = value.as_f64().ok_or_else(|| {
                    ModelError::Malformed(format!("embedding {index} holds a non-number: {value}"))
                })?;
                vector.push(number as f32);
            }
            if slots[index].replace(vector).is_some() {
                return Err(ModelError::Malformed(format!(
                    "embedding index {index} appears twice"
                )));
            }
        }
        let mut vectors = Vec::with_capacity(texts.len());
        for (index, slot) in slots.into_iter().enumerate() {
            let vector = slot
                .ok_or_else(|| ModelError::Malformed(format!("no embedding for input {index}")))?;
            vectors.push(normalise(vector, index)?);
        }
        Ok(vectors)
    }
}

/// Scales `vector` to unit length; a zero or non-finite vector cannot be, and is an error.
fn normalise(mut vector: Vec<f32>, index: usize) -> Result<Vec<f32>, ModelError> {
    if vector.is_empty() {
        return Err(ModelError::Malformed(format!("embedding {index} is empty")));
    }
    let norm = vector
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return Err(ModelError::Malformed(format!(
            "embedding {index} cannot be normalised (norm {norm})"
        )));
    }
    for x in &mut vector {
        *x = (f64::from(*x) / norm) as f32;
    }
    Ok(vector)
}

impl Embedder for OpenAiEmbedder {
    fn id(&self) -> String {
        self.transport.config.identity()
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.batch_size) {
            for vector in self.embed_batch(batch)? {
                if vector.len() != self.dimension {
                    return Err(ModelError::Malformed(format!(
                        "embedding has {} dimensions, expected {}",
                        vector.len(),
                        self.dimension
                    )));
                }
                vectors.push(vector);
            }
        }
        Ok(vectors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_schedule_doubles_from_half_a_second() {
        let waits = RetryPolicy::default().schedule();
        let millis: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, vec![500, 1000, 2000, 4000]);
    }

    #[test]
    fn backoff_is_capped_and_honours_retry_after() {
        let policy = RetryPolicy {
            max_attempts: 10,
            initial_backoff: Duration::from_secs(1),
            multiplier: 3.0,
            max_backoff: Duration::from_secs(10),
        };
        assert_eq!(policy.backoff(1, None), Duration::from_secs(1));
        assert_eq!(policy.backoff(2, None), Duration::from_secs(3));
        assert_eq!(policy.backoff(4, None), Duration::from_secs(10));
        assert_eq!(
            policy.backoff(1, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(
            policy.backoff(1, Some(Duration::from_secs(500))),
            Duration::from_secs(10)
        );
        assert_eq!(policy.backoff(64, None), Duration::from_secs(10));
    }

    #[test]
    fn endpoint_accepts_base_with_or_without_v1() {
        for base in [
            "http://h:1",
            "http://h:1/",
            "http://h:1/v1",
            "http://h:1/v1/",
        ] {
            let config = OpenAiConfig::new(base, "m");
            assert_eq!(
                config.endpoint("chat/completions"),
                "http://h:1/v1/chat/completions"
            );
        }
    }

    #[test]
    fn bad_configuration_is_refused_up_front() {
        assert!(matches!(
            OpenAiChat::new(OpenAiConfig::new("not a url", "m")),
            Err(ModelError::InvalidRequest(_))
        ));
        assert!(matches!(
            OpenAiChat::new(OpenAiConfig::new("ftp://h", "m")),
            Err(ModelError::InvalidRequest(_))
        ));
        assert!(matches!(
            OpenAiChat::new(OpenAiConfig::new("http://h", " ")),
            Err(ModelError::InvalidRequest(_))
        ));
    }

    #[test]
    fn normalise_rejects_zero_vectors() {
        assert!(normalise(vec![0.0, 0.0], 0).is_err());
        let unit = normalise(vec![3.0, 4.0], 0).unwrap();
        assert!((unit[0] - 0.6).abs() < 1e-6 && (unit[1] - 0.8).abs() < 1e-6);
    }

    #[test]
    fn error_bodies_are_summarised() {
        assert_eq!(
            error_message(r#"{"error":{"message":"too long"}}"#),
            "too long"
        );
        assert_eq!(error_message(""), "(empty body)");
        let long = "x".repeat(5000);
        assert!(error_message(&long).len() < 700);
    }
}
