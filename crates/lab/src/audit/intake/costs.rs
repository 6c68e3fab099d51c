//! The realized costs of the recipient's frozen workflows on the released answers, with
//! the recipient policy's posterior (Appendix C: frozen for views with probabilities, else
//! an empirical prior or a logistic posterior, picked per policy on validation cost).

use std::collections::BTreeMap;
use std::sync::Arc;

use ndarray::{Array1, Array2};
use serde_json::Value;

use super::super::logistic;
use super::super::{CostObservation, Input, WorkflowCosts};
use super::{CandidateRelease, Intake, Usable};
use releasegate_core::contract::{Contract, View};
use releasegate_core::workflow::{self, Policy, Spec};
use releasegate_sim::worlds;

/// A named posterior estimate per usable world (`None`: nothing released to read).
type Posterior = (String, Vec<Option<Vec<f64>>>);

/// Realized costs of every frozen workflow on the test worlds of one release.
pub(super) fn costs(
    input: &mut Input,
    intake: &mut Intake,
    candidate: &CandidateRelease,
    contracts: &[Arc<Contract>],
    usable: &[Usable<'_>],
    consumer: &[Option<workflow::Release>],
) {
    // One workflow set per (contract, question) with declared workflows; named family/profile.
    let mut observations: BTreeMap<String, Vec<CostObservation>> = BTreeMap::new();
    let chosen = intake
        .recipient_posteriors
        .entry(candidate.name.clone())
        .or_default();
    for (c, contract) in contracts.iter().enumerate() {
        for (question, rule) in contract.questions() {
            let Some(spec) = &rule.workflows() else {
                continue;
            };
            let members: Vec<usize> = (0..usable.len())
                .filter(|&i| usable[i].contract == c && usable[i].question == *question)
                .collect();
            if members.is_empty() {
                continue;
            }
            let view = candidate.view.unwrap_or(rule.view());
            let posteriors = recipient_posteriors(spec, view, usable, consumer, &members);
            for (p, policy) in spec.policies().iter().enumerate() {
                let name = format!("{}/{}", policy.family.name(), policy.profile.name());
                let (posterior_name, estimates) =
                    &posteriors[best_posterior(policy, &posteriors, usable, &members)];
                chosen.insert(
                    format!("{}/{question}/{name}", contract.name()),
                    posterior_name.clone(),
                );
                let entry = observations.entry(name).or_default();
                for &i in &members {
                    let u = &usable[i];
                    if u.world.split != worlds::Split::Test {
                        continue;
                    }
                    if let Some(q) = &estimates[i] {
                        entry.push(CostObservation {
                            pair_id: u.world.pair_id.clone(),
                            domain: u.world.domain.clone(),
                            cost: spec.policies()[p].realized_cost(&policy.decide(q), u.t_index),
                        });
                    }
                }
            }
        }
    }
    for (workflow, observations) in observations {
        input.costs.push(WorkflowCosts {
            release: candidate.name.clone(),
            workflow,
            observations,
        });
    }
}

/// The posterior with the lowest mean validation cost under `policy` (ties: the first).
fn best_posterior(
    policy: &Policy,
    posteriors: &[Posterior],
    usable: &[Usable<'_>],
    members: &[usize],
) -> usize {
    let validation_cost = |estimates: &Vec<Option<Vec<f64>>>| {
        let costs: Vec<f64> = members
            .iter()
            .filter(|&&i| usable[i].world.split == worlds::Split::Validation)
            .filter_map(|&i| {
                estimates[i]
                    .as_ref()
                    .map(|q| policy.realized_cost(&policy.decide(q), usable[i].t_index))
            })
            .collect();
        costs.iter().sum::<f64>() / costs.len().max(1) as f64
    };
    posteriors
        .iter()
        .enumerate()
        .min_by(|a, b| {
            validation_cost(&a.1.1)
                .total_cmp(&validation_cost(&b.1.1))
                .then(a.0.cmp(&b.0))
        })
        .map(|(index, _)| index)
        .unwrap_or(0)
}

/// The recipient's candidate posteriors per world: the frozen one (native)
/// for views with probabilities; for other views an empirical prior and a
/// one-vs-rest L2 logistic posterior over the released fields, both fitted on train.
fn recipient_posteriors(
    spec: &Spec,
    view: View,
    usable: &[Usable<'_>],
    consumer: &[Option<workflow::Release>],
    members: &[usize],
) -> Vec<Posterior> {
    let n = spec.class_count();
    if view.has_probabilities() {
        let estimates = (0..usable.len())
            .map(|i| {
                consumer[i].as_ref().map(|r| {
                    spec.posterior(
                        r,
                        usable[i].world.request.get("state").unwrap_or(&Value::Null),
                    )
                })
            })
            .collect();
        return vec![("frozen".to_string(), estimates)];
    }
    let train: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| usable[i].world.split == worlds::Split::Train)
        .collect();
    let prior = empirical_prior(n, &train, usable);
    let prior_estimates = (0..usable.len()).map(|_| Some(prior.clone())).collect();
    let models = logistic_models(n, &train, usable, consumer);
    let logistic_estimates = (0..usable.len())
        .map(|i| {
            let row = featurize(&consumer[i], n);
            let x = Array2::from_shape_fn((1, n + 1), |(_, c)| row[c]);
            let raw: Vec<f64> = models
                .iter()
                .map(|m| m.predict(x.view())[0].max(1e-9))
                .collect();
            let sum: f64 = raw.iter().sum();
            Some(raw.iter().map(|p| p / sum).collect())
        })
        .collect();
    vec![
        ("empirical_prior".to_string(), prior_estimates),
        ("logistic".to_string(), logistic_estimates),
    ]
}

/// The authorized classes' training frequencies (add-one smoothed).
fn empirical_prior(n: usize, train: &[usize], usable: &[Usable<'_>]) -> Vec<f64> {
    let mut prior = vec![1.0; n];
    for &i in train {
        prior[usable[i].t_index] += 1.0;
    }
    let total: f64 = prior.iter().sum();
    prior.iter_mut().for_each(|p| *p /= total);
    prior
}

/// One-vs-rest L2 logistic models of the authorized class over the released fields,
/// fitted on `train`.
fn logistic_models(
    n: usize,
    train: &[usize],
    usable: &[Usable<'_>],
    consumer: &[Option<workflow::Release>],
) -> Vec<logistic::Model> {
    let rows: Vec<Vec<f64>> = train.iter().map(|&i| featurize(&consumer[i], n)).collect();
    let x = Array2::from_shape_fn((rows.len(), n + 1), |(r, c)| rows[r][c]);
    (0..n)
        .map(|class| {
            let y = Array1::from_iter(
                train
                    .iter()
                    .map(|&i| f64::from(u8::from(usable[i].t_index == class))),
            );
            logistic::fit(
                x.view(),
                y.view(),
                logistic::Options {
                    c: 1.0,
                    intercept: true,
                    max_iter: 50,
                    tol: 1e-8,
                },
                None,
            )
        })
        .collect()
}

/// The logistic posterior's features: the one-hot choice and the confidence when released.
fn featurize(release: &Option<workflow::Release>, n: usize) -> Vec<f64> {
    let mut x = vec![0.0; n + 1];
    if let Some(r) = release {
        if r.choice < n {
            x[r.choice] = 1.0;
        }
        x[n] = r.confidence.unwrap_or(0.0);
    }
    x
}
