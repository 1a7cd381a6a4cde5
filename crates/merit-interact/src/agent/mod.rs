//! The base agent: a ReAct loop over an [`Environment`], one action per model call.
//!
//! Each turn the model gets the whole conversation so far (system prompt, the opening, and
//! every earlier turn with its observation as alternating messages; a turn whose action was
//! read is kept in the documented `Thought:`/`Action:` form, not as the raw reply, see
//! `history_text`), writes a thought and one action, and the action goes to [`Environment::step_with_thought`]. Replies are read by
//! [`parse::parse_reply`], which never fails: an unreadable reply becomes an unknown or empty
//! action that the environment charges (0.2) and answers like any other, and the next message
//! adds a one-line format hint. The loop ends when the environment ends the episode (solved,
//! budget, its own turn cap) or after [`AgentConfig::max_turns`] model calls.
//!
//! Every model call goes through [`ChatModel`] with greedy decoding (or, for Pass@k, sampling
//! at [`AgentConfig::temperature`] with [`AgentConfig::sample_seed`]) and the prompt version
//! `merit-interact-prompts-v1/agent`; pass the cached model to get the reply cache.
//!
//! With [`AgentStyle::Vanilla`] the same type runs the paper's non-agentic baseline instead
//! (see `vanilla.rs`): one query per phase from the schema and the request.
//!
//! # Native tool calls
//! With [`ToolCallMode::Auto`] (the default) the agent declares the nine actions as tools
//! ([`parse::tool_specs`]) when the backend supports native calls
//! ([`ChatModel::supports_tools`]: OpenAI-compatible servers yes, the embedded model no), and
//! uses the text protocol otherwise. In native mode the system prompt is
//! `agent_system_tools.txt`, a reply's first tool call is the action (read by
//! [`parse::action_from_tool_call`]), the assistant message keeps that call and the
//! observation returns as its tool result. A reply without a tool call is read with the text
//! protocol's reader, so nothing is lost when a model writes its call as text. A server that
//! rejects the tools on the first call of an episode (a 4xx answer: vLLM without
//! `--enable-auto-tool-choice`, llama.cpp's server without `--jinja`) switches this agent to
//! the text protocol for good, and the episode restarts its conversation in text form (no
//! action had been taken yet).
//!
//! # Long-term memory
//! [`ReactAgent::run_with_memory`] takes a [`MemoryAdvisor`]: before the episode it may put
//! episode-level memories at the head of the opening message (before the task, where the
//! paper's prompt puts retrieved memory), and before every later model call (once the episode
//! has a step) it may add a turn-level hint to the message the model answers. Hints are appended to the newest user message only and stay in the conversation afterwards, so earlier messages never change and
//! the prompt keeps a stable prefix (the embedded backend reuses its KV cache). Every
//! retrieval, whether or not it injected anything, is recorded as an [`InjectionRecord`]. The
//! agent knows nothing of how memories are stored or chosen: that is the advisor's side
//! (`crate::memory::advisor` implements it over the dual-level memory).

pub mod advice;
pub mod parse;
mod vanilla;

use crate::backend::InteractBackend;
use crate::env::{Environment, Trajectory, TrajectoryStep, DEFAULT_MAX_TURNS};
use crate::error::InteractError;
use crate::prompts;
use crate::simulator::{SimulatorUsage, UserSimulator};
use crate::task::PublicTask;
use advice::Level;
use merit_core::model::{
    ChatMessage, ChatModel, ChatReply, ChatRequest, Decoding, ModelError, ToolCall,
};
use merit_sql::Dialect;
use parse::{action_from_tool_call, parse_reply, tool_specs, ParseKind, ParsedReply};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How actions are exchanged with the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallMode {
    /// Native tool calls when the backend supports them, the text protocol otherwise.
    #[default]
    Auto,
    /// Always the text protocol.
    Text,
    /// Always native tool calls (a backend without them answers in text, which is still read).
    Native,
}

/// The hint added after a reply without a readable action.
pub const FORMAT_HINT: &str = "(Your last reply had no action I could read. Answer with a line `Thought: ...` and then one line `Action: name(arguments)`, for example `Action: get_schema()`.)";

/// Added after the observation of an action the agent had already taken, word for word, in
/// this episode. Small models under greedy decoding otherwise repeat a failing action until the
/// budget is gone: the same conversation gives the same reply. The note is the agent's own
/// (the environment's observation is unchanged), and costs nothing.
pub const REPEAT_HINT: &str = "(You had already taken exactly this action in this task, and its result has not changed. Repeating it will not help: take a different action, e.g. look at the schema, ask the user, or change the query.)";

/// Settings of the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// Turns per episode at most (the protocol's 60): one model call each, two for a turn the
    /// repeat guard asked again.
    pub max_turns: usize,
    /// Token limit of one reply.
    pub max_tokens: u32,
    /// Observations longer than this many characters are cut in the prompt (the trajectory
    /// keeps them whole); the schema of a large database would otherwise fill the context.
    pub observation_chars: usize,
    /// Stop strings: the model must not write the observation itself.
    pub stop: Vec<String>,
    /// Native tool calls or the text protocol.
    #[serde(default)]
    pub tool_calls: ToolCallMode,
    /// Fold a word-for-word repeated action into the conversation instead of appending it as
    /// a new turn (text protocol only; see [`fold_note`]). The action is still taken and
    /// charged; only what the model reads next changes.
    #[serde(default)]
    pub fold_repeats: bool,
    /// Ask again, once, before taking an action the episode has already taken word for word
    /// (text protocol only): the repeat is not sent to the environment, so it costs no budget,
    /// and the model gets a note with the earlier result (see [`repeat_guard_note`]). A
    /// second repeat is taken as it is. Off by default (the protocol's agent takes whatever
    /// the model writes); the repair loop's guard of the same name does the same for SQL.
    #[serde(default)]
    pub repeat_guard: bool,
    /// Sampling temperature of the repeat guard's second call; 0 (the default) keeps it as
    /// greedy as the others. Under greedy decoding the 1.5B agent answered the note with the
    /// same repeat in 122 of its first 126 re-asks (the guard calibration's first 15
    /// training episodes), so a sampled second call (seeded with
    /// [`AgentConfig::sample_seed`], part of the reply-cache key, so it replays exactly) is
    /// the way to make the re-ask differ. Only the re-ask is sampled.
    #[serde(default)]
    pub repeat_guard_temperature: f32,
    /// When the budget is spent (the environment's force-submit flag is up) and the model's
    /// next action is not a submit, submit the phase's newest query that ran without an
    /// error instead ([`Environment::newest_clean_query`]); with no such query the action is
    /// taken as written and the environment ends the task unsubmitted. Under the flag any
    /// non-submit ends the task as failed, so the fallback can only turn such an ending
    /// into a submission: an episode it changes was lost without it. Off by default (the
    /// protocol's agent takes whatever the model writes).
    ///
    /// [`Environment::newest_clean_query`]: crate::env::Environment::newest_clean_query
    #[serde(default)]
    pub forced_submit_fallback: bool,
    /// Show the database schema with the opening message. BIRD-Interact's agent starts
    /// without it and must spend a `get_schema()`; small models that copy their last turn
    /// then often ask for the schema again and again. Off by default (the protocol's form).
    #[serde(default)]
    pub schema_in_opening: bool,
    /// The ReAct agent, or the non-agentic baseline (one query per phase; see
    /// `agent/vanilla.rs`).
    #[serde(default)]
    pub style: AgentStyle,
    /// Sampling temperature of the agent's calls; 0 (the default) is greedy. Above 0, runs
    /// with different [`AgentConfig::sample_seed`]s are the independent tries of Pass@k.
    #[serde(default)]
    pub temperature: f32,
    /// The seed sent with every sampled call (part of the reply-cache key, so a sampled run
    /// replays exactly).
    #[serde(default)]
    pub sample_seed: u64,
}

/// Which agent runs the episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStyle {
    /// The interactive ReAct agent (the paper's agent and every memory arm).
    #[default]
    React,
    /// The non-agentic LLM baseline: schema and request in, one query per phase out.
    Vanilla,
}

impl Default for AgentConfig {
    fn default() -> AgentConfig {
        AgentConfig {
            max_turns: DEFAULT_MAX_TURNS,
            max_tokens: 1024,
            observation_chars: 12_000,
            stop: vec!["\nObservation:".to_string()],
            tool_calls: ToolCallMode::Auto,
            fold_repeats: false,
            repeat_guard: false,
            repeat_guard_temperature: 0.0,
            forced_submit_fallback: false,
            schema_in_opening: false,
            style: AgentStyle::React,
            temperature: 0.0,
            sample_seed: 0,
        }
    }
}

/// Model calls and tokens of one side of an episode.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentUsage {
    /// Model calls made.
    pub calls: u64,
    /// Of those, answered from the reply cache.
    pub cached_calls: u64,
    /// Prompt tokens over all calls.
    pub prompt_tokens: u64,
    /// Generated tokens over all calls.
    pub completion_tokens: u64,
    /// Replies with no known action.
    pub unreadable_replies: u64,
}

impl AgentUsage {
    /// Counts `reply`: a call when it was `live` (not replayed from a logged prefix), cached
    /// when the reply cache answered it, and its tokens.
    fn add(&mut self, reply: &ChatReply, live: bool) {
        self.calls += u64::from(live);
        self.cached_calls += u64::from(reply.cached);
        self.prompt_tokens += u64::from(reply.prompt_tokens);
        self.completion_tokens += u64::from(reply.completion_tokens);
    }
}

/// One model reply of the agent, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentTurn {
    /// 1-based turn, matching [`crate::TrajectoryStep::turn`].
    pub turn: usize,
    /// The raw reply text.
    pub reply: String,
    /// How its action was read.
    pub parse: ParseKind,
    /// The native tool call used as the action, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ToolCall>,
    /// With [`AgentConfig::repeat_guard`]: the model's first reply of this turn, whose action
    /// repeated an earlier one and was not taken; `reply` is its answer when asked again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarded_repeat: Option<String>,
    /// With [`AgentConfig::forced_submit_fallback`]: the budget was spent, the reply's action
    /// was not a submit, and the phase's newest clean query was submitted in its place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fallback_submit: bool,
}

/// Why the agent loop stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AgentStop {
    /// The environment ended the episode (see the trajectory's outcome).
    EpisodeEnded,
    /// [`AgentConfig::max_turns`] model calls were made first.
    TurnCap,
    /// The non-agentic baseline gave its one answer for the phase it was in and that answer
    /// failed (it does not try again).
    Answered,
    /// The model refused the request as invalid (in practice: the conversation outgrew the
    /// context window). Deterministic, so the episode is recorded as unfinished instead of
    /// failing the run.
    ModelRefused(String),
}

/// One retrieval from long-term memory during an episode, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InjectionRecord {
    /// Episode level (before the episode) or turn level (before one model call).
    pub level: Level,
    /// The 1-based turn whose prompt got the memories; 0 for the episode level.
    pub turn: usize,
    /// Memory ids of the embedding stage's candidates, in rank order.
    pub candidates: Vec<u64>,
    /// Memory ids the selector injected, in its order (empty: none).
    pub chosen: Vec<u64>,
    /// The retrieval features of the injected memories, in the same order (what the online
    /// selectors learn from when a run is replayed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chosen_features: Vec<advice::CandidateFeatures>,
    /// The selector's name.
    pub selector: String,
    /// The selector's remark, e.g. why a model's reply was unusable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Memories to show the agent: the text to append and what was retrieved.
#[derive(Debug, Clone, PartialEq)]
pub struct Injection {
    /// Text appended to the user message (empty when nothing was chosen).
    pub text: String,
    /// The retrieval behind it.
    pub record: InjectionRecord,
}

/// The agent's view of a long-term memory: what to show before the episode and before each
/// turn. Implementations must only see finished earlier episodes (causality is theirs to keep).
pub trait MemoryAdvisor {
    /// Memories to show with the opening message; `None` when this level is off.
    fn before_episode(&mut self, task: &PublicTask) -> Result<Option<Injection>, AgentError>;

    /// A hint to show before turn `steps.len() + 1`; `steps` are the episode's steps so far
    /// (never empty: the agent asks from the second turn on).
    fn before_turn(
        &mut self,
        task: &PublicTask,
        steps: &[TrajectoryStep],
    ) -> Result<Option<Injection>, AgentError>;
}

/// The advisor of an agent without long-term memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMemory;

impl MemoryAdvisor for NoMemory {
    fn before_episode(&mut self, _task: &PublicTask) -> Result<Option<Injection>, AgentError> {
        Ok(None)
    }

    fn before_turn(
        &mut self,
        _task: &PublicTask,
        _steps: &[TrajectoryStep],
    ) -> Result<Option<Injection>, AgentError> {
        Ok(None)
    }
}

/// A finished episode: the environment's trajectory plus the agent's side of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeResult {
    /// The environment's trajectory (public task, observations, costs, outcome).
    pub trajectory: Trajectory,
    /// Every model reply.
    pub turns: Vec<AgentTurn>,
    /// The agent's model usage.
    pub agent_usage: AgentUsage,
    /// The simulator's usage (counts only).
    pub simulator_usage: SimulatorUsage,
    /// Why the loop stopped.
    pub stop: AgentStop,
    /// Every memory retrieval made for the episode, in order (empty without memory).
    pub injections: Vec<InjectionRecord>,
}

/// Why an episode could not be run to its end (infrastructure, not agent mistakes).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The agent's model failed (transport, server, unavailable).
    #[error("the agent model failed: {0}")]
    Model(#[from] ModelError),
    /// The environment failed.
    #[error(transparent)]
    Environment(#[from] InteractError),
    /// Long-term memory could not be read (embedder or selector backend failure).
    #[error("memory retrieval failed: {0}")]
    Memory(String),
}

/// The ReAct agent.
pub struct ReactAgent {
    model: Arc<dyn ChatModel>,
    config: AgentConfig,
    /// Set once the backend has rejected a request with tools (see the module docs).
    tools_rejected: AtomicBool,
}

impl std::fmt::Debug for ReactAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReactAgent")
            .field("model", &self.model.id())
            .field("config", &self.config)
            .finish()
    }
}

/// The dialect name the agent prompt uses.
fn dialect_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => "PostgreSQL",
        Dialect::Sqlite => "SQLite",
    }
}

/// Cuts `text` after `limit` characters, saying so.
fn cut_chars(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((end, _)) => format!(
            "{}\n... (cut: the observation was longer than {limit} characters)",
            &text[..end]
        ),
        None => text.to_string(),
    }
}

impl ReactAgent {
    /// An agent thinking with `model` (pass the cached model).
    pub fn new(model: Arc<dyn ChatModel>, config: AgentConfig) -> ReactAgent {
        ReactAgent {
            model,
            config,
            tools_rejected: AtomicBool::new(false),
        }
    }

    /// Whether the next episode uses native tool calls.
    pub fn uses_native_tools(&self) -> bool {
        match self.config.tool_calls {
            ToolCallMode::Text => false,
            ToolCallMode::Native => true,
            ToolCallMode::Auto => {
                self.model.supports_tools() && !self.tools_rejected.load(Ordering::Relaxed)
            }
        }
    }

    /// The model's identifier.
    pub fn model_id(&self) -> String {
        self.model.id()
    }

    /// The settings.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Runs one episode to its end. Agent mistakes never end it early; only model and
    /// environment failures are errors.
    pub fn run<B: InteractBackend, S: UserSimulator>(
        &self,
        env: &mut Environment<B, S>,
    ) -> Result<EpisodeResult, AgentError> {
        self.run_with_memory(env, &mut NoMemory)
    }

    /// Runs one episode with memories from `advisor` (see the module docs). With
    /// [`NoMemory`] the prompts are exactly those of [`ReactAgent::run`].
    pub fn run_with_memory<B: InteractBackend, S: UserSimulator>(
        &self,
        env: &mut Environment<B, S>,
        advisor: &mut dyn MemoryAdvisor,
    ) -> Result<EpisodeResult, AgentError> {
        self.run_inner(env, advisor, &[])
    }

    /// Forks a logged episode (the counterfactual of paper 003, Table 4): the replies of
    /// `prefix` (its first turns, as logged) are replayed without model calls and without
    /// turn-level memories, so every fork reaches the same state; from the next turn on the
    /// agent runs normally with `advisor`. The environment must be fresh for the same task.
    /// The episode-level retrieval still happens once before the first turn (pass an advisor
    /// with that level off to compare turn-level selectors alone). Replayed turns are in the
    /// result's `turns` and trajectory but not in its model usage.
    pub fn run_from_prefix<B: InteractBackend, S: UserSimulator>(
        &self,
        env: &mut Environment<B, S>,
        advisor: &mut dyn MemoryAdvisor,
        prefix: &[AgentTurn],
    ) -> Result<EpisodeResult, AgentError> {
        self.run_inner(env, advisor, prefix)
    }

    /// The decoding settings of every call: greedy, or sampled with the configured
    /// temperature and seed.
    fn decoding(&self) -> Decoding {
        Decoding {
            temperature: self.config.temperature,
            seed: self.config.sample_seed,
            ..Decoding::default()
        }
    }

    fn run_inner<B: InteractBackend, S: UserSimulator>(
        &self,
        env: &mut Environment<B, S>,
        advisor: &mut dyn MemoryAdvisor,
        prefix: &[AgentTurn],
    ) -> Result<EpisodeResult, AgentError> {
        if self.config.style == AgentStyle::Vanilla {
            return self.run_vanilla(env);
        }
        let mut injections = Vec::new();
        // `ahead`: the memory goes before the message's text (the episode's memories, which
        // the paper places before the task and the question); otherwise after it (turn hints,
        // appended so that earlier messages never change).
        let mut with_memory =
            |message: &mut ChatMessage, injection: Option<Injection>, ahead: bool| {
                if let Some(injection) = injection {
                    let text = injection.text.trim_end();
                    if !text.is_empty() {
                        message.content = if ahead {
                            format!("{text}\n\n{}", message.content)
                        } else {
                            format!("{}\n\n{text}", message.content)
                        };
                    }
                    injections.push(injection.record);
                }
            };
        let dialect = dialect_name(env.backend().dialect());
        let system_for = |native: bool| {
            let template = if native {
                prompts::AGENT_SYSTEM_TOOLS
            } else {
                prompts::AGENT_SYSTEM
            };
            prompts::fill(template, &[("dialect", dialect)])
        };
        let mut native = self.uses_native_tools();
        // The schema, when shown, goes between the environment's opening and the request for
        // a first action, so the instruction stays the last thing the model reads.
        let opening = if self.config.schema_in_opening {
            let schema = prompts::fill(
                prompts::AGENT_SCHEMA,
                &[(
                    "schema",
                    &cut_chars(env.schema(), self.config.observation_chars),
                )],
            );
            format!("{}\n\n{}", env.opening().trim_end(), schema.trim_end())
        } else {
            env.opening().to_string()
        };
        let opening = prompts::fill(prompts::AGENT_TASK, &[("opening", &opening)]);
        let mut opening = ChatMessage::user(opening);
        with_memory(
            &mut opening,
            advisor.before_episode(env.public_task())?,
            true,
        );
        let mut messages = vec![ChatMessage::system(system_for(native)), opening];
        let mut usage = AgentUsage::default();
        let mut turns = Vec::new();
        // Every readable action taken so far, to notice a word-for-word repeat.
        let mut taken: Vec<crate::action::ActionCall> = Vec::new();
        // Repeats folded into the conversation so far (numbered, so that each folded prompt
        // differs from the last and greedy decoding is not asked the same question twice).
        let mut folded_repeats = 0usize;
        let mut stop = AgentStop::TurnCap;
        while turns.len() < self.config.max_turns {
            if env.is_done() {
                stop = AgentStop::EpisodeEnded;
                break;
            }
            let replayed = prefix.get(turns.len());
            // Turn-level memory serves intermediate turns (paper §5.1: "before intermediate
            // turn t"): before the first call the state is the request alone, which is what
            // the episode level retrieves on, so the turn level waits for a first step.
            // Where this turn's memory hint went: the message and its length before the hint.
            let mut turn_hint_at: Option<(usize, usize)> = None;
            if replayed.is_none() && !env.steps().is_empty() {
                let hint = advisor.before_turn(env.public_task(), env.steps())?;
                let index = messages.len() - 1;
                if let Some(last) = messages.last_mut() {
                    let before = last.content.len();
                    with_memory(last, hint, false);
                    if last.content.len() != before {
                        turn_hint_at = Some((index, before));
                    }
                }
            }
            let request = ChatRequest {
                messages: messages.clone(),
                decoding: Decoding {
                    max_tokens: self.config.max_tokens,
                    stop: self.config.stop.clone(),
                    ..self.decoding()
                },
                prompt_version: prompts::version("agent"),
                tools: if native { tool_specs() } else { Vec::new() },
            };
            let answer = match replayed {
                Some(turn) => Ok(ChatReply {
                    text: turn.reply.clone(),
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    latency: std::time::Duration::ZERO,
                    cached: false,
                    tool_calls: turn.tool_call.iter().cloned().collect(),
                }),
                None => self.model.chat(&request),
            };
            let reply = match answer {
                Ok(reply) => reply,
                Err(ModelError::InvalidRequest(reason)) => {
                    stop = AgentStop::ModelRefused(reason);
                    break;
                }
                Err(ModelError::Server { status, .. })
                    if native
                        && turns.is_empty()
                        && (400..500).contains(&status)
                        && self.config.tool_calls == ToolCallMode::Auto =>
                {
                    // The server does not take tools: text protocol from now on.
                    self.tools_rejected.store(true, Ordering::Relaxed);
                    native = false;
                    messages[0] = ChatMessage::system(system_for(false));
                    continue;
                }
                Err(error) => return Err(AgentError::Model(error)),
            };
            usage.add(&reply, replayed.is_none());
            let mut reply = reply;
            let mut tool_call = reply.tool_calls.first().cloned();
            let mut parsed = match &tool_call {
                Some(call) => ParsedReply {
                    action: action_from_tool_call(&call.name, &call.arguments),
                    thought: parse::thought_before(&reply.text),
                    kind: ParseKind::NativeToolCall,
                },
                None => parse_reply(&reply.text),
            };
            // The repeat guard: a live text-protocol reply repeating an action of this episode
            // is answered with a note instead of being taken, and the model asked once more.
            // Neither the repeat nor the note stays in the conversation.
            let mut guarded_repeat = None;
            if self.config.repeat_guard
                && replayed.is_none()
                && tool_call.is_none()
                && parsed.is_known_action()
                && taken.contains(&parsed.action)
            {
                let earlier = env
                    .steps()
                    .iter()
                    .find(|step| step.action == parsed.action)
                    .map(|step| (step.turn, step.observation.clone()));
                let (earlier_turn, earlier_observation) = earlier.unwrap_or_default();
                let mut again = request.clone();
                if self.config.repeat_guard_temperature > 0.0 {
                    again.decoding.temperature = self.config.repeat_guard_temperature;
                }
                again.messages.push(ChatMessage::assistant(history_text(
                    &reply.text,
                    Some(&parsed.action),
                    &parsed.thought,
                )));
                again.messages.push(ChatMessage::user(repeat_guard_note(
                    earlier_turn,
                    &cut_chars(
                        without_budget_line(&earlier_observation),
                        self.config.observation_chars,
                    ),
                )));
                match self.model.chat(&again) {
                    Ok(second) => {
                        usage.add(&second, true);
                        guarded_repeat = Some(std::mem::replace(&mut reply, second).text);
                        tool_call = None;
                        parsed = parse_reply(&reply.text);
                    }
                    // The note made the prompt too long: the repeat is taken as it came.
                    Err(ModelError::InvalidRequest(_)) => {}
                    Err(error) => return Err(AgentError::Model(error)),
                }
            }
            let known = parsed.is_known_action();
            if !known {
                usage.unreadable_replies += 1;
            }
            // The forced-submit fallback: under the flag anything but a submit ends the task
            // unsubmitted, so the phase's newest clean query goes in its place.
            let mut fallback_submit = false;
            if self.config.forced_submit_fallback
                && env.budget().force_submit()
                && !parsed.action.is_submit()
            {
                if let Some(sql) = env.newest_clean_query() {
                    parsed.action = crate::action::ActionCall::submit(sql);
                    fallback_submit = true;
                }
            }
            let known = known || fallback_submit;
            turns.push(AgentTurn {
                turn: turns.len() + 1,
                reply: reply.text.clone(),
                parse: parsed.kind,
                tool_call: tool_call.clone(),
                guarded_repeat,
                fallback_submit,
            });
            let step_action = parsed.action.clone();
            let repeated = known && taken.contains(&step_action);
            if known {
                taken.push(step_action.clone());
            }
            let step_thought = parsed.thought.clone();
            let thought = (!parsed.thought.is_empty()).then_some(parsed.thought);
            let earlier_observation = env
                .steps()
                .iter()
                .rev()
                .find(|step| step.action == step_action)
                .map(|step| step.observation.clone());
            let step = env.step_with_thought(parsed.action, thought)?;
            if repeated && self.config.fold_repeats && tool_call.is_none() {
                folded_repeats += 1;
                let note = fold_note(
                    &step_action,
                    folded_repeats,
                    earlier_observation.as_deref(),
                    &step.observation,
                    self.config.observation_chars,
                );
                let index = messages.len() - 1;
                if let Some(last) = messages.last_mut() {
                    // The hint was retrieved for the turn that is folded away, so it goes with
                    // it: the next turn's hint follows the note. Left in, the same hint stacked
                    // up once per repeat, and the 1.5B agent copied its repeated text into
                    // repeats of its own (issue 18's 60-task runs).
                    if let Some((at, before)) = turn_hint_at.take() {
                        if at == index {
                            last.content.truncate(before);
                        }
                    }
                    last.content.push_str("\n\n");
                    last.content.push_str(&note);
                }
                continue;
            }
            let observation = prompts::fill(
                prompts::AGENT_OBSERVATION,
                &[
                    (
                        "observation",
                        &cut_chars(&step.observation, self.config.observation_chars),
                    ),
                    (
                        "hint",
                        match (known, repeated) {
                            (false, _) => FORMAT_HINT,
                            (true, true) => REPEAT_HINT,
                            (true, false) => "",
                        },
                    ),
                ],
            );
            let observation = observation.trim_end().to_string();
            match tool_call {
                Some(call) => {
                    let id = call.id.clone();
                    messages.push(ChatMessage::assistant_with_tools(
                        reply.text.trim().to_string(),
                        vec![call],
                    ));
                    messages.push(ChatMessage::tool_result(id, observation));
                }
                None => {
                    messages.push(ChatMessage::assistant(history_text(
                        &reply.text,
                        known.then_some(&step_action),
                        &step_thought,
                    )));
                    messages.push(ChatMessage::user(observation));
                }
            }
        }
        if env.is_done() {
            stop = AgentStop::EpisodeEnded;
        }
        Ok(EpisodeResult {
            trajectory: env.trajectory(),
            turns,
            agent_usage: usage,
            simulator_usage: env.simulator().usage(),
            stop,
            injections,
        })
    }
}

/// The note that replaces a repeated turn when [`AgentConfig::fold_repeats`] is on. Under
/// greedy decoding a small model that sees its own turn repeated once tends to repeat it
/// forever (each copy makes the next more likely); folding keeps the conversation as it was
/// before the repeat and adds a numbered note to its last message, so the model is asked
/// again with the repeat pointed out instead of shown. The result is given again (cut to
/// `observation_chars`, as every observation in the prompt) unless it is the earlier one word
/// for word apart from the budget line. The two are compared whole: compared after the cut
/// (until 2026-12-06), a result longer than the cut never matched, and each repeat of a large
/// query added its 2,000 characters to the prompt again.
pub fn fold_note(
    action: &crate::action::ActionCall,
    repeat: usize,
    earlier_observation: Option<&str>,
    observation: &str,
    observation_chars: usize,
) -> String {
    let call = parse::render_turn("", action);
    let call = call.trim_start_matches("Action: ");
    let unchanged =
        earlier_observation.map(without_budget_line) == Some(without_budget_line(observation));
    let result = if unchanged {
        let budget = observation
            .lines()
            .rev()
            .find(|line| line.starts_with("[Budget"))
            .unwrap_or("");
        format!("The result was the same as before. {budget}")
    } else {
        format!("Its result:\n{}", cut_chars(observation, observation_chars))
    };
    format!(
        "(Note {repeat}: you then took `{call}` again, which you had already done in this task. {} Do not repeat an action: take a different one, e.g. write or fix a query with execute, ask the user, or submit.)",
        result.trim_end()
    )
}

/// What the repeat guard tells the model instead of taking its repeated action (the action
/// was first taken at `turn`, with `observation` as its result, budget line removed).
pub fn repeat_guard_note(turn: usize, observation: &str) -> String {
    format!(
        "(Not taken: you already took exactly this action at turn {turn}, and taking it again would give the same result:\n{}\nIt would only use up budget. Write a new Thought and a different Action: change the query, ask the user about what is unclear, or submit the query you think answers the request.)",
        observation.trim_end()
    )
}

/// `text` without its trailing `[Budget: ...]` line.
fn without_budget_line(text: &str) -> &str {
    let trimmed = text.trim_end();
    match trimmed.rfind('\n') {
        Some(at) if trimmed[at + 1..].starts_with("[Budget") => trimmed[..at].trim_end(),
        _ if trimmed.starts_with("[Budget") => "",
        _ => trimmed,
    }
}

/// Longest unreadable reply kept in the conversation, in characters.
const UNREADABLE_REPLY_CHARS: usize = 600;

/// What the conversation keeps of a text-protocol reply. A reply whose action was read is
/// kept as that one turn in the documented form ([`parse::render_turn`]): small models often
/// run on after their action (more actions, invented observations) until the token limit,
/// and keeping that text would both grow every later prompt and show the model its own
/// runaway output as the pattern to follow. The full reply stays in the episode log. An
/// unreadable reply is kept as written (cut), so the format hint that follows makes sense.
fn history_text(reply: &str, action: Option<&crate::action::ActionCall>, thought: &str) -> String {
    match action {
        Some(action) => parse::render_turn(thought, action),
        None => cut_chars(reply.trim(), UNREADABLE_REPLY_CHARS),
    }
}
