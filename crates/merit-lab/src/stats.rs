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
    Ok(PairedDifference {
        delta_pp,
        ci_low_pp: percentile(0.025),
        ci_high_pp: percentile(0.975),
        resamples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
