//! The floor beside the contracts' WCPQ release and `full_native`, and how it reads.

use super::{Figures, Question, RELEASE, STRICT, Summary, TOLERANCE};
use crate::audit::bootstrap::Estimate;
use crate::audit::report::{Recovery, ReleaseReport, Report};

/// The audited `full_native` release.
const FULL_NATIVE: &str = "full_native";

/// The floor's figures from `report` (which must hold the release [`RELEASE`]), each of
/// `questions` keyed `contract/question` with its domains' figures.
pub fn summarize(report: &Report, questions: &[Question]) -> Option<Summary> {
    let find = |name: &str| report.releases.iter().find(|r| r.release == name);
    let floor = find(RELEASE)?;
    let strict = find(STRICT);
    let native = find(FULL_NATIVE);
    let strict_minus_floor = strict.and_then(|s| {
        s.paired
            .iter()
            .find(|p| p.reference == RELEASE)
            .map(|p| p.difference)
    });
    let questions = questions
        .iter()
        .map(|q| {
            let figures = q
                .domains
                .keys()
                .filter_map(|domain| {
                    Some((domain.clone(), figures(domain, floor, strict, native)?))
                })
                .collect();
            let key = format!("{}/{}", q.contract, q.question);
            (
                key,
                Question {
                    figures,
                    ..q.clone()
                },
            )
        })
        .collect();
    Some(Summary {
        release: RELEASE.to_string(),
        strict_release: STRICT.to_string(),
        tolerance: TOLERANCE,
        floor: floor.pooled,
        strict: strict.map(|s| s.pooled),
        full_native: native.map(|n| n.pooled),
        strict_minus_floor,
        at_floor: strict_minus_floor.map(|d| at_floor(&d)),
        questions,
    })
}

/// The reading rule: the paired difference (release minus floor) is below [`TOLERANCE`], or
/// its 95% interval reaches 0 (the data cannot tell the release above the floor), and the
/// release is not measured below the floor with confidence ([`below_floor`]).
pub fn at_floor(difference: &Estimate) -> bool {
    !below_floor(difference) && (difference.mean < TOLERANCE || difference.lower <= 0.0)
}

/// Whether the release measures below its floor with confidence (the interval's upper bound
/// under 0): no plan-keeping release can leak less than the floor, so its own attackers miss
/// what the plans reveal, and the floor is the better estimate of what it releases.
pub fn below_floor(difference: &Estimate) -> bool {
    difference.upper < 0.0
}

/// One domain's figures, when the floor was fitted on it.
fn figures(
    domain: &str,
    floor: &ReleaseReport,
    strict: Option<&ReleaseReport>,
    native: Option<&ReleaseReport>,
) -> Option<Figures> {
    let of = |release: &ReleaseReport| {
        release
            .domains
            .iter()
            .find(|d| d.domain == domain)
            .map(|d| d.recovery)
    };
    Some(Figures {
        floor: of(floor)?,
        strict: strict.and_then(of),
        full_native: native.and_then(of),
    })
}

/// `0.700 [0.650, 0.750]`.
fn interval(e: &Estimate) -> String {
    format!("{:.3} [{:.3}, {:.3}]", e.mean, e.lower, e.upper)
}

/// `+0.010 [-0.020, +0.040]`.
fn signed(e: &Estimate) -> String {
    format!("{:+.3} [{:+.3}, {:+.3}]", e.mean, e.lower, e.upper)
}

/// `recovery 0.700 [0.650, 0.750] (gain +0.200 [...])`.
fn recovery(r: &Recovery) -> String {
    format!("{} (gain {})", interval(&r.accuracy), signed(&r.gain))
}

impl Summary {
    /// The text report's lines: the pooled figures, the reading, then one line per question
    /// and domain.
    pub fn to_text(&self) -> String {
        let mut lines = vec![format!(
            "{}: recovery from the frozen workflows' plans alone {}",
            self.release,
            recovery(&self.floor)
        )];
        let mut beside = Vec::new();
        if let Some(strict) = &self.strict {
            beside.push(format!("{} {}", self.strict_release, recovery(strict)));
        }
        if let Some(native) = &self.full_native {
            beside.push(format!("{FULL_NATIVE} {}", recovery(native)));
        }
        if let Some(d) = &self.strict_minus_floor {
            beside.push(format!(
                "{} minus floor {} (paired)",
                self.strict_release,
                signed(d)
            ));
        }
        if !beside.is_empty() {
            lines.push(format!("{}: beside {}", self.release, beside.join("; ")));
        }
        if let Some(line) = self.reading() {
            lines.push(line);
        }
        for (key, q) in &self.questions {
            lines.push(question_line(&self.release, key, q));
        }
        lines.join("\n")
    }

    /// One sentence on what is left to change.
    fn reading(&self) -> Option<String> {
        let d = self.strict_minus_floor?;
        Some(if below_floor(&d) {
            format!(
                "{}: {} measures {:.1} points below the floor with confidence: a release that keeps \
                 the plans cannot leak less than they do, so its own attackers miss what the plans \
                 reveal; read the floor as what it releases (the gate holds it to the floor)",
                self.release,
                self.strict_release,
                -100.0 * d.mean
            )
        } else if at_floor(&d) {
            format!(
                "{}: {} is at the floor (paired difference under {:.0} points or its interval reaching 0): \
                 what it reveals is what the frozen workflows' own decisions reveal, so no codebook, \
                 budget or size that keeps those decisions can lower it; only changing the workflows \
                 themselves (fewer policies or profiles, other costs, a posterior that reads less) can",
                self.release,
                self.strict_release,
                100.0 * TOLERANCE
            )
        } else {
            format!(
                "{}: {} is {:.1} points above the floor: a release that keeps the same plans \
                 (a smaller or budgeted codebook) can still lower it",
                self.release,
                self.strict_release,
                100.0 * d.mean
            )
        })
    }
}

/// A question's counts and its domains' figures.
fn question_line(release: &str, key: &str, q: &Question) -> String {
    let domains: Vec<String> = q
        .figures
        .iter()
        .map(|(domain, f)| {
            let mut parts = vec![format!("floor {}", interval(&f.floor.accuracy))];
            if let Some(s) = &f.strict {
                parts.push(format!("{STRICT} {}", interval(&s.accuracy)));
            }
            if let Some(n) = &f.full_native {
                parts.push(format!("{FULL_NATIVE} {}", interval(&n.accuracy)));
            }
            format!("domain {domain}: {}", parts.join(", "))
        })
        .collect();
    let mut line = format!(
        "{release} {key}: {} policies ({} deciding differently), plans of {} worlds ({} unreadable)",
        q.policies, q.distinct_policies, q.worlds, q.unread
    );
    if !domains.is_empty() {
        line.push_str("; ");
        line.push_str(&domains.join("; "));
    }
    line
}
