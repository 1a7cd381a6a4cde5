//! Statistics over seeds and the paired query-cluster bootstrap.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// Mean and sample standard deviation (n − 1 in the denominator; 0 for fewer than two values).
pub fn mean_and_sample_sd(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, 0.0);
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, variance.sqrt())
}

/// A paired difference with its bootstrap percentile interval, in percentage points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedDifference {
    /// Mean of A minus B over all queries and seeds, in points.
    pub delta_pp: f64,
    /// Lower end of the 95% percentile interval.
    pub ci_low_pp: f64,
    /// Upper end of the 95% percentile interval.
    pub ci_high_pp: f64,
    /// Bootstrap resamples drawn.
    pub resamples: usize,
    /// Queries where A did better than B over its seeds together (the query's per-seed
    /// differences sum to more than zero): the query, not the (query, seed) cell, is the unit,
    /// as in the bootstrap, since one question's seeds are not independent.
    #[serde(default)]
    pub a_better: u64,
    /// Queries where B did better than A, in the same sense.
    #[serde(default)]
    pub b_better: u64,
    /// Two-sided exact sign test over those queries (ties left out): the probability of a
    /// split at least this uneven if each query were a fair coin. 1 when no query differs.
    #[serde(default = "no_difference_p")]
    pub sign_test_p: f64,
}

fn no_difference_p() -> f64 {
    1.0
}

/// The two-sided exact sign test: `a` and `b` are the numbers of pairs favouring each side
/// (ties removed). Under the null each pair favours either side with probability ½, so the
/// p-value is twice the binomial tail of the smaller count, capped at 1; 1 when `a + b = 0`.
/// Computed in log space, so it stays exact enough for thousands of pairs.
pub fn exact_sign_test(a: u64, b: u64) -> f64 {
    let n = a + b;
    if n == 0 {
        return 1.0;
    }
    let smaller = a.min(b);
    let ln_half_n = n as f64 * 0.5f64.ln();
    // ln C(n, i), built up term by term.
    let mut ln_choose = 0.0f64;
    let mut tail = 0.0f64;
    for i in 0..=smaller {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

/// The unbiased pass@k estimate for one task that passed `c` of `n` independent tries:
/// the chance that at least one of `k` tries drawn without replacement from the `n` passed,
/// `1 − C(n−c, k) / C(n, k)` (as a product, so large `n` cannot overflow). `None` unless
/// `1 <= k <= n` and `c <= n` (the estimate is undefined there).
pub fn pass_at_k(n: u64, c: u64, k: u64) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    let all_fail: f64 = ((n - c + 1)..=n)
        .map(|i| 1.0 - k as f64 / i as f64)
        .product();
    Some(1.0 - all_fail)
}

/// Why a bootstrap could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    /// The two methods were not run on the same queries and seeds.
    #[error("paired outcomes must have the same shape: {0}")]
    Unaligned(String),
    /// Nothing to resample.
    #[error("no queries to resample")]
    Empty,
}

/// The query-cluster bootstrap of the paper's Table 2.
///
/// `a[q][s]` and `b[q][s]` are the final correctness (1/0) of query `q` under seed `s` for the
/// two methods. Each resample draws queries with replacement and keeps every drawn query's
/// outcomes across all seeds together (the query is the cluster); the statistic is the mean
/// of `a − b` over the drawn queries and all seeds, times 100. The interval is the 2.5th and
/// 97.5th percentile of the resampled statistics (nearest-rank on the sorted values).
pub fn paired_cluster_bootstrap(
    a: &[Vec<u8>],
    b: &[Vec<u8>],
    resamples: usize,
    seed: u64,
) -> Result<PairedDifference, BootstrapError> {
    if a.len() != b.len() {
        return Err(BootstrapError::Unaligned(format!(
            "{} vs {} queries",
            a.len(),
            b.len()
        )));
    }
    if a.is_empty() {
        return Err(BootstrapError::Empty);
    }
    let seeds = a[0].len();
    let mut per_query = Vec::with_capacity(a.len());
    for (index, (row_a, row_b)) in a.iter().zip(b).enumerate() {
        if row_a.len() != seeds || row_b.len() != seeds {
            return Err(BootstrapError::Unaligned(format!(
                "query {index} has {} and {} seeds, expected {seeds}",
                row_a.len(),
                row_b.len()
            )));
        }
        // The per-query sum of differences over seeds is all a resample needs.
        let difference: i64 = row_a
            .iter()
            .zip(row_b)
            .map(|(&x, &y)| i64::from(x) - i64::from(y))
            .sum();
        per_query.push(difference);
    }
    let queries = per_query.len();
    let cells = (queries * seeds.max(1)) as f64;
    let delta_pp = per_query.iter().sum::<i64>() as f64 / cells * 100.0;
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let mut statistics: Vec<f64> = (0..resamples)
        .map(|_| {
            let total: i64 = (0..queries)
                .map(|_| per_query[rng.random_range(0..queries)])
                .sum();
            total as f64 / cells * 100.0
        })
        .collect();
    statistics.sort_by(f64::total_cmp);
    let percentile = |p: f64| -> f64 {
        if statistics.is_empty() {
            return delta_pp;
        }
        let rank = ((p * statistics.len() as f64).ceil() as usize).clamp(1, statistics.len());
        statistics[rank - 1]
    };
    let a_better = per_query.iter().filter(|&&d| d > 0).count() as u64;
    let b_better = per_query.iter().filter(|&&d| d < 0).count() as u64;
    Ok(PairedDifference {
        delta_pp,
        ci_low_pp: percentile(0.025),
        ci_high_pp: percentile(0.975),
        resamples,
        a_better,
        b_better,
        sign_test_p: exact_sign_test(a_better, b_better),
    })
}

/// Pass@k for k = 1..=n over tasks that each had `n` independent tries: `passed[t][r]` says
/// whether try `r` of task `t` passed. Returns the mean over tasks of [`pass_at_k`] for each
/// k, or `None` when there are no tasks or the tasks have different numbers of tries.
pub fn pass_at_k_curve(passed: &[Vec<bool>]) -> Option<Vec<f64>> {
    let n = passed.first()?.len();
    if n == 0 || passed.iter().any(|tries| tries.len() != n) {
        return None;
    }
    Some(
        (1..=n as u64)
            .map(|k| {
                passed
                    .iter()
                    .map(|tries| {
                        let c = tries.iter().filter(|&&p| p).count() as u64;
                        // 1 <= k <= n and c <= n by construction.
                        pass_at_k(n as u64, c, k).unwrap_or(0.0)
                    })
                    .sum::<f64>()
                    / passed.len() as f64
            })
            .collect(),
    )
}

/// Holm's step-down adjustment of a family of p-values (several arms tested against one
/// baseline): the i-th smallest is multiplied by `m − i + 1`, made no smaller than the one
/// before it, and capped at 1. An adjusted p below α rejects with the family-wise error rate
/// held at α. Returned in the input's order; ties keep their input order (a stable sort), so
/// the result does not depend on how equal p-values are ranked.
pub fn holm_adjusted(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = 0.0f64;
    for (rank, &index) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p_values[index]).min(1.0));
        adjusted[index] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_multiplies_by_the_remaining_count_and_keeps_the_order() {
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        // 0.01 × 3, then 0.03 × 2 = 0.06, then 0.04 × 1 raised to the 0.06 before it.
        assert!(close(
            &holm_adjusted(&[0.01, 0.04, 0.03]),
            &[0.03, 0.06, 0.06]
        ));
        assert!(close(&holm_adjusted(&[0.03, 0.40]), &[0.06, 0.40]));
        assert!(close(&holm_adjusted(&[0.5, 0.9]), &[1.0, 1.0]));
        assert!(close(&holm_adjusted(&[0.2]), &[0.2]));
        assert!(holm_adjusted(&[]).is_empty());
    }

    #[test]
    fn the_sign_test_matches_binomial_tables() {
        // 10 pairs all one way: 2 × 0.5^10.
        assert!((exact_sign_test(10, 0) - 2.0 / 1024.0).abs() < 1e-12);
        // 7 vs 3: 2 × (1 + 10 + 45 + 120) / 1024 = 0.34375.
        assert!((exact_sign_test(7, 3) - 0.34375).abs() < 1e-12);
        assert!((exact_sign_test(3, 7) - 0.34375).abs() < 1e-12);
        // Balanced splits and no difference at all give 1.
        assert_eq!(exact_sign_test(5, 5), 1.0);
        assert_eq!(exact_sign_test(0, 0), 1.0);
        // 1 vs 0 cannot be significant.
        assert_eq!(exact_sign_test(1, 0), 1.0);
        // Large n stays finite and small: 600 vs 400 (p ≈ 2.6e-10).
        let p = exact_sign_test(600, 400);
        assert!(p > 1e-11 && p < 1e-9, "{p}");
    }

    #[test]
    fn pass_at_k_is_the_unbiased_estimate() {
        // One try: the pass rate.
        assert!((pass_at_k(5, 2, 1).unwrap() - 0.4).abs() < 1e-12);
        // 1 − C(3,2)/C(5,2) = 1 − 3/10.
        assert!((pass_at_k(5, 2, 2).unwrap() - 0.7).abs() < 1e-12);
        // Fewer failures than draws: certain.
        assert_eq!(pass_at_k(5, 4, 2), Some(1.0));
        assert_eq!(pass_at_k(5, 0, 5), Some(0.0));
        assert_eq!(pass_at_k(5, 5, 1), Some(1.0));
        // Undefined cases are None, not a panic.
        assert_eq!(pass_at_k(3, 1, 4), None);
        assert_eq!(pass_at_k(3, 4, 1), None);
        assert_eq!(pass_at_k(3, 1, 0), None);
    }

    #[test]
    fn the_pass_at_k_curve_averages_over_tasks() {
        let passed = vec![
            vec![true, false, false],
            vec![false, false, false],
            vec![true, true, true],
        ];
        let curve = pass_at_k_curve(&passed).unwrap();
        // k = 1: (1/3 + 0 + 1) / 3; k = 3: (1 + 0 + 1) / 3.
        assert!((curve[0] - 4.0 / 9.0).abs() < 1e-12);
        assert!((curve[1] - (2.0 / 3.0 + 1.0) / 3.0).abs() < 1e-12);
        assert!((curve[2] - 2.0 / 3.0).abs() < 1e-12);
        assert!(pass_at_k_curve(&[vec![true], vec![true, false]]).is_none());
        assert!(pass_at_k_curve(&[]).is_none());
    }

    #[test]
    fn the_bootstrap_reports_the_sign_test_of_its_queries() {
        let a = vec![vec![1, 1], vec![1, 0], vec![0, 0], vec![1, 1]];
        let b = vec![vec![0, 0], vec![0, 0], vec![0, 0], vec![1, 0]];
        let d = paired_cluster_bootstrap(&a, &b, 200, 1).unwrap();
        assert_eq!((d.a_better, d.b_better), (3, 0));
        assert!((d.sign_test_p - 0.25).abs() < 1e-12);
    }

    #[test]
    fn sample_sd_uses_n_minus_one() {
        let (mean, sd) = mean_and_sample_sd(&[66.2, 66.4, 66.42]);
        assert!((mean - 66.34).abs() < 1e-9);
        assert!((sd - 0.121_655_250_605_964_2).abs() < 1e-9, "{sd}");
        assert_eq!(mean_and_sample_sd(&[5.0]), (5.0, 0.0));
    }

    #[test]
    fn identical_methods_have_a_zero_interval() {
        let outcomes: Vec<Vec<u8>> = (0..50).map(|q| vec![(q % 2) as u8; 3]).collect();
        let result = paired_cluster_bootstrap(&outcomes, &outcomes, 2000, 7).unwrap();
        assert_eq!(result.delta_pp, 0.0);
        assert_eq!((result.ci_low_pp, result.ci_high_pp), (0.0, 0.0));
    }

    #[test]
    fn a_clearly_better_method_has_an_interval_above_zero_and_is_reproducible() {
        let a: Vec<Vec<u8>> = (0..200).map(|q| vec![u8::from(q % 10 != 0); 3]).collect();
        let b: Vec<Vec<u8>> = (0..200).map(|q| vec![u8::from(q % 2 == 0); 3]).collect();
        let first = paired_cluster_bootstrap(&a, &b, 10_000, 0).unwrap();
        assert!((first.delta_pp - 40.0).abs() < 1e-9);
        assert!(
            first.ci_low_pp > 30.0 && first.ci_high_pp < 50.0,
            "{first:?}"
        );
        assert_eq!(first, paired_cluster_bootstrap(&a, &b, 10_000, 0).unwrap());
    }

    #[test]
    fn misaligned_inputs_are_errors() {
        let a = vec![vec![1, 0, 1]];
        assert!(paired_cluster_bootstrap(&a, &[], 10, 0).is_err());
        assert!(paired_cluster_bootstrap(&a, &[vec![1, 0]], 10, 0).is_err());
        assert_eq!(
            paired_cluster_bootstrap(&[], &[], 10, 0),
            Err(BootstrapError::Empty)
        );
    }
}
