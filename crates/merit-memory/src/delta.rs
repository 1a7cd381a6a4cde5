//! The SQL transformation Δ of a memory entry: what changed between two attempts, clause by
//! clause.
//!
//! Failing SQL is often not parseable, so Δ is computed from a forgiving lexer rather than a
//! parser: both queries are tokenised, normalised (keywords upper-case, identifiers
//! lower-case, literals untouched, comments and layout dropped), cut into top-level clauses
//! (`SELECT`, `FROM`, `WHERE`, `GROUP BY`, `HAVING`, `ORDER BY`, `LIMIT`, `OFFSET`, per part of
//! a compound query) and every clause into items (select items, join parts, conjuncts, sort
//! keys). Δ lists, for each clause whose items differ, the items removed and the items added.
//! Subqueries stay inside the item that contains them.
//!
//! Δ never fails: any text, however broken, yields a (possibly coarse) description.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One clause whose items differ between the two queries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClauseChange {
    /// Clause name, e.g. `WHERE`, or `UNION#2 WHERE` for the second part of a compound query.
    pub clause: String,
    /// Normalised items present before and not after (multiset difference), in source order.
    pub removed: Vec<String>,
    /// Normalised items present after and not before, in source order.
    pub added: Vec<String>,
}

/// A normalised description of the change from one SQL query to another.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SqlDelta {
    /// Changed clauses in canonical clause order.
    pub changes: Vec<ClauseChange>,
}

impl SqlDelta {
    /// `true` when the two queries normalise to the same clauses.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// One line per changed clause: `WHERE: - age > 20; + age >= 20`.
    pub fn render(&self) -> String {
        if self.changes.is_empty() {
            return "no change after normalisation".to_string();
        }
        let mut out = String::new();
        for (i, change) in self.changes.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let _ = write!(out, "{}:", change.clause);
            let items = change
                .removed
                .iter()
                .map(|item| format!(" - {item}"))
                .chain(change.added.iter().map(|item| format!(" + {item}")));
            let items: Vec<String> = items.collect();
            out.push_str(&items.join(";"));
        }
        out
    }
}

/// Computes Δ from `before` to `after`.
pub fn sql_delta(before: &str, after: &str) -> SqlDelta {
    let old = clauses(&statement_tokens(before));
    let new = clauses(&statement_tokens(after));
    let mut order: Vec<&ClauseKey> = Vec::new();
    for key in old.keys().chain(new.keys()) {
        if !order.contains(&key) {
            order.push(key);
        }
    }
    order.sort();
    let empty = Vec::new();
    let mut changes = Vec::new();
    for key in order {
        let was = old.get(key).unwrap_or(&empty);
        let now = new.get(key).unwrap_or(&empty);
        let removed = multiset_minus(was, now);
        let added = multiset_minus(now, was);
        let (removed, added) = if removed.is_empty() && added.is_empty() {
            if was == now {
                continue;
            }
            // Same items in another order or with other connectives (AND → OR, a sort key
            // moved): report the clause as replaced so the change stays visible.
            (vec![was.join(" … ")], vec![now.join(" … ")])
        } else {
            (removed, added)
        };
        changes.push(ClauseChange {
            clause: key.name(),
            removed,
            added,
        });
    }
    SqlDelta { changes }
}

/// Items of `a` not matched by an equal item of `b`, keeping `a`'s order.
fn multiset_minus(a: &[String], b: &[String]) -> Vec<String> {
    let mut available: BTreeMap<&str, usize> = BTreeMap::new();
    for item in b {
        *available.entry(item.as_str()).or_default() += 1;
    }
    let mut out = Vec::new();
    for item in a {
        match available.get_mut(item.as_str()) {
            Some(count) if *count > 0 => *count -= 1,
            _ => out.push(item.clone()),
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A keyword (upper-cased) or identifier (lower-cased).
    Word { text: String, keyword: bool },
    /// A quoted identifier or a literal, kept verbatim.
    Literal(String),
    /// Punctuation and operators.
    Symbol(String),
}

impl Token {
    fn text(&self) -> &str {
        match self {
            Token::Word { text, .. } | Token::Literal(text) | Token::Symbol(text) => text,
        }
    }

    fn is_keyword(&self, word: &str) -> bool {
        matches!(self, Token::Word { text, keyword: true } if text == word)
    }
}

/// SQL keywords that are upper-cased and can start or structure clauses. Function names are
/// deliberately absent so that `COUNT(*)` and `count(*)` normalise alike as identifiers.
const KEYWORDS: &[&str] = &[
    "ALL",
    "AND",
    "AS",
    "ASC",
    "BETWEEN",
    "BY",
    "CASE",
    "CAST",
    "CROSS",
    "DESC",
    "DISTINCT",
    "ELSE",
    "END",
    "EXCEPT",
    "EXISTS",
    "FROM",
    "FULL",
    "GLOB",
    "GROUP",
    "HAVING",
    "IN",
    "INNER",
    "INTERSECT",
    "IS",
    "JOIN",
    "LEFT",
    "LIKE",
    "LIMIT",
    "NATURAL",
    "NOT",
    "NULL",
    "NULLS",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "PARTITION",
    "RIGHT",
    "SELECT",
    "THEN",
    "UNION",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
    "WITH",
    "FIRST",
    "LAST",
    "ESCAPE",
    "RECURSIVE",
];

/// Tokens of one statement, without the terminating semicolons.
fn statement_tokens(sql: &str) -> Vec<Token> {
    let mut tokens = tokenize(sql);
    while tokens.last().is_some_and(|t| t.text() == ";") {
        tokens.pop();
    }
    tokens
}

fn tokenize(sql: &str) -> Vec<Token> {
    let chars: Vec<char> = sql.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i = (i + 2).min(chars.len());
        } else if c == '\'' || c == '"' || c == '`' || c == '[' {
            let close = if c == '[' { ']' } else { c };
            let start = i;
            i += 1;
            loop {
                match chars.get(i) {
                    None => break,
                    Some(&d) if d == close => {
                        // A doubled quote is an escaped quote inside the literal.
                        if close != ']' && chars.get(i + 1) == Some(&close) {
                            i += 2;
                        } else {
                            i += 1;
                            break;
                        }
                    }
                    Some(_) => i += 1,
                }
            }
            tokens.push(Token::Literal(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            tokens.push(Token::Literal(chars[start..i].iter().collect()));
        } else if c.is_alphanumeric() || c == '_' || c == '$' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let upper = word.to_uppercase();
            if KEYWORDS.contains(&upper.as_str()) {
                tokens.push(Token::Word {
                    text: upper,
                    keyword: true,
                });
            } else {
                tokens.push(Token::Word {
                    text: word.to_lowercase(),
                    keyword: false,
                });
            }
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            if ["<=", ">=", "<>", "!=", "==", "||"].contains(&two.as_str()) {
                tokens.push(Token::Symbol(two));
                i += 2;
            } else {
                tokens.push(Token::Symbol(c.to_string()));
                i += 1;
            }
        }
    }
    tokens
}

/// Joins tokens with single spaces, except around `.`, `,`, parentheses and function calls.
fn render(tokens: &[Token]) -> String {
    let mut out = String::new();
    let mut previous: Option<&Token> = None;
    for token in tokens {
        let text = token.text();
        let glue = match previous {
            None => true,
            Some(prev) => {
                let prev_text = prev.text();
                matches!(text, "," | ")" | ".")
                    || prev_text == "("
                    || prev_text == "."
                    || (text == "(" && matches!(prev, Token::Word { keyword: false, .. }))
            }
        };
        if !glue {
            out.push(' ');
        }
        out.push_str(text);
        previous = Some(token);
    }
    out
}

/// A clause of one part of a possibly compound query; ordered canonically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct ClauseKey {
    part: usize,
    clause: Clause,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Clause {
    With,
    Compound,
    Select,
    From,
    Where,
    GroupBy,
    Having,
    OrderBy,
    Limit,
    Offset,
    Other,
}

impl ClauseKey {
    fn name(&self) -> String {
        let clause = match self.clause {
            Clause::With => "WITH",
            Clause::Compound => "SET OPERATION",
            Clause::Select => "SELECT",
            Clause::From => "FROM",
            Clause::Where => "WHERE",
            Clause::GroupBy => "GROUP BY",
            Clause::Having => "HAVING",
            Clause::OrderBy => "ORDER BY",
            Clause::Limit => "LIMIT",
            Clause::Offset => "OFFSET",
            Clause::Other => "OTHER",
        };
        if self.part == 0 {
            clause.to_string()
        } else {
            format!("PART#{} {clause}", self.part + 1)
        }
    }
}

/// Splits a token stream into clause items keyed by clause.
fn clauses(tokens: &[Token]) -> BTreeMap<ClauseKey, Vec<String>> {
    let mut out: BTreeMap<ClauseKey, Vec<String>> = BTreeMap::new();
    let mut part = 0;
    let mut clause = Clause::Other;
    let mut current: Vec<Token> = Vec::new();
    let mut depth: usize = 0;
    let mut i = 0;
    let flush =
        |out: &mut BTreeMap<ClauseKey, Vec<String>>, part, clause, current: &mut Vec<Token>| {
            if !current.is_empty() {
                let items = split_items(clause, current);
                out.entry(ClauseKey { part, clause })
                    .or_default()
                    .extend(items);
                current.clear();
            }
        };
    while i < tokens.len() {
        let token = &tokens[i];
        match token.text() {
            "(" => depth += 1,
            ")" => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && matches!(token, Token::Word { keyword: true, .. }) {
            let next_is = |word: &str| tokens.get(i + 1).is_some_and(|t| t.is_keyword(word));
            let started = match token.text() {
                "WITH" if i == 0 => Some((Clause::With, 1)),
                "SELECT" => Some((Clause::Select, 1)),
                "FROM" => Some((Clause::From, 1)),
                "WHERE" => Some((Clause::Where, 1)),
                "GROUP" if next_is("BY") => Some((Clause::GroupBy, 2)),
                "HAVING" => Some((Clause::Having, 1)),
                "ORDER" if next_is("BY") => Some((Clause::OrderBy, 2)),
                "LIMIT" => Some((Clause::Limit, 1)),
                "OFFSET" => Some((Clause::Offset, 1)),
                _ => None,
            };
            if let Some((next, width)) = started {
                flush(&mut out, part, clause, &mut current);
                clause = next;
                i += width;
                continue;
            }
            if matches!(token.text(), "UNION" | "INTERSECT" | "EXCEPT") {
                flush(&mut out, part, clause, &mut current);
                let mut operator = token.text().to_string();
                if next_is("ALL") {
                    operator.push_str(" ALL");
                    i += 1;
                }
                out.entry(ClauseKey {
                    part: 0,
                    clause: Clause::Compound,
                })
                .or_default()
                .push(operator);
                part += 1;
                clause = Clause::Other;
                i += 1;
                continue;
            }
        }
        current.push(token.clone());
        i += 1;
    }
    flush(&mut out, part, clause, &mut current);
    out
}

/// Cuts one clause body into items.
fn split_items(clause: Clause, body: &[Token]) -> Vec<String> {
    match clause {
        Clause::Select => {
            let (distinct, rest) = match body.first() {
                Some(first) if first.is_keyword("DISTINCT") || first.is_keyword("ALL") => {
                    (Some(first.text().to_string()), &body[1..])
                }
                _ => (None, body),
            };
            let mut items: Vec<String> = distinct.into_iter().collect();
            items.extend(split_top_level(rest, |t, _| t.text() == ","));
            items
        }
        Clause::GroupBy | Clause::OrderBy => split_top_level(body, |t, _| t.text() == ","),
        Clause::Where | Clause::Having => split_conjuncts(body),
        Clause::From => split_from(body),
        _ => vec![render(body)],
    }
}

/// Splits at depth-0 tokens for which `is_separator` holds; separators are dropped.
fn split_top_level(body: &[Token], is_separator: impl Fn(&Token, usize) -> bool) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth: usize = 0;
    let mut start = 0;
    for (i, token) in body.iter().enumerate() {
        match token.text() {
            "(" => depth += 1,
            ")" => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth == 0 && is_separator(token, i) {
            if start < i {
                items.push(render(&body[start..i]));
            }
            start = i + 1;
        }
    }
    if start < body.len() {
        items.push(render(&body[start..]));
    }
    items
}

/// Splits a condition at depth-0 `AND`/`OR`, keeping `BETWEEN x AND y` whole.
fn split_conjuncts(body: &[Token]) -> Vec<String> {
    let mut separators = vec![false; body.len()];
    let mut depth: usize = 0;
    let mut pending_between = false;
    for (i, token) in body.iter().enumerate() {
        match token.text() {
            "(" => depth += 1,
            ")" => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth != 0 {
            continue;
        }
        if token.is_keyword("BETWEEN") {
            pending_between = true;
        } else if token.is_keyword("AND") && pending_between {
            pending_between = false;
        } else if token.is_keyword("AND") || token.is_keyword("OR") {
            separators[i] = true;
        }
    }
    split_top_level(body, |_, i| separators[i])
}

/// Splits a FROM clause into table references, `JOIN …` parts and their `ON`/`USING`
/// conditions.
fn split_from(body: &[Token]) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth: usize = 0;
    let mut start = 0;
    let join_words = ["JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL"];
    for (i, token) in body.iter().enumerate() {
        match token.text() {
            "(" => depth += 1,
            ")" => depth = depth.saturating_sub(1),
            _ => {}
        }
        if depth != 0 {
            continue;
        }
        let comma = token.text() == ",";
        let previous_is_join_word = i > 0
            && join_words
                .iter()
                .chain(["OUTER"].iter())
                .any(|w| body[i - 1].is_keyword(w));
        let starts_join = join_words.iter().any(|w| token.is_keyword(w)) && !previous_is_join_word;
        let starts_condition = token.is_keyword("ON") || token.is_keyword("USING");
        if comma || starts_join || starts_condition {
            if start < i {
                items.push(render(&body[start..i]));
            }
            start = if comma { i + 1 } else { i };
        }
    }
    if start < body.len() {
        items.push(render(&body[start..]));
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_change_lists_removed_and_added_conjuncts() {
        let delta = sql_delta(
            "SELECT name FROM singer WHERE age > 20 AND country = 'France'",
            "select NAME from singer where country = 'France' and age >= 20",
        );
        assert_eq!(delta.changes.len(), 1);
        assert_eq!(delta.changes[0].clause, "WHERE");
        assert_eq!(delta.changes[0].removed, vec!["age > 20"]);
        assert_eq!(delta.changes[0].added, vec!["age >= 20"]);
        assert_eq!(delta.render(), "WHERE: - age > 20; + age >= 20");
    }

    #[test]
    fn layout_and_keyword_case_do_not_count_as_changes() {
        let delta = sql_delta(
            "SELECT count(*) FROM singer -- all of them",
            "select   COUNT( * )\nfrom SINGER;",
        );
        assert!(delta.is_empty(), "{delta:?}");
        let same = sql_delta("SELECT a FROM t", "select A from T");
        assert!(same.is_empty());
        assert_eq!(same.render(), "no change after normalisation");
    }

    #[test]
    fn joins_are_split_into_table_and_condition_items() {
        let delta = sql_delta(
            "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2",
            "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id",
        );
        assert_eq!(delta.changes.len(), 1);
        assert_eq!(delta.changes[0].clause, "FROM");
        assert!(delta.changes[0].removed.is_empty());
        assert_eq!(
            delta.changes[0].added,
            vec!["ON t1.singer_id = t2.singer_id"]
        );
    }

    #[test]
    fn between_is_one_conjunct_and_reordering_is_reported() {
        let delta = sql_delta(
            "SELECT a FROM t WHERE x BETWEEN 1 AND 5 AND y = 2",
            "SELECT a FROM t WHERE x BETWEEN 1 AND 6 AND y = 2",
        );
        assert_eq!(delta.changes[0].removed, vec!["x BETWEEN 1 AND 5"]);
        let reordered = sql_delta("SELECT a, b FROM t", "SELECT b, a FROM t");
        assert_eq!(reordered.changes[0].clause, "SELECT");
        assert_eq!(reordered.changes[0].removed, vec!["a … b"]);
    }

    #[test]
    fn compound_parts_and_operators_are_tracked() {
        let delta = sql_delta(
            "SELECT a FROM t UNION SELECT a FROM u WHERE x = 1",
            "SELECT a FROM t UNION ALL SELECT a FROM u WHERE x = 2",
        );
        let names: Vec<&str> = delta.changes.iter().map(|c| c.clause.as_str()).collect();
        assert_eq!(names, vec!["SET OPERATION", "PART#2 WHERE"]);
    }

    #[test]
    fn broken_sql_still_yields_a_description() {
        let delta = sql_delta(
            "SELEC name FROM singer WHERE name = 'abc",
            "SELECT name FROM singer",
        );
        assert!(!delta.is_empty());
        let _ = delta.render();
        assert!(sql_delta("", "").is_empty());
        assert!(!sql_delta("((((", ")))) '").is_empty());
    }
}
