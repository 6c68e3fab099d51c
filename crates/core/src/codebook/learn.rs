//! Learned compact codebooks (`build-codebook --budget α --max-codewords K`): a greedy selection
//! from a strict codebook's candidates over the training split only (the TUPLE-Bench paper,
//! Appendix H.2; `docs/wcpq.md`, "Learned compact codebooks"), with the assignment (which
//! admissible codeword the mapper releases) chosen on the validation split.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Codebook, Error, Learned};
use crate::wcpq::argmax_set;
use crate::workflow::{Plan, Release, Spec};

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
    let invalid = |field: &str, message: String| Error::Invalid {
        field: field.to_string(),
        message,
    };
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
    let codewords = strict.codewords();
    let admission = Admission::new(codewords, spec);
    let covers = admission.covers(codewords, spec, train, budget);
    let pairs = pairs_of(train);
    let held_out = admission.covers(codewords, spec, validation, budget);
    let held_out_pairs = pairs_of(validation);
    let mut best: Option<(Trial, Vec<usize>)> = None;
    let mut trials = Vec::new();
    for &assignment in &settings.assignments {
        let chosen = match assignment {
            Assignment::Coverage => select_coverage(
                &covers,
                &pairs,
                train.len(),
                settings.max_codewords,
                settings.pair_weight,
            ),
            Assignment::Priority { split_penalty } => select_priority(
                &covers,
                &pairs,
                train.len(),
                settings.max_codewords,
                settings.pair_weight,
                split_penalty,
            ),
        };
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
        let better = best.as_ref().is_none_or(|(kept, _)| {
            (trial.pair_distance_micro as f64) < CLEAR_IMPROVEMENT * kept.pair_distance_micro as f64
                && trial.covered_responses >= kept.covered_responses
        });
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
    let jointly = pairs
        .iter()
        .filter(|(a, b)| {
            chosen
                .iter()
                .any(|&k| covers[k].binary_search(a).is_ok() && covers[k].binary_search(b).is_ok())
        })
        .count();
    let stats = LearnStats {
        candidates: codewords.len(),
        responses: train.len(),
        covered_responses: covered,
        pairs: pairs.len(),
        jointly_covered_pairs: jointly,
        collided_pairs: collided,
        codewords: chosen.len(),
        assignment: Some(kept.assignment),
        validation_responses: validation.len(),
        validation_pairs: held_out_pairs.len(),
        trials,
    };
    let codebook = Codebook {
        codewords: chosen.iter().map(|&k| codewords[k].clone()).collect(),
        learned: Some(Learned {
            budget,
            max_codewords: settings.max_codewords,
            pair_weight: settings.pair_weight,
            assignment: kept.assignment,
        }),
        // The strict codebook goes along as the second stage: an answer no compact codeword
        // covers is tried against it before the contract's fallback.
        strict_stage: Some(codewords.to_vec()),
        guard: None,
        ..strict.clone()
    };
    Ok((codebook, stats))
}

/// Precomputed admission of candidates (plan groups for request-independent posteriors).
struct Admission {
    argmax: Vec<Vec<usize>>,
    independent: bool,
    /// Per availability slot (confidence only, with probabilities): distinct plan vectors.
    groups: [Vec<Vec<Plan>>; 2],
    /// Per slot: each candidate's group.
    group_of: [Vec<usize>; 2],
}

impl Admission {
    fn new(codewords: &[super::Codeword], spec: &Spec) -> Admission {
        let argmax = codewords.iter().map(|cw| argmax_set(&cw.p)).collect();
        // For request-independent posteriors, plans depend only on p and whether p is
        // released: group candidates by plan vector per slot and evaluate the bound once per
        // group.
        let independent = spec.posterior_estimator().is_request_independent();
        let mut groups: [Vec<Vec<Plan>>; 2] = Default::default();
        let mut group_of: [Vec<usize>; 2] = Default::default();
        if independent {
            for (slot, with_probabilities) in [(0, false), (1, true)] {
                let mut index: BTreeMap<Vec<Plan>, usize> = BTreeMap::new();
                for cw in codewords {
                    let z = Release {
                        choice: 0,
                        probabilities: with_probabilities.then(|| cw.p.clone()),
                        confidence: None,
                    };
                    let plans = spec.plans_with_public(&z, &[]);
                    let next = index.len();
                    let id = *index.entry(plans.clone()).or_insert_with(|| {
                        groups[slot].push(plans);
                        next
                    });
                    group_of[slot].push(id);
                }
            }
        }
        Admission {
            argmax,
            independent,
            groups,
            group_of,
        }
    }

    /// For every candidate, the (ascending) indices of the responses it admits.
    fn covers(
        &self,
        codewords: &[super::Codeword],
        spec: &Spec,
        responses: &[Response],
        budget: f64,
    ) -> Vec<Vec<u32>> {
        let mut covers: Vec<Vec<u32>> = vec![Vec::new(); codewords.len()];
        for (r, response) in responses.iter().enumerate() {
            let d = &response.native;
            if spec.check_release(d).is_err() {
                continue;
            }
            let Ok(r) = u32::try_from(r) else { break };
            let native_plans = spec.plans_with_public(d, &response.public);
            let slot = usize::from(d.probabilities.is_some());
            let group_ok: Vec<bool> = self.groups[slot]
                .iter()
                .map(|plans| spec.within_budget(&native_plans, plans, budget))
                .collect();
            for (k, cw) in codewords.iter().enumerate() {
                if !self.argmax[k].contains(&d.choice) {
                    continue;
                }
                let ok = if self.independent {
                    group_ok[self.group_of[slot][k]]
                } else {
                    let z = Release {
                        choice: d.choice,
                        probabilities: d.probabilities.as_ref().map(|_| cw.p.clone()),
                        confidence: d.confidence.map(|_| cw.c),
                    };
                    spec.within_budget(
                        &native_plans,
                        &spec.plans_with_public(&z, &response.public),
                        budget,
                    )
                };
                if ok {
                    covers[k].push(r);
                }
            }
        }
        covers
    }
}

/// Pairs: groups of exactly two responses sharing `pair_id` with the same selected class.
fn pairs_of(responses: &[Response]) -> Vec<(u32, u32)> {
    let mut by_pair: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (r, response) in responses.iter().enumerate() {
        by_pair
            .entry(response.pair_id.as_str())
            .or_default()
            .push(r);
    }
    by_pair
        .values()
        .filter_map(|members| match members.as_slice() {
            [a, b] if responses[*a].native.choice == responses[*b].native.choice => {
                Some((u32::try_from(*a).ok()?, u32::try_from(*b).ok()?))
            }
            _ => None,
        })
        .collect()
}

/// The mapper's assignment under `chosen` (file order): every response goes to the first
/// chosen codeword that admits it. Returns (pairs both of whose members go to the same
/// codeword, responses assigned at all).
fn collisions(
    chosen: &[usize],
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: usize,
) -> (usize, usize) {
    let mut assigned: Vec<Option<usize>> = vec![None; responses];
    for (position, &k) in chosen.iter().enumerate() {
        for &r in &covers[k] {
            let slot = &mut assigned[r as usize];
            if slot.is_none() {
                *slot = Some(position);
            }
        }
    }
    let collided = pairs
        .iter()
        .filter(|(a, b)| {
            let a = assigned[*a as usize];
            a.is_some() && a == assigned[*b as usize]
        })
        .count();
    (collided, assigned.iter().filter(|a| a.is_some()).count())
}

/// The mean L1 distance between the released probability vectors of the two members of each
/// pair under `chosen` (file order: first admissible), in millionths (0 without pairs).
fn pair_distance(
    chosen: &[usize],
    codewords: &[super::Codeword],
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: &[Response],
) -> u64 {
    if pairs.is_empty() {
        return 0;
    }
    let mut released: Vec<Option<&[f64]>> = vec![None; responses.len()];
    for &k in chosen {
        for &r in &covers[k] {
            let slot = &mut released[r as usize];
            if slot.is_none() {
                *slot = Some(&codewords[k].p);
            }
        }
    }
    let vector = |r: u32| -> &[f64] {
        released[r as usize]
            .or(responses[r as usize].native.probabilities.as_deref())
            .unwrap_or(&[])
    };
    let total: f64 = pairs
        .iter()
        .map(|&(a, b)| {
            vector(a)
                .iter()
                .zip(vector(b))
                .map(|(x, y)| (x - y).abs())
                .sum::<f64>()
        })
        .sum();
    // Bounded by 2 per pair: the rounding to millionths cannot overflow.
    (total / pairs.len() as f64 * 1e6).round() as u64
}

/// Greedy coverage: each step picks the candidate with the largest gain = newly covered
/// responses + `pair_weight` × pairs not yet jointly covered whose two members it both covers
/// (ties: the earlier candidate); the kept codewords in strict order.
fn select_coverage(
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: usize,
    max_codewords: usize,
    pair_weight: u32,
) -> Vec<usize> {
    let pair_covers: Vec<Vec<u32>> = covers
        .iter()
        .map(|list| {
            (0u32..)
                .zip(pairs)
                .filter(|(_, (a, b))| {
                    list.binary_search(a).is_ok() && list.binary_search(b).is_ok()
                })
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let mut covered = vec![false; responses];
    let mut joint = vec![false; pairs.len()];
    let mut taken = vec![false; covers.len()];
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < max_codewords {
        let mut best: Option<(u64, usize)> = None;
        for k in 0..covers.len() {
            if taken[k] {
                continue;
            }
            let new = covers[k].iter().filter(|&&r| !covered[r as usize]).count() as u64;
            let new_pairs = pair_covers[k]
                .iter()
                .filter(|&&p| !joint[p as usize])
                .count() as u64;
            let gain = new + u64::from(pair_weight) * new_pairs;
            if gain > 0 && best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, k));
            }
        }
        let Some((_, k)) = best else { break };
        taken[k] = true;
        chosen.push(k);
        for &r in &covers[k] {
            covered[r as usize] = true;
        }
        for &p in &pair_covers[k] {
            joint[p as usize] = true;
        }
    }
    chosen.sort_unstable();
    chosen
}

/// The privacy-targeting decision list ([`Assignment::Priority`]), in pick order.
fn select_priority(
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: usize,
    max_codewords: usize,
    pair_weight: u32,
    split_penalty: u32,
) -> Vec<usize> {
    // partner[r]: the other member of r's pair, if r is in one.
    let mut partner: Vec<Option<u32>> = vec![None; responses];
    for &(a, b) in pairs {
        partner[a as usize] = Some(b);
        partner[b as usize] = Some(a);
    }
    let mut assigned = vec![false; responses];
    let mut taken = vec![false; covers.len()];
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < max_codewords {
        let mut best: Option<(i64, usize)> = None;
        for k in 0..covers.len() {
            if taken[k] {
                continue;
            }
            let (mut new, mut collide_twice, mut split) = (0i64, 0i64, 0i64);
            for &r in &covers[k] {
                if assigned[r as usize] {
                    continue;
                }
                new += 1;
                if let Some(other) = partner[r as usize]
                    && !assigned[other as usize]
                {
                    if covers[k].binary_search(&other).is_ok() {
                        collide_twice += 1;
                    } else {
                        split += 1;
                    }
                }
            }
            if new == 0 {
                continue;
            }
            let gain = 2 * new + i64::from(pair_weight) * collide_twice
                - 2 * i64::from(split_penalty) * split;
            if best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, k));
            }
        }
        let Some((_, k)) = best else { break };
        taken[k] = true;
        chosen.push(k);
        for &r in &covers[k] {
            assigned[r as usize] = true;
        }
    }
    chosen
}
