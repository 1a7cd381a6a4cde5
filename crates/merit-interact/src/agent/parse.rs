//! Reading one action out of a model reply.
//!
//! The text protocol the agent prompt asks for is
//!
//! ```text
//! Thought: <reasoning>
//! Action: <name>(<arguments>)
//! ```
//!
//! with arguments written as Python-style literals (`'…'`, `"…"`, `'''…'''`, `"""…"""`, bare
//! numbers). Small models stray from it, so the reader accepts, in this order:
//!
//! 1. a `<tool_call>{…}</tool_call>` block (what chat templates of tool-calling models emit as
//!    text), read as a tool call;
//! 2. the first line starting with `Action:` (markdown emphasis, list marks and a code fence
//!    around the call tolerated); its payload is a call `name(args)` (an `Object.` prefix such
//!    as `User.` is dropped), a bare `name`, or a JSON object;
//! 3. a JSON object anywhere (fenced or not) with an action name in `action`, `name`, `tool` or
//!    `function` and arguments in `args`, `arguments`, `parameters` or `input` (a list, an
//!    object keyed by parameter names, or a JSON string of either);
//! 4. the first line that starts with a known action name;
//! 5. otherwise the last non-empty line, as the protocol says (its first word becomes the
//!    name, which is almost always unknown, so the environment charges 0.2 and says so).
//!
//! Arguments that are not a clean literal list fall back to the protocol's rule: the text
//! between the parentheses with one pair of outer quotes stripped (split at the first
//! top-level comma for the two-argument `get_column_meaning`). So an unquoted multi-line
//! `execute(SELECT a, b FROM t)` still runs what was meant.
//!
//! The interaction object is inferred from the name (`ask` and `submit` go to the user,
//! everything else to the environment); an unknown name goes to the environment, which answers
//! with the list of valid actions. Costs depend on the name only, so this inference never
//! changes what an action costs.
//!
//! Native tool calls (`merit_core::model::ChatReply::tool_calls`) go through
//! [`action_from_tool_call`] (the same name aliases and argument rules as step 3 above), and
//! [`tool_specs`] gives the tools to declare in the request.

use crate::action::{ActionCall, Target, ENVIRONMENT_ACTIONS, USER_ACTIONS};
use merit_core::model::ToolSpec;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Longest name kept from an unreadable reply (it is echoed in the observation).
const MAX_NAME_CHARS: usize = 64;

/// How the action was found in the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ParseKind {
    /// A `<tool_call>` block.
    ToolCallTag,
    /// An `Action:` line.
    ActionLine,
    /// A JSON object without an `Action:` line.
    Json,
    /// A line starting with a known action name.
    BareCall,
    /// Nothing recognisable: the last line was used.
    LastLine,
    /// The reply was empty.
    Empty,
    /// A native tool call of the model backend.
    NativeToolCall,
}

/// One reply, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedReply {
    /// The action to send to the environment.
    pub action: ActionCall,
    /// The reasoning before the action (`Thought:` prefix removed), possibly empty.
    pub thought: String,
    /// How the action was found.
    pub kind: ParseKind,
}

impl ParsedReply {
    /// `true` when the action has a known name (the agent gets a format hint otherwise).
    pub fn is_known_action(&self) -> bool {
        is_known(&self.action.name)
    }
}

/// Tool names of the function-calling variant (protocol §3, B) mapped to action names.
const ALIASES: [(&str, &str); 6] = [
    ("execute_sql", "execute"),
    ("ask_user", "ask"),
    ("submit_sql", "submit"),
    ("run_sql", "execute"),
    ("query", "execute"),
    ("get_knowledge", "get_knowledge_definition"),
];

fn canonical(name: &str) -> String {
    let name = name.trim();
    // `User.ask`, `Environment.execute`: the object prefix is implied by the name anyway.
    let name = name.rsplit('.').next().unwrap_or(name).trim();
    let lower = name.to_ascii_lowercase();
    for (alias, real) in ALIASES {
        if lower == alias {
            return real.to_string();
        }
    }
    if is_known(&lower) {
        lower
    } else {
        name.chars().take(MAX_NAME_CHARS).collect()
    }
}

/// Whether `name` is one of the nine action names.
pub fn is_known_name(name: &str) -> bool {
    is_known(name)
}

fn is_known(name: &str) -> bool {
    ENVIRONMENT_ACTIONS.contains(&name) || USER_ACTIONS.contains(&name)
}

fn target_of(name: &str) -> Target {
    if USER_ACTIONS.contains(&name) {
        Target::User
    } else {
        Target::Environment
    }
}

/// The parameter names of each action, in order, as tools declare them (and as JSON
/// arguments may name them).
fn parameter_names(name: &str) -> &'static [&'static [&'static str]] {
    match name {
        "execute" | "submit" => &[&["sql", "query", "sql_query", "statement"]],
        "ask" => &[&["question", "query", "text", "message"]],
        "get_column_meaning" => &[&["table", "table_name"], &["column", "column_name"]],
        "get_knowledge_definition" => &[&["name", "knowledge_name", "knowledge"]],
        _ => &[],
    }
}

fn single_argument(name: &str) -> bool {
    parameter_names(name).len() == 1
}

fn action(name: &str, args: Vec<String>) -> ActionCall {
    let name = canonical(name);
    ActionCall::new(target_of(&name), name, args)
}

/// Reads one reply. Never fails: an unreadable reply becomes an action with an unknown or empty
/// name, which the environment charges and answers as the protocol says.
pub fn parse_reply(text: &str) -> ParsedReply {
    let text = crate::simulator::model::strip_reasoning(text);
    if text.trim().is_empty() {
        return ParsedReply {
            action: ActionCall::new(Target::Environment, "", Vec::new()),
            thought: String::new(),
            kind: ParseKind::Empty,
        };
    }
    if let Some(parsed) = tool_call_tag(text) {
        return parsed;
    }
    if let Some(parsed) = action_line(text) {
        return parsed;
    }
    if let Some((start, value)) = find_json_action(text) {
        if let Some(call) = json_action(&value) {
            return ParsedReply {
                action: call,
                thought: thought_before(&text[..start]),
                kind: ParseKind::Json,
            };
        }
    }
    if let Some(parsed) = bare_call(text) {
        return parsed;
    }
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let word: String = last
        .trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let name = if word.is_empty() { last.trim() } else { &word };
    ParsedReply {
        action: ActionCall::new(
            Target::Environment,
            name.chars().take(MAX_NAME_CHARS).collect::<String>(),
            Vec::new(),
        ),
        thought: String::new(),
        kind: ParseKind::LastLine,
    }
}

/// One native tool call: a tool name (the nine action names or the function-calling aliases
/// `execute_sql`, `ask_user`, `submit_sql`) and its arguments as the JSON text the backend sent
/// (an object keyed by parameter names, or a list). Arguments that are not JSON become the one
/// argument as they are.
pub fn action_from_tool_call(name: &str, arguments: &str) -> ActionCall {
    let canonical_name = canonical(name);
    let args = match serde_json::from_str::<Value>(arguments) {
        Ok(value) => json_arguments(&canonical_name, &value),
        Err(_) if arguments.trim().is_empty() => Vec::new(),
        Err(_) => vec![arguments.to_string()],
    };
    action(name, args)
}

/// The nine actions as tools of a chat request (from [`tool_definitions`]).
pub fn tool_specs() -> Vec<ToolSpec> {
    let definitions = tool_definitions();
    definitions
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| {
            let function = tool.get("function")?;
            Some(ToolSpec {
                name: function.get("name")?.as_str()?.to_string(),
                description: function.get("description")?.as_str()?.to_string(),
                parameters: function.get("parameters")?.clone(),
            })
        })
        .collect()
}

/// The nine actions as OpenAI-style function tools (the JSON of a request's `tools`).
pub fn tool_definitions() -> Value {
    let string = |description: &str| json!({"type": "string", "description": description});
    let tool = |name: &str, description: &str, params: Vec<(&str, Value)>| {
        let required: Vec<&str> = params.iter().map(|(n, _)| *n).collect();
        let properties: serde_json::Map<String, Value> = params
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        json!({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}
        }})
    };
    json!([
        tool(
            "execute",
            "Run one SQL statement and see its rows. Cost 1.",
            vec![("sql", string("the SQL statement"))]
        ),
        tool(
            "get_schema",
            "The CREATE TABLE statements with sample rows. Cost 1.",
            vec![]
        ),
        tool(
            "get_all_column_meanings",
            "Descriptions of every column. Cost 1.",
            vec![]
        ),
        tool(
            "get_column_meaning",
            "The description of one column. Cost 0.5.",
            vec![
                ("table", string("table name")),
                ("column", string("column name"))
            ]
        ),
        tool(
            "get_all_external_knowledge_names",
            "Names of the knowledge-base entries. Cost 0.5.",
            vec![]
        ),
        tool(
            "get_knowledge_definition",
            "One knowledge-base entry. Cost 0.5.",
            vec![("name", string("the entry's name"))]
        ),
        tool(
            "get_all_knowledge_definitions",
            "Every knowledge-base entry. Cost 1.",
            vec![]
        ),
        tool(
            "ask",
            "Ask the user to clarify what they mean. Cost 2.",
            vec![("question", string("the question for the user"))]
        ),
        tool(
            "submit",
            "Give the user the final SQL: a query, or the statements of a change. Cost 3.",
            vec![("sql", string("the final SQL"))]
        ),
    ])
}

/// The reasoning in `text` with a leading `Thought:` label removed.
pub fn thought_before(text: &str) -> String {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let cleaned = ["**thought:**", "thought:", "**thought**:"]
        .iter()
        .find_map(|p| lower.starts_with(p).then(|| &trimmed[p.len()..]))
        .unwrap_or(trimmed);
    cleaned.trim().to_string()
}

fn tool_call_tag(text: &str) -> Option<ParsedReply> {
    let start = text.find("<tool_call>")?;
    let body_start = start + "<tool_call>".len();
    let body_end = text[body_start..]
        .find("</tool_call>")
        .map_or(text.len(), |e| body_start + e);
    let body = strip_fence(&text[body_start..body_end]);
    let value = first_json_object(body).map(|(_, v)| v)?;
    Some(ParsedReply {
        action: json_action(&value)?,
        thought: thought_before(&text[..start]),
        kind: ParseKind::ToolCallTag,
    })
}

/// The first line that is an `Action:` marker, and the text after its colon through the end.
fn action_line(text: &str) -> Option<ParsedReply> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start_of_line = offset;
        offset += line.len();
        let stripped = line.trim_start_matches(|c: char| {
            c.is_whitespace() || matches!(c, '*' | '#' | '-' | '>' | '`')
        });
        match stripped.get(..6) {
            Some(head) if head.eq_ignore_ascii_case("action") => {}
            _ => continue,
        }
        let after = stripped[6..].trim_start_matches(['*', ' ']);
        let Some(rest) = after.strip_prefix(':') else {
            continue;
        };
        let consumed = line.len() - rest.len();
        let payload_start = start_of_line + consumed;
        let payload = text[payload_start..].trim_start_matches(['*', ' ', '\t']);
        let thought = thought_before(&text[..start_of_line]);
        let payload = strip_fence(payload);
        if payload.trim_start().starts_with('{') {
            if let Some(call) = first_json_object(payload).and_then(|(_, v)| json_action(&v)) {
                return Some(ParsedReply {
                    action: call,
                    thought,
                    kind: ParseKind::ActionLine,
                });
            }
        }
        return Some(ParsedReply {
            action: parse_call(payload),
            thought,
            kind: ParseKind::ActionLine,
        });
    }
    None
}

fn bare_call(text: &str) -> Option<ParsedReply> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let trimmed = line.trim_start_matches(|c: char| c.is_whitespace() || c == '`');
        let word: String = trimmed
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
            .collect();
        if word.is_empty() || !is_known(&canonical(&word)) {
            continue;
        }
        let rest = trimmed[word.len()..].trim_start();
        if rest.starts_with('(') || rest.trim().is_empty() {
            let skipped = line.len() - trimmed.len();
            return Some(ParsedReply {
                action: parse_call(&text[start + skipped..]),
                thought: thought_before(&text[..start]),
                kind: ParseKind::BareCall,
            });
        }
    }
    None
}

/// Drops a code fence around `text` (a leading ```` ```lang ```` line and the next closing
/// fence); returns the text unchanged when it does not start with a fence.
fn strip_fence(text: &str) -> &str {
    let trimmed = text.trim_start();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return text;
    };
    let body = rest.find('\n').map_or("", |n| &rest[n + 1..]);
    match body.find("```") {
        Some(end) => &body[..end],
        None => body,
    }
}

/// Reads `name(args)` (or a bare `name`). See the module docs for the fallback.
fn parse_call(payload: &str) -> ActionCall {
    let payload = payload.trim_start().trim_start_matches('`');
    let name: String = payload
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    if name.is_empty() {
        let line = payload.lines().next().unwrap_or("").trim();
        return ActionCall::new(
            Target::Environment,
            line.chars().take(MAX_NAME_CHARS).collect::<String>(),
            Vec::new(),
        );
    }
    let canonical_name = canonical(&name);
    let rest = payload[name.len()..].trim_start();
    let Some(inner) = rest.strip_prefix('(') else {
        return action(&name, Vec::new());
    };
    let args = match literal_args(inner) {
        Some(args) if args_fit(&canonical_name, &args) => {
            args.into_iter().map(|a| a.text).collect()
        }
        _ => fallback_args(&canonical_name, inner),
    };
    action(&name, args)
}

struct Arg {
    text: String,
    quoted: bool,
}

/// Literal arguments are trusted when they are all quoted, or when there is at most one of
/// them for a single-argument action (`get_knowledge_definition(Foo)` is fine, `execute(SELECT
/// a, b FROM t)` is not: its commas belong to the SQL).
fn args_fit(name: &str, args: &[Arg]) -> bool {
    if single_argument(name) {
        args.len() <= 1 || args.iter().all(|a| a.quoted)
    } else {
        args.iter().all(|a| a.quoted) || !args.iter().any(|a| a.text.contains(' '))
    }
}

/// Parses a Python-style argument list up to its closing parenthesis. `None` when the text
/// is not one (unterminated string, no closing parenthesis, junk between arguments).
fn literal_args(inner: &str) -> Option<Vec<Arg>> {
    let chars: Vec<char> = inner.chars().collect();
    let mut i = 0;
    let mut args = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i >= chars.len() {
            return None;
        }
        if chars[i] == ')' {
            return Some(args);
        }
        // A keyword argument: `sql=...`.
        let mut j = i;
        while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
            j += 1;
        }
        if j > i && j < chars.len() && chars[j] == '=' && chars.get(j + 1) != Some(&'=') {
            i = j + 1;
            skip_ws(&mut i);
        }
        // An optional string prefix (r, b, u, f), then a quote.
        let mut k = i;
        while k < chars.len() && k < i + 2 && matches!(chars[k], 'r' | 'R' | 'b' | 'u' | 'f') {
            k += 1;
        }
        if k < chars.len() && matches!(chars[k], '\'' | '"') {
            let raw = k > i && chars[i..k].iter().any(|c| matches!(c, 'r' | 'R'));
            let (text, next) = read_string(&chars, k, raw)?;
            args.push(Arg { text, quoted: true });
            i = next;
        } else {
            // A bare value up to the next top-level comma or closing parenthesis.
            let start = i;
            let mut depth = 0usize;
            while i < chars.len() {
                match chars[i] {
                    '(' => depth += 1,
                    ')' if depth == 0 => break,
                    ')' => depth -= 1,
                    ',' if depth == 0 => break,
                    '\'' | '"' => return None,
                    _ => {}
                }
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            let text = text.trim().to_string();
            if text.is_empty() {
                return None;
            }
            args.push(Arg {
                text,
                quoted: false,
            });
        }
        skip_ws(&mut i);
        match chars.get(i) {
            Some(',') => i += 1,
            Some(')') => return Some(args),
            _ => return None,
        }
    }
}

/// Reads a quoted string starting at `chars[start]` (single, double or triple quotes) with
/// Python's common escapes; returns the text and the index after the closing quote.
fn read_string(chars: &[char], start: usize, raw: bool) -> Option<(String, usize)> {
    let quote = chars[start];
    let triple = chars.get(start + 1) == Some(&quote) && chars.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    let mut out = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && i + 1 < chars.len() {
            let next = chars[i + 1];
            if raw {
                out.push(c);
                out.push(next);
            } else {
                match next {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    '\\' | '\'' | '"' => out.push(next),
                    '\n' => {}
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                }
            }
            i += 2;
            continue;
        }
        if c == quote {
            if !triple {
                return Some((out, i + 1));
            }
            if chars.get(i + 1) == Some(&quote) && chars.get(i + 2) == Some(&quote) {
                return Some((out, i + 3));
            }
        }
        out.push(c);
        i += 1;
    }
    None
}

/// The protocol's fallback: the text up to the last closing parenthesis (or the end), one pair
/// of outer quotes stripped; split once at a top-level comma for two-argument actions.
fn fallback_args(name: &str, inner: &str) -> Vec<String> {
    let body = match inner.rfind(')') {
        Some(end) => &inner[..end],
        None => inner,
    };
    let body = body.trim();
    if body.is_empty() {
        return Vec::new();
    }
    if parameter_names(name).len() == 2 {
        if let Some(comma) = top_level_comma(body) {
            return vec![
                unquote(body[..comma].trim()).to_string(),
                unquote(body[comma + 1..].trim()).to_string(),
            ];
        }
    }
    vec![unquote(body).to_string()]
}

fn top_level_comma(text: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    for (index, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => depth = depth.saturating_sub(1),
            (None, ',') if depth == 0 => return Some(index),
            _ => {}
        }
    }
    None
}

/// Strips one pair of outer quotes; a lone opening quote (a reply cut off before its closing
/// quote) is dropped too, since no SQL statement or question starts with one.
fn unquote(text: &str) -> &str {
    const QUOTES: [&str; 5] = ["\"\"\"", "'''", "\"", "'", "`"];
    for quote in QUOTES {
        if text.len() >= 2 * quote.len() && text.starts_with(quote) && text.ends_with(quote) {
            return &text[quote.len()..text.len() - quote.len()];
        }
    }
    for quote in QUOTES {
        if let Some(rest) = text.strip_prefix(quote) {
            return rest.trim_start();
        }
    }
    text
}

/// The first balanced `{…}` in `text` that parses as a JSON object, with its start offset.
fn first_json_object(text: &str) -> Option<(usize, Value)> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(rel) = text[from..].find('{') {
        let start = from + rel;
        let mut depth = 0usize;
        let mut in_string = false;
        let mut escaped = false;
        let mut end = None;
        for (offset, &b) in bytes[start..].iter().enumerate() {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(start + offset + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        if let Some(end) = end {
            if let Ok(value @ Value::Object(_)) = serde_json::from_str::<Value>(&text[start..end]) {
                return Some((start, value));
            }
        }
        from = start + 1;
    }
    None
}

fn find_json_action(text: &str) -> Option<(usize, Value)> {
    let mut from = 0;
    while let Some((rel, value)) = first_json_object(&text[from..]) {
        if json_action(&value).is_some() {
            return Some((from + rel, value));
        }
        from += rel + 1;
    }
    None
}

/// Reads an action object: `{"action": name, "args": [...]}` and its variants (module docs).
fn json_action(value: &Value) -> Option<ActionCall> {
    let map = value.as_object()?;
    let name_value = ["action", "name", "tool", "function", "tool_name"]
        .iter()
        .find_map(|k| map.get(*k))?;
    let name = match name_value {
        Value::String(name) => name.clone(),
        // `{"function": {"name": ..., "arguments": ...}}` (OpenAI's shape).
        Value::Object(inner) => return json_action(&Value::Object(inner.clone())),
        _ => return None,
    };
    if name.trim().is_empty() {
        return None;
    }
    let canonical_name = canonical(&name);
    let args_value = ["args", "arguments", "parameters", "input", "action_input"]
        .iter()
        .find_map(|k| map.get(*k));
    let args = args_value.map_or_else(Vec::new, |v| json_arguments(&canonical_name, v));
    Some(action(&name, args))
}

fn json_arguments(name: &str, value: &Value) -> Vec<String> {
    match value {
        Value::Null => Vec::new(),
        Value::Array(items) => items.iter().map(value_text).collect(),
        Value::Object(map) => {
            let params = parameter_names(name);
            let mut out = Vec::new();
            let mut used = Vec::new();
            for names in params {
                if let Some((key, v)) = names
                    .iter()
                    .find_map(|n| map.get_key_value(*n).map(|(k, v)| (k.clone(), v)))
                {
                    used.push(key);
                    out.push(value_text(v));
                }
            }
            if out.len() < params.len() || params.is_empty() {
                // Unknown keys: take the remaining values in their order.
                out.extend(
                    map.iter()
                        .filter(|(k, _)| !used.contains(k))
                        .map(|(_, v)| value_text(v)),
                );
            }
            out
        }
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(inner @ (Value::Object(_) | Value::Array(_))) => json_arguments(name, &inner),
            _ => vec![text.clone()],
        },
        other => vec![value_text(other)],
    }
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The text-protocol form of one turn, `Thought: …` then `Action: name(args)`: what the
/// conversation keeps of a reply whose action was read. Arguments holding a newline or a
/// double quote go in triple quotes (as the system prompt shows for SQL), others in double
/// quotes, so [`parse_reply`] reads the same action back.
pub fn render_turn(thought: &str, action: &ActionCall) -> String {
    let args: Vec<String> = action
        .args
        .iter()
        .map(|arg| {
            if arg.contains('\n') || arg.contains('"') {
                format!("\"\"\"{arg}\"\"\"")
            } else {
                format!("\"{arg}\"")
            }
        })
        .collect();
    let call = format!("Action: {}({})", action.name, args.join(", "));
    let thought = thought.trim();
    if thought.is_empty() {
        call
    } else {
        format!("Thought: {thought}\n{call}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_turn_reads_back_as_the_same_action() {
        let actions = [
            ActionCall::get_schema(),
            ActionCall::execute("SELECT name FROM pets WHERE weight > 11"),
            ActionCall::execute("SELECT \"name\"\nFROM pets\nWHERE kind = 'dog'"),
            ActionCall::get_column_meaning("orders", "total"),
            ActionCall::new(
                Target::User,
                "ask",
                vec!["Which weight unit do you mean?".into()],
            ),
            ActionCall::new(
                Target::User,
                "submit",
                vec!["SELECT count(*) FROM pets".into()],
            ),
        ];
        for action in actions {
            let text = render_turn("  look first ", &action);
            let parsed = parse_reply(&text);
            assert_eq!(parsed.action, action, "{text}");
            assert_eq!(parsed.thought, "look first");
        }
        assert_eq!(
            render_turn("", &ActionCall::get_schema()),
            "Action: get_schema()"
        );
    }

    fn call(text: &str) -> ActionCall {
        parse_reply(text).action
    }

    #[test]
    fn the_documented_format_parses() {
        let parsed = parse_reply("Thought: check the tables.\nAction: get_schema()");
        assert_eq!(parsed.action, ActionCall::get_schema());
        assert_eq!(parsed.thought, "check the tables.");
        assert_eq!(parsed.kind, ParseKind::ActionLine);
        assert_eq!(
            call("Thought: x\nAction: execute(\"SELECT 1\")"),
            ActionCall::execute("SELECT 1")
        );
        assert_eq!(
            call("Action: get_column_meaning('orders', \"total\")"),
            ActionCall::get_column_meaning("orders", "total")
        );
        assert_eq!(
            call("Action: ask('Which year do you mean? It\\'s unclear.')"),
            ActionCall::ask("Which year do you mean? It's unclear.")
        );
    }

    #[test]
    fn multi_line_sql_in_triple_quotes_and_fences() {
        let text = "Thought: test it\nAction: execute(\"\"\"\nSELECT a, b\nFROM t\nWHERE c = 'x'\n\"\"\")\n";
        assert_eq!(
            call(text),
            ActionCall::execute("\nSELECT a, b\nFROM t\nWHERE c = 'x'\n")
        );
        let fenced =
            "Thought: go\nAction:\n```python\nsubmit('''SELECT COUNT(*)\nFROM t''')\n```\nDone.";
        assert_eq!(call(fenced), ActionCall::submit("SELECT COUNT(*)\nFROM t"));
        let bold = "**Thought:** fine\n**Action:** `submit(\"SELECT 2\")`";
        assert_eq!(call(bold), ActionCall::submit("SELECT 2"));
    }

    #[test]
    fn unquoted_and_broken_arguments_fall_back() {
        // Commas belong to the SQL.
        assert_eq!(
            call("Action: execute(SELECT a, b FROM t WHERE f(x) > 1)"),
            ActionCall::execute("SELECT a, b FROM t WHERE f(x) > 1")
        );
        // Unterminated call (the model stopped early).
        assert_eq!(
            call("Action: submit(\"SELECT 1"),
            ActionCall::submit("SELECT 1")
        );
        assert_eq!(
            call("Action: get_column_meaning(orders, total)"),
            ActionCall::get_column_meaning("orders", "total")
        );
        assert_eq!(
            call("Action: get_knowledge_definition(Net Margin)"),
            ActionCall::get_knowledge_definition("Net Margin")
        );
        assert_eq!(
            call("Action: execute(sql=\"SELECT 3\")"),
            ActionCall::execute("SELECT 3")
        );
        assert_eq!(
            call("Action: User.submit('SELECT 4')"),
            ActionCall::submit("SELECT 4")
        );
        assert_eq!(call("Action: get_schema"), ActionCall::get_schema());
    }

    #[test]
    fn json_and_tool_call_forms() {
        assert_eq!(
            call(
                "I will run it.\n```json\n{\"action\": \"execute\", \"args\": [\"SELECT 1\"]}\n```"
            ),
            ActionCall::execute("SELECT 1")
        );
        assert_eq!(
            call("{\"name\": \"execute_sql\", \"arguments\": \"{\\\"sql\\\": \\\"SELECT 5\\\"}\"}"),
            ActionCall::execute("SELECT 5")
        );
        assert_eq!(
            call("<tool_call>\n{\"name\": \"ask_user\", \"arguments\": {\"question\": \"Which?\"}}\n</tool_call>"),
            ActionCall::ask("Which?")
        );
        assert_eq!(
            call("Action: {\"action\": \"get_column_meaning\", \"arguments\": {\"column\": \"c\", \"table\": \"t\"}}"),
            ActionCall::get_column_meaning("t", "c")
        );
        assert_eq!(
            action_from_tool_call("submit_sql", "{\"sql\": \"SELECT 6\"}"),
            ActionCall::submit("SELECT 6")
        );
        assert_eq!(
            action_from_tool_call("execute", "SELECT 7"),
            ActionCall::execute("SELECT 7")
        );
        assert_eq!(
            action_from_tool_call("get_schema", ""),
            ActionCall::get_schema()
        );
        let tools = tool_definitions();
        assert_eq!(tools.as_array().map(Vec::len), Some(9));
    }

    #[test]
    fn garbage_never_panics_and_is_not_a_known_action() {
        for text in [
            "",
            "   \n  ",
            "I am not sure what to do.",
            "Action:",
            "Action: (",
            "Action: execute(\"\"\"",
            "{\"foo\": 1}",
            "{{{{",
            "```",
            "Action: 🙂(x)",
            "<tool_call>{\"name\": </tool_call>",
            "<think>never closed",
        ] {
            let parsed = parse_reply(text);
            assert!(parsed.action.name.chars().count() <= MAX_NAME_CHARS);
            if text != "Action: execute(\"\"\"" {
                assert!(!parsed.is_known_action(), "{text:?} -> {parsed:?}");
            }
        }
        assert_eq!(parse_reply("").kind, ParseKind::Empty);
        assert_eq!(parse_reply("no idea").kind, ParseKind::LastLine);
        // A bare call on its own line.
        let parsed = parse_reply("Let me look.\nget_all_knowledge_definitions()");
        assert_eq!(parsed.action, ActionCall::get_all_knowledge_definitions());
        assert_eq!(parsed.kind, ParseKind::BareCall);
    }
}
