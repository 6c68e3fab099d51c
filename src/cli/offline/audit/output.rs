//! What `releasegate audit` prints (the report, the sample sizes, the frontier, the gate's
//! verdicts) and what `--json` writes.

use std::sync::Arc;

use releasegate_core::codebook;
use releasegate_core::contract::Contract;
use releasegate_lab::audit;
use releasegate_lab::audit::checks::DomainCheck;
use releasegate_lab::audit::frontier::Point;
use releasegate_lab::audit::gate::{GateResult, Need, Verdict};

use super::{AuditArgs, Measured, Scope};
use crate::cli::error::Error;

/// What `--json` writes: everything the text report prints, and the full numbers.
pub(super) fn report_json(
    args: &AuditArgs,
    scope: &Scope,
    measured: &Measured,
    sizes: &SampleSizes,
    gate_results: Option<&[GateResult]>,
    checks: &[DomainCheck],
    unchecked: bool,
) -> serde_json::Value {
    serde_json::json!({
        "report": measured.report,
        "intake": measured.intake,
        "contracts": scope.names,
        "recipient": args.recipient,
        "attacker_reads_fills": args.read_fills,
        "shapes": scope.contracts
            .iter()
            .map(|c| (c.name().to_string(), serde_json::Value::from(c.shape().as_str())))
            .collect::<serde_json::Map<_, _>>(),
        "worlds": args.worlds.display().to_string(),
        "gate": gate_results,
        "frontier": measured.frontier,
        "floor": measured.floor,
        "sample_size": sizes.json(),
        "left_out_test_worlds": measured.intake.left_out_test_worlds(),
        "not_certifiable": scope.contracts
            .iter()
            .map(|c| (c.name().to_string(), serde_json::json!(c.not_certifiable_reasons())))
            .filter(|(_, reasons)| reasons.as_array().is_some_and(|r| !r.is_empty()))
            .collect::<serde_json::Map<_, _>>(),
        "checks": checks,
        "unchecked": unchecked,
    })
}

/// The report, the sample sizes, the worlds used and the contracts that are not certifiable.
pub(super) fn print_report(
    measured: &Measured,
    contracts: &[Arc<Contract>],
    sizes: &SampleSizes,
    unchecked: bool,
) -> Result<(), Error> {
    if unchecked {
        crate::outln!(
            "UNCHECKED INPUT: the pairs fail the checks above; every gain below is reported as asked (--allow-unpaired) and certifies nothing"
        )?;
    }
    crate::outln!("{}", measured.report.to_text())?;
    if let Some(floor) = &measured.floor {
        crate::outln!("{}", floor.to_text())?;
    }
    for line in sizes.lines() {
        crate::outln!("{line}")?;
    }
    crate::outln!(
        "worlds used: {}; left out: {:?} ({} of {} labelled test worlds)",
        measured.intake.worlds_used,
        measured.intake.skipped,
        measured.intake.left_out_test_worlds(),
        measured.intake.labelled_test_worlds
    )?;
    for contract in contracts {
        let reasons = contract.not_certifiable_reasons();
        if !reasons.is_empty() {
            crate::outln!(
                "not certifiable: contract {}: {}; these figures do not cover those questions' releases \
                 as a caller can make them",
                contract.name(),
                reasons.join(", ")
            )?;
        }
    }
    Ok(())
}

/// The audit's sample size ([`audit::gate::sample_size`]) and, for each release, the width of
/// its gain interval on the test pairs it was measured on and what the budget needs.
pub(super) struct SampleSizes {
    size: audit::gate::SampleSize,
    releases: Vec<(String, f64, Need)>,
}

impl SampleSizes {
    pub(super) fn new(measured: &Measured, scope: &Scope) -> SampleSizes {
        let recipient = scope.recipient.and_then(|r| {
            r.policy
                .as_ref()
                .map(|p| (r.name.as_str(), p.max_recovery_gain))
        });
        let size = audit::gate::sample_size(&measured.input, &scope.contracts, recipient);
        let releases = measured
            .report
            .releases
            .iter()
            .map(|release| {
                let width = release.pooled.gain.upper - release.pooled.gain.lower;
                (release.release.clone(), width, size.need(width))
            })
            .collect();
        SampleSizes { size, releases }
    }

    /// One line per release.
    fn lines(&self) -> Vec<String> {
        self.releases
            .iter()
            .map(|(release, width, need)| {
                format!(
                    "sample size {release}: gain interval {:.1} points wide on {} test pairs; {} needs {}",
                    100.0 * width,
                    self.size.pairs,
                    self.size.describe(),
                    match need {
                        Need::Enough => "no more pairs".to_string(),
                        Need::Pairs(n) => format!("about {n} test pairs"),
                        Need::Unresolvable => "an interval that this data cannot give".to_string(),
                    }
                )
            })
            .collect()
    }

    /// The same as JSON: the pairs, the budget and its source, and per release its interval
    /// width and the test pairs it needs (`null` when no amount of data resolves the budget).
    fn json(&self) -> serde_json::Value {
        let releases: Vec<serde_json::Value> = self
            .releases
            .iter()
            .map(|(release, width, need)| {
                let needed = match need {
                    Need::Enough => Some(self.size.pairs),
                    Need::Pairs(n) => Some(*n),
                    Need::Unresolvable => None,
                };
                serde_json::json!({
                    "release": release,
                    "interval_width": width,
                    "pairs_needed": needed,
                    "enough": *need == Need::Enough,
                })
            })
            .collect();
        serde_json::json!({
            "test_pairs": self.size.pairs,
            "budget": self.size.budget,
            "budget_source": self.size.source.name(),
            "releases": releases,
        })
    }
}

/// Two lines per frontier setting: its codebooks and figures, and the answers it moved; then
/// the workflow floor no setting can go below.
pub(super) fn print_frontier(
    frontier: &[Point],
    floor: Option<&audit::floor::Summary>,
) -> Result<(), Error> {
    let interval = |estimate: Option<audit::bootstrap::Estimate>| {
        estimate.map_or_else(
            || "-".to_string(),
            |e| format!("{:.3} [{:.3}, {:.3}]", e.mean, e.lower, e.upper),
        )
    };
    for point in frontier {
        crate::outln!(
            "frontier {}: codewords {}; covered {}/{} test answers, recovery {}, gain {}, worst per-output increase {:.3} x kappa{}",
            point.release,
            point
                .codebooks
                .iter()
                .map(|c| format!(
                    "{} for {} ({})",
                    c.codewords,
                    c.serves.join("+"),
                    c.assignment
                        .map_or_else(|| "-".to_string(), assignment_name)
                ))
                .collect::<Vec<_>>()
                .join(", "),
            point.covered_test_answers,
            point.test_answers,
            interval(point.recovery),
            interval(point.recovery_gain),
            point.worst_relative_over_workflows(),
            point
                .paired
                .iter()
                .map(|(reference, e)| format!(
                    "; vs {reference} {:+.3} [{:+.3}, {:+.3}]",
                    e.mean, e.lower, e.upper
                ))
                .collect::<String>()
        )?;
        crate::outln!(
            "frontier {}: answers moved per family (of {}): {}",
            point.release,
            point.test_answers,
            point
                .moved
                .iter()
                .map(|(family, n)| format!("{family} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    if let (false, Some(floor)) = (frontier.is_empty(), floor) {
        crate::outln!(
            "frontier {}: recovery {}, gain {}: no setting that keeps the workflows' plans goes below it",
            floor.release,
            interval(Some(floor.floor.accuracy)),
            interval(Some(floor.floor.gain))
        )?;
    }
    Ok(())
}

/// How the text output names a learned codebook's assignment.
fn assignment_name(assignment: codebook::Assignment) -> String {
    match assignment {
        codebook::Assignment::Coverage => "coverage order".to_string(),
        codebook::Assignment::Priority { split_penalty } => {
            format!("priority, split penalty {split_penalty}")
        }
    }
}

/// One line per gate result.
pub(super) fn print_gate<'r>(results: impl Iterator<Item = &'r GateResult>) -> Result<(), Error> {
    for result in results {
        let gain = result.recovery_gain.map_or_else(String::new, |g| {
            format!(
                "; recovery gain over no output {:.3} [{:.3}, {:.3}], budget {}",
                g.mean,
                g.lower,
                g.upper,
                result.max_recovery_gain.unwrap_or(0.0)
            )
        });
        let floor = result.workflow_floor.map_or_else(String::new, |g| {
            format!(
                "; its workflow floor {:.3} [{:.3}, {:.3}] (the plans it keeps, read by the recipient's workflows)",
                g.mean, g.lower, g.upper
            )
        });
        let dropped = if result.dropped_keep.is_empty() {
            String::new()
        } else {
            format!("; drops KEEP {}", result.dropped_keep.join(", "))
        };
        let uncertified = if result.not_certifiable.is_empty() {
            String::new()
        } else {
            format!(
                "; not certifiable: {} (caller_text, or box questions the audit does not read; \
                 `audit` without --gate names the reason)",
                result.not_certifiable.join(", ")
            )
        };
        let inconclusive = match (result.verdict, result.pairs, result.pairs_needed) {
            (Verdict::Inconclusive, Some(pairs), Some(needed)) => format!(
                "; the interval is wider than the budget: measured on {pairs} test pairs, \
                 about {needed} would resolve it"
            ),
            (Verdict::Inconclusive, _, _) => {
                "; a budget of 0 cannot be resolved by any amount of data: set a positive one"
                    .to_string()
            }
            _ => String::new(),
        };
        crate::outln!(
            "gate {}: {}{gain}{floor}{dropped}{uncertified}{inconclusive}{}",
            result.contract,
            match result.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "FAIL",
                Verdict::Inconclusive => "INCONCLUSIVE",
            },
            left_out(result)
        )?;
    }
    Ok(())
}

/// What a gate result's measurement left out, by reason, and what that does to the verdict.
fn left_out(result: &GateResult) -> String {
    if result.left_out.is_empty() {
        return String::new();
    }
    let held = if result.too_many_left_out {
        ": more than 5%, so the verdict is at best inconclusive (it would certify the worlds \
         measured, not the contract)"
    } else {
        ""
    };
    format!(
        "; left out {:?}, {} of {} labelled test worlds{held}",
        result.left_out, result.left_out_test_worlds, result.labelled_test_worlds
    )
}
