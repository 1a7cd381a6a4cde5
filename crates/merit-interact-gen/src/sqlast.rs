//! What the generator needs from `sqlparser`: parsing one SELECT, a normalised text for
//! deduplication, the AST skeleton (literals and identifiers masked), and structural features
//! (JOIN, window functions) for the statistics.

use sqlparser::ast::{
    Expr, Ident, ObjectName, Query, SelectItem, SetExpr, Statement, TableFactor, Value, VisitMut,
    Visitor, VisitorMut,
};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// Parses `sql` as exactly one query (SELECT, set operation or WITH). Anything else, or more
/// than one statement, is `None`: the generator only makes read tasks.
pub fn parse_query(sql: &str) -> Option<Query> {
    let statements = Parser::parse_sql(&SQLiteDialect {}, sql).ok()?;
    let mut statements = statements.into_iter();
    match (statements.next(), statements.next()) {
        (Some(Statement::Query(query)), None) => Some(*query),
        _ => None,
    }
}

/// The normalised form used to deduplicate targets: `sqlparser`'s canonical rendering with
/// ASCII letters lower-cased outside single-quoted literals (SQLite identifiers and keywords
/// are case-insensitive, string values are not) and whitespace runs collapsed.
pub fn canonical_query_text(sql: &str) -> Option<String> {
    parse_query(sql).map(|q| canonical_rendered_text(&q.to_string()))
}

/// [`canonical_query_text`] for an already rendered query.
pub(crate) fn canonical_rendered_text(rendered: &str) -> String {
    let mut out = String::with_capacity(rendered.len());
    let mut in_string = false;
    let mut last_space = false;
    for c in rendered.chars() {
        if c == '\'' {
            in_string = !in_string;
        }
        if !in_string && c.is_whitespace() {
            if !last_space {
                out.push(' ');
            }
            last_space = true;
            continue;
        }
        last_space = false;
        out.push(if in_string { c } else { c.to_ascii_lowercase() });
    }
    out.trim().to_string()
}

/// Every string literal of a query: single-quoted values and double-quoted tokens (SQLite
/// reads `"x"` as a string when no column is called `x`, and Spider's gold SQL relies on it).
/// A user may legitimately say these words, so the leak check allows them.
pub fn string_literals(query: &Query) -> Vec<String> {
    struct Collect(Vec<String>);
    impl Visitor for Collect {
        type Break = ();
        fn pre_visit_value(&mut self, value: &Value) -> ControlFlow<()> {
            if let Some(text) = value_text(value) {
                self.0.push(text.to_string());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if let Expr::Identifier(ident) = expr {
                if ident.quote_style == Some('"') {
                    self.0.push(ident.value.clone());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut collect = Collect(Vec::new());
    let _ = sqlparser::ast::Visit::visit(query, &mut collect);
    collect.0
}

fn value_text(value: &Value) -> Option<&str> {
    match value {
        Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => Some(s),
        _ => None,
    }
}

/// Table aliases and select-item aliases of a query, at every level.
pub fn aliases(query: &Query) -> Vec<String> {
    struct Collect(Vec<String>);
    impl Visitor for Collect {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                alias: Some(alias), ..
            }
            | TableFactor::Derived {
                alias: Some(alias), ..
            } = factor
            {
                self.0.push(alias.name.value.clone());
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            for_each_select(&query.body, &mut |select| {
                for item in &select.projection {
                    if let SelectItem::ExprWithAlias { alias, .. } = item {
                        self.0.push(alias.value.clone());
                    }
                }
            });
            ControlFlow::Continue(())
        }
    }
    let mut collect = Collect(Vec::new());
    let _ = sqlparser::ast::Visit::visit(query, &mut collect);
    collect.0
}

/// Calls `f` on every SELECT of a query body (both sides of UNION/INTERSECT/EXCEPT and
/// parenthesised bodies), not on sub-queries in expressions or FROM.
pub(crate) fn for_each_select(body: &SetExpr, f: &mut dyn FnMut(&sqlparser::ast::Select)) {
    match body {
        SetExpr::Select(select) => f(select),
        SetExpr::Query(query) => for_each_select(&query.body, f),
        SetExpr::SetOperation { left, right, .. } => {
            for_each_select(left, f);
            for_each_select(right, f);
        }
        _ => {}
    }
}

fn for_each_select_mut(body: &mut SetExpr, f: &mut dyn FnMut(&mut sqlparser::ast::Select)) {
    match body {
        SetExpr::Select(select) => f(select),
        SetExpr::Query(query) => for_each_select_mut(&mut query.body, f),
        SetExpr::SetOperation { left, right, .. } => {
            for_each_select_mut(left, f);
            for_each_select_mut(right, f);
        }
        _ => {}
    }
}

/// The AST skeleton: the query with every literal replaced by `?`, every column reference by
/// `c`, every table by `t` and every alias by `a`, rendered and normalised. Two queries share a
/// skeleton when they differ only in which schema objects and constants they use; function
/// names, operators and clause structure stay.
pub fn skeleton(query: &Query) -> String {
    struct Mask;
    impl VisitorMut for Mask {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            if let Some(with) = &mut query.with {
                for cte in &mut with.cte_tables {
                    cte.alias.name = Ident::new("a");
                }
            }
            for_each_select_mut(&mut query.body, &mut |select| {
                for item in &mut select.projection {
                    if let SelectItem::ExprWithAlias { alias, .. } = item {
                        *alias = Ident::new("a");
                    }
                }
            });
            ControlFlow::Continue(())
        }
        fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
            if let TableFactor::Table {
                alias: Some(alias), ..
            }
            | TableFactor::Derived {
                alias: Some(alias), ..
            } = factor
            {
                alias.name = Ident::new("a");
            }
            ControlFlow::Continue(())
        }
        fn pre_visit_relation(&mut self, relation: &mut ObjectName) -> ControlFlow<()> {
            *relation = ObjectName::from(vec![Ident::new("t")]);
            ControlFlow::Continue(())
        }
        fn pre_visit_value(&mut self, value: &mut Value) -> ControlFlow<()> {
            *value = Value::Placeholder("?".to_string());
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
            if matches!(expr, Expr::Identifier(_) | Expr::CompoundIdentifier(_)) {
                *expr = Expr::Identifier(Ident::new("c"));
            }
            ControlFlow::Continue(())
        }
    }
    let mut masked = query.clone();
    let _ = masked.visit(&mut Mask);
    canonical_rendered_text(&masked.to_string())
}

/// Structural features of one query, for the statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlFeatures {
    /// See [`skeleton`].
    pub skeleton: String,
    /// Some SELECT (at any depth) joins tables: an explicit JOIN or several FROM items.
    pub has_join: bool,
    /// Some function call has an OVER clause.
    pub has_window: bool,
}

/// Features of `sql`, or `None` when it does not parse as one query.
pub fn features(sql: &str) -> Option<SqlFeatures> {
    struct Scan {
        join: bool,
        window: bool,
    }
    impl Visitor for Scan {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            for_each_select(&query.body, &mut |select| {
                if select.from.len() > 1 || select.from.iter().any(|t| !t.joins.is_empty()) {
                    self.join = true;
                }
            });
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<()> {
            if let Expr::Function(function) = expr {
                if function.over.is_some() {
                    self.window = true;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let query = parse_query(sql)?;
    let mut scan = Scan {
        join: false,
        window: false,
    };
    let _ = sqlparser::ast::Visit::visit(&query, &mut scan);
    Some(SqlFeatures {
        skeleton: skeleton(&query),
        has_join: scan.join,
        has_window: scan.window,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_keeps_string_case_only() {
        assert_eq!(
            canonical_query_text("select  Name from SINGER where Country = 'France'").unwrap(),
            "select name from singer where country = 'France'"
        );
        assert!(canonical_query_text("DELETE FROM singer").is_none());
        assert!(canonical_query_text("SELECT 1; SELECT 2").is_none());
    }

    #[test]
    fn skeleton_masks_names_and_constants() {
        let a = parse_query("SELECT T1.name, count(*) AS n FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.sid WHERE T1.age > 30 GROUP BY T1.name").unwrap();
        let b = parse_query("SELECT x.title, count(*) AS m FROM song AS x JOIN album AS y ON x.k = y.k WHERE x.len > 2 GROUP BY x.title").unwrap();
        let c = parse_query("SELECT T1.name, max(T1.age) FROM singer AS T1").unwrap();
        assert_eq!(skeleton(&a), skeleton(&b));
        assert_ne!(skeleton(&a), skeleton(&c));
        assert!(!skeleton(&a).contains("singer"));
        assert!(!skeleton(&a).contains("30"));
    }

    #[test]
    fn features_find_joins_and_windows() {
        let f = features("SELECT a FROM t JOIN u ON t.x = u.x").unwrap();
        assert!(f.has_join && !f.has_window);
        let f = features("SELECT a FROM t WHERE a IN (SELECT b FROM u, v)").unwrap();
        assert!(f.has_join);
        let f = features("SELECT rank() OVER (ORDER BY a) FROM t").unwrap();
        assert!(!f.has_join && f.has_window);
    }

    #[test]
    fn literals_and_aliases_are_collected() {
        let q = parse_query(
            "SELECT T1.name AS nm FROM singer AS T1 WHERE T1.country = 'New_Zealand' OR T1.x = \"Some_Value\"",
        )
        .unwrap();
        assert_eq!(string_literals(&q), vec!["New_Zealand", "Some_Value"]);
        let mut found = aliases(&q);
        found.sort();
        assert_eq!(found, vec!["T1", "nm"]);
    }
}
