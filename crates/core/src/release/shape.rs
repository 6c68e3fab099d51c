//! The complete shape's fills: every field a choice or score answer requires,
//! computed from the fields the release does carry, so a fill adds no
//! information.
//!
//! | released | `probabilities` fill | `confidence` fill |
//! |---|---|---|
//! | choice only | one-hot on the choice | 1 (the definition on the one-hot) |
//! | choice + confidence c | `p(choice) = c·(1 − 1/k) + 1/k`, the rest `(1 − p(choice))/(k − 1)` each | — |
//! | choice + probabilities | — | the definition on the released probabilities |
//!
//! The confidence definition is Jev's (`choice_confidence`, `score_confidence`).
//! Fills are rounded to 12 decimals. For a partial probability map (top-k, a withheld selection's own
//! probability) the omitted classes first share the missing mass
//! `max(0, 1 − Σ released)` evenly; the map itself stays partial (the clients
//! accept partial maps). The confidence fill of the choice + confidence case is
//! the released confidence itself: both definitions give back `c` on the filled
//! vector. Noul answers need only `noul`, which every view with a choice carries.

use crate::wire::{self, Kind};

/// The prediction fields of one choice or score answer in label order, as
/// written or as read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    /// Index of the selected label.
    pub choice: usize,
    /// `None`: the field is absent; otherwise one entry per label, `None` for an omitted class.
    pub probabilities: Option<Vec<Option<f64>>>,
    /// The confidence, if present.
    pub confidence: Option<f64>,
}

/// Fills every absent required field of a choice or score answer with `k =
/// labels.len()` classes (idempotent: a complete answer is left unchanged).
pub fn fill(kind: Kind, labels: &[String], parts: &mut Parts) {
    let k = labels.len();
    if parts.probabilities.is_none() {
        let vector = match parts.confidence {
            Some(c) => implied(k, parts.choice, c),
            None => one_hot(k, parts.choice),
        };
        parts.probabilities = Some(vector.into_iter().map(|p| Some(fixed(p))).collect());
    }
    if parts.confidence.is_none() {
        let entries = parts.probabilities.as_deref().unwrap_or_default();
        parts.confidence = Some(confidence_of(kind, labels, entries));
    }
}

/// The fixed decimal form of every number the proxy computes (fills, coarse sums,
/// derived confidences, scores, baseline outputs): rounded to 12 decimal places, half
/// away from zero, then printed in the shortest form that reads back as that number.
/// Float noise of the arithmetic (0.9477999999999998 for 0.9478, 0.30000000000000004 for
/// 0.1 + 0.2) never goes out, and equal values always print identically, so the bytes
/// cannot tell how a sum was made up. Idempotent on the values the proxy releases (at
/// most 25 in magnitude).
pub fn fixed(x: f64) -> f64 {
    let y = (x * 1e12).round() / 1e12;
    // -0.0 prints as "-0.0": one spelling of zero.
    if y == 0.0 { 0.0 } else { y }
}

/// The confidence a released vector implies: the definition for `kind` on the vector
/// completed as the fills complete it (omitted classes share the missing mass), in the
/// fixed decimal form. What the complete shape's confidence fill writes, and what every
/// baseline mechanism releases as its confidence.
pub fn confidence_of(kind: Kind, labels: &[String], entries: &[Option<f64>]) -> f64 {
    fixed(confidence(kind, labels, &completed(labels.len(), entries)))
}

/// The confidence definition for `kind`: [`choice_confidence`] for choice
/// answers, [`score_confidence`] (over the labels' levels) for score answers.
pub fn confidence(kind: Kind, labels: &[String], p: &[f64]) -> f64 {
    match kind {
        Kind::Score => {
            let levels: Vec<f64> = labels
                .iter()
                .enumerate()
                .map(|(i, l)| l.parse::<f64>().unwrap_or(i as f64))
                .collect();
            score_confidence(&levels, p)
        }
        Kind::Choice | Kind::Noul | Kind::Box => choice_confidence(p),
    }
}

/// Jev's choice confidence: `clip((p_max − 1/k)/(1 − 1/k), 0, 1)`.
pub fn choice_confidence(p: &[f64]) -> f64 {
    let k = p.len() as f64;
    if p.len() < 2 {
        return 1.0;
    }
    let p_max = p.iter().copied().fold(0.0, f64::max);
    clip((p_max - 1.0 / k) / (1.0 - 1.0 / k))
}

/// Jev's score confidence: `clip(1 − Σ p_i·|ℓ_i − ℓ_a| / MAD, 0, 1)`, where `a`
/// is the most probable level (the earliest on ties) and `MAD = (1/k) Σ_i
/// |ℓ_i − ℓ_a|` is the same spread under the uniform vector.
pub fn score_confidence(levels: &[f64], p: &[f64]) -> f64 {
    if p.is_empty() || levels.len() != p.len() {
        return 1.0;
    }
    let anchor = levels[wire::argmax(p)];
    let spread: f64 = p
        .iter()
        .zip(levels)
        .map(|(p, l)| p * (l - anchor).abs())
        .sum();
    let mad = levels.iter().map(|l| (l - anchor).abs()).sum::<f64>() / levels.len() as f64;
    if mad <= 0.0 {
        return 1.0;
    }
    clip(1.0 - spread / mad)
}

/// The vector a released confidence `c` implies for the selected class under
/// both definitions: `p(choice) = c·(1 − 1/k) + 1/k`, the rest shared evenly.
pub fn implied(k: usize, choice: usize, c: f64) -> Vec<f64> {
    if k < 2 {
        return one_hot(k, choice);
    }
    let kf = k as f64;
    let selected = clip(c) * (1.0 - 1.0 / kf) + 1.0 / kf;
    let rest = (1.0 - selected) / (kf - 1.0);
    (0..k)
        .map(|i| if i == choice { selected } else { rest })
        .collect()
}

/// The one-hot vector of `choice` over `k` classes.
pub fn one_hot(k: usize, choice: usize) -> Vec<f64> {
    (0..k)
        .map(|i| if i == choice { 1.0 } else { 0.0 })
        .collect()
}

/// A possibly partial map completed for the confidence definition: omitted
/// classes share `max(0, 1 − Σ released)` evenly.
fn completed(k: usize, entries: &[Option<f64>]) -> Vec<f64> {
    let entry = |i: usize| entries.get(i).copied().flatten();
    let released: f64 = (0..k).filter_map(entry).sum();
    let omitted = (0..k).filter(|&i| entry(i).is_none()).count();
    let share = if omitted == 0 {
        0.0
    } else {
        (1.0 - released).max(0.0) / omitted as f64
    };
    (0..k).map(|i| entry(i).unwrap_or(share)).collect()
}

fn clip(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(k: usize) -> Vec<String> {
        (0..k).map(|i| i.to_string()).collect()
    }

    #[test]
    fn the_definitions_match_the_documented_reference_values() {
        // (0.85 − 1/3)/(2/3) = 0.775; score {0, 0.95, 0.05} → 0.925; {0.16, 0.28, 0.33, 0.23} → 0.107.
        assert!((choice_confidence(&[0.85, 0.0, 0.15]) - 0.775).abs() < 1e-12);
        assert!((score_confidence(&[0.0, 1.0, 2.0], &[0.0, 0.95, 0.05]) - 0.925).abs() < 1e-12);
        assert!((choice_confidence(&[0.16, 0.28, 0.33, 0.23]) - 0.10666666666666667).abs() < 1e-12);
        for k in 2..9 {
            for choice in 0..k {
                let hot = one_hot(k, choice);
                assert_eq!(choice_confidence(&hot), 1.0);
                assert_eq!(confidence(Kind::Score, &labels(k), &hot), 1.0);
                let uniform = vec![1.0 / k as f64; k];
                assert!(choice_confidence(&uniform).abs() < 1e-12);
                assert!(confidence(Kind::Score, &labels(k), &uniform).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn the_implied_vector_gives_back_the_released_confidence_under_both_definitions() {
        for k in 2..9 {
            for choice in 0..k {
                for c in [0.0, 0.1, 0.37, 0.5, 0.92, 1.0] {
                    let p = implied(k, choice, c);
                    assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
                    assert!((choice_confidence(&p) - c).abs() < 1e-12, "k {k} c {c}");
                    let score = confidence(Kind::Score, &labels(k), &p);
                    assert!(
                        (score - c).abs() < 1e-12,
                        "k {k} choice {choice} c {c}: {score}"
                    );
                    if c > 0.0 {
                        assert_eq!(wire::argmax(&p), choice);
                    }
                }
            }
        }
    }

    #[test]
    fn fills_complete_only_the_absent_fields() {
        let labels = labels(4);
        let mut only_choice = Parts {
            choice: 2,
            probabilities: None,
            confidence: None,
        };
        fill(Kind::Choice, &labels, &mut only_choice);
        assert_eq!(
            only_choice.probabilities,
            Some(vec![Some(0.0), Some(0.0), Some(1.0), Some(0.0)])
        );
        assert_eq!(only_choice.confidence, Some(1.0));
        let again = only_choice.clone();
        fill(Kind::Choice, &labels, &mut only_choice);
        assert_eq!(only_choice, again, "idempotent");

        // A partial map stays partial; its confidence uses the evenly shared missing mass.
        let mut top = Parts {
            choice: 0,
            probabilities: Some(vec![Some(0.6), Some(0.3), None, None]),
            confidence: None,
        };
        fill(Kind::Choice, &labels, &mut top);
        assert_eq!(
            top.probabilities,
            Some(vec![Some(0.6), Some(0.3), None, None])
        );
        assert!((top.confidence.unwrap() - (0.6 - 0.25) / 0.75).abs() < 1e-12);
        let mut score_top = Parts {
            choice: 1,
            probabilities: Some(vec![None, Some(0.7), Some(0.2), None]),
            confidence: None,
        };
        fill(Kind::Score, &labels, &mut score_top);
        let expected = score_confidence(&[0.0, 1.0, 2.0, 3.0], &[0.05, 0.7, 0.2, 0.05]);
        assert!((score_top.confidence.unwrap() - expected).abs() < 1e-12);
    }

    #[test]
    fn score_confidence_reads_levels_not_positions() {
        // Classes in the order "2", "0", "1": level 1 is the third class.
        let labels: Vec<String> = ["2", "0", "1"].iter().map(|s| s.to_string()).collect();
        let p = [0.05, 0.0, 0.95];
        let by_level = confidence(Kind::Score, &labels, &p);
        assert!((by_level - 0.925).abs() < 1e-12, "{by_level}");
    }
}
