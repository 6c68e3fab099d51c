//! Applies a release contract to a whole System One response.
//!
//! This is the one code path the proxy and the offline replay share. It is
//! pure: given the contract, the checked request and the native response, it
//! returns the response the recipient may see, or the reason the native
//! response is rejected. Nothing the contract does not name goes out: unknown
//! top-level fields, unknown answer types and unknown answer fields are dropped, and
//! probabilities are re-emitted in canonical order. The answers must name exactly the
//! asked questions: a missing one or one the request did not ask rejects the response
//! (an answer to another request, such as one a provider sent unasked on a reused
//! connection, names other questions).
//! The contract's shape decides whether answers carry every field their type
//! requires (`shape`: fills computed from the released fields) or only the
//! view's.

mod answer;
pub mod bounding;
mod codewords;
mod form;
pub mod shape;
mod usage;

use std::borrow::Cow;

use serde_json::Value;

#[cfg(any(test, feature = "test-support"))]
pub use self::answer::roundtrip;
pub use self::answer::{coarsen, read_released, release_answer};
pub use self::codewords::Codewords;
pub use self::form::{Form, Observed};
use self::usage::release_usage;
use crate::contract::{Contract, View};
use crate::mechanism;
use crate::rng::Rng;
use crate::wire::json::{Object, write};
use crate::wire::{self, Asked, AskedQuestion, Invalid, Json, Kind, Node};
use crate::workflow;

/// A released response and what happened to each answer.
///
/// The body borrows its strings (labels, question ids, the model) from the contract,
/// the request and the native answer: building it allocates only its objects' member
/// lists, and [`Release::to_bytes`] writes it as serde_json would write the same `Value`.
#[derive(Debug, Clone)]
pub struct Release<'a> {
    /// The body the recipient receives.
    pub body: Json<'a>,
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

/// The two answers a frozen workflow would have acted on, both read by [`Form::read`].
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The native answer as the recipient would read it had it gone out
    /// without the mechanism (same view, withholding and shape).
    pub native: workflow::Release,
    /// The released answer, read back from its serialized form.
    pub released: workflow::Release,
}

impl Release<'_> {
    /// The body as the bytes the recipient receives.
    pub fn to_bytes(&self) -> Vec<u8> {
        write::to_vec(&self.body)
    }
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

/// Releases `native` (the provider's response body) under `contract`. What it reads of
/// the request is what went upstream (`Asked::upstream`): its `state` feeds
/// request-dependent workflows, and seeded noise is keyed on it.
pub fn release<'a, N: Node>(
    contract: &'a Contract,
    asked: &'a Asked,
    native: &'a N,
    options: &mut Options<'_>,
) -> Result<Release<'a>, Invalid> {
    native.object_len().ok_or(Invalid::MissingField)?;
    let model = released_model(contract, asked, native)?;
    let answers = native
        .member("answers")
        .filter(|answers| answers.object_len().is_some())
        .ok_or(Invalid::MissingField)?;
    let usage = native_usage(native)?;
    let (released_answers, records) = release_each(asked, options, |question, options| {
        release_question(contract, asked, question, answers, options)
    })?;
    // Every asked question has its answer (else `MissingAnswer` above), and an object's
    // keys are distinct: more answers than questions means one the request did not ask.
    if answers.object_len() != Some(asked.questions.len()) {
        return Err(Invalid::UnaskedAnswer);
    }
    assemble(contract, model, usage, released_answers, records)
}

/// [`release`] of a response whose answers [`wire::read_answers`] read straight into
/// their class vectors, for the same `contract` and `asked`: the same release of the same
/// response (that reader reads only the responses whose every answer is one
/// [`wire::parse_answer`] reads to the same vector, to exactly the asked questions),
/// without reading the answers again.
pub fn release_read<'a>(
    contract: &'a Contract,
    asked: &'a Asked,
    read: &'a wire::ReadAnswers<'a>,
    options: &mut Options<'_>,
) -> Result<Release<'a>, Invalid> {
    let native = &read.top;
    native.object_len().ok_or(Invalid::MissingField)?;
    let model = released_model(contract, asked, native)?;
    let usage = native_usage(native)?;
    let mut answers = read.answers.iter();
    let (released_answers, records) = release_each(asked, options, |question, options| {
        let (rule, vector) = answers.next().ok_or(Invalid::MissingAnswer)?;
        release_answer(question, rule, contract.shape, vector, asked, options)
    })?;
    assemble(contract, model, usage, released_answers, records)
}

/// Each asked question's answer released by `release_one`, in request order: the
/// released `answers` object and the records.
fn release_each<'a>(
    asked: &'a Asked,
    options: &mut Options<'_>,
    mut release_one: impl FnMut(
        &'a AskedQuestion,
        &mut Options<'_>,
    ) -> Result<(Option<Json<'a>>, AnswerRecord), Invalid>,
) -> Result<(Object<'a>, Vec<AnswerRecord>), Invalid> {
    let mut released_answers = Object::with_capacity(asked.questions.len());
    let mut records = Vec::with_capacity(asked.questions.len());
    for question in asked.questions.iter() {
        let (value, record) = release_one(question, options)?;
        if let Some(value) = value {
            released_answers.insert(Cow::Borrowed(&question.id), value);
        }
        records.push(record);
    }
    Ok((released_answers, records))
}

/// The released body: the model, the answers and the usage.
fn assemble<'a, N: Node>(
    contract: &'a Contract,
    model: &'a str,
    usage: Option<&N>,
    released_answers: Object<'a>,
    answers: Vec<AnswerRecord>,
) -> Result<Release<'a>, Invalid> {
    let mut body = Object::with_capacity(3);
    body.insert(Cow::Borrowed("model"), Json::text(model));
    body.insert(Cow::Borrowed("answers"), Json::Object(released_answers));
    body.insert(
        Cow::Borrowed("usage"),
        Json::Object(release_usage(contract, usage)?),
    );
    Ok(Release {
        body: Json::Object(body),
        answers,
    })
}

/// The model that goes out: only one the proxy can vouch for, the contract's pinned
/// model, else the provider's id if it is a plain bounded id (`wire::is_model_id`). A
/// contract of several providers without a pinned model releases the model the caller
/// asked for (checked as a plain id with the request): each provider's own id would tell
/// the recipient which one answered. The provider's `model` is required either way.
fn released_model<'a, N: Node>(
    contract: &'a Contract,
    asked: &'a Asked,
    native: &'a N,
) -> Result<&'a str, Invalid> {
    let model = native
        .member("model")
        .and_then(Node::text)
        .ok_or(Invalid::MissingField)?;
    match &contract.model {
        Some(pinned) => Ok(pinned.as_str()),
        None if !wire::is_model_id(model) => Err(Invalid::BadModel),
        None if contract.providers().len() > 1 => Ok(asked.model.as_str()),
        None => Ok(model),
    }
}

/// The native `usage` object, if any (absent and `null` read alike).
fn native_usage<N: Node>(native: &N) -> Result<Option<&N>, Invalid> {
    match native.member("usage") {
        None => Ok(None),
        Some(usage) if usage.is_null() => Ok(None),
        Some(usage) if usage.object_len().is_some() => Ok(Some(usage)),
        Some(_) => Err(Invalid::MissingField),
    }
}

/// Releases the native answer to one asked question: the answer object (`None`: left
/// out of `answers`) and its record.
fn release_question<'a, N: Node>(
    contract: &'a Contract,
    asked: &'a Asked,
    question: &'a AskedQuestion,
    answers: &'a N,
    options: &mut Options<'_>,
) -> Result<(Option<Json<'a>>, AnswerRecord), Invalid> {
    // `check_request` guarantees the contract covers every asked question.
    let rule = contract
        .questions
        .get(&question.id)
        .ok_or(Invalid::MissingAnswer)?;
    let answer = answers.member(&question.id).ok_or(Invalid::MissingAnswer)?;
    if question.kind == Kind::Box {
        let native = wire::parse_box(answer)?;
        let value = Json::from_owned(bounding::release_box(rule, contract.shape, &native));
        let record = AnswerRecord {
            question: question.id.clone(),
            view: rule.view,
            withheld: false,
            mechanism: mechanism::Outcome::Applied,
            mapping_seconds: None,
            evaluation: None,
        };
        return Ok((Some(value), record));
    }
    let native_vector = wire::parse_answer(question.kind, rule, answer)?;
    release_answer(
        question,
        rule,
        contract.shape,
        &native_vector,
        asked,
        options,
    )
}

#[cfg(test)]
mod tests;
