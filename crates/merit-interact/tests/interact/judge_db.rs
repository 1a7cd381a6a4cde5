//! Judging on a real database: the default test's rules end to end, and Management tasks
//! through the Python harness.

use crate::common::{custom_tasks, environment, python_available, silent};
use merit_interact::{ActionCall, EndReason, EnvConfig, PythonHarness, TaskSet};
use serde_json::json;
use std::time::Duration;

fn query_task(id: &str, gold: &[&str], order: bool) -> serde_json::Value {
    json!({
        "instance_id": id, "selected_database": "alien", "amb_user_query": "q",
        "sol_sql": gold, "category": "Query", "conditions": {"order": order},
    })
}

/// Submits `prediction` to a fresh episode of `id` and says whether phase 1 passed.
fn passes(set: &TaskSet, id: &str, prediction: &str) -> (bool, String) {
    let mut env = environment(set, id, silent(), EnvConfig::default());
    let result = env.step(ActionCall::submit(prediction)).unwrap();
    (env.outcome().phase1_passed, result.observation)
}

#[test]
fn the_default_test_applies_the_reference_rules() {
    let (_dir, set) = custom_tasks(&[
        query_task(
            "alien_901",
            &["SELECT weathprofile, ROUND(AVG(airtempc), 4) FROM observatories GROUP BY weathprofile"],
            false,
        ),
        query_task(
            "alien_902",
            &["SELECT DISTINCT weathprofile FROM observatories ORDER BY weathprofile"],
            true,
        ),
        query_task("alien_903", &["SELECT weathprofile FROM observatories WHERE 0"], false),
        query_task(
            "alien_904",
            &["SELECT 1", "SELECT COUNT(*) FROM observatories"],
            false,
        ),
    ]);
    // ROUND stripped on both sides; floats then rounded to 2 places; rows compared as a set.
    let (ok, _) = passes(
        &set,
        "alien_901",
        "SELECT weathprofile, AVG(airtempc) FROM observatories GROUP BY weathprofile ORDER BY 1 DESC",
    );
    assert!(ok);
    let (ok, _) = passes(
        &set,
        "alien_901",
        "SELECT weathprofile, AVG(airtempc) + 0.01 FROM observatories GROUP BY weathprofile",
    );
    assert!(!ok);
    // Column order matters.
    let (ok, _) = passes(
        &set,
        "alien_901",
        "SELECT AVG(airtempc), weathprofile FROM observatories GROUP BY weathprofile",
    );
    assert!(!ok);
    // DISTINCT stripped on both sides, but set comparison ignores multiplicity anyway;
    // with order = true the order must match.
    let (ok, _) = passes(
        &set,
        "alien_902",
        "SELECT weathprofile FROM observatories ORDER BY weathprofile",
    );
    assert!(ok);
    let (ok, _) = passes(
        &set,
        "alien_902",
        "SELECT DISTINCT weathprofile FROM observatories ORDER BY weathprofile DESC",
    );
    assert!(!ok);
    // An empty gold can never be matched.
    let (ok, _) = passes(
        &set,
        "alien_903",
        "SELECT weathprofile FROM observatories WHERE 0",
    );
    assert!(!ok);
    // Only the last gold statement counts.
    let (ok, _) = passes(&set, "alien_904", "SELECT COUNT(*) FROM observatories");
    assert!(ok);
    // An execution error fails, and the agent sees its own error text.
    let (ok, observation) = passes(&set, "alien_904", "SELECT COUNT(*) FROM nowhere");
    assert!(!ok);
    assert!(
        observation.contains("no such table: nowhere"),
        "{observation}"
    );
    // Several statements in one submission fail (one statement per call, as in mini).
    let (ok, _) = passes(
        &set,
        "alien_904",
        "SELECT 1; SELECT COUNT(*) FROM observatories",
    );
    assert!(!ok);
}

#[test]
fn management_tasks_run_the_python_test_cases() {
    if !python_available() {
        return;
    }
    let check = "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    \
        rows, err, timeout = execute_queries(\"SELECT COUNT(*) FROM observatories WHERE airtempc = 100\", db_name, conn)\n    \
        want, _, _ = execute_queries(\"SELECT COUNT(*) FROM observatories WHERE weathprofile = 'Clear'\", db_name, conn)\n    \
        assert not err and not timeout\n    \
        assert rows[0][0] == want[0][0], 'SECRET_EXPECTED_VALUE 327'\n";
    let default_via_helper = "def test_case(pred_sqls, sol_sqls, db_name, conn, conditions):\n    \
        rows, _, _ = execute_queries(['SELECT COUNT(*) FROM observatories WHERE airtempc = 100'], db_name, conn)\n    \
        assert rows[0][0] > 0\n    \
        assert ex_base(['SELECT ROUND(1.4, 0)'], ['SELECT 1.4'], db_name, conn, conditions) == 0\n    \
        assert test_case_default(['SELECT ROUND(1.4, 0)'], ['SELECT 1.4'], db_name, conn, conditions) == 1\n";
    let record = json!({
        "instance_id": "alien_M_901", "selected_database": "alien", "amb_user_query": "q",
        "category": "Management",
        "sol_sql": ["UPDATE observatories SET airtempc = 100 WHERE weathprofile = 'Clear'"],
        "test_cases": [check, default_via_helper],
        "preprocess_sql": [], "clean_up_sqls": [],
        "follow_up": {
            "query": "How many observatories are at 100 degrees now?",
            "sol_sql": ["SELECT COUNT(*) FROM observatories WHERE airtempc = 100"],
            "category": "Query", "test_cases": []
        }
    });
    let (_dir, set) = custom_tasks(&[record]);

    // Wrong: the first test fails; the agent learns the index, not the assertion text.
    let (ok, observation) = passes(
        &set,
        "alien_M_901",
        "UPDATE observatories SET airtempc = 100 WHERE weathprofile = 'Cloudy'",
    );
    assert!(!ok);
    assert!(observation.contains("failed test case 1"), "{observation}");
    assert!(!observation.contains("SECRET"), "{observation}");

    // Right: phase 1 passes; phase 2 is judged on the state phase 1 left behind.
    let mut env = environment(&set, "alien_M_901", silent(), EnvConfig::default());
    let first = env
        .step(ActionCall::submit(
            "UPDATE observatories SET airtempc = 100 WHERE weathprofile = 'Clear'",
        ))
        .unwrap();
    assert!(
        first.observation.contains("phase 1 is solved"),
        "{}",
        first.observation
    );
    // Exploring in between resets the copy, so the follow-up's count is 0 here...
    let explored = env
        .step(ActionCall::execute(
            "SELECT COUNT(*) FROM observatories WHERE airtempc = 100",
        ))
        .unwrap();
    assert!(
        explored.observation.starts_with("0\n"),
        "{}",
        explored.observation
    );
    // ...but the judge replays the passing phase-1 SQL before judging phase 2.
    let second = env
        .step(ActionCall::submit(
            "SELECT COUNT(*) FROM observatories WHERE airtempc = 100",
        ))
        .unwrap();
    assert!(second.done, "{}", second.observation);
    assert_eq!(env.outcome().end, EndReason::Solved);
    assert!((env.outcome().reward - 1.0).abs() < 1e-12);

    // A failing DML submission fails with its own error.
    let (ok, observation) = passes(&set, "alien_M_901", "UPDATE nowhere SET x = 1");
    assert!(!ok);
    assert!(
        observation.contains("no such table: nowhere"),
        "{observation}"
    );
}

#[test]
fn the_python_harness_has_a_timeout() {
    if !python_available() {
        return;
    }
    let record = json!({
        "instance_id": "alien_M_902", "selected_database": "alien", "amb_user_query": "q",
        "category": "Management", "sol_sql": ["SELECT 1"],
        "test_cases": ["def test_case(a, b, c, d):\n    while True:\n        pass\n"],
    });
    let (_dir, set) = custom_tasks(&[record]);
    let config = EnvConfig {
        harness: PythonHarness {
            timeout: Duration::from_secs(2),
            ..PythonHarness::default()
        },
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_M_902", silent(), config);
    let started = std::time::Instant::now();
    let result = env.step(ActionCall::submit("SELECT 1")).unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(
        result.observation.contains("ran past the time limit"),
        "{}",
        result.observation
    );
    assert!(!env.outcome().phase1_passed);
}

#[test]
fn a_missing_interpreter_is_an_infrastructure_error() {
    let record = json!({
        "instance_id": "alien_M_903", "selected_database": "alien", "amb_user_query": "q",
        "category": "Management", "sol_sql": ["SELECT 1"],
        "test_cases": ["def test_case(a, b, c, d):\n    pass\n"],
    });
    let (_dir, set) = custom_tasks(&[record]);
    let config = EnvConfig {
        harness: PythonHarness {
            program: "/nonexistent/python-for-merit".into(),
            ..PythonHarness::default()
        },
        ..EnvConfig::default()
    };
    let mut env = environment(&set, "alien_M_903", silent(), config);
    let error = env.step(ActionCall::submit("SELECT 1")).unwrap_err();
    assert!(error.to_string().contains("could not run"), "{error}");
}
