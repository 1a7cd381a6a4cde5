//! Where the first statement of a SQL text ends, and whether what follows it is harmless.
//!
//! Python's `sqlite3` (which both official evaluators use) executes the first statement and
//! raises "You can only execute one statement at a time." when anything but spaces, tabs,
//! newlines and comments follows it — even a lone extra `;`. We reproduce that rule exactly
//! so that the same predictions fail here as there.

/// The first statement of a SQL text and the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatementSplit<'a> {
    /// Up to and including the first top-level `;` (or the whole text when there is none).
    pub first: &'a str,
    /// Everything after it.
    pub tail: &'a str,
}

impl StatementSplit<'_> {
    /// `true` when the tail holds only what Python's `sqlite3` tolerates after a statement:
    /// spaces, tabs, CR/LF, `--` line comments and `/* */` comments (an unterminated block
    /// comment included).
    pub fn tail_is_ignorable(&self) -> bool {
        tail_is_ignorable(self.tail)
    }
}

/// Splits `sql` after its first `;` that is outside string literals, quoted identifiers and
/// comments, following SQLite's tokenizer rules for quotes (`'…'`, `"…"`, `` `…` ``, `[…]`).
pub fn split_first_statement(sql: &str) -> StatementSplit<'_> {
    let semicolon = crate::lex::pieces(sql)
        .find(|piece| piece.kind == crate::lex::PieceKind::Other && piece.text(sql) == ";");
    match semicolon {
        Some(piece) => StatementSplit {
            first: &sql[..piece.end],
            tail: &sql[piece.end..],
        },
        None => StatementSplit {
            first: sql,
            tail: "",
        },
    }
}

/// Python 3.11's `pysqlite_check_remaining_sql`, as a state machine over the tail.
fn tail_is_ignorable(tail: &str) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Normal,
        LineCommentStart,
        InLineComment,
        BlockCommentStart,
        InBlockComment,
        BlockCommentEnd,
    }
    let mut state = State::Normal;
    for &byte in tail.as_bytes() {
        state = match (byte, state) {
            (b'-', State::Normal) => State::LineCommentStart,
            (b'-', State::LineCommentStart) => State::InLineComment,
            (b'-', other) => other,
            (b' ' | b'\t', other) => other,
            (b'\n' | b'\r', State::InLineComment) => State::Normal,
            (b'\n' | b'\r', other) => other,
            (b'/', State::Normal) => State::BlockCommentStart,
            (b'/', State::BlockCommentEnd) => State::Normal,
            (b'/', State::BlockCommentStart) => return false,
            (b'/', other) => other,
            (b'*', State::Normal | State::LineCommentStart) => return false,
            (b'*', State::BlockCommentStart) => State::InBlockComment,
            (b'*', State::InBlockComment) => State::BlockCommentEnd,
            (b'*', other) => other,
            (_, State::BlockCommentEnd) => State::InBlockComment,
            (_, State::InLineComment | State::InBlockComment) => state,
            (_, _) => return false,
        };
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_after_the_first_top_level_semicolon() {
        let split = split_first_statement("SELECT ';' FROM t; SELECT 2");
        assert_eq!(split.first, "SELECT ';' FROM t;");
        assert_eq!(split.tail, " SELECT 2");
        assert!(!split.tail_is_ignorable());
    }

    #[test]
    fn semicolons_in_quotes_and_comments_do_not_split() {
        let sql = "SELECT \"a;b\", [c;d], `e;f` -- g;h\n /* i;j */ FROM t";
        assert_eq!(split_first_statement(sql).first, sql);
    }

    #[test]
    fn python_tolerates_whitespace_and_comments_after_the_statement() {
        for tail in ["", " ", " \n\t", " -- x", " /* x */ ", " /* unterminated"] {
            assert!(tail_is_ignorable(tail), "{tail:?}");
        }
        for tail in [";", " ;", "x", " */", "-*", "//"] {
            assert!(!tail_is_ignorable(tail), "{tail:?}");
        }
    }
}
