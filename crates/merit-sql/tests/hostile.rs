//! Hostile SQL against a writable copy of a real Spider database: every attempt must fail
//! with a documented error (or be harmless) and leave the file byte-identical.

use merit_sql::{Database, ExecError, ExecLimits, SqliteDatabase, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn spider_db(db_id: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/spider/database"
    ))
    .join(db_id)
    .join(format!("{db_id}.sqlite"))
}

/// A writable copy, so that only merit's own guards stand between the SQL and the bytes.
fn writable_copy(db_id: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join(format!("{db_id}.sqlite"));
    std::fs::copy(spider_db(db_id), &target).unwrap();
    let mut permissions = std::fs::metadata(&target).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&target, permissions).unwrap();
    (dir, target)
}

fn quick() -> ExecLimits {
    ExecLimits {
        timeout: Duration::from_secs(2),
        max_rows: Some(100_000),
    }
}

#[test]
fn hostile_statements_fail_cleanly_and_leave_the_file_unchanged() {
    let (dir, path) = writable_copy("concert_singer");
    let before = std::fs::read(&path).unwrap();
    let db = SqliteDatabase::open(&path).unwrap();
    let attach_target = dir.path().join("other.sqlite");
    let attach = format!("ATTACH DATABASE '{}' AS other", attach_target.display());
    let cases: Vec<(&str, &str)> = vec![
        (
            "INSERT INTO singer (Singer_ID, Name) VALUES (99, 'x')",
            "denied",
        ),
        ("UPDATE singer SET Name = 'x'", "denied"),
        ("DELETE FROM singer", "denied"),
        ("DROP TABLE singer", "denied"),
        ("CREATE TABLE evil (a)", "denied"),
        ("CREATE TEMP TABLE evil (a)", "denied"),
        (&attach, "denied"),
        ("PRAGMA writable_schema = 1", "denied"),
        ("PRAGMA case_sensitive_like = 1", "denied"),
        ("PRAGMA journal_mode = WAL", "denied"),
        ("SELECT load_extension('/tmp/evil.so')", "denied"),
        ("BEGIN", "denied"),
        ("VACUUM", "denied"),
        ("SELECT 1; DELETE FROM singer", "multiple"),
        ("SELECT 1;;", "multiple"),
    ];
    for (sql, expected) in cases {
        let outcome = db.query(sql, &quick());
        let ok = matches!(
            (&outcome, expected),
            (
                Err(ExecError::Denied { .. } | ExecError::Sql { .. }),
                "denied"
            ) | (Err(ExecError::MultipleStatements), "multiple")
        );
        assert!(ok, "{sql:?} gave {outcome:?}, expected {expected}");
    }
    assert!(!attach_target.exists(), "ATTACH must not create a file");
    // The connection pool is reused: a refused pragma must not have changed later queries.
    let rows = db
        .query("SELECT 'a' LIKE 'A'", &quick())
        .expect("plain select works after refusals");
    assert_eq!(rows.rows, vec![vec![Value::Integer(1)]]);
    drop(db);
    assert_eq!(
        before,
        std::fs::read(&path).unwrap(),
        "database bytes changed"
    );
}

#[test]
fn denied_error_names_the_operation() {
    let (_dir, path) = writable_copy("concert_singer");
    let db = SqliteDatabase::open(&path).unwrap();
    match db.query("PRAGMA writable_schema = 1", &quick()) {
        Err(ExecError::Denied { what }) => assert!(what.contains("writable_schema"), "{what}"),
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn introspection_pragmas_are_allowed() {
    let db = SqliteDatabase::open(spider_db("concert_singer")).unwrap();
    let info = db.query("PRAGMA table_info(singer)", &quick()).unwrap();
    assert!(info.rows.len() >= 5);
}

#[test]
fn runaway_recursive_query_is_interrupted_near_the_deadline() {
    let (_dir, path) = writable_copy("concert_singer");
    let before = std::fs::read(&path).unwrap();
    let db = SqliteDatabase::open(&path).unwrap();
    let limits = ExecLimits {
        timeout: Duration::from_millis(300),
        max_rows: None,
    };
    let started = Instant::now();
    let outcome = db.query(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
        &limits,
    );
    let elapsed = started.elapsed();
    assert!(matches!(outcome, Err(ExecError::Timeout(_))), "{outcome:?}");
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    drop(db);
    assert_eq!(before, std::fs::read(&path).unwrap());
}

#[test]
fn cross_join_of_millions_of_rows_hits_the_row_cap() {
    let db = SqliteDatabase::open(spider_db("concert_singer")).unwrap();
    let limits = ExecLimits {
        timeout: Duration::from_secs(20),
        max_rows: Some(50_000),
    };
    // 6 singers ^ 8 = 1.7 million rows.
    let sql = "SELECT * FROM singer a, singer b, singer c, singer d, singer e, singer f, singer g, singer h";
    let mut count = 0;
    let outcome = db.for_each_row(sql, &limits, &mut |_| {
        count += 1;
        std::ops::ControlFlow::Continue(())
    });
    assert_eq!(outcome, Err(ExecError::TooManyRows(50_000)));
    assert_eq!(count, 50_000);
    let capped = db.query(sql, &limits).unwrap();
    assert!(capped.truncated);
    assert_eq!(capped.rows.len(), 50_000);
}

#[test]
fn values_come_back_exactly_as_stored() {
    let db = SqliteDatabase::open(spider_db("concert_singer")).unwrap();
    let result = db
        .query(
            "SELECT 1, 2.5, 'text', x'00ff', NULL, CAST(x'ff41' AS TEXT), 9223372036854775807",
            &quick(),
        )
        .unwrap();
    assert_eq!(
        result.rows[0],
        vec![
            Value::Integer(1),
            Value::Real(2.5),
            Value::Text(b"text".to_vec()),
            Value::Blob(vec![0, 255]),
            Value::Null,
            Value::Text(vec![0xff, b'A']),
            Value::Integer(i64::MAX),
        ]
    );
    assert_eq!(result.columns.len(), 7);
}

#[test]
fn empty_and_comment_only_statements_return_nothing() {
    let db = SqliteDatabase::open(spider_db("concert_singer")).unwrap();
    for sql in ["", "   ", "-- nothing", "SELECT 1; -- trailing comment"] {
        let result = db.query(sql, &quick()).unwrap();
        assert!(result.rows.len() <= 1, "{sql:?}");
    }
}

#[test]
fn opening_a_file_that_is_not_sqlite_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.sqlite");
    std::fs::write(
        &path,
        b"this is not a database, just some text padding it out",
    )
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    match SqliteDatabase::open(&path) {
        Err(ExecError::Open {
            path: shown,
            message,
        }) => {
            assert!(shown.ends_with("fake.sqlite"));
            assert!(message.contains("not a database"), "{message}");
        }
        other => panic!("expected an open error, got {other:?}"),
    }
    assert_eq!(before, std::fs::read(&path).unwrap());
    match SqliteDatabase::open(dir.path().join("missing.sqlite")) {
        Err(ExecError::Open { message, .. }) => assert!(message.contains("no such file")),
        other => panic!("expected an open error, got {other:?}"),
    }
}

#[test]
fn pool_is_safe_across_threads() {
    let db = std::sync::Arc::new(SqliteDatabase::open(spider_db("concert_singer")).unwrap());
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let db = std::sync::Arc::clone(&db);
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let rows = db.query("SELECT count(*) FROM singer", &quick()).unwrap();
                    assert_eq!(rows.rows[0][0], Value::Integer(6));
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}
