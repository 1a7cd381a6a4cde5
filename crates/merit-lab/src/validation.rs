//! The classifier's validation in the layout of the repair paper's Table 5: every failing
//! (gold, prediction) pair of a file is judged by the oracle (the component the repair loop
//! asks, so the status and DBMS text are the ones the classifier sees in a run), classified,
//! and compared with the AST reference labeler's label.

use merit_core::{Benchmark, Question, Status};
use merit_data::DatabaseDir;
use merit_eval::spider_text::{
    join_spaced_operators, replace_current_year, replace_value_placeholder,
};
use merit_eval::{EvalConfig, Evaluator, Oracle};
use merit_memory::classify::classify;
use merit_memory::{reference_label, FailureType, ReferenceSchema, ValidationReport};
use merit_sql::{Database, ExecLimits, SqliteDatabase};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Why a validation could not run.
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// The pairs file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A line of the pairs file is not a pair.
    #[error("{} line {line}: {message}", path.display())]
    Pair {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A database's names could not be read.
    #[error("database {}: {message}", path.display())]
    Schema {
        /// The database file.
        path: PathBuf,
        /// The engine's message.
        message: String,
    },
}

/// One pair of the input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// 1-based line in the file.
    pub line: usize,
    /// The pair's id (`line-N` when the file has none).
    pub id: String,
    /// Its database.
    pub db_id: String,
    /// The gold SQL.
    pub gold: String,
    /// The predicted SQL.
    pub pred: String,
    /// The file's own Spider verdict, when it has one (`0`/`1`; other values are `None`).
    pub spider_exec: Option<u8>,
}

/// Reads a JSONL file of pairs with string fields `db_id`, `gold`, `pred` (and optionally
/// `id` and a numeric `spider_exec`).
pub fn read_pairs(path: &Path) -> Result<Vec<Pair>, ValidationError> {
    let text = std::fs::read_to_string(path).map_err(|source| ValidationError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut pairs = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: &str| ValidationError::Pair {
            path: path.to_path_buf(),
            line: number + 1,
            message: message.to_string(),
        };
        let record: serde_json::Value = serde_json::from_str(line).map_err(|_| bad("not JSON"))?;
        let field = |name: &str| record[name].as_str().map(str::to_string);
        let (Some(db_id), Some(gold), Some(pred)) = (field("db_id"), field("gold"), field("pred"))
        else {
            return Err(bad("needs string fields db_id, gold and pred"));
        };
        pairs.push(Pair {
            line: number + 1,
            id: field("id").unwrap_or_else(|| format!("line-{}", number + 1)),
            db_id,
            gold,
            pred,
            spider_exec: record["spider_exec"]
                .as_u64()
                .and_then(|v| u8::try_from(v).ok()),
        });
    }
    Ok(pairs)
}

/// Table and column names of a SQLite database, read through the read-only connection.
pub fn schema_names(path: &Path) -> Result<ReferenceSchema, ValidationError> {
    let fail = |e: merit_sql::ExecError| ValidationError::Schema {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let database = SqliteDatabase::open(path).map_err(fail)?;
    let limits = ExecLimits::AGENT;
    let tables = database
        .query(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')",
            &limits,
        )
        .map_err(fail)?;
    let mut out = Vec::new();
    for row in tables.rows {
        let Some(name) = row.first().and_then(|v| v.as_text()).map(str::to_string) else {
            continue;
        };
        let quoted = name.replace('"', "\"\"");
        let columns = database
            .query(&format!("PRAGMA table_info(\"{quoted}\")"), &limits)
            .map_err(fail)?;
        let names: Vec<String> = columns
            .rows
            .iter()
            .filter_map(|row| row.get(1).and_then(|v| v.as_text()).map(str::to_string))
            .collect();
        out.push((name, names));
    }
    Ok(ReferenceSchema::new(out))
}

/// One failing pair, labelled by the classifier and by the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labelled {
    /// Index of the pair in the file's pairs.
    pub pair: usize,
    /// The oracle's status.
    pub status: Status,
    /// The DBMS text.
    pub error: Option<String>,
    /// The classifier's label.
    pub predicted: FailureType,
    /// The classifier rule that fired.
    pub rule: &'static str,
    /// The reference labeler's label.
    pub reference: FailureType,
    /// Why the reference chose it.
    pub reason: String,
}

/// What a validation found.
#[derive(Debug)]
pub struct Validation {
    /// Pairs read.
    pub pairs: Vec<Pair>,
    /// Pairs not marked correct in the file whose database is there.
    pub selected: usize,
    /// Of those, judged correct now (not failures).
    pub judged_correct: usize,
    /// Pairs the oracle or the labeler could not handle, with the reason.
    pub skipped: Vec<String>,
    /// Pairs without a database.
    pub unavailable: usize,
    /// The labelled failures.
    pub labelled: Vec<Labelled>,
    /// Table 5 and the details.
    pub report: ValidationReport,
}

/// Validates the classifier on the failing pairs of `pairs_path` over the databases in
/// `db_dir` (each query under `timeout`); `dataset` names the table. `on_pair(total)` is
/// called once per judged pair with the number of pairs to judge (progress).
pub fn validate(
    pairs_path: &Path,
    db_dir: &Path,
    timeout: Duration,
    dataset: String,
    on_pair: &(dyn Fn(usize) + Sync),
) -> Result<Validation, ValidationError> {
    let pairs = read_pairs(pairs_path)?;
    let databases = DatabaseDir::new(db_dir);
    // Each pair becomes a question of its own so that the oracle — the same component the
    // repair loop asks — produces the status and error text the classifier sees.
    let questions: Vec<Question> = pairs
        .iter()
        .enumerate()
        .map(|(index, pair)| Question {
            id: format!("{}#{}", pair.id, pair.line),
            index,
            db_id: pair.db_id.clone(),
            question: String::new(),
            evidence: String::new(),
            gold_sql: pair.gold.clone(),
            difficulty: None,
        })
        .collect();
    let evaluator = Arc::new(Evaluator::new(EvalConfig {
        query_timeout: timeout,
        ..EvalConfig::default()
    }));
    let (oracle, availability) = Oracle::new(Benchmark::Spider, evaluator, &questions, &databases);
    let mut schemas: BTreeMap<String, ReferenceSchema> = BTreeMap::new();
    for pair in &pairs {
        if schemas.contains_key(&pair.db_id) {
            continue;
        }
        if let Ok(path) = databases.locate(&pair.db_id) {
            schemas.insert(pair.db_id.clone(), schema_names(&path)?);
        }
    }
    let selected: Vec<usize> = (0..pairs.len())
        .filter(|&i| pairs[i].spider_exec != Some(1))
        .filter(|&i| schemas.contains_key(&pairs[i].db_id))
        .collect();
    let outcomes: Vec<Result<Option<Labelled>, String>> = selected
        .par_iter()
        .map(|&i| {
            let pair = &pairs[i];
            let result =
                label_pair(&oracle, &questions[i].id, pair, &schemas[&pair.db_id]).map(|found| {
                    found.map(|mut l| {
                        l.pair = i;
                        l
                    })
                });
            on_pair(selected.len());
            result
        })
        .collect();
    let mut labelled = Vec::new();
    let mut judged_correct = 0;
    let mut skipped = Vec::new();
    for (outcome, &i) in outcomes.into_iter().zip(&selected) {
        match outcome {
            Ok(Some(found)) => labelled.push(found),
            Ok(None) => judged_correct += 1,
            Err(why) => skipped.push(format!("{} (line {}): {why}", pairs[i].id, pairs[i].line)),
        }
    }
    let report =
        ValidationReport::new(dataset, labelled.iter().map(|l| (l.predicted, l.reference)));
    Ok(Validation {
        selected: selected.len(),
        judged_correct,
        skipped,
        unavailable: availability.unavailable.values().sum(),
        labelled,
        report,
        pairs,
    })
}

/// Judges one pair; `Ok(None)` when the oracle says it is correct.
fn label_pair(
    oracle: &Oracle,
    question_id: &str,
    pair: &Pair,
    schema: &ReferenceSchema,
) -> Result<Option<Labelled>, String> {
    let feedback = oracle
        .judge(question_id, &pair.pred)
        .map_err(|e| e.to_string())?;
    let Some(classified) = classify(feedback.status, feedback.error.as_deref()) else {
        return Ok(None);
    };
    // The labeler compares the queries as the Spider evaluator executes them: its text
    // rewrites (`value` → `1` in the prediction, `> =` → `>=`, `YEAR(CURDATE())`) can turn a
    // harmless prediction into a failing one, and the reference should see why.
    let executed_pred = replace_current_year(&join_spaced_operators(&replace_value_placeholder(
        &pair.pred,
    )));
    let executed_gold = replace_current_year(&join_spaced_operators(&pair.gold));
    let reference = reference_label(&executed_pred, &executed_gold, feedback.status, schema)
        .map_err(|e| e.to_string())?;
    Ok(Some(Labelled {
        pair: 0,
        status: feedback.status,
        error: feedback.error,
        predicted: classified.failure_type,
        rule: classified.rule,
        reference: reference.failure_type,
        reason: reference.reason,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_read_with_their_lines_and_bad_lines_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pairs.jsonl");
        std::fs::write(
            &path,
            "{\"db_id\": \"a\", \"gold\": \"SELECT 1\", \"pred\": \"SELECT 2\", \"spider_exec\": 0}\n\n\
             {\"id\": \"x\", \"db_id\": \"b\", \"gold\": \"SELECT 1\", \"pred\": \"SELECT 1\"}\n",
        )
        .unwrap();
        let pairs = read_pairs(&path).unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!((pairs[0].line, pairs[0].id.as_str()), (1, "line-1"));
        assert_eq!(pairs[0].spider_exec, Some(0));
        assert_eq!((pairs[1].line, pairs[1].id.as_str()), (3, "x"));
        std::fs::write(&path, "{\"db_id\": \"a\"}\n").unwrap();
        let error = read_pairs(&path).unwrap_err();
        assert!(
            error.to_string().contains("line 1: needs string fields"),
            "{error}"
        );
    }
}
