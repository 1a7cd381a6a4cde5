//! Management (WRITE) targets, SQL first, with the test cases that judge them.
//!
//! The paper's generator also writes data-changing tasks; Spider has only queries, so merit
//! derives writes from the verified query targets: a target that reads one table and keeps
//! rows with a `WHERE` clause (no join, grouping or set operation) becomes
//!
//! * `DELETE FROM t WHERE <the clause>`, or
//! * `UPDATE t SET c = v WHERE <the clause>`, where `c` is a non-key column the clause does
//!   not mention and `v` the most common value of `c` among the rows the clause does not keep
//!   (so the change is one the data makes plausible), chosen only when at least one kept row
//!   differs from it. `c` must be categorical: `v` occurs in at least two of those rows and
//!   the column has at most half as many distinct values as values (a name or a free-text
//!   column would otherwise give "rename every country independent after 1945 to
//!   Afghanistan").
//!
//! Each candidate is applied to a throwaway copy of the database. It is kept only when it
//! changes some rows but not all of them (a delete that empties the table or an update that
//! sets every row teaches nothing and cannot be told apart from a careless statement). The
//! counts seen after the reference write become the task's test case: a Python `test_case`
//! (BIRD-Interact's form, run by the harness on the working copy after the agent's
//! statement) that checks, for a delete, that no row the clause keeps is left and that the
//! table lost exactly that many rows; for an update, that every kept row now holds `v`, that
//! no other row was given it, and that no row was added or removed. These checks are what the
//! reference write guarantees, so any statement with the same effect passes, whatever its
//! text.
//!
//! The request itself is then written by the model from the statement, as for queries (the
//! outline tells it that the statement changes data).

use super::perturb::{PerturbKind, Perturbation, Target};
use super::{fnv1a, sqlast, GenError};
use merit_data::{quote_identifier, DatabaseDir, DatabaseSchema};
use merit_sql::{Database, ExecLimits, SqliteDatabase, Value};
use serde::{Deserialize, Serialize};
use sqlparser::ast::{SetExpr, TableFactor};
use std::collections::BTreeMap;
use std::time::Duration;

/// What a Management target carries besides its SQL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteSpec {
    /// The Python test cases (one `test_case` function each).
    pub test_cases: Vec<String>,
    /// The clause-by-clause outline shown to the request writer.
    pub outline: String,
}

/// Counts of what happened to the query targets offered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WriteReport {
    /// Query targets read.
    pub offered: usize,
    /// Of those, reading one table with a `WHERE` clause.
    pub eligible: usize,
    /// Candidates that failed, changed no row, or changed every row.
    pub discarded: usize,
    /// Write targets kept.
    pub kept: usize,
    /// Writes dropped because an earlier query target gave the same statement (two
    /// perturbations that differ only in what they select filter alike).
    pub duplicates: usize,
}

/// A check of the table state: a count query and the count it must return.
struct Check {
    query: String,
    count: i64,
    what: &'static str,
}

/// Builds Management targets from query `targets` (see the module docs): at most one per
/// query target; whether a delete or an update is tried first follows the target id (its last
/// hex digit's parity), so both kinds occur and a rerun makes the same choice.
pub fn write_targets(
    targets: &[Target],
    schemas: &BTreeMap<String, DatabaseSchema>,
    databases: &DatabaseDir,
    timeout: Duration,
) -> Result<(Vec<Target>, WriteReport), GenError> {
    let mut report = WriteReport {
        offered: targets.len(),
        ..WriteReport::default()
    };
    let limits = ExecLimits::with_timeout(timeout);
    let mut written = Vec::new();
    for target in targets {
        let (Some(schema), Some((table, clause))) =
            (schemas.get(&target.db_id), single_table_filter(&target.sql))
        else {
            continue;
        };
        let Ok(source) = databases.locate(&target.db_id) else {
            continue;
        };
        report.eligible += 1;
        let delete_first = target.target_id.bytes().last().is_some_and(|b| b % 2 == 0);
        let mut kept = None;
        for delete in [delete_first, !delete_first] {
            let candidate = if delete {
                delete_candidate(&source, &table, &clause, &limits)?
            } else {
                update_candidate(&source, schema, &table, &clause, &limits)?
            };
            if candidate.is_some() {
                kept = candidate;
                break;
            }
        }
        let Some((sql, checks, detail)) = kept else {
            report.discarded += 1;
            continue;
        };
        report.kept += 1;
        let normalized = sql.split_whitespace().collect::<Vec<_>>().join(" ");
        written.push(Target {
            target_id: format!(
                "{:016x}",
                fnv1a(format!("{}\n{normalized}", target.db_id).as_bytes())
            ),
            db_id: target.db_id.clone(),
            seed_id: target.seed_id.clone(),
            seed_sql: target.seed_sql.clone(),
            perturbations: target
                .perturbations
                .iter()
                .cloned()
                .chain(std::iter::once(Perturbation {
                    kind: PerturbKind::Write,
                    detail,
                }))
                .collect(),
            write: Some(WriteSpec {
                test_cases: vec![test_case(&checks)],
                outline: outline(&sql, &table, &clause),
            }),
            follow_up: None,
            sql,
        });
    }
    Ok((written, report))
}

/// `(table, WHERE clause)` of a query that reads one plain table and filters it.
fn single_table_filter(sql: &str) -> Option<(String, String)> {
    let query = sqlast::parse_query(sql)?;
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [from] = select.from.as_slice() else {
        return None;
    };
    if !from.joins.is_empty() {
        return None;
    }
    let TableFactor::Table { name, alias, .. } = &from.relation else {
        return None;
    };
    if alias.is_some() {
        // Column references may carry the alias; a write cannot.
        return None;
    }
    let grouped = !matches!(
        &select.group_by,
        sqlparser::ast::GroupByExpr::Expressions(exprs, _) if exprs.is_empty()
    );
    if grouped || select.having.is_some() {
        return None;
    }
    let clause = select.selection.as_ref()?.to_string();
    // Subqueries in the clause could read the table being changed.
    if clause.to_ascii_uppercase().contains("SELECT") {
        return None;
    }
    Some((name.to_string(), clause))
}

/// A copy of `source` to change.
pub(crate) fn scratch_copy(source: &std::path::Path) -> Result<tempfile::NamedTempFile, GenError> {
    let copy = tempfile::NamedTempFile::new().map_err(super::io_error(source))?;
    std::fs::copy(source, copy.path()).map_err(super::io_error(source))?;
    Ok(copy)
}

fn count(connection: &mut merit_sql::ScratchConnection, query: &str) -> Option<i64> {
    let result = connection.execute(query).ok()?;
    match result.rows.first()?.first()? {
        Value::Integer(n) => Some(*n),
        _ => None,
    }
}

type Candidate = Option<(String, Vec<Check>, String)>;

fn delete_candidate(
    source: &std::path::Path,
    table: &str,
    clause: &str,
    limits: &ExecLimits,
) -> Result<Candidate, GenError> {
    let copy = scratch_copy(source)?;
    let Ok(mut scratch) = SqliteDatabase::open_scratch(copy.path(), *limits) else {
        return Ok(None);
    };
    let all = format!("SELECT COUNT(*) FROM {table}");
    let kept = format!("SELECT COUNT(*) FROM {table} WHERE {clause}");
    let (Some(before), Some(matching)) = (count(&mut scratch, &all), count(&mut scratch, &kept))
    else {
        return Ok(None);
    };
    if matching == 0 || matching == before {
        return Ok(None);
    }
    let sql = format!("DELETE FROM {table} WHERE {clause}");
    if scratch.execute(&sql).is_err() {
        return Ok(None);
    }
    let (Some(after), Some(left)) = (count(&mut scratch, &all), count(&mut scratch, &kept)) else {
        return Ok(None);
    };
    if left != 0 || after != before - matching {
        return Ok(None);
    }
    let checks = vec![
        Check {
            query: kept,
            count: 0,
            what: "rows that should be gone are still there",
        },
        Check {
            query: all,
            count: after,
            what: "other rows were removed or added",
        },
    ];
    Ok(Some((
        sql,
        checks,
        format!("delete {matching} of {before} rows"),
    )))
}

fn update_candidate(
    source: &std::path::Path,
    schema: &DatabaseSchema,
    table: &str,
    clause: &str,
    limits: &ExecLimits,
) -> Result<Candidate, GenError> {
    let bare = table.trim_matches(|c| c == '"' || c == '`' || c == '[' || c == ']');
    let Some(spec) = schema
        .tables
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(bare))
    else {
        return Ok(None);
    };
    let lowered_clause = clause.to_ascii_lowercase();
    let database = SqliteDatabase::open(source).map_err(|e| GenError::Database {
        database: schema.db_id.clone(),
        message: e.to_string(),
    })?;
    for column in &spec.columns {
        let name = column.name.to_ascii_lowercase();
        if column.primary_key
            || name == "id"
            || name.ends_with("_id")
            || lowered_clause.contains(&name)
            || spec
                .foreign_keys
                .iter()
                .any(|fk| fk.column.eq_ignore_ascii_case(&column.name))
        {
            continue;
        }
        let quoted = quote_identifier(&column.name);
        let categorical =
            format!("SELECT COUNT(DISTINCT {quoted}) * 2 <= COUNT({quoted}) FROM {table}");
        if !database.query(&categorical, limits).is_ok_and(|found| {
            found.rows.first().and_then(|row| row.first()) == Some(&Value::Integer(1))
        }) {
            continue;
        }
        let common = format!(
            "SELECT {quoted} FROM {table} WHERE NOT ({clause}) AND {quoted} IS NOT NULL \
             GROUP BY {quoted} HAVING COUNT(*) >= 2 ORDER BY COUNT(*) DESC, {quoted} LIMIT 1"
        );
        let Ok(found) = database.query(&common, limits) else {
            continue;
        };
        let Some(literal) = found
            .rows
            .first()
            .and_then(|row| row.first())
            .and_then(sql_literal)
        else {
            continue;
        };
        let copy = scratch_copy(source)?;
        let Ok(mut scratch) = SqliteDatabase::open_scratch(copy.path(), *limits) else {
            return Ok(None);
        };
        let all = format!("SELECT COUNT(*) FROM {table}");
        let kept = format!("SELECT COUNT(*) FROM {table} WHERE {clause}");
        let differing = format!(
            "SELECT COUNT(*) FROM {table} WHERE ({clause}) AND ({quoted} IS NULL OR {quoted} <> {literal})"
        );
        let (Some(before), Some(matching), Some(changing)) = (
            count(&mut scratch, &all),
            count(&mut scratch, &kept),
            count(&mut scratch, &differing),
        ) else {
            continue;
        };
        if matching == 0 || matching == before || changing == 0 {
            continue;
        }
        let sql = format!("UPDATE {table} SET {quoted} = {literal} WHERE {clause}");
        if scratch.execute(&sql).is_err() {
            continue;
        }
        let holds =
            format!("SELECT COUNT(*) FROM {table} WHERE ({clause}) AND {quoted} = {literal}");
        let anywhere = format!("SELECT COUNT(*) FROM {table} WHERE {quoted} = {literal}");
        let (Some(after), Some(set), Some(total)) = (
            count(&mut scratch, &all),
            count(&mut scratch, &holds),
            count(&mut scratch, &anywhere),
        ) else {
            continue;
        };
        if after != before || set != matching {
            continue;
        }
        let checks = vec![
            Check {
                query: holds,
                count: set,
                what: "not every row to change holds the new value",
            },
            Check {
                query: anywhere,
                count: total,
                what: "rows that should not change were given the new value",
            },
            Check {
                query: all,
                count: after,
                what: "rows were removed or added",
            },
        ];
        let detail = format!(
            "update {} to {literal} in {matching} of {before} rows",
            column.name
        );
        return Ok(Some((sql, checks, detail)));
    }
    Ok(None)
}

/// A value as a SQL literal (text quoted, quotes doubled); `None` for NULL, blobs and text
/// that is not UTF-8.
fn sql_literal(value: &Value) -> Option<String> {
    match value {
        Value::Integer(n) => Some(n.to_string()),
        Value::Real(x) if x.is_finite() => Some(format!("{x:?}")),
        Value::Text(bytes) => {
            let text = std::str::from_utf8(bytes).ok()?;
            Some(format!("'{}'", text.replace('\'', "''")))
        }
        _ => None,
    }
}

/// The test case of a write: every check's count must hold on the working copy.
fn test_case(checks: &[Check]) -> String {
    let mut code = String::from(
        "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    \
         # Written by merit's generator: the table state the reference change leaves.\n    \
         checks = [\n",
    );
    for check in checks {
        // A JSON string literal is a valid Python string literal.
        let query = serde_json::to_string(&check.query).unwrap_or_default();
        let what = serde_json::to_string(check.what).unwrap_or_default();
        code.push_str(&format!("        ({query}, {}, {what}),\n", check.count));
    }
    code.push_str(
        "    ]\n    for query, expected, message in checks:\n        \
         rows, error, timeout = execute_queries(query, db_name, conn)\n        \
         assert not error and not timeout, \"a check query failed\"\n        \
         assert rows[0][0] == expected, message\n    return True\n",
    );
    code
}

/// The outline shown to the request writer for a write.
fn outline(sql: &str, table: &str, clause: &str) -> String {
    let action = if sql.starts_with("DELETE") {
        "removes rows".to_string()
    } else {
        let set = sql
            .split(" SET ")
            .nth(1)
            .and_then(|rest| rest.split(" WHERE ").next())
            .unwrap_or("");
        format!("changes a value: sets {set}")
    };
    format!(
        "- changes data: this statement {action} (it returns nothing)\n- in table: {table}\n\
         - only rows where: {clause}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_table_filter_is_found_and_joins_or_groups_are_not() {
        assert_eq!(
            single_table_filter("SELECT name FROM singer WHERE age > 30"),
            Some(("singer".to_string(), "age > 30".to_string()))
        );
        for sql in [
            "SELECT name FROM singer",
            "SELECT s.name FROM singer AS s WHERE s.age > 30",
            "SELECT name FROM singer JOIN concert ON 1 = 1 WHERE age > 30",
            "SELECT country, COUNT(*) FROM singer WHERE age > 30 GROUP BY country",
            "SELECT name FROM singer WHERE age > (SELECT AVG(age) FROM singer)",
        ] {
            assert_eq!(single_table_filter(sql), None, "{sql}");
        }
    }

    #[test]
    fn an_update_sets_a_categorical_column_to_a_value_the_data_repeats() {
        let spider =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/spider");
        let schema = merit_data::load_tables(spider.join("tables.json"))
            .unwrap()
            .into_iter()
            .find(|s| s.db_id == "world_1")
            .unwrap();
        let source = merit_data::DatabaseDir::new(spider.join("database"))
            .locate("world_1")
            .unwrap();
        let limits = ExecLimits::with_timeout(Duration::from_secs(10));
        let clause = "IndepYear > 1945";
        let (sql, _, _) = update_candidate(&source, &schema, "country", clause, &limits)
            .unwrap()
            .expect("country has a categorical column to update");
        // Not `Name` (unique per country), which the first column in file order would give.
        let set = sql
            .split(" SET ")
            .nth(1)
            .unwrap()
            .split(" WHERE ")
            .next()
            .unwrap();
        let (column, value) = set.split_once(" = ").unwrap();
        assert_ne!(column, "Name", "{sql}");
        let database = SqliteDatabase::open(&source).unwrap();
        let repeats = database
            .query(
                &format!(
                    "SELECT COUNT(*) FROM country WHERE NOT ({clause}) AND {column} = {value}"
                ),
                &limits,
            )
            .unwrap();
        assert!(
            matches!(repeats.rows[0][0], Value::Integer(n) if n >= 2),
            "{sql}: {:?}",
            repeats.rows
        );
    }

    #[test]
    fn literals_quote_text_and_refuse_what_cannot_be_written() {
        assert_eq!(sql_literal(&Value::Integer(3)).as_deref(), Some("3"));
        assert_eq!(sql_literal(&Value::Real(2.5)).as_deref(), Some("2.5"));
        assert_eq!(
            sql_literal(&Value::Text(b"O'Neil".to_vec())).as_deref(),
            Some("'O''Neil'")
        );
        assert_eq!(sql_literal(&Value::Null), None);
        assert_eq!(sql_literal(&Value::Real(f64::NAN)), None);
    }
}
