//! Tasks in the BIRD-Interact format, split by type into what the agent may see and what it
//! must never see (protocol §1).
//!
//! * [`PublicTask`]: instance id, database, ambiguous question. The only task data an
//!   agent-facing API hands out; it is `Serialize` so trajectories can carry it.
//! * [`HiddenTask`]: clear question, ambiguity maps, gold SQL, test cases, conditions, setup
//!   SQL and the follow-up. No `Serialize`, a `Debug` that prints nothing but counts, and no
//!   public accessor on [`Task`]: the environment reads it inside this crate, and a user
//!   simulator receives a view of it through [`crate::SimulatorContext`], which only the
//!   environment can build.
//!
//! The follow-up question is hidden too until phase 1 passes; the environment reveals it in the
//! submit observation.

use crate::error::LoadError;
use crate::json::{self, At};
use crate::meta::DatabaseMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What an agent is told about a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicTask {
    /// `{db}_{n}` or, for Management tasks, `{db}_M_{n}`.
    pub instance_id: String,
    /// The database the task runs on.
    pub selected_database: String,
    /// The ambiguous user question (the opening message).
    pub amb_user_query: String,
}

/// Whether a task is judged by result comparison or by test cases (protocol §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Category {
    /// A read task (BI): judged by the default result comparison.
    Query,
    /// A write task (DM): judged by the benchmark's Python test cases.
    Management,
}

impl Category {
    fn parse(text: &str) -> Option<Category> {
        match text {
            "Query" => Some(Category::Query),
            "Management" => Some(Category::Management),
            _ => None,
        }
    }

    /// The name used in task files.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Query => "Query",
            Category::Management => "Management",
        }
    }
}

/// One annotated ambiguity. Hidden material: the snippet is a verbatim piece of gold SQL.
#[derive(Clone)]
pub struct Ambiguity {
    term: String,
    sql_snippet: String,
    is_mask: bool,
    kind: String,
    deleted_knowledge: Option<i64>,
}

impl std::fmt::Debug for Ambiguity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ambiguity { <hidden> }")
    }
}

impl Ambiguity {
    /// The ambiguous wording, as it appears in the user question.
    pub fn term(&self) -> &str {
        &self.term
    }
    /// The gold SQL fragment that settles it.
    pub fn sql_snippet(&self) -> &str {
        &self.sql_snippet
    }
    /// The annotation's `is_mask` flag (read by no upstream code; kept for completeness).
    pub fn is_mask(&self) -> bool {
        self.is_mask
    }
    /// The ambiguity type, e.g. `schema_linking_ambiguity`.
    pub fn kind(&self) -> &str {
        &self.kind
    }
    /// For knowledge ambiguities: the id of the KB entry hidden from the agent.
    pub fn deleted_knowledge(&self) -> Option<i64> {
        self.deleted_knowledge
    }
}

/// The three ambiguity lists of a task. Hidden material.
#[derive(Clone, Default)]
pub struct AmbiguityMap {
    critical: Vec<Ambiguity>,
    non_critical: Vec<Ambiguity>,
    knowledge: Vec<Ambiguity>,
}

impl std::fmt::Debug for AmbiguityMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AmbiguityMap {{ critical: {}, non_critical: {}, knowledge: {} }}",
            self.critical.len(),
            self.non_critical.len(),
            self.knowledge.len()
        )
    }
}

impl AmbiguityMap {
    /// `user_query_ambiguity.critical_ambiguity`.
    pub fn critical(&self) -> &[Ambiguity] {
        &self.critical
    }
    /// `user_query_ambiguity.non_critical_ambiguity` (never counted in the budget).
    pub fn non_critical(&self) -> &[Ambiguity] {
        &self.non_critical
    }
    /// `knowledge_ambiguity`.
    pub fn knowledge(&self) -> &[Ambiguity] {
        &self.knowledge
    }
    /// `true` when all three lists are empty (phase 2's map).
    pub fn is_empty(&self) -> bool {
        self.critical.is_empty() && self.non_critical.is_empty() && self.knowledge.is_empty()
    }
}

/// `conditions` of a phase. Only `order` is ever read by the judge (protocol §6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Conditions {
    pub(crate) order: bool,
}

/// The ground truth of one phase.
#[derive(Clone, Default)]
pub(crate) struct PhaseTruth {
    pub(crate) sol_sql: Vec<String>,
    pub(crate) test_cases: Vec<String>,
    pub(crate) conditions: Conditions,
    pub(crate) category: Option<Category>,
}

/// The follow-up (phase 2) of a task.
#[derive(Clone, Default)]
pub(crate) struct FollowUp {
    pub(crate) query: String,
    pub(crate) truth: PhaseTruth,
}

/// Everything about a task that the agent must not see. See the module docs.
#[derive(Clone, Default)]
pub struct HiddenTask {
    pub(crate) clear_query: Option<String>,
    pub(crate) ambiguity: AmbiguityMap,
    pub(crate) phase1: PhaseTruth,
    pub(crate) follow_up: Option<FollowUp>,
    pub(crate) preprocess_sql: Vec<String>,
    pub(crate) clean_up_sqls: Vec<String>,
}

impl std::fmt::Debug for HiddenTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HiddenTask { <redacted> }")
    }
}

impl HiddenTask {
    /// The KB ids this task hides from the agent.
    pub(crate) fn deleted_knowledge(&self) -> BTreeSet<i64> {
        self.ambiguity
            .knowledge
            .iter()
            .filter_map(|a| a.deleted_knowledge)
            .collect()
    }
}

/// A task: the public part, its category, and the hidden part (not reachable from outside this
/// crate except through a simulator context).
#[derive(Clone)]
pub struct Task {
    public: PublicTask,
    category: Category,
    high_level: Option<bool>,
    hidden: HiddenTask,
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("public", &self.public)
            .field("category", &self.category)
            .field("hidden", &self.hidden)
            .finish()
    }
}

impl Task {
    /// What the agent may see.
    pub fn public(&self) -> &PublicTask {
        &self.public
    }
    /// The instance id.
    pub fn instance_id(&self) -> &str {
        &self.public.instance_id
    }
    /// The database name.
    pub fn database(&self) -> &str {
        &self.public.selected_database
    }
    /// Query or Management (for the judge and the BI/DM split of the metrics).
    pub fn category(&self) -> Category {
        self.category
    }
    /// mini-interact's `high_level` flag, when present.
    pub fn high_level(&self) -> Option<bool> {
        self.high_level
    }
    /// `true` when the phase-1 gold SQL is known (public releases ship it empty).
    pub fn has_ground_truth(&self) -> bool {
        !self.hidden.phase1.sol_sql.is_empty()
    }
    /// `true` when a non-empty follow-up question exists, i.e. the task has a phase 2.
    pub fn has_follow_up(&self) -> bool {
        self.hidden
            .follow_up
            .as_ref()
            .is_some_and(|f| !f.query.trim().is_empty())
    }
    /// Number of critical plus knowledge ambiguities: the `m` of the budget formula (the
    /// budget is shown to the agent, so this count is not secret).
    pub fn budget_ambiguities(&self) -> usize {
        self.hidden.ambiguity.critical.len() + self.hidden.ambiguity.knowledge.len()
    }
    pub(crate) fn hidden(&self) -> &HiddenTask {
        &self.hidden
    }
}

/// Loaded tasks plus the metafiles of every database they use.
#[derive(Debug, Clone, Default)]
pub struct TaskSet {
    tasks: Vec<Task>,
    index: BTreeMap<String, usize>,
    databases: BTreeMap<String, Arc<DatabaseMeta>>,
}

/// What [`TaskSet::merge_ground_truth`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Tasks that received ground truth.
    pub merged: usize,
    /// Ids in the ground-truth file with no task here (skipped), in file order.
    pub unknown_ids: Vec<String>,
    /// Tasks that still have no gold SQL after the merge.
    pub without_ground_truth: usize,
}

impl TaskSet {
    /// Loads a task file (JSONL, one record per line) and the metafiles of every database it
    /// uses. Metafiles are looked for in `db_root/{db}/` and, when that folder does not exist,
    /// in `db_root/` itself (both layouts occur).
    pub fn load(tasks_file: &Path, db_root: &Path) -> Result<TaskSet, LoadError> {
        let text = json::read_text(tasks_file)?;
        let mut set = TaskSet::default();
        for record in json::records(&text, tasks_file) {
            let (at, value) = record?;
            let task = parse_task(&value, at)?;
            if set.index.contains_key(task.instance_id()) {
                return Err(LoadError::DuplicateTask {
                    path: tasks_file.to_path_buf(),
                    line: at.line,
                    instance_id: task.instance_id().to_string(),
                });
            }
            if !set.databases.contains_key(task.database()) {
                let meta = load_meta(db_root, task.database(), task.instance_id())?;
                set.databases
                    .insert(task.database().to_string(), Arc::new(meta));
            }
            set.index
                .insert(task.instance_id().to_string(), set.tasks.len());
            set.tasks.push(task);
        }
        Ok(set)
    }

    /// Tasks in file order.
    pub fn tasks(&self) -> &[Task] {
        &self.tasks
    }

    /// The task with this id.
    pub fn get(&self, instance_id: &str) -> Option<&Task> {
        self.index.get(instance_id).map(|&i| &self.tasks[i])
    }

    /// The metafiles of a database used by some task.
    pub fn database(&self, name: &str) -> Option<&Arc<DatabaseMeta>> {
        self.databases.get(name)
    }

    /// All loaded databases, by name.
    pub fn databases(&self) -> &BTreeMap<String, Arc<DatabaseMeta>> {
        &self.databases
    }

    /// Gives every database without a file of its own the file `<dir>/<name>/<name>.sqlite`
    /// (the Spider layout) when it exists; returns how many were attached. Committed task sets
    /// carry only metafiles, so their databases come from the user's Spider copy.
    pub fn use_sqlite_dir(&mut self, dir: &Path) -> usize {
        let mut attached = 0;
        for (name, meta) in self.databases.iter_mut() {
            if meta.sqlite_file().is_some() {
                continue;
            }
            let file = dir.join(name).join(format!("{name}.sqlite"));
            if file.is_file() {
                *meta = Arc::new(meta.as_ref().clone().with_sqlite_file(file));
                attached += 1;
            }
        }
        attached
    }

    /// Merges a ground-truth file (JSONL keyed by `instance_id`) into the tasks. Every field
    /// present and non-empty in a ground-truth record replaces the task's: `sol_sql`,
    /// `test_cases`, `conditions`, `query`, `category`, `preprocess_sql`, `clean_up_sqls`,
    /// `follow_up`, and the ambiguity lists. The whole file is validated before anything
    /// changes, so a bad file leaves the set as it was.
    pub fn merge_ground_truth(&mut self, path: &Path) -> Result<MergeReport, LoadError> {
        let text = json::read_text(path)?;
        let mut records = Vec::new();
        for record in json::records(&text, path) {
            let (at, value) = record?;
            let map = json::object(&value, at, "(record)")?;
            let id = json::req_str(map, "instance_id", at, "")?;
            records.push((id, parse_truth(map, at)?));
        }
        let mut report = MergeReport::default();
        for (id, truth) in records {
            match self.index.get(&id) {
                Some(&i) => {
                    truth.apply(&mut self.tasks[i]);
                    report.merged += 1;
                }
                None => report.unknown_ids.push(id),
            }
        }
        report.without_ground_truth = self.tasks.iter().filter(|t| !t.has_ground_truth()).count();
        Ok(report)
    }
}

fn load_meta(db_root: &Path, database: &str, instance_id: &str) -> Result<DatabaseMeta, LoadError> {
    let folder = db_root.join(database);
    let dir: PathBuf = if folder.is_dir() {
        folder
    } else {
        db_root.to_path_buf()
    };
    for (what, file) in [
        ("schema file", format!("{database}_schema.txt")),
        (
            "column-meaning file",
            format!("{database}_column_meaning_base.json"),
        ),
        ("knowledge-base file", format!("{database}_kb.jsonl")),
    ] {
        let path = dir.join(file);
        if !path.is_file() {
            return Err(LoadError::MissingMetafile {
                instance_id: instance_id.to_string(),
                database: database.to_string(),
                what,
                path,
            });
        }
    }
    DatabaseMeta::load(&dir, database)
}

/// Ground-truth fields of one record; `None` means "not given here".
#[derive(Default)]
struct Truth {
    clear_query: Option<String>,
    category: Option<Category>,
    sol_sql: Option<Vec<String>>,
    test_cases: Option<Vec<String>>,
    conditions: Option<Conditions>,
    preprocess_sql: Option<Vec<String>>,
    clean_up_sqls: Option<Vec<String>>,
    follow_up: Option<FollowUp>,
    ambiguity: Option<AmbiguityMap>,
}

impl Truth {
    fn apply(self, task: &mut Task) {
        let hidden = &mut task.hidden;
        let nonempty = |v: Option<Vec<String>>| v.filter(|v| !v.is_empty());
        if let Some(q) = self.clear_query.filter(|q| !q.is_empty()) {
            hidden.clear_query = Some(q);
        }
        if let Some(c) = self.category {
            task.category = c;
        }
        if let Some(v) = nonempty(self.sol_sql) {
            hidden.phase1.sol_sql = v;
        }
        if let Some(v) = nonempty(self.test_cases) {
            hidden.phase1.test_cases = v;
        }
        if let Some(c) = self.conditions {
            hidden.phase1.conditions = c;
        }
        if let Some(v) = nonempty(self.preprocess_sql) {
            hidden.preprocess_sql = v;
        }
        if let Some(v) = nonempty(self.clean_up_sqls) {
            hidden.clean_up_sqls = v;
        }
        if let Some(f) = self.follow_up {
            hidden.follow_up = Some(f);
        }
        if let Some(a) = self.ambiguity.filter(|a| !a.is_empty()) {
            hidden.ambiguity = a;
        }
    }
}

fn parse_task(value: &Value, at: At<'_>) -> Result<Task, LoadError> {
    let map = json::object(value, at, "(record)")?;
    let public = PublicTask {
        instance_id: json::req_str(map, "instance_id", at, "")?,
        selected_database: json::req_str(map, "selected_database", at, "")?,
        amb_user_query: json::req_str(map, "amb_user_query", at, "")?,
    };
    if public.selected_database.is_empty()
        || public.selected_database.contains(['/', '\\'])
        || public.selected_database.starts_with('.')
    {
        // The name becomes part of file paths; refuse anything that could leave the root.
        return Err(at.field("selected_database", "must be a plain database name"));
    }
    let truth = parse_truth(map, at)?;
    let category = truth
        .category
        .unwrap_or(if public.instance_id.contains("_M_") {
            Category::Management
        } else {
            Category::Query
        });
    let mut task = Task {
        public,
        category,
        high_level: json::opt_bool(map, "high_level", at, "")?,
        hidden: HiddenTask::default(),
    };
    truth.apply(&mut task);
    Ok(task)
}

fn parse_truth(map: &Map<String, Value>, at: At<'_>) -> Result<Truth, LoadError> {
    let category = parse_category(map, at, "")?;
    let conditions = parse_conditions(map, at, "")?;
    let follow_up = match map.get("follow_up") {
        None | Some(Value::Null) => None,
        Some(value) => {
            let fmap = json::object(value, at, "follow_up")?;
            if fmap.is_empty() {
                None
            } else {
                Some(FollowUp {
                    query: json::opt_str(fmap, "query", at, "follow_up")?.unwrap_or_default(),
                    truth: PhaseTruth {
                        sol_sql: json::str_list(fmap, "sol_sql", at, "follow_up")?
                            .unwrap_or_default(),
                        test_cases: json::str_list(fmap, "test_cases", at, "follow_up")?
                            .unwrap_or_default(),
                        conditions: parse_conditions(fmap, at, "follow_up")?.unwrap_or_default(),
                        category: parse_category(fmap, at, "follow_up")?,
                    },
                })
            }
        }
    };
    let ambiguity = parse_ambiguity(map, at)?;
    Ok(Truth {
        clear_query: json::opt_str(map, "query", at, "")?,
        category,
        sol_sql: json::str_list(map, "sol_sql", at, "")?,
        test_cases: json::str_list(map, "test_cases", at, "")?,
        conditions,
        preprocess_sql: json::str_list(map, "preprocess_sql", at, "")?,
        clean_up_sqls: json::str_list(map, "clean_up_sqls", at, "")?,
        follow_up,
        ambiguity,
    })
}

fn parse_category(
    map: &Map<String, Value>,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<Category>, LoadError> {
    match json::opt_str(map, "category", at, prefix)? {
        None => Ok(None),
        Some(text) => Category::parse(&text).map(Some).ok_or_else(|| {
            at.field(
                json::join(prefix, "category"),
                "must be \"Query\" or \"Management\"",
            )
        }),
    }
}

fn parse_conditions(
    map: &Map<String, Value>,
    at: At<'_>,
    prefix: &str,
) -> Result<Option<Conditions>, LoadError> {
    match map.get("conditions") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            let field = json::join(prefix, "conditions");
            let cmap = json::object(value, at, &field)?;
            // `decimal` and `distinct` are never read by the judge (protocol §6); only `order`
            // is validated and kept.
            let order = json::opt_bool(cmap, "order", at, &field)?.unwrap_or(false);
            Ok(Some(Conditions { order }))
        }
    }
}

fn parse_ambiguity(
    map: &Map<String, Value>,
    at: At<'_>,
) -> Result<Option<AmbiguityMap>, LoadError> {
    let mut found = false;
    let mut result = AmbiguityMap::default();
    if let Some(value) = map.get("user_query_ambiguity").filter(|v| !v.is_null()) {
        found = true;
        let umap = json::object(value, at, "user_query_ambiguity")?;
        result.critical = parse_list(umap, "critical_ambiguity", at, "user_query_ambiguity")?;
        result.non_critical =
            parse_list(umap, "non_critical_ambiguity", at, "user_query_ambiguity")?;
    }
    if map.get("knowledge_ambiguity").is_some_and(|v| !v.is_null()) {
        found = true;
        result.knowledge = parse_list(map, "knowledge_ambiguity", at, "")?;
    }
    Ok(found.then_some(result))
}

fn parse_list(
    map: &Map<String, Value>,
    key: &str,
    at: At<'_>,
    prefix: &str,
) -> Result<Vec<Ambiguity>, LoadError> {
    let field = json::join(prefix, key);
    let items = match map.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(at.field(field, "must be a list")),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let path = format!("{field}[{i}]");
            let m = json::object(item, at, &path)?;
            Ok(Ambiguity {
                term: json::opt_str(m, "term", at, &path)?.unwrap_or_default(),
                sql_snippet: json::opt_str(m, "sql_snippet", at, &path)?.unwrap_or_default(),
                is_mask: json::opt_bool(m, "is_mask", at, &path)?.unwrap_or(false),
                kind: json::opt_str(m, "type", at, &path)?.unwrap_or_default(),
                deleted_knowledge: json::opt_int(m, "deleted_knowledge", at, &path)?,
            })
        })
        .collect()
}
