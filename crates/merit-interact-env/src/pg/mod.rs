//! The PostgreSQL backend (protocol §5, A's layout): a template database per data set database,
//! and a working database re-created from it before every execute and submit.
//!
//! * **Reset**: `DROP DATABASE work WITH (FORCE)` then `CREATE DATABASE work TEMPLATE tmpl`,
//!   run on a separate administrative connection. Each [`PostgresBackend`] has its own working
//!   database (`merit_w_{db}_{pid}_{n}`), dropped when the backend is dropped, so episodes can
//!   run in parallel (upstream shares one working database per name). As on SQLite, a reset
//!   after reads only is skipped: a read-only transaction cannot change the database.
//! * **Limits**: every statement runs in its own transaction with
//!   `SET LOCAL statement_timeout`; a cancelled statement is [`ExecError::Timeout`]. Rows are
//!   fetched through a portal with a row limit, so a capped query never transfers the rest.
//! * **Read-only**: [`InteractBackend::query_read_only`] runs in a `READ ONLY` transaction that
//!   is always rolled back; the server refuses writes with its own message (`cannot execute
//!   INSERT in a read-only transaction`), which the failure classifier knows.
//! * **Writes**: [`InteractBackend::run_writable`] runs each statement in an explicit
//!   transaction and commits it. Inside a transaction block the server itself refuses the
//!   commands that act beyond the working database (`CREATE/DROP DATABASE`, `ALTER SYSTEM`,
//!   tablespaces, `VACUUM`).
//! * **One statement per call**: the extended query protocol refuses several commands in one
//!   text, reported as [`ExecError::MultipleStatements`] (as on SQLite; psycopg2 would run them
//!   all, see the README).
//! * **Who runs the SQL**: the connection URL's role. It must not be a superuser
//!   ([`PostgresServer::connect`] refuses one), because agent SQL runs with its rights: a
//!   superuser could read and write server files (`COPY … TO PROGRAM`, `pg_read_file`).
//!
//! Values are decoded to judge cells exactly as psycopg2 would present them (the `value` module).
//! `PostgresServer::load_sqlite_template` builds a template from a
//! mini-interact SQLite file, for tests and for running mini-interact on PostgreSQL.

mod database;
mod load;

pub use database::{value_of, PostgresDatabase};
pub(crate) mod value;

use crate::backend::{InteractBackend, PythonTarget, Rows, StatementFailure};
use crate::error::InteractError;
use merit_sql::{Dialect, ExecError, ExecLimits};
use postgres::{Client, Config, NoTls};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// SQLSTATE of a statement cancelled by `statement_timeout` (`query_canceled`).
const QUERY_CANCELED: &str = "57014";
/// The server's message when a prepared statement holds several commands.
const MULTIPLE_COMMANDS: &str = "cannot insert multiple commands into a prepared statement";
/// Longest PostgreSQL identifier, in bytes.
const MAX_IDENTIFIER: usize = 63;

/// Numbers working databases uniquely within this process.
static WORKING_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A PostgreSQL server merit may use: parsed connection settings, without secrets in `Debug`.
#[derive(Clone)]
pub struct PostgresServer {
    config: Config,
}

impl std::fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresServer")
            .field("server", &self.describe())
            .finish()
    }
}

impl PostgresServer {
    /// Parses a connection URL or keyword string (`postgresql://user:pw@host:port/db` or
    /// `host=… user=… dbname=…`). The database named there is the administrative one: resets
    /// and template loads connect to it. Nothing is contacted yet.
    pub fn new(url: &str) -> Result<PostgresServer, InteractError> {
        let config: Config = url.parse().map_err(|e: postgres::Error| {
            // The parser's message never contains the password; the URL is not repeated.
            postgres_error("", "parsing the connection URL", e.to_string())
        })?;
        Ok(PostgresServer { config })
    }

    /// `user@host:port/db`, for messages (never the password).
    pub fn describe(&self) -> String {
        let host = self
            .config
            .get_hosts()
            .first()
            .map(|h| match h {
                postgres::config::Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".to_string());
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!(
            "{}@{host}:{port}/{}",
            self.config.get_user().unwrap_or("?"),
            self.config.get_dbname().unwrap_or("?")
        )
    }

    /// Connects to `database` (the administrative database when `None`), refuses superuser
    /// roles, and pins the session settings merit relies on (UTC time zone).
    pub fn connect(&self, database: Option<&str>) -> Result<Client, InteractError> {
        let name = database
            .or(self.config.get_dbname())
            .unwrap_or("")
            .to_string();
        let mut config = self.config.clone();
        if let Some(database) = database {
            config.dbname(database);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        let mut client = config
            .connect(NoTls)
            .map_err(|e| postgres_error(&name, "connecting", message(&e)))?;
        let row = client
            .query_one(
                "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
                &[],
            )
            .map_err(|e| postgres_error(&name, "checking the role", message(&e)))?;
        let superuser: bool = row
            .try_get(0)
            .map_err(|e| postgres_error(&name, "checking the role", message(&e)))?;
        if superuser {
            return Err(postgres_error(
                &name,
                "checking the role",
                "the role is a superuser; model-written SQL must run as an ordinary role \
                 (scripts/setup-postgres.sh creates one)"
                    .to_string(),
            ));
        }
        client
            .batch_execute("SET TIME ZONE 'UTC'")
            .map_err(|e| postgres_error(&name, "setting the time zone", message(&e)))?;
        Ok(client)
    }

    /// The template name merit uses for a data set database: `merit_t_{database}`.
    pub fn template_name(database: &str) -> String {
        truncate_identifier(&format!("merit_t_{database}"))
    }

    /// Whether a database called `name` exists.
    pub fn database_exists(&self, name: &str) -> Result<bool, InteractError> {
        let mut admin = self.connect(None)?;
        let row = admin
            .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .map_err(|e| postgres_error(name, "looking up the database", message(&e)))?;
        Ok(row.is_some())
    }

    /// A libpq keyword string for `database` (psycopg2 takes it as is).
    fn dsn(&self, database: &str) -> String {
        let mut parts = Vec::new();
        if let Some(host) = self.config.get_hosts().first() {
            let host = match host {
                postgres::config::Host::Tcp(name) => name.clone(),
                #[cfg(unix)]
                postgres::config::Host::Unix(path) => path.display().to_string(),
            };
            parts.push(format!("host={}", dsn_quote(&host)));
        }
        if let Some(port) = self.config.get_ports().first() {
            parts.push(format!("port={port}"));
        }
        if let Some(user) = self.config.get_user() {
            parts.push(format!("user={}", dsn_quote(user)));
        }
        if let Some(password) = self.config.get_password() {
            parts.push(format!(
                "password={}",
                dsn_quote(&String::from_utf8_lossy(password))
            ));
        }
        parts.push(format!("dbname={}", dsn_quote(database)));
        parts.join(" ")
    }
}

/// Opens a [`PostgresBackend`] for a task's database on `server`: its SQLite file is loaded
/// into a template database once (again only when the file changes), and each backend works
/// on a private clone of it.
pub fn postgres_backend(
    server: &PostgresServer,
    meta: &crate::meta::DatabaseMeta,
) -> Result<PostgresBackend, InteractError> {
    let Some(file) = meta.sqlite_file() else {
        return Err(InteractError::DatabaseUnavailable {
            database: meta.name().to_string(),
            reason: "the data set ships no SQLite file to load into PostgreSQL".to_string(),
        });
    };
    let template = server.ensure_sqlite_template(meta.name(), file)?;
    PostgresBackend::new(server, meta.name(), &template)
}

/// A working database cloned from a template, for one environment.
pub struct PostgresBackend {
    server: PostgresServer,
    database: String,
    template: String,
    working: String,
    admin: Client,
    work: Option<Client>,
    /// Whether the working database may differ from the template (or not exist).
    dirty: bool,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("server", &self.server.describe())
            .field("database", &self.database)
            .field("template", &self.template)
            .field("working", &self.working)
            .finish()
    }
}

impl PostgresBackend {
    /// A backend for the data set database `database`, cloning the existing template database
    /// `template` into a new private working database.
    pub fn new(
        server: &PostgresServer,
        database: &str,
        template: &str,
    ) -> Result<PostgresBackend, InteractError> {
        if !server.database_exists(template)? {
            return Err(InteractError::DatabaseUnavailable {
                database: database.to_string(),
                reason: format!("no template database `{template}` on {}", server.describe()),
            });
        }
        let admin = server.connect(None)?;
        let working = truncate_identifier(&format!(
            "merit_w_{}_{}_{}",
            std::process::id(),
            WORKING_COUNTER.fetch_add(1, Ordering::Relaxed),
            database
        ));
        let mut backend = PostgresBackend {
            server: server.clone(),
            database: database.to_string(),
            template: template.to_string(),
            working,
            admin,
            work: None,
            dirty: true,
        };
        backend.reset()?;
        Ok(backend)
    }

    /// The working database's name.
    pub fn working_database(&self) -> &str {
        &self.working
    }

    fn work(&mut self) -> Result<&mut Client, ExecError> {
        if self.work.is_none() {
            let client = self
                .server
                .connect(Some(&self.working))
                .map_err(|e| ExecError::Open {
                    path: self.working.clone(),
                    message: e.to_string(),
                })?;
            self.work = Some(client);
        }
        Ok(self.work.as_mut().expect("set above"))
    }

    fn drop_working(&mut self) -> Result<(), postgres::Error> {
        // Closing our own session first lets the drop proceed without forcing it.
        self.work = None;
        self.admin.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            quote_ident(&self.working)
        ))
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        // Best effort: a server that went away leaves a stray `merit_w_*` database behind.
        let _ = self.drop_working();
    }
}

impl InteractBackend for PostgresBackend {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn database(&self) -> &str {
        &self.database
    }

    fn reset(&mut self) -> Result<(), InteractError> {
        if !self.dirty {
            return Ok(());
        }
        let database = self.database.clone();
        let fail =
            |what: &'static str, e: postgres::Error| postgres_error(&database, what, message(&e));
        self.drop_working()
            .map_err(|e| fail("dropping the working database", e))?;
        self.admin
            .batch_execute(&format!(
                "CREATE DATABASE {} TEMPLATE {}",
                quote_ident(&self.working),
                quote_ident(&self.template)
            ))
            .map_err(|e| fail("creating the working database from its template", e))?;
        self.dirty = false;
        Ok(())
    }

    fn query_read_only(&mut self, sql: &str, limits: &ExecLimits) -> Result<Rows, ExecError> {
        run_statement(self.work()?, sql, limits, true)
    }

    fn run_writable(
        &mut self,
        statements: &[String],
        limits: &ExecLimits,
    ) -> Result<Rows, StatementFailure> {
        self.dirty = true;
        let fail = |index: usize, error: ExecError| StatementFailure { index, error };
        let client = self.work().map_err(|e| fail(0, e))?;
        let mut last = Rows::default();
        for (index, sql) in statements.iter().enumerate() {
            last = run_statement(client, sql, limits, false).map_err(|e| fail(index, e))?;
        }
        Ok(last)
    }

    fn python_target(&mut self) -> PythonTarget {
        self.dirty = true;
        PythonTarget::Postgres {
            dsn: self.server.dsn(&self.working),
            database: self.working.clone(),
        }
    }
}

/// Runs one statement in its own transaction (read-only and rolled back, or committed) under
/// the statement timeout, fetching at most `max_rows` rows.
fn run_statement(
    client: &mut Client,
    sql: &str,
    limits: &ExecLimits,
    read_only: bool,
) -> Result<Rows, ExecError> {
    let classify = |error: postgres::Error| sql_error(error, limits);
    let mut transaction = client
        .build_transaction()
        .read_only(read_only)
        .start()
        .map_err(classify)?;
    // At least 1 ms: 0 would mean "no timeout".
    let millis = limits.timeout.as_millis().clamp(1, i64::MAX as u128);
    transaction
        .batch_execute(&format!("SET LOCAL statement_timeout = {millis}"))
        .map_err(classify)?;
    let statement = transaction.prepare(sql).map_err(classify)?;
    let columns: Vec<String> = statement
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let types: Vec<postgres::types::Type> = statement
        .columns()
        .iter()
        .map(|c| c.type_().clone())
        .collect();
    let portal = transaction.bind(&statement, &[]).map_err(classify)?;
    // One row past the cap tells whether the result was cut; 0 fetches everything.
    let fetch = limits.max_rows.map_or(0, |cap| {
        i32::try_from(cap.saturating_add(1)).unwrap_or(i32::MAX)
    });
    let fetched = transaction.query_portal(&portal, fetch).map_err(classify)?;
    let mut rows = Vec::with_capacity(fetched.len());
    let mut truncated = false;
    for row in &fetched {
        if limits.max_rows.is_some_and(|cap| rows.len() >= cap) {
            truncated = true;
            break;
        }
        let mut cells = Vec::with_capacity(types.len());
        for (index, ty) in types.iter().enumerate() {
            let raw: value::RawValue<'_> = row.try_get(index).map_err(classify)?;
            let cell = value::decode(ty, raw.0).map_err(|message| ExecError::Sql { message })?;
            cells.push(cell);
        }
        rows.push(cells);
    }
    drop(portal);
    if read_only {
        transaction.rollback().map_err(classify)?;
    } else {
        transaction.commit().map_err(classify)?;
    }
    Ok(Rows {
        columns,
        rows,
        truncated,
    })
}

/// The engine error as merit reports it: the server's own message (what psycopg2 shows, minus
/// its `LINE …` context), a timeout, or the one-statement rule.
fn sql_error(error: postgres::Error, limits: &ExecLimits) -> ExecError {
    if let Some(db) = error.as_db_error() {
        if db.code().code() == QUERY_CANCELED {
            return ExecError::Timeout(limits.timeout);
        }
        if db.message() == MULTIPLE_COMMANDS {
            return ExecError::MultipleStatements;
        }
        return ExecError::Sql {
            message: db.message().to_string(),
        };
    }
    ExecError::Sql {
        message: message(&error),
    }
}

/// The most useful text of a driver error: the server's message when there is one.
fn message(error: &postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => db.message().to_string(),
        None => error.to_string(),
    }
}

fn postgres_error(database: &str, what: &'static str, message: String) -> InteractError {
    InteractError::Postgres {
        database: database.to_string(),
        what,
        message,
    }
}

/// `"name"` with inner quotes doubled: safe for any identifier text.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Cuts a generated name to PostgreSQL's identifier length on a character boundary (the server
/// would silently truncate it otherwise, and two long names could then collide unnoticed).
fn truncate_identifier(name: &str) -> String {
    let mut end = name.len().min(MAX_IDENTIFIER);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_string()
}

/// A libpq keyword value: quoted, with `\` and `'` escaped.
fn dsn_quote(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_cut() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(truncate_identifier(&"x".repeat(80)).len(), 63);
        assert_eq!(truncate_identifier(&"é".repeat(40)).len(), 62);
    }

    #[test]
    fn the_dsn_quotes_values_and_debug_hides_the_password() {
        let server = PostgresServer::new("postgresql://u:p%27w@127.0.0.1:55432/admin").unwrap();
        assert_eq!(
            server.dsn("work"),
            "host='127.0.0.1' port=55432 user='u' password='p\\'w' dbname='work'"
        );
        let debug = format!("{server:?}");
        assert!(debug.contains("u@127.0.0.1:55432/admin"), "{debug}");
        assert!(!debug.contains("p'w") && !debug.contains("%27"), "{debug}");
        assert!(PostgresServer::new("postgresql://[bad").is_err());
    }
}
