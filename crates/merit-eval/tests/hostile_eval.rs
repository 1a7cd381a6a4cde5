//! Hostile predictions through both evaluators and the oracle, on a writable copy of a real
//! Spider database. Each case has a documented outcome, and the file must not change.

use merit_core::{Benchmark, Question, Status};
use merit_data::DatabaseDir;
use merit_eval::{EvalConfig, Evaluator, Oracle, OracleError, Verdict};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn shared_db(db_id: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/spider/database"
    ))
    .join(db_id)
    .join(format!("{db_id}.sqlite"))
}

/// `<tmp>/<db_id>/<db_id>.sqlite`, writable, so only merit's guards protect it.
fn writable_copy(db_id: &str) -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let folder = root.path().join(db_id);
    std::fs::create_dir(&folder).unwrap();
    let path = folder.join(format!("{db_id}.sqlite"));
    std::fs::copy(shared_db(db_id), &path).unwrap();
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&path, permissions).unwrap();
    (root, path)
}

fn fast_evaluator() -> Evaluator {
    Evaluator::new(EvalConfig {
        query_timeout: Duration::from_millis(500),
        ..EvalConfig::default()
    })
}

/// A prediction and the check its verdict must pass.
type Case<'a> = (&'a str, fn(&Verdict) -> bool);

const GOLD: &str = "SELECT count(*) FROM singer";

#[test]
fn hostile_predictions_score_zero_and_change_nothing() {
    let (_root, path) = writable_copy("concert_singer");
    let before = std::fs::read(&path).unwrap();
    let evaluator = fast_evaluator();
    let attach = format!(
        "ATTACH DATABASE '{}' AS other",
        path.with_file_name("x.sqlite").display()
    );
    // (prediction, what both evaluators must report)
    let cases: Vec<Case> = vec![
        (
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
            |v| *v == Verdict::PredictionTimeout,
        ),
        ("DELETE FROM singer", |v| {
            matches!(v, Verdict::PredictionError(m) if m.contains("DELETE"))
        }),
        ("INSERT INTO singer (Singer_ID) VALUES (100)", |v| {
            matches!(v, Verdict::PredictionError(_))
        }),
        ("DROP TABLE singer", |v| matches!(v, Verdict::PredictionError(_))),
        (&attach, |v| {
            matches!(v, Verdict::PredictionError(m) if m.contains("ATTACH"))
        }),
        ("PRAGMA writable_schema = 1", |v| {
            matches!(v, Verdict::PredictionError(m) if m.contains("writable_schema"))
        }),
        ("SELECT load_extension('/tmp/x.so')", |v| {
            matches!(v, Verdict::PredictionError(_))
        }),
    ];
    for (prediction, expected) in &cases {
        for (name, verdict) in [
            ("spider", evaluator.spider_exec(&path, GOLD, prediction)),
            ("bird", evaluator.bird_ex(&path, GOLD, prediction)),
        ] {
            assert!(
                expected(&verdict),
                "{name}: {prediction:?} gave {verdict:?}"
            );
            assert_eq!(verdict.score(), 0);
        }
    }
    assert!(!path.with_file_name("x.sqlite").exists());
    drop(evaluator);
    assert_eq!(
        before,
        std::fs::read(&path).unwrap(),
        "database bytes changed"
    );
}

#[test]
fn a_cross_join_of_millions_of_rows_is_rejected_without_fetching_it() {
    let evaluator = Evaluator::new(EvalConfig::default());
    let path = shared_db("concert_singer");
    // 6^8 = 1.7 million rows against a one-row gold: Spider stops once the prediction has
    // more rows than the gold, BIRD at the first row outside the gold set.
    let huge = "SELECT a.Name FROM singer a, singer b, singer c, singer d, singer e, singer f, singer g, singer h";
    let started = Instant::now();
    assert_eq!(evaluator.spider_exec(&path, GOLD, huge), Verdict::Mismatch);
    assert_eq!(evaluator.bird_ex(&path, GOLD, huge), Verdict::Mismatch);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn invalid_utf8_text_follows_each_evaluator() {
    let evaluator = Evaluator::new(EvalConfig::default());
    let path = shared_db("concert_singer");
    // Spider decodes with errors="ignore": the bad byte vanishes and 'A' remains.
    let gold = "SELECT 'A'";
    let pred = "SELECT CAST(x'ff41' AS TEXT)";
    assert_eq!(evaluator.spider_exec(&path, gold, pred), Verdict::Match);
    // BIRD's default connection raises on undecodable text: score 0.
    assert!(matches!(
        evaluator.bird_ex(&path, gold, pred),
        Verdict::PredictionError(_)
    ));
}

#[test]
fn empty_predictions_and_failing_golds_are_reported_not_crashed() {
    let evaluator = Evaluator::new(EvalConfig::default());
    let path = shared_db("concert_singer");
    assert_eq!(
        evaluator.spider_exec(&path, GOLD, "  "),
        Verdict::EmptyPrediction
    );
    // BIRD executes the empty string: no rows, which only an empty gold equals.
    assert_eq!(evaluator.bird_ex(&path, GOLD, ""), Verdict::Mismatch);
    let failing_gold = "SELECT nope FROM singer";
    assert!(matches!(
        evaluator.spider_exec(&path, failing_gold, GOLD),
        Verdict::GoldError(_)
    ));
    assert!(matches!(
        evaluator.bird_ex(&path, failing_gold, GOLD),
        Verdict::GoldError(_)
    ));
}

#[test]
fn a_database_file_that_is_not_sqlite_is_a_gold_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let folder = root.path().join("fake");
    std::fs::create_dir(&folder).unwrap();
    let path = folder.join("fake.sqlite");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let evaluator = Evaluator::new(EvalConfig::default());
    match evaluator.spider_exec(&path, GOLD, GOLD) {
        Verdict::GoldError(message) => assert!(message.contains("fake.sqlite"), "{message}"),
        other => panic!("expected a gold error, got {other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; 4096]);
}

fn question(id: &str, db_id: &str, gold: &str) -> Question {
    Question {
        id: id.to_string(),
        index: 0,
        db_id: db_id.to_string(),
        question: "How many singers do we have?".to_string(),
        evidence: String::new(),
        gold_sql: gold.to_string(),
        difficulty: None,
    }
}

fn oracle(benchmark: Benchmark, questions: &[Question], root: &Path) -> Oracle {
    let evaluator = Arc::new(Evaluator::new(EvalConfig {
        query_timeout: Duration::from_millis(500),
        ..EvalConfig::default()
    }));
    Oracle::new(benchmark, evaluator, questions, &DatabaseDir::new(root)).0
}

#[test]
fn the_oracle_reports_status_and_dbms_text_but_never_the_gold() {
    let root = shared_db("concert_singer")
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let secret_gold = "SELECT count(*) FROM singer WHERE 1 = 1";
    let questions = vec![
        question("q1", "concert_singer", secret_gold),
        question("q2", "wta_1", "SELECT 1"),
        question("q3", "concert_singer", "SELECT missing_column FROM singer"),
    ];
    for benchmark in [Benchmark::Spider, Benchmark::Bird] {
        let oracle = oracle(benchmark, &questions, &root);
        assert_eq!(oracle.warm_up(), vec!["q3".to_string()]);
        let judge = |sql: &str| oracle.judge("q1", sql).unwrap();
        assert_eq!(judge("SELECT count(*) FROM singer").status, Status::Correct);
        assert_eq!(
            judge("SELECT count(*) + 1 FROM singer").status,
            Status::DenotationMismatch
        );
        let error = judge("SELECT count(*) FROM singers");
        assert_eq!(error.status, Status::ExecutionError);
        assert!(error.error.as_deref().unwrap().contains("no such table"));
        let timeout = judge(
            "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        );
        assert_eq!(timeout.status, Status::Timeout);
        assert!(matches!(
            oracle.judge("q2", "SELECT 1"),
            Err(OracleError::Unavailable { .. })
        ));
        assert!(matches!(
            oracle.judge("nope", "SELECT 1"),
            Err(OracleError::UnknownQuestion(_))
        ));
        let gold_failure = oracle.judge("q3", "SELECT 1").unwrap_err().to_string();
        assert!(!gold_failure.contains("missing_column"), "{gold_failure}");
        assert!(!format!("{oracle:?}").contains(secret_gold));
    }
}
