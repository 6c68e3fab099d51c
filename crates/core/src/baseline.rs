//! Baseline release mechanisms for comparison with WCPQ (`docs/wcpq-rules.md` section 8):
//! quantization, top-k, temperature smoothing and Gaussian noise, on probability vectors in the
//! order the caller passes (canonical class order unless stated otherwise).
//!
//! None of them preserves the frozen workflows' plans in general; they exist to measure what
//! WCPQ buys.

use crate::rng::Rng;

/// Smallest accepted quantization step; steps are decimals with at most `STEP_DECIMALS` places.
pub const MIN_STEP: f64 = 1e-9;

/// Most decimal places a quantization step may have (`MIN_STEP` = 10^-STEP_DECIMALS).
pub const STEP_DECIMALS: u32 = 9;

/// Slack absorbing representation error in `floor(p_i / step)` (e.g. 0.3 / 0.1 = 2.9999999999999996).
pub const FLOOR_SLACK: f64 = 1e-9;

/// Resolution at which fractional remainders are compared: remainders within this many
/// units of each other after rounding are equal (a tie), so float noise in `p_i / step`
/// (0.35 / 0.1 = 3.4999999999999996, 0.25 / 0.1 = 2.5) never decides a tie.
pub const REMAINDER_RESOLUTION: f64 = 1e-9;

const NANOS: u64 = 1_000_000_000;

/// Errors of the baseline mechanisms.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The vector is empty or holds a NaN, infinite or negative value.
    #[error("probabilities must be a non-empty vector of finite non-negative numbers")]
    Probabilities,
    /// A parameter (step, tau, sigma) is out of range.
    #[error("{name} must be {expected}, got {value}")]
    Parameter {
        /// Parameter name.
        name: &'static str,
        /// The allowed range.
        expected: &'static str,
        /// The given value.
        value: f64,
    },
    /// The tie order is not a permutation of the vector's positions.
    #[error("the tie order must list every position exactly once")]
    TieOrder,
}

/// A quantization step as an exact count of 10^-9 units, when it is a decimal in
/// `[1e-9, 1]` with at most `STEP_DECIMALS` places (0.1, 0.05, 0.25, 0.3, 1e-9); `None`
/// otherwise (1/3, 0.1234567891, 0, 2, NaN).
pub fn step_nanos(step: f64) -> Option<u64> {
    if !(step.is_finite() && (MIN_STEP..=1.0).contains(&step)) {
        return None;
    }
    let nanos = (step * NANOS as f64).round() as u64;
    // The step must be the double nearest to nanos / 10^9 (a correctly rounded division).
    (nanos >= 1 && nanos as f64 / NANOS as f64 == step).then_some(nanos)
}

/// Whether `step` (one `step_nanos` accepts) divides 1: then the released units sum to 1.
pub fn step_divides_one(step: f64) -> bool {
    step_nanos(step).is_some_and(|nanos| NANOS.is_multiple_of(nanos))
}

/// Quantizes to multiples of `step` by largest remainder; `tie_order` lists the
/// positions of `p` in transmitted order and decides ties.
///
/// With `U = floor(1 / step)` units: `n_i = floor(p_i/step + 1e-9)`, then the `U - sum n_i`
/// remaining units go to the largest fractional remainders `p_i/step - n_i`, compared at
/// `REMAINDER_RESOLUTION` (equal remainders are a tie), ties to the position earlier in
/// `tie_order`. The input is first divided by its sum when that is not 1 (a zero vector
/// becomes uniform). When `step` does not divide 1 (e.g. 0.3), only the `U` whole units
/// are distributed, so the released units sum to `U`, i.e. `U * step < 1`, never above 1.
/// Should flooring ever yield more than `U` units, units are removed from the smallest
/// remainders (ties: later in `tie_order` first).
///
/// The release is `n_i * step` computed exactly: `(n_i * step_nanos) / 10^9` is the double
/// nearest to a decimal with at most the step's decimal places, so it prints as that
/// decimal (`0.3`, never `0.30000000000000004`). `step` must pass `step_nanos`.
pub fn quantize(p: &[f64], step: f64, tie_order: &[usize]) -> Result<Vec<f64>, Error> {
    let nanos = step_nanos(step).ok_or(Error::Parameter {
        name: "step",
        expected: "a decimal in [1e-9, 1] with at most 9 decimal places",
        value: step,
    })?;
    let p = normalized(p)?;
    let mut rank = vec![usize::MAX; p.len()];
    for (position, &index) in tie_order.iter().enumerate() {
        match rank.get_mut(index) {
            Some(slot) if *slot == usize::MAX => *slot = position,
            _ => return Err(Error::TieOrder),
        }
    }
    if tie_order.len() != p.len() {
        return Err(Error::TieOrder);
    }
    let units = i64::try_from(NANOS / nanos).map_err(|_| Error::Probabilities)?;
    let scaled: Vec<f64> = p.iter().map(|v| v * NANOS as f64 / nanos as f64).collect();
    let mut counts: Vec<i64> = scaled
        .iter()
        .map(|x| (x + FLOOR_SLACK).floor() as i64)
        .collect();
    let remainders: Vec<i64> = scaled
        .iter()
        .zip(&counts)
        .map(|(x, &k)| ((x - k as f64).max(0.0) / REMAINDER_RESOLUTION).round() as i64)
        .collect();
    // Positions by remainder descending, ties in transmitted order.
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(remainders[i]), rank[i]));
    let assigned: i64 = counts.iter().sum();
    let mut missing = units - assigned;
    let mut turn = 0;
    while missing > 0 && !order.is_empty() {
        counts[order[turn % order.len()]] += 1;
        missing -= 1;
        turn += 1;
    }
    // Excess (from the flooring slack): take from the smallest remainders, later positions first.
    let mut excess = -missing;
    for &i in order.iter().rev().cycle().take(p.len() * 4) {
        if excess <= 0 {
            break;
        }
        if counts[i] > 0 {
            counts[i] -= 1;
            excess -= 1;
        }
    }
    Ok(counts
        .iter()
        .map(|&k| (k.max(0) as u64 * nanos) as f64 / NANOS as f64)
        .collect())
}

/// Releases only the `k` highest probabilities (ties: earlier position first), unnormalized; the
/// others are `None` (omitted from the release, never zero-filled). NaN ranks below every number.
pub fn top_k(p: &[f64], k: usize) -> Vec<Option<f64>> {
    let key = |v: f64| if v.is_nan() { f64::NEG_INFINITY } else { v };
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| key(p[b]).total_cmp(&key(p[a])));
    let mut out = vec![None; p.len()];
    for &i in order.iter().take(k) {
        out[i] = Some(p[i]);
    }
    out
}

/// Temperature smoothing `p_i^(1/tau) / sum_k p_k^(1/tau)` (a zero vector becomes uniform).
///
/// This is invertible and removes no information: anyone can recover the native vector as
/// `p_i = r_i^tau / sum_k r_k^tau` from the release r. It only changes how the scores look.
pub fn temperature(p: &[f64], tau: f64) -> Result<Vec<f64>, Error> {
    if !(tau.is_finite() && tau > 0.0) {
        return Err(Error::Parameter {
            name: "tau",
            expected: "a positive finite number",
            value: tau,
        });
    }
    check(p)?;
    // Relative to the largest value (`(p_i / p_max)^(1/τ)`, the same ratios): a small τ
    // would otherwise underflow every power to 0 and turn the release uniform.
    let max = p.iter().copied().fold(0.0, f64::max);
    if max <= 0.0 {
        return normalize_or_uniform(p.to_vec());
    }
    let powered: Vec<f64> = p.iter().map(|v| (v / max).powf(1.0 / tau)).collect();
    normalize_or_uniform(powered)
}

/// Gaussian noise: `u_i = max(0, p_i + eps_i)` with `eps_i ~ N(0, sigma^2)` drawn from `rng` in
/// position order, then normalized; uniform if every `u_i` is zero.
///
/// Fresh noise per request averages away: a recipient who can repeat a query (or sees similar
/// cases) averages the releases and recovers p up to the clamping bias, so the protection fades
/// with repetition. Seed `rng` per request deterministically if repeats must get the same noise.
pub fn gaussian(p: &[f64], sigma: f64, rng: &mut Rng) -> Result<Vec<f64>, Error> {
    if !(sigma.is_finite() && sigma >= 0.0) {
        return Err(Error::Parameter {
            name: "sigma",
            expected: "a non-negative finite number",
            value: sigma,
        });
    }
    check(p)?;
    let noisy: Vec<f64> = p
        .iter()
        .map(|v| (v + sigma * rng.normal()).max(0.0))
        .collect();
    normalize_or_uniform(noisy)
}

fn check(p: &[f64]) -> Result<(), Error> {
    if p.is_empty() || !p.iter().all(|v| v.is_finite() && *v >= 0.0) {
        return Err(Error::Probabilities);
    }
    Ok(())
}

fn normalized(p: &[f64]) -> Result<Vec<f64>, Error> {
    check(p)?;
    let sum: f64 = p.iter().sum();
    if sum == 1.0 {
        Ok(p.to_vec())
    } else {
        normalize_or_uniform(p.to_vec())
    }
}

fn normalize_or_uniform(mut v: Vec<f64>) -> Result<Vec<f64>, Error> {
    let sum: f64 = v.iter().sum();
    if !sum.is_finite() {
        return Err(Error::Probabilities);
    }
    let n = v.len() as f64;
    if sum > 0.0 {
        v.iter_mut().for_each(|x| *x /= sum);
    } else {
        v.iter_mut().for_each(|x| *x = 1.0 / n);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::rng::Rng;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    /// Positions in their own order.
    fn positional(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    fn json(values: &[f64]) -> String {
        serde_json::to_string(values).unwrap()
    }

    #[test]
    fn quantize_uses_largest_remainder_with_transmitted_ties() {
        let q = quantize(&[0.35, 0.35, 0.3], 0.1, &positional(3)).unwrap();
        // floors 3, 3, 3 (0.3/0.1 needs the slack); remainders .5, .5, 0: the tie goes to position 0.
        assert_eq!(json(&q), "[0.4,0.3,0.3]");
        // The same vector transmitted as [1, 0, 2]: position 1 comes first and wins the tie.
        let q = quantize(&[0.35, 0.35, 0.3], 0.1, &[1, 0, 2]).unwrap();
        assert_eq!(json(&q), "[0.3,0.4,0.3]");
        let q = quantize(&[0.25, 0.25, 0.25, 0.25], 0.1, &positional(4)).unwrap();
        // floors 2 each, 2 units left, all remainders 0.5: the first two transmitted.
        assert_eq!(json(&q), "[0.3,0.3,0.2,0.2]");
        let q = quantize(&[0.25, 0.25, 0.25, 0.25], 0.1, &[3, 1, 0, 2]).unwrap();
        assert_eq!(json(&q), "[0.2,0.3,0.2,0.3]");
        // Float noise does not break ties: 0.15/0.1 = 1.4999999999999998 and 0.35/0.1 =
        // 3.4999999999999996 have the same remainder as 0.25/0.1 = 2.5.
        let q = quantize(&[0.15, 0.25, 0.35, 0.25], 0.1, &[2, 3, 0, 1]).unwrap();
        assert_eq!(json(&q), "[0.1,0.2,0.4,0.3]");
        let q = quantize(&[0.15, 0.25, 0.35, 0.25], 0.1, &[0, 1, 2, 3]).unwrap();
        assert_eq!(json(&q), "[0.2,0.3,0.3,0.2]");
        let q = quantize(&[0.07, 0.93], 0.1, &positional(2)).unwrap();
        assert_eq!(json(&q), "[0.1,0.9]");
        let q = quantize(&[0.123, 0.456, 0.421], 0.1, &positional(3)).unwrap();
        assert_eq!(json(&q), "[0.1,0.5,0.4]");
        let q = quantize(&[0.6, 0.35, 0.05], 0.05, &positional(3)).unwrap();
        assert_eq!(json(&q), "[0.6,0.35,0.05]");
    }

    #[test]
    fn quantize_handles_odd_steps_and_bad_input() {
        // 0.3 does not divide 1: three units of 0.3, sum 0.9.
        let q = quantize(&[0.5, 0.5], 0.3, &positional(2)).unwrap();
        assert_eq!(json(&q), "[0.6,0.3]");
        for step in [0.0, f64::NAN, 1.5, 1e-300, 1.0 / 3.0, 0.1234567891, -0.1] {
            assert!(
                quantize(&[0.5, 0.5], step, &positional(2)).is_err(),
                "{step}"
            );
        }
        let fine = quantize(&[0.3, 0.7], 1e-9, &positional(2)).unwrap();
        assert_eq!(json(&fine), "[0.3,0.7]");
        assert!(quantize(&[], 0.1, &[]).is_err());
        assert!(quantize(&[0.5, f64::NAN], 0.1, &positional(2)).is_err());
        assert_eq!(
            quantize(&[0.0, 0.0], 0.5, &positional(2)).unwrap(),
            [0.5, 0.5]
        );
        // Unnormalized input is normalized first.
        assert_eq!(
            quantize(&[2.0, 2.0], 0.5, &positional(2)).unwrap(),
            [0.5, 0.5]
        );
        // The tie order must be a permutation of the positions.
        for order in [vec![0], vec![0, 0], vec![0, 2], vec![0, 1, 2]] {
            assert_eq!(
                quantize(&[0.5, 0.5], 0.1, &order),
                Err(Error::TieOrder),
                "{order:?}"
            );
        }
    }

    #[test]
    fn steps_are_decimals_with_at_most_nine_places() {
        assert_eq!(step_nanos(0.1), Some(100_000_000));
        assert_eq!(step_nanos(0.05), Some(50_000_000));
        assert_eq!(step_nanos(0.3), Some(300_000_000));
        assert_eq!(step_nanos(1.0), Some(1_000_000_000));
        assert_eq!(step_nanos(1e-9), Some(1));
        assert_eq!(step_nanos(0.123456789), Some(123_456_789));
        assert_eq!(step_nanos(1.0 / 3.0), None);
        assert_eq!(step_nanos(0.1 + 0.2), None);
        assert_eq!(step_nanos(5e-10), None);
    }

    /// Decimal places of a JSON number as written (`0.35` has 2, `1.0` has 0, `3e-7` has 7).
    fn decimals(text: &str) -> u32 {
        let (mantissa, exponent) = match text.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i32>().unwrap()),
            None => (text, 0),
        };
        let fraction = mantissa
            .split_once('.')
            .map_or("", |(_, f)| f)
            .trim_end_matches('0');
        (fraction.len() as i32 - exponent).max(0) as u32
    }

    /// A JSON number with at most 9 decimals as an exact count of 10^-9 units.
    fn nanos_of(text: &str) -> u64 {
        assert!(!text.contains(['e', 'E', '-']), "{text}");
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        assert!(fraction.len() <= 9, "{text}");
        let fraction = format!("{fraction:0<9}");
        whole.parse::<u64>().unwrap() * 1_000_000_000 + fraction.parse::<u64>().unwrap()
    }

    fn step_strategy() -> impl Strategy<Value = f64> {
        prop::sample::select(vec![0.1, 0.05, 0.25, 0.2, 0.5, 0.3, 0.125, 0.01, 0.001])
    }

    /// Probability vectors in thousandths (many exact ties) and a random transmitted order.
    fn case() -> impl Strategy<Value = (Vec<u64>, Vec<usize>)> {
        prop::collection::vec(0u64..=1000, 1..8).prop_flat_map(|mut cuts| {
            cuts.push(0);
            cuts.push(1000);
            cuts.sort_unstable();
            let parts: Vec<u64> = cuts.windows(2).map(|w| w[1] - w[0]).collect();
            let order: Vec<usize> = (0..parts.len()).collect();
            (Just(parts), Just(order).prop_shuffle())
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

        #[test]
        fn quantized_values_are_exact_multiples_assigned_by_largest_remainder(
            (thousandths, order) in case(),
            step in step_strategy(),
        ) {
            let p: Vec<f64> = thousandths.iter().map(|&m| m as f64 / 1000.0).collect();
            let q = quantize(&p, step, &order).unwrap();
            let step_text = serde_json::to_string(&step).unwrap();
            let nanos = step_nanos(step).unwrap();
            let units = 1_000_000_000 / nanos;
            let mut rank = vec![0; order.len()];
            for (position, &index) in order.iter().enumerate() {
                rank[index] = position;
            }
            let mut total = 0;
            let mut extra = Vec::new();
            for (i, value) in q.iter().enumerate() {
                let text = serde_json::to_string(value).unwrap();
                prop_assert!(decimals(&text) <= decimals(&step_text), "{} for step {}", text, step);
                let released = nanos_of(&text);
                prop_assert_eq!(released % nanos, 0, "{} is not a multiple of {}", text, step);
                let n = released / nanos;
                total += n;
                // Exact floor and remainder of p_i / step (p_i = m/1000 = m * 10^6 nanos).
                let exact = thousandths[i] * 1_000_000;
                let floor = exact / nanos;
                prop_assert!(n == floor || n == floor + 1, "{} units for {}", n, exact);
                extra.push((n > floor, exact % nanos));
            }
            prop_assert_eq!(total, units);
            // Largest remainder: no position left out has a larger remainder than one given
            // an extra unit, nor an equal remainder and an earlier transmitted position.
            for (i, &(got_i, rem_i)) in extra.iter().enumerate() {
                for (j, &(got_j, rem_j)) in extra.iter().enumerate() {
                    if got_i && !got_j {
                        prop_assert!(
                            rem_i > rem_j || (rem_i == rem_j && rank[i] < rank[j]),
                            "{:?} order {:?}", extra, order
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn top_k_keeps_the_highest_with_positional_ties() {
        assert_eq!(
            top_k(&[0.1, 0.4, 0.4, 0.1], 2),
            vec![None, Some(0.4), Some(0.4), None]
        );
        assert_eq!(
            top_k(&[0.3, 0.2, 0.3, 0.2], 1),
            vec![Some(0.3), None, None, None]
        );
        assert_eq!(top_k(&[0.2, 0.2, 0.6], 2), vec![Some(0.2), None, Some(0.6)]);
        assert_eq!(top_k(&[0.5, 0.5], 5), vec![Some(0.5), Some(0.5)]);
        assert_eq!(top_k(&[0.5, 0.5], 0), vec![None, None]);
        assert_eq!(top_k(&[f64::NAN, 0.1], 1), vec![None, Some(0.1)]);
    }

    #[test]
    fn a_small_temperature_sharpens_rather_than_underflows() {
        // 0.45^1000 is 0 in f64: computed relative to the largest value, the tie stays.
        let out = temperature(&[0.45, 0.45, 0.1], 0.001).unwrap();
        assert_eq!(out, vec![0.5, 0.5, 0.0]);
        let out = temperature(&[0.2, 0.5, 0.3], 1e-6).unwrap();
        assert_eq!(out, vec![0.0, 1.0, 0.0]);
        assert_eq!(temperature(&[0.0, 0.0], 0.5).unwrap(), vec![0.5, 0.5]);
    }

    #[test]
    fn temperature_is_invertible() {
        let p = [0.7, 0.2, 0.1, 0.0];
        let r = temperature(&p, 2.0).unwrap();
        let s: f64 = [0.7f64, 0.2, 0.1].iter().map(|v| v.sqrt()).sum();
        assert!(close(
            &r,
            &[0.7f64.sqrt() / s, 0.2f64.sqrt() / s, 0.1f64.sqrt() / s, 0.0]
        ));
        let back_sum: f64 = r.iter().map(|v| v * v).sum();
        let back: Vec<f64> = r.iter().map(|v| v * v / back_sum).collect();
        assert!(close(&back, &p));
        assert!(temperature(&p, 0.0).is_err());
        assert!(close(&temperature(&[0.0, 0.0], 2.0).unwrap(), &[0.5, 0.5]));
    }

    #[test]
    fn gaussian_is_seeded_clamped_and_averages_away() {
        let p = [0.6, 0.3, 0.1];
        let a = gaussian(&p, 0.05, &mut Rng::new(20261011)).unwrap();
        let b = gaussian(&p, 0.05, &mut Rng::new(20261011)).unwrap();
        assert_eq!(a, b);
        assert!((a.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(a.iter().all(|v| *v >= 0.0));
        assert!(close(&gaussian(&p, 0.0, &mut Rng::new(1)).unwrap(), &p));
        // Huge noise with a zero vector: either normalized or uniform, never NaN.
        let z = gaussian(&[0.0, 0.0], 1e-300, &mut Rng::new(3)).unwrap();
        assert!(z.iter().all(|v| v.is_finite()));
        let mut rng = Rng::new(9);
        let mut mean = [0.0; 3];
        for _ in 0..4000 {
            for (m, v) in mean.iter_mut().zip(gaussian(&p, 0.05, &mut rng).unwrap()) {
                *m += v / 4000.0;
            }
        }
        assert!(
            close(&mean.map(|m| (m * 100.0).round()), &[60.0, 30.0, 10.0]),
            "{mean:?}"
        );
        assert!(gaussian(&p, -1.0, &mut rng).is_err());
    }
}
