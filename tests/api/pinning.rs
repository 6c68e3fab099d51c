//! The contract governs the question as well as the answer: what goes upstream is the
//! contract's question, mechanisms release only what they computed, and nothing a caller
//! can vary in a request draws fresh noise or reads off the proxy's traffic.

use serde_json::{Map, Value, json};

use crate::helpers::{
    CLIENT_KEY, TestConfig, error_of, native_answer, request, spawn, spawn_upstream, start,
};

/// What the upstream received last, as JSON.
fn last_upstream(app: &crate::helpers::TestApp) -> Value {
    serde_json::from_slice(&app.upstream.last().body).unwrap()
}

#[tokio::test]
async fn the_upstream_receives_the_contracts_question_whatever_the_caller_sends() {
    let app = spawn("full_native", "").await;
    let contracts_questions = json!({
        "cause": {"type": "choice", "instructions": "Why?", "criteria": {"A": null, "B": "b", "C": null, "D": null}},
        "level": {"type": "score", "criteria": ["low", "mid", "high"]},
        "urgent": {"type": "noul", "instructions": "Urgent?"}
    });
    // Without any text (what a client that sends label names does), with nulls, and with
    // the contract's own text: the same question goes upstream.
    for questions in [
        json!({"cause": {"type": "choice", "criteria": {"D": null, "C": null, "B": null, "A": null}},
               "level": {"type": "score", "criteria": [null, null, null]},
               "urgent": {"type": "noul"}}),
        json!({"cause": {"type": "choice", "instructions": null, "criteria": {"A": null, "B": null, "C": null, "D": null}},
               "level": {"type": "score", "instructions": null, "criteria": ["low", null, "high"]},
               "urgent": {"type": "noul", "criteria": {"true": null, "false": null}}}),
        request()["questions"].clone(),
    ] {
        let body = json!({"model": "jev-latest", "state": {"ticket": "t"}, "questions": questions});
        let response = app.post(&body).await;
        assert_eq!(response.status(), 200, "{body}");
        let upstream = last_upstream(&app);
        assert_eq!(upstream["questions"], contracts_questions, "{body}");
        assert_eq!(upstream["state"], json!({"ticket": "t"}));
    }
    let asked = app.upstream.seen.lock().unwrap().len();

    // Every described attack is refused before anything goes upstream.
    let attacks = [
        // Swap two labels' meanings: a coarsened pair would come back apart.
        (
            "cause",
            json!({"type": "choice", "criteria": {"A": "b", "B": "a", "C": null, "D": null}}),
            "criteria.A",
        ),
        // Give a withheld label's meaning to another label.
        (
            "cause",
            json!({"type": "choice", "criteria": {"A": null, "B": null, "C": "SECRET-MEANING", "D": null}}),
            "criteria.C",
        ),
        // Fine causes in the levels of a score question.
        (
            "level",
            json!({"type": "score", "criteria": ["low", "SECRET: the fine cause is X", "high"]}),
            "criteria[1]",
        ),
        // A yes/no oracle for any predicate.
        (
            "urgent",
            json!({"type": "noul", "instructions": "Is the SECRET fine cause X?"}),
            "instructions",
        ),
        (
            "urgent",
            json!({"type": "noul", "criteria": {"true": "SECRET cause X", "false": null}}),
            "criteria.true",
        ),
        // Other spellings of "no text" are text.
        (
            "cause",
            json!({"type": "choice", "instructions": "", "criteria": {"A": null, "B": null, "C": null, "D": null}}),
            "instructions",
        ),
        (
            "cause",
            json!({"type": "choice", "instructions": [], "criteria": {"A": null, "B": null, "C": null, "D": null}}),
            "instructions",
        ),
    ];
    for (id, question, field) in attacks {
        let mut questions = Map::new();
        questions.insert(id.into(), question.clone());
        let body = json!({"model": "jev-latest", "state": "s", "questions": questions});
        let response = app.post(&body).await;
        let raw = response.text().await.unwrap();
        let parsed: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(
            parsed["detail"]["error_type"], "question_text_mismatch",
            "{question}: {raw}"
        );
        let message = parsed["detail"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{id}`")) && message.contains(&format!("`{field}`")),
            "{message}"
        );
        assert!(!raw.contains("SECRET") && !raw.contains("\"b\""), "{raw}");
    }
    assert_eq!(
        app.upstream.seen.lock().unwrap().len(),
        asked,
        "an attack reached the provider"
    );
    app.stop().await;
}

#[tokio::test]
async fn caller_text_lets_the_callers_own_text_through() {
    let app = spawn("choice", "caller_text = true").await;
    let body = json!({"model": "jev-latest", "state": "s", "questions": {
        "cause": {"type": "choice", "instructions": "Caller's own?", "criteria": {"D": "dd", "A": null, "B": null, "C": null}},
        "urgent": {"type": "noul", "instructions": "Other?"}}});
    let response = app.post(&body).await;
    // Only `cause` lets caller text through; `urgent` is still pinned.
    assert_eq!(error_of(response).await.1, "question_text_mismatch");
    let body = json!({"model": "jev-latest", "state": "s", "questions": {
        "cause": {"type": "choice", "instructions": "Caller's own?", "criteria": {"D": "dd", "A": null, "B": null, "C": null}}}});
    assert_eq!(app.post(&body).await.status(), 200);
    // The caller's text, in the contract's option order.
    assert_eq!(
        last_upstream(&app)["questions"]["cause"],
        json!({"type": "choice", "instructions": "Caller's own?", "criteria": {"A": null, "B": null, "C": null, "D": "dd"}})
    );
    app.stop().await;
}

/// 60 spellings of one request: the contract's text or none, nulls, option orders, unknown
/// members of the body, the question and a noul's criteria, whitespace and number spelling,
/// another question beside it.
fn variants() -> Vec<Vec<u8>> {
    let orders = [
        ["A", "B", "C", "D"],
        ["D", "C", "B", "A"],
        ["B", "A", "D", "C"],
        ["C", "D", "A", "B"],
        ["A", "C", "B", "D"],
        ["D", "A", "C", "B"],
        ["B", "D", "C", "A"],
        ["C", "B", "A", "D"],
        ["D", "B", "A", "C"],
        ["A", "D", "C", "B"],
    ];
    let urgent = [
        None,
        Some(json!({"type": "noul"})),
        Some(json!({"type": "noul", "criteria": {}})),
        Some(json!({"type": "noul", "criteria": null})),
        Some(json!({"type": "noul", "criteria": {"true": null}})),
        Some(
            json!({"type": "noul", "criteria": {"true": null, "false": null}, "instructions": "Urgent?"}),
        ),
        Some(json!({"type": "noul", "criteria": {"maybe": "ignored"}, "x-note": 1})),
    ];
    let mut out = Vec::new();
    for (i, order) in orders.iter().enumerate() {
        for (j, instructions) in [None, Some(Value::Null), Some(json!("Why?"))]
            .iter()
            .enumerate()
        {
            for b in [Value::Null, json!("b")] {
                let mut criteria = Map::new();
                for label in order {
                    let text = if *label == "B" {
                        b.clone()
                    } else {
                        Value::Null
                    };
                    criteria.insert(label.to_string(), text);
                }
                let mut cause = Map::new();
                cause.insert("type".into(), json!("choice"));
                if let Some(instructions) = instructions {
                    cause.insert("instructions".into(), instructions.clone());
                }
                cause.insert("criteria".into(), Value::Object(criteria));
                if (i + j) % 2 == 0 {
                    cause.insert("x-unknown".into(), json!([1, 2]));
                }
                let mut questions = Map::new();
                questions.insert("cause".into(), Value::Object(cause));
                if let Some(urgent) = &urgent[(i * 3 + j) % urgent.len()] {
                    questions.insert("urgent".into(), urgent.clone());
                }
                let mut body = json!({"model": "jev-latest", "state": {"ticket": "late parcel", "n": 2}, "questions": questions});
                if j == 1 {
                    body["nonce"] = json!(i);
                }
                let mut text = serde_json::to_string(&body).unwrap();
                // Number spelling and whitespace.
                match (i + j) % 3 {
                    0 => text = text.replace("\"n\":2", "\"n\" : 2.0"),
                    1 => text = text.replace("\"n\":2", "\"n\":20e-1"),
                    _ => text = text.replace(',', " ,\n "),
                }
                out.push(text.into_bytes());
            }
        }
    }
    out
}

#[tokio::test]
async fn every_spelling_of_the_same_question_draws_the_same_noise() {
    let app = spawn(
        "full_probabilities",
        "mechanism = { kind = \"gaussian\", sigma = 0.05, seed = 9 }",
    )
    .await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let variants = variants();
    assert!(variants.len() >= 50);
    let mut draws = std::collections::BTreeSet::new();
    for raw in &variants {
        let response = app.post_raw(raw.clone(), &[("authorization", &auth)]).await;
        assert_eq!(response.status(), 200, "{}", String::from_utf8_lossy(raw));
        let body: Value = response.json().await.unwrap();
        draws.insert(body["answers"]["cause"].to_string());
    }
    assert_eq!(draws.len(), 1, "{draws:#?}");
    let native = native_answer()["answers"]["cause"]["probabilities"].clone();
    assert!(!draws.iter().next().unwrap().contains(&native.to_string()));
    // A different question content does draw other noise (the identity is not constant).
    let mut other = request();
    other["state"] = json!({"ticket": "lost parcel"});
    let body: Value = app.post(&other).await.json().await.unwrap();
    assert!(!draws.contains(&body["answers"]["cause"].to_string()));
    app.stop().await;
}

/// Jev's choice confidence of a full vector.
fn choice_confidence(p: &[f64]) -> f64 {
    let k = p.len() as f64;
    let max = p.iter().copied().fold(0.0, f64::max);
    ((max - 1.0 / k) / (1.0 - 1.0 / k)).clamp(0.0, 1.0)
}

#[tokio::test]
async fn mechanisms_release_a_confidence_computed_from_what_they_release() {
    // The native cause: B 0.7, confidence 0.61 (not Jev's 0.6, so a pass-through shows).
    let native_confidence = 0.61;
    for mechanism in [
        "{ kind = \"quantize\", step = 0.25 }",
        "{ kind = \"temperature\", tau = 3 }",
        "{ kind = \"gaussian\", sigma = 0.1, seed = 3 }",
        "{ kind = \"gaussian\", sigma = 0.1 }",
        "{ kind = \"top_k\", k = 3 }",
    ] {
        let app = spawn("full_native", &format!("mechanism = {mechanism}")).await;
        let body: Value = app.post(&request()).await.json().await.unwrap();
        let cause = &body["answers"]["cause"];
        let p: Vec<f64> = ["A", "B", "C", "D"]
            .iter()
            .map(|l| cause["probabilities"][l].as_f64().unwrap_or(-1.0))
            .collect();
        let confidence = cause["confidence"].as_f64().unwrap();
        assert_ne!(confidence, native_confidence, "{mechanism}: {cause}");
        if p.iter().all(|p| *p >= 0.0) {
            let expected = choice_confidence(&p);
            assert!(
                (confidence - expected).abs() < 1e-9,
                "{mechanism}: {cause} vs {expected}"
            );
        } else {
            // top_k: the omitted class shares the missing mass, as the fills do.
            let missing = 1.0 - p.iter().filter(|p| **p >= 0.0).sum::<f64>();
            let full: Vec<f64> = p
                .iter()
                .map(|p| if *p < 0.0 { missing } else { *p })
                .collect();
            assert!(
                (confidence - choice_confidence(&full)).abs() < 1e-9,
                "{mechanism}: {cause}"
            );
        }
        app.stop().await;
    }
    // choice_confidence under Gaussian noise: the noise moves the confidence, and the fill
    // implies a vector from it, never the native top probability.
    let app = spawn(
        "choice_confidence",
        "mechanism = { kind = \"gaussian\", sigma = 0.2, seed = 5 }",
    )
    .await;
    let body: Value = app.post(&request()).await.json().await.unwrap();
    let cause = &body["answers"]["cause"];
    assert_ne!(
        cause["confidence"].as_f64().unwrap(),
        native_confidence,
        "{cause}"
    );
    assert_ne!(
        cause["probabilities"]["B"].as_f64().unwrap(),
        0.7075,
        "{cause}"
    );
    app.stop().await;
    // The paper's baseline setting, for audits that replicate it: said explicitly.
    let app = spawn(
        "full_native",
        "mechanism = { kind = \"quantize\", step = 0.25, confidence = \"native\" }",
    )
    .await;
    let body: Value = app.post(&request()).await.json().await.unwrap();
    assert_eq!(
        body["answers"]["cause"]["confidence"],
        json!(native_confidence)
    );
    app.stop().await;
}

#[tokio::test]
async fn coarsened_answers_keep_nothing_of_the_split() {
    let app = spawn("full_native", "coarsen = { A = \"AB\", B = \"AB\" }").await;
    let answer = |a: f64, b: f64, c: f64, d: f64, choice: &str, confidence: f64| {
        let mut native = native_answer();
        native["answers"]["cause"] = json!({"type": "choice", "choice": choice, "confidence": confidence,
            "probabilities": {"A": a, "B": b, "C": c, "D": d}});
        native
    };
    // The same coarse vector from different splits, with the fine answers' own
    // confidences: the releases are byte for byte the same.
    let mut bodies = Vec::new();
    for native in [
        answer(0.1, 0.2, 0.45, 0.25, "C", 0.2667),
        answer(0.15, 0.15, 0.45, 0.25, "C", 0.2667),
        answer(0.3, 0.0, 0.45, 0.25, "C", 0.91),
    ] {
        app.upstream.answer(native);
        bodies.push(app.post(&request()).await.text().await.unwrap());
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{bodies:#?}");
    assert!(bodies[0].contains(r#""AB":0.3,"#), "{}", bodies[0]);
    let body: Value = serde_json::from_str(&bodies[0]).unwrap();
    let cause = &body["answers"]["cause"];
    let expected = choice_confidence(&[0.3, 0.45, 0.25]);
    assert!(
        (cause["confidence"].as_f64().unwrap() - expected).abs() < 1e-12,
        "{cause}"
    );
    // The released choice is the most probable coarse label, not the fine choice's group.
    app.upstream.answer(answer(0.35, 0.25, 0.4, 0.0, "C", 0.2));
    let body: Value = app.post(&request()).await.json().await.unwrap();
    assert_eq!(body["answers"]["cause"]["choice"], "AB", "{body}");
    app.stop().await;
}

#[tokio::test]
async fn request_ids_cannot_be_ordered_or_counted() {
    let app = spawn("choice", "").await;
    let mut ids = Vec::new();
    for _ in 0..40 {
        let response = app.post(&request()).await;
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(
            response.headers()["x-typesafe-request-id"]
                .to_str()
                .unwrap(),
            id
        );
        ids.push(id);
    }
    let unique: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
    let values: Vec<u64> = ids
        .iter()
        .map(|id| {
            let hex = id.strip_prefix("rg-").unwrap();
            assert_eq!(hex.len(), 16, "{id}");
            u64::from_str_radix(hex, 16).unwrap()
        })
        .collect();
    // Consecutive requests: no counter shows (about half the steps go down, and none is small).
    let down = values.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(
        (8..=31).contains(&down),
        "{down} of 39 steps went down: {ids:?}"
    );
    assert!(
        values.windows(2).all(|w| w[0].abs_diff(w[1]) > 1 << 20),
        "{ids:?}"
    );
    // Another process draws another key: the same request count gives other ids.
    let (upstream, base_url) = spawn_upstream().await;
    let config = TestConfig {
        max_body_bytes: None,
        provider_extra: String::new(),
        view: "choice".into(),
        ..TestConfig::single()
    };
    let other = start(config.load(&base_url), upstream).await;
    let response = other.post(&request()).await;
    assert_eq!(response.status(), 200);
    let first = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_ne!(first, ids[0]);
    other.stop().await;
    app.stop().await;
}

/// The caller's `state` goes upstream as it was sent, however it is spelled (escapes,
/// `-0`, a 30-digit integer, many keys); a state that repeats a key goes as the request
/// reads it (its last value), never with the repeat; a state that is not JSON refuses
/// the request before anything goes upstream.
#[tokio::test]
async fn the_state_goes_upstream_as_sent_and_only_when_it_reads_one_way() {
    let app = spawn("full_native", "").await;
    let upstream_state = |app: &crate::helpers::TestApp| {
        let body = app.upstream.last().body;
        let text = String::from_utf8(body.to_vec()).unwrap();
        let start = text.find("\"state\":").unwrap() + "\"state\":".len();
        let end = text.find(",\"questions\":").unwrap();
        text[start..end].to_string()
    };
    let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\": \"v\\n{i}\"")).collect();
    let as_sent = [
        r#"{"note": "late \"parcel\"\n\u00e9t\u00e9 \ud83d\ude00 \/ \\", "n": 123456789012345678901234567890, "z": -0, "e": 1E2, "l": [true, null, {"x": []}]}"#.to_string(),
        r#""a plain string state""#.into(),
        r#"["a", "list\tstate"]"#.into(),
        format!("{{{}}}", many.join(", ")),
    ];
    for state in &as_sent {
        let response = post_state(&app, state).await;
        assert_eq!(response.status(), 200, "{state}");
        assert_eq!(upstream_state(&app), *state);
    }
    for (state, read) in [
        (
            r#"{"a": 1, "b": {"c": 2}, "a": 3}"#,
            json!({"a": 3, "b": {"c": 2}}),
        ),
        (r#"{"a\u0062": 1, "ab": 2}"#, json!({"ab": 2})),
    ] {
        let response = post_state(&app, state).await;
        assert_eq!(response.status(), 200, "{state}");
        let sent: Value = serde_json::from_str(&upstream_state(&app)).unwrap();
        assert_eq!(sent, read, "{state}");
        assert!(!upstream_state(&app).contains("\"a\": 1"), "{state}");
    }
    let seen = app.upstream.seen.lock().unwrap().len();
    for state in [
        r#""bad \q escape""#,
        r#""lone \ud800""#,
        "\"control \u{1}\"",
        "[1,]",
        "{\"a\" 1}",
    ] {
        let response = post_state(&app, state).await;
        assert_eq!(response.status(), 422, "{state}");
        let refused: Value = response.json().await.unwrap();
        assert_eq!(refused["detail"][0]["type"], "json_invalid", "{state}");
    }
    assert_eq!(app.upstream.seen.lock().unwrap().len(), seen);
    app.stop().await;
}

/// Posts the test request's questions with `state` spliced in as it is written.
async fn post_state(app: &crate::helpers::TestApp, state: &str) -> reqwest::Response {
    let questions = serde_json::to_string(&request()["questions"]).unwrap();
    let body = format!(r#"{{"model": "jev-latest", "state": {state}, "questions": {questions}}}"#);
    let auth = format!("Bearer {CLIENT_KEY}");
    app.post_raw(body.into_bytes(), &[("authorization", &auth)])
        .await
}

/// A recipient's `questions` value the contract passed is not checked again when it
/// comes back byte for byte (`wire::KnownRooms`): the same question goes upstream, the
/// request's other members are still checked, and any other bytes are checked whole.
#[tokio::test]
async fn questions_sent_again_go_upstream_as_the_first_and_other_bytes_are_checked() {
    let app = spawn("full_native", "").await;
    let auth = format!("Bearer {CLIENT_KEY}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let questions = r#"{"cause":{"type":"choice","criteria":{"A":null,"B":"b","C":null,"D":null}},"urgent":{"type":"noul"}}"#;
    let body = |model: &str, questions: &str| {
        format!(r#"{{"model":{model},"state":{{"ticket":"t"}},"questions":{questions}}}"#)
            .into_bytes()
    };
    let mut sent = Vec::new();
    for _ in 0..3 {
        let response = app
            .post_raw(body(r#""jev-latest""#, questions), &headers)
            .await;
        assert_eq!(response.status(), 200);
        sent.push(app.upstream.last().body);
    }
    assert!(sent.windows(2).all(|pair| pair[0] == pair[1]));
    let upstream: Value = serde_json::from_slice(&sent[0]).unwrap();
    assert_eq!(upstream["questions"]["cause"]["instructions"], "Why?");

    // The same questions with a model the contract refuses: still refused.
    let response = app.post_raw(body(r#""""#, questions), &headers).await;
    assert_eq!(response.status(), 400);
    // The kept bytes with one more question, another label's text, or a repeated
    // `questions` member: each read and checked whole.
    let longer = format!(
        r#"{},"level":{{"type":"score","criteria":["low","mid","high"]}}}}"#,
        &questions[..questions.len() - 1]
    );
    let response = app
        .post_raw(body(r#""jev-latest""#, &longer), &headers)
        .await;
    assert_eq!(response.status(), 200, "{longer}");
    let upstream: Value = serde_json::from_slice(&app.upstream.last().body).unwrap();
    assert_eq!(
        upstream["questions"].as_object().unwrap().len(),
        3,
        "{longer}"
    );
    let relabelled = questions.replace(r#""B":"b""#, r#""B":"SECRET""#);
    let response = app
        .post_raw(body(r#""jev-latest""#, &relabelled), &headers)
        .await;
    assert_eq!(response.status(), 400);
    let repeated = format!(
        r#"{{"model":"jev-latest","state":{{"ticket":"t"}},"questions":{questions},"questions":{}}}"#,
        relabelled
    );
    let response = app.post_raw(repeated.into_bytes(), &headers).await;
    assert_eq!(response.status(), 400);
}
