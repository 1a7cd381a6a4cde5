//! Generated records in the BIRD-Interact task format, WITH ground truth, their append-only
//! files, and the per-database metafiles that let [`merit_interact_env::TaskSet::load`] read them back.
//!
//! A generated record is a task file line and a ground-truth line in one: `TaskSet::load`
//! reads it as a task (the hidden fields land in `HiddenTask`, out of the agent's reach) and
//! ignores the extra `generation` object. Unlike `HiddenTask`, [`GeneratedTask`] is
//! `Serialize`: it is the writer's type, and nothing agent-facing ever holds one.

use super::perturb::{Perturbation, Target};
use super::request::{Draft, DraftAmbiguity};
use super::sqlast;
use super::{io_error, GenError};
use merit_data::{
    quote_identifier, render_create_tables, ColumnSchema, DatabaseSchema, ForeignKey, TableSchema,
};
use merit_journal::jsonl;
use merit_sql::{Database, ExecLimits, SqliteDatabase};
use serde::{Deserialize, Serialize};
use sqlparser::ast::SetExpr;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The value of `generation.format` in every record this module writes.
pub const GEN_RECORD_FORMAT: &str = "merit-interact-gen-v1";

/// One ambiguity entry as task files write it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AmbiguityEntry {
    /// The vague words in `amb_user_query`.
    pub term: String,
    /// The settling fragment of `sol_sql`.
    pub sql_snippet: String,
    /// Upstream's flag; we set it on critical entries (upstream data does the same, and no
    /// code reads it).
    pub is_mask: bool,
    /// One of the eight ambiguity types (`knowledge_ambiguity` in `knowledge_ambiguity`).
    #[serde(rename = "type")]
    pub kind: String,
    /// For a knowledge ambiguity: the id of the knowledge-base entry the task hides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_knowledge: Option<i64>,
}

/// `user_query_ambiguity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct UserQueryAmbiguity {
    /// Entries that count in the budget.
    pub critical_ambiguity: Vec<AmbiguityEntry>,
    /// Entries that do not (we put sort ambiguities here, as upstream's data does).
    pub non_critical_ambiguity: Vec<AmbiguityEntry>,
}

/// `conditions`. Only `order` is read by the judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenConditions {
    /// Upstream's decimal setting; `-1` (none) for generated tasks.
    pub decimal: i64,
    /// The top-level SELECT is DISTINCT.
    pub distinct: bool,
    /// The top-level query has ORDER BY, so row order is judged.
    pub order: bool,
}

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// [`GEN_RECORD_FORMAT`].
    pub format: String,
    /// The target id (what resuming keys on).
    pub target_id: String,
    /// The seed id.
    pub seed_id: String,
    /// The seed's SQL.
    pub seed_sql: String,
    /// The perturbations applied to the seed.
    pub perturbations: Vec<Perturbation>,
    /// The model's `id()`.
    pub model: String,
    /// The prompt family.
    pub prompt_family: String,
}

/// A generated task with its ground truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GeneratedTask {
    /// `{db}_g{target_id}`.
    pub instance_id: String,
    /// The database.
    pub selected_database: String,
    /// The underspecified request (what the agent sees).
    pub amb_user_query: String,
    /// The fully specified request (hidden).
    pub query: String,
    /// Always empty (read tasks).
    pub preprocess_sql: Vec<String>,
    /// Always empty (read tasks).
    pub clean_up_sqls: Vec<String>,
    /// The target SQL.
    pub sol_sql: Vec<String>,
    /// Ids of the knowledge-base entries the target relies on ([`super::knowledge`]; empty
    /// without one).
    pub external_knowledge: Vec<i64>,
    /// Empty for Query tasks (the default test); the state checks of a Management task.
    pub test_cases: Vec<String>,
    /// `Query` or `Management`.
    pub category: String,
    /// Judge conditions.
    pub conditions: GenConditions,
    /// The ambiguity map.
    pub user_query_ambiguity: UserQueryAmbiguity,
    /// The knowledge-base entry the task hides, when it hides one ([`super::knowledge`]).
    pub knowledge_ambiguity: Vec<AmbiguityEntry>,
    /// The knowledge-base entry this record added to its database's `{db}_kb.jsonl` (the task
    /// file is the source of truth the knowledge base is rebuilt from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knowledge_entry: Option<super::knowledge::KnowledgeLine>,
    /// The phase-2 follow-up with its ground truth, when the target has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_up: Option<GenFollowUp>,
    /// Provenance (ignored by `TaskSet`).
    pub generation: Provenance,
}

/// `follow_up` as task files write it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenFollowUp {
    /// The follow-up request.
    pub query: String,
    /// Its ground truth.
    pub sol_sql: Vec<String>,
    /// `Query`.
    pub category: String,
    /// How it was derived (`count`, `first_three`, `distinct_count`).
    pub operation: String,
}

impl GeneratedTask {
    /// Builds the record for a verified draft.
    pub fn new(target: &Target, draft: &Draft, model_id: &str) -> GeneratedTask {
        let query = sqlast::parse_query(&target.sql);
        let (distinct, order) = query.as_ref().map_or((false, false), |q| {
            let distinct = matches!(q.body.as_ref(), SetExpr::Select(s) if s.distinct.is_some());
            (distinct, q.order_by.is_some())
        });
        let mut ambiguity = UserQueryAmbiguity::default();
        for DraftAmbiguity {
            term,
            sql_snippet,
            kind,
        } in &draft.ambiguities
        {
            let critical = kind != "sort_ambiguity";
            let entry = AmbiguityEntry {
                // The request's own spelling: verification matched the term ignoring case.
                term: super::verify::find_term(&draft.amb_query, term)
                    .unwrap_or(term)
                    .to_string(),
                sql_snippet: sql_snippet.clone(),
                is_mask: critical,
                kind: kind.clone(),
                deleted_knowledge: None,
            };
            if critical {
                ambiguity.critical_ambiguity.push(entry);
            } else {
                ambiguity.non_critical_ambiguity.push(entry);
            }
        }
        let (category, test_cases) = match &target.write {
            Some(write) => ("Management", write.test_cases.clone()),
            None => ("Query", Vec::new()),
        };
        GeneratedTask {
            instance_id: format!("{}_g{}", target.db_id, target.target_id),
            selected_database: target.db_id.clone(),
            amb_user_query: draft.amb_query.clone(),
            query: draft.clear_query.clone(),
            preprocess_sql: Vec::new(),
            clean_up_sqls: Vec::new(),
            sol_sql: vec![target.sql.clone()],
            external_knowledge: Vec::new(),
            test_cases,
            category: category.to_string(),
            conditions: GenConditions {
                decimal: -1,
                distinct,
                order,
            },
            user_query_ambiguity: ambiguity,
            knowledge_ambiguity: Vec::new(),
            knowledge_entry: None,
            follow_up: target.follow_up.as_ref().map(|f| GenFollowUp {
                query: f.query.clone(),
                sol_sql: vec![f.sql.clone()],
                category: "Query".to_string(),
                operation: f.operation.clone(),
            }),
            generation: Provenance {
                format: GEN_RECORD_FORMAT.to_string(),
                target_id: target.target_id.clone(),
                seed_id: target.seed_id.clone(),
                seed_sql: target.seed_sql.clone(),
                perturbations: target.perturbations.clone(),
                model: model_id.to_string(),
                prompt_family: super::GEN_PROMPT_FAMILY.to_string(),
            },
        }
    }

    /// The target id this record was made from.
    pub fn target_id(&self) -> &str {
        &self.generation.target_id
    }
}

/// One line of the rejection log: a target that produced no record, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectionLine {
    /// [`GEN_RECORD_FORMAT`].
    pub format: String,
    /// The target id.
    pub target_id: String,
    /// Every reason, in [`super::RejectReason`] order.
    pub reasons: Vec<super::RejectReason>,
    /// For a malformed reply: what was wrong with the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The last well-formed draft, when there was one (kept so a rejection can be inspected,
    /// and the checks tuned, without asking the model again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<Draft>,
}

/// The generator's view of a shared JSONL failure.
fn from_jsonl(error: jsonl::JsonlError) -> GenError {
    match error {
        jsonl::JsonlError::Io { path, source } => GenError::Io { path, source },
        jsonl::JsonlError::Corrupt {
            path,
            line,
            message,
        } => GenError::Corrupt {
            path,
            line,
            message,
        },
    }
}

/// Reads the complete lines of a JSONL file (`merit_journal::jsonl`); a missing file is empty.
/// A last line without its newline (a crash mid-write) is returned separately as its byte
/// length and not parsed.
fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<(Vec<T>, usize), GenError> {
    let (records, ending) = jsonl::read_all(path, jsonl::Tail::Torn, |line: &[u8]| {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        serde_json::from_slice(line)
            .map(Some)
            .map_err(|e| format!("not a generator record ({e})"))
    })
    .map_err(from_jsonl)?;
    Ok((records, ending.torn.map_or(0, |torn| torn.bytes)))
}

/// Reads a generated task file (a torn last line is ignored).
pub fn read_generated(path: &Path) -> Result<Vec<GeneratedTask>, GenError> {
    read_lines(path).map(|(records, _)| records)
}

/// Rewrites a generated task file with `tasks`, atomically (for stages that change finished
/// records, such as [`super::knowledge::add_knowledge`]).
pub fn rewrite_generated(path: &Path, tasks: &[GeneratedTask]) -> Result<(), GenError> {
    let mut text = String::new();
    for task in tasks {
        let line = serde_json::to_string(task).map_err(|e| GenError::Corrupt {
            path: path.to_path_buf(),
            line: 0,
            message: format!("a record could not be written as JSON ({e})"),
        })?;
        text.push_str(&line);
        text.push('\n');
    }
    write_atomic(path, text.as_bytes())
}

/// Reads a rejection log (a torn last line is ignored).
pub fn read_rejections(path: &Path) -> Result<Vec<RejectionLine>, GenError> {
    read_lines(path).map(|(records, _)| records)
}

/// An append-only JSONL file: one `write_all` per line, then `fsync` (`merit_journal::jsonl`).
#[derive(Debug)]
pub(crate) struct AppendFile {
    appender: jsonl::Appender,
}

impl AppendFile {
    /// Opens `path` for appending after cutting off a torn last line (`torn` bytes).
    pub(crate) fn open(path: &Path, torn: usize) -> Result<AppendFile, GenError> {
        if path.exists() {
            jsonl::truncate_torn_tail(path, torn).map_err(from_jsonl)?;
        }
        Ok(AppendFile {
            appender: jsonl::Appender::open(path).map_err(from_jsonl)?,
        })
    }

    pub(crate) fn append<T: Serialize>(&mut self, record: &T) -> Result<(), GenError> {
        self.appender.append_record(record).map_err(from_jsonl)
    }
}

/// What is already in the output and rejection files.
pub(crate) struct Existing {
    pub(crate) done: BTreeSet<String>,
    pub(crate) written: usize,
    pub(crate) rejections: Vec<RejectionLine>,
    pub(crate) torn_output: usize,
    pub(crate) torn_rejections: usize,
}

pub(crate) fn existing(output: &Path, rejections: &Path) -> Result<Existing, GenError> {
    let (tasks, torn_output) = read_lines::<GeneratedTask>(output)?;
    let (rejected, torn_rejections) = read_lines::<RejectionLine>(rejections)?;
    let mut done = BTreeSet::new();
    for task in &tasks {
        done.insert(task.target_id().to_string());
    }
    for line in &rejected {
        done.insert(line.target_id.clone());
    }
    Ok(Existing {
        done,
        written: tasks.len(),
        rejections: rejected,
        torn_output,
        torn_rejections,
    })
}

/// The schema of a live SQLite database, read from the database itself (`sqlite_master` and
/// the `pragma_table_info` / `pragma_foreign_key_list` table functions, read-only): tables in
/// creation order, columns in declaration order with their declared type and primary-key
/// membership, single-column foreign keys. For a user's own database, which has no
/// `tables.json`; SQLite's own `sqlite_*` tables are left out.
pub fn schema_of_sqlite(sqlite_file: &Path, db_id: &str) -> Result<DatabaseSchema, GenError> {
    let failure = |message: String| GenError::Database {
        database: db_id.to_string(),
        message,
    };
    let database = SqliteDatabase::open(sqlite_file).map_err(|e| failure(e.to_string()))?;
    let limits = ExecLimits {
        timeout: Duration::from_secs(10),
        max_rows: None,
    };
    // NULL reads as empty: a foreign key to the referenced table's primary key may leave its
    // `to` column NULL.
    let text = |row: &[merit_sql::Value], at: usize| -> String {
        match row.get(at) {
            None | Some(merit_sql::Value::Null) => String::new(),
            Some(value) => value.display(),
        }
    };
    let tables = database
        .query(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND lower(name) NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid",
            &limits,
        )
        .map_err(|e| failure(format!("listing the tables: {e}")))?;
    let mut schema = DatabaseSchema {
        db_id: db_id.to_string(),
        tables: Vec::new(),
    };
    for row in &tables.rows {
        let name = text(row, 0);
        let quoted = name.replace('\'', "''");
        let columns = database
            .query(
                &format!("SELECT name, type, pk FROM pragma_table_info('{quoted}') ORDER BY cid"),
                &limits,
            )
            .map_err(|e| failure(format!("reading the columns of {name}: {e}")))?;
        let keys = database
            .query(
                &format!(
                    "SELECT \"from\", \"table\", \"to\" FROM pragma_foreign_key_list('{quoted}') \
                     ORDER BY id, seq"
                ),
                &limits,
            )
            .map_err(|e| failure(format!("reading the foreign keys of {name}: {e}")))?;
        schema.tables.push(TableSchema {
            columns: columns
                .rows
                .iter()
                .map(|column| ColumnSchema {
                    name: text(column, 0),
                    sql_type: text(column, 1),
                    primary_key: text(column, 2) != "0",
                })
                .collect(),
            foreign_keys: keys
                .rows
                .iter()
                .map(|key| ForeignKey {
                    column: text(key, 0),
                    ref_table: text(key, 1),
                    ref_column: text(key, 2),
                })
                .collect(),
            name,
        });
    }
    if schema.tables.is_empty() {
        return Err(failure(format!(
            "{} holds no tables",
            sqlite_file.display()
        )));
    }
    Ok(schema)
}

/// Writes the three BIRD-Interact metafiles of a Spider database into `out_root/{db}/`, so that
/// [`merit_interact_env::TaskSet::load`] can load generated tasks with `out_root` as its database root:
///
/// * `{db}_schema.txt`: the `CREATE TABLE` text followed, per table, by up to three sample
///   rows (upstream's schema files show three), read through `merit_sql` read-only;
/// * `{db}_column_meaning_base.json`: `{}` (Spider has no column descriptions);
/// * `{db}_kb.jsonl`: empty unless it exists (generation with knowledge entries keeps it,
///   [`super::knowledge`]).
///
/// With `copy_database`, the SQLite file is copied to `{db}.sqlite` beside them, which the
/// environment needs to run the tasks. Files are written to a temporary name and renamed.
pub fn write_spider_metafiles(
    out_root: &Path,
    schema: &DatabaseSchema,
    sqlite_file: &Path,
    copy_database: bool,
) -> Result<PathBuf, GenError> {
    let db = &schema.db_id;
    let dir = out_root.join(db);
    std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let database = SqliteDatabase::open(sqlite_file).map_err(|e| GenError::Database {
        database: db.clone(),
        message: e.to_string(),
    })?;
    let mut text = render_create_tables(schema);
    let limits = ExecLimits {
        timeout: Duration::from_secs(10),
        max_rows: Some(3),
    };
    for table in &schema.tables {
        if table.name.to_ascii_lowercase().starts_with("sqlite_") {
            continue;
        }
        let sql = format!("SELECT * FROM {} LIMIT 3", quote_identifier(&table.name));
        let rows = database
            .query(&sql, &limits)
            .map_err(|e| GenError::Database {
                database: db.clone(),
                message: format!("sampling {}: {e}", table.name),
            })?;
        text.push_str(&format!("\nFirst rows of {}:\n", table.name));
        text.push_str(&rows.columns.join(" | "));
        text.push('\n');
        for row in &rows.rows {
            let cells: Vec<String> = row.iter().map(|v| v.display()).collect();
            text.push_str(&cells.join(" | "));
            text.push('\n');
        }
    }
    write_atomic(&dir.join(format!("{db}_schema.txt")), text.as_bytes())?;
    write_atomic(&dir.join(format!("{db}_column_meaning_base.json")), b"{}\n")?;
    let knowledge = dir.join(format!("{db}_kb.jsonl"));
    if !knowledge.exists() {
        write_atomic(&knowledge, b"")?;
    }
    if copy_database {
        // The one atomic-replacement mechanism (synced, and named so that a folder's claim
        // sweeps up what a kill leaves behind).
        let target = dir.join(format!("{db}.sqlite"));
        let temp = merit_core::fs::temporary_beside(&target);
        if let Err(error) = std::fs::copy(sqlite_file, &temp) {
            let _ = std::fs::remove_file(&temp);
            return Err(io_error(&temp)(error));
        }
        merit_core::fs::persist(&temp, &target).map_err(io_error(&target))?;
    }
    Ok(dir)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), GenError> {
    merit_core::fs::write_atomically(path, bytes).map_err(io_error(path))
}
