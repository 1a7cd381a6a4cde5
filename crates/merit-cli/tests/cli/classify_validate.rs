//! `merit classify --validate`: the classifier against the reference labeler on real pairs
//! over real Spider databases (Table 5's layout), and the JSON it writes.

use std::path::Path;
use std::process::Command;

#[test]
fn the_classifier_is_validated_on_failing_pairs_of_real_databases() {
    let spider = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/spider");
    let dir = tempfile::tempdir().unwrap();
    let pairs = dir.path().join("pairs.jsonl");
    let lines = [
        // An unknown table: schema linking.
        r#"{"id": "a", "db_id": "concert_singer", "gold": "SELECT count(*) FROM singer", "pred": "SELECT count(*) FROM singers"}"#,
        // A wrong filter that runs: a result mismatch.
        r#"{"id": "b", "db_id": "concert_singer", "gold": "SELECT count(*) FROM singer", "pred": "SELECT count(*) FROM singer WHERE age > 40"}"#,
        // Marked correct in the file: not labelled.
        r#"{"id": "c", "db_id": "concert_singer", "gold": "SELECT count(*) FROM singer", "pred": "SELECT count(*) FROM singer", "spider_exec": 1}"#,
        // A database that is not there: skipped, not a crash.
        r#"{"id": "d", "db_id": "no_such_db", "gold": "SELECT 1", "pred": "SELECT 2"}"#,
    ];
    std::fs::write(&pairs, lines.join("\n")).unwrap();
    let out = dir.path().join("validation.json");
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(["classify", "--validate", "--pairs"])
        .arg(&pairs)
        .arg("--db-dir")
        .arg(spider.join("database"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("4 pairs read; 2 not marked correct"),
        "{stdout}"
    );
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let labelled = written["pairs"].as_array().unwrap();
    assert_eq!(labelled.len(), 2, "{written}");
    assert_eq!(labelled[0]["id"], "a");
    assert_eq!(labelled[0]["classifier"], "schema_linking");
    assert_eq!(labelled[1]["status"], "denotation_mismatch");
}

#[test]
fn one_failure_is_typed_from_its_dbms_text_or_its_status() {
    let classify = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_merit"))
            .arg("classify")
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    // DBMS text without a status: an execution error, typed by its text.
    assert_eq!(
        classify(&["--error", "no such column: singers.nam"]),
        "Schema Linking (rule sqlite-no-such-column)"
    );
    // A status without text: typed by the status alone.
    assert_eq!(
        classify(&["--status", "denotation-mismatch"]),
        "Result Mismatch (rule status-denotation-mismatch)"
    );
    assert_eq!(
        classify(&["--status", "timeout"]),
        "Execution (rule status-timeout)"
    );
    // Neither: a clear error, not a guess.
    let output = Command::new(env!("CARGO_BIN_EXE_merit"))
        .arg("classify")
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("give --error TEXT"));
}
