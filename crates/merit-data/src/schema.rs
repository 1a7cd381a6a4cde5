//! Database schemas from the official `tables.json` / `dev_tables.json`, and their rendering
//! as `CREATE TABLE` statements for prompts.

use crate::error::DataError;
use crate::text::{describe, read_json, top_array, Obj};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// One database's schema, with the original (SQL) identifiers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseSchema {
    /// The database id.
    pub db_id: String,
    /// Tables in file order (`table_names_original`).
    pub tables: Vec<TableSchema>,
}

impl DatabaseSchema {
    /// The table named `name`, compared case-insensitively as SQLite does.
    pub fn table(&self, name: &str) -> Option<&TableSchema> {
        self.tables
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(name))
    }
}

/// One table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    /// The table's SQL name (`table_names_original`).
    pub name: String,
    /// Columns in file order.
    pub columns: Vec<ColumnSchema>,
    /// Foreign keys whose referencing column is in this table, in file order.
    pub foreign_keys: Vec<ForeignKey>,
}

/// One column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnSchema {
    /// The column's SQL name (`column_names_original`).
    pub name: String,
    /// The dataset's type word as written (`number`, `text`, `integer`, ...).
    pub sql_type: String,
    /// Part of the table's primary key (alone or with others).
    pub primary_key: bool,
}

/// A single-column reference `column -> ref_table(ref_column)`. Composite foreign keys appear
/// in the files as several pairs and stay several entries here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForeignKey {
    /// The referencing column, in the owning table.
    pub column: String,
    /// The referenced table.
    pub ref_table: String,
    /// The referenced column.
    pub ref_column: String,
}

/// Loads every schema of an official `tables.json` (Spider) or `dev_tables.json` (BIRD).
///
/// Used fields: `db_id`, `table_names_original`, `column_names_original` (`[table_index,
/// name]`, where index -1 is the `*` pseudo-column, skipped), `column_types` (one per column,
/// `*` included), `primary_keys` (column indices; BIRD writes a composite key as a nested
/// list) and `foreign_keys` (`[column, referenced_column]` pairs). The natural-language
/// `table_names` / `column_names` are not needed for SQL and are ignored.
///
/// Every index is checked, so a bad file fails here with its JSON path instead of producing
/// a schema that renders into broken SQL. A table without any column is rejected for the
/// same reason: `CREATE TABLE t ()` is not SQL.
pub fn load_tables(path: impl AsRef<Path>) -> Result<Vec<DatabaseSchema>, DataError> {
    let path = path.as_ref();
    let value = read_json(path, "a JSON array of database schemas")?;
    let items = top_array(path, &value)?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| parse_schema(path, Obj::new(path, format!("[{index}]"), item)?))
        .collect()
}

fn parse_schema(file: &Path, record: Obj<'_>) -> Result<DatabaseSchema, DataError> {
    let db_id = record.string("db_id")?.to_owned();
    let err = |path: String, message: String| DataError::record(file, path, message);

    let mut tables: Vec<TableSchema> = Vec::new();
    for (i, name) in record.array("table_names_original")?.iter().enumerate() {
        match name {
            Value::String(name) => tables.push(TableSchema {
                name: name.clone(),
                columns: Vec::new(),
                foreign_keys: Vec::new(),
            }),
            other => {
                return Err(err(
                    format!("{}[{i}]", record.field_path("table_names_original")),
                    format!("expected a table name string, found {}", describe(other)),
                ))
            }
        }
    }

    let columns_path = record.field_path("column_names_original");
    let column_values = record.array("column_names_original")?;
    let types_path = record.field_path("column_types");
    let types = record.array("column_types")?;
    if types.len() != column_values.len() {
        return Err(err(
            types_path,
            format!(
                "has {} entries but column_names_original has {}",
                types.len(),
                column_values.len()
            ),
        ));
    }
    // For each file column index: where it landed, as (table, position), or None for `*`.
    let mut slots: Vec<Option<(usize, usize)>> = Vec::with_capacity(column_values.len());
    for (i, (column, ty)) in column_values.iter().zip(types).enumerate() {
        let here = format!("{columns_path}[{i}]");
        let (table, name) = match column.as_array().map(Vec::as_slice) {
            Some([Value::Number(t), Value::String(name)]) if t.as_i64().is_some() => {
                (t.as_i64().unwrap_or(-1), name)
            }
            _ => {
                return Err(err(
                    here,
                    format!("expected [table_index, name], found {}", describe(column)),
                ))
            }
        };
        let Value::String(ty) = ty else {
            return Err(err(
                format!("{types_path}[{i}]"),
                format!("expected a type string, found {}", describe(ty)),
            ));
        };
        if table == -1 {
            slots.push(None);
            continue;
        }
        let Some(owner) = usize::try_from(table).ok().filter(|&t| t < tables.len()) else {
            return Err(err(
                here,
                format!("table index {table} out of range ({} tables)", tables.len()),
            ));
        };
        slots.push(Some((owner, tables[owner].columns.len())));
        tables[owner].columns.push(ColumnSchema {
            name: name.clone(),
            sql_type: ty.clone(),
            primary_key: false,
        });
    }

    // Resolves a column index to its (table, position), rejecting `*` and out-of-range indices.
    let resolve = |value: &Value, at: String| -> Result<(usize, usize), DataError> {
        let slot = value
            .as_u64()
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| slots.get(i).map(|s| (i, *s)));
        match slot {
            Some((_, Some(place))) => Ok(place),
            Some((i, None)) => Err(err(
                at,
                format!("column index {i} is the `*` pseudo-column"),
            )),
            None => Err(err(
                at,
                format!(
                    "expected a column index below {}, found {}",
                    slots.len(),
                    describe(value)
                ),
            )),
        }
    };

    let pk_path = record.field_path("primary_keys");
    for (i, key) in record.array("primary_keys")?.iter().enumerate() {
        let here = format!("{pk_path}[{i}]");
        let members: Vec<(&Value, String)> = match key {
            Value::Array(parts) => parts
                .iter()
                .enumerate()
                .map(|(j, part)| (part, format!("{here}[{j}]")))
                .collect(),
            single => vec![(single, here)],
        };
        for (value, at) in members {
            let (table, position) = resolve(value, at)?;
            tables[table].columns[position].primary_key = true;
        }
    }

    let fk_path = record.field_path("foreign_keys");
    for (i, pair) in record.array("foreign_keys")?.iter().enumerate() {
        let here = format!("{fk_path}[{i}]");
        let Some([from, to]) = pair.as_array().map(Vec::as_slice) else {
            return Err(err(
                here,
                format!(
                    "expected [column_index, referenced_column_index], found {}",
                    describe(pair)
                ),
            ));
        };
        let (from_table, from_pos) = resolve(from, format!("{here}[0]"))?;
        let (to_table, to_pos) = resolve(to, format!("{here}[1]"))?;
        let key = ForeignKey {
            column: tables[from_table].columns[from_pos].name.clone(),
            ref_table: tables[to_table].name.clone(),
            ref_column: tables[to_table].columns[to_pos].name.clone(),
        };
        tables[from_table].foreign_keys.push(key);
    }

    if let Some((i, table)) = tables
        .iter()
        .enumerate()
        .find(|(_, t)| t.columns.is_empty())
    {
        return Err(err(
            format!("{}[{i}]", record.field_path("table_names_original")),
            format!("table {:?} has no columns", table.name),
        ));
    }
    Ok(DatabaseSchema { db_id, tables })
}

/// Renders a schema as SQLite `CREATE TABLE` statements, for prompts.
///
/// Choices, all aimed at text that a model reads as ordinary SQL and SQLite accepts verbatim:
/// - Identifiers are the original SQL names. They are written bare when they are plain
///   (`[A-Za-z_][A-Za-z0-9_]*`) and not an SQLite keyword; otherwise they are double-quoted
///   with `"` doubled (`"Free Meal Count (K-12)"`, `"order"`, `"18_49_Rating_Share"`).
/// - Types are the dataset's own words, uppercased (`NUMBER`, `TEXT`, `TIME`, `BOOLEAN`,
///   `OTHERS` for Spider; `INTEGER`, `REAL`, `DATE`, `DATETIME` for BIRD). We do not translate
///   Spider's coarse words into SQLite affinities: that would invent precision the dataset does
///   not have, and SQLite accepts any word as a type. A type that is not plain words, or that
///   contains a keyword SQLite would read as the start of a constraint (`PRIMARY`, `NOT`...), is
///   double-quoted instead; an empty type is left out.
/// - The primary key is one table constraint `PRIMARY KEY (a, b)` listing every key column in
///   column order; a composite key and several single keys in one table both end up there,
///   since SQLite allows one primary key per table.
/// - Each foreign-key pair becomes `FOREIGN KEY (c) REFERENCES t(c2)`, in file order.
/// - Tables named `sqlite_*` are left out. They are SQLite's own bookkeeping (Spider's
///   `world_1` and `soccer_1` list `sqlite_sequence`, which AUTOINCREMENT creates); SQLite
///   refuses to create a table with that prefix, and no question is about them.
/// - Tables come in file order, each statement ends with `;` and a newline, and statements
///   are separated by a blank line. The output depends only on the schema.
pub fn render_create_tables(schema: &DatabaseSchema) -> String {
    let mut out = String::new();
    let user_tables = schema.tables.iter().filter(|t| !is_internal_table(&t.name));
    for (i, table) in user_tables.enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut lines: Vec<String> = table
            .columns
            .iter()
            .map(|column| {
                let ty = render_type(&column.sql_type);
                if ty.is_empty() {
                    quote_identifier(&column.name)
                } else {
                    format!("{} {ty}", quote_identifier(&column.name))
                }
            })
            .collect();
        let keys: Vec<String> = table
            .columns
            .iter()
            .filter(|c| c.primary_key)
            .map(|c| quote_identifier(&c.name))
            .collect();
        if !keys.is_empty() {
            lines.push(format!("PRIMARY KEY ({})", keys.join(", ")));
        }
        for key in &table.foreign_keys {
            lines.push(format!(
                "FOREIGN KEY ({}) REFERENCES {}({})",
                quote_identifier(&key.column),
                quote_identifier(&key.ref_table),
                quote_identifier(&key.ref_column)
            ));
        }
        let _ = writeln!(out, "CREATE TABLE {} (", quote_identifier(&table.name));
        let _ = writeln!(out, "  {}", lines.join(",\n  "));
        out.push_str(");\n");
    }
    out
}

/// SQLite reserves every name that starts with `sqlite_`, in any case.
fn is_internal_table(name: &str) -> bool {
    name.len() >= 7 && name.as_bytes()[..7].eq_ignore_ascii_case(b"sqlite_")
}

/// Quotes an identifier for SQLite when it needs it (see [`render_create_tables`]).
pub fn quote_identifier(name: &str) -> String {
    if is_plain_word(name) && !is_keyword(name) {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn render_type(ty: &str) -> String {
    let words: Vec<&str> = ty.split_whitespace().collect();
    if words.is_empty() {
        return String::new();
    }
    let upper = words.join(" ").to_ascii_uppercase();
    if words
        .iter()
        .all(|w| is_plain_word(w) && !breaks_type_position(w))
    {
        upper
    } else {
        format!("\"{}\"", upper.replace('"', "\"\""))
    }
}

fn is_plain_word(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_keyword(word: &str) -> bool {
    let upper = word.to_ascii_uppercase();
    SQLITE_KEYWORDS.binary_search(&upper.as_str()).is_ok()
}

fn breaks_type_position(word: &str) -> bool {
    let upper = word.to_ascii_uppercase();
    TYPE_BREAKING_KEYWORDS
        .binary_search(&upper.as_str())
        .is_ok()
}

/// SQLite's 147 keywords (<https://sqlite.org/lang_keywords.html>), sorted for binary search.
/// Many are usable bare as names thanks to SQLite's fallback rules, but which ones depends on
/// context and version; quoting all of them is always right and tells the model the word is a
/// name.
const SQLITE_KEYWORDS: [&str; 147] = [
    "ABORT",
    "ACTION",
    "ADD",
    "AFTER",
    "ALL",
    "ALTER",
    "ALWAYS",
    "ANALYZE",
    "AND",
    "AS",
    "ASC",
    "ATTACH",
    "AUTOINCREMENT",
    "BEFORE",
    "BEGIN",
    "BETWEEN",
    "BY",
    "CASCADE",
    "CASE",
    "CAST",
    "CHECK",
    "COLLATE",
    "COLUMN",
    "COMMIT",
    "CONFLICT",
    "CONSTRAINT",
    "CREATE",
    "CROSS",
    "CURRENT",
    "CURRENT_DATE",
    "CURRENT_TIME",
    "CURRENT_TIMESTAMP",
    "DATABASE",
    "DEFAULT",
    "DEFERRABLE",
    "DEFERRED",
    "DELETE",
    "DESC",
    "DETACH",
    "DISTINCT",
    "DO",
    "DROP",
    "EACH",
    "ELSE",
    "END",
    "ESCAPE",
    "EXCEPT",
    "EXCLUDE",
    "EXCLUSIVE",
    "EXISTS",
    "EXPLAIN",
    "FAIL",
    "FILTER",
    "FIRST",
    "FOLLOWING",
    "FOR",
    "FOREIGN",
    "FROM",
    "FULL",
    "GENERATED",
    "GLOB",
    "GROUP",
    "GROUPS",
    "HAVING",
    "IF",
    "IGNORE",
    "IMMEDIATE",
    "IN",
    "INDEX",
    "INDEXED",
    "INITIALLY",
    "INNER",
    "INSERT",
    "INSTEAD",
    "INTERSECT",
    "INTO",
    "IS",
    "ISNULL",
    "JOIN",
    "KEY",
    "LAST",
    "LEFT",
    "LIKE",
    "LIMIT",
    "MATCH",
    "MATERIALIZED",
    "NATURAL",
    "NO",
    "NOT",
    "NOTHING",
    "NOTNULL",
    "NULL",
    "NULLS",
    "OF",
    "OFFSET",
    "ON",
    "OR",
    "ORDER",
    "OTHERS",
    "OUTER",
    "OVER",
    "PARTITION",
    "PLAN",
    "PRAGMA",
    "PRECEDING",
    "PRIMARY",
    "QUERY",
    "RAISE",
    "RANGE",
    "RECURSIVE",
    "REFERENCES",
    "REGEXP",
    "REINDEX",
    "RELEASE",
    "RENAME",
    "REPLACE",
    "RESTRICT",
    "RETURNING",
    "RIGHT",
    "ROLLBACK",
    "ROW",
    "ROWS",
    "SAVEPOINT",
    "SELECT",
    "SET",
    "TABLE",
    "TEMP",
    "TEMPORARY",
    "THEN",
    "TIES",
    "TO",
    "TRANSACTION",
    "TRIGGER",
    "UNBOUNDED",
    "UNION",
    "UNIQUE",
    "UPDATE",
    "USING",
    "VACUUM",
    "VALUES",
    "VIEW",
    "VIRTUAL",
    "WHEN",
    "WHERE",
    "WINDOW",
    "WITH",
    "WITHOUT",
];

/// The keywords that SQLite does not read as a type name when written bare in a column's type:
/// either a syntax error (`PRIMARY`, `FROM`...) or the start of a column constraint that would
/// silently change the meaning (`NULL`, `UNIQUE`, `DEFERRABLE`). Found by declaring
/// `CREATE TABLE t (a WORD, b TEXT)` for each of [`SQLITE_KEYWORDS`] and reading the type back
/// with `PRAGMA table_info` (SQLite 3.40); a unit test re-checks it against the bundled SQLite.
/// The other keywords, Spider's `OTHERS` among them, fall back to plain identifiers there and
/// stay bare like every other type word.
const TYPE_BREAKING_KEYWORDS: [&str; 66] = [
    "ADD",
    "ALL",
    "ALTER",
    "AND",
    "AS",
    "AUTOINCREMENT",
    "BETWEEN",
    "CASE",
    "CHECK",
    "COLLATE",
    "COMMIT",
    "CONSTRAINT",
    "CREATE",
    "CROSS",
    "DEFAULT",
    "DEFERRABLE",
    "DELETE",
    "DISTINCT",
    "DROP",
    "ELSE",
    "ESCAPE",
    "EXCEPT",
    "EXISTS",
    "FOREIGN",
    "FROM",
    "FULL",
    "GROUP",
    "HAVING",
    "IN",
    "INDEX",
    "INDEXED",
    "INNER",
    "INSERT",
    "INTERSECT",
    "INTO",
    "IS",
    "ISNULL",
    "JOIN",
    "LEFT",
    "LIMIT",
    "NATURAL",
    "NOT",
    "NOTHING",
    "NOTNULL",
    "NULL",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "PRIMARY",
    "REFERENCES",
    "RETURNING",
    "RIGHT",
    "SELECT",
    "SET",
    "TABLE",
    "THEN",
    "TO",
    "TRANSACTION",
    "UNION",
    "UNIQUE",
    "UPDATE",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::write;

    fn column(name: &str, sql_type: &str, primary_key: bool) -> ColumnSchema {
        ColumnSchema {
            name: name.to_owned(),
            sql_type: sql_type.to_owned(),
            primary_key,
        }
    }

    #[test]
    fn keyword_lists_are_sorted_and_agree_with_the_bundled_sqlite() {
        assert!(SQLITE_KEYWORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(TYPE_BREAKING_KEYWORDS.windows(2).all(|w| w[0] < w[1]));
        let db = rusqlite::Connection::open_in_memory().unwrap();
        for (i, word) in SQLITE_KEYWORDS.iter().enumerate() {
            let created = db
                .execute_batch(&format!("CREATE TABLE t{i} (a {word}, b TEXT)"))
                .is_ok();
            let read_back = created
                && db
                    .query_row(
                        &format!("SELECT type FROM pragma_table_info('t{i}') WHERE cid = 0"),
                        [],
                        |r| r.get::<_, String>(0),
                    )
                    .is_ok_and(|ty| ty == *word);
            assert_eq!(
                read_back,
                !breaks_type_position(word),
                "{word}: SQLite reads it as a type: {read_back}"
            );
        }
    }

    #[test]
    fn quoting_and_types_survive_sqlite() {
        let schema = DatabaseSchema {
            db_id: "hostile".to_owned(),
            tables: vec![
                TableSchema {
                    name: "order".to_owned(),
                    columns: vec![
                        column("id", "number", true),
                        column("with space", "text", false),
                        column("18_49", "others", false),
                        column("a\"b", "", false),
                        column("select", "not null", false),
                        column("x", "double  precision", false),
                        column("ß", "va\"r", false),
                    ],
                    foreign_keys: vec![],
                },
                TableSchema {
                    name: "SQLite_sequence".to_owned(),
                    columns: vec![column("name", "text", false)],
                    foreign_keys: vec![],
                },
                TableSchema {
                    name: "Table 2".to_owned(),
                    columns: vec![column("k1", "integer", true), column("k2", "integer", true)],
                    foreign_keys: vec![ForeignKey {
                        column: "k1".to_owned(),
                        ref_table: "order".to_owned(),
                        ref_column: "id".to_owned(),
                    }],
                },
            ],
        };
        let sql = render_create_tables(&schema);
        assert_eq!(
            sql,
            "CREATE TABLE \"order\" (\n  id NUMBER,\n  \"with space\" TEXT,\n  \"18_49\" OTHERS,\n  \
             \"a\"\"b\",\n  \"select\" \"NOT NULL\",\n  x DOUBLE PRECISION,\n  \"ß\" \"VA\"\"R\",\n  \
             PRIMARY KEY (id)\n);\n\nCREATE TABLE \"Table 2\" (\n  k1 INTEGER,\n  k2 INTEGER,\n  \
             PRIMARY KEY (k1, k2),\n  FOREIGN KEY (k1) REFERENCES \"order\"(id)\n);\n"
        );
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(&sql).unwrap();
        let columns: Vec<(String, String, i64)> = db
            .prepare("SELECT name, type, pk FROM pragma_table_info('order')")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let names: Vec<&str> = columns.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(
            names,
            ["id", "with space", "18_49", "a\"b", "select", "x", "ß"]
        );
        assert_eq!(columns[4].1, "NOT NULL");
        assert_eq!(columns[0].2, 1);
    }

    #[test]
    fn composite_keys_and_foreign_keys_are_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            &dir,
            "tables.json",
            br#"[{"db_id": "d", "table_names_original": ["a", "b"], "table_names": ["a", "b"],
                  "column_names_original": [[-1, "*"], [0, "x"], [0, "y"], [1, "z"]],
                  "column_types": ["text", "number", "text", "number"],
                  "primary_keys": [[1, 2], 3], "foreign_keys": [[3, 1]]}]"#,
        );
        let schemas = load_tables(&path).unwrap();
        let a = schemas[0].table("A").unwrap();
        assert!(a.columns.iter().all(|c| c.primary_key));
        let b = schemas[0].table("b").unwrap();
        assert_eq!(
            b.foreign_keys,
            vec![ForeignKey {
                column: "z".to_owned(),
                ref_table: "a".to_owned(),
                ref_column: "x".to_owned()
            }]
        );
        assert!(render_create_tables(&schemas[0]).contains("PRIMARY KEY (x, y)"));
    }

    #[test]
    fn broken_schemas_name_the_json_path() {
        let dir = tempfile::tempdir().unwrap();
        let base = |columns: &str, types: &str, pks: &str, fks: &str| {
            format!(
                r#"[{{"db_id": "d", "table_names_original": ["a", "b"],
                     "column_names_original": {columns}, "column_types": {types},
                     "primary_keys": {pks}, "foreign_keys": {fks}}}]"#
            )
        };
        let ok_cols = r#"[[-1, "*"], [0, "x"], [1, "y"]]"#;
        let ok_types = r#"["text", "number", "text"]"#;
        let cases = [
            (
                base(r#"[[-1, "*"], [2, "x"], [1, "y"]]"#, ok_types, "[]", "[]"),
                "at [0].column_names_original[1]: table index 2 out of range (2 tables)",
            ),
            (
                base(r#"[[-1, "*"], [0, "x"], ["1", "y"]]"#, ok_types, "[]", "[]"),
                "at [0].column_names_original[2]: expected [table_index, name]",
            ),
            (
                base(ok_cols, r#"["text"]"#, "[]", "[]"),
                "at [0].column_types: has 1 entries but column_names_original has 3",
            ),
            (
                base(ok_cols, ok_types, "[[1, 0]]", "[]"),
                "at [0].primary_keys[0][1]: column index 0 is the `*` pseudo-column",
            ),
            (
                base(ok_cols, ok_types, "[1]", "[[2, 9]]"),
                "at [0].foreign_keys[0][1]: expected a column index below 3, found number 9",
            ),
            (
                base(ok_cols, ok_types, "[1]", "[[2]]"),
                "at [0].foreign_keys[0]: expected [column_index, referenced_column_index]",
            ),
            (
                base(
                    r#"[[-1, "*"], [0, "x"]]"#,
                    r#"["text", "number"]"#,
                    "[]",
                    "[]",
                ),
                "at [0].table_names_original[1]: table \"b\" has no columns",
            ),
            (
                base(ok_cols, ok_types, "{}", "[]"),
                "at [0].primary_keys: expected an array, found an object",
            ),
        ];
        for (i, (json, expected)) in cases.iter().enumerate() {
            let path = write(&dir, &format!("tables{i}.json"), json.as_bytes());
            let text = load_tables(&path).unwrap_err().to_string();
            assert!(
                text.contains(&format!("tables{i}.json {expected}")),
                "{i}: {text}"
            );
        }
    }
}
