use super::*;
use std::cmp::Ordering;

use crate::workflow::{CostBase, Family, Posterior, Profile};
use learn::Response;

fn labels(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("C{i}")).collect()
}

fn spec4() -> Spec {
    Spec::standard(labels(4)).unwrap()
}

fn answer(pair: &str, p: &[f64], c: Option<f64>) -> TrainingAnswer {
    TrainingAnswer {
        pair_id: pair.to_string(),
        probabilities: p.to_vec(),
        confidence: c,
    }
}

#[test]
fn grid_size_is_exact_and_saturates() {
    assert_eq!(grid_size(4, 20), 1771);
    assert_eq!(grid_size(2, 5), 6);
    assert_eq!(grid_size(8, 6), 1716);
    assert_eq!(grid_size(255, 1), 255);
    assert_eq!(grid_size(255, 1_000_000), u128::MAX);
    assert_eq!(grid_size(30, 30), 59_132_290_782_430_712);
    let d = largest_denominator_within(4, 2_000_000).unwrap();
    assert!(grid_size(4, d) <= 2_000_000 && grid_size(4, d + 1) > 2_000_000);
    assert_eq!(largest_denominator_within(255, 10), None);
}

#[test]
fn too_large_grid_is_refused_with_a_suggestion() {
    let n = 12;
    let matrix = vec![vec![1.0; n]; n + 1];
    let base = CostBase {
        matrix,
        ..CostBase::authored_4()
    };
    let spec = Spec::new(
        labels(n),
        base,
        &Family::ALL,
        &Profile::ALL,
        Posterior::Native,
    )
    .unwrap();
    match build(&labels(n), 20, &spec, &[], String::new()) {
        Err(Error::GridTooLarge {
            grid_size: g,
            largest_fitting_denominator: Some(d),
            ..
        }) => {
            assert_eq!(g, grid_size(12, 20));
            assert!(grid_size(12, d) <= DEFAULT_GRID_LIMIT);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn grid_only_codebook_is_ordered_from_uniform() {
    let built = build(&labels(4), 20, &spec4(), &[], "src".into()).unwrap();
    let cb = &built.codebook;
    assert_eq!(cb.len(), 1771 * 3);
    assert_eq!(built.stats.grid_vectors, 1771);
    assert_eq!(
        cb.codewords()[0],
        Codeword {
            p: vec![0.25; 4],
            c: 0.0
        }
    );
    assert_eq!(
        cb.codewords()[1],
        Codeword {
            p: vec![0.25; 4],
            c: 0.5
        }
    );
    assert_eq!(cb.codewords()[3].c, 0.0);
    // Next ring: distance 2 * 0.05^2; lexicographically smallest p first.
    assert_eq!(cb.codewords()[3].p, vec![0.2, 0.25, 0.25, 0.3]);
    for w in cb.codewords().windows(2) {
        assert_eq!(codeword_order(&w[0], &w[1]), Ordering::Less);
    }
    assert_eq!(
        cb.codewords().last().unwrap(),
        &Codeword {
            p: vec![1.0, 0.0, 0.0, 0.0],
            c: 1.0
        }
    );
}

#[test]
fn training_natives_midpoints_and_duplicates() {
    let training = vec![
        answer("a", &[0.7, 0.1, 0.1, 0.1], Some(0.6)),
        answer("a", &[0.5, 0.3, 0.1, 0.1], Some(0.2)),
        answer("b", &[0.25, 0.25, 0.25, 0.25], Some(0.5)), // duplicate of a grid codeword
        answer("c", &[0.4, 0.4, 0.1, 0.1], None),
        answer("c", &[0.1, 0.1, 0.4, 0.4], None),
        answer("c", &[0.2, 0.2, 0.3, 0.3], Some(0.1)), // group of three: no midpoint
        // Off 1 by rounding: kept as sent, never renormalized.
        answer("d", &[0.5, 0.25, 0.26, 0.0], Some(0.3)),
    ];
    let built = build(&labels(4), 20, &spec4(), &training, "src".into()).unwrap();
    let s = &built.stats;
    assert_eq!(s.training_codewords, 1 + 1 + 1 + 3 + 3 + 1 + 1);
    assert_eq!((s.pairs, s.ignored_groups, s.midpoint_codewords), (1, 3, 1));
    let cws = built.codebook.codewords();
    let has = |p: &[f64], c: f64| cws.iter().any(|cw| cw.p == p && cw.c == c);
    assert!(has(&[0.7, 0.1, 0.1, 0.1], 0.6));
    assert!(has(&[0.6, 0.2, 0.1, 0.1], 0.4));
    assert!(has(&[0.4, 0.4, 0.1, 0.1], 1.0));
    assert!(has(&[0.5, 0.25, 0.26, 0.0], 0.3));
    // A vector that is no distribution is refused, not divided by its sum.
    let refused = build(
        &labels(4),
        20,
        &spec4(),
        &[answer("d", &[2.0, 1.0, 1.0, 0.0], Some(0.3))],
        "src".into(),
    );
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("probabilities sum to 4, not to 1 within 0.020")
    );
    assert_eq!(
        s.codewords + s.duplicates_removed,
        s.grid_codewords + s.training_codewords + s.midpoint_codewords
    );
    assert!(s.duplicates_removed >= 1);
    for w in cws.windows(2) {
        assert_eq!(codeword_order(&w[0], &w[1]), Ordering::Less);
    }
}

#[test]
fn invalid_training_answers_are_rejected_by_index() {
    for bad in [
        answer("x", &[0.5, 0.5], None),
        answer("x", &[f64::NAN, 0.5, 0.5, 0.0], None),
        answer("x", &[-0.1, 0.6, 0.5, 0.0], None),
        answer("x", &[0.0; 4], None),
        answer("x", &[0.25; 4], Some(f64::INFINITY)),
    ] {
        let training = vec![answer("y", &[0.25; 4], None), bad];
        match build(&labels(4), 4, &spec4(), &training, String::new()) {
            Err(Error::Training { index: 1, .. }) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        build(&labels(4), 0, &spec4(), &[], String::new()),
        Err(Error::Denominator)
    ));
    assert!(matches!(
        build(&labels(3), 4, &spec4(), &[], String::new()),
        Err(Error::ClassesMismatch { .. })
    ));
}

#[test]
fn artifact_is_deterministic_roundtrips_and_is_validated() {
    let training = vec![
        answer("a", &[0.7, 0.1, 0.1, 0.1], Some(0.6)),
        answer("a", &[0.1, 0.2, 0.3, 0.4], None),
    ];
    let a = build(&labels(4), 6, &spec4(), &training, "abc".into())
        .unwrap()
        .codebook;
    let b = build(&labels(4), 6, &spec4(), &training, "abc".into())
        .unwrap()
        .codebook;
    let bytes = a.to_json_bytes();
    assert_eq!(bytes, b.to_json_bytes());
    let back = Codebook::from_json(&bytes).unwrap();
    assert_eq!(back, a);
    assert_eq!(back.to_json_bytes(), bytes);
    back.check_matches(&spec4(), &labels(4)).unwrap();

    let mut v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["format"], FORMAT);
    assert_eq!(v["codeword_count"], serde_json::json!(a.len()));
    let tamper = |f: &dyn Fn(&mut Value)| {
        let mut t = v.clone();
        f(&mut t);
        Codebook::from_json(&serde_json::to_vec(&t).unwrap())
    };
    assert!(tamper(&|t| t["codewords"][3]["p"][0] = serde_json::json!(0.9)).is_err());
    assert!(tamper(&|t| t["codeword_count"] = serde_json::json!(1)).is_err());
    assert!(
        tamper(&|t| t["workflows"]["policies"][0]["c_wrong"] = serde_json::json!(11.0)).is_err()
    );
    assert!(tamper(&|t| t["format"] = serde_json::json!("other")).is_err());
    assert!(tamper(&|t| t["extra"] = serde_json::json!(1)).is_err());
    assert!(
        tamper(&|t| {
            let cws = t["codewords"].as_array_mut().unwrap();
            cws.swap(0, 5);
        })
        .is_err()
    );
    assert!(
        tamper(&|t| {
            let first = t["codewords"][0].clone();
            t["codewords"].as_array_mut().unwrap().insert(0, first);
            t["codeword_count"] = serde_json::json!(a.len() + 1);
        })
        .is_err()
    );
    v["source_sha256"] = serde_json::json!("other");
    assert!(Codebook::from_json(&serde_json::to_vec(&v).unwrap()).is_ok());
    assert!(Codebook::from_json(b"{").is_err());
}

#[test]
fn check_matches_refuses_other_workflows_or_classes() {
    let cb = build(&labels(4), 4, &spec4(), &[], String::new())
        .unwrap()
        .codebook;
    let other = Spec::new(
        labels(4),
        CostBase::authored_4(),
        &[Family::Selective],
        &Profile::ALL,
        Posterior::Native,
    )
    .unwrap();
    assert!(matches!(
        cb.check_matches(&other, &labels(4)),
        Err(Error::WorkflowsMismatch { .. })
    ));
    let renamed: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
    let spec_renamed = Spec::standard(renamed.clone()).unwrap();
    assert!(matches!(
        cb.check_matches(&spec_renamed, &renamed),
        Err(Error::ClassesMismatch { .. })
    ));
    assert_eq!(Codebook::from_json(&cb.to_json_bytes()).unwrap(), cb);
}

#[test]
fn a_pooled_codebook_serves_every_label_set_positionally() {
    let first: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
    let second: Vec<String> = ["W", "X", "Y", "Z"].iter().map(|s| s.to_string()).collect();
    let spec = Spec::standard(first.clone()).unwrap();
    let built = build(&first, 4, &spec, &[], "pooled".into()).unwrap();
    let pooled = built
        .codebook
        .with_other_class_sets(vec![second.clone()])
        .unwrap();
    let back = Codebook::from_json(&pooled.to_json_bytes()).unwrap();
    assert_eq!(back.class_sets().count(), 2);
    back.check_matches(&Spec::standard(second.clone()).unwrap(), &second)
        .unwrap();
    back.check_matches(&spec, &first).unwrap();
    // Other labels, or the same labels with other workflows, are refused.
    let third: Vec<String> = ["P", "Q", "R", "S"].iter().map(|s| s.to_string()).collect();
    assert!(
        back.check_matches(&Spec::standard(third.clone()).unwrap(), &third)
            .is_err()
    );
    let other = Spec::new(
        second.clone(),
        crate::workflow::CostBase::authored_4(),
        &crate::workflow::Family::ALL,
        &[crate::workflow::Profile::Authored],
        crate::workflow::Posterior::Native,
    )
    .unwrap();
    assert!(back.check_matches(&other, &second).is_err());
    // A single-set codebook's artifact has no extra key.
    assert!(
        !String::from_utf8(built_plain().to_json_bytes())
            .unwrap()
            .contains("other_class_sets")
    );
}

fn built_plain() -> Codebook {
    let classes: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
    let spec = Spec::standard(classes.clone()).unwrap();
    build(&classes, 2, &spec, &[], "plain".into())
        .unwrap()
        .codebook
}

fn responses(n: usize, count: usize, seed: u64) -> Vec<Response> {
    let mut rng = crate::rng::Rng::new(seed);
    (0..count)
        .map(|i| {
            let raw: Vec<f64> = (0..n).map(|_| rng.uniform().powi(2)).collect();
            let sum: f64 = raw.iter().sum();
            let p: Vec<f64> = raw.iter().map(|v| v / sum).collect();
            let choice = crate::wcpq::argmax_set(&p)[0];
            Response {
                pair_id: format!("pair{}", i / 2),
                native: crate::workflow::Release {
                    choice,
                    probabilities: Some(p),
                    confidence: Some(0.5),
                },
                public: Vec::new(),
            }
        })
        .collect()
}

/// The greedy coverage selection alone (the kept codewords in strict order).
fn coverage(budget: f64, max_codewords: usize, pair_weight: u32) -> Settings {
    Settings {
        budget,
        max_codewords,
        pair_weight,
        assignments: vec![Assignment::Coverage],
    }
}

fn strict4(d: u32) -> Codebook {
    build(&labels(4), d, &spec4(), &[], "grid".into())
        .unwrap()
        .codebook
}

#[test]
fn learning_is_deterministic_bounded_and_recorded() {
    let strict = strict4(10);
    let train = responses(4, 80, 3);
    let (a, stats) = learn(&strict, &spec4(), &train, &[], &coverage(0.2, 12, 4)).unwrap();
    let (b, _) = learn(&strict, &spec4(), &train, &[], &coverage(0.2, 12, 4)).unwrap();
    assert_eq!(a.to_json_bytes(), b.to_json_bytes());
    assert!(a.len() <= 12 && a.len() == stats.codewords);
    assert_eq!(
        a.learned(),
        Some(Learned {
            budget: 0.2,
            max_codewords: 12,
            pair_weight: 4,
            assignment: Assignment::Coverage,
        })
    );
    // Kept codewords stay in strict order and come from the pool.
    let pool = strict.codewords();
    let mut last = None;
    for cw in a.codewords() {
        let at = pool.iter().position(|x| x == cw).unwrap();
        assert!(last.is_none_or(|l| at > l));
        last = Some(at);
    }
    // The artifact records α, K and the pair weight, and reads back equal.
    let text = String::from_utf8(a.to_json_bytes()).unwrap();
    assert!(text.contains("\"budget\":0.2,\"max_codewords\":12,\"pair_weight\":4"));
    assert_eq!(Codebook::from_json(text.as_bytes()).unwrap(), a);
    // A strict codebook's bytes do not mention them (backward compatible).
    let plain = String::from_utf8(strict.to_json_bytes()).unwrap();
    assert!(!plain.contains("budget") && !plain.contains("max_codewords"));
    assert_eq!(
        Codebook::from_json(plain.as_bytes()).unwrap().learned(),
        None
    );
    // Partial or inconsistent records are refused.
    for bad in [
        text.replace(",\"max_codewords\":12", ""),
        text.replace("\"budget\":0.2", "\"budget\":-1.0"),
        text.replace("\"max_codewords\":12", "\"max_codewords\":1"),
    ] {
        assert!(Codebook::from_json(bad.as_bytes()).is_err(), "{bad:.200}");
    }
}

#[test]
fn greedy_coverage_covers_what_the_bounded_mapper_releases() {
    let strict = strict4(10);
    let spec = spec4();
    let train = responses(4, 60, 9);
    let (learned, stats) = learn(&strict, &spec, &train, &[], &coverage(0.04, 40, 4)).unwrap();
    assert!(stats.covered_responses > 0);
    let mapper = crate::wcpq::Mapper::with_admissibility(
        learned,
        spec.clone(),
        crate::wcpq::Admissibility::Budget(0.04),
    )
    .unwrap();
    let identity = |r: &crate::workflow::Release| Some(r.clone());
    let covered = train
        .iter()
        .filter(|r| {
            matches!(
                mapper.map(&r.native, &serde_json::Value::Null, &identity),
                crate::wcpq::Outcome::Covered { .. }
            )
        })
        .count();
    assert_eq!(covered, stats.covered_responses);
    // More codewords never cover fewer responses; K = 1 keeps one codeword.
    let (one, one_stats) = learn(&strict, &spec, &train, &[], &coverage(0.04, 1, 4)).unwrap();
    assert_eq!(one.len(), 1);
    assert!(one_stats.covered_responses <= stats.covered_responses);
    // A larger budget covers at least as many with the same K.
    let (_, wide) = learn(&strict, &spec, &train, &[], &coverage(0.2, 40, 4)).unwrap();
    assert!(wide.covered_responses >= stats.covered_responses);
}

#[test]
fn the_first_pick_maximizes_responses_plus_weighted_pairs() {
    // Two pairs; a pair weight large enough makes the first pick a codeword covering a pair.
    let strict = strict4(4);
    let spec = spec4();
    let train = responses(4, 8, 21);
    for weight in [0, 4] {
        let (one, _) = learn(&strict, &spec, &train, &[], &coverage(0.2, 1, weight)).unwrap();
        // Recompute every candidate's gain independently and check the pick is the first best.
        let gain = |cw: &Codeword| {
            let admits = |r: &Response| {
                crate::wcpq::argmax_set(&cw.p).contains(&r.native.choice) && {
                    let z = crate::workflow::Release {
                        choice: r.native.choice,
                        probabilities: Some(cw.p.clone()),
                        confidence: Some(cw.c),
                    };
                    spec.within_budget(
                        &spec.plans_with_public(&r.native, &[]),
                        &spec.plans_with_public(&z, &[]),
                        0.2,
                    )
                }
            };
            let covered = train.iter().filter(|r| admits(r)).count() as u64;
            let pairs = train
                .chunks(2)
                .filter(|p| {
                    p[0].native.choice == p[1].native.choice && admits(&p[0]) && admits(&p[1])
                })
                .count() as u64;
            covered + u64::from(weight) * pairs
        };
        let best = strict.codewords().iter().map(gain).max().unwrap();
        let first = strict
            .codewords()
            .iter()
            .find(|cw| gain(cw) == best)
            .unwrap();
        assert_eq!(&one.codewords()[0], first, "pair weight {weight}");
    }
}

#[test]
fn learning_refuses_a_bad_budget_or_k() {
    let strict = strict4(4);
    let train = responses(4, 4, 1);
    assert!(learn(&strict, &spec4(), &train, &[], &coverage(-0.5, 4, 4)).is_err());
    assert!(learn(&strict, &spec4(), &train, &[], &coverage(0.1, 0, 4)).is_err());
    assert!(learn(&strict, &spec4(), &[], &[], &coverage(0.1, 4, 4)).is_err());
}

#[test]
fn questions_pool_only_with_the_same_class_count_and_workflows_up_to_labels() {
    let renamed: Vec<String> = ["W", "X", "Y", "Z"].iter().map(|s| s.to_string()).collect();
    let renamed = Spec::standard(renamed).unwrap();
    assert!(Codebook::can_pool(&spec4(), &renamed));
    assert!(Codebook::can_pool(&renamed, &spec4()));
    let selective_only = Spec::new(
        labels(4),
        CostBase::authored_4(),
        &[Family::Selective],
        &Profile::ALL,
        Posterior::Native,
    )
    .unwrap();
    assert!(!Codebook::can_pool(&spec4(), &selective_only));
    let raw: crate::workflow::RawWorkflows = serde_json::from_value(serde_json::json!({
        "families": ["selective", "clarification", "asymmetric"],
        "profiles": ["authored", "review_half", "review_double", "check_quarter", "error_double",
                     "asymmetric_class0_double"],
        "costs": {"c_wrong": 10, "c_review": 2, "c_check": 0.4,
                  "matrix": [[0, 1, 1], [1, 0, 1], [1, 1, 0], [0.5, 0.5, 0.5]]}
    }))
    .unwrap();
    let three = Spec::from_raw(&raw, &labels(3), std::path::Path::new("."), &|_| {
        Err(std::io::ErrorKind::NotFound.into())
    })
    .unwrap();
    assert!(!Codebook::can_pool(&spec4(), &three));
    // What can pool is what one pooled codebook serves.
    let cb = build(&labels(4), 4, &spec4(), &[], String::new())
        .unwrap()
        .codebook
        .with_other_class_sets(vec![renamed.classes().to_vec()])
        .unwrap();
    assert!(cb.check_matches(&renamed, renamed.classes()).is_ok());
}

/// Counterfactual-like pairs: the two members share a base vector, each with its own noise.
fn paired_responses(count: usize, seed: u64) -> Vec<Response> {
    let mut rng = crate::rng::Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..count / 2 {
        let base: Vec<f64> = (0..4).map(|_| rng.uniform().powi(2)).collect();
        for _ in 0..2 {
            let raw: Vec<f64> = base.iter().map(|b| b + 0.15 * rng.uniform()).collect();
            let sum: f64 = raw.iter().sum();
            let p: Vec<f64> = raw.iter().map(|v| v / sum).collect();
            out.push(Response {
                pair_id: format!("pair{i}"),
                native: crate::workflow::Release {
                    choice: crate::wcpq::argmax_set(&p)[0],
                    probabilities: Some(p),
                    confidence: Some(0.5),
                },
                public: Vec::new(),
            });
        }
    }
    out
}

fn priority(budget: f64, max_codewords: usize, split_penalty: u32) -> Settings {
    Settings {
        assignments: vec![Assignment::Priority { split_penalty }],
        ..Settings::new(budget, max_codewords)
    }
}

/// Pairs of the training responses the mapper releases as the same codeword.
fn mapped_collisions(mapper: &crate::wcpq::Mapper, responses: &[Response]) -> usize {
    let identity = |r: &crate::workflow::Release| Some(r.clone());
    let released: Vec<Option<(crate::wcpq::Stage, usize)>> = responses
        .iter()
        .map(
            |r| match mapper.map(&r.native, &serde_json::Value::Null, &identity) {
                crate::wcpq::Outcome::Covered {
                    codeword_index,
                    stage,
                    ..
                } => Some((stage, codeword_index)),
                crate::wcpq::Outcome::Fallback(_) => None,
            },
        )
        .collect();
    responses
        .chunks(2)
        .zip(released.chunks(2))
        .filter(|(pair, out)| {
            pair.len() == 2
                && pair[0].native.choice == pair[1].native.choice
                && matches!(out[0], Some((crate::wcpq::Stage::Compact, _)))
                && out[0] == out[1]
        })
        .count()
}

#[test]
fn a_priority_assignment_keeps_its_pick_order_and_the_mapper_follows_it() {
    let strict = strict4(10);
    let spec = spec4();
    let train = responses(4, 120, 5);
    let (learned, stats) = learn(&strict, &spec, &train, &[], &priority(0.2, 24, 1)).unwrap();
    assert_eq!(
        stats.assignment,
        Some(Assignment::Priority { split_penalty: 1 })
    );
    let text = String::from_utf8(learned.to_json_bytes()).unwrap();
    assert!(
        text.contains("\"pair_weight\":4,\"order\":\"priority\",\"split_penalty\":1,"),
        "{text:.300}"
    );
    assert_eq!(Codebook::from_json(text.as_bytes()).unwrap(), learned);
    // The file keeps the pick order, which is not the strict order here.
    let pool = strict.codewords();
    let positions: Vec<usize> = learned
        .codewords()
        .iter()
        .map(|cw| pool.iter().position(|x| x == cw).unwrap())
        .collect();
    assert!(positions.windows(2).any(|w| w[0] > w[1]), "{positions:?}");
    // The mapper releases the first codeword of the file that admits the answer, so the pairs
    // it makes collide are the ones the learning counted.
    let mapper = crate::wcpq::Mapper::with_admissibility(
        learned.clone(),
        spec.clone(),
        crate::wcpq::Admissibility::Budget(0.2),
    )
    .unwrap();
    assert!(stats.collided_pairs > 0);
    assert_eq!(mapped_collisions(&mapper, &train), stats.collided_pairs);
    // Inconsistent records are refused: an order without its penalty, a duplicate codeword,
    // an order on a strict codebook.
    let first = serde_json::to_string(&learned.codewords()[0]).unwrap();
    let duplicated = text
        .replacen(&first, &format!("{first},{first}"), 1)
        .replace(
            &format!("\"codeword_count\":{}", learned.len()),
            &format!("\"codeword_count\":{}", learned.len() + 1),
        );
    for bad in [
        text.replace(",\"split_penalty\":1", ""),
        duplicated,
        String::from_utf8(strict.to_json_bytes()).unwrap().replace(
            "\"codeword_count\"",
            "\"order\":\"priority\",\"split_penalty\":1,\"codeword_count\"",
        ),
    ] {
        assert!(Codebook::from_json(bad.as_bytes()).is_err(), "{bad:.300}");
    }
}

#[test]
fn the_validation_split_chooses_the_assignment() {
    let strict = strict4(10);
    let spec = spec4();
    let train = paired_responses(160, 11);
    let validation = paired_responses(80, 12);
    let (learned, stats) =
        learn(&strict, &spec, &train, &validation, &Settings::new(0.2, 24)).unwrap();
    assert_eq!(stats.trials.len(), Assignment::CHOICES.len());
    assert_eq!(stats.validation_responses, 80);
    // The incumbent (the first) is kept unless a later one is clearly closer.
    let mut kept = &stats.trials[0];
    for trial in &stats.trials[1..] {
        if (trial.pair_distance_micro as f64) < CLEAR_IMPROVEMENT * kept.pair_distance_micro as f64
            && trial.covered_responses >= kept.covered_responses
        {
            kept = trial;
        }
    }
    assert_eq!(stats.assignment, Some(kept.assignment));
    assert_eq!(learned.learned().unwrap().assignment, kept.assignment);
    // Measured again through the mapper on the validation responses.
    let mapper = crate::wcpq::Mapper::with_admissibility(
        learned,
        spec.clone(),
        crate::wcpq::Admissibility::Budget(0.2),
    )
    .unwrap();
    assert_eq!(mapped_collisions(&mapper, &validation), kept.collided_pairs);
}

/// A small strict codebook over four classes, with training answers.
fn with_training() -> Codebook {
    let training = vec![
        answer("a", &[0.7, 0.1, 0.1, 0.1], Some(0.6)),
        answer("a", &[0.1, 0.2, 0.3, 0.4], None),
    ];
    build(&labels(4), 6, &spec4(), &training, "abc".into())
        .unwrap()
        .codebook
}

/// `value` with the keys of every object in sorted order (as `jq -S` writes it).
fn sorted_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, item)| (key.clone(), sorted_keys(item)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted_keys).collect()),
        other => other.clone(),
    }
}

/// What a mapper over `codebook` releases for a spread of answers.
fn releases(codebook: Codebook) -> Vec<crate::wcpq::Outcome> {
    let mapper = crate::wcpq::Mapper::new(codebook, spec4()).unwrap();
    let same = |release: &crate::workflow::Release| Some(release.clone());
    responses(4, 60, 5)
        .iter()
        .map(|r| mapper.map(&r.native, &serde_json::json!({}), &same))
        .collect()
}

#[test]
fn a_codebook_records_the_canonical_hash_of_its_workflows() {
    let codebook = with_training();
    assert_eq!(codebook.workflows_sha256(), spec4().sha256());
    assert_eq!(
        codebook.workflows_sha256(),
        workflow::canonical_sha256(&spec4().canonical_json())
    );
    assert_ne!(
        codebook.workflows_sha256(),
        workflow::legacy_sha256(codebook.workflows())
    );
}

#[test]
fn a_codebook_with_every_key_re_sorted_loads_and_maps_the_same() {
    let codebook = with_training();
    let bytes = codebook.to_json_bytes();
    let value: Value = serde_json::from_slice(&bytes).unwrap();
    let expected = releases(codebook.clone());
    assert!(
        expected
            .iter()
            .any(|o| matches!(o, crate::wcpq::Outcome::Covered { .. }))
    );
    // Keys sorted; then also the canonical form (integral numbers spelled as integers).
    let mut canonical = Vec::new();
    crate::wire::canonical_json(&value, &mut canonical);
    for resorted in [serde_json::to_vec(&sorted_keys(&value)).unwrap(), canonical] {
        assert_ne!(resorted, bytes);
        let back = Codebook::from_json(&resorted).unwrap();
        back.check_matches(&spec4(), &labels(4)).unwrap();
        assert_eq!(back.workflows_sha256(), codebook.workflows_sha256());
        assert_eq!(back.codewords(), codebook.codewords());
        assert!(crate::wire::same_json(
            back.workflows(),
            codebook.workflows()
        ));
        assert_eq!(releases(back.clone()), expected);
        // Written again, it loads again.
        assert_eq!(Codebook::from_json(&back.to_json_bytes()).unwrap(), back);
    }
}

#[test]
fn a_codebook_written_with_the_legacy_hash_still_loads_in_its_written_order() {
    let codebook = with_training();
    let mut legacy: Value = serde_json::from_slice(&codebook.to_json_bytes()).unwrap();
    legacy["workflows_sha256"] = serde_json::json!(workflow::legacy_sha256(&legacy["workflows"]));
    let bytes = serde_json::to_vec(&legacy).unwrap();
    let back = Codebook::from_json(&bytes).unwrap();
    back.check_matches(&spec4(), &labels(4)).unwrap();
    assert_eq!(
        back.workflows_sha256(),
        workflow::legacy_sha256(codebook.workflows())
    );
    assert_eq!(releases(back), releases(codebook));
    // The legacy hash is of the bytes as written: re-sorted, such a file needs a rebuild.
    let resorted = serde_json::to_vec(&sorted_keys(&legacy)).unwrap();
    assert!(matches!(
        Codebook::from_json(&resorted),
        Err(Error::Invalid { field, .. }) if field == "workflows_sha256"
    ));
}

#[test]
fn a_codebook_with_a_changed_workflow_is_refused() {
    let codebook = with_training();
    let value: Value = serde_json::from_slice(&codebook.to_json_bytes()).unwrap();
    let changed = |v: &mut Value| v["workflows"]["base_costs"]["c_check"] = serde_json::json!(0.3);
    // The definition changed under either recorded hash: refused on load.
    for recorded in [
        value["workflows_sha256"].clone(),
        serde_json::json!(workflow::legacy_sha256(&value["workflows"])),
    ] {
        let mut v = value.clone();
        v["workflows_sha256"] = recorded;
        changed(&mut v);
        assert!(matches!(
            Codebook::from_json(&serde_json::to_vec(&v).unwrap()),
            Err(Error::Invalid { field, .. }) if field == "workflows_sha256"
        ));
    }
    // Changed with its hash recomputed, it loads, and a contract with the original workflows
    // refuses it.
    let mut v = value.clone();
    changed(&mut v);
    v["workflows_sha256"] = serde_json::json!(workflow::canonical_sha256(&v["workflows"]));
    let other = Codebook::from_json(&serde_json::to_vec(&v).unwrap()).unwrap();
    match other.check_matches(&spec4(), &labels(4)) {
        Err(Error::WorkflowsMismatch { codebook, contract }) => {
            assert_eq!(codebook, other.workflows_sha256());
            assert_eq!(contract, spec4().sha256());
        }
        result => panic!("{result:?}"),
    }
}

#[test]
fn every_codebook_shipped_in_the_repository_still_loads() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "target" && name != "node_modules" {
                    dirs.push(path);
                }
            } else if name.ends_with(".json") {
                let bytes = std::fs::read(&path).unwrap();
                if bytes.windows(FORMAT.len()).any(|w| w == FORMAT.as_bytes()) {
                    let codebook = Codebook::from_json(&bytes)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    assert!(!codebook.is_empty());
                    found.push(path);
                }
            }
        }
    }
    // config/codebooks/: the demo's and TUPLE-Bench's (their contracts load them in the
    // proxy's configuration tests).
    assert!(found.len() >= 2, "{found:?}");
}

mod bound {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    /// A learned priority codebook (α = 0.2, K = 16) with its strict stage, and the strict
    /// mapper of the same grid.
    fn mappers() -> &'static (crate::wcpq::Mapper, crate::wcpq::Mapper) {
        static MAPPERS: OnceLock<(crate::wcpq::Mapper, crate::wcpq::Mapper)> = OnceLock::new();
        MAPPERS.get_or_init(|| {
            let strict = strict4(10);
            let train = responses(4, 200, 17);
            let (learned, _) =
                learn(&strict, &spec4(), &train, &[], &priority(0.2, 16, 1)).unwrap();
            (
                crate::wcpq::Mapper::with_admissibility(
                    learned,
                    spec4(),
                    crate::wcpq::Admissibility::Budget(0.2),
                )
                .unwrap(),
                crate::wcpq::Mapper::new(strict, spec4()).unwrap(),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

        /// A priority codebook's releases, compact or through its strict stage, never raise
        /// any workflow's realized cost by more than α·κ for any truth; an answer no compact
        /// codeword admits gets exactly the strict mapper's release.
        #[test]
        fn priority_releases_stay_within_alpha_kappa(
            raw in prop::collection::vec(0.0f64..1.0, 4),
            confidence in prop::option::of(0.0f64..=1.0),
        ) {
            let sum: f64 = raw.iter().sum();
            prop_assume!(sum > 1e-6);
            let p: Vec<f64> = raw.iter().map(|v| v / sum).collect();
            let native = crate::workflow::Release {
                choice: crate::wcpq::argmax_set(&p)[0],
                probabilities: Some(p),
                confidence,
            };
            let (bounded, strict) = mappers();
            let spec = bounded.spec();
            let identity = |r: &crate::workflow::Release| Some(r.clone());
            let state = serde_json::Value::Null;
            match bounded.map(&native, &state, &identity) {
                crate::wcpq::Outcome::Covered { release, stage, .. } => {
                    let before = spec.plans_with_public(&native, &[]);
                    let after = spec.plans_with_public(&release, &[]);
                    for (j, policy) in spec.policies().iter().enumerate() {
                        for t in 0..spec.class_count() {
                            let rise = policy.realized_cost(&after[j], t)
                                - policy.realized_cost(&before[j], t);
                            prop_assert!(rise <= 0.2 * policy.kappa() + 1e-9, "{j} {t} {rise}");
                        }
                    }
                    if stage == crate::wcpq::Stage::Strict {
                        let crate::wcpq::Outcome::Covered { release: own, .. } =
                            strict.map(&native, &state, &identity)
                        else {
                            panic!("the strict stage covered what the strict mapper did not");
                        };
                        prop_assert_eq!(own, release);
                    }
                }
                crate::wcpq::Outcome::Fallback(_) => {
                    prop_assert!(matches!(
                        strict.map(&native, &state, &identity),
                        crate::wcpq::Outcome::Fallback(_)
                    ));
                }
            }
        }
    }
}
