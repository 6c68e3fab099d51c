//! Mapping one answer: the strict signature lookup or scan, the bounded budget check,
//! the reference mapper, and the serialization round trip every released codeword survives.

use serde_json::Value;

#[cfg(test)]
use super::argmax_set;
use super::{
    Admissibility, Candidate, MAX_ROUNDTRIP_MISMATCHES, Mapper, Outcome, Reason, RoundTrip,
};
use crate::workflow::{Plan, Release, Signature, SignatureScratch};

impl Mapper {
    /// Maps one answer. `native` is D with the availability that would be released; `state` is
    /// the public request state; `roundtrip` serializes a candidate exactly as the proxy will send
    /// it and parses it back through the consumer path (None if that fails). A learned
    /// codebook's mapper that finds no admissible compact codeword maps D against its strict
    /// stage before giving up: bounded mappings never fall back to native first.
    pub fn map(&self, native: &Release, state: &Value, roundtrip: &dyn RoundTrip) -> Outcome {
        match (self.map_own(native, state, roundtrip), &self.strict_stage) {
            (Outcome::Fallback(Reason::InvalidNative(error)), _) => {
                Outcome::Fallback(Reason::InvalidNative(error))
            }
            (Outcome::Fallback(_), Some(strict)) => strict.map(native, state, roundtrip),
            (outcome, _) => outcome,
        }
    }

    /// Maps one answer with this mapper's own codebook and rule (no second stage).
    fn map_own(&self, native: &Release, state: &Value, roundtrip: &dyn RoundTrip) -> Outcome {
        if let Err(e) = self.spec.check_release(native) {
            return Outcome::Fallback(Reason::InvalidNative(e));
        }
        let Some(candidates) = self.candidates.get(native.choice) else {
            return Outcome::Fallback(Reason::NoCandidate);
        };
        if candidates.is_empty() {
            return Outcome::Fallback(Reason::NoCandidate);
        }
        let public = self.spec.public_features(state);
        if let Admissibility::Budget(alpha) = self.admissibility {
            return self.map_budget(alpha, candidates, native, &public, roundtrip);
        }
        let target = self.spec.signature_with_public(native, &public);
        match &self.table {
            Some(table) => {
                let slot = usize::from(native.probabilities.is_some());
                let admissible = table
                    .get(native.choice)
                    .and_then(|slots| slots[slot].get(target.plans.as_slice()));
                let same = self
                    .invariant
                    .get(native.choice)
                    .map(|slots| slots[slot].as_slice());
                match admissible {
                    Some(list) => self.verify(
                        list.iter().map(|&i| i as usize),
                        native,
                        &target,
                        &public,
                        roundtrip,
                        same,
                    ),
                    None => Outcome::Fallback(Reason::NoAdmissibleCodeword),
                }
            }
            None => self.scan(candidates, native, &target, &public, roundtrip),
        }
    }

    /// The request-dependent path: scans the class's candidates in order, reusing one candidate
    /// release and one posterior buffer, and stops comparing plans at the first difference.
    fn scan(
        &self,
        candidates: &[u32],
        native: &Release,
        target: &Signature,
        public: &[f64],
        roundtrip: &dyn RoundTrip,
    ) -> Outcome {
        let codewords = self.codebook.codewords();
        let mut z = native.clone();
        let mut scratch = SignatureScratch::default();
        let admissible = candidates.iter().map(|&i| i as usize).filter(|&i| {
            let Some(cw) = codewords.get(i) else {
                return false;
            };
            if let Some(p) = z.probabilities.as_mut() {
                p.clear();
                p.extend_from_slice(&cw.p);
            }
            if z.confidence.is_some() {
                z.confidence = Some(cw.c);
            }
            self.spec
                .signature_matches(&z, public, target, &mut scratch)
        });
        // Lazy: the scan stops at the first admissible codeword that survives the round trip.
        // `verify` rebuilds each admissible candidate itself, so `z` is only the scan's buffer.
        self.verify(admissible, native, target, public, roundtrip, None)
    }

    /// The bounded path: the admissible codewords are those whose plans stay within the budget
    /// relative to D's plans; they are round-tripped in codebook order.
    fn map_budget(
        &self,
        alpha: f64,
        candidates: &[u32],
        native: &Release,
        public: &[f64],
        roundtrip: &dyn RoundTrip,
    ) -> Outcome {
        let native_plans = self.spec.plans_with_public(native, public);
        let within = |plans: &[Plan]| self.spec.within_budget(&native_plans, plans, alpha);
        let admissible: Vec<usize> = match &self.table {
            Some(table) => {
                let slot = usize::from(native.probabilities.is_some());
                let mut indices: Vec<usize> = table
                    .get(native.choice)
                    .map(|slots| {
                        slots[slot]
                            .iter()
                            .filter(|(plans, _)| within(plans))
                            .flat_map(|(_, list)| list.iter().map(|&i| i as usize))
                            .collect()
                    })
                    .unwrap_or_default();
                indices.sort_unstable();
                indices
            }
            None => candidates
                .iter()
                .map(|&i| i as usize)
                .filter(|&i| {
                    self.candidate(native, i)
                        .is_some_and(|z| within(&self.spec.plans_with_public(&z, public)))
                })
                .collect(),
        };
        self.verify_budget(
            admissible.into_iter(),
            native,
            &native_plans,
            alpha,
            public,
            roundtrip,
        )
    }

    /// Round-trips bounded-admissible codewords in order; the first whose re-read form keeps D's
    /// choice and availability and stays within the budget is released.
    fn verify_budget(
        &self,
        admissible: impl Iterator<Item = usize>,
        native: &Release,
        native_plans: &[Plan],
        alpha: f64,
        public: &[f64],
        roundtrip: &dyn RoundTrip,
    ) -> Outcome {
        self.first_read_back(admissible, native, roundtrip, |_, _, back| {
            back.choice == native.choice
                && back.availability() == native.availability()
                && self.spec.within_budget(
                    native_plans,
                    &self.spec.plans_with_public(back, public),
                    alpha,
                )
        })
    }

    /// Reference implementation for tests: scans every codeword in order with no precomputation.
    #[cfg(test)]
    pub(crate) fn map_reference(
        &self,
        native: &Release,
        state: &Value,
        roundtrip: &dyn RoundTrip,
    ) -> Outcome {
        if let Err(e) = self.spec.check_release(native) {
            return Outcome::Fallback(Reason::InvalidNative(e));
        }
        let target = self.spec.signature(native, state);
        let public = self.spec.public_features(state);
        let native_plans = self.spec.plans(native, state);
        let codewords = self.codebook.codewords();
        let mut any_candidate = false;
        let mut admissible = Vec::new();
        for (i, cw) in codewords.iter().enumerate() {
            if !argmax_set(&cw.p).contains(&native.choice) {
                continue;
            }
            any_candidate = true;
            let Some(z) = self.candidate(native, i) else {
                continue;
            };
            let ok = match self.admissibility {
                Admissibility::Strict => self.spec.signature(&z, state) == target,
                Admissibility::Budget(alpha) => {
                    self.spec
                        .within_budget(&native_plans, &self.spec.plans(&z, state), alpha)
                }
            };
            if ok {
                admissible.push(i);
            }
        }
        if !any_candidate {
            return Outcome::Fallback(Reason::NoCandidate);
        }
        match self.admissibility {
            Admissibility::Strict => self.verify(
                admissible.into_iter(),
                native,
                &target,
                &public,
                roundtrip,
                None,
            ),
            Admissibility::Budget(alpha) => self.verify_budget(
                admissible.into_iter(),
                native,
                &native_plans,
                alpha,
                &public,
                roundtrip,
            ),
        }
    }

    /// Round-trips admissible codewords in order; the first whose re-read signature equals the
    /// target is released. With `same` (the table path: the candidates are the table's list for
    /// the target's plans), a candidate whose confidence does not change its plans and that
    /// reads back bit for bit as sent has the target signature without recomputing it: its
    /// choice and availability are D's, and its plans are the list's, which are the target's.
    fn verify(
        &self,
        admissible: impl Iterator<Item = usize>,
        native: &Release,
        target: &Signature,
        public: &[f64],
        roundtrip: &dyn RoundTrip,
        same: Option<&[u64]>,
    ) -> Outcome {
        self.first_read_back(admissible, native, roundtrip, |index, release, back| {
            let known = same.is_some_and(|bits| {
                bits.get(index / 64)
                    .is_some_and(|word| word & (1 << (index % 64)) != 0)
            });
            (known && same_bits(back, release))
                || self.spec.signature_with_public(back, public) == *target
        })
    }

    /// Round-trips the candidates of `admissible` in order and releases the first whose
    /// read-back `accepts(index, candidate, read_back)`; gives up after
    /// `MAX_ROUNDTRIP_MISMATCHES` refusals.
    fn first_read_back(
        &self,
        admissible: impl Iterator<Item = usize>,
        native: &Release,
        roundtrip: &dyn RoundTrip,
        accepts: impl Fn(usize, &Release, &Release) -> bool,
    ) -> Outcome {
        let mut mismatches = 0u32;
        for index in admissible {
            let Some(release) = self.candidate(native, index) else {
                continue;
            };
            let candidate = Candidate {
                release: &release,
                stage: self.stage(),
                index,
            };
            match roundtrip.roundtrip(candidate) {
                Some(back) if accepts(index, &release, &back) => {
                    return Outcome::Covered {
                        release,
                        codeword_index: index,
                        stage: self.stage(),
                    };
                }
                _ => {
                    mismatches += 1;
                    if mismatches >= MAX_ROUNDTRIP_MISMATCHES {
                        break;
                    }
                }
            }
        }
        if mismatches == 0 {
            Outcome::Fallback(Reason::NoAdmissibleCodeword)
        } else {
            Outcome::Fallback(Reason::RoundtripMismatch { mismatches })
        }
    }
}

/// Whether two releases are the same bit for bit (`-0.0` and `0.0` differ).
pub(crate) fn same_bits(a: &Release, b: &Release) -> bool {
    let bits = |p: Option<f64>| p.map(f64::to_bits);
    a.choice == b.choice
        && bits(a.confidence) == bits(b.confidence)
        && match (&a.probabilities, &b.probabilities) {
            (None, None) => true,
            (Some(x), Some(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(u, v)| u.to_bits() == v.to_bits())
            }
            _ => false,
        }
}
