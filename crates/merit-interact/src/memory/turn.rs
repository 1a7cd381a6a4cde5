//! Turn-level memories: one step of a finished attempt as a compact snippet (the state the
//! agent was in, the action it took with literals masked, what came back, and whether it
//! helped), keyed by the embedding of the state's signature text.
//!
//! The state before turn t (the paper's σ_t) has four parts, built by [`TurnState::at`] from
//! the steps before t: the initial request; the current request (the initial one plus every
//! clarification the user gave, and the follow-up question once phase 2 has begun); the
//! previous action's skeleton; the previous observation without the budget note. Memories and
//! queries are built by the same function, so a live agent's state and a stored step's state
//! are directly comparable.
//!
//! Polarity of a step (our rule; the paper gives none): NEGATIVE when the action failed at
//! what it was for (an SQL error or timeout, a failed submission, a question the user would
//! not answer, an unknown or malformed action, a lookup that found nothing, a refused
//! non-submit at the end of the budget); POSITIVE otherwise.

use super::retrieve::MemoryQuery;
use super::store::MemoryRecord;
use super::{cut, observation_body, Level, MemoryConfig, Polarity, StreamPos};
use crate::action::{ActionCall, Target};
use crate::env::{Trajectory, TrajectoryStep};
use crate::simulator::OUT_OF_SCOPE_REPLY;
use crate::task::PublicTask;
use serde::{Deserialize, Serialize};

/// The `format` of every turn memory this version writes.
pub const TURN_MEMORY_FORMAT: &str = "merit-interact-memory-turn-v1";

/// What the environment says when phase 2 starts; the follow-up question comes after it.
const FOLLOW_UP_MARK: &str = "The user follows up: ";

/// The agent's situation before one turn (σ_t).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnState {
    /// The user's first request.
    pub initial_request: String,
    /// The request as understood so far: the initial one plus the user's clarifications and
    /// any follow-up question, one per line.
    pub current_request: String,
    /// Skeleton of the previous action (`None` before the first turn).
    pub previous_action: Option<String>,
    /// The previous observation without bookkeeping lines, cut short.
    pub previous_observation: Option<String>,
}

impl TurnState {
    /// The state before the turn after `steps` (all earlier steps of the episode, in order).
    /// `observation_chars` bounds each observation and user answer kept.
    pub fn at(task: &PublicTask, steps: &[TrajectoryStep], observation_chars: usize) -> TurnState {
        let mut current = task.amb_user_query.clone();
        for step in steps {
            let body = observation_body(&step.observation);
            if step.action.target == Target::User && step.action.name == "ask" {
                let answered = !body.is_empty() && !body.starts_with(OUT_OF_SCOPE_REPLY);
                if let (true, Some(question)) = (answered, step.action.args.first()) {
                    current.push_str(&format!(
                        "\nclarification: {} -> {}",
                        cut(question.trim(), observation_chars),
                        cut(&body, observation_chars)
                    ));
                }
            }
            if let Some(index) = body.find(FOLLOW_UP_MARK) {
                let follow_up = body[index + FOLLOW_UP_MARK.len()..].trim();
                current.push_str(&format!(
                    "\nfollow-up: {}",
                    cut(follow_up, observation_chars)
                ));
            }
        }
        let previous = steps.last();
        TurnState {
            initial_request: task.amb_user_query.clone(),
            current_request: current,
            previous_action: previous.map(|s| action_skeleton(&s.action)),
            previous_observation: previous
                .map(|s| cut(&observation_body(&s.observation), observation_chars)),
        }
    }

    /// The state signature: the text whose embedding keys a turn memory and a turn query.
    pub fn signature(&self) -> String {
        format!(
            "INIT: {}\nQ: {}\nPREV_ACT: {}\nPREV_OBS: {}",
            self.initial_request,
            self.current_request,
            self.previous_action.as_deref().unwrap_or("(none)"),
            self.previous_observation.as_deref().unwrap_or("(none)")
        )
    }
}

impl MemoryQuery for TurnState {
    fn key_text(&self) -> String {
        self.signature()
    }
    fn lexical_text(&self) -> String {
        self.signature()
    }
    fn prompt_text(&self) -> String {
        self.signature()
    }
}

/// One step as remembered. Built only from a [`Trajectory`] by
/// [`super::InteractMemory::commit`], or read back from a memory file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TurnMemory {
    /// [`TURN_MEMORY_FORMAT`].
    pub format: String,
    /// Commit order within the turn bank.
    pub id: u64,
    /// The source task.
    pub instance_id: String,
    /// Its database.
    pub database: String,
    /// Stream position of the source episode.
    pub stream_pos: StreamPos,
    /// 1-based turn of the step within its episode.
    pub turn: usize,
    /// The state the step was taken in.
    pub state: TurnState,
    /// The action with literals masked (see [`action_skeleton`]).
    pub action_skeleton: String,
    /// What it returned, without bookkeeping lines, cut short.
    pub result: String,
    /// Whether the action did what it was for (see the module docs).
    pub polarity: Polarity,
    /// Reward of the whole source episode.
    pub episode_reward: f64,
}

impl TurnMemory {
    pub(crate) fn from_trajectory(
        position: StreamPos,
        trajectory: &Trajectory,
        config: &MemoryConfig,
    ) -> Vec<TurnMemory> {
        let chars = config.turn_observation_chars;
        trajectory
            .steps
            .iter()
            .enumerate()
            .map(|(index, step)| TurnMemory {
                format: TURN_MEMORY_FORMAT.to_string(),
                id: 0,
                instance_id: trajectory.task.instance_id.clone(),
                database: trajectory.task.selected_database.clone(),
                stream_pos: position,
                turn: step.turn,
                state: TurnState::at(&trajectory.task, &trajectory.steps[..index], chars),
                action_skeleton: action_skeleton(&step.action),
                result: cut(&observation_body(&step.observation), chars),
                polarity: step_polarity(step),
                episode_reward: trajectory.outcome.reward,
            })
            .collect()
    }
}

impl MemoryRecord for TurnMemory {
    const FORMAT: &'static str = TURN_MEMORY_FORMAT;
    const LEVEL: Level = Level::Turn;

    fn format(&self) -> &str {
        &self.format
    }
    fn id(&self) -> u64 {
        self.id
    }
    fn set_id(&mut self, id: u64) {
        self.id = id;
    }
    fn stream_pos(&self) -> StreamPos {
        self.stream_pos
    }
    fn instance_id(&self) -> &str {
        &self.instance_id
    }
    fn polarity(&self) -> Polarity {
        self.polarity
    }
    fn episode_reward(&self) -> f64 {
        self.episode_reward
    }

    fn key_text(&self) -> String {
        self.state.signature()
    }

    fn lexical_text(&self) -> String {
        format!(
            "{}\n{}\n{}",
            self.state.signature(),
            self.action_skeleton,
            self.result
        )
    }

    fn summary(&self) -> String {
        format!(
            "{}\nACTION: {}\nRESULT: {}\nOUTCOME: {}",
            self.state.signature(),
            self.action_skeleton,
            self.result,
            match self.polarity {
                Polarity::Positive => "POSITIVE",
                Polarity::Negative => "NEGATIVE",
            }
        )
    }
}

/// Whether a step's action did what it was for (see the module docs).
pub fn step_polarity(step: &TrajectoryStep) -> Polarity {
    let body = observation_body(&step.observation);
    let action = &step.action;
    let failed = action.name.is_empty()
        || body.starts_with("Unknown environment action")
        || body.starts_with("Unknown user action")
        || body.starts_with("The budget was used up and the next action had to be a submit")
        || (body.starts_with("Action '") && body.contains(" takes "))
        || match (action.target, action.name.as_str()) {
            (Target::Environment, "execute") => {
                body.starts_with("Error:") || body.starts_with("The query timed out")
            }
            (Target::Environment, "get_column_meaning") => {
                body.starts_with("No meaning is recorded")
            }
            (Target::Environment, "get_knowledge_definition") => {
                body.starts_with("No accessible knowledge entry")
            }
            (Target::User, "ask") => body.is_empty() || body.starts_with(OUT_OF_SCOPE_REPLY),
            (Target::User, "submit") => !body.starts_with("Correct:"),
            _ => false,
        };
    if failed {
        Polarity::Negative
    } else {
        Polarity::Positive
    }
}

/// A normalised description of an action: the tool in capitals; SQL with its literals masked
/// (`EXECUTE SQL: SELECT name FROM singer WHERE age > ?`); a clarification question reduced
/// to `ASK [CLARIFICATION]`, since its wording is specific to one request; lookups keep their
/// table, column or knowledge name, which are schema words, not values.
pub fn action_skeleton(action: &ActionCall) -> String {
    let name = action.name.trim();
    if name.is_empty() {
        return "UNREADABLE ACTION".to_string();
    }
    let upper = name.to_ascii_uppercase();
    match (action.target, name) {
        (Target::Environment, "execute") | (Target::User, "submit") => {
            let sql = action.args.first().map_or("", String::as_str);
            let verb = if name == "execute" {
                "EXECUTE"
            } else {
                "SUBMIT"
            };
            format!("{verb} SQL: {}", mask_literals(sql))
        }
        (Target::User, "ask") => "ASK [CLARIFICATION]".to_string(),
        _ if action.args.is_empty() => upper,
        _ => format!("{upper}({})", action.args.join(", ")),
    }
}

/// SQL with every string literal replaced by `'?'` and every number by `?`, comments dropped
/// and whitespace collapsed. Lexical, so it works on SQL that does not parse and on both
/// dialects; double-quoted and bracketed identifiers are kept.
pub fn mask_literals(sql: &str) -> String {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    // Whether the previous character belongs to a word, so `t1` keeps its digit.
    let mut in_word = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\'' => {
                // A string literal, with '' as an escaped quote.
                i += 1;
                while i < chars.len() {
                    if chars[i] == '\'' {
                        if chars.get(i + 1) == Some(&'\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                out.push_str("'?'");
                in_word = false;
            }
            '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                out.push(c);
                i += 1;
                while i < chars.len() && chars[i] != close {
                    out.push(chars[i]);
                    i += 1;
                }
                if i < chars.len() {
                    out.push(close);
                }
                in_word = false;
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                out.push(' ');
                in_word = false;
                continue;
            }
            '/' if chars.get(i + 1) == Some(&'*') => {
                i += 2;
                while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                    i += 1;
                }
                i += 1;
                out.push(' ');
                in_word = false;
            }
            _ if c.is_ascii_digit() && !in_word => {
                while i + 1 < chars.len()
                    && (chars[i + 1].is_ascii_alphanumeric() || chars[i + 1] == '.')
                {
                    i += 1;
                }
                out.push('?');
                in_word = false;
            }
            _ => {
                out.push(c);
                in_word = c.is_alphanumeric() || c == '_' || c == '$';
            }
        }
        i += 1;
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_masked_and_names_kept() {
        assert_eq!(
            mask_literals("SELECT t1.name, 'it''s' FROM \"Big 2\" t1 -- note 5\nWHERE age > 30.5 AND x = -2e3 /* 7 */ LIMIT 10"),
            "SELECT t1.name, '?' FROM \"Big 2\" t1 WHERE age > ? AND x = -? LIMIT ?"
        );
        assert_eq!(mask_literals("select 'unterminated"), "select '?'");
        assert_eq!(mask_literals(""), "");
    }

    #[test]
    fn skeletons_name_the_tool() {
        assert_eq!(
            action_skeleton(&ActionCall::execute("SELECT * FROM t WHERE a = 'x'")),
            "EXECUTE SQL: SELECT * FROM t WHERE a = '?'"
        );
        assert_eq!(
            action_skeleton(&ActionCall::ask("Which year do you mean?")),
            "ASK [CLARIFICATION]"
        );
        assert_eq!(action_skeleton(&ActionCall::get_schema()), "GET_SCHEMA");
        assert_eq!(
            action_skeleton(&ActionCall::get_column_meaning("singer", "age")),
            "GET_COLUMN_MEANING(singer, age)"
        );
        assert_eq!(
            action_skeleton(&ActionCall::new(Target::Environment, "", vec![])),
            "UNREADABLE ACTION"
        );
    }
}
