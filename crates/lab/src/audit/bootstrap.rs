//! Pair-clustered percentile bootstrap: resample whole pairs with replacement
//! and recompute a mean over the worlds of the drawn pairs.

use std::collections::BTreeMap;

use serde::Serialize;

use super::Error;
use releasegate_core::rng::Rng;

/// Lower and upper percentile bounds (2.5% and 97.5% for a 95% interval).
pub const LOWER_QUANTILE: f64 = 0.025;
/// Upper quantile.
pub const UPPER_QUANTILE: f64 = 0.975;

/// A point estimate with its 95% pair-clustered percentile interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// Worlds in the sample.
    pub n: usize,
    /// Distinct pairs in the sample.
    pub n_pairs: usize,
    /// Sample mean over worlds.
    pub mean: f64,
    /// 2.5th percentile of the resampled means.
    pub lower: f64,
    /// 97.5th percentile of the resampled means.
    pub upper: f64,
}

/// Per-pair sums, so each resample costs one pass over pairs.
#[derive(Debug, Clone, PartialEq)]
pub struct Clusters {
    sums: Vec<Vec<f64>>,
    counts: Vec<f64>,
}

// === impl Clusters ===

impl Clusters {
    /// Groups `series` (each aligned with `pair_ids`) by pair, in sorted pair order.
    pub fn new(pair_ids: &[&str], series: &[&[f64]]) -> Result<Clusters, Error> {
        if pair_ids.is_empty() {
            return Err(Error::EmptySample);
        }
        if series.iter().any(|s| s.len() != pair_ids.len()) {
            return Err(Error::LengthMismatch);
        }
        let mut index: BTreeMap<&str, usize> = BTreeMap::new();
        for p in pair_ids {
            let next = index.len();
            index.entry(p).or_insert(next);
        }
        // Re-number in sorted order so results do not depend on input order.
        for (rank, slot) in index.values_mut().enumerate() {
            *slot = rank;
        }
        let k = index.len();
        let mut sums = vec![vec![0.0; k]; series.len()];
        let mut counts = vec![0.0; k];
        for (w, p) in pair_ids.iter().enumerate() {
            let c = index.get(p).copied().unwrap_or(0);
            counts[c] += 1.0;
            for (s, values) in series.iter().enumerate() {
                sums[s][c] += values[w];
            }
        }
        Ok(Clusters { sums, counts })
    }

    /// Number of pairs.
    pub fn n_pairs(&self) -> usize {
        self.counts.len()
    }

    /// Draws `n_resamples` resamples of whole pairs and returns, for every resample,
    /// the pair indices drawn (exposed for tests and paired statistics).
    pub fn draws(&self, n_resamples: usize, rng: &mut Rng) -> Vec<Vec<usize>> {
        let k = self.n_pairs();
        (0..n_resamples)
            .map(|_| (0..k).map(|_| rng.below(k)).collect())
            .collect()
    }

    /// Estimates the mean of every series (sum over drawn pairs / worlds drawn)
    /// with percentile intervals, using the same resamples for all series.
    pub fn estimate(&self, n_resamples: usize, rng: &mut Rng) -> Vec<Estimate> {
        let draws = self.draws(n_resamples, rng);
        let n: f64 = self.counts.iter().sum();
        (0..self.sums.len())
            .map(|s| {
                let mean = self.sums[s].iter().sum::<f64>() / n.max(1.0);
                let mut stats: Vec<f64> = draws
                    .iter()
                    .map(|d| {
                        let (num, den) = d.iter().fold((0.0, 0.0), |(a, b), &c| {
                            (a + self.sums[s][c], b + self.counts[c])
                        });
                        if den > 0.0 { num / den } else { mean }
                    })
                    .collect();
                stats.sort_by(f64::total_cmp);
                let (lower, upper) = if stats.is_empty() {
                    (mean, mean)
                } else {
                    (
                        quantile(&stats, LOWER_QUANTILE),
                        quantile(&stats, UPPER_QUANTILE),
                    )
                };
                Estimate {
                    n: n as usize,
                    n_pairs: self.n_pairs(),
                    mean,
                    lower,
                    upper,
                }
            })
            .collect()
    }
}

/// Linear-interpolation quantile (type 7) of sorted values.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        len => {
            let h = (len - 1) as f64 * q.clamp(0.0, 1.0);
            let lo = h.floor() as usize;
            let hi = (lo + 1).min(len - 1);
            sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
        }
    }
}

/// Mean of per-world `values` with a 95% pair-clustered percentile interval
/// from `n_resamples` resamples of whole pairs (e.g. realized workflow costs).
/// Non-finite values are rejected.
pub fn mean_interval(
    values: &[f64],
    pair_ids: &[&str],
    n_resamples: usize,
    rng: &mut Rng,
) -> Result<Estimate, Error> {
    if values.iter().any(|v| !v.is_finite()) {
        return Err(Error::NonFinite);
    }
    let clusters = Clusters::new(pair_ids, &[values])?;
    clusters
        .estimate(n_resamples, rng)
        .into_iter()
        .next()
        .ok_or(Error::EmptySample)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resamples_whole_pairs() {
        // Pair "a" worlds are 0, pair "b" worlds are 1: any resample mean is a
        // multiple of 1/2 (both worlds of a pair always come together), so with
        // two pairs the only possible means are 0, 0.5, 1.
        let ids = ["a", "b", "a", "b"];
        let values = [0.0, 1.0, 0.0, 1.0];
        let clusters = Clusters::new(&ids, &[&values]).unwrap();
        assert_eq!(clusters.n_pairs(), 2);
        let mut rng = Rng::new(1);
        for d in clusters.draws(200, &mut rng) {
            assert_eq!(d.len(), 2);
        }
        let mut rng = Rng::new(1);
        let est = clusters.estimate(2000, &mut rng);
        assert_eq!(est[0].mean, 0.5);
        assert_eq!(est[0].n, 4);
        assert!(est[0].lower == 0.0 && est[0].upper == 1.0);
    }

    #[test]
    fn within_pair_values_never_split() {
        // Each pair has one 0 and one 1: a world-level bootstrap would vary,
        // a pair-level one always gives exactly 0.5.
        let ids: Vec<String> = (0..50)
            .flat_map(|i| [format!("p{i}"), format!("p{i}")])
            .collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let values: Vec<f64> = (0..100).map(|i| (i % 2) as f64).collect();
        let est = mean_interval(&values, &refs, 500, &mut Rng::new(9)).unwrap();
        assert_eq!((est.lower, est.mean, est.upper), (0.5, 0.5, 0.5));
    }

    #[test]
    fn interval_is_deterministic_and_covers_mean() {
        let ids: Vec<String> = (0..40)
            .flat_map(|i| [format!("p{i}"), format!("p{i}")])
            .collect();
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let values: Vec<f64> = (0..80).map(|i| ((i * 37) % 11) as f64).collect();
        let a = mean_interval(&values, &refs, 2000, &mut Rng::new(3)).unwrap();
        let b = mean_interval(&values, &refs, 2000, &mut Rng::new(3)).unwrap();
        assert_eq!(a, b);
        assert!(a.lower < a.mean && a.mean < a.upper);
        assert_eq!(a.n_pairs, 40);
    }

    #[test]
    fn rejects_empty_and_mismatched_input() {
        assert_eq!(
            mean_interval(&[], &[], 10, &mut Rng::new(0)),
            Err(Error::EmptySample)
        );
        assert_eq!(
            mean_interval(&[1.0], &["a", "b"], 10, &mut Rng::new(0)),
            Err(Error::LengthMismatch)
        );
        assert_eq!(
            mean_interval(&[f64::NAN], &["a"], 10, &mut Rng::new(0)),
            Err(Error::NonFinite)
        );
    }

    #[test]
    fn quantile_interpolates() {
        assert_eq!(quantile(&[0.0, 1.0, 2.0, 3.0], 0.5), 1.5);
        assert_eq!(quantile(&[4.0], 0.9), 4.0);
    }
}
