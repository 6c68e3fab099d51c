//! WCPQ and the baseline mechanisms through the real proxy.

use std::path::PathBuf;

use releasegate_core::workflow::Spec;
use releasegate_core::{codebook, wcpq};
use serde_json::{Value, json};

use crate::helpers::{TestConfig, contract, native_answer, question, request};

fn classes() -> Vec<String> {
    ["A", "B", "C", "D"].iter().map(|s| s.to_string()).collect()
}

/// Writes a grid-only codebook for the standard workflows over A..D.
fn codebook_file(name: &str, denominator: u32) -> PathBuf {
    let spec = Spec::standard(classes()).unwrap();
    let built = codebook::build(&classes(), denominator, &spec, &[], "test".into()).unwrap();
    let path = std::env::temp_dir().join(format!("releasegate-{}-{name}.json", std::process::id()));
    std::fs::write(&path, built.codebook.to_json_bytes()).unwrap();
    path
}

/// A configuration of one contract `c` whose one question `q` (A..D, `full_native`) has
/// `lines`: what the loader is asked to accept or refuse.
fn one_question(lines: &str) -> String {
    TestConfig {
        contracts: vec![contract(
            "c",
            "",
            vec![question("q", &["A", "B", "C", "D"], "full_native", lines)],
        )],
        ..TestConfig::bare()
    }
    .toml("")
}

fn wcpq(path: &std::path::Path, fallback: &str) -> String {
    format!(
        "mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"{fallback}\" }}\nworkflows = {{ preset = \"tuple-bench\" }}",
        path.display()
    )
}

async fn cause_of(view: &str, extra: &str, native: Value) -> (Value, Vec<String>, String) {
    cause_in("complete", view, extra, native).await
}

/// The released `cause` answer (`null` when left out), the response's header
/// names and the metrics, for contract `main` in `shape`.
async fn cause_in(
    shape: &str,
    view: &str,
    extra: &str,
    native: Value,
) -> (Value, Vec<String>, String) {
    let app = TestConfig {
        view: String::from(view),
        cause: String::from(extra),
        contract: format!("shape = \"{shape}\""),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    app.upstream.answer(native);
    let response = app.post(&request()).await;
    assert_eq!(response.status(), 200);
    let mut headers: Vec<String> = response.headers().keys().map(|k| k.to_string()).collect();
    headers.sort();
    let body: Value = response.json().await.unwrap();
    let metrics = app.metrics().await;
    app.stop().await;
    (body["answers"]["cause"].clone(), headers, metrics)
}

#[tokio::test]
async fn a_covered_answer_keeps_every_frozen_plan_and_hides_the_native_vector() {
    let path = codebook_file("covered", 20);
    let (cause, _, metrics) =
        cause_of("full_native", &wcpq(&path, "native"), native_answer()).await;
    let native = &native_answer()["answers"]["cause"];
    assert_eq!(cause["choice"], "B");
    assert_ne!(
        cause["probabilities"], native["probabilities"],
        "a codeword replaces the vector"
    );
    let keys: Vec<&String> = cause.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["type", "choice", "probabilities", "confidence"]);
    // Plans of every frozen policy are the native ones.
    let spec = Spec::standard(classes()).unwrap();
    let read = |answer: &Value| {
        let p: Vec<f64> = classes()
            .iter()
            .map(|c| answer["probabilities"][c].as_f64().unwrap())
            .collect();
        releasegate_core::workflow::Release {
            choice: 1,
            probabilities: Some(p),
            confidence: answer["confidence"].as_f64(),
        }
    };
    assert_eq!(
        spec.plans(&read(&cause), &Value::Null),
        spec.plans(&read(native), &Value::Null)
    );
    assert!(metrics.contains(
        "releasegate_wcpq_answers_total{contract=\"main\",outcome=\"covered\",question=\"cause\"} 1"
    ), "{metrics}");
    assert!(metrics.contains("releasegate_codebook_info{contract=\"main\",question=\"cause\""));
    assert!(metrics.contains("releasegate_wcpq_mapping_seconds_bucket"));
}

/// A provider's `-0` goes out of a `native` fallback as `0.0`, the one spelling of zero
/// every computed number has: its sign would mark the answer as a fallback.
#[tokio::test]
async fn a_native_fallback_spells_zero_as_a_covered_answer_does() {
    let coarse = codebook_file("signed-zero", 1);
    let mut native = native_answer();
    native["answers"]["cause"]["probabilities"] =
        json!({"D": -0.0, "C": 0.15, "B": 0.7, "A": 0.15});
    native["answers"]["cause"]["confidence"] = json!(-0.0);
    let (fallback, _, metrics) = cause_of("full_native", &wcpq(&coarse, "native"), native).await;
    assert!(metrics.contains(
        "releasegate_wcpq_fallbacks_total{contract=\"main\",question=\"cause\",reason=\"no_admissible_codeword\"} 1"
    ), "{metrics}");
    let zero = |v: &Value| v.as_f64().map(|x| (x, x.is_sign_negative()));
    assert_eq!(zero(&fallback["probabilities"]["D"]), Some((0.0, false)));
    assert_eq!(zero(&fallback["confidence"]), Some((0.0, false)));
    assert_eq!(fallback["probabilities"]["B"], json!(0.7));
}

/// What a recipient can tell of a fallback: the `native` fallback has the
/// covered answers' headers, fields and field order in both shapes (only the
/// values differ); `choice_only` has them too in the complete shape (its values
/// are the one-hot fill) but drops fields in the minimal shape; `deny` is
/// visible in both (the answer is left out, or only `type` remains).
#[tokio::test]
async fn fallbacks_differ_from_covered_answers_only_as_documented() {
    // A denominator-1 grid holds only the vertices: the native answer is not covered.
    let coarse = codebook_file("coarse", 1);
    let fine = codebook_file("fine", 20);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    for shape in ["complete", "minimal"] {
        let (fallback, fallback_headers, metrics) = cause_in(
            shape,
            "full_native",
            &wcpq(&coarse, "native"),
            native_answer(),
        )
        .await;
        assert!(metrics.contains(
            "releasegate_wcpq_fallbacks_total{contract=\"main\",question=\"cause\",reason=\"no_admissible_codeword\"} 1"
        ), "{metrics}");
        let (covered, covered_headers, _) = cause_in(
            shape,
            "full_native",
            &wcpq(&fine, "native"),
            native_answer(),
        )
        .await;
        // Same header names, same fields in the same order: only the values differ.
        assert_eq!(fallback_headers, covered_headers, "{shape}");
        assert_eq!(keys(&fallback), keys(&covered), "{shape}");
        assert_eq!(
            keys(&fallback["probabilities"]),
            keys(&covered["probabilities"]),
            "{shape}"
        );
        // The native fallback releases the native answer.
        assert_eq!(
            fallback["probabilities"],
            native_answer()["answers"]["cause"]["probabilities"]
        );
        assert_ne!(fallback["probabilities"], covered["probabilities"]);

        let (choice_only, choice_only_headers, _) = cause_in(
            shape,
            "full_native",
            &wcpq(&coarse, "choice_only"),
            native_answer(),
        )
        .await;
        assert_eq!(choice_only_headers, covered_headers, "{shape}");
        let (deny, deny_headers, _) = cause_in(
            shape,
            "full_native",
            &wcpq(&coarse, "deny"),
            native_answer(),
        )
        .await;
        assert_eq!(deny_headers, covered_headers, "{shape}");
        if shape == "complete" {
            // Same fields and order as a covered answer; the values are the `choice` fill.
            assert_eq!(keys(&choice_only), keys(&covered));
            assert_eq!(
                choice_only,
                json!({"type": "choice", "choice": "B",
                       "probabilities": {"A": 0.0, "B": 1.0, "C": 0.0, "D": 0.0}, "confidence": 1.0})
            );
            assert_eq!(deny, Value::Null, "a denied answer is left out");
        } else {
            assert_eq!(choice_only, json!({"type": "choice", "choice": "B"}));
            assert_eq!(deny, json!({"type": "choice"}));
        }
    }
}

#[test]
fn the_proxy_refuses_a_codebook_built_for_other_workflows() {
    let path = codebook_file("mismatch", 20);
    // The paper's model with one profile only: other workflows than the codebook's.
    let workflows = format!(
        "workflows = {{ families = [\"selective\", \"clarification\", \"asymmetric\"], \
         profiles = [\"authored\"], costs = {{ c_wrong = 10, c_review = 2, c_check = 0.4, matrix = {} }} }}\n",
        serde_json::to_string(&releasegate_core::workflow::CostBase::authored_4().matrix).unwrap()
    );
    let text = one_question(&format!(
        "mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"native\" }}\n{workflows}",
        path.display()
    ));
    let error = releasegate_proxy::load::from_toml(&text)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("contracts.c.questions.q.mechanism") && error.contains("does not match"),
        "{error}"
    );
    let other_classes = text.replace(
        "[\"A\", \"B\", \"C\", \"D\"]",
        "[\"B\", \"A\", \"C\", \"D\"]",
    );
    assert!(releasegate_proxy::load::from_toml(&other_classes).is_err());
    // A WCPQ mechanism states its fallback: no default, and the error lists what each reveals.
    let without_fallback = text.replace(", fallback = \"native\"", "");
    let error = releasegate_proxy::load::from_toml(&without_fallback)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("contracts.c.questions.q.mechanism")
            && error.contains("must state its `fallback`")
            && error.contains("\"native\"")
            && error.contains("\"choice_only\"")
            && error.contains("\"deny\""),
        "{error}"
    );
    let without_workflows = text.replace(&workflows, "");
    assert!(
        releasegate_proxy::load::from_toml(&without_workflows)
            .unwrap_err()
            .to_string()
            .contains("workflows")
    );
}

#[tokio::test]
async fn baseline_mechanisms_rewrite_the_probabilities() {
    let (quantized, _, _) = cause_of(
        "full_native",
        "mechanism = { kind = \"quantize\", step = 0.25 }",
        native_answer(),
    )
    .await;
    assert_eq!(
        quantized["probabilities"],
        json!({"A": 0.25, "B": 0.75, "C": 0.0, "D": 0.0})
    );
    let (top, _, _) = cause_of(
        "full_native",
        "mechanism = { kind = \"top_k\", k = 2 }",
        native_answer(),
    )
    .await;
    assert_eq!(top["probabilities"], json!({"A": 0.15, "B": 0.7}));
    let (warm, _, _) = cause_of(
        "full_probabilities",
        "mechanism = { kind = \"temperature\", tau = 2 }",
        native_answer(),
    )
    .await;
    let p = warm["probabilities"].as_object().unwrap();
    assert!(p["B"].as_f64().unwrap() < 0.7 && p["C"].as_f64().unwrap() > 0.05);
    let seeded = "mechanism = { kind = \"gaussian\", sigma = 0.05, seed = 9 }";
    let (first, _, _) = cause_of("full_native", seeded, native_answer()).await;
    let (second, _, _) = cause_of("full_native", seeded, native_answer()).await;
    assert_eq!(first, second, "a seeded noise mechanism is reproducible");
    let sum: f64 = first["probabilities"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_f64().unwrap())
        .sum();
    assert!((sum - 1.0).abs() < 1e-9);
    assert_ne!(
        first["probabilities"],
        native_answer()["answers"]["cause"]["probabilities"]
    );
}

/// Writes a codebook learned for budget `alpha` from the grid-only codebook.
fn learned_codebook_file(name: &str, alpha: f64) -> PathBuf {
    let spec = Spec::standard(classes()).unwrap();
    let strict = codebook::build(&classes(), 10, &spec, &[], "test".into())
        .unwrap()
        .codebook;
    let responses: Vec<codebook::Response> = [[0.7, 0.1, 0.1, 0.1], [0.1, 0.6, 0.2, 0.1]]
        .iter()
        .enumerate()
        .map(|(i, p)| codebook::Response {
            pair_id: format!("p{i}"),
            native: releasegate_core::workflow::Release {
                choice: i,
                probabilities: Some(p.to_vec()),
                confidence: Some(0.9),
            },
            public: Vec::new(),
        })
        .collect();
    let (learned, _) = codebook::learn(
        &strict,
        &spec,
        &responses,
        &[],
        &codebook::Settings::new(alpha, 8),
    )
    .unwrap();
    let path = std::env::temp_dir().join(format!("releasegate-{}-{name}.json", std::process::id()));
    std::fs::write(&path, learned.to_json_bytes()).unwrap();
    path
}

#[test]
fn a_contract_chooses_strict_or_a_budget_matching_its_codebook() {
    let strict = codebook_file("admissibility", 4);
    let learned = learned_codebook_file("admissibility-learned", 0.04);
    let text = |path: &std::path::Path, admissibility: &str| {
        one_question(&format!(
            "mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"native\"{admissibility} }}\nworkflows = {{ preset = \"tuple-bench\" }}",
            path.display()
        ))
    };
    let admissibility = |path: &std::path::Path, admissibility: &str| {
        let config = releasegate_proxy::load::from_toml(&text(path, admissibility)).unwrap();
        match &config.contract("c").unwrap().questions()["q"].mechanism() {
            releasegate_core::mechanism::Mechanism::Wcpq(w) => w.mapper.admissibility(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(admissibility(&strict, ""), wcpq::Admissibility::Strict);
    assert_eq!(
        admissibility(&strict, ", admissibility = \"strict\""),
        wcpq::Admissibility::Strict
    );
    assert_eq!(
        admissibility(&learned, ", admissibility = { budget = 0.04 }"),
        wcpq::Admissibility::Budget(0.04)
    );
    for (path, bad, expected) in [
        (&strict, ", admissibility = { budget = -0.1 }", "budget"),
        (&strict, ", admissibility = \"loose\"", "mechanism"),
        (&strict, ", admissibility = { budget = \"x\" }", "mechanism"),
        (
            &strict,
            ", admissibility = { budget = 0.04 }",
            "needs a codebook learned",
        ),
        (&learned, "", "a strict contract needs a strict codebook"),
        (
            &learned,
            ", admissibility = { budget = 0.2 }",
            "learned for budget 0.04",
        ),
    ] {
        let error = releasegate_proxy::load::from_toml(&text(path, bad))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("contracts.c.questions.q.mechanism") && error.contains(expected),
            "{bad}: {error}"
        );
    }
}

/// A bounded contract's codebook carries its strict stage: an answer no compact codeword
/// covers goes out as a strict codeword (every plan kept), never native first, and the
/// metrics count it by stage.
#[tokio::test]
async fn a_bounded_codebook_covers_through_its_strict_stage_before_falling_back() {
    let spec = Spec::standard(classes()).unwrap();
    let strict = codebook::build(&classes(), 20, &spec, &[], "test".into())
        .unwrap()
        .codebook;
    // One compact codeword, learned from an answer selecting A: nothing for a B answer.
    let responses = vec![codebook::Response {
        pair_id: "p0".into(),
        native: releasegate_core::workflow::Release {
            choice: 0,
            probabilities: Some(vec![0.7, 0.1, 0.1, 0.1]),
            confidence: Some(0.9),
        },
        public: Vec::new(),
    }];
    let (learned, _) = codebook::learn(
        &strict,
        &spec,
        &responses,
        &[],
        &codebook::Settings::new(0.04, 1),
    )
    .unwrap();
    assert!(learned.strict_stage().is_some());
    let path = std::env::temp_dir().join(format!(
        "releasegate-{}-strict-stage.json",
        std::process::id()
    ));
    std::fs::write(&path, learned.to_json_bytes()).unwrap();
    let extra = format!(
        "mechanism = {{ kind = \"wcpq\", codebook = \"{}\", fallback = \"native\", admissibility = {{ budget = 0.04 }} }}\nworkflows = {{ preset = \"tuple-bench\" }}",
        path.display()
    );
    let (cause, _, metrics) = cause_of("full_native", &extra, native_answer()).await;
    // Not the native vector: a strict codeword with the native answer's behaviour signature.
    assert_ne!(cause["probabilities"]["B"], json!(0.7), "{cause}");
    assert_eq!(cause["choice"], "B");
    for (line, value) in [
        (
            "releasegate_wcpq_covered_total{contract=\"main\",question=\"cause\",stage=\"strict\"}",
            1,
        ),
        (
            "releasegate_wcpq_covered_total{contract=\"main\",question=\"cause\",stage=\"compact\"}",
            0,
        ),
        (
            "releasegate_wcpq_answers_total{contract=\"main\",outcome=\"fallback\",question=\"cause\"}",
            0,
        ),
    ] {
        assert!(
            metrics.contains(&format!("{line} {value}\n")),
            "{line}:\n{metrics}"
        );
    }
}
