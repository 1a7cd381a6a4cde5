//! The insight record of an episode memory: what worked, what failed, the key lesson, and the
//! information gaps a question to the user closed, drawn from a finished trajectory by one
//! greedy model call (`memory_insight.txt`, prompt version
//! `merit-interact-memory-v1/insight`).
//!
//! The reply must be one JSON object with exactly the keys `worked`, `failed` (lists of at
//! most [`MAX_POINTS`] non-empty strings), `key_insight` (a non-empty string) and
//! `info_gaps` (a list of objects with exactly `key` (snake_case), `question`, `answer`,
//! `effect`, all non-empty strings). A gap is only accepted when the episode has a question
//! the user answered. Only wrapping is forgiven: a `<think>` block, a code fence and text
//! around the outermost braces. A malformed reply is sent back once with the reason
//! (`memory_insight_retry.txt`); after two malformed replies the episode is stored without
//! an insight.

use super::episode::outcome_line;
use super::{cut, memory_version, observation_body};
use crate::env::Trajectory;
use crate::json::{ask_json, reply_object, JsonCall, Wrapping};
use crate::prompts::fill;
use crate::simulator::OUT_OF_SCOPE_REPLY;
use merit_core::model::{ChatMessage, ChatModel, ModelError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::sync::Arc;

/// The user message asking for the insight record.
pub const MEMORY_INSIGHT: &str = include_str!("../../prompts/memory_insight.txt");
/// The message after a malformed reply.
pub const MEMORY_INSIGHT_RETRY: &str = include_str!("../../prompts/memory_insight_retry.txt");

/// Items in `worked` and `failed` at most.
pub const MAX_POINTS: usize = 4;

/// A gap in the request that a question to the user closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InfoGap {
    /// A snake_case label, e.g. `time_window`.
    pub key: String,
    /// The agent's question, shortened.
    pub question: String,
    /// The user's answer, shortened.
    pub answer: String,
    /// How the answer changed the SQL.
    pub effect: String,
}

/// The lessons of one episode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Insight {
    /// What moved the agent toward a correct answer.
    pub worked: Vec<String>,
    /// Mistakes, wasted steps, wrong assumptions.
    pub failed: Vec<String>,
    /// Advice for a similar request.
    pub key_insight: String,
    /// Gaps closed by asking.
    pub info_gaps: Vec<InfoGap>,
}

/// Settings of the insight call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InsightConfig {
    /// Token limit of one reply.
    pub max_tokens: u32,
    /// Each observation is cut to this many characters in the prompt.
    pub observation_chars: usize,
    /// Each action argument (SQL, a question) is cut to this many characters in the prompt.
    pub argument_chars: usize,
}

impl Default for InsightConfig {
    fn default() -> InsightConfig {
        InsightConfig {
            max_tokens: 768,
            observation_chars: 600,
            argument_chars: 1200,
        }
    }
}

/// What asking the model produced.
#[derive(Debug, Clone, PartialEq)]
pub struct InsightOutcome {
    /// The insight, or why both replies were unusable.
    pub insight: Result<Insight, String>,
    /// Model calls made (0 to 2).
    pub calls: u32,
    /// Prompt tokens over the calls.
    pub prompt_tokens: u64,
    /// Completion tokens over the calls.
    pub completion_tokens: u64,
}

/// Draws insight records from finished trajectories with a chat model.
pub struct InsightExtractor {
    model: Arc<dyn ChatModel>,
    config: InsightConfig,
}

impl std::fmt::Debug for InsightExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InsightExtractor")
            .field("model", &self.model.id())
            .field("config", &self.config)
            .finish()
    }
}

/// Whether the user answered at least one question in the episode (only then can a gap have
/// been closed by asking).
fn user_answered(trajectory: &Trajectory) -> bool {
    trajectory.steps.iter().any(|step| {
        let body = observation_body(&step.observation);
        step.action.name == "ask" && !body.is_empty() && !body.starts_with(OUT_OF_SCOPE_REPLY)
    })
}

impl InsightExtractor {
    /// An extractor asking `model` (pass the cached model).
    pub fn new(model: Arc<dyn ChatModel>, config: InsightConfig) -> InsightExtractor {
        InsightExtractor { model, config }
    }

    /// The first message for `trajectory`.
    pub fn messages(&self, trajectory: &Trajectory) -> Vec<ChatMessage> {
        let mut steps = String::new();
        for step in &trajectory.steps {
            let args: Vec<String> = step
                .action
                .args
                .iter()
                .map(|a| cut(a, self.config.argument_chars))
                .collect();
            let _ = writeln!(
                steps,
                "{}. (phase {}) {}({})\n   returned: {}",
                step.turn,
                match step.phase {
                    crate::simulator::Phase::One => 1,
                    crate::simulator::Phase::Two => 2,
                },
                if step.action.name.is_empty() {
                    "(unreadable action)"
                } else {
                    step.action.name.as_str()
                },
                args.join(", "),
                cut(
                    &observation_body(&step.observation),
                    self.config.observation_chars
                )
                .replace('\n', "\n   ")
            );
        }
        if steps.is_empty() {
            steps.push_str("(no steps)");
        }
        vec![ChatMessage::user(fill(
            MEMORY_INSIGHT.trim_end(),
            &[
                ("request", &trajectory.task.amb_user_query),
                ("outcome", &outcome_line(&trajectory.outcome)),
                ("steps", steps.trim_end()),
            ],
        ))]
    }

    /// Asks the model for the insight of `trajectory`, retrying once with the reason when the
    /// reply is malformed. A backend error is returned as is (nothing should be committed);
    /// `ModelError::InvalidRequest` (a prompt longer than the context) is deterministic and
    /// becomes an unusable outcome instead.
    pub fn extract(&self, trajectory: &Trajectory) -> Result<InsightOutcome, ModelError> {
        let asked = user_answered(trajectory);
        let call = JsonCall {
            messages: self.messages(trajectory),
            max_tokens: self.config.max_tokens,
            version: memory_version("insight"),
            retry_version: memory_version("insight-retry"),
            retry_template: MEMORY_INSIGHT_RETRY,
            grammar: None,
        };
        let reply = ask_json(self.model.as_ref(), call, |text| parse_insight(text, asked))?;
        Ok(InsightOutcome {
            insight: reply.value,
            calls: reply.calls,
            prompt_tokens: reply.prompt_tokens,
            completion_tokens: reply.completion_tokens,
        })
    }
}

/// Reads and validates a reply (see the module docs). `asked` says whether the user answered
/// a question in the episode; without one, any gap is rejected. The error says what is wrong
/// in words the model can act on.
pub fn parse_insight(reply: &str, asked: bool) -> Result<Insight, String> {
    let object = reply_object(reply, Wrapping::Lenient)?;
    let object = &object;
    only_keys(
        object,
        &["worked", "failed", "key_insight", "info_gaps"],
        "",
    )?;
    let worked = points(object, "worked")?;
    let failed = points(object, "failed")?;
    let key_insight = text_field(object, "key_insight", "")?;
    let gaps = match object.get("info_gaps") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err("\"info_gaps\" must be a list".to_string()),
        None => return Err("the key \"info_gaps\" is missing".to_string()),
    };
    if !gaps.is_empty() && !asked {
        return Err(
            "\"info_gaps\" must be empty: the user answered no question in this episode"
                .to_string(),
        );
    }
    let mut info_gaps = Vec::with_capacity(gaps.len());
    for (i, item) in gaps.iter().enumerate() {
        let at = format!("info_gaps[{i}].");
        let gap = item
            .as_object()
            .ok_or_else(|| format!("info_gaps[{i}] must be an object"))?;
        only_keys(gap, &["key", "question", "answer", "effect"], &at)?;
        let key = text_field(gap, "key", &at)?;
        if !key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(format!(
                "{at}key must be a snake_case label (lower-case letters, digits, underscores)"
            ));
        }
        info_gaps.push(InfoGap {
            key,
            question: text_field(gap, "question", &at)?,
            answer: text_field(gap, "answer", &at)?,
            effect: text_field(gap, "effect", &at)?,
        });
    }
    Ok(Insight {
        worked,
        failed,
        key_insight,
        info_gaps,
    })
}

fn only_keys(object: &Map<String, Value>, allowed: &[&str], at: &str) -> Result<(), String> {
    match object.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(extra) => Err(format!(
            "{at}{extra} is not an allowed key (use only {})",
            allowed.join(", ")
        )),
        None => Ok(()),
    }
}

fn text_field(object: &Map<String, Value>, key: &str, at: &str) -> Result<String, String> {
    match object.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(Value::String(_)) => Err(format!("\"{at}{key}\" is empty")),
        Some(_) => Err(format!("\"{at}{key}\" must be a string")),
        None => Err(format!("the key \"{at}{key}\" is missing")),
    }
}

fn points(object: &Map<String, Value>, key: &str) -> Result<Vec<String>, String> {
    let items = match object.get(key) {
        Some(Value::Array(items)) => items,
        Some(_) => return Err(format!("\"{key}\" must be a list of strings")),
        None => return Err(format!("the key \"{key}\" is missing")),
    };
    if items.len() > MAX_POINTS {
        return Err(format!(
            "\"{key}\" has {} items; give at most {MAX_POINTS}",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            _ => Err(format!("{key}[{i}] must be a non-empty string")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"worked": ["looked at the schema first"], "failed": [],
        "key_insight": "Read-only and easy; explore before asking.",
        "info_gaps": [{"key": "time_window", "question": "which year?", "answer": "2019",
                       "effect": "adds a year filter"}]}"#;

    #[test]
    fn a_valid_reply_is_read_and_wrapping_is_forgiven() {
        let insight = parse_insight(GOOD, true).unwrap();
        assert_eq!(insight.worked, vec!["looked at the schema first"]);
        assert_eq!(insight.info_gaps[0].key, "time_window");
        let wrapped = format!("<think>{{ hmm }}</think>Here:\n```json\n{GOOD}\n```\nDone.");
        assert_eq!(parse_insight(&wrapped, true).unwrap(), insight);
    }

    #[test]
    fn shape_errors_are_reported() {
        assert!(parse_insight("no json", true)
            .unwrap_err()
            .contains("no JSON"));
        assert!(parse_insight(GOOD, false)
            .unwrap_err()
            .contains("must be empty"));
        let extra = GOOD.replacen("\"failed\"", "\"extra\": 1, \"failed\"", 1);
        assert!(parse_insight(&extra, true)
            .unwrap_err()
            .contains("extra is not an allowed key"));
        let bad_key = GOOD.replace("time_window", "Time Window");
        assert!(parse_insight(&bad_key, true)
            .unwrap_err()
            .contains("snake_case"));
        let many = GOOD.replace(
            "[\"looked at the schema first\"]",
            "[\"a\", \"b\", \"c\", \"d\", \"e\"]",
        );
        assert!(parse_insight(&many, true)
            .unwrap_err()
            .contains("at most 4"));
        let empty = GOOD.replace("Read-only and easy; explore before asking.", " ");
        assert!(parse_insight(&empty, true).unwrap_err().contains("empty"));
    }
}
