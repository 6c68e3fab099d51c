//! Conformance with the real Rust client: `typesafe-jev` 0.2.0 (blocking,
//! ureq) drives the real proxy. Every view × answer type × mechanism, with
//! coarsening and withholding, must come back as typed answers carrying
//! exactly the released values; every error status must map to the client's
//! documented error variant.
//!
//! The client cannot send custom headers, so its recipient is bound to two
//! contracts and selects one with the `/contracts/{name}/` path prefix.
//!
//! Every release is in the default `complete` shape: each answer carries every
//! field the client requires (a configuration cannot give an allowed question
//! `no_output`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use releasegate_core::workflow::{RawWorkflows, Spec};
use releasegate_core::{baseline, codebook};
use serde_json::{Value, json};
use typesafe_jev::{Choice, Client, Content, Error, Noul, Questions, Response, Score};

use crate::helpers::{
    Provider, TestApp, TestConfig, contract, native_answer, question, recipient, spawn_upstream,
    start,
};

const KEY: &str = "jev-conformance-key";
const NARROW_KEY: &str = "jev-narrow-key";

// ---------------------------------------------------------------------------
// The client

/// A client for the full endpoint URL; retries are immediate unless `patient`.
fn client(url: &str, key: &str, max_retries: u32, patient: bool) -> Client {
    let config = typesafe_jev::Config {
        base_url: url.to_string(),
        max_retries,
        backoff_scale: if patient { 1.0 } else { 0.0 },
        throttle_pause: Duration::ZERO,
        timeout: Duration::from_secs(20),
        ..typesafe_jev::Config::default()
    };
    Client::new(key, config).expect("client config")
}

/// Runs the blocking client off the async runtime (the proxy runs on it).
async fn ask(
    url: String,
    key: &'static str,
    state: Value,
    questions: Questions,
    max_retries: u32,
    patient: bool,
) -> (Result<Response, Error>, u64) {
    tokio::task::spawn_blocking(move || {
        let client = client(&url, key, max_retries, patient);
        let result = client.ask(&state, &questions);
        (result, client.usage().retries())
    })
    .await
    .expect("client thread")
}

fn questions() -> Questions {
    Questions::new()
        .with("cause", Choice::labels("Why?", ["A", "B", "C", "D"]))
        .with("level", Score::new("How bad?", ["low", "mid", "high"]))
        .with("urgent", Noul::new("Urgent?"))
}

fn state() -> Value {
    json!({"ticket": "late parcel"})
}

// ---------------------------------------------------------------------------
// Contracts

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mech {
    None,
    Wcpq,
    Quantize,
    TopK,
    Temperature,
    Gaussian,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    view: &'static str,
    mech: Mech,
    coarsen: bool,
    withhold: bool,
}

const MATRIX_3: &str = "[[0.0, 4.0, 10.0], [5.0, 0.0, 9.0], [8.0, 8.0, 0.0], [1.8, 1.8, 1.8]]";
const MATRIX_2: &str = "[[0.0, 10.0], [10.0, 0.0], [1.8, 1.8]]";

fn labels(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn parse_matrix(text: &str) -> Vec<Vec<f64>> {
    serde_json::from_str(text).unwrap()
}

/// A grid codebook for `classes` under the standard workflows (or the given
/// cost matrix), built once per process.
fn codebook_path(classes: &[&str], matrix: Option<&str>) -> PathBuf {
    static BUILT: OnceLock<std::sync::Mutex<BTreeMap<String, PathBuf>>> = OnceLock::new();
    let key = classes.join(",");
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    built
        .entry(key.clone())
        .or_insert_with(|| {
            let classes = labels(classes);
            let spec = match matrix {
                None => Spec::standard(classes.clone()).unwrap(),
                Some(matrix) => {
                    let raw: RawWorkflows = serde_json::from_value(serde_json::json!({
                        "families": ["selective", "clarification", "asymmetric"],
                        "profiles": ["authored", "review_half", "review_double", "check_quarter",
                                     "error_double", "asymmetric_class0_double"],
                        "costs": {"c_wrong": 10, "c_review": 2, "c_check": 0.4,
                                  "matrix": parse_matrix(matrix)},
                    }))
                    .unwrap();
                    Spec::from_raw(&raw, &classes, Path::new("."), &|path| std::fs::read(path))
                        .unwrap()
                }
            };
            let built = codebook::build(&classes, 20, &spec, &[], "jev".into()).unwrap();
            static DIR: std::sync::LazyLock<tempfile::TempDir> =
                std::sync::LazyLock::new(|| tempfile::tempdir().expect("a scratch directory"));
            let path = DIR
                .path()
                .join(format!("jev-{}.json", key.replace(',', "_")));
            std::fs::write(&path, built.codebook.to_json_bytes()).unwrap();
            path
        })
        .clone()
}

/// The `mechanism` (and `workflows`) lines of one question.
fn mechanism(mech: Mech, released: &[&str], matrix: Option<&str>) -> String {
    match mech {
        Mech::None => "mechanism = { kind = \"none\" }\n".into(),
        Mech::Quantize => "mechanism = { kind = \"quantize\", step = 0.1 }\n".into(),
        Mech::TopK => "mechanism = { kind = \"top_k\", k = 2 }\n".into(),
        Mech::Temperature => "mechanism = { kind = \"temperature\", tau = 2 }\n".into(),
        Mech::Gaussian => "mechanism = { kind = \"gaussian\", sigma = 0.05, seed = 7 }\n".into(),
        Mech::Wcpq => {
            let path = codebook_path(released, matrix);
            let workflows = match matrix {
                None => "workflows = { preset = \"tuple-bench\" }".to_string(),
                Some(matrix) => format!(
                    "workflows = {{ families = [\"selective\", \"clarification\", \"asymmetric\"], profiles = [\"authored\", \"review_half\", \"review_double\", \"check_quarter\", \"error_double\", \"asymmetric_class0_double\"], costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, matrix = {matrix} }} }}"
                ),
            };
            format!(
                "mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"native\" }}\n{workflows}\n",
                path.display()
            )
        }
    }
}

/// The text `questions()` sends for the level and urgent questions, pinned by the contracts.
const LEVEL: &str = "instructions = \"How bad?\"\ndescriptions = { \"0\" = \"low\", \"1\" = \"mid\", \"2\" = \"high\" }\n";
const URGENT: &str = "instructions = \"Urgent?\"\n";

fn config_text(case: &Case, base_url: &str, provider_extra: &str) -> String {
    let (cause_released, cause_matrix): (&[&str], Option<&str>) = if case.coarsen {
        (&["AB", "C", "D"], Some(MATRIX_3))
    } else {
        (&["A", "B", "C", "D"], None)
    };
    let mut cause = String::from("instructions = \"Why?\"\n");
    if case.coarsen {
        cause.push_str("coarsen = { A = \"AB\", B = \"AB\" }\n");
    }
    if case.withhold {
        let label = if case.coarsen { "AB" } else { "B" };
        cause.push_str(&format!("withhold_labels = [\"{label}\"]\n"));
    }
    cause.push_str(&mechanism(case.mech, cause_released, cause_matrix));
    let level = format!(
        "{LEVEL}{}",
        mechanism(case.mech, &["0", "1", "2"], Some(MATRIX_3))
    );
    let urgent = format!(
        "{URGENT}{}",
        mechanism(case.mech, &["false", "true"], Some(MATRIX_2))
    );
    TestConfig {
        server: "shutdown_grace_ms = 500".into(),
        max_body_bytes: Some(65536),
        provider: Provider::Url(base_url.into()),
        provider_extra: format!("timeout_ms = 10000\n{provider_extra}"),
        recipients: vec![
            recipient("caller", KEY, &["case", "spare"]),
            recipient("narrow", NARROW_KEY, &["case"]),
        ],
        contracts: vec![
            contract(
                "case",
                "usage = \"keep\"",
                vec![
                    question("cause", &["A", "B", "C", "D"], case.view, &cause),
                    question("level", &["0", "1", "2"], case.view, &level),
                    question("urgent", &["false", "true"], case.view, &urgent),
                ],
            ),
            contract(
                "spare",
                "",
                vec![question(
                    "urgent",
                    &["false", "true"],
                    "full_native",
                    URGENT,
                )],
            ),
        ],
        ..TestConfig::bare()
    }
    .toml("")
}

async fn spawn_case(case: &Case, provider_extra: &str) -> TestApp {
    let (upstream, base_url) = spawn_upstream().await;
    upstream.answer(native_answer());
    let text = config_text(case, &base_url, provider_extra);
    let config = releasegate_proxy::load::from_toml_with_env(&text, &|_: &str| None)
        .unwrap_or_else(|error| panic!("{case:?}: {error}"));
    start(config, upstream).await
}

fn case_url(app: &TestApp, contract: &str) -> String {
    format!("{}/contracts/{contract}/v1/systemone", app.address)
}

// ---------------------------------------------------------------------------
// Expectations

const NATIVE_CAUSE: [f64; 4] = [0.15, 0.7, 0.05, 0.1];
const NATIVE_LEVEL: [f64; 3] = [0.0, 0.95, 0.05];
const NATIVE_URGENT: [f64; 2] = [0.2, 0.8];

fn has_probabilities(view: &str) -> bool {
    matches!(view, "full_probabilities" | "full_native")
}

fn has_confidence(view: &str) -> bool {
    matches!(view, "choice_confidence" | "full_native")
}

/// The released probabilities when the mechanism's output is known exactly
/// (`None` for noise and WCPQ codewords, checked structurally instead).
fn mechanism_output(mech: Mech, p: &[f64]) -> Option<Vec<Option<f64>>> {
    let all = |v: Vec<f64>| v.into_iter().map(Some).collect();
    match mech {
        Mech::None => Some(all(p.to_vec())),
        Mech::Quantize => {
            let order: Vec<usize> = (0..p.len()).collect();
            Some(all(baseline::quantize(p, 0.1, &order).unwrap()))
        }
        Mech::TopK => Some(baseline::top_k(p, 2)),
        Mech::Temperature => Some(all(baseline::temperature(p, 2.0).unwrap())),
        Mech::Gaussian | Mech::Wcpq => None,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// A released distribution whose values are not known in advance: every
/// label, values in [0, 1], summing to 1.
fn assert_distribution(what: &str, values: &[f64], count: usize) {
    assert_eq!(values.len(), count, "{what}: {values:?}");
    assert!(
        values.iter().all(|p| (0.0..=1.0).contains(p)),
        "{what}: {values:?}"
    );
    let sum: f64 = values.iter().sum();
    assert!((sum - 1.0).abs() < 1e-6, "{what}: sums to {sum}");
}

fn check_cause(case: &Case, response: &Response) {
    let answer = response
        .choice("cause")
        .expect("a choice answer for `cause`");
    let (released, native, choice): (Vec<&str>, Vec<f64>, &str) = if case.coarsen {
        (vec!["AB", "C", "D"], vec![0.85, 0.05, 0.1], "AB")
    } else {
        (vec!["A", "B", "C", "D"], NATIVE_CAUSE.to_vec(), "B")
    };
    let what = format!("{case:?} cause");
    assert_eq!(answer.choice, choice, "{what}");
    if has_probabilities(case.view) {
        let got: Vec<(String, f64)> = answer
            .probabilities
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if case.withhold {
            // A withheld selection keeps only its own probability.
            let index = released.iter().position(|l| *l == choice).unwrap();
            let own = answer.probabilities.get(choice).copied();
            assert!(
                own.is_some_and(|p| close(p, native[index])),
                "{what}: {got:?}"
            );
            let others: Vec<f64> = released
                .iter()
                .filter(|l| **l != choice)
                .filter_map(|l| answer.probabilities.get(*l).copied())
                .collect();
            let native_others: Vec<f64> = released
                .iter()
                .zip(&native)
                .filter(|(l, _)| **l != choice)
                .map(|(_, p)| *p)
                .collect();
            assert_ne!(
                others, native_others,
                "{what}: a withheld answer leaks the others"
            );
        } else {
            match mechanism_output(case.mech, &native) {
                Some(expected) => {
                    let expected: Vec<(String, f64)> = released
                        .iter()
                        .zip(expected)
                        .filter_map(|(l, p)| p.map(|p| (l.to_string(), p)))
                        .collect();
                    assert_eq!(got.len(), expected.len(), "{what}: {got:?} vs {expected:?}");
                    for ((gl, gp), (el, ep)) in got.iter().zip(&expected) {
                        assert!(
                            gl == el && close(*gp, *ep),
                            "{what}: {got:?} vs {expected:?}"
                        );
                    }
                }
                None => {
                    let values: Vec<f64> =
                        released.iter().map(|l| answer.probabilities[*l]).collect();
                    assert_distribution(&what, &values, released.len());
                }
            }
        }
    }
    let native_confidence = 0.61;
    if has_confidence(case.view) && !case.withhold {
        match case.mech {
            Mech::Wcpq => {}
            // Native values, native confidence.
            Mech::None if !case.coarsen => assert!(
                close(answer.confidence, native_confidence),
                "{what}: {answer:?}"
            ),
            // A rewritten vector (a baseline's, or the coarse sums) brings its own
            // confidence: the definition on what was released, never the native one.
            _ => {
                assert!(
                    !close(answer.confidence, native_confidence),
                    "{what}: a rewritten answer carries the native confidence"
                );
                if has_probabilities(case.view) {
                    let labels: Vec<String> = released.iter().map(|l| l.to_string()).collect();
                    let entries: Vec<Option<f64>> = released
                        .iter()
                        .map(|l| answer.probabilities.get(*l).copied())
                        .collect();
                    let derived = releasegate_core::release::shape::confidence_of(
                        releasegate_core::wire::Kind::Choice,
                        &labels,
                        &entries,
                    );
                    assert!(close(answer.confidence, derived), "{what}: {answer:?}");
                }
            }
        }
    } else {
        assert!(
            !close(answer.confidence, native_confidence),
            "{what}: an unreleased confidence carries the native value"
        );
    }
}

fn check_level(case: &Case, response: &Response) {
    let answer = response.score("level").expect("a score answer for `level`");
    let what = format!("{case:?} level");
    let legend: BTreeMap<u32, Content> = [(0, "low"), (1, "mid"), (2, "high")]
        .into_iter()
        .map(|(level, text)| (level, Content::from(text)))
        .collect();
    assert_eq!(answer.legend, legend, "{what}");
    if has_probabilities(case.view) {
        match mechanism_output(case.mech, &NATIVE_LEVEL) {
            Some(expected) => {
                let got: Vec<(u32, f64)> =
                    answer.probabilities.iter().map(|(k, v)| (*k, *v)).collect();
                let expected: Vec<(u32, f64)> = expected
                    .iter()
                    .enumerate()
                    .filter_map(|(level, p)| p.map(|p| (level as u32, p)))
                    .collect();
                assert_eq!(got.len(), expected.len(), "{what}: {got:?} vs {expected:?}");
                for ((gl, gp), (el, ep)) in got.iter().zip(&expected) {
                    assert!(
                        gl == el && close(*gp, *ep),
                        "{what}: {got:?} vs {expected:?}"
                    );
                }
                // The score is the expectation over the released levels.
                let mass: f64 = expected.iter().map(|(_, p)| p).sum();
                let total: f64 = expected.iter().map(|(l, p)| f64::from(*l) * p).sum();
                assert!(
                    close(answer.score, total / mass),
                    "{what}: score {}",
                    answer.score
                );
            }
            None => {
                let values: Vec<f64> = answer.probabilities.values().copied().collect();
                assert_distribution(&what, &values, 3);
                let total: f64 = answer
                    .probabilities
                    .iter()
                    .map(|(l, p)| f64::from(*l) * p)
                    .sum();
                assert!(close(answer.score, total), "{what}: score {}", answer.score);
            }
        }
    } else {
        assert_eq!(answer.score, 1.0, "{what}: the selected level");
    }
    if has_confidence(case.view) && case.mech == Mech::None {
        assert!(close(answer.confidence, 0.92), "{what}: {answer:?}");
    } else if has_confidence(case.view) && case.mech != Mech::Wcpq {
        // A baseline's confidence is the score definition on the released vector.
        assert!(!close(answer.confidence, 0.92), "{what}: {answer:?}");
        if has_probabilities(case.view) {
            let labels: Vec<String> = (0..3).map(|l| l.to_string()).collect();
            let entries: Vec<Option<f64>> = (0..3)
                .map(|l| answer.probabilities.get(&l).copied())
                .collect();
            let derived = releasegate_core::release::shape::confidence_of(
                releasegate_core::wire::Kind::Score,
                &labels,
                &entries,
            );
            assert!(close(answer.confidence, derived), "{what}: {answer:?}");
        }
    } else if !has_confidence(case.view) {
        assert!(
            !close(answer.confidence, 0.92),
            "{what}: unreleased confidence leaks"
        );
    }
}

fn check_urgent(case: &Case, response: &Response) {
    let answer = response.noul("urgent").expect("a noul answer for `urgent`");
    let what = format!("{case:?} urgent");
    if has_probabilities(case.view) {
        match mechanism_output(case.mech, &NATIVE_URGENT) {
            Some(expected) => {
                let p_true = expected[1].unwrap_or(1.0);
                assert!(
                    close(answer.noul, p_true),
                    "{what}: {} vs {p_true}",
                    answer.noul
                );
            }
            None => assert!((0.0..=1.0).contains(&answer.noul), "{what}"),
        }
    } else {
        assert_eq!(answer.noul, 1.0, "{what}: the selected outcome");
    }
}

/// The client read exactly what the proxy released: every field present in
/// the raw body has the same value in the typed answer.
fn check_against_raw(what: &str, response: &Response, raw: &Value) {
    assert_eq!(response.model, raw["model"].as_str().unwrap(), "{what}");
    assert_eq!(
        response.usage.input_tokens,
        raw["usage"]["input_tokens"].as_u64(),
        "{what}"
    );
    let answers = raw["answers"].as_object().unwrap();
    assert_eq!(response.answers.len(), answers.len(), "{what}");
    for (id, raw_answer) in answers {
        let typed = serde_json::to_value(&response.answers[id]).unwrap();
        for (field, value) in raw_answer.as_object().unwrap() {
            let got = &typed[field];
            let same = match (field.as_str(), value) {
                ("probabilities", Value::Object(map)) => {
                    map.len() == got.as_object().map_or(0, |g| g.len())
                        && map.iter().all(|(k, v)| got[k].as_f64() == v.as_f64())
                }
                (_, Value::Number(n)) => got.as_f64() == n.as_f64(),
                _ => got == value,
            };
            assert!(same, "{what}: `{id}.{field}` raw {value} vs typed {got}");
        }
    }
}

async fn run_case(case: Case) {
    let app = spawn_case(&case, "").await;
    let url = case_url(&app, "case");
    let (result, _) = ask(url.clone(), KEY, state(), questions(), 0, false).await;
    let response = result.unwrap_or_else(|error| panic!("{case:?}: the client failed: {error}"));
    // The same request bytes, read raw.
    let sent = app.upstream.last().body;
    let raw: Value = app
        .client
        .post(&url)
        .bearer_auth(KEY)
        .body(sent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    check_against_raw(&format!("{case:?}"), &response, &raw);
    check_cause(&case, &response);
    check_level(&case, &response);
    check_urgent(&case, &response);
    app.stop().await;
}

macro_rules! cases {
    ($( $(#[$meta:meta])* $name:ident: $view:literal, $mech:ident $(, $flag:ident)* ;)*) => {
        $(
            #[tokio::test]
            $(#[$meta])*
            async fn $name() {
                let case = Case { view: $view, mech: Mech::$mech, coarsen: false, withhold: false };
                $( let case = cases!(@flag case, $flag); )*
                run_case(case).await;
            }
        )*
    };
    (@flag $case:ident, coarsen) => { Case { coarsen: true, ..$case } };
    (@flag $case:ident, withhold) => { Case { withhold: true, ..$case } };
}

// Every view × mechanism, then coarsening and withholding.
cases! { choice_none: "choice", None; choice_wcpq: "choice", Wcpq; choice_quantize: "choice", Quantize; choice_top_k: "choice", TopK; choice_temperature: "choice", Temperature; choice_gaussian: "choice", Gaussian; choice_confidence_none: "choice_confidence", None; choice_confidence_wcpq: "choice_confidence", Wcpq; choice_confidence_quantize: "choice_confidence", Quantize; choice_confidence_top_k: "choice_confidence", TopK; choice_confidence_temperature: "choice_confidence", Temperature; choice_confidence_gaussian: "choice_confidence", Gaussian; full_probabilities_none: "full_probabilities", None; full_probabilities_wcpq: "full_probabilities", Wcpq; full_probabilities_quantize: "full_probabilities", Quantize; full_probabilities_top_k: "full_probabilities", TopK; full_probabilities_temperature: "full_probabilities", Temperature; full_probabilities_gaussian: "full_probabilities", Gaussian;
    full_native_none: "full_native", None;
    full_native_wcpq: "full_native", Wcpq;
    full_native_quantize: "full_native", Quantize;
    full_native_top_k: "full_native", TopK;
    full_native_temperature: "full_native", Temperature;
    full_native_gaussian: "full_native", Gaussian; choice_coarsened: "choice", None, coarsen; choice_confidence_coarsened: "choice_confidence", None, coarsen; full_probabilities_coarsened: "full_probabilities", None, coarsen;
    full_native_coarsened: "full_native", None, coarsen;
    full_native_wcpq_coarsened: "full_native", Wcpq, coarsen; choice_withheld: "choice", None, withhold; choice_confidence_withheld: "choice_confidence", None, withhold; full_probabilities_withheld: "full_probabilities", None, withhold; full_native_withheld: "full_native", None, withhold; full_native_top_k_withheld: "full_native", TopK, withhold; full_native_coarsened_withheld: "full_native", None, coarsen, withhold; full_probabilities_coarsened_withheld: "full_probabilities", None, coarsen, withhold;
}

/// Whatever fills the fields a view does not release must not depend on the
/// native answer: two natives that agree on the released fields read the same.
#[tokio::test]
async fn unreleased_fields_do_not_depend_on_the_native_answer() {
    let mut other = native_answer();
    other["answers"]["cause"]["probabilities"] = json!({"A": 0.3, "B": 0.4, "C": 0.2, "D": 0.1});
    other["answers"]["level"]["probabilities"] = json!({"0": 0.3, "1": 0.4, "2": 0.3});
    let cases = [("choice", other.clone()), ("choice_confidence", other)];
    for (view, twin) in cases {
        let case = Case {
            view,
            mech: Mech::None,
            coarsen: false,
            withhold: false,
        };
        let app = spawn_case(&case, "").await;
        let url = case_url(&app, "case");
        let (first, _) = ask(url.clone(), KEY, state(), questions(), 0, false).await;
        app.upstream.answer(twin);
        let (second, _) = ask(url, KEY, state(), questions(), 0, false).await;
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_eq!(first.answers, second.answers, "{view}");
        app.stop().await;
    }
}

// ---------------------------------------------------------------------------
// Errors: each status reaches the client as its documented variant, with the
// proxy's message; transient ones are retried.

const FULL: Case = Case {
    view: "full_native",
    mech: Mech::None,
    coarsen: false,
    withhold: false,
};

#[tokio::test]
async fn unknown_and_unbound_keys_are_auth_errors() {
    let app = spawn_case(&FULL, "").await;
    let (result, retries) = ask(
        case_url(&app, "case"),
        "wrong-key",
        state(),
        questions(),
        3,
        false,
    )
    .await;
    let error = result.unwrap_err();
    assert!(
        matches!(&error, Error::Auth(m) if m.contains("401") && m.contains("authentication_error")),
        "{error:?}"
    );
    assert_eq!(retries, 0, "401 is not retried");
    let (result, _) = ask(
        case_url(&app, "spare"),
        NARROW_KEY,
        state(),
        questions(),
        3,
        false,
    )
    .await;
    let error = result.unwrap_err();
    assert!(
        matches!(&error, Error::Auth(m) if m.contains("403") && m.contains("permission_denied")),
        "{error:?}"
    );
    // Without the path prefix a key bound to two contracts must choose: 400.
    let plain = format!("{}/v1/systemone", app.address);
    let (result, _) = ask(plain, KEY, state(), questions(), 3, false).await;
    let error = result.unwrap_err();
    assert!(
        matches!(&error, Error::Api(m) if m.contains("400") && m.contains("contract_required")),
        "{error:?}"
    );
    assert!(app.upstream.seen.lock().unwrap().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn schema_errors_are_invalid_requests_naming_the_field() {
    let app = spawn_case(&FULL, "").await;
    let url = case_url(&app, "case");
    let empty_scale = Questions::new().with("level", Score::new("How bad?", Vec::<&str>::new()));
    let (result, retries) = ask(url.clone(), KEY, state(), empty_scale, 3, false).await;
    let error = result.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidRequest(m) if m.contains("422") && m.contains("\"too_short\"")
            && m.contains(r#"["body","questions","level","score","criteria"]"#)),
        "{error:?}"
    );
    assert_eq!(retries, 0);
    let (result, _) = ask(url, KEY, json!(5), questions(), 3, false).await;
    let error = result.unwrap_err();
    assert!(
        matches!(&error, Error::InvalidRequest(m) if m.contains(r#"["body","state","str"]"#)),
        "{error:?}"
    );
    assert!(app.upstream.seen.lock().unwrap().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn contract_violations_are_api_errors_with_the_message() {
    let app = spawn_case(&FULL, "").await;
    let outside = questions().with("secret", Noul::new("Internal?"));
    let (result, retries) = ask(case_url(&app, "case"), KEY, state(), outside, 3, false).await;
    let error = result.unwrap_err();
    // typesafe-jev reads every 403 as `Auth`; the message names the question.
    assert!(
        matches!(&error, Error::Auth(m) if m.contains("`secret` is not released")),
        "{error:?}"
    );
    assert_eq!(retries, 0);
    app.stop().await;
}

#[tokio::test]
async fn an_oversized_body_is_a_token_limit() {
    let app = spawn_case(&FULL, "").await;
    let big = json!({"ticket": "x".repeat(70_000)});
    let (result, retries) = ask(case_url(&app, "case"), KEY, big, questions(), 3, false).await;
    let error = result.unwrap_err();
    assert!(
        matches!(&error, Error::TokenLimit(m) if m.contains("request_too_large")),
        "{error:?}"
    );
    assert_eq!(retries, 0);
    app.stop().await;
}

#[tokio::test]
async fn throttling_and_provider_failures_are_retried_until_an_answer() {
    let app = spawn_case(&FULL, "").await;
    let url = case_url(&app, "case");
    // One refusal of each kind, then the scripted answer.
    let refusals: [(u16, &[(&str, &str)]); 4] = [
        (429, &[("retry-after", "0")]),
        (529, &[("retry-after", "0")]),
        (500, &[]),
        (503, &[]),
    ];
    for (status, headers) in refusals {
        app.upstream.once(
            status,
            b"{\"detail\": \"UPSTREAM-SECRET\"}".to_vec(),
            headers,
        );
    }
    let (result, retries) = ask(url, KEY, state(), questions(), 8, false).await;
    let response = result.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(response.choice("cause").unwrap().choice, "B");
    assert_eq!(retries, 4);
    assert_eq!(app.upstream.seen.lock().unwrap().len(), 5);
    app.stop().await;
}

#[tokio::test]
async fn exhausted_retries_are_api_errors_with_the_last_status() {
    let app = spawn_case(&FULL, "").await;
    let url = case_url(&app, "case");
    let cases: [(u16, &str, &str); 3] = [
        (429, "HTTP 429", "rate_limited"),
        (529, "HTTP 529", "overloaded"),
        (500, "HTTP 502", "upstream_error"),
    ];
    for (status, http, error_type) in cases {
        app.upstream.script(
            status,
            b"UPSTREAM-SECRET".to_vec(),
            &[("retry-after", "0")],
            Duration::ZERO,
        );
        let (result, retries) = ask(url.clone(), KEY, state(), questions(), 2, false).await;
        let error = result.unwrap_err();
        let message = error.message();
        assert!(
            matches!(&error, Error::Api(_))
                && message.contains("gave up after 2 retries")
                && message.contains(http)
                && message.contains(error_type)
                && !message.contains("UPSTREAM-SECRET"),
            "{error:?}"
        );
        assert_eq!(retries, 2);
    }
    app.stop().await;
}

/// An upstream that holds every request until the gate opens.
async fn gated_upstream() -> (
    String,
    Arc<tokio::sync::Notify>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use axum::routing::post;
    let gate = Arc::new(tokio::sync::Notify::new());
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route(
        "/v1/systemone",
        post({
            let (gate, seen) = (gate.clone(), seen.clone());
            move || {
                let (gate, seen) = (gate.clone(), seen.clone());
                async move {
                    seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    gate.notified().await;
                    axum::Json(native_answer())
                }
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://127.0.0.1:{port}"), gate, seen)
}

#[tokio::test]
async fn a_saturated_provider_is_503_and_the_client_honours_retry_after() {
    let (base_url, gate, seen) = gated_upstream().await;
    let text = config_text(
        &FULL,
        &base_url,
        "max_concurrency = 1\nqueue_timeout_ms = 100",
    );
    let config = releasegate_proxy::load::from_toml_with_env(&text, &|_: &str| None).unwrap();
    let app = start(config, crate::helpers::Upstream::default()).await;
    let url = case_url(&app, "case");
    // A first request takes the provider's only slot and is held there.
    let held = tokio::spawn(ask(url.clone(), KEY, state(), questions(), 0, false));
    while seen.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Without retries the client sees the 503 itself.
    let (result, _) = ask(url.clone(), KEY, state(), questions(), 0, false).await;
    let error = result.unwrap_err();
    assert!(
        matches!(&error, Error::Api(m) if m.contains("HTTP 503") && m.contains("upstream_saturated")),
        "{error:?}"
    );
    // With retries it waits `retry-after` (1 s) and gets through once the slot frees.
    let patient = tokio::spawn(ask(url, KEY, state(), questions(), 5, true));
    let shed = || async {
        let metrics = app.metrics().await;
        metrics
            .lines()
            .find(|l| l.starts_with("releasegate_upstream_errors_total") && l.contains("saturated"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    while shed().await < 2.0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gate.notify_waiters();
    let (first, _) = held.await.unwrap();
    assert!(first.is_ok(), "{first:?}");
    // Later requests are not held: open the gate for each one that arrives.
    let opener = {
        let gate = gate.clone();
        tokio::spawn(async move {
            loop {
                gate.notify_waiters();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let (result, retries) = patient.await.unwrap();
    opener.abort();
    let response = result.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(response.choice("cause").unwrap().choice, "B");
    assert!(retries >= 1);
    app.stop().await;
}

// ---------------------------------------------------------------------------
// The shipped configuration: every contract of config/releasegate.toml, on
// the simulated provider, through the client.

async fn spawn_shipped() -> TestApp {
    let config = releasegate_proxy::load::load(Some(Path::new("config/releasegate.toml"))).unwrap();
    let loopback = "127.0.0.1:0".parse().unwrap();
    let config = config.with_listeners(loopback, loopback);
    start(config, crate::helpers::Upstream::default()).await
}

fn example(name: &str) -> (Value, Questions) {
    let text = std::fs::read_to_string(format!("config/examples/{name}")).unwrap();
    let request: Value = serde_json::from_str(&text).unwrap();
    let questions: Questions = serde_json::from_value(request["questions"].clone()).unwrap();
    (request["state"].clone(), questions)
}

/// Asks `contract` (by path prefix) the example's questions; checks the typed
/// answers against the raw body and returns them.
async fn shipped(app: &TestApp, key: &'static str, contract: &str, example_name: &str) -> Response {
    let url = case_url(app, contract);
    let (state, questions) = example(example_name);
    let (result, _) = ask(url.clone(), key, state.clone(), questions.clone(), 0, false).await;
    let response = result.unwrap_or_else(|error| panic!("{contract}: the client failed: {error}"));
    let body = json!({"model": "jev-latest", "state": state, "questions": questions});
    let raw: Value = app
        .client
        .post(&url)
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    check_against_raw(contract, &response, &raw);
    response
}

const DELIVERY: [&str; 4] = ["DELAY", "ADDRESS", "DAMAGE", "DELIVERY_RECORD"];

fn assert_full(what: &str, answer: &typesafe_jev::ChoiceAnswer, labels: &[&str]) {
    let values: Vec<f64> = labels.iter().map(|l| answer.probabilities[*l]).collect();
    assert_distribution(what, &values, labels.len());
    assert!(
        labels.contains(&answer.choice.as_str()),
        "{what}: {answer:?}"
    );
}

#[tokio::test]
async fn shipped_dispatcher_gets_the_coarse_cause() {
    let app = spawn_shipped().await;
    let response = shipped(
        &app,
        "demo-dispatcher-key",
        "dispatcher",
        "delivery-request.json",
    )
    .await;
    let cause = response.choice("coarse_cause").unwrap();
    assert!(DELIVERY.contains(&cause.choice.as_str()), "{cause:?}");
    // Dropped usage is schema-complete and carries nothing.
    assert_eq!(response.usage.input_tokens, Some(0), "usage is dropped");
    app.stop().await;
}

#[tokio::test]
async fn shipped_analyst_contracts_by_path() {
    let app = spawn_shipped().await;
    let coarse = shipped(
        &app,
        "demo-analyst-key",
        "analyst-coarse",
        "delivery-request.json",
    )
    .await;
    let cause = coarse.choice("coarse_cause").unwrap();
    assert!(
        ["DELAY", "CUSTOMER_SIDE", "DAMAGE"].contains(&cause.choice.as_str()),
        "{cause:?}"
    );
    assert!(
        cause
            .probabilities
            .keys()
            .all(|k| ["DELAY", "CUSTOMER_SIDE", "DAMAGE"].contains(&k.as_str())),
        "{cause:?}"
    );
    let full = shipped(
        &app,
        "demo-analyst-key",
        "analyst-full",
        "delivery-request.json",
    )
    .await;
    let cause = full.choice("coarse_cause").unwrap();
    assert!(DELIVERY.contains(&cause.choice.as_str()), "{cause:?}");
    assert!((0.0..=1.0).contains(&cause.confidence));
    app.stop().await;
}

#[tokio::test]
async fn shipped_auditor_gets_the_full_native_answer() {
    let app = spawn_shipped().await;
    let response = shipped(&app, "demo-auditor-key", "auditor", "delivery-request.json").await;
    assert_full(
        "auditor",
        response.choice("coarse_cause").unwrap(),
        &DELIVERY,
    );
    assert!(response.usage.input_tokens.is_some(), "usage is kept");
    app.stop().await;
}

#[tokio::test]
async fn shipped_support_gets_every_answer_type() {
    let app = spawn_shipped().await;
    let response = shipped(&app, "demo-support-key", "support", "mixed-request.json").await;
    let department = response.choice("department").unwrap();
    assert!(["delivery_support", "billing", "technical"].contains(&department.choice.as_str()));
    let frustration = response.score("frustration").unwrap();
    assert_eq!(frustration.legend.len(), 3);
    assert_distribution(
        "frustration",
        &frustration
            .probabilities
            .values()
            .copied()
            .collect::<Vec<_>>(),
        3,
    );
    let urgent = response.noul("is_urgent").unwrap();
    assert!((0.0..=1.0).contains(&urgent.noul));
    let response = shipped(&app, "demo-support-key", "support", "score-request.json").await;
    let severity = response.score("severity").unwrap();
    assert!(
        [0.0, 1.0, 2.0, 3.0].contains(&severity.score),
        "the selected level: {severity:?}"
    );
    let response = shipped(&app, "demo-support-key", "support", "noul-request.json").await;
    assert!((0.0..=1.0).contains(&response.noul("is_urgent").unwrap().noul));
    app.stop().await;
}

#[tokio::test]
async fn shipped_planner_gets_a_wcpq_codeword() {
    let app = spawn_shipped().await;
    let response = shipped(&app, "demo-planner-key", "planner", "delivery-request.json").await;
    assert_full(
        "planner",
        response.choice("coarse_cause").unwrap(),
        &DELIVERY,
    );
    app.stop().await;
}
