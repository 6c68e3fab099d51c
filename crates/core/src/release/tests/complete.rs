//! The complete shape: every answer satisfies the official clients' schema,
//! every fill has its documented value, fills are functions of the released
//! fields, and complete and minimal releases read the same.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::*;
use super::{LEVELS, native, request};
use crate::codebook;
use crate::config::Config;
use crate::contract::Shape;
use crate::wire::check_request;
use crate::workflow::Spec;

/// A grid-only codebook over A..D for the standard workflows (built once per denominator).
fn codebook_path(denominator: u32) -> PathBuf {
    static PATHS: OnceLock<std::sync::Mutex<Vec<(u32, PathBuf)>>> = OnceLock::new();
    let paths = PATHS.get_or_init(Default::default);
    let mut paths = paths.lock().unwrap();
    if let Some((_, path)) = paths.iter().find(|(d, _)| *d == denominator) {
        return path.clone();
    }
    let classes: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
    let spec = Spec::standard(classes.clone()).unwrap();
    let built = codebook::build(&classes, denominator, &spec, &[], "complete".into()).unwrap();
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let path = dir.path().join(format!("{denominator}.json"));
    std::fs::write(&path, built.codebook.to_json_bytes()).unwrap();
    paths.push((denominator, path.clone()));
    path
}

/// `mechanism = wcpq` for question q (denominator 20 covers the fixture, 1 does not).
fn wcpq(denominator: u32, fallback: &str, confidence: &str) -> String {
    format!(
        "mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"{fallback}\", confidence = \"{confidence}\" }}\nworkflows = {{ preset = \"tuple-bench\" }}\n",
        codebook_path(denominator).display()
    )
}

/// The contract of q (A..D), s (levels 0..2) and n (noul) under one view and shape.
fn contract(shape: &str, view: &str, q: &str, s: &str, n: &str) -> Arc<Contract> {
    // A configuration cannot say `no_output`; the audit's candidate releases can.
    if view == "no_output" {
        let contract = contract(shape, "choice", q, s, n);
        let contract = contract.with_release(crate::contract::View::NoOutput, None);
        return Arc::new(contract.expect("no_output derives from every contract"));
    }
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\nshape = \"{shape}\"\n\
         [contracts.c.questions.q]\nclasses = [\"A\", \"B\", \"C\", \"D\"]\nview = \"{view}\"\n{q}\n\
         [contracts.c.questions.s]\nclasses = [\"0\", \"1\", \"2\"]\nview = \"{view}\"\n{LEVELS}\n{s}\n\
         [contracts.c.questions.n]\nclasses = [\"false\", \"true\"]\nview = \"{view}\"\ninstructions = \"?\"\n{n}\n"
    );
    Config::from_toml(&text).unwrap().contracts["c"].clone()
}

/// A release with its body read back from the bytes that go out.
struct Sent {
    body: Value,
    answers: Vec<AnswerRecord>,
}

fn release_with(contract: &Contract, native: &Value) -> Sent {
    let asked = check_request(&request(), contract).unwrap();
    let mut rng = crate::rng::Rng::new(1);
    let mut options = Options {
        rng: &mut rng,
        evaluate: true,
    };
    let released = release(contract, &asked, native, &mut options).unwrap();
    Sent {
        body: serde_json::from_slice(&released.to_bytes()).unwrap(),
        answers: released.answers,
    }
}

/// What typesafe-sdk 0.7.5 (pydantic strict) and typesafe-jev 0.2.0 require of an answer.
fn schema_complete(answer: &Value) -> Result<(), String> {
    let object = answer.as_object().ok_or("not an object")?;
    let number = |key: &str| match object.get(key) {
        Some(Value::Number(_)) => Ok(()),
        _ => Err(format!("`{key}` is not a number in {answer}")),
    };
    let numbers_map = |key: &str| match object.get(key) {
        Some(Value::Object(map)) if map.values().all(Value::is_number) => Ok(()),
        _ => Err(format!("`{key}` is not a map of numbers in {answer}")),
    };
    match object.get("type").and_then(Value::as_str) {
        Some("choice") => {
            object
                .get("choice")
                .and_then(Value::as_str)
                .ok_or(format!("no `choice` in {answer}"))?;
            numbers_map("probabilities")?;
            number("confidence")
        }
        Some("score") => {
            number("score")?;
            object
                .get("legend")
                .and_then(Value::as_object)
                .ok_or(format!("no `legend` in {answer}"))?;
            numbers_map("probabilities")?;
            number("confidence")
        }
        Some("noul") => number("noul"),
        _ => Err(format!("no known `type` in {answer}")),
    }
}

/// Compares two JSON values: same keys in the same order, numbers within 1e-12.
fn assert_close(actual: &Value, expected: &Value, context: &str) {
    match (actual, expected) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            assert!((a - b).abs() < 1e-12, "{context}: {a} != {b}");
        }
        (Value::Object(a), Value::Object(b)) => {
            let keys = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(a), keys(b), "{context}: {actual} vs {expected}");
            for (key, value) in a {
                assert_close(value, &b[key], &format!("{context}.{key}"));
            }
        }
        _ => assert_eq!(actual, expected, "{context}"),
    }
}

/// Every question's form under `contract` (for reading).
fn forms<'a>(contract: &'a Contract, asked: &'a crate::wire::Asked) -> Vec<(String, Form<'a>)> {
    asked
        .questions
        .iter()
        .map(|q| {
            (
                q.id.clone(),
                Form::new(q, &contract.questions[&q.id], contract.shape),
            )
        })
        .collect()
}

/// A second native answer: another choice, no confidence, a different score and noul.
fn other_native() -> Value {
    json!({"model": "m", "answers": {
        "q": {"type": "choice", "choice": "D", "probabilities": {"A": 0.3, "B": 0.1, "C": 0.2, "D": 0.4}},
        "s": {"type": "score", "score": 0.4, "confidence": 0.5, "probabilities": {"0": 0.6, "1": 0.4, "2": 0.0}},
        "n": {"type": "noul", "noul": 0.3}},
        "usage": {}})
}

const Q_EXTRAS: [&str; 9] = [
    "",
    "coarsen = { A = \"AB\", B = \"AB\" }",
    "withhold_labels = [\"B\"]",
    "withhold_labels = [\"A\", \"D\"]",
    "mechanism = { kind = \"quantize\", step = 0.25 }",
    "mechanism = { kind = \"top_k\", k = 2 }",
    "mechanism = { kind = \"temperature\", tau = 2 }",
    "mechanism = { kind = \"gaussian\", sigma = 0.05, seed = 3 }",
    "coarsen = { A = \"AB\", B = \"AB\" }\nwithhold_labels = [\"AB\"]",
];

fn q_extras() -> Vec<String> {
    let mut extras: Vec<String> = Q_EXTRAS.iter().map(|s| s.to_string()).collect();
    for (denominator, fallback, confidence) in [
        (20, "native", "codeword"),
        (20, "native", "drop"),
        (1, "native", "codeword"),
        (1, "choice_only", "codeword"),
        (1, "deny", "codeword"),
    ] {
        extras.push(wcpq(denominator, fallback, confidence));
        extras.push(format!(
            "withhold_labels = [\"B\", \"D\"]\n{}",
            wcpq(denominator, fallback, confidence)
        ));
    }
    extras
}

const S_EXTRAS: [&str; 3] = [
    "",
    "withhold_labels = [\"1\"]",
    "mechanism = { kind = \"top_k\", k = 2 }",
];
const N_EXTRAS: [&str; 2] = ["", "withhold_labels = [\"true\"]"];

#[test]
fn every_complete_answer_satisfies_the_clients_and_reads_like_the_minimal_one() {
    let mut checked = 0;
    for view in View::ALL {
        for q in q_extras() {
            for (s, n) in S_EXTRAS.iter().zip(N_EXTRAS.iter().cycle()) {
                let complete = contract("complete", view.as_str(), &q, s, n);
                let minimal = contract("minimal", view.as_str(), &q, s, n);
                let asked = check_request(&request(), &complete).unwrap();
                for native in [native(), other_native()] {
                    let c = release_with(&complete, &native);
                    let m = release_with(&minimal, &native);
                    let context = format!("view {view}, q `{q}`, s `{s}`, n `{n}`, {native}");
                    // Same mechanism outcome in both shapes (the mapper verifies each shape's bytes).
                    let outcomes = |r: &Sent| -> Vec<_> {
                        r.answers
                            .iter()
                            .map(|a| (a.mechanism, a.withheld))
                            .collect()
                    };
                    assert_eq!(outcomes(&c), outcomes(&m), "{context}");
                    let denied = |r: &Sent, id: &str| {
                        r.answers.iter().any(|a| {
                            a.question == id
                                && matches!(a.mechanism, mechanism::Outcome::Fallback(_))
                                && q.contains("deny")
                        })
                    };
                    for (id, form) in forms(&complete, &asked) {
                        let left_out = view == View::NoOutput || denied(&c, &id);
                        match c.body["answers"].get(&id) {
                            None => assert!(left_out, "{context}: {id} left out"),
                            Some(answer) => {
                                assert!(!left_out, "{context}: {id} should be left out");
                                schema_complete(answer)
                                    .unwrap_or_else(|e| panic!("{context}: {e}"));
                            }
                        }
                        let minimal_form = Form {
                            shape: Shape::Minimal,
                            ..form
                        };
                        let m_answer = &m.body["answers"][id.as_str()];
                        let c_answer = &c.body["answers"][id.as_str()];
                        // The consumer reading is the same, whichever shape went out.
                        assert_eq!(
                            form.read(c_answer),
                            minimal_form.read(m_answer),
                            "{context}: {id}"
                        );
                        // The fields the view releases are the same bytes in both shapes.
                        if let (Some(c_object), Some(m_object)) =
                            (c_answer.as_object(), m_answer.as_object())
                        {
                            for (key, value) in m_object {
                                assert_eq!(&c_object[key], value, "{context}: {id}.{key}");
                            }
                        }
                        checked += 1;
                    }
                    for (a, b) in c.answers.iter().zip(&m.answers) {
                        assert_eq!(a.evaluation, b.evaluation, "{context}");
                    }
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
}

/// The released answers of the fixture under `view` in the complete shape.
fn complete_answers(view: &str, q: &str, s: &str, n: &str) -> Value {
    release_with(&contract("complete", view, q, s, n), &native()).body["answers"].clone()
}

#[test]
fn the_fills_of_each_view_have_their_documented_values() {
    let legend = json!({"0": "low", "1": "mid", "2": "high"});
    // no_output: every answer is left out.
    assert_eq!(complete_answers("no_output", "", "", ""), json!({}));
    // choice: one-hot on the choice, confidence 1 (both definitions); noul needs only `noul`.
    assert_close(
        &complete_answers("choice", "", "", ""),
        &json!({
            "q": {"type": "choice", "choice": "B",
                  "probabilities": {"A": 0.0, "B": 1.0, "C": 0.0, "D": 0.0}, "confidence": 1.0},
            "s": {"type": "score", "score": 1.0, "legend": legend,
                  "probabilities": {"0": 0.0, "1": 1.0, "2": 0.0}, "confidence": 1.0},
            "n": {"type": "noul", "noul": 1.0}}),
        "choice",
    );
    // choice_confidence: p(choice) = c(1 - 1/k) + 1/k, the rest even; the confidence is released.
    let q_selected = 0.6 * (1.0 - 0.25) + 0.25;
    let s_selected = 0.92 * (1.0 - 1.0 / 3.0) + 1.0 / 3.0;
    assert_close(
        &complete_answers("choice_confidence", "", "", ""),
        &json!({
            "q": {"type": "choice", "choice": "B",
                  "probabilities": {"A": (1.0 - q_selected) / 3.0, "B": q_selected,
                                    "C": (1.0 - q_selected) / 3.0, "D": (1.0 - q_selected) / 3.0},
                  "confidence": 0.6},
            "s": {"type": "score", "score": 1.0, "legend": legend,
                  "probabilities": {"0": (1.0 - s_selected) / 2.0, "1": s_selected, "2": (1.0 - s_selected) / 2.0},
                  "confidence": 0.92},
            "n": {"type": "noul", "noul": 1.0}}),
        "choice_confidence",
    );
    // full_probabilities: the confidence computed from the released probabilities.
    assert_close(
        &complete_answers("full_probabilities", "", "", ""),
        &json!({
            "q": {"type": "choice", "choice": "B",
                  "probabilities": {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1},
                  "confidence": (0.7 - 0.25) / 0.75},
            "s": {"type": "score", "score": 1.05, "legend": legend,
                  "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05},
                  "confidence": 1.0 - 0.05 / (2.0 / 3.0)},
            "n": {"type": "noul", "noul": 0.8}}),
        "full_probabilities",
    );
    // full_native: nothing to fill.
    assert_eq!(
        complete_answers("full_native", "", "", ""),
        release_with(&contract("minimal", "full_native", "", "", ""), &native()).body["answers"]
    );
}

#[test]
fn coarsened_withheld_and_partial_answers_are_filled_from_what_they_release() {
    // Coarsened: k = 3 released labels.
    let coarse = complete_answers("full_probabilities", Q_EXTRAS[1], "", "");
    assert_close(
        &coarse["q"]["confidence"],
        &json!((0.85 - 1.0 / 3.0) / (2.0 / 3.0)),
        "coarse",
    );
    let coarse = complete_answers("choice", Q_EXTRAS[1], "", "");
    assert_eq!(
        coarse["q"]["probabilities"],
        json!({"AB": 1.0, "C": 0.0, "D": 0.0})
    );
    // A withheld selection under a view without probabilities: the `choice` fill.
    for view in ["choice", "choice_confidence"] {
        let withheld = complete_answers(view, Q_EXTRAS[2], S_EXTRAS[1], N_EXTRAS[1]);
        let legend = json!({"0": "low", "1": "mid", "2": "high"});
        assert_eq!(
            withheld,
            json!({
                "q": {"type": "choice", "choice": "B",
                      "probabilities": {"A": 0.0, "B": 1.0, "C": 0.0, "D": 0.0}, "confidence": 1.0},
                "s": {"type": "score", "score": 1.0, "legend": legend,
                      "probabilities": {"0": 0.0, "1": 1.0, "2": 0.0}, "confidence": 1.0},
                "n": {"type": "noul", "noul": 1.0}}),
            "{view}"
        );
    }
    // Under full views it keeps its own probability (a partial map); the
    // confidence comes from it with the other classes sharing the rest evenly.
    for view in ["full_probabilities", "full_native"] {
        let withheld = complete_answers(view, Q_EXTRAS[2], S_EXTRAS[1], N_EXTRAS[1]);
        assert_close(
            &withheld["q"],
            &json!({"type": "choice", "choice": "B", "probabilities": {"B": 0.7},
                    "confidence": (0.7 - 0.25) / 0.75}),
            view,
        );
        // Score: own probability 0.95, the rest 0.025 each: 1 - 0.025·2 / (2/3).
        assert_close(
            &withheld["s"]["confidence"],
            &json!(1.0 - 0.05 / (2.0 / 3.0)),
            view,
        );
        assert_eq!(withheld["s"]["score"], json!(1.0));
        assert_eq!(withheld["n"], json!({"type": "noul", "noul": 1.0}));
    }
    // Top-k under full_probabilities: the partial map stays; the confidence uses the shared rest.
    let top = complete_answers("full_probabilities", Q_EXTRAS[5], S_EXTRAS[2], "");
    assert_close(
        &top["q"],
        &json!({"type": "choice", "choice": "B", "probabilities": {"A": 0.15, "B": 0.7},
                "confidence": (0.7 - 0.25) / 0.75}),
        "top_k",
    );
    assert_close(
        &top["s"]["confidence"],
        &json!(1.0 - 0.05 / (2.0 / 3.0)),
        "top_k score",
    );
    // Top-k under full_native: the native confidence goes out unchanged.
    let top = complete_answers("full_native", Q_EXTRAS[5], "", "");
    assert_eq!(top["q"]["confidence"], json!(0.6));
}

#[test]
fn wcpq_fallbacks_and_dropped_confidence_are_filled_as_documented() {
    // choice_only: the `choice` fill, in the covered answers' field order. (Under
    // choice_confidence the vertex-only codebook covers the fixture: without
    // probabilities every candidate of the choice has the native plans.)
    for view in ["full_probabilities", "full_native"] {
        let answers = complete_answers(view, &wcpq(1, "choice_only", "codeword"), "", "");
        assert_eq!(
            answers["q"],
            json!({"type": "choice", "choice": "B",
                   "probabilities": {"A": 0.0, "B": 1.0, "C": 0.0, "D": 0.0}, "confidence": 1.0}),
            "{view}"
        );
        let covered = complete_answers(view, &wcpq(20, "choice_only", "codeword"), "", "");
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(keys(&answers["q"]), keys(&covered["q"]), "{view}");
        assert_ne!(answers["q"], covered["q"], "{view}: the values differ");
        // deny: the answer is left out, the other answers stay.
        let denied = complete_answers(view, &wcpq(1, "deny", "codeword"), "", "");
        assert!(denied.get("q").is_none(), "{view}");
        assert!(denied.get("s").is_some(), "{view}");
    }
    // confidence = "drop": the confidence goes out as the fill of the codeword's probabilities.
    let dropped = complete_answers("full_native", &wcpq(20, "native", "drop"), "", "");
    let p: Vec<f64> = ["A", "B", "C", "D"]
        .iter()
        .map(|l| dropped["q"]["probabilities"][l].as_f64().unwrap())
        .collect();
    let p_max = p.iter().copied().fold(0.0, f64::max);
    assert_close(
        &dropped["q"]["confidence"],
        &json!(((p_max - 0.25) / 0.75).clamp(0.0, 1.0)),
        "drop",
    );
    // A withheld selection under WCPQ releases the choice only: the `choice` fill.
    let withheld = complete_answers(
        "full_native",
        &format!(
            "withhold_labels = [\"B\"]\n{}",
            wcpq(20, "native", "codeword")
        ),
        "",
        "",
    );
    assert_eq!(
        withheld["q"],
        json!({"type": "choice", "choice": "B",
               "probabilities": {"A": 0.0, "B": 1.0, "C": 0.0, "D": 0.0}, "confidence": 1.0})
    );
}

fn normalized(raw: &[f64]) -> Vec<f64> {
    let v: Vec<f64> = raw.iter().map(|x| x * x + 1e-3).collect();
    let sum: f64 = v.iter().sum();
    v.iter().map(|x| x / sum).collect()
}

/// `p` with its largest entry swapped into `choice`: a valid answer's choice is among its
/// most probable classes.
fn topped(mut p: Vec<f64>, choice: usize) -> Vec<f64> {
    let top = wire::argmax(&p);
    p.swap(choice, top);
    p
}

/// `p` with the entries other than `choice` moved toward their mean just enough that none
/// exceeds `p[choice]` (their sum, and `p[choice]`, unchanged). `p[choice]` must be at
/// least that mean (a largest entry is).
fn capped(p: &[f64], choice: usize) -> Vec<f64> {
    let top = p[choice];
    let others = (p.len() - 1) as f64;
    let mean = (1.0 - top) / others;
    let high = (0..p.len())
        .filter(|&i| i != choice)
        .map(|i| p[i])
        .fold(mean, f64::max);
    // Short of the bound by a hair, so that rounding cannot put an entry above it.
    let t = if high > top {
        (top - mean) / (high - mean) * (1.0 - 1e-9)
    } else {
        1.0
    };
    (0..p.len())
        .map(|i| {
            if i == choice {
                top
            } else {
                mean + t * (p[i] - mean)
            }
        })
        .collect()
}

/// `p` with the two entries other than `keep` swapped (a 3-class vector).
fn swap_others(p: &[f64], keep: usize) -> Vec<f64> {
    let others: Vec<usize> = (0..p.len()).filter(|&i| i != keep).collect();
    let mut out = p.to_vec();
    out.swap(others[0], others[1]);
    out
}

fn body(q: (&[f64], usize, f64), s: (&[f64], f64), noul: f64) -> Value {
    let labels = ["A", "B", "C", "D"];
    let (p, choice, confidence) = q;
    let (levels, score_confidence) = s;
    let score: f64 = levels.iter().enumerate().map(|(i, v)| i as f64 * v).sum();
    json!({"model": "m", "answers": {
        "q": {"type": "choice", "choice": labels[choice], "confidence": confidence,
              "probabilities": labels.iter().zip(p).map(|(l, v)| (l.to_string(), json!(v))).collect::<serde_json::Map<_, _>>()},
        "s": {"type": "score", "score": score, "confidence": score_confidence,
              "probabilities": {"0": levels[0], "1": levels[1], "2": levels[2]}},
        "n": {"type": "noul", "noul": noul}},
        "usage": {}})
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Two native answers with the same minimal release get the same complete
    /// release: a fill is a function of the released fields only. The second
    /// answer differs from the first in everything the contract does not
    /// release (for every view, with and without a withheld selection).
    #[test]
    fn fills_are_functions_of_the_released_fields(
        view in 1usize..5,
        withhold in 0usize..3,
        choice in 0usize..4,
        a in prop::collection::vec(0.0f64..1.0, 4),
        b in prop::collection::vec(0.0f64..1.0, 4),
        levels in prop::collection::vec(0.0f64..1.0, 3),
        confidences in prop::collection::vec(0.0f64..1.0, 4),
        nouls in (0.0f64..1.0, 0.0f64..1.0),
    ) {
        let view = View::ALL[view];
        let q = ["", Q_EXTRAS[2], Q_EXTRAS[3]][withhold];
        let complete = contract("complete", view.as_str(), q, S_EXTRAS[1], N_EXTRAS[1]);
        let minimal = contract("minimal", view.as_str(), q, S_EXTRAS[1], N_EXTRAS[1]);
        let withheld = |rule: &crate::contract::QuestionRule, class: usize| rule.withhold[class];
        let full = view.has_probabilities();

        // q: choice over A..D.
        let q_withheld = withheld(&minimal.questions["q"], choice);
        // A provider's choice is among its most probable classes, in both answers.
        let pa = topped(normalized(&a), choice);
        let pb = if full && !q_withheld {
            pa.clone()
        } else if full {
            // Only the selection's own probability is released.
            let rest = normalized(&b);
            let other: f64 = (0..4).filter(|&i| i != choice).map(|i| rest[i]).sum();
            let scaled: Vec<f64> = (0..4)
                .map(|i| if i == choice { pa[i] } else { rest[i] / other * (1.0 - pa[choice]) })
                .collect();
            capped(&scaled, choice)
        } else {
            topped(normalized(&b), choice)
        };
        let q_conf = view.has_confidence() && !q_withheld;
        let (qa, qb) = (confidences[0], if q_conf { confidences[0] } else { confidences[1] });

        // s: levels 0..2, level 1 withheld; the selected level is the argmax.
        let sa = normalized(&levels);
        let level = wire::argmax(&sa);
        let s_withheld = level == 1;
        let sb = if full && !s_withheld { sa.clone() } else { swap_others(&sa, level) };
        let s_conf = view.has_confidence() && !s_withheld;
        let (ca, cb) = (confidences[2], if s_conf { confidences[2] } else { confidences[3] });

        // n: "true" withheld; without released probabilities only the side of 0.5 goes out.
        let (na, mut nb) = nouls;
        let n_true = na > 0.5;
        if full && !n_true {
            nb = na;
        } else if (nb > 0.5) != n_true {
            nb = 1.0 - nb;
        }
        prop_assume!(na != 0.5 && nb != 0.5);

        let first = body((&pa, choice, qa), (&sa, ca), na);
        let second = body((&pb, choice, qb), (&sb, cb), nb);
        let (m1, m2) = (release_with(&minimal, &first).body, release_with(&minimal, &second).body);
        prop_assert_eq!(&m1, &m2, "the construction releases the same minimal answers");
        prop_assert_eq!(
            release_with(&complete, &first).body,
            release_with(&complete, &second).body
        );
    }
}

/// `check-config`'s account of each WCPQ fallback matches what goes out: a
/// fallback is called visible exactly when its field set or order differs
/// from a covered answer's.
#[test]
fn the_documented_fallback_disclosure_matches_the_released_fields() {
    use crate::mechanism::Fallback;
    let keys = |answer: &Value| {
        answer
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>())
    };
    for shape in [Shape::Complete, Shape::Minimal] {
        for (fallback, name) in [
            (Fallback::Native, "native"),
            (Fallback::ChoiceOnly, "choice_only"),
            (Fallback::Deny, "deny"),
        ] {
            for view in ["full_probabilities", "full_native"] {
                let answers = |denominator: u32| {
                    release_with(
                        &contract(
                            shape.as_str(),
                            view,
                            &wcpq(denominator, name, "codeword"),
                            "",
                            "",
                        ),
                        &native(),
                    )
                    .body["answers"]["q"]
                        .clone()
                };
                let (covered, fell_back) = (answers(20), answers(1));
                assert_ne!(covered, fell_back);
                let same_fields = keys(&covered) == keys(&fell_back)
                    && keys(&covered["probabilities"]) == keys(&fell_back["probabilities"]);
                assert_eq!(
                    same_fields,
                    !fallback.disclosure(shape).starts_with("visible"),
                    "{shape} {name} {view}: {covered} vs {fell_back}"
                );
            }
        }
    }
}
