//! Every classifier rule against a real error message.
//!
//! SQLite messages are produced here, by running bad SQL through `merit_sql::SqliteDatabase`
//! on real Spider databases. PostgreSQL 15 messages were captured from a live 15.18 server
//! by `tests/data/capture_postgres15.py` (schema in `tests/data/postgres15_schema.sql`) and
//! are stored verbatim, hint lines included, in `tests/data/postgres15_errors.jsonl`.

use merit_core::Status;
use merit_memory::classify::{classify, rules, RULE_FALLBACK};
use merit_memory::FailureType;
use merit_sql::{Database, ExecError, ExecLimits, SqliteDatabase};
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::Duration;

const DATABASES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/data/spider/database"
);

fn open(db: &str) -> SqliteDatabase {
    let path = format!("{DATABASES}/{db}/{db}.sqlite");
    SqliteDatabase::open(&path).unwrap_or_else(|e| panic!("cannot open {path}: {e}"))
}

/// Runs `sql` and returns the error text the oracle would pass on.
fn error_of(db: &SqliteDatabase, sql: &str, limits: &ExecLimits) -> String {
    match db.query(sql, limits) {
        Ok(_) => panic!("expected {sql:?} to fail"),
        Err(error) => error.to_string(),
    }
}

struct Case {
    rule: &'static str,
    expected: FailureType,
    db: &'static str,
    sql: &'static str,
}

const fn case(
    rule: &'static str,
    expected: FailureType,
    db: &'static str,
    sql: &'static str,
) -> Case {
    Case {
        rule,
        expected,
        db,
        sql,
    }
}

use FailureType::*;

/// Bad SQL for each SQLite rule, on Spider databases.
const SQLITE_CASES: &[Case] = &[
    case(
        "sqlite-no-such-column",
        SchemaLinking,
        "concert_singer",
        "SELECT nme FROM singer",
    ),
    case(
        "sqlite-no-such-column",
        SchemaLinking,
        "concert_singer",
        "SELECT T3.name FROM singer AS T1",
    ),
    case(
        "sqlite-no-such-table",
        SchemaLinking,
        "concert_singer",
        "SELECT name FROM singers",
    ),
    case(
        "sqlite-no-such-table",
        SchemaLinking,
        "pets_1",
        "SELECT x.* FROM student",
    ),
    case(
        "sqlite-ambiguous-column",
        SchemaLinking,
        "concert_singer",
        "SELECT Stadium_ID FROM stadium JOIN concert ON stadium.Stadium_ID = concert.Stadium_ID",
    ),
    case(
        "sqlite-no-such-index",
        SchemaLinking,
        "concert_singer",
        "SELECT * FROM singer INDEXED BY nope",
    ),
    case(
        "sqlite-join-using-column",
        SchemaLinking,
        "concert_singer",
        "SELECT * FROM singer JOIN concert USING (nope)",
    ),
    case(
        "sqlite-result-column-unmatched",
        SchemaLinking,
        "concert_singer",
        "SELECT name FROM singer EXCEPT SELECT name FROM stadium ORDER BY nope",
    ),
    case(
        "sqlite-near-syntax-error",
        Syntax,
        "concert_singer",
        "SELEC name FROM singer",
    ),
    case(
        "sqlite-near-syntax-error",
        Syntax,
        "pets_1",
        "SELECT count(*), FROM student",
    ),
    case(
        "sqlite-incomplete-input",
        Syntax,
        "concert_singer",
        "SELECT name FROM singer WHERE",
    ),
    case(
        "sqlite-incomplete-input",
        Syntax,
        "pets_1",
        "SELECT count(*) FROM student WHERE age > (1",
    ),
    case(
        "sqlite-unrecognized-token",
        Syntax,
        "concert_singer",
        "SELECT name FROM singer WHERE name = 'abc",
    ),
    case(
        "sqlite-compound-arity",
        Syntax,
        "concert_singer",
        "SELECT name FROM singer UNION SELECT name, age FROM singer",
    ),
    case(
        "sqlite-order-by-out-of-range",
        Syntax,
        "concert_singer",
        "SELECT name FROM singer ORDER BY 9",
    ),
    case(
        "sqlite-no-such-function",
        Syntax,
        "concert_singer",
        "SELECT YEAR(Song_release_year) FROM singer",
    ),
    case(
        "sqlite-function-arity",
        Syntax,
        "concert_singer",
        "SELECT substr(name) FROM singer",
    ),
    case(
        "sqlite-misuse-of-aggregate",
        Aggregation,
        "concert_singer",
        "SELECT name FROM singer WHERE count(*) > 1",
    ),
    case(
        "sqlite-misuse-of-aggregate",
        Aggregation,
        "pets_1",
        "SELECT max(count(*)) FROM student",
    ),
    case(
        "sqlite-misuse-of-aggregate",
        Aggregation,
        "concert_singer",
        "SELECT DISTINCT name FROM singer ORDER BY count(*)",
    ),
    case(
        "sqlite-misuse-of-window",
        Aggregation,
        "concert_singer",
        "SELECT name FROM singer WHERE rank() OVER () > 1",
    ),
    case(
        "aggregate-not-allowed",
        Aggregation,
        "concert_singer",
        "SELECT name FROM singer GROUP BY count(*)",
    ),
    case(
        "sqlite-having-without-grouping",
        Aggregation,
        "concert_singer",
        "SELECT name FROM singer HAVING age > 1",
    ),
    case(
        "sqlite-group-by-out-of-range",
        Aggregation,
        "concert_singer",
        "SELECT name FROM singer GROUP BY 9",
    ),
    case(
        "sqlite-aggregate-arity",
        Aggregation,
        "concert_singer",
        "SELECT avg(DISTINCT age, name) FROM singer",
    ),
    case(
        "sqlite-aggregate-arity",
        Aggregation,
        "pets_1",
        "SELECT min() FROM student",
    ),
    case(
        "sqlite-datatype-mismatch",
        FilterValue,
        "concert_singer",
        "SELECT name FROM singer LIMIT 'a'",
    ),
    case(
        "sqlite-row-value-misused",
        FilterValue,
        "concert_singer",
        "SELECT name FROM singer WHERE (age, name) = 1",
    ),
    case(
        "sqlite-row-value-misused",
        FilterValue,
        "concert_singer",
        "SELECT name FROM singer WHERE age = (SELECT age, name FROM singer)",
    ),
    case(
        "sqlite-subselect-width",
        FilterValue,
        "concert_singer",
        "SELECT name FROM singer WHERE age IN (SELECT age, name FROM singer)",
    ),
    case(
        "sqlite-escape-character",
        FilterValue,
        "concert_singer",
        "SELECT name FROM singer WHERE name LIKE 'a' ESCAPE 'ab'",
    ),
    case(
        "sqlite-malformed-json",
        FilterValue,
        "concert_singer",
        "SELECT json_extract('{', '$')",
    ),
    case(
        "numeric-overflow",
        Execution,
        "concert_singer",
        "SELECT sum(9223372036854775807) FROM singer",
    ),
    case(
        "numeric-overflow",
        Execution,
        "concert_singer",
        "SELECT abs(-9223372036854775808)",
    ),
    case(
        "sqlite-too-big",
        Execution,
        "concert_singer",
        "SELECT randomblob(2000000000)",
    ),
    case(
        "merit-denied",
        Execution,
        "concert_singer",
        "DELETE FROM singer",
    ),
    case("merit-denied", Execution, "pets_1", "ATTACH 'x' AS y"),
    case(
        "merit-multiple-statements",
        Syntax,
        "concert_singer",
        "SELECT name FROM singer; SELECT 1",
    ),
    // SQLite accepts this and fails only when a row is compared; no rule knows it.
    case(
        RULE_FALLBACK,
        Unknown,
        "concert_singer",
        "SELECT name FROM singer WHERE name MATCH 'a'",
    ),
];

#[test]
fn every_sqlite_case_is_classified_by_its_rule() {
    let mut failures = Vec::new();
    for case in SQLITE_CASES {
        let db = open(case.db);
        let message = error_of(&db, case.sql, &ExecLimits::AGENT);
        let got = classify(Status::ExecutionError, Some(&message)).unwrap();
        if got.rule != case.rule || got.failure_type != case.expected {
            failures.push(format!(
                "{:?}: message {message:?} gave {} via {}, expected {} via {}",
                case.sql, got.failure_type, got.rule, case.expected, case.rule
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn merit_sql_guard_messages_are_classified() {
    let db = open("concert_singer");
    // A deadline far shorter than the query: merit-sql interrupts the engine.
    let slow =
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n";
    let timeout = error_of(
        &db,
        slow,
        &ExecLimits::with_timeout(Duration::from_millis(30)),
    );
    let label = classify(Status::ExecutionError, Some(&timeout)).unwrap();
    assert_eq!(
        (label.failure_type, label.rule),
        (Execution, "merit-timeout"),
        "{timeout}"
    );
    // The same query as the oracle reports it (status timeout) is Execution by status.
    assert_eq!(
        classify(Status::Timeout, Some(&timeout))
            .unwrap()
            .failure_type,
        Execution
    );

    let limits = ExecLimits {
        timeout: Duration::from_secs(10),
        max_rows: Some(1),
    };
    let capped = db
        .for_each_row("SELECT name FROM singer", &limits, &mut |_| {
            ControlFlow::Continue(())
        })
        .expect_err("row cap");
    assert!(matches!(capped, ExecError::TooManyRows(1)));
    let label = classify(Status::ExecutionError, Some(&capped.to_string())).unwrap();
    assert_eq!(
        (label.failure_type, label.rule),
        (Execution, "merit-row-cap")
    );

    let missing = SqliteDatabase::open(format!("{DATABASES}/no_such_db/no_such_db.sqlite"))
        .expect_err("missing database");
    let label = classify(Status::ExecutionError, Some(&missing.to_string())).unwrap();
    assert_eq!(
        (label.failure_type, label.rule),
        (Execution, "merit-cannot-open")
    );

    // Written by merit-eval's oracle when the model's reply holds no SQL at all; there is no
    // database error behind it, so the text is the oracle's own.
    let label = classify(
        Status::ExecutionError,
        Some("the candidate contains no SQL statement"),
    )
    .unwrap();
    assert_eq!(
        (label.failure_type, label.rule),
        (Syntax, "merit-no-statement")
    );
}

/// Expected label and rule for each captured PostgreSQL 15 query.
const POSTGRES_CASES: &[(&str, FailureType, &str)] = &[
    (
        "SELECT nme FROM singer",
        SchemaLinking,
        "pg-column-does-not-exist",
    ),
    (
        "SELECT T1.nme FROM singer AS T1",
        SchemaLinking,
        "pg-column-does-not-exist",
    ),
    (
        "SELECT name FROM singers",
        SchemaLinking,
        "pg-relation-does-not-exist",
    ),
    (
        "SELECT name FROM public.nope",
        SchemaLinking,
        "pg-relation-does-not-exist",
    ),
    (
        "SELECT T3.name FROM singer AS T1",
        SchemaLinking,
        "pg-missing-from-entry",
    ),
    (
        "SELECT stadium_id FROM stadium JOIN concert ON stadium.stadium_id = concert.stadium_id",
        SchemaLinking,
        "pg-ambiguous-column",
    ),
    (
        "SELECT * FROM singer AS a JOIN singer AS a ON true",
        SchemaLinking,
        "pg-table-specified-twice",
    ),
    (
        "SELECT name FROM singer AS s WHERE singer.age > 1",
        SchemaLinking,
        "pg-invalid-from-reference",
    ),
    (
        "SELECT s.name FROM singer s JOIN concert c USING (nope)",
        SchemaLinking,
        "pg-column-does-not-exist",
    ),
    (
        "SELECT name FROM singer ORDER BY nope",
        SchemaLinking,
        "pg-column-does-not-exist",
    ),
    ("SELEC name FROM singer", Syntax, "pg-syntax-error"),
    ("SELECT name FROM singer WHERE", Syntax, "pg-syntax-error"),
    (
        "SELECT name FROM singer WHERE name = 'abc",
        Syntax,
        "pg-unterminated-or-empty-token",
    ),
    (
        "SELECT \"\" FROM singer",
        Syntax,
        "pg-unterminated-or-empty-token",
    ),
    (
        "SELECT * FROM (SELECT name FROM singer)",
        Syntax,
        "pg-subquery-alias",
    ),
    (
        "SELECT name FROM singer LIMIT 1, 2",
        Syntax,
        "pg-limit-comma",
    ),
    (
        "SELECT name FROM singer UNION SELECT name, age FROM singer",
        Syntax,
        "pg-set-operation-arity",
    ),
    (
        "SELECT name FROM singer ORDER BY 9",
        Syntax,
        "pg-order-by-position",
    ),
    (
        "SELECT DISTINCT name FROM singer ORDER BY age",
        Syntax,
        "pg-distinct-order-by",
    ),
    (
        "SELECT YEAR(song_release_year) FROM singer",
        Syntax,
        "pg-function-signature",
    ),
    (
        "SELECT substr() FROM singer",
        Syntax,
        "pg-function-signature",
    ),
    (
        "SELECT name, age FROM singer GROUP BY name",
        Aggregation,
        "pg-must-appear-in-group-by",
    ),
    (
        "SELECT name FROM singer WHERE count(*) > 1",
        Aggregation,
        "aggregate-not-allowed",
    ),
    (
        "SELECT max(count(*)) FROM singer",
        Aggregation,
        "pg-nested-aggregate",
    ),
    (
        "SELECT name FROM singer GROUP BY count(*)",
        Aggregation,
        "aggregate-not-allowed",
    ),
    (
        "SELECT name FROM singer GROUP BY 9",
        Aggregation,
        "pg-group-by-position",
    ),
    (
        "SELECT avg(name) FROM singer",
        Aggregation,
        "pg-aggregate-signature",
    ),
    (
        "SELECT count(name, age) FROM singer",
        Aggregation,
        "pg-aggregate-signature",
    ),
    (
        "SELECT name FROM singer WHERE rank() OVER () > 1",
        Aggregation,
        "pg-window-not-allowed",
    ),
    (
        "SELECT avg(age) FILTER (WHERE sum(age) > 1) FROM singer",
        Aggregation,
        "aggregate-not-allowed",
    ),
    (
        "SELECT name FROM singer WHERE age = 'abc'",
        FilterValue,
        "pg-invalid-input-syntax",
    ),
    (
        "SELECT name FROM singer WHERE age = name",
        FilterValue,
        "pg-operator-mismatch",
    ),
    (
        "SELECT name FROM singer WHERE name LIKE 1",
        FilterValue,
        "pg-operator-mismatch",
    ),
    (
        "SELECT name FROM singer WHERE age",
        FilterValue,
        "pg-argument-type",
    ),
    (
        "SELECT name FROM singer WHERE is_male = 'maybe'",
        FilterValue,
        "pg-invalid-input-syntax",
    ),
    (
        "SELECT DATE '2020-13-45'",
        FilterValue,
        "pg-datetime-out-of-range",
    ),
    (
        "SELECT name FROM singer WHERE age IN (SELECT age, name FROM singer)",
        FilterValue,
        "pg-subquery-width",
    ),
    (
        "SELECT name FROM singer UNION SELECT age FROM singer",
        FilterValue,
        "pg-types-cannot-be-matched",
    ),
    (
        "SELECT coalesce(name, age) FROM singer",
        FilterValue,
        "pg-types-cannot-be-matched",
    ),
    (
        "SELECT to_date('2020', 'YYYY') + 'x'",
        FilterValue,
        "pg-operator-mismatch",
    ),
    (
        "SELECT round(age::float8, 2) FROM singer",
        Syntax,
        "pg-function-signature",
    ),
    ("SELECT 1/0", Execution, "pg-division-by-zero"),
    ("SELECT 2147483647 + 1", Execution, "numeric-overflow"),
    (
        "SELECT (SELECT age FROM singer)",
        Execution,
        "pg-scalar-subquery-rows",
    ),
    (
        "SELECT count(*) FROM singer, pg_sleep(2)",
        Execution,
        "pg-statement-canceled",
    ),
    ("DELETE FROM singer", Execution, "pg-read-only-transaction"),
    (
        "SELECT name FROM singer WHERE age > ANY (1)",
        Unknown,
        RULE_FALLBACK,
    ),
];

fn postgres_messages() -> Vec<(String, String)> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/postgres15_errors.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("postgres fixture");
    text.lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).expect("fixture line");
            (
                record["sql"].as_str().unwrap_or_default().to_string(),
                record["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn every_captured_postgres_message_is_classified_by_its_rule() {
    let messages = postgres_messages();
    assert_eq!(
        messages.len(),
        POSTGRES_CASES.len(),
        "fixture and expectations differ in length"
    );
    let mut failures = Vec::new();
    for (sql, expected, rule) in POSTGRES_CASES {
        let Some((_, message)) = messages.iter().find(|(s, _)| s == sql) else {
            failures.push(format!("{sql:?} is not in the fixture"));
            continue;
        };
        assert!(message.starts_with("ERROR:"), "{sql}: {message}");
        let got = classify(Status::ExecutionError, Some(message)).unwrap();
        if got.rule != *rule || got.failure_type != *expected {
            failures.push(format!(
                "{sql:?}: {message:?} gave {} via {}, expected {expected} via {rule}",
                got.failure_type, got.rule
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_rule_has_a_real_message_test() {
    let mut tested: BTreeSet<&str> = SQLITE_CASES.iter().map(|c| c.rule).collect();
    tested.extend(POSTGRES_CASES.iter().map(|(_, _, rule)| *rule));
    tested.extend([
        "merit-timeout",
        "merit-row-cap",
        "merit-cannot-open",
        "merit-no-statement",
    ]);
    let untested: Vec<&str> = rules()
        .iter()
        .map(|rule| rule.id)
        .filter(|id| !tested.contains(id))
        .collect();
    assert!(
        untested.is_empty(),
        "rules without a real-message test: {untested:?}"
    );
}

#[test]
fn python_sqlite_3_40_messages_from_the_golden_file_are_all_recognised() {
    // The golden vectors record the errors of Python's sqlite3 (SQLite 3.40.1), which words
    // some messages without the statement echo of newer versions.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/data/golden/eval_vectors_dev.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("golden vectors");
    let mut seen = 0;
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).expect("golden line");
        let Some(message) = record["pred_error_message"].as_str() else {
            continue;
        };
        let message = message.split_once(": ").map_or(message, |(_, m)| m);
        let label = classify(Status::ExecutionError, Some(message)).unwrap();
        assert_ne!(label.failure_type, Unknown, "{message}");
        seen += 1;
    }
    assert_eq!(seen, 308);
}
