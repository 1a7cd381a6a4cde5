//! Runs the benchmark's Python test cases for Management tasks (protocol §6, "Management").
//!
//! Each judgement starts one `python3 -I` process with a runner written for merit
//! (`harness.py`, embedded in the binary). Inputs travel in a JSON file, never on the command
//! line; the runner writes only `{"passed": …, "failed_index": …}` back, so nothing a test
//! prints or asserts (expected values, gold results) can come back to the environment. The
//! process is killed when its wall-clock limit passes.

use crate::backend::PythonTarget;
use crate::error::InteractError;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const RUNNER: &str = include_str!("harness.py");

/// How to run Python test cases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonHarness {
    /// The interpreter (default `python3`, found on `PATH`).
    pub program: PathBuf,
    /// Wall-clock limit for all tests of one submission together.
    pub timeout: Duration,
}

impl Default for PythonHarness {
    fn default() -> PythonHarness {
        PythonHarness {
            program: PathBuf::from("python3"),
            timeout: Duration::from_secs(120),
        }
    }
}

/// The result of running a submission's test cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestRun {
    /// Every test passed.
    Passed,
    /// The test at this 0-based index failed (later tests were not run).
    Failed(usize),
    /// The process ran past [`PythonHarness::timeout`] and was killed.
    TimedOut,
}

/// What one harness run needs.
pub(crate) struct TestSpec<'a> {
    pub(crate) instance_id: &'a str,
    pub(crate) database: &'a str,
    pub(crate) target: &'a PythonTarget,
    pub(crate) prediction: &'a [String],
    pub(crate) gold: &'a [String],
    pub(crate) tests: &'a [String],
    pub(crate) order: bool,
    pub(crate) statement_timeout: Duration,
}

impl PythonHarness {
    /// Runs the tests of `spec` in order on the working database.
    pub(crate) fn run(&self, spec: &TestSpec<'_>) -> Result<TestRun, InteractError> {
        let fail = |reason: String| InteractError::Harness {
            instance_id: spec.instance_id.to_string(),
            reason,
        };
        let dir = tempfile::Builder::new()
            .prefix("merit-interact-tests-")
            .tempdir()
            .map_err(|e| fail(format!("cannot create a scratch directory: {e}")))?;
        let runner = dir.path().join("harness.py");
        let input = dir.path().join("spec.json");
        let output = dir.path().join("result.json");
        let mut document = serde_json::json!({
            "db_name": spec.database,
            "pred_sqls": spec.prediction,
            "sol_sqls": spec.gold,
            "tests": spec.tests,
            "order": spec.order,
            "statement_timeout_s": spec.statement_timeout.as_secs_f64(),
        });
        // The connection details travel in the input file (inside a private temporary
        // directory), never on the command line, where other users could read a password.
        match spec.target {
            PythonTarget::Sqlite { path } => document["db_path"] = serde_json::json!(path),
            PythonTarget::Postgres { dsn, .. } => document["pg_dsn"] = serde_json::json!(dsn),
        }
        std::fs::write(&runner, RUNNER)
            .map_err(|e| fail(format!("cannot write the runner: {e}")))?;
        std::fs::write(&input, document.to_string())
            .map_err(|e| fail(format!("cannot write the test input: {e}")))?;
        // Output goes to files, not pipes: a chatty test cannot fill a pipe and stall while
        // this side waits for it to exit.
        let log = |name: &str| {
            std::fs::File::create(dir.path().join(name))
                .map(Stdio::from)
                .map_err(|e| fail(format!("cannot create a log file: {e}")))
        };
        let mut child = Command::new(&self.program)
            .arg("-I")
            .arg(&runner)
            .arg(&input)
            .arg(&output)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log("stdout.txt")?)
            .stderr(log("stderr.txt")?)
            .spawn()
            .map_err(|e| fail(format!("cannot start {}: {e}", self.program.display())))?;
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Ok(TestRun::TimedOut);
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(fail(format!("cannot wait for the process: {e}"))),
            }
        };
        let text = std::fs::read_to_string(&output).map_err(|_| {
            fail(format!(
                "the runner exited ({status}) without writing a result"
            ))
        })?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|_| fail("the runner wrote an unreadable result".to_string()))?;
        if let Some(setup) = value.get("setup_error").and_then(serde_json::Value::as_str) {
            // The runner could not reach the database at all (e.g. psycopg2 is missing): an
            // infrastructure failure, not a failed test.
            return Err(fail(setup.to_string()));
        }
        match value.get("passed").and_then(serde_json::Value::as_bool) {
            Some(true) => Ok(TestRun::Passed),
            Some(false) => {
                let index = value
                    .get("failed_index")
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|i| usize::try_from(i).ok())
                    .ok_or_else(|| fail("the runner's result has no failed index".to_string()))?;
                Ok(TestRun::Failed(index))
            }
            None => Err(fail("the runner's result has no verdict".to_string())),
        }
    }
}
