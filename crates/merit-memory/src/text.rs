//! The texts the two retrieval channels compare (paper 000, Appendix D).
//!
//! | text | fields, in order |
//! |---|---|
//! | query (dense and BM25) | current question, current SQL, failure context (status, DBMS error), predicted error type |
//! | memory, dense | source question, failure context (status, failing SQL), SQL transformation Δ, error type, observed outcome, observed DBMS error, source schema (last: the encoder reads 256 word pieces) |
//! | memory, BM25 | source question, failure context (status, failing SQL), SQL delta, error type, observed outcome, observed DBMS error, observed successful direction (positive entries only) |
//!
//! The dense texts carry field labels (`question:` …) because sentence encoders read them as
//! context; the BM25 texts are the bare field values, since labels would add the same tokens
//! to every document and query. The schema is left out of the BM25 document: it repeats the
//! same identifiers in every entry of a database and would drown the tokens of the failure.
//! The reference SQL and rows are never part of any text: no input to these functions holds
//! them.

use crate::entry::{outcome_text, MemoryEntry, Polarity};
use crate::retrieve::RetrievalQuery;

fn or_none(text: Option<&str>) -> &str {
    match text {
        Some(text) if !text.trim().is_empty() => text,
        _ => "none",
    }
}

/// The dense-channel retrieval query.
pub fn query_dense_text(query: &RetrievalQuery) -> String {
    format!(
        "question: {}\nsql: {}\nstatus: {}\nerror: {}\nerror type: {}",
        query.question,
        query.sql,
        query.status.as_str(),
        or_none(query.error.as_deref()),
        query.failure_type.label()
    )
}

/// The BM25 retrieval query: the same fields as [`query_dense_text`], without labels.
pub fn query_bm25_text(query: &RetrievalQuery) -> String {
    let mut parts = vec![
        query.question.as_str(),
        query.sql.as_str(),
        query.status.as_str(),
    ];
    if let Some(error) = query.error.as_deref() {
        parts.push(error);
    }
    parts.push(query.failure_type.label());
    parts.join("\n")
}

/// The dense-channel document of a memory entry.
pub fn entry_dense_text(entry: &MemoryEntry) -> String {
    let context = &entry.context;
    // The schema goes last although the paper lists it second: all-MiniLM-L6-v2 reads at most
    // 256 word pieces, and a Spider schema alone often fills them, which cut off every failure
    // field after it (status, SQL, change, type, outcome, error): what retrieval needs most.
    format!(
        "question: {}\nstatus: {}\nfailing sql: {}\nchange: {}\nerror type: {}\noutcome: {}\nerror: {}\nschema: {}",
        context.question,
        context.status.as_str(),
        context.failing_sql,
        entry.transition.delta.render(),
        entry.failure_type.label(),
        outcome_text(entry),
        or_none(context.error.as_deref()),
        context.schema,
    )
}

/// The BM25 document of a memory entry.
pub fn entry_bm25_text(entry: &MemoryEntry) -> String {
    let context = &entry.context;
    let delta = entry.transition.delta.render();
    let outcome = outcome_text(entry);
    let mut parts = vec![
        context.question.as_str(),
        context.status.as_str(),
        context.failing_sql.as_str(),
        delta.as_str(),
        entry.failure_type.label(),
        outcome.as_str(),
    ];
    if let Some(error) = context.error.as_deref() {
        parts.push(error);
    }
    if entry.polarity == Polarity::Positive {
        parts.push(entry.transition.revised_sql.as_str());
    }
    parts.join("\n")
}

/// BM25 tokens: maximal runs of `[a-z0-9_]` in the lowercased text, in order.
pub fn bm25_tokens(text: &str) -> Vec<String> {
    let lowered = text.to_lowercase();
    let mut tokens = Vec::new();
    let mut current = String::new();
    for c in lowered.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            current.push(c);
        } else if !current.is_empty() {
            tokens.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_lowercase_ascii_word_runs() {
        assert_eq!(
            bm25_tokens("SELECT T1.Name, count(*) FROM «Café»_x2 -- ok"),
            vec!["select", "t1", "name", "count", "from", "caf", "_x2", "ok"]
        );
        assert!(bm25_tokens("  ,;() ").is_empty());
    }
}
