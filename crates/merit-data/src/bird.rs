//! BIRD files: `dev.json` / `mini_dev.json`, the gold SQL file and `predict_dev.json`.

use crate::error::DataError;
use crate::spider::{load_gold_sql, GoldLine};
use crate::text::{describe, read_json, top_array, Obj};
use merit_core::{Difficulty, Question};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The separator the official BIRD prompt scripts put between the SQL and the database id.
pub const BIRD_SEPARATOR: &str = "\t----- bird -----\t";

/// A BIRD question together with the dataset's own `question_id`.
///
/// [`Question`] is shared by both benchmarks and has no room for it, but `mini_dev.json`
/// numbers its questions by their position in the full dev set (1471, 1472, 1473, 1476...),
/// so anyone cross-referencing the two files needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BirdEntry {
    /// The question, with id `"{split}-{index}"` like every loaded question.
    pub question: Question,
    /// The file's `question_id`, when the record has one.
    pub question_id: Option<u64>,
}

/// One entry of a BIRD prediction file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BirdPrediction {
    /// The key of the entry: the 0-based question index in the evaluated file.
    pub index: usize,
    /// The predicted SQL, exactly as written (the official script does not strip it).
    pub sql: String,
    /// The database id after the separator; `None` when the separator is missing.
    pub db_id: Option<String>,
}

/// Loads BIRD's `dev.json` or `mini_dev.json` as plain [`Question`]s.
///
/// See [`load_bird_entries`] for the format; this drops the `question_id`.
pub fn load_bird_questions(
    path: impl AsRef<Path>,
    split: &str,
) -> Result<Vec<Question>, DataError> {
    Ok(load_bird_entries(path, split)?
        .into_iter()
        .map(|entry| entry.question)
        .collect())
}

/// Loads BIRD's `dev.json` or `mini_dev.json`, keeping each record's `question_id`.
///
/// Each record needs the strings `db_id`, `question`, `evidence` and `SQL`. `question_id`
/// may be absent (BIRD's train set has none) but, if present, must be a non-negative integer.
/// `difficulty` may be absent or null (train again) and gives `None`; an unknown label is an
/// error rather than `None`, because silently dropping it would skew the per-difficulty table.
/// Ids are `"{split}-{index}"` with the 0-based position in the file, the key the official
/// prediction file uses.
pub fn load_bird_entries(path: impl AsRef<Path>, split: &str) -> Result<Vec<BirdEntry>, DataError> {
    let path = path.as_ref();
    let value = read_json(path, "a JSON array of BIRD questions")?;
    let items = top_array(path, &value)?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let record = Obj::new(path, format!("[{index}]"), item)?;
            let question_id = match record.map.get("question_id") {
                None | Some(Value::Null) => None,
                Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64(),
                Some(other) => {
                    return Err(DataError::record(
                        path,
                        record.field_path("question_id"),
                        format!("expected a non-negative integer, found {}", describe(other)),
                    ))
                }
            };
            let difficulty = match record.map.get("difficulty") {
                None | Some(Value::Null) => None,
                Some(Value::String(label)) => Some(Difficulty::parse(label).ok_or_else(|| {
                    DataError::record(
                        path,
                        record.field_path("difficulty"),
                        format!(
                            "unknown difficulty {label:?}; expected simple, moderate or challenging"
                        ),
                    )
                })?),
                Some(other) => {
                    return Err(DataError::record(
                        path,
                        record.field_path("difficulty"),
                        format!("expected a string, found {}", describe(other)),
                    ))
                }
            };
            Ok(BirdEntry {
                question: Question {
                    id: format!("{split}-{index}"),
                    index,
                    db_id: record.string("db_id")?.to_owned(),
                    question: record.string("question")?.to_owned(),
                    evidence: record.string("evidence")?.to_owned(),
                    gold_sql: record.string("SQL")?.to_owned(),
                    difficulty,
                },
                question_id,
            })
        })
        .collect()
}

/// Loads a BIRD gold SQL file (`SQL<TAB>db_id` per line).
///
/// The format is Spider's, so this is [`load_gold_sql`] with the same rules (stripped lines,
/// blank lines skipped, db_id after the last tab). The official BIRD script would crash on a
/// blank line; skipping it is the friendlier reading and cannot misalign anything, since the
/// gold file defines the order.
pub fn load_bird_gold_sql(path: impl AsRef<Path>) -> Result<Vec<GoldLine>, DataError> {
    load_gold_sql(path)
}

/// Loads a BIRD prediction file such as the official `predict_dev.json`:
/// a JSON object `{"0": "SQL\t----- bird -----\tdb_id", "1": ...}`.
///
/// Keys are question indices (ASCII digits only); a key that is not one, or two keys that
/// name the same index (`"1"` and `"01"`), is an error naming the key. Values are split at
/// the LAST [`BIRD_SEPARATOR`]; without a separator the whole string is the SQL and `db_id`
/// is `None`. A `null` value (a model that returned nothing) becomes an empty SQL with no
/// db_id: the official script substitutes a blank query there too, which scores 0. Any other
/// value type is an error.
///
/// The official script walks the object in file order; we return entries sorted by index
/// instead, so a file written out of order still lines up with the gold.
pub fn load_bird_predictions(path: impl AsRef<Path>) -> Result<Vec<BirdPrediction>, DataError> {
    let path = path.as_ref();
    let value = read_json(path, "a JSON object of BIRD predictions")?;
    let Value::Object(map) = &value else {
        return Err(DataError::record(
            path,
            "$",
            format!(
                "expected a JSON object mapping question indices to SQL, found {}",
                describe(&value)
            ),
        ));
    };
    let mut by_index: BTreeMap<usize, (&str, BirdPrediction)> = BTreeMap::new();
    for (key, entry) in map {
        let key_path = format!("[{key:?}]");
        let index = parse_index(key).ok_or_else(|| {
            DataError::record(
                path,
                key_path.clone(),
                format!("key {key:?} is not a question index (expected a non-negative integer)"),
            )
        })?;
        let (sql, db_id) = match entry {
            Value::String(text) => match text.rsplit_once(BIRD_SEPARATOR) {
                Some((sql, db_id)) => (sql.to_owned(), Some(db_id.to_owned())),
                None => (text.clone(), None),
            },
            Value::Null => (String::new(), None),
            other => {
                return Err(DataError::record(
                    path,
                    key_path,
                    format!(
                        "expected a string (SQL{BIRD_SEPARATOR:?}db_id), found {}",
                        describe(other)
                    ),
                ))
            }
        };
        let prediction = BirdPrediction { index, sql, db_id };
        if let Some((first, _)) = by_index.insert(index, (key.as_str(), prediction)) {
            return Err(DataError::record(
                path,
                key_path,
                format!(
                    "key {key:?} repeats question index {index} (already given by key {first:?})"
                ),
            ));
        }
    }
    Ok(by_index.into_values().map(|(_, p)| p).collect())
}

/// A key made only of ASCII digits, small enough for `usize`. `str::parse` alone would also
/// accept `"+3"`, which no tool writes and which we would rather flag.
fn parse_index(key: &str) -> Option<usize> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    key.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::write;

    fn err_text(result: Result<Vec<BirdPrediction>, DataError>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn predictions_are_split_at_the_separator_and_sorted_by_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "predict_dev.json",
            br#"{"10": "SELECT 10\t----- bird -----\tdb_x",
                 "2": "SELECT 2",
                 "0": "SELECT 'a\t----- bird -----\tb'\t----- bird -----\tdb_y",
                 "3": null}"#,
        );
        let preds = load_bird_predictions(&path).unwrap();
        let got: Vec<_> = preds
            .iter()
            .map(|p| (p.index, p.sql.as_str(), p.db_id.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "SELECT 'a\t----- bird -----\tb'", Some("db_y")),
                (2, "SELECT 2", None),
                (3, "", None),
                (10, "SELECT 10", Some("db_x")),
            ]
        );
    }

    #[test]
    fn bad_prediction_files_name_file_and_place() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(&str, &[u8], &str); 7] = [
            (
                "badkey.json",
                br#"{"0": "SELECT 1", "q1": "SELECT 2"}"#,
                r#"badkey.json at ["q1"]: key "q1" is not a question index"#,
            ),
            (
                "sign.json",
                br#"{"+1": "SELECT 1"}"#,
                r#"sign.json at ["+1"]: key "+1" is not a question index"#,
            ),
            (
                "dup.json",
                br#"{"1": "SELECT 1", "01": "SELECT 2"}"#,
                r#"repeats question index 1"#,
            ),
            (
                "number.json",
                br#"{"0": 5}"#,
                r#"number.json at ["0"]: expected a string"#,
            ),
            (
                "array.json",
                b"[]",
                "array.json at $: expected a JSON object",
            ),
            ("empty.json", b"", "empty.json line 1: the file is empty"),
            (
                "broken.json",
                b"{\"0\": \"SELECT 1\",\n \"1\" \"x\"}",
                "broken.json line 2 column 6: invalid JSON: expected `:`",
            ),
        ];
        for (name, bytes, expected) in cases {
            let path = write(&dir, name, bytes);
            let text = err_text(load_bird_predictions(&path));
            assert!(text.contains(expected), "{name}: {text}");
        }
    }

    #[test]
    fn bird_questions_accept_missing_optional_fields_and_reject_bad_labels() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "dev.json",
            br#"[{"question_id": 7, "db_id": "a", "question": "q", "evidence": "e",
                  "SQL": "SELECT 1", "difficulty": "Moderate"},
                 {"db_id": "b", "question": "q", "evidence": "", "SQL": "SELECT 2"}]"#,
        );
        let entries = load_bird_entries(&path, "mini").unwrap();
        assert_eq!(entries[0].question_id, Some(7));
        assert_eq!(entries[0].question.id, "mini-0");
        assert_eq!(entries[0].question.evidence, "e");
        assert_eq!(entries[0].question.difficulty, Some(Difficulty::Moderate));
        assert_eq!(entries[1].question_id, None);
        assert_eq!(entries[1].question.difficulty, None);
        assert_eq!(entries[1].question.gold_sql, "SELECT 2");

        let cases: [(&str, &[u8], &str); 4] = [
            (
                "label.json",
                br#"[{"db_id": "a", "question": "q", "evidence": "", "SQL": "s", "difficulty": "hard"}]"#,
                r#"label.json at [0].difficulty: unknown difficulty "hard""#,
            ),
            (
                "qid.json",
                br#"[{"question_id": -1, "db_id": "a", "question": "q", "evidence": "", "SQL": "s"}]"#,
                "qid.json at [0].question_id: expected a non-negative integer, found number -1",
            ),
            (
                "sql.json",
                br#"[{"db_id": "a", "question": "q", "evidence": ""}]"#,
                "sql.json at [0]: missing field `SQL`",
            ),
            (
                "evidence.json",
                br#"[{"db_id": "a", "question": "q", "evidence": null, "SQL": "s"}]"#,
                "evidence.json at [0].evidence: expected a string, found null",
            ),
        ];
        for (name, bytes, expected) in cases {
            let path = write(&dir, name, bytes);
            let text = load_bird_questions(&path, "dev").unwrap_err().to_string();
            assert!(text.contains(expected), "{name}: {text}");
        }
    }
}
