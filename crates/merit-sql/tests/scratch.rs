//! The writable scratch connection on real SQLite files in a temporary directory: writes
//! work, one statement at a time, the deadline and row cap hold, and nothing reaches outside
//! the copy (ATTACH, VACUUM INTO, extension loading).

use merit_sql::{ExecError, ExecLimits, SqliteDatabase, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn spider_db(db_id: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/spider/database"
    ))
    .join(db_id)
    .join(format!("{db_id}.sqlite"))
}

/// A writable copy of a real Spider database in a fresh temporary directory.
fn copy(db_id: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join(format!("{db_id}.sqlite"));
    std::fs::copy(spider_db(db_id), &target).unwrap();
    let mut permissions = std::fs::metadata(&target).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(&target, permissions).unwrap();
    (dir, target)
}

fn limits(max_rows: Option<usize>) -> ExecLimits {
    ExecLimits {
        timeout: Duration::from_secs(2),
        max_rows,
    }
}

fn count(path: &Path, sql: &str) -> i64 {
    let mut scratch = SqliteDatabase::open_scratch(path, limits(None)).unwrap();
    match scratch.execute(sql).unwrap().rows.as_slice() {
        [row] => match row.as_slice() {
            [Value::Integer(n)] => *n,
            other => panic!("not a count: {other:?}"),
        },
        other => panic!("not one row: {other:?}"),
    }
}

#[test]
fn writes_are_committed_and_visible_to_a_new_connection() {
    let (_dir, path) = copy("concert_singer");
    let before = count(&path, "SELECT COUNT(*) FROM singer");
    let mut scratch = SqliteDatabase::open_scratch(&path, limits(None)).unwrap();
    let inserted = scratch
        .execute("INSERT INTO singer (Singer_ID, Name) VALUES (999, 'Scratch')")
        .unwrap();
    assert!(inserted.columns.is_empty() && inserted.rows.is_empty());
    scratch.execute("CREATE TABLE notes (a TEXT)").unwrap();
    scratch
        .execute("DELETE FROM singer WHERE Singer_ID = 1")
        .unwrap();
    // A comment-only text runs as nothing.
    let nothing = scratch.execute("  -- nothing here\n").unwrap();
    assert!(nothing.columns.is_empty());
    drop(scratch);
    assert_eq!(count(&path, "SELECT COUNT(*) FROM singer"), before);
    assert_eq!(
        count(&path, "SELECT COUNT(*) FROM singer WHERE Name = 'Scratch'"),
        1
    );
    assert_eq!(
        count(
            &path,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'notes'"
        ),
        1
    );
}

#[test]
fn a_write_with_a_placeholder_is_refused_and_changes_nothing() {
    let (_dir, path) = copy("concert_singer");
    let before = count(&path, "SELECT COUNT(*) FROM singer");
    let mut scratch = SqliteDatabase::open_scratch(&path, limits(None)).unwrap();
    // Run with the placeholder NULL, this would delete nothing and report success.
    assert_eq!(
        scratch.execute("DELETE FROM singer WHERE Age > ?"),
        Err(ExecError::Sql {
            message: "Incorrect number of bindings supplied. The current statement uses 1, and there are 0 supplied."
                .to_string()
        })
    );
    drop(scratch);
    assert_eq!(count(&path, "SELECT COUNT(*) FROM singer"), before);
}

#[test]
fn one_statement_at_a_time_like_python() {
    let (_dir, path) = copy("concert_singer");
    let before = count(&path, "SELECT COUNT(*) FROM singer");
    let mut scratch = SqliteDatabase::open_scratch(&path, limits(None)).unwrap();
    for sql in [
        "DELETE FROM singer; SELECT 1",
        "DELETE FROM singer;;",
        "SELECT 1; DELETE FROM singer",
    ] {
        assert_eq!(
            scratch.execute(sql),
            Err(ExecError::MultipleStatements),
            "{sql}"
        );
    }
    // Whitespace and comments after the statement are fine.
    let rows = scratch.execute("SELECT 7; -- done\n /* really */").unwrap();
    assert_eq!(rows.rows, vec![vec![Value::Integer(7)]]);
    drop(scratch);
    assert_eq!(count(&path, "SELECT COUNT(*) FROM singer"), before);
}

#[test]
fn nothing_reaches_outside_the_copy() {
    let (dir, path) = copy("concert_singer");
    let outside = dir.path().join("outside.sqlite");
    let mut scratch = SqliteDatabase::open_scratch(&path, limits(None)).unwrap();
    let attempts = [
        format!("ATTACH DATABASE '{}' AS other", outside.display()),
        format!("VACUUM INTO '{}'", outside.display()),
        format!(" /* hidden */ vacuum into '{}'", outside.display()),
        "VACUUM".to_string(),
        "DETACH DATABASE main".to_string(),
        "SELECT load_extension('/tmp/evil.so')".to_string(),
        "SELECT fts3_tokenizer('simple')".to_string(),
    ];
    for sql in &attempts {
        match scratch.execute(sql) {
            Err(ExecError::Denied { what }) => assert!(!what.is_empty()),
            other => panic!("{sql:?} gave {other:?}, expected a denial"),
        }
    }
    assert!(!outside.exists(), "nothing may be written outside the copy");
    // Defensive mode: the schema cannot be edited directly.
    assert!(scratch.execute("PRAGMA writable_schema = 1").is_ok());
    assert!(scratch
        .execute("UPDATE sqlite_master SET sql = 'x' WHERE name = 'singer'")
        .is_err());
    // The connection still works after refusals, and the denial text names the operation.
    let error = scratch
        .execute(&format!("ATTACH '{}' AS o", outside.display()))
        .unwrap_err();
    assert!(error.to_string().starts_with("denied: ATTACH"), "{error}");
    assert_eq!(
        scratch.execute("SELECT 1").unwrap().rows,
        vec![vec![Value::Integer(1)]]
    );
}

#[test]
fn foreign_keys_are_off_as_in_python() {
    let (_dir, path) = copy("concert_singer");
    let mut scratch = SqliteDatabase::open_scratch(&path, limits(None)).unwrap();
    assert_eq!(
        scratch.execute("PRAGMA foreign_keys").unwrap().rows,
        vec![vec![Value::Integer(0)]]
    );
    // concert_singer declares singer_in_concert.Singer_ID REFERENCES singer: a dangling
    // reference is accepted, as Python's sqlite3 accepts it.
    scratch
        .execute("INSERT INTO singer_in_concert (concert_ID, Singer_ID) VALUES (1, '424242')")
        .unwrap();
}

#[test]
fn the_deadline_interrupts_and_the_connection_survives() {
    let (_dir, path) = copy("concert_singer");
    let mut scratch = SqliteDatabase::open_scratch(
        &path,
        ExecLimits {
            timeout: Duration::from_millis(300),
            max_rows: None,
        },
    )
    .unwrap();
    let started = Instant::now();
    let result = scratch.execute(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
    );
    assert!(
        matches!(result, Err(ExecError::Timeout(_))),
        "got {result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // A writing statement is interrupted too, and leaves nothing behind.
    let before = count(&path, "SELECT COUNT(*) FROM singer");
    let result = scratch.execute(
        "INSERT INTO singer (Singer_ID, Name) \
         WITH RECURSIVE c(x) AS (SELECT 1000 UNION ALL SELECT x + 1 FROM c) SELECT x, 'n' FROM c",
    );
    assert!(
        matches!(result, Err(ExecError::Timeout(_))),
        "got {result:?}"
    );
    assert_eq!(count(&path, "SELECT COUNT(*) FROM singer"), before);
    assert_eq!(
        scratch.execute("SELECT 2").unwrap().rows,
        vec![vec![Value::Integer(2)]]
    );
}

#[test]
fn the_row_cap_truncates_but_writes_complete() {
    let (_dir, path) = copy("concert_singer");
    let mut scratch = SqliteDatabase::open_scratch(&path, limits(Some(3))).unwrap();
    let result = scratch
        .execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10) SELECT x FROM c")
        .unwrap();
    assert_eq!(result.rows.len(), 3);
    assert!(result.truncated);
    // RETURNING past the cap: every row is still inserted.
    let result = scratch
        .execute(
            "INSERT INTO singer (Singer_ID, Name) \
             WITH RECURSIVE c(x) AS (SELECT 2000 UNION ALL SELECT x + 1 FROM c WHERE x < 2009) \
             SELECT x, 'r' FROM c RETURNING Singer_ID",
        )
        .unwrap();
    assert_eq!(result.rows.len(), 3);
    assert!(result.truncated);
    drop(scratch);
    assert_eq!(
        count(&path, "SELECT COUNT(*) FROM singer WHERE Name = 'r'"),
        10
    );
}

#[test]
fn opening_needs_an_existing_database_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.sqlite");
    assert!(matches!(
        SqliteDatabase::open_scratch(&missing, limits(None)),
        Err(ExecError::Open { .. })
    ));
    assert!(!missing.exists(), "a missing file must not be created");
    let junk = dir.path().join("junk.sqlite");
    std::fs::write(&junk, b"this is not a database file at all, not even close").unwrap();
    match SqliteDatabase::open_scratch(&junk, limits(None)) {
        Err(ExecError::Open { path, .. }) => assert!(path.contains("junk.sqlite")),
        other => panic!("expected an open error, got {other:?}"),
    }
}
