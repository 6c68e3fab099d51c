//! The workflow floor: what an attacker recovers from the frozen workflows' own decisions.
//!
//! For every WCPQ question (mechanism `wcpq` with declared `workflows`), each world's native
//! answer D, read as the recipient would read it under the contract's view (WCPQ's own D), is
//! decided by every frozen policy of the question's [`Spec`]; the release `workflow floor`
//! carries those plans and nothing else. Any release that keeps every plan (strict WCPQ, by
//! construction) lets the attacker compute this one, so its recovery cannot be lower, up to
//! the attackers' estimation error. The release is audited like every other one (same worlds,
//! attackers, pairing and bootstrap); [`summarize`] sets it beside the contract's WCPQ release.
//! Method and reading rule: `docs/audit.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::bootstrap::Estimate;
use super::group::MAX_CLASSES;
use super::intake::{self, Error, Usable};
use super::report::Recovery;
use super::{
    CostObservation, Example, JointPart, ReleaseExamples, ReleasedFeatures, WorkflowCosts,
};
use releasegate_core::contract::{Contract, DeriveError, Rerelease};
use releasegate_core::mechanism::Mechanism;
use releasegate_core::release::{self, Options};
use releasegate_core::rng::Rng;
use releasegate_core::wire;
use releasegate_core::workflow::{Plan, Spec};
use releasegate_sim::worlds::{Split, World};

mod summary;
pub use summary::{at_floor, below_floor, summarize};

/// The floor's release name in the report.
pub const RELEASE: &str = "workflow floor";
/// The release the floor is read beside: the contracts' own WCPQ release.
pub const STRICT: &str = "wcpq (contract)";
/// The contracts' WCPQ release is at the floor when its paired difference from the floor is
/// below this (2 points), or when that difference's 95% interval reaches 0.
pub const TOLERANCE: f64 = 0.02;

/// One WCPQ question of the floor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Question {
    /// The contract.
    pub contract: String,
    /// The question id.
    pub question: String,
    /// Frozen policies of its workflow spec.
    pub policies: usize,
    /// Of those, the ones that do not decide exactly as an earlier one (each is read once).
    pub distinct_policies: usize,
    /// Worlds of the question whose plans the floor carries.
    pub worlds: u64,
    /// Worlds of the question whose native answer cannot be read under its view (no plans).
    pub unread: u64,
    /// Worlds with plans, per domain.
    pub domains: BTreeMap<String, u64>,
    /// Per domain of the question, the figures beside each other ([`summarize`]).
    pub figures: BTreeMap<String, Figures>,
}

/// Recovery of the floor, the contracts' WCPQ release and `full_native` over the same worlds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// The workflow floor.
    pub floor: Recovery,
    /// The contracts' WCPQ release, when audited.
    pub strict: Option<Recovery>,
    /// `full_native`, when audited.
    pub full_native: Option<Recovery>,
}

/// The floor release, the realized costs of its (native) plans, and its questions.
#[derive(Debug, Clone)]
pub struct Floor {
    /// The release `workflow floor`, world by world as the template release.
    pub release: ReleaseExamples,
    /// Realized costs of the native plans, per `family/profile` (test worlds).
    pub costs: Vec<WorkflowCosts>,
    /// Every WCPQ question, in contract then question order.
    pub questions: Vec<Question>,
}

/// The floor beside the contracts' WCPQ release, as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The floor's release name.
    pub release: String,
    /// The release it is read beside.
    pub strict_release: String,
    /// [`TOLERANCE`].
    pub tolerance: f64,
    /// Pooled recovery of the floor.
    pub floor: Recovery,
    /// Pooled figures of the contracts' WCPQ release and of `full_native`, when audited.
    pub strict: Option<Recovery>,
    /// `full_native`, when audited.
    pub full_native: Option<Recovery>,
    /// The contracts' WCPQ release minus the floor, paired over the same test pairs.
    pub strict_minus_floor: Option<Estimate>,
    /// Whether the contracts' WCPQ release is at the floor ([`TOLERANCE`]).
    pub at_floor: Option<bool>,
    /// Per `contract/question`.
    pub questions: BTreeMap<String, Question>,
}

/// A WCPQ question: its contract's index, id and frozen workflows, and the policies read.
struct Key<'c> {
    contract: usize,
    question: &'c str,
    spec: &'c Spec,
    /// Indices of the policies that do not decide exactly as an earlier one.
    distinct: Vec<usize>,
}

/// The plans a policy makes, numbered: a plan that routes or acts on a class is that class's
/// index (so the attacker's "equals the authorized class" flag reads "routes to it"), every
/// other plan (review, checks, inspection) a number after the classes.
struct Alphabet {
    classes: usize,
    others: Vec<Plan>,
}

/// One joint part of the floor: a window of one policy's plan numbers.
struct Slot {
    key: usize,
    policy: usize,
    alphabet: usize,
    start: usize,
    size: usize,
}

/// A world's question (index into the keys) and its plans (`None`: its answer is unreadable).
type WorldPlans = Option<(usize, Option<Vec<Plan>>)>;

/// The floor of `contracts`' WCPQ questions over `worlds`, aligned world by world with
/// `template` (a release `intake::build` made from the same contracts and worlds); `None`
/// when no question uses WCPQ with workflows.
pub fn build(
    contracts: &[Arc<Contract>],
    worlds: &[World],
    template: &ReleaseExamples,
) -> Result<Option<Floor>, Error> {
    let keys = keys(contracts);
    if keys.is_empty() {
        return Ok(None);
    }
    let usable: Vec<Usable<'_>> = worlds
        .iter()
        .filter_map(|w| intake::usable::usable_world(contracts, w).ok())
        .collect();
    let aligned = usable.len() == template.examples.len()
        && usable
            .iter()
            .zip(&template.examples)
            .all(|(u, ex)| u.world.pair_id == ex.pair_id && u.world.domain == ex.domain);
    if !aligned {
        return Err(Error::World {
            world_id: String::new(),
            reason: format!("the floor's worlds differ from release `{}`", template.name),
        });
    }
    let variants = contracts
        .iter()
        .map(|c| without_wcpq(c))
        .collect::<Result<Vec<Contract>, _>>()?;
    let plans = usable
        .iter()
        .map(|u| world_plans(&keys, &variants, u))
        .collect::<Result<Vec<WorldPlans>, Error>>()?;
    let (alphabets, slots) = layout(&keys, &plans);
    let examples = template
        .examples
        .iter()
        .zip(&plans)
        .map(|(ex, plans)| Example {
            release: ReleasedFeatures {
                joint: parts(&slots, &alphabets, plans, ex.t_index),
                ..ReleasedFeatures::default()
            },
            ..ex.clone()
        })
        .collect();
    Ok(Some(Floor {
        release: ReleaseExamples {
            name: RELEASE.to_string(),
            examples,
        },
        costs: costs(&keys, &usable, &plans),
        questions: questions(contracts, &keys, &usable, &plans),
    }))
}

/// Every (contract, question) whose mechanism is WCPQ and which declares workflows.
fn keys(contracts: &[Arc<Contract>]) -> Vec<Key<'_>> {
    let mut keys = Vec::new();
    for (c, contract) in contracts.iter().enumerate() {
        for (question, rule) in contract.questions() {
            let (Mechanism::Wcpq(_), Some(spec)) = (&rule.mechanism(), &rule.workflows()) else {
                continue;
            };
            let policies = spec.policies();
            let distinct = (0..policies.len())
                .filter(|&i| !policies[..i].iter().any(|p| p.decides_as(&policies[i])))
                .collect();
            keys.push(Key {
                contract: c,
                question,
                spec,
                distinct,
            });
        }
    }
    keys
}

/// `contract` with every WCPQ mechanism off: its release of a world is D, the native answer
/// as the recipient reads it under the question's view, withholding and shape.
fn without_wcpq(contract: &Contract) -> Result<Contract, DeriveError> {
    contract.derive(|_, rule| Rerelease {
        view: None,
        mechanism: matches!(rule.mechanism(), Mechanism::Wcpq(_)).then_some(Mechanism::None),
    })
}

/// The plans every frozen policy of `u`'s question makes on its native answer D.
fn world_plans(
    keys: &[Key<'_>],
    variants: &[Contract],
    u: &Usable<'_>,
) -> Result<WorldPlans, Error> {
    let Some(k) = keys
        .iter()
        .position(|k| k.contract == u.contract && k.question == u.question)
    else {
        return Ok(None);
    };
    let contract = &variants[u.contract];
    let asked = wire::check_request(&u.world.request, contract)
        .map_err(|e| intake::world_error(u.world, &e.to_string()))?;
    // No mechanism draws from it: the stream only fills the options.
    let mut rng = Rng::from_bytes(b"workflow floor");
    let mut options = Options {
        rng: &mut rng,
        evaluate: true,
    };
    let released = release::release(contract, &asked, &u.world.response, &mut options)
        .map_err(|e| intake::world_error(u.world, &format!("the saved answer failed ({e})")))?;
    let native = released
        .answers
        .iter()
        .find(|r| r.question == u.question)
        .and_then(|r| r.evaluation.as_ref())
        .map(|evaluation| evaluation.native.clone());
    let state = asked.state();
    Ok(Some((k, native.map(|d| keys[k].spec.plans(&d, state)))))
}

/// The numbered plans of every distinct policy, and the joint parts they fill (windows of at
/// most [`MAX_CLASSES`] numbers, so any class count and any number of plans fit).
fn layout(keys: &[Key<'_>], plans: &[WorldPlans]) -> (Vec<Alphabet>, Vec<Slot>) {
    let mut alphabets = Vec::new();
    let mut slots = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let classes = key.spec.class_count();
        for &policy in &key.distinct {
            let others: BTreeSet<Plan> = plans
                .iter()
                .flatten()
                .filter(|(of, _)| *of == k)
                .filter_map(|(_, p)| p.as_ref()?.get(policy).copied())
                .filter(|plan| class_of(plan, classes).is_none())
                .collect();
            let alphabet = Alphabet {
                classes,
                others: others.into_iter().collect(),
            };
            let total = alphabet.classes + alphabet.others.len();
            for start in (0..total).step_by(MAX_CLASSES) {
                slots.push(Slot {
                    key: k,
                    policy,
                    alphabet: alphabets.len(),
                    start,
                    size: (total - start).min(MAX_CLASSES),
                });
            }
            alphabets.push(alphabet);
        }
    }
    (alphabets, slots)
}

/// The class a plan routes to or acts on, if any.
fn class_of(plan: &Plan, classes: usize) -> Option<usize> {
    let class = match *plan {
        Plan::Route { class } | Plan::Now { class } => class,
        Plan::Act { action } => action,
        Plan::Review | Plan::Check { .. } => return None,
    };
    Some(usize::from(class)).filter(|&c| c < classes)
}

impl Alphabet {
    /// The number of `plan`.
    fn code(&self, plan: &Plan) -> Option<usize> {
        class_of(plan, self.classes).or_else(|| {
            self.others
                .binary_search(plan)
                .ok()
                .map(|i| self.classes + i)
        })
    }
}

/// A world's joint parts: in the slots of its question, its plans; everywhere else nothing.
fn parts(
    slots: &[Slot],
    alphabets: &[Alphabet],
    plans: &WorldPlans,
    t_index: usize,
) -> Vec<JointPart> {
    slots
        .iter()
        .map(|slot| {
            let code = match plans {
                Some((k, Some(plans))) if *k == slot.key => plans
                    .get(slot.policy)
                    .and_then(|plan| alphabets[slot.alphabet].code(plan)),
                _ => None,
            };
            let class_count = slot.size.max(2);
            let own = matches!(plans, Some((k, _)) if *k == slot.key);
            JointPart {
                choice: code
                    .and_then(|c| c.checked_sub(slot.start))
                    .filter(|&c| c < slot.size),
                probabilities: None,
                confidence: None,
                // The plans alone: nothing of the release's token counts.
                usage: super::ReleasedUsage::default(),
                t_index: if own && slot.start == 0 && t_index < class_count {
                    t_index
                } else {
                    0
                },
                class_count,
            }
        })
        .collect()
}

/// Realized costs of the native plans on the test worlds, per `family/profile`.
fn costs(keys: &[Key<'_>], usable: &[Usable<'_>], plans: &[WorldPlans]) -> Vec<WorkflowCosts> {
    let mut by_workflow: BTreeMap<String, Vec<CostObservation>> = BTreeMap::new();
    for (u, world_plans) in usable.iter().zip(plans) {
        let Some((k, Some(plans))) = world_plans else {
            continue;
        };
        if u.world.split != Split::Test {
            continue;
        }
        for (policy, plan) in keys[*k].spec.policies().iter().zip(plans) {
            let name = format!("{}/{}", policy.family.name(), policy.profile.name());
            by_workflow.entry(name).or_default().push(CostObservation {
                pair_id: u.world.pair_id.clone(),
                domain: u.world.domain.clone(),
                cost: policy.realized_cost(plan, u.t_index),
            });
        }
    }
    by_workflow
        .into_iter()
        .map(|(workflow, observations)| WorkflowCosts {
            release: RELEASE.to_string(),
            workflow,
            observations,
        })
        .collect()
}

/// Each question's counts (its figures come with [`summarize`]).
fn questions(
    contracts: &[Arc<Contract>],
    keys: &[Key<'_>],
    usable: &[Usable<'_>],
    plans: &[WorldPlans],
) -> Vec<Question> {
    keys.iter()
        .enumerate()
        .map(|(k, key)| {
            let mut question = Question {
                contract: contracts[key.contract].name().to_string(),
                question: key.question.to_string(),
                policies: key.spec.policies().len(),
                distinct_policies: key.distinct.len(),
                worlds: 0,
                unread: 0,
                domains: BTreeMap::new(),
                figures: BTreeMap::new(),
            };
            for (u, world_plans) in usable.iter().zip(plans) {
                match world_plans {
                    Some((of, Some(_))) if *of == k => {
                        question.worlds += 1;
                        *question.domains.entry(u.world.domain.clone()).or_default() += 1;
                    }
                    Some((of, None)) if *of == k => question.unread += 1,
                    _ => {}
                }
            }
            question
        })
        .collect()
}

#[cfg(test)]
mod tests;
