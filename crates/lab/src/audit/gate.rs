//! The leakage gate (`audit --gate`): every contract that declares a `policy` against its
//! own release, through the audit's intake (`intake::build`, the proxy's release path).
//!
//! A contract **fails** when its release drops a field the policy must keep, when one of
//! its questions lets the caller write its text (`caller_text`: not certifiable), or when
//! the recovery gain over no output is above the budget with confidence (the interval's
//! lower bound is above it). It **passes** when the interval's upper bound is within the
//! budget and the interval is no wider than the budget. Otherwise the data cannot tell:
//! the verdict is **inconclusive**, with the number of pairs the data would need.

use std::sync::Arc;

use serde::Serialize;

use super::bootstrap::Estimate;
use super::intake::{self, Candidate, Reading};
use super::{Config, run};
use releasegate_core::contract::Contract;
use releasegate_sim::worlds::World;

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
    /// The interval's width (upper − lower).
    pub interval_width: Option<f64>,
    /// Test pairs the gain was measured on.
    pub pairs: Option<usize>,
    /// Test pairs the data would need for an interval no wider than the budget (intervals
    /// shrink as one over the square root of the pairs); `None` when the budget is 0, which
    /// no amount of data resolves.
    pub pairs_needed: Option<usize>,
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

/// Pairs needed for an interval of width at most `budget`, from one of `width` on `pairs`.
pub fn pairs_needed(width: f64, pairs: usize, budget: f64) -> Option<usize> {
    if budget <= 0.0 || !width.is_finite() {
        return None;
    }
    let ratio = (width / budget).max(1.0);
    Some((pairs as f64 * ratio * ratio).ceil() as usize)
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
        let Some(policy) = &contract.policy else {
            continue;
        };
        let dropped_keep = policy.dropped(contract);
        let not_certifiable: Vec<String> = contract
            .not_certifiable()
            .into_iter()
            .map(String::from)
            .collect();
        let mut recovery_gain = None;
        if !policy.hide.is_empty() {
            let candidate = Candidate::uniform(format!("{} (gate)", contract.name), None, None);
            let (input, _) = intake::build(
                std::slice::from_ref(contract),
                worlds,
                &[candidate],
                reading,
                settings.seed,
            )
            .map_err(|error| format!("gate {}: {error}", contract.name))?;
            let report = run(&input, settings)
                .map_err(|error| format!("gate {}: {error}", contract.name))?;
            recovery_gain = report.releases.first().map(|r| r.pooled.gain);
        }
        let budget = policy.max_recovery_gain;
        let measured = recovery_gain.map_or(Verdict::Pass, |gain| verdict(&gain, budget));
        let verdict = if !dropped_keep.is_empty() || !not_certifiable.is_empty() {
            Verdict::Fail
        } else {
            measured
        };
        let width = recovery_gain.map(|g| g.upper - g.lower);
        results.push(GateResult {
            contract: contract.name.clone(),
            verdict,
            passed: verdict == Verdict::Pass,
            dropped_keep,
            not_certifiable,
            max_recovery_gain: (!policy.hide.is_empty()).then_some(budget),
            recovery_gain,
            interval_width: width,
            pairs: recovery_gain.map(|g| g.n_pairs),
            pairs_needed: recovery_gain
                .and_then(|g| pairs_needed(g.upper - g.lower, g.n_pairs, budget)),
        });
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn estimate(lower: f64, upper: f64) -> Estimate {
        Estimate {
            n: 200,
            n_pairs: 100,
            mean: (lower + upper) / 2.0,
            lower,
            upper,
        }
    }

    #[test]
    fn verdicts_follow_the_interval_and_the_budget() {
        // Precise and within.
        assert_eq!(verdict(&estimate(-0.01, 0.03), 0.05), Verdict::Pass);
        // Above with confidence, however wide.
        assert_eq!(verdict(&estimate(0.06, 0.3), 0.05), Verdict::Fail);
        assert_eq!(verdict(&estimate(0.01, 0.02), 0.0), Verdict::Fail);
        // Precise enough, and over.
        assert_eq!(verdict(&estimate(0.02, 0.06), 0.05), Verdict::Fail);
        // Wider than the budget: the data cannot tell, even with the upper bound within it.
        assert_eq!(verdict(&estimate(-0.04, 0.04), 0.05), Verdict::Inconclusive);
        assert_eq!(verdict(&estimate(-0.03, 0.09), 0.05), Verdict::Inconclusive);
        assert_eq!(verdict(&estimate(-0.01, 0.01), 0.0), Verdict::Inconclusive);
    }

    #[test]
    fn the_pairs_needed_scale_with_the_square_of_the_width() {
        // Twice too wide on 240 pairs: four times the pairs.
        assert_eq!(pairs_needed(0.10, 240, 0.05), Some(960));
        assert_eq!(pairs_needed(0.04, 240, 0.05), Some(240));
        assert_eq!(pairs_needed(0.04, 240, 0.0), None);
    }
}
