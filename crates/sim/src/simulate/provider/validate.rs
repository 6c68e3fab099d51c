//! The simulated provider's request validation: the body, its state and each question,
//! with the errors a System One service gives (each naming its `loc`).

use serde_json::{Map, Value};

use super::{Kind, MAX_CHOICES, MAX_LEVELS, Question};
use crate::simulate::Error;

/// A validation error at `body.<loc>`.
pub(super) fn invalid(loc: &[&str], reason: impl Into<String>) -> Error {
    let mut path = vec!["body".to_string()];
    path.extend(loc.iter().map(|s| s.to_string()));
    Error::Invalid {
        loc: path,
        reason: reason.into(),
    }
}

/// Whether `value` is question or state content (a string, object or array).
pub(super) fn is_content(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Object(_) | Value::Array(_))
}

/// The request's model, state and questions, checked.
pub(super) fn validate(request: &Value) -> Result<(&str, &Value, Vec<Question<'_>>), Error> {
    let Value::Object(body) = request else {
        return Err(invalid(&[], "request body must be a json object"));
    };
    let model = match body.get("model") {
        None => return Err(invalid(&["model"], "field required")),
        Some(Value::String(s)) if !s.trim().is_empty() => s.as_str(),
        Some(_) => return Err(invalid(&["model"], "must be a non-empty string")),
    };
    let state = match body.get("state") {
        None => return Err(invalid(&["state"], "field required")),
        Some(v) if is_content(v) => v,
        Some(_) => {
            return Err(invalid(&["state"], "must be a string, object or array"));
        }
    };
    let questions = match body.get("questions") {
        None => return Err(invalid(&["questions"], "field required")),
        Some(Value::Object(q)) if !q.is_empty() => q,
        Some(Value::Object(_)) => {
            return Err(invalid(&["questions"], "must hold at least one question"));
        }
        Some(_) => return Err(invalid(&["questions"], "must be an object")),
    };
    let parsed = questions
        .iter()
        .map(|(id, body)| validate_question(id, body))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((model, state, parsed))
}

/// One question of the request, checked.
pub(super) fn validate_question<'a>(id: &'a str, body: &'a Value) -> Result<Question<'a>, Error> {
    let Value::Object(fields) = body else {
        return Err(invalid(&["questions", id], "must be an object"));
    };
    if let Some(instructions) = fields.get("instructions")
        && !(instructions.is_null() || is_content(instructions))
    {
        return Err(invalid(
            &["questions", id, "instructions"],
            "must be a string, object, array or null",
        ));
    }
    let kind = match fields.get("type").and_then(Value::as_str) {
        None => return Err(invalid(&["questions", id, "type"], "field required")),
        Some("choice") => choice(id, fields)?,
        Some("score") => score(id, fields)?,
        Some("noul") => {
            if let Some(criteria) = fields.get("criteria")
                && !(criteria.is_null() || criteria.is_object())
            {
                return Err(invalid(
                    &["questions", id, "criteria"],
                    "noul criteria must be an object or null",
                ));
            }
            Kind::Noul
        }
        Some("box") => {
            if fields.get("criteria").is_some_and(|c| !c.is_null()) {
                return Err(invalid(
                    &["questions", id, "criteria"],
                    "a box question has no criteria",
                ));
            }
            Kind::Box
        }
        Some(other) => {
            return Err(invalid(
                &["questions", id, "type"],
                format!(
                    "unsupported question type `{other}` (expected choice, score, noul or box)"
                ),
            ));
        }
    };
    Ok(Question { id, body, kind })
}

/// A choice question's labels: 2 to [`MAX_CHOICES`] criteria, each content or null.
fn choice<'a>(id: &str, fields: &'a Map<String, Value>) -> Result<Kind<'a>, Error> {
    let Some(Value::Object(criteria)) = fields.get("criteria") else {
        return Err(invalid(
            &["questions", id, "criteria"],
            "choice criteria must be an object of label to description",
        ));
    };
    if criteria.len() < 2 || criteria.len() > MAX_CHOICES {
        return Err(invalid(
            &["questions", id, "criteria"],
            format!("choice needs 2 to {MAX_CHOICES} candidates"),
        ));
    }
    if let Some((label, _)) = criteria
        .iter()
        .find(|(_, v)| !(v.is_null() || is_content(v)))
    {
        return Err(invalid(
            &["questions", id, "criteria", label],
            "must be a string, object, array or null",
        ));
    }
    Ok(Kind::Choice(criteria.keys().map(String::as_str).collect()))
}

/// A score question's levels: 1 to [`MAX_LEVELS`], each content or null.
fn score<'a>(id: &str, fields: &'a Map<String, Value>) -> Result<Kind<'a>, Error> {
    let Some(Value::Array(levels)) = fields.get("criteria") else {
        return Err(invalid(
            &["questions", id, "criteria"],
            "score criteria must be an array of level descriptions",
        ));
    };
    if levels.is_empty() || levels.len() > MAX_LEVELS {
        return Err(invalid(
            &["questions", id, "criteria"],
            format!("score needs 1 to {MAX_LEVELS} levels"),
        ));
    }
    if let Some(i) = levels.iter().position(|v| !(v.is_null() || is_content(v))) {
        return Err(invalid(
            &["questions", id, "criteria", &i.to_string()],
            "must be a string, object, array or null",
        ));
    }
    Ok(Kind::Score(levels))
}
