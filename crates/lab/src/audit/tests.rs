//! Pipeline tests of the audit core on small synthetic data.

use std::collections::BTreeMap;

use releasegate_core::rng::Rng;

use super::decoders::{Spec, TemplateConfig};
use super::ensemble::{fit_subview, score};
use super::group::Group;
use super::representation::{FieldSet, Representation};
use super::*;

const FULL: FieldSet = FieldSet {
    choice: true,
    probabilities: true,
    confidence: true,
    usage: false,
};

fn quick_config() -> Config {
    Config {
        n_bootstrap: 200,
        threads: 1,
        ..Config::default()
    }
}

/// Pairs within classes of `k` classes, `m` mechanisms per class; `release`
/// builds the released fields from (class, mechanism index within class, whether
/// the secret is the sorted-index-1 hypothesis, pair number).
fn dataset(
    n_pairs: usize,
    k: usize,
    m: usize,
    seed: u64,
    release: &dyn Fn(usize, usize, bool, &mut Rng) -> ReleasedFeatures,
) -> Vec<Example> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for p in 0..n_pairs {
        let t = rng.below(k);
        let a = rng.below(m);
        let mut b = rng.below(m - 1);
        if b >= a {
            b += 1;
        }
        let (lo, hi) = (a.min(b), a.max(b));
        let split = match p % 5 {
            0..=2 => Split::Train,
            3 => Split::Validation,
            _ => Split::Test,
        };
        let public: Vec<f64> = (0..2).map(|_| rng.normal()).collect();
        for s in 0..2 {
            let mech = if s == 0 { lo } else { hi };
            out.push(Example {
                pair_id: format!("p{p}"),
                split,
                domain: "d".to_string(),
                t: format!("C{t}"),
                t_index: t,
                hypotheses: [format!("c{t}-m{lo}"), format!("c{t}-m{hi}")],
                s_index: Some(s),
                release: release(t, mech, s == 1, &mut rng),
                public: public.clone(),
                class_count: k,
            });
        }
    }
    out
}

/// Mechanism `j` of class `t` moves 0.25 of the mass to its own leak class.
fn signature_release(t: usize, mech: usize, _hi: bool, rng: &mut Rng) -> ReleasedFeatures {
    let k = 4;
    let leak = (t + 1 + mech) % k;
    let mut p = vec![0.05; k];
    p[t] = 0.7 - 0.02 * rng.uniform();
    p[leak] += 0.2;
    let total: f64 = p.iter().sum();
    ReleasedFeatures {
        choice: Some(t),
        probabilities: Some(p.iter().map(|v| Some(v / total)).collect()),
        confidence: Some(0.8),
        usage: Default::default(),
        joint: Vec::new(),
    }
}

fn noise_release(t: usize, _mech: usize, _hi: bool, rng: &mut Rng) -> ReleasedFeatures {
    let k = 4;
    let raw: Vec<f64> = (0..k)
        .map(|c| rng.uniform() + if c == t { 1.0 } else { 0.0 })
        .collect();
    let total: f64 = raw.iter().sum();
    ReleasedFeatures {
        choice: Some(rng.below(k)),
        probabilities: Some(raw.iter().map(|v| Some(v / total)).collect()),
        confidence: Some(rng.uniform()),
        usage: Default::default(),
        joint: Vec::new(),
    }
}

fn group_of(examples: &[Example]) -> Group {
    let indexed: Vec<(usize, &Example)> = examples.iter().enumerate().collect();
    Group::prepare("r", "d", &indexed).unwrap()
}

/// Test accuracy of every base configuration on the full view.
fn per_spec_test_accuracy(examples: &[Example]) -> Vec<(Spec, f64)> {
    let group = group_of(examples);
    let fit = fit_subview(&group, FULL, 4);
    let test = group.original_rows(Split::Test);
    fit.specs
        .iter()
        .zip(&fit.preds)
        .map(|(spec, preds)| (*spec, score(&group, preds, &test).accuracy()))
        .collect()
}

#[test]
fn mechanism_indexed_decoders_separate_signature_data() {
    let examples = dataset(150, 4, 3, 11, &signature_release);
    for (spec, acc) in per_spec_test_accuracy(&examples) {
        let expected = match spec {
            Spec::Prior
            | Spec::Logistic {
                quadratic: false, ..
            } => continue,
            _ => 0.95,
        };
        assert!(acc >= expected, "{} accuracy {acc}", spec.name());
    }
}

#[test]
fn prior_and_linear_logistic_separate_index_data() {
    // The secret is always the sorted-index-1 hypothesis: the label frequency
    // and the intercept carry everything.
    let examples: Vec<Example> = dataset(60, 4, 3, 5, &signature_release)
        .into_iter()
        .filter(|e| e.s_index == Some(1))
        .collect();
    for (spec, acc) in per_spec_test_accuracy(&examples) {
        if matches!(spec, Spec::Prior | Spec::Logistic { .. }) {
            assert!(acc >= 0.99, "{} accuracy {acc}", spec.name());
        }
    }
}

#[test]
fn every_decoder_is_near_chance_on_noise() {
    let examples = dataset(250, 4, 4, 21, &noise_release);
    for (spec, acc) in per_spec_test_accuracy(&examples) {
        assert!(
            (0.35..=0.65).contains(&acc),
            "{} accuracy {acc}",
            spec.name()
        );
    }
}

#[test]
fn library_sizes_follow_views() {
    assert_eq!(Spec::library(FieldSet::NONE).len(), 13);
    assert_eq!(Spec::library(FULL).len(), 25);
    let names: Vec<String> = Spec::library(FULL).iter().map(Spec::name).collect();
    assert!(names.contains(&"template_residual_full_k2".to_string()));
    assert!(names.contains(&"shared_logratio_c10".to_string()));
    assert!(Spec::library(FULL).contains(&Spec::Template {
        representation: Representation::LogRatio,
        config: TemplateConfig::Diagonal0
    }));
}

fn small_input(signal: f64) -> Input {
    let natives = synthetic::natives(3, 2, 40, signal);
    let mut releases = synthetic::views(&natives);
    releases.retain(|r| ["no_output", "choice_confidence", "full"].contains(&r.name.as_str()));
    let costs = synthetic::costs(&releases);
    Input { releases, costs }
}

#[test]
fn full_run_is_equivariant_deterministic_thread_independent_and_finds_leaks() {
    let input = small_input(2.5);
    let report = run(&input, &quick_config()).unwrap();
    assert!(report.equivariance_passed);
    assert!(!report.test_used_for_selection);
    for rel in &report.releases {
        for d in &rel.domains {
            assert!(d.equivariance.n_checked > 0);
            assert!(d.equivariance.max_deviation <= 1e-12);
        }
    }
    let threaded = run(
        &input,
        &Config {
            threads: 2,
            ..quick_config()
        },
    )
    .unwrap();
    assert_eq!(report, threaded);
    assert_eq!(
        serde_json::to_string(&report).unwrap(),
        serde_json::to_string(&threaded).unwrap()
    );

    let by_name = |n: &str| report.releases.iter().find(|r| r.release == n).unwrap();
    let none = by_name("no_output");
    // No prediction field and balanced pairs: exactly one world of each pair is right.
    assert_eq!(none.pooled.accuracy.mean, 0.5);
    assert_eq!(none.pooled.gain.mean, 0.0);
    let full = by_name("full");
    assert!(
        full.pooled.accuracy.mean > 0.7,
        "{}",
        full.pooled.accuracy.mean
    );
    assert!(full.pooled.gain.lower > 0.0);
    assert!(full.pooled.accuracy.lower <= full.pooled.accuracy.mean);
    assert!(full.pooled.accuracy.mean <= full.pooled.accuracy.upper);
    assert_eq!(full.utility.len(), 3);
    assert_eq!(full.utility[0].domains.len(), 2);
    let text = report.to_text();
    assert!(text.contains("full") && text.contains("pooled") && text.contains("selective"));
    let svg = svg::render(&report);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("clarification") && svg.contains("choice_confidence"));
}

#[test]
fn predictions_are_reported_in_caller_order() {
    let mut input = small_input(2.5);
    input.releases.retain(|r| r.name == "choice_confidence");
    input.costs.clear();
    // Reverse the hypotheses of every world (labels follow).
    let mut reversed = input.clone();
    for ex in &mut reversed.releases[0].examples {
        ex.hypotheses.swap(0, 1);
        ex.s_index = ex.s_index.map(|s| 1 - s);
    }
    let config = Config {
        keep_predictions: true,
        ..quick_config()
    };
    let a = run(&input, &config).unwrap();
    let b = run(&reversed, &config).unwrap();
    for (da, db) in a.releases[0].domains.iter().zip(&b.releases[0].domains) {
        assert_eq!(da.recovery, db.recovery);
        for (pa, pb) in da.predictions.iter().zip(&db.predictions) {
            assert!((pa.p_index1 - (1.0 - pb.p_index1)).abs() <= 1e-12);
            assert_eq!(pa.predicted, 1 - pb.predicted);
            assert_eq!(pa.correct, pb.correct);
        }
    }
}

#[test]
fn equivariance_check_detects_position_dependence() {
    let p = [0.2, 0.7, 0.5];
    let good = [0.8, 0.3, 0.5];
    assert!(check_equivariance(&p, &good).passed);
    // A decoder that always favours position 1 returns the same value after a swap.
    let bad = check_equivariance(&p, &p);
    assert!(!bad.passed);
    assert!((bad.max_deviation - 0.6).abs() < 1e-12);
    assert!(!check_equivariance(&[f64::NAN], &[0.5]).passed);
    assert!(!check_equivariance(&[0.5], &[]).passed);
}

#[test]
fn degenerate_inputs_give_errors_not_panics() {
    let base = dataset(20, 4, 3, 1, &signature_release);
    let release = |examples: Vec<Example>| Input {
        releases: vec![ReleaseExamples {
            name: "r".to_string(),
            examples,
        }],
        costs: Vec::new(),
    };
    assert_eq!(
        run(&Input::default(), &quick_config()),
        Err(Error::NoReleases)
    );
    let no_test: Vec<Example> = base
        .iter()
        .filter(|e| e.split != Split::Test)
        .cloned()
        .collect();
    assert!(matches!(
        run(&release(no_test), &quick_config()),
        Err(Error::EmptySplit {
            split: Split::Test,
            ..
        })
    ));
    let one_pair: Vec<Example> = base
        .iter()
        .filter(|e| e.split != Split::Train || e.pair_id == "p0")
        .cloned()
        .collect();
    assert!(matches!(
        run(&release(one_pair), &quick_config()),
        Err(Error::TooFewTrainingPairs { .. })
    ));
    let mut bad = base.clone();
    bad[3].t_index = 9;
    assert!(matches!(
        run(&release(bad), &quick_config()),
        Err(Error::InvalidExample { index: 3, .. })
    ));
    let mut bad = base.clone();
    bad[0].s_index = None;
    assert!(matches!(
        run(&release(bad), &quick_config()),
        Err(Error::InvalidExample { .. })
    ));
    let mut bad = base.clone();
    bad[0].hypotheses[1] = bad[0].hypotheses[0].clone();
    assert!(matches!(
        run(&release(bad), &quick_config()),
        Err(Error::InvalidExample { .. })
    ));
    let dup = Input {
        releases: vec![
            ReleaseExamples {
                name: "r".into(),
                examples: base.clone(),
            },
            ReleaseExamples {
                name: "r".into(),
                examples: base.clone(),
            },
        ],
        costs: Vec::new(),
    };
    assert_eq!(
        run(&dup, &quick_config()),
        Err(Error::DuplicateRelease("r".into()))
    );
    let mut with_costs = release(base.clone());
    with_costs.costs.push(WorkflowCosts {
        release: "other".into(),
        workflow: "w".into(),
        observations: Vec::new(),
    });
    assert_eq!(
        run(&with_costs, &quick_config()),
        Err(Error::UnknownRelease("other".into()))
    );
    assert!(matches!(
        run(
            &release(base),
            &Config {
                n_folds: 1,
                ..quick_config()
            }
        ),
        Err(Error::InvalidConfig(_))
    ));
}

#[test]
fn degenerate_data_runs() {
    // All secrets at index 1, constant releases, NaNs and a huge class count.
    let constant = |_t: usize, _m: usize, _hi: bool, _r: &mut Rng| ReleasedFeatures {
        choice: Some(0),
        probabilities: Some(vec![Some(0.25), Some(f64::NAN), None, Some(0.25)]),
        confidence: Some(f64::INFINITY),
        usage: Default::default(),
        joint: Vec::new(),
    };
    let mut examples = dataset(30, 4, 3, 2, &constant);
    for ex in &mut examples {
        ex.public = vec![f64::NAN, 1.0];
    }
    let report = run(
        &Input {
            releases: vec![ReleaseExamples {
                name: "constant".into(),
                examples: examples.clone(),
            }],
            costs: Vec::new(),
        },
        &quick_config(),
    )
    .unwrap();
    assert_eq!(report.releases[0].pooled.accuracy.mean, 0.5);
    assert!(report.equivariance_passed);
    let one_class: Vec<Example> = examples
        .into_iter()
        .filter(|e| e.s_index == Some(1))
        .collect();
    let report = run(
        &Input {
            releases: vec![ReleaseExamples {
                name: "one_class".into(),
                examples: one_class,
            }],
            costs: Vec::new(),
        },
        &quick_config(),
    )
    .unwrap();
    assert!(report.releases[0].pooled.accuracy.mean > 0.99);
    let wide = |t: usize, _m: usize, hi: bool, _r: &mut Rng| {
        let mut p = vec![Some(0.0); 255];
        p[t] = Some(if hi { 0.9 } else { 0.8 });
        ReleasedFeatures {
            choice: Some(t),
            probabilities: Some(p),
            confidence: None,
            usage: Default::default(),
            joint: Vec::new(),
        }
    };
    let mut examples = dataset(15, 255, 3, 4, &wide);
    for ex in &mut examples {
        ex.class_count = 255;
    }
    let report = run(
        &Input {
            releases: vec![ReleaseExamples {
                name: "wide".into(),
                examples,
            }],
            costs: Vec::new(),
        },
        &quick_config(),
    );
    assert!(report.is_ok());
}

#[test]
fn folds_keep_pairs_together_and_ignore_input_order() {
    let examples = dataset(41, 4, 3, 8, &signature_release);
    let group = group_of(&examples);
    let train = group.original_rows(Split::Train);
    let folds = group.folds(4);
    let mut fold_of_pair: BTreeMap<&str, usize> = BTreeMap::new();
    let mut sizes = [0usize; 4];
    for (&i, &f) in train.iter().zip(&folds) {
        let previous = fold_of_pair.insert(group.rows[i].pair_id.as_str(), f);
        assert!(previous.is_none_or(|p| p == f), "pair split across folds");
        sizes[f] += 1;
    }
    assert!(sizes.iter().all(|&s| s >= 2 * (fold_of_pair.len() / 4)));
    let mut reversed = examples.clone();
    reversed.reverse();
    let other = group_of(&reversed);
    let other_folds: BTreeMap<String, usize> = other
        .original_rows(Split::Train)
        .iter()
        .zip(other.folds(4))
        .map(|(&i, f)| (other.rows[i].pair_id.clone(), f))
        .collect();
    for (pair, f) in fold_of_pair {
        assert_eq!(other_folds[pair], f);
    }
}

#[test]
fn test_split_never_influences_selection() {
    let mut input = small_input(2.5);
    input.releases.retain(|r| r.name == "choice_confidence");
    input.costs.clear();
    let a = run(&input, &quick_config()).unwrap();
    // Scramble every test world's release and label: strategies and validation scores stay.
    let mut rng = Rng::new(5);
    for ex in &mut input.releases[0].examples {
        if ex.split == Split::Test {
            ex.release.confidence = Some(rng.uniform());
            ex.release.choice = Some(rng.below(ex.class_count));
        }
    }
    let b = run(&input, &quick_config()).unwrap();
    for (da, db) in a.releases[0].domains.iter().zip(&b.releases[0].domains) {
        assert_eq!(da.strategy, db.strategy);
        assert_eq!(da.no_output_strategy, db.no_output_strategy);
    }
}

#[test]
fn paired_differences_compare_releases_over_the_same_test_pairs() {
    let mut input = small_input(2.5);
    // A copy of `full` under another name: its paired difference to `full` is exactly zero.
    let copy = ReleaseExamples {
        name: "full copy".to_string(),
        examples: input
            .releases
            .iter()
            .find(|r| r.name == "full")
            .unwrap()
            .examples
            .clone(),
    };
    input.releases.push(copy);
    let config = Config {
        references: vec!["no_output".into(), "full".into()],
        ..quick_config()
    };
    let report = run(&input, &config).unwrap();
    let of = |name: &str| report.releases.iter().find(|r| r.release == name).unwrap();
    let paired = |name: &str, reference: &str| {
        of(name)
            .paired
            .iter()
            .find(|p| p.reference == reference)
            .map(|p| p.difference)
    };
    let same = paired("full copy", "full").unwrap();
    assert_eq!((same.mean, same.lower, same.upper), (0.0, 0.0, 0.0));
    // Against no output: the accuracy difference itself, with its own interval.
    let full = of("full");
    let versus = paired("full", "no_output").unwrap();
    let expected = full.pooled.accuracy.mean - of("no_output").pooled.accuracy.mean;
    assert!(
        (versus.mean - expected).abs() < 1e-12,
        "{versus:?} vs {expected}"
    );
    assert!(
        versus.lower > 0.0,
        "a leaking release is above no output: {versus:?}"
    );
    assert_eq!(versus.n_pairs, full.pooled.accuracy.n_pairs);
    // No release is compared with itself, and an absent reference is skipped.
    assert!(paired("full", "full").is_none());
    assert!(report.to_text().contains("Paired differences"));
}

#[test]
fn text_tables_never_truncate_names() {
    let mut input = small_input(1.0);
    let long = "a release named at some length to the end".to_string();
    let last = input.releases.len() - 1;
    for costs in &mut input.costs {
        if costs.release == input.releases[last].name {
            costs.release = long.clone();
        }
        costs.workflow = format!("{} with a long workflow name", costs.workflow);
    }
    input.releases[last].name = long.clone();
    let report = run(&input, &quick_config()).unwrap();
    let text = report.to_text();
    assert!(text.contains(&long), "{text}");
    assert!(text.contains("with a long workflow name"), "{text}");
    assert!(!text.contains('~'), "{text}");
}
