//! The guard of `build-codebook --budget`: the bounded codebook measured against the strict one
//! it was learned from, on the **validation split**, paired over the same pairs, with the
//! audit's attackers (decoders, ensembles, pair-clustered bootstrap), before either is written.
//!
//! The test split is never read. The audit needs three splits of its own, so the worlds are
//! relabelled: the validation split becomes the audit's test split (what is scored), a fixed
//! quarter of the train pairs (chosen by a hash of the pair id) becomes the audit's validation
//! split (which attacker strategy is frozen), the other train pairs stay train (what the
//! attackers are fitted on). The bounded codebook is kept only when the upper bound of the
//! paired interval of (bounded − strict) recovery is below 0 (`codebook::choose`); with fewer
//! than [`MIN_VALIDATION_PAIRS`] validation pairs, or when the audit cannot run, the strict
//! codebook is written.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::bootstrap::Estimate;
use super::intake::{self, CandidateRelease, Reading};
use releasegate_core::codebook::{self, Chosen, Figure, Guard};
use releasegate_core::contract::Contract;
use releasegate_core::mechanism::Mechanism;
use releasegate_sim::worlds::{Split, World};
use sha2::{Digest, Sha256};

/// Fewer validation pairs than this cannot show a difference: the guard writes strict.
pub const MIN_VALIDATION_PAIRS: usize = 30;
/// One train pair in this many becomes the audit's selection split.
const SELECTION_SHARE: u8 = 4;
/// The release names inside the guard's audit.
const STRICT: &str = "strict";
const BOUNDED: &str = "bounded";

/// The guard's settings: the audit's seed, resamples and threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Seed of the bootstrap streams.
    pub seed: u64,
    /// Bootstrap resamples per interval.
    pub n_bootstrap: usize,
    /// Fitting threads (0: every core); the figures do not depend on it.
    pub threads: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        let audit = super::Config::default();
        Settings {
            seed: audit.seed,
            n_bootstrap: audit.n_bootstrap,
            threads: 0,
        }
    }
}

/// What the learning produced, as the guard records it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learned {
    /// α.
    pub budget: f64,
    /// K.
    pub max_codewords: usize,
    /// Pair weight.
    pub pair_weight: u32,
}

/// The two releases' validation figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// Recovery under the strict codebook.
    pub strict: Estimate,
    /// Recovery under the bounded codebook.
    pub bounded: Estimate,
    /// Bounded minus strict, paired over the same validation pairs.
    pub difference: Estimate,
}

/// Why no comparison could be made (the guard then writes strict).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Too few validation pairs of the codebook's question.
    #[error(
        "{found} validation pairs of the question, fewer than the {needed} the comparison needs"
    )]
    TooFewPairs {
        /// Pairs found.
        found: usize,
        /// [`MIN_VALIDATION_PAIRS`].
        needed: usize,
    },
    /// The audit could not run on these worlds.
    #[error("the audit cannot compare the codebooks on these worlds: {0}")]
    Audit(String),
}

/// Measures `bounded` against `strict` (each the mechanism of `question` in every contract,
/// keyed by contract name) on the validation split of `worlds`, paired.
pub fn compare(
    contracts: &[Arc<Contract>],
    question: &str,
    worlds: &[World],
    strict: &BTreeMap<String, Mechanism>,
    bounded: &BTreeMap<String, Mechanism>,
    settings: &Settings,
) -> Result<Comparison, Error> {
    let relabelled = relabel(worlds, question);
    let pairs: BTreeSet<&str> = relabelled
        .iter()
        .filter(|w| w.split == Split::Test)
        .map(|w| w.pair_id.as_str())
        .collect();
    if pairs.len() < MIN_VALIDATION_PAIRS {
        return Err(Error::TooFewPairs {
            found: pairs.len(),
            needed: MIN_VALIDATION_PAIRS,
        });
    }
    let candidate = |name: &str, mechanisms: &BTreeMap<String, Mechanism>| CandidateRelease {
        mechanisms: mechanisms
            .iter()
            .map(|(contract, m)| ((contract.clone(), question.to_string()), m.clone()))
            .collect(),
        ..CandidateRelease::uniform(name, None, None)
    };
    let candidates = [candidate(STRICT, strict), candidate(BOUNDED, bounded)];
    let audit = |reason: String| Error::Audit(reason);
    let (input, _) = intake::build(
        contracts,
        &relabelled,
        &candidates,
        Reading::Released,
        settings.seed,
    )
    .map_err(|e| audit(e.to_string()))?;
    let config = super::Config {
        seed: settings.seed,
        n_bootstrap: settings.n_bootstrap,
        threads: settings.threads,
        references: vec![STRICT.to_string()],
        ..super::Config::default()
    };
    let report = super::run(&input, &config).map_err(|e| audit(e.to_string()))?;
    let find = |name: &str| report.releases.iter().find(|r| r.release == name);
    let (Some(strict), Some(bounded)) = (find(STRICT), find(BOUNDED)) else {
        return Err(audit("a release is missing from the report".into()));
    };
    let difference = bounded
        .paired
        .iter()
        .find(|p| p.reference == STRICT)
        .ok_or_else(|| audit("the two releases were not scored on the same pairs".into()))?
        .difference;
    if difference.n_pairs < MIN_VALIDATION_PAIRS {
        return Err(Error::TooFewPairs {
            found: difference.n_pairs,
            needed: MIN_VALIDATION_PAIRS,
        });
    }
    Ok(Comparison {
        strict: strict.pooled.accuracy,
        bounded: bounded.pooled.accuracy,
        difference,
    })
}

/// The worlds of `question` the guard's audit reads: validation as test, a hashed quarter of
/// the train pairs as validation, the rest train; the test split is dropped.
fn relabel(worlds: &[World], question: &str) -> Vec<World> {
    worlds
        .iter()
        .filter(|w| w.labels.as_ref().is_some_and(|l| l.question == question))
        .filter_map(|world| {
            let split = match world.split {
                Split::Test => return None,
                Split::Validation => Split::Test,
                Split::Train if selection_pair(&world.pair_id) => Split::Validation,
                Split::Train => Split::Train,
            };
            Some(World {
                split,
                ..world.clone()
            })
        })
        .collect()
}

/// Whether a train pair joins the audit's selection split (a hash of its id: the same pairs
/// whatever the order of the worlds).
fn selection_pair(pair_id: &str) -> bool {
    let digest = Sha256::digest(format!("releasegate guard/{pair_id}").as_bytes());
    digest[0] % SELECTION_SHARE == 0
}

/// The record of what the guard measured (`outcome`) and chose, for the codebook file.
pub fn record(learned: Learned, outcome: &Result<Comparison, Error>, settings: &Settings) -> Guard {
    let figure = |e: &Estimate| Figure {
        point: e.mean,
        lower: e.lower,
        upper: e.upper,
        pairs: e.n_pairs,
    };
    let (strict, bounded, difference) = match outcome {
        Ok(c) => (
            Some(figure(&c.strict)),
            Some(figure(&c.bounded)),
            Some(figure(&c.difference)),
        ),
        Err(_) => (None, None, None),
    };
    let chosen = codebook::choose(difference.as_ref());
    let reason = match (outcome, chosen) {
        (Err(error), _) => format!("strict: {error}"),
        (Ok(_), Chosen::Bounded) => {
            "bounded: it leaks less than strict on validation (upper bound below 0)".to_string()
        }
        (Ok(_), Chosen::Strict) => {
            "strict: the bounded codebook is not shown to leak less on validation (upper bound at or above 0)".to_string()
        }
    };
    Guard {
        budget: learned.budget,
        max_codewords: learned.max_codewords,
        pair_weight: learned.pair_weight,
        chosen,
        reason,
        strict_recovery: strict,
        bounded_recovery: bounded,
        difference,
        bootstrap: settings.n_bootstrap,
        seed: settings.seed,
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
