//! `Evaluator.eval_hardness` from the official `evaluation.py`.
//!
//! Only the top-level query is inspected, as in the original: nested queries count as
//! "component2" but their own clauses are not looked at. Condition lists are sliced by
//! position (`[::2]` for units, `[1::2]` for connectors), exactly as Python does, which
//! matters for its quirks (e.g. every `and`/`or` in HAVING counts as an aggregation,
//! because `count_agg` is applied to the whole HAVING list and `'and'[0] != 0`).

use merit_core::Hardness;

use super::parse::{AggOp, CondItem, ParsedSql, Value, WhereOp};

/// Elements at even positions (`conds[::2]`).
fn evens(items: &[CondItem]) -> impl Iterator<Item = &CondItem> {
    items.iter().step_by(2)
}

/// Elements at odd positions (`conds[1::2]`).
fn odds(items: &[CondItem]) -> impl Iterator<Item = &CondItem> {
    items.iter().skip(1).step_by(2)
}

fn all_conditions(sql: &ParsedSql) -> [&[CondItem]; 3] {
    [&sql.from.conds, &sql.where_, &sql.having]
}

/// `has_agg(unit)` applied to a condition-list element: `unit[0] != 0`. For a condition
/// unit `unit[0]` is its `not` flag; for a connector string it is its first letter, which
/// is never equal to 0.
fn cond_item_has_agg(item: &CondItem) -> bool {
    match item {
        CondItem::Cond(c) => c.not,
        CondItem::And | CondItem::Or => true,
    }
}

/// `count_component1`: WHERE, GROUP BY, ORDER BY, LIMIT, each extra FROM unit, each `or`
/// and each `like`.
fn count_component1(sql: &ParsedSql) -> usize {
    let mut count = 0;
    count += usize::from(!sql.where_.is_empty());
    count += usize::from(!sql.group_by.is_empty());
    count += usize::from(sql.order_by.is_some());
    count += usize::from(sql.limit.is_some());
    count += sql.from.table_units.len().saturating_sub(1);
    for list in all_conditions(sql) {
        count += odds(list).filter(|c| matches!(c, CondItem::Or)).count();
        count += evens(list)
            .filter(|c| matches!(c, CondItem::Cond(u) if u.op == WhereOp::Like))
            .count();
    }
    count
}

/// `count_component2`: `len(get_nestedSQL(sql))`, sub-queries used as condition values plus
/// INTERSECT/EXCEPT/UNION. (FROM sub-queries are not counted.) A connector in a unit slot,
/// where Python would raise, contributes nothing; `parse_spider_sql` never returns such a tree.
fn count_component2(sql: &ParsedSql) -> usize {
    let mut nested = 0;
    for list in all_conditions(sql) {
        for item in evens(list) {
            if let CondItem::Cond(c) = item {
                nested += usize::from(matches!(c.val1, Value::Sql(_)));
                nested += usize::from(matches!(c.val2, Some(Value::Sql(_))));
            }
        }
    }
    nested += usize::from(sql.intersect.is_some());
    nested += usize::from(sql.except.is_some());
    nested += usize::from(sql.union.is_some());
    nested
}

/// `count_others`: more than one "aggregation", more than one select item, more than one
/// WHERE element, more than one GROUP BY column.
fn count_others(sql: &ParsedSql) -> usize {
    let mut agg_count = sql.select.iter().filter(|s| s.agg != AggOp::None).count();
    agg_count += evens(&sql.where_).filter(|c| cond_item_has_agg(c)).count();
    agg_count += sql.group_by.iter().filter(|c| c.agg != AggOp::None).count();
    if let Some(order) = &sql.order_by {
        agg_count += order
            .val_units
            .iter()
            .filter(|v| v.left.agg != AggOp::None)
            .count();
        agg_count += order
            .val_units
            .iter()
            .filter(|v| v.right.as_ref().is_some_and(|r| r.agg != AggOp::None))
            .count();
    }
    agg_count += sql.having.iter().filter(|c| cond_item_has_agg(c)).count();

    let mut count = 0;
    count += usize::from(agg_count > 1);
    count += usize::from(sql.select.len() > 1);
    count += usize::from(sql.where_.len() > 1);
    count += usize::from(sql.group_by.len() > 1);
    count
}

/// `Evaluator().eval_hardness(sql)`: the official Spider difficulty of a parsed gold.
pub fn hardness_of(parsed: &ParsedSql) -> Hardness {
    let comp1 = count_component1(parsed);
    let comp2 = count_component2(parsed);
    let others = count_others(parsed);
    // The three tests of the Python `if`/`elif` chain (a later one only matters when the
    // earlier ones failed).
    let easy = comp1 <= 1 && others == 0 && comp2 == 0;
    let medium =
        (others <= 2 && comp1 <= 1 && comp2 == 0) || (comp1 <= 2 && others < 2 && comp2 == 0);
    // Python: `(others > 2 and comp1 <= 2 and comp2 == 0) or (2 < comp1 <= 3 and
    // others <= 2 and comp2 == 0) or (comp1 <= 1 and others == 0 and comp2 <= 1)`.
    let hard = (comp2 == 0 && ((others > 2 && comp1 <= 2) || (comp1 == 3 && others <= 2)))
        || (comp1 <= 1 && others == 0 && comp2 <= 1);
    if easy {
        Hardness::Easy
    } else if medium {
        Hardness::Medium
    } else if hard {
        Hardness::Hard
    } else {
        Hardness::Extra
    }
}
