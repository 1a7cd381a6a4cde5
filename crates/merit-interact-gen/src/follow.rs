//! Follow-up requests (phase 2) for generated Query targets.
//!
//! BIRD-Interact tasks may continue after the first answer is accepted: the user asks a
//! second, related question whose SQL builds on the first. merit derives the follow-up from the
//! target's SQL with a fixed operation and words its request with a fixed template (ours), so
//! its ground truth is exact and costs no model call:
//!
//! | operation | applies when the first result | follow-up SQL | request |
//! |---|---|---|---|
//! | count | has several rows, no aggregate at the top, and no repeated row unless ordered | `SELECT COUNT(*) FROM (<first>)` | how many results that is |
//! | first three | is ordered, unlimited, and has more than three rows | `<first> LIMIT 3` | only the first three |
//! | distinct count | has several rows, one column | `SELECT COUNT(DISTINCT c) FROM (<first>)` | how many different values |
//!
//! Phase 1 compares an unordered result as a set of rows (`judge::results_match`), so an
//! answer that lists each of the first result's rows once passes it even where the gold
//! repeats rows; "how many results is that" would then have two answers, and the count is
//! not offered for such a result.
//!
//! A follow-up is kept only when its SQL runs, returns a row, and its result differs from the
//! first one (otherwise phase 2 would be solved by resubmitting). Which applicable operation
//! is used is decided by the target id, so a set mixes them and a rerun picks the same.
//! The templates name nothing from the schema, so the agent must understand its own first
//! answer to write the second.

use super::perturb::Target;
use super::sqlast;
use merit_interact_env::judge::{self, Cell};
use merit_sql::{Database, ExecLimits, SqliteDatabase, Value};
use serde::{Deserialize, Serialize};
use sqlparser::ast::{SelectItem, SetExpr};

/// A follow-up: the request the user sends after phase 1 passes, and its ground truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FollowUpSpec {
    /// The follow-up request.
    pub query: String,
    /// Its SQL.
    pub sql: String,
    /// Which operation made it (`count`, `first_three`, `distinct_count`).
    pub operation: String,
}

/// The follow-up of a Query target, when one of the operations applies and passes the checks
/// (see the module docs). `database` is the target's database.
pub fn follow_up_for(
    target: &Target,
    database: &SqliteDatabase,
    limits: &ExecLimits,
) -> Option<FollowUpSpec> {
    if target.write.is_some() {
        return None;
    }
    let query = sqlast::parse_query(&target.sql)?;
    let first = database.query(&target.sql, limits).ok()?;
    if first.truncated {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let projection = select.projection.as_slice();
    let aggregated = projection.iter().any(|item| {
        let text = item.to_string().to_ascii_uppercase();
        ["COUNT(", "SUM(", "AVG(", "MIN(", "MAX("]
            .iter()
            .any(|f| text.contains(f))
    });
    let grouped = !matches!(
        &select.group_by,
        sqlparser::ast::GroupByExpr::Expressions(exprs, _) if exprs.is_empty()
    );
    let rows = first.rows.len();
    let cells: Vec<Vec<Cell>> = first
        .rows
        .iter()
        .map(|row| row.iter().cloned().map(Cell::from).collect())
        .collect();
    // Multiplicity is judged only where the rows are compared in order (see the module docs).
    let size_is_judged = query.order_by.is_some() || !judge::has_repeated_rows(&cells);
    let body = target.sql.trim().trim_end_matches(';');
    let mut candidates: Vec<(&str, String, &str)> = Vec::new();
    if rows > 1 && (!aggregated || grouped) && size_is_judged {
        candidates.push((
            "count",
            format!("SELECT COUNT(*) FROM ({body})"),
            "Thanks. How many results is that altogether?",
        ));
    }
    if rows > 3 && query.order_by.is_some() && query.limit_clause.is_none() {
        candidates.push((
            "first_three",
            format!("{body} LIMIT 3"),
            "Thanks. Now give me only the first three of those, in the same order.",
        ));
    }
    if rows > 1 && projection.len() == 1 && !matches!(projection[0], SelectItem::Wildcard(_)) {
        let column = first.columns.first()?;
        candidates.push((
            "distinct_count",
            format!(
                "SELECT COUNT(DISTINCT {}) FROM ({body})",
                merit_data::quote_identifier(column)
            ),
            "Thanks. How many different values are there in that list?",
        ));
    }
    if candidates.is_empty() {
        return None;
    }
    let start = usize::from_str_radix(&target.target_id[..4.min(target.target_id.len())], 16)
        .unwrap_or(0)
        % candidates.len();
    candidates
        .iter()
        .cycle()
        .skip(start)
        .take(candidates.len())
        .find_map(|(operation, sql, request)| {
            let second = database.query(sql, limits).ok()?;
            // The judge runs the gold after the reference rewrites (DISTINCT dropped as a
            // token, ROUND unwrapped): a follow-up whose rewritten gold gives other rows
            // (`COUNT(*)` over a `SELECT DISTINCT` counts the duplicates) would be judged
            // against an answer other than the one checked here.
            let judged = database
                .query(&judge::reference_rewrites(sql), limits)
                .ok()?;
            if judged.rows != second.rows {
                return None;
            }
            let differs = second.rows != first.rows;
            let usable = !second.rows.is_empty()
                && second
                    .rows
                    .iter()
                    .all(|row| row.iter().all(|v| !matches!(v, Value::Null)));
            (differs && usable).then(|| FollowUpSpec {
                query: request.to_string(),
                sql: sql.clone(),
                operation: operation.to_string(),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(sql: &str, target_id: &str) -> Target {
        Target {
            target_id: target_id.into(),
            db_id: "concert_singer".into(),
            seed_id: "test".into(),
            seed_sql: sql.into(),
            sql: sql.into(),
            perturbations: Vec::new(),
            write: None,
            follow_up: None,
        }
    }

    /// Spider's `concert_singer` database (read from `../shared`) and the agent's limits.
    fn concert_singer() -> (SqliteDatabase, ExecLimits) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/spider/database/concert_singer/concert_singer.sqlite");
        (SqliteDatabase::open(&path).unwrap(), ExecLimits::AGENT)
    }

    #[test]
    fn a_follow_up_whose_gold_the_judge_would_rewrite_is_not_offered() {
        let (database, limits) = concert_singer();
        // Singers' countries: Netherlands, United States and four times France. Whichever
        // operation is tried first, the count over `SELECT DISTINCT` (3 here, 6 once the judge
        // drops DISTINCT) is never the follow-up; the distinct count survives the rewrite.
        for id in ["0000aaaa", "0001aaaa", "0002aaaa"] {
            let follow = follow_up_for(
                &target("SELECT DISTINCT country FROM singer", id),
                &database,
                &limits,
            )
            .unwrap();
            assert_eq!(follow.operation, "distinct_count", "{follow:?}");
        }
        // Without DISTINCT the plain count is offered when it comes first and no row repeats.
        let plain = follow_up_for(
            &target("SELECT name FROM singer", "0000aaaa"),
            &database,
            &limits,
        )
        .unwrap();
        assert_eq!(plain.operation, "count", "{plain:?}");
    }

    #[test]
    fn a_count_is_offered_only_where_phase_1_judges_how_many_rows_there_are() {
        let (database, limits) = concert_singer();
        // France four times: `SELECT DISTINCT country` passes phase 1 against this gold (rows
        // are compared as sets), so "how many results" could be 3 or 6; the count is skipped
        // and the distinct count, the only other operation that applies, is asked instead.
        let repeated = follow_up_for(
            &target("SELECT country FROM singer", "0000aaaa"),
            &database,
            &limits,
        )
        .unwrap();
        assert_eq!(repeated.operation, "distinct_count", "{repeated:?}");
        // Ordered, the rows are compared one by one, so the count is well defined again.
        let ordered = follow_up_for(
            &target("SELECT country FROM singer ORDER BY country", "0000aaaa"),
            &database,
            &limits,
        )
        .unwrap();
        assert_eq!(ordered.operation, "count", "{ordered:?}");
    }
}
