//! In-process GGUF chat models through llama.cpp (crate `llama-cpp-2`), with prefix reuse.
//!
//! [`LlamaChat`] loads a GGUF file (by default Qwen2.5-Coder-0.5B-Instruct) and implements
//! [`ChatModel`]. What it does on every call:
//!
//! 1. The messages are rendered with the chat template stored in the GGUF metadata, applied by
//!    llama.cpp itself; if the file has no template, or llama.cpp cannot apply it, a
//!    hand-written ChatML formatter ([`chatml`]) is used instead (Qwen's format). llama.cpp
//!    recognises the template's format but does not execute its Jinja code, which for Qwen
//!    also inserts a default system message ("You are Qwen, created by Alibaba Cloud. ...")
//!    when the conversation has none; that message is read from the template
//!    ([`default_system_prompt`]) and inserted the same way, so that prompts match what
//!    Transformers, vLLM or `llama-server --jinja` send for the same conversation.
//! 2. The prompt is tokenized and compared with the tokens whose keys and values are still in
//!    the KV cache from the previous call. Only the part after the longest common prefix is
//!    evaluated; the stale cache entries after that prefix are removed first. A repair episode
//!    re-sends schema, question and history on every step, so most of each prompt is already
//!    in the cache: this is the largest speed lever on a CPU. The price: logits after a reused
//!    prefix come from a smaller batch than the whole prompt's, whose floating-point rounding
//!    differs, so in a near tie the greedy reply can differ from the one an empty cache gives
//!    (seen on 2026-12-06: one rubric request asked twice of one loaded model gave two
//!    rubrics). What makes a run repeat exactly is the reply cache, not the model.
//! 3. Tokens are chosen greedily (or sampled with `temperature` and `seed` when asked) until an
//!    end-of-generation token (for Qwen 151645 `<|im_end|>` and 151643 `<|endoftext|>`), a
//!    [`Decoding::stop`](merit_core::model::Decoding::stop) string, [`Decoding::max_tokens`](merit_core::model::Decoding::max_tokens), or the end of the context window.
//! 4. With greedy decoding and [`LlamaConfig::prompt_lookup`] set, generation is sped up by
//!    prompt-lookup (n-gram) speculative decoding: the last few generated tokens are looked up
//!    in the prompt and the reply so far ([`PromptLookup`]), the tokens that followed them are
//!    proposed as a draft, and the last chosen token and the draft are evaluated in one batch
//!    with logits at every position. The draft is accepted as long as each token is the
//!    greedy choice after the ones before it; at the first disagreement the model's own
//!    choice is taken, and the rejected tokens are removed from the KV cache. The reply is
//!    the one token-by-token greedy decoding gives (up to the floating-point rounding of
//!    batched evaluation, which the tests compare), with fewer sequential model calls: a
//!    repair reply copies most of the previous SQL, which is in the prompt.
//!
//! # Threads
//!
//! A llama.cpp context is not thread-safe and holds the KV cache that prefix reuse depends on,
//! so each [`LlamaChat`] owns its context on one dedicated worker thread; [`LlamaChat`] is
//! `Send + Sync` and can be shared through an `Arc`. Each model step uses every available core
//! (llama.cpp's own thread pool). With [`LlamaConfig::parallel`] at 1 (the default), calls from
//! any number of threads run **one at a time** in arrival order. Above 1, the worker batches
//! concurrent calls (continuous batching, in the `batched` module): each conversation gets a
//! KV sequence of one shared context, and every step decodes the next token of all of them
//! at once, which on a CPU costs little more than one conversation's step.

mod batched;
mod lookup;

pub use lookup::PromptLookup;

use merit_core::model::{ChatMessage, ChatModel, ChatReply, ChatRequest, ModelError, Role};
use std::num::NonZeroU32;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::LlamaToken;

/// Qwen's end-of-turn (`<|im_end|>`) and end-of-text (`<|endoftext|>`) token ids. Generation
/// also stops on whatever the GGUF itself marks as end-of-generation.
pub const QWEN_STOP_TOKEN_IDS: [i32; 2] = [151645, 151643];

/// Name of the default embedded chat model.
pub const DEFAULT_CHAT_MODEL: &str = "qwen2.5-coder-0.5b-instruct";

/// Default context window in tokens.
pub const DEFAULT_CONTEXT_SIZE: u32 = 4096;

/// The magic bytes every GGUF file starts with.
const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// How an embedded chat model is loaded and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlamaConfig {
    /// The GGUF file.
    pub model_path: PathBuf,
    /// Model name used in [`ChatModel::id`] (`llama.cpp:{name}`); by default the file stem,
    /// lower-cased.
    pub name: String,
    /// Context window in tokens (prompt and reply together); default 4096.
    pub context_size: u32,
    /// CPU threads for llama.cpp; default: every available core.
    pub threads: usize,
    /// Most tokens evaluated in one llama.cpp batch when reading a prompt; default 512.
    pub batch_size: u32,
    /// Keep the KV cache between calls and evaluate only the new suffix of each prompt
    /// (default `true`). Can also be switched at run time with [`LlamaChat::set_prefix_reuse`].
    pub prefix_reuse: bool,
    /// Extra token ids that end generation, besides the GGUF's own end-of-generation tokens;
    /// default [`QWEN_STOP_TOKEN_IDS`].
    pub stop_token_ids: Vec<i32>,
    /// Prompt-lookup speculative decoding for greedy requests (see the [module docs](self));
    /// `None` (the default) decodes one token per model evaluation. Off by default because on
    /// the 2-core benchmark machine it was slower, not faster: the replies were identical, the
    /// model steps 4x fewer, but each batched step (logits at every draft position, about
    /// half the draft tokens rejected) cost about 5x a single-token step. Machines with
    /// more cores, or a GPU, make batched steps relatively cheaper; measure with
    /// `merit bench models`. Sampled requests (`temperature > 0`) never use it. Can also be
    /// switched at run time with [`LlamaChat::set_prompt_lookup`].
    pub prompt_lookup: Option<PromptLookup>,
    /// KV caches kept side by side for each caller (default 1, at most [`MAX_CACHE_SLOTS`]).
    /// Each call goes to the cache sharing the longest prefix with its prompt, so a caller
    /// that alternates between conversations (an agent and the user simulator it asks, on
    /// one model) keeps each one's prefix instead of evicting it. Each slot is a whole
    /// context: memory grows by one KV cache of `context_size` tokens per slot.
    pub cache_slots: usize,
    /// Conversations decoded together (default 1, at most [`MAX_PARALLEL`]). Above 1, calls
    /// from concurrent callers are batched: one context holds `parallel × cache_slots` KV
    /// sequences (each caller's slots; every sequence has its own `context_size` window and
    /// its own prefix reuse), and every model step decodes the next token of each
    /// conversation in flight together (see "Threads" in the module docs). On a CPU a step for several
    /// conversations costs little more than a step for one, so the calls of concurrent
    /// streams finish sooner in total. Replies can differ from one-at-a-time decoding where
    /// batched arithmetic rounds a near-tie the other way; prompt lookup is not used.
    pub parallel: usize,
}

/// The most KV cache slots one [`LlamaChat`] keeps.
pub const MAX_CACHE_SLOTS: usize = 8;

/// The most conversations one [`LlamaChat`] decodes together.
pub const MAX_PARALLEL: usize = 16;

/// A shared prefix shorter than this (in tokens) does not make a cache slot the match for a
/// prompt: every conversation of one chat template shares its first few tokens, and spending
/// a busy slot on an unrelated conversation would evict a prefix worth keeping. Such
/// prompts go to the least recently used slot instead.
const MIN_SLOT_MATCH: usize = 32;

impl LlamaConfig {
    /// Defaults for the GGUF file at `model_path`.
    pub fn new(model_path: impl Into<PathBuf>) -> LlamaConfig {
        let model_path = model_path.into();
        let name = model_path
            .file_stem()
            .map(|stem| stem.to_string_lossy().to_lowercase())
            .filter(|stem| !stem.is_empty())
            .unwrap_or_else(|| "gguf".to_string());
        LlamaConfig {
            model_path,
            name,
            context_size: DEFAULT_CONTEXT_SIZE,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            batch_size: 512,
            prefix_reuse: true,
            stop_token_ids: QWEN_STOP_TOKEN_IDS.to_vec(),
            prompt_lookup: None,
            cache_slots: 1,
            parallel: 1,
        }
    }

    /// Sets [`LlamaConfig::parallel`], the number of conversations decoded together.
    pub fn with_parallel(mut self, conversations: usize) -> LlamaConfig {
        self.parallel = conversations;
        self
    }

    /// Sets the number of KV cache slots (see [`LlamaConfig::cache_slots`]).
    pub fn with_cache_slots(mut self, slots: usize) -> LlamaConfig {
        self.cache_slots = slots;
        self
    }

    /// Sets the model name used in the id.
    pub fn with_name(mut self, name: impl Into<String>) -> LlamaConfig {
        self.name = name.into();
        self
    }

    /// Sets the context window.
    pub fn with_context_size(mut self, tokens: u32) -> LlamaConfig {
        self.context_size = tokens;
        self
    }

    /// Sets the number of CPU threads.
    pub fn with_threads(mut self, threads: usize) -> LlamaConfig {
        self.threads = threads;
        self
    }

    /// Turns prefix reuse on or off.
    pub fn with_prefix_reuse(mut self, on: bool) -> LlamaConfig {
        self.prefix_reuse = on;
        self
    }

    /// Turns prompt-lookup decoding on (with the current or default parameters) or off.
    pub fn with_prompt_lookup(mut self, on: bool) -> LlamaConfig {
        self.prompt_lookup = if on {
            Some(self.prompt_lookup.unwrap_or_default())
        } else {
            None
        };
        self
    }

    /// Turns prompt-lookup decoding on with the given parameters.
    pub fn with_prompt_lookup_params(mut self, params: PromptLookup) -> LlamaConfig {
        self.prompt_lookup = Some(params);
        self
    }
}

/// What one call cost, in more detail than [`ChatReply`] gives (for benchmarks and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallStats {
    /// Tokens in the rendered prompt.
    pub prompt_tokens: u32,
    /// The KV cache slot the call used (0 with one slot).
    pub slot: u32,
    /// Prompt tokens whose KV entries were reused from an earlier call.
    pub reused_tokens: u32,
    /// Of `reused_tokens`, those copied from another conversation's sequence (the batched
    /// engine only; 0 one call at a time).
    pub shared_tokens: u32,
    /// Prompt tokens actually evaluated (`prompt_tokens - reused_tokens`).
    pub evaluated_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
    /// Time spent evaluating the prompt suffix.
    pub prompt_time: Duration,
    /// Time spent generating.
    pub generation_time: Duration,
    /// Draft tokens proposed by prompt lookup and checked by the model (0 without lookup).
    pub drafted_tokens: u32,
    /// Draft tokens the model agreed with, each one a sequential evaluation saved. They are
    /// part of `completion_tokens` when they made it into the reply (a stop condition can
    /// end the reply inside an accepted draft).
    pub accepted_tokens: u32,
    /// Model evaluations (batches) during generation. Without lookup one per reply token,
    /// except the last one, which is evaluated only when an end-of-generation token follows.
    pub generation_steps: u32,
}

impl CallStats {
    /// One debug line per call (`MERIT_LOG=merit_models=debug`): where the model time went.
    fn log(&self) {
        tracing::debug!(
            sequence = self.slot,
            prompt = self.prompt_tokens,
            reused = self.reused_tokens,
            shared = self.shared_tokens,
            generated = self.completion_tokens,
            prompt_ms = self.prompt_time.as_millis() as u64,
            generation_ms = self.generation_time.as_millis() as u64,
            steps = self.generation_steps,
            drafted = self.drafted_tokens,
            accepted = self.accepted_tokens,
            "call done"
        );
    }
}

/// What the loaded model is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlamaModelInfo {
    /// Context window of this instance.
    pub context_size: u32,
    /// Context length the model was trained with.
    pub trained_context: u32,
    /// Parameter count.
    pub parameters: u64,
    /// `true` when prompts are rendered with the GGUF's own chat template, `false` when the
    /// built-in ChatML fallback is used.
    pub uses_gguf_template: bool,
    /// The system message the template adds to conversations that have none.
    pub default_system_prompt: Option<String>,
}

/// A GGUF chat model running in-process through llama.cpp. See the [module docs](self) for
/// how calls are served and why they run one at a time.
pub struct LlamaChat {
    id: String,
    info: LlamaModelInfo,
    prefix_reuse: Arc<AtomicBool>,
    prompt_lookup: Arc<Mutex<Option<PromptLookup>>>,
    /// The parameters [`LlamaChat::set_prompt_lookup`] turns on.
    lookup_params: PromptLookup,
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for LlamaChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaChat")
            .field("id", &self.id)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// Work sent to the worker thread, each with the channel its answer goes back on.
enum Job {
    Chat(
        Box<ChatRequest>,
        mpsc::Sender<Result<(ChatReply, CallStats), ModelError>>,
    ),
    Render(
        Vec<ChatMessage>,
        mpsc::Sender<Result<(String, usize), ModelError>>,
    ),
    ClearCache(mpsc::Sender<()>),
}

impl LlamaChat {
    /// Loads the GGUF file named in `config` and starts its worker thread.
    ///
    /// Fails with [`ModelError::Unavailable`] naming the file when it is missing, unreadable,
    /// not a GGUF file, or rejected by llama.cpp (e.g. truncated), and with
    /// [`ModelError::InvalidRequest`] for a nonsensical configuration.
    pub fn load(config: LlamaConfig) -> Result<LlamaChat, ModelError> {
        check_gguf_file(&config.model_path)?;
        if config.context_size < 16 {
            return Err(ModelError::InvalidRequest(format!(
                "context size {} is too small (at least 16 tokens)",
                config.context_size
            )));
        }
        if !(1..=MAX_CACHE_SLOTS).contains(&config.cache_slots) {
            return Err(ModelError::InvalidRequest(format!(
                "{} KV cache slots requested; 1 to {MAX_CACHE_SLOTS} are possible",
                config.cache_slots
            )));
        }
        if !(1..=MAX_PARALLEL).contains(&config.parallel) {
            return Err(ModelError::InvalidRequest(format!(
                "{} parallel conversations requested; 1 to {MAX_PARALLEL} are possible",
                config.parallel
            )));
        }
        if config.batch_size == 0 || config.threads == 0 {
            return Err(ModelError::InvalidRequest(
                "batch size and thread count must be at least 1".to_string(),
            ));
        }
        let id = format!("llama.cpp:{}", config.name);
        let prefix_reuse = Arc::new(AtomicBool::new(config.prefix_reuse));
        let prompt_lookup = Arc::new(Mutex::new(config.prompt_lookup));
        let lookup_params = config.prompt_lookup.unwrap_or_default();
        let (jobs, inbox) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let switches = Switches {
            prefix_reuse: Arc::clone(&prefix_reuse),
            prompt_lookup: Arc::clone(&prompt_lookup),
        };
        let worker = std::thread::Builder::new()
            .name(format!("llama.cpp {}", config.name))
            .spawn(move || worker_main(config, switches, ready_tx, inbox))
            .map_err(|error| {
                ModelError::Unavailable(format!("cannot start the llama.cpp thread: {error}"))
            })?;
        let info = match ready_rx.recv() {
            Ok(Ok(info)) => info,
            Ok(Err(error)) => {
                let _ = worker.join();
                return Err(error);
            }
            Err(_) => {
                let _ = worker.join();
                return Err(ModelError::Unavailable(
                    "the llama.cpp thread stopped while loading the model".to_string(),
                ));
            }
        };
        Ok(LlamaChat {
            id,
            info,
            prefix_reuse,
            prompt_lookup,
            lookup_params,
            jobs: Some(jobs),
            worker: Some(worker),
        })
    }

    /// Facts about the loaded model.
    pub fn info(&self) -> &LlamaModelInfo {
        &self.info
    }

    /// Turns prefix reuse on or off for the following calls. Off means every call evaluates
    /// its whole prompt from an empty cache (the baseline the benchmark compares against).
    pub fn set_prefix_reuse(&self, on: bool) {
        self.prefix_reuse.store(on, Ordering::SeqCst);
    }

    /// Turns prompt-lookup decoding on or off for the following calls. Turning it on uses the
    /// configured [`PromptLookup`] parameters, or the defaults when the model was loaded
    /// without lookup.
    pub fn set_prompt_lookup(&self, on: bool) {
        self.set_prompt_lookup_params(on.then_some(self.lookup_params));
    }

    /// Sets the prompt-lookup parameters for the following calls (`None`: off).
    pub fn set_prompt_lookup_params(&self, params: Option<PromptLookup>) {
        // The value is a plain `Option`: a panic elsewhere cannot leave it half-written.
        *self
            .prompt_lookup
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = params;
    }

    /// Empties the KV cache (every slot), so that the next call shares no prefix.
    pub fn clear_cache(&self) -> Result<(), ModelError> {
        let (tx, rx) = mpsc::channel();
        self.send(Job::ClearCache(tx))?;
        rx.recv().map_err(|_| worker_gone())
    }

    /// The exact prompt text `messages` are rendered to, and its length in tokens.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<(String, usize), ModelError> {
        let (tx, rx) = mpsc::channel();
        self.send(Job::Render(messages.to_vec(), tx))?;
        rx.recv().map_err(|_| worker_gone())?
    }

    /// Like [`ChatModel::chat`], with the detailed cost of the call.
    pub fn chat_with_stats(
        &self,
        request: &ChatRequest,
    ) -> Result<(ChatReply, CallStats), ModelError> {
        let (tx, rx) = mpsc::channel();
        self.send(Job::Chat(Box::new(request.clone()), tx))?;
        rx.recv().map_err(|_| worker_gone())?
    }

    fn send(&self, job: Job) -> Result<(), ModelError> {
        match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|_| worker_gone()),
            None => Err(worker_gone()),
        }
    }
}

impl Drop for LlamaChat {
    fn drop(&mut self) {
        // Closing the queue ends the worker's loop; joining frees model and context before
        // the caller goes on (a reload right after a drop must not hold two models in memory).
        self.jobs.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl ChatModel for LlamaChat {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        self.chat_with_stats(request).map(|(reply, _)| reply)
    }
}

fn worker_gone() -> ModelError {
    ModelError::Unavailable("the llama.cpp worker thread has stopped".to_string())
}

/// Checks before llama.cpp sees the file, so that the common mistakes get an error naming the
/// file instead of llama.cpp's generic failure.
fn check_gguf_file(path: &Path) -> Result<(), ModelError> {
    use std::io::Read;
    let unavailable =
        |why: String| ModelError::Unavailable(format!("GGUF model file {}: {why}", path.display()));
    let mut file = std::fs::File::open(path).map_err(|error| unavailable(error.to_string()))?;
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic)
        .map_err(|_| unavailable("too short to be a GGUF file".to_string()))?;
    if &magic != GGUF_MAGIC {
        return Err(unavailable(
            "not a GGUF file (it does not start with the GGUF magic bytes)".to_string(),
        ));
    }
    if path.to_str().is_none() {
        return Err(unavailable(
            "llama.cpp needs a path that is valid UTF-8".to_string(),
        ));
    }
    Ok(())
}

/// The process-wide llama.cpp backend. llama.cpp may be initialised only once per process,
/// and never torn down while a model may still be in use, so it lives in a static.
fn backend() -> Result<&'static LlamaBackend, ModelError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp writes its load-time chatter (including harmless warnings about the
            // vocabulary) to stderr. Route it through `tracing` when the subscriber wants the
            // `llama-cpp-2` target at info level or finer (e.g. `MERIT_LOG=llama-cpp-2=info`),
            // and silence it otherwise: merit's own errors already say what went wrong.
            let wanted = tracing::enabled!(target: "llama-cpp-2", tracing::Level::INFO);
            llama_cpp_2::send_logs_to_tracing(
                llama_cpp_2::LogOptions::default().with_logs_enabled(wanted),
            );
            LlamaBackend::init().map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(|error| ModelError::Unavailable(format!("cannot start llama.cpp: {error}")))
}

/// The index of the largest logit, the first one on ties: exactly what llama.cpp's greedy
/// sampler picks from the same logits (it scans the candidates in token order and replaces
/// its choice only on a strictly larger logit).
fn greedy_choice(logits: &[f32]) -> i32 {
    let mut best = 0usize;
    for (index, &logit) in logits.iter().enumerate().skip(1) {
        if logit > logits[best] {
            best = index;
        }
    }
    i32::try_from(best).unwrap_or(i32::MAX)
}

/// The greedy choice among the tokens `grammar` allows (it is not advanced here). The plain
/// argmax is tried first, alone, since checking one candidate against the grammar is cheap
/// and it is usually allowed; only when it is not does the grammar see all ~152k candidates.
/// Either way the result is the largest allowed logit, the lowest token id on ties.
fn constrained_greedy_choice(grammar: &mut LlamaSampler, logits: &[f32]) -> LlamaToken {
    let best = greedy_choice(logits);
    let logit = logits
        .get(best as usize)
        .copied()
        .unwrap_or(f32::NEG_INFINITY);
    let mut single =
        LlamaTokenDataArray::from_iter([LlamaTokenData::new(LlamaToken(best), logit, 0.0)], false);
    grammar.apply(&mut single);
    if single
        .data
        .first()
        .is_some_and(|d| d.logit() > f32::NEG_INFINITY)
    {
        return LlamaToken(best);
    }
    let mut all = LlamaTokenDataArray::from_iter(
        logits.iter().enumerate().map(|(id, &logit)| {
            LlamaTokenData::new(
                LlamaToken(i32::try_from(id).unwrap_or(i32::MAX)),
                logit,
                0.0,
            )
        }),
        false,
    );
    grammar.apply(&mut all);
    let mut chosen: Option<LlamaTokenData> = None;
    for candidate in &all.data {
        if candidate.logit() == f32::NEG_INFINITY {
            continue;
        }
        let better = match chosen {
            None => true,
            Some(current) => {
                candidate.logit() > current.logit()
                    || (candidate.logit() == current.logit() && candidate.id().0 < current.id().0)
            }
        };
        if better {
            chosen = Some(*candidate);
        }
    }
    // No allowed token only happens with a grammar that can neither continue nor end; the
    // plain choice is then as good as any, and accepting it fails harmlessly.
    chosen.map_or(LlamaToken(best), |d| d.id())
}

/// Formats a conversation in ChatML, the format Qwen models are trained on:
/// `<|im_start|>{role}\n{content}<|im_end|>\n` per message, then `<|im_start|>assistant\n`.
///
/// This is the fallback used when a GGUF carries no chat template llama.cpp can apply; it is
/// written by hand from the published format, not derived from any template.
pub fn chatml(messages: &[ChatMessage]) -> String {
    let mut out = String::new();
    for message in messages {
        out.push_str("<|im_start|>");
        out.push_str(role_name(message.role));
        out.push('\n');
        out.push_str(&message.content);
        out.push_str("<|im_end|>\n");
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        // Never sent to this backend (it does not support native tools); if a caller does,
        // the result reads as a user turn, which is what Qwen's own template does with it.
        Role::Tool => "user",
    }
}

/// The system message a Jinja chat template writes when the conversation starts without one,
/// e.g. Qwen2.5's `'<|im_start|>system\nYou are Qwen, ...<|im_end|>\n'`: the first
/// ChatML system turn written as a constant string (one without `'` or `+`, which would mean
/// the template is inserting the caller's own system message).
pub fn default_system_prompt(template: &str) -> Option<String> {
    const OPEN: &str = "'<|im_start|>system\\n";
    let mut rest = template;
    while let Some(at) = rest.find(OPEN) {
        let after = &rest[at + OPEN.len()..];
        if let Some(end) = after.find("<|im_end|>") {
            let text = &after[..end];
            if !text.is_empty() && !text.contains(['\'', '+', '{', '}']) {
                return Some(text.replace("\\n", "\n"));
            }
        }
        rest = after;
    }
    None
}

/// Length of the longest common prefix of two token sequences.
fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Earliest byte offset at which any non-empty stop string occurs in `text`.
fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|stop| !stop.is_empty())
        .filter_map(|stop| text.find(stop.as_str()))
        .min()
}

/// The run-time switches shared between a [`LlamaChat`] and its worker thread.
struct Switches {
    prefix_reuse: Arc<AtomicBool>,
    prompt_lookup: Arc<Mutex<Option<PromptLookup>>>,
}

fn worker_main(
    config: LlamaConfig,
    switches: Switches,
    ready: mpsc::Sender<Result<LlamaModelInfo, ModelError>>,
    inbox: mpsc::Receiver<Job>,
) {
    // The model and the context (which borrows the model) live on this thread's stack for the
    // whole life of the LlamaChat, which is what lets the KV cache survive between calls.
    let loaded = catch_unwind(AssertUnwindSafe(|| load_model(&config)));
    let model = match loaded {
        Ok(Ok(model)) => model,
        Ok(Err(error)) => {
            let _ = ready.send(Err(error));
            return;
        }
        Err(_) => {
            let _ = ready.send(Err(ModelError::Unavailable(format!(
                "llama.cpp failed while loading {}",
                config.model_path.display()
            ))));
            return;
        }
    };
    if config.parallel > 1 {
        match batched::BatchedEngine::new(&model, &config) {
            Ok(mut engine) => {
                if ready.send(Ok(engine.info())).is_ok() {
                    engine.serve(&switches, &inbox);
                }
            }
            Err(error) => {
                let _ = ready.send(Err(error));
            }
        }
        return;
    }
    let mut engine = match Engine::new(&model, &config) {
        Ok(engine) => engine,
        Err(error) => {
            let _ = ready.send(Err(error));
            return;
        }
    };
    if ready.send(Ok(engine.info())).is_err() {
        return;
    }
    for job in inbox {
        match job {
            Job::Chat(request, reply) => {
                let reuse = switches.prefix_reuse.load(Ordering::SeqCst);
                let lookup = *switches
                    .prompt_lookup
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let outcome =
                    catch_unwind(AssertUnwindSafe(|| engine.chat(&request, reuse, lookup)))
                        .unwrap_or_else(|_| {
                            // A panic inside the bindings leaves the cache in an unknown state.
                            engine.forget_cache();
                            Err(ModelError::Server {
                                status: 0,
                                body: "llama.cpp generation failed unexpectedly".to_string(),
                            })
                        });
                let _ = reply.send(outcome);
            }
            Job::Render(messages, reply) => {
                let _ = reply.send(engine.format.rendered(&messages));
            }
            Job::ClearCache(reply) => {
                engine.forget_all_caches();
                let _ = reply.send(());
            }
        }
    }
}

fn load_model(config: &LlamaConfig) -> Result<LlamaModel, ModelError> {
    let backend = backend()?;
    LlamaModel::load_from_file(backend, &config.model_path, &LlamaModelParams::default()).map_err(
        |error| {
            ModelError::Unavailable(format!(
                "llama.cpp could not load {} ({error}); the file may be truncated or corrupt",
                config.model_path.display()
            ))
        },
    )
}

/// How conversations become tokens and which tokens end a reply: the chat template (or the
/// ChatML fallback), the template's default system prompt and the stop tokens. Shared by the
/// one-at-a-time and the batched engine, so both send the model the same prompt.
struct Formatter<'m> {
    model: &'m LlamaModel,
    template: Option<LlamaChatTemplate>,
    default_system: Option<String>,
    stop_token_ids: Vec<i32>,
}

impl<'m> Formatter<'m> {
    fn new(model: &'m LlamaModel, config: &LlamaConfig) -> Formatter<'m> {
        // Only use the GGUF's template if llama.cpp can actually apply it; otherwise fall back
        // to ChatML for every call rather than failing at the first one.
        let template = model.chat_template(None).ok().filter(|template| {
            let probe = [LlamaChatMessage::new("user".into(), "x".into())];
            probe
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .is_ok_and(|probe| model.apply_chat_template(template, &probe, true).is_ok())
        });
        if template.is_none() {
            tracing::info!(
                model = %config.model_path.display(),
                "no usable chat template in the GGUF; using the built-in ChatML formatter"
            );
        }
        let default_system = template
            .as_ref()
            .and_then(|template| template.to_str().ok().and_then(default_system_prompt));
        Formatter {
            model,
            template,
            default_system,
            stop_token_ids: config.stop_token_ids.clone(),
        }
    }

    fn info(&self, context_size: u32) -> LlamaModelInfo {
        LlamaModelInfo {
            context_size,
            trained_context: self.model.n_ctx_train(),
            parameters: self.model.n_params(),
            uses_gguf_template: self.template.is_some(),
            default_system_prompt: self.default_system.clone(),
        }
    }

    fn render(&self, messages: &[ChatMessage]) -> Result<String, ModelError> {
        if messages.is_empty() {
            return Err(ModelError::InvalidRequest(
                "a chat request needs at least one message".to_string(),
            ));
        }
        if let Some(template) = &self.template {
            let default_system = match (&self.default_system, messages[0].role) {
                (Some(text), role) if role != Role::System => Some(ChatMessage::system(text)),
                _ => None,
            };
            let converted: Result<Vec<LlamaChatMessage>, _> = default_system
                .iter()
                .chain(messages)
                .map(|m| LlamaChatMessage::new(role_name(m.role).to_string(), m.content.clone()))
                .collect();
            let converted = converted.map_err(|_| {
                ModelError::InvalidRequest("a message contains a NUL character".to_string())
            })?;
            if let Ok(text) = self.model.apply_chat_template(template, &converted, true) {
                return Ok(text);
            }
        }
        Ok(chatml(messages))
    }

    fn tokenize(&self, text: &str) -> Result<Vec<LlamaToken>, ModelError> {
        // llama.cpp counts bytes in an i32; refuse long before that instead of panicking.
        if text.len() > (i32::MAX / 4) as usize {
            return Err(ModelError::InvalidRequest(format!(
                "the prompt is {} bytes long, far beyond any context window",
                text.len()
            )));
        }
        // Special tokens must be parsed: the template writes `<|im_start|>` as text.
        Ok(self.model.vocab().tokenize(text.as_bytes(), true, true))
    }

    /// The prompt of `request` as tokens, refused when empty or when it leaves no room for a
    /// reply in a `context_size`-token window.
    fn prompt(
        &self,
        request: &ChatRequest,
        context_size: u32,
    ) -> Result<Vec<LlamaToken>, ModelError> {
        let prompt = self.render(&request.messages)?;
        let tokens = self.tokenize(&prompt)?;
        if tokens.is_empty() {
            return Err(ModelError::InvalidRequest(
                "the prompt is empty after tokenization".to_string(),
            ));
        }
        if tokens.len() >= context_size as usize {
            return Err(ModelError::InvalidRequest(format!(
                "the prompt is {} tokens but the context window holds {} (prompt and reply \
                 together); shorten the prompt or load the model with a larger context size",
                tokens.len(),
                context_size
            )));
        }
        Ok(tokens)
    }

    /// What [`LlamaChat::render`] answers: the prompt text of `messages` and its length in
    /// tokens (a failure inside the bindings becomes an invalid request, not a panic).
    fn rendered(&self, messages: &[ChatMessage]) -> Result<(String, usize), ModelError> {
        catch_unwind(AssertUnwindSafe(|| {
            let text = self.render(messages)?;
            let tokens = self.tokenize(&text)?;
            Ok((text, tokens.len()))
        }))
        .unwrap_or_else(|_| {
            Err(ModelError::InvalidRequest(
                "the prompt could not be rendered".to_string(),
            ))
        })
    }

    fn is_end_of_generation(&self, token: LlamaToken) -> bool {
        self.stop_token_ids.contains(&token.0) || self.model.vocab().is_eog(token)
    }

    /// The text of one token, as bytes (a token may hold part of a UTF-8 character).
    fn piece(&self, token: LlamaToken) -> Vec<u8> {
        self.model.vocab().token_to_piece(token, false, None)
    }
}

/// The per-call token choosers of `decoding`: a sampler when it samples (temperature above
/// zero), a grammar when it constrains (greedy only); neither for plain greedy decoding.
fn token_choosers(
    model: &LlamaModel,
    decoding: &merit_core::model::Decoding,
) -> Result<(Option<LlamaSampler>, Option<LlamaSampler>), ModelError> {
    let sampled = decoding.temperature > 0.0;
    // Greedy decoding reads the argmax straight from the logits: llama.cpp's sampler copies
    // all ~152k candidates into a fresh array per token first, which cost ~2% of generation
    // time on two cores. Same choice, same tie rule (the lowest token id).
    let sampler = sampled.then(|| {
        LlamaSampler::chain_simple([
            LlamaSampler::temp(decoding.temperature),
            LlamaSampler::dist(decoding.seed as u32),
        ])
    });
    let grammar = match &decoding.grammar {
        None => None,
        Some(_) if sampled => {
            return Err(ModelError::InvalidRequest(
                "grammar-constrained decoding is greedy only (temperature 0)".to_string(),
            ))
        }
        Some(text) => Some(LlamaSampler::grammar(model, text, "root").map_err(|error| {
            ModelError::InvalidRequest(format!("the grammar is not usable: {error}"))
        })?),
    };
    Ok((sampler, grammar))
}

/// The next token from the logits of batch position `index`: the sampler's choice, the
/// greedy one among the tokens `grammar` allows (advancing it), or the plain greedy one.
fn choose_token(
    context: &LlamaContext<'_>,
    sampler: Option<&mut LlamaSampler>,
    grammar: Option<&mut LlamaSampler>,
    index: i32,
) -> LlamaToken {
    let logits = context.get_logits_ith(index);
    match (sampler, grammar) {
        (Some(sampler), _) => sampler.sample(context, index),
        (None, None) => LlamaToken(greedy_choice(logits)),
        (None, Some(grammar)) => {
            let token = constrained_greedy_choice(grammar, logits);
            grammar.accept(token);
            token
        }
    }
}

/// The state of one loaded model: its context (with the KV cache) and what is in the cache.
struct Engine<'m> {
    model: &'m LlamaModel,
    /// The context of the active slot (the one calls evaluate in).
    context: LlamaContext<'m>,
    /// The tokens whose keys and values are in the active slot's KV cache, position by
    /// position.
    cached: Vec<LlamaToken>,
    /// Which slot is active, and when it was last chosen.
    active: SlotMark,
    /// The other slots, swapped into `context`/`cached` when a prompt matches them better.
    parked: Vec<ParkedSlot<'m>>,
    /// Counts calls; orders the slots by last use.
    clock: u64,
    format: Formatter<'m>,
    batch_size: usize,
    context_size: u32,
}

/// A slot's number and the clock value of its last use.
#[derive(Debug, Clone, Copy)]
struct SlotMark {
    number: usize,
    last_used: u64,
}

/// A KV cache slot not in use by the current call.
struct ParkedSlot<'m> {
    context: LlamaContext<'m>,
    cached: Vec<LlamaToken>,
    mark: SlotMark,
}

impl<'m> Engine<'m> {
    fn new(model: &'m LlamaModel, config: &LlamaConfig) -> Result<Engine<'m>, ModelError> {
        let backend = backend()?;
        let threads = i32::try_from(config.threads).unwrap_or(i32::MAX);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(config.context_size))
            .with_n_batch(config.batch_size)
            .with_n_ubatch(config.batch_size)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        let new_context = || {
            model.new_context(backend, params.clone()).map_err(|error| {
                ModelError::Unavailable(format!(
                    "llama.cpp could not create a {}-token context for {} ({error})",
                    config.context_size,
                    config.model_path.display()
                ))
            })
        };
        let context = new_context()?;
        let mut parked = Vec::with_capacity(config.cache_slots.saturating_sub(1));
        for number in 1..config.cache_slots {
            parked.push(ParkedSlot {
                context: new_context()?,
                cached: Vec::new(),
                mark: SlotMark {
                    number,
                    last_used: 0,
                },
            });
        }
        // llama.cpp may round the window up (to a multiple of 256); the configured size is the
        // limit callers asked for, so it is the one enforced.
        let context_size = context.n_ctx().min(config.context_size);
        // llama.cpp lowers the batch size to the context size; a larger batch would abort.
        let batch_size = (context.n_batch().min(config.batch_size) as usize).max(1);
        Ok(Engine {
            model,
            context,
            cached: Vec::new(),
            active: SlotMark {
                number: 0,
                last_used: 0,
            },
            parked,
            clock: 0,
            format: Formatter::new(model, config),
            batch_size,
            context_size,
        })
    }

    fn info(&self) -> LlamaModelInfo {
        self.format.info(self.context_size)
    }

    fn forget_cache(&mut self) {
        self.context.clear_kv_cache();
        self.cached.clear();
    }

    /// Empties every slot.
    fn forget_all_caches(&mut self) {
        self.forget_cache();
        for slot in &mut self.parked {
            slot.context.clear_kv_cache();
            slot.cached.clear();
        }
    }

    /// Makes the slot that suits `tokens` the active one: the slot sharing the longest
    /// prefix with them (ties: the active slot, then the lower number), or, when no slot
    /// shares at least [`MIN_SLOT_MATCH`] tokens, the least recently used one (ties: the
    /// lower number). Deterministic: the choice depends only on the calls so far.
    fn choose_slot(&mut self, tokens: &[LlamaToken]) {
        self.clock += 1;
        if !self.parked.is_empty() {
            let mut best: Option<(usize, usize)> = None; // (shared prefix, parked index)
            for (index, slot) in self.parked.iter().enumerate() {
                let shared = common_prefix(&slot.cached, tokens);
                let better = match best {
                    None => true,
                    Some((length, at)) => {
                        shared > length
                            || (shared == length && slot.mark.number < self.parked[at].mark.number)
                    }
                };
                if better {
                    best = Some((shared, index));
                }
            }
            let active_shared = common_prefix(&self.cached, tokens);
            let swap_to = match best {
                Some((shared, index)) if shared > active_shared && shared >= MIN_SLOT_MATCH => {
                    Some(index)
                }
                _ if active_shared >= MIN_SLOT_MATCH => None,
                _ => {
                    // No slot matches: take the least recently used one.
                    let oldest = self
                        .parked
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, slot)| (slot.mark.last_used, slot.mark.number))
                        .map(|(index, slot)| (index, slot.mark));
                    match oldest {
                        Some((index, mark))
                            if (mark.last_used, mark.number)
                                < (self.active.last_used, self.active.number) =>
                        {
                            Some(index)
                        }
                        _ => None,
                    }
                }
            };
            if let Some(index) = swap_to {
                let slot = &mut self.parked[index];
                std::mem::swap(&mut self.context, &mut slot.context);
                std::mem::swap(&mut self.cached, &mut slot.cached);
                std::mem::swap(&mut self.active, &mut slot.mark);
            }
        }
        self.active.last_used = self.clock;
    }

    fn choose(
        &self,
        sampler: Option<&mut LlamaSampler>,
        grammar: Option<&mut LlamaSampler>,
        index: i32,
    ) -> LlamaToken {
        choose_token(&self.context, sampler, grammar, index)
    }

    /// Evaluates `tokens` at the positions following what is cached. Logits are kept only for
    /// the last token, which is all that sampling needs.
    fn evaluate(
        &mut self,
        tokens: &[LlamaToken],
        batch: &mut LlamaBatch,
    ) -> Result<(), ModelError> {
        let total = tokens.len();
        let batch_size = self.batch_size;
        for (chunk_index, chunk) in tokens.chunks(batch_size).enumerate() {
            let offset = chunk_index * batch_size;
            self.decode_at_cache_end(chunk, batch, |i| offset + i + 1 == total)?;
        }
        Ok(())
    }

    /// Evaluates one generation step, `tokens` (at most one batch) at the positions following
    /// what is cached, keeping the logits of every position: entry `i` of the batch predicts
    /// the token after `tokens[i]`.
    fn evaluate_step(
        &mut self,
        tokens: &[LlamaToken],
        batch: &mut LlamaBatch,
    ) -> Result<(), ModelError> {
        self.decode_at_cache_end(tokens, batch, |_| true)
    }

    /// Decodes one batch of `tokens` placed after the cached ones, keeping logits where
    /// `logits_at(index)` says so, and records them as cached. A failed decode leaves the KV
    /// cache in an unknown state, so it is forgotten.
    fn decode_at_cache_end(
        &mut self,
        tokens: &[LlamaToken],
        batch: &mut LlamaBatch,
        logits_at: impl Fn(usize) -> bool,
    ) -> Result<(), ModelError> {
        batch.clear();
        for (i, &token) in tokens.iter().enumerate() {
            let position = i32::try_from(self.cached.len() + i).unwrap_or(i32::MAX);
            batch
                .add(token, position, &[0], logits_at(i))
                .map_err(|error| server_error(format!("llama.cpp batch: {error}")))?;
        }
        if let Err(error) = self.context.decode(batch) {
            self.forget_cache();
            return Err(server_error(format!("llama.cpp decode failed: {error}")));
        }
        self.cached.extend_from_slice(tokens);
        Ok(())
    }

    /// Drops the cache entries from position `keep` on (rejected draft tokens, or draft
    /// tokens after the end of the reply).
    fn truncate_cache(&mut self, keep: usize) -> Result<(), ModelError> {
        if keep >= self.cached.len() {
            return Ok(());
        }
        let removed = self
            .context
            .clear_kv_cache_seq(Some(0), u32::try_from(keep).ok(), None)
            .unwrap_or(false);
        if removed {
            self.cached.truncate(keep);
            Ok(())
        } else {
            // Stale entries left at reused positions would corrupt every later token.
            self.forget_cache();
            Err(server_error(
                "llama.cpp could not remove rejected draft tokens from the KV cache; load the \
                 model with prompt lookup off"
                    .to_string(),
            ))
        }
    }

    fn chat(
        &mut self,
        request: &ChatRequest,
        reuse: bool,
        lookup: Option<PromptLookup>,
    ) -> Result<(ChatReply, CallStats), ModelError> {
        let started = Instant::now();
        let tokens = self.format.prompt(request, self.context_size)?;

        if reuse {
            self.choose_slot(&tokens);
        }
        // Keep the longest cached prefix, but always evaluate at least the last prompt token:
        // its logits choose the first reply token and are not kept from earlier calls.
        let keep = if reuse {
            common_prefix(&self.cached, &tokens).min(tokens.len() - 1)
        } else {
            0
        };
        if keep == 0 {
            self.forget_cache();
        } else if keep < self.cached.len() {
            let removed = self
                .context
                .clear_kv_cache_seq(Some(0), u32::try_from(keep).ok(), None)
                .unwrap_or(false);
            if removed {
                self.cached.truncate(keep);
            } else {
                // Some cache types cannot drop a tail; start over rather than reuse wrongly.
                self.forget_cache();
            }
        }
        let reused = self.cached.len();

        let mut batch = LlamaBatch::new(self.batch_size, 1);
        let prompt_started = Instant::now();
        self.evaluate(&tokens[reused..], &mut batch)?;
        let prompt_time = prompt_started.elapsed();

        let generation_started = Instant::now();
        let sampled = request.decoding.temperature > 0.0;
        let (mut sampler, mut grammar) = token_choosers(self.model, &request.decoding)?;
        // Drafts are only sound for greedy decoding: a sampled token is not a function of the
        // logits alone, so "the model agrees with the draft" has no meaning there. A grammar
        // would have to be advanced along each draft, so drafts are off with one too.
        let lookup = lookup.filter(|_| !sampled && grammar.is_none());
        let max_tokens = request.decoding.max_tokens as usize;
        let prompt_len = tokens.len();
        let context_size = self.context_size as usize;
        // Prompt and reply so far: where drafts are looked up.
        let mut history = tokens;
        let mut bytes: Vec<u8> = Vec::new();
        let mut text = String::new();
        let mut ended_by_eog = false;
        let (mut drafted, mut accepted, mut steps) = (0u32, 0u32, 0u32);
        // Tokens the model has chosen (from the latest evaluation) that are not yet part of
        // the reply; each is the greedy choice after the ones before it.
        let mut chosen: Vec<LlamaToken> = Vec::new();
        if max_tokens > 0 {
            chosen.push(self.choose(sampler.as_mut(), grammar.as_mut(), batch.n_tokens() - 1));
        }
        'generation: while !chosen.is_empty() {
            // Add the chosen tokens to the reply one at a time, with exactly the checks of
            // token-by-token decoding, so that stop conditions end the reply at the same token.
            for &token in &chosen {
                if self.format.is_end_of_generation(token) {
                    ended_by_eog = true;
                    break 'generation;
                }
                history.push(token);
                bytes.extend(self.format.piece(token));
                text = String::from_utf8_lossy(&bytes).into_owned();
                if let Some(at) = find_stop(&text, &request.decoding.stop) {
                    text.truncate(at);
                    break 'generation;
                }
                let generated = history.len() - prompt_len;
                // The last reply token is not evaluated yet: the cache would hold
                // `prompt_len + generated - 1` tokens before evaluating it.
                if generated >= max_tokens || prompt_len + generated > context_size {
                    break 'generation;
                }
            }
            let generated = history.len() - prompt_len;
            let last = history[history.len() - 1];
            // A draft token only matters if the token it lets the model choose may still
            // be added (max_tokens) and its own position fits in the context window.
            let limit = (max_tokens - generated - 1)
                .min(context_size - prompt_len - generated)
                .min(self.batch_size - 1);
            let draft: Vec<LlamaToken> = match &lookup {
                Some(params) => params.draft(&history, limit).to_vec(),
                None => Vec::new(),
            };
            let mut step = Vec::with_capacity(draft.len() + 1);
            step.push(last);
            step.extend_from_slice(&draft);
            self.evaluate_step(&step, &mut batch)?;
            steps += 1;
            drafted += u32::try_from(draft.len()).unwrap_or(u32::MAX);
            // Position `agreed` of the batch predicts the token after `last` and the first
            // `agreed` draft tokens; the draft holds while the model picks its next token.
            chosen.clear();
            let mut agreed = 0;
            loop {
                let index = i32::try_from(agreed).unwrap_or(i32::MAX);
                let choice = self.choose(sampler.as_mut(), grammar.as_mut(), index);
                chosen.push(choice);
                if draft.get(agreed) == Some(&choice) {
                    agreed += 1;
                } else {
                    break;
                }
            }
            accepted += u32::try_from(agreed).unwrap_or(u32::MAX);
            // The cache holds `last` and the draft; keep `last` and the accepted part only.
            self.truncate_cache(prompt_len + generated + agreed)?;
        }
        // Leave exactly what token-by-token decoding leaves in the cache: the prompt and every
        // reply token whose logits were used (all of them when an end-of-generation token
        // ended the reply, all but the last otherwise). Prefix reuse by the next call then
        // behaves the same with or without lookup.
        let generated = history.len() - prompt_len;
        let used = if ended_by_eog {
            generated
        } else {
            generated.saturating_sub(1)
        };
        if self.truncate_cache(prompt_len + used).is_err() {
            tracing::debug!("dropped the KV cache after a failed trim; the reply is unaffected");
        }
        let completion_tokens = u32::try_from(generated).unwrap_or(u32::MAX);
        let generation_time = generation_started.elapsed();

        let prompt_tokens = u32::try_from(prompt_len).unwrap_or(u32::MAX);
        let reused_tokens = u32::try_from(reused).unwrap_or(u32::MAX);
        let stats = CallStats {
            prompt_tokens,
            slot: u32::try_from(self.active.number).unwrap_or(u32::MAX),
            reused_tokens,
            shared_tokens: 0,
            evaluated_tokens: prompt_tokens - reused_tokens,
            completion_tokens,
            prompt_time,
            generation_time,
            drafted_tokens: drafted,
            accepted_tokens: accepted,
            generation_steps: steps,
        };
        stats.log();
        let reply = ChatReply {
            text,
            prompt_tokens,
            completion_tokens,
            latency: started.elapsed(),
            cached: false,
            tool_calls: Vec::new(),
        };
        Ok((reply, stats))
    }
}

fn server_error(body: String) -> ModelError {
    ModelError::Server { status: 0, body }
}

#[cfg(test)]
mod tests {
    #[test]
    fn greedy_choice_takes_the_first_largest_logit() {
        assert_eq!(super::greedy_choice(&[0.5, 2.0, -1.0, 2.0]), 1);
        assert_eq!(super::greedy_choice(&[3.0]), 0);
        assert_eq!(super::greedy_choice(&[f32::NAN, 1.0, 0.0]), 0);
    }

    use super::*;

    #[test]
    fn chatml_formats_every_role_and_opens_the_assistant_turn() {
        let text = chatml(&[
            ChatMessage::system("be brief"),
            ChatMessage::user("hi"),
            ChatMessage::assistant("hello"),
            ChatMessage::user("count"),
        ]);
        assert_eq!(
            text,
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
             <|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\ncount<|im_end|>\n\
             <|im_start|>assistant\n"
        );
    }

    #[test]
    fn the_default_system_prompt_is_read_from_a_qwen_style_template() {
        let template = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, a helper.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}"#;
        assert_eq!(
            default_system_prompt(template).as_deref(),
            Some("You are Qwen, a helper.")
        );
        assert_eq!(
            default_system_prompt("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"),
            None
        );
    }

    #[test]
    fn common_prefix_counts_equal_leading_tokens() {
        let t = |ids: &[i32]| ids.iter().map(|&i| LlamaToken(i)).collect::<Vec<_>>();
        assert_eq!(common_prefix(&t(&[1, 2, 3]), &t(&[1, 2, 4, 5])), 2);
        assert_eq!(common_prefix(&t(&[]), &t(&[1])), 0);
        assert_eq!(common_prefix(&t(&[1, 2]), &t(&[1, 2])), 2);
    }

    #[test]
    fn stop_strings_take_the_earliest_match_and_ignore_empty_ones() {
        let stops = vec![String::new(), ";".to_string(), "```".to_string()];
        assert_eq!(find_stop("SELECT 1```;", &stops), Some(8));
        assert_eq!(find_stop("SELECT 1", &stops), None);
        assert_eq!(find_stop("abc", &[String::new()]), None);
    }

    #[test]
    fn missing_and_non_gguf_files_are_unavailable_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.gguf");
        let error = LlamaChat::load(LlamaConfig::new(&missing)).unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable(m) if m.contains("absent.gguf")),
            "{error}"
        );
        let junk = dir.path().join("junk.gguf");
        std::fs::write(&junk, b"this is not a model at all").unwrap();
        let error = LlamaChat::load(LlamaConfig::new(&junk)).unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable(m) if m.contains("junk.gguf") && m.contains("not a GGUF")),
            "{error}"
        );
        let empty = dir.path().join("empty.gguf");
        std::fs::write(&empty, b"").unwrap();
        let error = LlamaChat::load(LlamaConfig::new(&empty)).unwrap_err();
        assert!(matches!(&error, ModelError::Unavailable(m) if m.contains("empty.gguf")));
    }

    #[test]
    fn a_gguf_header_without_a_model_is_rejected_without_panicking() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("header-only.gguf");
        // Magic, version 3, then garbage counts: llama.cpp must refuse it, not crash.
        let mut bytes = b"GGUF".to_vec();
        bytes.extend(3u32.to_le_bytes());
        bytes.extend([0xff; 64]);
        std::fs::write(&fake, &bytes).unwrap();
        let error = LlamaChat::load(LlamaConfig::new(&fake)).unwrap_err();
        assert!(
            matches!(&error, ModelError::Unavailable(m) if m.contains("header-only.gguf")),
            "{error}"
        );
    }

    #[test]
    fn config_defaults_follow_the_file_name() {
        let config = LlamaConfig::new("/models/Qwen2.5-Coder-0.5B-Instruct.gguf");
        assert_eq!(config.name, "qwen2.5-coder-0.5b-instruct");
        assert_eq!(config.context_size, DEFAULT_CONTEXT_SIZE);
        assert!(config.threads >= 1);
        assert!(config.prefix_reuse);
    }
}
