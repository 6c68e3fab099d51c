//! What the audit assumes of its inputs, checked per domain before any gain is reported.
//!
//! The recovery of a secret is measured on counterfactual pairs: two worlds with the same
//! public context and coarse class, the private evidence edited so that the two registered
//! hypotheses differ. Then an attacker who sees nothing is right half the time, and every
//! point above 50% is what the release gives away. When the pairs are not like that (a group of
//! one or three, both worlds with the same secret, coarse classes that differ, different
//! hypotheses, the two worlds in different splits), the 50% reference no longer holds and gains are inflated or deflated silently.
//! These checks say what is wrong, per domain (`docs/pairs.md`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::Example;
use super::report::Report;

/// The checks of one domain.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DomainCheck {
    /// The domain.
    pub domain: String,
    /// Worlds of the domain.
    pub worlds: usize,
    /// Groups of worlds sharing a pair id.
    pub groups: usize,
    /// Groups that are not exactly two worlds.
    pub not_two_worlds: usize,
    /// The first of them (in pair id order), for the caller to say where its worlds are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_not_two_worlds: Option<String>,
    /// Pairs whose two worlds hold the same secret.
    pub same_secret: usize,
    /// Pairs whose coarse (authorized) classes differ.
    pub coarse_differs: usize,
    /// Pairs whose two worlds register different hypotheses.
    pub hypotheses_differ: usize,
    /// Pairs whose two worlds are in different splits (one trained on, the other tested).
    pub split_differs: usize,
    /// The no-output baseline's test recovery and its interval, when it was audited.
    pub no_output: Option<(f64, f64, f64)>,
    /// What is wrong, in words (empty when every check passes).
    pub problems: Vec<String>,
}

impl DomainCheck {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks the pairs of `examples` (one release's worlds: every release holds the same), per
/// domain, sorted by domain.
pub fn pairs(examples: &[Example]) -> Vec<DomainCheck> {
    let mut by_domain: BTreeMap<&str, BTreeMap<&str, Vec<&Example>>> = BTreeMap::new();
    for example in examples {
        by_domain
            .entry(example.domain.as_str())
            .or_default()
            .entry(example.pair_id.as_str())
            .or_default()
            .push(example);
    }
    by_domain
        .into_iter()
        .map(|(domain, groups)| {
            let mut check = DomainCheck {
                domain: domain.to_string(),
                worlds: groups.values().map(Vec::len).sum(),
                groups: groups.len(),
                ..DomainCheck::default()
            };
            // The first failing pair id of each check (in pair id order), with what is wrong.
            let mut first: [Option<String>; 5] = Default::default();
            let mut note = |kind: usize, example: String| {
                first[kind].get_or_insert(example);
            };
            for (pair_id, members) in &groups {
                let [a, b] = members.as_slice() else {
                    check.not_two_worlds += 1;
                    check
                        .first_not_two_worlds
                        .get_or_insert_with(|| pair_id.to_string());
                    let n = members.len();
                    let worlds = if n == 1 { "world" } else { "worlds" };
                    note(0, format!("`{pair_id}` groups {n} {worlds}"));
                    continue;
                };
                if a.s_index.is_some() && a.s_index == b.s_index {
                    check.same_secret += 1;
                    note(1, format!("`{pair_id}`"));
                }
                if a.t_index != b.t_index {
                    check.coarse_differs += 1;
                    note(2, format!("`{pair_id}`: {} and {}", a.t, b.t));
                }
                let mut ha = a.hypotheses.clone();
                let mut hb = b.hypotheses.clone();
                ha.sort();
                hb.sort();
                if ha != hb {
                    check.hypotheses_differ += 1;
                    note(3, format!("`{pair_id}`"));
                }
                if a.split != b.split {
                    check.split_differs += 1;
                    note(4, format!("`{pair_id}`: {} and {}", a.split, b.split));
                }
            }
            let counts = [
                (
                    check.not_two_worlds,
                    "pair ids that do not group exactly two worlds",
                ),
                (
                    check.same_secret,
                    "pairs whose two worlds hold the same secret",
                ),
                (check.coarse_differs, "pairs whose coarse classes differ"),
                (
                    check.hypotheses_differ,
                    "pairs whose two worlds register different hypotheses",
                ),
                (
                    check.split_differs,
                    "pairs whose two worlds are in different splits",
                ),
            ];
            for ((count, what), example) in counts.into_iter().zip(first) {
                if let (true, Some(example)) = (count > 0, example) {
                    check.problems.push(format!(
                        "{count} of {} {what} (the first, {example})",
                        check.groups
                    ));
                }
            }
            check
        })
        .collect()
}

/// Adds the no-output baseline check from the report: an attacker who sees no answer (the
/// public context only) must sit at 50% within its interval; when the interval excludes 50%,
/// the public context or the pairing itself tells the secret, and a gain over it does not
/// measure the release.
pub fn baseline(checks: &mut [DomainCheck], report: &Report) {
    for check in checks {
        let Some(domain) = report
            .releases
            .first()
            .and_then(|r| r.domains.iter().find(|d| d.domain == check.domain))
        else {
            continue;
        };
        let e = domain.recovery.no_output_accuracy;
        check.no_output = Some((e.mean, e.lower, e.upper));
        if !(e.lower <= 0.5 && 0.5 <= e.upper) {
            check.problems.push(format!(
                "the no-output baseline recovers {:.1}% [{:.1}, {:.1}], not 50%: the public \
                 context or the pairing tells the secret",
                100.0 * e.mean,
                100.0 * e.lower,
                100.0 * e.upper
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::ReleasedFeatures;
    use releasegate_sim::worlds::Split;

    fn example(domain: &str, pair: &str, t: usize, s: usize, h: [&str; 2]) -> Example {
        Example {
            pair_id: pair.to_string(),
            split: Split::Test,
            domain: domain.to_string(),
            t: format!("T{t}"),
            t_index: t,
            hypotheses: [h[0].to_string(), h[1].to_string()],
            s_index: Some(s),
            release: ReleasedFeatures::default(),
            public: Vec::new(),
            class_count: 3,
        }
    }

    #[test]
    fn good_pairs_pass_and_each_kind_of_bad_pair_is_named() {
        let good = vec![
            example("a", "p1", 0, 0, ["x", "y"]),
            example("a", "p1", 0, 1, ["y", "x"]),
            example("a", "p2", 2, 1, ["u", "v"]),
            example("a", "p2", 2, 0, ["u", "v"]),
        ];
        let checks = pairs(&good);
        assert_eq!(checks.len(), 1);
        assert!(checks[0].passed(), "{checks:?}");
        let mut bad = good.clone();
        bad.push(example("b", "q1", 0, 0, ["x", "y"])); // alone
        bad.push(example("b", "q2", 0, 0, ["x", "y"])); // same secret
        bad.push(example("b", "q2", 0, 0, ["x", "y"]));
        bad.push(example("b", "q3", 0, 0, ["x", "y"])); // coarse differs
        bad.push(example("b", "q3", 1, 1, ["x", "y"]));
        bad.push(example("b", "q4", 0, 0, ["x", "y"])); // hypotheses differ
        bad.push(example("b", "q4", 0, 1, ["x", "z"]));
        bad.push(example("b", "q5", 0, 0, ["x", "y"])); // splits differ
        bad.push(Example {
            split: Split::Train,
            ..example("b", "q5", 0, 1, ["x", "y"])
        });
        let checks = pairs(&bad);
        assert!(checks[0].passed());
        let b = &checks[1];
        assert_eq!(
            (
                b.groups,
                b.not_two_worlds,
                b.same_secret,
                b.coarse_differs,
                b.hypotheses_differ,
                b.split_differs
            ),
            (5, 1, 1, 1, 1, 1)
        );
        assert_eq!(
            b.problems,
            [
                "1 of 5 pair ids that do not group exactly two worlds (the first, `q1` groups 1 world)",
                "1 of 5 pairs whose two worlds hold the same secret (the first, `q2`)",
                "1 of 5 pairs whose coarse classes differ (the first, `q3`: T0 and T1)",
                "1 of 5 pairs whose two worlds register different hypotheses (the first, `q4`)",
                "1 of 5 pairs whose two worlds are in different splits (the first, `q5`: test and train)",
            ]
        );
    }
}
