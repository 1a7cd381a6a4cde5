//! Shared helpers: where the real data is, custom tasks on real databases, environments.

use merit_core::model::{ChatModel, ChatReply, ChatRequest, ModelError};
use merit_interact::{
    sqlite_backend, EnvConfig, Environment, ScriptedSimulator, SqliteBackend, TaskSet,
    UserSimulator,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `../shared/data/interact/mini-interact`, from the crate directory.
pub fn mini_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/interact/mini-interact")
}

/// The real public task file.
pub fn load_mini() -> TaskSet {
    let root = mini_root();
    TaskSet::load(&root.join("mini_interact.jsonl"), &root).expect("mini-interact loads")
}

/// Writes task records (one JSON object each) to a temporary JSONL file and loads them with
/// the real mini-interact metafiles and databases.
pub fn custom_tasks(records: &[serde_json::Value]) -> (tempfile::TempDir, TaskSet) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tasks.jsonl");
    let text: Vec<String> = records.iter().map(|r| r.to_string()).collect();
    std::fs::write(&file, text.join("\n")).expect("write tasks");
    let set = TaskSet::load(&file, &mini_root()).expect("custom tasks load");
    (dir, set)
}

/// An environment for one task of `set` on its real SQLite database.
pub fn environment<S: UserSimulator>(
    set: &TaskSet,
    id: &str,
    simulator: S,
    config: EnvConfig,
) -> Environment<SqliteBackend, S> {
    let task = set.get(id).expect("task exists");
    let meta = Arc::clone(set.database(task.database()).expect("meta"));
    let backend = sqlite_backend(&meta).expect("database present");
    Environment::new(task, meta, backend, simulator, config).expect("environment")
}

/// A simulator with no rules (refuses everything).
pub fn silent() -> ScriptedSimulator {
    ScriptedSimulator::default()
}

/// Whether `python3` runs here. Tests that need it skip loudly without it, unless
/// `MERIT_REQUIRE_PYTHON=1` makes its absence a failure.
pub fn python_available() -> bool {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        merit_core::optional::missing(
            "MERIT_REQUIRE_PYTHON",
            "python3 cannot be run, so the Management-task tests did not run",
            "install python3",
        );
    }
    ok
}

/// How a [`ScriptedModel`] answers the `index`-th request.
type Respond = dyn Fn(&ChatRequest, usize) -> Result<String, ModelError> + Send + Sync;

/// A chat model for tests: a function of the request gives each reply; every request is kept.
pub struct ScriptedModel {
    id: String,
    respond: Box<Respond>,
    /// Every request received, in order.
    pub requests: std::sync::Mutex<Vec<ChatRequest>>,
}

impl ScriptedModel {
    /// `respond(request, index)` answers the `index`-th call (0-based).
    pub fn new(
        id: &str,
        respond: impl Fn(&ChatRequest, usize) -> Result<String, ModelError> + Send + Sync + 'static,
    ) -> Arc<ScriptedModel> {
        Arc::new(ScriptedModel {
            id: id.to_string(),
            respond: Box::new(respond),
            requests: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Replies in order from `replies`, then repeats the last one.
    pub fn replies(id: &str, replies: Vec<String>) -> Arc<ScriptedModel> {
        ScriptedModel::new(id, move |_, index| {
            Ok(replies
                .get(index)
                .or(replies.last())
                .cloned()
                .unwrap_or_default())
        })
    }

    /// The requests so far.
    pub fn seen(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl ChatModel for ScriptedModel {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn chat(&self, request: &ChatRequest) -> Result<ChatReply, ModelError> {
        let index = {
            let mut requests = self.requests.lock().unwrap();
            requests.push(request.clone());
            requests.len() - 1
        };
        let text = (self.respond)(request, index)?;
        Ok(ChatReply {
            text,
            prompt_tokens: 10,
            completion_tokens: 5,
            latency: std::time::Duration::from_millis(1),
            cached: false,
            tool_calls: Vec::new(),
        })
    }
}

/// The text of every message of a request, joined.
pub fn request_text(request: &ChatRequest) -> String {
    request
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A Query task on the real `alien` database with hidden ground truth: one critical ambiguity
/// ("warm"), a clear question, and optionally a follow-up.
pub fn warm_task(id: &str, follow_up: bool) -> serde_json::Value {
    let mut record = serde_json::json!({
        "instance_id": id, "selected_database": "alien",
        "amb_user_query": "How many observatories have warm weather?",
        "query": "How many observatories recorded an air temperature above 20 degrees Celsius?",
        "sol_sql": ["SELECT COUNT(*) FROM observatories WHERE airtempc > 20"],
        "test_cases": [], "category": "Query",
        "conditions": {"decimal": 2, "distinct": false, "order": false},
        "user_query_ambiguity": {
            "critical_ambiguity": [{
                "term": "warm weather", "sql_snippet": "airtempc > 20",
                "is_mask": false, "type": "semantic_ambiguity"
            }],
            "non_critical_ambiguity": []
        },
        "knowledge_ambiguity": []
    });
    if follow_up {
        record["follow_up"] = serde_json::json!({
            "query": "And how many of those are clear?",
            "sol_sql": ["SELECT COUNT(*) FROM observatories WHERE airtempc > 20 AND weathprofile = 'Clear'"],
            "category": "Query"
        });
    }
    record
}
