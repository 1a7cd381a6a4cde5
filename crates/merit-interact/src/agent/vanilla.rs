//! The non-agentic baseline (paper 003's "Vanilla" LLM): one query per phase, no actions.
//!
//! The model gets the schema and the ambiguous request in one message (templates
//! `vanilla_*.txt`), and its SQL (a query, or a write task's statements) is submitted at once: it cannot ask the user, look at
//! column meanings or the knowledge base, or try a query first. When phase 1 passes and the
//! task has a follow-up, the follow-up comes as the next message of the same conversation and
//! its query is submitted the same way. A failed submission ends the baseline's attempt at
//! that phase (a second try would make it an agent), and the episode is recorded with
//! [`AgentStop::Answered`]. Costs are the environment's own (a submit is charged as in any
//! episode), so its records and reports read like the agents'.

use super::{
    cut_chars, dialect_name, AgentError, AgentStop, AgentTurn, AgentUsage, EpisodeResult,
    ReactAgent,
};
use crate::action::ActionCall;
use crate::agent::parse::ParseKind;
use crate::backend::InteractBackend;
use crate::env::Environment;
use crate::prompts;
use crate::simulator::UserSimulator;
use merit_core::model::{ChatMessage, ChatRequest, Decoding, ModelError};
use merit_sql::extract::extract_statements;

impl ReactAgent {
    /// Runs one episode as the non-agentic baseline (see the module docs).
    pub(super) fn run_vanilla<B: InteractBackend, S: UserSimulator>(
        &self,
        env: &mut Environment<B, S>,
    ) -> Result<EpisodeResult, AgentError> {
        let dialect = dialect_name(env.backend().dialect());
        let task = prompts::fill(
            prompts::VANILLA_TASK,
            &[
                (
                    "schema",
                    &cut_chars(env.schema(), self.config.observation_chars),
                ),
                ("request", &env.public_task().amb_user_query),
            ],
        );
        let mut messages = vec![
            ChatMessage::system(prompts::fill(
                prompts::VANILLA_SYSTEM,
                &[("dialect", dialect)],
            )),
            ChatMessage::user(task),
        ];
        let mut usage = AgentUsage::default();
        let mut turns = Vec::new();
        let mut stop = AgentStop::Answered;
        while !env.is_done() && turns.len() < self.config.max_turns {
            let request = ChatRequest {
                messages: messages.clone(),
                decoding: Decoding {
                    max_tokens: self.config.max_tokens,
                    ..self.decoding()
                },
                prompt_version: prompts::version("vanilla"),
                tools: Vec::new(),
            };
            let reply = match self.model.chat(&request) {
                Ok(reply) => reply,
                Err(ModelError::InvalidRequest(reason)) => {
                    stop = AgentStop::ModelRefused(reason);
                    break;
                }
                Err(error) => return Err(AgentError::Model(error)),
            };
            usage.add(&reply, true);
            // A reply without SQL is submitted as it stands: the judge fails it, as the user
            // would. A write task's answer (UPDATE, INSERT, ...) is taken whole, as the agents'
            // submit takes it.
            let (sql, kind) = match extract_statements(&reply.text) {
                Ok(sql) => (sql, ParseKind::BareCall),
                Err(_) => {
                    usage.unreadable_replies += 1;
                    (reply.text.trim().to_string(), ParseKind::LastLine)
                }
            };
            turns.push(AgentTurn {
                turn: turns.len() + 1,
                reply: reply.text.clone(),
                parse: kind,
                tool_call: None,
                guarded_repeat: None,
                fallback_submit: false,
            });
            let phase = env.phase();
            env.step_with_thought(ActionCall::submit(sql), None)?;
            if env.is_done() {
                stop = AgentStop::EpisodeEnded;
                break;
            }
            match env.follow_up_query() {
                Some(follow_up) if env.phase() != phase => {
                    let follow_up =
                        prompts::fill(prompts::VANILLA_FOLLOW_UP, &[("request", follow_up)]);
                    messages.push(ChatMessage::assistant(reply.text.trim().to_string()));
                    messages.push(ChatMessage::user(follow_up));
                }
                // The submission failed: the baseline's one attempt at this phase is spent.
                _ => break,
            }
        }
        Ok(EpisodeResult {
            trajectory: env.trajectory(),
            turns,
            agent_usage: usage,
            simulator_usage: env.simulator().usage(),
            stop,
            injections: Vec::new(),
        })
    }
}
