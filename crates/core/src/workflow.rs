//! Frozen downstream workflows of one question: cost bases and profiles, the three workflow
//! families, posterior estimators, complete plans and the behaviour signature (`docs/wcpq-rules.md`
//! sections 1 to 4).
//!
//! A [`Spec`] is the full frozen definition for one question with n classes in canonical order.
//! Its policies are family-major, then profile in table order (selective x 6 profiles, then
//! clarification x 6, then asymmetric x 6 for the default 18). Everything here is pure and
//! deterministic; the only IO is reading a logistic model file in [`Spec::from_raw`].

mod config;
mod cost;
mod decisions;
mod plan;
mod posterior;
mod signature;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use config::{RawCosts, RawPosterior, RawPosteriorTable, RawWorkflows, read_logistic};
pub use cost::{
    AUTHORED_MATRIX_4, CostBase, DEFAULT_C_CHECK, DEFAULT_C_REVIEW, DEFAULT_C_WRONG, Family,
    Policy, Profile,
};
pub use decisions::Decisions;
pub use plan::{Plan, PlanDisplay, TIE_TOLERANCE};
pub use posterior::{
    LOGISTIC_FORMAT, LogisticModel, POSTERIOR_SMOOTHING, Posterior, release_features, smooth,
};

/// Format tag of the canonical workflow definition.
pub const WORKFLOWS_FORMAT: &str = "releasegate.workflows.v1";
/// Smallest supported class count.
pub const MIN_CLASSES: usize = 2;
/// Largest supported class count.
pub const MAX_CLASSES: usize = 255;

/// Errors of workflow configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A config value is invalid; `key` is the config key (e.g. `costs.matrix[2][1]`).
    #[error("{key}: {message}")]
    Invalid {
        /// The offending key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The logistic model file cannot be read.
    #[error("posterior.model: cannot read {}", path.display())]
    ModelRead {
        /// The resolved path.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The logistic model file is not valid model JSON.
    #[error("posterior.model: cannot parse {}", path.display())]
    ModelParse {
        /// The resolved path.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

/// Why a release is not a valid answer of the question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum InvalidRelease {
    /// `choice` is not a class index.
    #[error("choice is not a class index")]
    Choice,
    /// `probabilities` does not have one value per class.
    #[error("probabilities has the wrong length")]
    ProbabilitiesLength,
    /// A probability is NaN, infinite or negative.
    #[error("a probability is not a finite non-negative number")]
    Probability,
    /// The confidence is NaN or infinite.
    #[error("confidence is not a finite number")]
    Confidence,
}

/// Why label-keyed fields cannot be aligned to canonical class order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlignError {
    /// A label is not one of the question's classes.
    #[error("unknown class label {0:?}")]
    UnknownLabel(String),
    /// A class has no probability.
    #[error("no probability for class {0:?}")]
    MissingLabel(String),
    /// A class has more than one probability.
    #[error("duplicate probability for class {0:?}")]
    DuplicateLabel(String),
}

/// A released answer as the consumer sees it, over canonical class order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// Selected class index.
    pub choice: usize,
    /// Released probabilities (n values, canonical order), if the field is released.
    pub probabilities: Option<Vec<f64>>,
    /// Released confidence, if the field is released.
    pub confidence: Option<f64>,
}

/// Field availability m(D): which optional fields are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Availability {
    /// `probabilities` is present.
    pub probabilities: bool,
    /// `confidence` is present.
    pub confidence: bool,
}

/// The behaviour signature σ(D) = (choice, m(D), plan_1, ..., plan_J) over the frozen policies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Signature {
    /// Selected class index.
    pub choice: usize,
    /// Field availability.
    pub availability: Availability,
    /// One complete plan per frozen policy, in [`Spec::policies`] order.
    pub plans: Vec<Plan>,
}

/// The buffers [`Spec::signature_matches`] reuses from one candidate to the next: the
/// posterior and the shared decisions.
#[derive(Debug, Default)]
pub struct SignatureScratch {
    posterior: Vec<f64>,
    decisions: Decisions,
}

/// The frozen workflow definition of one question.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    classes: Vec<String>,
    base: CostBase,
    families: Vec<Family>,
    profiles: Vec<Profile>,
    posterior: Posterior,
    policies: Vec<Policy>,
    /// Per policy, the first earlier policy that decides exactly as it does
    /// ([`Policy::decides_as`]): its plan is that one's, not decided again.
    twins: Vec<Option<usize>>,
}

// === impl Error ===

impl Error {
    pub(crate) fn invalid(key: &str, message: impl Into<String>) -> Error {
        Error::Invalid {
            key: key.to_string(),
            message: message.into(),
        }
    }
}

// === impl Release ===

impl Release {
    /// The field availability of this release.
    pub fn availability(&self) -> Availability {
        Availability {
            probabilities: self.probabilities.is_some(),
            confidence: self.confidence.is_some(),
        }
    }
}

// === impl Spec ===

impl Spec {
    /// Builds and validates a spec. Families and profiles are deduplicated and sorted into their
    /// fixed order, so the policy order never depends on how a config lists them.
    pub fn new(
        classes: Vec<String>,
        base: CostBase,
        families: &[Family],
        profiles: &[Profile],
        posterior: Posterior,
    ) -> Result<Spec, Error> {
        let n = classes.len();
        if !(MIN_CLASSES..=MAX_CLASSES).contains(&n) {
            return Err(Error::invalid(
                "classes",
                format!("expected {MIN_CLASSES} to {MAX_CLASSES} classes, got {n}"),
            ));
        }
        for (i, c) in classes.iter().enumerate() {
            if classes[..i].contains(c) {
                return Err(Error::invalid("classes", format!("duplicate class {c:?}")));
            }
        }
        for (key, v) in [
            ("costs.c_wrong", base.c_wrong),
            ("costs.c_review", base.c_review),
            ("costs.c_check", base.c_check),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(Error::invalid(
                    key,
                    format!("must be a finite non-negative number, got {v}"),
                ));
            }
        }
        if base.matrix.len() != n + 1 {
            return Err(Error::invalid(
                "costs.matrix",
                format!(
                    "expected {} rows (n class actions + inspection), got {}",
                    n + 1,
                    base.matrix.len()
                ),
            ));
        }
        for (r, row) in base.matrix.iter().enumerate() {
            if row.len() != n {
                return Err(Error::invalid(
                    &format!("costs.matrix[{r}]"),
                    format!("expected {n} columns, got {}", row.len()),
                ));
            }
            if let Some(c) = row.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(Error::invalid(
                    &format!("costs.matrix[{r}][{c}]"),
                    "must be a finite non-negative number",
                ));
            }
        }
        match &posterior {
            Posterior::Native => {}
            Posterior::Prior(p) => {
                let ok = p.len() == n
                    && p.iter().all(|v| v.is_finite() && *v >= 0.0)
                    && (p.iter().sum::<f64>() - 1.0).abs() <= 1e-6;
                if !ok {
                    return Err(Error::invalid(
                        "posterior.probabilities",
                        "must hold one finite non-negative value per class summing to 1",
                    ));
                }
            }
            Posterior::Logistic(model) => model
                .validate(&classes)
                .map_err(|m| Error::invalid("posterior.model", m))?,
        }
        let mut families = families.to_vec();
        families.sort();
        families.dedup();
        let mut profiles = profiles.to_vec();
        profiles.sort();
        profiles.dedup();
        if families.is_empty() {
            return Err(Error::invalid("families", "must not be empty"));
        }
        if profiles.is_empty() {
            return Err(Error::invalid("profiles", "must not be empty"));
        }
        let policies = families
            .iter()
            .flat_map(|&family| profiles.iter().map(move |&profile| (family, profile)))
            .map(|(family, profile)| Policy {
                family,
                profile,
                costs: base.apply(profile),
            })
            .collect::<Vec<Policy>>();
        let twins = policies
            .iter()
            .enumerate()
            .map(|(i, policy)| policies[..i].iter().position(|p| p.decides_as(policy)))
            .collect();
        Ok(Spec {
            classes,
            base,
            families,
            profiles,
            posterior,
            policies,
            twins,
        })
    }

    /// The standard 18-policy spec with default costs and the native posterior. The default
    /// matrix exists only for 4 classes; other class counts need [`Spec::new`] with a matrix.
    #[cfg(any(test, feature = "test-support"))]
    pub fn standard(classes: Vec<String>) -> Result<Spec, Error> {
        if classes.len() != 4 {
            return Err(Error::invalid(
                "costs.matrix",
                format!(
                    "required for {} classes (the authored default exists only for 4)",
                    classes.len()
                ),
            ));
        }
        Spec::new(
            classes,
            CostBase::authored_4(),
            &Family::ALL,
            &Profile::ALL,
            Posterior::Native,
        )
    }

    /// Class labels in canonical order.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The number of classes n.
    pub fn class_count(&self) -> usize {
        self.classes.len()
    }

    /// The cost base before profiles.
    #[cfg(test)]
    pub(crate) fn base_costs(&self) -> &CostBase {
        &self.base
    }

    /// The families, in fixed order.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The profiles, in table order.
    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    /// The posterior estimator.
    pub fn posterior_estimator(&self) -> &Posterior {
        &self.posterior
    }

    /// The frozen policies: family-major, then profile in table order.
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The canonical index of a class label.
    pub fn class_index(&self, label: &str) -> Option<usize> {
        self.classes.iter().position(|c| c == label)
    }

    /// Aligns label-keyed probabilities (in any order, e.g. as transmitted) to canonical order.
    /// Every class must appear exactly once and no other label may appear.
    pub fn align<'a>(
        &self,
        pairs: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> Result<Vec<f64>, AlignError> {
        let mut out: Vec<Option<f64>> = vec![None; self.class_count()];
        for (label, value) in pairs {
            let i = self
                .class_index(label)
                .ok_or_else(|| AlignError::UnknownLabel(label.to_string()))?;
            if out[i].replace(value).is_some() {
                return Err(AlignError::DuplicateLabel(label.to_string()));
            }
        }
        out.iter()
            .zip(&self.classes)
            .map(|(v, label)| v.ok_or_else(|| AlignError::MissingLabel(label.clone())))
            .collect()
    }

    /// Checks that a release is a well-formed answer (choice in range, n finite non-negative
    /// probabilities if present, finite confidence if present). Sums are not checked.
    pub fn check_release(&self, release: &Release) -> Result<(), InvalidRelease> {
        let n = self.class_count();
        if release.choice >= n {
            return Err(InvalidRelease::Choice);
        }
        if let Some(p) = &release.probabilities {
            if p.len() != n {
                return Err(InvalidRelease::ProbabilitiesLength);
            }
            if !p.iter().all(|v| v.is_finite() && *v >= 0.0) {
                return Err(InvalidRelease::Probability);
            }
        }
        if release.confidence.is_some_and(|c| !c.is_finite()) {
            return Err(InvalidRelease::Confidence);
        }
        Ok(())
    }

    /// The full frozen definition as deterministic JSON (logistic model contents included).
    pub fn canonical_json(&self) -> Value {
        let posterior = match &self.posterior {
            Posterior::Native => json!({"kind": "native"}),
            Posterior::Prior(p) => json!({"kind": "prior", "probabilities": p}),
            Posterior::Logistic(model) => json!({"kind": "logistic", "model": model}),
        };
        let policies: Vec<Value> = self
            .policies
            .iter()
            .map(|p| {
                json!({
                    "family": p.family.name(),
                    "profile": p.profile.name(),
                    "c_wrong": p.costs.c_wrong,
                    "c_review": p.costs.c_review,
                    "c_check": p.costs.c_check,
                    "matrix": p.costs.matrix,
                })
            })
            .collect();
        json!({
            "format": WORKFLOWS_FORMAT,
            "classes": self.classes,
            "tie_tolerance": TIE_TOLERANCE,
            "posterior_smoothing": POSTERIOR_SMOOTHING,
            "base_costs": {
                "c_wrong": self.base.c_wrong,
                "c_review": self.base.c_review,
                "c_check": self.base.c_check,
                "matrix": self.base.matrix,
            },
            "families": self.families.iter().map(|f| f.name()).collect::<Vec<_>>(),
            "profiles": self.profiles.iter().map(|p| p.name()).collect::<Vec<_>>(),
            "posterior": posterior,
            "policies": policies,
        })
    }

    /// The workflows' hash: the lower-case hex SHA-256 of [`Spec::canonical_json`] in the
    /// canonical form of JSON ([`crate::wire::canonical_json`]: keys sorted, integral numbers
    /// as integers), what a codebook built now records and a certificate names them by.
    pub fn sha256(&self) -> String {
        canonical_sha256(&self.canonical_json())
    }
}

/// Lower-case hex SHA-256 of a workflow definition in the canonical form of JSON
/// (`wire::canonical_json`: keys sorted, integral numbers as integers, no whitespace), so
/// that neither key order nor number spelling changes it.
pub(crate) fn canonical_sha256(value: &Value) -> String {
    let mut bytes = Vec::new();
    crate::wire::canonical_json(value, &mut bytes);
    sha256_hex(&bytes)
}

/// Lower-case hex SHA-256 of a workflow definition serialized compactly in its own key order:
/// the hash codebooks and certificates recorded before [`canonical_sha256`]. Only read (such
/// files still load), never written; it depends on key order, so it matches only a file whose
/// `workflows` keep the order they were written in.
pub(crate) fn legacy_sha256(value: &Value) -> String {
    // Serializing a `Value` to a Vec cannot fail (no non-string keys, no IO).
    sha256_hex(&serde_json::to_vec(value).unwrap_or_default())
}

/// Lower-case hex SHA-256 of bytes (the workspace's one such helper).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests;
