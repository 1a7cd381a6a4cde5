//! Seed SQL → perturbed, executable targets.
//!
//! Four operations, all on the outermost query only (sub-queries keep their own aliases, and
//! Spider reuses `T1`/`T2` inside them for other tables, so touching them would need a full
//! scope resolver for little gain):
//!
//! * **Column swap**: a column of the top-level SELECT list or GROUP BY is replaced, everywhere
//!   in SELECT/GROUP BY/HAVING/ORDER BY of that level, by another column of the same table
//!   with the same coarse type (number, text, time, boolean). Neither column may be a key:
//!   primary keys, either end of a foreign key, and (because Spider's `tables.json` misses
//!   many foreign keys) any column named `id` or ending in `id` after an underscore or a
//!   lower-case letter (`singer_id`, `StuID`). Key swaps would mostly break joins or yield
//!   meaningless ids.
//! * **Numeric literal**: a number compared with `= <> < <= > >=` or a BETWEEN bound changes
//!   (integers by ±1, ±5, ±10, ×2, ÷2, ±10 %; decimals by a factor, keeping their decimals).
//! * **Sort direction**: one top-level ORDER BY key flips (no direction counts as ASC).
//! * **LIMIT**: an existing LIMIT number changes to another of 1, 2, 3, 5, 10; an ordered query
//!   without LIMIT gets one.
//!
//! Each candidate applies one operation, and with probability
//! [`PerturbConfig::compose_probability`] a second, different one. A candidate is kept when it
//! parses, differs (normalised) from its seed and from every target kept before it, and runs
//! read-only through `merit_sql` within the deadline with at least one row.

use super::sqlast;
use super::{fnv1a, GenError};
use merit_data::{DatabaseDir, DatabaseSchema, TableSchema};
use merit_sql::{Database, ExecLimits, SqliteDatabase};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};
use sqlparser::ast::{
    BinaryOperator, Expr, GroupByExpr, Ident, LimitClause, OrderByKind, Query, SelectItem, SetExpr,
    TableFactor, Value, VisitMut, VisitorMut,
};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::time::Duration;

/// The perturbation operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerturbKind {
    /// A type-compatible non-key column swap within one table.
    ColumnSwap,
    /// A changed numeric literal in a comparison.
    NumericLiteral,
    /// A flipped ORDER BY direction.
    SortDirection,
    /// A changed or added LIMIT.
    Limit,
    /// The query turned into a data change (a Management target; see [`super::write`]).
    Write,
}

impl PerturbKind {
    const ALL: [PerturbKind; 4] = [
        PerturbKind::ColumnSwap,
        PerturbKind::NumericLiteral,
        PerturbKind::SortDirection,
        PerturbKind::Limit,
    ];
}

/// One applied operation, with a short description (`singer.Name -> singer.Country`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Perturbation {
    /// Which operation.
    pub kind: PerturbKind,
    /// What changed, for provenance and debugging.
    pub detail: String,
}

/// A kept target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Stable id: FNV-1a of the database id and the normalised SQL, 16 hex digits. The same
    /// target always gets the same id, which is what resuming keys on.
    pub target_id: String,
    /// The database id.
    pub db_id: String,
    /// The seed it came from.
    pub seed_id: String,
    /// The seed's SQL.
    pub seed_sql: String,
    /// The target SQL, as `sqlparser` renders it (this exact text is shown to the model and
    /// becomes `sol_sql`, so snippets are checked against it).
    pub sql: String,
    /// The operations applied, in order.
    pub perturbations: Vec<Perturbation>,
    /// For a Management target: its test cases and outline (`None` for a query).
    pub write: Option<super::write::WriteSpec>,
    /// The phase-2 follow-up, when one was attached (see [`super::follow`]).
    pub follow_up: Option<super::follow::FollowUpSpec>,
}

/// Settings of [`perturb_seeds`].
#[derive(Debug, Clone, PartialEq)]
pub struct PerturbConfig {
    /// Base seed of the RNG; each seed query gets its own ChaCha20 stream derived from this and
    /// its seed id, so a target does not depend on which other seeds were processed.
    pub seed: u64,
    /// Most targets kept per seed.
    pub variants_per_seed: usize,
    /// Most candidates tried per seed.
    pub attempts_per_seed: usize,
    /// Probability that a candidate gets a second operation.
    pub compose_probability: f64,
    /// Deadline of each execution check.
    pub timeout: Duration,
}

impl Default for PerturbConfig {
    fn default() -> PerturbConfig {
        PerturbConfig {
            seed: 20_250_601,
            variants_per_seed: 2,
            attempts_per_seed: 10,
            compose_probability: 0.3,
            timeout: Duration::from_secs(10),
        }
    }
}

/// Counts of what happened to seeds and candidates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PerturbReport {
    /// Seeds read.
    pub seeds: usize,
    /// Seeds whose database has no schema in `tables.json` or no SQLite file.
    pub seeds_without_database: usize,
    /// Seeds that do not parse as one query.
    pub seeds_unparsable: usize,
    /// Seeds where no operation applies.
    pub seeds_without_operation: usize,
    /// Candidates built.
    pub candidates: usize,
    /// Candidates equal to their seed or to an earlier target.
    pub duplicates: usize,
    /// Candidates the engine refused or that ran past the deadline.
    pub failed_execution: usize,
    /// Candidates that ran but returned no row.
    pub empty_result: usize,
    /// Targets kept.
    pub kept: usize,
    /// Kept targets per operation (a composed target counts under both).
    pub kept_by_kind: BTreeMap<PerturbKind, usize>,
}

/// Perturbs every seed and keeps executable, non-empty, distinct targets, in seed order.
///
/// `schemas` come from `tables.json` (`merit_data::load_tables`), keyed by database id;
/// `databases` finds `<db_id>/<db_id>.sqlite`. A seed whose database is missing is counted and
/// skipped. Errors only for a database file that exists but cannot be opened.
pub fn perturb_seeds(
    seeds: &[super::Seed],
    schemas: &BTreeMap<String, DatabaseSchema>,
    databases: &DatabaseDir,
    config: &PerturbConfig,
) -> Result<(Vec<Target>, PerturbReport), GenError> {
    let mut report = PerturbReport {
        seeds: seeds.len(),
        ..PerturbReport::default()
    };
    let mut open: BTreeMap<String, SqliteDatabase> = BTreeMap::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut targets = Vec::new();
    let limits = ExecLimits::with_timeout(config.timeout);
    for seed in seeds {
        let Some(schema) = schemas.get(&seed.db_id) else {
            report.seeds_without_database += 1;
            continue;
        };
        if !open.contains_key(&seed.db_id) {
            let Ok(path) = databases.locate(&seed.db_id) else {
                report.seeds_without_database += 1;
                continue;
            };
            let database = SqliteDatabase::open(&path).map_err(|e| GenError::Database {
                database: seed.db_id.clone(),
                message: e.to_string(),
            })?;
            open.insert(seed.db_id.clone(), database);
        }
        let database = &open[&seed.db_id];
        let Some(query) = sqlast::parse_query(&seed.sql) else {
            report.seeds_unparsable += 1;
            continue;
        };
        let seed_norm = sqlast::canonical_rendered_text(&query.to_string());
        let mut rng = ChaCha20Rng::seed_from_u64(
            config.seed ^ fnv1a(format!("{}\n{}", seed.db_id, seed.seed_id).as_bytes()),
        );
        let applicable: Vec<PerturbKind> = PerturbKind::ALL
            .into_iter()
            .filter(|&kind| apply(kind, &query, schema, &mut rng.clone()).is_some())
            .collect();
        if applicable.is_empty() {
            report.seeds_without_operation += 1;
            continue;
        }
        let mut kept_here = 0;
        for _ in 0..config.attempts_per_seed {
            if kept_here >= config.variants_per_seed {
                break;
            }
            let first = applicable[rng.random_range(0..applicable.len())];
            let Some((mut candidate, change)) = apply(first, &query, schema, &mut rng) else {
                continue;
            };
            let mut changes = vec![change];
            if applicable.len() > 1 && rng.random_bool(config.compose_probability) {
                let others: Vec<PerturbKind> =
                    applicable.iter().copied().filter(|&k| k != first).collect();
                let second = others[rng.random_range(0..others.len())];
                if let Some((composed, change)) = apply(second, &candidate, schema, &mut rng) {
                    candidate = composed;
                    changes.push(change);
                }
            }
            report.candidates += 1;
            let sql = candidate.to_string();
            // Re-parse the rendering: what is stored must be what `sqlparser` reads back.
            let Some(normalized) = sqlast::canonical_query_text(&sql) else {
                report.failed_execution += 1;
                continue;
            };
            if normalized == seed_norm || seen.contains(&normalized) {
                report.duplicates += 1;
                continue;
            }
            match has_rows(database, &sql, &limits) {
                Ok(true) => {}
                Ok(false) => {
                    report.empty_result += 1;
                    continue;
                }
                Err(()) => {
                    report.failed_execution += 1;
                    continue;
                }
            }
            let target_id = format!(
                "{:016x}",
                fnv1a(format!("{}\n{}", seed.db_id, normalized).as_bytes())
            );
            seen.insert(normalized);
            for change in &changes {
                *report.kept_by_kind.entry(change.kind).or_default() += 1;
            }
            report.kept += 1;
            kept_here += 1;
            targets.push(Target {
                target_id,
                db_id: seed.db_id.clone(),
                seed_id: seed.seed_id.clone(),
                seed_sql: seed.sql.clone(),
                sql,
                perturbations: changes,
                write: None,
                follow_up: None,
            });
        }
    }
    Ok((targets, report))
}

/// `Ok(true)` when the query runs and yields a row; stops at the first row.
pub(crate) fn has_rows(
    database: &SqliteDatabase,
    sql: &str,
    limits: &ExecLimits,
) -> Result<bool, ()> {
    database
        .for_each_row(sql, limits, &mut |_| ControlFlow::Break(()))
        .map(|summary| summary.rows_delivered > 0)
        .map_err(|_| ())
}

/// Applies one operation to a copy of `query`; `None` when it does not apply.
fn apply(
    kind: PerturbKind,
    query: &Query,
    schema: &DatabaseSchema,
    rng: &mut ChaCha20Rng,
) -> Option<(Query, Perturbation)> {
    let mut copy = query.clone();
    let detail = match kind {
        PerturbKind::ColumnSwap => swap_column(&mut copy, schema, rng)?,
        PerturbKind::NumericLiteral => change_number(&mut copy, rng)?,
        PerturbKind::SortDirection => flip_sort(&mut copy, rng)?,
        PerturbKind::Limit => change_limit(&mut copy, rng)?,
        // Writes are built from kept targets, not applied to seeds.
        PerturbKind::Write => return None,
    };
    Some((copy, Perturbation { kind, detail }))
}

// ---------------------------------------------------------------------------------------
// Column swap

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Coarse {
    Number,
    Text,
    Time,
    Boolean,
    Other,
}

fn coarse(sql_type: &str) -> Coarse {
    let t = sql_type.to_ascii_lowercase();
    if t.contains("int")
        || t.contains("num")
        || t.contains("real")
        || t.contains("float")
        || t.contains("double")
        || t.contains("dec")
    {
        Coarse::Number
    } else if t.contains("text") || t.contains("char") || t.contains("clob") {
        Coarse::Text
    } else if t.contains("time") || t.contains("date") || t.contains("year") {
        Coarse::Time
    } else if t.contains("bool") {
        Coarse::Boolean
    } else {
        Coarse::Other
    }
}

/// Whether a column is a key (see the module docs for the name rule).
fn is_key(schema: &DatabaseSchema, table: &TableSchema, column: &str) -> bool {
    let spec = table
        .columns
        .iter()
        .find(|c| c.name.eq_ignore_ascii_case(column));
    if spec.is_none_or(|c| c.primary_key) {
        return true;
    }
    if table
        .foreign_keys
        .iter()
        .any(|k| k.column.eq_ignore_ascii_case(column))
    {
        return true;
    }
    let referenced = schema.tables.iter().any(|t| {
        t.foreign_keys.iter().any(|k| {
            k.ref_table.eq_ignore_ascii_case(&table.name)
                && k.ref_column.eq_ignore_ascii_case(column)
        })
    });
    referenced || id_like(column)
}

fn id_like(column: &str) -> bool {
    let lower = column.to_ascii_lowercase();
    if lower == "id" || lower.ends_with("_id") {
        return true;
    }
    // `StuID`, `CustomerId`: a lower-case letter followed by `Id`/`ID` at the end.
    let bytes = column.as_bytes();
    bytes.len() > 2
        && lower.ends_with("id")
        && bytes[bytes.len() - 2] == b'I'
        && bytes[bytes.len() - 3].is_ascii_lowercase()
}

/// The tables of the top-level FROM (joins included), keyed by lower-cased alias or name.
fn scope<'s>(query: &Query, schema: &'s DatabaseSchema) -> BTreeMap<String, &'s TableSchema> {
    let mut scope = BTreeMap::new();
    let SetExpr::Select(select) = query.body.as_ref() else {
        return scope;
    };
    for table in &select.from {
        for factor in
            std::iter::once(&table.relation).chain(table.joins.iter().map(|j| &j.relation))
        {
            if let TableFactor::Table { name, alias, .. } = factor {
                let Some(last) = name.0.last().and_then(|p| p.as_ident()) else {
                    continue;
                };
                if let Some(spec) = schema.table(&last.value) {
                    let key = alias.as_ref().map_or(&last.value, |a| &a.name.value);
                    scope.insert(key.to_ascii_lowercase(), spec);
                }
            }
        }
    }
    scope
}

/// Resolves a column reference to (scope key, column name as written).
fn resolve(expr: &Expr, scope: &BTreeMap<String, &TableSchema>) -> Option<(String, String)> {
    match expr {
        Expr::Identifier(ident) if ident.quote_style != Some('\'') => {
            let mut owners = scope.iter().filter(|(_, t)| {
                t.columns
                    .iter()
                    .any(|c| c.name.eq_ignore_ascii_case(&ident.value))
            });
            let (key, _) = owners.next()?;
            // Ambiguous unqualified names are left alone.
            owners
                .next()
                .is_none()
                .then(|| (key.clone(), ident.value.clone()))
        }
        Expr::CompoundIdentifier(parts) if parts.len() == 2 => {
            let key = parts[0].value.to_ascii_lowercase();
            let table = scope.get(&key)?;
            table
                .columns
                .iter()
                .any(|c| c.name.eq_ignore_ascii_case(&parts[1].value))
                .then(|| (key, parts[1].value.clone()))
        }
        _ => None,
    }
}

/// Visits expressions of one query level: sub-queries are skipped by tracking depth.
struct Level<'a, F: FnMut(&mut Expr)> {
    depth: usize,
    f: &'a mut F,
}

impl<F: FnMut(&mut Expr)> VisitorMut for Level<'_, F> {
    type Break = ();
    fn pre_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth += 1;
        ControlFlow::Continue(())
    }
    fn post_visit_query(&mut self, _: &mut Query) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if self.depth == 0 {
            (self.f)(expr);
        }
        ControlFlow::Continue(())
    }
}

fn on_level(expr: &mut Expr, f: &mut impl FnMut(&mut Expr)) {
    let mut level = Level { depth: 0, f };
    let _ = expr.visit(&mut level);
}

/// The top-level clauses a swap rewrites: projection, GROUP BY, HAVING, ORDER BY.
fn swap_clauses(query: &mut Query, f: &mut impl FnMut(&mut Expr)) {
    if let SetExpr::Select(select) = query.body.as_mut() {
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } = item {
                on_level(expr, f);
            }
        }
        if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
            for expr in exprs {
                on_level(expr, f);
            }
        }
        if let Some(having) = &mut select.having {
            on_level(having, f);
        }
    }
    if let Some(order_by) = &mut query.order_by {
        if let OrderByKind::Expressions(exprs) = &mut order_by.kind {
            for item in exprs {
                on_level(&mut item.expr, f);
            }
        }
    }
}

fn swap_column(
    query: &mut Query,
    schema: &DatabaseSchema,
    rng: &mut ChaCha20Rng,
) -> Option<String> {
    let scope = scope(query, schema);
    if scope.is_empty() {
        return None;
    }
    // Columns that may be swapped: in the SELECT list or GROUP BY, resolved, non-key.
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    let mut swappable: Vec<(String, String)> = Vec::new();
    {
        let SetExpr::Select(select) = query.body.as_mut() else {
            return None;
        };
        let mut collect = |expr: &mut Expr| {
            if let Some((key, column)) = resolve(expr, &scope) {
                let entry = (key, column.to_ascii_lowercase());
                if !swappable.contains(&entry) {
                    swappable.push(entry.clone());
                }
                used.insert(entry);
            }
        };
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } = item {
                on_level(expr, &mut collect);
            }
        }
        if let GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
            for expr in exprs {
                on_level(expr, &mut collect);
            }
        }
    }
    let mut options: Vec<(String, String, String)> = Vec::new();
    for (key, column) in &swappable {
        let table = scope[key];
        if is_key(schema, table, column) {
            continue;
        }
        let Some(spec) = table
            .columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(column))
        else {
            continue;
        };
        let kind = coarse(&spec.sql_type);
        if kind == Coarse::Other {
            continue;
        }
        for other in &table.columns {
            let lower = other.name.to_ascii_lowercase();
            if lower != *column
                && coarse(&other.sql_type) == kind
                && !used.contains(&(key.clone(), lower))
                && !is_key(schema, table, &other.name)
            {
                options.push((key.clone(), column.clone(), other.name.clone()));
            }
        }
    }
    if options.is_empty() {
        return None;
    }
    let (key, column, replacement) = options[rng.random_range(0..options.len())].clone();
    let table_name = scope[&key].name.clone();
    let mut replace = |expr: &mut Expr| {
        if resolve(expr, &scope).is_some_and(|(k, c)| k == key && c.eq_ignore_ascii_case(&column)) {
            match expr {
                Expr::Identifier(ident) => *ident = quoted(&replacement),
                Expr::CompoundIdentifier(parts) => parts[1] = quoted(&replacement),
                _ => {}
            }
        }
    };
    swap_clauses(query, &mut replace);
    Some(format!(
        "{table_name}.{column} -> {table_name}.{replacement}"
    ))
}

/// An identifier, double-quoted when it is not a plain word (Spider has columns with spaces).
fn quoted(name: &str) -> Ident {
    let plain = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        Ident::new(name)
    } else {
        Ident::with_quote('"', name)
    }
}

// ---------------------------------------------------------------------------------------
// Numeric literal

fn comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

/// Walks the comparison operands and BETWEEN bounds of an expression (sub-queries included)
/// in a fixed order and calls `f(index, text)` on each numeric literal; `f` may rewrite it.
struct Numbers<'a> {
    next: usize,
    f: &'a mut dyn FnMut(usize, &mut String),
}

impl Numbers<'_> {
    fn take(&mut self, expr: &mut Expr) {
        if let Expr::Value(value) = expr {
            if let Value::Number(text, _) = &mut value.value {
                (self.f)(self.next, text);
                self.next += 1;
            }
        }
    }
}

impl VisitorMut for Numbers<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        match expr {
            Expr::BinaryOp { left, op, right } if comparison(op) => {
                self.take(left);
                self.take(right);
            }
            Expr::Between { low, high, .. } => {
                self.take(low);
                self.take(high);
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

fn visit_numbers(query: &mut Query, f: &mut dyn FnMut(usize, &mut String)) {
    // Only WHERE and HAVING: a number in the SELECT list or ORDER BY is not a threshold.
    let mut exprs: Vec<&mut Expr> = Vec::new();
    collect_conditions(query.body.as_mut(), &mut exprs);
    let mut walk = Numbers { next: 0, f };
    for expr in exprs {
        let _ = expr.visit(&mut walk);
    }
}

fn change_number(query: &mut Query, rng: &mut ChaCha20Rng) -> Option<String> {
    let mut found: Vec<String> = Vec::new();
    visit_numbers(query, &mut |_, text| found.push(text.clone()));
    if found.is_empty() {
        return None;
    }
    let index = rng.random_range(0..found.len());
    let old = found[index].clone();
    let new = new_number(&old, rng)?;
    visit_numbers(query, &mut |i, text| {
        if i == index {
            *text = new.clone();
        }
    });
    Some(format!("{old} -> {new}"))
}

fn collect_conditions<'q>(body: &'q mut SetExpr, out: &mut Vec<&'q mut Expr>) {
    match body {
        SetExpr::Select(select) => {
            if let Some(selection) = &mut select.selection {
                out.push(selection);
            }
            if let Some(having) = &mut select.having {
                out.push(having);
            }
        }
        SetExpr::Query(query) => collect_conditions(query.body.as_mut(), out),
        SetExpr::SetOperation { left, right, .. } => {
            collect_conditions(left, out);
            collect_conditions(right, out);
        }
        _ => {}
    }
}

fn new_number(old: &str, rng: &mut ChaCha20Rng) -> Option<String> {
    if let Ok(n) = old.parse::<i64>() {
        let mut options: Vec<i64> = vec![n + 1, n - 1, n + 5, n - 5, n.saturating_mul(2), n / 2];
        if n.abs() >= 100 {
            options.extend([n + 10, n - 10, n + n / 10, n - n / 10]);
        }
        options.retain(|&v| v != n && (n < 0 || v >= 0));
        options.sort_unstable();
        options.dedup();
        if options.is_empty() {
            return None;
        }
        return Some(options[rng.random_range(0..options.len())].to_string());
    }
    let value: f64 = old.parse().ok().filter(|v: &f64| v.is_finite())?;
    let decimals = old.split_once('.').map_or(1, |(_, d)| d.len().max(1));
    let factors = [0.5, 0.75, 1.25, 1.5, 2.0];
    let mut options: Vec<String> = factors
        .iter()
        .map(|f| format!("{:.*}", decimals, value * f))
        .filter(|s| s.parse::<f64>().ok() != Some(value))
        .collect();
    options.dedup();
    if options.is_empty() {
        return None;
    }
    Some(options.swap_remove(rng.random_range(0..options.len())))
}

// ---------------------------------------------------------------------------------------
// Sort direction and LIMIT

fn flip_sort(query: &mut Query, rng: &mut ChaCha20Rng) -> Option<String> {
    let order_by = query.order_by.as_mut()?;
    let OrderByKind::Expressions(exprs) = &mut order_by.kind else {
        return None;
    };
    if exprs.is_empty() {
        return None;
    }
    let index = rng.random_range(0..exprs.len());
    let item = &mut exprs[index];
    let (from, to) = match item.options.asc {
        Some(false) => ("DESC", Some(true)),
        _ => ("ASC", Some(false)),
    };
    item.options.asc = to;
    let to_word = if to == Some(true) { "ASC" } else { "DESC" };
    Some(format!("ORDER BY {} {from} -> {to_word}", item.expr))
}

const LIMITS: [u64; 5] = [1, 2, 3, 5, 10];

fn change_limit(query: &mut Query, rng: &mut ChaCha20Rng) -> Option<String> {
    match &mut query.limit_clause {
        Some(LimitClause::LimitOffset {
            limit: Some(Expr::Value(value)),
            ..
        }) => {
            let Value::Number(text, _) = &mut value.value else {
                return None;
            };
            let old: u64 = text.parse().ok()?;
            let options: Vec<u64> = LIMITS.into_iter().filter(|&l| l != old).collect();
            let new = options[rng.random_range(0..options.len())];
            *text = new.to_string();
            Some(format!("LIMIT {old} -> {new}"))
        }
        None if query.order_by.is_some() => {
            let new = LIMITS[rng.random_range(0..LIMITS.len())];
            query.limit_clause = Some(LimitClause::LimitOffset {
                limit: Some(Expr::value(Value::Number(new.to_string(), false))),
                offset: None,
                limit_by: Vec::new(),
            });
            Some(format!("LIMIT added: {new}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_rule() {
        for key in ["id", "Singer_ID", "StuID", "customer_id", "CustomerId"] {
            assert!(id_like(key), "{key}");
        }
        for plain in ["paid", "Valid", "name", "Age", "ID_card_no"] {
            assert!(!id_like(plain), "{plain}");
        }
    }

    #[test]
    fn numbers_change_and_keep_their_kind() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        for _ in 0..20 {
            let n = new_number("30", &mut rng).unwrap();
            assert_ne!(n, "30");
            assert!(n.parse::<i64>().unwrap() >= 0);
            let f = new_number("2.5", &mut rng).unwrap();
            assert!(f.contains('.') && f != "2.5");
        }
    }

    #[test]
    fn sort_and_limit_changes() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let mut q = sqlast::parse_query("SELECT a FROM t ORDER BY a LIMIT 3").unwrap();
        assert!(flip_sort(&mut q, &mut rng).is_some());
        assert!(q.to_string().contains("ORDER BY a DESC"));
        assert!(change_limit(&mut q, &mut rng).is_some());
        assert!(!q.to_string().ends_with("LIMIT 3"));
        let mut q = sqlast::parse_query("SELECT a FROM t ORDER BY a").unwrap();
        assert!(change_limit(&mut q, &mut rng).is_some());
        assert!(q.to_string().contains("LIMIT"));
        let mut q = sqlast::parse_query("SELECT a FROM t").unwrap();
        assert!(change_limit(&mut q, &mut rng).is_none());
        assert!(flip_sort(&mut q, &mut rng).is_none());
    }

    #[test]
    fn literals_in_comparisons_only() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let mut q =
            sqlast::parse_query("SELECT a + 7 FROM t WHERE b > 40 ORDER BY a LIMIT 5").unwrap();
        let detail = change_number(&mut q, &mut rng).unwrap();
        assert!(detail.starts_with("40 -> "), "{detail}");
        let text = q.to_string();
        assert!(
            text.contains("a + 7") && text.ends_with("LIMIT 5"),
            "{text}"
        );
    }
}
