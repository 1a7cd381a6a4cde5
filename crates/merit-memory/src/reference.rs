//! The reference labeler used to validate the classifier (paper 000, Table 5).
//!
//! Unlike the classifier, the labeler may look at everything: the failing SQL, the gold SQL
//! (both parsed with `sqlparser`'s SQLite dialect), the oracle status and the database's
//! names. It compares the two queries component by component and names the category of the
//! most fundamental difference.
//!
//! Steps:
//! 1. a timeout is **Execution**; a failing SQL that does not parse as one query is **Syntax**;
//! 2. both queries are normalised: table qualifiers and aliases dropped, identifiers and
//!    function names lower-cased, and, as SQLite does, a double-quoted name that is no column
//!    or table of the database read as a string literal;
//! 3. the clauses of the query, of its FROM subqueries, CTEs and set-operation parts are
//!    gathered into components, each a set of normalised items: tables, join conditions,
//!    select items, WHERE conjuncts, GROUP BY keys, HAVING, ORDER BY keys, LIMIT/OFFSET,
//!    DISTINCT, set operators. A subquery inside an expression stays part of its item;
//! 4. a SELECT without FROM where the gold's has one → **Syntax**; then each differing
//!    component is typed, first rule that applies:
//!    - tables or join conditions → **Schema Linking**;
//!    - items equal once column names are masked (a column swapped for another) →
//!      **Schema Linking**;
//!    - items equal once columns and literals are masked alike, where a double-quoted name
//!      became a string → **Schema Linking**;
//!    - aggregate expressions replaced by other aggregate expressions → **Aggregation**;
//!    - items equal once literals are masked, or once columns and literals are masked alike
//!      → **Filter/Value** in WHERE/HAVING, else **Result Mismatch**;
//!    - otherwise by component: WHERE → **Filter/Value**; GROUP BY, HAVING →
//!      **Aggregation**; anything else (projection, order, limit, distinct, set operators)
//!      → **Result Mismatch**;
//! 5. the label is the first of Syntax, Schema Linking, Aggregation, Filter/Value found;
//!    failing that, **Execution** if the query raised an error (the difference does not
//!    explain the error), else **Result Mismatch**.
//!
//! Components are compared as sets, so a query that repeats itself (`… UNION ALL …` of the
//! gold) differs only in its set operator.
//!
//! The labeler never produces **Unknown**.

use crate::failure::FailureType;
use merit_core::Status;
use sqlparser::ast::{
    visit_expressions, visit_expressions_mut, BinaryOperator, Expr, GroupByExpr, Ident,
    JoinConstraint, JoinOperator, LimitClause, OrderByKind, Query, SelectItem, SetExpr, Statement,
    TableFactor, TableWithJoins, Value,
};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use std::collections::{BTreeMap, HashSet};
use std::ops::ControlFlow;

/// Table and column names of a database, for resolving SQLite's double-quoted strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReferenceSchema {
    tables: HashSet<String>,
    columns: HashSet<String>,
}

impl ReferenceSchema {
    /// A schema from `(table, columns)` pairs; names are compared case-insensitively.
    pub fn new<T, C>(tables: impl IntoIterator<Item = (T, C)>) -> ReferenceSchema
    where
        T: AsRef<str>,
        C: IntoIterator,
        C::Item: AsRef<str>,
    {
        let mut schema = ReferenceSchema::default();
        for (table, columns) in tables {
            schema.tables.insert(table.as_ref().to_lowercase());
            for column in columns {
                schema.columns.insert(column.as_ref().to_lowercase());
            }
        }
        schema
    }

    fn knows(&self, name: &str) -> bool {
        let name = name.to_lowercase();
        self.columns.contains(&name) || self.tables.contains(&name)
    }

    fn is_empty(&self) -> bool {
        self.tables.is_empty() && self.columns.is_empty()
    }
}

/// The reference label of one failing query, with the difference that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceLabel {
    /// The category.
    pub failure_type: FailureType,
    /// Why, in a few words (e.g. `WHERE: literal changed`).
    pub reason: String,
}

/// Why a pair could not be labelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// The status says the query is correct: there is no failure to label.
    #[error("the query is correct; only failures are labelled")]
    NotAFailure,
    /// The gold query does not parse, so nothing can be compared with it.
    #[error("the gold query does not parse: {0}")]
    GoldUnparseable(String),
}

/// Labels a failing query by comparing it with the gold query.
pub fn reference_label(
    failing_sql: &str,
    gold_sql: &str,
    status: Status,
    schema: &ReferenceSchema,
) -> Result<ReferenceLabel, ReferenceError> {
    let label = |failure_type, reason: &str| ReferenceLabel {
        failure_type,
        reason: reason.to_string(),
    };
    match status {
        Status::Correct => return Err(ReferenceError::NotAFailure),
        Status::Timeout => return Ok(label(FailureType::Execution, "timeout")),
        Status::DenotationMismatch | Status::ExecutionError => {}
    }
    let gold = parse_query(gold_sql).map_err(ReferenceError::GoldUnparseable)?;
    let pred = match parse_query(failing_sql) {
        Ok(Parsed::Query(statement)) => statement,
        Ok(Parsed::OtherStatement) => {
            return Ok(label(
                FailureType::Execution,
                "not a query (refused statement)",
            ));
        }
        Err(message) => {
            return Ok(label(
                FailureType::Syntax,
                &format!("does not parse: {message}"),
            ))
        }
    };
    let Parsed::Query(gold) = gold else {
        return Err(ReferenceError::GoldUnparseable("not a query".to_string()));
    };
    let gold = Features::of(*gold, schema);
    let pred = Features::of(*pred, schema);
    let mut findings: Vec<(FailureType, String)> = Vec::new();
    if pred.selects_without_from > gold.selects_without_from {
        findings.push((
            FailureType::Syntax,
            "a SELECT lost its FROM clause".to_string(),
        ));
    }
    let components: HashSet<Component> = gold
        .items
        .keys()
        .chain(pred.items.keys())
        .copied()
        .collect();
    let mut components: Vec<Component> = components.into_iter().collect();
    components.sort();
    let empty = Vec::new();
    for component in components {
        let g = gold.items.get(&component).unwrap_or(&empty);
        let p = pred.items.get(&component).unwrap_or(&empty);
        let removed = multiset_minus(g, p);
        let added = multiset_minus(p, g);
        if removed.is_empty() && added.is_empty() {
            continue;
        }
        // The removed items turn into the added ones under `mask`. A pure addition also
        // counts when every added item has a twin among the gold's items: with components
        // compared as sets, a change in one part of a compound query can look like that.
        let masked_equal = |mask: fn(&Item) -> &str| {
            let mut a: Vec<&str> = removed.iter().map(|i| mask(i)).collect();
            let mut b: Vec<&str> = added.iter().map(|i| mask(i)).collect();
            a.sort_unstable();
            b.sort_unstable();
            if !a.is_empty() {
                return a == b;
            }
            let twins: HashSet<&str> = g.iter().map(mask).collect();
            b.iter().all(|m| twins.contains(m))
        };
        let aggregate_replaced = !removed.is_empty()
            && !added.is_empty()
            && removed.iter().chain(&added).all(|i| i.has_aggregate)
            && gold.aggregates != pred.aggregates;
        let quoted_name_became_string = added.iter().any(|item| {
            pred.quoted_strings
                .iter()
                .any(|name| item.full.contains(&format!("'{name}'")))
        });
        // A changed literal is a filter value only where it filters.
        let value_kind = if matches!(component, Component::Where | Component::Having) {
            FailureType::FilterValue
        } else {
            FailureType::ResultMismatch
        };
        let (kind, why) = if matches!(component, Component::Tables | Component::Joins) {
            (FailureType::SchemaLinking, "differs")
        } else if masked_equal(|i| &i.columns_masked) {
            (FailureType::SchemaLinking, "column changed")
        } else if quoted_name_became_string && masked_equal(|i| &i.operands_masked) {
            (
                FailureType::SchemaLinking,
                "unknown quoted name read as a string",
            )
        } else if aggregate_replaced {
            (FailureType::Aggregation, "aggregate changed")
        } else if masked_equal(|i| &i.literals_masked) {
            (value_kind, "literal changed")
        } else if masked_equal(|i| &i.operands_masked) {
            (value_kind, "column and literal swapped")
        } else {
            match component {
                Component::Where => (FailureType::FilterValue, "condition changed"),
                Component::GroupBy | Component::Having => (FailureType::Aggregation, "changed"),
                _ => (FailureType::ResultMismatch, "changed"),
            }
        };
        findings.push((kind, format!("{}: {why}", component.name())));
    }
    if gold.projection_order != pred.projection_order && findings.is_empty() {
        findings.push((
            FailureType::ResultMismatch,
            "SELECT: item order changed".into(),
        ));
    }
    for wanted in [
        FailureType::Syntax,
        FailureType::SchemaLinking,
        FailureType::Aggregation,
        FailureType::FilterValue,
    ] {
        if let Some((_, why)) = findings.iter().find(|(kind, _)| *kind == wanted) {
            return Ok(label(wanted, why));
        }
    }
    if status == Status::ExecutionError {
        return Ok(label(
            FailureType::Execution,
            "error not explained by a schema, aggregate or filter difference",
        ));
    }
    match findings.first() {
        Some((_, why)) => Ok(label(FailureType::ResultMismatch, why)),
        None => Ok(label(
            FailureType::ResultMismatch,
            "no structural difference found",
        )),
    }
}

enum Parsed {
    Query(Box<Statement>),
    OtherStatement,
}

/// Parses exactly one statement with the SQLite dialect.
fn parse_query(sql: &str) -> Result<Parsed, String> {
    let mut statements = Parser::parse_sql(&SQLiteDialect {}, sql).map_err(|e| e.to_string())?;
    match statements.len() {
        0 => Err("no statement".to_string()),
        1 => {
            let statement = statements.remove(0);
            if matches!(statement, Statement::Query(_)) {
                Ok(Parsed::Query(Box::new(statement)))
            } else {
                Ok(Parsed::OtherStatement)
            }
        }
        n => Err(format!("{n} statements")),
    }
}

fn multiset_minus<'a>(a: &'a [Item], b: &[Item]) -> Vec<&'a Item> {
    let mut available: BTreeMap<&str, usize> = BTreeMap::new();
    for item in b {
        *available.entry(item.full.as_str()).or_default() += 1;
    }
    let mut out = Vec::new();
    for item in a {
        match available.get_mut(item.full.as_str()) {
            Some(count) if *count > 0 => *count -= 1,
            _ => out.push(item),
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Component {
    Tables,
    Joins,
    Projection,
    Where,
    GroupBy,
    Having,
    OrderBy,
    Limit,
    Distinct,
    SetOperation,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Tables => "FROM tables",
            Component::Joins => "JOIN conditions",
            Component::Projection => "SELECT",
            Component::Where => "WHERE",
            Component::GroupBy => "GROUP BY",
            Component::Having => "HAVING",
            Component::OrderBy => "ORDER BY",
            Component::Limit => "LIMIT",
            Component::Distinct => "DISTINCT",
            Component::SetOperation => "set operation",
        }
    }
}

/// One comparable piece of a query in three renderings.
#[derive(Debug, Clone)]
struct Item {
    full: String,
    columns_masked: String,
    literals_masked: String,
    /// Columns and literals both replaced by the same placeholder.
    operands_masked: String,
    /// Whether the item calls an aggregate function.
    has_aggregate: bool,
}

impl Item {
    fn of_expr(expr: &Expr) -> Item {
        Item::of_expr_with(expr, "")
    }

    /// An item for `expr` followed by a fixed suffix (e.g. ` DESC`).
    fn of_expr_with(expr: &Expr, suffix: &str) -> Item {
        let mut columns = expr.clone();
        let _ = visit_expressions_mut(&mut columns, |e| {
            if let Expr::Identifier(ident) = e {
                *ident = Ident::new("_col_");
            }
            ControlFlow::<()>::Continue(())
        });
        let mut literals = expr.clone();
        let _ = visit_expressions_mut(&mut literals, |e| {
            if let Expr::Value(value) = e {
                value.value = Value::Placeholder("?".to_string());
            }
            ControlFlow::<()>::Continue(())
        });
        let mut operands = expr.clone();
        let _ = visit_expressions_mut(&mut operands, |e| {
            if matches!(e, Expr::Value(_) | Expr::Identifier(_)) {
                *e = Expr::Identifier(Ident::new("_operand_"));
            }
            ControlFlow::<()>::Continue(())
        });
        let mut has_aggregate = false;
        let _ = visit_expressions(expr, |e| {
            if let Expr::Function(function) = e {
                has_aggregate |= AGGREGATES.contains(&function.name.to_string().as_str());
            }
            ControlFlow::<()>::Continue(())
        });
        Item {
            full: format!("{expr}{suffix}"),
            columns_masked: format!("{columns}{suffix}"),
            literals_masked: format!("{literals}{suffix}"),
            operands_masked: format!("{operands}{suffix}"),
            has_aggregate,
        }
    }

    fn text(text: impl Into<String>) -> Item {
        let text = text.into();
        Item {
            full: text.clone(),
            columns_masked: text.clone(),
            literals_masked: text.clone(),
            operands_masked: text,
            has_aggregate: false,
        }
    }
}

/// The comparable components of one normalised query.
struct Features {
    items: BTreeMap<Component, Vec<Item>>,
    projection_order: Vec<String>,
    aggregates: Vec<String>,
    /// Double-quoted names SQLite reads as strings (no such column or table).
    quoted_strings: Vec<String>,
    /// SELECTs (of the query and its FROM subqueries) that have no FROM clause.
    selects_without_from: usize,
}

const AGGREGATES: &[&str] = &["count", "sum", "avg", "min", "max", "total", "group_concat"];

impl Features {
    fn of(mut statement: Statement, schema: &ReferenceSchema) -> Features {
        let mut quoted_strings = Vec::new();
        let _ = visit_expressions_mut(&mut statement, |expr| {
            match expr {
                Expr::CompoundIdentifier(parts) => {
                    let last = parts
                        .last()
                        .map(|p| p.value.to_lowercase())
                        .unwrap_or_default();
                    *expr = Expr::Identifier(Ident::new(last));
                }
                Expr::Identifier(ident) => {
                    if ident.quote_style == Some('"')
                        && !schema.is_empty()
                        && !schema.knows(&ident.value)
                    {
                        quoted_strings.push(ident.value.clone());
                        *expr = Expr::value(Value::SingleQuotedString(ident.value.clone()));
                    } else {
                        *ident = Ident::new(ident.value.to_lowercase());
                    }
                }
                Expr::Function(function) => {
                    for part in &mut function.name.0 {
                        if let sqlparser::ast::ObjectNamePart::Identifier(ident) = part {
                            *ident = Ident::new(ident.value.to_lowercase());
                        }
                    }
                }
                _ => {}
            }
            ControlFlow::<()>::Continue(())
        });
        let mut features = Features {
            items: BTreeMap::new(),
            projection_order: Vec::new(),
            aggregates: Vec::new(),
            quoted_strings,
            selects_without_from: 0,
        };
        let _ = visit_expressions(&statement, |expr| {
            if let Expr::Function(function) = expr {
                if AGGREGATES.contains(&function.name.to_string().as_str()) {
                    features.aggregates.push(expr.to_string());
                }
            }
            ControlFlow::<()>::Continue(())
        });
        features.aggregates.sort();
        features.aggregates.dedup();
        if let Statement::Query(query) = &statement {
            features.query(query);
        }
        // Sets, not multisets: a query that repeats a part of itself changes only its set
        // operators. Set operators themselves keep their count.
        for (component, items) in features.items.iter_mut() {
            if *component != Component::SetOperation {
                let mut seen = HashSet::new();
                items.retain(|item| seen.insert(item.full.clone()));
            }
        }
        features
    }

    fn push(&mut self, component: Component, item: Item) {
        self.items.entry(component).or_default().push(item);
    }
}

impl Features {
    /// Records a query's clauses, then those of its CTEs, body parts and FROM subqueries.
    fn query(&mut self, query: &Query) {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.query(&cte.query);
            }
        }
        if let Some(order_by) = &query.order_by {
            if let OrderByKind::Expressions(keys) = &order_by.kind {
                for key in keys {
                    let suffix = key.options.to_string();
                    self.push(Component::OrderBy, Item::of_expr_with(&key.expr, &suffix));
                }
            }
        }
        if let Some(limit) = &query.limit_clause {
            let text = match limit {
                LimitClause::LimitOffset { .. } | LimitClause::OffsetCommaLimit { .. } => {
                    limit.to_string()
                }
            };
            self.push(Component::Limit, Item::text(text.trim()));
        }
        self.set_expr(&query.body);
    }

    fn set_expr(&mut self, body: &SetExpr) {
        match body {
            SetExpr::Select(select) => {
                if select.distinct.is_some() {
                    self.push(Component::Distinct, Item::text("DISTINCT"));
                }
                for item in &select.projection {
                    let item = match item {
                        SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                            Item::of_expr(expr)
                        }
                        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                            Item::text("*")
                        }
                    };
                    self.projection_order.push(item.full.clone());
                    self.push(Component::Projection, item);
                }
                if select.from.is_empty() {
                    self.selects_without_from += 1;
                }
                for table in &select.from {
                    self.table_with_joins(table);
                }
                if let Some(selection) = &select.selection {
                    let mut conjuncts = Vec::new();
                    split_and(selection, &mut conjuncts);
                    for conjunct in conjuncts {
                        self.push(Component::Where, Item::of_expr(conjunct));
                    }
                }
                if let GroupByExpr::Expressions(keys, _) = &select.group_by {
                    for key in keys {
                        self.push(Component::GroupBy, Item::of_expr(key));
                    }
                }
                if let Some(having) = &select.having {
                    self.push(Component::Having, Item::of_expr(having));
                }
            }
            SetExpr::SetOperation {
                op,
                set_quantifier,
                left,
                right,
            } => {
                self.push(
                    Component::SetOperation,
                    Item::text(format!("{op} {set_quantifier}").trim().to_string()),
                );
                self.set_expr(left);
                self.set_expr(right);
            }
            SetExpr::Query(query) => self.query(query),
            other => self.push(Component::SetOperation, Item::text(other.to_string())),
        }
    }

    fn table_with_joins(&mut self, table: &TableWithJoins) {
        self.table_factor(&table.relation);
        for join in &table.joins {
            self.table_factor(&join.relation);
            self.push(Component::Joins, Item::text(join_text(&join.join_operator)));
        }
    }

    fn table_factor(&mut self, factor: &TableFactor) {
        match factor {
            TableFactor::Table { name, .. } => {
                let name = name
                    .0
                    .last()
                    .and_then(|part| part.as_ident())
                    .map(|ident| ident.value.to_lowercase())
                    .unwrap_or_default();
                self.push(Component::Tables, Item::text(name));
            }
            TableFactor::Derived { subquery, .. } => self.query(subquery),
            TableFactor::NestedJoin {
                table_with_joins, ..
            } => self.table_with_joins(table_with_joins),
            other => self.push(Component::Tables, Item::text(other.to_string())),
        }
    }
}

fn split_and<'e>(expr: &'e Expr, out: &mut Vec<&'e Expr>) {
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            split_and(left, out);
            split_and(right, out);
        }
        Expr::Nested(inner)
            if matches!(
                **inner,
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            split_and(inner, out)
        }
        other => out.push(other),
    }
}

/// A join's condition with equality sides and conjuncts in a canonical order, so that
/// `a = b` and `b = a` compare equal.
fn join_text(operator: &JoinOperator) -> String {
    let constraint = match operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c) => c,
        other => return format!("{other:?}"),
    };
    match constraint {
        JoinConstraint::On(expr) => {
            let mut conjuncts = Vec::new();
            split_and(expr, &mut conjuncts);
            let mut parts: Vec<String> = conjuncts
                .into_iter()
                .map(|c| match c {
                    Expr::BinaryOp {
                        left,
                        op: BinaryOperator::Eq,
                        right,
                    } => {
                        let mut sides = [left.to_string(), right.to_string()];
                        sides.sort();
                        format!("{} = {}", sides[0], sides[1])
                    }
                    other => other.to_string(),
                })
                .collect();
            parts.sort();
            format!("ON {}", parts.join(" AND "))
        }
        JoinConstraint::Using(columns) => {
            let mut names: Vec<String> = columns
                .iter()
                .map(|c| c.to_string().to_lowercase())
                .collect();
            names.sort();
            format!("USING {}", names.join(", "))
        }
        JoinConstraint::Natural => "NATURAL".to_string(),
        JoinConstraint::None => "no condition".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> ReferenceSchema {
        ReferenceSchema::new([
            ("singer", vec!["singer_id", "name", "country", "age"]),
            ("concert", vec!["concert_id", "year"]),
            ("singer_in_concert", vec!["singer_id", "concert_id"]),
        ])
    }

    fn label(pred: &str, gold: &str, status: Status) -> FailureType {
        reference_label(pred, gold, status, &schema())
            .unwrap()
            .failure_type
    }

    #[test]
    fn labels_follow_the_kind_of_difference() {
        let mismatch = Status::DenotationMismatch;
        let gold = "SELECT name FROM singer WHERE age > 20 AND country = \"France\"";
        assert_eq!(
            label(
                "SELECT nme FROM singer WHERE age > 20 AND country = 'France'",
                gold,
                Status::ExecutionError
            ),
            FailureType::SchemaLinking
        );
        assert_eq!(
            label(
                "SELECT name FROM singer WHERE age > 21 AND country = 'France'",
                gold,
                mismatch
            ),
            FailureType::FilterValue
        );
        assert_eq!(
            label("SELECT name FROM singer WHERE age > 20", gold, mismatch),
            FailureType::FilterValue
        );
        assert_eq!(
            label(
                "SELECT name FROM singer WHERE age > 20 AND country = 'France' ORDER BY name",
                gold,
                mismatch
            ),
            FailureType::ResultMismatch
        );
        assert_eq!(
            label(
                "SELECT max(age) FROM singer",
                "SELECT min(age) FROM singer",
                mismatch
            ),
            FailureType::Aggregation
        );
        assert_eq!(
            label("SELEC name FROM singer", gold, Status::ExecutionError),
            FailureType::Syntax
        );
        assert_eq!(
            label("SELECT 1", gold, Status::Timeout),
            FailureType::Execution
        );
    }

    #[test]
    fn aliases_and_qualifiers_are_ignored() {
        let gold = "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id";
        let renamed = "SELECT a.name FROM singer AS a JOIN singer_in_concert AS b ON b.singer_id = a.singer_id";
        let found = reference_label(renamed, gold, Status::DenotationMismatch, &schema()).unwrap();
        assert_eq!(found.failure_type, FailureType::ResultMismatch);
        assert_eq!(found.reason, "no structural difference found");
        let dropped = "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2";
        assert_eq!(
            label(dropped, gold, Status::DenotationMismatch),
            FailureType::SchemaLinking
        );
    }

    #[test]
    fn unknown_double_quoted_names_are_strings_and_count_as_schema_linking() {
        let gold = "SELECT name FROM singer ORDER BY age";
        assert_eq!(
            label(
                "SELECT name FROM singer ORDER BY \"ages\"",
                gold,
                Status::DenotationMismatch
            ),
            FailureType::SchemaLinking
        );
        // A double-quoted value in both queries is the same string literal.
        let gold = "SELECT name FROM singer WHERE country = \"France\"";
        assert_eq!(
            label(
                "SELECT name FROM singer WHERE country = 'France' LIMIT 1",
                gold,
                Status::DenotationMismatch
            ),
            FailureType::ResultMismatch
        );
    }

    #[test]
    fn repeated_parts_compound_parts_and_lost_from_clauses() {
        let mismatch = Status::DenotationMismatch;
        // A query repeating the gold differs only in its set operator.
        let gold = "SELECT count(*) FROM singer";
        assert_eq!(
            label(
                "SELECT count(*) FROM singer UNION ALL SELECT count(*) FROM singer",
                gold,
                mismatch
            ),
            FailureType::ResultMismatch
        );
        // A wrong column in one part of a compound query.
        let gold = "SELECT name FROM singer INTERSECT SELECT name FROM singer WHERE age > 3";
        assert_eq!(
            label(
                "SELECT names FROM singer INTERSECT SELECT name FROM singer WHERE age > 3",
                gold,
                Status::ExecutionError
            ),
            FailureType::SchemaLinking
        );
        // FROM dropped from one part.
        assert_eq!(
            label(
                "SELECT name singer INTERSECT SELECT name FROM singer WHERE age > 3",
                gold,
                Status::ExecutionError
            ),
            FailureType::Syntax
        );
        // A select item replaced by NULL is a projection error; an impossible filter is a
        // filter error; an aggregate swapped inside a subquery condition is aggregation.
        assert_eq!(
            label(
                "SELECT NULL FROM singer",
                "SELECT name FROM singer",
                mismatch
            ),
            FailureType::ResultMismatch
        );
        assert_eq!(
            label(
                "SELECT * FROM (SELECT name FROM singer) WHERE 1 = 0",
                "SELECT name FROM singer",
                mismatch
            ),
            FailureType::FilterValue
        );
        assert_eq!(
            label(
                "SELECT name FROM singer WHERE age > (SELECT min(age) FROM singer)",
                "SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)",
                mismatch
            ),
            FailureType::Aggregation
        );
    }

    #[test]
    fn correct_and_unparseable_gold_are_refused() {
        let schema = schema();
        assert_eq!(
            reference_label("SELECT 1", "SELECT 1", Status::Correct, &schema),
            Err(ReferenceError::NotAFailure)
        );
        assert!(matches!(
            reference_label("SELECT 1", "SELEC 1", Status::DenotationMismatch, &schema),
            Err(ReferenceError::GoldUnparseable(_))
        ));
    }
}
