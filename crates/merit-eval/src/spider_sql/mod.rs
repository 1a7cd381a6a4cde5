//! Spider's `process_sql` parser and `Evaluator.eval_hardness`, reimplemented.
//!
//! This mirrors the official test-suite evaluator (taoyds/test-suite-sql-eval,
//! `process_sql.py` and `evaluation.py`) closely enough to reproduce its hardness label
//! on every gold, including the golds it cannot parse at all. The NLTK tokenization is the
//! one of `nltk.word_tokenize(s, preserve_line=True)` (no punkt sentence split); golds whose
//! tokens punkt could change are reported as unknown (see [`is_punkt_sensitive`]).

mod error;
mod hardness;
mod parse;
mod schema;
mod tokenize;

pub use error::SpiderParseError;
pub use hardness::hardness_of;
pub use parse::{
    parse_spider_sql, AggOp, ColUnit, CondItem, CondUnit, FromClause, OrderBy, OrderDir, ParsedSql,
    SelectItem, TableUnit, UnitOp, ValUnit, Value, WhereOp, MAX_NESTING_DEPTH,
};
pub use schema::SpiderSchema;
pub use tokenize::spider_tokenize;

use merit_core::Hardness;

/// Characters after which punkt considers a sentence break without any whitespace:
/// its `_re_non_word_chars` (`)";}]*:@'({[`, curly quotes, guillemets, `!`, `?`).
const PUNKT_NON_WORD: &[char] = &[
    ')', '"', ';', '}', ']', '*', ':', '@', '\'', '(', '{', '[', '\u{2018}', '\u{2019}',
    '\u{201c}', '\u{201d}', '\u{ab}', '\u{bb}', '!', '?',
];

/// Whether the official `nltk.word_tokenize` (with its punkt sentence split) could tokenize
/// this query differently from the `preserve_line=True` tokenizer implemented here.
///
/// Punkt can only break a sentence at a candidate found by its `period_context_re`: a `.`,
/// `?` or `!` immediately followed either by one of its non-word characters
/// (`) " ; } ] * : @ ' ( { [`, `‘ ’ “ ” « »`, `!`, `?`) or by whitespace and then some
/// non-whitespace character. A query is *punkt-sensitive* when such a candidate occurs in
/// the text that `process_sql` hands to NLTK, i.e. outside string literals (after `'` is
/// turned into `"` and every quoted span is replaced by its `__val_i_j__` key). Whether
/// punkt would actually split there depends on its trained model, so this is a
/// conservative superset. Examples: `a ! = 1` is sensitive, `a != 1`, `t1.name`, `1.5` and
/// `'Mr. X'` are not.
///
/// Returns `false` for a query with unbalanced quotes: `process_sql` rejects it before
/// NLTK sees it.
pub fn is_punkt_sensitive(sql: &str) -> bool {
    match tokenize::replace_literals(sql) {
        Ok(replaced) => has_punkt_candidate(&replaced.text),
        Err(_) => false,
    }
}

fn has_punkt_candidate(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    chars.iter().enumerate().any(|(i, &c)| {
        if !matches!(c, '.' | '?' | '!') {
            return false;
        }
        match chars.get(i + 1) {
            Some(n) if PUNKT_NON_WORD.contains(n) => true,
            // `\s+(?P<next_tok>\S+)`: whitespace, then something that is not whitespace.
            Some(n) if n.is_whitespace() => chars[i + 1..].iter().any(|c| !c.is_whitespace()),
            _ => false,
        }
    })
}

/// The official hardness of a gold query, as `Evaluator().eval_hardness(get_sql(schema, gold))`
/// gives it.
///
/// `None` when `process_sql` cannot parse the gold (the official `evaluate()` would crash on
/// that example), or when the gold is punkt-sensitive ([`is_punkt_sensitive`]), where the
/// official result depends on punkt's model and is not reproduced.
pub fn spider_hardness(schema: &SpiderSchema, gold_sql: &str) -> Option<Hardness> {
    if is_punkt_sensitive(gold_sql) {
        return None;
    }
    parse_spider_sql(schema, gold_sql)
        .ok()
        .map(|p| hardness_of(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> SpiderSchema {
        SpiderSchema::new([
            (
                "Singer".to_string(),
                vec![
                    "Singer_ID".to_string(),
                    "Name".to_string(),
                    "Country".to_string(),
                    "Age".to_string(),
                ],
            ),
            (
                "concert".to_string(),
                vec![
                    "concert_ID".to_string(),
                    "singer_id".to_string(),
                    "year".to_string(),
                ],
            ),
        ])
    }

    fn hardness(sql: &str) -> Hardness {
        let parsed = parse_spider_sql(&schema(), sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        hardness_of(&parsed)
    }

    #[test]
    fn hardness_buckets() {
        assert_eq!(hardness("SELECT count(*) FROM singer"), Hardness::Easy);
        assert_eq!(
            hardness("SELECT name FROM singer WHERE age > 20"),
            Hardness::Easy
        );
        assert_eq!(
            hardness("SELECT name, country FROM singer WHERE age > 20"),
            Hardness::Medium
        );
        assert_eq!(
            hardness(
                "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id"
            ),
            Hardness::Easy
        );
        assert_eq!(
            hardness("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)"),
            Hardness::Hard
        );
        assert_eq!(
            hardness(
                "SELECT country FROM singer WHERE age > 40 INTERSECT SELECT country FROM singer WHERE age < 30"
            ),
            Hardness::Hard
        );
        assert_eq!(
            hardness(
                "SELECT name, country, age FROM singer WHERE age > 1 OR age < 3 ORDER BY age DESC LIMIT 3"
            ),
            Hardness::Extra
        );
        assert_eq!(
            hardness(
                "SELECT country FROM singer WHERE age > 1 AND name LIKE 'a%' ORDER BY age LIMIT 1"
            ),
            Hardness::Extra
        );
        // An aggregate inside a HAVING condition is not counted, but every `and`/`or` in
        // HAVING is (count_agg runs over the whole HAVING list): two of them make the
        // "more than one aggregation" feature fire.
        assert_eq!(
            hardness(
                "SELECT country FROM singer GROUP BY country HAVING count(*) > 1 AND count(*) < 5"
            ),
            Hardness::Easy
        );
        assert_eq!(
            hardness(
                "SELECT country FROM singer GROUP BY country HAVING count(*) > 1 AND count(*) < 5 AND count(*) != 3"
            ),
            Hardness::Medium
        );
    }

    #[test]
    fn tree_shape() {
        let p = parse_spider_sql(
            &schema(),
            "SELECT DISTINCT count(DISTINCT T1.name) FROM singer AS T1 WHERE T1.age BETWEEN 1 AND 'x' \
             ORDER BY age DESC LIMIT 5",
        )
        .unwrap();
        assert!(p.select_distinct);
        assert_eq!(p.select[0].agg, AggOp::Count);
        assert_eq!(p.select[0].val_unit.left.col_id, "__singer.name__");
        assert!(p.select[0].val_unit.left.distinct);
        assert_eq!(p.from.table_units, [TableUnit::Table("__singer__".into())]);
        match &p.where_[..] {
            [CondItem::Cond(c)] => {
                assert_eq!(c.op, WhereOp::Between);
                assert_eq!(c.val1, Value::Number(1.0));
                assert_eq!(c.val2, Some(Value::Str("\"x\"".into())));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(p.order_by.as_ref().unwrap().dir, OrderDir::Desc);
        // process_sql never reads the limit number.
        assert_eq!(p.limit, Some(1));
    }

    #[test]
    fn parse_errors_are_errors() {
        let s = schema();
        for sql in [
            "",
            "SELECT name FROM singer WHERE name = 'x",
            "SELECT nope FROM singer",
            "SELECT name FROM nowhere",
            "SELECT T9.name FROM singer AS T1",
            "SELECT name FROM singer AS T1, concert AS T2",
            "SELECT name AS n FROM singer",
            "SELECT name FROM singer AS concert",
            "SELECT name FROM singer LIMIT",
            "SELECT name FROM singer WHERE age",
            "SELECT name FROM singer WHERE age BETWEEN 1",
            "SELECT name FROM singer UNION ALL SELECT name FROM singer",
            "SELECT name FROM singer UNION",
            "SELECT count( FROM singer",
            "SELECT a.b.c FROM singer",
            "SELECT name FROM singer AS",
            "SELECT name FROM singer WHERE age = 1 age = 2 AND age = 3",
            "SELECT name",
            "(SELECT name FROM singer",
            "SELECT year(curdate()) FROM singer",
        ] {
            let err = parse_spider_sql(&s, sql).expect_err(sql);
            assert!(!err.to_string().is_empty());
            assert_eq!(spider_hardness(&s, sql), None, "{sql}");
        }
        let err = parse_spider_sql(&s, "SELECT nope FROM singer").unwrap_err();
        assert_eq!(err.token(), Some("nope"));
        assert_eq!(err.token_index(), Some(1));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let s = schema();
        let mut sql = String::from("SELECT name FROM singer");
        for _ in 0..(MAX_NESTING_DEPTH + 5) {
            sql = format!("SELECT name FROM singer WHERE age IN ({sql})");
        }
        assert!(parse_spider_sql(&s, &sql).is_err());
        let mut ok = String::from("SELECT name FROM singer");
        for _ in 0..(MAX_NESTING_DEPTH - 2) {
            ok = format!("SELECT name FROM singer WHERE age IN ({ok})");
        }
        assert_eq!(spider_hardness(&s, &ok), Some(Hardness::Hard));
    }

    #[test]
    fn punkt_sensitivity() {
        assert!(is_punkt_sensitive("SELECT a FROM t WHERE a ! = 'x'"));
        assert!(is_punkt_sensitive("SELECT t1.* FROM t AS t1"));
        assert!(is_punkt_sensitive("SELECT a FROM t. WHERE b = 1"));
        assert!(!is_punkt_sensitive("SELECT a FROM t WHERE a != 'x. Y'"));
        assert!(!is_punkt_sensitive(
            "SELECT T1.a FROM t AS T1 WHERE b = 1.5"
        ));
        assert!(!is_punkt_sensitive("SELECT a FROM t ."));
        assert!(!is_punkt_sensitive("SELECT a FROM t WHERE a = 'x"));
        assert_eq!(
            spider_hardness(&schema(), "SELECT name FROM singer WHERE name ! = 'x'"),
            None
        );
        assert_eq!(
            spider_hardness(&schema(), "SELECT name FROM singer WHERE name != 'x'"),
            Some(Hardness::Easy)
        );
    }
}
