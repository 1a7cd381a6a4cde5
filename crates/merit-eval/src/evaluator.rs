//! The two official execution evaluators, reproduced verdict for verdict.

use crate::compare::{spider_result_eq, BirdSetMatcher, Equivalence, Rows, DEFAULT_SEARCH_BUDGET};
use crate::python::PyValue;
use crate::spider_sql::{spider_hardness, SpiderSchema};
use crate::spider_text::{
    join_spaced_operators, remove_distinct, replace_current_year, replace_value_placeholder,
};
use merit_core::Hardness;
use merit_sql::{Database, ExecError, ExecLimits, SqliteDatabase, SqliteOptions};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings shared by both evaluators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalConfig {
    /// Wall-clock limit for one query (gold or prediction). The BIRD script allows 30 s for
    /// the pair; Spider's own 60 s limit never fires (it wraps blocking code in asyncio), so
    /// the same 30 s per query is applied to both here.
    pub query_timeout: Duration,
    /// Work budget of Spider's column-permutation search (see [`crate::compare`]).
    pub search_budget: u64,
    /// Open benchmark databases with SQLite's `immutable=1` (no locking); only for files
    /// nothing writes during the evaluation.
    pub immutable_databases: bool,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            query_timeout: Duration::from_secs(30),
            search_budget: DEFAULT_SEARCH_BUDGET,
            immutable_databases: false,
        }
    }
}

/// Why a pair scored what it scored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Same denotation: scores 1.
    Match,
    /// The prediction executed but its result differs: scores 0.
    Mismatch,
    /// The prediction failed to execute: scores 0.
    PredictionError(String),
    /// The prediction ran past the time limit: scores 0.
    PredictionTimeout,
    /// The gold query failed. The Spider script stops with an assertion there; BIRD scores 0.
    /// merit scores 0 and reports it.
    GoldError(String),
    /// The prediction holds no SQL statement at all. The Spider script crashes on it (it
    /// indexes the first parsed statement); merit scores 0.
    EmptyPrediction,
    /// The column-permutation search exceeded its budget: scored 0 and reported.
    Undecided,
}

impl Verdict {
    /// The official per-example score.
    pub fn score(&self) -> u8 {
        u8::from(matches!(self, Verdict::Match))
    }

    /// A short machine-readable tag.
    pub fn tag(&self) -> &'static str {
        match self {
            Verdict::Match => "match",
            Verdict::Mismatch => "mismatch",
            Verdict::PredictionError(_) => "prediction_error",
            Verdict::PredictionTimeout => "prediction_timeout",
            Verdict::GoldError(_) => "gold_error",
            Verdict::EmptyPrediction => "empty_prediction",
            Verdict::Undecided => "undecided",
        }
    }

    /// The DBMS message behind the verdict, if any.
    pub fn message(&self) -> Option<&str> {
        match self {
            Verdict::PredictionError(message) | Verdict::GoldError(message) => Some(message),
            _ => None,
        }
    }
}

type GoldCache = Mutex<HashMap<(PathBuf, String), Arc<Result<Rows, ExecError>>>>;
type SchemaCache = Mutex<HashMap<PathBuf, Arc<Result<SpiderSchema, ExecError>>>>;

/// A Spider prediction's rows on `database` (any engine), read leniently as the reference
/// does, stopping as soon as there are more than `gold_len`: `Ok(None)` then, since the
/// reference would find them different.
pub fn fetch_prediction_rows(
    database: &dyn merit_sql::Database,
    sql: &str,
    limits: &ExecLimits,
    gold_len: usize,
) -> Result<Option<Rows>, ExecError> {
    let mut rows = Vec::new();
    let mut too_many = false;
    database.for_each_row(sql, limits, &mut |row| {
        if rows.len() == gold_len {
            too_many = true;
            return ControlFlow::Break(());
        }
        rows.push(row.into_iter().map(PyValue::from_value_lenient).collect());
        ControlFlow::Continue(())
    })?;
    Ok((!too_many).then_some(rows))
}

/// Runs a normalised prediction elsewhere for [`Evaluator::spider_exec_with`]: its rows, or
/// `Ok(None)` once it has more rows than the gold's count (the second argument).
pub type FetchPrediction<'a> = dyn Fn(&str, usize) -> Result<Option<Rows>, ExecError> + 'a;

/// Runs both official comparisons with shared connection pools and gold-result caches.
///
/// Gold results are computed once per (database file, gold text) and kept, because every
/// evaluation of a question — each repair attempt, each mutation — compares against the same
/// gold. Safe to share across threads.
pub struct Evaluator {
    config: EvalConfig,
    databases: Mutex<HashMap<PathBuf, Arc<SqliteDatabase>>>,
    spider_gold: GoldCache,
    bird_gold: GoldCache,
    spider_schemas: SchemaCache,
}

impl Evaluator {
    /// An evaluator with the given settings.
    pub fn new(config: EvalConfig) -> Evaluator {
        Evaluator {
            config,
            databases: Mutex::new(HashMap::new()),
            spider_gold: Mutex::new(HashMap::new()),
            bird_gold: Mutex::new(HashMap::new()),
            spider_schemas: Mutex::new(HashMap::new()),
        }
    }

    /// The settings in force.
    pub fn config(&self) -> &EvalConfig {
        &self.config
    }

    fn database(&self, path: &Path) -> Result<Arc<SqliteDatabase>, ExecError> {
        let mut databases = self.databases.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(database) = databases.get(path) {
            return Ok(Arc::clone(database));
        }
        let options = SqliteOptions {
            immutable: self.config.immutable_databases,
        };
        let database = Arc::new(SqliteDatabase::open_with(path, options)?);
        databases.insert(path.to_path_buf(), Arc::clone(&database));
        Ok(database)
    }

    fn limits(&self) -> ExecLimits {
        ExecLimits::with_timeout(self.config.query_timeout)
    }

    fn gold_rows(
        &self,
        cache: &GoldCache,
        path: &Path,
        sql: &str,
        strict_text: bool,
    ) -> Arc<Result<Rows, ExecError>> {
        let key = (path.to_path_buf(), sql.to_string());
        if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Arc::clone(hit);
        }
        let computed = Arc::new(self.fetch_all(path, sql, strict_text));
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, Arc::clone(&computed));
        computed
    }

    fn fetch_all(&self, path: &Path, sql: &str, strict_text: bool) -> Result<Rows, ExecError> {
        let database = self.database(path)?;
        let mut rows = Vec::new();
        let mut undecodable = false;
        database.for_each_row(
            sql,
            &self.limits(),
            &mut |row| match convert_row(row, strict_text) {
                Some(row) => {
                    rows.push(row);
                    ControlFlow::Continue(())
                }
                None => {
                    undecodable = true;
                    ControlFlow::Break(())
                }
            },
        )?;
        if undecodable {
            return Err(undecodable_error());
        }
        Ok(rows)
    }

    /// Spider's hardness of `gold` on the schema of `db_path`; `None` where the reference
    /// parser cannot parse the gold (see [`crate::spider_sql::spider_hardness`]) or the
    /// database cannot be read.
    pub fn spider_hardness(&self, db_path: &Path, gold: &str) -> Option<Hardness> {
        let schema = {
            let cached = self
                .spider_schemas
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(db_path)
                .cloned();
            match cached {
                Some(schema) => schema,
                None => {
                    let schema = Arc::new(
                        self.database(db_path)
                            .and_then(|database| spider_schema_of(database.as_ref())),
                    );
                    self.spider_schemas
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(db_path.to_path_buf(), Arc::clone(&schema));
                    schema
                }
            }
        };
        let schema = schema.as_ref().as_ref().ok()?;
        spider_hardness(schema, gold)
    }

    /// Spider's test-suite execution match (`eval_exec_match` with default flags) for one pair.
    ///
    /// `db_path` is the question's database file; as in the reference, the comparison runs on
    /// every file whose name contains `.sqlite` in the same folder, and must hold on all.
    pub fn spider_exec(&self, db_path: &Path, gold: &str, prediction: &str) -> Verdict {
        let files = match sibling_sqlite_files(db_path) {
            Ok(files) => files,
            Err(message) => return Verdict::GoldError(message),
        };
        self.spider_exec_on(&files, gold, prediction, &|file, sql, gold_len| {
            self.fetch_spider_prediction(file, sql, gold_len)
        })
    }

    /// [`Evaluator::spider_exec`] with the prediction executed elsewhere: on another engine
    /// that holds a copy of the database (PostgreSQL). The pair is normalised as the reference
    /// does; the gold rows come from `db_path` alone (a copy has no test-suite siblings, so
    /// this is plain execution match on the one database); `fetch(sql, gold_rows)` runs the
    /// normalised prediction and returns its rows, or `Ok(None)` once it has more rows than
    /// the gold.
    pub fn spider_exec_with(
        &self,
        db_path: &Path,
        gold: &str,
        prediction: &str,
        fetch: &FetchPrediction<'_>,
    ) -> Verdict {
        self.spider_exec_on(
            &[db_path.to_path_buf()],
            gold,
            prediction,
            &|_, sql, gold_len| fetch(sql, gold_len),
        )
    }

    /// Spider's execution match over `files`: the gold on each file, the prediction through
    /// `fetch(file, sql, gold_rows)`.
    #[allow(clippy::type_complexity)]
    fn spider_exec_on(
        &self,
        files: &[PathBuf],
        gold: &str,
        prediction: &str,
        fetch: &dyn Fn(&Path, &str, usize) -> Result<Option<Rows>, ExecError>,
    ) -> Verdict {
        let prediction = join_spaced_operators(&replace_value_placeholder(prediction));
        let gold = join_spaced_operators(gold);
        let Some(prediction) = remove_distinct(&prediction) else {
            return Verdict::EmptyPrediction;
        };
        let Some(gold) = remove_distinct(&gold) else {
            return Verdict::GoldError("the gold query holds no SQL statement".to_string());
        };
        let order_matters = gold.to_lowercase().contains("order by");
        let gold = replace_current_year(&gold);
        let prediction = replace_current_year(&prediction);
        for file in files {
            let gold_rows = self.gold_rows(&self.spider_gold, file, &gold, false);
            let gold_rows = match gold_rows.as_ref() {
                Ok(rows) => rows,
                Err(error) => return Verdict::GoldError(error.to_string()),
            };
            let pred_rows = match fetch(file, &prediction, gold_rows.len()) {
                Ok(Some(rows)) => rows,
                Ok(None) => return Verdict::Mismatch,
                Err(error) if error.is_timeout() => return Verdict::PredictionTimeout,
                Err(error) => return Verdict::PredictionError(error.to_string()),
            };
            match spider_result_eq(
                gold_rows,
                &pred_rows,
                order_matters,
                self.config.search_budget,
            ) {
                Equivalence::Equal => {}
                Equivalence::Different => return Verdict::Mismatch,
                Equivalence::Undecided => return Verdict::Undecided,
            }
        }
        Verdict::Match
    }

    /// Fetches a Spider prediction, stopping as soon as it has more rows than the gold:
    /// the reference would then return "different" (or fail later, also 0), so the extra rows
    /// cannot change the verdict. `Ok(None)` means "too many rows".
    fn fetch_spider_prediction(
        &self,
        path: &Path,
        sql: &str,
        gold_len: usize,
    ) -> Result<Option<Rows>, ExecError> {
        let database = self.database(path)?;
        fetch_prediction_rows(database.as_ref(), sql, &self.limits(), gold_len)
    }

    /// BIRD's execution accuracy (`execute_model`) for one pair on `db_path`.
    ///
    /// The reference runs the prediction and then the gold on one connection and compares
    /// `set(pred) == set(gold)`; any error (including undecodable text) scores 0. The gold
    /// result is cached and the prediction is matched row by row as it streams.
    pub fn bird_ex(&self, db_path: &Path, gold: &str, prediction: &str) -> Verdict {
        let gold_rows = self.gold_rows(&self.bird_gold, db_path, gold, true);
        let gold_rows = match gold_rows.as_ref() {
            Ok(rows) => rows,
            Err(error) => {
                // The prediction still runs first in the reference; its failure is the more
                // useful message when both fail, and the score is 0 either way.
                return Verdict::GoldError(error.to_string());
            }
        };
        let database = match self.database(db_path) {
            Ok(database) => database,
            Err(error) => return Verdict::PredictionError(error.to_string()),
        };
        let mut matcher = BirdSetMatcher::new(gold_rows);
        let mut outside_gold = false;
        let mut undecodable = false;
        let outcome = database.for_each_row(prediction, &self.limits(), &mut |row| {
            let Some(row) = convert_row(row, true) else {
                undecodable = true;
                return ControlFlow::Break(());
            };
            if matcher.accept(&row) {
                ControlFlow::Continue(())
            } else {
                outside_gold = true;
                ControlFlow::Break(())
            }
        });
        match outcome {
            Err(error) if error.is_timeout() => Verdict::PredictionTimeout,
            Err(error) => Verdict::PredictionError(error.to_string()),
            Ok(_) if undecodable => Verdict::PredictionError(undecodable_error().to_string()),
            Ok(_) if outside_gold || !matcher.finish() => Verdict::Mismatch,
            Ok(_) => Verdict::Match,
        }
    }
}

/// The schema as the reference `get_schema` reads it: every table of `sqlite_master` with
/// its columns from `PRAGMA table_info` (the parser lower-cases the names).
pub fn spider_schema_of(database: &dyn Database) -> Result<SpiderSchema, ExecError> {
    let limits = ExecLimits::with_timeout(Duration::from_secs(30));
    let tables = database.query("SELECT name FROM sqlite_master WHERE type='table'", &limits)?;
    let mut schema = Vec::with_capacity(tables.rows.len());
    for row in tables.rows {
        let Some(name) = row
            .first()
            .and_then(|value| value.as_text())
            .map(str::to_string)
        else {
            continue;
        };
        let info = database.query(
            &format!("PRAGMA table_info(\"{}\")", name.replace('"', "\"\"")),
            &limits,
        )?;
        let columns = info
            .rows
            .iter()
            .filter_map(|column| column.get(1).and_then(|value| value.as_text()))
            .map(str::to_string)
            .collect();
        schema.push((name, columns));
    }
    Ok(SpiderSchema::new(schema))
}

fn convert_row(row: Vec<merit_sql::Value>, strict_text: bool) -> Option<Vec<PyValue>> {
    if strict_text {
        row.into_iter()
            .map(|value| PyValue::from_value_strict(value).ok())
            .collect()
    } else {
        Some(row.into_iter().map(PyValue::from_value_lenient).collect())
    }
}

fn undecodable_error() -> ExecError {
    ExecError::Sql {
        message: crate::python::UndecodableText.to_string(),
    }
}

/// Every file in `db_path`'s folder whose name contains `.sqlite`, sorted for determinism
/// (the reference uses directory order; the verdict needs all of them to agree anyway).
fn sibling_sqlite_files(db_path: &Path) -> Result<Vec<PathBuf>, String> {
    let folder = db_path.parent().unwrap_or_else(|| Path::new("."));
    let entries = std::fs::read_dir(folder)
        .map_err(|error| format!("cannot list database folder {}: {error}", folder.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().contains(".sqlite"))
        .map(|entry| entry.path())
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no .sqlite file in {}", folder.display()));
    }
    Ok(files)
}
