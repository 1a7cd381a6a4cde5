//! Pulling one SQL query out of a model's free-form reply.
//!
//! Chat models rarely answer with bare SQL. Qwen2.5-Coder, for instance, usually wraps the
//! query in a ```` ```sql ```` fence, often adds a sentence before it and an explanation
//! after it, sometimes writes several statements, and when it runs out of tokens leaves the
//! fence open. [`extract_sql`] handles all of these:
//!
//! 1. **Code fences first.** Fenced blocks are collected (an unterminated fence runs to the
//!    end of the reply). Blocks tagged as SQL (`sql`, `sqlite`, `postgresql`, ...) are tried
//!    before untagged ones, and blocks in other languages (`python`, ...) only as a last
//!    resort, in reply order within each group. The first block that contains a query wins.
//! 2. **Otherwise the whole reply**, where prose may surround the query.
//! 3. Inside the chosen text the query starts at the first `SELECT` or `WITH` that begins a
//!    query (see [`find_query_start`] for what counts), and ends at the first top-level `;`
//!    (quotes and comments respected), so only the first of several statements is kept. In
//!    bare prose, where no `;` may come, it also ends at a blank line, at a line that reads
//!    like prose (`This query ...`, `Explanation:`, Markdown) or at the closing backtick of
//!    inline code.
//!
//! The result is trimmed and carries no trailing `;`. A reply without any query yields
//! [`NoSqlInReply`].

use crate::split_first_statement;

/// The reply contains no SQL query that could be extracted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the model's reply contains no SQL query (no code block or text holds a statement \
     starting with SELECT or WITH); the reply began: {excerpt:?}"
)]
pub struct NoSqlInReply {
    /// The start of the reply (at most 200 characters), for the error message and logs.
    pub excerpt: String,
}

/// Longest excerpt of a reply kept in [`NoSqlInReply`].
const EXCERPT_CHARS: usize = 200;

/// Words that begin an explanatory line after a query, never a line of SQL.
const PROSE_STARTS: &[&str] = &[
    "this",
    "the",
    "here",
    "explanation",
    "note",
    "in",
    "it",
    "we",
    "that",
    "these",
    "which",
    "where:",
    "i",
    "to",
    "assuming",
    "if",
    "also",
    "alternatively",
    "however",
    "output",
    "result",
    "answer",
    "query",
    "sql",
];

/// Extracts the first SQL query from a model reply (see the [module docs](self)).
pub fn extract_sql(reply: &str) -> Result<String, NoSqlInReply> {
    let blocks = code_blocks(reply);
    let by_kind = |kind: BlockKind| blocks.iter().filter(move |b| b.kind == kind);
    let ordered = by_kind(BlockKind::Sql)
        .chain(by_kind(BlockKind::Untagged))
        .chain(by_kind(BlockKind::Other));
    for block in ordered {
        if let Some(sql) = query_in(block.body, true) {
            return Ok(sql);
        }
    }
    // Without a usable fence, look at the text outside any fence, then the reply as a whole.
    let outside = text_outside_blocks(reply, &blocks);
    if let Some(sql) = query_in(&outside, false) {
        return Ok(sql);
    }
    Err(NoSqlInReply {
        excerpt: reply.trim().chars().take(EXCERPT_CHARS).collect(),
    })
}

/// Statements that change data or schema: an answer that begins with one is taken whole by
/// [`extract_statements`].
const CHANGING_VERBS: &[&str] = &[
    "insert", "update", "delete", "replace", "create", "alter", "drop",
];

/// [`extract_sql`] for answers that may change data (a write task's answer): when the first
/// SQL-tagged (else untagged) code block, or a reply without code blocks, begins with a
/// statement that writes or changes the schema (`INSERT`, `UPDATE`, `DELETE`, `REPLACE`,
/// `CREATE`, `ALTER`, `DROP`), that text is the answer, trimmed, every statement in it
/// included (such an answer may take several); otherwise what [`extract_sql`] finds, so that
/// a reply holding a query gives the same answer from both.
pub fn extract_statements(reply: &str) -> Result<String, NoSqlInReply> {
    let blocks = code_blocks(reply);
    let first = blocks
        .iter()
        .find(|b| b.kind == BlockKind::Sql)
        .or_else(|| blocks.iter().find(|b| b.kind == BlockKind::Untagged))
        .map(|b| b.body);
    let candidate = match first {
        Some(body) => Some(body),
        // Without a fence, prose may follow the statements after a blank line.
        None if blocks.is_empty() => Some(reply.trim_start().split("\n\n").next().unwrap_or("")),
        None => None,
    };
    if let Some(text) = candidate.filter(|text| begins_with_change(text)) {
        return Ok(text.trim().to_string());
    }
    extract_sql(reply)
}

/// `true` when the first word of `text` outside comments is one of [`CHANGING_VERBS`].
fn begins_with_change(text: &str) -> bool {
    crate::lex::pieces(text)
        .find(|piece| match piece.kind {
            crate::lex::PieceKind::Comment => false,
            crate::lex::PieceKind::Other => !piece.text(text).trim().is_empty(),
            _ => true,
        })
        .is_some_and(|piece| {
            piece.kind == crate::lex::PieceKind::Word
                && CHANGING_VERBS.contains(&piece.text(text).to_ascii_lowercase().as_str())
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    /// Tagged with a SQL dialect.
    Sql,
    /// No language tag.
    Untagged,
    /// Tagged with another language.
    Other,
}

#[derive(Debug, Clone, Copy)]
struct Block<'a> {
    kind: BlockKind,
    body: &'a str,
    /// Byte range of the whole fence (opening to closing marker) in the reply.
    span: (usize, usize),
}

/// Finds Markdown code fences: a line starting with three or more backticks (optionally
/// indented, optionally followed by a language tag) up to the next line starting with at
/// least as many backticks, or the end of the reply.
fn code_blocks(reply: &str) -> Vec<Block<'_>> {
    let mut blocks = Vec::new();
    let mut lines = line_spans(reply).into_iter();
    while let Some((start, end)) = lines.next() {
        let line = &reply[start..end];
        let trimmed = line.trim_start();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        if ticks < 3 {
            continue;
        }
        let info = trimmed[ticks..].trim();
        // A fence and its tag on one line, with the code continuing after a space on the same
        // line ("```sql SELECT ...") is rare but seen; treat the rest as body.
        let (tag, inline_body) = match info.split_once(char::is_whitespace) {
            Some((tag, rest)) => (tag, Some(rest)),
            None => (info, None),
        };
        let kind = classify_tag(tag);
        let (kind, inline_start) = match (kind, inline_body) {
            (BlockKind::Other, _) if starts_like_sql(info) => (BlockKind::Untagged, Some(info)),
            (kind, body) => (kind, body.filter(|b| starts_like_sql(b))),
        };
        if let Some(rest) = inline_start {
            // Code on the opening line itself; it may close on the same line too.
            let rest_at = offset_in(reply, rest);
            if let Some(close) = rest.find(&"`".repeat(ticks)) {
                blocks.push(Block {
                    kind,
                    body: &reply[rest_at..rest_at + close],
                    span: (start, end),
                });
                continue;
            }
        }
        let body_start = match inline_start {
            Some(rest) => offset_in(reply, rest),
            None => next_line_start(reply, end),
        };
        let mut body_end = reply.len();
        let mut span_end = reply.len();
        for (close_start, close_end) in lines.by_ref() {
            let close = reply[close_start..close_end].trim_start();
            let close_ticks = close.chars().take_while(|&c| c == '`').count();
            if close_ticks >= ticks {
                body_end = close_start;
                span_end = close_end;
                break;
            }
        }
        let body_start = body_start.min(body_end);
        blocks.push(Block {
            kind,
            body: &reply[body_start..body_end],
            span: (start, span_end),
        });
    }
    blocks
}

/// Byte offset of `part`, a sub-slice of `whole`, within `whole`.
fn offset_in(whole: &str, part: &str) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// `(start, end)` byte offsets of each line, without its line break.
fn line_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c == '\n' {
            let end = if i > start && text.as_bytes()[i - 1] == b'\r' {
                i - 1
            } else {
                i
            };
            spans.push((start, end));
            start = i + 1;
        }
    }
    if start < text.len() {
        spans.push((start, text.len()));
    }
    spans
}

fn next_line_start(text: &str, end_of_line: usize) -> usize {
    match text[end_of_line..].find('\n') {
        Some(offset) => end_of_line + offset + 1,
        None => text.len(),
    }
}

fn classify_tag(tag: &str) -> BlockKind {
    let tag = tag.trim().to_ascii_lowercase();
    match tag.as_str() {
        "" => BlockKind::Untagged,
        "sql" | "sqlite" | "sqlite3" | "postgresql" | "postgres" | "psql" | "mysql" | "tsql"
        | "plsql" | "plpgsql" | "mssql" | "pgsql" => BlockKind::Sql,
        _ => BlockKind::Other,
    }
}

/// The reply with every fenced block removed (replaced by a blank line, so that text on
/// either side is not glued together).
fn text_outside_blocks(reply: &str, blocks: &[Block<'_>]) -> String {
    let mut out = String::with_capacity(reply.len());
    let mut at = 0;
    for block in blocks {
        out.push_str(&reply[at..block.span.0]);
        out.push_str("\n\n");
        at = block.span.1;
    }
    out.push_str(&reply[at..]);
    out
}

/// `true` when `text` starts (after spaces) with `SELECT` or `WITH` as a word.
fn starts_like_sql(text: &str) -> bool {
    let text = text.trim_start();
    keyword_at(text, 0, "select") || keyword_at(text, 0, "with")
}

/// Whether `keyword` (lower case) occurs at byte `at` of `text` as a whole word.
fn keyword_at(text: &str, at: usize, keyword: &str) -> bool {
    let bytes = text.as_bytes();
    let end = at + keyword.len();
    if end > bytes.len() || !bytes[at..end].eq_ignore_ascii_case(keyword.as_bytes()) {
        return false;
    }
    let before_ok = at == 0 || !is_word_byte(bytes[at - 1]);
    let after_ok = end == bytes.len() || !is_word_byte(bytes[end]);
    before_ok && after_ok
}

fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// The query in `text`, if any. `fenced` text is code already, so the query may end at the
/// end of the block; prose additionally ends a query at blank lines and prose-like lines.
fn query_in(text: &str, fenced: bool) -> Option<String> {
    let start = find_query_start(text, fenced)?;
    let rest = &text[start..];
    let inline_code = start > 0 && text.as_bytes()[start - 1] == b'`' && !fenced;
    let mut candidate = split_first_statement(rest).first;
    if ends_with_terminator(candidate) {
        candidate = &candidate[..candidate.len() - 1];
    }
    if inline_code {
        if let Some(close) = candidate.find('`') {
            candidate = &candidate[..close];
        }
    }
    if !fenced {
        candidate = cut_before_prose(candidate);
    }
    let sql = candidate.trim();
    (!sql.is_empty()).then(|| sql.to_string())
}

/// `true` when `statement` ends with a `;` that terminates it, not one inside a trailing
/// `--` comment. Appending a new line and a word tells the two apart: after a terminator the
/// word starts a new statement, after a comment it continues this one.
fn ends_with_terminator(statement: &str) -> bool {
    if !statement.ends_with(';') {
        return false;
    }
    let probe = format!("{statement}\nx");
    split_first_statement(&probe).first.len() == statement.len()
}

/// Where the query in `text` starts.
///
/// Candidates are `SELECT` and `WITH` as whole words, case-insensitive. In fenced code the
/// first one counts (a comment line before it is skipped naturally). In prose, `select` and
/// `with` are also ordinary English words, so a candidate is accepted, in this order:
/// a `SELECT` or `WITH` beginning a line (after optional indentation, `>` quoting or list
/// markers) or following a colon or backtick; then an upper-case `SELECT` anywhere. A `WITH`
/// must also look like a common table expression (`WITH name AS (`).
pub fn find_query_start(text: &str, fenced: bool) -> Option<usize> {
    let candidates: Vec<usize> = text
        .char_indices()
        .filter(|&(i, _)| keyword_at(text, i, "select") || is_cte_start(text, i))
        .map(|(i, _)| i)
        .collect();
    if fenced {
        return candidates.first().copied();
    }
    let after_boundary = |i: usize| {
        let before = text[..i].trim_end_matches([' ', '\t']);
        before.is_empty()
            || before.ends_with('\n')
            || before.ends_with(':')
            || before.ends_with('`')
            || before.ends_with('>')
            || line_is_list_marker(before)
    };
    candidates
        .iter()
        .copied()
        .find(|&i| after_boundary(i))
        .or_else(|| {
            candidates
                .iter()
                .copied()
                .find(|&i| text[i..].starts_with("SELECT") || text[i..].starts_with("WITH"))
        })
}

/// `true` when the current line so far is only a list marker such as `-`, `*` or `1.`.
fn line_is_list_marker(before: &str) -> bool {
    let line = before.rsplit('\n').next().unwrap_or(before).trim();
    matches!(line, "-" | "*" | "+")
        || (line.ends_with('.') && line[..line.len() - 1].chars().all(|c| c.is_ascii_digit()))
            && line.len() > 1
}

/// `WITH` at `at` followed by `[RECURSIVE] name AS (`.
fn is_cte_start(text: &str, at: usize) -> bool {
    if !keyword_at(text, at, "with") {
        return false;
    }
    let mut words = text[at + 4..].split_whitespace();
    let mut name = words.next();
    if name.is_some_and(|w| w.eq_ignore_ascii_case("recursive")) {
        name = words.next();
    }
    let Some(name) = name else {
        return false;
    };
    // `name AS (` or `name(col, ...) AS (`: accept either by looking for `AS` soon after.
    let after_name = &text[at + 4..];
    let Some(name_at) = after_name.find(name) else {
        return false;
    };
    let tail = &after_name[name_at + name.len()..];
    let upper: String = tail
        .chars()
        .take(200)
        .collect::<String>()
        .to_ascii_uppercase();
    let Some(as_at) = upper.find(" AS") else {
        return false;
    };
    // Anything between the name and AS must be a column list in parentheses.
    let between = upper[..as_at].trim();
    let columns_ok = between.is_empty() || (between.starts_with('(') && between.ends_with(')'));
    columns_ok && upper[as_at + 3..].trim_start().starts_with('(')
}

/// Cuts a query found in prose before the first blank line or prose-like line.
fn cut_before_prose(candidate: &str) -> &str {
    let mut end = candidate.len();
    let mut offset = 0;
    for (index, line) in candidate.split_inclusive('\n').enumerate() {
        let trimmed = line.trim();
        if index > 0 && (trimmed.is_empty() || reads_like_prose(trimmed)) {
            end = offset;
            break;
        }
        offset += line.len();
    }
    &candidate[..end]
}

fn reads_like_prose(line: &str) -> bool {
    if line.starts_with('#') || line.starts_with("**") || line.starts_with("```") {
        return true;
    }
    // A new list item ("2. Run it", "- The join ...") ends a query found in a list; a line
    // such as "* FROM t" (a query broken after SELECT) does not.
    let mut words = line.split_whitespace();
    let marker = words.next().unwrap_or("");
    let numbered = marker.len() > 1
        && (marker.ends_with('.') || marker.ends_with(')'))
        && marker[..marker.len() - 1]
            .chars()
            .all(|c| c.is_ascii_digit());
    let bullet = matches!(marker, "-" | "*" | "+");
    if (numbered || bullet) && words.next().is_some_and(|w| !is_sql_word(w)) {
        return true;
    }
    let first = line
        .split(|c: char| c.is_whitespace() || c == ',')
        .next()
        .unwrap_or("")
        .trim_end_matches([':', '.'])
        .to_ascii_lowercase();
    PROSE_STARTS.contains(&first.as_str())
        && line.split_whitespace().count() >= 3
        && line
            .split_whitespace()
            .nth(1)
            .is_some_and(|w| w.chars().next().is_some_and(char::is_lowercase))
}

/// Keywords that can begin a continuation line of a query.
fn is_sql_word(word: &str) -> bool {
    const WORDS: &[&str] = &[
        "select",
        "from",
        "where",
        "join",
        "inner",
        "left",
        "right",
        "full",
        "cross",
        "on",
        "group",
        "order",
        "having",
        "limit",
        "offset",
        "union",
        "intersect",
        "except",
        "and",
        "or",
        "not",
        "as",
        "case",
        "when",
        "then",
        "else",
        "end",
        "with",
        "distinct",
        "count",
        "sum",
        "avg",
        "min",
        "max",
        "(",
        ")",
    ];
    let lowered = word.to_ascii_lowercase();
    WORDS.contains(&lowered.trim_end_matches(',')) || word.starts_with('(')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql(reply: &str) -> String {
        extract_sql(reply).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_changing_answer_is_taken_whole_and_a_query_as_extract_sql_takes_it() {
        let update = "Here it is:\n```sql\n-- raise\nUPDATE t SET a = (SELECT max(a) FROM t);\nDELETE FROM u;\n```";
        assert_eq!(
            extract_statements(update).unwrap(),
            "-- raise\nUPDATE t SET a = (SELECT max(a) FROM t);\nDELETE FROM u;"
        );
        assert_eq!(
            extract_statements("delete from t where a = 1;\n\nThis removes the row.").unwrap(),
            "delete from t where a = 1;"
        );
        for reply in [
            "```sql\nSELECT a FROM t;\n```",
            "SELECT a FROM t;\n\nThis lists a.",
            "```python\nUPDATE = 1\n```\nSELECT a FROM t",
        ] {
            assert_eq!(extract_statements(reply), extract_sql(reply), "{reply}");
        }
        assert!(extract_statements("No idea.").is_err());
    }

    #[test]
    fn a_bare_query_is_returned_as_is_without_the_semicolon() {
        assert_eq!(
            sql("SELECT count(*) FROM singer;"),
            "SELECT count(*) FROM singer"
        );
        assert_eq!(
            sql("  select name from singer\n"),
            "select name from singer"
        );
    }

    #[test]
    fn the_typical_qwen_fenced_reply() {
        let reply = "```sql\nSELECT COUNT(*) FROM singer;\n```";
        assert_eq!(sql(reply), "SELECT COUNT(*) FROM singer");
    }

    #[test]
    fn leading_prose_and_trailing_explanation_around_a_fence() {
        let reply = "To find out how many singers there are, you can use the following SQL \
                     query:\n\n```sql\nSELECT COUNT(*) AS singer_count\nFROM singer;\n```\n\n\
                     This query counts all rows in the `singer` table. SELECT is used to read.";
        assert_eq!(sql(reply), "SELECT COUNT(*) AS singer_count\nFROM singer");
    }

    #[test]
    fn a_bare_fence_without_language_tag() {
        let reply = "Here is the query:\n```\nSELECT name FROM stadium WHERE capacity > 5000\n```";
        assert_eq!(sql(reply), "SELECT name FROM stadium WHERE capacity > 5000");
    }

    #[test]
    fn sqlite_and_upper_case_tags_count_as_sql() {
        assert_eq!(sql("```sqlite\nSELECT 1\n```"), "SELECT 1");
        assert_eq!(sql("```SQL\nSELECT 2;\n```"), "SELECT 2");
    }

    #[test]
    fn an_unterminated_fence_runs_to_the_end() {
        let reply = "```sql\nSELECT T1.name, T2.song_name\nFROM singer AS T1\nJOIN";
        assert_eq!(
            sql(reply),
            "SELECT T1.name, T2.song_name\nFROM singer AS T1\nJOIN"
        );
    }

    #[test]
    fn only_the_first_of_several_statements_is_kept() {
        let reply = "```sql\nSELECT count(*) FROM singer;\nSELECT count(*) FROM concert;\n```";
        assert_eq!(sql(reply), "SELECT count(*) FROM singer");
        assert_eq!(
            sql("SELECT a FROM t WHERE b = 'x;y'; DROP TABLE t;"),
            "SELECT a FROM t WHERE b = 'x;y'"
        );
    }

    #[test]
    fn a_sql_block_wins_over_an_earlier_block_in_another_language() {
        let reply = "```python\nimport sqlite3\nconn = sqlite3.connect('x.db')\n```\n\
                     Then run:\n```sql\nSELECT avg(age) FROM singer\n```";
        assert_eq!(sql(reply), "SELECT avg(age) FROM singer");
    }

    #[test]
    fn a_sql_block_wins_over_an_earlier_untagged_block() {
        let reply = "```\nsinger(Singer_ID, Name)\n```\n```sql\nSELECT Name FROM singer\n```";
        assert_eq!(sql(reply), "SELECT Name FROM singer");
    }

    #[test]
    fn comments_before_the_query_in_a_fence_are_skipped() {
        let reply = "```sql\n-- count the singers\nSELECT count(*)\nFROM singer\n```";
        assert_eq!(sql(reply), "SELECT count(*)\nFROM singer");
    }

    #[test]
    fn common_table_expressions_start_with_with() {
        let reply = "```sql\nWITH young AS (SELECT * FROM singer WHERE age < 30)\n\
                     SELECT count(*) FROM young;\n```";
        assert_eq!(
            sql(reply),
            "WITH young AS (SELECT * FROM singer WHERE age < 30)\nSELECT count(*) FROM young"
        );
        let bare = "The answer:\nWITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n \
                    WHERE x < 3) SELECT x FROM n";
        assert!(sql(bare).starts_with("WITH RECURSIVE n(x) AS ("));
    }

    #[test]
    fn prose_with_the_words_select_and_with_is_not_a_query() {
        let reply = "We select the singers with the highest age:\nSELECT name FROM singer \
                     ORDER BY age DESC LIMIT 1";
        assert_eq!(
            sql(reply),
            "SELECT name FROM singer ORDER BY age DESC LIMIT 1"
        );
    }

    #[test]
    fn a_query_in_prose_ends_at_the_explanation() {
        let reply = "SELECT count(*) FROM singer\n\nThis query returns the number of singers.";
        assert_eq!(sql(reply), "SELECT count(*) FROM singer");
        let reply = "SELECT name\nFROM singer\nThis query lists the names.";
        assert_eq!(sql(reply), "SELECT name\nFROM singer");
        let reply = "SELECT name FROM singer\nExplanation: we read the name column.";
        assert_eq!(sql(reply), "SELECT name FROM singer");
    }

    #[test]
    fn a_query_after_a_colon_on_the_same_line() {
        let reply = "The SQL query is: SELECT count(*) FROM singer; It counts rows.";
        assert_eq!(sql(reply), "SELECT count(*) FROM singer");
    }

    #[test]
    fn inline_code_ends_at_the_backtick() {
        let reply = "You can run `SELECT count(*) FROM singer` to get the answer.";
        assert_eq!(sql(reply), "SELECT count(*) FROM singer");
    }

    #[test]
    fn upper_case_select_inside_a_sentence_is_found_last() {
        let reply = "I would write SELECT count(*) FROM singer";
        assert_eq!(sql(reply), "SELECT count(*) FROM singer");
    }

    #[test]
    fn a_multi_line_qwen_answer_with_joins() {
        let reply = "To list each concert with its stadium, join the two tables on the \
                     stadium id:\n\n```sql\nSELECT c.concert_Name, s.Name\nFROM concert AS c\n\
                     JOIN stadium AS s ON c.Stadium_ID = s.Stadium_ID;\n```\n\n### Explanation\n\
                     - `JOIN` matches each concert to its stadium.\n";
        assert_eq!(
            sql(reply),
            "SELECT c.concert_Name, s.Name\nFROM concert AS c\nJOIN stadium AS s ON \
             c.Stadium_ID = s.Stadium_ID"
        );
    }

    #[test]
    fn strings_and_identifiers_with_semicolons_and_keywords_survive() {
        let reply = "```sql\nSELECT \"select;\" FROM t WHERE note = 'with; AS (' -- ;\n```";
        assert_eq!(
            sql(reply),
            "SELECT \"select;\" FROM t WHERE note = 'with; AS (' -- ;"
        );
    }

    #[test]
    fn a_fence_with_code_on_the_opening_line() {
        assert_eq!(sql("```sql SELECT 1 FROM t```"), "SELECT 1 FROM t");
    }

    #[test]
    fn windows_line_endings() {
        let reply = "Query:\r\n```sql\r\nSELECT name\r\nFROM singer;\r\n```\r\n";
        assert_eq!(sql(reply), "SELECT name\r\nFROM singer");
    }

    #[test]
    fn replies_without_sql_are_a_typed_error_with_an_excerpt() {
        for reply in [
            "",
            "   ",
            "I'm sorry, but I cannot answer that without more information about the schema.",
            "```python\nprint('hello')\n```",
            "We need to select the youngest singer with care.",
            "```sql\n-- no query here\n```",
        ] {
            let error = extract_sql(reply).unwrap_err();
            assert_eq!(
                error.excerpt,
                reply.trim().chars().take(200).collect::<String>()
            );
            assert!(error.to_string().contains("no SQL query"), "{error}");
        }
    }

    #[test]
    fn the_excerpt_is_bounded() {
        let reply = "no sql here ".repeat(100);
        let error = extract_sql(&reply).unwrap_err();
        assert_eq!(error.excerpt.chars().count(), EXCERPT_CHARS);
    }

    #[test]
    fn non_ascii_text_around_the_query_is_handled() {
        let reply =
            "Voilà la requête — «simple» :\n```sql\nSELECT nom FROM chanteur WHERE ville = \
                     'Zürich'\n```\nÇa compte les chanteurs.";
        assert_eq!(
            sql(reply),
            "SELECT nom FROM chanteur WHERE ville = 'Zürich'"
        );
    }

    #[test]
    fn numbered_list_items_can_hold_the_query() {
        let reply = "Steps:\n1. SELECT count(*) FROM singer\n2. Read the number.";
        assert_eq!(sql(reply), "SELECT count(*) FROM singer");
    }
}
