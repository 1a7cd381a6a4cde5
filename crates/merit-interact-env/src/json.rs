//! Small helpers to read typed fields out of parsed JSON with errors that name the field, and
//! the one "ask for a strict JSON reply, retry once" call shared by every model-written record.
//!
//! Task records are read through `serde_json::Value` rather than derived `Deserialize`
//! because serde's messages quote the offending value, and in a task or ground-truth file that
//! value can be gold SQL. These helpers report the JSON path and the expected shape only.
//!
//! [`ask_json`] is used by the task generator (`gen::request`, `gen::revise`), the insight extractor
//! (`memory::insight`) and the rubric judge (`prm`): one greedy call, the reply checked by the
//! caller's parser, a malformed reply sent back once with the parser's reason, and a request
//! the backend refuses as invalid turned into an unusable outcome rather than an error.

use crate::error::LoadError;
use crate::prompts::fill;
use merit_core::model::{ChatMessage, ChatModel, ChatRequest, Decoding, ModelError};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Where a record came from, to build [`LoadError`]s.
#[derive(Clone, Copy)]
pub(crate) struct At<'a> {
    pub(crate) path: &'a Path,
    pub(crate) line: usize,
}

impl At<'_> {
    pub(crate) fn field(&self, field: impl Into<String>, problem: &'static str) -> LoadError {
        LoadError::Field {
            path: self.path.to_path_buf(),
            line: self.line,
            field: field.into(),
            problem,
        }
    }
}

/// The records of a JSON Lines text: each non-blank line parsed, with where it stands (line
/// numbers count the blank lines, as an editor does).
pub(crate) fn records<'a>(
    text: &'a str,
    path: &'a Path,
) -> impl Iterator<Item = Result<(At<'a>, Value), LoadError>> + 'a {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(move |(index, line)| {
            let at = At {
                path,
                line: index + 1,
            };
            parse(line, path, at.line).map(|value| (at, value))
        })
}

/// Parses one JSON document, keeping only the position of a syntax error.
pub(crate) fn parse(text: &str, path: &Path, line: usize) -> Result<Value, LoadError> {
    serde_json::from_str(text).map_err(|error| LoadError::Json {
        path: path.to_path_buf(),
        // For a one-line record the parser's line is 1; report the file's line instead.
        line: if line == 0 { error.line() } else { line },
        column: error.column(),
    })
}

/// Reads a whole file as UTF-8 text.
pub(crate) fn read_text(path: &Path) -> Result<String, LoadError> {
    std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: PathBuf::from(path),
        source,
    })
}

pub(crate) fn object<'v>(
    value: &'v Value,
    at: At<'_>,
    field: &str,
) -> Result<&'v Map<String, Value>, LoadError> {
    value
        .as_object()
        .ok_or_else(|| at.field(field, "must be a JSON object"))
}

pub(crate) fn req_str(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<String, LoadError> {
    match map.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(at.field(join(prefix, key), "must be a string")),
        None => Err(at.field(join(prefix, key), "is missing")),
    }
}

pub(crate) fn opt_str(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<String>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(at.field(join(prefix, key), "must be a string")),
    }
}

pub(crate) fn opt_bool(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<bool>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(at.field(join(prefix, key), "must be true or false")),
    }
}

pub(crate) fn opt_int(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<i64>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_i64()
            .map(Some)
            .ok_or_else(|| at.field(join(prefix, key), "must be an integer")),
    }
}

/// A field that is a list of strings or a single string (upstream writes `sol_sql` both ways);
/// absent or null is the empty list.
pub(crate) fn str_list(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<Vec<String>>, LoadError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(vec![s.clone()])),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| at.field(join(prefix, key), "must hold strings only"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(at.field(join(prefix, key), "must be a string or a list of strings")),
    }
}

pub(crate) fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// How much text around a JSON reply is forgiven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrapping {
    /// A `<think>` block, a code fence and any text around the outermost braces are dropped
    /// (the generator and the insight extractor: small models add them whatever the prompt
    /// says, and the record is what matters).
    Lenient,
    /// Only a leading `<think>` block, surrounding whitespace and one Markdown code fence
    /// around the object are dropped; any other text before or after the object is an error
    /// (the rubric judge, whose format validity is itself measured).
    Fenced,
}

/// Drops a leading reasoning block: everything up to the first `</think>`.
fn after_think(reply: &str) -> &str {
    match reply.find("</think>") {
        Some(end) => &reply[end + "</think>".len()..],
        None => reply,
    }
}

/// The one JSON object of a model reply, with `wrapping` deciding what may surround it. The
/// error says what is wrong in words the model can act on.
pub fn reply_object(reply: &str, wrapping: Wrapping) -> Result<Map<String, Value>, String> {
    let text = after_think(reply);
    let body = match wrapping {
        Wrapping::Lenient => {
            let (Some(start), Some(end)) = (text.find('{'), text.rfind('}')) else {
                return Err("it contains no JSON object".to_string());
            };
            if end < start {
                return Err("it contains no JSON object".to_string());
            }
            &text[start..=end]
        }
        Wrapping::Fenced => {
            let trimmed = text.trim();
            let unfenced = unfence(trimmed).unwrap_or(trimmed);
            if !unfenced.contains('{') {
                return Err("it contains no JSON object".to_string());
            }
            if !unfenced.starts_with('{') || !unfenced.ends_with('}') {
                return Err(
                    "it has text before or after the JSON object; reply with the object alone"
                        .to_string(),
                );
            }
            unfenced
        }
    };
    let value: Value =
        serde_json::from_str(body).map_err(|e| format!("it is not valid JSON ({e})"))?;
    match value {
        Value::Object(object) => Ok(object),
        _ => Err("the reply must be one JSON object".to_string()),
    }
}

/// The inside of one Markdown code fence that makes up all of `text` (```` ```json ```` or a
/// bare ```` ``` ````), trimmed; `None` when `text` is not exactly one fenced block.
fn unfence(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("```")?;
    let rest = rest.strip_suffix("```")?;
    // The info string runs to the end of the opening line.
    let newline = rest.find('\n')?;
    let info = rest[..newline].trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
        return None;
    }
    let inner = &rest[newline + 1..];
    if inner.contains("```") {
        return None;
    }
    Some(inner.trim())
}

/// One strict-JSON model call: the first messages, the decoding budget, the two prompt
/// versions, and the retry template (one `{{error}}` slot).
pub struct JsonCall<'a> {
    /// The conversation of the first call.
    pub messages: Vec<ChatMessage>,
    /// Token limit of each reply.
    pub max_tokens: u32,
    /// `prompt_version` of the first call.
    pub version: String,
    /// `prompt_version` of the retry.
    pub retry_version: String,
    /// The user message sent after a malformed reply.
    pub retry_template: &'a str,
    /// A GBNF grammar both calls decode under ([`Decoding::grammar`]), or none.
    pub grammar: Option<String>,
}

/// What [`ask_json`] produced.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonReply<T> {
    /// The parsed value, or why the replies were unusable (the last reason).
    pub value: Result<T, String>,
    /// Model calls made (0 to 2).
    pub calls: u32,
    /// Prompt tokens over the calls.
    pub prompt_tokens: u64,
    /// Completion tokens over the calls.
    pub completion_tokens: u64,
}

/// Asks `model` greedily, parses the reply with `parse`, and on a malformed reply sends it
/// back once (as an assistant message) followed by the retry template filled with the reason.
/// A backend error is returned as is; `ModelError::InvalidRequest` (a prompt longer than the
/// context) is deterministic and becomes an unusable value instead, so a rerun does not hit
/// it again.
pub fn ask_json<T>(
    model: &dyn ChatModel,
    call: JsonCall<'_>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<JsonReply<T>, ModelError> {
    let decoding = Decoding {
        max_tokens: call.max_tokens,
        grammar: call.grammar,
        ..Decoding::default()
    };
    let mut messages = call.messages;
    let mut outcome = JsonReply {
        value: Err(String::new()),
        calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
    };
    for attempt in 0..2 {
        let version = if attempt == 0 {
            &call.version
        } else {
            &call.retry_version
        };
        let request = ChatRequest::new(messages.clone(), decoding.clone(), version.clone());
        let reply = match model.chat(&request) {
            Ok(reply) => reply,
            Err(ModelError::InvalidRequest(message)) => {
                outcome.value = Err(format!("the model refused the request: {message}"));
                return Ok(outcome);
            }
            Err(error) => return Err(error),
        };
        outcome.calls += 1;
        outcome.prompt_tokens += u64::from(reply.prompt_tokens);
        outcome.completion_tokens += u64::from(reply.completion_tokens);
        match parse(&reply.text) {
            Ok(value) => {
                outcome.value = Ok(value);
                return Ok(outcome);
            }
            Err(error) => {
                messages.push(ChatMessage::assistant(reply.text));
                messages.push(ChatMessage::user(fill(
                    call.retry_template.trim_end(),
                    &[("error", &error)],
                )));
                outcome.value = Err(error);
            }
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient_wrapping_finds_the_outer_braces() {
        let object = reply_object(
            "<think>{ x</think>Sure:\n```json\n{\"a\": 1}\n```\nbye",
            Wrapping::Lenient,
        )
        .unwrap();
        assert_eq!(object["a"], 1);
        assert!(reply_object("no json", Wrapping::Lenient)
            .unwrap_err()
            .contains("no JSON"));
        assert!(reply_object("} {", Wrapping::Lenient)
            .unwrap_err()
            .contains("no JSON"));
        assert!(reply_object("[1] {", Wrapping::Lenient).is_err());
    }

    #[test]
    fn fenced_wrapping_allows_a_fence_and_nothing_else() {
        for good in [
            "{\"a\": 1}",
            "  <think>hmm {</think>\n{\"a\": 1}\n",
            "```json\n{\"a\": 1}\n```",
            "```\n{\"a\": 1}\n```",
        ] {
            assert_eq!(
                reply_object(good, Wrapping::Fenced).unwrap()["a"],
                1,
                "{good}"
            );
        }
        for prose in [
            "Here it is: {\"a\": 1}",
            "{\"a\": 1} Hope this helps.",
            "```python\n{\"a\": 1}\n```",
            "```json\n{\"a\": 1}\n``` more",
        ] {
            assert!(
                reply_object(prose, Wrapping::Fenced)
                    .unwrap_err()
                    .contains("text before or after"),
                "{prose}"
            );
        }
        assert!(reply_object("[1, 2]", Wrapping::Fenced)
            .unwrap_err()
            .contains("no JSON"));
        assert!(reply_object("{\"a\": }", Wrapping::Fenced)
            .unwrap_err()
            .contains("not valid JSON"));
    }
}
