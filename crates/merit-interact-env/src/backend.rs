//! Database backends of the environment (protocol §5).
//!
//! [`InteractBackend`] is what the environment and the judge use: reset to the template, run
//! agent SQL read-only, run statement lists on a writable working copy, and tell the Python
//! harness how to connect. [`SqliteBackend`] implements it for the mini-interact layout;
//! [`crate::pg::PostgresBackend`] for PostgreSQL (template-database reset, statement
//! timeout).
//!
//! Read-only SQL goes through `merit_sql::SqliteDatabase` (the project's locked-down reader).
//! Writable SQL goes through `merit_sql::ScratchConnection`, opened only on this backend's
//! private working copy, which is rebuilt from the template before every execute and submit;
//! that connection still refuses `ATTACH`, extension loading, `VACUUM` and schema tampering,
//! under the same deadline and row cap.

use crate::error::InteractError;
use crate::judge::Cell;
use merit_sql::{Database, Dialect, ExecError, ExecLimits, SqliteDatabase};
use std::path::{Path, PathBuf};

/// A result as the environment sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// Column names; empty for a statement that returns no rows (DML, DDL).
    pub columns: Vec<String>,
    /// The rows fetched.
    pub rows: Vec<Vec<Cell>>,
    /// `true` when the row cap cut the result short.
    pub truncated: bool,
}

/// Which statement of a list failed, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementFailure {
    /// 0-based index in the list.
    pub index: usize,
    /// The engine's error.
    pub error: ExecError,
}

/// How the Python test harness reaches the working database.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PythonTarget {
    /// A SQLite file, opened with Python's `sqlite3`.
    Sqlite {
        /// The working copy.
        path: PathBuf,
    },
    /// A PostgreSQL database, opened with psycopg2.
    Postgres {
        /// A libpq keyword string (may hold a password: never logged, see `Debug`).
        dsn: String,
        /// The working database's name, for messages.
        database: String,
    },
}

impl std::fmt::Debug for PythonTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PythonTarget::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            PythonTarget::Postgres { database, .. } => f
                .debug_struct("Postgres")
                .field("database", database)
                .finish_non_exhaustive(),
        }
    }
}

/// A database the environment can reset, query and write to.
pub trait InteractBackend {
    /// The engine.
    fn dialect(&self) -> Dialect;
    /// The database name (for messages).
    fn database(&self) -> &str;
    /// Restores the working database to the pristine template.
    fn reset(&mut self) -> Result<(), InteractError>;
    /// Runs one statement on a read-only connection to the working database.
    fn query_read_only(&mut self, sql: &str, limits: &ExecLimits) -> Result<Rows, ExecError>;
    /// Runs statements in order on one writable connection to the working database, each
    /// committed as it completes; returns the last statement's result. Stops at the first
    /// failing statement.
    fn run_writable(
        &mut self,
        statements: &[String],
        limits: &ExecLimits,
    ) -> Result<Rows, StatementFailure>;
    /// Where the Python harness should connect. Calling it marks the working copy as possibly
    /// modified.
    fn python_target(&mut self) -> PythonTarget;
}

/// A boxed backend is a backend: a caller picks the engine at run time (SQLite or PostgreSQL)
/// and hands the run one type.
impl<B: InteractBackend + ?Sized> InteractBackend for Box<B> {
    fn dialect(&self) -> Dialect {
        (**self).dialect()
    }

    fn database(&self) -> &str {
        (**self).database()
    }

    fn reset(&mut self) -> Result<(), InteractError> {
        (**self).reset()
    }

    fn query_read_only(&mut self, sql: &str, limits: &ExecLimits) -> Result<Rows, ExecError> {
        (**self).query_read_only(sql, limits)
    }

    fn run_writable(
        &mut self,
        statements: &[String],
        limits: &ExecLimits,
    ) -> Result<Rows, StatementFailure> {
        (**self).run_writable(statements, limits)
    }

    fn python_target(&mut self) -> PythonTarget {
        (**self).python_target()
    }
}

/// The mini-interact layout: a template file copied over the working file on every reset.
///
/// The template is a private copy of the data set's `{db}.sqlite` (the shared data stays
/// untouched), and each backend has its own working directory, so environments can run in
/// parallel, unlike upstream's one shared working database per name.
pub struct SqliteBackend {
    database: String,
    _dir: tempfile::TempDir,
    template: PathBuf,
    working: PathBuf,
    reader: Option<SqliteDatabase>,
    /// Whether the working copy may differ from the template. A read-only connection cannot
    /// change the file, so a reset after reads only is skipped: the result is the same as a
    /// copy, at no cost.
    dirty: bool,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("database", &self.database)
            .field("working", &self.working)
            .finish()
    }
}

impl SqliteBackend {
    /// Copies `source` (the data set's database file) into a new private directory as
    /// `{database}_template.sqlite` and makes the working copy `{database}.sqlite` from it.
    pub fn new(database: &str, source: &Path) -> Result<SqliteBackend, InteractError> {
        if !source.is_file() {
            return Err(InteractError::DatabaseUnavailable {
                database: database.to_string(),
                reason: format!("no file at {}", source.display()),
            });
        }
        let io = |what: &'static str| {
            let database = database.to_string();
            move |source: std::io::Error| InteractError::Backend {
                database,
                what,
                source,
            }
        };
        let dir = tempfile::Builder::new()
            .prefix("merit-interact-")
            .tempdir()
            .map_err(io("creating a working directory"))?;
        let template = dir.path().join(format!("{database}_template.sqlite"));
        let working = dir.path().join(format!("{database}.sqlite"));
        copy_writable(source, &template).map_err(io("copying the template"))?;
        let mut backend = SqliteBackend {
            database: database.to_string(),
            _dir: dir,
            template,
            working,
            reader: None,
            dirty: true,
        };
        backend.reset()?;
        Ok(backend)
    }

    /// The working copy's path.
    pub fn working_path(&self) -> &Path {
        &self.working
    }

    fn reader(&mut self) -> Result<&SqliteDatabase, ExecError> {
        if self.reader.is_none() {
            self.reader = Some(SqliteDatabase::open(&self.working)?);
        }
        Ok(self.reader.as_ref().expect("set above"))
    }
}

/// Copies a file and makes the copy writable (copies of the read-only data set would
/// otherwise inherit its permissions).
fn copy_writable(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::copy(from, to)?;
    let mut permissions = std::fs::metadata(to)?.permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(to, permissions)
}

impl InteractBackend for SqliteBackend {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn database(&self) -> &str {
        &self.database
    }

    fn reset(&mut self) -> Result<(), InteractError> {
        if !self.dirty {
            return Ok(());
        }
        // Pooled readers may cache pages of the old file; drop them before replacing it.
        self.reader = None;
        for suffix in ["-journal", "-wal", "-shm"] {
            let mut side = self.working.clone().into_os_string();
            side.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(side));
        }
        copy_writable(&self.template, &self.working).map_err(|source| InteractError::Backend {
            database: self.database.clone(),
            what: "reset from template",
            source,
        })?;
        self.dirty = false;
        Ok(())
    }

    fn query_read_only(&mut self, sql: &str, limits: &ExecLimits) -> Result<Rows, ExecError> {
        strict_rows(self.reader()?.query(sql, limits)?)
    }

    fn run_writable(
        &mut self,
        statements: &[String],
        limits: &ExecLimits,
    ) -> Result<Rows, StatementFailure> {
        self.dirty = true;
        self.reader = None;
        let fail = |index: usize, error: ExecError| StatementFailure { index, error };
        let mut connection =
            SqliteDatabase::open_scratch(&self.working, *limits).map_err(|e| fail(0, e))?;
        let mut last = Rows::default();
        for (index, sql) in statements.iter().enumerate() {
            last = connection
                .execute(sql)
                .and_then(strict_rows)
                .map_err(|e| fail(index, e))?;
        }
        Ok(last)
    }

    fn python_target(&mut self) -> PythonTarget {
        self.dirty = true;
        self.reader = None;
        PythonTarget::Sqlite {
            path: self.working.clone(),
        }
    }
}

/// Text must be valid UTF-8, as Python's `sqlite3` requires by default; otherwise the query
/// fails with the driver's message.
fn strict_cell(value: merit_sql::Value) -> Result<Cell, ExecError> {
    match value {
        merit_sql::Value::Text(bytes) => {
            String::from_utf8(bytes)
                .map(Cell::Text)
                .map_err(|_| ExecError::Sql {
                    message: "Could not decode to UTF-8 column value".to_string(),
                })
        }
        other => Ok(Cell::from(other)),
    }
}

/// A result set with every value converted strictly ([`strict_cell`]).
fn strict_rows(result: merit_sql::ResultSet) -> Result<Rows, ExecError> {
    let mut rows = Vec::with_capacity(result.rows.len());
    for row in result.rows {
        let mut cells = Vec::with_capacity(row.len());
        for value in row {
            cells.push(strict_cell(value)?);
        }
        rows.push(cells);
    }
    Ok(Rows {
        columns: result.columns,
        rows,
        truncated: result.truncated,
    })
}
