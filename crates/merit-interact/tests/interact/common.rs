//! Shared helpers: where the real data is, custom tasks on real databases, environments.

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
        assert!(
            std::env::var("MERIT_REQUIRE_PYTHON").as_deref() != Ok("1"),
            "python3 is required (MERIT_REQUIRE_PYTHON=1) but cannot be run"
        );
        eprintln!("SKIPPED: python3 is not available; Management-task tests did not run");
    }
    ok
}
