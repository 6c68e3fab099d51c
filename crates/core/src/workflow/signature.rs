//! What a release makes the frozen workflows do: the posterior they read, each policy's
//! complete plan, the behaviour signature σ, and the realized costs that bound a budgeted
//! mapping (`docs/wcpq-rules.md` sections 2 to 4).

use std::cell::RefCell;

use serde_json::Value;

use super::{Plan, Release, Signature, SignatureScratch, Spec};

impl Spec {
    /// The public request features the posterior reads (empty unless logistic).
    pub fn public_features(&self, state: &Value) -> Vec<f64> {
        self.posterior.public_features(state)
    }

    /// The smoothed posterior q for a release and request state.
    pub fn posterior(&self, release: &Release, state: &Value) -> Vec<f64> {
        let public = self.public_features(state);
        let mut q = Vec::with_capacity(self.class_count());
        self.posterior
            .estimate(self.class_count(), release, &public, &mut q);
        q
    }

    /// The complete plans of every frozen policy, in [`Spec::policies`] order.
    pub fn plans(&self, release: &Release, state: &Value) -> Vec<Plan> {
        self.plans_with_public(release, &self.public_features(state))
    }

    /// As [`Spec::plans`], with public features already extracted by [`Spec::public_features`].
    ///
    /// The posterior and the decisions' buffers are this thread's, reused from one call to
    /// the next (a mapping computes plans once per answer; allocating them each time cost
    /// about a tenth of the computation). A nested call (none exists) gets fresh ones.
    pub fn plans_with_public(&self, release: &Release, public: &[f64]) -> Vec<Plan> {
        thread_local! {
            static SCRATCH: RefCell<SignatureScratch> = RefCell::default();
        }
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => self.plans_in(release, public, &mut scratch),
            Err(_) => self.plans_in(release, public, &mut SignatureScratch::default()),
        })
    }

    /// [`Spec::plans_with_public`] with the given buffers.
    fn plans_in(
        &self,
        release: &Release,
        public: &[f64],
        scratch: &mut SignatureScratch,
    ) -> Vec<Plan> {
        let SignatureScratch {
            posterior: q,
            decisions,
        } = scratch;
        self.posterior
            .estimate(self.class_count(), release, public, q);
        decisions.prepare(q);
        let mut plans: Vec<Plan> = Vec::with_capacity(self.policies.len());
        decisions.decide_all(&self.policies, &self.twins, q, &mut plans);
        plans
    }

    /// The behaviour signature σ of a release (computed from the release as given, i.e. after
    /// serialization and with the availability actually released).
    pub fn signature(&self, release: &Release, state: &Value) -> Signature {
        self.signature_with_public(release, &self.public_features(state))
    }

    /// As [`Spec::signature`], with public features already extracted.
    pub fn signature_with_public(&self, release: &Release, public: &[f64]) -> Signature {
        Signature {
            choice: release.choice,
            availability: release.availability(),
            plans: self.plans_with_public(release, public),
        }
    }

    /// True when the release's signature equals `target`; same computation as
    /// [`Spec::signature_with_public`], but it stops at the first differing plan and reuses
    /// `scratch`'s buffers (for scans over many candidates).
    pub fn signature_matches(
        &self,
        release: &Release,
        public: &[f64],
        target: &Signature,
        scratch: &mut SignatureScratch,
    ) -> bool {
        if release.choice != target.choice
            || release.availability() != target.availability
            || target.plans.len() != self.policies.len()
        {
            return false;
        }
        let SignatureScratch {
            posterior,
            decisions,
        } = scratch;
        self.posterior
            .estimate(self.class_count(), release, public, posterior);
        decisions.prepare(posterior);
        // In order, stopping at the first difference: a twin's plan is its earlier
        // twin's, which has already matched `target`'s.
        self.policies
            .iter()
            .zip(&self.twins)
            .zip(&target.plans)
            .all(
                |((policy, twin), plan)| match twin.and_then(|j| target.plans.get(j)) {
                    Some(earlier) => earlier == plan,
                    None => decisions.decide(policy, posterior) == *plan,
                },
            )
    }

    /// The worst realized-cost increase of `released` over `native` (complete plans, one per
    /// policy, in policy order) over every policy and hypothetical true class: `(absolute,
    /// relative)`, where relative divides each increase by the policy's κ (see
    /// [`Policy::kappa`](super::Policy::kappa)). Both are at least 0; NaN when the plans do
    /// not fit the policies.
    pub fn worst_increase(&self, native: &[Plan], released: &[Plan]) -> (f64, f64) {
        if native.len() != self.policies.len() || released.len() != self.policies.len() {
            return (f64::NAN, f64::NAN);
        }
        let (mut absolute, mut relative) = (0.0f64, 0.0f64);
        for ((policy, a), b) in self.policies.iter().zip(native).zip(released) {
            let kappa = policy.kappa();
            for t in 0..self.class_count() {
                let increase = policy.realized_cost(b, t) - policy.realized_cost(a, t);
                if increase.is_nan() {
                    return (f64::NAN, f64::NAN);
                }
                absolute = absolute.max(increase);
                if increase > 0.0 {
                    relative = relative.max(increase / kappa);
                }
            }
        }
        (absolute, relative)
    }

    /// True when, for every policy j and hypothetical true class t, the realized cost of
    /// `released` exceeds that of `native` by at most `alpha`·κ_j (`docs/wcpq.md`, bounded
    /// admissibility). Exact float comparison, no tolerance; NaN is never within.
    pub fn within_budget(&self, native: &[Plan], released: &[Plan], alpha: f64) -> bool {
        if native.len() != self.policies.len() || released.len() != self.policies.len() {
            return false;
        }
        self.policies
            .iter()
            .zip(native)
            .zip(released)
            .all(|((policy, a), b)| {
                let bound = alpha * policy.kappa();
                (0..self.class_count())
                    .all(|t| policy.realized_cost(b, t) - policy.realized_cost(a, t) <= bound)
            })
    }

    /// Realized cost of each plan (one per policy, in policy order) for a hypothetical true class.
    pub fn realized_costs(&self, plans: &[Plan], true_class: usize) -> Vec<f64> {
        self.policies
            .iter()
            .zip(plans)
            .map(|(policy, plan)| policy.realized_cost(plan, true_class))
            .collect()
    }
}
