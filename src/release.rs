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
use crate::mechanism::{ClassVector, Released};
use crate::wire::{self, Asked, AskedQuestion, Invalid, Kind};

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

/// Releases `native` (the provider's response body) under `contract`.
pub fn release(contract: &Contract, asked: &Asked, native: &Value) -> Result<Release, Invalid> {
    let object = native.as_object().ok_or(Invalid::MissingField)?;
    let model = object
        .get("model")
        .and_then(Value::as_str)
        .ok_or(Invalid::MissingField)?;
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
        let (value, withheld) = release_answer(question, rule, &native_vector)?;
        released_answers.insert(question.id.clone(), value);
        records.push(AnswerRecord {
            question: question.id.clone(),
            view: rule.view,
            withheld,
        });
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

/// Releases one parsed answer; returns the answer object and whether it was withheld.
pub fn release_answer(
    question: &AskedQuestion,
    rule: &QuestionRule,
    native: &ClassVector,
) -> Result<(Value, bool), Invalid> {
    let vector = match &rule.coarsen {
        Some(coarsening) => coarsen(coarsening, native),
        None => native.clone(),
    };
    let view = rule.view;
    let released = if view.has_probabilities() || view.has_confidence() {
        rule.mechanism.apply(&vector)
    } else {
        Released {
            probabilities: Vec::new(),
            confidence: None,
        }
    };
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
    let labels = rule.released_labels();
    Ok((
        encode(question, labels, view, vector.choice, &released, withheld),
        withheld,
    ))
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
    if !view.has_choice() {
        return Value::Object(out);
    }
    let show_probabilities = view.has_probabilities();
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
