//! Loads a SQLite database (the mini-interact layout) into a PostgreSQL template database.
//!
//! Column types come from the values actually stored, because SQLite's declared types do not
//! bind them: a column holding only integers becomes `bigint`, integers and reals `double
//! precision`, anything with text `text`, only blobs `bytea`, only NULLs `text`. With these
//! types a query reads the same values on both engines (dates stay the text SQLite stores).
//! Only columns and rows are copied: no keys, indexes, constraints or views.
//!
//! The SQLite file is read through `merit_sql`'s read-only connection; the rows travel with
//! `COPY … FROM STDIN`. The template is built under a temporary name and renamed when complete,
//! so a template that exists is never half-loaded, and its comment records a fingerprint of the
//! source file so a changed file is loaded again.

use super::{message, postgres_error, quote_ident, truncate_identifier, PostgresServer};
use crate::error::InteractError;
use merit_sql::{Database, ExecLimits, SqliteDatabase, Value};
use std::io::Write;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bumped whenever the loader's output changes, so old templates are rebuilt.
const LOADER_VERSION: &str = "merit-interact sqlite-load v1";

static BUILD_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A PostgreSQL column type chosen from the stored values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PgType {
    BigInt,
    Double,
    Text,
    Bytea,
}

impl PgType {
    fn sql(self) -> &'static str {
        match self {
            PgType::BigInt => "bigint",
            PgType::Double => "double precision",
            PgType::Text => "text",
            PgType::Bytea => "bytea",
        }
    }

    /// The narrowest type holding every SQLite storage class seen (`typeof()` values).
    fn for_classes(classes: &[String]) -> PgType {
        let has = |class: &str| classes.iter().any(|c| c == class);
        if has("text") || (has("blob") && classes.iter().any(|c| c != "blob" && c != "null")) {
            PgType::Text
        } else if has("blob") {
            PgType::Bytea
        } else if has("real") {
            PgType::Double
        } else if has("integer") {
            PgType::BigInt
        } else {
            PgType::Text
        }
    }
}

struct Table {
    name: String,
    columns: Vec<(String, PgType)>,
}

impl PostgresServer {
    /// Makes sure the template [`PostgresServer::template_name`]`(database)` holds the SQLite
    /// file `sqlite`, loading it when it is missing or was loaded from different bytes, and
    /// returns the template's name.
    pub fn ensure_sqlite_template(
        &self,
        database: &str,
        sqlite: &Path,
    ) -> Result<String, InteractError> {
        let template = PostgresServer::template_name(database);
        let fingerprint = fingerprint(database, sqlite)?;
        let mut admin = self.connect(None)?;
        let comment = admin
            .query_opt(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1",
                &[&template],
            )
            .map_err(|e| postgres_error(database, "looking up the template", message(&e)))?
            .and_then(|row| row.get::<_, Option<String>>(0));
        if comment.as_deref() == Some(fingerprint.as_str()) {
            return Ok(template);
        }
        self.load_sqlite_template(database, sqlite, &template, &fingerprint)?;
        Ok(template)
    }

    /// Builds `template` from the SQLite file under a temporary name, then puts it in place of
    /// any existing database of that name.
    fn load_sqlite_template(
        &self,
        database: &str,
        sqlite: &Path,
        template: &str,
        fingerprint: &str,
    ) -> Result<(), InteractError> {
        let tables = read_tables(database, sqlite)?;
        let build = truncate_identifier(&format!(
            "merit_b_{}_{}_{database}",
            std::process::id(),
            BUILD_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut admin = self.connect(None)?;
        let admin_fail = |what: &'static str| {
            move |e: postgres::Error| postgres_error(database, what, message(&e))
        };
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8'",
                quote_ident(&build)
            ))
            .map_err(admin_fail("creating the template database"))?;
        let filled = self.fill(database, sqlite, &build, &tables);
        let placed = filled.and_then(|()| {
            admin
                .batch_execute(&format!(
                    "COMMENT ON DATABASE {} IS '{}'",
                    quote_ident(&build),
                    fingerprint.replace('\'', "''")
                ))
                .map_err(admin_fail("marking the template"))?;
            admin
                .batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    quote_ident(template)
                ))
                .map_err(admin_fail("replacing the old template"))?;
            admin
                .batch_execute(&format!(
                    "ALTER DATABASE {} RENAME TO {}",
                    quote_ident(&build),
                    quote_ident(template)
                ))
                .map_err(admin_fail("renaming the template into place"))
        });
        if placed.is_err() {
            // Leave nothing half-built behind. If a concurrent loader won the rename, its
            // complete template is in place and ours is simply discarded.
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                quote_ident(&build)
            ));
            if self.database_exists(template)? {
                return Ok(());
            }
        }
        placed
    }

    /// Creates the tables in `build` and copies every row.
    fn fill(
        &self,
        database: &str,
        sqlite: &Path,
        build: &str,
        tables: &[Table],
    ) -> Result<(), InteractError> {
        let source = open_source(database, sqlite)?;
        let mut client = self.connect(Some(build))?;
        for table in tables {
            let fail = |what: &'static str| {
                move |e: postgres::Error| {
                    postgres_error(
                        database,
                        what,
                        format!("table {}: {}", table.name, message(&e)),
                    )
                }
            };
            let columns: Vec<String> = table
                .columns
                .iter()
                .map(|(name, ty)| format!("{} {}", quote_ident(name), ty.sql()))
                .collect();
            client
                .batch_execute(&format!(
                    "CREATE TABLE {} ({})",
                    quote_ident(&table.name),
                    columns.join(", ")
                ))
                .map_err(fail("creating a table"))?;
            let data = copy_text(database, &source, table)?;
            let mut writer = client
                .copy_in(&format!("COPY {} FROM STDIN", quote_ident(&table.name)))
                .map_err(fail("starting COPY"))?;
            writer.write_all(&data).map_err(|e| {
                postgres_error(
                    database,
                    "copying rows",
                    format!("table {}: {e}", table.name),
                )
            })?;
            writer.finish().map_err(fail("copying rows"))?;
        }
        Ok(())
    }
}

/// The loader's limits for reading its own trusted queries: generous, uncapped.
fn read_limits() -> ExecLimits {
    ExecLimits::with_timeout(Duration::from_secs(600))
}

fn open_source(database: &str, sqlite: &Path) -> Result<SqliteDatabase, InteractError> {
    SqliteDatabase::open(sqlite).map_err(|e| InteractError::DatabaseUnavailable {
        database: database.to_string(),
        reason: e.to_string(),
    })
}

fn sqlite_error(database: &str, what: &'static str, error: merit_sql::ExecError) -> InteractError {
    postgres_error(database, what, error.to_string())
}

/// Tables (by name) and their columns with types chosen from the stored values.
fn read_tables(database: &str, sqlite: &Path) -> Result<Vec<Table>, InteractError> {
    let source = open_source(database, sqlite)?;
    let limits = read_limits();
    let fail = |e| sqlite_error(database, "reading the SQLite schema", e);
    let names = source
        .query(
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name",
            &limits,
        )
        .map_err(fail)?;
    let mut tables = Vec::new();
    for row in names.rows {
        let Some(name) = row.first().and_then(Value::as_text).map(str::to_string) else {
            continue;
        };
        let info = source
            .query(
                &format!("PRAGMA table_info({})", quote_ident(&name)),
                &limits,
            )
            .map_err(fail)?;
        let mut columns = Vec::new();
        for column in info.rows {
            let Some(column) = column.get(1).and_then(Value::as_text).map(str::to_string) else {
                continue;
            };
            let classes = source
                .query(
                    &format!(
                        "SELECT DISTINCT typeof({}) FROM {}",
                        quote_ident(&column),
                        quote_ident(&name)
                    ),
                    &limits,
                )
                .map_err(fail)?
                .rows
                .iter()
                .filter_map(|r| r.first().and_then(Value::as_text).map(str::to_string))
                .collect::<Vec<_>>();
            columns.push((column, PgType::for_classes(&classes)));
        }
        tables.push(Table { name, columns });
    }
    Ok(tables)
}

/// Every row of `table` in COPY's text format.
fn copy_text(
    database: &str,
    source: &SqliteDatabase,
    table: &Table,
) -> Result<Vec<u8>, InteractError> {
    let select: Vec<String> = table.columns.iter().map(|(c, _)| quote_ident(c)).collect();
    let sql = format!(
        "SELECT {} FROM {}",
        select.join(", "),
        quote_ident(&table.name)
    );
    let mut out = Vec::new();
    let mut problem: Option<String> = None;
    source
        .for_each_row(&sql, &read_limits(), &mut |row| {
            for (index, value) in row.iter().enumerate() {
                if index > 0 {
                    out.push(b'\t');
                }
                let (column, ty) = &table.columns[index];
                if let Err(reason) = copy_value(&mut out, value, *ty) {
                    problem = Some(format!("table {}, column {column}: {reason}", table.name));
                    return ControlFlow::Break(());
                }
            }
            out.push(b'\n');
            ControlFlow::Continue(())
        })
        .map_err(|e| sqlite_error(database, "reading SQLite rows", e))?;
    match problem {
        Some(reason) => Err(postgres_error(database, "converting a value", reason)),
        None => Ok(out),
    }
}

/// Appends one value in COPY text format.
fn copy_value(out: &mut Vec<u8>, value: &Value, ty: PgType) -> Result<(), String> {
    match (value, ty) {
        (Value::Null, _) => out.extend_from_slice(b"\\N"),
        (Value::Integer(i), _) => out.extend_from_slice(i.to_string().as_bytes()),
        (Value::Real(f), PgType::Double) => out.extend_from_slice(double_text(*f).as_bytes()),
        // A real in a text column: the text Python would print for it.
        (Value::Real(f), _) => out.extend_from_slice(merit_eval::python::float_repr(*f).as_bytes()),
        (Value::Blob(bytes), PgType::Bytea) => {
            out.extend_from_slice(b"\\\\x");
            for byte in bytes {
                out.extend_from_slice(format!("{byte:02x}").as_bytes());
            }
        }
        (Value::Text(bytes) | Value::Blob(bytes), _) => {
            let text = std::str::from_utf8(bytes).map_err(|_| "text is not valid UTF-8")?;
            for ch in text.chars() {
                match ch {
                    '\\' => out.extend_from_slice(b"\\\\"),
                    '\n' => out.extend_from_slice(b"\\n"),
                    '\r' => out.extend_from_slice(b"\\r"),
                    '\t' => out.extend_from_slice(b"\\t"),
                    '\0' => return Err("text holds a NUL character".to_string()),
                    other => {
                        let mut buffer = [0u8; 4];
                        out.extend_from_slice(other.encode_utf8(&mut buffer).as_bytes());
                    }
                }
            }
        }
    }
    Ok(())
}

/// A double as text PostgreSQL reads back to the same bits (shortest round-trip form).
fn double_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_string()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        format!("{f:?}")
    }
}

/// The loader version, the database name and an FNV-1a hash of the file's bytes.
fn fingerprint(database: &str, sqlite: &Path) -> Result<String, InteractError> {
    let bytes = std::fs::read(sqlite).map_err(|e| InteractError::DatabaseUnavailable {
        database: database.to_string(),
        reason: format!("cannot read {}: {e}", sqlite.display()),
    })?;
    let hash = merit_core::hash::fnv1a(&bytes);
    Ok(format!(
        "{LOADER_VERSION}; {database}; {} bytes; fnv1a64 {hash:016x}",
        bytes.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_follow_the_stored_values() {
        let t = |classes: &[&str]| {
            PgType::for_classes(&classes.iter().map(|c| c.to_string()).collect::<Vec<_>>())
        };
        assert_eq!(t(&["integer", "null"]), PgType::BigInt);
        assert_eq!(t(&["integer", "real"]), PgType::Double);
        assert_eq!(t(&["real", "text"]), PgType::Text);
        assert_eq!(t(&["blob", "null"]), PgType::Bytea);
        assert_eq!(t(&["blob", "integer"]), PgType::Text);
        assert_eq!(t(&["null"]), PgType::Text);
        assert_eq!(t(&[]), PgType::Text);
    }

    #[test]
    fn copy_values_are_escaped() {
        let mut out = Vec::new();
        copy_value(&mut out, &Value::Text(b"a\tb\\c\nd".to_vec()), PgType::Text).unwrap();
        assert_eq!(out, b"a\\tb\\\\c\\nd");
        let mut out = Vec::new();
        copy_value(&mut out, &Value::Blob(vec![0, 255]), PgType::Bytea).unwrap();
        assert_eq!(out, b"\\\\x00ff");
        let mut out = Vec::new();
        copy_value(&mut out, &Value::Real(0.1), PgType::Double).unwrap();
        assert_eq!(out, b"0.1");
        assert!(copy_value(&mut Vec::new(), &Value::Text(vec![0xff]), PgType::Text).is_err());
        assert!(copy_value(&mut Vec::new(), &Value::Text(vec![0]), PgType::Text).is_err());
        assert_eq!(double_text(1e300), "1e300");
    }
}
