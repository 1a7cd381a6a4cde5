//! `merit eval` end to end: official formats in, official-shaped tables and JSON out, and
//! clear errors for malformed input.

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn shared(path: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data")).join(path)
}

fn merit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_merit"))
        .args(args)
        .output()
        .expect("merit runs")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn spider_db_dir() -> String {
    shared("spider/database").display().to_string()
}

#[test]
fn spider_gold_against_itself_scores_every_usable_question() {
    let gold = shared("spider/dev_gold.sql").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("verdicts.jsonl");
    let output = merit(&[
        "eval",
        "--benchmark",
        "spider",
        "--gold",
        &gold,
        "--pred",
        &gold,
        "--db-dir",
        &spider_db_dir(),
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("972 usable of 1034"), "{stdout}");
    assert!(stdout.contains("wta_1 (62 questions"), "{stdout}");
    assert!(stdout.contains("EXECUTION ACCURACY"));
    let summary: Json = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["n"], 972);
    assert_eq!(summary["correct"], 972);
    assert_eq!(summary["unavailable"], 62);
    let verdicts = std::fs::read_to_string(&out).unwrap();
    assert_eq!(verdicts.lines().count(), 1034);
    let first: Json = serde_json::from_str(verdicts.lines().next().unwrap()).unwrap();
    assert_eq!(first["spider"]["score"], 1);
    assert_eq!(first["hardness"], "easy");
}

#[test]
fn pairs_mode_reproduces_the_golden_verdicts() {
    let pairs = shared("golden/eval_vectors_dev.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("annotated.jsonl");
    let output = merit(&[
        "eval",
        "--pairs",
        pairs.to_str().unwrap(),
        "--db-dir",
        &spider_db_dir(),
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    let summary: Json = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["n"], 3044);
    let golden = std::fs::read_to_string(&pairs).unwrap();
    let ours = std::fs::read_to_string(&out).unwrap();
    let mut disagreements = 0;
    for (expected, actual) in golden.lines().zip(ours.lines()) {
        let expected: Json = serde_json::from_str(expected).unwrap();
        let actual: Json = serde_json::from_str(actual).unwrap();
        assert_eq!(
            expected["id"], actual["id"],
            "records keep their order and fields"
        );
        for field in ["spider_exec", "spider_hardness", "bird_ex"] {
            if expected[field] != actual[field] && expected[field] != "timeout" {
                disagreements += 1;
                eprintln!(
                    "{}: {field} {} vs {}",
                    expected["id"], expected[field], actual[field]
                );
            }
        }
    }
    assert_eq!(disagreements, 0);
    assert_eq!(ours.lines().count(), 3044);
}

fn write(dir: &Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.display().to_string()
}

#[test]
fn malformed_inputs_give_errors_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let gold = write(
        dir.path(),
        "gold.sql",
        "SELECT count(*) FROM singer\tconcert_singer\nSELECT 1 no tab here\n",
    );
    let pred = write(dir.path(), "pred.sql", "SELECT 1\nSELECT 2\n");
    let output = merit(&[
        "eval",
        "--benchmark",
        "spider",
        "--gold",
        &gold,
        "--pred",
        &pred,
        "--db-dir",
        &spider_db_dir(),
    ]);
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(
        stderr.contains("gold.sql") && stderr.contains("line 2"),
        "{stderr}"
    );

    let good_gold = write(
        dir.path(),
        "good.sql",
        "SELECT count(*) FROM singer\tconcert_singer\n",
    );
    let empty = write(dir.path(), "empty.sql", "");
    let output = merit(&[
        "eval",
        "--benchmark",
        "spider",
        "--gold",
        &good_gold,
        "--pred",
        &empty,
        "--db-dir",
        &spider_db_dir(),
    ]);
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(
        stderr.contains("empty.sql") && stderr.contains("empty"),
        "{stderr}"
    );

    let two = write(dir.path(), "two.sql", "SELECT 1\nSELECT 2\n");
    let output = merit(&[
        "eval",
        "--benchmark",
        "spider",
        "--gold",
        &good_gold,
        "--pred",
        &two,
        "--db-dir",
        &spider_db_dir(),
    ]);
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(
        stderr.contains("2 predictions") && stderr.contains("1 gold"),
        "{stderr}"
    );

    let pairs = write(
        dir.path(),
        "pairs.jsonl",
        "{\"db_id\": \"concert_singer\", \"gold\": \"SELECT 1\", \"pred\": \"SELECT 1\"}\n{\"db_id\": 3}\n",
    );
    let output = merit(&["eval", "--pairs", &pairs, "--db-dir", &spider_db_dir()]);
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(stderr.contains("pairs.jsonl line 2"), "{stderr}");

    let output = merit(&["eval", "--pairs", &pairs, "--db-dir", "/nonexistent/dir"]);
    let (_, stderr) = text(&output);
    assert!(!output.status.success());
    assert!(stderr.contains("/nonexistent/dir"), "{stderr}");
}

#[test]
fn a_missing_database_is_counted_as_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let gold = write(
        dir.path(),
        "gold.sql",
        "SELECT count(*) FROM singer\tconcert_singer\nSELECT 1\tno_such_db\n",
    );
    let pred = write(
        dir.path(),
        "pred.sql",
        "SELECT count(*) FROM singer\nSELECT 1\n",
    );
    let output = merit(&[
        "eval",
        "--benchmark",
        "spider",
        "--gold",
        &gold,
        "--pred",
        &pred,
        "--db-dir",
        &spider_db_dir(),
        "--json",
    ]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("1 usable of 2") && stdout.contains("no_such_db"),
        "{stdout}"
    );
    let summary: Json = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["n"], 1);
    assert_eq!(summary["unavailable"], 1);
}

#[test]
fn bird_official_formats_print_accuracy_by_difficulty() {
    let dir = tempfile::tempdir().unwrap();
    let databases = dir.path().join("dev_databases").join("concert_singer");
    std::fs::create_dir_all(&databases).unwrap();
    std::fs::copy(
        shared("spider/database/concert_singer/concert_singer.sqlite"),
        databases.join("concert_singer.sqlite"),
    )
    .unwrap();
    let questions = serde_json::json!([
        {"question_id": 0, "db_id": "concert_singer", "question": "How many singers?",
         "evidence": "", "SQL": "SELECT count(*) FROM singer", "difficulty": "simple"},
        {"question_id": 1, "db_id": "concert_singer", "question": "Singer names?",
         "evidence": "", "SQL": "SELECT Name FROM singer", "difficulty": "moderate"},
        {"question_id": 2, "db_id": "concert_singer", "question": "Oldest age?",
         "evidence": "", "SQL": "SELECT max(Age) FROM singer", "difficulty": "challenging"}
    ]);
    let dev = write(dir.path(), "dev.json", &questions.to_string());
    let predictions = serde_json::json!({
        "0": "SELECT count(*) FROM singer\t----- bird -----\tconcert_singer",
        "1": "SELECT Name FROM singer UNION ALL SELECT Name FROM singer\t----- bird -----\tconcert_singer",
        "2": "SELECT min(Age) FROM singer\t----- bird -----\tconcert_singer"
    });
    let pred = write(dir.path(), "predict_dev.json", &predictions.to_string());
    let output = merit(&[
        "eval",
        "--benchmark",
        "bird",
        "--gold",
        &dev,
        "--pred",
        &pred,
        "--db-dir",
        dir.path().join("dev_databases").to_str().unwrap(),
        "--json",
    ]);
    let (stdout, stderr) = text(&output);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("challenging"), "{stdout}");
    // Set semantics: the duplicated names still match; min vs max does not.
    let accuracy_line = stdout.lines().find(|l| l.starts_with("accuracy")).unwrap();
    let numbers: Vec<&str> = accuracy_line.split_whitespace().skip(1).collect();
    assert_eq!(numbers, ["100.00", "100.00", "0.00", "66.67"]);
    let summary: Json = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["correct"], 2);
}
