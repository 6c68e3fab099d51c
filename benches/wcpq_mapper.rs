//! Benchmark of the WCPQ strict mapper: 4 classes, the 18 default policies, a denominator-20
//! codebook (1771 grid vectors x 3 confidences) plus synthetic training natives and pair midpoints.
//!
//! Prints p50/p99 of 20,000 individually timed `map()` calls (criterion reports the mean).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use releasegate_core::codebook::{self, TrainingAnswer};
use releasegate_core::rng::Rng;
use releasegate_core::wcpq::{Mapper, Outcome};
use releasegate_core::workflow::{
    CostBase, Family, LOGISTIC_FORMAT, LogisticModel, Posterior, Profile, Release, Spec,
};
use serde_json::json;

const CLASSES: [&str; 4] = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"];

fn random_vector(rng: &mut Rng, n: usize) -> Vec<f64> {
    // Exponential draws give a flat Dirichlet; cubing skews towards confident answers.
    let raw: Vec<f64> = (0..n)
        .map(|_| (-(1.0 - rng.uniform()).ln()).powi(3))
        .collect();
    let sum: f64 = raw.iter().sum();
    raw.iter().map(|v| v / sum).collect()
}

/// The proxy's own round trip (encode as released under `full_native`, parse, read back).
fn roundtrip(classes: &[String], r: &Release) -> Option<Release> {
    let question = releasegate_core::wire::AskedQuestion {
        id: "q".to_string(),
        kind: releasegate_core::wire::Kind::Choice,
        legend: None,
    };
    let form = releasegate_core::release::Form {
        question: &question,
        labels: classes,
        view: releasegate_core::contract::View::FullNative,
        confidence: true,
        withhold: &[],
        shape: releasegate_core::contract::Shape::Complete,
    };
    releasegate_core::release::roundtrip(&form, r)
}

/// A synthetic frozen logistic model over the release features and two public token counts.
fn logistic_spec(classes: &[String]) -> Spec {
    let mut rng = Rng::new(7);
    let f = 2 * classes.len() + 3 + 2;
    let weights: Vec<Vec<f64>> = (0..classes.len())
        .map(|t| {
            (0..f)
                .map(|i| if i == t { 3.0 } else { 0.3 * rng.normal() })
                .collect()
        })
        .collect();
    let model: LogisticModel = serde_json::from_value(json!({
        "format": LOGISTIC_FORMAT,
        "classes": classes,
        "public_features": {"features": [
            {"kind": "tokens", "pointer": "/text", "vocabulary": ["late", "box"]},
        ]},
        "intercepts": vec![0.0; classes.len()],
        "weights": weights,
    }))
    .expect("model");
    Spec::new(
        classes.to_vec(),
        CostBase::authored_4(),
        &Family::ALL,
        &Profile::ALL,
        Posterior::Logistic(Box::new(model)),
    )
    .expect("logistic spec")
}

fn setup(logistic: bool) -> (Mapper, Vec<Release>, Vec<String>) {
    let classes: Vec<String> = CLASSES.iter().map(|s| s.to_string()).collect();
    let spec = if logistic {
        logistic_spec(&classes)
    } else {
        Spec::standard(classes.clone()).expect("standard spec")
    };
    let mut rng = Rng::new(20261011);
    let training: Vec<TrainingAnswer> = (0..1200)
        .map(|i| TrainingAnswer {
            pair_id: format!("pair-{}", i / 2),
            probabilities: random_vector(&mut rng, 4),
            confidence: Some(rng.uniform()),
        })
        .collect();
    let started = Instant::now();
    let built = codebook::build(&classes, 20, &spec, &training, "bench".into()).expect("codebook");
    let build_time = started.elapsed();
    let started = Instant::now();
    let codewords = built.codebook.len();
    let mapper = Mapper::new(built.codebook, spec).expect("mapper");
    eprintln!(
        "codebook: {codewords} codewords, build {:?}, mapper precompute {:?}",
        build_time,
        started.elapsed()
    );
    let answers = (0..1000)
        .map(|_| {
            let p = random_vector(&mut rng, 4);
            let choice = (0..4).fold(0, |best, t| if p[t] > p[best] { t } else { best });
            Release {
                choice,
                probabilities: Some(p),
                confidence: Some(rng.uniform()),
            }
        })
        .collect();
    (mapper, answers, classes)
}

fn percentiles(mapper: &Mapper, answers: &[Release], classes: &[String]) {
    let state = json!({});
    let rt = |r: &Release| roundtrip(classes, r);
    let mut times: Vec<Duration> = Vec::with_capacity(20_000);
    let mut covered = 0usize;
    for i in 0..20_000 {
        let answer = &answers[i % answers.len()];
        let started = Instant::now();
        let outcome = black_box(mapper.map(black_box(answer), &state, &rt));
        times.push(started.elapsed());
        covered += usize::from(matches!(outcome, Outcome::Covered { .. }));
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    eprintln!(
        "map() over 20000 calls: p50 {:?}, p99 {:?}, max {:?}, coverage {covered}/20000",
        at(0.50),
        at(0.99),
        times[times.len() - 1]
    );
}

fn main() {
    let (mapper, answers, classes) = setup(false);
    percentiles(&mapper, &answers, &classes);
    let state = json!({});
    let rt = |r: &Release| roundtrip(&classes, r);
    let mut criterion = Criterion::default()
        .sample_size(50)
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut i = 0usize;
    criterion.bench_function("wcpq_map_4_classes_18_policies", |b| {
        b.iter(|| {
            i = (i + 1) % answers.len();
            black_box(mapper.map(black_box(&answers[i]), &state, &rt))
        })
    });
    criterion.bench_function("wcpq_native_signature", |b| {
        b.iter(|| {
            i = (i + 1) % answers.len();
            black_box(mapper.native_signature(black_box(&answers[i]), &state))
        })
    });
    criterion.bench_function("json_roundtrip_only", |b| {
        b.iter(|| {
            i = (i + 1) % answers.len();
            black_box(rt(black_box(&answers[i])))
        })
    });
    let (logistic, answers, _) = setup(true);
    let state = json!({"text": "parcel late, box damaged"});
    let mut covered = 0usize;
    let started = Instant::now();
    for answer in &answers {
        covered += usize::from(matches!(
            logistic.map(answer, &state, &rt),
            Outcome::Covered { .. }
        ));
    }
    eprintln!(
        "logistic posterior: {} answers mapped in {:?} (scan path), coverage {covered}/{}",
        answers.len(),
        started.elapsed(),
        answers.len()
    );
    criterion.bench_function("wcpq_map_logistic_scan", |b| {
        b.iter(|| {
            i = (i + 1) % answers.len();
            black_box(logistic.map(black_box(&answers[i]), &state, &rt))
        })
    });
    criterion.final_summary();
}
