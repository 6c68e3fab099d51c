//! The WCPQ codebook: offline construction from the simplex grid and training answers, the
//! deterministic JSON artifact, loading with validation, and the start-up match check against a
//! contract's workflows (`docs/wcpq-rules.md` section 5).
//!
//! Building is pure, and so is the artifact: [`Codebook::from_json`] and
//! [`Codebook::to_json_bytes`] go from and to bytes; files are the caller's.

mod build;
mod grid;
mod guard;
mod learn;
mod read;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::workflow::{self, Spec};

pub use build::{build, build_with_limit};
pub use grid::{codeword_order, distance_to_uniform, grid_size, largest_denominator_within};
pub use guard::{Chosen, Figure, Guard, choose};
pub use learn::{
    Assignment, CLEAR_IMPROVEMENT, DEFAULT_MAX_CODEWORDS, DEFAULT_PAIR_WEIGHT, LearnStats,
    Response, Settings, Trial, learn,
};
use read::{
    assignment_of, check_codewords, check_header, check_other_class_sets, check_strict_stage,
    learned_of,
};

/// Format tag of the codebook artifact.
pub const FORMAT: &str = "releasegate.wcpq.codebook.v1";
/// Default simplex grid denominator.
pub const DEFAULT_DENOMINATOR: u32 = 20;
/// `order` of a learned codebook whose codewords are in its assignment's order.
const PRIORITY_ORDER: &str = "priority";
/// Confidence levels paired with every grid vector.
pub const CONFIDENCE_LEVELS: [f64; 3] = [0.0, 0.5, 1.0];
/// Default limit on the number of grid vectors C(d+n-1, n-1).
pub const DEFAULT_GRID_LIMIT: u128 = 2_000_000;

/// Errors of building, loading and checking a codebook.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The class list is unusable.
    #[error("classes: {0}")]
    Classes(String),
    /// The denominator is zero.
    #[error("denominator must be at least 1")]
    Denominator,
    /// The grid would be too large; rebuild with `largest_fitting_denominator` or a higher limit.
    #[error(
        "grid of denominator {denominator} over {classes} classes has {grid_size} vectors, above the limit of {limit} (largest denominator that fits: {})",
        largest_fitting_denominator.map_or_else(|| "none".to_string(), |d| d.to_string())
    )]
    GridTooLarge {
        /// Class count n.
        classes: usize,
        /// Requested denominator d.
        denominator: u32,
        /// C(d+n-1, n-1), saturating at `u128::MAX`.
        grid_size: u128,
        /// The limit in force.
        limit: u128,
        /// The largest denominator whose grid fits the limit (None if even 1 does not).
        largest_fitting_denominator: Option<u32>,
    },
    /// A training answer is invalid.
    #[error("training answer {index}: {message}")]
    Training {
        /// Position in the training slice.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The spec is for other classes than the codebook.
    #[error("classes differ: codebook has {codebook:?}, contract has {contract:?}")]
    ClassesMismatch {
        /// The codebook's classes.
        codebook: Vec<String>,
        /// The contract's classes.
        contract: Vec<String>,
    },
    /// The contract's frozen workflows differ from the ones the codebook was built for.
    #[error("workflows differ: codebook was built for sha256 {codebook}, contract has {contract}")]
    WorkflowsMismatch {
        /// The codebook's workflows' SHA-256 (canonical form, `Spec::sha256`).
        codebook: String,
        /// The contract's workflows' SHA-256 (canonical form).
        contract: String,
    },
    /// The artifact is not valid codebook JSON.
    #[error("codebook json is malformed")]
    Json(#[source] serde_json::Error),
    /// The artifact parses but a field is invalid.
    #[error("codebook {field}: {message}")]
    Invalid {
        /// The offending field, e.g. `codewords[12].p`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// One training answer of the question, in canonical class order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingAnswer {
    /// Pair identifier: the two worlds of a counterfactual pair share it.
    pub pair_id: String,
    /// Native probabilities (n values, canonical order).
    pub probabilities: Vec<f64>,
    /// Native confidence, if the answer carries one.
    pub confidence: Option<f64>,
}

/// One codeword: a probability vector (canonical order) and a confidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Codeword {
    /// Probabilities in canonical class order. They sum to 1 within a native answer's
    /// tolerance ([`crate::wire::sum_tolerance`]): training answers enter the codebook as they
    /// were sent, never renormalized (the rules' "every training native").
    pub p: Vec<f64>,
    /// Confidence released with it.
    pub c: f64,
}

/// A built or loaded codebook.
#[derive(Debug, Clone, PartialEq)]
pub struct Codebook {
    classes: Vec<String>,
    /// Further label sets served positionally (a codebook pooled over domains
    /// whose questions share the class count and the frozen workflows).
    other_class_sets: Vec<Vec<String>>,
    denominator: u32,
    workflows: Value,
    workflows_sha256: String,
    source_sha256: String,
    /// Set for a learned compact codebook (`build-codebook --budget`); None for a strict full one.
    learned: Option<Learned>,
    codewords: Vec<Codeword>,
    /// A learned codebook's strict stage: the strict codebook it was learned from (same
    /// classes, grid, workflows and training data), tried when no compact codeword is
    /// admissible, before the contract's fallback. None for a strict codebook, and for a
    /// learned one written before the stage existed.
    strict_stage: Option<Vec<Codeword>>,
    /// What `build-codebook --budget`'s guard measured and chose (None for a file built
    /// without a budget, or before the guard existed).
    guard: Option<Guard>,
}

/// How a learned compact codebook was selected: it serves only contracts with the same budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    /// The admissibility budget α it was learned under.
    pub budget: f64,
    /// The largest number of codewords the greedy selection could keep.
    pub max_codewords: usize,
    /// Weight of a training pair in the greedy gain.
    pub pair_weight: u32,
    /// Which admissible codeword is released (the file order of the codewords).
    pub assignment: Assignment,
}

/// Counts describing one build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BuildStats {
    /// Grid vectors C(d+n-1, n-1).
    pub grid_vectors: usize,
    /// Codewords contributed by the grid (vectors x confidence levels).
    pub grid_codewords: usize,
    /// Codewords contributed by training natives (three per answer without confidence).
    pub training_codewords: usize,
    /// Codewords contributed by pair midpoints.
    pub midpoint_codewords: usize,
    /// Pairs (groups of exactly two) used for midpoints.
    pub pairs: usize,
    /// Pair groups ignored because they do not have exactly two answers.
    pub ignored_groups: usize,
    /// Exact duplicates removed.
    pub duplicates_removed: usize,
    /// Final codeword count.
    pub codewords: usize,
}

/// The result of [`build`].
#[derive(Debug, Clone)]
pub struct Built {
    /// The ordered codebook.
    pub codebook: Codebook,
    /// What went into it.
    pub stats: BuildStats,
}

/// The artifact as serialized (field order is the file order).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CodebookFile {
    format: String,
    classes: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    other_class_sets: Vec<Vec<String>>,
    denominator: u32,
    confidence_levels: Vec<f64>,
    workflows: Value,
    workflows_sha256: String,
    source_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_codewords: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pair_weight: Option<u32>,
    /// `"priority"`: the codewords are in the learned assignment's order, not strict order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    order: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    split_penalty: Option<u32>,
    codeword_count: usize,
    codewords: Vec<Codeword>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    strict_stage_count: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    strict_stage: Option<Vec<Codeword>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    guard: Option<Guard>,
}

fn validate_classes(classes: &[String]) -> Result<(), Error> {
    let n = classes.len();
    if !(workflow::MIN_CLASSES..=workflow::MAX_CLASSES).contains(&n) {
        return Err(Error::Classes(format!(
            "expected {} to {} classes, got {n}",
            workflow::MIN_CLASSES,
            workflow::MAX_CLASSES
        )));
    }
    for (i, c) in classes.iter().enumerate() {
        if classes[..i].contains(c) {
            return Err(Error::Classes(format!("duplicate class {c:?}")));
        }
    }
    Ok(())
}

// === impl Codebook ===

impl Codebook {
    /// Class labels in canonical order.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The grid denominator.
    pub fn denominator(&self) -> u32 {
        self.denominator
    }

    /// The recorded canonical workflow definition.
    pub fn workflows(&self) -> &Value {
        &self.workflows
    }

    /// The workflows' SHA-256 as the file records it: of the definition's canonical form
    /// (`Spec::sha256`) for a codebook built now, the legacy hash for a file written before.
    pub fn workflows_sha256(&self) -> &str {
        &self.workflows_sha256
    }

    /// The recorded training-data SHA-256.
    pub fn source_sha256(&self) -> &str {
        &self.source_sha256
    }

    /// The budget, K and pair weight of a learned codebook; None for a strict full codebook.
    pub fn learned(&self) -> Option<Learned> {
        self.learned
    }

    /// What `build-codebook --budget`'s guard measured and chose, when it ran.
    pub fn guard(&self) -> Option<&Guard> {
        self.guard.as_ref()
    }

    /// This codebook with the guard's record; an error when the record does not fit it (a
    /// bounded choice on a strict codebook, a strict choice on a learned one, figures that
    /// do not support the choice).
    pub fn with_guard(mut self, guard: Guard) -> Result<Codebook, Error> {
        guard
            .validate(self.learned_key())
            .map_err(|message| Error::Invalid {
                field: "guard".to_string(),
                message,
            })?;
        self.guard = Some(guard);
        Ok(self)
    }

    /// A learned codebook's budget, K and pair weight (what a guard record names).
    fn learned_key(&self) -> Option<(f64, usize, u32)> {
        self.learned
            .map(|l| (l.budget, l.max_codewords, l.pair_weight))
    }

    /// A learned codebook's strict stage as a strict codebook of its own (`None` for a strict
    /// codebook, or a learned one without the stage).
    pub fn strict_stage(&self) -> Option<Codebook> {
        self.strict_stage.as_ref().map(|codewords| Codebook {
            learned: None,
            codewords: codewords.clone(),
            strict_stage: None,
            guard: None,
            ..self.clone()
        })
    }

    /// The ordered codewords.
    pub fn codewords(&self) -> &[Codeword] {
        &self.codewords
    }

    /// The number of codewords.
    pub fn len(&self) -> usize {
        self.codewords.len()
    }

    /// True when there are no codewords (never the case for a built or loaded codebook).
    pub fn is_empty(&self) -> bool {
        self.codewords.is_empty()
    }

    /// The artifact bytes: compact JSON in fixed field order plus a final newline. Byte-for-byte
    /// deterministic for equal codebooks.
    pub fn to_json_bytes(&self) -> Vec<u8> {
        let file = CodebookFile {
            format: FORMAT.to_string(),
            classes: self.classes.clone(),
            other_class_sets: self.other_class_sets.clone(),
            denominator: self.denominator,
            confidence_levels: CONFIDENCE_LEVELS.to_vec(),
            workflows: self.workflows.clone(),
            workflows_sha256: self.workflows_sha256.clone(),
            source_sha256: self.source_sha256.clone(),
            budget: self.learned.map(|l| l.budget),
            max_codewords: self.learned.map(|l| l.max_codewords),
            pair_weight: self.learned.map(|l| l.pair_weight),
            order: self.learned.and_then(|l| match l.assignment {
                Assignment::Coverage => None,
                Assignment::Priority { .. } => Some(PRIORITY_ORDER.to_string()),
            }),
            split_penalty: self.learned.and_then(|l| match l.assignment {
                Assignment::Coverage => None,
                Assignment::Priority { split_penalty } => Some(split_penalty),
            }),
            codeword_count: self.codewords.len(),
            codewords: self.codewords.clone(),
            strict_stage_count: self.strict_stage.as_ref().map(Vec::len),
            strict_stage: self.strict_stage.clone(),
            guard: self.guard.clone(),
        };
        // Serializing plain structs of strings, numbers and Values to a Vec cannot fail.
        let mut bytes = serde_json::to_vec(&file).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }

    /// Parses and validates an artifact.
    pub fn from_json(bytes: &[u8]) -> Result<Codebook, Error> {
        let file: CodebookFile = serde_json::from_slice(bytes).map_err(Error::Json)?;
        check_header(&file)?;
        let assignment = assignment_of(&file)?;
        let n = file.classes.len();
        check_codewords(
            "codewords",
            &file.codewords,
            n,
            assignment == Assignment::Coverage,
        )?;
        check_strict_stage(&file, n)?;
        check_other_class_sets(&file)?;
        let learned = learned_of(&file, assignment)?;
        let codebook = Codebook {
            learned,
            other_class_sets: file.other_class_sets,
            classes: file.classes,
            denominator: file.denominator,
            workflows: file.workflows,
            workflows_sha256: file.workflows_sha256,
            source_sha256: file.source_sha256,
            codewords: file.codewords,
            strict_stage: file.strict_stage,
            guard: None,
        };
        match file.guard {
            None => Ok(codebook),
            Some(guard) => codebook.with_guard(guard),
        }
    }

    /// Checks that a contract question's classes and frozen workflows are exactly the ones this
    /// codebook was built for; a proxy refuses to start otherwise.
    pub fn check_matches(&self, spec: &Spec, classes: &[String]) -> Result<(), Error> {
        let served = classes == self.classes.as_slice()
            || self
                .other_class_sets
                .iter()
                .any(|set| set.as_slice() == classes);
        if !served || spec.classes() != classes {
            return Err(Error::ClassesMismatch {
                codebook: self.classes.clone(),
                contract: classes.to_vec(),
            });
        }
        // Workflows are compared positionally: the definition with the contract's
        // labels replaced by the codebook's first label set must be the recorded one (in
        // canonical form: key order and number spelling do not matter; the recorded hash
        // was checked against the recorded definition on load).
        let positional = positional_workflows(spec, &self.classes);
        if !crate::wire::same_json(&positional, &self.workflows) {
            return Err(Error::WorkflowsMismatch {
                codebook: workflow::canonical_sha256(&self.workflows),
                contract: workflow::canonical_sha256(&positional),
            });
        }
        Ok(())
    }

    /// Whether questions with workflows `a` and `b` can share one pooled codebook: the same
    /// class count and the same frozen workflows up to labels (what [`Codebook::check_matches`]
    /// asks of every question a pooled codebook serves).
    pub fn can_pool(a: &Spec, b: &Spec) -> bool {
        a.classes().len() == b.classes().len()
            && positional_workflows(a, a.classes()) == positional_workflows(b, a.classes())
    }

    /// Serves further label sets positionally: a codebook pooled over
    /// questions with the same class count and the same frozen workflows
    /// (each in its own canonical order). The first set stays `classes`.
    pub fn with_other_class_sets(mut self, sets: Vec<Vec<String>>) -> Result<Codebook, Error> {
        for set in &sets {
            validate_classes(set)?;
            if set.len() != self.classes.len() {
                return Err(Error::ClassesMismatch {
                    codebook: self.classes.clone(),
                    contract: set.clone(),
                });
            }
        }
        self.other_class_sets = sets
            .into_iter()
            .filter(|set| *set != self.classes)
            .collect();
        Ok(self)
    }

    /// Every label set the codebook serves (the first is `classes`).
    pub fn class_sets(&self) -> impl Iterator<Item = &[String]> {
        std::iter::once(self.classes.as_slice())
            .chain(self.other_class_sets.iter().map(Vec::as_slice))
    }
}

#[cfg(test)]
mod tests;

/// `spec`'s canonical definition with its labels replaced by `labels` (positionally).
fn positional_workflows(spec: &Spec, labels: &[String]) -> serde_json::Value {
    let mut value = spec.canonical_json();
    value["classes"] = serde_json::json!(labels);
    value
}
