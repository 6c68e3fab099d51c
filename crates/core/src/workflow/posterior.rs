//! Posterior estimators of the frozen workflows: native, constant prior, frozen logistic model.
//!
//! Every estimator's output is smoothed the same way: `q_t = (r_t + 1e-8) / sum_k (r_k + 1e-8)`,
//! where `r` is the raw estimate (the released vector, the prior, or the logistic softmax).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Release;
use crate::features::PublicFeatureSpec;

/// Additive smoothing applied to every posterior before renormalizing.
pub const POSTERIOR_SMOOTHING: f64 = 1e-8;

/// Format tag of a logistic model file.
pub const LOGISTIC_FORMAT: &str = "releasegate.logistic.v1";

/// A posterior estimator, frozen as part of the workflow definition.
#[derive(Debug, Clone, PartialEq)]
pub enum Posterior {
    /// The released probability vector; without released probabilities, the one-hot of `choice`.
    Native,
    /// A constant vector (already validated: length n, non-negative, sums to 1).
    Prior(Vec<f64>),
    /// A frozen multinomial logistic model over release and public request features.
    Logistic(Box<LogisticModel>),
}

/// A frozen multinomial logistic model (the JSON file format, `format` = [`LOGISTIC_FORMAT`]).
///
/// Feature vector x (length `F = 2n + 3 + public.dim()`), for n classes in canonical order:
/// - `x[0..n]`: one-hot of the released `choice`;
/// - `x[n..2n]`: released probabilities as sent (zeros when not released);
/// - `x[2n]`: released confidence (0 when not released);
/// - `x[2n+1]`: 1 if probabilities are released, else 0;
/// - `x[2n+2]`: 1 if confidence is released, else 0;
/// - `x[2n+3..]`: `public.extract(state)`.
///
/// With optional standardization `x'_f = (x_f - mean_f) / scale_f`, the logits are
/// `z_t = intercepts[t] + sum_f weights[t][f] * x'_f` (summed in f order), the raw estimate is
/// `softmax(z)` (computed as `exp(z_t - max z)` normalized), then smoothed as every posterior.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogisticModel {
    /// Must equal [`LOGISTIC_FORMAT`].
    pub format: String,
    /// Class labels in canonical order; must equal the question's classes.
    pub classes: Vec<String>,
    /// Public request features appended after the release features.
    pub public_features: PublicFeatureSpec,
    /// Optional per-feature means (length F).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<Vec<f64>>,
    /// Optional per-feature positive scales (length F).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<Vec<f64>>,
    /// One intercept per class.
    pub intercepts: Vec<f64>,
    /// One weight row (length F) per class.
    pub weights: Vec<Vec<f64>>,
}

// === impl Posterior ===

impl Posterior {
    /// True when the posterior reads only `choice` and `probabilities` of the release (never the
    /// confidence nor the request state), which lets the mapper precompute codeword plans.
    pub fn is_request_independent(&self) -> bool {
        !matches!(self, Posterior::Logistic(_))
    }

    /// True when plans depend on the request (a logistic posterior reads public features).
    pub fn is_request_dependent(&self) -> bool {
        !self.is_request_independent()
    }

    /// The public request features this posterior reads (empty unless logistic).
    pub fn public_features(&self, state: &Value) -> Vec<f64> {
        match self {
            Posterior::Logistic(model) => model.public_features.extract(state),
            _ => Vec::new(),
        }
    }

    /// Writes the smoothed posterior over `n` classes into `out`.
    ///
    /// Native: released probabilities of length n are used as given; probabilities that are absent
    /// (or of the wrong length) are replaced by the one-hot of `choice` (uniform if `choice >= n`).
    pub fn estimate(&self, n: usize, release: &Release, public: &[f64], out: &mut Vec<f64>) {
        out.clear();
        match self {
            Posterior::Native => match &release.probabilities {
                Some(p) if p.len() == n => out.extend_from_slice(p),
                _ => one_hot(n, release.choice, out),
            },
            Posterior::Prior(p) => out.extend_from_slice(p),
            Posterior::Logistic(model) => model.softmax(n, release, public, out),
        }
        smooth(out);
    }
}

/// Applies the 1e-8 smoothing and renormalization in place.
pub fn smooth(q: &mut [f64]) {
    let mut sum = 0.0;
    for v in q.iter() {
        sum += v + POSTERIOR_SMOOTHING;
    }
    for v in q.iter_mut() {
        *v = (*v + POSTERIOR_SMOOTHING) / sum;
    }
}

fn one_hot(n: usize, choice: usize, out: &mut Vec<f64>) {
    if choice < n {
        out.extend((0..n).map(|t| if t == choice { 1.0 } else { 0.0 }));
    } else {
        out.extend(std::iter::repeat_n(1.0 / n as f64, n));
    }
}

// === impl LogisticModel ===

impl LogisticModel {
    /// The number of features F the model expects for `n` classes.
    pub fn feature_count(&self, n: usize) -> usize {
        2 * n + 3 + self.public_features.dim()
    }

    /// Validates the model against the question's classes; errors name the offending field.
    pub fn validate(&self, classes: &[String]) -> Result<(), String> {
        let n = classes.len();
        if self.format != LOGISTIC_FORMAT {
            return Err(format!(
                "format: expected {LOGISTIC_FORMAT:?}, got {:?}",
                self.format
            ));
        }
        if self.classes != classes {
            return Err(format!(
                "classes: model classes {:?} differ from the question classes {:?}",
                self.classes, classes
            ));
        }
        let f = self.feature_count(n);
        let finite = |name: &str, v: &[f64]| -> Result<(), String> {
            match v.iter().position(|x| !x.is_finite()) {
                Some(i) => Err(format!("{name}[{i}]: not a finite number")),
                None => Ok(()),
            }
        };
        if self.intercepts.len() != n {
            return Err(format!(
                "intercepts: expected {n} values, got {}",
                self.intercepts.len()
            ));
        }
        finite("intercepts", &self.intercepts)?;
        if self.weights.len() != n {
            return Err(format!(
                "weights: expected {n} rows, got {}",
                self.weights.len()
            ));
        }
        for (t, row) in self.weights.iter().enumerate() {
            if row.len() != f {
                return Err(format!(
                    "weights[{t}]: expected {f} values (2n+3 release + {} public), got {}",
                    self.public_features.dim(),
                    row.len()
                ));
            }
            finite(&format!("weights[{t}]"), row)?;
        }
        if let Some(mean) = &self.mean {
            if mean.len() != f {
                return Err(format!("mean: expected {f} values, got {}", mean.len()));
            }
            finite("mean", mean)?;
        }
        if let Some(scale) = &self.scale {
            if scale.len() != f {
                return Err(format!("scale: expected {f} values, got {}", scale.len()));
            }
            if let Some(i) = scale.iter().position(|s| !(s.is_finite() && *s > 0.0)) {
                return Err(format!("scale[{i}]: must be a positive finite number"));
            }
        }
        Ok(())
    }

    /// Fills `out` with the model's (unsmoothed) softmax over `n` classes.
    fn softmax(&self, n: usize, release: &Release, public: &[f64], out: &mut Vec<f64>) {
        let probabilities = release.probabilities.as_deref();
        // The feature layout of `release_features`, read without allocating.
        let feature = |f: usize| -> f64 {
            if f < n {
                if release.choice == f { 1.0 } else { 0.0 }
            } else if f < 2 * n {
                probabilities
                    .and_then(|p| p.get(f - n))
                    .copied()
                    .unwrap_or(0.0)
            } else if f == 2 * n {
                release.confidence.unwrap_or(0.0)
            } else if f == 2 * n + 1 {
                if probabilities.is_some() { 1.0 } else { 0.0 }
            } else if f == 2 * n + 2 {
                if release.confidence.is_some() {
                    1.0
                } else {
                    0.0
                }
            } else {
                public.get(f - 2 * n - 3).copied().unwrap_or(0.0)
            }
        };
        for t in 0..n {
            let mut z = self.intercepts.get(t).copied().unwrap_or(0.0);
            if let Some(row) = self.weights.get(t) {
                for (f, w) in row.iter().enumerate() {
                    z += w * self.standardize(f, feature(f));
                }
            }
            out.push(z);
        }
        let max = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for v in out.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        for v in out.iter_mut() {
            *v /= sum;
        }
    }

    fn standardize(&self, f: usize, raw: f64) -> f64 {
        let mean = self
            .mean
            .as_ref()
            .and_then(|m| m.get(f))
            .copied()
            .unwrap_or(0.0);
        let scale = self
            .scale
            .as_ref()
            .and_then(|s| s.get(f))
            .copied()
            .unwrap_or(1.0);
        (raw - mean) / scale
    }
}

/// The `2n + 3` release features of a logistic model (layout documented on [`LogisticModel`]).
pub fn release_features(n: usize, release: &Release) -> Vec<f64> {
    let mut x = vec![0.0; 2 * n + 3];
    if release.choice < n {
        x[release.choice] = 1.0;
    }
    if let Some(p) = &release.probabilities {
        for (slot, v) in x[n..2 * n].iter_mut().zip(p) {
            *slot = *v;
        }
        x[2 * n + 1] = 1.0;
    }
    if let Some(c) = release.confidence {
        x[2 * n] = c;
        x[2 * n + 2] = 1.0;
    }
    x
}
