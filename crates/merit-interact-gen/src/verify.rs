//! Verification of a model draft against its target SQL and schema (the paper's "verification
//! and filtering", with our own concrete rules).

use super::request::Draft;
use super::sqlast;
use merit_data::DatabaseSchema;
use serde::{Deserialize, Serialize};

/// Fewest ambiguities a record may have.
pub const MIN_AMBIGUITIES: usize = 2;
/// Most ambiguities a record may have.
pub const MAX_AMBIGUITIES: usize = 6;

/// Why a target produced no record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// Both model replies were malformed (or the backend refused the request).
    Malformed,
    /// Fewer than [`MIN_AMBIGUITIES`] entries.
    TooFewAmbiguities,
    /// More than [`MAX_AMBIGUITIES`] entries.
    TooManyAmbiguities,
    /// A term is empty or not found verbatim in the underspecified request.
    TermNotInRequest,
    /// A snippet is empty or not found verbatim in the target SQL.
    SnippetNotInSql,
    /// A user-facing text names a schema identifier or alias (see [`find_leaks`]).
    IdentifierLeak,
    /// A user-facing text contains upper-case SQL keywords (see [`find_leaks`]).
    SqlLeak,
    /// Two ambiguity entries have the same term (case and surrounding space ignored).
    DuplicateAmbiguity,
    /// A request repeats one of its sentences (of four words or more): a small model looping.
    DegenerateText,
    /// The underspecified request talks about its own vagueness (a parenthetical of four
    /// words or more, or words such as "not sure", "without specifying", "ambiguous")
    /// instead of simply being vague.
    MetaCommentary,
    /// The underspecified request is the fully specified one (same words, case and
    /// punctuation aside): nothing was left out.
    NotUnderspecified,
}

impl RejectReason {
    /// The name used in reports and the rejection log.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Malformed => "malformed",
            RejectReason::TooFewAmbiguities => "too_few_ambiguities",
            RejectReason::TooManyAmbiguities => "too_many_ambiguities",
            RejectReason::TermNotInRequest => "term_not_in_request",
            RejectReason::SnippetNotInSql => "snippet_not_in_sql",
            RejectReason::IdentifierLeak => "identifier_leak",
            RejectReason::SqlLeak => "sql_leak",
            RejectReason::DuplicateAmbiguity => "duplicate_ambiguity",
            RejectReason::DegenerateText => "degenerate_text",
            RejectReason::MetaCommentary => "meta_commentary",
            RejectReason::NotUnderspecified => "not_underspecified",
        }
    }
}

/// Every reason `draft` fails, in the order of [`RejectReason`]; empty means it passes.
///
/// Terms must occur in `amb_query` exactly (case included); snippets in `sql` exactly after
/// collapsing whitespace runs on both sides (the model sees `sql` on one line, and a copied
/// fragment may carry a line break from its own formatting).
pub fn verify(draft: &Draft, sql: &str, schema: &DatabaseSchema) -> Vec<RejectReason> {
    let mut reasons = Vec::new();
    let n = draft.ambiguities.len();
    if n < MIN_AMBIGUITIES {
        reasons.push(RejectReason::TooFewAmbiguities);
    }
    if n > MAX_AMBIGUITIES {
        reasons.push(RejectReason::TooManyAmbiguities);
    }
    if draft
        .ambiguities
        .iter()
        .any(|a| find_term(&draft.amb_query, &a.term).is_none())
    {
        reasons.push(RejectReason::TermNotInRequest);
    }
    let sql_flat = collapse(sql);
    if draft.ambiguities.iter().any(|a| {
        let snippet = collapse(&a.sql_snippet);
        snippet.is_empty() || !sql_flat.contains(&snippet)
    }) {
        reasons.push(RejectReason::SnippetNotInSql);
    }
    let mut leaks = find_leaks(&draft.clear_query, sql, schema);
    leaks.extend(find_leaks(&draft.amb_query, sql, schema));
    if leaks
        .iter()
        .any(|l| l.reason == RejectReason::IdentifierLeak)
    {
        reasons.push(RejectReason::IdentifierLeak);
    }
    if leaks.iter().any(|l| l.reason == RejectReason::SqlLeak) {
        reasons.push(RejectReason::SqlLeak);
    }
    let mut terms: Vec<String> = draft
        .ambiguities
        .iter()
        .map(|a| collapse(&a.term).to_lowercase())
        .collect();
    terms.sort();
    if terms.windows(2).any(|pair| pair[0] == pair[1]) {
        reasons.push(RejectReason::DuplicateAmbiguity);
    }
    if repeats_a_sentence(&draft.amb_query) || repeats_a_sentence(&draft.clear_query) {
        reasons.push(RejectReason::DegenerateText);
    }
    if is_meta_commentary(&draft.amb_query) {
        reasons.push(RejectReason::MetaCommentary);
    }
    if words_of(&draft.amb_query) == words_of(&draft.clear_query) {
        reasons.push(RejectReason::NotUnderspecified);
    }
    reasons
}

/// The lower-case words of `text`, punctuation dropped.
fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Where `term` occurs in `request`, ignoring case: the request's own spelling of it (`None`
/// for an empty term or none found). Small models capitalise terms they copy ("Descending"
/// for "descending"); the record stores the request's spelling, so its terms are verbatim.
pub fn find_term<'r>(request: &'r str, term: &str) -> Option<&'r str> {
    let term = term.trim();
    if term.is_empty() {
        return None;
    }
    if let Some(start) = request.find(term) {
        return Some(&request[start..start + term.len()]);
    }
    // Case-insensitive search over char boundaries; lower-casing can change byte lengths, so
    // compare char by char rather than searching a lower-cased copy.
    let wanted: Vec<char> = term.chars().flat_map(char::to_lowercase).collect();
    for (start, _) in request.char_indices() {
        let mut matched = 0;
        for (offset, c) in request[start..].char_indices() {
            let lower: Vec<char> = c.to_lowercase().collect();
            if wanted.len() < matched + lower.len()
                || wanted[matched..matched + lower.len()] != lower[..]
            {
                break;
            }
            matched += lower.len();
            if matched == wanted.len() {
                return Some(&request[start..start + offset + c.len_utf8()]);
            }
        }
    }
    None
}

/// Whether a sentence of four words or more occurs twice in `text`.
fn repeats_a_sentence(text: &str) -> bool {
    let mut sentences: Vec<String> = text
        .split(['.', '?', '!', ';'])
        .map(|s| collapse(s).to_lowercase())
        .filter(|s| s.split(' ').count() >= 4)
        .collect();
    sentences.sort();
    sentences.windows(2).any(|pair| pair[0] == pair[1])
}

/// Phrases with which a request comments on its own vagueness.
const META_PHRASES: [&str; 10] = [
    "not sure",
    "don't know",
    "do not know",
    "not certain",
    "without specifying",
    "unspecified",
    "ambiguous",
    "ambiguity",
    "unclear",
    "not specified",
];

/// Whether `text` talks about being vague (see [`RejectReason::MetaCommentary`]).
fn is_meta_commentary(text: &str) -> bool {
    let lower = text.to_lowercase();
    if META_PHRASES.iter().any(|p| lower.contains(p)) {
        return true;
    }
    // A parenthetical of four words or more; short ones such as "(GPA)" are acronyms or units.
    let mut rest = text;
    while let Some(open) = rest.find('(') {
        let after = &rest[open + 1..];
        let inner = after.find(')').map_or(after, |close| &after[..close]);
        if inner.split_whitespace().count() >= 4 {
            return true;
        }
        rest = after;
    }
    false
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One leaked word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// The word as it appears in the text.
    pub word: String,
    /// [`RejectReason::IdentifierLeak`] or [`RejectReason::SqlLeak`].
    pub reason: RejectReason,
}

/// Upper-case SQL words that no end user writes in capitals.
const SQL_WORDS: [&str; 10] = [
    "SELECT", "FROM", "WHERE", "JOIN", "GROUP BY", "ORDER BY", "HAVING", "LIMIT", "DESC", "ASC",
];

/// The leak rule. A word is a maximal run of ASCII letters, digits and underscores. A text
/// leaks when it contains
///
/// 1. a word with an underscore that equals a table or column name, ignoring case
///    (`song_name`, `Singer_ID`): nobody says underscores;
/// 2. a word equal, with its case, to a table or column name that mixes case inside the word
///    (`StuID`, `HomeTown`, `LName`): a person would write "student id", "home town";
/// 3. a word equal, ignoring case, to a SQL alias that contains a digit (`T1`, `t2`);
/// 4. `x.y` with no spaces where `x` is a table name or an alias of the SQL (`T1.name`,
///    `singer.age`), ignoring case;
/// 5. (a SQL leak) one of SELECT, FROM, WHERE, JOIN, GROUP BY, ORDER BY, HAVING, LIMIT, DESC,
///    ASC written in capitals as a whole word.
///
/// Plain lower-case names such as `name` or `age` are ordinary words and never leak on their
/// own. Rules 1–3 do not fire for a word that also occurs inside a string literal of the SQL
/// (a value like `'New_York'` may be quoted by the user).
pub fn find_leaks(text: &str, sql: &str, schema: &DatabaseSchema) -> Vec<Leak> {
    let query = sqlast::parse_query(sql);
    let literals: Vec<String> = query
        .as_ref()
        .map(sqlast::string_literals)
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let aliases: Vec<String> = query.as_ref().map(sqlast::aliases).unwrap_or_default();
    let mut identifiers: Vec<&str> = Vec::new();
    for table in &schema.tables {
        identifiers.push(&table.name);
        identifiers.extend(table.columns.iter().map(|c| c.name.as_str()));
    }
    let words = words(text);
    let mut leaks = Vec::new();
    let mut push = |word: &str, reason| {
        leaks.push(Leak {
            word: word.to_string(),
            reason,
        })
    };
    for (i, &(start, word)) in words.iter().enumerate() {
        let lower = word.to_ascii_lowercase();
        let quoted_value = literals.iter().any(|l| l.contains(&lower));
        if !quoted_value {
            let underscored =
                word.contains('_') && identifiers.iter().any(|id| id.eq_ignore_ascii_case(word));
            let mixed = identifiers.iter().any(|id| *id == word && mixed_case(id));
            let alias = aliases
                .iter()
                .any(|a| a.chars().any(|c| c.is_ascii_digit()) && a.eq_ignore_ascii_case(word));
            if underscored || mixed || alias {
                push(word, RejectReason::IdentifierLeak);
                continue;
            }
        }
        // Rule 4: `word.next` with the dot directly between them.
        if let Some(&(next_start, _)) = words.get(i + 1) {
            let end = start + word.len();
            let qualifier = schema
                .tables
                .iter()
                .any(|t| t.name.eq_ignore_ascii_case(word))
                || aliases.iter().any(|a| a.eq_ignore_ascii_case(word));
            if qualifier && &text[end..next_start] == "." {
                push(word, RejectReason::IdentifierLeak);
            }
        }
    }
    for keyword in SQL_WORDS {
        if contains_phrase(text, keyword) {
            push(keyword, RejectReason::SqlLeak);
        }
    }
    leaks
}

/// `(byte offset, word)` for each maximal run of `[A-Za-z0-9_]`.
fn words(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        let part = c.is_ascii_alphanumeric() || c == '_';
        match (part, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, &text[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, &text[s..]));
    }
    out
}

/// A lower-case letter followed later by an upper-case one (`StuID`, `homeTown`), or an
/// upper-case letter after the first character followed by a lower-case one (`LName`).
fn mixed_case(id: &str) -> bool {
    let chars: Vec<char> = id.chars().collect();
    let lower_then_upper = chars
        .windows(2)
        .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
    let inner_cap = chars.windows(3).any(|w| {
        w[0].is_ascii_uppercase() && w[1].is_ascii_uppercase() && w[2].is_ascii_lowercase()
    });
    lower_then_upper || inner_cap
}

/// `phrase` as whole words (case-sensitive), single spaces in `phrase` matching any
/// whitespace run.
fn contains_phrase(text: &str, phrase: &str) -> bool {
    let parts: Vec<&str> = phrase.split(' ').collect();
    let tokens = words(text);
    tokens.windows(parts.len()).any(|w| {
        w.iter().zip(&parts).all(|((_, a), b)| a == b)
            && w.windows(2).all(|pair| {
                text[pair[0].0 + pair[0].1.len()..pair[1].0]
                    .trim()
                    .is_empty()
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_case_rule() {
        for id in ["StuID", "HomeTown", "LName", "homeTown"] {
            assert!(mixed_case(id), "{id}");
        }
        for id in ["Name", "name", "ID", "Age", "NAME"] {
            assert!(!mixed_case(id), "{id}");
        }
    }

    #[test]
    fn phrases_match_whole_words() {
        assert!(contains_phrase("then GROUP  BY it", "GROUP BY"));
        assert!(!contains_phrase("group by it", "GROUP BY"));
        assert!(!contains_phrase("SELECTED", "SELECT"));
        assert!(contains_phrase("x ASC", "ASC"));
    }
}
