//! The WCPQ mapper (`docs/wcpq-rules.md` section 6): per answer, release the first codeword whose
//! behaviour signature equals the native one (strict) or whose realized-cost increase stays within
//! α·κ_j for every policy j and hypothetical truth (bounded, [`Admissibility::Budget`]) and that
//! survives the serialization round trip, or report a fallback reason.
//!
//! Everything request-independent is precomputed in [`Mapper::new`]: per selected class the
//! ordered candidate list (codewords whose exact argmax set contains the class) and, for the
//! native and prior posteriors, the plans of every candidate grouped into ordered admissible
//! lists keyed by plans. Mapping is then one signature computation, one ordered-map lookup and a
//! round trip of the first admissible codeword. For the request-dependent logistic posterior the
//! mapper scans the class's candidate list in order.

use std::collections::HashMap;

use foldhash::fast::FixedState;

use serde_json::Value;

use crate::codebook::{self, Codebook};
use crate::workflow::{InvalidRelease, Plan, Release, Signature, SignatureScratch, Spec};

/// After this many admissible codewords fail the round trip, the mapper falls back.
///
/// A correct round trip never fails (floats round-trip exactly), so the bound only caps the cost
/// of a broken serializer; falling back is always safe.
pub const MAX_ROUNDTRIP_MISMATCHES: u32 = 16;

/// Errors of mapper construction.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The codebook was built for other classes or workflows.
    #[error("codebook does not match the question's workflows")]
    Mismatch(#[source] codebook::Error),
    /// A budget that is not a finite non-negative number.
    #[error("admissibility budget must be a finite number >= 0, got {0}")]
    Budget(f64),
}

/// Which codewords may replace a native answer D (`docs/wcpq.md`, bounded admissibility).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Admissibility {
    /// σ(z) = σ(D): every frozen policy keeps its complete plan (the paper's strict rule).
    #[default]
    Strict,
    /// z keeps D's choice (its argmax set contains it) and field availability, and
    /// ℓ_j(z, t) − ℓ_j(D, t) ≤ α·κ_j for every frozen policy j and hypothetical truth t.
    Budget(f64),
}

/// Why an answer was not covered. Bounded: use [`Reason::label`] as a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The native answer is malformed (choice out of range, wrong vector length, NaN, ...).
    InvalidNative(InvalidRelease),
    /// No codeword's argmax set contains the selected class.
    NoCandidate,
    /// No candidate codeword has the native signature.
    NoAdmissibleCodeword,
    /// Admissible codewords exist but none survived the serialization round trip.
    RoundtripMismatch {
        /// How many admissible codewords failed (at most [`MAX_ROUNDTRIP_MISMATCHES`]).
        mismatches: u32,
    },
}

/// Which stage of a codebook covered an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// A learned compact codebook, under its admissibility budget.
    Compact,
    /// A strict codebook: a strict contract's, or a learned codebook's strict stage.
    Strict,
}

impl Stage {
    /// The stage's metric label.
    pub fn label(self) -> &'static str {
        match self {
            Stage::Compact => "compact",
            Stage::Strict => "strict",
        }
    }

    /// Every stage, for pre-registering metric series.
    pub const ALL: [Stage; 2] = [Stage::Compact, Stage::Strict];
}

/// The result of mapping one answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Release `release` (the codeword with D's choice and availability).
    Covered {
        /// The replacement answer to serialize and send.
        release: Release,
        /// Index of the codeword in its stage's codebook order.
        codeword_index: usize,
        /// The stage whose codeword went out.
        stage: Stage,
    },
    /// Apply the contract's fallback (native, choice_only or deny).
    Fallback(Reason),
}

/// The mapper for one question.
#[derive(Debug, Clone)]
pub struct Mapper {
    spec: Spec,
    codebook: Codebook,
    admissibility: Admissibility,
    /// Per selected class: indices of codewords whose argmax set contains it, ascending.
    candidates: Vec<Vec<u32>>,
    /// For request-independent posteriors: per class, [without probabilities, with probabilities],
    /// plans -> ascending admissible codeword indices.
    table: Option<Vec<AdmissibleLists>>,
    /// Alongside `table`: per class, which codewords' plans do not depend on their confidence
    /// being released. For those, a candidate read back bit for bit as it was sent has the
    /// target signature by construction of the table, and its plans are not recomputed.
    invariant: Vec<ConfidenceInvariant>,
    /// A learned codebook's strict stage, mapped strictly when no compact codeword is
    /// admissible (before the contract's fallback).
    strict_stage: Option<Box<Mapper>>,
}

/// For one selected class: `[without probabilities, with probabilities]`, each mapping plans to
/// the ascending indices of the codewords with exactly those plans. Hashed with a fixed
/// seed: the table is built from configuration only and read once per answer, where an
/// ordered map's comparisons of whole plan lists cost about three times a hash.
type AdmissibleLists = [HashMap<Vec<Plan>, Vec<u32>, FixedState>; 2];

/// For one selected class: `[without probabilities, with probabilities]`, the codewords whose
/// plans stay the same when their confidence is released too (one bit per codeword index).
type ConfidenceInvariant = [Vec<u64>; 2];

// === impl Reason ===

impl Reason {
    /// A fixed metric label: `invalid_native`, `no_candidate`, `no_admissible_codeword` or
    /// `roundtrip_mismatch`.
    pub fn label(&self) -> &'static str {
        match self {
            Reason::InvalidNative(_) => "invalid_native",
            Reason::NoCandidate => "no_candidate",
            Reason::NoAdmissibleCodeword => "no_admissible_codeword",
            Reason::RoundtripMismatch { .. } => "roundtrip_mismatch",
        }
    }

    /// All labels, for pre-registering metric series.
    pub const LABELS: [&'static str; 4] = [
        "invalid_native",
        "no_candidate",
        "no_admissible_codeword",
        "roundtrip_mismatch",
    ];
}

// === impl Mapper ===

impl Mapper {
    /// Checks that the codebook was built for `spec` and precomputes candidate lists and, for
    /// request-independent posteriors, the admissible lists.
    pub fn new(codebook: Codebook, spec: Spec) -> Result<Mapper, Error> {
        Mapper::with_admissibility(codebook, spec, Admissibility::Strict)
    }

    /// As [`Mapper::new`], with the given admissibility rule.
    pub fn with_admissibility(
        codebook: Codebook,
        spec: Spec,
        admissibility: Admissibility,
    ) -> Result<Mapper, Error> {
        if let Admissibility::Budget(alpha) = admissibility
            && !(alpha.is_finite() && alpha >= 0.0)
        {
            return Err(Error::Budget(alpha));
        }
        codebook
            .check_matches(&spec, spec.classes())
            .map_err(Error::Mismatch)?;
        let n = spec.class_count();
        let mut candidates = vec![Vec::new(); n];
        for (i, cw) in codebook.codewords().iter().enumerate() {
            let Ok(index) = u32::try_from(i) else { break };
            for class in argmax_set(&cw.p) {
                if let Some(list) = candidates.get_mut(class) {
                    list.push(index);
                }
            }
        }
        let words = codebook.codewords().len().div_ceil(64);
        let mut invariant: Vec<ConfidenceInvariant> = Vec::new();
        let table = spec
            .posterior_estimator()
            .is_request_independent()
            .then(|| {
                candidates
                    .iter()
                    .enumerate()
                    .map(|(class, list)| {
                        let mut slots: AdmissibleLists = Default::default();
                        let mut same: ConfidenceInvariant = [vec![0; words], vec![0; words]];
                        for (slot, with_probabilities) in [(0, false), (1, true)] {
                            for &index in list {
                                let cw = &codebook.codewords()[index as usize];
                                let mut release = Release {
                                    choice: class,
                                    probabilities: with_probabilities.then(|| cw.p.clone()),
                                    confidence: None,
                                };
                                let plans = spec.plans_with_public(&release, &[]);
                                release.confidence = Some(cw.c);
                                if spec.plans_with_public(&release, &[]) == plans {
                                    same[slot][index as usize / 64] |= 1 << (index % 64);
                                }
                                slots[slot].entry(plans).or_default().push(index);
                            }
                        }
                        invariant.push(same);
                        slots
                    })
                    .collect()
            });
        let strict_stage =
            match (admissibility, codebook.strict_stage()) {
                (Admissibility::Budget(_), Some(stage)) => Some(Box::new(
                    Mapper::with_admissibility(stage, spec.clone(), Admissibility::Strict)?,
                )),
                _ => None,
            };
        Ok(Mapper {
            spec,
            codebook,
            admissibility,
            candidates,
            table,
            invariant,
            strict_stage,
        })
    }

    /// Whether mapping reads the request's `state`: only a request-dependent posterior
    /// (a logistic one's public features), here or in the strict stage.
    pub fn reads_state(&self) -> bool {
        self.spec.posterior_estimator().is_request_dependent()
            || self.strict_stage.as_ref().is_some_and(|s| s.reads_state())
    }

    /// The strict stage of a learned codebook's mapper, if it has one.
    pub fn strict_stage(&self) -> Option<&Mapper> {
        self.strict_stage.as_deref()
    }

    /// The frozen workflows.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The codebook.
    pub fn codebook(&self) -> &Codebook {
        &self.codebook
    }

    /// The admissibility rule.
    pub fn admissibility(&self) -> Admissibility {
        self.admissibility
    }

    /// σ(D) of a native answer as it would be released (fields the contract drops must already
    /// be `None`).
    #[cfg(feature = "test-support")]
    pub fn native_signature(&self, native: &Release, state: &Value) -> Signature {
        self.spec.signature(native, state)
    }

    /// The candidate release for codeword `index`: D's choice and availability, the codeword's
    /// probabilities and confidence for the fields D carries.
    pub fn candidate(&self, native: &Release, index: usize) -> Option<Release> {
        let cw = self.codebook.codewords().get(index)?;
        Some(Release {
            choice: native.choice,
            probabilities: native.probabilities.as_ref().map(|_| cw.p.clone()),
            confidence: native.confidence.map(|_| cw.c),
        })
    }

    /// Maps one answer. `native` is D with the availability that would be released; `state` is
    /// the public request state; `roundtrip` serializes a candidate exactly as the proxy will send
    /// it and parses it back through the consumer path (None if that fails). A learned
    /// codebook's mapper that finds no admissible compact codeword maps D against its strict
    /// stage before giving up: bounded mappings never fall back to native first.
    pub fn map(
        &self,
        native: &Release,
        state: &Value,
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
    ) -> Outcome {
        match (self.map_own(native, state, roundtrip), &self.strict_stage) {
            (Outcome::Fallback(Reason::InvalidNative(error)), _) => {
                Outcome::Fallback(Reason::InvalidNative(error))
            }
            (Outcome::Fallback(_), Some(strict)) => strict.map(native, state, roundtrip),
            (outcome, _) => outcome,
        }
    }

    /// Maps one answer with this mapper's own codebook and rule (no second stage).
    fn map_own(
        &self,
        native: &Release,
        state: &Value,
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
    ) -> Outcome {
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
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
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
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
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
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
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
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
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
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
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
        roundtrip: &dyn Fn(&Release) -> Option<Release>,
        accepts: impl Fn(usize, &Release, &Release) -> bool,
    ) -> Outcome {
        let mut mismatches = 0u32;
        for index in admissible {
            let Some(release) = self.candidate(native, index) else {
                continue;
            };
            match roundtrip(&release) {
                Some(back) if accepts(index, &release, &back) => {
                    return Outcome::Covered {
                        release,
                        codeword_index: index,
                        stage: match self.admissibility {
                            Admissibility::Strict => Stage::Strict,
                            Admissibility::Budget(_) => Stage::Compact,
                        },
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
fn same_bits(a: &Release, b: &Release) -> bool {
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

/// Indices whose value equals the maximum exactly (empty if all values are NaN).
pub fn argmax_set(p: &[f64]) -> Vec<usize> {
    let max = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (0..p.len()).filter(|&i| p[i] == max).collect()
}

#[cfg(test)]
mod tests;
