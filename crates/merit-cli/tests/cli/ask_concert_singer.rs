//! `merit ask` end to end on the embedded default model: the SQL it prints for "How many
//! singers do we have?" on Spider's `concert_singer` must be judged correct by the Spider
//! evaluator, and `--execute` must print the count.
//!
//! Needs the default chat model (the user path in `MERIT_MODEL_PATH_QWEN2_5_CODER_0_5B_INSTRUCT`
//! or the local cache) and the Spider databases under `../shared/data`. Without the model the
//! test is skipped with a loud message, unless `MERIT_REQUIRE_MODELS=1`, where it is fetched
//! (or fails).

use crate::spider_databases;
use merit_eval::{EvalConfig, Evaluator, Verdict};
use merit_models::registry::{model_for_tests, DEFAULT_CHAT_MODEL};
use std::process::Command;

#[test]
#[ignore = "needs the embedded chat model (merit models pull); run with --include-ignored, as CI does"]
fn ask_answers_how_many_singers_with_a_correct_query() {
    let Some(model) = model_for_tests(DEFAULT_CHAT_MODEL, "the `merit ask` test") else {
        return;
    };
    let model = model.main_file().to_path_buf();
    let databases = spider_databases();
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .arg("ask")
        .arg("--db-dir")
        .arg(&databases)
        .args(["--db", "concert_singer", "--execute", "--model-path"])
        .arg(&model)
        .arg("How many singers do we have?")
        .output()
        .expect("merit runs");
    let (stdout, stderr) = crate::succeeded(&output);

    // The first line is the SQL; the table follows.
    let sql = stdout.lines().next().expect("a line of SQL").trim();
    assert!(sql.to_lowercase().contains("singer"), "{stdout}");
    let database = databases.join("concert_singer/concert_singer.sqlite");
    let verdict = Evaluator::new(EvalConfig::default()).spider_exec(
        &database,
        "SELECT count(*) FROM singer",
        sql,
    );
    assert_eq!(verdict, Verdict::Match, "query {sql:?}\n{stdout}\n{stderr}");
    // concert_singer has six singers, and the row count line closes the table.
    let table: Vec<&str> = stdout.lines().skip(1).collect();
    assert!(table.iter().any(|line| line.trim() == "6"), "{stdout}");
    assert_eq!(table.last().map(|l| l.trim()), Some("(1 row)"), "{stdout}");
    assert!(
        stderr.contains("llama.cpp:qwen2.5-coder-0.5b-instruct"),
        "{stderr}"
    );
}

#[test]
fn ask_reports_an_unknown_database_clearly() {
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .arg("ask")
        .arg("--db-dir")
        .arg(spider_databases())
        .args([
            "--db",
            "no_such_db",
            "--model-path",
            "/nonexistent.gguf",
            "Anything?",
        ])
        .output()
        .expect("merit runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no_such_db") && stderr.contains("not found"),
        "{stderr}"
    );
}
