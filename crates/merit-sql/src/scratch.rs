//! A writable SQLite connection for disposable copies of a database.
//!
//! Some callers must run model-written SQL that writes: the BIRD-Interact environment lets an
//! agent try DML on a Management task and judges Management submissions by their effect. They
//! run it on a private copy that is thrown away or rebuilt from a template afterwards, so the
//! writes themselves are harmless; what must still be impossible is reaching *outside* the copy
//! (another file through `ATTACH` or `VACUUM INTO`, native code through extension loading) or
//! running without a deadline. [`ScratchConnection`] is that connection.

use crate::statement::split_first_statement;
use crate::{ExecError, ExecLimits, ResultSet, SqliteDatabase, Value};
use rusqlite::config::DbConfig;
use rusqlite::hooks::{AuthAction, AuthContext};
use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// SQL functions refused on a scratch connection: `load_extension` loads native code and
/// `fts3_tokenizer` can register a tokenizer by raw pointer.
const REFUSED_FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer"];

/// A writable connection to a **disposable copy** of a SQLite database.
///
/// Only ever open one on a copy that nothing else needs (a per-task working file rebuilt from a
/// template, a temporary file): any statement given to [`ScratchConnection::execute`] may
/// change or destroy the data in it. What it guarantees is confinement and limits, not
/// read-only-ness:
///
/// * one statement per call, with Python `sqlite3`'s rule for what may follow it;
/// * the wall-clock deadline of its [`ExecLimits`] for every statement (the engine is
///   interrupted when it passes);
/// * at most `max_rows` rows kept per statement (a writing statement still runs to completion;
///   the result is marked truncated);
/// * no `ATTACH`/`DETACH` (limit 0 and an authorizer), no extension loading, no `VACUUM` (its
///   `INTO` form writes any file the process can), defensive mode (no `writable_schema`, no
///   writes to shadow tables);
/// * foreign keys **off**, as in Python's `sqlite3` (the benchmark's test cases use it), while
///   the bundled SQLite would turn them on.
///
/// Opened by [`SqliteDatabase::open_scratch`].
pub struct ScratchConnection {
    path: PathBuf,
    limits: ExecLimits,
    connection: Connection,
    /// What the authorizer refused during the current statement, for a clear error message.
    denied: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for ScratchConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchConnection")
            .field("path", &self.path)
            .field("limits", &self.limits)
            .finish()
    }
}

impl SqliteDatabase {
    /// Opens a writable [`ScratchConnection`] to `path`, which must be a **disposable copy**:
    /// every statement run through it may change the file. Each statement runs under `limits`.
    ///
    /// Fails with [`ExecError::Open`] when the file is missing or is not a SQLite database (the
    /// file is never created).
    pub fn open_scratch(
        path: impl AsRef<Path>,
        limits: ExecLimits,
    ) -> Result<ScratchConnection, ExecError> {
        let path = path.as_ref().to_path_buf();
        let open_error = |message: String| ExecError::Open {
            path: path.display().to_string(),
            message,
        };
        if !path.is_file() {
            return Err(open_error("no such file".to_string()));
        }
        // No SQLITE_OPEN_CREATE: a wrong path must fail, not leave an empty database behind.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut connection =
            Connection::open_with_flags(&path, flags).map_err(|e| open_error(e.to_string()))?;
        let setup = |c: &Connection| -> rusqlite::Result<()> {
            c.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
            c.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
            c.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
            // Same double-quoted-string fallback as the read-only path and Python's sqlite3.
            c.set_db_config(DbConfig::SQLITE_DBCONFIG_DQS_DML, true)?;
            // The bundled SQLite enables foreign keys by default; Python's sqlite3 does not.
            c.pragma_update(None, "foreign_keys", false)?;
            // Reading the schema makes a file that is not a database fail here, with its path.
            c.query_row("SELECT count(*) FROM sqlite_master", [], |_| Ok(()))?;
            Ok(())
        };
        setup(&connection).map_err(|e| open_error(e.to_string()))?;
        let denied = crate::sqlite::install_authorizer(&mut connection, refusal)
            .map_err(|e| open_error(e.to_string()))?;
        Ok(ScratchConnection {
            path,
            limits,
            connection,
            denied,
        })
    }
}

/// What the scratch authorizer refuses: only what reaches outside the copy.
fn refusal(context: &AuthContext<'_>) -> Option<String> {
    match context.action {
        AuthAction::Attach { .. } => Some("ATTACH".to_string()),
        AuthAction::Detach { .. } => Some("DETACH".to_string()),
        AuthAction::Function { function_name } => {
            let lowered = function_name.to_ascii_lowercase();
            REFUSED_FUNCTIONS
                .contains(&lowered.as_str())
                .then(|| format!("the function {function_name}()"))
        }
        _ => None,
    }
}

impl ScratchConnection {
    /// The database file this connection writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The limits every statement runs under.
    pub fn limits(&self) -> ExecLimits {
        self.limits
    }

    /// Runs one statement, committing it (autocommit, as each statement of the benchmark's
    /// harness is committed), and returns its rows. A statement without a result (DML, DDL)
    /// returns no columns; an empty or comment-only text runs as nothing.
    ///
    /// Errors: [`ExecError::MultipleStatements`], [`ExecError::Denied`] (ATTACH, DETACH,
    /// extension loading, VACUUM), [`ExecError::Timeout`], or [`ExecError::Sql`] with SQLite's
    /// own message. A row cap never fails a statement: rows past it are dropped and
    /// [`ResultSet::truncated`] is set, so a writing statement is never left half-done.
    pub fn execute(&mut self, sql: &str) -> Result<ResultSet, ExecError> {
        let split = split_first_statement(sql);
        if !split.tail_is_ignorable() {
            return Err(ExecError::MultipleStatements);
        }
        let keyword = first_keyword(split.first);
        if keyword.eq_ignore_ascii_case("vacuum") {
            // The authorizer never sees VACUUM, and `VACUUM INTO 'file'` writes anywhere the
            // process can. A statement cannot hide it behind a prefix (no WITH, no trigger
            // body may hold it), so the first keyword decides.
            return Err(ExecError::Denied {
                what: "VACUUM".to_string(),
            });
        }
        if keyword.is_empty() {
            return Ok(ResultSet {
                columns: Vec::new(),
                rows: Vec::new(),
                truncated: false,
            });
        }
        if let Ok(mut slot) = self.denied.lock() {
            *slot = None;
        }
        let limits = self.limits;
        let deadline = Instant::now() + limits.timeout;
        crate::sqlite::arm_deadline(&mut self.connection, deadline)?;
        let denied = Arc::clone(&self.denied);
        let classify = |error: rusqlite::Error| {
            crate::sqlite::classify_sqlite_error(&denied, limits.timeout, error)
        };
        let result = (|| {
            let mut statement = match self.connection.prepare(split.first) {
                Ok(statement) => statement,
                Err(rusqlite::Error::Empty) => {
                    return Ok(ResultSet {
                        columns: Vec::new(),
                        rows: Vec::new(),
                        truncated: false,
                    })
                }
                Err(error) => return Err(classify(error)),
            };
            crate::sqlite::refuse_unbound_parameters(&statement)?;
            let columns: Vec<String> = statement.column_names().map(str::to_string).collect();
            let width = columns.len();
            let mut raw = statement.raw_query();
            let mut rows = Vec::new();
            let mut truncated = false;
            loop {
                let row = match raw.next() {
                    Ok(Some(row)) => row,
                    Ok(None) => break,
                    Err(error) => return Err(classify(error)),
                };
                if limits.max_rows.is_some_and(|cap| rows.len() >= cap) {
                    // Keep stepping so that a writing statement completes; keep no more rows.
                    truncated = true;
                    continue;
                }
                let mut values = Vec::with_capacity(width);
                for index in 0..width {
                    values.push(Value::from(row.get_ref(index).map_err(classify)?));
                }
                rows.push(values);
                // The progress handler only runs inside the engine; row copying is bounded here.
                if Instant::now() >= deadline {
                    return Err(ExecError::Timeout(limits.timeout));
                }
            }
            Ok(ResultSet {
                columns,
                rows,
                truncated,
            })
        })();
        if result.is_err() && !self.connection.is_autocommit() {
            // A failed statement inside an explicit transaction (the agent's own BEGIN) leaves
            // it open; the copy is disposable, but later statements on this connection should
            // not silently join a half-done transaction.
            let _ = self.connection.execute_batch("ROLLBACK");
        }
        result
    }
}

/// The first word of a statement after whitespace, comments and semicolons (empty when there
/// is none).
fn first_keyword(sql: &str) -> &str {
    let mut rest = sql;
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ';');
        if let Some(after) = trimmed.strip_prefix("--") {
            rest = after.find('\n').map_or("", |i| &after[i + 1..]);
        } else if let Some(after) = trimmed.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |i| &after[i + 2..]);
        } else {
            let end = trimmed
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(trimmed.len());
            return &trimmed[..end];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::first_keyword;

    #[test]
    fn first_keyword_skips_comments_and_semicolons() {
        assert_eq!(first_keyword("  -- c\n /* d */ VACUUM INTO 'x'"), "VACUUM");
        assert_eq!(first_keyword(";;  "), "");
        assert_eq!(first_keyword("-- only a comment"), "");
        assert_eq!(first_keyword("select 1"), "select");
    }
}
