//! The record a codebook file keeps of `build-codebook --budget`'s guard: the bounded codebook
//! measured against the strict one on the validation split, paired, and which of the two was
//! written. The measurement is the lab's (`releasegate_lab::audit::guard`); this is its form in
//! the artifact and the rule that decides, so a loaded file can be checked against it.

use serde::{Deserialize, Serialize};

/// Which codebook the guard wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Chosen {
    /// The bounded (learned) codebook: shown to leak less than strict on validation.
    Bounded,
    /// The strict codebook: the bounded one was not shown to leak less.
    Strict,
}

/// A point estimate with its 95% pair-clustered interval, over `pairs` validation pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    /// Point estimate (a fraction; recovery differences are fractions of worlds).
    pub point: f64,
    /// 2.5th percentile of the bootstrap.
    pub lower: f64,
    /// 97.5th percentile of the bootstrap.
    pub upper: f64,
    /// Distinct pairs measured.
    pub pairs: usize,
}

/// What the guard measured and chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guard {
    /// The budget α the bounded codebook was learned for.
    pub budget: f64,
    /// Its K.
    pub max_codewords: usize,
    /// Its pair weight.
    pub pair_weight: u32,
    /// The codebook written.
    pub chosen: Chosen,
    /// Why, in one sentence.
    pub reason: String,
    /// Validation recovery of the strict codebook's release (None when not measured).
    pub strict_recovery: Option<Figure>,
    /// Validation recovery of the bounded codebook's release.
    pub bounded_recovery: Option<Figure>,
    /// Bounded minus strict recovery, paired over the same validation pairs.
    pub difference: Option<Figure>,
    /// Bootstrap resamples of every interval.
    pub bootstrap: usize,
    /// Seed of the bootstrap.
    pub seed: u64,
}

/// The rule: the bounded codebook is written only when the upper bound of the paired
/// difference (bounded − strict) is below 0; without a difference, strict.
pub fn choose(difference: Option<&Figure>) -> Chosen {
    match difference {
        Some(figure) if figure.upper.is_finite() && figure.upper < 0.0 => Chosen::Bounded,
        _ => Chosen::Strict,
    }
}

// === impl Guard ===

impl Guard {
    /// Checks the record against itself and against the file's learned budget (`learned`: the
    /// file's budget, K and pair weight when it is a learned codebook).
    pub fn validate(&self, learned: Option<(f64, usize, u32)>) -> Result<(), String> {
        if !(self.budget.is_finite() && self.budget >= 0.0) || self.max_codewords == 0 {
            return Err("budget and max_codewords must be a budget α >= 0 and K >= 1".into());
        }
        let figures = [
            &self.strict_recovery,
            &self.bounded_recovery,
            &self.difference,
        ];
        for figure in figures.into_iter().flatten() {
            let values = [figure.point, figure.lower, figure.upper];
            if values.iter().any(|v| !v.is_finite()) || figure.lower > figure.upper {
                return Err("every figure needs finite point and lower <= upper".into());
            }
        }
        if choose(self.difference.as_ref()) == Chosen::Strict && self.chosen == Chosen::Bounded {
            return Err("records the bounded codebook without an upper bound below 0".into());
        }
        match (self.chosen, learned) {
            (Chosen::Strict, None) => Ok(()),
            (Chosen::Bounded, Some(file))
                if file == (self.budget, self.max_codewords, self.pair_weight) =>
            {
                Ok(())
            }
            (Chosen::Strict, Some(_)) => {
                Err("chose strict, but the file is a learned codebook".into())
            }
            (Chosen::Bounded, _) => Err(
                "chose the bounded codebook, but the file is not the one learned for its budget, K and pair weight"
                    .into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figure(upper: f64) -> Figure {
        Figure {
            point: upper - 0.05,
            lower: upper - 0.1,
            upper,
            pairs: 40,
        }
    }

    fn guard(chosen: Chosen, upper: f64) -> Guard {
        Guard {
            budget: 0.2,
            max_codewords: 64,
            pair_weight: 4,
            chosen,
            reason: "test".into(),
            strict_recovery: Some(figure(0.6)),
            bounded_recovery: Some(figure(0.55)),
            difference: Some(figure(upper)),
            bootstrap: 100,
            seed: 1,
        }
    }

    #[test]
    fn only_an_upper_bound_below_zero_chooses_the_bounded_codebook() {
        assert_eq!(choose(Some(&figure(-0.001))), Chosen::Bounded);
        assert_eq!(choose(Some(&figure(0.0))), Chosen::Strict);
        assert_eq!(choose(Some(&figure(0.03))), Chosen::Strict);
        assert_eq!(choose(Some(&figure(f64::NAN))), Chosen::Strict);
        assert_eq!(choose(None), Chosen::Strict);
    }

    #[test]
    fn a_record_must_agree_with_its_rule_and_its_file() {
        let learned = Some((0.2, 64, 4));
        assert!(guard(Chosen::Bounded, -0.01).validate(learned).is_ok());
        assert!(guard(Chosen::Strict, 0.01).validate(None).is_ok());
        // Strict may be chosen whatever the figures (fail safe); bounded only below zero.
        assert!(guard(Chosen::Strict, -0.01).validate(None).is_ok());
        for (record, file, expected) in [
            (guard(Chosen::Bounded, 0.01), learned, "upper bound"),
            (guard(Chosen::Bounded, -0.01), None, "not the one learned"),
            (
                guard(Chosen::Bounded, -0.01),
                Some((0.04, 64, 4)),
                "not the one",
            ),
            (guard(Chosen::Strict, 0.01), learned, "chose strict"),
        ] {
            let error = record.validate(file).unwrap_err();
            assert!(error.contains(expected), "{error}");
        }
        let mut bad = guard(Chosen::Strict, 0.01);
        bad.difference = Some(Figure {
            lower: 0.5,
            ..figure(0.01)
        });
        assert!(bad.validate(None).unwrap_err().contains("lower <= upper"));
        bad.difference = None;
        bad.budget = f64::NAN;
        assert!(bad.validate(None).is_err());
    }

    #[test]
    fn the_record_travels_with_the_file_and_old_files_load_without_one() {
        use crate::codebook::{Codebook, Settings, build, learn};
        let classes: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
        let spec = crate::workflow::Spec::standard(classes.clone()).unwrap();
        let strict = build(&classes, 4, &spec, &[], "t".into()).unwrap().codebook;
        // A file without the record (every file written before the guard) loads as before.
        let old = strict.to_json_bytes();
        assert!(!String::from_utf8_lossy(&old).contains("guard"));
        assert_eq!(Codebook::from_json(&old).unwrap().guard(), None);
        let response = crate::codebook::Response {
            pair_id: "p".into(),
            native: crate::workflow::Release {
                choice: 0,
                probabilities: Some(vec![0.6, 0.2, 0.1, 0.1]),
                confidence: Some(0.5),
            },
            public: Vec::new(),
        };
        let (bounded, _) =
            learn(&strict, &spec, &[response], &[], &Settings::new(0.2, 64)).unwrap();
        let key = Some((0.2, 64, crate::codebook::DEFAULT_PAIR_WEIGHT));
        let record = |chosen, upper| Guard {
            pair_weight: crate::codebook::DEFAULT_PAIR_WEIGHT,
            ..guard(chosen, upper)
        };
        assert_eq!(bounded.learned_key(), key);
        for (codebook, chosen, upper) in [
            (strict.clone(), Chosen::Strict, 0.02),
            (bounded.clone(), Chosen::Bounded, -0.02),
        ] {
            let guarded = codebook.with_guard(record(chosen, upper)).unwrap();
            let bytes = guarded.to_json_bytes();
            let loaded = Codebook::from_json(&bytes).unwrap();
            assert_eq!(loaded.guard(), Some(&record(chosen, upper)));
            assert_eq!(loaded.to_json_bytes(), bytes, "byte for byte");
        }
        // A record that does not fit its file is refused, built or loaded.
        assert!(
            strict
                .clone()
                .with_guard(record(Chosen::Bounded, -0.02))
                .is_err()
        );
        assert!(
            bounded
                .clone()
                .with_guard(record(Chosen::Strict, 0.02))
                .is_err()
        );
        let text = String::from_utf8(
            strict
                .with_guard(record(Chosen::Strict, -0.02))
                .unwrap()
                .to_json_bytes(),
        )
        .unwrap();
        let edited = text.replace("\"chosen\":\"strict\"", "\"chosen\":\"bounded\"");
        assert_ne!(edited, text);
        let error = Codebook::from_json(edited.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(error.contains("guard"), "{error}");
    }
}
