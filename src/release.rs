//! Applies a release contract to a whole System One response.
//!
//! This is the one code path the proxy and the offline replay share. It is
//! pure: given the contract, the checked request and the native response, it
//! returns the response the recipient may see, or the reason the native
//! response is rejected. Nothing the contract does not name goes out: unknown
//! top-level fields, unknown answer types, unasked answers and unknown answer
//! fields are dropped, and probabilities are re-emitted in canonical order.

use serde_json::{Map, Value};

use crate::contract::{Coarsening, Contract, QuestionRule, View};
use crate::mechanism::{self, ClassVector, Context, Released};
use crate::rng::Rng;
use crate::wire::{self, Asked, AskedQuestion, Invalid, Kind};
use crate::workflow;

/// A released response and what happened to each answer.
#[derive(Debug, Clone)]
pub struct Release {
    /// The body the recipient receives.
    pub body: Value,
    /// One record per released answer, in request order.
    pub answers: Vec<AnswerRecord>,
}

/// What happened to one answer (for metrics and replay summaries).
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerRecord {
    /// The question id (a contract key, so a bounded label).
    pub question: String,
    /// The view it was released under.
    pub view: View,
    /// Whether a withheld label was selected.
    pub withheld: bool,
    /// What the mechanism did.
    pub mechanism: mechanism::Outcome,
    /// Time spent in the WCPQ mapper, if any.
    pub mapping_seconds: Option<f64>,
    /// Native and released forms as the frozen workflows read them (only when
    /// `Options::evaluate` is set and the question declares workflows).
    pub evaluation: Option<Box<Evaluation>>,
}

/// The two answers a frozen workflow would have acted on.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The native answer restricted to the view's fields (before any mechanism).
    pub native: workflow::Release,
    /// The released answer, read back from its serialized form.
    pub released: workflow::Release,
}

/// Per-call options of the release path.
pub struct Options<'a> {
    /// Fresh randomness for unseeded noise mechanisms.
    pub rng: &'a mut Rng,
    /// Record native and released forms for workflow evaluation (offline tools).
    pub evaluate: bool,
}

/// The body of an error the recipient receives: `{"detail": {"error_type", "message"}}`.
pub fn error_body(error_type: &str, message: &str) -> Value {
    serde_json::json!({"detail": {"error_type": error_type, "message": message}})
}

/// The message a recipient gets when a native answer fails validation.
pub fn invalid_answer_message(reason: Invalid) -> String {
    format!("the provider's answer failed validation ({reason})")
}

/// The error body a recipient gets when a native answer fails validation.
pub fn invalid_answer_body(reason: Invalid) -> Value {
    error_body("invalid_upstream_answer", &invalid_answer_message(reason))
}

/// Releases `native` (the provider's response body) under `contract`;
/// `request` is the caller's request body (its `state` feeds request-dependent
/// workflows and seeded noise).
pub fn release(
    contract: &Contract,
    asked: &Asked,
    request: &Value,
    native: &Value,
    options: &mut Options<'_>,
) -> Result<Release, Invalid> {
    let object = native.as_object().ok_or(Invalid::MissingField)?;
    let model = object
        .get("model")
        .and_then(Value::as_str)
        .ok_or(Invalid::MissingField)?;
    // Only a model the proxy can vouch for goes out: the contract's pinned model, else
    // the provider's id if it is a plain bounded id (`wire::is_model_id`).
    let model = match &contract.model {
        Some(pinned) => pinned.as_str(),
        None if wire::is_model_id(model) => model,
        None => return Err(Invalid::BadModel),
    };
    let answers = object
        .get("answers")
        .and_then(Value::as_object)
        .ok_or(Invalid::MissingField)?;
    let usage = match object.get("usage") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(usage)) => usage.clone(),
        Some(_) => return Err(Invalid::MissingField),
    };

    let mut released_answers = Map::new();
    let mut records = Vec::with_capacity(asked.questions.len());
    for question in &asked.questions {
        // `check_request` guarantees the contract covers every asked question.
        let rule = contract
            .questions
            .get(&question.id)
            .ok_or(Invalid::MissingAnswer)?;
        let answer = answers.get(&question.id).ok_or(Invalid::MissingAnswer)?;
        let native_vector = wire::parse_answer(question.kind, rule, answer)?;
        let (value, record) = release_answer(question, rule, &native_vector, request, options)?;
        released_answers.insert(question.id.clone(), value);
        records.push(record);
    }

    let mut body = Map::new();
    body.insert("model".into(), Value::String(model.to_string()));
    body.insert("answers".into(), Value::Object(released_answers));
    body.insert(
        "usage".into(),
        Value::Object(release_usage(contract, &usage)?),
    );
    Ok(Release {
        body: Value::Object(body),
        answers: records,
    })
}

/// Releases one parsed answer; returns the answer object and its record.
pub fn release_answer(
    question: &AskedQuestion,
    rule: &QuestionRule,
    native: &ClassVector,
    request: &Value,
    options: &mut Options<'_>,
) -> Result<(Value, AnswerRecord), Invalid> {
    let vector = match &rule.coarsen {
        Some(coarsening) => coarsen(coarsening, native),
        None => native.clone(),
    };
    let view = rule.view;
    let labels = rule.released_labels();
    let applied = if view.has_probabilities() || view.has_confidence() {
        let state = request.get("state").unwrap_or(&Value::Null);
        let identity = || identity_bytes(&question.id, request);
        let roundtrip =
            |candidate: &workflow::Release| roundtrip(question, labels, view, candidate);
        let tie_order = wire::transmitted_order(question, rule, request);
        let mut context = Context {
            state,
            rng: options.rng,
            roundtrip: &roundtrip,
            identity: &identity,
            tie_order: &tie_order,
        };
        rule.mechanism.apply(&vector, view, &mut context)
    } else {
        mechanism::Applied {
            released: Released {
                probabilities: Vec::new(),
                confidence: None,
                deny: false,
            },
            outcome: mechanism::Outcome::Applied,
            mapping_seconds: None,
        }
    };
    let released = &applied.released;
    let finite = released
        .probabilities
        .iter()
        .flatten()
        .all(|p| p.is_finite())
        && released.confidence.is_none_or(f64::is_finite);
    if !finite {
        return Err(Invalid::BadProbability);
    }
    let withheld = rule.withhold.get(vector.choice).copied().unwrap_or(false);
    let value = encode(question, labels, view, vector.choice, released, withheld);
    let evaluation = match (&rule.workflows, options.evaluate) {
        (Some(_), true) => read_released(question.kind, labels, view, &value).map(|released| {
            Box::new(Evaluation {
                native: workflow::Release {
                    choice: vector.choice,
                    probabilities: view
                        .has_probabilities()
                        .then(|| vector.probabilities.clone()),
                    confidence: vector.confidence.filter(|_| view.has_confidence()),
                },
                released,
            })
        }),
        _ => None,
    };
    let record = AnswerRecord {
        question: question.id.clone(),
        view,
        withheld,
        mechanism: applied.outcome,
        mapping_seconds: applied.mapping_seconds,
        evaluation,
    };
    Ok((value, record))
}

/// Serializes a candidate exactly as it would be sent, parses the text back
/// and reads it the way a consumer does (the WCPQ mapper's round trip).
pub fn roundtrip(
    question: &AskedQuestion,
    labels: &[String],
    view: View,
    candidate: &workflow::Release,
) -> Option<workflow::Release> {
    let released = Released {
        probabilities: match &candidate.probabilities {
            Some(p) => p.iter().copied().map(Some).collect(),
            None => vec![None; labels.len()],
        },
        confidence: candidate.confidence,
        deny: false,
    };
    let value = encode(question, labels, view, candidate.choice, &released, false);
    let text = serde_json::to_string(&value).ok()?;
    let parsed: Value = serde_json::from_str(&text).ok()?;
    read_released(question.kind, labels, view, &parsed)
}

/// Reads a released answer object the way a downstream consumer does: the
/// selected class, the probabilities when all are present, the confidence.
///
/// For score and noul answers, which carry no `choice` field, the selected
/// class is the earliest most probable class when probabilities are present,
/// else the released level (score) or outcome (noul). Whether probabilities
/// are present is the view's to say (the recipient knows its contract).
pub fn read_released(
    kind: Kind,
    labels: &[String],
    view: View,
    answer: &Value,
) -> Option<workflow::Release> {
    let object = answer.as_object()?;
    let probabilities: Option<Vec<f64>> = match kind {
        Kind::Noul => {
            let p_true = object.get("noul")?.as_f64()?;
            // Without probabilities the value is the hard outcome; it still reads as a vector.
            Some(
                labels
                    .iter()
                    .map(|l| if l == "true" { p_true } else { 1.0 - p_true })
                    .collect(),
            )
        }
        _ => object
            .get("probabilities")
            .and_then(Value::as_object)
            .and_then(|map| {
                (map.len() == labels.len())
                    .then(|| {
                        labels
                            .iter()
                            .map(|l| map.get(l).and_then(Value::as_f64))
                            .collect::<Option<Vec<f64>>>()
                    })
                    .flatten()
            }),
    };
    let choice = match kind {
        Kind::Choice => {
            let label = object.get("choice")?.as_str()?;
            labels.iter().position(|l| l == label)?
        }
        Kind::Score => match &probabilities {
            Some(p) => wire::argmax(p),
            None => {
                let level = object.get("score")?.as_f64()?;
                labels
                    .iter()
                    .position(|l| l.parse::<f64>().ok() == Some(level))?
            }
        },
        Kind::Noul => wire::argmax(probabilities.as_deref()?),
    };
    // A noul answer's value is a probability only when the view releases one.
    let probabilities = probabilities.filter(|_| view.has_probabilities());
    let confidence = object.get("confidence").and_then(Value::as_f64);
    Some(workflow::Release {
        choice,
        probabilities,
        confidence,
    })
}

/// Stable bytes identifying a request's question (seeded noise): the canonical JSON
/// (`canonical_json`) of exactly what determines the answer: the question id (it
/// selects the contract rule, and a contract's ids are fixed by configuration), the
/// question's definition (`type`, `instructions`, `criteria`; null and absent alike),
/// the request `state` and the `model` as forwarded (the pinned one when pinned).
///
/// Nothing else enters: not the key order (criteria order included), not JSON
/// whitespace or number spelling (`1`, `1.0`, `1e0`), not unknown fields of the
/// request or the question, not the other questions. So re-encoding a request never
/// draws fresh noise; only a different question, state or model does.
fn identity_bytes(question: &str, request: &Value) -> Vec<u8> {
    let definition = request.get("questions").and_then(|q| q.get(question));
    let field = |key: &str| {
        definition
            .and_then(|d| d.get(key))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let part = |key: &str| request.get(key).cloned().unwrap_or(Value::Null);
    let identity = serde_json::json!({
        "id": question,
        "question": {"type": field("type"), "instructions": field("instructions"), "criteria": field("criteria")},
        "state": part("state"),
        "model": part("model"),
    });
    let mut bytes = Vec::new();
    canonical_json(&identity, &mut bytes);
    bytes
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace, strings
/// escaped by serde_json, integral numbers within ±2^53 written as integers (`1.0`
/// and `1e0` are `1`, `-0.0` is `0`), other numbers in Rust's shortest round-trip form.
fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            let text = if let Some(u) = n.as_u64() {
                u.to_string()
            } else if let Some(i) = n.as_i64() {
                i.to_string()
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                    (f as i64).to_string()
                } else {
                    f.to_string()
                }
            };
            out.extend_from_slice(text.as_bytes());
        }
        Value::String(s) => {
            out.extend(serde_json::to_vec(s).unwrap_or_default());
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(key).unwrap_or_default());
                out.push(b':');
                canonical_json(item, out);
            }
            out.push(b'}');
        }
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;

    fn identity(text: &str) -> Vec<u8> {
        identity_bytes("q", &serde_json::from_str(text).unwrap())
    }

    #[test]
    fn the_identity_ignores_spelling_order_and_unknown_fields() {
        let base = identity(
            r#"{"model":"m","state":{"a":1,"b":[1.5,{"y":null,"x":-0.0}]},
                "questions":{"q":{"type":"choice","criteria":{"A":null,"B":"b"}}}}"#,
        );
        let same = [
            r#"{ "questions" : { "q" : { "criteria" : { "B" : "b" , "A" : null } , "type" : "choice",
                 "extra": 1 } , "other": {"type": "noul"} } , "state" : { "b" : [ 15e-1 , { "x" : 0 , "y" : null } ] ,
                 "a" : 1.0 } , "model" : "m", "unknown": true }"#,
            r#"{"model":"m","state":{"a":1e0,"b":[1.50,{"x":0.0,"y":null}]},
                "questions":{"q":{"type":"choice","instructions":null,"criteria":{"A":null,"B":"\u0062"}}}}"#,
        ];
        for text in same {
            assert_eq!(identity(text), base, "{text}");
        }
        let different = [
            r#"{"model":"m2","state":{"a":1,"b":[1.5,{"y":null,"x":0}]},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":"b"}}}}"#,
            r#"{"model":"m","state":{"a":2,"b":[1.5,{"y":null,"x":0}]},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":"b"}}}}"#,
            r#"{"model":"m","state":{"a":1,"b":[{"y":null,"x":0},1.5]},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":"b"}}}}"#,
            r#"{"model":"m","state":{"a":1,"b":[1.5,{"y":null,"x":0}]},"questions":{"q":{"type":"choice","criteria":{"A":"a","B":"b"}}}}"#,
            r#"{"model":"m","state":{"a":1,"b":[1.5,{"y":null,"x":0}]},"questions":{"q":{"type":"choice","instructions":"?","criteria":{"A":null,"B":"b"}}}}"#,
        ];
        for text in different {
            assert_ne!(identity(text), base, "{text}");
        }
        let request = serde_json::from_str(
            r#"{"model":"m","state":"s","questions":{"q":{"type":"noul"},"r":{"type":"noul"}}}"#,
        )
        .unwrap();
        assert_ne!(identity_bytes("q", &request), identity_bytes("r", &request));
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
}

/// Sums fine probabilities into coarse labels and relabels the choice.
pub fn coarsen(coarsening: &Coarsening, fine: &ClassVector) -> ClassVector {
    let mut probabilities = vec![0.0; coarsening.labels.len()];
    for (fine_index, p) in fine.probabilities.iter().enumerate() {
        if let Some(&coarse) = coarsening.map.get(fine_index) {
            probabilities[coarse] += p;
        }
    }
    ClassVector {
        choice: coarsening.map.get(fine.choice).copied().unwrap_or(0),
        probabilities,
        confidence: fine.confidence,
    }
}

/// Writes the released answer object with the view's fields, in a fixed field order.
fn encode(
    question: &AskedQuestion,
    labels: &[String],
    view: View,
    choice: usize,
    released: &Released,
    withheld: bool,
) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), Value::String(question.kind.as_str().into()));
    if !view.has_choice() || released.deny {
        return Value::Object(out);
    }
    // Probabilities go out when the view has them and the mechanism released any
    // (a WCPQ `choice_only` fallback releases none: the field is then absent).
    let show_probabilities =
        view.has_probabilities() && released.probabilities.iter().any(Option::is_some);
    // A withheld selection keeps only its own probability: residual scores leak it.
    let probability_entries: Vec<(usize, f64)> = if show_probabilities {
        released
            .probabilities
            .iter()
            .enumerate()
            .filter(|(index, _)| !withheld || *index == choice)
            .filter_map(|(index, p)| p.map(|p| (index, p)))
            .collect()
    } else {
        Vec::new()
    };
    let probabilities_object = || {
        Value::Object(
            probability_entries
                .iter()
                .map(|(index, p)| (labels[*index].clone(), Value::from(*p)))
                .collect(),
        )
    };
    match question.kind {
        Kind::Choice => {
            out.insert("choice".into(), Value::String(labels[choice].clone()));
            if show_probabilities {
                out.insert("probabilities".into(), probabilities_object());
            }
        }
        Kind::Score => {
            let level = |index: usize| labels[index].parse::<f64>().unwrap_or(0.0);
            let score = if show_probabilities && !withheld {
                let mass: f64 = probability_entries.iter().map(|(_, p)| p).sum();
                let total: f64 = probability_entries.iter().map(|(i, p)| level(*i) * p).sum();
                if probability_entries.len() == labels.len() || mass <= 0.0 {
                    total
                } else {
                    total / mass
                }
            } else {
                level(choice)
            };
            // Round away float noise of the weighted sum (Σ level·p of 4-decimal inputs).
            out.insert("score".into(), Value::from((score * 1e10).round() / 1e10));
            if let Some(legend) = &question.legend {
                out.insert("legend".into(), Value::Object(legend.clone()));
            }
            if show_probabilities {
                out.insert("probabilities".into(), probabilities_object());
            }
        }
        Kind::Noul => {
            let hard = if labels[choice] == "true" { 1.0 } else { 0.0 };
            let true_index = labels.iter().position(|l| l == "true");
            let p_true = true_index
                .and_then(|i| probability_entries.iter().find(|(index, _)| *index == i))
                .map(|(_, p)| *p);
            let noul = match p_true {
                Some(p) if show_probabilities && !withheld => p,
                _ => hard,
            };
            out.insert("noul".into(), Value::from(noul));
            return Value::Object(out);
        }
    }
    if view.has_confidence()
        && !withheld
        && let Some(confidence) = released.confidence
    {
        out.insert("confidence".into(), Value::from(confidence));
    }
    Value::Object(out)
}

fn release_usage(
    contract: &Contract,
    usage: &Map<String, Value>,
) -> Result<Map<String, Value>, Invalid> {
    let mut out = Map::new();
    if !contract.usage.keeps() {
        return Ok(out);
    }
    for key in ["input_tokens", "output_tokens"] {
        match usage.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.is_u64() => {
                out.insert(key.into(), Value::Number(n.clone()));
            }
            Some(_) => return Err(Invalid::MissingField),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
