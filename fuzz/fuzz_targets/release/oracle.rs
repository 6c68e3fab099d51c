//! What the oracle checks of one released answer, from the fuzzed parameters alone (never
//! the release code), and the strings a release may hold.

use super::*;

pub(super) const FIELDS: [&str; 17] = [
    "model",
    "answers",
    "usage",
    "type",
    "choice",
    "probabilities",
    "confidence",
    "score",
    "legend",
    "noul",
    "box",
    "top",
    "bottom",
    "left",
    "right",
    "input_tokens",
    "output_tokens",
];

/// Every string of `value` (keys and string values).
pub(super) fn strings<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k);
                strings(v, out);
            }
        }
        _ => {}
    }
}

fn unit(value: Option<&Value>, what: &str) -> f64 {
    let x = value
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{what} is not a number: {value:?}"));
    assert!(x.is_finite() && (0.0..=1.0).contains(&x), "{what} = {x}");
    // Zero has one spelling: a `-0.0` would tell a provider's number from a computed one.
    assert!(!x.is_sign_negative(), "{what} is -0.0");
    x
}

/// Holds one released answer to what the contract releases of its question.
pub(super) fn check_answer(rule: &Rule, answer: &Value, complete: bool) {
    let answer = answer.as_object().expect("an answer is an object");
    assert_eq!(answer.get("type"), Some(&Value::from(rule.kind)), "type");
    let probabilities_view = matches!(rule.view, "full_probabilities" | "full_native");
    let confidence_view = matches!(rule.view, "choice_confidence" | "full_native");
    let mut allowed: Vec<&str> = vec!["type"];
    match rule.kind {
        "choice" | "score" => {
            allowed.push(if rule.kind == "choice" {
                "choice"
            } else {
                "score"
            });
            if rule.kind == "score" {
                allowed.push("legend");
            }
            if probabilities_view || complete {
                allowed.push("probabilities");
            }
            if confidence_view || complete {
                allowed.push("confidence");
            }
        }
        "noul" => allowed.push("noul"),
        _ => {
            allowed.push("box");
            if rule.view == "full_native" || complete {
                allowed.push("confidence");
            }
        }
    }
    for key in answer.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "{}: `{key}` is not released under {} ({})",
            rule.id,
            rule.view,
            if complete { "complete" } else { "minimal" }
        );
    }
    if let Some(probabilities) = answer.get("probabilities") {
        let map = probabilities.as_object().expect("probabilities are a map");
        for (label, p) in map {
            assert!(rule.labels.contains(label), "{}: label {label}", rule.id);
            unit(Some(p), "a probability");
        }
    }
    if let Some(confidence) = answer.get("confidence") {
        if rule.kind != "box" || !confidence.is_null() {
            unit(Some(confidence), "the confidence");
        }
    }
    // The complete shape: every field the type requires (the official clients' schema).
    if complete {
        let required: &[&str] = match rule.kind {
            "choice" => &["choice", "probabilities", "confidence"],
            "score" => &["score", "legend", "probabilities", "confidence"],
            "noul" => &["noul"],
            _ => &["box", "confidence"],
        };
        for key in required {
            assert!(
                answer.contains_key(*key),
                "{}: no `{key}` in {answer:?}",
                rule.id
            );
        }
    }
    // Minimal answers may hold `type` alone (a WCPQ `deny` fallback).
    if let Some(choice) = answer.get("choice") {
        let choice = choice.as_str().expect("a choice is a label");
        assert!(rule.labels.iter().any(|l| l == choice), "choice {choice}");
        if rule.withheld.contains(choice) {
            if !complete {
                assert!(answer.get("confidence").is_none(), "a withheld confidence");
            }
            // Nothing of the other classes: they are absent or all alike.
            if let Some(Value::Object(map)) = answer.get("probabilities") {
                let others: Vec<&Value> = map
                    .iter()
                    .filter(|(label, _)| label.as_str() != choice)
                    .map(|(_, p)| p)
                    .collect();
                assert!(
                    others.windows(2).all(|w| w[0] == w[1]),
                    "withheld {choice}, yet {map:?}"
                );
            }
        }
    }
    if let Some(score) = answer.get("score") {
        let score = score.as_f64().expect("a score is a number");
        let top = (rule.labels.len() - 1) as f64;
        assert!((0.0..=top).contains(&score), "score {score}");
    }
    if let Some(legend) = answer.get("legend") {
        for (level, text) in legend.as_object().expect("a legend") {
            assert!(rule.labels.contains(level), "legend level {level}");
            assert!(
                rule.criteria
                    .iter()
                    .any(|c| Some(c.as_str()) == text.as_str())
            );
        }
    }
    if answer.contains_key("noul") {
        unit(answer.get("noul"), "noul");
    }
    if let Some(edges) = answer.get("box") {
        let edges = edges.as_object().expect("a box");
        let keys: Vec<&str> = edges.keys().map(String::as_str).collect();
        assert_eq!(keys, ["top", "bottom", "left", "right"]);
        let [top, bottom, left, right] =
            ["top", "bottom", "left", "right"].map(|k| unit(edges.get(k), k));
        assert!(top <= bottom && left <= right, "an inverted box {edges:?}");
    }
}
