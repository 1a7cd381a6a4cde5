//! The deterministic failure classifier (paper 000, §3.2 "Initialization and failure diagnosis").
//!
//! The classifier sees exactly what the repair loop may see: the oracle [`Status`] and the
//! DBMS's error text. It never looks at the SQL (that would make it a semantic judge it is not
//! meant to be) nor at the gold. Rules are tried in order and the first match decides:
//!
//! 1. status rules: a timeout is [`FailureType::Execution`], an executable-but-wrong query is
//!    [`FailureType::ResultMismatch`], an execution error without text is
//!    [`FailureType::Unknown`];
//! 2. text rules, grouped as the paper orders them: schema references, parse failures,
//!    aggregate misuse, type and value mismatches, execution failures (timeouts included);
//! 3. any other non-empty text is [`FailureType::Unknown`].
//!
//! Text rules match the *primary message* only (see [`primary_message`]): PostgreSQL's `LINE`,
//! `DETAIL` and `HINT` lines and SQLite's ` in <sql> at offset N` suffix echo the query, and a
//! rule must never fire on words that merely occur in the user's SQL.
//!
//! Within a group the patterns are disjoint, so the order only matters across groups; the
//! test suite checks every rule against a real message from SQLite (through
//! `merit_sql::SqliteDatabase` on a Spider database) or PostgreSQL 15 (captured from a live
//! server, `tests/data/postgres15_errors.jsonl`).
//!
//! The rules, in order ([`rule_table_markdown`] renders this table from [`rules`]; a test
//! keeps the two identical):
//!
//! | # | rule | source | pattern (primary message, lowercased) | label |
//! |---:|---|---|---|---|
//! | 1 | `status-timeout` | status | status is `timeout` | Execution |
//! | 2 | `status-denotation-mismatch` | status | status is `denotation_mismatch` (executed, wrong result) | Result Mismatch |
//! | 3 | `status-error-without-text` | status | status is `execution_error` and the text is empty | Unknown |
//! | 4 | `sqlite-no-such-column` | SQLite | starts with `no such column:` | Schema Linking |
//! | 5 | `sqlite-no-such-table` | SQLite | starts with `no such table:` | Schema Linking |
//! | 6 | `sqlite-ambiguous-column` | SQLite | starts with `ambiguous column name:` | Schema Linking |
//! | 7 | `sqlite-no-such-index` | SQLite | starts with `no such index:` | Schema Linking |
//! | 8 | `sqlite-join-using-column` | SQLite | starts with `cannot join using column` | Schema Linking |
//! | 9 | `sqlite-result-column-unmatched` | SQLite | contains `term does not match any column in the result set` | Schema Linking |
//! | 10 | `pg-column-does-not-exist` | PostgreSQL | `column …` followed by `does not exist` (also the USING-clause form) | Schema Linking |
//! | 11 | `pg-relation-does-not-exist` | PostgreSQL | `relation "…" does not exist` | Schema Linking |
//! | 12 | `pg-missing-from-entry` | PostgreSQL | starts with `missing from-clause entry for table` | Schema Linking |
//! | 13 | `pg-ambiguous-column` | PostgreSQL | `column reference "…" is ambiguous` | Schema Linking |
//! | 14 | `pg-table-specified-twice` | PostgreSQL | `table name "…" specified more than once` | Schema Linking |
//! | 15 | `pg-invalid-from-reference` | PostgreSQL | starts with `invalid reference to from-clause entry` | Schema Linking |
//! | 16 | `sqlite-near-syntax-error` | SQLite | `near "…": syntax error` | Syntax |
//! | 17 | `sqlite-incomplete-input` | SQLite | `incomplete input` | Syntax |
//! | 18 | `sqlite-unrecognized-token` | SQLite | starts with `unrecognized token:` | Syntax |
//! | 19 | `sqlite-compound-arity` | SQLite | contains `do not have the same number of result columns` | Syntax |
//! | 20 | `sqlite-order-by-out-of-range` | SQLite | contains `order by term out of range` | Syntax |
//! | 21 | `sqlite-no-such-function` | SQLite | starts with `no such function:` | Syntax |
//! | 22 | `sqlite-function-arity` | SQLite | `wrong number of arguments to function F()`, F not an aggregate | Syntax |
//! | 23 | `pg-syntax-error` | PostgreSQL | starts with `syntax error at` (`at or near "…"`, `at end of input`) | Syntax |
//! | 24 | `pg-unterminated-or-empty-token` | PostgreSQL | starts with `unterminated quoted` or `zero-length delimited identifier` | Syntax |
//! | 25 | `pg-set-operation-arity` | PostgreSQL | `each UNION\|INTERSECT\|EXCEPT query must have the same number of columns` | Syntax |
//! | 26 | `pg-order-by-position` | PostgreSQL | `ORDER BY position N is not in select list` | Syntax |
//! | 27 | `pg-distinct-order-by` | PostgreSQL | starts with `for select distinct, order by expressions must appear` | Syntax |
//! | 28 | `pg-subquery-alias` | PostgreSQL | `subquery in FROM must have an alias` | Syntax |
//! | 29 | `pg-limit-comma` | PostgreSQL | `LIMIT #,# syntax is not supported` | Syntax |
//! | 30 | `pg-function-signature` | PostgreSQL | `function F(types) does not exist`, F not an aggregate | Syntax |
//! | 31 | `merit-multiple-statements` | merit | `You can only execute one statement at a time.` | Syntax |
//! | 32 | `merit-no-statement` | merit | `the candidate contains no SQL statement` (oracle) | Syntax |
//! | 33 | `sqlite-misuse-of-aggregate` | SQLite | starts with `misuse of aggregate` (`: f()` and `function f()` forms) | Aggregation |
//! | 34 | `sqlite-misuse-of-window` | SQLite | starts with `misuse of window function` | Aggregation |
//! | 35 | `aggregate-not-allowed` | SQLite, PostgreSQL | starts with `aggregate functions are not allowed in` | Aggregation |
//! | 36 | `sqlite-having-without-grouping` | SQLite | `HAVING clause on a non-aggregate query` or `a GROUP BY clause is required before HAVING` | Aggregation |
//! | 37 | `sqlite-group-by-out-of-range` | SQLite | contains `group by term out of range` | Aggregation |
//! | 38 | `sqlite-aggregate-arity` | SQLite | `wrong number of arguments to function F()`, F an aggregate | Aggregation |
//! | 39 | `pg-must-appear-in-group-by` | PostgreSQL | contains `must appear in the group by clause or be used in an aggregate function` | Aggregation |
//! | 40 | `pg-nested-aggregate` | PostgreSQL | `aggregate function calls cannot be nested` | Aggregation |
//! | 41 | `pg-window-not-allowed` | PostgreSQL | starts with `window functions are not allowed in` | Aggregation |
//! | 42 | `pg-group-by-position` | PostgreSQL | `GROUP BY position N is not in select list` | Aggregation |
//! | 43 | `pg-aggregate-signature` | PostgreSQL | `function F(types) does not exist`, F an aggregate | Aggregation |
//! | 44 | `sqlite-datatype-mismatch` | SQLite | `datatype mismatch` | Filter/Value |
//! | 45 | `sqlite-row-value-misused` | SQLite | `row value misused` | Filter/Value |
//! | 46 | `sqlite-subselect-width` | SQLite | `sub-select returns N columns - expected M` | Filter/Value |
//! | 47 | `sqlite-escape-character` | SQLite | `ESCAPE expression must be a single character` | Filter/Value |
//! | 48 | `sqlite-malformed-json` | SQLite | `malformed JSON` | Filter/Value |
//! | 49 | `pg-invalid-input-syntax` | PostgreSQL | starts with `invalid input syntax for type` | Filter/Value |
//! | 50 | `pg-operator-mismatch` | PostgreSQL | starts with `operator does not exist:` or `operator is not unique:` | Filter/Value |
//! | 51 | `pg-argument-type` | PostgreSQL | `argument of … must be type …` | Filter/Value |
//! | 52 | `pg-datetime-out-of-range` | PostgreSQL | starts with `date/time field value out of range` | Filter/Value |
//! | 53 | `pg-subquery-width` | PostgreSQL | `subquery has too many columns` / `too few columns` | Filter/Value |
//! | 54 | `pg-types-cannot-be-matched` | PostgreSQL | `UNION\|COALESCE\|CASE… types A and B cannot be matched` | Filter/Value |
//! | 55 | `merit-timeout` | merit | starts with `query interrupted after exceeding` or `query exceeded the` (time limits) | Execution |
//! | 56 | `pg-statement-canceled` | PostgreSQL | starts with `canceling statement due to` (statement timeout, user request) | Execution |
//! | 57 | `merit-denied` | merit | starts with `denied:` (read-only guard) | Execution |
//! | 58 | `pg-read-only-transaction` | PostgreSQL | `cannot execute … in a read-only transaction` | Execution |
//! | 59 | `merit-row-cap` | merit | starts with `query returned more than` (row cap) | Execution |
//! | 60 | `merit-cannot-open` | merit | starts with `cannot open database` | Execution |
//! | 61 | `numeric-overflow` | SQLite, PostgreSQL | `integer overflow` (SQLite) or `… out of range` for integer types (PostgreSQL) | Execution |
//! | 62 | `sqlite-too-big` | SQLite | `string or blob too big` | Execution |
//! | 63 | `pg-division-by-zero` | PostgreSQL | `division by zero` | Execution |
//! | 64 | `pg-scalar-subquery-rows` | PostgreSQL | `more than one row returned by a subquery used as an expression` | Execution |
//! | 65 | `fallback-unknown` | any | any other non-empty text | Unknown |

use crate::failure::FailureType;
use merit_core::{Feedback, Status};
use serde::Serialize;

/// The engine whose error wording a rule recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleSource {
    /// Decided by the oracle status alone.
    Status,
    /// SQLite's own messages (as of 3.40–3.54).
    Sqlite,
    /// PostgreSQL 15's messages.
    Postgres,
    /// Wording both engines use.
    SqliteAndPostgres,
    /// Messages written by merit itself (`merit-sql` guards, the oracle).
    Merit,
}

impl RuleSource {
    fn name(self) -> &'static str {
        match self {
            RuleSource::Status => "status",
            RuleSource::Sqlite => "SQLite",
            RuleSource::Postgres => "PostgreSQL",
            RuleSource::SqliteAndPostgres => "SQLite, PostgreSQL",
            RuleSource::Merit => "merit",
        }
    }
}

/// One classifier rule over the lowercased primary message.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    /// Stable identifier, reported with every classification.
    pub id: &'static str,
    /// The label the rule assigns.
    pub failure_type: FailureType,
    /// Whose wording the pattern targets.
    pub source: RuleSource,
    /// The pattern, in words, for the documentation table.
    pub pattern: &'static str,
    matcher: fn(&str) -> bool,
}

impl Rule {
    /// `true` when the rule fires on an already normalised primary message.
    pub fn matches(&self, primary: &str) -> bool {
        (self.matcher)(primary)
    }
}

pub use merit_core::failure::Classification;

/// Rule id for a timeout status.
pub const RULE_TIMEOUT_STATUS: &str = "status-timeout";
/// Rule id for an executable query with the wrong denotation.
pub const RULE_MISMATCH_STATUS: &str = "status-denotation-mismatch";
/// Rule id for an execution error that came without any text.
pub const RULE_NO_TEXT: &str = "status-error-without-text";
/// Rule id for a non-empty message no text rule recognises.
pub const RULE_FALLBACK: &str = "fallback-unknown";

/// Aggregate functions of SQLite and PostgreSQL that models commonly use. A wrong-arity or
/// wrong-signature call of one of these is aggregate misuse; of any other function, a
/// malformed call.
const AGGREGATE_FUNCTIONS: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "total",
    "group_concat",
    "string_agg",
    "array_agg",
];

/// The name in `... function NAME(` of a function-call error, lowercased by the caller.
fn called_function(primary: &str) -> Option<&str> {
    let start = primary.find("function ")? + "function ".len();
    let rest = &primary[start..];
    let end = rest.find('(')?;
    Some(rest[..end].trim())
}

fn is_aggregate_call(primary: &str) -> bool {
    called_function(primary).is_some_and(|name| AGGREGATE_FUNCTIONS.contains(&name))
}

fn sqlite_wrong_arity(primary: &str) -> bool {
    primary.starts_with("wrong number of arguments to function ")
}

fn postgres_no_such_signature(primary: &str) -> bool {
    primary.starts_with("function ") && primary.ends_with(" does not exist")
}

/// The ordered text rules. Status rules come first and are not in this list.
static RULES: &[Rule] = &[
    // ── Schema references ────────────────────────────────────────────────────────────────
    Rule {
        id: "sqlite-no-such-column",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Sqlite,
        pattern: "starts with `no such column:`",
        matcher: |m| m.starts_with("no such column:"),
    },
    Rule {
        id: "sqlite-no-such-table",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Sqlite,
        pattern: "starts with `no such table:`",
        matcher: |m| m.starts_with("no such table:"),
    },
    Rule {
        id: "sqlite-ambiguous-column",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Sqlite,
        pattern: "starts with `ambiguous column name:`",
        matcher: |m| m.starts_with("ambiguous column name:"),
    },
    Rule {
        id: "sqlite-no-such-index",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Sqlite,
        pattern: "starts with `no such index:`",
        matcher: |m| m.starts_with("no such index:"),
    },
    Rule {
        id: "sqlite-join-using-column",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Sqlite,
        pattern: "starts with `cannot join using column`",
        matcher: |m| m.starts_with("cannot join using column"),
    },
    Rule {
        id: "sqlite-result-column-unmatched",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Sqlite,
        pattern: "contains `term does not match any column in the result set`",
        matcher: |m| m.contains("term does not match any column in the result set"),
    },
    Rule {
        id: "pg-column-does-not-exist",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Postgres,
        pattern: "`column …` followed by `does not exist` (also the USING-clause form)",
        matcher: |m| m.starts_with("column ") && m.contains(" does not exist"),
    },
    Rule {
        id: "pg-relation-does-not-exist",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Postgres,
        pattern: "`relation \"…\" does not exist`",
        matcher: |m| m.starts_with("relation ") && m.ends_with(" does not exist"),
    },
    Rule {
        id: "pg-missing-from-entry",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Postgres,
        pattern: "starts with `missing from-clause entry for table`",
        matcher: |m| m.starts_with("missing from-clause entry for table"),
    },
    Rule {
        id: "pg-ambiguous-column",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Postgres,
        pattern: "`column reference \"…\" is ambiguous`",
        matcher: |m| m.starts_with("column reference ") && m.ends_with(" is ambiguous"),
    },
    Rule {
        id: "pg-table-specified-twice",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Postgres,
        pattern: "`table name \"…\" specified more than once`",
        matcher: |m| m.starts_with("table name ") && m.ends_with("specified more than once"),
    },
    Rule {
        id: "pg-invalid-from-reference",
        failure_type: FailureType::SchemaLinking,
        source: RuleSource::Postgres,
        pattern: "starts with `invalid reference to from-clause entry`",
        matcher: |m| m.starts_with("invalid reference to from-clause entry"),
    },
    // ── Parse failures and malformed SQL ─────────────────────────────────────────────────
    Rule {
        id: "sqlite-near-syntax-error",
        failure_type: FailureType::Syntax,
        source: RuleSource::Sqlite,
        pattern: "`near \"…\": syntax error`",
        matcher: |m| m.starts_with("near \"") && m.contains(": syntax error"),
    },
    Rule {
        id: "sqlite-incomplete-input",
        failure_type: FailureType::Syntax,
        source: RuleSource::Sqlite,
        pattern: "`incomplete input`",
        matcher: |m| m.starts_with("incomplete input"),
    },
    Rule {
        id: "sqlite-unrecognized-token",
        failure_type: FailureType::Syntax,
        source: RuleSource::Sqlite,
        pattern: "starts with `unrecognized token:`",
        matcher: |m| m.starts_with("unrecognized token:"),
    },
    Rule {
        id: "sqlite-compound-arity",
        failure_type: FailureType::Syntax,
        source: RuleSource::Sqlite,
        pattern: "contains `do not have the same number of result columns`",
        matcher: |m| m.contains("do not have the same number of result columns"),
    },
    Rule {
        id: "sqlite-order-by-out-of-range",
        failure_type: FailureType::Syntax,
        source: RuleSource::Sqlite,
        pattern: "contains `order by term out of range`",
        matcher: |m| m.contains("order by term out of range"),
    },
    Rule {
        id: "sqlite-no-such-function",
        failure_type: FailureType::Syntax,
        source: RuleSource::Sqlite,
        pattern: "starts with `no such function:`",
        matcher: |m| m.starts_with("no such function:"),
    },
    Rule {
        id: "sqlite-function-arity",
        failure_type: FailureType::Syntax,
        source: RuleSource::Sqlite,
        pattern: "`wrong number of arguments to function F()`, F not an aggregate",
        matcher: |m| sqlite_wrong_arity(m) && !is_aggregate_call(m),
    },
    Rule {
        id: "pg-syntax-error",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "starts with `syntax error at` (`at or near \"…\"`, `at end of input`)",
        matcher: |m| m.starts_with("syntax error at"),
    },
    Rule {
        id: "pg-unterminated-or-empty-token",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "starts with `unterminated quoted` or `zero-length delimited identifier`",
        matcher: |m| {
            m.starts_with("unterminated quoted") || m.starts_with("zero-length delimited identifier")
        },
    },
    Rule {
        id: "pg-set-operation-arity",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "`each UNION|INTERSECT|EXCEPT query must have the same number of columns`",
        matcher: |m| m.starts_with("each ") && m.ends_with("query must have the same number of columns"),
    },
    Rule {
        id: "pg-order-by-position",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "`ORDER BY position N is not in select list`",
        matcher: |m| m.starts_with("order by position ") && m.ends_with("is not in select list"),
    },
    Rule {
        id: "pg-distinct-order-by",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "starts with `for select distinct, order by expressions must appear`",
        matcher: |m| m.starts_with("for select distinct, order by expressions must appear"),
    },
    Rule {
        id: "pg-subquery-alias",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "`subquery in FROM must have an alias`",
        matcher: |m| m.starts_with("subquery in from must have an alias"),
    },
    Rule {
        id: "pg-limit-comma",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "`LIMIT #,# syntax is not supported`",
        matcher: |m| m.starts_with("limit #,# syntax is not supported"),
    },
    Rule {
        id: "pg-function-signature",
        failure_type: FailureType::Syntax,
        source: RuleSource::Postgres,
        pattern: "`function F(types) does not exist`, F not an aggregate",
        matcher: |m| postgres_no_such_signature(m) && !is_aggregate_call(m),
    },
    Rule {
        id: "merit-multiple-statements",
        failure_type: FailureType::Syntax,
        source: RuleSource::Merit,
        pattern: "`You can only execute one statement at a time.`",
        matcher: |m| m.starts_with("you can only execute one statement at a time"),
    },
    Rule {
        id: "merit-no-statement",
        failure_type: FailureType::Syntax,
        source: RuleSource::Merit,
        pattern: "`the candidate contains no SQL statement` (oracle)",
        matcher: |m| m.starts_with("the candidate contains no sql statement"),
    },
    // ── Aggregate misuse ─────────────────────────────────────────────────────────────────
    Rule {
        id: "sqlite-misuse-of-aggregate",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Sqlite,
        pattern: "starts with `misuse of aggregate` (`: f()` and `function f()` forms)",
        matcher: |m| m.starts_with("misuse of aggregate"),
    },
    Rule {
        id: "sqlite-misuse-of-window",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Sqlite,
        pattern: "starts with `misuse of window function`",
        matcher: |m| m.starts_with("misuse of window function"),
    },
    Rule {
        id: "aggregate-not-allowed",
        failure_type: FailureType::Aggregation,
        source: RuleSource::SqliteAndPostgres,
        pattern: "starts with `aggregate functions are not allowed in`",
        matcher: |m| m.starts_with("aggregate functions are not allowed in"),
    },
    Rule {
        id: "sqlite-having-without-grouping",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Sqlite,
        pattern: "`HAVING clause on a non-aggregate query` or `a GROUP BY clause is required before HAVING`",
        matcher: |m| {
            m.starts_with("having clause on a non-aggregate query")
                || m.starts_with("a group by clause is required before having")
        },
    },
    Rule {
        id: "sqlite-group-by-out-of-range",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Sqlite,
        pattern: "contains `group by term out of range`",
        matcher: |m| m.contains("group by term out of range"),
    },
    Rule {
        id: "sqlite-aggregate-arity",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Sqlite,
        pattern: "`wrong number of arguments to function F()`, F an aggregate",
        matcher: |m| sqlite_wrong_arity(m) && is_aggregate_call(m),
    },
    Rule {
        id: "pg-must-appear-in-group-by",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Postgres,
        pattern: "contains `must appear in the group by clause or be used in an aggregate function`",
        matcher: |m| m.contains("must appear in the group by clause or be used in an aggregate function"),
    },
    Rule {
        id: "pg-nested-aggregate",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Postgres,
        pattern: "`aggregate function calls cannot be nested`",
        matcher: |m| m.starts_with("aggregate function calls cannot be nested"),
    },
    Rule {
        id: "pg-window-not-allowed",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Postgres,
        pattern: "starts with `window functions are not allowed in`",
        matcher: |m| m.starts_with("window functions are not allowed in"),
    },
    Rule {
        id: "pg-group-by-position",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Postgres,
        pattern: "`GROUP BY position N is not in select list`",
        matcher: |m| m.starts_with("group by position ") && m.ends_with("is not in select list"),
    },
    Rule {
        id: "pg-aggregate-signature",
        failure_type: FailureType::Aggregation,
        source: RuleSource::Postgres,
        pattern: "`function F(types) does not exist`, F an aggregate",
        matcher: |m| postgres_no_such_signature(m) && is_aggregate_call(m),
    },
    // ── Type and value mismatches ────────────────────────────────────────────────────────
    Rule {
        id: "sqlite-datatype-mismatch",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Sqlite,
        pattern: "`datatype mismatch`",
        matcher: |m| m.starts_with("datatype mismatch"),
    },
    Rule {
        id: "sqlite-row-value-misused",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Sqlite,
        pattern: "`row value misused`",
        matcher: |m| m.starts_with("row value misused"),
    },
    Rule {
        id: "sqlite-subselect-width",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Sqlite,
        pattern: "`sub-select returns N columns - expected M`",
        matcher: |m| m.starts_with("sub-select returns "),
    },
    Rule {
        id: "sqlite-escape-character",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Sqlite,
        pattern: "`ESCAPE expression must be a single character`",
        matcher: |m| m.starts_with("escape expression must be a single character"),
    },
    Rule {
        id: "sqlite-malformed-json",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Sqlite,
        pattern: "`malformed JSON`",
        matcher: |m| m.starts_with("malformed json"),
    },
    Rule {
        id: "pg-invalid-input-syntax",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Postgres,
        pattern: "starts with `invalid input syntax for type`",
        matcher: |m| m.starts_with("invalid input syntax for type"),
    },
    Rule {
        id: "pg-operator-mismatch",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Postgres,
        pattern: "starts with `operator does not exist:` or `operator is not unique:`",
        matcher: |m| m.starts_with("operator does not exist:") || m.starts_with("operator is not unique:"),
    },
    Rule {
        id: "pg-argument-type",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Postgres,
        pattern: "`argument of … must be type …`",
        matcher: |m| m.starts_with("argument of ") && m.contains(" must be type "),
    },
    Rule {
        id: "pg-datetime-out-of-range",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Postgres,
        pattern: "starts with `date/time field value out of range`",
        matcher: |m| m.starts_with("date/time field value out of range"),
    },
    Rule {
        id: "pg-subquery-width",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Postgres,
        pattern: "`subquery has too many columns` / `too few columns`",
        matcher: |m| m.starts_with("subquery has too many columns") || m.starts_with("subquery has too few columns"),
    },
    Rule {
        id: "pg-types-cannot-be-matched",
        failure_type: FailureType::FilterValue,
        source: RuleSource::Postgres,
        pattern: "`UNION|COALESCE|CASE… types A and B cannot be matched`",
        matcher: |m| m.contains(" types ") && m.ends_with(" cannot be matched"),
    },
    // ── Execution failures ───────────────────────────────────────────────────────────────
    Rule {
        id: "merit-timeout",
        failure_type: FailureType::Execution,
        source: RuleSource::Merit,
        pattern: "starts with `query interrupted after exceeding` or `query exceeded the` (time limits)",
        matcher: |m| m.starts_with("query interrupted after exceeding") || m.starts_with("query exceeded the"),
    },
    Rule {
        id: "pg-statement-canceled",
        failure_type: FailureType::Execution,
        source: RuleSource::Postgres,
        pattern: "starts with `canceling statement due to` (statement timeout, user request)",
        matcher: |m| m.starts_with("canceling statement due to"),
    },
    Rule {
        id: "merit-denied",
        failure_type: FailureType::Execution,
        source: RuleSource::Merit,
        pattern: "starts with `denied:` (read-only guard)",
        matcher: |m| m.starts_with("denied:"),
    },
    Rule {
        id: "pg-read-only-transaction",
        failure_type: FailureType::Execution,
        source: RuleSource::Postgres,
        pattern: "`cannot execute … in a read-only transaction`",
        matcher: |m| m.starts_with("cannot execute ") && m.ends_with("in a read-only transaction"),
    },
    Rule {
        id: "merit-row-cap",
        failure_type: FailureType::Execution,
        source: RuleSource::Merit,
        pattern: "starts with `query returned more than` (row cap)",
        matcher: |m| m.starts_with("query returned more than"),
    },
    Rule {
        id: "merit-cannot-open",
        failure_type: FailureType::Execution,
        source: RuleSource::Merit,
        pattern: "starts with `cannot open database`",
        matcher: |m| m.starts_with("cannot open database"),
    },
    Rule {
        id: "numeric-overflow",
        failure_type: FailureType::Execution,
        source: RuleSource::SqliteAndPostgres,
        pattern: "`integer overflow` (SQLite) or `… out of range` for integer types (PostgreSQL)",
        matcher: |m| {
            m.starts_with("integer overflow")
                || m == "integer out of range"
                || m == "bigint out of range"
                || m == "smallint out of range"
        },
    },
    Rule {
        id: "sqlite-too-big",
        failure_type: FailureType::Execution,
        source: RuleSource::Sqlite,
        pattern: "`string or blob too big`",
        matcher: |m| m.starts_with("string or blob too big"),
    },
    Rule {
        id: "pg-division-by-zero",
        failure_type: FailureType::Execution,
        source: RuleSource::Postgres,
        pattern: "`division by zero`",
        matcher: |m| m.starts_with("division by zero"),
    },
    Rule {
        id: "pg-scalar-subquery-rows",
        failure_type: FailureType::Execution,
        source: RuleSource::Postgres,
        pattern: "`more than one row returned by a subquery used as an expression`",
        matcher: |m| m.starts_with("more than one row returned by a subquery"),
    },
];

/// The ordered text rules, for documentation and tests.
pub fn rules() -> &'static [Rule] {
    RULES
}

/// Prefixes that drivers and tools put before a DBMS message; they carry no information.
const NOISE_PREFIXES: &[&str] = &["db error:", "error:", "fatal:", "sqlite error:"];

/// The part of an error text the rules look at, lowercased.
///
/// Takes the first non-empty line (PostgreSQL puts the statement echo, `DETAIL` and `HINT`
/// on later lines), removes driver prefixes such as `ERROR:`, and cuts SQLite's
/// ` in <sql> at offset N` suffix (SQLite ≥ 3.44 appends the statement to its message).
pub fn primary_message(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut message = line.to_lowercase();
    loop {
        let trimmed = message.trim_start();
        let Some(prefix) = NOISE_PREFIXES.iter().find(|p| trimmed.starts_with(**p)) else {
            message = trimmed.to_string();
            break;
        };
        message = trimmed[prefix.len()..].to_string();
    }
    if let Some(cut) = sqlite_statement_echo(&message) {
        message.truncate(cut);
    }
    message.trim().to_string()
}

/// Where SQLite's ` in <sql> at offset N` suffix starts, if the message has one.
fn sqlite_statement_echo(message: &str) -> Option<usize> {
    let at = message.rfind(" at offset ")?;
    let digits = &message[at + " at offset ".len()..];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The statement itself may contain " in ", so the suffix starts at the first " in ";
    // SQLite's own message heads never contain that word.
    message[..at].find(" in ")
}

/// Classifies one oracle answer; `None` when the status is [`Status::Correct`].
pub fn classify(status: Status, error: Option<&str>) -> Option<Classification> {
    let by = |failure_type, rule| Some(Classification { failure_type, rule });
    match status {
        Status::Correct => return None,
        Status::Timeout => return by(FailureType::Execution, RULE_TIMEOUT_STATUS),
        Status::DenotationMismatch => return by(FailureType::ResultMismatch, RULE_MISMATCH_STATUS),
        Status::ExecutionError => {}
    }
    let primary = primary_message(error.unwrap_or(""));
    if primary.is_empty() {
        return by(FailureType::Unknown, RULE_NO_TEXT);
    }
    match RULES.iter().find(|rule| rule.matches(&primary)) {
        Some(rule) => by(rule.failure_type, rule.id),
        None => by(FailureType::Unknown, RULE_FALLBACK),
    }
}

/// [`classify`] over a [`Feedback`].
pub fn classify_feedback(feedback: &Feedback) -> Option<Classification> {
    classify(feedback.status, feedback.error.as_deref())
}

/// The rule table as Markdown: status rules, the ordered text rules, the fallback.
pub fn rule_table_markdown() -> String {
    let mut out =
        String::from("| # | rule | source | pattern (primary message, lowercased) | label |\n");
    out.push_str("|---:|---|---|---|---|\n");
    let status_rows: [(&str, &str, FailureType); 3] = [
        (
            RULE_TIMEOUT_STATUS,
            "status is `timeout`",
            FailureType::Execution,
        ),
        (
            RULE_MISMATCH_STATUS,
            "status is `denotation_mismatch` (executed, wrong result)",
            FailureType::ResultMismatch,
        ),
        (
            RULE_NO_TEXT,
            "status is `execution_error` and the text is empty",
            FailureType::Unknown,
        ),
    ];
    let mut number = 0;
    for (id, pattern, label) in status_rows {
        number += 1;
        out.push_str(&format!(
            "| {number} | `{id}` | {} | {pattern} | {label} |\n",
            RuleSource::Status.name()
        ));
    }
    for rule in RULES {
        number += 1;
        out.push_str(&format!(
            "| {number} | `{}` | {} | {} | {} |\n",
            rule.id,
            rule.source.name(),
            rule.pattern.replace('|', "\\|"),
            rule.failure_type
        ));
    }
    number += 1;
    out.push_str(&format!(
        "| {number} | `{RULE_FALLBACK}` | any | any other non-empty text | {} |\n",
        FailureType::Unknown
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_message_drops_prefixes_hints_and_statement_echo() {
        let pg = "ERROR:  column \"nme\" does not exist\nLINE 1: SELECT nme FROM singer\n               ^\nHINT:  Perhaps you meant";
        assert_eq!(primary_message(pg), "column \"nme\" does not exist");
        let sqlite = "no such column: nme in SELECT nme FROM singer GROUP BY x at offset 7";
        assert_eq!(primary_message(sqlite), "no such column: nme");
        assert_eq!(
            primary_message("db error: ERROR: division by zero"),
            "division by zero"
        );
        assert_eq!(primary_message("  \n  "), "");
        // A message that merely ends in digits is left alone.
        assert_eq!(primary_message("integer overflow"), "integer overflow");
    }

    #[test]
    fn status_rules_come_first() {
        assert_eq!(classify(Status::Correct, None), None);
        let timeout = classify(Status::Timeout, Some("no such column: x")).unwrap();
        assert_eq!(timeout.failure_type, FailureType::Execution);
        assert_eq!(timeout.rule, RULE_TIMEOUT_STATUS);
        let mismatch = classify(Status::DenotationMismatch, None).unwrap();
        assert_eq!(mismatch.failure_type, FailureType::ResultMismatch);
        let empty = classify(Status::ExecutionError, Some("   ")).unwrap();
        assert_eq!(empty.failure_type, FailureType::Unknown);
        assert_eq!(empty.rule, RULE_NO_TEXT);
    }

    #[test]
    fn rule_ids_are_unique_and_the_table_lists_them_all() {
        let mut ids: Vec<&str> = RULES.iter().map(|rule| rule.id).collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before, ids.len());
        let table = rule_table_markdown();
        for rule in RULES {
            assert!(table.contains(rule.id));
        }
    }

    #[test]
    fn the_module_documentation_shows_the_current_rule_table() {
        let source = include_str!("classify.rs");
        let documented: String = source
            .lines()
            .filter_map(|line| line.strip_prefix("//! |"))
            .map(|rest| format!("|{rest}\n"))
            .collect();
        assert_eq!(documented, rule_table_markdown());
    }

    #[test]
    fn words_from_the_echoed_statement_never_decide() {
        // The SQL echo contains "GROUP BY" and "no such table", but the primary message is a
        // syntax error.
        let text =
            "near \"FROM\": syntax error in SELECT a, FROM t GROUP BY no such table at offset 10";
        let label = classify(Status::ExecutionError, Some(text)).unwrap();
        assert_eq!(label.failure_type, FailureType::Syntax);
    }
}
