use serde_json::{Value, json};

use super::request::{same_string, same_text};
use super::*;
use crate::config::Config;

fn contract(questions: &str) -> std::sync::Arc<Contract> {
    let text = format!(
        "[providers.p]\nkind = \"simulated\"\n[contracts.c]\nprovider = \"p\"\n{questions}"
    );
    Config::from_toml(&text).unwrap().contracts["c"].clone()
}

const CHOICE: &str =
    "[contracts.c.questions.q]\nclasses = [\"A\", \"B\", \"C\"]\nview = \"full_native\"\n";

/// The schema issues of a body as `(loc, type)` pairs, `loc` joined by dots.
fn schema(body: &Value, c: &Contract) -> Vec<(String, &'static str)> {
    match check_request(body, c) {
        Err(RequestError::Schema(issues)) => issues
            .into_iter()
            .map(|issue| {
                let loc: Vec<String> = issue
                    .loc
                    .iter()
                    .map(|item| match item {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                (loc.join("."), issue.kind)
            })
            .collect(),
        other => panic!("expected schema issues for {body}, got {other:?}"),
    }
}

#[test]
fn schema_violations_are_fastapi_validation_issues() {
    let c = contract(CHOICE);
    let ok = json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"C": null, "A": null, "B": null}}}});
    assert_eq!(
        check_request(&ok, &c).unwrap().questions[0].kind,
        Kind::Choice
    );
    let union = |at: &str| {
        vec![
            (format!("{at}.str"), "string_type"),
            (format!("{at}.dict[str,any]"), "dict_type"),
            (format!("{at}.list[any]"), "list_type"),
        ]
    };
    let one = |at: &str, kind: &'static str| vec![(at.to_string(), kind)];
    let cases: Vec<(Value, Vec<(String, &'static str)>)> = vec![
        (json!([1]), one("body", "model_attributes_type")),
        (
            json!({}),
            vec![
                ("body.model".into(), "missing"),
                ("body.state".into(), "missing"),
                ("body.questions".into(), "missing"),
            ],
        ),
        (
            json!({"model": 7, "state": "s", "questions": {"q": {"type": "noul"}}}),
            one("body.model", "string_type"),
        ),
        (
            json!({"model": "m", "state": 3, "questions": {"q": {"type": "noul"}}}),
            union("body.state"),
        ),
        (
            json!({"model": "m", "state": null, "questions": {"q": {"type": "noul"}}}),
            union("body.state"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": []}),
            one("body.questions", "dict_type"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {}}),
            one("body.questions", "too_short"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": 1}}),
            one("body.questions.q", "model_attributes_type"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"criteria": {}}}}),
            one("body.questions.q", "union_tag_not_found"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "rank"}}}),
            one("body.questions.q", "union_tag_invalid"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice"}}}),
            one("body.questions.q.choice.criteria", "missing"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "criteria": ["A"]}}}),
            one("body.questions.q.choice.criteria", "dict_type"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"A": 1}}}}),
            union("body.questions.q.choice.criteria.A"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "score", "criteria": []}}}),
            one("body.questions.q.score.criteria", "too_short"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "score", "criteria": "x"}}}),
            one("body.questions.q.score.criteria", "list_type"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "score", "criteria": ["a", 5]}}}),
            union("body.questions.q.score.criteria.1"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "instructions": true}}}),
            union("body.questions.q.noul.instructions"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "criteria": "yes"}}}),
            one("body.questions.q.noul.criteria", "model_type"),
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "noul", "criteria": {"true": 1}}}}),
            union("body.questions.q.noul.criteria.true"),
        ),
    ];
    for (body, expected) in cases {
        assert_eq!(schema(&body, &c), expected, "{body}");
    }
    // Every issue of a body is reported, in body order, before any contract check.
    let body = json!({"model": 1, "state": "s", "questions": {
        "not_in_contract": {"type": "choice"}, "q": {"type": "score", "criteria": []}}});
    assert_eq!(
        schema(&body, &c),
        vec![
            ("body.model".into(), "string_type"),
            (
                "body.questions.not_in_contract.choice.criteria".into(),
                "missing"
            ),
            ("body.questions.q.score.criteria".into(), "too_short"),
        ]
    );
}

#[test]
fn schema_errors_never_echo_the_input() {
    let c = contract(CHOICE);
    let body = json!({"model": "m", "state": 12345678, "questions": {"q": {"type": "SECRET-TAG"}}});
    let error = check_request(&body, &c).unwrap_err();
    let text = error.body().to_string();
    assert!(
        !text.contains("12345678") && !text.contains("SECRET-TAG"),
        "{text}"
    );
    assert!(!text.contains("\"input\""), "{text}");
    assert_eq!(
        error.body()["detail"][0]["loc"],
        json!(["body", "state", "str"])
    );
    assert_eq!(
        error.to_string(),
        "state.str: Input should be a valid string; state.dict[str,any]: Input should be a valid dictionary; \
         state.list[any]: Input should be a valid list; questions.q: Input tag found using 'type' does not \
         match any of the expected tags: 'noul', 'choice', 'score', 'box'"
    );
}

#[test]
fn invalid_json_is_located_by_byte_offset() {
    let bytes = b"{\n  \"model\": x}";
    let error = serde_json::from_slice::<Value>(bytes).unwrap_err();
    let issue = json_invalid(bytes, error.line(), error.column(), "expected value");
    assert_eq!(issue.loc, vec![json!("body"), json!(13)]);
    assert_eq!(bytes[13], b'x');
    assert_eq!(issue.kind, "json_invalid");
    assert_eq!(issue.msg, "JSON decode error: expected value");
}

#[test]
fn well_formed_requests_outside_the_contract_are_contract_errors() {
    let c = contract(CHOICE);
    let cases = [
        (
            json!({"model": "", "state": "s", "questions": {"q": {"type": "noul"}}}),
            "`model`",
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "box"}}}),
            "asks it as a choice question",
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"A": null, "B": null}}}}),
            "differ",
        ),
        (
            json!({"model": "m", "state": "s", "questions": {"q": {"type": "score", "criteria": ["x", "y", "z"]}}}),
            "asks it as a choice question",
        ),
    ];
    for (body, needle) in cases {
        match check_request(&body, &c) {
            Err(RequestError::Contract(message)) => {
                assert!(
                    message.contains(needle),
                    "{message} should contain {needle}"
                )
            }
            other => panic!("{body}: expected a contract error, got {other:?}"),
        }
    }
}

#[test]
fn questions_outside_the_contract_are_not_released_by_name() {
    let c = contract(CHOICE);
    let body = json!({"model": "m", "state": "s", "questions": {
        "q": {"type": "choice", "criteria": {"A": null, "B": null, "C": null}},
        "other": {"type": "noul"}}});
    let error = check_request(&body, &c).unwrap_err();
    assert_eq!(
        error,
        RequestError::NotReleased {
            question: "other".into(),
            contract: "c".into()
        }
    );
    assert_eq!(error.error_type(), "question_not_released");
    let body = error.body();
    assert_eq!(body["detail"]["error_type"], "question_not_released");
    assert!(
        body["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("question `other` is not released")
    );
}

#[test]
fn a_long_question_id_is_cut_in_the_refusal() {
    let c = contract(CHOICE);
    // 10,000 characters of two bytes each: the cut falls on a character boundary.
    let long = "é".repeat(10_000);
    let body = json!({"model": "m", "state": "s", "questions": {
        "q": {"type": "choice", "criteria": {"A": null, "B": null, "C": null}},
        long.as_str(): {"type": "noul"}}});
    let error = check_request(&body, &c).unwrap_err();
    assert_eq!(error.error_type(), "question_not_released");
    let message = error.to_string();
    assert!(message.len() < 300, "{} bytes", message.len());
    let shown = format!("question `{}…` is not released", "é".repeat(64));
    assert!(message.starts_with(&shown), "{message}");
    assert_eq!(error.body()["detail"]["message"], json!(message));
    // An id of 64 characters or fewer is shown whole.
    for id in ["other", &"x".repeat(64)] {
        let error = RequestError::NotReleased {
            question: id.to_string(),
            contract: "c".into(),
        };
        assert_eq!(
            error.to_string(),
            format!("question `{id}` is not released by release contract `c` (it is not covered)")
        );
    }
    let error = RequestError::NotReleased {
        question: "x".repeat(65),
        contract: "c".into(),
    };
    assert!(
        error
            .to_string()
            .starts_with(&format!("question `{}…`", "x".repeat(64)))
    );
}

#[test]
fn score_and_noul_classes_must_be_levels_and_outcomes() {
    let c = contract(
        "[contracts.c.questions.s]\nclasses = [\"2\", \"0\", \"1\"]\nview = \"full_native\"\n\
         descriptions = { \"0\" = \"low\", \"1\" = \"mid\", \"2\" = \"high\" }\n\
         [contracts.c.questions.n]\nclasses = [\"true\", \"false\"]\nview = \"choice\"\ninstructions = \"?\"\n",
    );
    let body = json!({"model": "m", "state": {}, "questions": {
        "s": {"type": "score", "criteria": ["low", "mid", "high"]},
        "n": {"type": "noul", "instructions": "?"}}});
    let asked = check_request(&body, &c).unwrap();
    assert_eq!(
        asked.questions[0].legend.as_ref().unwrap()["2"],
        json!("high")
    );
    assert!(!is_level_permutation(&["0".into(), "01".into()]));
    assert!(!is_level_permutation(&["0".into(), "0".into()]));
    let wrong = json!({"model": "m", "state": {}, "questions": {"s": {"type": "noul"}}});
    assert!(
        check_request(&wrong, &c)
            .unwrap_err()
            .to_string()
            .contains("asks it as a score question")
    );
}

#[test]
fn answers_are_aligned_by_class_id_not_position() {
    let c = contract(CHOICE);
    let rule = &c.questions["q"];
    let answer = json!({"type": "choice", "choice": "B", "confidence": 0.5,
        "probabilities": {"C": 0.1, "B": 0.7, "A": 0.2}});
    let vector = parse_answer(Kind::Choice, rule, &answer).unwrap();
    assert_eq!(vector.probabilities, vec![0.2, 0.7, 0.1]);
    assert_eq!(vector.choice, 1);
    assert_eq!(vector.confidence, Some(0.5));
}

/// Providers that round every probability to two decimals send sums off 1 by up to half a
/// hundredth per class: those are answers; a vector further off is not.
#[test]
fn probabilities_rounded_to_two_decimals_are_accepted_and_a_wrong_sum_is_not() {
    let c = contract(CHOICE);
    let rule = &c.questions["q"];
    let answer = |a: f64, b: f64, cc: f64| {
        json!({"type": "choice", "choice": "A", "confidence": 0.5,
            "probabilities": {"A": a, "B": b, "C": cc}})
    };
    for (a, b, cc) in [
        (0.34, 0.33, 0.33),
        (0.33, 0.33, 0.33),
        (0.34, 0.34, 0.335),
        (0.5, 0.25, 0.24),
    ] {
        let vector = parse_answer(Kind::Choice, rule, &answer(a, b, cc));
        assert_eq!(
            vector.unwrap().probabilities,
            vec![a, b, cc],
            "{a} {b} {cc}"
        );
    }
    for (a, b, cc) in [(0.34, 0.33, 0.31), (0.4, 0.32, 0.3), (0.5, 0.3, 0.3)] {
        assert_eq!(
            parse_answer(Kind::Choice, rule, &answer(a, b, cc)).unwrap_err(),
            Invalid::ProbabilitySum,
            "{a} {b} {cc}"
        );
    }
    assert_eq!(crate::wire::sum_tolerance(2), 0.01 + 1e-9);
    assert_eq!(crate::wire::sum_tolerance(5), 0.025 + 1e-9);
    assert_eq!(crate::wire::sum_tolerance(255), 0.1 + 1e-9);
}

#[test]
fn invalid_answers_are_classified() {
    let c = contract(CHOICE);
    let rule = &c.questions["q"];
    let base = json!({"type": "choice", "choice": "A", "confidence": 0.5, "probabilities": {"A": 0.5, "B": 0.3, "C": 0.2}});
    let with = |key: &str, value: Value| {
        let mut v = base.clone();
        v[key] = value;
        v
    };
    let cases = [
        (json!("nope"), Invalid::MissingField),
        (with("type", json!("score")), Invalid::TypeMismatch),
        (with("choice", json!("Z")), Invalid::UnknownChoice),
        (
            with("probabilities", json!({"A": 0.5, "B": 0.5})),
            Invalid::ClassMismatch,
        ),
        (
            with("probabilities", json!({"A": 0.5, "B": 0.3, "Z": 0.2})),
            Invalid::ClassMismatch,
        ),
        (
            with("probabilities", json!({"A": 1.5, "B": -0.3, "C": -0.2})),
            Invalid::BadProbability,
        ),
        (
            with("probabilities", json!({"A": 0.5, "B": 0.3, "C": 0.3})),
            Invalid::ProbabilitySum,
        ),
        (
            with("probabilities", json!({"A": "0.5", "B": 0.3, "C": 0.2})),
            Invalid::MissingField,
        ),
        (with("confidence", json!(2.0)), Invalid::BadProbability),
        (with("choice", json!("B")), Invalid::ChoiceNotMostProbable),
        (
            with(
                "probabilities",
                json!({"A": 0.3, "B": 0.3000001, "C": 0.3999999}),
            ),
            Invalid::ChoiceNotMostProbable,
        ),
    ];
    for (answer, expected) in cases {
        assert_eq!(
            parse_answer(Kind::Choice, rule, &answer),
            Err(expected),
            "{answer}"
        );
    }
    // Within the 1e-3 tolerance is accepted.
    assert!(
        parse_answer(
            Kind::Choice,
            rule,
            &with("probabilities", json!({"A": 0.5, "B": 0.3, "C": 0.2009}))
        )
        .is_ok()
    );
}

#[test]
fn a_choice_is_any_most_probable_class() {
    let c = contract(CHOICE);
    let rule = &c.questions["q"];
    let tied = |choice: &str| {
        json!({"type": "choice", "choice": choice, "confidence": 0.2,
            "probabilities": {"A": 0.4, "B": 0.4, "C": 0.2}})
    };
    assert_eq!(
        parse_answer(Kind::Choice, rule, &tied("A")).unwrap().choice,
        0
    );
    assert_eq!(
        parse_answer(Kind::Choice, rule, &tied("B")).unwrap().choice,
        1
    );
    assert_eq!(
        parse_answer(Kind::Choice, rule, &tied("C")),
        Err(Invalid::ChoiceNotMostProbable)
    );
}

#[test]
fn a_negative_zero_is_read_as_zero() {
    let c = contract(CHOICE);
    let rule = &c.questions["q"];
    let answer: Value = serde_json::from_str(
        r#"{"type": "choice", "choice": "A", "confidence": -0,
            "probabilities": {"A": 1, "B": -0.0, "C": -0e5}}"#,
    )
    .unwrap();
    let vector = parse_answer(Kind::Choice, rule, &answer).unwrap();
    let bits: Vec<u64> = vector.probabilities.iter().map(|p| p.to_bits()).collect();
    assert_eq!(bits, [1.0f64.to_bits(), 0, 0]);
    assert_eq!(vector.confidence.map(f64::to_bits), Some(0));
    let edges: Value = serde_json::from_str(
        r#"{"type": "box", "box": {"top": -0.0, "bottom": 0.5, "left": -0, "right": 1}}"#,
    )
    .unwrap();
    let parsed = parse_box(&edges).unwrap();
    assert_eq!(
        (parsed.edges.top.to_bits(), parsed.edges.left.to_bits()),
        (0, 0)
    );
}

#[test]
fn noul_and_score_answers_map_onto_class_vectors() {
    let c = contract(
        "[contracts.c.questions.s]\nclasses = [\"0\", \"1\", \"2\"]\nview = \"full_native\"\n[contracts.c.questions.n]\nclasses = [\"true\", \"false\"]\nview = \"choice\"\n",
    );
    let noul = parse_answer(
        Kind::Noul,
        &c.questions["n"],
        &json!({"type": "noul", "noul": 0.25}),
    )
    .unwrap();
    assert_eq!(noul.probabilities, vec![0.25, 0.75]);
    assert_eq!(noul.choice, 1);
    let score = json!({"type": "score", "score": 1.05, "confidence": 0.92, "legend": {}, "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}});
    let vector = parse_answer(Kind::Score, &c.questions["s"], &score).unwrap();
    assert_eq!(vector.choice, 1);
    assert_eq!(argmax(&[0.3, 0.3, 0.1]), 0);
    let mut no_score = score.clone();
    no_score.as_object_mut().unwrap().remove("score");
    assert_eq!(
        parse_answer(Kind::Score, &c.questions["s"], &no_score),
        Err(Invalid::MissingField)
    );
}

#[test]
fn model_ids_are_bounded_and_plain() {
    for ok in [
        "jev-1.13.0",
        "jev-latest",
        "llama3:8b",
        "accounts/acme/models/m_2",
        "m",
        "9",
        &"a".repeat(MAX_MODEL_ID_LEN),
    ] {
        assert!(is_model_id(ok), "{ok}");
    }
    for bad in [
        "",
        "-jev",
        ".hidden",
        "jev 1.13",
        "jev\n1",
        "jev\u{1b}[31m",
        "jév",
        "jev\"}",
        "jev;rm",
        "see https://x",
        &"a".repeat(MAX_MODEL_ID_LEN + 1),
    ] {
        assert!(!is_model_id(bad), "{bad:?}");
    }
}

#[test]
fn release_dates_are_real_calendar_dates() {
    for ok in [
        "2026-09-15",
        "2024-02-29",
        "2000-02-29",
        "0001-01-01",
        "9999-12-31",
    ] {
        assert!(is_calendar_date(ok), "{ok}");
    }
    for bad in [
        "2026-02-29",
        "1900-02-29",
        "2026-13-01",
        "2026-00-10",
        "2026-04-31",
        "2026-01-00",
        "0000-01-01",
        "2026-9-15",
        "2026-09-15T00:00:00Z",
        "2026/09/15",
        "+026-09-15",
        "2026-09-1\n",
        "",
    ] {
        assert!(!is_calendar_date(bad), "{bad:?}");
    }
}

const PINNED: &str = "[contracts.c.questions.q]\nclasses = [\"B\", \"A\", \"C\"]\nview = \"full_native\"\n\
     instructions = \"Which team?\"\ndescriptions = { A = \"alpha\", C = { text = \"gamma\", n = 1 } }\n\
     [contracts.c.questions.s]\nclasses = [\"2\", \"0\", \"1\"]\nview = \"full_native\"\n\
     descriptions = { \"0\" = \"low\", \"2\" = [\"high\", 2] }\n\
     [contracts.c.questions.n]\nclasses = [\"true\", \"false\"]\nview = \"full_native\"\n\
     [contracts.c.questions.d]\nclasses = [\"false\", \"true\"]\nview = \"full_native\"\n\
     instructions = \"Urgent?\"\ndescriptions = { true = \"yes, now\" }\n\
     [contracts.c.questions.free]\nclasses = [\"x\", \"y\"]\nview = \"choice\"\ncaller_text = true\n";

fn upstream_of(request: Value) -> Result<Value, RequestError> {
    check_request(&request, &contract(PINNED)).map(|asked| asked.upstream().clone())
}

#[test]
fn the_contracts_question_goes_upstream_whatever_the_caller_wrote() {
    let upstream = upstream_of(json!({"model": "m", "state": {"t": 1}, "extra": "dropped",
        "assets": {"<img>": {"type": "image", "part": "asset-0"}},
        "questions": {
            "s": {"type": "score", "criteria": ["low", "1", ["high", 2.0]], "x": 1},
            "q": {"type": "choice", "instructions": null, "criteria": {"C": null, "A": null, "B": null}},
            "n": {"type": "noul", "criteria": {"true": null, "maybe": "?"}},
            "d": {"type": "noul"},
            "free": {"type": "choice", "instructions": "Caller's", "criteria": {"y": "why", "x": null}}}}))
    .unwrap();
    let text = serde_json::to_string(&upstream).unwrap();
    assert_eq!(
        text,
        r#"{"model":"m","state":{"t":1},"assets":{"<img>":{"type":"image","part":"asset-0"}},"questions":{"#.to_string()
            + r#""s":{"type":"score","criteria":["low","1",["high",2]]},"#
            + r#""q":{"type":"choice","instructions":"Which team?","criteria":{"B":null,"A":"alpha","C":{"n":1,"text":"gamma"}}},"#
            + r#""n":{"type":"noul"},"#
            + r#""d":{"type":"noul","instructions":"Urgent?","criteria":{"false":null,"true":"yes, now"}},"#
            + r#""free":{"type":"choice","instructions":"Caller's","criteria":{"x":null,"y":"why"}}}}"#
    );
}

#[test]
fn a_choice_question_must_name_exactly_the_contracts_classes() {
    let c = contract(CHOICE);
    let ask = |criteria: Value| {
        let body = json!({"model": "m", "state": "s",
            "questions": {"q": {"type": "choice", "criteria": criteria}}});
        check_request(&body, &c)
    };
    let differ = RequestError::Contract(
        "question `q`: its criteria labels differ from the contract's classes".into(),
    );
    for criteria in [
        json!({"A": null, "B": null}),
        json!({"A": null, "B": null, "C": null, "D": null}),
        json!({"A": null, "B": null, "D": null}),
        json!({"a": null, "B": null, "C": null}),
    ] {
        assert_eq!(ask(criteria.clone()).unwrap_err(), differ, "{criteria}");
    }
    // Any order, any null or the contract's own text: the contract's question goes up.
    let asked = ask(json!({"C": null, "A": null, "B": null})).unwrap();
    assert_eq!(
        serde_json::to_string(&asked.upstream()["questions"]["q"]["criteria"]).unwrap(),
        r#"{"A":null,"B":null,"C":null}"#
    );
}

#[test]
fn every_request_sends_the_contracts_question_built_once() {
    // One contract for all requests: the first check builds the pinned upstream form,
    // the later ones reuse it, whatever the caller spelled.
    let c = contract(PINNED);
    let spellings = [
        json!({"type": "score", "criteria": [null, null, null]}),
        json!({"type": "score", "criteria": ["low", "1", ["high", 2.0]]}),
        json!({"type": "score", "criteria": [null, "1", null], "instructions": null}),
    ];
    for question in spellings {
        let body = json!({"model": "m", "state": "s", "questions": {"s": question}});
        let asked = check_request(&body, &c).unwrap();
        assert_eq!(
            serde_json::to_string(&asked.upstream()["questions"]).unwrap(),
            r#"{"s":{"type":"score","criteria":["low","1",["high",2]]}}"#
        );
        let legend = asked.questions[0].legend.as_ref().unwrap();
        assert_eq!(
            serde_json::to_string(&**legend).unwrap(),
            r#"{"0":"low","1":"1","2":["high",2]}"#
        );
    }
}

#[test]
fn a_request_read_from_its_bytes_is_checked_and_sent_as_its_value() {
    let c = contract(PINNED);
    let bodies = [
        json!({"model": "m", "state": {"t": [1, "two"]}, "extra": "dropped",
            "assets": {"<img>": {"type": "image", "part": "asset-0"}},
            "questions": {"s": {"type": "score", "criteria": ["low", "1", ["high", 2.0]]},
                "free": {"type": "choice", "criteria": {"y": "why", "x": null}}}}),
        json!({"questions": {"q": {"type": "choice"}}, "state": "s", "model": "m2"}),
        json!({"model": "m", "state": "s", "questions": {"unknown": {"type": "box"}}}),
        json!({"model": "m", "questions": {}}),
        json!([1, 2]),
    ];
    for body in bodies {
        let from_value = check_request(&body, &c);
        let bytes = serde_json::to_vec(&body).unwrap();
        let from_bytes = check_json(&Json::parse(&bytes).unwrap(), &c);
        match (from_value, from_bytes) {
            (Ok(from_value), Ok(from_bytes)) => {
                assert_eq!(from_value.model, from_bytes.model);
                assert_eq!(
                    serde_json::to_string(from_value.upstream()).unwrap(),
                    serde_json::to_string(from_bytes.upstream()).unwrap()
                );
                // The bytes the proxy sends are the body's serialization, without building it.
                for asked in [&from_value, &from_bytes] {
                    assert_eq!(
                        String::from_utf8(asked.upstream_bytes()).unwrap(),
                        serde_json::to_string(asked.upstream()).unwrap()
                    );
                }
                assert_eq!(
                    format!("{:?}", from_value.questions),
                    format!("{:?}", from_bytes.questions)
                );
            }
            (Err(from_value), Err(from_bytes)) => assert_eq!(from_value, from_bytes),
            (from_value, from_bytes) => panic!("{body}: {from_value:?} against {from_bytes:?}"),
        }
    }
}

#[test]
fn other_text_is_refused_naming_the_question_and_field_never_the_text() {
    let base = |questions: Value| json!({"model": "m", "state": "s", "questions": questions});
    let cases = [
        (
            json!({"q": {"type": "choice", "instructions": "SECRET swap", "criteria": {"A": null, "B": null, "C": null}}}),
            "q",
            "instructions",
        ),
        (
            json!({"q": {"type": "choice", "instructions": "", "criteria": {"A": null, "B": null, "C": null}}}),
            "q",
            "instructions",
        ),
        (
            json!({"q": {"type": "choice", "instructions": [], "criteria": {"A": null, "B": null, "C": null}}}),
            "q",
            "instructions",
        ),
        (
            json!({"q": {"type": "choice", "criteria": {"A": "SECRET gamma", "B": null, "C": null}}}),
            "q",
            "criteria.A",
        ),
        (
            json!({"q": {"type": "choice", "criteria": {"A": null, "B": "SECRET", "C": null}}}),
            "q",
            "criteria.B",
        ),
        (
            json!({"s": {"type": "score", "criteria": ["SECRET", "1", ["high", 2]]}}),
            "s",
            "criteria[0]",
        ),
        (
            json!({"s": {"type": "score", "criteria": ["low", "mid", ["high", 2]]}}),
            "s",
            "criteria[1]",
        ),
        (
            json!({"n": {"type": "noul", "instructions": "Is the SECRET cause X?"}}),
            "n",
            "instructions",
        ),
        (
            json!({"d": {"type": "noul", "criteria": {"false": "SECRET"}}}),
            "d",
            "criteria.false",
        ),
    ];
    for (questions, question, field) in cases {
        let error = upstream_of(base(questions.clone())).unwrap_err();
        assert_eq!(error.error_type(), "question_text_mismatch", "{questions}");
        assert_eq!(
            error,
            RequestError::TextMismatch {
                question: question.into(),
                field: field.into()
            },
            "{questions}"
        );
        let body = error.body().to_string();
        assert!(!body.contains("SECRET"), "{body}");
        assert!(
            body.contains(&format!("`{question}`")) && body.contains(&format!("`{field}`")),
            "{body}"
        );
    }
    // The same text, spelled otherwise, is the same text.
    upstream_of(base(
        json!({"q": {"type": "choice", "instructions": "Which team?",
        "criteria": {"A": "alpha", "B": null, "C": {"n": 1.0, "text": "gamma"}}}}),
    ))
    .unwrap();
    // The type comes from the contract.
    let error = upstream_of(base(
        json!({"s": {"type": "choice", "criteria": {"0": null, "1": null, "2": null}}}),
    ))
    .unwrap_err();
    assert!(
        matches!(error, RequestError::Contract(ref m) if m.contains("score")),
        "{error:?}"
    );
}

#[test]
fn canonical_json_sorts_keys_and_normalizes_numbers() {
    let value: Value = serde_json::from_str(
        r#"{"b": [1.0, -0.0, 2.5e0, 1e300, -3, 18446744073709551615, "\u00e9\n"], "a": {"d": true, "c": null}}"#,
    )
    .unwrap();
    let mut out = Vec::new();
    canonical_json(&value, &mut out);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        format!(
            r#"{{"a":{{"c":null,"d":true}},"b":[1,0,2.5,{},-3,18446744073709551615,"é\n"]}}"#,
            1e300
        )
    );
}

/// Small JSON values that are often equal, or equal but spelled otherwise: strings that
/// need escapes, numbers with several spellings of one value, nested arrays and objects.
fn small_text() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        prop::sample::select(vec![
            "",
            "a",
            "A",
            "é",
            "a\"b",
            "line\nbreak",
            "1",
            "null",
            "\u{1f600}"
        ])
        .prop_map(|text| Value::String(text.into())),
        prop::sample::select(vec![0u64, 1, 2, 10_000_000_000_000_000_000]).prop_map(Value::from),
        prop::sample::select(vec![0.0f64, -0.0, 1.0, 2.5, 1e19, -1.0]).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["a", "b", "é"]).prop_map(String::from),
                    inner
                ),
                0..3
            )
            .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    /// The pinned-text check's shortcut answers exactly as the canonical comparison, on the
    /// caller's text as the proxy reads it (escaped strings owned, plain ones borrowed).
    #[test]
    fn same_text_is_same_json(
        (own, sent) in proptest::strategy::Strategy::prop_flat_map(small_text(), |own| {
            use proptest::prelude::*;
            (Just(own.clone()), prop_oneof![Just(own), small_text()])
        })
    ) {
        let text = serde_json::to_string(&sent).unwrap();
        // The same text with `é` escaped: read into an owned string.
        let escaped = text.replace('é', "\\u00e9");
        for spelled in [text, escaped] {
            let read = Json::parse(spelled.as_bytes()).unwrap();
            let expected = same_json(&own, &sent);
            proptest::prop_assert_eq!(same_text(&own, &read), expected, "{}", spelled);
            proptest::prop_assert!(same_text(&sent, &read), "{}", spelled);
        }
    }
}

#[test]
fn same_text_agrees_with_same_json_on_spellings_and_near_misses() {
    let pairs = [
        (json!("a"), r#""a""#),
        (json!("a"), r#""A""#),
        (json!("a"), r#""b""#),
        (json!("é"), r#""\u00e9""#),
        (json!("a\"b"), r#""a\"b""#),
        (json!("1"), "1"),
        (json!(1), r#""1""#),
        (json!(1), "1.0"),
        (json!(1), "1e0"),
        (json!(-0.0), "0"),
        (json!(null), r#""null""#),
        (json!(""), "null"),
        (json!([]), r#""[]""#),
        (json!({"a": 1, "b": "x"}), r#"{"b":"x","a":1.0}"#),
        (json!({"a": 1}), r#"{"a":"1"}"#),
        (json!(["x", {"n": 2}]), r#"["x",{"n":2.0}]"#),
    ];
    for (own, sent) in pairs {
        let read = Json::parse(sent.as_bytes()).unwrap();
        let value: Value = serde_json::from_str(sent).unwrap();
        assert_eq!(
            same_text(&own, &read),
            same_json(&own, &value),
            "{own} against {sent}"
        );
    }
}

#[test]
fn same_string_finds_a_difference_at_every_position_of_every_length() {
    for len in 0..24 {
        let text: String = (0..len).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        assert!(same_string(&text, &text.clone()), "{text}");
        assert!(!same_string(&text, &format!("{text}a")), "{text}");
        for at in 0..len {
            let mut other = text.clone().into_bytes();
            other[at] ^= 0x01;
            let other = String::from_utf8(other).unwrap();
            assert!(!same_string(&text, &other), "{text} against {other}");
        }
    }
}

#[test]
fn the_state_goes_upstream_as_sent() {
    let c = contract(PINNED);
    let digits = "123456789012345678901234567890";
    let state = format!(r#"{{"n": {digits}, "z": -0, "e": 1E2, "s": "\u00e9"}}"#);
    let body = format!(
        r#"{{"model": "m", "state": {state}, "questions": {{"q": {{"type": "choice", "criteria": {{"B": null, "A": null, "C": null}}}}}}}}"#
    );
    let (json, sent) = Json::parse_with_member(body.as_bytes(), "state").unwrap();
    assert_eq!(sent, Some(state.as_bytes()));
    let asked = check_sent(&json, sent, &c).unwrap();
    let upstream = String::from_utf8(asked.upstream_bytes()).unwrap();
    assert!(upstream.contains(&state), "{upstream}");
    // Read as a value where one is needed (workflows, seeded noise): the same value, so
    // the noise identity does not depend on the spelling.
    let written = check_json(&json, &c).unwrap();
    assert_eq!(asked.state(), written.state());
    assert_eq!(
        serde_json::to_string(asked.upstream()).unwrap(),
        serde_json::to_string(written.upstream()).unwrap()
    );
    assert!(
        !String::from_utf8(written.upstream_bytes())
            .unwrap()
            .contains(digits)
    );
}
