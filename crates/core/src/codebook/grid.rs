//! The simplex grid, its exact size, and the codeword order.

use std::cmp::Ordering;

use super::Codeword;

/// The number of grid vectors C(d+n-1, n-1), exact, saturating at `u128::MAX`.
pub fn grid_size(classes: usize, denominator: u32) -> u128 {
    if classes == 0 {
        return 0;
    }
    let k = (classes - 1) as u128;
    let m = u128::from(denominator) + k;
    let k = k.min(u128::from(denominator));
    let mut r: u128 = 1;
    for i in 1..=k {
        // r * (m - k + i) / i stays the exact binomial C(m - k + i, i) at every step.
        r = match r.checked_mul(m - k + i) {
            Some(v) => v / i,
            None => return u128::MAX,
        };
    }
    r
}

/// The largest denominator whose grid has at most `limit` vectors (None if even 1 exceeds it).
pub fn largest_denominator_within(classes: usize, limit: u128) -> Option<u32> {
    if grid_size(classes, 1) > limit {
        return None;
    }
    let (mut lo, mut hi) = (1u32, u32::MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if grid_size(classes, mid) <= limit {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// Every vector k/d of the denominator-d simplex grid over n classes (unordered).
pub(super) fn simplex_grid(n: usize, d: u32) -> Vec<Vec<f64>> {
    let mut out = Vec::new();
    let mut counts = vec![0u32; n];
    fill_grid(0, d, d, &mut counts, &mut out);
    out
}

fn fill_grid(pos: usize, remaining: u32, d: u32, counts: &mut [u32], out: &mut Vec<Vec<f64>>) {
    if pos + 1 == counts.len() {
        counts[pos] = remaining;
        out.push(
            counts
                .iter()
                .map(|&k| f64::from(k) / f64::from(d))
                .collect(),
        );
        return;
    }
    for k in 0..=remaining {
        counts[pos] = k;
        fill_grid(pos + 1, remaining - k, d, counts, out);
    }
}

/// Squared Euclidean distance of `p` to the uniform vector, summed in canonical order.
pub fn distance_to_uniform(p: &[f64]) -> f64 {
    let u = 1.0 / p.len() as f64;
    p.iter().map(|v| (v - u) * (v - u)).sum()
}

/// The codebook order: distance to uniform, then confidence, then p lexicographically.
pub fn codeword_order(a: &Codeword, b: &Codeword) -> Ordering {
    distance_to_uniform(&a.p)
        .total_cmp(&distance_to_uniform(&b.p))
        .then(a.c.total_cmp(&b.c))
        .then_with(|| lexicographic(&a.p, &b.p))
}

fn lexicographic(a: &[f64], b: &[f64]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.total_cmp(y) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    a.len().cmp(&b.len())
}

pub(super) fn order_and_dedup(n: usize, items: Vec<Codeword>) -> Vec<Codeword> {
    let mut keyed: Vec<(f64, Codeword)> = items
        .into_iter()
        .filter(|cw| cw.p.len() == n)
        .map(|cw| (distance_to_uniform(&cw.p), cw))
        .collect();
    keyed.sort_by(|(da, a), (db, b)| {
        da.total_cmp(db)
            .then(a.c.total_cmp(&b.c))
            .then_with(|| lexicographic(&a.p, &b.p))
    });
    let mut out: Vec<Codeword> = Vec::with_capacity(keyed.len());
    for (_, cw) in keyed {
        if out.last() != Some(&cw) {
            out.push(cw);
        }
    }
    out
}
