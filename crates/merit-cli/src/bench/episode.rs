//! The episodes `merit bench models` and `merit bench models --streams` time: a 7-step
//! repair-like conversation, and the same with a user simulator taking turns.

use anyhow::Result;
use merit_core::model::{ChatMessage, ChatRequest, Decoding};
use merit_models::llama::LlamaChat;
use std::time::{Duration, Instant};

/// The user's side of the two-role episode: a fixed system prompt, then one question per
/// agent step (its own growing conversation).
const SIMULATOR_SYSTEM: &str = "You are the person who asked the database question. An \
    assistant is writing SQL for you and sometimes asks what you meant. Answer each question \
    in one short sentence from what you know about your request; never write SQL, and say \
    so when a question is outside what you asked.";

/// The agent episode of [`run_episode`] with its recorded `agent_replies` as assistant turns,
/// and after each agent call one simulator call. The simulator's replies are generated, or
/// replayed from `simulator_replay` so that a second run sends the same prompts. Returns the
/// cost of all calls; `replies` holds the simulator's.
pub(super) fn run_two_roles(
    chat: &LlamaChat,
    initial: &ChatRequest,
    decoding: &Decoding,
    agent_replies: &[String],
    simulator_replay: Option<&[String]>,
) -> Result<EpisodeRun> {
    let mut agent = initial.messages.clone();
    let mut simulator = vec![ChatMessage::system(SIMULATOR_SYSTEM)];
    let mut run = EpisodeRun::default();
    let call = |run: &mut EpisodeRun, messages: &[ChatMessage]| {
        run.timed_call(chat, messages, decoding, "bench-two-roles")
    };
    for step in 0..=FEEDBACK.len() {
        if step > 0 {
            agent.push(ChatMessage::assistant(agent_replies[step - 1].clone()));
            agent.push(ChatMessage::user(FEEDBACK[step - 1]));
        }
        call(&mut run, &agent)?;
        simulator.push(ChatMessage::user(format!(
            "The assistant asks (step {}): which rows should the answer include?",
            step + 1
        )));
        let generated = call(&mut run, &simulator)?;
        let answer = match simulator_replay {
            Some(replies) => replies[step].clone(),
            None => generated.clone(),
        };
        run.replies.push(generated);
        simulator.push(ChatMessage::assistant(answer));
    }
    Ok(run)
}

/// What one episode cost.
#[derive(Default)]
pub(crate) struct EpisodeRun {
    pub(crate) total: Duration,
    pub(crate) prompt_tokens: u64,
    pub(crate) evaluated_tokens: u64,
    pub(crate) completion_tokens: u64,
    pub(crate) prompt_time: Duration,
    pub(crate) generation_time: Duration,
    pub(crate) generation_steps: u64,
    pub(crate) drafted_tokens: u64,
    pub(crate) accepted_tokens: u64,
    pub(crate) replies: Vec<String>,
}

impl EpisodeRun {
    /// One timed call on `messages`, its cost added to the run; returns the reply text.
    fn timed_call(
        &mut self,
        chat: &LlamaChat,
        messages: &[ChatMessage],
        decoding: &Decoding,
        prompt_version: &str,
    ) -> Result<String> {
        let request = ChatRequest {
            messages: messages.to_vec(),
            decoding: decoding.clone(),
            prompt_version: prompt_version.to_string(),
            tools: Vec::new(),
        };
        let started = Instant::now();
        let (reply, stats) = chat.chat_with_stats(&request)?;
        self.total += started.elapsed();
        self.prompt_tokens += u64::from(stats.prompt_tokens);
        self.evaluated_tokens += u64::from(stats.evaluated_tokens);
        self.completion_tokens += u64::from(stats.completion_tokens);
        self.prompt_time += stats.prompt_time;
        self.generation_time += stats.generation_time;
        self.generation_steps += u64::from(stats.generation_steps);
        self.drafted_tokens += u64::from(stats.drafted_tokens);
        self.accepted_tokens += u64::from(stats.accepted_tokens);
        Ok(reply.text)
    }
}

/// Feedback for the repair-like steps, in the spirit of what the oracle and the DBMS say.
const FEEDBACK: [&str; 6] = [
    "The query ran but its result does not match the expected answer (denotation mismatch). \
     Check the join keys and the grouping, then write a corrected query in a ```sql block.",
    "The database reported an error: no such column: T2.feature_count. Use only columns that \
     exist in the schema above and write a corrected query in a ```sql block.",
    "The query ran but returned too many rows compared with the expected answer. Check the \
     filter in the HAVING clause and write a corrected query in a ```sql block.",
    "The query ran but the counts differ from the expected answer. Count the features per \
     property through the linking table and write a corrected query in a ```sql block.",
    "The database reported an error: ambiguous column name: property_id. Qualify every \
     column with its table alias and write a corrected query in a ```sql block.",
    "The result still does not match. Return the property name and the number of features, \
     and write a corrected query in a ```sql block.",
];

/// Seven calls: the initial prompt, then six feedback rounds on the growing conversation.
/// With `replay`, the recorded replies are used as the assistant turns (same prompts as the
/// recorded run), otherwise the model's own replies are.
pub(crate) fn run_episode(
    chat: &LlamaChat,
    initial: &ChatRequest,
    decoding: &Decoding,
    replay: Option<&[String]>,
) -> Result<EpisodeRun> {
    let mut messages = initial.messages.clone();
    let mut run = EpisodeRun::default();
    for step in 0..=FEEDBACK.len() {
        if step > 0 {
            let previous = match replay {
                Some(replies) => replies[step - 1].clone(),
                None => run.replies[step - 1].clone(),
            };
            messages.push(ChatMessage::assistant(previous));
            messages.push(ChatMessage::user(FEEDBACK[step - 1]));
        }
        let reply = run.timed_call(chat, &messages, decoding, "bench-episode")?;
        run.replies.push(reply);
    }
    Ok(run)
}
