//! Denotation comparison: Spider's bag-with-column-permutation match and BIRD's set match.
//!
//! Spider's reference `result_eq` enumerates column permutations (pruned by sampling random
//! rows) and can run for hours on wide results with many interchangeable columns. The search
//! here decides the same question exactly — "is there a bijection of columns under which the
//! row multisets (or row sequences, when order matters) are equal?" — with pruning that never
//! drops a valid permutation: column-multiset candidates, symmetry breaking between identical
//! columns, and a multiset check on every partial assignment. A work budget bounds the rare
//! cases that stay hard; exceeding it is reported as [`Equivalence::Undecided`].

use crate::python::{unorder_row, PyValue};
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

/// A result as the evaluators see it: rows of Python values.
pub type Rows = Vec<Vec<PyValue>>;

/// The outcome of comparing two denotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Equivalence {
    /// The official comparison would return true.
    Equal,
    /// The official comparison would return false.
    Different,
    /// The permutation search ran out of its work budget before deciding.
    Undecided,
}

/// Cells the permutation search may visit before giving up (about a second of work).
pub const DEFAULT_SEARCH_BUDGET: u64 = 200_000_000;

/// Spider's `result_eq(gold, pred, order_matters)`, decided exactly.
pub fn spider_result_eq(gold: &Rows, pred: &Rows, order_matters: bool, budget: u64) -> Equivalence {
    use Equivalence::*;
    if gold.is_empty() && pred.is_empty() {
        return Equal;
    }
    if gold.len() != pred.len() {
        return Different;
    }
    let width = gold[0].len();
    if pred[0].len() != width {
        return Different;
    }
    if !quick_accept(gold, pred, order_matters) {
        return Different;
    }
    if width == 1 {
        return if order_matters || multiset_equal(gold, pred) {
            // quick_accept already compared the (single-value) rows in order when it matters.
            Equal
        } else {
            Different
        };
    }
    if order_matters {
        return bool_to_eq(columns_match_in_order(gold, pred, width));
    }
    PermutationSearch::new(gold, pred, width, budget).run()
}

fn bool_to_eq(equal: bool) -> Equivalence {
    if equal {
        Equivalence::Equal
    } else {
        Equivalence::Different
    }
}

/// Spider's `quick_rej` (true means "not rejected"): compares rows after sorting each row's
/// values by their Python `str + type` key, as a sequence or as a set.
fn quick_accept(gold: &Rows, pred: &Rows, order_matters: bool) -> bool {
    let gold_unordered = gold.iter().map(|row| unorder_row(row));
    let pred_unordered = pred.iter().map(|row| unorder_row(row));
    if order_matters {
        gold_unordered.eq(pred_unordered)
    } else {
        let gold_set: HashSet<Vec<PyValue>> = gold_unordered.collect();
        let pred_set: HashSet<Vec<PyValue>> = pred_unordered.collect();
        gold_set == pred_set
    }
}

/// Multiset equality of rows (Python tuple equality).
fn multiset_equal(left: &Rows, right: &Rows) -> bool {
    if left.len() != right.len() {
        return false;
    }
    let mut counts: HashMap<&[PyValue], i64> = HashMap::with_capacity(left.len());
    for row in left {
        *counts.entry(row.as_slice()).or_default() += 1;
    }
    for row in right {
        match counts.get_mut(row.as_slice()) {
            Some(count) if *count > 0 => *count -= 1,
            _ => return false,
        }
    }
    true
}

/// With order mattering, rows are equal after a column permutation exactly when the gold
/// columns and the predicted columns are the same multiset of column sequences (column
/// equality is an equivalence relation, so a perfect matching exists iff class sizes agree).
fn columns_match_in_order(gold: &Rows, pred: &Rows, width: usize) -> bool {
    let column = |rows: &Rows, index: usize| -> Vec<PyValue> {
        rows.iter().map(|row| row[index].clone()).collect()
    };
    let mut counts: HashMap<Vec<PyValue>, i64> = HashMap::new();
    for index in 0..width {
        *counts.entry(column(gold, index)).or_default() += 1;
    }
    for index in 0..width {
        match counts.get_mut(&column(pred, index)) {
            Some(count) if *count > 0 => *count -= 1,
            _ => return false,
        }
    }
    true
}

fn value_hash(value: &PyValue) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

fn combine(accumulator: u64, value: u64) -> u64 {
    (accumulator ^ value)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(29)
        .wrapping_add(0x632B_E59B_D9B4_E019)
}

/// Backtracking search over column bijections for the bag (unordered) case.
struct PermutationSearch<'a> {
    gold: &'a Rows,
    pred: &'a Rows,
    width: usize,
    gold_hashes: Vec<Vec<u64>>,
    pred_hashes: Vec<Vec<u64>>,
    /// For each gold column, the predicted columns with the same value multiset.
    candidates: Vec<Vec<usize>>,
    /// Predicted columns equal to an earlier one: index of that earlier column.
    duplicate_of: Vec<Option<usize>>,
    /// Gold columns in the order they are assigned (fewest candidates first).
    order: Vec<usize>,
    budget: u64,
    exhausted: bool,
}

impl<'a> PermutationSearch<'a> {
    fn new(gold: &'a Rows, pred: &'a Rows, width: usize, budget: u64) -> Self {
        let hashes = |rows: &Rows| -> Vec<Vec<u64>> {
            (0..width)
                .map(|column| rows.iter().map(|row| value_hash(&row[column])).collect())
                .collect()
        };
        let gold_hashes = hashes(gold);
        let pred_hashes = hashes(pred);
        let signature = |column: &Vec<u64>| {
            let mut sorted = column.clone();
            sorted.sort_unstable();
            sorted
        };
        let gold_signatures: Vec<Vec<u64>> = gold_hashes.iter().map(signature).collect();
        let pred_signatures: Vec<Vec<u64>> = pred_hashes.iter().map(signature).collect();
        let candidates: Vec<Vec<usize>> = gold_signatures
            .iter()
            .map(|gold_signature| {
                (0..width)
                    .filter(|&j| &pred_signatures[j] == gold_signature)
                    .collect()
            })
            .collect();
        let duplicate_of = (0..width)
            .map(|j| {
                (0..j).find(|&earlier| {
                    pred_hashes[earlier] == pred_hashes[j]
                        && pred.iter().all(|row| row[earlier] == row[j])
                })
            })
            .collect();
        let mut order: Vec<usize> = (0..width).collect();
        order.sort_by_key(|&i| (candidates[i].len(), i));
        PermutationSearch {
            gold,
            pred,
            width,
            gold_hashes,
            pred_hashes,
            candidates,
            duplicate_of,
            order,
            budget,
            exhausted: false,
        }
    }

    fn run(mut self) -> Equivalence {
        if self.candidates.iter().any(Vec::is_empty) {
            return Equivalence::Different;
        }
        let rows = self.gold.len();
        let mut assignment = vec![usize::MAX; self.width];
        let mut used = vec![false; self.width];
        let found = self.extend(
            0,
            &vec![0; rows],
            &vec![0; rows],
            &mut assignment,
            &mut used,
        );
        match (found, self.exhausted) {
            (true, _) => Equivalence::Equal,
            (false, true) => Equivalence::Undecided,
            (false, false) => Equivalence::Different,
        }
    }

    fn extend(
        &mut self,
        depth: usize,
        gold_prefix: &[u64],
        pred_prefix: &[u64],
        assignment: &mut [usize],
        used: &mut [bool],
    ) -> bool {
        if depth == self.width {
            return self.exact_check(assignment);
        }
        let gold_column = self.order[depth];
        let gold_next: Vec<u64> = gold_prefix
            .iter()
            .zip(&self.gold_hashes[gold_column])
            .map(|(&acc, &h)| combine(acc, h))
            .collect();
        let mut gold_sorted = gold_next.clone();
        gold_sorted.sort_unstable();
        for candidate_index in 0..self.candidates[gold_column].len() {
            let pred_column = self.candidates[gold_column][candidate_index];
            if used[pred_column] {
                continue;
            }
            // Identical predicted columns are interchangeable: trying the first unused one of
            // each group is enough, which removes the factorial blow-up on repeated columns.
            if let Some(twin) = self.duplicate_of[pred_column] {
                if !used[twin] {
                    continue;
                }
            }
            let cost = 2 * gold_prefix.len() as u64 + 1;
            if self.budget < cost {
                self.exhausted = true;
                return false;
            }
            self.budget -= cost;
            let pred_next: Vec<u64> = pred_prefix
                .iter()
                .zip(&self.pred_hashes[pred_column])
                .map(|(&acc, &h)| combine(acc, h))
                .collect();
            let mut pred_sorted = pred_next.clone();
            pred_sorted.sort_unstable();
            if pred_sorted != gold_sorted {
                continue;
            }
            used[pred_column] = true;
            assignment[gold_column] = pred_column;
            if self.extend(depth + 1, &gold_next, &pred_next, assignment, used) {
                return true;
            }
            used[pred_column] = false;
            assignment[gold_column] = usize::MAX;
            if self.exhausted {
                return false;
            }
        }
        false
    }

    /// Hashes only prune; a full assignment is confirmed on the real values.
    fn exact_check(&self, assignment: &[usize]) -> bool {
        let permuted: Rows = self
            .pred
            .iter()
            .map(|row| assignment.iter().map(|&j| row[j].clone()).collect())
            .collect();
        multiset_equal(self.gold, &permuted)
    }
}

/// BIRD's `set(pred) == set(gold)`, streaming-friendly: see [`BirdSetMatcher`].
pub fn bird_sets_equal(gold: &Rows, pred: &Rows) -> bool {
    let mut matcher = BirdSetMatcher::new(gold);
    pred.iter().all(|row| matcher.accept(row)) && matcher.finish()
}

/// Compares predicted rows, as they stream in, with a gold row set.
///
/// A predicted row outside the gold set decides the verdict at once, so a runaway prediction
/// is cut off after its first wrong row instead of being fetched in full.
pub struct BirdSetMatcher<'a> {
    gold: HashMap<&'a [PyValue], bool>,
    seen: usize,
}

impl<'a> BirdSetMatcher<'a> {
    /// Starts matching against `gold`.
    pub fn new(gold: &'a Rows) -> Self {
        let gold = gold.iter().map(|row| (row.as_slice(), false)).collect();
        BirdSetMatcher { gold, seen: 0 }
    }

    /// Records one predicted row; `false` means the sets already differ.
    pub fn accept(&mut self, row: &[PyValue]) -> bool {
        match self.gold.get_mut(row) {
            Some(seen) => {
                if !*seen {
                    *seen = true;
                    self.seen += 1;
                }
                true
            }
            None => false,
        }
    }

    /// `true` when every gold row was produced.
    pub fn finish(&self) -> bool {
        self.seen == self.gold.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use PyValue::{Float, Int, Str};

    fn s(text: &str) -> PyValue {
        Str(text.to_string())
    }

    #[test]
    fn empty_results_are_equal_and_length_matters() {
        assert_eq!(
            spider_result_eq(&vec![], &vec![], true, DEFAULT_SEARCH_BUDGET),
            Equivalence::Equal
        );
        assert_eq!(
            spider_result_eq(&vec![vec![Int(1)]], &vec![], false, DEFAULT_SEARCH_BUDGET),
            Equivalence::Different
        );
    }

    #[test]
    fn bag_semantics_count_duplicates() {
        let gold = vec![vec![Int(1)], vec![Int(2)]];
        let doubled = vec![vec![Int(1)], vec![Int(1)]];
        assert_eq!(
            spider_result_eq(&gold, &doubled, false, DEFAULT_SEARCH_BUDGET),
            Equivalence::Different
        );
        assert!(bird_sets_equal(&vec![vec![Int(1)]], &doubled));
    }

    #[test]
    fn column_permutations_are_accepted_without_order() {
        let gold = vec![vec![Int(1), s("a")], vec![Int(2), s("b")]];
        let pred = vec![vec![s("b"), Int(2)], vec![s("a"), Int(1)]];
        assert_eq!(
            spider_result_eq(&gold, &pred, false, DEFAULT_SEARCH_BUDGET),
            Equivalence::Equal
        );
        assert_eq!(
            spider_result_eq(&gold, &pred, true, DEFAULT_SEARCH_BUDGET),
            Equivalence::Different
        );
        let pred_in_order = vec![vec![s("a"), Int(1)], vec![s("b"), Int(2)]];
        assert_eq!(
            spider_result_eq(&gold, &pred_in_order, true, DEFAULT_SEARCH_BUDGET),
            Equivalence::Equal
        );
    }

    #[test]
    fn rows_must_match_jointly_not_just_columns() {
        // Same column multisets, different row pairing.
        let gold = vec![vec![Int(1), Int(10)], vec![Int(2), Int(20)]];
        let pred = vec![vec![Int(1), Int(20)], vec![Int(2), Int(10)]];
        assert_eq!(
            spider_result_eq(&gold, &pred, false, DEFAULT_SEARCH_BUDGET),
            Equivalence::Different
        );
    }

    #[test]
    fn int_float_quirk_of_quick_rejection() {
        let gold = vec![vec![Int(1), Int(1001)]];
        let pred = vec![vec![Float(1.0), Int(1001)]];
        assert_eq!(
            spider_result_eq(&gold, &pred, false, DEFAULT_SEARCH_BUDGET),
            Equivalence::Different
        );
        assert!(bird_sets_equal(&gold, &pred));
        let single_gold = vec![vec![Int(3)]];
        let single_pred = vec![vec![Float(3.0)]];
        assert_eq!(
            spider_result_eq(&single_gold, &single_pred, false, DEFAULT_SEARCH_BUDGET),
            Equivalence::Equal
        );
    }

    #[test]
    fn wide_results_with_many_identical_columns_are_decided_quickly() {
        let width = 26;
        let rows: Rows = (0..200)
            .map(|r| {
                (0..width)
                    .map(|c| {
                        if c % 3 == 0 {
                            PyValue::None
                        } else {
                            Int((r * (c % 5)) as i64)
                        }
                    })
                    .collect()
            })
            .collect();
        let mut permuted = rows.clone();
        for row in &mut permuted {
            row.reverse();
        }
        assert_eq!(
            spider_result_eq(&rows, &permuted, false, DEFAULT_SEARCH_BUDGET),
            Equivalence::Equal
        );
    }

    #[test]
    fn an_exhausted_budget_is_reported_as_undecided() {
        let rows: Rows = (0..50)
            .map(|r| (0..8).map(|c| Int(((r + c) % 2) as i64)).collect())
            .collect();
        let mut other = rows.clone();
        other[0][0] = Int(1 - match other[0][0] {
            Int(v) => v,
            _ => 0,
        });
        other[0][1] = Int(1 - match other[0][1] {
            Int(v) => v,
            _ => 0,
        });
        let outcome = spider_result_eq(&rows, &other, false, 10);
        assert!(matches!(
            outcome,
            Equivalence::Undecided | Equivalence::Different
        ));
    }
}
