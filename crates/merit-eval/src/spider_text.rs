//! The text rewrites the official Spider execution evaluator applies before running SQL.
//!
//! Each function reproduces one step of the reference pipeline byte for byte, because the
//! verdicts depend on them: `value` becomes `1` in predictions, `> =` is joined, every
//! `DISTINCT` keyword is dropped (as a token of the `sqlparse` lexer, first statement only),
//! and `YEAR(CURDATE())` becomes `2020`.

use regex::Regex;
use std::sync::OnceLock;

/// The evaluator's first rewrite of a prediction: every `value` (case-sensitive, anywhere,
/// even inside identifiers or literals) becomes `1`. It exists upstream to plug placeholder
/// values; it also breaks `AS value`, which is why such predictions score 0.
pub fn replace_value_placeholder(prediction: &str) -> String {
    prediction.replace("value", "1")
}

/// Joins the spaced comparison operators `> =`, `< =` and `! =`, in that order.
pub fn join_spaced_operators(query: &str) -> String {
    query
        .replace("> =", ">=")
        .replace("< =", "<=")
        .replace("! =", "!=")
}

/// Replaces `YEAR(CURDATE())` (any case and spacing, and the whitespace after it) by `2020`.
pub fn replace_current_year(query: &str) -> String {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        Regex::new(r"(?i)YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*").expect("static regex compiles")
    });
    pattern.replace_all(query, "2020").into_owned()
}

/// Drops every `DISTINCT` keyword token from the first statement of `query`.
///
/// Returns `None` when the text holds no statement at all (empty or whitespace only): the
/// reference implementation indexes the first parsed statement and crashes there, so the
/// caller must decide what such a prediction scores.
///
/// Tokenization follows the `sqlparse` lexer closely enough for this purpose: quoted strings,
/// quoted and bracketed identifiers and comments are opaque; words are runs of word characters,
/// `$` and `#`; the first statement ends at a `;` outside parentheses and `CASE … END`, and
/// keeps the spaces, tabs and `--` comments that directly follow it (but not a newline).
pub fn remove_distinct(query: &str) -> Option<String> {
    let tokens = lex(query);
    let statement = first_statement(&tokens);
    if statement.iter().all(|token| token.kind.is_whitespace()) {
        return None;
    }
    Some(
        statement
            .iter()
            .filter(|token| {
                !(token.kind == Kind::Word && token.text.eq_ignore_ascii_case("distinct"))
            })
            .map(|token| token.text)
            .collect(),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Newline,
    Whitespace,
    LineComment,
    BlockComment,
    Quoted,
    Word,
    Punctuation,
}

impl Kind {
    fn is_whitespace(self) -> bool {
        matches!(self, Kind::Newline | Kind::Whitespace)
    }
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn lex(query: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut rest = query;
    while let Some(first) = rest.chars().next() {
        let (kind, length) = match first {
            '\r' if rest.starts_with("\r\n") => (Kind::Newline, 2),
            '\r' | '\n' => (Kind::Newline, 1),
            c if c.is_whitespace() => (Kind::Whitespace, c.len_utf8()),
            '-' if rest.starts_with("--") => (Kind::LineComment, line_comment_length(rest)),
            '#' if rest.starts_with("# ") => (Kind::LineComment, line_comment_length(rest)),
            '/' if rest.starts_with("/*") => match rest[2..].find("*/") {
                Some(end) => (Kind::BlockComment, end + 4),
                None => (Kind::Punctuation, 1),
            },
            '\'' | '"' | '`' => match quoted_length(rest, first) {
                Some(length) => (Kind::Quoted, length),
                None => (Kind::Punctuation, 1),
            },
            '[' => match rest.find(']') {
                Some(end) if !rest[1..end].contains('[') && end > 1 => (Kind::Quoted, end + 1),
                _ => (Kind::Punctuation, 1),
            },
            c if is_word_char(c) => {
                let length = rest
                    .char_indices()
                    .find(|&(_, c)| !(is_word_char(c) || c == '$' || c == '#'))
                    .map_or(rest.len(), |(index, _)| index);
                (Kind::Word, length)
            }
            c => (Kind::Punctuation, c.len_utf8()),
        };
        tokens.push(Token {
            kind,
            text: &rest[..length],
        });
        rest = &rest[length..];
    }
    tokens
}

fn line_comment_length(text: &str) -> usize {
    match text.find(['\r', '\n']) {
        Some(index) if text[index..].starts_with("\r\n") => index + 2,
        Some(index) => index + 1,
        None => text.len(),
    }
}

/// Length of a quoted token starting at `text[0] == quote`, where a doubled quote or a
/// backslash-escaped quote does not end it (as in `sqlparse`); `None` if unterminated.
fn quoted_length(text: &str, quote: char) -> Option<usize> {
    let bytes = text.as_bytes();
    let quote = quote as u8;
    let mut i = 1;
    while i < bytes.len() {
        if bytes[i] == b'\\' && quote != b'`' && bytes.get(i + 1) == Some(&quote) {
            i += 2;
        } else if bytes[i] == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
            } else {
                return Some(i + 1);
            }
        } else {
            i += 1;
        }
    }
    None
}

fn first_statement<'t, 'a>(tokens: &'t [Token<'a>]) -> &'t [Token<'a>] {
    let mut level: i64 = 0;
    let mut after_semicolon = false;
    for (index, token) in tokens.iter().enumerate() {
        if after_semicolon {
            if matches!(token.kind, Kind::Whitespace | Kind::LineComment) {
                continue;
            }
            return &tokens[..index];
        }
        match (token.kind, token.text) {
            (Kind::Punctuation, "(") => level += 1,
            (Kind::Punctuation, ")") => level -= 1,
            (Kind::Punctuation, ";") if level <= 0 => after_semicolon = true,
            (Kind::Word, word) if word.eq_ignore_ascii_case("case") => level += 1,
            (Kind::Word, word) if word.eq_ignore_ascii_case("end") => level -= 1,
            _ => {}
        }
    }
    tokens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_is_replaced_case_sensitively_everywhere() {
        assert_eq!(
            replace_value_placeholder("SELECT a AS value, total_value, Value FROM valuet1"),
            "SELECT a AS 1, total_1, Value FROM 1t1"
        );
    }

    #[test]
    fn spaced_operators_are_joined() {
        assert_eq!(
            join_spaced_operators("a > = 1 AND b < = 2 AND c ! = 3"),
            "a >= 1 AND b <= 2 AND c != 3"
        );
    }

    #[test]
    fn current_year_is_replaced_with_trailing_space_consumed() {
        assert_eq!(
            replace_current_year("SELECT year(  curdate ( ) )  - age FROM t"),
            "SELECT 2020- age FROM t"
        );
    }

    #[test]
    fn distinct_keywords_are_dropped_but_not_inside_quotes_or_words() {
        assert_eq!(
            remove_distinct(
                "select count(distinct x), DISTINCT(a), 'distinct', \"distinct\", distinct_x from t"
            )
            .unwrap(),
            "select count( x), (a), 'distinct', \"distinct\", distinct_x from t"
        );
    }

    #[test]
    fn only_the_first_statement_survives() {
        assert_eq!(
            remove_distinct("SELECT 1; ; SELECT 2").unwrap(),
            "SELECT 1; "
        );
        assert_eq!(remove_distinct("SELECT 1;\n\n").unwrap(), "SELECT 1;");
        assert_eq!(
            remove_distinct("SELECT 1; -- c\nSELECT 2").unwrap(),
            "SELECT 1; -- c\n"
        );
        assert_eq!(
            remove_distinct("select case when a then 1 end; select 2").unwrap(),
            "select case when a then 1 end; "
        );
    }

    #[test]
    fn empty_text_has_no_statement() {
        assert_eq!(remove_distinct(""), None);
        assert_eq!(remove_distinct(" \n\t"), None);
        assert_eq!(
            remove_distinct("-- only a comment").as_deref(),
            Some("-- only a comment")
        );
    }
}
