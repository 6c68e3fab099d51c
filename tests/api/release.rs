//! Views, coarsening, withholding and deny-by-default through the real proxy.

use std::io::Write;

use serde_json::{Value, json};

use crate::helpers::TestConfig;
use crate::helpers::{self, CLIENT_KEY, native_answer, request, spawn};

/// In the minimal shape each view releases exactly its fields.
#[tokio::test]
async fn every_view_releases_only_its_fields() {
    let legend = json!({"0": "low", "1": "mid", "2": "high"});
    // (`no_output` is not a view a configuration may give an allowed question; its
    // release is checked in the core's tests, as the audit's reference.)
    let cases = [
        (
            "choice",
            json!({"cause": {"type": "choice", "choice": "B"},
            "level": {"type": "score", "score": 1.0, "legend": legend}, "urgent": {"type": "noul", "noul": 1.0}}),
        ),
        (
            "choice_confidence",
            json!({"cause": {"type": "choice", "choice": "B", "confidence": 0.61},
            "level": {"type": "score", "score": 1.0, "legend": legend, "confidence": 0.92},
            "urgent": {"type": "noul", "noul": 1.0}}),
        ),
        (
            "full_probabilities",
            json!({"cause": {"type": "choice", "choice": "B",
                "probabilities": {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}},
            "level": {"type": "score", "score": 1.05, "legend": legend, "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}},
            "urgent": {"type": "noul", "noul": 0.8}}),
        ),
        (
            "full_native",
            json!({"cause": {"type": "choice", "choice": "B",
                "probabilities": {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}, "confidence": 0.61},
            "level": {"type": "score", "score": 1.05, "legend": legend,
                "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}, "confidence": 0.92},
            "urgent": {"type": "noul", "noul": 0.8}}),
        ),
    ];
    for (view, expected) in cases {
        let app = TestConfig {
            view: String::from(view),
            contract: "shape = \"minimal\"".into(),
            ..TestConfig::default()
        }
        .spawn()
        .await;
        let response = app.post(&request()).await;
        assert_eq!(response.status(), 200, "view {view}");
        assert!(response.headers().contains_key("x-request-id"));
        let text = response.text().await.unwrap();
        assert!(
            !text.contains("UPSTREAM-SECRET"),
            "view {view} leaked: {text}"
        );
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["answers"], expected, "view {view}");
        // The contract does not mention `usage`: deny by default drops the token counts.
        assert_eq!(
            body["usage"],
            json!({"input_tokens": 0, "output_tokens": 0})
        );
        let metrics = app.metrics().await;
        assert!(
            metrics.contains(&format!(
                "releasegate_released_answers_total{{contract=\"main\",question=\"cause\",view=\"{view}\"}} 1"
            )),
            "{metrics}"
        );
        app.stop().await;
    }
}

/// In the default complete shape every answer carries every field its type
/// requires; the fields the view does not release are fills computed from the
/// ones it does, and answers without a prediction are left out.
#[tokio::test]
async fn the_complete_shape_fills_every_required_field_from_the_released_ones() {
    let legend = json!({"0": "low", "1": "mid", "2": "high"});
    let cases = [
        (
            "choice",
            json!({"cause": {"type": "choice", "choice": "B",
                "probabilities": {"A": 0.0, "B": 1.0, "C": 0.0, "D": 0.0}, "confidence": 1.0},
            "level": {"type": "score", "score": 1.0, "legend": legend,
                "probabilities": {"0": 0.0, "1": 1.0, "2": 0.0}, "confidence": 1.0},
            "urgent": {"type": "noul", "noul": 1.0}}),
        ),
        (
            "full_native",
            json!({"cause": {"type": "choice", "choice": "B",
                "probabilities": {"A": 0.15, "B": 0.7, "C": 0.05, "D": 0.1}, "confidence": 0.61},
            "level": {"type": "score", "score": 1.05, "legend": legend,
                "probabilities": {"0": 0.0, "1": 0.95, "2": 0.05}, "confidence": 0.92},
            "urgent": {"type": "noul", "noul": 0.8}}),
        ),
    ];
    for (view, expected) in cases {
        let app = spawn(view, "").await;
        let body: Value = app.post(&request()).await.json().await.unwrap();
        assert_eq!(body["answers"], expected, "view {view}");
        app.stop().await;
    }
    // choice_confidence: p(choice) = c·(1 − 1/k) + 1/k, the rest shared evenly.
    let app = spawn("choice_confidence", "").await;
    let body: Value = app.post(&request()).await.json().await.unwrap();
    let cause = &body["answers"]["cause"];
    assert_eq!(cause["confidence"], json!(0.61));
    let selected = 0.61 * 0.75 + 0.25;
    for (label, p) in [
        ("A", (1.0 - selected) / 3.0),
        ("B", selected),
        ("D", (1.0 - selected) / 3.0),
    ] {
        assert!((cause["probabilities"][label].as_f64().unwrap() - p).abs() < 1e-12);
    }
    app.stop().await;
    // full_probabilities: the confidence computed from the released probabilities.
    let app = spawn("full_probabilities", "").await;
    let body: Value = app.post(&request()).await.json().await.unwrap();
    let confidence = body["answers"]["cause"]["confidence"].as_f64().unwrap();
    assert!((confidence - (0.7 - 0.25) / 0.75).abs() < 1e-12);
    let confidence = body["answers"]["level"]["confidence"].as_f64().unwrap();
    assert!((confidence - (1.0 - 0.05 / (2.0 / 3.0))).abs() < 1e-12);
    app.stop().await;
}

#[tokio::test]
async fn coarsening_and_withholding_apply_in_the_proxy() {
    let app = spawn("full_native", "coarsen = { A = \"AB\", B = \"AB\" }").await;
    let body: Value = app.post(&request()).await.json().await.unwrap();
    assert_eq!(body["answers"]["cause"]["choice"], json!("AB"));
    let p = body["answers"]["cause"]["probabilities"]
        .as_object()
        .unwrap();
    assert_eq!(p.keys().collect::<Vec<_>>(), ["AB", "C", "D"]);
    assert!((p["AB"].as_f64().unwrap() - 0.85).abs() < 1e-12);
    app.stop().await;

    // A withheld selection keeps only its own probability; in the complete
    // shape its confidence is computed from that probability, not the native one.
    let app = spawn("full_native", "withhold_labels = [\"B\"]").await;
    let body: Value = app.post(&request()).await.json().await.unwrap();
    let cause = &body["answers"]["cause"];
    assert_eq!(cause["probabilities"], json!({"B": 0.7}));
    assert!((cause["confidence"].as_f64().unwrap() - (0.7 - 0.25) / 0.75).abs() < 1e-12);
    app.stop().await;
    let app = TestConfig {
        cause: "withhold_labels = [\"B\"]".into(),
        contract: "shape = \"minimal\"".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let body: Value = app.post(&request()).await.json().await.unwrap();
    assert_eq!(
        body["answers"]["cause"],
        json!({"type": "choice", "choice": "B", "probabilities": {"B": 0.7}})
    );
    app.stop().await;
}

#[tokio::test]
async fn usage_drop_and_model_override_and_forwarded_request() {
    let app = TestConfig {
        view: "choice".into(),
        contract: "model = \"jev-1.13.0\"\nusage = \"drop\"".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let response = app
        .post_raw(
            serde_json::to_vec(&request()).unwrap(),
            &[
                ("authorization", &format!("Bearer {CLIENT_KEY}")),
                ("x-typesafe-sdk", "typesafe-sdk/0.7.5"),
                ("cookie", "session=CLIENT-COOKIE"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 0, "output_tokens": 0})
    );
    let seen = app.upstream.last();
    let forwarded: Value = serde_json::from_slice(&seen.body).unwrap();
    let mut expected = request();
    expected["model"] = json!("jev-1.13.0");
    assert_eq!(forwarded, expected);
    // The provider key goes upstream; the client's credentials and cookies never do.
    assert_eq!(
        seen.headers["authorization"],
        format!("Bearer {}", helpers::PROVIDER_KEY)
    );
    assert_eq!(seen.headers["x-typesafe-sdk"], "typesafe-sdk/0.7.5");
    let all_headers = format!("{:?}", seen.headers);
    assert!(!all_headers.contains(CLIENT_KEY) && !all_headers.contains("CLIENT-COOKIE"));
    app.stop().await;
}

/// The allowlisted client headers go upstream in the allowlist's order, each with its first
/// value only, whatever order and repetitions the client sent.
#[tokio::test]
async fn forwarded_headers_keep_the_allowlists_order_and_first_values() {
    let app = spawn("choice", "").await;
    let response = app
        .post_raw(
            serde_json::to_vec(&request()).unwrap(),
            &[
                ("x-typesafe-retry-count", "2"),
                ("x-api-key", CLIENT_KEY),
                ("user-agent", "first-agent/1"),
                ("x-typesafe-runtime", "python/3.11"),
                ("user-agent", "second-agent/2"),
                ("x-typesafe-sdk", "typesafe-sdk/0.7.5"),
                ("x-typesafe-retry-count", "3"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let seen = app.upstream.last();
    let names: Vec<&str> = seen
        .headers
        .keys()
        .map(|name| name.as_str())
        .filter(|name| *name == "user-agent" || name.starts_with("x-typesafe-"))
        .collect();
    assert_eq!(
        names,
        [
            "user-agent",
            "x-typesafe-sdk",
            "x-typesafe-runtime",
            "x-typesafe-retry-count"
        ]
    );
    let values = |name: &str| -> Vec<&str> {
        seen.headers
            .get_all(name)
            .iter()
            .map(|value| value.to_str().unwrap())
            .collect()
    };
    assert_eq!(values("user-agent"), ["first-agent/1"]);
    assert_eq!(values("x-typesafe-retry-count"), ["2"]);
    assert_eq!(values("x-typesafe-runtime"), ["python/3.11"]);
    app.stop().await;
}

#[tokio::test]
async fn the_upstream_body_is_rebuilt_from_the_contract_and_the_callers_content() {
    let app = spawn("choice", "").await;
    let raw = br#"{"model":"jev-latest","state":"s","questions":{"cause":{"type":"choice","criteria":{"D":null,"C":null,"B":null,"A":null},"note":"x"}},"extra":1.50}"#;
    let response = app
        .post_raw(raw.to_vec(), &[("x-api-key", CLIENT_KEY)])
        .await;
    assert_eq!(response.status(), 200);
    // The contract's text in the contract's order; unknown members of the body and the
    // question never go upstream.
    assert_eq!(
        std::str::from_utf8(&app.upstream.last().body).unwrap(),
        r#"{"model":"jev-latest","state":"s","questions":{"cause":{"type":"choice","instructions":"Why?","criteria":{"A":null,"B":"b","C":null,"D":null}}}}"#
    );
    app.stop().await;
}

#[tokio::test]
async fn compressed_bodies_are_accepted() {
    let app = spawn("choice", "").await;
    let body = serde_json::to_vec(&request()).unwrap();
    let zstd_body = zstd::encode_all(body.as_slice(), 3).unwrap();
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(&body).unwrap();
    let gzip_body = gzip.finish().unwrap();
    let auth = format!("Bearer {CLIENT_KEY}");
    for (encoding, bytes) in [("zstd", zstd_body), ("gzip", gzip_body)] {
        let response = app
            .post_raw(
                bytes,
                &[
                    ("authorization", &auth),
                    ("content-encoding", encoding),
                    ("content-type", "application/json"),
                ],
            )
            .await;
        assert_eq!(response.status(), 200, "{encoding}");
        // The provider receives the decoded JSON.
        let forwarded: Value = serde_json::from_slice(&app.upstream.last().body).unwrap();
        assert_eq!(forwarded, request());
    }
    // A gzip body of two members is both, one after the other (as gzip readers read it);
    // bytes after a member that are not another member are refused.
    let member = |bytes: &[u8]| {
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gzip.write_all(bytes).unwrap();
        gzip.finish().unwrap()
    };
    let (head, tail) = body.split_at(body.len() / 2);
    let two_members = [member(head), member(tail)].concat();
    let junk_after = [member(&body), b"trailing bytes".to_vec()].concat();
    for (bytes, status) in [(two_members, 200), (junk_after, 400)] {
        let response = app
            .post_raw(
                bytes,
                &[
                    ("authorization", &auth),
                    ("content-encoding", "gzip"),
                    ("content-type", "application/json"),
                ],
            )
            .await;
        assert_eq!(response.status(), status);
    }
    let forwarded: Value = serde_json::from_slice(&app.upstream.last().body).unwrap();
    assert_eq!(forwarded, request(), "the two members' body went upstream");
    app.stop().await;
}

#[tokio::test]
async fn unknown_answer_types_and_unasked_answers_never_go_out() {
    let app = spawn("full_native", "").await;
    let mut native = native_answer();
    native["answers"]["unasked"] =
        json!({"type": "choice", "choice": "x", "probabilities": {"x": 1.0}, "confidence": 1.0});
    app.upstream.answer(native);
    let body: Value = app.post(&request()).await.json().await.unwrap();
    let answers = body["answers"].as_object().unwrap();
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        ["cause", "level", "urgent"]
    );
    assert_eq!(
        body.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["model", "answers", "usage"]
    );
    app.stop().await;
}

/// A contract's `forward_headers` go upstream as `true` when the caller switches them on;
/// other contracts' callers, other values and every other header stay out; each
/// forwarded header is counted by name.
#[tokio::test]
async fn contract_allowed_headers_are_forwarded_and_counted() {
    let app = TestConfig {
        contract: "forward_headers = [\"TypeSafe-Danger-Zone-Images\"]".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let body = serde_json::to_vec(&request()).unwrap();
    let bearer = format!("Bearer {CLIENT_KEY}");
    let sent = |app: &crate::helpers::TestApp| app.upstream.last().headers;
    let response = app
        .post_raw(
            body.clone(),
            &[
                ("authorization", &bearer),
                ("typesafe-danger-zone-images", "TRUE"),
                ("typesafe-danger-zone-long-context", "true"),
                ("x-secret-header", "CALLER-SECRET"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let headers = sent(&app);
    assert_eq!(headers["typesafe-danger-zone-images"], "true");
    assert!(headers.get("typesafe-danger-zone-long-context").is_none());
    assert!(headers.get("x-secret-header").is_none());
    // A value other than `true` is not forwarded.
    app.post_raw(
        body.clone(),
        &[
            ("authorization", &bearer),
            ("typesafe-danger-zone-images", "CALLER-SECRET"),
        ],
    )
    .await;
    assert!(sent(&app).get("typesafe-danger-zone-images").is_none());
    // Another contract (`other`, chosen by path) does not allow it.
    let seen_before = app.upstream.seen.lock().unwrap().len();
    let response = app
        .client
        .post(format!("{}/contracts/other/v1/systemone", app.address))
        .header(
            "authorization",
            format!("Bearer {}", crate::helpers::MULTI_KEY),
        )
        .header("typesafe-danger-zone-images", "true")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(app.upstream.seen.lock().unwrap().len(), seen_before + 1);
    assert!(sent(&app).get("typesafe-danger-zone-images").is_none());
    let metrics = app.metrics().await;
    assert!(
        metrics.contains(
            "releasegate_forwarded_headers_total{contract=\"main\",header=\"typesafe-danger-zone-images\"} 1"
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("contract=\"other\",header="));
    app.stop().await;
}

/// A provider's answer is read into an arena where it can be, and as a `Json` where an
/// object repeats a key or is large: both readings release what serde_json's reading of
/// the same bytes releases (a repeated key's last value, any number of unknown fields).
#[tokio::test]
async fn answers_with_repeated_keys_or_large_objects_release_as_their_values_do() {
    let app = spawn("full_native", "").await;
    app.upstream.answer(native_answer());
    let plain: Value = app.post(&request()).await.json().await.unwrap();

    // `confidence` first sent as another value, then as the native one: the last counts.
    let text = serde_json::to_string(&native_answer()).unwrap();
    let repeated = text.replacen(
        "\"confidence\":0.61",
        "\"confidence\":0.99,\"confidence\":0.61",
        1,
    );
    assert_ne!(repeated, text);
    // Forty unknown fields in one answer: more members than the arena reader holds.
    let mut large = native_answer();
    for i in 0..40 {
        large["answers"]["cause"][format!("extra{i}")] = json!(i);
    }
    let large = serde_json::to_string(&large).unwrap();
    for body in [repeated, large] {
        app.upstream.script(
            200,
            body.clone().into_bytes(),
            &[],
            std::time::Duration::ZERO,
        );
        let response = app.post(&request()).await;
        assert_eq!(response.status(), 200, "{body}");
        let released: Value = response.json().await.unwrap();
        assert_eq!(released, plain, "{body}");
    }
    app.stop().await;
}
