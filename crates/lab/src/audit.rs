//! Leakage audit core: the TUPLE-Bench secret-recovery measurement (paper §5.4,
//! Appendix D) and pair-clustered utility summaries, as a pure library.
//!
//! For every release and domain a supervised, defense-aware attacker is fitted on
//! that release's own training worlds: it sees the released fields, the public
//! request features, the authorized class `T` and the two sorted hypotheses, and
//! predicts which hypothesis is the secret `S`. A library of base decoders is
//! fitted with four-fold grouped out-of-fold predictions (pairs kept together),
//! ensembles are built from those predictions, one strategy is chosen on
//! validation (accuracy, then log loss, then a fixed order), frozen, and scored
//! on test with 95% intervals from pair-clustered bootstrap resamples. Reading
//! worlds, running contracts and computing workflow costs happen elsewhere; this
//! module receives plain [`Example`]s and per-world costs and does no IO.
//! Method and paper mapping: `docs/audit.md`.

pub mod bootstrap;
pub mod checks;
pub mod decoders;
pub mod ensemble;
pub mod floor;
pub mod frontier;
pub mod gate;
pub mod group;
pub mod guard;
pub mod intake;
pub mod logistic;
mod measure;
pub mod report;
pub mod representation;
pub mod svg;
#[cfg(any(test, feature = "test-support"))]
pub mod synthetic;

use serde::{Deserialize, Serialize};

pub use measure::run;
use report::Equivariance;

/// Absolute and relative tolerance of the hypothesis-order check (paper F.1).
pub const EQUIVARIANCE_TOLERANCE: f64 = 1e-12;

/// Errors of the audit core.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Nothing to audit.
    #[error("no releases to audit")]
    NoReleases,
    /// Two releases share a name.
    #[error("duplicate release name {0:?}")]
    DuplicateRelease(String),
    /// A release without worlds.
    #[error("release {0:?} has no examples")]
    EmptyRelease(String),
    /// An example fails validation.
    #[error("example {index} of release {release:?} is invalid: {reason}")]
    InvalidExample {
        /// Release name.
        release: String,
        /// Index in the release's example list.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// A (release, domain) group lacks a split.
    #[error("release {release:?} domain {domain:?} has no {split} examples")]
    EmptySplit {
        /// Release name.
        release: String,
        /// Domain name.
        domain: String,
        /// The empty split.
        split: Split,
    },
    /// Grouped cross-fitting needs two training pairs.
    #[error("release {release:?} domain {domain:?} needs at least two training pairs")]
    TooFewTrainingPairs {
        /// Release name.
        release: String,
        /// Domain name.
        domain: String,
    },
    /// A bootstrap over no observations.
    #[error("bootstrap needs at least one observation")]
    EmptySample,
    /// Values and pair ids of different lengths.
    #[error("values and pair ids differ in length")]
    LengthMismatch,
    /// A NaN or infinite cost.
    #[error("costs must be finite")]
    NonFinite,
    /// Costs name a release that is not audited.
    #[error("costs refer to unknown release {0:?}")]
    UnknownRelease(String),
    /// Invalid configuration.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// A fitting thread failed.
    #[error("a fitting worker failed")]
    Worker,
}

/// Dataset split of a world (the worlds format's own type).
pub use releasegate_sim::worlds::Split;

/// The release fields the recipient (and so the attacker) received for one world.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleasedFeatures {
    /// Selected class index in canonical class order, if released.
    pub choice: Option<usize>,
    /// Probabilities in canonical class order, if released; `None` entries are
    /// classes the release omitted (e.g. top-k). Non-finite values count as omitted.
    pub probabilities: Option<Vec<Option<f64>>>,
    /// Native confidence, if released.
    pub confidence: Option<f64>,
    /// The token counts the release carried, where the contract releases them (`usage`).
    #[serde(default, skip_serializing_if = "ReleasedUsage::is_empty")]
    pub usage: ReleasedUsage,
    /// What the same recipient received for the same world under its other contracts
    /// (`audit --recipient`): the attacker reads them together with this release.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joint: Vec<JointPart>,
}

/// One more release of the same world to the same recipient, under another of its contracts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JointPart {
    /// Selected class index in that contract's label order, if released.
    pub choice: Option<usize>,
    /// Probabilities in that contract's label order, if released (`None`: omitted).
    pub probabilities: Option<Vec<Option<f64>>>,
    /// Confidence, if released.
    pub confidence: Option<f64>,
    /// The token counts that contract releases.
    #[serde(default, skip_serializing_if = "ReleasedUsage::is_empty")]
    pub usage: ReleasedUsage,
    /// Index of the authorized class among that contract's labels.
    pub t_index: usize,
    /// That contract's label count.
    pub class_count: usize,
}

/// A release's `usage` as the attacker reads it: each count the contract releases as
/// received (`None`: not released, or a count that carries nothing, such as the 0 of
/// `usage = "drop"` and the `output_tokens` 0 of `"input"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleasedUsage {
    /// `usage.input_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<f64>,
    /// `usage.output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<f64>,
}

impl ReleasedUsage {
    /// Whether no count is released.
    pub fn is_empty(&self) -> bool {
        self.input_tokens.is_none() && self.output_tokens.is_none()
    }

    /// The counts, each finite or `None`.
    pub fn finite(&self) -> ReleasedUsage {
        ReleasedUsage {
            input_tokens: self.input_tokens.filter(|v| v.is_finite()),
            output_tokens: self.output_tokens.filter(|v| v.is_finite()),
        }
    }
}

/// One world as seen by the attacker, plus its label.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// Pair id: grouping, folds and resampling only, never a feature.
    pub pair_id: String,
    /// Split.
    pub split: Split,
    /// Domain; everything is fitted and reported per domain.
    pub domain: String,
    /// Authorized class label (informational; `t_index` is what is used).
    pub t: String,
    /// Index of the authorized class in canonical class order.
    pub t_index: usize,
    /// The two registered hypotheses (any order; the library canonicalizes).
    pub hypotheses: [String; 2],
    /// Which hypothesis is the secret (0 or 1); required for audited worlds.
    pub s_index: Option<usize>,
    /// Released fields.
    pub release: ReleasedFeatures,
    /// Public request features extracted by the caller (shared within a pair).
    pub public: Vec<f64>,
    /// Number of classes of the question (2..=255).
    pub class_count: usize,
}

/// All worlds of one release (one per world, any domain mix).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseExamples {
    /// Release name (e.g. contract or view name); must be unique.
    pub name: String,
    /// The worlds.
    pub examples: Vec<Example>,
}

/// One world's realized cost of one frozen workflow (test worlds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostObservation {
    /// Pair id (resampling unit).
    pub pair_id: String,
    /// Domain.
    pub domain: String,
    /// Realized cost.
    pub cost: f64,
}

/// Realized costs of one workflow under one release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowCosts {
    /// Release name (must match a [`ReleaseExamples`]).
    pub release: String,
    /// Workflow name.
    pub workflow: String,
    /// Per-world costs.
    pub observations: Vec<CostObservation>,
}

/// Everything the audit needs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Releases, reported in this order.
    pub releases: Vec<ReleaseExamples>,
    /// Workflow costs (optional).
    pub costs: Vec<WorkflowCosts>,
}

/// Audit settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Seed of the bootstrap streams.
    pub seed: u64,
    /// Bootstrap resamples per interval (paper: 2,000).
    pub n_bootstrap: usize,
    /// Grouped training folds (paper: 4).
    pub n_folds: usize,
    /// Fitting threads; 0 uses the available parallelism. Results do not depend on it.
    pub threads: usize,
    /// Keep per-world test predictions in the report.
    pub keep_predictions: bool,
    /// Releases every other release is compared with, paired over the same test pairs
    /// (`ReleaseReport::paired`); names not audited are skipped.
    pub references: Vec<String>,
}

// === impl Config ===

impl Default for Config {
    fn default() -> Config {
        Config {
            seed: 20261009,
            n_bootstrap: 2000,
            n_folds: 4,
            threads: 0,
            keep_predictions: false,
            references: vec!["no_output".to_string(), "wcpq (contract)".to_string()],
        }
    }
}

/// Compares predictions for original and hypothesis-swapped worlds (both as
/// `P(hypothesis index 1)` in their own order): each swapped value must equal
/// `1 - original` within absolute and relative tolerance 1e-12.
pub fn check_equivariance(original: &[f64], swapped: &[f64]) -> Equivariance {
    let mut max_deviation: f64 = 0.0;
    let mut passed = original.len() == swapped.len();
    for (p, s) in original.iter().zip(swapped) {
        let expected = 1.0 - p;
        let dev = (s - expected).abs();
        let within = dev <= EQUIVARIANCE_TOLERANCE + EQUIVARIANCE_TOLERANCE * expected.abs();
        if !within {
            passed = false;
        }
        max_deviation = if dev.is_nan() {
            f64::INFINITY
        } else {
            max_deviation.max(dev)
        };
    }
    Equivariance {
        passed,
        max_deviation,
        n_checked: original.len().min(swapped.len()),
    }
}

#[cfg(test)]
mod tests;
