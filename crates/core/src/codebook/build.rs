//! Building a question's ordered codebook from the grid and its training answers
//! ([`build`]).

use std::collections::BTreeMap;

use super::grid::{order_and_dedup, simplex_grid};
use super::{
    BuildStats, Built, CONFIDENCE_LEVELS, Codebook, Codeword, DEFAULT_GRID_LIMIT, Error,
    TrainingAnswer, grid_size, largest_denominator_within, validate_classes,
};
use crate::workflow::{self, Spec};

/// Builds the ordered codebook of one question with the default grid limit.
///
/// `classes` are the question's classes in canonical order and must equal `spec.classes()`;
/// `training` holds the training answers of that question (canonical order); `source_sha256`
/// identifies the training data (recorded, not checked).
///
/// Rules beyond the spec: a training vector enters as it is (never renormalized) and must sum to
/// 1 within a native answer's tolerance ([`crate::wire::sum_tolerance`]); an answer without confidence
/// enters once per confidence level {0, 0.5, 1}, and so does a
/// pair midpoint when either answer lacks confidence. Pair groups of size other than two are
/// ignored (counted in [`BuildStats::ignored_groups`]); within a pair, input order is kept.
pub fn build(
    classes: &[String],
    denominator: u32,
    spec: &Spec,
    training: &[TrainingAnswer],
    source_sha256: String,
) -> Result<Built, Error> {
    build_with_limit(
        classes,
        denominator,
        spec,
        training,
        source_sha256,
        DEFAULT_GRID_LIMIT,
    )
}

/// As [`build`], with an explicit limit on the number of grid vectors.
pub fn build_with_limit(
    classes: &[String],
    denominator: u32,
    spec: &Spec,
    training: &[TrainingAnswer],
    source_sha256: String,
    grid_limit: u128,
) -> Result<Built, Error> {
    validate_classes(classes)?;
    if spec.classes() != classes {
        return Err(Error::ClassesMismatch {
            codebook: classes.to_vec(),
            contract: spec.classes().to_vec(),
        });
    }
    if denominator == 0 {
        return Err(Error::Denominator);
    }
    let n = classes.len();
    let size = grid_size(n, denominator);
    if size > grid_limit {
        return Err(Error::GridTooLarge {
            classes: n,
            denominator,
            grid_size: size,
            limit: grid_limit,
            largest_fitting_denominator: largest_denominator_within(n, grid_limit),
        });
    }
    let mut stats = BuildStats::default();
    let mut items: Vec<Codeword> = Vec::new();
    let grid = simplex_grid(n, denominator);
    stats.grid_vectors = grid.len();
    for p in grid {
        for c in CONFIDENCE_LEVELS {
            items.push(Codeword { p: p.clone(), c });
        }
    }
    stats.grid_codewords = items.len();

    let mut natives: Vec<(Vec<f64>, Option<f64>)> = Vec::with_capacity(training.len());
    for (index, answer) in training.iter().enumerate() {
        let p = clean_training(n, index, answer)?;
        natives.push((p, answer.confidence.map(|c| c + 0.0)));
    }
    let before = items.len();
    for (p, c) in &natives {
        push_with_confidence(&mut items, p.clone(), *c);
    }
    stats.training_codewords = items.len() - before;

    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, answer) in training.iter().enumerate() {
        groups.entry(answer.pair_id.as_str()).or_default().push(i);
    }
    let before = items.len();
    for members in groups.values() {
        let [a, b] = members.as_slice() else {
            stats.ignored_groups += 1;
            continue;
        };
        stats.pairs += 1;
        let (p0, c0) = &natives[*a];
        let (p1, c1) = &natives[*b];
        let p: Vec<f64> = p0.iter().zip(p1).map(|(x, y)| (x + y) / 2.0).collect();
        let c = match (c0, c1) {
            (Some(x), Some(y)) => Some((x + y) / 2.0),
            _ => None,
        };
        push_with_confidence(&mut items, p, c);
    }
    stats.midpoint_codewords = items.len() - before;

    let total = items.len();
    let codewords = order_and_dedup(n, items);
    stats.duplicates_removed = total - codewords.len();
    stats.codewords = codewords.len();
    let workflows = spec.canonical_json();
    Ok(Built {
        codebook: Codebook {
            other_class_sets: Vec::new(),
            classes: classes.to_vec(),
            denominator,
            workflows_sha256: workflow::canonical_sha256(&workflows),
            workflows,
            source_sha256,
            learned: None,
            codewords,
            strict_stage: None,
            guard: None,
        },
        stats,
    })
}

fn push_with_confidence(items: &mut Vec<Codeword>, p: Vec<f64>, c: Option<f64>) {
    match c {
        Some(c) => items.push(Codeword { p, c }),
        None => {
            for c in CONFIDENCE_LEVELS {
                items.push(Codeword { p: p.clone(), c });
            }
        }
    }
}

/// Validates a training answer; returns its vector as it is (-0.0 turned into 0.0).
fn clean_training(n: usize, index: usize, answer: &TrainingAnswer) -> Result<Vec<f64>, Error> {
    let err = |message: String| Error::Training { index, message };
    if answer.probabilities.len() != n {
        return Err(err(format!(
            "expected {n} probabilities, got {}",
            answer.probabilities.len()
        )));
    }
    if let Some(i) = answer
        .probabilities
        .iter()
        .position(|v| !(v.is_finite() && *v >= 0.0))
    {
        return Err(err(format!(
            "probability {i} is not a finite non-negative number"
        )));
    }
    if answer.confidence.is_some_and(|c| !c.is_finite()) {
        return Err(err("confidence is not finite".to_string()));
    }
    let sum: f64 = answer.probabilities.iter().sum();
    if (sum - 1.0).abs() > crate::wire::sum_tolerance(n) {
        return Err(err(format!(
            "probabilities sum to {sum}, not to 1 within {:.3}",
            crate::wire::sum_tolerance(n)
        )));
    }
    Ok(answer.probabilities.iter().map(|v| v + 0.0).collect())
}
