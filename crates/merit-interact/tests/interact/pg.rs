//! The PostgreSQL backend against a real server: the mini-interact `alien` database is loaded
//! from its SQLite file into a template, then reset, timeouts, read-only enforcement, value
//! conversion (checked against psycopg2 itself), judging, Management tests through psycopg2,
//! and agreement with the SQLite backend on the same data.
//!
//! The server comes from `MERIT_TEST_POSTGRES_URL` (`scripts/setup-postgres.sh` prints one).
//! Unset, every test here skips with a loud message, unless `MERIT_REQUIRE_POSTGRES=1`, which
//! makes its absence a failure (CI sets both).

use crate::common::{custom_tasks, load_mini, mini_root, python_available, silent};
use merit_interact::judge::results_match;
use merit_interact::{
    sqlite_backend, ActionCall, Cell, EnvConfig, Environment, InteractBackend, InteractError,
    PostgresBackend, PostgresServer, TaskSet,
};
use merit_sql::{Dialect, ExecError, ExecLimits};
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The test server, or `None` (after a loud message) when none is configured.
fn server() -> Option<PostgresServer> {
    let url = merit_core::optional::from_env(
        "MERIT_TEST_POSTGRES_URL",
        "MERIT_REQUIRE_POSTGRES",
        "the PostgreSQL backend tests",
        "run `bash scripts/setup-postgres.sh` and export the URL it prints as MERIT_TEST_POSTGRES_URL",
    )?;
    Some(PostgresServer::new(&url).expect("MERIT_TEST_POSTGRES_URL parses"))
}

/// The `alien` template, loaded once per test process (the loader is idempotent anyway).
fn alien_template(server: &PostgresServer) -> String {
    static TEMPLATE: OnceLock<Result<String, String>> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            server
                .ensure_sqlite_template("alien", &mini_root().join("alien/alien.sqlite"))
                .map_err(|e| e.to_string())
        })
        .clone()
        .expect("the alien template loads")
}

fn alien(server: &PostgresServer) -> PostgresBackend {
    let template = alien_template(server);
    PostgresBackend::new(server, "alien", &template).expect("working database")
}

fn limits() -> ExecLimits {
    ExecLimits {
        timeout: Duration::from_secs(20),
        max_rows: None,
    }
}

fn count(backend: &mut dyn InteractBackend, table: &str) -> i64 {
    let rows = backend
        .query_read_only(&format!("SELECT COUNT(*) FROM {table}"), &limits())
        .unwrap();
    match rows.rows.as_slice() {
        [row] => match row.as_slice() {
            [Cell::Int(n)] => *n,
            other => panic!("not a count: {other:?}"),
        },
        other => panic!("not one row: {other:?}"),
    }
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn the_loader_copies_every_table_and_row() {
    let Some(server) = server() else { return };
    let set = load_mini();
    let meta = Arc::clone(set.database("alien").unwrap());
    let mut sqlite = sqlite_backend(&meta).unwrap();
    let mut pg = alien(&server);
    assert_eq!(pg.dialect(), Dialect::Postgres);
    let tables = sqlite
        .query_read_only(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
            &limits(),
        )
        .unwrap();
    assert!(tables.rows.len() >= 3, "{tables:?}");
    for row in &tables.rows {
        let Cell::Text(table) = &row[0] else {
            panic!("{row:?}")
        };
        let quoted = format!("\"{table}\"");
        assert_eq!(
            count(&mut pg, &quoted),
            count(&mut sqlite, &quoted),
            "{table}"
        );
    }
    // Loading again is a no-op that finds the same template.
    let again = server
        .ensure_sqlite_template("alien", &mini_root().join("alien/alien.sqlite"))
        .unwrap();
    assert_eq!(again, alien_template(&server));
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn reset_restores_the_template() {
    let Some(server) = server() else { return };
    let mut pg = alien(&server);
    let before = count(&mut pg, "observatories");
    assert!(before > 0);
    pg.run_writable(
        &[
            "DELETE FROM observatories".to_string(),
            "CREATE TABLE scratch_notes (a int)".to_string(),
        ],
        &limits(),
    )
    .unwrap();
    assert_eq!(count(&mut pg, "observatories"), 0);
    pg.reset().unwrap();
    assert_eq!(count(&mut pg, "observatories"), before);
    let gone = pg.query_read_only("SELECT * FROM scratch_notes", &limits());
    assert!(
        matches!(&gone, Err(ExecError::Sql { message }) if message.contains("does not exist")),
        "{gone:?}"
    );
    // Two backends on the same template do not see each other's writes.
    let mut other = alien(&server);
    pg.run_writable(&["DELETE FROM observatories".to_string()], &limits())
        .unwrap();
    assert_eq!(count(&mut other, "observatories"), before);
    assert_ne!(pg.working_database(), other.working_database());
    // Dropping a backend drops its working database.
    let working = other.working_database().to_string();
    drop(other);
    assert!(!server.database_exists(&working).unwrap());
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn read_only_queries_cannot_write() {
    let Some(server) = server() else { return };
    let mut pg = alien(&server);
    let before = count(&mut pg, "observatories");
    for sql in [
        "DELETE FROM observatories",
        "UPDATE observatories SET airtempc = 0",
        "CREATE TABLE evil (a int)",
        "DROP TABLE observatories",
        "WITH gone AS (DELETE FROM observatories RETURNING 1) SELECT count(*) FROM gone",
    ] {
        match pg.query_read_only(sql, &limits()) {
            Err(ExecError::Sql { message }) => assert!(
                message.ends_with("in a read-only transaction"),
                "{sql}: {message}"
            ),
            other => panic!("{sql} gave {other:?}"),
        }
    }
    // Session settings changed by a read-only statement are rolled back with it.
    pg.query_read_only(
        "SELECT set_config('statement_timeout', '0', false)",
        &limits(),
    )
    .unwrap();
    let shown = pg
        .query_read_only("SHOW statement_timeout", &limits())
        .unwrap();
    assert_ne!(shown.rows, vec![vec![Cell::Text("0".into())]]);
    // One statement per call.
    assert_eq!(
        pg.query_read_only("SELECT 1; DELETE FROM observatories", &limits()),
        Err(ExecError::MultipleStatements)
    );
    assert_eq!(count(&mut pg, "observatories"), before);
    // Writes in a writable transaction may not leave the working database.
    for sql in [
        "DROP DATABASE postgres",
        "VACUUM",
        "ALTER SYSTEM SET work_mem = '1MB'",
    ] {
        let failure = pg
            .run_writable(&[sql.to_string()], &limits())
            .expect_err(sql);
        assert!(
            matches!(failure.error, ExecError::Sql { .. }),
            "{sql}: {failure:?}"
        );
    }
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn the_statement_timeout_cancels_and_the_connection_survives() {
    let Some(server) = server() else { return };
    let mut pg = alien(&server);
    let short = ExecLimits {
        timeout: Duration::from_millis(300),
        max_rows: None,
    };
    let started = Instant::now();
    let result = pg.query_read_only("SELECT pg_sleep(10)", &short);
    assert!(
        matches!(result, Err(ExecError::Timeout(_))),
        "got {result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let before = count(&mut pg, "observatories");
    let failure = pg
        .run_writable(
            &["DELETE FROM observatories WHERE pg_sleep(10) IS NOT NULL".to_string()],
            &short,
        )
        .unwrap_err();
    assert!(failure.error.is_timeout(), "{failure:?}");
    // The cancelled write was rolled back, and the connection still answers.
    assert_eq!(count(&mut pg, "observatories"), before);
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn the_row_cap_truncates() {
    let Some(server) = server() else { return };
    let mut pg = alien(&server);
    let capped = ExecLimits {
        timeout: Duration::from_secs(20),
        max_rows: Some(5),
    };
    let rows = pg
        .query_read_only("SELECT g FROM generate_series(1, 1000000) AS g", &capped)
        .unwrap();
    assert_eq!(rows.rows.len(), 5);
    assert!(rows.truncated);
    let exact = pg
        .query_read_only("SELECT g FROM generate_series(1, 5) AS g", &capped)
        .unwrap();
    assert_eq!(exact.rows.len(), 5);
    assert!(!exact.truncated);
    // A capped write still completes.
    let before = count(&mut pg, "observatories");
    let written = pg
        .run_writable(
            &["DELETE FROM observatories RETURNING observstation".to_string()],
            &capped,
        )
        .unwrap();
    assert_eq!(written.rows.len(), 5);
    assert!(before > 5);
    assert_eq!(count(&mut pg, "observatories"), 0);
}

/// Every supported type, with Python's `str()` of what psycopg2 returns for it (JSON lists and
/// objects as `json.dumps(…, sort_keys=True)`, which is how the judge sees them).
const VALUES_SQL: &str = "SELECT true, false, 7::int2, -8::int4, 9000000000::int8, \
    1.1::real, 0.1::float8, 12.3450::numeric, 'NaN'::numeric, -0.005::numeric(6,3), \
    'x'::text, 'ab'::char(4), 'v'::varchar, '2024-03-09'::date, 'infinity'::date, \
    '2024-03-09 12:30:00.5'::timestamp, '2024-03-09 01:30:00+02'::timestamptz, \
    '12:34:56'::time, '1 year 2 mons 3 days 04:05:06'::interval, '-1 microsecond'::interval, \
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '[1, 2.5, \"a\", null]'::json, \
    '{\"b\": 1, \"a\": [true]}'::jsonb, '3'::jsonb, ARRAY[1, 2, NULL], ARRAY[['a','b'],['c','d']], \
    NULL::int, 123456789.125::float8";

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn values_convert_exactly_as_psycopg2_presents_them() {
    let Some(server) = server() else { return };
    let mut pg = alien(&server);
    let rows = pg.query_read_only(VALUES_SQL, &limits()).unwrap();
    let cells = &rows.rows[0];
    assert_eq!(cells[0], Cell::Bool(true));
    assert_eq!(cells[5], Cell::Float(1.1));
    assert_eq!(cells[7], Cell::Decimal("12.3450".into()));
    assert_eq!(
        cells[13],
        Cell::Date {
            year: 2024,
            month: 3,
            day: 9
        }
    );
    assert!(matches!(cells[23], Cell::Int(3)), "{:?}", cells[23]);
    let ours: Vec<String> = cells
        .iter()
        .map(|cell| match cell {
            Cell::Json(v) => merit_interact::judge::python_json(v),
            other => other.display(),
        })
        .collect();

    if !python_available() {
        return;
    }
    // The oracle: psycopg2 itself, on the same server and database.
    let probe = r#"
import json, sys, psycopg2
conn = psycopg2.connect(sys.argv[1])
cur = conn.cursor()
cur.execute("SET TIME ZONE 'UTC'")
cur.execute(sys.argv[2])
row = cur.fetchone()
out = [json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else str(v) for v in row]
print(json.dumps(out))
"#;
    let target = match pg.python_target() {
        merit_interact::PythonTarget::Postgres { dsn, .. } => dsn,
        other => panic!("{other:?}"),
    };
    let output = std::process::Command::new("python3")
        .args(["-c", probe, &target, VALUES_SQL])
        .output()
        .expect("python3 runs");
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("No module named 'psycopg2'") {
            merit_core::optional::missing(
                "MERIT_REQUIRE_POSTGRES",
                "psycopg2 is missing, so values were not compared with Python",
                "`bash scripts/setup-postgres.sh` installs it",
            );
            return;
        }
        panic!("the psycopg2 probe failed: {stderr}");
    }
    let python: Vec<String> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(ours.len(), python.len());
    for (index, (mine, theirs)) in ours.iter().zip(&python).enumerate() {
        assert_eq!(mine, theirs, "column {index}");
    }
}

fn query_task(id: &str, gold: &[&str], order: bool) -> serde_json::Value {
    json!({
        "instance_id": id, "selected_database": "alien", "amb_user_query": "q",
        "sol_sql": gold, "category": "Query", "conditions": {"order": order},
    })
}

fn pg_environment(
    server: &PostgresServer,
    set: &TaskSet,
    id: &str,
) -> Environment<PostgresBackend, merit_interact::ScriptedSimulator> {
    let task = set.get(id).unwrap();
    let meta = Arc::clone(set.database("alien").unwrap());
    Environment::new(task, meta, alien(server), silent(), EnvConfig::default()).unwrap()
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn a_real_query_is_judged_on_postgres() {
    let Some(server) = server() else { return };
    let (_dir, set) = custom_tasks(&[query_task(
        "alien_951",
        &["SELECT weathprofile, COUNT(*) FROM observatories GROUP BY weathprofile"],
        false,
    )]);
    let submit = |sql: &str| {
        let mut env = pg_environment(&server, &set, "alien_951");
        let result = env.step(ActionCall::submit(sql)).unwrap();
        (env.outcome().phase1_passed, result.observation)
    };
    let (ok, observation) =
        submit("SELECT weathprofile, COUNT(*) AS n FROM observatories GROUP BY 1 ORDER BY n DESC");
    assert!(ok, "{observation}");
    let (ok, _) = submit("SELECT weathprofile, COUNT(*) + 1 FROM observatories GROUP BY 1");
    assert!(!ok);
    let (ok, observation) = submit("SELECT COUNT(*) FROM nowhere");
    assert!(!ok);
    assert!(
        observation.contains("relation \"nowhere\" does not exist"),
        "{observation}"
    );
    // The agent's execute on a Query task is read-only, and its writes do nothing.
    let mut env = pg_environment(&server, &set, "alien_951");
    let denied = env
        .step(ActionCall::execute("DELETE FROM observatories"))
        .unwrap();
    assert!(
        denied.observation.contains("read-only transaction"),
        "{}",
        denied.observation
    );
    let counted = env
        .step(ActionCall::execute(
            "SELECT COUNT(*) > 0 FROM observatories",
        ))
        .unwrap();
    assert!(
        counted.observation.starts_with("True\n"),
        "{}",
        counted.observation
    );
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn the_same_data_gives_the_same_results_as_sqlite() {
    let Some(server) = server() else { return };
    let set = load_mini();
    let meta = Arc::clone(set.database("alien").unwrap());
    let mut sqlite = sqlite_backend(&meta).unwrap();
    let mut pg = alien(&server);
    let queries = [
        ("SELECT COUNT(*) FROM observatories", true),
        (
            "SELECT weathprofile, COUNT(*), MIN(observstation) FROM observatories GROUP BY weathprofile",
            false,
        ),
        (
            "SELECT observstation, airtempc, humidityrate FROM observatories WHERE airtempc > 10",
            false,
        ),
        (
            "SELECT AVG(airtempc), SUM(lunardistdeg), MAX(presshpa) FROM observatories",
            true,
        ),
        (
            "SELECT o.weathprofile, COUNT(c.signalref) FROM observatories o \
             LEFT JOIN observationalconditions c ON c.obsdate LIKE '2024%' \
             AND o.observstation = c.signalref GROUP BY o.weathprofile",
            false,
        ),
        (
            // NULLs sort differently on the two engines; leave them out of an ordered check.
            "SELECT signalref, obsdate, obsdurhrs FROM observationalconditions \
             WHERE obsdurhrs IS NOT NULL ORDER BY obsdurhrs DESC, signalref LIMIT 20",
            true,
        ),
    ];
    for (sql, ordered) in queries {
        let a = sqlite.query_read_only(sql, &limits()).unwrap();
        let b = pg.query_read_only(sql, &limits()).unwrap();
        assert!(!a.rows.is_empty(), "{sql}");
        assert_eq!(a.rows.len(), b.rows.len(), "{sql}");
        assert!(results_match(&a.rows, &b.rows, ordered), "{sql}");
    }
    // Integers and text print identically in an execute observation.
    let sql =
        "SELECT weathprofile, COUNT(*) FROM observatories GROUP BY weathprofile ORDER BY 2, 1";
    let a = merit_interact::env::render_execute(sqlite.query_read_only(sql, &limits()));
    let b = merit_interact::env::render_execute(pg.query_read_only(sql, &limits()));
    assert_eq!(a, b);
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn management_tasks_run_their_python_tests_through_psycopg2() {
    let Some(server) = server() else { return };
    if !python_available() {
        return;
    }
    let check = "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    \
        rows, err, timeout = execute_queries(\"SELECT COUNT(*) FROM observatories WHERE airtempc = 100\", db_name, conn)\n    \
        want, _, _ = execute_queries(\"SELECT COUNT(*) FROM observatories WHERE weathprofile = 'Clear'\", db_name, conn)\n    \
        assert not err and not timeout\n    \
        assert rows[0][0] == want[0][0], 'SECRET_EXPECTED_VALUE'\n";
    let default_via_helper = "def test_case(pred_sqls, sol_sqls, db_name, conn, conditions):\n    \
        assert test_case_default(['SELECT ROUND(1.4, 0)'], ['SELECT 1.4'], db_name, conn, conditions) == 1\n    \
        rows, err, timeout = execute_queries(['SELECT pg_sleep(5)'], db_name, conn)\n    \
        assert timeout and not err\n";
    let record = json!({
        "instance_id": "alien_M_951", "selected_database": "alien", "amb_user_query": "q",
        "category": "Management",
        "sol_sql": ["UPDATE observatories SET airtempc = 100 WHERE weathprofile = 'Clear'"],
        "test_cases": [check, default_via_helper],
    });
    let (_dir, set) = custom_tasks(&[record]);
    let config = EnvConfig {
        statement_timeout: Duration::from_secs(1),
        ..EnvConfig::default()
    };
    let run = |sql: &str| -> Result<(bool, String), InteractError> {
        let task = set.get("alien_M_951").unwrap();
        let meta = Arc::clone(set.database("alien").unwrap());
        let mut env = Environment::new(task, meta, alien(&server), silent(), config.clone())?;
        let result = env.step(ActionCall::submit(sql))?;
        Ok((env.outcome().phase1_passed, result.observation))
    };
    let outcome = run("UPDATE observatories SET airtempc = 100 WHERE weathprofile = 'Clear'");
    match outcome {
        Err(InteractError::Harness { reason, .. }) if reason.contains("psycopg2") => {
            merit_core::optional::missing(
                "MERIT_REQUIRE_POSTGRES",
                &reason,
                "`bash scripts/setup-postgres.sh` installs it",
            );
            return;
        }
        Err(other) => panic!("{other}"),
        Ok((ok, observation)) => assert!(ok, "{observation}"),
    }
    let (ok, observation) =
        run("UPDATE observatories SET airtempc = 100 WHERE weathprofile = 'Cloudy'").unwrap();
    assert!(!ok);
    assert!(observation.contains("failed test case 1"), "{observation}");
    assert!(!observation.contains("SECRET"), "{observation}");
    let (ok, observation) = run("UPDATE nowhere SET x = 1").unwrap();
    assert!(!ok);
    assert!(observation.contains("does not exist"), "{observation}");
}

#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn a_missing_template_is_a_clear_error() {
    let Some(server) = server() else { return };
    match PostgresBackend::new(&server, "alien", "merit_t_no_such_template") {
        Err(InteractError::DatabaseUnavailable { reason, .. }) => {
            assert!(reason.contains("merit_t_no_such_template"), "{reason}")
        }
        other => panic!("expected DatabaseUnavailable, got {other:?}"),
    }
    let nowhere = PostgresServer::new("postgresql://merit:wrong@127.0.0.1:1/merit").unwrap();
    let error = nowhere.database_exists("x").unwrap_err();
    assert!(error.to_string().contains("connecting"), "{error}");
}

/// `merit_sql::Database` on PostgreSQL (the repair side: `merit ask`, live mode, `merit serve`)
/// on a copy of the Spider `concert_singer` database: the same answers as SQLite, writes
/// refused, the deadline, the row cap while fetching, one statement at a time, and the
/// server's own error text classified as on SQLite.
#[test]
#[ignore = "needs PostgreSQL: set MERIT_TEST_POSTGRES_URL (bash scripts/setup-postgres.sh); run with --include-ignored, as CI does"]
fn a_spider_database_answers_through_merit_sql_on_postgresql() {
    use merit_sql::{Database, SqliteDatabase, Value};
    let Some(server) = server() else { return };
    let sqlite_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/spider/database/concert_singer/concert_singer.sqlite");
    let template = server
        .ensure_sqlite_template("concert_singer", &sqlite_path)
        .expect("concert_singer loads into PostgreSQL");
    let pg = merit_interact::PostgresDatabase::connect(&server, &template).unwrap();
    assert_eq!(pg.dialect(), Dialect::Postgres);
    let sqlite = SqliteDatabase::open(&sqlite_path).unwrap();
    // The schema the prompts show, read from the PostgreSQL catalog.
    let schema = merit_repair::prompts::initial::schema_from_database(&pg).unwrap();
    assert!(schema.contains("CREATE TABLE singer (\n"), "{schema}");
    assert!(schema.contains("  \"Name\" TEXT"), "{schema}");
    assert_eq!(schema.matches("CREATE TABLE").count(), 4, "{schema}");
    let limits = ExecLimits::with_timeout(Duration::from_secs(10));
    for sql in [
        "SELECT count(*) FROM singer",
        // The copy keeps SQLite's identifier case, so mixed-case names are quoted (SQLite
        // takes the quotes too).
        r#"SELECT "Name", "Age" FROM singer ORDER BY "Age" DESC, "Name""#,
        r#"SELECT "Country", count(*) FROM singer GROUP BY "Country" ORDER BY "Country""#,
    ] {
        let on_pg = pg.query(sql, &limits).unwrap();
        let on_sqlite = sqlite.query(sql, &limits).unwrap();
        assert_eq!(on_pg.rows, on_sqlite.rows, "{sql}");
    }
    // The row cap holds while fetching: a cut result is reported, never failed.
    let capped = pg
        .query(
            r#"SELECT "Name" FROM singer"#,
            &ExecLimits {
                timeout: Duration::from_secs(10),
                max_rows: Some(2),
            },
        )
        .unwrap();
    assert_eq!(capped.rows.len(), 2);
    assert!(capped.truncated);
    // Writes are refused, the deadline interrupts, one statement at a time.
    let write = pg.query("DELETE FROM singer", &limits).unwrap_err();
    assert!(write.to_string().contains("read-only"), "{write}");
    assert_eq!(
        pg.query("SELECT count(*) FROM singer", &limits)
            .unwrap()
            .rows,
        [[Value::Integer(6)]]
    );
    let slow = pg
        .query(
            "SELECT pg_sleep(5)",
            &ExecLimits::with_timeout(Duration::from_millis(200)),
        )
        .unwrap_err();
    assert!(slow.is_timeout(), "{slow}");
    assert_eq!(
        pg.query("SELECT 1; SELECT 2", &limits).unwrap_err(),
        ExecError::MultipleStatements
    );
    // The error text is the server's, and the classifier reads it as on SQLite.
    let missing = pg.query("SELECT nme FROM singer", &limits).unwrap_err();
    let label = merit_memory::classify(
        merit_core::Status::ExecutionError,
        Some(&missing.to_string()),
    )
    .unwrap();
    assert_eq!(
        label.failure_type,
        merit_memory::FailureType::SchemaLinking,
        "{missing}"
    );
}
