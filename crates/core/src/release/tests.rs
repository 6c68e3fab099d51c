use serde_json::{Value, json};

use super::*;
use crate::config::Config;
use crate::mechanism::Released;
use crate::wire::check_request;

mod complete;
mod read_answers;
mod withhold_wcpq;

/// The test contract in the minimal shape (today's field table).
fn contract(view: &str, extra: &str, usage: &str) -> std::sync::Arc<Contract> {
    shaped("minimal", view, extra, usage)
}

/// A contract with questions q (choice over A..D; `extra` applies to it), s
/// (score over 0..2) and n (noul), all under `view`.
fn shaped(shape: &str, view: &str, extra: &str, usage: &str) -> std::sync::Arc<Contract> {
    // A contract's configuration cannot say `no_output` (typed clients need the answer);
    // the audit's candidate releases can (`Contract::derive`).
    if view == "no_output" {
        let contract = shaped(shape, "choice", extra, usage);
        let contract = contract.with_release(crate::contract::View::NoOutput, None);
        return std::sync::Arc::new(contract.expect("no_output derives from every contract"));
    }
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\nusage = \"{usage}\"\nshape = \"{shape}\"\n\
         [contracts.c.questions.q]\nclasses = [\"A\", \"B\", \"C\", \"D\"]\nview = \"{view}\"\n{extra}\
         [contracts.c.questions.s]\nclasses = [\"0\", \"1\", \"2\"]\nview = \"{view}\"\n{LEVELS}\n\
         [contracts.c.questions.n]\nclasses = [\"false\", \"true\"]\nview = \"{view}\"\ninstructions = \"?\"\n"
    );
    Config::from_toml(&text).unwrap().contracts["c"].clone()
}

/// The descriptions `request()` sends for the score question s.
const LEVELS: &str = r#"descriptions = { "0" = "low", "1" = "mid", "2" = "high" }"#;

fn request() -> Value {
    json!({"model": "m", "state": "s", "questions": {
        "q": {"type": "choice", "criteria": {"D": null, "C": null, "B": null, "A": null}},
        "s": {"type": "score", "criteria": ["low", "mid", "high"]},
        "n": {"type": "noul", "instructions": "?"}}})
}

fn native() -> Value {
    json!({"model": "m-1", "id": "upstream-id", "provider": "x",
        "answers": {
            "n": {"type": "noul", "noul": 0.8, "extra": 1},
            "q": {"type": "choice", "choice": "B", "confidence": 0.6, "rationale": "leak",
                  "probabilities": {"D": 0.1, "C": 0.05, "B": 0.7, "A": 0.15}},
            "s": {"type": "score", "score": 1.05, "confidence": 0.92, "legend": {"0": "upstream text"},
                  "probabilities": {"2": 0.05, "1": 0.95, "0": 0.0}},
            },
        "usage": {"input_tokens": 392, "output_tokens": 1, "cost": 0.1}})
}

fn run<'a>(
    c: &'a Contract,
    asked: &'a crate::wire::Asked,
    native: &'a Value,
) -> Result<Release<'a>, Invalid> {
    let mut rng = crate::rng::Rng::new(1);
    let mut options = Options {
        rng: &mut rng,
        evaluate: true,
    };
    release(c, asked, native, &mut options)
}

fn released(view: &str, extra: &str, usage: &str) -> Value {
    let c = contract(view, extra, usage);
    let asked = check_request(&request(), &c).unwrap();
    // Read back from the bytes that go out.
    serde_json::from_slice(&run(&c, &asked, &native()).unwrap().to_bytes()).unwrap()
}

#[test]
fn every_view_keeps_exactly_its_fields() {
    let legend = json!({"0": "low", "1": "mid", "2": "high"});
    let expected = [
        (
            "no_output",
            json!({"q": {"type": "choice"}, "s": {"type": "score"}, "n": {"type": "noul"}}),
        ),
        (
            "choice",
            json!({"q": {"type": "choice", "choice": "B"},
            "s": {"type": "score", "score": 1.0, "legend": legend},
            "n": {"type": "noul", "noul": 1.0}}),
        ),
        (
            "choice_confidence",
            json!({"q": {"type": "choice", "choice": "B", "confidence": 0.6},
            "s": {"type": "score", "score": 1.0, "legend": legend, "confidence": 0.92},
            "n": {"type": "noul", "noul": 1.0}}),
        ),
        (
            "full_probabilities",
            json!({"q": {"type": "choice", "choice": "B",
                "probabilities": {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}},
            "s": {"type": "score", "score": 1.05, "legend": legend,
                "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}},
            "n": {"type": "noul", "noul": 0.8}}),
        ),
        (
            "full_native",
            json!({"q": {"type": "choice", "choice": "B",
                "probabilities": {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}, "confidence": 0.6},
            "s": {"type": "score", "score": 1.05, "legend": legend,
                "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}, "confidence": 0.92},
            "n": {"type": "noul", "noul": 0.8}}),
        ),
    ];
    for (view, answers) in expected {
        let body = released(view, "", "keep");
        assert_eq!(body["answers"], answers, "view {view}");
        assert_eq!(body["model"], json!("m-1"));
        // Deny by default: unknown top-level fields and answer fields are gone.
        assert_eq!(body.as_object().unwrap().len(), 3, "view {view}");
    }
}

#[test]
fn probabilities_go_out_in_canonical_order() {
    let body = released("full_native", "", "keep");
    let keys: Vec<&String> = body["answers"]["q"]["probabilities"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["A", "B", "C", "D"]);
    let text = serde_json::to_string(&body).unwrap();
    assert!(!text.contains("leak") && !text.contains("upstream") && !text.contains("cost"));
}

#[test]
fn usage_is_kept_or_dropped() {
    assert_eq!(
        released("choice", "", "keep")["usage"],
        json!({"input_tokens": 392, "output_tokens": 1})
    );
    assert_eq!(
        released("choice", "", "drop")["usage"],
        json!({"input_tokens": 0, "output_tokens": 0})
    );
    // `input`: what went upstream is counted, what the model wrote is not.
    assert_eq!(
        released("choice", "", "input")["usage"],
        json!({"input_tokens": 392, "output_tokens": 0})
    );
}

#[test]
fn usage_input_checks_the_input_count_only() {
    let c = contract("choice", "", "input");
    let asked = check_request(&request(), &c).unwrap();
    let mut bad = native();
    bad["usage"]["input_tokens"] = json!(1.5);
    assert_eq!(run(&c, &asked, &bad).unwrap_err(), Invalid::MissingField);
    let mut other = native();
    other["usage"]["output_tokens"] = json!("many");
    let body: Value = serde_json::from_slice(&run(&c, &asked, &other).unwrap().to_bytes()).unwrap();
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 392, "output_tokens": 0})
    );
    // Both counts always go out (the schema requires them): an absent or null one is 0.
    for (usage, c) in [
        (json!({}), &c),
        (json!(null), &c),
        (json!({"input_tokens": null, "output_tokens": null}), &c),
        (json!({}), &contract("choice", "", "keep")),
        (json!({"output_tokens": 5}), &contract("choice", "", "keep")),
    ] {
        let mut none = native();
        none["usage"] = usage.clone();
        let asked = check_request(&request(), c).unwrap();
        let body: Value =
            serde_json::from_slice(&run(c, &asked, &none).unwrap().to_bytes()).unwrap();
        let output = usage["output_tokens"].as_u64().unwrap_or(0);
        assert_eq!(
            body["usage"],
            json!({"input_tokens": 0, "output_tokens": output}),
            "{usage}"
        );
    }
    // A whole number written as a float is that integer.
    let mut float = native();
    float["usage"]["input_tokens"] = json!(392.0);
    let body: Value = serde_json::from_slice(&run(&c, &asked, &float).unwrap().to_bytes()).unwrap();
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 392, "output_tokens": 0})
    );
}

#[test]
fn a_token_count_that_is_not_a_whole_number_is_a_field_of_the_wrong_type() {
    // `missing_field`, as every field present with the wrong type (`Invalid::MissingField`):
    // a count is a non-negative integer (or a float holding one, `1.0`), not a fraction, a
    // string, a sign or a flag.
    let c = contract("choice", "", "keep");
    let asked = check_request(&request(), &c).unwrap();
    for key in ["input_tokens", "output_tokens"] {
        for count in [
            json!(1.5),
            json!("7"),
            json!(-1),
            json!(-0.5),
            json!(1e300),
            json!(true),
            json!({}),
        ] {
            let mut native = native();
            native["usage"][key] = count.clone();
            assert_eq!(
                run(&c, &asked, &native).unwrap_err(),
                Invalid::MissingField,
                "{key}: {count}"
            );
            // The proxy reads the provider's bytes: the same reason.
            let bytes = serde_json::to_vec(&native).unwrap();
            let read = crate::wire::Json::parse(&bytes).unwrap();
            let mut rng = crate::rng::Rng::new(1);
            let mut options = Options {
                rng: &mut rng,
                evaluate: true,
            };
            assert_eq!(
                release(&c, &asked, &read, &mut options).unwrap_err(),
                Invalid::MissingField,
                "{key}: {count}"
            );
        }
    }
    // Null, a count goes out as 0; a whole number goes out as sent, as an integer.
    for (count, out) in [
        (Value::Null, 0),
        (json!(0), 0),
        (json!(7), 7),
        (json!(7.0), 7),
    ] {
        let mut native = native();
        native["usage"]["input_tokens"] = count.clone();
        let body: Value =
            serde_json::from_slice(&run(&c, &asked, &native).unwrap().to_bytes()).unwrap();
        assert_eq!(body["usage"]["input_tokens"], json!(out), "{count}");
    }
}

#[test]
fn coarsening_sums_fine_probabilities() {
    let body = released(
        "full_native",
        "coarsen = { A = \"AB\", B = \"AB\" }\n",
        "keep",
    );
    let q = &body["answers"]["q"];
    assert_eq!(q["choice"], json!("AB"));
    let probabilities = q["probabilities"].as_object().unwrap();
    assert_eq!(probabilities.keys().collect::<Vec<_>>(), ["AB", "C", "D"]);
    assert!((probabilities["AB"].as_f64().unwrap() - 0.85).abs() < 1e-12);
}

#[test]
fn a_withheld_selection_drops_residual_scores_and_confidence() {
    let body = released("full_native", "withhold_labels = [\"B\"]\n", "keep");
    assert_eq!(
        body["answers"]["q"],
        json!({"type": "choice", "choice": "B", "probabilities": {"B": 0.7}})
    );
    // A withheld label that is not selected changes nothing.
    let body = released("full_native", "withhold_labels = [\"A\"]\n", "keep");
    assert_eq!(
        body["answers"]["q"]["probabilities"]
            .as_object()
            .unwrap()
            .len(),
        4
    );
    // Withholding a coarse label applies after coarsening.
    let body = released(
        "full_native",
        "coarsen = { A = \"AB\", B = \"AB\" }\nwithhold_labels = [\"AB\"]\n",
        "keep",
    );
    assert_eq!(
        body["answers"]["q"]["probabilities"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["AB"]
    );
    assert!(body["answers"]["q"].get("confidence").is_none());
}

#[test]
fn invalid_or_missing_answers_reject_the_whole_response() {
    let c = contract("full_native", "", "keep");
    let asked = check_request(&request(), &c).unwrap();
    let mut missing = native();
    missing["answers"].as_object_mut().unwrap().remove("s");
    assert_eq!(
        run(&c, &asked, &missing).unwrap_err(),
        Invalid::MissingAnswer
    );
    // An answer to a question the request did not ask: not an answer to this request.
    for unasked in [
        json!({"type": "choice", "choice": "x", "probabilities": {"x": 1.0}, "confidence": 1.0}),
        json!({"type": "box", "box": {}}),
    ] {
        let mut crossed = native();
        crossed["answers"]["unasked"] = unasked;
        assert_eq!(
            run(&c, &asked, &crossed).unwrap_err(),
            Invalid::UnaskedAnswer
        );
    }
    let mut nan = native();
    nan["answers"]["n"]["noul"] = json!(1.5);
    assert_eq!(run(&c, &asked, &nan).unwrap_err(), Invalid::BadProbability);
    let mut usage = native();
    usage["usage"]["input_tokens"] = json!(1.5);
    assert_eq!(run(&c, &asked, &usage).unwrap_err(), Invalid::MissingField);
    assert_eq!(
        run(&c, &asked, &json!({"answers": {}})).unwrap_err(),
        Invalid::MissingField
    );
}

mod wcpq_through_the_release_path {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::super::*;
    use crate::codebook;
    use crate::config::Config;
    use crate::wire::check_request;
    use crate::workflow::Spec;

    /// The two contracts, built once (codebook precomputation is the slow part).
    fn contract(view: &str) -> std::sync::Arc<Contract> {
        static CONTRACTS: std::sync::OnceLock<[std::sync::Arc<Contract>; 2]> =
            std::sync::OnceLock::new();
        let built = CONTRACTS.get_or_init(|| [build("full_native"), build("full_probabilities")]);
        built[usize::from(view != "full_native")].clone()
    }

    /// A contract whose 4-class question releases WCPQ codewords (grid-only codebook).
    fn build(view: &str) -> std::sync::Arc<Contract> {
        let classes: Vec<String> = ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect();
        let spec = Spec::standard(classes.clone()).unwrap();
        let built = codebook::build(&classes, 12, &spec, &[], "property".into()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{view}.json"));
        std::fs::write(&path, built.codebook.to_json_bytes()).unwrap();
        let text = format!(
            "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n\
             [contracts.c.questions.q]\nclasses = [\"A\", \"B\", \"C\", \"D\"]\nview = \"{view}\"\n\
             mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"native\" }}\nworkflows = {{ preset = \"tuple-bench\" }}\n",
            path.display()
        );
        Config::from_toml(&text).unwrap().contracts["c"].clone()
    }

    fn vector() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(0.0f64..1.0, 4).prop_map(|raw| {
            let cubed: Vec<f64> = raw.iter().map(|x| x * x * x + 1e-3).collect();
            let sum: f64 = cubed.iter().sum();
            cubed.iter().map(|x| x / sum).collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// Through the proxy's own encoder and parser, a covered answer leaves
        /// every frozen policy's plan and realized cost unchanged.
        #[test]
        fn covered_answers_keep_every_plan_and_cost(p in vector(), confidence in 0.0f64..1.0) {
            let labels = ["A", "B", "C", "D"];
            let choice = crate::wire::argmax(&p);
            for view in ["full_native", "full_probabilities"] {
                let contract = contract(view);
                let request = json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"A": null, "B": null, "C": null, "D": null}}}});
                let probabilities: serde_json::Map<String, Value> = labels.iter().zip(&p).map(|(l, v)| (l.to_string(), json!(v))).collect();
                let native = json!({"model": "m", "answers": {"q": {"type": "choice", "choice": labels[choice], "probabilities": probabilities, "confidence": confidence}}, "usage": {}});
                let asked = check_request(&request, &contract).unwrap();
                let mut rng = crate::rng::Rng::new(0);
                let mut options = Options { rng: &mut rng, evaluate: true };
                let released = release(&contract, &asked, &native, &mut options).unwrap();
                let record = &released.answers[0];
                let evaluation = record.evaluation.as_ref().unwrap();
                let spec = contract.questions["q"].workflows.as_ref().unwrap();
                let before = spec.plans(&evaluation.native, &Value::Null);
                let after = spec.plans(&evaluation.released, &Value::Null);
                match record.mechanism {
                    crate::mechanism::Outcome::Covered { .. } => {
                        prop_assert_eq!(&before, &after);
                        for t in 0..4 {
                            prop_assert_eq!(spec.realized_costs(&before, t), spec.realized_costs(&after, t));
                        }
                        prop_assert_eq!(evaluation.released.choice, choice);
                    }
                    // The native fallback releases the native answer unchanged.
                    _ => prop_assert_eq!(&evaluation.native, &evaluation.released),
                }
            }
        }
    }
}

mod never_panics {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::super::*;
    use crate::wire::check_request;

    /// Arbitrary JSON values, biased toward the shapes the release path reads.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            (-2.0f64..2.0).prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            prop::sample::select(vec![
                "A", "B", "C", "D", "0", "1", "true", "false", "choice", "score", "noul", ""
            ])
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "type",
                        "choice",
                        "probabilities",
                        "confidence",
                        "score",
                        "noul",
                        "legend",
                        "answers",
                        "model",
                        "usage",
                        "q",
                        "s",
                        "n",
                        "A",
                        "B",
                        "C",
                        "D",
                        "0",
                        "1",
                        "2",
                        "input_tokens",
                    ]),
                    inner,
                    0..6
                )
                .prop_map(|map| Value::Object(
                    map.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Whatever a provider sends, releasing it returns a body or a reason; it never panics.
        #[test]
        fn arbitrary_native_answers_never_panic(native in value(), answers in value(), view in 0usize..5, complete: bool) {
            let view = crate::contract::View::ALL[view].as_str();
            let c = super::shaped(if complete { "complete" } else { "minimal" }, view, "", "keep");
            let asked = check_request(&super::request(), &c).unwrap();
            let mut rng = crate::rng::Rng::new(3);
            let mut options = Options { rng: &mut rng, evaluate: true };
            let _ = release(&c, &asked, &native, &mut options);
            let wrapped = json!({"model": "m", "answers": answers, "usage": {}});
            let _ = release(&c, &asked, &wrapped, &mut options);
        }

        /// A provider's answer released from its bytes (`wire::json::Json`, as the proxy
        /// reads it) gives what releasing its `Value` (as the offline tools read it) gives:
        /// a valid answer with one member replaced by anything, or removed.
        #[test]
        fn answers_read_as_json_release_as_values_do(
            replaced in value(),
            at in 0usize..12,
            remove: bool,
            view in 0usize..5,
            complete: bool,
        ) {
            let view = crate::contract::View::ALL[view].as_str();
            let c = super::shaped(if complete { "complete" } else { "minimal" }, view, "", "keep");
            let asked = check_request(&super::request(), &c).unwrap();
            let mut native = super::native();
            let paths: [&[&str]; 12] = [
                &[], &["model"], &["answers"], &["usage"], &["usage", "input_tokens"],
                &["answers", "q"], &["answers", "q", "probabilities"],
                &["answers", "q", "probabilities", "B"], &["answers", "q", "choice"],
                &["answers", "q", "confidence"], &["answers", "s", "score"], &["answers", "n", "noul"],
            ];
            let (last, parents) = paths[at].split_last().unzip();
            let mut node = &mut native;
            for key in parents.unwrap_or_default() {
                node = &mut node[*key];
            }
            match (last, node.as_object_mut()) {
                (Some(key), Some(object)) if remove => { object.shift_remove(*key); }
                (Some(key), Some(object)) => { object.insert(key.to_string(), replaced); }
                _ => {}
            }
            let bytes = serde_json::to_vec(&native).unwrap();
            let json = crate::wire::json::Json::parse(&bytes).unwrap();
            fn run<N: Node>(c: &Contract, asked: &crate::wire::Asked, native: &N)
                -> Result<(String, Vec<AnswerRecord>), Invalid> {
                let mut rng = crate::rng::Rng::new(5);
                let mut options = Options { rng: &mut rng, evaluate: true };
                release(c, asked, native, &mut options).map(|r| {
                    let bytes = String::from_utf8(r.to_bytes()).unwrap();
                    let records: Vec<_> = r.answers.into_iter().map(|mut a| { a.mapping_seconds = None; a }).collect();
                    (bytes, records)
                })
            }
            let from_value = run(&c, &asked, &native);
            let from_json = run(&c, &asked, &json);
            prop_assert_eq!(&from_value, &from_json);
            if at == 0 {
                prop_assert!(from_value.is_ok());
            }
        }

        /// Whatever a caller sends, checking it against a contract never panics.
        #[test]
        fn arbitrary_requests_never_panic(request in value(), questions in value()) {
            let c = super::contract("full_native", "", "keep");
            let _ = check_request(&request, &c);
            let _ = check_request(&json!({"model": "m", "state": "s", "questions": questions}), &c);
        }

        /// A request read from its bytes (as the proxy reads it) is checked as its `Value`
        /// is (as the offline tools read it): the same error, or the same upstream body.
        #[test]
        fn requests_read_from_bytes_check_as_values_do(questions in value(), state in value(), pinned: bool) {
            let c = super::contract("full_native", if pinned { "" } else { "caller_text = true\n" }, "keep");
            let mut request = super::request();
            for body in [json!({"model": "m", "state": state, "questions": questions}), {
                request["questions"]["q"]["criteria"]["B"] = questions.clone();
                request.clone()
            }] {
                let bytes = serde_json::to_vec(&body).unwrap();
                let from_bytes = crate::wire::check_json(&crate::wire::Json::parse(&bytes).unwrap(), &c);
                let from_value = check_request(&body, &c);
                let seen = |asked: Result<crate::wire::Asked, crate::wire::RequestError>| {
                    asked.map(|a| {
                        // The state read back from the bytes that go upstream is the
                        // caller's, as a `Value` (the one a logistic posterior reads).
                        assert_eq!(a.state(), body.get("state").unwrap_or(&Value::Null));
                        let text = serde_json::to_string(a.upstream()).unwrap();
                        // The bytes the proxy sends are that body's serialization.
                        assert_eq!(String::from_utf8(a.upstream_bytes()).unwrap(), text);
                        (a.model.clone(), text, format!("{:?}", a.questions))
                    })
                };
                prop_assert_eq!(seen(from_value), seen(from_bytes));
            }
        }
    }
}

mod text_identity {
    //! `roundtrip` reads the encoded value instead of printing and parsing it: that is exact
    //! only if printing then parsing every encoded answer gives it back.

    use proptest::prelude::*;

    use super::*;
    use crate::contract::{Shape, View};
    use crate::wire::{AskedQuestion, Kind};

    /// Any finite probability-like float: tiny, subnormal, many digits, exact tenths, 0, 1.
    fn float() -> impl Strategy<Value = f64> {
        prop_oneof![
            0.0..=1.0f64,
            (0u32..=10).prop_map(|t| f64::from(t) / 10.0),
            (1u32..=1074).prop_map(|e| 2f64.powi(-(e as i32))),
            Just(f64::MIN_POSITIVE),
            Just(0.0),
            Just(1.0),
        ]
    }

    /// The question type `kind` (0: choice, 1: score, 2: noul) and its labels: `n` of them,
    /// except noul's two.
    fn kind_and_labels(kind: usize, n: usize) -> (Kind, Vec<String>) {
        let kind = [Kind::Choice, Kind::Score, Kind::Noul][kind];
        let labels = match kind {
            Kind::Choice => (0..n).map(|i| format!("L{i}")).collect(),
            Kind::Score => (0..n).map(|i| i.to_string()).collect(),
            Kind::Noul => vec!["false".into(), "true".into()],
            Kind::Box => unreachable!("box answers are not class vectors"),
        };
        (kind, labels)
    }

    /// The form of `question` with `labels` under view `View::ALL[view]`.
    fn form<'a>(
        question: &'a AskedQuestion,
        labels: &'a [String],
        view: usize,
        releases_confidence: bool,
        withhold: &'a [bool],
        complete: bool,
    ) -> Form<'a> {
        Form {
            question,
            labels,
            view: View::ALL[view],
            confidence: releases_confidence,
            withhold,
            shape: if complete {
                Shape::Complete
            } else {
                Shape::Minimal
            },
        }
    }

    /// A reading's numbers as their bits: `-0.0` and NaN compared exactly.
    fn bits(
        read: Option<crate::workflow::Release>,
    ) -> Option<(usize, Option<Vec<u64>>, Option<u64>)> {
        read.map(|r| {
            (
                r.choice,
                r.probabilities
                    .map(|p| p.iter().map(|x| x.to_bits()).collect()),
                r.confidence.map(f64::to_bits),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn printing_then_parsing_an_encoded_answer_gives_it_back(
            n in 2usize..7,
            values in proptest::collection::vec(float(), 7),
            confidence in proptest::option::of(float()),
            choice in 0usize..7,
            view in 0usize..View::ALL.len(),
            complete in any::<bool>(),
            kind in 0usize..3,
            withhold_first in any::<bool>(),
        ) {
            let (kind, labels) = kind_and_labels(kind, n);
            let n = labels.len();
            let legend = (kind == Kind::Score).then(|| {
                std::sync::Arc::new(
                    labels
                        .iter()
                        .map(|l| (l.clone(), json!(format!("level {l}"))))
                        .collect(),
                )
            });
            let question = AskedQuestion { id: "q".into(), kind, legend };
            let mut withhold = vec![false; n];
            withhold[0] = withhold_first;
            let form = Form {
                question: &question,
                labels: &labels,
                view: View::ALL[view],
                confidence: confidence.is_some(),
                withhold: &withhold,
                shape: if complete { Shape::Complete } else { Shape::Minimal },
            };
            let released = Released {
                probabilities: values[..n].iter().copied().map(Some).collect(),
                confidence,
                deny: false,
            };
            if let Some(value) = form.encode(choice % n, &released) {
                let text = String::from_utf8(crate::wire::json::write::to_vec(&value)).unwrap();
                // Parsed back as a recipient's client does (serde_json), and by the proxy's reader.
                let parsed: Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(&Json::from_value(&parsed), &value, "{}", text);
                prop_assert_eq!(&crate::wire::Json::parse(text.as_bytes()).unwrap(), &value, "{}", text);
                prop_assert_eq!(form.read(&parsed), form.read(&value));
            }
        }

        /// `Form::read_encoding` (the native answer WCPQ maps, read without writing it)
        /// reads exactly what writing then reading gives, bit for bit, on every view,
        /// shape, withholding, omitted entry, denial and out-of-range choice, and with
        /// numbers a provider's answer never has (negative zero, NaN, infinities).
        #[test]
        fn reading_an_encoding_is_reading_it_written(
            n in 2usize..7,
            values in proptest::collection::vec(proptest::option::weighted(0.9, prop_oneof![
                8 => float(),
                1 => Just(-0.0),
                1 => Just(f64::NAN),
                1 => Just(f64::INFINITY),
            ]), 7),
            confidence in proptest::option::of(prop_oneof![4 => float(), 1 => Just(-0.0), 1 => Just(f64::NAN)]),
            choice in 0usize..8,
            view in 0usize..View::ALL.len(),
            complete in any::<bool>(),
            kind in 0usize..3,
            withhold in proptest::collection::vec(any::<bool>(), 7),
            releases_confidence in any::<bool>(),
            deny in proptest::bool::weighted(0.1),
        ) {
            let (kind, labels) = kind_and_labels(kind, n);
            let n = labels.len();
            let question = AskedQuestion { id: "q".into(), kind, legend: None };
            let form = form(&question, &labels, view, releases_confidence, &withhold[..n], complete);
            let released = Released {
                probabilities: values[..n].to_vec(),
                confidence,
                deny,
            };
            let written = form.encode(choice, &released).and_then(|value| form.read(&value));
            prop_assert_eq!(bits(form.read_encoding(choice, &released)), bits(written));
        }

        /// `Form::read_native` (a provider's answer as read) reads as `read_encoding` of
        /// the same answer, bit for bit, where it reads the answer as it stands and
        /// where it does not.
        #[test]
        fn reading_a_native_answer_is_reading_its_encoding(
            n in 2usize..7,
            values in proptest::collection::vec(prop_oneof![
                30 => float(),
                1 => Just(-0.0),
                1 => Just(f64::NAN),
                1 => Just(f64::INFINITY),
            ], 8),
            // Mostly what the mapper reads (a choice answer, one entry per label, finite,
            // nothing withheld), so the answer read as it stands is read often.
            length in prop_oneof![4 => Just(1usize), 1 => 0usize..3],
            confidence in proptest::option::of(prop_oneof![8 => float(), 1 => Just(-0.0), 1 => Just(f64::NAN)]),
            choice in 0usize..8,
            view in 0usize..View::ALL.len(),
            complete in any::<bool>(),
            kind in prop_oneof![4 => Just(0usize), 1 => 0usize..3],
            withhold in proptest::collection::vec(proptest::bool::weighted(0.2), 7),
            releases_confidence in any::<bool>(),
        ) {
            let choice = choice % (n + 1);
            let (kind, labels) = kind_and_labels(kind, n);
            let n = labels.len();
            let question = AskedQuestion { id: "q".into(), kind, legend: None };
            let form = form(&question, &labels, view, releases_confidence, &withhold[..n], complete);
            // One entry short, exactly the labels, or one too many.
            let probabilities = &values[..n - 1 + length];
            let released = Released {
                probabilities: probabilities.iter().copied().map(Some).collect(),
                confidence,
                deny: false,
            };
            prop_assert_eq!(
                bits(form.read_native(choice, probabilities, confidence)),
                bits(form.read_encoding(choice, &released))
            );
        }
    }
}
