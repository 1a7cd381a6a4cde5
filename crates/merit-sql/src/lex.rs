//! SQL text cut into the pieces SQLite's tokenizer delimits, for scans that must not look
//! inside string literals, quoted identifiers or comments (where the first statement ends,
//! which words are clause keywords).
//!
//! Written by hand rather than with `sqlparser`'s tokenizer: these scans run on any text,
//! half-written model output included, and must follow SQLite's quoting rules (`[…]`
//! identifiers, an unterminated literal running to the end) without ever failing, where a full
//! tokenizer rejects what it cannot lex and follows its own dialects' quotes.

/// What a [`Piece`] of SQL text is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PieceKind {
    /// A run of ASCII letters, digits and `_`: a keyword, an unquoted identifier or a number.
    Word,
    /// A string literal or a quoted identifier (`'…'`, `"…"`, `` `…` ``, `[…]`), quotes
    /// included; a doubled quote inside is part of it, and an unterminated one runs to the end.
    Quoted,
    /// A `--` comment up to its newline (not included), or a `/* … */` comment; an
    /// unterminated block comment runs to the end.
    Comment,
    /// One character of anything else: punctuation, whitespace, a non-ASCII character.
    Other,
}

/// One piece of SQL text: its kind and its byte span, which always lies on character
/// boundaries (so `&sql[piece.start..piece.end]` never panics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// What the piece is.
    pub kind: PieceKind,
    /// Byte offset of its first byte.
    pub start: usize,
    /// Byte offset just past its last byte.
    pub end: usize,
}

impl Piece {
    /// The piece's text within the `sql` it was cut from.
    pub fn text<'a>(&self, sql: &'a str) -> &'a str {
        &sql[self.start..self.end]
    }
}

/// The feedback text for a candidate that holds no statement (see [`has_statement`]), one
/// wording for the oracle and for live mode.
pub const NO_STATEMENT: &str = "the candidate contains no SQL statement";

/// `true` when `sql` holds a statement at all: some word outside literals and comments (every
/// statement begins with a keyword), where Python's `sqlite3` and SQLite would run an empty
/// or comment-only text without error and return nothing.
pub fn has_statement(sql: &str) -> bool {
    pieces(sql).any(|piece| piece.kind == PieceKind::Word)
}

/// Cuts `sql` into consecutive pieces that cover it entirely, in order.
pub fn pieces(sql: &str) -> Pieces<'_> {
    Pieces { sql, at: 0 }
}

/// The iterator of [`pieces`].
#[derive(Debug, Clone)]
pub struct Pieces<'a> {
    sql: &'a str,
    at: usize,
}

impl Iterator for Pieces<'_> {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        let bytes = self.sql.as_bytes();
        let start = self.at;
        let first = *bytes.get(start)?;
        let (kind, end) = match first {
            b'\'' | b'"' | b'`' | b'[' => {
                let close = if first == b'[' { b']' } else { first };
                let mut i = start + 1;
                loop {
                    match bytes.get(i) {
                        None => break (PieceKind::Quoted, bytes.len()),
                        // A doubled quote is an escaped quote (brackets have no escape).
                        Some(&b) if b == close && first != b'[' && bytes.get(i + 1) == Some(&b) => {
                            i += 2
                        }
                        Some(&b) if b == close => break (PieceKind::Quoted, i + 1),
                        Some(_) => i += 1,
                    }
                }
            }
            b'-' if bytes.get(start + 1) == Some(&b'-') => {
                let end = bytes[start..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(bytes.len(), |offset| start + offset);
                (PieceKind::Comment, end)
            }
            b'/' if bytes.get(start + 1) == Some(&b'*') => {
                let end = bytes[start + 2..]
                    .windows(2)
                    .position(|pair| pair == b"*/")
                    .map_or(bytes.len(), |offset| start + 2 + offset + 2);
                (PieceKind::Comment, end)
            }
            b if b.is_ascii_alphanumeric() || b == b'_' => {
                let end = bytes[start..]
                    .iter()
                    .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
                    .map_or(bytes.len(), |offset| start + offset);
                (PieceKind::Word, end)
            }
            _ => {
                let width = self.sql[start..].chars().next().map_or(1, char::len_utf8);
                (PieceKind::Other, start + width)
            }
        };
        self.at = end;
        Some(Piece { kind, start, end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(sql: &str) -> Vec<(PieceKind, &str)> {
        pieces(sql).map(|p| (p.kind, p.text(sql))).collect()
    }

    #[test]
    fn words_quotes_comments_and_the_rest() {
        use PieceKind::*;
        assert_eq!(
            cut("SELECT a_1, 'x;y' -- c;\n/* d */[e f]"),
            vec![
                (Word, "SELECT"),
                (Other, " "),
                (Word, "a_1"),
                (Other, ","),
                (Other, " "),
                (Quoted, "'x;y'"),
                (Other, " "),
                (Comment, "-- c;"),
                (Other, "\n"),
                (Comment, "/* d */"),
                (Quoted, "[e f]"),
            ]
        );
    }

    #[test]
    fn a_text_of_spaces_comments_and_semicolons_holds_no_statement() {
        for blank in ["", "  \n", ";", "-- SELECT 1\n/* SELECT 2 */ ;"] {
            assert!(!has_statement(blank), "{blank:?}");
        }
        assert!(has_statement("/* x */ SELECT 1"));
    }

    #[test]
    fn doubled_quotes_stay_inside_and_unterminated_pieces_run_to_the_end() {
        use PieceKind::*;
        assert_eq!(
            cut("'it''s' x"),
            vec![(Quoted, "'it''s'"), (Other, " "), (Word, "x")]
        );
        assert_eq!(cut("\"ab"), vec![(Quoted, "\"ab")]);
        assert_eq!(cut("/* open"), vec![(Comment, "/* open")]);
        assert_eq!(cut("/*/ x"), vec![(Comment, "/*/ x")]);
        assert_eq!(cut("[a]]"), vec![(Quoted, "[a]"), (Other, "]")]);
    }

    fn assert_covers(sql: &str) {
        let mut at = 0;
        for piece in pieces(sql) {
            assert_eq!(piece.start, at, "pieces of {sql:?} leave a gap");
            assert!(piece.end > piece.start, "an empty piece in {sql:?}");
            assert!(
                sql.is_char_boundary(piece.end),
                "{sql:?} cut inside a character"
            );
            at = piece.end;
        }
        assert_eq!(at, sql.len(), "pieces of {sql:?} stop early");
    }

    #[test]
    fn pieces_cover_the_text_on_character_boundaries() {
        assert_covers("SELECT «é» FROM t WHERE n = 'ü' -- ñ");
        assert_covers("");
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_covered(sql in "(?s)[-/*'\"`\\[\\];a-z_0-9 \n\u{e9}\u{1F600}]{0,40}") {
            assert_covers(&sql);
            let split = crate::split_first_statement(&sql);
            proptest::prop_assert_eq!(format!("{}{}", split.first, split.tail), sql);
        }
    }
}
