//! Attack-side feature construction: release field subviews and the raw,
//! log-ratio and residual representations of a released decision.
//!
//! Missing fields are never read as observed zeros: every field carries an
//! availability indicator and a missing value is encoded as 0 next to an
//! indicator of 0.

use serde::Serialize;

use super::{Example, ReleasedFeatures, ReleasedUsage};

/// Floor added inside logarithms of probabilities (paper Appendix D.3).
pub const LOG_EPS: f64 = 1e-4;
/// Residual mass at or below this is "zero residual mass".
pub const ZERO_MASS: f64 = 1e-12;

/// Which release fields a view exposes to the attacker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FieldSet {
    /// The selected class.
    pub choice: bool,
    /// The per-class probability vector.
    pub probabilities: bool,
    /// The native confidence.
    pub confidence: bool,
    /// The released token counts (`usage`): read with every subview but no output, since
    /// they go out with every answer the contract releases.
    #[serde(default)]
    pub usage: bool,
}

/// How a probability-bearing view is turned into numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Representation {
    /// Indicators, probabilities, confidence and availability flags.
    Raw,
    /// Raw plus `log(p_i + eps) - log(p_ref + eps)` against class 0 of the canonical order.
    LogRatio,
    /// Raw plus residual mass `max(0, 1 - p_T)`, its indicators and the incorrect-class
    /// proportions `p_i / (1 - p_T)`.
    Residual,
}

/// A feature row and which of its columns are numeric (not indicators).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// Feature values.
    pub values: Vec<f64>,
    /// `true` where the column is a numeric (probability-like) feature.
    pub numeric: Vec<bool>,
}

// === impl FieldSet ===

impl FieldSet {
    /// The no-output view.
    pub const NONE: FieldSet = FieldSet {
        choice: false,
        probabilities: false,
        confidence: false,
        usage: false,
    };

    /// Stable snake_case name (`no_output`, `choice`, `choice_confidence`,
    /// `choice_probabilities`, `full`, or a generic join for other sets).
    /// The token counts do not change the name (`Strategy::fields` says whether they were
    /// read), except where they are all there is (`usage`).
    pub fn name(&self) -> String {
        match (self.choice, self.probabilities, self.confidence) {
            (false, false, false) if self.usage => "usage".to_string(),
            (false, false, false) => "no_output".to_string(),
            (true, false, false) => "choice".to_string(),
            (true, false, true) => "choice_confidence".to_string(),
            (true, true, false) => "choice_probabilities".to_string(),
            (true, true, true) => "full".to_string(),
            (false, true, false) => "probabilities".to_string(),
            (false, false, true) => "confidence".to_string(),
            (false, true, true) => "probabilities_confidence".to_string(),
        }
    }

    /// Whether every field of `self` is in `other`.
    pub fn is_subset_of(&self, other: &FieldSet) -> bool {
        (!self.choice || other.choice)
            && (!self.probabilities || other.probabilities)
            && (!self.confidence || other.confidence)
            && (!self.usage || other.usage)
    }

    /// The fields present in at least one example.
    pub fn observed<'a>(examples: impl IntoIterator<Item = &'a Example>) -> FieldSet {
        let mut set = FieldSet::NONE;
        for ex in examples {
            set.choice |= ex.release.choice.is_some();
            set.probabilities |= ex.release.probabilities.is_some();
            set.confidence |= ex.release.confidence.is_some();
            set.usage |= !ex.release.usage.is_empty();
            for part in &ex.release.joint {
                set.choice |= part.choice.is_some();
                set.probabilities |= part.probabilities.is_some();
                set.confidence |= part.confidence.is_some();
                set.usage |= !part.usage.is_empty();
            }
        }
        set
    }

    /// Nested subviews the attacker may select from (paper D.3): the view itself, then
    /// choice+probabilities, choice+confidence, choice and no output when permitted. Every
    /// subview but no output reads the released token counts when the view has them.
    pub fn subviews(&self) -> Vec<FieldSet> {
        let usage = self.usage;
        let candidates = [
            *self,
            FieldSet {
                choice: true,
                probabilities: true,
                confidence: false,
                usage,
            },
            FieldSet {
                choice: true,
                probabilities: false,
                confidence: true,
                usage,
            },
            FieldSet {
                choice: true,
                probabilities: false,
                confidence: false,
                usage,
            },
            FieldSet::NONE,
        ];
        let mut out: Vec<FieldSet> = Vec::new();
        for c in candidates {
            if c.is_subset_of(self) && !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }

    /// Representations searched for this view.
    pub fn representations(&self) -> Vec<Representation> {
        if self.probabilities {
            vec![
                Representation::Raw,
                Representation::LogRatio,
                Representation::Residual,
            ]
        } else {
            vec![Representation::Raw]
        }
    }
}

// === impl Representation ===

impl Representation {
    /// Stable short name.
    pub fn name(&self) -> &'static str {
        match self {
            Representation::Raw => "raw",
            Representation::LogRatio => "logratio",
            Representation::Residual => "residual",
        }
    }
}

/// A probability entry if observed and finite.
fn prob(release: &ReleasedFeatures, i: usize) -> Option<f64> {
    release
        .probabilities
        .as_ref()
        .and_then(|p| p.get(i).copied().flatten())
        .filter(|v| v.is_finite())
}

/// Builds the release feature row for `fields` and `rep` with `k` class slots.
/// `t_index` is the authorized class (used by the choice==T flag and the residual).
pub fn release_row(
    release: &ReleasedFeatures,
    t_index: usize,
    k: usize,
    fields: FieldSet,
    rep: Representation,
) -> Row {
    let mut row = Row::default();
    if fields.choice {
        row.push_choice(release, t_index, k);
    }
    if fields.probabilities {
        row.push_probabilities(release, t_index, k);
        match rep {
            Representation::Raw => {}
            Representation::LogRatio => row.push_log_ratios(release, k),
            Representation::Residual => row.push_residual(release, t_index, k),
        }
    }
    if fields.confidence {
        let conf = release.confidence.filter(|v| v.is_finite());
        row.push(conf.unwrap_or(0.0), true);
        row.flag(conf.is_some());
    }
    if fields.usage {
        push_usage(&mut row.values, &mut row.numeric, &release.usage);
    }
    // The recipient's other releases of the same world, each in its own label space, under
    // the same fields and representation.
    for part in &release.joint {
        let single = ReleasedFeatures {
            choice: part.choice,
            probabilities: part.probabilities.clone(),
            confidence: part.confidence,
            usage: part.usage,
            joint: Vec::new(),
        };
        let more = release_row(&single, part.t_index, part.class_count, fields, rep);
        row.values.extend(more.values);
        row.numeric.extend(more.numeric);
    }
    row
}

// === impl Row ===

impl Row {
    /// Appends one column.
    fn push(&mut self, v: f64, numeric: bool) {
        self.values.push(v);
        self.numeric.push(numeric);
    }

    /// Appends a 0/1 indicator column.
    fn flag(&mut self, on: bool) {
        self.push(if on { 1.0 } else { 0.0 }, false);
    }

    /// The choice one-hot, whether a choice was released, and whether it is `T`.
    fn push_choice(&mut self, release: &ReleasedFeatures, t_index: usize, k: usize) {
        let choice = release.choice.filter(|&c| c < k);
        for i in 0..k {
            self.flag(choice == Some(i));
        }
        self.flag(choice.is_some());
        self.flag(choice == Some(t_index));
    }

    /// The probabilities and their presence, then `P(T)` and its presence.
    fn push_probabilities(&mut self, release: &ReleasedFeatures, t_index: usize, k: usize) {
        for i in 0..k {
            self.push(prob(release, i).unwrap_or(0.0), true);
        }
        for i in 0..k {
            self.flag(prob(release, i).is_some());
        }
        let p_t = prob(release, t_index);
        self.push(p_t.unwrap_or(0.0), true);
        self.flag(p_t.is_some());
    }

    /// Log ratios of every class to class 0, and whether both were released.
    fn push_log_ratios(&mut self, release: &ReleasedFeatures, k: usize) {
        let reference = prob(release, 0);
        for i in 1..k {
            let ratio = match (prob(release, i), reference) {
                (Some(p), Some(r)) => (p.max(0.0) + LOG_EPS).ln() - (r.max(0.0) + LOG_EPS).ln(),
                _ => 0.0,
            };
            self.push(ratio, true);
        }
        for i in 1..k {
            self.flag(prob(release, i).is_some() && reference.is_some());
        }
    }

    /// The mass off `T`, its presence, whether it is zero, and each other class's share of it.
    fn push_residual(&mut self, release: &ReleasedFeatures, t_index: usize, k: usize) {
        let mass = prob(release, t_index).map(|p| (1.0 - p).max(0.0));
        self.push(mass.unwrap_or(0.0), true);
        self.flag(mass.is_some());
        self.flag(mass.is_some_and(|m| m <= ZERO_MASS));
        for i in 0..k {
            let share = match (mass, prob(release, i)) {
                (Some(m), Some(p)) if i != t_index && m > ZERO_MASS => p.max(0.0) / m,
                _ => 0.0,
            };
            self.push(share, true);
        }
    }
}

/// The token counts as `ln(1 + count)` (numeric), each beside its availability flag.
fn push_usage(values: &mut Vec<f64>, numeric: &mut Vec<bool>, usage: &ReleasedUsage) {
    for count in [usage.input_tokens, usage.output_tokens] {
        let count = count.filter(|v| v.is_finite());
        values.push(count.map_or(0.0, |v| v.max(0.0).ln_1p()));
        numeric.push(true);
        values.push(if count.is_some() { 1.0 } else { 0.0 });
        numeric.push(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(p: Option<Vec<Option<f64>>>) -> ReleasedFeatures {
        ReleasedFeatures {
            choice: Some(1),
            probabilities: p,
            confidence: Some(0.7),
            usage: Default::default(),
            joint: Vec::new(),
        }
    }

    const ALL: FieldSet = FieldSet {
        choice: true,
        probabilities: true,
        confidence: true,
        usage: false,
    };

    #[test]
    fn subviews_are_nested_and_ordered() {
        let names: Vec<String> = ALL.subviews().iter().map(|f| f.name()).collect();
        assert_eq!(
            names,
            [
                "full",
                "choice_probabilities",
                "choice_confidence",
                "choice",
                "no_output"
            ]
        );
        assert_eq!(FieldSet::NONE.subviews(), vec![FieldSet::NONE]);
        let probs_only = FieldSet {
            choice: false,
            probabilities: true,
            confidence: false,
            usage: false,
        };
        assert_eq!(probs_only.subviews(), vec![probs_only, FieldSet::NONE]);
        // Released token counts go with every subview but no output.
        let with_usage = FieldSet { usage: true, ..ALL };
        let subviews = with_usage.subviews();
        assert_eq!(subviews.len(), 5);
        assert!(subviews[..4].iter().all(|f| f.usage));
        assert_eq!(subviews[4], FieldSet::NONE);
        let usage_only = FieldSet {
            usage: true,
            ..FieldSet::NONE
        };
        assert_eq!(usage_only.subviews(), vec![usage_only, FieldSet::NONE]);
        assert_eq!(usage_only.name(), "usage");
    }

    #[test]
    fn released_token_counts_are_read_with_their_flags() {
        let mut r = release(None);
        r.usage = ReleasedUsage {
            input_tokens: Some(99.0),
            output_tokens: None,
        };
        let fields = FieldSet {
            choice: true,
            usage: true,
            ..FieldSet::NONE
        };
        let row = release_row(&r, 0, 3, fields, Representation::Raw);
        let without = release_row(
            &r,
            0,
            3,
            FieldSet {
                usage: false,
                ..fields
            },
            Representation::Raw,
        );
        assert_eq!(row.values[..without.values.len()], without.values[..]);
        assert_eq!(
            row.values[without.values.len()..],
            [100f64.ln(), 1.0, 0.0, 0.0]
        );
        assert_eq!(
            row.numeric[without.numeric.len()..],
            [true, false, true, false]
        );
    }

    #[test]
    fn residual_uses_authorized_class_and_flags_zero_mass() {
        let r = release(Some(vec![Some(0.0), Some(1.0), Some(0.0)]));
        let row = release_row(&r, 1, 3, ALL, Representation::Residual);
        // choice: 3 + 2; probs: 3 + 3 + 2; residual: 3 + 3; conf: 2
        assert_eq!(row.values.len(), 21);
        let base = 5 + 8;
        assert_eq!(row.values[base], 0.0); // mass
        assert_eq!(row.values[base + 1], 1.0); // observed
        assert_eq!(row.values[base + 2], 1.0); // zero mass
        let r = release(Some(vec![Some(0.2), Some(0.6), Some(0.2)]));
        let row = release_row(&r, 1, 3, ALL, Representation::Residual);
        assert!((row.values[base] - 0.4).abs() < 1e-12);
        assert!((row.values[base + 3] - 0.5).abs() < 1e-12);
        assert_eq!(row.values[base + 4], 0.0);
    }

    #[test]
    fn missing_entries_are_flagged_not_zeroed() {
        let r = release(Some(vec![None, Some(0.9), Some(0.1)]));
        let row = release_row(&r, 1, 3, ALL, Representation::LogRatio);
        // probability availability flags follow the 3 values after the 5 choice columns
        assert_eq!(&row.values[8..11], &[0.0, 1.0, 1.0]);
        // ratios against missing class 0 are not computed
        assert_eq!(&row.values[13..15], &[0.0, 0.0]);
        assert_eq!(&row.values[15..17], &[0.0, 0.0]);
        let nan = release(Some(vec![Some(f64::NAN), Some(0.9), Some(0.1)]));
        let row2 = release_row(&nan, 1, 3, ALL, Representation::LogRatio);
        assert_eq!(row.values, row2.values);
    }

    #[test]
    fn log_ratio_against_class_zero() {
        let r = release(Some(vec![Some(0.5), Some(0.25), Some(0.25)]));
        let row = release_row(&r, 0, 3, ALL, Representation::LogRatio);
        let expect = (0.25 + LOG_EPS).ln() - (0.5 + LOG_EPS).ln();
        assert!((row.values[13] - expect).abs() < 1e-12);
    }
}
