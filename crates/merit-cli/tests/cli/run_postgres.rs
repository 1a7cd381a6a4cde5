//! `merit run --pg-url` (issue 21, item 3): a repair experiment whose candidates run on
//! PostgreSQL copies of the Spider databases. The model is asked for PostgreSQL, the feedback
//! is the server's, and the oracle still judges against the gold rows.

use serde_json::{json, Value};

/// Counts singers when asked so in a PostgreSQL prompt; otherwise writes a query that only
/// SQLite accepts (a double-quoted string literal, which PostgreSQL reads as a column; the
/// copy keeps SQLite's mixed-case names, which PostgreSQL needs quoted, as the schema shows).
fn chat(body: &Value) -> Value {
    let text = body.to_string();
    let sql = if !text.contains("PostgreSQL") {
        "SELECT 'the prompt did not ask for PostgreSQL'"
    } else if text.contains("How many singers") {
        "SELECT count(*) FROM singer"
    } else {
        "SELECT \"Name\" FROM singer WHERE \"Country\" = \"France\""
    };
    json!({"id": "x", "object": "chat.completion",
           "choices": [{"index": 0, "finish_reason": "stop", "message":
               {"role": "assistant", "content": format!("```sql\n{sql}\n```")}}],
           "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}})
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn a_run_on_postgresql_copies_is_judged_against_the_gold_rows() {
    let Some(url) = crate::postgres_url("merit run --pg-url") else {
        return;
    };
    let models = crate::stand_in::serve(chat, &crate::serve_process::WORDS);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let sample = std::path::PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../demo/spider-sample"
    ));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["run", "--dataset", "spider", "--data"])
        .arg(&sample)
        .arg("--db-dir")
        .arg(sample.join("database"))
        .args(["--pg-url", url.as_str()])
        .args([
            "--methods",
            "iterative",
            "--seeds",
            "0",
            "--limit",
            "3",
            "--k",
            "2",
        ])
        .args(["--llm-url", &models, "--llm-model", "stand-in"])
        .args(["--embed-url", &models, "--embed-model", "e", "--cache"])
        .arg(dir.path().join("cache"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(manifest.contains("\"engine\": \"postgres\""), "{manifest}");
    assert!(
        !manifest.contains(url.as_str()),
        "the URL (and its password) is not recorded"
    );
    let log = std::fs::read_to_string(out.join("episodes/iterative-seed0.jsonl")).unwrap();
    let records: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 3);
    let counting = records
        .iter()
        .find(|r| r["question_id"] == "dev-0")
        .expect("the first sample question is in the run");
    assert_eq!(counting["attempts"][0]["status"], "correct", "{counting}");
    // The other answers fail on PostgreSQL, with PostgreSQL's message and its failure type.
    let failing = records
        .iter()
        .find(|r| r["question_id"] != "dev-0")
        .unwrap();
    let first = &failing["attempts"][0];
    assert_eq!(first["status"], "execution_error", "{failing}");
    let error = first["error"].as_str().unwrap();
    assert!(
        error.contains("column \"France\" does not exist"),
        "{error}"
    );
    assert_eq!(first["failure_type"], "schema_linking", "{failing}");

    // Aids that read SQLite catalogs are refused on copies, before anything is written.
    let refused_out = dir.path().join("refused");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["run", "--dataset", "spider", "--data"])
        .arg(&sample)
        .arg("--db-dir")
        .arg(sample.join("database"))
        .args(["--pg-url", url.as_str(), "--hints", "schema"])
        .args(["--methods", "iterative", "--seeds", "0", "--limit", "3"])
        .args(["--llm-url", &models, "--llm-model", "stand-in"])
        .args(["--embed-url", &models, "--embed-model", "e", "--cache"])
        .arg(dir.path().join("cache"))
        .arg("--out")
        .arg(&refused_out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(stderr.contains("--hints and --grammar"), "{stderr}");
    assert!(!refused_out.join("manifest.json").exists());
}
