use proptest::prelude::*;
use serde_json::json;

use super::*;

fn sum_of(probabilities: &Value) -> f64 {
    probabilities
        .as_object()
        .map(|m| m.values().filter_map(Value::as_f64).sum())
        .unwrap_or(f64::NAN)
}

fn check_choice(answer: &Value, labels: &[&str]) {
    let p = answer["probabilities"].as_object().expect("probabilities");
    let keys: Vec<&str> = p.keys().map(String::as_str).collect();
    assert_eq!(keys, labels, "keyed by label in criteria order");
    let values: Vec<f64> = p.values().map(|v| v.as_f64().expect("number")).collect();
    assert!(
        values
            .iter()
            .all(|x| x.is_finite() && (0.0..=1.0).contains(x))
    );
    assert!((sum_of(&answer["probabilities"]) - 1.0).abs() < 1e-9);
    let choice = answer["choice"].as_str().expect("choice");
    let best = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(p[choice].as_f64(), Some(best), "choice is an argmax");
    let k = labels.len() as f64;
    let expected = ((best - 1.0 / k) / (1.0 - 1.0 / k)).clamp(0.0, 1.0);
    let confidence = answer["confidence"].as_f64().expect("confidence");
    assert!(
        (confidence - expected).abs() < 1e-4,
        "Jev confidence formula"
    );
}

#[test]
fn answers_the_reference_wire_examples_with_the_real_shapes() {
    let request = json!({
        "model": "jev-latest",
        "state": "Help! My payouts have been failing for 3 days.",
        "questions": {
            "is_urgent": {"type": "noul", "instructions": "Does this convey urgency?",
                "criteria": {"true": "Explicitly time-sensitive", "false": "No urgency expressed"}},
            "department": {"type": "choice", "instructions": "Which team should handle this?",
                "criteria": {"billing": "Payments, invoicing, refunds", "technical": "Bugs, outages, integrations", "sales": null}},
            "frustration": {"type": "score", "instructions": "How frustrated is the customer?",
                "criteria": ["Calm", {"text": "Frustrated"}, "Very angry"]},
        },
    });
    let response = respond(&request).expect("valid");
    assert_eq!(response["model"], LATEST_MODEL);
    let answers = response["answers"].as_object().expect("answers");
    let ids: Vec<&str> = answers.keys().map(String::as_str).collect();
    assert_eq!(ids, ["is_urgent", "department", "frustration"]);
    let noul = &answers["is_urgent"];
    assert_eq!(
        noul.as_object().map(|m| m.len()),
        Some(2),
        "noul has no confidence"
    );
    assert!((0.0..=1.0).contains(&noul["noul"].as_f64().expect("noul")));
    check_choice(&answers["department"], &["billing", "technical", "sales"]);
    let score = &answers["frustration"];
    assert_eq!(
        score["legend"],
        json!({"0": "Calm", "1": {"text": "Frustrated"}, "2": "Very angry"})
    );
    let p = score["probabilities"].as_object().expect("probabilities");
    assert_eq!(p.keys().collect::<Vec<_>>(), ["0", "1", "2"]);
    assert!((sum_of(&score["probabilities"]) - 1.0).abs() < 1e-9);
    let expected: f64 = p
        .values()
        .enumerate()
        .map(|(i, v)| i as f64 * v.as_f64().unwrap_or(f64::NAN))
        .sum();
    assert!((score["score"].as_f64().expect("score") - expected).abs() < 1e-9);
    assert!((0.0..=1.0).contains(&score["confidence"].as_f64().expect("confidence")));
    let tokens = response["usage"]["input_tokens"].as_u64().expect("integer");
    let len = serde_json::to_vec(&request).expect("serializes").len() as u64;
    assert_eq!(tokens, len / 4);
    // What the model wrote: the chosen department, the noul and score numbers.
    let written = |text: String| text.len().div_ceil(4) as u64;
    let expected = written(
        answers["department"]["choice"]
            .as_str()
            .expect("label")
            .to_string(),
    ) + written(noul["noul"].to_string())
        + written(score["score"].to_string());
    assert_eq!(response["usage"]["output_tokens"].as_u64(), Some(expected));
}

#[test]
fn output_tokens_follow_the_label_the_model_writes() {
    // Labels of 1, 2 and 4 tokens: the count tells which was chosen, whatever the state.
    let labels = ["a", "medium", "a_much_longer_label"];
    let mut seen = std::collections::BTreeSet::new();
    for case in 0..60 {
        let request = json!({"model": "jev-latest", "state": {"case": case},
            "questions": {"q": {"type": "choice",
                "criteria": {labels[0]: null, labels[1]: null, labels[2]: null}}}});
        let response = respond(&request).expect("valid");
        let choice = response["answers"]["q"]["choice"].as_str().expect("choice");
        let tokens = response["usage"]["output_tokens"].as_u64().expect("count");
        assert_eq!(tokens, choice.len().div_ceil(4) as u64, "{choice}");
        assert_eq!(
            respond(&request).expect("valid")["usage"],
            response["usage"]
        );
        seen.insert(tokens);
    }
    assert_eq!(seen.len(), 3, "every label chosen at least once: {seen:?}");
    // A box answer writes its four edges.
    let boxed = respond(&json!({"model": "jev-latest", "state": "s",
        "questions": {"b": {"type": "box"}}}))
    .expect("valid");
    let edges: u64 = boxed["answers"]["b"]["box"]
        .as_object()
        .expect("box")
        .values()
        .map(|v| v.to_string().len().div_ceil(4) as u64)
        .sum();
    assert_eq!(boxed["usage"]["output_tokens"].as_u64(), Some(edges));
}

#[test]
fn answers_are_deterministic_and_ignore_key_order_whitespace_and_ids() {
    let a = br#"{"model":"jev-latest","state":{"a":1,"b":"x"},"questions":{"q":{"type":"choice","criteria":{"x":null,"y":null,"z":null}}}}"#;
    let b = br#"{ "questions": {"other_id": {"criteria": {"x": null, "y": null, "z": null}, "type": "choice"}},
                 "state": {"b": "x", "a": 1}, "model": "sim-jev-1.0" }"#;
    let ra = respond_bytes(a).expect("valid");
    let rb = respond_bytes(b).expect("valid");
    assert_eq!(ra["answers"]["q"], rb["answers"]["other_id"]);
    assert_eq!(respond_bytes(a).expect("valid"), ra);
    let c = br#"{"model":"jev-latest","state":{"a":2,"b":"x"},"questions":{"q":{"type":"choice","criteria":{"x":null,"y":null,"z":null}}}}"#;
    assert_ne!(
        respond_bytes(c).expect("valid")["answers"]["q"],
        ra["answers"]["q"]
    );
    // Another model answers differently; one the simulator does not serve is refused, as a
    // real provider refuses it, not echoed back.
    let preview = br#"{"model":"jev-preview","state":{"a":1,"b":"x"},"questions":{"q":{"type":"choice","criteria":{"x":null,"y":null,"z":null}}}}"#;
    let r = respond_bytes(preview).expect("valid");
    assert_eq!(r["model"], "sim-jev-1.1-preview");
    for unknown in ["jev-1.13.0", "m", "x y", "sim-jev-9"] {
        let body = json!({"model": unknown, "state": "s", "questions": {"q": {"type": "noul"}}});
        match respond(&body) {
            Err(Error::Invalid { loc, .. }) => assert_eq!(loc, ["body", "model"], "{unknown}"),
            other => panic!("{unknown}: {other:?}"),
        }
    }
}

#[test]
fn a_question_is_answered_independently_of_the_others() {
    let q = json!({"type": "choice", "criteria": {"a": null, "b": null}});
    let alone = respond(&json!({"model": "jev-latest", "state": "s", "questions": {"q": q}}))
        .expect("valid");
    let together = respond(&json!({"model": "jev-latest", "state": "s",
        "questions": {"first": {"type": "noul"}, "q": q}}))
    .expect("valid");
    assert_eq!(alone["answers"]["q"], together["answers"]["q"]);
}

#[test]
fn choice_answers_do_not_depend_on_candidate_order() {
    let forward = json!({"model": "jev-latest", "state": {"k": 1},
        "questions": {"q": {"type": "choice", "criteria": {"a": "1", "b": "2", "c": "3"}}}});
    let backward = json!({"model": "jev-latest", "state": {"k": 1},
        "questions": {"q": {"type": "choice", "criteria": {"c": "3", "b": "2", "a": "1"}}}});
    let f = respond(&forward).expect("valid");
    let b = respond(&backward).expect("valid");
    for label in ["a", "b", "c"] {
        assert_eq!(
            f["answers"]["q"]["probabilities"][label],
            b["answers"]["q"]["probabilities"][label]
        );
    }
}

#[test]
fn reports_drive_the_coarse_choice() {
    let request = |note: &str| {
        json!({"model": "jev-latest",
            "state": {"public": {"region": "x"}, "internal_report": {"diagnostic_note": note}},
            "questions": {"coarse_cause": {"type": "choice", "criteria":
                {"ADDRESS": null, "DELAY": null, "DAMAGE": null, "DELIVERY_RECORD": null, "WITHHOLD": null}}}})
    };
    let mut n_delay = 0;
    for i in 0..40 {
        let note = format!(
            "Case {i}. Investigators found that service completions fall behind entries. \
             Re-testing confirms that reducing input rate drains the queue."
        );
        let response = respond(&request(&note)).expect("valid");
        if response["answers"]["coarse_cause"]["choice"] == "DELAY" {
            n_delay += 1;
        }
    }
    assert!(n_delay >= 32, "{n_delay} of 40 chose DELAY");
}

#[test]
fn the_refusal_probe_shape_puts_mass_on_the_reported_mechanism() {
    let response = respond(&json!({"model": "jev-latest",
        "state": {"internal_report": {"diagnostic_note": "Thread dumps show a lock cycle. Two workers wait on each other's locks."}},
        "questions": {"fine": {"type": "choice", "criteria":
            {"connection_pool_exhaustion": null, "deadlock_under_retry": null, "memory_leak_regression": null, "WITHHOLD": null}}}}))
    .expect("valid");
    let p = &response["answers"]["fine"]["probabilities"];
    let deadlock = p["deadlock_under_retry"].as_f64().expect("number");
    assert!(deadlock > p["memory_leak_regression"].as_f64().expect("number"));
    assert!(deadlock > p["WITHHOLD"].as_f64().expect("number"));
}

#[test]
fn invalid_requests_are_rejected_with_locations() {
    let cases = [
        (json!([1]), vec!["body"]),
        (
            json!({"state": "s", "questions": {"q": {"type": "noul"}}}),
            vec!["body", "model"],
        ),
        (
            json!({"model": "", "state": "s", "questions": {"q": {"type": "noul"}}}),
            vec!["body", "model"],
        ),
        (
            json!({"model": "jev-latest", "questions": {"q": {"type": "noul"}}}),
            vec!["body", "state"],
        ),
        (
            json!({"model": "jev-latest", "state": 3, "questions": {"q": {"type": "noul"}}}),
            vec!["body", "state"],
        ),
        (
            json!({"model": "jev-latest", "state": null, "questions": {"q": {"type": "noul"}}}),
            vec!["body", "state"],
        ),
        (
            json!({"model": "jev-latest", "state": "s"}),
            vec!["body", "questions"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {}}),
            vec!["body", "questions"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": []}),
            vec!["body", "questions"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": 1}}),
            vec!["body", "questions", "q"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {}}}),
            vec!["body", "questions", "q", "type"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "line"}}}),
            vec!["body", "questions", "q", "type"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "box", "criteria": ["a"]}}}),
            vec!["body", "questions", "q", "criteria"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": null}}}}),
            vec!["body", "questions", "q", "criteria"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "choice", "criteria": ["a", "b"]}}}),
            vec!["body", "questions", "q", "criteria"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"a": 1, "b": null}}}}),
            vec!["body", "questions", "q", "criteria", "a"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "score", "criteria": []}}}),
            vec!["body", "questions", "q", "criteria"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "score", "criteria": ["a", true]}}}),
            vec!["body", "questions", "q", "criteria", "1"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul", "criteria": "x"}}}),
            vec!["body", "questions", "q", "criteria"],
        ),
        (
            json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "noul", "instructions": 5}}}),
            vec!["body", "questions", "q", "instructions"],
        ),
    ];
    for (request, loc) in cases {
        match respond(&request) {
            Err(Error::Invalid { loc: got, .. }) => assert_eq!(got, loc, "{request}"),
            other => panic!("{request}: expected invalid, got {other:?}"),
        }
    }
    let too_many: Map<String, Value> = (0..256).map(|i| (format!("c{i}"), Value::Null)).collect();
    let request = json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "choice", "criteria": too_many}}});
    assert!(matches!(respond(&request), Err(Error::Invalid { .. })));
    assert!(matches!(respond_bytes(b"{not json"), Err(Error::Json(_))));
    let message = respond(&json!({"model": "jev-latest", "state": "s"}))
        .expect_err("invalid")
        .to_string();
    assert_eq!(message, "invalid request at body.questions: field required");
}

#[test]
fn edge_sizes_are_answered() {
    let many: Map<String, Value> = (0..255).map(|i| (format!("c{i}"), Value::Null)).collect();
    let response = respond(&json!({"model": "jev-latest", "state": [1, {"x": null}],
        "questions": {"wide": {"type": "choice", "criteria": many},
            "one": {"type": "score", "criteria": ["only"]},
            "bare": {"type": "noul"}},
        "assets": {"x": 1}}))
    .expect("valid");
    let labels: Vec<String> = (0..255).map(|i| format!("c{i}")).collect();
    let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
    check_choice(&response["answers"]["wide"], &labels);
    let one = &response["answers"]["one"];
    assert_eq!(one["probabilities"], json!({"0": 1.0}));
    assert_eq!(one["score"], json!(0.0));
    assert_eq!(one["confidence"], json!(1.0));
}

#[test]
fn rounding_keeps_exact_unit_sums() {
    let units = round_units(&[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0]);
    assert_eq!(units, vec![3334, 3333, 3333]);
    assert_eq!(round_units(&[0.5, 0.5]), vec![5000, 5000]);
    let p = softmax(&[f64::NAN, 1.0, f64::INFINITY]);
    assert!(p.iter().all(|x| x.is_finite()));
    assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    assert_eq!(resolve_model("jev-preview"), PREVIEW_MODEL);
    assert_eq!(resolve_model("custom"), "custom");
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map("[a-z]{0,6}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn never_panics_on_arbitrary_json(value in arb_json()) {
        let _ = respond(&value);
        let wrapped = json!({"model": "jev-latest", "state": value.clone(), "questions": {"q": value}});
        let _ = respond(&wrapped);
    }

    #[test]
    fn valid_choice_answers_are_well_formed(
        labels in prop::collection::btree_set("[A-Za-z_]{1,10}", 2..40),
        state in ".{0,200}",
    ) {
        let labels: Vec<String> = labels.into_iter().collect();
        let criteria: Map<String, Value> = labels.iter().map(|l| (l.clone(), Value::Null)).collect();
        let request = json!({"model": "jev-latest", "state": state,
            "questions": {"q": {"type": "choice", "criteria": criteria},
                "s": {"type": "score", "criteria": labels}}});
        let response = respond(&request).expect("valid");
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        check_choice(&response["answers"]["q"], &labels);
        let score = &response["answers"]["s"];
        let value = score["score"].as_f64().expect("score");
        prop_assert!((0.0..=(labels.len() - 1) as f64).contains(&value));
        prop_assert!((sum_of(&score["probabilities"]) - 1.0).abs() < 1e-9);
    }
}

#[test]
fn shipped_example_requests_are_answered() {
    let examples = [
        (
            include_str!("../../../../../config/examples/delivery-request.json"),
            vec!["coarse_cause"],
        ),
        (
            include_str!("../../../../../config/examples/score-request.json"),
            vec!["severity"],
        ),
        (
            include_str!("../../../../../config/examples/noul-request.json"),
            vec!["is_urgent"],
        ),
        (
            include_str!("../../../../../config/examples/mixed-request.json"),
            vec!["department", "frustration", "is_urgent"],
        ),
    ];
    for (text, ids) in examples {
        let response = respond_bytes(text.as_bytes()).expect("example is valid");
        let answers = response["answers"].as_object().expect("answers");
        assert_eq!(answers.keys().collect::<Vec<_>>(), ids);
    }
    let delivery: Value = serde_json::from_str(include_str!(
        "../../../../../config/examples/delivery-request.json"
    ))
    .expect("json");
    assert!(
        infer(&delivery["state"]).is_some(),
        "the delivery example carries report cues"
    );
}

#[test]
fn box_questions_get_valid_boxes_deterministically() {
    let request = json!({"model": "jev-latest", "state": "s", "questions": {"q": {"type": "box", "instructions": "Where?"}}});
    let first = respond(&request).unwrap();
    assert_eq!(first, respond(&request).unwrap());
    let answer = releasegate_core::wire::parse_box(&first["answers"]["q"]).unwrap();
    assert!(answer.confidence.is_some());
    assert!(answer.edges.top <= answer.edges.bottom && answer.edges.left <= answer.edges.right);
}
