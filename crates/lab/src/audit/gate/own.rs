//! A contract's own release measured for its gate, and, when the release keeps every frozen
//! plan (each WCPQ question strict, with the `native` fallback, under a view that releases the
//! probabilities the plans are computed from), its workflow floor beside it
//! (`audit::floor`): the recipient runs its workflows on what it receives, so the floor's
//! attacker reads what the release gives it, and the gate holds the contract to the larger of
//! the two.

use std::sync::Arc;

use releasegate_core::contract::Contract;
use releasegate_core::mechanism::{Fallback, Mechanism};
use releasegate_core::wcpq::Admissibility;
use releasegate_sim::worlds::World;

use super::super::bootstrap::Estimate;
use super::super::intake::{self, CandidateRelease, Reading};
use super::super::{Config, floor, run};
use super::LeftOut;

/// What the gate measured of one contract.
pub(super) struct Own {
    /// The recovery gain of its own release over no output, pooled.
    pub(super) gain: Option<Estimate>,
    /// The gain of its workflow floor, when its release keeps every plan.
    pub(super) floor: Option<Estimate>,
    /// What the measurement left out.
    pub(super) left_out: LeftOut,
}

/// Whether `contract`'s release keeps every frozen plan of its WCPQ questions on every
/// answer (strict admissibility, the native fallback, a view with the probabilities), and
/// has at least one such question.
pub(super) fn keeps_plans(contract: &Contract) -> bool {
    let mut wcpq = contract
        .questions()
        .values()
        .filter_map(|rule| match &rule.mechanism() {
            Mechanism::Wcpq(m) if rule.workflows().is_some() => Some((m, rule.view())),
            _ => None,
        });
    let mut any = false;
    wcpq.all(|(m, view)| {
        any = true;
        view.has_probabilities()
            && m.mapper.admissibility() == Admissibility::Strict
            && m.fallback == Fallback::Native
    }) && any
}

/// Measures `contract`'s own release (and its floor, [`keeps_plans`]) on `worlds`.
pub(super) fn measure(
    contract: &Arc<Contract>,
    worlds: &[World],
    reading: Reading,
    settings: &Config,
) -> Result<Own, String> {
    let failed = |error: &dyn std::fmt::Display| format!("gate {}: {error}", contract.name());
    let contracts = std::slice::from_ref(contract);
    let candidate = CandidateRelease::uniform(format!("{} (gate)", contract.name()), None, None);
    let (mut input, intake) =
        intake::build(contracts, worlds, &[candidate], reading, settings.seed)
            .map_err(|e| failed(&e))?;
    let mut with_floor = false;
    if keeps_plans(contract)
        && let Some(template) = input.releases.first()
        && let Some(built) = floor::build(contracts, worlds, template).map_err(|e| failed(&e))?
    {
        input.releases.push(built.release);
        with_floor = true;
    }
    let report = run(&input, settings).map_err(|e| failed(&e))?;
    let gain_of = |name: &str| {
        report
            .releases
            .iter()
            .find(|r| r.release == name)
            .map(|r| r.pooled.gain)
    };
    Ok(Own {
        gain: report.releases.first().map(|r| r.pooled.gain),
        floor: if with_floor {
            gain_of(floor::RELEASE)
        } else {
            None
        },
        left_out: LeftOut::of(&intake),
    })
}
