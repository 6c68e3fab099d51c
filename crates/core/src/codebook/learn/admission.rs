//! Which candidates admit which responses under the budget (the bounded mapper's test
//! without the round trip), with plans grouped for request-independent posteriors.

use std::collections::BTreeMap;

use super::Response;
use crate::codebook::Codeword;
use crate::wcpq::argmax_set;
use crate::workflow::{Plan, Release, Spec};

/// Precomputed admission of candidates (plan groups for request-independent posteriors).
pub(super) struct Admission {
    argmax: Vec<Vec<usize>>,
    independent: bool,
    /// Per availability slot (confidence only, with probabilities): distinct plan vectors.
    groups: [Vec<Vec<Plan>>; 2],
    /// Per slot: each candidate's group.
    group_of: [Vec<usize>; 2],
}

impl Admission {
    pub(super) fn new(codewords: &[Codeword], spec: &Spec) -> Admission {
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
    pub(super) fn covers(
        &self,
        codewords: &[Codeword],
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
