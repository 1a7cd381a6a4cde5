//! PostgreSQL behind [`merit_sql::Database`], so that the repair side (`merit ask`, live mode,
//! `merit serve`) answers on a PostgreSQL database with the guarantees it has on SQLite: every
//! statement in its own read-only transaction, rolled back; `statement_timeout` as the
//! deadline; a row cap enforced while fetching (a limited portal, never the whole result);
//! one statement at a time; the server's own error text, classified by the same rules.
//!
//! It shares the interact backend's statement runner and value decoding, and turns the decoded
//! cells into [`merit_sql::Value`]s: integers and booleans as integers, floating point as
//! reals, bytea as blobs, and the types SQLite has no class for (decimals, dates, timestamps,
//! JSON, arrays) as their text.

use super::{run_statement, PostgresServer};
use crate::backend::Rows;
use crate::error::InteractError;
use crate::judge::Cell;
use merit_sql::{Database, Dialect, ExecError, ExecLimits, ResultSet, StreamSummary, Value};
use postgres::Client;
use std::ops::ControlFlow;
use std::sync::Mutex;

/// A read-only connection to one PostgreSQL database (see the module docs).
pub struct PostgresDatabase {
    client: Mutex<Client>,
    name: String,
}

impl std::fmt::Debug for PostgresDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresDatabase")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl PostgresDatabase {
    /// Connects to `database` on `server` (a non-superuser role, as every merit connection).
    pub fn connect(
        server: &PostgresServer,
        database: &str,
    ) -> Result<PostgresDatabase, InteractError> {
        Ok(PostgresDatabase {
            client: Mutex::new(server.connect(Some(database))?),
            name: format!("{} ({database})", server.describe()),
        })
    }

    fn run(&self, sql: &str, limits: &ExecLimits) -> Result<Rows, ExecError> {
        let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        run_statement(&mut client, sql, limits, true)
    }
}

/// A decoded PostgreSQL cell as the repair side's value.
pub fn value_of(cell: &Cell) -> Value {
    match cell {
        Cell::Null => Value::Null,
        Cell::Int(i) => Value::Integer(*i),
        Cell::Bool(b) => Value::Integer(i64::from(*b)),
        Cell::Float(x) => Value::Real(*x),
        Cell::Text(text) => Value::Text(text.clone().into_bytes()),
        Cell::Bytes(bytes) => Value::Blob(bytes.clone()),
        other => Value::Text(other.display().into_bytes()),
    }
}

impl Database for PostgresDatabase {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn for_each_row(
        &self,
        sql: &str,
        limits: &ExecLimits,
        sink: &mut dyn FnMut(Vec<Value>) -> ControlFlow<()>,
    ) -> Result<StreamSummary, ExecError> {
        let rows = self.run(sql, limits)?;
        if rows.truncated {
            return Err(ExecError::TooManyRows(limits.max_rows.unwrap_or(0)));
        }
        let mut delivered = 0;
        let mut stopped_early = false;
        for row in &rows.rows {
            delivered += 1;
            if sink(row.iter().map(value_of).collect()).is_break() {
                stopped_early = delivered < rows.rows.len();
                break;
            }
        }
        Ok(StreamSummary {
            columns: rows.columns,
            rows_delivered: delivered,
            stopped_early,
        })
    }

    /// At most `limits.max_rows` rows, fetched through a portal limited to one row past the cap
    /// (the default implementation would fetch the whole result first).
    fn query(&self, sql: &str, limits: &ExecLimits) -> Result<ResultSet, ExecError> {
        let rows = self.run(sql, limits)?;
        Ok(ResultSet {
            columns: rows.columns,
            rows: rows
                .rows
                .iter()
                .map(|row| row.iter().map(value_of).collect())
                .collect(),
            truncated: rows.truncated,
        })
    }
}
