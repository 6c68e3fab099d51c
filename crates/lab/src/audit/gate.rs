//! The leakage gate (`audit --gate`): every contract that declares a `policy` against its
//! own release, through the audit's intake (`intake::build`, the proxy's release path).
//!
//! A contract **fails** when its release drops a field the policy must keep, when one of
//! its questions lets the caller write its text (`caller_text`: not certifiable), or when
//! the recovery gain over no output is above the budget with confidence (the interval's
//! lower bound is above it). It **passes** when the interval's upper bound is within the
//! budget and the interval is no wider than the budget. Otherwise the data cannot tell:
//! the verdict is **inconclusive**, with the number of pairs the data would need. A verdict
//! on data that leaves out more than 5% of the labelled test worlds (their class is not one
//! the contract can be asked about, their request does not fit, ...) is at best
//! inconclusive: it would certify the classes measured, not the contract.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::bootstrap::Estimate;

mod own;
use super::intake::{self, CandidateRelease, Reading};
use super::{Config, Input, run};
use releasegate_core::contract::Contract;
use releasegate_sim::worlds::{Split, World};

/// A gate verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Within the budget, measured precisely enough.
    Pass,
    /// The data cannot resolve the budget: the interval is wider than it.
    Inconclusive,
    /// Over the budget, a dropped KEEP field, or a question that is not certifiable.
    Fail,
}

/// One contract's gate result.
#[derive(Debug, Clone, Serialize)]
pub struct GateResult {
    /// The contract.
    pub contract: String,
    /// The verdict.
    pub verdict: Verdict,
    /// Whether it passed (`verdict == pass`).
    pub passed: bool,
    /// KEEP entries the release drops (`QUESTION.FIELD`).
    pub dropped_keep: Vec<String>,
    /// Questions whose text the caller writes (`caller_text`): never certified.
    pub not_certifiable: Vec<String>,
    /// The budget, when the policy hides something.
    pub max_recovery_gain: Option<f64>,
    /// Recovery gain over no output of the contract's own release (pooled), when measured.
    pub recovery_gain: Option<Estimate>,
    /// The recovery gain of the contract's workflow floor (`audit::floor`), when its release
    /// keeps every frozen plan: a recipient running its workflows gets at least this, so the
    /// verdict is the worse of the two.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_floor: Option<Estimate>,
    /// The interval's width (upper − lower).
    pub interval_width: Option<f64>,
    /// Test pairs the gain was measured on.
    pub pairs: Option<usize>,
    /// Test pairs the data would need for an interval no wider than the budget (intervals
    /// shrink as one over the square root of the pairs); `None` when the budget is 0, which
    /// no amount of data resolves.
    pub pairs_needed: Option<usize>,
    /// Worlds the measurement left out, by reason (`intake::Intake::skipped`).
    pub left_out: BTreeMap<String, u64>,
    /// Labelled test worlds, used or not.
    pub labelled_test_worlds: u64,
    /// Labelled test worlds left out: above 5% of them the verdict is at best inconclusive.
    pub left_out_test_worlds: u64,
    /// Whether the verdict was held at inconclusive because too many labelled test worlds
    /// were left out (`intake::usable::MAX_LEFT_OUT_SHARE`).
    pub too_many_left_out: bool,
}

/// What a gate measurement left out, and the verdict it allows at best.
#[derive(Debug, Clone, Default)]
struct LeftOut {
    skipped: BTreeMap<String, u64>,
    labelled_test: u64,
    left_out_test: u64,
    too_many: bool,
}

impl LeftOut {
    fn of(intake: &intake::Intake) -> LeftOut {
        LeftOut {
            skipped: intake.skipped.clone(),
            labelled_test: intake.labelled_test_worlds,
            left_out_test: intake.left_out_test_worlds(),
            too_many: intake.too_many_left_out(),
        }
    }

    /// `verdict`, at best inconclusive when too many labelled test worlds were left out.
    fn cap(&self, verdict: Verdict) -> Verdict {
        if self.too_many {
            verdict.max(Verdict::Inconclusive)
        } else {
            verdict
        }
    }
}

/// The verdict of a measured gain against `budget` (see the module documentation).
pub fn verdict(gain: &Estimate, budget: f64) -> Verdict {
    if gain.lower > budget {
        Verdict::Fail
    } else if gain.upper - gain.lower > budget {
        Verdict::Inconclusive
    } else if gain.upper <= budget {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}

/// The verdict of a whole gate: the worst of `verdicts` (pass when there are none). A gate on
/// `unchecked` pairs (they fail the audit's input checks) certifies nothing: at best it is
/// inconclusive.
pub fn overall(verdicts: impl IntoIterator<Item = Verdict>, unchecked: bool) -> Verdict {
    let worst = verdicts.into_iter().max().unwrap_or(Verdict::Pass);
    if unchecked {
        worst.max(Verdict::Inconclusive)
    } else {
        worst
    }
}

/// Pairs needed for an interval of width at most `budget`, from one of `width` on `pairs`.
pub fn pairs_needed(width: f64, pairs: usize, budget: f64) -> Option<usize> {
    if budget <= 0.0 || !width.is_finite() {
        return None;
    }
    let ratio = (width / budget).max(1.0);
    Some((pairs as f64 * ratio * ratio).ceil() as usize)
}

/// The budget an audit's sample size is judged against when no contract declares one: 5
/// points.
pub const DEFAULT_BUDGET: f64 = 0.05;

/// What an audit's test pairs can resolve: the pairs every gain was measured on and the budget
/// an interval must be no wider than.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleSize {
    /// Distinct test pairs (domain and pair id) of the audit's releases.
    pub pairs: usize,
    /// The smallest positive `max_recovery_gain` of the contracts and the recipient audited,
    /// else [`DEFAULT_BUDGET`].
    pub budget: f64,
    /// Who declares `budget`.
    pub source: BudgetSource,
}

/// Who declares the budget of a [`SampleSize`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetSource {
    /// A contract's `max_recovery_gain`.
    Contracts,
    /// The audited recipient's own `max_recovery_gain` (`audit --recipient`).
    Recipient(String),
    /// Nobody: [`DEFAULT_BUDGET`].
    Default,
}

// === impl BudgetSource ===

impl BudgetSource {
    /// A short name for machines: `contracts`, `recipient NAME` or `default`.
    pub fn name(&self) -> String {
        match self {
            BudgetSource::Contracts => "contracts".to_string(),
            BudgetSource::Recipient(name) => format!("recipient {name}"),
            BudgetSource::Default => "default".to_string(),
        }
    }
}

/// What one release's interval needs to resolve the budget of a [`SampleSize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// The test pairs measured are enough.
    Enough,
    /// About this many test pairs.
    Pairs(usize),
    /// No amount of data: the budget is 0 or the width is not finite.
    Unresolvable,
}

/// The sample size of `input` (the test pairs of its first release; every release has the
/// same worlds) against the smallest positive budget of `contracts` and of `recipient` (its
/// name and `max_recovery_gain`, with `audit --recipient`).
pub fn sample_size(
    input: &Input,
    contracts: &[Arc<Contract>],
    recipient: Option<(&str, f64)>,
) -> SampleSize {
    let pairs: BTreeSet<(&str, &str)> = input
        .releases
        .first()
        .map(|r| {
            r.examples
                .iter()
                .filter(|e| e.split == Split::Test)
                .map(|e| (e.domain.as_str(), e.pair_id.as_str()))
                .collect()
        })
        .unwrap_or_default();
    let declared = contracts
        .iter()
        .filter_map(|c| {
            c.policy()
                .map(|p| (p.max_recovery_gain, BudgetSource::Contracts))
        })
        .chain(recipient.map(|(name, budget)| (budget, BudgetSource::Recipient(name.to_string()))))
        .filter(|(budget, _)| *budget > 0.0)
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let (budget, source) = declared.unwrap_or((DEFAULT_BUDGET, BudgetSource::Default));
    SampleSize {
        pairs: pairs.len(),
        budget,
        source,
    }
}

// === impl SampleSize ===

impl SampleSize {
    /// The budget for people: whose it is and how wide, in points.
    pub fn describe(&self) -> String {
        let points = 100.0 * self.budget;
        match &self.source {
            BudgetSource::Contracts => {
                format!("the contracts' max_recovery_gain of {points:.1} points")
            }
            BudgetSource::Recipient(name) => {
                format!("recipient {name}'s max_recovery_gain of {points:.1} points")
            }
            BudgetSource::Default => format!(
                "the default budget of {points:.1} points (no contract or recipient declares \
                 max_recovery_gain)"
            ),
        }
    }

    /// What a gain interval `width` wide on these pairs needs to resolve the budget.
    pub fn need(&self, width: f64) -> Need {
        match pairs_needed(width, self.pairs, self.budget) {
            Some(n) if n <= self.pairs => Need::Enough,
            Some(n) => Need::Pairs(n),
            None => Need::Unresolvable,
        }
    }
}

/// Runs the gate for every contract of `contracts` that declares a policy.
pub fn gate(
    contracts: &[Arc<Contract>],
    worlds: &[World],
    reading: Reading,
    settings: &Config,
) -> Result<Vec<GateResult>, String> {
    let mut results = Vec::new();
    for contract in contracts {
        let Some(policy) = &contract.policy() else {
            continue;
        };
        let dropped_keep = policy.dropped(contract);
        let not_certifiable: Vec<String> = contract
            .not_certifiable()
            .into_iter()
            .map(String::from)
            .collect();
        let own = if policy.hide.is_empty() {
            None
        } else {
            Some(own::measure(contract, worlds, reading, settings)?)
        };
        let recovery_gain = own.as_ref().and_then(|own| own.gain);
        let workflow_floor = own.as_ref().and_then(|own| own.floor);
        let left_out = own.map(|own| own.left_out).unwrap_or_default();
        let budget = policy.max_recovery_gain;
        // The release's own attackers and, where it keeps every plan, the floor's: the
        // recipient can run both, so the worse verdict binds.
        let measured = left_out.cap(
            [recovery_gain, workflow_floor]
                .iter()
                .flatten()
                .map(|gain| verdict(gain, budget))
                .max()
                .unwrap_or(Verdict::Pass),
        );
        let verdict = if !dropped_keep.is_empty() || !not_certifiable.is_empty() {
            Verdict::Fail
        } else {
            measured
        };
        let width = recovery_gain.map(|g| g.upper - g.lower);
        results.push(GateResult {
            contract: contract.name().to_string(),
            verdict,
            passed: verdict == Verdict::Pass,
            dropped_keep,
            not_certifiable,
            max_recovery_gain: (!policy.hide.is_empty()).then_some(budget),
            recovery_gain,
            workflow_floor,
            interval_width: width,
            pairs: recovery_gain.map(|g| g.n_pairs),
            pairs_needed: recovery_gain
                .and_then(|g| pairs_needed(g.upper - g.lower, g.n_pairs, budget)),
            left_out: left_out.skipped,
            labelled_test_worlds: left_out.labelled_test,
            left_out_test_worlds: left_out.left_out_test,
            too_many_left_out: left_out.too_many,
        });
    }
    Ok(results)
}

/// The recipient's gate reads each world under its first contract with the others joining
/// it, so every contract must list exactly the first one's questions: a world of a question
/// only a later contract lists would be left out of the recipient's budget, and one the
/// first lists and a later one does not cannot be joined. Refused, naming the difference,
/// rather than gated on part of what the recipient can ask.
fn same_questions(label: &str, main: &Contract, joint: &[Arc<Contract>]) -> Result<(), String> {
    let ids = |c: &Contract| c.questions().keys().cloned().collect::<Vec<String>>();
    let first = ids(main);
    for other in joint {
        let theirs = ids(other);
        if theirs != first {
            return Err(format!(
                "gate {label}: contract `{}` lists the questions {theirs:?} and `{}` {first:?}; \
                 a recipient is gated on contracts over the same questions (split it into one \
                 recipient per set of questions)",
                other.name(),
                main.name()
            ));
        }
    }
    Ok(())
}

/// The recipient's gate: everything its contracts release for the same world, read
/// together (`intake::build_joint`: each world under the first of `contracts`, joined by what
/// the others release for it; they must list the same questions), against the recipient's own budget, or else the
/// smallest budget of its contracts' policies (the recipient receives each of their releases,
/// so together they may leak no more than the strictest allows). `None` when no budget
/// applies. It fails when any contract is not certifiable, whatever each contract's gate says.
pub fn recipient(
    name: &str,
    policy: Option<&releasegate_core::contract::LeakagePolicy>,
    contracts: &[Arc<Contract>],
    worlds: &[World],
    reading: Reading,
    settings: &Config,
) -> Result<Option<GateResult>, String> {
    let Some(budget) =
        releasegate_core::certificate::budget_of(policy, contracts.iter().map(|c| &**c))
    else {
        return Ok(None);
    };
    let Some((main, joint)) = contracts.split_first() else {
        return Ok(None);
    };
    let label = format!("recipient {name}");
    same_questions(&label, main, joint)?;
    let candidate = CandidateRelease::uniform(format!("{label} (joint)"), None, None);
    let (input, intake) = intake::build_joint(
        std::slice::from_ref(main),
        joint,
        worlds,
        &[candidate],
        reading,
        settings.seed,
    )
    .map_err(|error| format!("gate {label}: {error}"))?;
    let report = run(&input, settings).map_err(|error| format!("gate {label}: {error}"))?;
    let gain = report.releases.first().map(|r| r.pooled.gain);
    let not_certifiable: Vec<String> = contracts
        .iter()
        .flat_map(|c| {
            c.not_certifiable()
                .into_iter()
                .map(move |q| format!("{}.{q}", c.name()))
        })
        .collect();
    let left_out = LeftOut::of(&intake);
    let measured = left_out.cap(gain.map_or(Verdict::Inconclusive, |gain| verdict(&gain, budget)));
    let verdict = if not_certifiable.is_empty() {
        measured
    } else {
        Verdict::Fail
    };
    Ok(Some(GateResult {
        contract: label,
        verdict,
        passed: verdict == Verdict::Pass,
        dropped_keep: Vec::new(),
        not_certifiable,
        max_recovery_gain: Some(budget),
        recovery_gain: gain,
        workflow_floor: None,
        interval_width: gain.map(|g| g.upper - g.lower),
        pairs: gain.map(|g| g.n_pairs),
        pairs_needed: gain.and_then(|g| pairs_needed(g.upper - g.lower, g.n_pairs, budget)),
        left_out: left_out.skipped,
        labelled_test_worlds: left_out.labelled_test,
        left_out_test_worlds: left_out.left_out_test,
        too_many_left_out: left_out.too_many,
    }))
}

#[cfg(test)]
mod tests;
