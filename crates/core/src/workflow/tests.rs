use std::path::Path;

use serde_json::json;

use super::*;
use crate::rng::Rng;

fn labels(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("C{i}")).collect()
}

fn policy(family: Family, profile: Profile) -> Policy {
    Policy {
        family,
        profile,
        costs: CostBase::authored_4().apply(profile),
    }
}

fn release(choice: usize, p: &[f64], c: Option<f64>) -> Release {
    Release {
        choice,
        probabilities: Some(p.to_vec()),
        confidence: c,
    }
}

#[test]
fn profiles_change_exactly_the_documented_costs() {
    let base = CostBase::authored_4();
    let half = base.apply(Profile::ReviewHalf);
    assert_eq!(half.c_review, 1.0);
    assert_eq!(half.matrix[4], vec![0.9; 4]);
    assert_eq!(half.matrix[0], base.matrix[0]);
    let double = base.apply(Profile::ReviewDouble);
    assert_eq!((double.c_review, double.matrix[4][2]), (4.0, 3.6));
    assert_eq!(base.apply(Profile::CheckQuarter).c_check, 0.1);
    let err = base.apply(Profile::ErrorDouble);
    assert_eq!(err.c_wrong, 20.0);
    assert_eq!(err.matrix[0], vec![0.0, 8.0, 20.0, 24.0]);
    assert_eq!(err.matrix[4], base.matrix[4]);
    let asym = base.apply(Profile::AsymmetricClass0Double);
    assert_eq!(asym.matrix[1], vec![10.0, 0.0, 9.0, 10.0]);
    assert_eq!(asym.matrix[4][0], 1.8);
    assert_eq!(asym.c_wrong, 10.0);
    assert_eq!(base.apply(Profile::Authored), base);
}

#[test]
fn standard_spec_has_18_policies_family_major() {
    let spec = Spec::standard(labels(4)).unwrap();
    let order: Vec<(Family, Profile)> = spec
        .policies()
        .iter()
        .map(|p| (p.family, p.profile))
        .collect();
    assert_eq!(order.len(), 18);
    assert_eq!(order[0], (Family::Selective, Profile::Authored));
    assert_eq!(
        order[5],
        (Family::Selective, Profile::AsymmetricClass0Double)
    );
    assert_eq!(order[6], (Family::Clarification, Profile::Authored));
    assert_eq!(
        order[17],
        (Family::Asymmetric, Profile::AsymmetricClass0Double)
    );
    assert!(Spec::standard(labels(3)).is_err());
}

#[test]
fn selective_ties_go_to_the_earliest_candidate() {
    let p = policy(Family::Selective, Profile::Authored);
    // 10 * (1 - 0.8) is 2 up to rounding: tied with review, the route comes first.
    assert_eq!(p.decide(&[0.8, 0.2, 0.0, 0.0]), Plan::Route { class: 0 });
    assert_eq!(p.decide(&[0.79, 0.21, 0.0, 0.0]), Plan::Review);
    assert_eq!(p.decide(&[0.1, 0.45, 0.45, 0.0]), Plan::Review);
    assert_eq!(p.decide(&[0.05, 0.05, 0.9, 0.0]), Plan::Route { class: 2 });
    // Two routes tied within 1e-9: the earlier class wins.
    assert_eq!(
        p.decide(&[0.0, 0.9, 0.9 + 1e-11, 0.0]),
        Plan::Route { class: 1 }
    );
    assert_eq!(p.realized_cost(&Plan::Route { class: 2 }, 2), 0.0);
    assert_eq!(p.realized_cost(&Plan::Route { class: 2 }, 1), 10.0);
    assert_eq!(p.realized_cost(&Plan::Review, 1), 2.0);
}

#[test]
fn clarification_records_both_branches() {
    let p = policy(Family::Clarification, Profile::Authored);
    // check 0 and check 1 both cost 0.4 + 10 * 0.1: check 0 is earlier.
    let plan = p.decide(&[0.5, 0.4, 0.05, 0.05]);
    assert_eq!(
        plan,
        Plan::Check {
            target: 0,
            yes: 0,
            no: 1
        }
    );
    assert_eq!(
        plan.display(&labels(4)).to_string(),
        "check(C0, yes->C0, no->C1)"
    );
    assert_eq!(plan.to_string(), "check(0, yes->0, no->1)");
    assert_eq!(p.decide(&[0.97, 0.01, 0.01, 0.01]), Plan::Now { class: 0 });
    assert!((p.realized_cost(&plan, 0) - 0.4).abs() < 1e-12);
    assert!((p.realized_cost(&plan, 1) - 0.4).abs() < 1e-12);
    assert!((p.realized_cost(&plan, 3) - 10.4).abs() < 1e-12);
    assert_eq!(p.realized_cost(&Plan::Now { class: 0 }, 1), 10.0);
    // A plan of another family has no cost in this workflow.
    assert!(p.realized_cost(&Plan::Review, 0).is_nan());
}

#[test]
fn runner_up_matches_the_naive_definition() {
    let mut rng = Rng::new(11);
    // The naive definition: the earliest t != k whose q is the largest of the others, exactly.
    let naive = |q: &[f64], k: usize| {
        let max = (0..q.len())
            .filter(|&t| t != k)
            .map(|t| q[t])
            .fold(f64::NEG_INFINITY, f64::max);
        (0..q.len()).find(|&t| t != k && q[t] == max).unwrap()
    };
    for _ in 0..2000 {
        let n = 2 + rng.below(7);
        // Few distinct values so that exact and near ties are frequent.
        let q: Vec<f64> = (0..n)
            .map(|_| rng.below(4) as f64 * 0.25 + if rng.below(5) == 0 { 1e-10 } else { 0.0 })
            .collect();
        let p = policy(Family::Clarification, Profile::Authored);
        if let Plan::Check { target, no, .. } = p.decide(&q) {
            assert_eq!(usize::from(no), naive(&q, usize::from(target)), "{q:?}");
        }
        for k in 0..n {
            let runner = plan::tests_support::best_except(&q, k);
            assert_eq!(runner, naive(&q, k), "{q:?} k={k}");
        }
    }
}

/// A q larger by less than the costs' tie tolerance is still the larger one: the tolerance
/// is the expected costs' (`docs/wcpq-rules.md`, section 3), and t_no(k) is "the class with
/// the largest q" (a near tie of q would give the check another continuation than an
/// implementation of the rules' text).
#[test]
fn the_runner_up_is_the_largest_q_not_one_within_the_cost_tolerance() {
    let q = [0.6, 0.199_999_999_999, 0.200_000_000_001];
    assert_eq!(plan::tests_support::best_except(&q, 0), 2);
    assert_eq!(plan::tests_support::best_except(&q, 2), 0);
    // An exact tie goes to the earliest.
    let q = [0.6, 0.2, 0.2];
    assert_eq!(plan::tests_support::best_except(&q, 0), 1);
    let p = policy(Family::Clarification, Profile::CheckQuarter);
    assert_eq!(
        p.decide(&[0.6, 0.199_999_999_999, 0.200_000_000_001]),
        Plan::Check {
            target: 0,
            yes: 0,
            no: 2
        }
    );
}

#[test]
fn asymmetric_uses_the_matrix_and_inspection_row() {
    let p = policy(Family::Asymmetric, Profile::Authored);
    assert_eq!(p.decide(&[1.0, 0.0, 0.0, 0.0]), Plan::Act { action: 0 });
    assert_eq!(p.decide(&[0.25; 4]), Plan::Act { action: 4 });
    assert_eq!(
        Plan::Act { action: 4 }.display(&labels(4)).to_string(),
        "act(inspection)"
    );
    assert_eq!(p.realized_cost(&Plan::Act { action: 0 }, 3), 12.0);
    assert_eq!(p.realized_cost(&Plan::Act { action: 4 }, 3), 1.8);
    assert!(p.realized_cost(&Plan::Act { action: 9 }, 0).is_nan());
}

#[test]
fn native_posterior_smooths_and_falls_back_to_one_hot() {
    let spec = Spec::standard(labels(4)).unwrap();
    let q = spec.posterior(&release(1, &[0.0, 1.0, 0.0, 0.0], None), &json!({}));
    let expected_hot = (1.0 + 1e-8) / (1.0 + 4e-8);
    assert!((q[1] - expected_hot).abs() < 1e-15);
    let none = Release {
        choice: 1,
        probabilities: None,
        confidence: Some(0.3),
    };
    assert_eq!(spec.posterior(&none, &json!({})), q);
    // Odd inputs never panic.
    let odd = Release {
        choice: 99,
        probabilities: Some(vec![f64::NAN, -1.0]),
        confidence: Some(f64::INFINITY),
    };
    assert_eq!(spec.plans(&odd, &json!(null)).len(), 18);
    assert!(spec.check_release(&odd).is_err());
    assert_eq!(spec.check_release(&none), Ok(()));
    let nan = release(0, &[f64::NAN; 4], None);
    assert_eq!(spec.check_release(&nan), Err(InvalidRelease::Probability));
    assert_eq!(spec.plans(&nan, &json!(null)).len(), 18);
}

#[test]
fn scales_to_255_classes_and_two_classes() {
    for n in [2usize, 3, 17, 255] {
        let matrix: Vec<Vec<f64>> = (0..=n)
            .map(|a| {
                (0..n)
                    .map(|t| {
                        if a == t {
                            0.0
                        } else {
                            1.0 + ((a + t) % 5) as f64
                        }
                    })
                    .collect()
            })
            .collect();
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
        let mut p = vec![0.0; n];
        p[n - 1] = 0.9;
        p[0] = 0.1;
        let plans = spec.plans(&release(n - 1, &p, Some(0.5)), &json!({}));
        assert_eq!(plans.len(), 18);
        assert_eq!(
            plans[0],
            Plan::Route {
                class: (n - 1) as u16
            }
        );
        for t in 0..n {
            assert!(spec.realized_costs(&plans, t).iter().all(|c| c.is_finite()));
        }
    }
    assert!(
        Spec::new(
            labels(256),
            CostBase::authored_4(),
            &Family::ALL,
            &Profile::ALL,
            Posterior::Native
        )
        .is_err()
    );
}

/// A complete declaration (every family and profile, the authored costs and 4-class matrix)
/// with `v`'s keys over it (`costs` key by key); `null` removes a key.
fn raw(v: serde_json::Value) -> RawWorkflows {
    let mut base = json!({
        "families": ["selective", "clarification", "asymmetric"],
        "profiles": ["authored", "review_half", "review_double", "check_quarter", "error_double",
                     "asymmetric_class0_double"],
        "costs": {"c_wrong": 10.0, "c_review": 2.0, "c_check": 0.4,
                  "matrix": CostBase::authored_4().matrix},
    });
    for (key, value) in v.as_object().cloned().unwrap_or_default() {
        match (key.as_str(), value) {
            ("costs", serde_json::Value::Object(costs)) => {
                for (k, c) in costs {
                    if c.is_null() {
                        base["costs"].as_object_mut().unwrap().remove(&k);
                    } else {
                        base["costs"][k.as_str()] = c;
                    }
                }
            }
            (_, serde_json::Value::Null) => {
                base.as_object_mut().unwrap().remove(&key);
            }
            (_, value) => base[key.as_str()] = value,
        }
    }
    serde_json::from_value(base).unwrap()
}

#[test]
fn workflows_are_declared_in_full_or_by_the_papers_preset() {
    let dir = Path::new(".");
    let error = Spec::from_raw(&RawWorkflows::default(), &labels(4), dir, &fs_read)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("missing: families, profiles, costs.c_wrong, costs.c_review, costs.c_check, costs.matrix")
            && error.contains("preset = \"tuple-bench\"")
            && error.contains("5 rows of 4 costs"),
        "{error}"
    );
    let one_missing = Spec::from_raw(
        &raw(json!({"costs": {"c_check": null}})),
        &labels(4),
        dir,
        &fs_read,
    );
    assert_eq!(key_of(one_missing.unwrap_err()), "costs.c_check");
    let preset: RawWorkflows = serde_json::from_value(json!({"preset": "tuple-bench"})).unwrap();
    let spec = Spec::from_raw(&preset, &labels(4), dir, &fs_read).unwrap();
    assert_eq!(spec, Spec::standard(labels(4)).unwrap());
    // The complete declaration of the same model is the same spec.
    assert_eq!(
        Spec::from_raw(&raw(json!({})), &labels(4), dir, &fs_read).unwrap(),
        spec
    );
    for (bad, n) in [
        (json!({"preset": "tuple-bench"}), 3),
        (
            json!({"preset": "tuple-bench", "profiles": ["authored"]}),
            4,
        ),
        (json!({"preset": "other"}), 4),
    ] {
        let raw: RawWorkflows = serde_json::from_value(bad.clone()).unwrap();
        assert_eq!(
            key_of(Spec::from_raw(&raw, &labels(n), dir, &fs_read).unwrap_err()),
            "preset",
            "{bad}"
        );
    }
}

fn key_of(err: Error) -> String {
    match err {
        Error::Invalid { key, .. } => key,
        other => other.to_string(),
    }
}

#[test]
fn from_raw_defaults_and_errors_name_the_key() {
    let dir = Path::new(".");
    let spec = Spec::from_raw(&raw(json!({})), &labels(4), dir, &fs_read).unwrap();
    assert_eq!(spec, Spec::standard(labels(4)).unwrap());
    let err = |v: serde_json::Value, n: usize| {
        key_of(Spec::from_raw(&raw(v), &labels(n), dir, &fs_read).unwrap_err())
    };
    assert_eq!(err(json!({}), 3), "costs.matrix");
    assert_eq!(
        err(json!({"costs": {"matrix": [[0.0, 1.0], [1.0, 0.0]]}}), 2),
        "costs.matrix"
    );
    assert_eq!(
        err(
            json!({"costs": {"matrix": [[0.0, 1.0], [1.0], [1.0, 1.0]]}}),
            2
        ),
        "costs.matrix[1]"
    );
    assert_eq!(
        err(
            json!({"costs": {"matrix": [[0.0, 1.0], [1.0, -1.0], [1.0, 1.0]]}}),
            2
        ),
        "costs.matrix[1][1]"
    );
    assert_eq!(err(json!({"costs": {"c_wrong": -1.0}}), 4), "costs.c_wrong");
    assert_eq!(
        err(json!({"families": ["selective", "bogus"]}), 4),
        "families[1]"
    );
    assert_eq!(
        err(json!({"profiles": ["authored", "authored"]}), 4),
        "profiles[1]"
    );
    assert_eq!(err(json!({"profiles": []}), 4), "profiles");
    assert_eq!(err(json!({"posterior": "magic"}), 4), "posterior");
    assert_eq!(
        err(
            json!({"posterior": {"kind": "prior", "probabilities": [0.5, 0.5, 0.5, 0.5]}}),
            4
        ),
        "posterior.probabilities"
    );
    assert_eq!(
        err(json!({"posterior": {"kind": "logistic"}}), 4),
        "posterior.model"
    );
    assert!(serde_json::from_value::<RawWorkflows>(json!({"cost": {}})).is_err());
    assert!(serde_json::from_value::<RawWorkflows>(json!({"costs": {"c_wrongg": 1.0}})).is_err());
    // Listing order does not change the policy order.
    let a = Spec::from_raw(
        &raw(json!({"profiles": ["review_half", "authored"]})),
        &labels(4),
        dir,
        &fs_read,
    )
    .unwrap();
    let b = Spec::from_raw(
        &raw(json!({"profiles": ["authored", "review_half"]})),
        &labels(4),
        dir,
        &fs_read,
    )
    .unwrap();
    assert_eq!(a.sha256(), b.sha256());
    assert_eq!(a.policies().len(), 6);
    let prior = Spec::from_raw(
        &raw(json!({"posterior": {"kind": "prior", "probabilities": [0.1, 0.2, 0.3, 0.4]}})),
        &labels(4),
        dir,
        &fs_read,
    )
    .unwrap();
    assert!(prior.posterior(&release(0, &[1.0, 0.0, 0.0, 0.0], None), &json!({}))[3] > 0.39);
}

fn logistic_json(classes: &[String]) -> serde_json::Value {
    let n = classes.len();
    let f = 2 * n + 3 + 2;
    // Class t gets weight 2 on its one-hot choice feature and 1 on public token "urgent" for class 0.
    let weights: Vec<Vec<f64>> = (0..n)
        .map(|t| {
            (0..f)
                .map(|i| {
                    if i == t {
                        2.0
                    } else if t == 0 && i == f - 1 {
                        1.0
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    json!({
        "format": LOGISTIC_FORMAT,
        "classes": classes,
        "public_features": {"features": [
            {"kind": "categorical", "pointer": "/channel", "values": ["web"]},
            {"kind": "tokens", "pointer": "/text", "vocabulary": ["urgent"]},
        ]},
        "intercepts": vec![0.0; n],
        "weights": weights,
    })
}

#[test]
fn logistic_model_is_loaded_validated_and_canonicalized() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();
    let classes = labels(3);
    std::fs::write(
        dir.join("m.json"),
        serde_json::to_vec(&logistic_json(&classes)).unwrap(),
    )
    .unwrap();
    let matrix = json!([[0, 1, 1], [1, 0, 1], [1, 1, 0], [0.5, 0.5, 0.5]]);
    let config = raw(
        json!({"costs": {"matrix": matrix}, "posterior": {"kind": "logistic", "model": "m.json"}}),
    );
    let spec = Spec::from_raw(&config, &classes, dir, &fs_read).unwrap();
    let r = release(1, &[0.2, 0.5, 0.3], Some(0.4));
    let q = spec.posterior(&r, &json!({"text": "URGENT urgent"}));
    // logits: class 0 = 2 (two "urgent" tokens), class 1 = 2 (choice), class 2 = 0.
    let e = [1.0, 1.0, (-2.0f64).exp()];
    let s: f64 = e.iter().sum();
    let mut raw_q: Vec<f64> = e.iter().map(|v| v / s).collect();
    smooth(&mut raw_q);
    for (a, b) in q.iter().zip(&raw_q) {
        assert!((a - b).abs() < 1e-15);
    }
    let canonical = spec.canonical_json();
    assert_eq!(canonical["posterior"]["model"]["weights"][0][0], json!(2.0));
    assert!(!spec.canonical_json().to_string().contains("m.json"));
    // Model classes must match the question's classes.
    let other = Spec::from_raw(
        &config,
        &labels(3).into_iter().rev().collect::<Vec<_>>(),
        dir,
        &fs_read,
    );
    assert_eq!(key_of(other.unwrap_err()), "posterior.model");
    let missing = raw(
        json!({"costs": {"matrix": matrix}, "posterior": {"kind": "logistic", "model": "nope.json"}}),
    );
    assert!(matches!(
        Spec::from_raw(&missing, &classes, dir, &fs_read),
        Err(Error::ModelRead { .. })
    ));
}

#[test]
fn canonical_json_is_deterministic_and_sensitive() {
    let a = Spec::standard(labels(4)).unwrap();
    let b = Spec::standard(labels(4)).unwrap();
    assert_eq!(
        serde_json::to_vec(&a.canonical_json()).unwrap(),
        serde_json::to_vec(&b.canonical_json()).unwrap()
    );
    assert_eq!(a.sha256(), b.sha256());
    assert_eq!(a.sha256().len(), 64);
    let raw_cheaper = raw(json!({"costs": {"c_check": 0.3}}));
    let c = Spec::from_raw(&raw_cheaper, &labels(4), Path::new("."), &fs_read).unwrap();
    assert_ne!(a.sha256(), c.sha256());
    let canonical = a.canonical_json();
    assert_eq!(canonical["policies"].as_array().unwrap().len(), 18);
    assert_eq!(canonical["policies"][7]["profile"], json!("review_half"));
    assert_eq!(canonical["policies"][7]["c_review"], json!(1.0));
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn raw_config_reads_from_toml_through_figment() {
    use figment::Figment;
    use figment::providers::{Format, Toml};
    let text = r#"
        [contracts.partner.questions.route.workflows]
        costs = { c_wrong = 10, c_review = 2.5, c_check = 0.4, matrix = [[0, 1], [1, 0], [0.5, 0.5]] }
        families = ["asymmetric", "selective"]
        profiles = ["authored", "review_half", "review_double", "check_quarter", "error_double", "asymmetric_class0_double"]
        posterior = { kind = "prior", probabilities = [0.25, 0.75] }

        [contracts.partner.questions.other.workflows]
        preset = "tuple-bench"
        posterior = "native"
    "#;
    let figment = Figment::from(Toml::string(text));
    let raw: RawWorkflows = figment
        .extract_inner("contracts.partner.questions.route.workflows")
        .unwrap();
    let spec = Spec::from_raw(&raw, &labels(2), Path::new("."), &fs_read).unwrap();
    assert_eq!(spec.families(), &[Family::Selective, Family::Asymmetric]);
    assert_eq!(spec.policies().len(), 12);
    assert_eq!(spec.base_costs().c_review, 2.5);
    assert_eq!(
        spec.posterior_estimator(),
        &Posterior::Prior(vec![0.25, 0.75])
    );
    let other: RawWorkflows = figment
        .extract_inner("contracts.partner.questions.other.workflows")
        .unwrap();
    assert_eq!(
        Spec::from_raw(&other, &labels(4), Path::new("."), &fs_read).unwrap(),
        Spec::standard(labels(4)).unwrap()
    );
    let unknown = Figment::from(Toml::string("colour = 1")).extract::<RawWorkflows>();
    assert!(unknown.is_err());
}

#[test]
fn logistic_posterior_follows_the_documented_feature_layout() {
    let classes = labels(3);
    let public_dim = 2;
    let f = 2 * 3 + 3 + public_dim;
    let mut rng = Rng::new(21);
    let weights: Vec<Vec<f64>> = (0..3)
        .map(|_| (0..f).map(|_| rng.normal()).collect())
        .collect();
    let intercepts: Vec<f64> = (0..3).map(|_| rng.normal()).collect();
    let mean: Vec<f64> = (0..f).map(|_| rng.normal()).collect();
    let scale: Vec<f64> = (0..f).map(|_| 0.5 + rng.uniform()).collect();
    let model: LogisticModel = serde_json::from_value(json!({
        "format": LOGISTIC_FORMAT,
        "classes": classes,
        "public_features": {"features": [
            {"kind": "categorical", "pointer": "/channel", "values": ["web", "phone"]},
        ]},
        "mean": mean,
        "scale": scale,
        "intercepts": intercepts,
        "weights": weights,
    }))
    .unwrap();
    let spec = Spec::new(
        classes.clone(),
        CostBase {
            matrix: vec![vec![1.0; 3]; 4],
            ..CostBase::authored_4()
        },
        &Family::ALL,
        &Profile::ALL,
        Posterior::Logistic(Box::new(model)),
    )
    .unwrap();
    let state = json!({"channel": "phone"});
    for i in 0..50 {
        let r = Release {
            choice: i % 3,
            probabilities: (i % 4 != 0).then(|| vec![0.2, 0.3, 0.5]),
            confidence: (i % 3 != 0).then_some(rng.uniform()),
        };
        let mut x = release_features(3, &r);
        x.extend([0.0, 1.0]);
        let mut z: Vec<f64> = (0..3)
            .map(|t| {
                let mut acc = intercepts[t];
                for (k, xv) in x.iter().enumerate() {
                    acc += weights[t][k] * ((xv - mean[k]) / scale[k]);
                }
                acc
            })
            .collect();
        let max = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sum = 0.0;
        for v in z.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        for v in z.iter_mut() {
            *v /= sum;
        }
        smooth(&mut z);
        assert_eq!(spec.posterior(&r, &state), z);
        let target = spec.signature(&r, &state);
        let mut scratch = SignatureScratch::default();
        assert!(spec.signature_matches(&r, &spec.public_features(&state), &target, &mut scratch));
    }
}

#[test]
fn align_maps_labels_to_canonical_order() {
    let spec = Spec::standard(labels(4)).unwrap();
    let pairs = [("C2", 0.3), ("C0", 0.1), ("C3", 0.4), ("C1", 0.2)];
    assert_eq!(spec.align(pairs), Ok(vec![0.1, 0.2, 0.3, 0.4]));
    assert_eq!(spec.class_index("C3"), Some(3));
    assert_eq!(
        spec.align([("C0", 1.0)]),
        Err(AlignError::MissingLabel("C1".into()))
    );
    assert_eq!(
        spec.align([("X", 1.0)]),
        Err(AlignError::UnknownLabel("X".into()))
    );
    assert_eq!(
        spec.align([("C0", 0.5), ("C0", 0.5)]),
        Err(AlignError::DuplicateLabel("C0".into()))
    );
}

/// Hand-computed reference plans (authored matrix, default costs, native posterior), in policy
/// order: selective x 6 profiles, clarification x 6, asymmetric x 6.
#[test]
fn reference_plans_for_the_delivery_classes() {
    let classes: Vec<String> = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let spec = Spec::standard(classes.clone()).unwrap();
    let show = |p: &[f64]| -> Vec<String> {
        spec.plans(&release(0, p, Some(0.5)), &json!({}))
            .iter()
            .map(|plan| plan.display(&classes).to_string())
            .collect()
    };
    let check0 = "check(DELAY, yes->DELAY, no->ADDRESS)";
    // Confident: route 1.5 beats review 2 unless review halves or errors double; every check
    // costs 1.4 (ties: check 0) under authored costs.
    assert_eq!(
        show(&[0.85, 0.05, 0.05, 0.05]),
        vec![
            "route(DELAY)",
            "review",
            "route(DELAY)",
            "route(DELAY)",
            "review",
            "route(DELAY)",
            check0,
            check0,
            check0,
            check0,
            check0,
            check0,
            "act(DELAY)",
            "act(inspection)",
            "act(DELAY)",
            "act(DELAY)",
            "act(inspection)",
            "act(DELAY)",
        ]
    );
    // Uncertain: review everywhere; checks 0 and 1 tie at 2.9; inspection (1.8) beats act(DELAY) (4.1).
    let uncertain = show(&[0.4, 0.35, 0.15, 0.1]);
    assert_eq!(uncertain[0], "review");
    assert_eq!(uncertain[6], check0);
    assert_eq!(uncertain[12], "act(inspection)");
    // review_double makes inspection cost 3.6, still below act(DELAY) at 4.1.
    assert_eq!(uncertain[14], "act(inspection)");
}

fn fs_read(path: &Path) -> std::io::Result<Vec<u8>> {
    std::fs::read(path)
}

/// A random cost base for `n` classes whose values repeat, so that profiles often leave a
/// family's costs unchanged (twins) and candidate costs often tie.
fn random_base(rng: &mut Rng, n: usize) -> CostBase {
    let value = |rng: &mut Rng| [0.0, 0.4, 1.0, 2.0, 10.0, 1e-10][rng.below(6)];
    CostBase {
        c_wrong: value(rng),
        c_review: value(rng),
        c_check: value(rng),
        matrix: (0..=n)
            .map(|_| (0..n).map(|_| value(rng)).collect())
            .collect(),
    }
}

/// A posterior with frequent exact and near ties, and now and then a NaN, an infinity or a
/// negative value (the decisions must agree even on inputs no release produces).
fn random_posterior(rng: &mut Rng, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| match rng.below(40) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => -0.25,
            _ => rng.below(4) as f64 * 0.25 + if rng.below(5) == 0 { 1e-10 } else { 0.0 },
        })
        .collect()
}

#[test]
fn shared_decisions_decide_exactly_as_each_policy_alone() {
    let mut rng = Rng::new(23);
    for round in 0..3000 {
        let n = 1 + rng.below(9);
        let mut base = if round % 3 == 0 && n == 4 {
            CostBase::authored_4()
        } else {
            random_base(&mut rng, n)
        };
        // Now and then a matrix of another shape (an extra row, or a row one longer or
        // shorter), which the decisions for a known class count leave to the general ones.
        match round % 11 {
            1 => base.matrix.push(vec![0.5; n]),
            2 => base.matrix[0].push(3.0),
            3 => {
                base.matrix[n].pop();
            }
            _ => {}
        }
        let policies: Vec<Policy> = Family::ALL
            .iter()
            .flat_map(|&family| Profile::ALL.iter().map(move |&profile| (family, profile)))
            .map(|(family, profile)| Policy {
                family,
                profile,
                costs: base.apply(profile),
            })
            .collect();
        let twins: Vec<Option<usize>> = (0..policies.len())
            .map(|i| {
                policies[..i]
                    .iter()
                    .position(|p| p.decides_as(&policies[i]))
            })
            .collect();
        let mut decisions = Decisions::new();
        for _ in 0..4 {
            let q = random_posterior(&mut rng, n);
            decisions.prepare(&q);
            // In a shuffled order: what one policy precomputes must not depend on which
            // policy came first.
            let mut order: Vec<usize> = (0..policies.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.below(i + 1));
            }
            for &i in &order {
                let policy = &policies[i];
                let alone = policy.decide(&q);
                assert_eq!(decisions.decide(policy, &q), alone, "{policy:?} {q:?}");
                for (j, other) in policies.iter().enumerate() {
                    if other.decides_as(policy) {
                        assert_eq!(other.decide(&q), alone, "twins {i} and {j}: {q:?}");
                    }
                }
            }
            // All at once, twins taking their earlier twin's plan, as a spec decides them;
            // and once more with buffers prepared for another posterior's length.
            let alone: Vec<Plan> = policies.iter().map(|policy| policy.decide(&q)).collect();
            let mut plans = Vec::new();
            decisions.decide_all(&policies, &twins, &q, &mut plans);
            assert_eq!(plans, alone, "{q:?}");
            decisions.prepare(&q[..n - 1]);
            plans.clear();
            decisions.decide_all(&policies, &twins, &q, &mut plans);
            assert_eq!(plans, alone, "unprepared: {q:?}");
        }
    }
}

#[test]
fn a_specs_plans_and_signature_matches_agree_with_each_policy_alone() {
    let mut rng = Rng::new(29);
    for _ in 0..500 {
        let n = 2 + rng.below(6);
        let base = random_base(&mut rng, n);
        let families = &Family::ALL[..1 + rng.below(3)];
        let profiles = &Profile::ALL[rng.below(3)..];
        let spec = Spec::new(labels(n), base, families, profiles, Posterior::Native).unwrap();
        for _ in 0..8 {
            let q = random_posterior(&mut rng, n)
                .into_iter()
                .map(|v| if v.is_finite() { v.abs() } else { 0.5 })
                .collect::<Vec<f64>>();
            let r = release(0, &q, None);
            let mut smoothed = q.clone();
            smooth(&mut smoothed);
            let alone: Vec<Plan> = spec
                .policies()
                .iter()
                .map(|p| p.decide(&smoothed))
                .collect();
            assert_eq!(spec.plans_with_public(&r, &[]), alone);
            let target = spec.signature_with_public(&r, &[]);
            let mut scratch = SignatureScratch::default();
            assert!(spec.signature_matches(&r, &[], &target, &mut scratch));
            // Any one plan changed: the match fails, wherever the change is.
            for i in 0..target.plans.len() {
                let mut other = target.clone();
                other.plans[i] = match other.plans[i] {
                    Plan::Review => Plan::Route { class: 0 },
                    _ => Plan::Review,
                };
                assert!(!spec.signature_matches(&r, &[], &other, &mut scratch));
            }
        }
    }
}

#[test]
fn the_standard_policies_have_six_twins() {
    let spec = Spec::standard(labels(4)).unwrap();
    let twins: Vec<(usize, usize)> = spec
        .twins
        .iter()
        .enumerate()
        .filter_map(|(i, twin)| twin.map(|j| (i, j)))
        .collect();
    // Family-major, profiles in table order (authored, review_half, review_double,
    // check_quarter, error_double, asymmetric_class0_double).
    assert_eq!(
        twins,
        [(3, 0), (5, 0), (7, 6), (8, 6), (11, 6), (15, 12)],
        "selective: check_quarter and asymmetric_class0_double read authored's c_wrong and \
         c_review; clarification: every profile but check_quarter and error_double; \
         asymmetric: check_quarter's matrix is authored's"
    );
}

#[test]
fn the_workflows_hash_is_of_the_canonical_form() {
    let spec = Spec::standard(labels(4)).unwrap();
    let written = spec.canonical_json();
    let mut canonical = Vec::new();
    crate::wire::canonical_json(&written, &mut canonical);
    assert_eq!(spec.sha256(), sha256_hex(&canonical));
    // Keys re-sorted and integral numbers spelled as integers: the same definition, the
    // same hash; the legacy hash (compact serialization in key order) sees only the bytes.
    let resorted: Value = serde_json::from_slice(&canonical).unwrap();
    assert_ne!(
        serde_json::to_vec(&resorted).unwrap(),
        serde_json::to_vec(&written).unwrap()
    );
    assert_eq!(canonical_sha256(&resorted), spec.sha256());
    assert_eq!(
        legacy_sha256(&written),
        sha256_hex(&serde_json::to_vec(&written).unwrap())
    );
    assert_ne!(legacy_sha256(&resorted), legacy_sha256(&written));
    assert_ne!(legacy_sha256(&written), spec.sha256());
}
