//! Learned compact codebooks (`build-codebook --budget α --max-codewords K`): a greedy selection
//! from a strict codebook's candidates over the training split only (the TUPLE-Bench paper,
//! Appendix H.2; `docs/wcpq.md`, "Learned compact codebooks"), with the assignment (which
//! admissible codeword the mapper releases) chosen on the validation split.

mod admission;
mod select;

use serde::Serialize;

use self::admission::Admission;
use self::select::{collisions, pair_distance, pairs_of, select_coverage, select_priority};
use super::{Codebook, Error, Learned};
use crate::workflow::{Release, Spec};

/// K when `--max-codewords` is not given (the paper's greedy codebooks keep at most 128).
pub const DEFAULT_MAX_CODEWORDS: usize = 128;

/// Pair weight when none is given (the paper's non-zero pair weight).
pub const DEFAULT_PAIR_WEIGHT: u32 = 4;

/// A later assignment replaces the kept one only when its mean validation pair distance is
/// below this fraction of the kept one's (differences smaller than that are within what one
/// validation split can tell apart) and it covers at least as many validation responses (an
/// uncovered answer goes to the strict stage, whose release the distance does not see).
pub const CLEAR_IMPROVEMENT: f64 = 0.99;

/// One training response as the mapper would see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The two worlds of a counterfactual pair share it.
    pub pair_id: String,
    /// The native answer D (canonical order), with the availability that is released.
    pub native: Release,
    /// Public request features (`Spec::public_features`; empty for request-independent posteriors).
    pub public: Vec<f64>,
}

/// Which admissible codeword a learned codebook releases: the bounded mapper releases the
/// first admissible codeword in file order, so the order *is* the assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "order")]
pub enum Assignment {
    /// Greedy coverage (newly covered responses + pair weight × newly jointly covered pairs),
    /// the kept codewords in strict order (the first admissible in the strict codebook's order).
    Coverage,
    /// A decision list that targets privacy: each step picks the codeword that assigns the most
    /// still-unassigned training responses to itself, plus pair weight × the pairs it makes
    /// collide (both members still unassigned and both admitted: they will be released as the
    /// same codeword), minus `split_penalty` × the pairs it splits (exactly one member admitted:
    /// they will be released differently); the file keeps the pick order, so every answer goes to
    /// the earliest pick that admits it.
    Priority {
        /// Weight of a split pair.
        split_penalty: u32,
    },
}

impl Assignment {
    /// The assignments `build-codebook` and the frontier choose among on the validation split.
    /// The first (the paper's greedy coverage) is the incumbent: a later one replaces the kept
    /// one only when its validation pairs are released clearly closer together
    /// ([`CLEAR_IMPROVEMENT`]); it is also what is kept without validation pairs.
    pub const CHOICES: [Assignment; 4] = [
        Assignment::Coverage,
        Assignment::Priority { split_penalty: 1 },
        Assignment::Priority { split_penalty: 0 },
        Assignment::Priority { split_penalty: 4 },
    ];
}

/// What to learn.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The admissibility budget α.
    pub budget: f64,
    /// At most this many codewords (K).
    pub max_codewords: usize,
    /// Weight of a pair in the greedy gain.
    pub pair_weight: u32,
    /// The assignments to choose among on the validation split (at least one).
    pub assignments: Vec<Assignment>,
}

impl Settings {
    /// α and K with the default pair weight and every assignment of [`Assignment::CHOICES`].
    pub fn new(budget: f64, max_codewords: usize) -> Settings {
        Settings {
            budget,
            max_codewords,
            pair_weight: DEFAULT_PAIR_WEIGHT,
            assignments: Assignment::CHOICES.to_vec(),
        }
    }
}

/// One assignment's figures on the validation split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trial {
    /// The assignment.
    #[serde(flatten)]
    pub assignment: Assignment,
    /// Codewords it selected.
    pub codewords: usize,
    /// Validation pairs whose two members it releases as the same codeword.
    pub collided_pairs: usize,
    /// Validation responses some selected codeword admits.
    pub covered_responses: usize,
    /// Mean L1 distance between the probability vectors the two members of a validation pair
    /// are released with (0 when they collide; an unassigned member counts with its native
    /// vector), in millionths: what the choice of assignment minimizes.
    pub pair_distance_micro: u64,
}

/// What one learning run did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LearnStats {
    /// Candidates (the strict codebook's codewords).
    pub candidates: usize,
    /// Training responses.
    pub responses: usize,
    /// Training responses some selected codeword admits.
    pub covered_responses: usize,
    /// Pairs (two responses sharing `pair_id` with the same selected class).
    pub pairs: usize,
    /// Training pairs one selected codeword admits both members of.
    pub jointly_covered_pairs: usize,
    /// Training pairs the assignment releases as the same codeword.
    pub collided_pairs: usize,
    /// Selected codewords.
    pub codewords: usize,
    /// The assignment kept.
    pub assignment: Option<Assignment>,
    /// Validation responses and pairs the choice was made on.
    pub validation_responses: usize,
    /// Validation pairs.
    pub validation_pairs: usize,
    /// Every assignment tried, with its validation figures.
    pub trials: Vec<Trial>,
}

/// Learns a compact codebook from `strict`'s codewords (the candidate pool) on `train`, and
/// chooses among `settings.assignments` by the validation split: the first is kept unless a
/// later one releases the two members of a `validation` pair clearly closer together (the mean
/// L1 distance of their probability vectors below [`CLEAR_IMPROVEMENT`] × the kept one's) and
/// covers at least as many validation responses.
///
/// A candidate *admits* a response when the bounded mapper could release it for that response
/// (its argmax set contains the choice and no policy's realized cost rises by more than α·κ_j for
/// any truth; the serialization round trip is left to the mapper). The selection stops at
/// `max_codewords` or when no candidate admits an unassigned response. Errors when nothing is
/// covered (an empty codebook is invalid). Deterministic: equal inputs give equal bytes.
pub fn learn(
    strict: &Codebook,
    spec: &Spec,
    train: &[Response],
    validation: &[Response],
    settings: &Settings,
) -> Result<(Codebook, LearnStats), Error> {
    check_settings(settings)?;
    let budget = settings.budget;
    let codewords = strict.codewords();
    let admission = Admission::new(codewords, spec);
    let covers = admission.covers(codewords, spec, train, budget);
    let pairs = pairs_of(train);
    let held_out = admission.covers(codewords, spec, validation, budget);
    let held_out_pairs = pairs_of(validation);
    let mut best: Option<(Trial, Vec<usize>)> = None;
    let mut trials = Vec::new();
    for &assignment in &settings.assignments {
        let chosen = select(assignment, &covers, &pairs, train.len(), settings);
        let (collided_pairs, covered_responses) =
            collisions(&chosen, &held_out, &held_out_pairs, validation.len());
        let trial = Trial {
            assignment,
            codewords: chosen.len(),
            collided_pairs,
            covered_responses,
            pair_distance_micro: pair_distance(
                &chosen,
                codewords,
                &held_out,
                &held_out_pairs,
                validation,
            ),
        };
        let better = best
            .as_ref()
            .is_none_or(|(kept, _)| clearly_better(&trial, kept));
        trials.push(trial.clone());
        if better && !chosen.is_empty() {
            best = Some((trial, chosen));
        }
    }
    let Some((kept, chosen)) = best else {
        return Err(invalid(
            "codewords",
            "no candidate covers any training response under this budget".to_string(),
        ));
    };
    let (collided, covered) = collisions(&chosen, &covers, &pairs, train.len());
    let stats = LearnStats {
        candidates: codewords.len(),
        responses: train.len(),
        covered_responses: covered,
        pairs: pairs.len(),
        jointly_covered_pairs: jointly_covered(&chosen, &covers, &pairs),
        collided_pairs: collided,
        codewords: chosen.len(),
        assignment: Some(kept.assignment),
        validation_responses: validation.len(),
        validation_pairs: held_out_pairs.len(),
        trials,
    };
    Ok((
        learned_codebook(strict, &chosen, settings, kept.assignment),
        stats,
    ))
}

/// An invalid setting or result of learning.
fn invalid(field: &str, message: String) -> Error {
    Error::Invalid {
        field: field.to_string(),
        message,
    }
}

/// Refuses settings learning cannot use: a budget that is not finite and `>= 0`, no room
/// for a codeword, no assignment to try.
fn check_settings(settings: &Settings) -> Result<(), Error> {
    let budget = settings.budget;
    if !(budget.is_finite() && budget >= 0.0) {
        return Err(invalid(
            "budget",
            format!("must be finite and >= 0, got {budget}"),
        ));
    }
    if settings.max_codewords == 0 {
        return Err(invalid("max_codewords", "must be at least 1".to_string()));
    }
    if settings.assignments.is_empty() {
        return Err(invalid(
            "assignments",
            "name at least one assignment".to_string(),
        ));
    }
    Ok(())
}

/// The candidates `assignment` selects on the training split.
fn select(
    assignment: Assignment,
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: usize,
    settings: &Settings,
) -> Vec<usize> {
    match assignment {
        Assignment::Coverage => select_coverage(
            covers,
            pairs,
            responses,
            settings.max_codewords,
            settings.pair_weight,
        ),
        Assignment::Priority { split_penalty } => select_priority(
            covers,
            pairs,
            responses,
            settings.max_codewords,
            settings.pair_weight,
            split_penalty,
        ),
    }
}

/// Whether `trial` releases validation pairs clearly closer together than `kept` while
/// covering at least as many validation responses.
fn clearly_better(trial: &Trial, kept: &Trial) -> bool {
    (trial.pair_distance_micro as f64) < CLEAR_IMPROVEMENT * kept.pair_distance_micro as f64
        && trial.covered_responses >= kept.covered_responses
}

/// How many training pairs some chosen codeword covers both members of.
fn jointly_covered(chosen: &[usize], covers: &[Vec<u32>], pairs: &[(u32, u32)]) -> usize {
    pairs
        .iter()
        .filter(|(a, b)| {
            chosen
                .iter()
                .any(|&k| covers[k].binary_search(a).is_ok() && covers[k].binary_search(b).is_ok())
        })
        .count()
}

/// The learned codebook: the chosen candidates, how they were learned, and the strict
/// codebook as its second stage.
fn learned_codebook(
    strict: &Codebook,
    chosen: &[usize],
    settings: &Settings,
    assignment: Assignment,
) -> Codebook {
    let codewords = strict.codewords();
    Codebook {
        codewords: chosen.iter().map(|&k| codewords[k].clone()).collect(),
        learned: Some(Learned {
            budget: settings.budget,
            max_codewords: settings.max_codewords,
            pair_weight: settings.pair_weight,
            assignment,
        }),
        // The strict codebook goes along as the second stage: an answer no compact codeword
        // covers is tried against it before the contract's fallback.
        strict_stage: Some(codewords.to_vec()),
        guard: None,
        ..strict.clone()
    }
}
