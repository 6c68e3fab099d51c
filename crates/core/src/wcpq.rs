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

mod map;

pub(crate) use map::same_bits;

use crate::codebook::{self, Codebook};
use crate::workflow::{InvalidRelease, Plan, Release, Spec};

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

/// A codeword the mapper hands to the round trip: the release it would send, and which
/// codeword it is (its stage and its index in that stage's codebook), by which a caller
/// may keep the codeword's encoding instead of writing it again.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'r> {
    /// D's choice and availability, with the codeword's values.
    pub release: &'r Release,
    /// The stage whose codebook holds the codeword.
    pub stage: Stage,
    /// The codeword's index in that codebook.
    pub index: usize,
}

/// The serialization round trip the mapper checks every codeword with: serializes a
/// candidate exactly as it will be sent and reads it back as the recipient does (`None`
/// if that fails). Any `Fn(&Release) -> Option<Release>` is one.
pub trait RoundTrip {
    /// The candidate as the recipient reads it back.
    fn roundtrip(&self, candidate: Candidate<'_>) -> Option<Release>;
}

impl<F: Fn(&Release) -> Option<Release>> RoundTrip for F {
    fn roundtrip(&self, candidate: Candidate<'_>) -> Option<Release> {
        self(candidate.release)
    }
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
        let candidates = candidate_lists(&codebook, spec.class_count());
        let (table, invariant) = admissible_tables(&codebook, &spec, &candidates);
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

    /// The stage this mapper's own codebook covers answers at.
    pub fn stage(&self) -> Stage {
        match self.admissibility {
            Admissibility::Strict => Stage::Strict,
            Admissibility::Budget(_) => Stage::Compact,
        }
    }

    /// σ(D) of a native answer as it would be released (fields the contract drops must already
    /// be `None`).
    #[cfg(feature = "test-support")]
    pub fn native_signature(
        &self,
        native: &Release,
        state: &serde_json::Value,
    ) -> crate::workflow::Signature {
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
}

/// Per selected class, the codewords whose exact argmax set contains it, in codebook order.
fn candidate_lists(codebook: &Codebook, n: usize) -> Vec<Vec<u32>> {
    let mut candidates = vec![Vec::new(); n];
    for (i, cw) in codebook.codewords().iter().enumerate() {
        let Ok(index) = u32::try_from(i) else { break };
        for class in argmax_set(&cw.p) {
            if let Some(list) = candidates.get_mut(class) {
                list.push(index);
            }
        }
    }
    candidates
}

/// For request-independent posteriors, per class the admissible lists keyed by plans and
/// the candidates whose plans a confidence does not change; `(None, [])` otherwise.
fn admissible_tables(
    codebook: &Codebook,
    spec: &Spec,
    candidates: &[Vec<u32>],
) -> (Option<Vec<AdmissibleLists>>, Vec<ConfidenceInvariant>) {
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
                    let (slots, same) = class_lists(codebook, spec, class, list, words);
                    invariant.push(same);
                    slots
                })
                .collect()
        });
    (table, invariant)
}

/// One class's admissible lists per availability slot (without, with probabilities) and
/// its confidence-invariant candidates as a bit set of `words` words.
fn class_lists(
    codebook: &Codebook,
    spec: &Spec,
    class: usize,
    list: &[u32],
    words: usize,
) -> (AdmissibleLists, ConfidenceInvariant) {
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
    (slots, same)
}

/// Indices whose value equals the maximum exactly (empty if all values are NaN).
pub fn argmax_set(p: &[f64]) -> Vec<usize> {
    let max = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (0..p.len()).filter(|&i| p[i] == max).collect()
}

#[cfg(test)]
mod tests;
