use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::audit::intake::{CandidateRelease, Reading};
use releasegate_core::config::{Config as AppConfig, Inputs};
use releasegate_core::contract::View;
use releasegate_sim::{dataset, simulate};
use serde_json::Value;

/// The shipped offline contracts: three 4-class WCPQ questions with the 18 default workflows.
fn contracts() -> Vec<Arc<Contract>> {
    let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../config"));
    let text = std::fs::read_to_string(dir.join("tuple-bench.toml")).unwrap();
    let inputs = Inputs {
        env: None,
        files: &|path| std::fs::read(path),
        codebooks: true,
    };
    let config = AppConfig::from_toml_with(&text, "tuple-bench.toml", dir, inputs).unwrap();
    ["delivery", "equipment", "it_ops"]
        .iter()
        .map(|name| config.contract(name).unwrap().clone())
        .collect()
}

fn worlds() -> Vec<World> {
    let options = simulate::Options {
        pairs_per_domain: 20,
        seed: 4,
    };
    simulate::generate(&options).unwrap()
}

/// Two audited releases of the same worlds: no output and the contracts' WCPQ release.
fn templates(contracts: &[Arc<Contract>], worlds: &[World]) -> crate::audit::Input {
    let candidates = [
        CandidateRelease::uniform("no_output", Some(View::NoOutput), Some(Mechanism::None)),
        CandidateRelease::uniform(STRICT, None, None),
    ];
    intake::build(contracts, worlds, &candidates, Reading::Released, 1)
        .unwrap()
        .0
}

/// The plans of every frozen policy on each world's native answer, computed independently of
/// the floor (the codebook builder's reading of a saved world), by world id.
fn native_plans(contracts: &[Arc<Contract>], worlds: &[World]) -> BTreeMap<String, Vec<Plan>> {
    let mut out = BTreeMap::new();
    for world in worlds {
        for contract in contracts {
            let spec = contract.questions()[simulate::COARSE_QUESTION]
                .workflows()
                .unwrap();
            if let Ok((response, _)) =
                dataset::training_answer(contract, simulate::COARSE_QUESTION, world, spec)
            {
                let state = world.request.get("state").unwrap_or(&Value::Null);
                out.insert(world.world_id.clone(), spec.plans(&response.native, state));
                break;
            }
        }
    }
    out
}

#[test]
fn the_floor_carries_the_native_plans_and_nothing_else() {
    let (contracts, worlds) = (contracts(), worlds());
    let input = templates(&contracts, &worlds);
    let floor = build(&contracts, &worlds, &input.releases[0])
        .unwrap()
        .unwrap();
    // The same floor whichever release it is aligned with: it reads none of their fields.
    let again = build(&contracts, &worlds, &input.releases[1])
        .unwrap()
        .unwrap();
    assert_eq!(floor.release, again.release);
    assert_eq!(floor.release.name, RELEASE);
    let examples = &floor.release.examples;
    assert_eq!(examples.len(), input.releases[0].examples.len());
    for ex in examples {
        assert_eq!((ex.release.choice, ex.release.confidence), (None, None));
        assert!(ex.release.probabilities.is_none() && !ex.release.joint.is_empty());
    }
    // Two worlds of one question have the same features exactly when their plans agree,
    // whatever their native answers.
    let plans = native_plans(&contracts, &worlds);
    let used: Vec<&World> = worlds
        .iter()
        .filter(|w| plans.contains_key(&w.world_id))
        .collect();
    assert_eq!(used.len(), examples.len());
    let (mut same, mut different) = (0, 0);
    for (i, a) in used.iter().enumerate() {
        for (j, b) in used.iter().enumerate().skip(i + 1) {
            if a.domain != b.domain {
                continue;
            }
            let equal_plans = plans[&a.world_id] == plans[&b.world_id];
            // The plan numbers (each part's authorized class is the world's own).
            let numbers = |ex: &Example| {
                ex.release
                    .joint
                    .iter()
                    .map(|p| p.choice)
                    .collect::<Vec<_>>()
            };
            let equal_features = numbers(&examples[i]) == numbers(&examples[j]);
            assert_eq!(equal_plans, equal_features, "{} {}", a.world_id, b.world_id);
            if equal_plans && a.response != b.response {
                same += 1;
            } else if !equal_plans {
                different += 1;
            }
        }
    }
    assert!(same > 0 && different > 0, "{same} {different}");
    // Every question is reported, with its worlds and the policies it reads once.
    assert_eq!(floor.questions.len(), 3);
    for question in &floor.questions {
        assert_eq!(question.policies, 18);
        assert!(question.distinct_policies < 18 && question.distinct_policies > 0);
        assert_eq!(question.worlds + question.unread, 40, "{question:?}");
        assert_eq!(question.domains.values().sum::<u64>(), question.worlds);
    }
}

#[test]
fn the_floors_costs_are_those_of_the_native_plans() {
    let (contracts, worlds) = (contracts(), worlds());
    let candidates = [CandidateRelease::uniform(
        "full_native",
        Some(View::FullNative),
        Some(Mechanism::None),
    )];
    let (input, _) = intake::build(&contracts, &worlds, &candidates, Reading::Released, 1).unwrap();
    let floor = build(&contracts, &worlds, &input.releases[0])
        .unwrap()
        .unwrap();
    // The shipped contracts release full_native: the workflows act on the native answer.
    let sorted = |costs: &[WorkflowCosts]| {
        let mut out: Vec<(String, String, String, u64)> = costs
            .iter()
            .flat_map(|c| {
                c.observations.iter().map(|o| {
                    let key = (c.workflow.clone(), o.domain.clone(), o.pair_id.clone());
                    (key.0, key.1, key.2, o.cost.to_bits())
                })
            })
            .collect();
        out.sort();
        out
    };
    assert_eq!(floor.costs.len(), 18);
    assert!(floor.costs.iter().all(|c| c.release == RELEASE));
    assert_eq!(sorted(&floor.costs), sorted(&input.costs));
}

#[test]
fn contracts_without_a_wcpq_question_have_no_floor() {
    let (contracts, worlds) = (contracts(), worlds());
    let plain: Vec<Arc<Contract>> = contracts
        .iter()
        .map(|c| {
            Arc::new(
                c.with_release(View::FullNative, Some(&Mechanism::None))
                    .unwrap(),
            )
        })
        .collect();
    let input = templates(&plain, &worlds);
    assert!(
        build(&plain, &worlds, &input.releases[0])
            .unwrap()
            .is_none()
    );
    // A template of other worlds is refused, not misaligned.
    let fewer = &worlds[..worlds.len() - 2];
    let error = build(&contracts, fewer, &input.releases[0]).unwrap_err();
    assert!(error.to_string().contains("differ from release"), "{error}");
}

#[test]
fn a_policy_with_more_plans_than_a_part_holds_spreads_over_parts() {
    // 255 classes and a review: 256 plan numbers, in two parts of 255 and 1 (padded to 2).
    let alphabets = [Alphabet {
        classes: 255,
        others: vec![Plan::Review],
    }];
    let slots = [
        Slot {
            key: 0,
            policy: 0,
            alphabet: 0,
            start: 0,
            size: 255,
        },
        Slot {
            key: 0,
            policy: 0,
            alphabet: 0,
            start: 255,
            size: 1,
        },
    ];
    let route = parts(
        &slots,
        &alphabets,
        &Some((0, Some(vec![Plan::Route { class: 254 }]))),
        7,
    );
    assert_eq!((route[0].choice, route[1].choice), (Some(254), None));
    assert_eq!((route[0].t_index, route[1].t_index), (7, 0));
    assert_eq!((route[0].class_count, route[1].class_count), (255, 2));
    let review = parts(&slots, &alphabets, &Some((0, Some(vec![Plan::Review]))), 7);
    assert_eq!((review[0].choice, review[1].choice), (None, Some(0)));
    // Another question's world, or an unreadable answer, carries nothing.
    for plans in [Some((1, Some(vec![Plan::Review]))), Some((0, None)), None] {
        let none = parts(&slots, &alphabets, &plans, 3);
        assert!(none.iter().all(|p| p.choice.is_none()), "{plans:?}");
    }
}

fn estimate(mean: f64, lower: f64, upper: f64) -> Estimate {
    Estimate {
        n: 10,
        n_pairs: 5,
        mean,
        lower,
        upper,
    }
}

fn recovery(accuracy: f64) -> Recovery {
    Recovery {
        accuracy: estimate(accuracy, accuracy - 0.05, accuracy + 0.05),
        log_loss: estimate(0.6, 0.5, 0.7),
        no_output_accuracy: estimate(0.5, 0.5, 0.5),
        gain: estimate(accuracy - 0.5, accuracy - 0.55, accuracy - 0.45),
    }
}

#[test]
fn the_reading_says_when_the_release_is_at_the_floor() {
    assert!(at_floor(&estimate(0.01, 0.005, 0.02)));
    assert!(at_floor(&estimate(0.08, -0.01, 0.17)));
    assert!(at_floor(&estimate(-0.03, -0.06, 0.0)));
    assert!(!at_floor(&estimate(0.08, 0.03, 0.13)));
    assert!(!at_floor(&estimate(TOLERANCE, 1e-3, 0.05)));
    // Below the floor with confidence: not at it, and said so.
    assert!(!at_floor(&estimate(-0.09, -0.146, -0.035)));
    assert!(below_floor(&estimate(-0.09, -0.146, -0.035)));
    assert!(!below_floor(&estimate(-0.03, -0.06, 0.0)));
    let summary = |difference: Estimate| Summary {
        release: RELEASE.to_string(),
        strict_release: STRICT.to_string(),
        tolerance: TOLERANCE,
        floor: recovery(0.7),
        strict: Some(recovery(0.7 + difference.mean)),
        full_native: Some(recovery(0.8)),
        strict_minus_floor: Some(difference),
        at_floor: Some(at_floor(&difference)),
        questions: BTreeMap::new(),
    };
    let below = summary(estimate(-0.09, -0.146, -0.035)).to_text();
    assert!(
        below.contains("9.0 points below the floor") && below.contains("holds it to the floor"),
        "{below}"
    );
    let at = summary(estimate(0.01, -0.02, 0.04)).to_text();
    assert!(
        at.contains("is at the floor") && at.contains("workflows themselves"),
        "{at}"
    );
    assert!(at.contains("full_native 0.800"), "{at}");
    let above = summary(estimate(0.09, 0.04, 0.14)).to_text();
    assert!(above.contains("9.0 points above the floor"), "{above}");
    assert!(!above.contains("workflows themselves"), "{above}");
}
