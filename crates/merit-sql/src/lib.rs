//! Safe execution of untrusted SQL.
//!
//! Every query a model writes is treated as hostile: it runs on a read-only connection that
//! refuses writes, `ATTACH`, extension loading and state-changing pragmas, under a wall-clock
//! deadline that interrupts the engine, with a cap on the rows fetched. Values come back exactly
//! as the engine returned them ([`Value`]). Nothing is ever bound to a statement, so one with
//! parameter placeholders (`?`, `:name`) is refused with Python's `sqlite3` message instead of
//! running with each placeholder NULL.
//!
//! The one exception is [`ScratchConnection`] ([`SqliteDatabase::open_scratch`]): a writable
//! connection for disposable copies only, with the same deadline and row cap, still confined to
//! its file (no `ATTACH`, no extensions, no `VACUUM INTO`).
//!
//! The [`Database`] trait is the boundary: evaluators, the oracle and agents only see it, so a
//! PostgreSQL backend sits beside [`SqliteDatabase`] without touching them
//! (`merit_interact_env::pg::PostgresDatabase`, used by `merit ask`, live mode and
//! `merit serve`).

#![warn(missing_docs)]

pub mod extract;
pub mod lex;
mod scratch;
mod sqlite;
mod statement;
mod value;

pub use scratch::ScratchConnection;
pub use sqlite::{SqliteDatabase, SqliteOptions};
pub use statement::{split_first_statement, StatementSplit};
pub use value::Value;

use std::ops::ControlFlow;
use std::time::Duration;

/// The version of the SQLite library merit executes with (bundled, so the same everywhere).
pub fn sqlite_version() -> &'static str {
    rusqlite::version()
}

/// Which SQL engine a [`Database`] talks to; prompts and classifiers key on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// SQLite (Spider, BIRD, mini-interact).
    Sqlite,
    /// PostgreSQL (BIRD-Interact full).
    Postgres,
}

/// Resource limits for one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecLimits {
    /// Wall-clock budget; the engine is interrupted when it runs out.
    pub timeout: Duration,
    /// Most rows [`Database::for_each_row`] delivers before failing with
    /// [`ExecError::TooManyRows`]; `None` means no cap (the caller bounds memory itself).
    pub max_rows: Option<usize>,
}

impl ExecLimits {
    /// Limits for feedback shown to an agent: 30 s, 10,000 rows.
    pub const AGENT: ExecLimits = ExecLimits {
        timeout: Duration::from_secs(30),
        max_rows: Some(10_000),
    };

    /// Limits with the given timeout and no row cap.
    pub fn with_timeout(timeout: Duration) -> ExecLimits {
        ExecLimits {
            timeout,
            max_rows: None,
        }
    }
}

/// Why a query produced no (complete) result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The database could not be opened (missing file, not a database, permissions).
    #[error("cannot open database {path}: {message}")]
    Open {
        /// The path that was tried.
        path: String,
        /// What the engine said.
        message: String,
    },
    /// The engine rejected or failed the query; `message` is its own text.
    #[error("{message}")]
    Sql {
        /// The DBMS error text, unchanged.
        message: String,
    },
    /// The query tried something the connection refuses (a write on a read-only connection;
    /// `ATTACH`, extension loading or `VACUUM` on a scratch connection).
    #[error("denied: {what} is not allowed on this connection")]
    Denied {
        /// The refused operation, e.g. `ATTACH` or `PRAGMA writable_schema`.
        what: String,
    },
    /// More than one statement was given (a trailing `;` with comments is fine).
    #[error("You can only execute one statement at a time.")]
    MultipleStatements,
    /// The deadline passed and the engine was interrupted.
    #[error("query interrupted after exceeding the {0:?} time limit")]
    Timeout(Duration),
    /// The result had more rows than the cap.
    #[error("query returned more than {0} rows (row cap)")]
    TooManyRows(usize),
}

impl ExecError {
    /// `true` for [`ExecError::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, ExecError::Timeout(_))
    }
}

/// What a streamed query reports once the rows are delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSummary {
    /// Result column names.
    pub columns: Vec<String>,
    /// Rows handed to the sink.
    pub rows_delivered: usize,
    /// `true` when the sink asked to stop before the result was exhausted.
    pub stopped_early: bool,
}

/// A fully fetched (or capped) result.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultSet {
    /// Result column names.
    pub columns: Vec<String>,
    /// Rows in the order the engine produced them.
    pub rows: Vec<Vec<Value>>,
    /// `true` when the row cap cut the result short.
    pub truncated: bool,
}

/// A database that runs untrusted, read-only SQL.
///
/// Implementations must guarantee that no statement given here can change the database,
/// its schema or the connection's future behaviour, and that every call honours `limits`.
pub trait Database: Send + Sync {
    /// The engine behind this handle.
    fn dialect(&self) -> Dialect;

    /// A human-readable name (a path or a connection string without secrets).
    fn describe(&self) -> String;

    /// Runs one statement and hands each row to `sink` as it is fetched.
    ///
    /// The sink returns [`ControlFlow::Break`] to stop early (the remaining rows are never
    /// computed). An empty or comment-only statement yields no rows and no columns, as the
    /// Python DB-API does.
    fn for_each_row(
        &self,
        sql: &str,
        limits: &ExecLimits,
        sink: &mut dyn FnMut(Vec<Value>) -> ControlFlow<()>,
    ) -> Result<StreamSummary, ExecError>;

    /// Runs one statement and collects at most `limits.max_rows` rows; more are cut off and
    /// reported through [`ResultSet::truncated`] instead of failing.
    fn query(&self, sql: &str, limits: &ExecLimits) -> Result<ResultSet, ExecError> {
        let cap = limits.max_rows;
        let uncapped = ExecLimits {
            max_rows: None,
            ..*limits
        };
        let mut rows = Vec::new();
        let mut truncated = false;
        let summary = self.for_each_row(sql, &uncapped, &mut |row| {
            if cap.is_some_and(|cap| rows.len() >= cap) {
                truncated = true;
                return ControlFlow::Break(());
            }
            rows.push(row);
            ControlFlow::Continue(())
        })?;
        Ok(ResultSet {
            columns: summary.columns,
            rows,
            truncated,
        })
    }
}
