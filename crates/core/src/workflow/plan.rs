//! Complete plans of the three workflow families: decision rules, tie rule, realized cost and display.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::cost::{Family, Policy};

/// Two expected costs `a`, `b` are tied when `|a - b| <= TIE_TOLERANCE`.
pub const TIE_TOLERANCE: f64 = 1e-9;

/// A complete plan of one frozen policy. Class and action indices are canonical-order indices.
///
/// The JSON form (`{"plan":"check","target":1,"yes":1,"no":0}`) is unambiguous; the display form uses
/// labels through [`Plan::display`], e.g. `check(B, yes->B, no->A)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "plan", rename_all = "snake_case")]
pub enum Plan {
    /// Selective routing: route to `class`.
    Route {
        /// The routed class.
        class: u16,
    },
    /// Selective routing: trusted review.
    Review,
    /// Clarification: route immediately to `class` without a check.
    Now {
        /// The routed class.
        class: u16,
    },
    /// Clarification: check `target`; on yes route to `yes` (always `target`), on no route to `no`.
    Check {
        /// The checked class.
        target: u16,
        /// Final route after a yes answer.
        yes: u16,
        /// Final route after a no answer.
        no: u16,
    },
    /// Asymmetric routing: action `action`; `action == n` is general inspection.
    Act {
        /// The action row of the matrix.
        action: u16,
    },
}

/// A [`Plan`] rendered with class labels (see [`Plan::display`]).
#[derive(Debug, Clone, Copy)]
pub struct PlanDisplay<'a> {
    plan: &'a Plan,
    classes: &'a [String],
}

// === impl Plan ===

impl Plan {
    /// Renders the plan with class labels: `route(L)`, `review`, `now(L)`, `check(K, yes->K, no->T)`,
    /// `act(L)` or `act(inspection)` for the inspection row.
    pub fn display<'a>(&'a self, classes: &'a [String]) -> PlanDisplay<'a> {
        PlanDisplay {
            plan: self,
            classes,
        }
    }
}

/// One word per plan (its variant and fields packed, distinct plans distinct words), so
/// that hashing a plan is one write, and hashing a signature's plans (the WCPQ mapper's
/// table lookup, a slice) one write for them all.
impl std::hash::Hash for Plan {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.word());
    }

    /// The plans' words folded into one (each step `(h ^ word) · K`, a bijection of `h` for
    /// a given word), written once: a hasher's write per plan was about a tenth of a
    /// mapping's instructions. Equal slices hash equal, as `Hash` requires; the hasher
    /// mixes the folded word, and the table it serves is built from configuration only.
    fn hash_slice<H: std::hash::Hasher>(data: &[Plan], state: &mut H) {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let folded = data
            .iter()
            .fold(0u64, |h, plan| (h ^ plan.word()).wrapping_mul(K));
        state.write_u64(folded);
    }
}

impl Plan {
    /// The plan packed into one word: the variant in the top 16 bits, then its fields.
    fn word(&self) -> u64 {
        let pack = |tag: u64, a: u16, b: u16, c: u16| {
            tag << 48 | u64::from(a) << 32 | u64::from(b) << 16 | u64::from(c)
        };
        match *self {
            Plan::Route { class } => pack(0, class, 0, 0),
            Plan::Review => pack(1, 0, 0, 0),
            Plan::Now { class } => pack(2, class, 0, 0),
            Plan::Check { target, yes, no } => pack(3, target, yes, no),
            Plan::Act { action } => pack(4, action, 0, 0),
        }
    }
}

impl fmt::Display for Plan {
    /// Renders with canonical indices, e.g. `check(1, yes->1, no->0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Plan::Route { class } => write!(f, "route({class})"),
            Plan::Review => write!(f, "review"),
            Plan::Now { class } => write!(f, "now({class})"),
            Plan::Check { target, yes, no } => write!(f, "check({target}, yes->{yes}, no->{no})"),
            Plan::Act { action } => write!(f, "act({action})"),
        }
    }
}

// === impl PlanDisplay ===

impl PlanDisplay<'_> {
    fn label(&self, index: u16) -> String {
        self.classes
            .get(usize::from(index))
            .cloned()
            .unwrap_or_else(|| "inspection".to_string())
    }
}

impl fmt::Display for PlanDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self.plan {
            Plan::Route { class } => write!(f, "route({})", self.label(class)),
            Plan::Review => write!(f, "review"),
            Plan::Now { class } => write!(f, "now({})", self.label(class)),
            Plan::Check { target, yes, no } => write!(
                f,
                "check({}, yes->{}, no->{})",
                self.label(target),
                self.label(yes),
                self.label(no)
            ),
            Plan::Act { action } => write!(f, "act({})", self.label(action)),
        }
    }
}

// === impl Policy ===

impl Policy {
    /// The complete plan of this policy for posterior `q` (canonical order, length n).
    ///
    /// Never panics: NaN costs make no candidate strictly minimal and the first candidate wins.
    pub fn decide(&self, q: &[f64]) -> Plan {
        let c = &self.costs;
        let n = q.len();
        if n == 0 {
            // Unreachable through `Spec` (2..=255 classes); keeps the public function total.
            return match self.family {
                Family::Selective => Plan::Review,
                Family::Clarification => Plan::Now { class: 0 },
                Family::Asymmetric => Plan::Act { action: 0 },
            };
        }
        match self.family {
            Family::Selective => {
                let pick = pick_min(n + 1, |i| {
                    if i < n {
                        c.c_wrong * (1.0 - q[i])
                    } else {
                        c.c_review
                    }
                });
                if pick < n {
                    Plan::Route { class: idx(pick) }
                } else {
                    Plan::Review
                }
            }
            Family::Clarification => {
                let best = pick_min(n, |t| c.c_wrong * (1.0 - q[t]));
                let runner = RunnerUp::new(q);
                let pick = pick_min(n + 1, |i| {
                    if i == 0 {
                        c.c_wrong * (1.0 - q[best])
                    } else {
                        let k = i - 1;
                        let t_no = runner.best_except(q, k);
                        c.c_check + c.c_wrong * (1.0 - q[k] - q[t_no])
                    }
                });
                if pick == 0 {
                    Plan::Now { class: idx(best) }
                } else {
                    let k = pick - 1;
                    Plan::Check {
                        target: idx(k),
                        yes: idx(k),
                        no: idx(runner.best_except(q, k)),
                    }
                }
            }
            Family::Asymmetric => {
                // sum_t q_t * M[a][t], accumulated from 0.0 in canonical t order; computed once
                // per action because rows are O(n) each.
                let costs: Vec<f64> = c
                    .matrix
                    .iter()
                    .take(n + 1)
                    .map(|row| row.iter().zip(q).fold(0.0, |sum, (m, qt)| sum + qt * m))
                    .collect();
                let pick = pick_min(costs.len(), |a| costs[a]);
                Plan::Act { action: idx(pick) }
            }
        }
    }

    /// Whether this policy decides exactly as `other` on every posterior: the same family
    /// and, bit for bit, the same costs that family reads (`c_wrong` and `c_review` for
    /// selective routing, `c_wrong` and `c_check` for clarification, the matrix for
    /// asymmetric-cost routing). Profiles that leave those costs unchanged make such twins
    /// (the standard set of 18 has 6), whose plans need deciding only once.
    pub fn decides_as(&self, other: &Policy) -> bool {
        let (a, b) = (&self.costs, &other.costs);
        let same = |x: f64, y: f64| x.to_bits() == y.to_bits();
        self.family == other.family
            && match self.family {
                Family::Selective => same(a.c_wrong, b.c_wrong) && same(a.c_review, b.c_review),
                Family::Clarification => same(a.c_wrong, b.c_wrong) && same(a.c_check, b.c_check),
                Family::Asymmetric => {
                    a.matrix.len() == b.matrix.len()
                        && a.matrix.iter().zip(&b.matrix).all(|(x, y)| {
                            x.len() == y.len() && x.iter().zip(y).all(|(u, v)| same(*u, *v))
                        })
                }
            }
    }

    /// κ_j, the policy's public wrong-route cost: `c_wrong` for selective routing and
    /// clarification, the largest matrix entry for asymmetric-cost routing. A bounded WCPQ
    /// mapper lets a release raise this policy's realized cost by at most α·κ_j.
    pub fn kappa(&self) -> f64 {
        let c = &self.costs;
        match self.family {
            Family::Selective | Family::Clarification => c.c_wrong,
            Family::Asymmetric => c
                .matrix
                .iter()
                .flatten()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max),
        }
    }

    /// The realized cost of `plan` when the true class is `true_class`.
    ///
    /// A plan of another family, or an index outside the matrix, yields NaN (never a panic).
    pub fn realized_cost(&self, plan: &Plan, true_class: usize) -> f64 {
        let c = &self.costs;
        let route_cost = |class: u16| {
            if usize::from(class) == true_class {
                0.0
            } else {
                c.c_wrong
            }
        };
        match (self.family, *plan) {
            (Family::Selective, Plan::Route { class }) => route_cost(class),
            (Family::Selective, Plan::Review) => c.c_review,
            (Family::Clarification, Plan::Now { class }) => route_cost(class),
            (Family::Clarification, Plan::Check { target, yes, no }) => {
                let final_route = if usize::from(target) == true_class {
                    yes
                } else {
                    no
                };
                c.c_check + route_cost(final_route)
            }
            (Family::Asymmetric, Plan::Act { action }) => c
                .matrix
                .get(usize::from(action))
                .and_then(|row| row.get(true_class))
                .copied()
                .unwrap_or(f64::NAN),
            _ => f64::NAN,
        }
    }
}

/// The minimum of costs, the one rule of [`pick_min`] and [`Decisions`](super::Decisions): from +∞, a cost
/// replaces the minimum only when strictly below it (so NaN never does).
pub(super) fn lowest(costs: impl Iterator<Item = f64>) -> Lowest {
    Lowest(costs.fold(f64::INFINITY, |min, v| if v < min { v } else { min }))
}

/// A running minimum (see [`lowest`]).
pub(super) struct Lowest(pub(super) f64);

impl Lowest {
    /// The minimum once `cost` comes after the costs seen so far.
    pub(super) fn min_or(self, cost: f64) -> f64 {
        if cost < self.0 { cost } else { self.0 }
    }
}

/// Whether `cost` is tied with the minimum `min` ([`pick_min`]'s rule).
pub(super) fn near(cost: f64, min: f64) -> bool {
    cost == min || (cost - min).abs() <= TIE_TOLERANCE
}

/// Index of the earliest candidate whose cost is within [`TIE_TOLERANCE`] of the minimal cost.
///
/// Costs are evaluated twice (once for the minimum, once for the pick) to avoid allocation.
pub(crate) fn pick_min(len: usize, cost: impl Fn(usize) -> f64) -> usize {
    let min = lowest((0..len).map(&cost)).0;
    (0..len).position(|i| near(cost(i), min)).unwrap_or(0)
}

pub(super) fn idx(i: usize) -> u16 {
    u16::try_from(i).unwrap_or(u16::MAX)
}

/// Answers "the class with the largest q among t != k (ties: earliest)" in O(1) per k.
///
/// Rule: t_no(k) is the earliest `t != k` whose `q_t` equals `max_{t != k} q_t` exactly. The
/// 1e-9 tie tolerance of `docs/wcpq-rules.md` is the expected costs' (section 3), not q's: a
/// q larger by any amount is the larger one. So for every k but the first index of the
/// maximum that index answers, and for it the first index of the maximum of the others.
pub(super) struct RunnerUp {
    /// First index of the exact maximum.
    top: usize,
    /// First index of the exact maximum over `t != top`.
    second: usize,
}

impl RunnerUp {
    pub(super) fn new(q: &[f64]) -> RunnerUp {
        let top = first_max(q, usize::MAX);
        RunnerUp {
            top,
            second: first_max(q, top),
        }
    }

    pub(super) fn best_except(&self, q: &[f64], k: usize) -> usize {
        let found = if k == self.top { self.second } else { self.top };
        if found < q.len() && found != k {
            return found;
        }
        // Fallback for NaN posteriors: the earliest class other than k.
        if k == 0 {
            1.min(q.len().saturating_sub(1))
        } else {
            0
        }
    }
}

/// First index of the exact maximum of `q`, skipping `skip`; `usize::MAX` when nothing qualifies.
fn first_max(q: &[f64], skip: usize) -> usize {
    let mut best = usize::MAX;
    for (t, &v) in q.iter().enumerate() {
        if t == skip || v.is_nan() {
            continue;
        }
        if best == usize::MAX || v > q[best] {
            best = t;
        }
    }
    best
}

#[cfg(test)]
pub(crate) mod tests_support {
    /// Exposes the O(1) runner-up rule for comparison with the naive definition.
    pub(crate) fn best_except(q: &[f64], k: usize) -> usize {
        super::RunnerUp::new(q).best_except(q, k)
    }
}

#[cfg(test)]
mod hash_tests {
    use std::hash::BuildHasher;

    use super::Plan;

    fn every_plan(n: u16) -> Vec<Plan> {
        let mut plans = vec![Plan::Review];
        for a in 0..n {
            plans.push(Plan::Route { class: a });
            plans.push(Plan::Now { class: a });
            plans.push(Plan::Act { action: a });
            for b in 0..n {
                plans.push(Plan::Check {
                    target: a,
                    yes: a,
                    no: b,
                });
            }
        }
        plans
    }

    #[test]
    fn a_slice_of_plans_hashes_as_its_vector_and_distinct_lists_spread() {
        let state = foldhash::fast::FixedState::with_seed(7);
        let plans = every_plan(5);
        // A `Vec<Plan>` key and a `[Plan]` lookup must hash alike (the table's contract).
        assert_eq!(
            state.hash_one(&plans),
            state.hash_one(plans.as_slice()),
            "a vector and its slice"
        );
        // Every ordered pair of plans, and every pair swapped: distinct lists, hashes
        // expected distinct (a collision costs a comparison, not a wrong answer).
        let mut seen = std::collections::HashSet::new();
        for a in &plans {
            for b in &plans {
                seen.insert(state.hash_one([*a, *b].as_slice()));
            }
        }
        assert_eq!(seen.len(), plans.len() * plans.len());
        assert_ne!(
            state.hash_one([Plan::Review, Plan::Route { class: 0 }].as_slice()),
            state.hash_one([Plan::Route { class: 0 }, Plan::Review].as_slice())
        );
    }
}
