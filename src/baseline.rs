//! Baseline release mechanisms for comparison with WCPQ (`docs/wcpq-rules.md` section 8):
//! quantization, top-k, temperature smoothing and Gaussian noise, on probability vectors in the
//! order the caller passes (canonical class order unless stated otherwise).
//!
//! None of them preserves the frozen workflows' plans in general; they exist to measure what
//! WCPQ buys.

use crate::rng::Rng;

/// Smallest accepted quantization step (keeps unit counts far inside `i64`).
pub const MIN_STEP: f64 = 1e-9;

/// Slack absorbing representation error in `floor(p_i / step)` (e.g. 0.3 / 0.1 = 2.9999999999999996).
pub const FLOOR_SLACK: f64 = 1e-9;

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
}

/// Quantizes to multiples of `step` by largest remainder.
///
/// With `U = floor(1/step + 1e-9)` units: `n_i = floor(p_i/step + 1e-9)`, then the `U - sum n_i`
/// remaining units go to the largest fractional remainders `p_i/step - n_i`, ties to the earlier
/// position; the release is `n_i * step`. The input is first divided by its sum when that is not
/// 1 (a zero vector becomes uniform). When `step` does not divide 1 (e.g. 0.3), only the `U`
/// whole units are distributed, so the released values sum to `U * step < 1`, never above 1.
/// Should flooring ever yield more than `U` units, units are removed from the smallest
/// remainders (ties: later position first).
pub fn quantize(p: &[f64], step: f64) -> Result<Vec<f64>, Error> {
    if !(step.is_finite() && (MIN_STEP..=1.0).contains(&step)) {
        return Err(Error::Parameter {
            name: "step",
            expected: "in [1e-9, 1]",
            value: step,
        });
    }
    let p = normalized(p)?;
    let units = (1.0 / step + FLOOR_SLACK).floor() as i64;
    let scaled: Vec<f64> = p.iter().map(|v| v / step).collect();
    let mut counts: Vec<i64> = scaled
        .iter()
        .map(|x| (x + FLOOR_SLACK).floor() as i64)
        .collect();
    let remainders: Vec<f64> = scaled
        .iter()
        .zip(&counts)
        .map(|(x, &k)| x - k as f64)
        .collect();
    // Positions by remainder descending, ties by position ascending (a stable sort keeps them).
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| remainders[b].total_cmp(&remainders[a]));
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
    Ok(counts.iter().map(|&k| k as f64 * step).collect())
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
    let powered: Vec<f64> = p.iter().map(|v| v.powf(1.0 / tau)).collect();
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
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12)
    }

    #[test]
    fn quantize_uses_largest_remainder_with_positional_ties() {
        let q = quantize(&[0.35, 0.35, 0.3], 0.1).unwrap();
        // floors 3, 3, 3 (0.3/0.1 needs the slack); remainders .5, .5, 0: the tie goes to position 0.
        assert!(
            close(&q, &[0.4, 0.30000000000000004, 0.30000000000000004]),
            "{q:?}"
        );
        let q = quantize(&[0.25, 0.25, 0.25, 0.25], 0.1).unwrap();
        // floors 2 each, 2 units left, all remainders 0.5: positions 0 and 1.
        assert!(
            close(&q, &[0.30000000000000004, 0.30000000000000004, 0.2, 0.2]),
            "{q:?}"
        );
        let q = quantize(&[0.07, 0.93], 0.1).unwrap();
        assert!(close(&q, &[0.1, 0.9]), "{q:?}");
        let sum: f64 = quantize(&[0.123, 0.456, 0.421], 0.1).unwrap().iter().sum();
        assert!((sum - 1.0).abs() < 1e-12);
    }

    #[test]
    fn quantize_handles_odd_steps_and_bad_input() {
        // 0.3 does not divide 1: three units of 0.3, sum 0.9.
        let q = quantize(&[0.5, 0.5], 0.3).unwrap();
        assert!(close(&q, &[0.6, 0.3]), "{q:?}");
        assert!(quantize(&[0.5, 0.5], 0.0).is_err());
        assert!(quantize(&[0.5, 0.5], f64::NAN).is_err());
        assert!(quantize(&[0.5, 0.5], 1.5).is_err());
        assert!(quantize(&[0.5, 0.5], 1e-300).is_err());
        let fine = quantize(&[0.3, 0.7], 1e-9).unwrap();
        assert!((fine.iter().sum::<f64>() - 1.0).abs() < 1e-6);
        assert!(quantize(&[], 0.1).is_err());
        assert!(quantize(&[0.5, f64::NAN], 0.1).is_err());
        assert!(close(&quantize(&[0.0, 0.0], 0.5).unwrap(), &[0.5, 0.5]));
        // Unnormalized input is normalized first.
        assert!(close(&quantize(&[2.0, 2.0], 0.5).unwrap(), &[0.5, 0.5]));
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
