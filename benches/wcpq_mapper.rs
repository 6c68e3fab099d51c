//! Benchmark of the WCPQ strict mapper: 4 classes, the 18 default policies, a denominator-20
//! codebook (1771 grid vectors x 3 confidences) plus synthetic training natives and pair midpoints.
//!
//! Prints p50/p99 of 20,000 individually timed `map()` calls (criterion reports the mean).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use releasegate::codebook::{self, TrainingAnswer};
use releasegate::rng::Rng;
use releasegate::wcpq::{Mapper, Outcome};
use releasegate::workflow::{Release, Spec};
use serde_json::{Map, Value, json};

const CLASSES: [&str; 4] = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"];

fn random_vector(rng: &mut Rng, n: usize) -> Vec<f64> {
    // Exponential draws give a flat Dirichlet; cubing skews towards confident answers.
    let raw: Vec<f64> = (0..n)
        .map(|_| (-(1.0 - rng.uniform()).ln()).powi(3))
        .collect();
    let sum: f64 = raw.iter().sum();
    raw.iter().map(|v| v / sum).collect()
}

fn roundtrip(classes: &[String], r: &Release) -> Option<Release> {
    let mut obj = Map::new();
    obj.insert("choice".into(), json!(classes.get(r.choice)?));
    if let Some(p) = &r.probabilities {
        let probs: Map<String, Value> = classes
            .iter()
            .cloned()
            .zip(p.iter().map(|v| json!(v)))
            .collect();
        obj.insert("probabilities".into(), Value::Object(probs));
    }
    if let Some(c) = r.confidence {
        obj.insert("confidence".into(), json!(c));
    }
    let text = serde_json::to_string(&Value::Object(obj)).ok()?;
    let back: Value = serde_json::from_str(&text).ok()?;
    let choice = classes
        .iter()
        .position(|c| Some(c.as_str()) == back["choice"].as_str())?;
    let probabilities = match back.get("probabilities") {
        Some(Value::Object(m)) => Some(
            classes
                .iter()
                .map(|c| m.get(c).and_then(Value::as_f64))
                .collect::<Option<Vec<f64>>>()?,
        ),
        _ => None,
    };
    let confidence = back.get("confidence").and_then(Value::as_f64);
    Some(Release {
        choice,
        probabilities,
        confidence,
    })
}

fn setup() -> (Mapper, Vec<Release>, Vec<String>) {
    let classes: Vec<String> = CLASSES.iter().map(|s| s.to_string()).collect();
    let spec = Spec::standard(classes.clone()).expect("standard spec");
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
    let (mapper, answers, classes) = setup();
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
    criterion.final_summary();
}
