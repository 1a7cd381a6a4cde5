//! Model-written requests: one call (plus at most one retry) per target, through
//! `merit_core::model::ChatModel`, greedy, with a `merit-interact-gen-v2/…` prompt version so
//! the reply cache keys on the template family.
//!
//! The model must answer one JSON object `{"clear_query", "amb_query", "ambiguities": [{"term",
//! "sql_snippet", "type"}]}`. The reader is strict about the shape (every key present with the
//! right type, a known ambiguity type) and lenient only about wrapping: a `<think>` block, a
//! code fence and text around the outermost braces are dropped, since small models add them
//! whatever the prompt says. Anything else is malformed; the first malformed reply is sent back
//! once with the reason (`gen_retry.txt`).

use super::perturb::Target;
use super::sqlast;
use merit_core::model::{ChatMessage, ChatModel, ModelError};
use merit_core::template::fill;
use merit_data::{render_create_tables, DatabaseSchema};
use merit_interact_env::json::{ask_json, reply_object, JsonCall, Wrapping};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlparser::ast::{GroupByExpr, LimitClause, OrderByKind, Query, SetExpr, TableFactor};

/// The template family of the generator; bump it whenever a `gen_*.txt` template changes.
pub const GEN_PROMPT_FAMILY: &str = "merit-interact-gen-v2";

/// The system message: what to write and the style rules.
pub const GEN_SYSTEM: &str = include_str!("../prompts/gen_system.txt");
/// The system message for a statement that changes data (a Management target).
pub const GEN_SYSTEM_WRITE: &str = include_str!("../prompts/gen_system_write.txt");
/// The user message: schema, SQL, outline.
pub const GEN_REQUEST: &str = include_str!("../prompts/gen_request.txt");
/// The retry message after a malformed reply.
pub const GEN_RETRY: &str = include_str!("../prompts/gen_retry.txt");

/// The eight ambiguity types of the paper (appendix A), as written in task files.
pub const AMBIGUITY_TYPES: [&str; 8] = [
    "knowledge_linking_ambiguity",
    "semantic_ambiguity",
    "entity_ambiguity",
    "temporal_ambiguity",
    "aggregation_ambiguity",
    "sort_ambiguity",
    "intent_ambiguity",
    "join_path_ambiguity",
];

/// The `prompt_version` of a generator request made from template `name`.
pub fn gen_version(name: &str) -> String {
    format!("{GEN_PROMPT_FAMILY}/{name}")
}

/// One ambiguity as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftAmbiguity {
    /// The vague words, meant to be verbatim in the underspecified request.
    pub term: String,
    /// The settling SQL fragment, meant to be verbatim in the target SQL.
    pub sql_snippet: String,
    /// One of [`AMBIGUITY_TYPES`].
    #[serde(rename = "type")]
    pub kind: String,
}

/// A well-formed model answer, not yet verified against the SQL and schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Draft {
    /// The fully specified request.
    pub clear_query: String,
    /// The underspecified request.
    pub amb_query: String,
    /// The ambiguity map.
    pub ambiguities: Vec<DraftAmbiguity>,
}

/// What asking the model produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestOutcome {
    /// The draft, or why both replies were malformed.
    pub draft: Result<Draft, String>,
    /// Model calls made (1 or 2).
    pub calls: u32,
    /// Prompt tokens over the calls.
    pub prompt_tokens: u64,
    /// Completion tokens over the calls.
    pub completion_tokens: u64,
}

/// Settings of the model calls.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestConfig {
    /// Upper bound on generated tokens per call.
    pub max_tokens: u32,
}

impl Default for RequestConfig {
    fn default() -> RequestConfig {
        RequestConfig { max_tokens: 768 }
    }
}

/// The messages of the first call for `target`.
pub fn request_messages(target: &Target, schema: &DatabaseSchema) -> Vec<ChatMessage> {
    let query = sqlast::parse_query(&target.sql);
    let schema_text = render_create_tables(&used_tables(schema, query.as_ref()));
    let outline = match (&target.write, query.as_ref()) {
        (Some(write), _) => write.outline.clone(),
        (None, Some(query)) => outline(query),
        (None, None) => "(not available)".to_string(),
    };
    vec![
        ChatMessage::system(
            match target.write {
                Some(_) => GEN_SYSTEM_WRITE,
                None => GEN_SYSTEM,
            }
            .trim_end(),
        ),
        ChatMessage::user(fill(
            GEN_REQUEST.trim_end(),
            &[
                ("schema", schema_text.trim_end()),
                ("sql", &target.sql),
                ("outline", &outline),
            ],
        )),
    ]
}

/// Asks `model` for a draft for `target`, retrying once with the parse error. A backend error
/// is returned as is (the caller decides whether it ends the run);
/// `ModelError::InvalidRequest` (e.g. a prompt longer than the context) is deterministic and
/// becomes a malformed outcome instead, so a rerun does not hit it again.
pub fn write_request(
    model: &dyn ChatModel,
    target: &Target,
    schema: &DatabaseSchema,
    config: &RequestConfig,
) -> Result<RequestOutcome, ModelError> {
    ask_draft(model, request_messages(target, schema), config, "request")
}

/// Asks `model` for a draft in reply to `messages`, retrying once with the parse error; `step`
/// names the prompt in the reply cache's version keys (`step` and `step-retry`).
pub(crate) fn ask_draft(
    model: &dyn ChatModel,
    messages: Vec<ChatMessage>,
    config: &RequestConfig,
    step: &str,
) -> Result<RequestOutcome, ModelError> {
    let call = JsonCall {
        messages,
        max_tokens: config.max_tokens,
        version: gen_version(step),
        retry_version: gen_version(&format!("{step}-retry")),
        retry_template: GEN_RETRY,
        grammar: None,
    };
    let reply = ask_json(model, call, parse_draft)?;
    Ok(RequestOutcome {
        draft: reply.value,
        calls: reply.calls,
        prompt_tokens: reply.prompt_tokens,
        completion_tokens: reply.completion_tokens,
    })
}

/// Reads a model reply into a [`Draft`]; the error says what is wrong in words the model can
/// act on.
pub fn parse_draft(reply: &str) -> Result<Draft, String> {
    let object = reply_object(reply, Wrapping::Lenient)?;
    let string = |key: &str| -> Result<String, String> {
        match object.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Some(Value::String(_)) => Err(format!("\"{key}\" is empty")),
            Some(_) => Err(format!("\"{key}\" must be a string")),
            None => Err(format!("the key \"{key}\" is missing")),
        }
    };
    let clear_query = string("clear_query")?;
    let amb_query = string("amb_query")?;
    let items = match object.get("ambiguities") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err("\"ambiguities\" must be a list".to_string()),
        None => return Err("the key \"ambiguities\" is missing".to_string()),
    };
    let mut ambiguities = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let entry = item
            .as_object()
            .ok_or_else(|| format!("ambiguities[{i}] must be an object"))?;
        let field = |key: &str| -> Result<String, String> {
            match entry.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("ambiguities[{i}].{key} must be a string")),
                None => Err(format!("ambiguities[{i}] has no \"{key}\"")),
            }
        };
        let kind = field("type")?;
        if !AMBIGUITY_TYPES.contains(&kind.as_str()) {
            return Err(format!(
                "ambiguities[{i}].type is \"{kind}\", which is not one of {}",
                AMBIGUITY_TYPES.join(", ")
            ));
        }
        ambiguities.push(DraftAmbiguity {
            term: field("term")?,
            sql_snippet: field("sql_snippet")?,
            kind,
        });
    }
    Ok(Draft {
        clear_query,
        amb_query,
        ambiguities,
    })
}

/// The schema restricted to the tables the query names (all tables when it does not parse),
/// to keep prompts short for small models.
fn used_tables(schema: &DatabaseSchema, query: Option<&Query>) -> DatabaseSchema {
    let Some(query) = query else {
        return schema.clone();
    };
    let mut names: Vec<String> = Vec::new();
    struct Tables<'a>(&'a mut Vec<String>);
    impl sqlparser::ast::Visitor for Tables<'_> {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> std::ops::ControlFlow<()> {
            if let TableFactor::Table { name, .. } = factor {
                if let Some(ident) = name.0.last().and_then(|p| p.as_ident()) {
                    self.0.push(ident.value.to_ascii_lowercase());
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = sqlparser::ast::Visit::visit(query, &mut Tables(&mut names));
    let tables: Vec<_> = schema
        .tables
        .iter()
        .filter(|t| names.contains(&t.name.to_ascii_lowercase()))
        .cloned()
        .collect();
    if tables.is_empty() {
        return schema.clone();
    }
    DatabaseSchema {
        db_id: schema.db_id.clone(),
        tables,
    }
}

/// A clause-by-clause outline of the top level of a query (the paper conditions generation on
/// such an outline; this one is ours).
pub fn outline(query: &Query) -> String {
    let mut lines = Vec::new();
    match query.body.as_ref() {
        SetExpr::Select(select) => {
            let items: Vec<String> = select.projection.iter().map(|i| i.to_string()).collect();
            lines.push(format!("- returns: {}", items.join(", ")));
            if select.distinct.is_some() {
                lines.push("- duplicates removed: yes".to_string());
            }
            let from: Vec<String> = select.from.iter().map(|t| t.to_string()).collect();
            lines.push(format!("- reads: {}", from.join(", ")));
            if let Some(selection) = &select.selection {
                lines.push(format!("- keeps rows where: {selection}"));
            }
            if let GroupByExpr::Expressions(exprs, _) = &select.group_by {
                if !exprs.is_empty() {
                    let keys: Vec<String> = exprs.iter().map(|e| e.to_string()).collect();
                    lines.push(format!("- groups by: {}", keys.join(", ")));
                }
            }
            if let Some(having) = &select.having {
                lines.push(format!("- keeps groups where: {having}"));
            }
        }
        SetExpr::SetOperation { op, .. } => {
            lines.push(format!("- combines two queries with {op}"));
        }
        _ => lines.push("- a compound query".to_string()),
    }
    if let Some(order_by) = &query.order_by {
        if let OrderByKind::Expressions(exprs) = &order_by.kind {
            let keys: Vec<String> = exprs
                .iter()
                .map(|e| {
                    let direction = if e.options.asc == Some(false) {
                        "descending"
                    } else {
                        "ascending"
                    };
                    format!("{} {direction}", e.expr)
                })
                .collect();
            lines.push(format!("- sorts by: {}", keys.join(", ")));
        }
    }
    if let Some(LimitClause::LimitOffset {
        limit: Some(limit), ..
    }) = &query.limit_clause
    {
        lines.push(format!("- returns at most {limit} rows"));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use merit_core::template::slots;

    #[test]
    fn templates_have_their_documented_slots() {
        let readme = include_str!("../prompts/README.md");
        for (template, expected) in [
            (GEN_SYSTEM, &[][..]),
            (GEN_SYSTEM_WRITE, &[][..]),
            (GEN_REQUEST, &["schema", "sql", "outline"][..]),
            (GEN_RETRY, &["error"][..]),
        ] {
            assert_eq!(slots(template), expected);
            for slot in expected {
                assert!(readme.contains(&format!("`{slot}`")), "{slot} undocumented");
            }
        }
        for kind in AMBIGUITY_TYPES {
            assert!(GEN_SYSTEM.contains(kind), "{kind} missing from the prompt");
        }
    }

    #[test]
    fn drafts_are_read_strictly() {
        let good = r#"```json
{"clear_query": "a", "amb_query": "b", "ambiguities": [{"term": "b", "sql_snippet": "x", "type": "sort_ambiguity"}]}
```"#;
        assert_eq!(parse_draft(good).unwrap().ambiguities.len(), 1);
        assert!(parse_draft("<think>{</think> no json").is_err());
        let bad_type = r#"{"clear_query": "a", "amb_query": "b", "ambiguities": [{"term": "b", "sql_snippet": "x", "type": "vague"}]}"#;
        assert!(parse_draft(bad_type).unwrap_err().contains("vague"));
        let missing = r#"{"clear_query": "a", "ambiguities": []}"#;
        assert!(parse_draft(missing).unwrap_err().contains("amb_query"));
        let not_list = r#"{"clear_query": "a", "amb_query": "b", "ambiguities": {}}"#;
        assert!(parse_draft(not_list).is_err());
    }

    #[test]
    fn outline_names_each_clause() {
        let q = sqlast::parse_query(
            "SELECT name, count(*) FROM singer WHERE age > 30 GROUP BY name ORDER BY name DESC LIMIT 3",
        )
        .unwrap();
        let text = outline(&q);
        for part in [
            "returns:",
            "keeps rows where: age > 30",
            "groups by: name",
            "name descending",
            "at most 3",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }
}
