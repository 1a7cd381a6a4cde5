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

/// The grammar for one database: table and column names from `catalog`.
pub fn sql_grammar(catalog: &SchemaCatalog) -> String {
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
    let quoted: Vec<String> = names.iter().map(|n| literal(n)).collect();
    let mut grammar = String::new();
    grammar.push_str("root ::= \"```sql\\n\" query \"\\n```\"\n");
    // Two word-like tokens (name, keyword, alias, number) never touch: a space or a symbol
    // stands between them. Otherwise `SingerCount` would pass as `Singer` + `Count`.
    // Every repetition here consumes one unambiguous piece (one space character, one literal,
    // one symbol): nested repetitions such as `([ ]+)+` let a run of k spaces parse in 2^k
    // ways, and llama.cpp keeps a parse stack for each, which made decoding take seconds a
    // token.
    grammar.push_str("query ::= gap? (wordlike gap)* wordlike?\n");
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

    #[test]
    fn names_match_in_any_case_and_odd_names_only_quoted() {
        let grammar = sql_grammar(&catalog());
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
