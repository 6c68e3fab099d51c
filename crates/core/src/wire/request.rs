//! Why a request is refused ([`RequestError`]), and the check of each question against
//! its contract: its type, its classes and its text.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;
use subtle::ConstantTimeEq;

use super::schema::{SchemaIssue, schema_message};
use super::{
    AskedQuestion, Json, Kind, Node, Text, UpstreamQuestion, json, legend_of, pinned_upstream,
    same_json, upstream_question,
};
use crate::contract::QuestionRule;

/// Why a request is refused.
///
/// A body that does not follow the System One request schema is a
/// [`RequestError::Schema`] (422, FastAPI's `{"detail": [{"loc", "msg", "type"}]}`
/// as the real API sends it); a well-formed request its contract cannot serve
/// is a [`RequestError::Contract`] (400, `{"detail": {"error_type", "message"}}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Schema violations, in body order (never empty).
    #[error("{}", schema_message(.0))]
    Schema(Vec<SchemaIssue>),
    /// The request is well-formed but its contract cannot serve it: a
    /// question outside the contract, labels or levels that differ from the
    /// contract's classes, a type the contract cannot release, a blank model.
    #[error("{0}")]
    Contract(String),
    /// A question the contract does not release (it does not list it): 403
    /// `question_not_released`, naming the question (its first 64 characters and `…`
    /// when its id is longer). Typed clients get an error they can read instead of an
    /// answer missing from `answers`.
    #[error(
        "question `{shown}` is not released by release contract `{contract}` (it is not covered)",
        shown = shown_id(.question)
    )]
    NotReleased {
        /// The caller's question id.
        question: String,
        /// The contract's name.
        contract: String,
    },
    /// A question's instructions or a description differ from the text its contract
    /// pins (400 `question_text_mismatch`). Names the question and the field, never
    /// the text.
    #[error(
        "question `{question}`: `{field}` differs from the text its release contract asks; send the contract's text or leave it out"
    )]
    TextMismatch {
        /// The question id (a contract key).
        question: String,
        /// `instructions`, `criteria.LABEL` or `criteria[LEVEL]`.
        field: String,
    },
}

/// The most characters of a caller's question id a refusal shows.
const SHOWN_ID_CHARS: usize = 64;

/// A caller's question id as a refusal shows it: whole up to [`SHOWN_ID_CHARS`]
/// characters, else its first ones and `…`, so that an id of any length makes a short
/// message.
fn shown_id(id: &str) -> Cow<'_, str> {
    match id.char_indices().nth(SHOWN_ID_CHARS) {
        Some((cut, _)) => Cow::Owned(format!("{}…", &id[..cut])),
        None => Cow::Borrowed(id),
    }
}

// === impl RequestError ===

impl RequestError {
    /// The response body: FastAPI's validation list for schema errors,
    /// `{"detail": {"error_type": "invalid_request", "message"}}` otherwise.
    pub fn body(&self) -> Value {
        match self {
            RequestError::Schema(issues) => {
                let detail: Vec<Value> = issues
                    .iter()
                    .map(|issue| {
                        serde_json::json!({"loc": issue.loc, "msg": issue.msg, "type": issue.kind})
                    })
                    .collect();
                serde_json::json!({ "detail": detail })
            }
            RequestError::Contract(message) => {
                serde_json::json!({"detail": {"error_type": "invalid_request", "message": message}})
            }
            RequestError::TextMismatch { .. } | RequestError::NotReleased { .. } => {
                serde_json::json!({"detail": {"error_type": self.error_type(), "message": self.to_string()}})
            }
        }
    }

    /// The `error_type` slug of the response body.
    pub fn error_type(&self) -> &'static str {
        match self {
            RequestError::Schema(_) => "validation_error",
            RequestError::Contract(_) => "invalid_request",
            RequestError::TextMismatch { .. } => "question_text_mismatch",
            RequestError::NotReleased { .. } => "question_not_released",
        }
    }
}

/// Checks one of a request's questions against its contract's rule (its type, its classes,
/// its text where the contract pins it) and gives it with its upstream form.
pub(super) fn check_question(
    id: &str,
    question: &Json<'_>,
    rule: &QuestionRule,
) -> Result<(AskedQuestion, Arc<UpstreamQuestion>), RequestError> {
    let kind = question_kind(id, question, rule)?;
    let caller = caller_texts(id, kind, question, rule)?;
    let instructions = question.member("instructions").filter(|v| !v.is_null());
    let (upstream, legend) = if rule.question.caller_text {
        let upstream = upstream_question(
            kind,
            &rule.classes,
            Text {
                instructions: instructions.map(Json::to_value),
                descriptions: caller.into_iter().map(|d| d.map(Json::to_value)).collect(),
            },
        );
        let legend = legend_of(kind, &upstream);
        (Arc::new(UpstreamQuestion::new(upstream)), legend)
    } else {
        check_pinned_text(id, kind, rule, instructions, &caller)?;
        pinned_upstream(kind, rule)
    };
    Ok((
        AskedQuestion {
            id: id.to_string(),
            kind,
            legend,
        },
        upstream,
    ))
}

/// A request's question that its contract refuses, with the reason.
fn contract_refusal(id: &str, reason: &str) -> RequestError {
    RequestError::Contract(format!("question `{id}`: {reason}"))
}

/// The question's type, which must be the one its contract asks.
fn question_kind(id: &str, question: &Json<'_>, rule: &QuestionRule) -> Result<Kind, RequestError> {
    let fail = |reason: &str| contract_refusal(id, reason);
    // The schema check guarantees a known tag and well-typed criteria.
    let kind = match question.member("type").and_then(Node::text) {
        Some("choice") => Kind::Choice,
        Some("score") => Kind::Score,
        Some("noul") => Kind::Noul,
        Some("box") => Kind::Box,
        Some(other) => {
            return Err(fail(&format!(
                "type `{other}` cannot be released under a contract (choice, score, noul or box only)"
            )));
        }
        None => return Err(fail("missing `type`")),
    };
    if kind != rule.question.kind {
        return Err(fail(&format!(
            "its release contract asks it as a {} question",
            rule.question.kind.as_str()
        )));
    }
    Ok(kind)
}

/// The caller's text per class, in the contract's class order (`None`: absent or null),
/// once the criteria are the contract's classes.
fn caller_texts<'q, 'a>(
    id: &str,
    kind: Kind,
    question: &'q Json<'a>,
    rule: &QuestionRule,
) -> Result<Vec<Option<&'q Json<'a>>>, RequestError> {
    let fail = |reason: &str| contract_refusal(id, reason);
    Ok(match kind {
        Kind::Choice => {
            let criteria = question
                .member("criteria")
                .and_then(Json::as_object)
                .ok_or_else(|| fail("a choice question needs a `criteria` object"))?;
            // The same labels: as many, and each class among them (one lookup per class).
            let texts = (criteria.len() == rule.classes.len())
                .then(|| {
                    rule.classes
                        .iter()
                        .map(|class| criteria.get(class))
                        .collect::<Option<Vec<&Json<'_>>>>()
                })
                .flatten()
                .ok_or_else(|| fail("its criteria labels differ from the contract's classes"))?;
            texts
                .into_iter()
                .map(|text| Some(text).filter(|v| !v.is_null()))
                .collect()
        }
        Kind::Score => {
            let criteria = question
                .member("criteria")
                .and_then(Json::as_array)
                .ok_or_else(|| fail("a score question needs a `criteria` array"))?;
            if criteria.len() != rule.classes.len() {
                return Err(fail(&format!(
                    "it has {} levels; its release contract asks {} (\"0\"..\"{}\")",
                    criteria.len(),
                    rule.classes.len(),
                    rule.classes.len().saturating_sub(1)
                )));
            }
            rule.classes
                .iter()
                .map(|class| {
                    class
                        .parse::<usize>()
                        .ok()
                        .and_then(|level| criteria.get(level))
                        .filter(|v| !v.is_null())
                })
                .collect()
        }
        Kind::Box => {
            if question.member("criteria").is_some_and(|c| !c.is_null()) {
                return Err(fail("a box question has no `criteria`"));
            }
            Vec::new()
        }
        Kind::Noul => {
            // Outcomes beyond `true` and `false` mean nothing and are never sent.
            let criteria = question.member("criteria").and_then(Json::as_object);
            rule.classes
                .iter()
                .map(|class| criteria.and_then(|c| c.get(class)).filter(|v| !v.is_null()))
                .collect()
        }
    })
}

/// The caller's text, where it sends any, is the contract's own, word for word.
fn check_pinned_text(
    id: &str,
    kind: Kind,
    rule: &QuestionRule,
    instructions: Option<&Json<'_>>,
    caller: &[Option<&Json<'_>>],
) -> Result<(), RequestError> {
    let pinned = &rule.question;
    let mismatch = |field: String| RequestError::TextMismatch {
        question: id.to_string(),
        field,
    };
    if let Some(sent) = instructions
        && !pinned
            .instructions
            .as_ref()
            .is_some_and(|own| same_text(own, sent))
    {
        return Err(mismatch("instructions".into()));
    }
    for ((class, sent), own) in rule.classes.iter().zip(caller).zip(&pinned.descriptions) {
        let Some(sent) = sent else { continue };
        let same = match (kind, own) {
            (_, Some(own)) => same_text(own, sent),
            // A score level without a description goes upstream as its name.
            (Kind::Score, None) => matches!(sent, Json::String(text) if text == class),
            (_, None) => false,
        };
        if !same {
            return Err(mismatch(match kind {
                Kind::Score => format!("criteria[{class}]"),
                _ => format!("criteria.{class}"),
            }));
        }
    }
    Ok(())
}

/// Whether the caller's `sent` text is the contract's `own`: [`same_json`] of the two,
/// without building either's canonical form when one is a string (nearly every
/// instruction and description). Two strings are the same exactly when their text is
/// (serde_json escapes each string one way, and distinct strings distinctly); a string
/// and anything else never are (a canonical string starts with `"`, nothing else does).
///
/// Two strings are compared in a time that does not depend on where they first differ
/// (their lengths aside): a caller probing the contract's text learns no more from the
/// timing than from the refusal.
pub(super) fn same_text(own: &Value, sent: &Json<'_>) -> bool {
    match (own, sent) {
        (Value::String(own), Json::String(sent)) => same_string(own, sent),
        (Value::String(_), _) | (_, Json::String(_)) => false,
        _ => same_json(own, &sent.to_value()),
    }
}

/// Whether two strings are equal, in a time that depends on their length only: eight
/// bytes at a time through `subtle`'s constant-time comparison (a byte at a time costs
/// about ten instructions per byte), the last few bytes as one more word, padded alike
/// on both sides (the JSON scanner's words).
pub(super) fn same_string(a: &str, b: &str) -> bool {
    use json::scan::{padded, word_at};
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (xs, ys) = (a.chunks_exact(8), b.chunks_exact(8));
    let rest = padded(xs.remainder()).ct_eq(&padded(ys.remainder()));
    let same = xs.zip(ys).fold(rest, |same, (x, y)| {
        same & word_at(x, 0).ct_eq(&word_at(y, 0))
    });
    bool::from(same)
}
