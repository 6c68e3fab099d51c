//! Box questions under a contract: the box goes out (rounded by `quantize`), the view
//! decides the confidence, and a box the provider gets wrong never goes out.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::TestConfig;
use crate::helpers::{error_of, native_answer, request};

/// The contract's box question `where`, with `view` and `mechanism`.
fn box_question(view: &str, mechanism: &str) -> String {
    format!(
        "forward_headers = [\"TypeSafe-Danger-Zone-Images\"]\n\
         [contracts.main.questions.where]\ntype = \"box\"\ninstructions = \"Where is the dent?\"\n\
         view = \"{view}\"\n{mechanism}\n"
    )
}

/// `request()` with the box question too.
fn with_box() -> Value {
    let mut body = request();
    body["questions"]["where"] = json!({"type": "box", "instructions": "Where is the dent?"});
    body
}

fn answer_with(boxed: Value) -> Value {
    let mut native = native_answer();
    native["answers"]["where"] = boxed;
    native
}

#[tokio::test]
async fn a_box_goes_out_quantized_with_the_confidence_its_view_allows() {
    let app = TestConfig {
        contract: String::from(&box_question(
            "full_native",
            "mechanism = { kind = \"quantize\", step = 0.05 }",
        )),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    app.upstream.answer(answer_with(json!({
        "type": "box",
        "box": {"top": 0.123, "bottom": 0.456, "left": 0.2, "right": 0.97, "depth": "UPSTREAM-SECRET"},
        "confidence": 0.734,
        "rationale": "UPSTREAM-SECRET"
    })));
    let response = app
        .client
        .post(format!("{}/v1/systemone", app.address))
        .bearer_auth(crate::helpers::CLIENT_KEY)
        .header("TypeSafe-Danger-Zone-Images", "true")
        .json(&with_box())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(!text.contains("UPSTREAM-SECRET"), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        body["answers"]["where"],
        json!({"type": "box", "box": {"top": 0.1, "bottom": 0.45, "left": 0.2, "right": 0.95}, "confidence": 0.75})
    );
    // Upstream: the contract's question, the header the contract allows.
    let seen = app.upstream.last();
    let sent: Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(
        sent["questions"]["where"],
        json!({"type": "box", "instructions": "Where is the dent?"})
    );
    assert_eq!(
        seen.headers.get("typesafe-danger-zone-images").unwrap(),
        "true"
    );
    // A criteria on a box question, or a box asked where the contract has a choice: refused.
    let mut criteria = with_box();
    criteria["questions"]["where"]["criteria"] = json!({"A": null});
    let mut wrong = request();
    wrong["questions"]["cause"] = json!({"type": "box"});
    for body in [criteria, wrong] {
        let (status, _, message) = error_of(app.post(&body).await).await;
        assert!((400..500).contains(&status), "{status} {message}");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_choice_view_releases_the_box_alone() {
    let app = TestConfig {
        view: "choice".into(),
        contract: String::from(&box_question("choice", "")),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    app.upstream.answer(answer_with(json!({
        "type": "box",
        "box": {"top": 0.123, "bottom": 0.456, "left": 0.2, "right": 0.97},
        "confidence": 0.734
    })));
    let response = app.post(&with_box()).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["answers"]["where"],
        json!({"type": "box", "box": {"top": 0.123, "bottom": 0.456, "left": 0.2, "right": 0.97}, "confidence": null})
    );
    app.stop().await;
}

#[tokio::test]
async fn an_invalid_box_from_the_provider_fails_closed() {
    let app = TestConfig {
        contract: String::from(&box_question(
            "full_native",
            "mechanism = { kind = \"quantize\", step = 0.1 }",
        )),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let edges = |top: Value, bottom: Value| json!({"type": "box", "box": {"top": top, "bottom": bottom, "left": 0.1, "right": 0.2}, "confidence": 0.5});
    let cases = [
        (edges(json!(0.6), json!(0.5)), "bad_box"),
        (edges(json!(-0.1), json!(0.5)), "bad_probability"),
        (edges(json!(0.1), json!(1.01)), "bad_probability"),
        (edges(json!("0.1"), json!(0.5)), "bad_probability"),
        (json!({"type": "box", "box": {"top": 0.1}}), "missing_field"),
        (
            json!({"type": "box", "box": {"top": 0.1, "bottom": 0.2, "left": 0.1, "right": 0.2}, "confidence": 7}),
            "bad_probability",
        ),
        (json!({"type": "choice", "choice": "A"}), "type_mismatch"),
    ];
    for (boxed, reason) in cases {
        app.upstream.script(
            200,
            serde_json::to_vec(&answer_with(boxed.clone())).unwrap(),
            &[],
            Duration::ZERO,
        );
        let (status, error_type, _) = error_of(app.post(&with_box()).await).await;
        assert_eq!(
            (status, error_type.as_str()),
            (502, "invalid_upstream_answer"),
            "{boxed}"
        );
        let metrics = app.metrics().await;
        assert!(
            metrics.contains(&format!(
                "releasegate_rejected_upstream_answers_total{{contract=\"main\",reason=\"{reason}\"}}"
            )),
            "{boxed}: {reason}"
        );
    }
    app.stop().await;
}
