//! Spider 1.0 files: `dev.json` / `train.json`, the gold file and prediction files.

use crate::error::DataError;
use crate::text::{lines, py_strip, read_json, read_text, top_array, Obj};
use merit_core::Question;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One line of a gold file (`SQL<TAB>db_id`), Spider's `dev_gold.sql` or BIRD's `dev.sql`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoldLine {
    /// 1-based line number in the file, so reports can point back at the source.
    pub line: usize,
    /// The gold SQL: everything before the last tab of the stripped line.
    pub sql: String,
    /// The database id: everything after the last tab.
    pub db_id: String,
}

/// One line of a Spider prediction file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PredLine {
    /// 1-based line number in the file.
    pub line: usize,
    /// The predicted SQL: the stripped line up to its first tab; empty for a blank line.
    pub sql: String,
}

/// Loads Spider's `dev.json` or `train.json`: a JSON array of objects with `db_id`,
/// `question` and `query` (other fields, such as the parsed `sql`, are ignored).
///
/// Question ids are `"{split}-{index}"` with the 0-based position in the file, which is also
/// the line of the gold file the question corresponds to. Spider has no evidence and no
/// difficulty label, so `evidence` is empty and `difficulty` is `None`.
pub fn load_spider_questions(
    path: impl AsRef<Path>,
    split: &str,
) -> Result<Vec<Question>, DataError> {
    let path = path.as_ref();
    let value = read_json(path, "a JSON array of Spider questions")?;
    let items = top_array(path, &value)?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let record = Obj::new(path, format!("[{index}]"), item)?;
            Ok(Question {
                id: format!("{split}-{index}"),
                index,
                db_id: record.string("db_id")?.to_owned(),
                question: record.string("question")?.to_owned(),
                evidence: String::new(),
                gold_sql: record.string("query")?.to_owned(),
                difficulty: None,
            })
        })
        .collect()
}

/// Loads an official gold file: one `SQL<TAB>db_id` per line.
///
/// Mirrors the official `evaluate()`: each line is stripped with Python's `str.strip()`
/// whitespace (so a trailing `\r` or stray spaces never reach the SQL), and lines that are
/// empty after stripping are skipped rather than counted, exactly as the official list
/// comprehension `if len(l.strip()) > 0` does. Skipped lines still advance [`GoldLine::line`],
/// so line numbers always refer to the physical file. The database id is what follows the
/// LAST tab, so a gold query that itself contains a tab keeps it.
///
/// A line without a tab is an error, and so is a file with no gold line at all: an empty gold
/// file is always a mistake (wrong path, failed export), never an evaluation of zero questions.
pub fn load_gold_sql(path: impl AsRef<Path>) -> Result<Vec<GoldLine>, DataError> {
    let path = path.as_ref();
    let text = read_text(path)?;
    let mut gold = Vec::new();
    for (number, raw) in lines(&text) {
        let line = py_strip(raw);
        if line.is_empty() {
            continue;
        }
        let Some((sql, db_id)) = line.rsplit_once('\t') else {
            return Err(DataError::line(
                path,
                number,
                "expected `SQL<TAB>db_id`, found no tab",
            ));
        };
        // Stripping removes leading and trailing tabs, so both parts are non-empty here;
        // the check keeps that promise explicit should the stripping rule ever change.
        if sql.is_empty() || db_id.is_empty() {
            return Err(DataError::line(
                path,
                number,
                "expected `SQL<TAB>db_id`, found an empty SQL or db_id",
            ));
        }
        gold.push(GoldLine {
            line: number,
            sql: sql.to_owned(),
            db_id: db_id.to_owned(),
        });
    }
    if gold.is_empty() {
        return Err(DataError::line(
            path,
            1,
            "the file has no gold lines; expected one `SQL<TAB>db_id` per line",
        ));
    }
    Ok(gold)
}

/// Loads a Spider prediction file: one SQL query per line.
///
/// Mirrors the official `evaluate()`: each line is stripped (Python whitespace) and cut at
/// its first tab, so files written as `SQL<TAB>db_id` also work. Unlike the gold loader,
/// blank lines are KEPT as empty predictions: a model that produced nothing for question 17
/// leaves line 17 blank, and dropping it would shift every later prediction onto the wrong
/// question. A trailing blank line (an extra newline at the end) therefore counts as a
/// prediction too. An empty file gives an empty vector; the caller compares the count with
/// the gold and reports the mismatch with both numbers, which it alone knows.
pub fn load_predictions(path: impl AsRef<Path>) -> Result<Vec<PredLine>, DataError> {
    let path = path.as_ref();
    let text = read_text(path)?;
    Ok(lines(&text)
        .map(|(number, raw)| {
            let line = py_strip(raw);
            let sql = line.split_once('\t').map_or(line, |(first, _)| first);
            PredLine {
                line: number,
                sql: sql.to_owned(),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::write;

    #[test]
    fn gold_lines_are_stripped_blank_lines_skipped_and_db_id_follows_the_last_tab() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "gold.sql",
            b"  SELECT 1\tdb_a \r\n\n\t\nSELECT 'a\tb'\tdb_b\rSELECT 3\tdb_c\x1c\xc2\xa0",
        );
        let gold = load_gold_sql(&path).unwrap();
        let got: Vec<_> = gold
            .iter()
            .map(|g| (g.line, g.sql.as_str(), g.db_id.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "SELECT 1", "db_a"),
                (4, "SELECT 'a\tb'", "db_b"),
                (5, "SELECT 3", "db_c"),
            ]
        );
    }

    #[test]
    fn gold_line_without_tab_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "dev_gold.sql",
            b"SELECT 1\tdb\n\nSELECT 2 db\nSELECT 3\tdb\n",
        );
        let err = load_gold_sql(&path).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, DataError::Line { line: 3, .. }), "{err:?}");
        assert!(
            text.ends_with("dev_gold.sql line 3: expected `SQL<TAB>db_id`, found no tab"),
            "{text}"
        );
        // A line whose only tab is trailing loses it to stripping, as in Python.
        let path = write(&dir, "trailing.sql", b"SELECT 1\t\n");
        assert!(load_gold_sql(&path)
            .unwrap_err()
            .to_string()
            .contains("trailing.sql line 1: expected"));
    }

    #[test]
    fn empty_or_blank_gold_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        for (name, bytes) in [("empty.sql", &b""[..]), ("blank.sql", &b"\n \n\t\n"[..])] {
            let path = write(&dir, name, bytes);
            let text = load_gold_sql(&path).unwrap_err().to_string();
            assert!(
                text.contains(&format!("{name} line 1: the file has no gold lines")),
                "{text}"
            );
        }
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "gold.sql", b"SELECT 1\tdb\r\nSELECT '\xff'\tdb\n");
        let err = load_gold_sql(&path).unwrap_err();
        assert!(matches!(err, DataError::Line { line: 2, .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("gold.sql line 2: invalid UTF-8 (byte 0xFF at column 9)"),
            "{text}"
        );

        let path = write(&dir, "pred.sql", b"a\rb\r\xc3");
        let text = load_predictions(&path).unwrap_err().to_string();
        assert!(text.contains("pred.sql line 3: invalid UTF-8"), "{text}");
    }

    #[test]
    fn missing_file_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.sql");
        let err = load_gold_sql(&path).unwrap_err();
        assert!(matches!(err, DataError::Io { .. }));
        assert_eq!(err.file(), path);
        assert!(err.to_string().contains("nope.sql: cannot read the file"));
    }

    #[test]
    fn predictions_keep_blank_lines_and_cut_at_the_first_tab() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "pred.sql",
            b"\xEF\xBB\xBFSELECT 1 \n\n  SELECT 2\tdb\textra\r\n \t \nSELECT 4",
        );
        let preds = load_predictions(&path).unwrap();
        let got: Vec<_> = preds.iter().map(|p| (p.line, p.sql.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (1, "SELECT 1"),
                (2, ""),
                (3, "SELECT 2"),
                (4, ""),
                (5, "SELECT 4")
            ]
        );
        let empty = write(&dir, "empty.sql", b"");
        assert!(load_predictions(&empty).unwrap().is_empty());
    }

    #[test]
    fn spider_questions_hostile_json() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(&str, &[u8], &str); 7] = [
            ("empty.json", b"  \n", "empty.json line 1: the file is empty"),
            (
                "broken.json",
                b"[\n {\"db_id\": \"a\",\n",
                "broken.json line 3 column 1: invalid JSON: EOF while parsing",
            ),
            ("object.json", b"{}", "object.json at $: expected a JSON array"),
            (
                "missing.json",
                b"[{\"db_id\": \"a\", \"question\": \"q\", \"query\": \"s\"}, {\"db_id\": \"a\", \"question\": \"q\"}]",
                "missing.json at [1]: missing field `query`",
            ),
            (
                "types.json",
                b"[{\"db_id\": \"a\", \"question\": 3, \"query\": \"s\"}]",
                "types.json at [0].question: expected a string, found number 3",
            ),
            ("scalar.json", b"[7]", "scalar.json at [0]: expected an object, found number 7"),
            (
                "utf8.json",
                b"[\n{\"db_id\": \"\xe9\"}]",
                "utf8.json line 2: invalid UTF-8 (byte 0xE9 at column 12)",
            ),
        ];
        for (name, bytes, expected) in cases {
            let path = write(&dir, name, bytes);
            let text = load_spider_questions(&path, "dev").unwrap_err().to_string();
            assert!(text.contains(expected), "{name}: {text}");
            assert!(text.contains(&*path.to_string_lossy()), "{text}");
        }
    }

    #[test]
    fn spider_questions_get_split_ids_and_no_evidence() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "dev.json",
            br#"[{"db_id": "a", "question": "q0", "query": "SELECT 0", "sql": {}},
                 {"db_id": "b", "question": "q1", "query": "SELECT 1"}]"#,
        );
        let questions = load_spider_questions(&path, "dev").unwrap();
        assert_eq!(questions.len(), 2);
        assert_eq!(questions[1].id, "dev-1");
        assert_eq!(questions[1].index, 1);
        assert_eq!(questions[1].db_id, "b");
        assert_eq!(questions[1].gold_sql, "SELECT 1");
        assert_eq!(questions[1].evidence, "");
        assert_eq!(questions[1].difficulty, None);
        let empty = write(&dir, "none.json", b"[]");
        assert!(load_spider_questions(&empty, "dev").unwrap().is_empty());
    }
}
