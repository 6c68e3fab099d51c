use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, Mutex};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::codebook::{self, TrainingAnswer};
use crate::rng::Rng;
use crate::workflow::{CostBase, Family, LOGISTIC_FORMAT, LogisticModel, Posterior, Profile};

fn labels(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("L{i}")).collect()
}

/// The proxy's own round trip: encode the candidate as a released choice
/// answer under `full_native`, parse the text back and read it as a consumer.
fn json_roundtrip(classes: &[String]) -> impl Fn(&Release) -> Option<Release> + '_ {
    let question = crate::wire::AskedQuestion {
        id: "q".to_string(),
        kind: crate::wire::Kind::Choice,
        legend: None,
    };
    move |r: &Release| {
        let form = crate::release::Form {
            question: &question,
            labels: classes,
            view: crate::contract::View::FullNative,
            confidence: true,
            withhold: &[],
            shape: crate::contract::Shape::Complete,
        };
        crate::release::roundtrip(&form, r)
    }
}

/// A deterministic non-negative matrix with zero diagonal for n != 4; the authored one for n = 4.
fn base(n: usize) -> CostBase {
    if n == 4 {
        return CostBase::authored_4();
    }
    let mut rng = Rng::new(n as u64);
    let matrix = (0..=n)
        .map(|a| {
            (0..n)
                .map(|t| {
                    if a == t {
                        0.0
                    } else if a == n {
                        1.8
                    } else {
                        (1 + rng.below(12)) as f64
                    }
                })
                .collect()
        })
        .collect();
    CostBase {
        matrix,
        ..CostBase::authored_4()
    }
}

fn native_spec(n: usize) -> Spec {
    Spec::new(
        labels(n),
        base(n),
        &Family::ALL,
        &Profile::ALL,
        Posterior::Native,
    )
    .unwrap()
}

fn training(n: usize, seed: u64, count: usize) -> Vec<TrainingAnswer> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|i| {
            let raw: Vec<f64> = (0..n).map(|_| rng.uniform().powi(3)).collect();
            let sum: f64 = raw.iter().sum();
            TrainingAnswer {
                pair_id: format!("pair{}", i / 2),
                probabilities: raw.iter().map(|v| v / sum).collect(),
                confidence: if i % 5 == 0 {
                    None
                } else {
                    Some(rng.uniform())
                },
            }
        })
        .collect()
}

fn mapper_for(spec: Spec, d: u32, train: &[TrainingAnswer]) -> Mapper {
    let classes = spec.classes().to_vec();
    let cb = codebook::build(&classes, d, &spec, train, "test".into())
        .unwrap()
        .codebook;
    Mapper::new(cb, spec).unwrap()
}

type MapperCache = Mutex<BTreeMap<(usize, u32), Arc<Mapper>>>;

static MAPPERS: LazyLock<MapperCache> = LazyLock::new(Default::default);

fn cached_native_mapper(n: usize, d: u32) -> Arc<Mapper> {
    let mut cache = MAPPERS.lock().unwrap();
    cache
        .entry((n, d))
        .or_insert_with(|| Arc::new(mapper_for(native_spec(n), d, &training(n, 7, 40))))
        .clone()
}

/// Checks the guarantee for one answer and returns whether it was covered.
fn check_answer(mapper: &Mapper, native: &Release, state: &Value) -> bool {
    let classes = mapper.spec().classes().to_vec();
    let roundtrip = json_roundtrip(&classes);
    let outcome = mapper.map(native, state, &roundtrip);
    let reference = mapper.map_reference(native, state, &roundtrip);
    assert_eq!(
        outcome, reference,
        "fast path and brute force disagree for {native:?}"
    );
    let Outcome::Covered {
        release,
        codeword_index,
        ..
    } = outcome
    else {
        return false;
    };
    let spec = mapper.spec();
    assert_eq!(release.choice, native.choice);
    assert_eq!(release.availability(), native.availability());
    let cw = &mapper.codebook().codewords()[codeword_index];
    assert!(argmax_set(&cw.p).contains(&native.choice));
    let native_plans = spec.plans(native, state);
    let released = roundtrip(&release).unwrap();
    let released_plans = spec.plans(&released, state);
    assert_eq!(native_plans, released_plans);
    let mut max_diff: f64 = 0.0;
    for t in 0..spec.class_count() {
        let a = spec.realized_costs(&native_plans, t);
        let b = spec.realized_costs(&released_plans, t);
        for (x, y) in a.iter().zip(&b) {
            max_diff = max_diff.max((x - y).abs());
        }
    }
    assert_eq!(max_diff, 0.0);
    // First admissible: no earlier candidate has the native signature (checked independently of
    // `map_reference` on small codebooks only, to keep the suite fast).
    let target = spec.signature(native, state);
    let limit = if mapper.codebook().len() <= 2_000 {
        codeword_index
    } else {
        0
    };
    for i in 0..limit {
        let earlier = &mapper.codebook().codewords()[i];
        if argmax_set(&earlier.p).contains(&native.choice) {
            let z = mapper.candidate(native, i).unwrap();
            assert_ne!(
                spec.signature(&z, state),
                target,
                "codeword {i} was admissible earlier"
            );
        }
    }
    true
}

/// A probability vector: random, a grid point, or with forced ties.
fn vector(n: usize, kind: u8, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    match kind {
        0 => {
            let raw: Vec<f64> = (0..n).map(|_| rng.uniform().powi(2)).collect();
            let sum: f64 = raw.iter().sum::<f64>().max(1e-300);
            raw.iter().map(|v| v / sum).collect()
        }
        1 => {
            let d = 20u32;
            let mut counts = vec![0u32; n];
            for _ in 0..d {
                counts[rng.below(n)] += 1;
            }
            counts
                .iter()
                .map(|&k| f64::from(k) / f64::from(d))
                .collect()
        }
        _ => {
            let top = 0.2 + 0.3 * rng.uniform();
            let mut p = vec![(1.0 - 2.0 * top) / (n as f64 - 2.0).max(1.0); n];
            p[0] = top;
            p[n - 1] = top;
            if n == 2 {
                p = vec![0.5, 0.5];
            }
            p
        }
    }
}

fn native_from(p: Vec<f64>, with_probabilities: bool, confidence: Option<f64>) -> Release {
    let choice = argmax_set(&p).last().copied().unwrap_or(0);
    Release {
        choice,
        probabilities: with_probabilities.then_some(p),
        confidence,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn covered_answers_keep_every_plan_small_grids(
        n in 2usize..=8,
        d in 4u32..=6,
        kind in 0u8..3,
        seed in any::<u64>(),
        with_probabilities in prop::bool::weighted(0.9),
        confidence in prop::option::of(0.0f64..=1.0),
    ) {
        let mapper = cached_native_mapper(n, d);
        let native = native_from(vector(n, kind, seed), with_probabilities, confidence);
        check_answer(&mapper, &native, &json!({}));
    }

    #[test]
    fn covered_answers_keep_every_plan_default_grid(
        kind in 0u8..3,
        seed in any::<u64>(),
        confidence in prop::option::of(0.0f64..=1.0),
    ) {
        let mapper = cached_native_mapper(4, 20);
        let native = native_from(vector(4, kind, seed), true, confidence);
        check_answer(&mapper, &native, &json!({}));
    }
}

#[test]
fn coverage_is_reported_on_the_default_grid() {
    let mapper = cached_native_mapper(4, 20);
    let roundtrip = json_roundtrip(mapper.spec().classes());
    let mut covered = 0;
    let mut fallbacks: BTreeMap<&str, usize> = BTreeMap::new();
    let total = 60;
    for seed in 0..total {
        let native = native_from(vector(4, (seed % 3) as u8, seed), true, Some(0.7));
        // `check_answer` asserts a zero maximum realized cost difference for covered answers.
        if check_answer(&mapper, &native, &json!({})) {
            covered += 1;
        } else if let Outcome::Fallback(reason) = mapper.map(&native, &json!({}), &roundtrip) {
            *fallbacks.entry(reason.label()).or_default() += 1;
        }
    }
    eprintln!(
        "default grid: covered {covered}/{total}, fallbacks {fallbacks:?}, max |delta cost| 0"
    );
    // The grid holds every plan combination the random vectors reach most of the time.
    assert!(covered * 2 > total as usize, "coverage {covered}/{total}");
}

#[test]
fn prior_posterior_releases_the_first_candidate() {
    let spec = Spec::new(
        labels(3),
        base(3),
        &Family::ALL,
        &Profile::ALL,
        Posterior::Prior(vec![0.2, 0.3, 0.5]),
    )
    .unwrap();
    let mapper = mapper_for(spec, 4, &[]);
    let native = Release {
        choice: 1,
        probabilities: Some(vec![0.1, 0.8, 0.1]),
        confidence: Some(0.9),
    };
    assert!(check_answer(&mapper, &native, &json!(null)));
    let roundtrip = json_roundtrip(mapper.spec().classes());
    let Outcome::Covered { codeword_index, .. } = mapper.map(&native, &json!(null), &roundtrip)
    else {
        panic!("not covered")
    };
    assert_eq!(codeword_index, mapper.candidates[1][0] as usize);
}

#[test]
fn logistic_posterior_uses_the_scan_and_keeps_plans() {
    let classes = labels(3);
    let f = 2 * 3 + 3 + 1;
    let mut rng = Rng::new(5);
    let weights: Vec<Vec<f64>> = (0..3)
        .map(|_| (0..f).map(|_| rng.normal()).collect())
        .collect();
    let model: LogisticModel = serde_json::from_value(json!({
        "format": LOGISTIC_FORMAT,
        "classes": classes,
        "public_features": {"features": [{"kind": "tokens", "pointer": "/text", "vocabulary": ["late"]}]},
        "intercepts": [0.1, -0.2, 0.0],
        "weights": weights,
    }))
    .unwrap();
    let spec = Spec::new(
        classes,
        base(3),
        &Family::ALL,
        &Profile::ALL,
        Posterior::Logistic(Box::new(model)),
    )
    .unwrap();
    let mapper = mapper_for(spec, 5, &training(3, 3, 20));
    assert!(mapper.table.is_none());
    // Its plans read the request's public features: the release path must hand it the
    // request's state.
    assert!(mapper.reads_state());
    let mut covered = 0;
    for seed in 0..60u64 {
        let state = json!({"text": if seed % 2 == 0 { "late late" } else { "on time" }});
        let conf = if seed % 3 == 0 { None } else { Some(0.5) };
        let native = native_from(vector(3, (seed % 3) as u8, seed), seed % 7 != 0, conf);
        covered += usize::from(check_answer(&mapper, &native, &state));
    }
    assert!(covered > 0);
}

/// A request-independent posterior never reads the state, so the release path hands it
/// none (`Mapper::reads_state`): any state maps exactly as no state does.
#[test]
fn request_independent_mappers_do_not_read_the_state() {
    let mapper = cached_native_mapper(3, 4);
    assert!(!mapper.reads_state());
    let classes = mapper.spec().classes().to_vec();
    let roundtrip = json_roundtrip(&classes);
    for seed in 0..40u64 {
        let conf = if seed % 3 == 0 { None } else { Some(0.5) };
        let native = native_from(vector(3, (seed % 3) as u8, seed), seed % 5 != 0, conf);
        let unread = format!("{:?}", mapper.map(&native, &Value::Null, &roundtrip));
        for state in [json!({"text": "late late"}), json!(["x", 1.5]), json!("s")] {
            let read = format!("{:?}", mapper.map(&native, &state, &roundtrip));
            assert_eq!(read, unread, "{state}");
        }
    }
}

#[test]
fn fallback_reasons() {
    let mapper = cached_native_mapper(3, 4);
    let classes = mapper.spec().classes().to_vec();
    let roundtrip = json_roundtrip(&classes);
    let state = json!({});
    let bad = Release {
        choice: 7,
        probabilities: None,
        confidence: None,
    };
    assert_eq!(
        mapper.map(&bad, &state, &roundtrip),
        Outcome::Fallback(Reason::InvalidNative(InvalidRelease::Choice))
    );
    let nan = Release {
        choice: 0,
        probabilities: Some(vec![f64::NAN, 0.5, 0.5]),
        confidence: None,
    };
    assert_eq!(
        mapper.map(&nan, &state, &roundtrip),
        Outcome::Fallback(Reason::InvalidNative(InvalidRelease::Probability))
    );
    let good = Release {
        choice: 0,
        probabilities: Some(vec![0.6, 0.3, 0.1]),
        confidence: Some(0.4),
    };
    let never = |_: &Release| None;
    let outcome = mapper.map(&good, &state, &never);
    assert!(
        matches!(outcome, Outcome::Fallback(Reason::RoundtripMismatch { mismatches }) if mismatches >= 1)
    );
    assert_eq!(outcome, mapper.map_reference(&good, &state, &never));
    // A serializer that flips the choice never matches.
    let flip = |r: &Release| {
        Some(Release {
            choice: (r.choice + 1) % 3,
            ..r.clone()
        })
    };
    assert!(matches!(
        mapper.map(&good, &state, &flip),
        Outcome::Fallback(Reason::RoundtripMismatch { .. })
    ));
    assert_eq!(Reason::NoCandidate.label(), "no_candidate");
    assert!(Reason::LABELS.contains(&Reason::RoundtripMismatch { mismatches: 3 }.label()));
    // Denominator 1: only the vertices, which all route directly; an uncertain answer that asks
    // for review has no admissible codeword.
    let mapper = mapper_for(native_spec(3), 1, &[]);
    let odd = Release {
        choice: 0,
        probabilities: Some(vec![0.4, 0.35, 0.25]),
        confidence: None,
    };
    assert_eq!(
        mapper.map(&odd, &state, &roundtrip),
        Outcome::Fallback(Reason::NoAdmissibleCodeword)
    );
    assert_eq!(
        mapper.map_reference(&odd, &state, &roundtrip),
        Outcome::Fallback(Reason::NoAdmissibleCodeword)
    );
    // A hand-edited codebook without any codeword whose argmax holds class 2.
    let mut v: Value = serde_json::from_slice(&mapper.codebook().to_json_bytes()).unwrap();
    let kept: Vec<Value> = v["codewords"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|cw| cw["p"][2].as_f64() != Some(1.0))
        .cloned()
        .collect();
    v["codeword_count"] = json!(kept.len());
    v["codewords"] = Value::Array(kept);
    let cb = crate::codebook::Codebook::from_json(&serde_json::to_vec(&v).unwrap()).unwrap();
    let mapper = Mapper::new(cb, native_spec(3)).unwrap();
    let two = Release {
        choice: 2,
        probabilities: Some(vec![0.0, 0.0, 1.0]),
        confidence: None,
    };
    assert_eq!(
        mapper.map(&two, &state, &roundtrip),
        Outcome::Fallback(Reason::NoCandidate)
    );
    assert_eq!(
        mapper.map_reference(&two, &state, &roundtrip),
        Outcome::Fallback(Reason::NoCandidate)
    );
}

#[test]
fn mapper_is_shareable_and_scales_to_255_classes() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Mapper>();
    let n = 255;
    // The asymmetric rule is O(n^2) per decision, slow in debug builds at n = 255; it is covered
    // at 255 classes by the workflow tests, so this mapper test uses the other two families.
    let families = [Family::Selective, Family::Clarification];
    let spec = Spec::new(
        labels(n),
        base(n),
        &families,
        &Profile::ALL,
        Posterior::Native,
    )
    .unwrap();
    let mapper = mapper_for(spec, 1, &training(n, 2, 4));
    let classes = labels(n);
    let roundtrip = json_roundtrip(&classes);
    for seed in 0..3u64 {
        let native = native_from(vector(n, (seed % 3) as u8, seed), seed != 1, Some(0.2));
        let outcome = mapper.map(&native, &json!({}), &roundtrip);
        assert_eq!(
            outcome,
            mapper.map_reference(&native, &json!({}), &roundtrip)
        );
    }
}

#[test]
fn mapper_refuses_a_codebook_for_other_workflows() {
    let cb = codebook::build(&labels(4), 4, &native_spec(4), &[], String::new())
        .unwrap()
        .codebook;
    let other = Spec::new(
        labels(4),
        base(4),
        &[Family::Asymmetric],
        &Profile::ALL,
        Posterior::Native,
    )
    .unwrap();
    assert!(matches!(Mapper::new(cb, other), Err(Error::Mismatch(_))));
}

type BudgetCache = Mutex<BTreeMap<u64, Arc<Mapper>>>;

static BUDGET_MAPPERS: LazyLock<BudgetCache> = LazyLock::new(Default::default);

/// The default-grid mapper for four classes and all 18 default policies, under budget `alpha`.
fn cached_budget_mapper(alpha: f64) -> Arc<Mapper> {
    let strict = cached_native_mapper(4, 20);
    let mut cache = BUDGET_MAPPERS.lock().unwrap();
    cache
        .entry(alpha.to_bits())
        .or_insert_with(|| {
            Arc::new(
                Mapper::with_admissibility(
                    strict.codebook().clone(),
                    strict.spec().clone(),
                    Admissibility::Budget(alpha),
                )
                .unwrap(),
            )
        })
        .clone()
}

/// Independent statement of the bound: every policy j, every truth t,
/// ℓ_j(z, t) − ℓ_j(D, t) ≤ α·κ_j, with κ_j written out from the cost base.
fn within_bound(spec: &Spec, native: &[Plan], released: &[Plan], alpha: f64) -> bool {
    spec.policies()
        .iter()
        .zip(native.iter().zip(released))
        .all(|(policy, (a, b))| {
            let kappa = match policy.family {
                Family::Asymmetric => policy
                    .costs
                    .matrix
                    .iter()
                    .flatten()
                    .fold(0.0f64, |m, &v| m.max(v)),
                _ => policy.costs.c_wrong,
            };
            (0..spec.class_count())
                .all(|t| policy.realized_cost(b, t) - policy.realized_cost(a, t) <= alpha * kappa)
        })
}

/// Checks a bounded release for one answer; returns the released plans when covered.
fn check_budget_answer(mapper: &Mapper, alpha: f64, native: &Release) -> Option<Vec<Plan>> {
    let state = json!({});
    let spec = mapper.spec();
    let roundtrip = json_roundtrip(spec.classes());
    let outcome = mapper.map(native, &state, &roundtrip);
    assert_eq!(
        outcome,
        mapper.map_reference(native, &state, &roundtrip),
        "fast path and brute force disagree for {native:?}"
    );
    let Outcome::Covered {
        release,
        codeword_index,
        ..
    } = outcome
    else {
        return None;
    };
    assert_eq!(release.choice, native.choice);
    assert_eq!(release.availability(), native.availability());
    assert!(argmax_set(&mapper.codebook().codewords()[codeword_index].p).contains(&native.choice));
    let native_plans = spec.plans(native, &state);
    let released_plans = spec.plans(&roundtrip(&release).unwrap(), &state);
    assert!(
        within_bound(spec, &native_plans, &released_plans, alpha),
        "bound exceeded for {native:?}"
    );
    let (absolute, relative) = spec.worst_increase(&native_plans, &released_plans);
    assert!(relative <= alpha && absolute >= 0.0);
    // First admissible in codebook order.
    for i in 0..codeword_index {
        if argmax_set(&mapper.codebook().codewords()[i].p).contains(&native.choice) {
            let z = mapper.candidate(native, i).unwrap();
            assert!(
                !within_bound(spec, &native_plans, &spec.plans(&z, &state), alpha),
                "codeword {i} was admissible earlier"
            );
        }
    }
    Some(released_plans)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn bounded_releases_never_exceed_alpha_kappa(
        alpha_index in 0usize..4,
        kind in 0u8..3,
        seed in any::<u64>(),
        with_probabilities in prop::bool::weighted(0.9),
        confidence in prop::option::of(0.0f64..=1.0),
    ) {
        let alpha = [0.0, 0.04, 0.2, 0.5][alpha_index];
        let mapper = cached_budget_mapper(alpha);
        prop_assert_eq!(mapper.spec().policies().len(), 18);
        let native = native_from(vector(4, kind, seed), with_probabilities, confidence);
        check_budget_answer(&mapper, alpha, &native);
    }

    #[test]
    fn alpha_zero_admits_whatever_strict_admits(
        kind in 0u8..3,
        seed in any::<u64>(),
        confidence in prop::option::of(0.0f64..=1.0),
    ) {
        let strict = cached_native_mapper(4, 20);
        let zero = cached_budget_mapper(0.0);
        let native = native_from(vector(4, kind, seed), true, confidence);
        let roundtrip = json_roundtrip(strict.spec().classes());
        if let Outcome::Covered { codeword_index: s, .. } = strict.map(&native, &json!({}), &roundtrip) {
            let Outcome::Covered { codeword_index: z, .. } = zero.map(&native, &json!({}), &roundtrip)
            else {
                panic!("strict covered {native:?} but alpha = 0 did not");
            };
            prop_assert!(z <= s);
        }
    }
}

#[test]
fn alpha_zero_is_weaker_than_plan_equality() {
    // Under α = 0 no policy's realized cost rises for any truth, but a plan may change when
    // its realized-cost vector is equal or lower (e.g. check(k, no → r) versus check(r, no → k)).
    let mapper = cached_budget_mapper(0.0);
    let mut changed = 0;
    let mut covered = 0;
    for seed in 0..120 {
        let native = native_from(vector(4, (seed % 3) as u8, seed), true, Some(0.7));
        if let Some(released) = check_budget_answer(&mapper, 0.0, &native) {
            covered += 1;
            let (absolute, _) = mapper
                .spec()
                .worst_increase(&mapper.spec().plans(&native, &json!({})), &released);
            assert_eq!(absolute, 0.0);
            if released != mapper.spec().plans(&native, &json!({})) {
                changed += 1;
            }
        }
    }
    eprintln!("alpha = 0: covered {covered}/120, plans changed in {changed}");
    assert!(covered > 60);
}

#[test]
fn a_larger_budget_releases_an_earlier_codeword() {
    let classes = labels(4);
    let roundtrip = json_roundtrip(&classes);
    let mut earlier = 0;
    for seed in 0..60 {
        let native = native_from(vector(4, (seed % 3) as u8, seed), true, Some(0.7));
        let index =
            |alpha: f64| match cached_budget_mapper(alpha).map(&native, &json!({}), &roundtrip) {
                Outcome::Covered { codeword_index, .. } => Some(codeword_index),
                Outcome::Fallback(_) => None,
            };
        let (small, large) = (index(0.0), index(0.2));
        if let Some(small) = small {
            let large = large.expect("a larger budget admits a superset");
            assert!(large <= small);
            if large < small {
                earlier += 1;
            }
        }
    }
    assert!(earlier > 0, "α = 0.2 never moved a release");
}

#[test]
fn a_budget_must_be_finite_and_non_negative() {
    let strict = cached_native_mapper(2, 4);
    for alpha in [-0.1, f64::NAN, f64::INFINITY] {
        let err = Mapper::with_admissibility(
            strict.codebook().clone(),
            strict.spec().clone(),
            Admissibility::Budget(alpha),
        )
        .unwrap_err();
        assert!(matches!(err, Error::Budget(_)));
    }
}

/// A bounded mapping never falls back to native first: an answer no compact codeword covers is
/// mapped against the learned codebook's strict stage, and only then falls back. A learned
/// codebook written before the stage existed keeps working, without it.
#[test]
fn a_learned_codebook_tries_its_strict_stage_before_the_fallback() {
    let strict = cached_native_mapper(4, 20);
    let spec = strict.spec().clone();
    let train: Vec<codebook::Response> = (0..24u64)
        .map(|seed| codebook::Response {
            pair_id: format!("p{}", seed / 2),
            native: native_from(vector(4, (seed % 3) as u8, seed), true, Some(0.7)),
            public: Vec::new(),
        })
        .collect();
    let (learned, _) = codebook::learn(
        strict.codebook(),
        &spec,
        &train,
        &[],
        &codebook::Settings::new(0.04, 2),
    )
    .unwrap();
    // The artifact carries its strict stage and reads back byte for byte.
    let bytes = learned.to_json_bytes();
    let back = Codebook::from_json(&bytes).unwrap();
    assert_eq!(back.to_json_bytes(), bytes);
    assert_eq!(
        back.strict_stage().unwrap().codewords(),
        strict.codebook().codewords()
    );
    let staged =
        Mapper::with_admissibility(back, spec.clone(), Admissibility::Budget(0.04)).unwrap();
    // The same file without the stage.
    let mut file: Value = serde_json::from_slice(&bytes).unwrap();
    let object = file.as_object_mut().unwrap();
    object.remove("strict_stage");
    object.remove("strict_stage_count");
    let old = Codebook::from_json(&serde_json::to_vec(&file).unwrap()).unwrap();
    assert!(old.strict_stage().is_none());
    let compact_only =
        Mapper::with_admissibility(old, spec.clone(), Admissibility::Budget(0.04)).unwrap();
    let roundtrip = json_roundtrip(spec.classes());
    let (mut by_compact, mut by_strict, mut fell_back) = (0, 0, 0);
    for seed in 100..220u64 {
        let native = native_from(vector(4, (seed % 3) as u8, seed), true, Some(0.7));
        let state = json!({});
        match (
            compact_only.map(&native, &state, &roundtrip),
            staged.map(&native, &state, &roundtrip),
        ) {
            (
                Outcome::Covered { release: a, .. },
                Outcome::Covered {
                    release: b, stage, ..
                },
            ) => {
                assert_eq!(a, b);
                assert_eq!(stage, Stage::Compact);
                by_compact += 1;
            }
            (Outcome::Fallback(_), staged_outcome) => {
                match (strict.map(&native, &state, &roundtrip), staged_outcome) {
                    (
                        Outcome::Covered { release: a, .. },
                        Outcome::Covered {
                            release: b, stage, ..
                        },
                    ) => {
                        // The strict stage releases what the strict mapper would: plans kept.
                        assert_eq!(a, b);
                        assert_eq!(stage, Stage::Strict);
                        assert_eq!(spec.plans(&b, &state), spec.plans(&native, &state));
                        by_strict += 1;
                    }
                    (Outcome::Fallback(_), Outcome::Fallback(_)) => fell_back += 1,
                    (strict_outcome, staged_outcome) => {
                        panic!("strict {strict_outcome:?}, staged {staged_outcome:?}")
                    }
                }
            }
            (compact, staged) => panic!("compact {compact:?}, staged {staged:?}"),
        }
    }
    eprintln!("compact {by_compact}, strict stage {by_strict}, fallback {fell_back}");
    assert!(by_compact > 0 && by_strict > 0, "both stages cover answers");
    // A stage is only for learned codebooks.
    let mut file: Value = serde_json::from_slice(&strict.codebook().to_json_bytes()).unwrap();
    file["strict_stage"] = file["codewords"].clone();
    file["strict_stage_count"] = json!(strict.codebook().len());
    assert!(Codebook::from_json(&serde_json::to_vec(&file).unwrap()).is_err());
}
