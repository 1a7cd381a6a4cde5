//! The teacher judge: one greedy call of a strong chat model per (state, memory) pair with
//! `prm_rubric.txt` (prompt version `merit-interact-prm-v1/rubric`), the reply read by
//! [`parse_rubric`], and one retry with the reason (`prm_retry.txt`,
//! `merit-interact-prm-v1/rubric-retry`) when it is malformed.
//!
//! Two malformed replies are a *result* ([`JudgeOutcome::rubric`] holds the reason), so an
//! annotation run records the failure and moves on; a backend that cannot be reached is an
//! *error* (nothing is recorded and a resumed run asks again). A request the backend refuses
//! as invalid (longer than the context) is deterministic and is a recorded failure too.

use super::rubric::{parse_rubric, rubric_grammar, Rubric};
use crate::json::{ask_json, JsonCall};
use crate::memory::store::MemoryRecord;
use crate::memory::{TurnMemory, TurnState};
use crate::prompts::fill;
use merit_core::model::{ChatMessage, ChatModel, ModelError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The template family of the rubric prompts; bump it whenever a `prm_*.txt` template changes.
pub const PRM_PROMPT_FAMILY: &str = "merit-interact-prm-v1";

/// The user message asking for the rubric.
pub const PRM_RUBRIC: &str = include_str!("../../prompts/prm_rubric.txt");
/// The message after a malformed reply.
pub const PRM_RETRY: &str = include_str!("../../prompts/prm_retry.txt");

/// The `prompt_version` of a rubric request made from template `name` (`rubric`,
/// `rubric-retry`).
pub fn prm_version(name: &str) -> String {
    format!("{PRM_PROMPT_FAMILY}/{name}")
}

/// The current state as the judge sees it: the state signature (`INIT:`, `Q:`, `PREV_ACT:`,
/// `PREV_OBS:` lines), the same text that keys turn-memory retrieval. The student PRM embeds
/// this text too.
pub fn state_text(state: &TurnState) -> String {
    state.signature()
}

/// The candidate memory as the judge sees it: its state signature, `ACTION:` (the skeleton,
/// literals masked), `RESULT:` and `OUTCOME: POSITIVE|NEGATIVE`, the summary the prompted
/// selector is shown. The student PRM embeds this text too.
pub fn memory_text(memory: &TurnMemory) -> String {
    memory.summary()
}

/// Settings of the judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeConfig {
    /// Token limit of one reply. A rubric is about 400 tokens of JSON; the default leaves room
    /// for a reasoning model's `<think>` block.
    pub max_tokens: u32,
    /// Decode under [`rubric_grammar`], so that the reply is the object alone and ends with
    /// it (the embedded backend and llama.cpp's server read the grammar; other servers ignore
    /// it and the reply is read as usual). Off by default: the rubric's validity rate is a
    /// measure of the teacher in the paper's setting, and a grammar leaves no room for a
    /// reasoning model's `<think>` block.
    #[serde(default)]
    pub grammar: bool,
}

impl Default for JudgeConfig {
    fn default() -> JudgeConfig {
        JudgeConfig {
            max_tokens: 1536,
            grammar: false,
        }
    }
}

/// What asking the judge produced.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeOutcome {
    /// The rubric, or why no usable one came back (after the retry).
    pub rubric: Result<Rubric, String>,
    /// Model calls made (0 to 2).
    pub calls: u32,
    /// Prompt tokens over the calls.
    pub prompt_tokens: u64,
    /// Completion tokens over the calls.
    pub completion_tokens: u64,
}

/// The teacher: grades (state, memory) pairs with a chat model.
pub struct RubricJudge {
    model: Arc<dyn ChatModel>,
    config: JudgeConfig,
}

impl std::fmt::Debug for RubricJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RubricJudge")
            .field("model", &self.model.id())
            .field("config", &self.config)
            .finish()
    }
}

impl RubricJudge {
    /// A judge asking `model` (pass the cached model, so a rerun costs nothing).
    pub fn new(model: Arc<dyn ChatModel>, config: JudgeConfig) -> RubricJudge {
        RubricJudge { model, config }
    }

    /// The model's identifier, recorded with every annotation.
    pub fn model_id(&self) -> String {
        self.model.id()
    }

    /// The settings.
    pub fn config(&self) -> &JudgeConfig {
        &self.config
    }

    /// The first message for a pair given as its two texts ([`state_text`], [`memory_text`]).
    pub fn messages_for_texts(&self, state: &str, memory: &str) -> Vec<ChatMessage> {
        vec![ChatMessage::user(fill(
            PRM_RUBRIC.trim_end(),
            &[("state", state), ("memory", memory)],
        ))]
    }

    /// The first message for `state` and `memory`.
    pub fn messages(&self, state: &TurnState, memory: &TurnMemory) -> Vec<ChatMessage> {
        self.messages_for_texts(&state_text(state), &memory_text(memory))
    }

    /// Grades `memory` for `state` (see the module docs for what is a result and what an
    /// error).
    pub fn judge(
        &self,
        state: &TurnState,
        memory: &TurnMemory,
    ) -> Result<JudgeOutcome, ModelError> {
        self.judge_texts(&state_text(state), &memory_text(memory))
    }

    /// Grades a pair given as its two texts.
    pub fn judge_texts(&self, state: &str, memory: &str) -> Result<JudgeOutcome, ModelError> {
        let call = JsonCall {
            messages: self.messages_for_texts(state, memory),
            max_tokens: self.config.max_tokens,
            version: prm_version("rubric"),
            retry_version: prm_version("rubric-retry"),
            retry_template: PRM_RETRY,
            grammar: self.config.grammar.then(rubric_grammar),
        };
        let reply = ask_json(self.model.as_ref(), call, |text| {
            parse_rubric(text).map_err(|e| e.to_string())
        })?;
        Ok(JudgeOutcome {
            rubric: reply.value,
            calls: reply.calls,
            prompt_tokens: reply.prompt_tokens,
            completion_tokens: reply.completion_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompts::slots;

    #[test]
    fn templates_have_their_documented_slots() {
        let readme = include_str!("../../prompts/README.md");
        for (template, expected) in [
            (PRM_RUBRIC, &["state", "memory"][..]),
            (PRM_RETRY, &["error"][..]),
        ] {
            assert_eq!(slots(template), expected);
            for slot in expected {
                assert!(readme.contains(&format!("`{slot}`")), "{slot} undocumented");
            }
            let values: Vec<(&str, &str)> = expected.iter().map(|s| (*s, "v")).collect();
            assert!(!fill(template, &values).contains("{{"));
        }
        for principle in super::super::rubric::Principle::ALL {
            assert!(PRM_RUBRIC.contains(principle.key()), "{principle:?}");
        }
        for key in [
            "recommend_injection",
            "use_as_warning_only",
            "one_sentence_summary",
            "how_to_use",
        ] {
            assert!(PRM_RUBRIC.contains(key), "{key}");
        }
        assert!(readme.contains("prm_rubric.txt") && readme.contains("prm_retry.txt"));
    }
}
