//! Errors of this crate.
//!
//! Every message is written so that it can be shown to an operator *and* could reach an agent
//! without leaking hidden task material: loader errors name the file, the line and the field,
//! never a value read from a task or ground-truth record (those values may be gold SQL or
//! ambiguity snippets), and environment errors name the task id and the action only.

use std::path::PathBuf;

/// Why task files, metafiles or a ground-truth file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that was tried.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A line (or a whole file) is not valid JSON. Only the position is kept: serde's own
    /// message can quote the offending value, and in a task file that may be gold SQL.
    #[error("{path}:{line}: invalid JSON at column {column}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line in the file.
        line: usize,
        /// 1-based column reported by the parser.
        column: usize,
    },
    /// A record is valid JSON but a field is missing or has the wrong type.
    #[error("{path}:{line}: field `{field}` {problem}")]
    Field {
        /// The file.
        path: PathBuf,
        /// 1-based line (1 for a whole-file JSON document).
        line: usize,
        /// The JSON path of the field, e.g. `user_query_ambiguity.critical_ambiguity[2].term`.
        field: String,
        /// What is wrong, e.g. "is missing" or "must be a string".
        problem: &'static str,
    },
    /// Two records share an `instance_id`.
    #[error("{path}:{line}: duplicate instance_id `{instance_id}`")]
    DuplicateTask {
        /// The file.
        path: PathBuf,
        /// 1-based line of the second record.
        line: usize,
        /// The repeated id (ids are public).
        instance_id: String,
    },
    /// A task names a database whose metafiles are absent.
    #[error(
        "task `{instance_id}` uses database `{database}`, whose {what} was not found at {path}"
    )]
    MissingMetafile {
        /// The task that needs it.
        instance_id: String,
        /// The database name.
        database: String,
        /// Which metafile, e.g. "schema file".
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
}

/// Why the environment could not carry out a step. These are infrastructure failures or misuse
/// of the API; anything the agent did wrong (bad SQL, unknown actions) is an observation, not an
/// error.
#[derive(Debug, thiserror::Error)]
pub enum InteractError {
    /// The episode has ended; no further action is accepted.
    #[error("task `{instance_id}`: the episode is over, no further action is accepted")]
    EpisodeOver {
        /// The task id.
        instance_id: String,
    },
    /// The task's database file is not available (e.g. the three mini-interact databases that the
    /// public mirror lacks).
    #[error("database `{database}` is unavailable: {reason}")]
    DatabaseUnavailable {
        /// The database name.
        database: String,
        /// Why, e.g. "no file at …".
        reason: String,
    },
    /// Resetting or copying the working database failed.
    #[error("database `{database}`: {what} failed: {source}")]
    Backend {
        /// The database name.
        database: String,
        /// What was attempted, e.g. "reset from template".
        what: &'static str,
        /// The operating system's or engine's reason.
        source: std::io::Error,
    },
    /// The PostgreSQL server refused or failed an administrative step (connecting, creating the
    /// working database from its template, loading a template).
    #[error("database `{database}` on PostgreSQL: {what} failed: {message}")]
    Postgres {
        /// The database name (data set or working database).
        database: String,
        /// What was attempted, e.g. "creating the working database from its template".
        what: &'static str,
        /// The server's or driver's message (never the password).
        message: String,
    },
    /// The Python test harness could not be run at all (not a test failure).
    #[error("task `{instance_id}`: the Python test harness could not run: {reason}")]
    Harness {
        /// The task id.
        instance_id: String,
        /// What went wrong (spawn failure, unreadable result). Never the test's own output.
        reason: String,
    },
    /// The user simulator failed (e.g. a model backend error).
    #[error("task `{instance_id}`: the user simulator failed: {reason}")]
    Simulator {
        /// The task id.
        instance_id: String,
        /// The simulator's reason.
        reason: String,
    },
    /// A task cannot be run because it has no ground truth to judge a submission with.
    #[error("task `{instance_id}` has no ground truth (sol_sql is empty); merge a ground-truth file first")]
    NoGroundTruth {
        /// The task id.
        instance_id: String,
    },
}
