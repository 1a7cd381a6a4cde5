//! A decoding grammar that lets a model write SQL only with words the database has.
//!
//! Small models repair `no such column` failures by inventing another column (issue 16: with
//! hints the 0.5B model still wrote 26 of 30 non-executing queries in a probe). The grammar
//! below is lexical, not a SQL grammar: a reply is a ```sql fence around a sequence of tokens,
//! and every word token must be a SQL keyword or function, a table or column name of this
//! database (any letter case, or quoted exactly), or a short alias (`T1`, `t2`, a single
//! letter). Numbers, string literals, operators and punctuation are free. It cannot make a
//! query right; it removes the one failure a model cannot see coming, a name that does not
//! exist. The grammar is llama.cpp's GBNF (start rule `root`), read by the embedded backend
//! and by llama.cpp's server.
//!
//! A purely lexical grammar has one cost, seen in the logs of the Spider dev run: an alias the
//! model means to coin (`total_population`, `Concert_Count`) is not a known word, so the
//! grammar makes it write known words instead (`AS total population`, `AS Concert Count`),
//! which is a syntax error: 207 of 2,083 revisions there failed that way. With
//! [`AliasRule::Free`] the word after `AS` may be any identifier (or a double-quoted name) and
//! must be followed by punctuation, a clause keyword or the end of the query, so an alias can
//! no longer run on into a second word.

use crate::hints::SchemaCatalog;
use std::collections::BTreeSet;

/// SQL keywords and SQLite functions a query may use, in upper case (matched in any case).
pub const KEYWORDS: &[&str] = &[
    "SELECT",
    "FROM",
    "WHERE",
    "AND",
    "OR",
    "NOT",
    "IN",
    "IS",
    "NULL",
    "LIKE",
    "GLOB",
    "BETWEEN",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "OUTER",
    "CROSS",
    "NATURAL",
    "ON",
    "USING",
    "AS",
    "GROUP",
    "BY",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "DISTINCT",
    "ASC",
    "DESC",
    "UNION",
    "ALL",
    "INTERSECT",
    "EXCEPT",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "EXISTS",
    "CAST",
    "ESCAPE",
    "COLLATE",
    "NOCASE",
    "WITH",
    "OVER",
    "PARTITION",
    "TRUE",
    "FALSE",
    "INTEGER",
    "INT",
    "REAL",
    "TEXT",
    "NUMERIC",
    "FLOAT",
    "COUNT",
    "SUM",
    "AVG",
    "MIN",
    "MAX",
    "TOTAL",
    "ABS",
    "ROUND",
    "LENGTH",
    "LOWER",
    "UPPER",
    "SUBSTR",
    "SUBSTRING",
    "INSTR",
    "REPLACE",
    "TRIM",
    "LTRIM",
    "RTRIM",
    "COALESCE",
    "IFNULL",
    "NULLIF",
    "IIF",
    "STRFTIME",
    "DATE",
    "TIME",
    "DATETIME",
    "JULIANDAY",
    "GROUP_CONCAT",
    "ROW_NUMBER",
    "RANK",
    "DENSE_RANK",
    "LAG",
    "LEAD",
    "CURRENT_DATE",
    "CURRENT_TIMESTAMP",
    "NOW",
];

/// How the grammar treats the name after `AS`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum AliasRule {
    /// `AS` is a word like any other and an alias is a short form (`T1`, a letter) or a word
    /// the grammar knows: the grammar as calibrated on Spider train.
    #[default]
    Listed,
    /// The name after `AS` is free (an identifier or a double-quoted name) and ends at
    /// punctuation, a clause keyword or the end of the query (see the module docs).
    Free,
}

impl AliasRule {
    /// The rule a `free aliases` switch (CLI flag, service config) names: [`AliasRule::Free`]
    /// when set, else [`AliasRule::Listed`].
    pub fn free_when(free: bool) -> Self {
        if free {
            AliasRule::Free
        } else {
            AliasRule::Listed
        }
    }

    /// `true` for [`AliasRule::Listed`] (the default, left out of manifests).
    pub fn is_listed(&self) -> bool {
        *self == AliasRule::Listed
    }
}

/// Keywords that may follow an alias: the start of the next clause, join or condition.
const AFTER_ALIAS: &[&str] = &[
    "FROM",
    "WHERE",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "FULL",
    "CROSS",
    "NATURAL",
    "ON",
    "USING",
    "GROUP",
    "ORDER",
    "HAVING",
    "LIMIT",
    "OFFSET",
    "UNION",
    "INTERSECT",
    "EXCEPT",
    "AND",
    "OR",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
];

/// A GBNF expression for `word` in any letter case.
fn any_case(word: &str) -> String {
    word.chars().map(char_class).collect::<Vec<_>>().join(" ")
}

/// A GBNF string literal for `text`.
fn literal(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A name that can be written bare in SQL (letters, digits, `_`, not starting with a digit).
fn is_bare(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A GBNF expression for one character of a case-insensitive word.
fn char_class(c: char) -> String {
    let upper: Vec<char> = c.to_uppercase().collect();
    match upper.as_slice() {
        [u] if *u != c => format!("[{c}{u}]"),
        _ => literal(&c.to_string()),
    }
}

/// The words as a trie of GBNF rules (`word`, `word-1`, ...), matching each in any case.
///
/// A flat alternation of a few hundred words makes llama.cpp's grammar engine keep one parse
/// stack per word at every word start, and it checks every vocabulary entry against every
/// stack whenever the model's favourite token is refused: slow. The trie shares prefixes, so a
/// word start has one stack per distinct first letter.
fn word_trie(words: &BTreeSet<String>) -> String {
    #[derive(Default)]
    struct Node {
        terminal: bool,
        children: std::collections::BTreeMap<char, Node>,
    }
    let mut root = Node::default();
    for word in words {
        let mut node = &mut root;
        for c in word.chars() {
            node = node.children.entry(c).or_default();
        }
        node.terminal = true;
    }
    fn emit(node: &Node, name: &str, rules: &mut Vec<String>, counter: &mut usize) {
        let mut alternatives = Vec::new();
        for (c, child) in &node.children {
            if child.children.is_empty() {
                alternatives.push(char_class(*c));
            } else {
                *counter += 1;
                let child_name = format!("word-{counter}");
                alternatives.push(format!("{} {child_name}", char_class(*c)));
                emit(child, &child_name, rules, counter);
            }
        }
        let body = alternatives.join(" | ");
        rules.push(if node.terminal {
            format!("{name} ::= ({body})?")
        } else {
            format!("{name} ::= {body}")
        });
    }
    let mut rules = Vec::new();
    emit(&root, "word", &mut rules, &mut 0);
    // Parents before children reads better; the order does not matter to llama.cpp.
    rules.reverse();
    rules.join("\n") + "\n"
}

/// The grammar for one database: table and column names from `catalog`, aliases as `aliases`
/// says.
pub fn sql_grammar(catalog: &SchemaCatalog, aliases: AliasRule) -> String {
    let mut names: BTreeSet<String> = BTreeSet::new();
    for table in &catalog.tables {
        names.insert(table.name.clone());
        names.extend(table.columns.iter().cloned());
    }
    // Bare words in lower case (each matched in any case, as SQL reads them).
    let mut words: BTreeSet<String> = names
        .iter()
        .filter(|n| is_bare(n))
        .map(|n| n.to_lowercase())
        .collect();
    words.extend(KEYWORDS.iter().map(|k| k.to_lowercase()));
    if aliases == AliasRule::Free {
        // `AS` only through the alias rule, so that no second word can follow an alias.
        words.remove("as");
    }
    let quoted: Vec<String> = names.iter().map(|n| literal(n)).collect();
    let mut grammar = String::new();
    grammar.push_str("root ::= \"```sql\\n\" query \"\\n```\"\n");
    // Two word-like tokens (name, keyword, alias, number) never touch: a space or a symbol
    // stands between them. Otherwise `SingerCount` would pass as `Singer` + `Count`.
    // Every repetition here consumes one unambiguous piece (one space character, one literal,
    // one symbol): nested repetitions such as `([ ]+)+` let a run of k spaces parse in 2^k
    // ways, and llama.cpp keeps a parse stack for each, which made decoding take seconds a
    // token.
    match aliases {
        AliasRule::Listed => grammar.push_str("query ::= gap? (wordlike gap)* wordlike?\n"),
        AliasRule::Free => {
            // A piece is a word and the gap after it, or `AS` with its new name and what may
            // follow one, or `AS (` (a common table expression).
            grammar.push_str("query ::= gap? piece* (wordlike | named)?\n");
            grammar.push_str("piece ::= wordlike gap | named after | as space* \"(\" gap?\n");
            grammar.push_str("named ::= as space+ new-name\n");
            grammar.push_str(&format!("as ::= {}\n", any_case("as")));
            grammar.push_str(r#"new-name ::= [a-zA-Z_] [a-zA-Z0-9_]* | "\"" [^"\n]+ "\"""#);
            grammar.push('\n');
            grammar
                .push_str("after ::= space* (string | quoted | punct) gap? | space+ clause gap\n");
            let clause: Vec<String> = AFTER_ALIAS
                .iter()
                .map(|k| format!("({})", any_case(k)))
                .collect();
            grammar.push_str(&format!("clause ::= {}\n", clause.join(" | ")));
        }
    }
    grammar.push_str("gap ::= (space | string | quoted | punct)+\n");
    grammar.push_str("wordlike ::= word | alias | number\n");
    grammar.push_str(&word_trie(&words));
    // Aliases: T1, t2, ... and single letters, as models write them.
    grammar.push_str("alias ::= [tT] [0-9] [0-9]? | [a-zA-Z]\n");
    grammar.push_str("number ::= [0-9]+ (\".\" [0-9]+)?\n");
    grammar.push_str("string ::= \"'\" ([^'\\n] | \"''\")* \"'\"\n");
    if quoted.is_empty() {
        grammar.push_str("quoted ::= \"\\\"\" [a-zA-Z_]+ \"\\\"\"\n");
    } else {
        let alternatives = quoted.join(" | ");
        grammar.push_str(&format!(
            "quoted ::= \"\\\"\" ({alternatives}) \"\\\"\" | \"`\" ({alternatives}) \"`\" | \"[\" ({alternatives}) \"]\"\n"
        ));
    }
    grammar.push_str("punct ::= [(),.*=<>!+/%;|-]\n");
    grammar.push_str("space ::= [ \\t\\n]\n");
    grammar
}

/// The language of a GBNF `grammar` (start rule `root`) as one anchored regular expression,
/// so that a whole reply can be checked against it without a model: llama.cpp checks a grammar
/// only token by token while it decodes, and a server that ignores the `grammar` field (vLLM,
/// Ollama) sends replies that never met it. Only grammars without recursion can be converted
/// (every rule is inlined where it is named), which is what this crate's and the rubric
/// judge's grammars are; a recursive grammar is an error.
pub fn language_regex(grammar: &str) -> Result<regex::Regex, String> {
    use std::collections::HashMap;
    let rules: HashMap<&str, &str> = grammar
        .lines()
        .filter_map(|line| line.split_once(" ::= "))
        .collect();
    fn expand(name: &str, rules: &HashMap<&str, &str>, depth: usize) -> Result<String, String> {
        // A chain this deep is a recursive rule (the grammars here nest a few levels).
        if depth > 64 {
            return Err(format!("rule `{name}` is recursive"));
        }
        let body = rules
            .get(name)
            .ok_or_else(|| format!("rule `{name}` is named but not defined"))?;
        let mut out = String::new();
        let mut chars = body.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    let mut text = String::new();
                    while let Some(c) = chars.next() {
                        match c {
                            '"' => break,
                            '\\' => match chars.next() {
                                Some('n') => text.push('\n'),
                                Some('t') => text.push('\t'),
                                Some(other) => text.push(other),
                                None => {}
                            },
                            other => text.push(other),
                        }
                    }
                    out.push_str(&format!("(?:{})", regex::escape(&text)));
                }
                '[' => {
                    out.push('[');
                    for c in chars.by_ref() {
                        match c {
                            ']' => break,
                            '[' => out.push_str("\\["),
                            other => out.push(other),
                        }
                    }
                    out.push(']');
                }
                '(' => out.push_str("(?:"),
                ')' | '|' | '?' | '*' | '+' => out.push(c),
                // `{m}`, `{m,}`, `{m,n}`: the regex crate reads the same bounds.
                '{' => {
                    out.push('{');
                    for c in chars.by_ref() {
                        if !(c.is_ascii_digit() || c == ',' || c == '}') {
                            return Err(format!("rule `{name}` has a malformed repetition"));
                        }
                        out.push(c);
                        if c == '}' {
                            break;
                        }
                    }
                }
                ' ' => {}
                _ => {
                    let mut rule = c.to_string();
                    while let Some(&next) = chars.peek() {
                        if next.is_ascii_alphanumeric() || next == '-' {
                            rule.push(next);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                    out.push_str(&format!("(?:{})", expand(&rule, rules, depth + 1)?));
                }
            }
        }
        Ok(out)
    }
    regex::RegexBuilder::new(&format!("^(?:{})$", expand("root", &rules, 0)?))
        .size_limit(1 << 28)
        .build()
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hints::CatalogTable;

    fn catalog() -> SchemaCatalog {
        SchemaCatalog {
            tables: vec![CatalogTable {
                name: "singer".into(),
                columns: vec!["Singer_ID".into(), "Name".into(), "Song Name".into()],
                foreign_keys: vec![],
            }],
        }
    }

    fn to_regex(grammar: &str) -> regex::Regex {
        language_regex(grammar).expect("the grammar converts to a regular expression")
    }

    fn reply(sql: &str) -> String {
        format!("```sql\n{sql}\n```")
    }

    #[test]
    fn the_listed_grammar_takes_known_names_and_refuses_others() {
        let grammar = to_regex(&sql_grammar(&catalog(), AliasRule::Listed));
        for sql in [
            "SELECT Name FROM singer WHERE Singer_ID = 3",
            "SELECT T1.name FROM singer AS T1 WHERE T1.\"Song Name\" LIKE '%a''b%'",
            "SELECT count(*) AS singer FROM singer",
        ] {
            assert!(grammar.is_match(&reply(sql)), "{sql}");
        }
        for sql in [
            "SELECT Nme FROM singer",
            "SELECT SingerCount FROM singer",
            "SELECT count(*) AS singer_count FROM singer",
        ] {
            assert!(!grammar.is_match(&reply(sql)), "{sql}");
        }
        // What the free rule is for: the listed grammar lets an alias run on into a second
        // known word, a syntax error in SQLite.
        assert!(grammar.is_match(&reply("SELECT count(*) AS singer name FROM singer")));
    }

    #[test]
    fn the_free_alias_rule_takes_new_names_and_ends_them() {
        let grammar = to_regex(&sql_grammar(&catalog(), AliasRule::Free));
        for sql in [
            "SELECT Name FROM singer WHERE Singer_ID = 3",
            "SELECT count(*) AS singer_count FROM singer",
            "SELECT count(*) AS \"Singer Count\", max(Singer_ID) AS top\nFROM singer AS s JOIN singer AS t ON s.Singer_ID = t.Singer_ID",
            "SELECT CAST(Singer_ID AS REAL) FROM singer",
            "WITH T1 AS (SELECT Name FROM singer) SELECT Name FROM T1",
            "SELECT Name AS n FROM singer AS T1 WHERE Singer_ID > 1 ORDER BY Name",
            "SELECT Name FROM singer AS T1",
            "SELECT CASE WHEN Singer_ID > 1 THEN 'a' ELSE 'b' END AS kind FROM singer",
        ] {
            assert!(grammar.is_match(&reply(sql)), "{sql}");
        }
        for sql in [
            "SELECT count(*) AS singer name FROM singer",
            "SELECT count(*) AS total count FROM singer",
            "SELECT Nme FROM singer",
            "SELECT Name FROM singer AS",
        ] {
            assert!(!grammar.is_match(&reply(sql)), "{sql}");
        }
    }

    #[test]
    fn names_match_in_any_case_and_odd_names_only_quoted() {
        let grammar = sql_grammar(&catalog(), AliasRule::Listed);
        assert!(grammar.starts_with("root ::= \"```sql\\n\" query \"\\n```\"\n"));
        assert!(grammar.contains("query ::= gap? (wordlike gap)* wordlike?\n"));
        assert!(
            grammar.contains("\"Song Name\""),
            "odd names are quoted exactly"
        );
        // `singer` and `singer_id` share a path; `singer` ends inside it, so its node is
        // optional-continuation.
        assert!(grammar.contains("[sS]"), "{grammar}");
    }

    #[test]
    fn the_trie_accepts_exactly_its_words() {
        let words: BTreeSet<String> = ["ab", "abc", "b"].iter().map(|w| w.to_string()).collect();
        assert_eq!(
            word_trie(&words),
            "word ::= [aA] word-1 | [bB]\nword-1 ::= [bB] word-2\nword-2 ::= ([cC])?\n"
        );
    }

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(char_class('t'), "[tT]");
        assert_eq!(char_class('_'), "\"_\"");
    }
}
