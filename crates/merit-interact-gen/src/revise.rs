//! One revision of a draft that is well formed but fails verification: the model gets its
//! draft back with the specific problems (which terms are not in the request, which snippets
//! are not in the SQL, which identifiers leak, how many details it blurred) and writes it
//! again (`gen_revise.txt`, prompt version `merit-interact-gen-v2/revise`). The small
//! embedded models get most drafts nearly right, so naming the faults turns many rejections
//! into records; the revised draft goes through the same verification as any other.

use super::perturb::Target;
use super::request::{ask_draft, request_messages, Draft, RequestConfig, RequestOutcome};
use super::verify::{find_leaks, RejectReason, MAX_AMBIGUITIES, MIN_AMBIGUITIES};
use merit_core::model::{ChatMessage, ChatModel, ModelError};
use merit_core::template::fill;
use merit_data::DatabaseSchema;

/// The revision request's message after the draft.
pub const GEN_REVISE: &str = include_str!("../prompts/gen_revise.txt");

/// The problems of `draft` in words the model can act on, one `- ` line each.
pub fn describe_problems(
    draft: &Draft,
    sql: &str,
    schema: &DatabaseSchema,
    reasons: &[RejectReason],
) -> String {
    let collapse = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut lines = Vec::new();
    for reason in reasons {
        match reason {
            RejectReason::TooFewAmbiguities => lines.push(format!(
                "- \"ambiguities\" has {} entries; blur at least {MIN_AMBIGUITIES} details of the query in amb_query (for example an exact number, the sort direction, how many rows, or which of two attributes) and list each one.",
                draft.ambiguities.len()
            )),
            RejectReason::TooManyAmbiguities => lines.push(format!(
                "- \"ambiguities\" has {} entries; keep at most {MAX_AMBIGUITIES}.",
                draft.ambiguities.len()
            )),
            RejectReason::TermNotInRequest => {
                let missing: Vec<String> = draft
                    .ambiguities
                    .iter()
                    .filter(|a| super::verify::find_term(&draft.amb_query, &a.term).is_none())
                    .map(|a| format!("\"{}\"", a.term))
                    .collect();
                lines.push(format!(
                    "- these terms do not occur character for character in amb_query: {}.",
                    missing.join(", ")
                ));
            }
            RejectReason::SnippetNotInSql => {
                let flat = collapse(sql);
                let missing: Vec<String> = draft
                    .ambiguities
                    .iter()
                    .filter(|a| {
                        let snippet = collapse(&a.sql_snippet);
                        snippet.is_empty() || !flat.contains(&snippet)
                    })
                    .map(|a| format!("\"{}\"", a.sql_snippet))
                    .collect();
                lines.push(format!(
                    "- these sql_snippet values are not copied exactly from the SQL: {}.",
                    missing.join(", ")
                ));
            }
            RejectReason::IdentifierLeak | RejectReason::SqlLeak => {
                let mut words: Vec<String> = find_leaks(&draft.clear_query, sql, schema)
                    .into_iter()
                    .chain(find_leaks(&draft.amb_query, sql, schema))
                    .filter(|leak| leak.reason == *reason)
                    .map(|leak| format!("\"{}\"", leak.word))
                    .collect();
                words.dedup();
                let what = if *reason == RejectReason::SqlLeak {
                    "SQL words"
                } else {
                    "database names"
                };
                lines.push(format!(
                    "- the requests contain {what} a user would not write: {}; say it in everyday words.",
                    words.join(", ")
                ));
            }
            RejectReason::DuplicateAmbiguity => lines.push(
                "- two ambiguity entries have the same term; list each blurred detail once.".to_string(),
            ),
            RejectReason::DegenerateText => lines.push(
                "- a request repeats the same sentence; write each request once, in one or two sentences.".to_string(),
            ),
            RejectReason::MetaCommentary => lines.push(
                "- amb_query explains what it leaves open (a long remark in parentheses, or words such as \"not sure\", \"I don't know\" or \"without specifying\"); a real user just asks, vaguely, without commenting on it.".to_string(),
            ),
            RejectReason::NotUnderspecified => lines.push(
                "- amb_query says everything clear_query says; leave out or blur at least two of its details.".to_string(),
            ),
            RejectReason::Malformed => {}
        }
    }
    lines.join("\n")
}

/// Asks `model` to revise `draft` given `reasons` (one call, plus one retry if the reply is
/// not a well-formed draft).
pub fn revise_request(
    model: &dyn ChatModel,
    target: &Target,
    schema: &DatabaseSchema,
    config: &RequestConfig,
    draft: &Draft,
    reasons: &[RejectReason],
) -> Result<RequestOutcome, ModelError> {
    let mut messages: Vec<ChatMessage> = request_messages(target, schema);
    // The draft as the model would have written it: the keys of the request, in its order.
    let written = serde_json::json!({
        "clear_query": draft.clear_query,
        "amb_query": draft.amb_query,
        "ambiguities": draft.ambiguities,
    });
    messages.push(ChatMessage::assistant(written.to_string()));
    messages.push(ChatMessage::user(fill(
        GEN_REVISE.trim_end(),
        &[(
            "problems",
            &describe_problems(draft, &target.sql, schema, reasons),
        )],
    )));
    ask_draft(model, messages, config, "revise")
}
