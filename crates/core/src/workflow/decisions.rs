//! What a spec's policies share for one posterior ([`Decisions`]): deciding them all then
//! costs one pass over precomputed values per policy, bit for bit as each policy decides
//! alone ([`Policy::decide`]).

use super::cost::{CostBase, Family, Policy};
use super::plan::{Plan, RunnerUp, idx, lowest, near, pick_min};

/// What every policy of one posterior shares, computed once per posterior: deciding a
/// spec's policies ([`Decisions::decide`]) then costs one pass over `n + 1` precomputed
/// values per policy, where [`Policy::decide`] recomputes them for each.
///
/// It decides exactly as [`Policy::decide`] does, bit for bit: every candidate cost is the
/// same floating-point expression evaluated in the same order (`c_wrong * (1 - q_t)` as
/// `c_wrong * miss[t]`, `1 - q_k - q_t_no(k)` as `miss[k] - q[t_no(k)]`), and the pick is the
/// same earliest-within-tolerance rule. The tests hold the two equal on random,
/// tied and degenerate posteriors for every family and profile.
#[derive(Debug, Default)]
pub struct Decisions {
    /// `1 - q_t` per class.
    miss: Vec<f64>,
    /// Clarification: `t_no(k)`, the best class other than `k`, per `k`.
    no: Vec<u16>,
    /// Clarification: `1 - q_k - q_t_no(k)` per `k`.
    rest: Vec<f64>,
    /// One policy's candidate costs (reused across policies).
    costs: Vec<f64>,
    /// Whether `no` and `rest` hold the current posterior's values.
    clarified: bool,
}

impl Decisions {
    /// An empty set of buffers; [`Decisions::prepare`] fills them for a posterior.
    pub fn new() -> Decisions {
        Decisions::default()
    }

    /// Precomputes what the policies share for posterior `q` (canonical order).
    pub fn prepare(&mut self, q: &[f64]) {
        self.miss.clear();
        self.miss.extend(q.iter().map(|&v| 1.0 - v));
        self.costs.reserve(q.len() + 1);
        self.clarified = false;
    }

    /// The complete plan of `policy` for the posterior last given to
    /// [`Decisions::prepare`] (`q`, the same slice): equal to `policy.decide(q)`.
    pub fn decide(&mut self, policy: &Policy, q: &[f64]) -> Plan {
        let n = q.len();
        if n == 0 || self.miss.len() != n {
            return policy.decide(q);
        }
        // Up to eight classes, a version of each family for each class count: its loops
        // have a known length, unrolled and without bounds checks, and each candidate cost
        // is computed once (the loops of any length took about 340 instructions a plan
        // for four classes, asymmetric, and about 210 selective or clarification).
        let fixed = match n {
            2 => self.decide_fixed::<2>(policy, q),
            3 => self.decide_fixed::<3>(policy, q),
            4 => self.decide_fixed::<4>(policy, q),
            5 => self.decide_fixed::<5>(policy, q),
            6 => self.decide_fixed::<6>(policy, q),
            7 => self.decide_fixed::<7>(policy, q),
            8 => self.decide_fixed::<8>(policy, q),
            _ => None,
        };
        match fixed {
            Some(plan) => plan,
            None => self.decide_any(policy, q),
        }
    }

    /// Every policy's plan, in order, pushed onto `plans` (empty): a policy with a twin
    /// (`twins[j]`, an earlier policy deciding exactly as it does) gets its twin's plan,
    /// every other one [`Decisions::decide`]'s. The class count is matched once for all of
    /// them, and each policy's decision is inlined into one loop (a call per policy, and
    /// its match on the class count, were about a fifth of a plan's instructions).
    pub fn decide_all(
        &mut self,
        policies: &[Policy],
        twins: &[Option<usize>],
        q: &[f64],
        plans: &mut Vec<Plan>,
    ) {
        if self.miss.len() != q.len() {
            return self.decide_each(policies, twins, q, plans, Decisions::decide);
        }
        match q.len() {
            2 => self.decide_each(policies, twins, q, plans, Decisions::decide_with::<2>),
            3 => self.decide_each(policies, twins, q, plans, Decisions::decide_with::<3>),
            4 => self.decide_each(policies, twins, q, plans, Decisions::decide_with::<4>),
            5 => self.decide_each(policies, twins, q, plans, Decisions::decide_with::<5>),
            6 => self.decide_each(policies, twins, q, plans, Decisions::decide_with::<6>),
            7 => self.decide_each(policies, twins, q, plans, Decisions::decide_with::<7>),
            8 => self.decide_each(policies, twins, q, plans, Decisions::decide_with::<8>),
            _ => self.decide_each(policies, twins, q, plans, Decisions::decide),
        }
    }

    /// [`Decisions::decide_all`]'s loop, each policy decided by `decide`.
    #[inline(always)]
    fn decide_each(
        &mut self,
        policies: &[Policy],
        twins: &[Option<usize>],
        q: &[f64],
        plans: &mut Vec<Plan>,
        decide: impl Fn(&mut Decisions, &Policy, &[f64]) -> Plan,
    ) {
        plans.reserve(policies.len());
        for (i, policy) in policies.iter().enumerate() {
            let twin = twins.get(i).copied().flatten();
            let plan = match twin.and_then(|j| plans.get(j)) {
                Some(&plan) => plan,
                None => decide(self, policy, q),
            };
            plans.push(plan);
        }
    }

    /// [`Decisions::decide`] where `q` is known to be `N` long and prepared.
    #[inline(always)]
    fn decide_with<const N: usize>(&mut self, policy: &Policy, q: &[f64]) -> Plan {
        match self.decide_fixed::<N>(policy, q) {
            Some(plan) => plan,
            None => self.decide_any(policy, q),
        }
    }

    /// [`Decisions::decide`] for `N` classes; `None` where the loops of any length must
    /// decide (a matrix not of `N + 1` rows of `N`).
    #[inline(always)]
    fn decide_fixed<const N: usize>(&mut self, policy: &Policy, q: &[f64]) -> Option<Plan> {
        match policy.family {
            Family::Asymmetric => asymmetric_fixed::<N>(policy, q),
            Family::Selective => {
                let miss: &[f64; N] = self.miss.as_slice().try_into().ok()?;
                Some(selective_fixed(miss, &policy.costs))
            }
            Family::Clarification => {
                self.clarify(q);
                let miss: &[f64; N] = self.miss.as_slice().try_into().ok()?;
                let rest: &[f64; N] = self.rest.as_slice().try_into().ok()?;
                let no: &[u16; N] = self.no.as_slice().try_into().ok()?;
                Some(clarification_fixed(miss, rest, no, &policy.costs))
            }
        }
    }

    /// Fills `no` and `rest` for the current posterior, once.
    fn clarify(&mut self, q: &[f64]) {
        if self.clarified {
            return;
        }
        let runner = RunnerUp::new(q);
        // Sized once for the class count (a no-op from then on), then written in place.
        self.no.resize(self.miss.len(), 0);
        self.rest.resize(self.miss.len(), 0.0);
        let slots = self.no.iter_mut().zip(self.rest.iter_mut());
        for (k, ((no, rest), &m)) in slots.zip(&self.miss).enumerate() {
            let t_no = runner.best_except(q, k);
            *no = idx(t_no);
            *rest = m - q.get(t_no).copied().unwrap_or(f64::NAN);
        }
        self.clarified = true;
    }

    /// [`Decisions::decide`] for any class count.
    fn decide_any(&mut self, policy: &Policy, q: &[f64]) -> Plan {
        let c = &policy.costs;
        let n = q.len();
        match policy.family {
            Family::Selective => {
                // Candidates: route to t at c_wrong · (1 − q_t), then review at c_review.
                let w = c.c_wrong;
                let min = lowest(self.miss.iter().map(|&m| w * m)).min_or(c.c_review);
                match self.miss.iter().position(|&m| near(w * m, min)) {
                    Some(t) => Plan::Route { class: idx(t) },
                    None if near(c.c_review, min) => Plan::Review,
                    // No candidate within tolerance (NaN costs): the first one, as `decide`.
                    None => Plan::Route { class: 0 },
                }
            }
            Family::Clarification => {
                self.clarify(q);
                // Candidates: now (the best route t*) at c_wrong · (1 − q_t*), then check k
                // at c_check + c_wrong · (1 − q_k − q_t_no(k)).
                let w = c.c_wrong;
                let routes = lowest(self.miss.iter().map(|&m| w * m)).0;
                let best = self
                    .miss
                    .iter()
                    .position(|&m| near(w * m, routes))
                    .unwrap_or(0);
                let now = w * self.miss[best];
                let checks = self.rest.iter().map(|&r| c.c_check + w * r);
                let min = lowest(std::iter::once(now).chain(checks.clone())).0;
                let check = if near(now, min) {
                    None
                } else {
                    checks.clone().position(|v| near(v, min))
                };
                match check {
                    None => Plan::Now { class: idx(best) },
                    Some(k) => Plan::Check {
                        target: idx(k),
                        yes: idx(k),
                        no: self.no[k],
                    },
                }
            }
            Family::Asymmetric => {
                self.costs.clear();
                let rows = c.matrix.iter().take(n + 1);
                let costs =
                    rows.map(|row| row.iter().zip(q).fold(0.0, |sum, (m, qt)| sum + qt * m));
                self.costs.extend(costs);
                Plan::Act {
                    action: idx(pick_min(self.costs.len(), |a| self.costs[a])),
                }
            }
        }
    }
}

/// An asymmetric-cost policy's plan for `N` classes, the expressions of
/// [`Policy::decide`] in the same order (each action's expected cost summed in canonical
/// class order from 0, then the earliest action within tolerance of the least); `None` when
/// `q` is not `N` long or the matrix is not `N + 1` rows of `N` (the caller then decides
/// with loops of any length).
#[inline]
fn asymmetric_fixed<const N: usize>(policy: &Policy, q: &[f64]) -> Option<Plan> {
    let q: &[f64; N] = q.try_into().ok()?;
    let rows = policy.costs.matrix.get(..=N)?;
    let mut costs = [0.0f64; 9];
    for (cost, row) in costs.iter_mut().zip(rows) {
        let row: &[f64; N] = row.as_slice().try_into().ok()?;
        let mut sum = 0.0;
        for t in 0..N {
            sum += q[t] * row[t];
        }
        *cost = sum;
    }
    let costs = costs.get(..=N)?;
    let min = lowest(costs.iter().copied()).0;
    let pick = costs.iter().position(|&v| near(v, min)).unwrap_or(0);
    Some(Plan::Act { action: idx(pick) })
}

/// A selective-routing policy's plan for `N` classes, the expressions of
/// [`Decisions::decide_any`] in the same order: route to `t` at `c_wrong · miss[t]`, then
/// review at `c_review`; the earliest candidate within tolerance of the least.
#[inline]
fn selective_fixed<const N: usize>(miss: &[f64; N], c: &CostBase) -> Plan {
    let w = c.c_wrong;
    let routes: [f64; N] = std::array::from_fn(|t| w * miss[t]);
    let min = lowest(routes.iter().copied()).min_or(c.c_review);
    match routes.iter().position(|&v| near(v, min)) {
        Some(t) => Plan::Route { class: idx(t) },
        None if near(c.c_review, min) => Plan::Review,
        None => Plan::Route { class: 0 },
    }
}

/// A clarification policy's plan for `N` classes, the expressions of
/// [`Decisions::decide_any`] in the same order: now (the best route) at its
/// `c_wrong · miss[t*]`, then check `k` at `c_check + c_wrong · rest[k]`.
#[inline]
fn clarification_fixed<const N: usize>(
    miss: &[f64; N],
    rest: &[f64; N],
    no: &[u16; N],
    c: &CostBase,
) -> Plan {
    let w = c.c_wrong;
    let routes: [f64; N] = std::array::from_fn(|t| w * miss[t]);
    let least = lowest(routes.iter().copied()).0;
    let best = routes.iter().position(|&v| near(v, least)).unwrap_or(0);
    let now = routes[best];
    let checks: [f64; N] = std::array::from_fn(|k| c.c_check + w * rest[k]);
    let min = lowest(std::iter::once(now).chain(checks.iter().copied())).0;
    let check = if near(now, min) {
        None
    } else {
        checks.iter().position(|&v| near(v, min))
    };
    match check {
        None => Plan::Now { class: idx(best) },
        Some(k) => Plan::Check {
            target: idx(k),
            yes: idx(k),
            no: no[k],
        },
    }
}
