//! Learned compact codebooks (`build-codebook --budget α --max-codewords K`): a greedy coverage
//! selection from a strict codebook's candidates over the training split only (the TUPLE-Bench
//! paper, Appendix H.2; `docs/wcpq.md`, "Learned compact codebooks").

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Codebook, Error, Learned};
use crate::wcpq::argmax_set;
use crate::workflow::{Plan, Release, Spec};

/// K when `--max-codewords` is not given (the paper's greedy codebooks keep at most 128).
pub const DEFAULT_MAX_CODEWORDS: usize = 128;

/// Pair weight when none is given (the paper's non-zero pair weight).
pub const DEFAULT_PAIR_WEIGHT: u32 = 4;

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

/// What one greedy selection did.
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
    /// Pairs one selected codeword admits both members of.
    pub jointly_covered_pairs: usize,
    /// Selected codewords.
    pub codewords: usize,
}

/// Learns a compact codebook from `strict`'s codewords (the candidate pool, in its order).
///
/// A candidate *covers* a response when the bounded mapper could release it for that response
/// (its argmax set contains the choice and no policy's realized cost rises by more than α·κ_j for
/// any truth; the serialization round trip is left to the mapper). Each step picks the candidate
/// with the largest gain = newly covered responses + `pair_weight` × pairs not yet jointly
/// covered whose two members it both covers; ties go to the earlier candidate. The selection
/// stops at `max_codewords` or when no candidate gains anything. The kept codewords stay in
/// strict order. Errors when nothing is covered (an empty codebook is invalid).
pub fn learn(
    strict: &Codebook,
    spec: &Spec,
    responses: &[Response],
    budget: f64,
    max_codewords: usize,
    pair_weight: u32,
) -> Result<(Codebook, LearnStats), Error> {
    let invalid = |field: &str, message: String| Error::Invalid {
        field: field.to_string(),
        message,
    };
    if !(budget.is_finite() && budget >= 0.0) {
        return Err(invalid(
            "budget",
            format!("must be finite and >= 0, got {budget}"),
        ));
    }
    if max_codewords == 0 {
        return Err(invalid("max_codewords", "must be at least 1".to_string()));
    }
    let codewords = strict.codewords();
    let argmax: Vec<Vec<usize>> = codewords.iter().map(|cw| argmax_set(&cw.p)).collect();
    // For request-independent posteriors, plans depend only on p and whether p is released:
    // group candidates by plan vector per slot and evaluate the bound once per group.
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
    let mut covers: Vec<Vec<u32>> = vec![Vec::new(); codewords.len()];
    for (r, response) in responses.iter().enumerate() {
        let d = &response.native;
        if spec.check_release(d).is_err() {
            continue;
        }
        let Ok(r) = u32::try_from(r) else { break };
        let native_plans = spec.plans_with_public(d, &response.public);
        let slot = usize::from(d.probabilities.is_some());
        let group_ok: Vec<bool> = groups[slot]
            .iter()
            .map(|plans| spec.within_budget(&native_plans, plans, budget))
            .collect();
        for (k, cw) in codewords.iter().enumerate() {
            if !argmax[k].contains(&d.choice) {
                continue;
            }
            let ok = if independent {
                group_ok[group_of[slot][k]]
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
    // Pairs: groups of exactly two responses sharing pair_id with the same selected class.
    let mut by_pair: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (r, response) in responses.iter().enumerate() {
        by_pair
            .entry(response.pair_id.as_str())
            .or_default()
            .push(r);
    }
    let pairs: Vec<(u32, u32)> = by_pair
        .values()
        .filter_map(|members| match members.as_slice() {
            [a, b] if responses[*a].native.choice == responses[*b].native.choice => {
                Some((u32::try_from(*a).ok()?, u32::try_from(*b).ok()?))
            }
            _ => None,
        })
        .collect();
    let pair_covers: Vec<Vec<u32>> = covers
        .iter()
        .map(|list| {
            (0u32..)
                .zip(&pairs)
                .filter(|(_, (a, b))| {
                    list.binary_search(a).is_ok() && list.binary_search(b).is_ok()
                })
                .map(|(i, _)| i)
                .collect()
        })
        .collect();

    let mut covered = vec![false; responses.len()];
    let mut joint = vec![false; pairs.len()];
    let mut taken = vec![false; codewords.len()];
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < max_codewords {
        let mut best: Option<(u64, usize)> = None;
        for k in 0..codewords.len() {
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
    if chosen.is_empty() {
        return Err(invalid(
            "codewords",
            "no candidate covers any training response under this budget".to_string(),
        ));
    }
    chosen.sort_unstable();
    let stats = LearnStats {
        candidates: codewords.len(),
        responses: responses.len(),
        covered_responses: covered.iter().filter(|&&c| c).count(),
        pairs: pairs.len(),
        jointly_covered_pairs: joint.iter().filter(|&&j| j).count(),
        codewords: chosen.len(),
    };
    let codebook = Codebook {
        codewords: chosen.iter().map(|&k| codewords[k].clone()).collect(),
        learned: Some(Learned {
            budget,
            max_codewords,
            pair_weight,
        }),
        // The strict codebook goes along as the second stage: an answer no compact codeword
        // covers is tried against it before the contract's fallback.
        strict_stage: Some(codewords.to_vec()),
        ..strict.clone()
    };
    Ok((codebook, stats))
}
