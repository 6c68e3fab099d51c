//! A provider's native answers read and validated: a class question's answer into a
//! class vector aligned by class id (never by position), a box answer into its edges, the
//! model ids and dates the proxy vouches for, and why an answer is rejected ([`Invalid`]).

use bumpalo::Bump;

use super::json::Doc;
use super::json::read::doc::answers::{self, Expected};
use super::{Asked, Kind, Node};
use crate::contract::{Contract, QuestionRule};
use crate::mechanism::ClassVector;

/// How far the probabilities of an answer with `n` classes may sum from 1: half a hundredth
/// per class, from 0.01 to 0.1. Providers round: some send every probability with two
/// decimals (a 3-class answer of `0.33` each sums to 0.99; 200 classes with the top at 0.9
/// and the rest under 0.005 sum to 0.9), others drift in the second decimal; a vector
/// further off is not a distribution. Every mechanism that needs one
/// normalizes first, and WCPQ's posterior is normalized by definition.
pub fn sum_tolerance(n: usize) -> f64 {
    // The float slack keeps a sum on the boundary (0.49 + 0.5) on the side it is meant to be.
    (0.005 * n as f64).clamp(0.01, 0.1) + 1e-9
}

/// Why a native answer is rejected (a metrics label: keep it bounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The body is not JSON.
    #[error("not_json")]
    NotJson,
    /// A required field is missing or has the wrong JSON type.
    #[error("missing_field")]
    MissingField,
    /// The answer's type differs from the question's.
    #[error("type_mismatch")]
    TypeMismatch,
    /// A probability or confidence is outside [0, 1] or not finite.
    #[error("bad_probability")]
    BadProbability,
    /// Probabilities do not sum to 1 within the tolerance.
    #[error("probability_sum")]
    ProbabilitySum,
    /// The probabilities do not cover exactly the question's classes.
    #[error("class_mismatch")]
    ClassMismatch,
    /// The selected choice is not one of the classes.
    #[error("unknown_choice")]
    UnknownChoice,
    /// The selected choice has a lower probability than another class: a choice is the
    /// class of highest probability (any of them on a tie).
    #[error("choice_not_most_probable")]
    ChoiceNotMostProbable,
    /// An asked question has no answer.
    #[error("missing_answer")]
    MissingAnswer,
    /// The answers name a question the request did not ask: the answer is not to this
    /// request (a provider answers exactly the questions asked).
    #[error("unasked_answer")]
    UnaskedAnswer,
    /// The answer's `model` is not a well-formed model id (`is_model_id`).
    #[error("bad_model")]
    BadModel,
    /// A `/v1/models` entry lacks a field or has one the proxy cannot vouch for
    /// (`is_model_id`, `is_calendar_date`); the entry is dropped.
    #[error("bad_model_entry")]
    BadModelEntry,
    /// A box whose top is below its bottom or whose left is right of its right edge.
    #[error("bad_box")]
    BadBox,
}

// === impl Invalid ===

impl Invalid {
    /// Every reason, for pre-registering metrics.
    pub const ALL: [Invalid; 13] = [
        Invalid::NotJson,
        Invalid::MissingField,
        Invalid::TypeMismatch,
        Invalid::BadProbability,
        Invalid::ProbabilitySum,
        Invalid::ClassMismatch,
        Invalid::UnknownChoice,
        Invalid::ChoiceNotMostProbable,
        Invalid::MissingAnswer,
        Invalid::UnaskedAnswer,
        Invalid::BadModel,
        Invalid::BadModelEntry,
        Invalid::BadBox,
    ];
}

/// A provider's response whose answers were read straight into class vectors
/// ([`read_answers`]).
#[derive(Debug)]
pub struct ReadAnswers<'a> {
    /// The response's top-level members, its `answers` standing as an empty object.
    pub top: Doc<'a>,
    /// Each asked question's rule and class vector, in the order asked, each vector
    /// exactly what [`parse_answer`] reads from the same bytes.
    pub answers: Vec<(&'a QuestionRule, ClassVector)>,
}

/// Reads a provider's response (`bytes`) to `asked` under `contract` with each choice
/// and score answer straight into its class vector, without building its members first.
/// `None` wherever the response must be read as a [`Doc`] (or a `Json`) and each answer
/// with [`parse_answer`]: a question of another type, a question the contract does not
/// cover, and every response or answer that reading would refuse or read otherwise (see
/// `wire::json::read::doc::answers`). So a response it reads releases exactly as the
/// other reading would release it.
pub fn read_answers<'a>(
    bytes: &'a [u8],
    arena: &'a Bump,
    contract: &'a Contract,
    asked: &Asked,
) -> Option<ReadAnswers<'a>> {
    let rules = asked
        .questions
        .iter()
        .map(|question| contract.questions.get(&question.id))
        .collect::<Option<Vec<_>>>()?;
    let expected: Vec<Expected<'_>> = asked
        .questions
        .iter()
        .zip(&rules)
        .map(|(question, rule)| Expected {
            id: &question.id,
            kind: question.kind,
            classes: &rule.classes,
            plain_classes: rule.plain_classes,
        })
        .collect();
    let read = answers::document(bytes, arena, &expected)?;
    Some(ReadAnswers {
        top: read.top,
        answers: rules.into_iter().zip(read.vectors).collect(),
    })
}

/// Reads a native answer into a class vector in the rule's canonical class order.
pub fn parse_answer<N: Node>(
    kind: Kind,
    rule: &QuestionRule,
    answer: &N,
) -> Result<ClassVector, Invalid> {
    answer.object_len().ok_or(Invalid::MissingField)?;
    match answer.member("type").and_then(Node::text) {
        Some(t) if t == kind.as_str() => {}
        Some(_) => return Err(Invalid::TypeMismatch),
        None => return Err(Invalid::MissingField),
    }
    let classes = &rule.classes;
    let (probabilities, choice, confidence) = match kind {
        // A box answer has no class vector: `parse_box` reads it.
        Kind::Box => return Err(Invalid::TypeMismatch),
        Kind::Choice | Kind::Score => choice_or_score(kind, classes, answer)?,
        Kind::Noul => {
            let p_true = unit_number(answer.member("noul").ok_or(Invalid::MissingField)?)?;
            let probabilities: Vec<f64> = classes
                .iter()
                .map(|class| {
                    if class == "true" {
                        p_true
                    } else {
                        1.0 - p_true
                    }
                })
                .collect();
            let choice = argmax(&probabilities);
            (probabilities, choice, None)
        }
    };
    if !sum_is_close(&probabilities) {
        return Err(Invalid::ProbabilitySum);
    }
    Ok(ClassVector {
        choice,
        probabilities,
        confidence,
    })
}

/// A choice or score answer's parts, for [`parse_answer`] to check their sum: its
/// probabilities in `classes` order (exactly the classes, each in [0, 1]), the index of
/// its choice (a score's most probable level) and its confidence (`None` when null or
/// absent).
fn choice_or_score<N: Node>(
    kind: Kind,
    classes: &[String],
    answer: &N,
) -> Result<(Vec<f64>, usize, Option<f64>), Invalid> {
    let map = answer
        .member("probabilities")
        .filter(|map| map.object_len().is_some())
        .ok_or(Invalid::MissingField)?;
    if map.object_len() != Some(classes.len()) {
        return Err(Invalid::ClassMismatch);
    }
    let mut probabilities = Vec::with_capacity(classes.len());
    for (at, class) in classes.iter().enumerate() {
        // Most providers list the classes in the question's order.
        let value = map.member_near(class, at).ok_or(Invalid::ClassMismatch)?;
        probabilities.push(unit_number(value)?);
    }
    let choice = match kind {
        Kind::Choice => {
            let label = answer
                .member("choice")
                .and_then(Node::text)
                .ok_or(Invalid::MissingField)?;
            let choice = classes
                .iter()
                .position(|c| c == label)
                .ok_or(Invalid::UnknownChoice)?;
            // A choice below another class's probability contradicts its own
            // answer; released as a fallback it would also mark one (a covered
            // answer's choice is always among its most probable classes).
            if probabilities.iter().any(|&p| p > probabilities[choice]) {
                return Err(Invalid::ChoiceNotMostProbable);
            }
            choice
        }
        _ => {
            if !answer
                .member("score")
                .and_then(Node::number)
                .is_some_and(f64::is_finite)
            {
                return Err(Invalid::MissingField);
            }
            argmax(&probabilities)
        }
    };
    let confidence = match answer.member("confidence") {
        None => None,
        Some(value) if value.is_null() => None,
        Some(value) => Some(unit_number(value)?),
    };
    Ok((probabilities, choice, confidence))
}

/// A box answer's edges, fractions of the image measured from its top-left corner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoxEdges {
    pub top: f64,
    pub bottom: f64,
    pub left: f64,
    pub right: f64,
}

/// A provider's box answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoxAnswer {
    pub edges: BoxEdges,
    /// In [0, 1], or `None` when the provider sent `null` (or nothing).
    pub confidence: Option<f64>,
}

/// Validates a provider's box answer: `type` "box", four edges that are numbers in [0, 1]
/// with `top <= bottom` and `left <= right`, and a confidence in [0, 1] or null. Anything
/// else is invalid, and the answer never goes out.
pub fn parse_box<N: Node>(answer: &N) -> Result<BoxAnswer, Invalid> {
    answer.object_len().ok_or(Invalid::MissingField)?;
    match answer.member("type").and_then(Node::text) {
        Some("box") => {}
        Some(_) => return Err(Invalid::TypeMismatch),
        None => return Err(Invalid::MissingField),
    }
    let edges = answer
        .member("box")
        .filter(|edges| edges.object_len().is_some())
        .ok_or(Invalid::MissingField)?;
    let edge = |name: &str| unit_number(edges.member(name).ok_or(Invalid::MissingField)?);
    let edges = BoxEdges {
        top: edge("top")?,
        bottom: edge("bottom")?,
        left: edge("left")?,
        right: edge("right")?,
    };
    if edges.top > edges.bottom || edges.left > edges.right {
        return Err(Invalid::BadBox);
    }
    let confidence = match answer.member("confidence") {
        None => None,
        Some(value) if value.is_null() => None,
        Some(value) => Some(unit_number(value)?),
    };
    Ok(BoxAnswer { edges, confidence })
}

/// Whether `probabilities` sum to 1 within [`sum_tolerance`].
pub(crate) fn sum_is_close(probabilities: &[f64]) -> bool {
    let sum: f64 = probabilities.iter().sum();
    (sum - 1.0).abs() <= sum_tolerance(probabilities.len())
}

fn unit_number<N: Node>(value: &N) -> Result<f64, Invalid> {
    unit(value.number().ok_or(Invalid::MissingField)?)
}

/// A probability or confidence: a finite number in [0, 1].
pub(crate) fn unit(number: f64) -> Result<f64, Invalid> {
    if number.is_finite() && (0.0..=1.0).contains(&number) {
        // `-0` is zero: it goes on as `0.0`, the one spelling of zero every number the
        // proxy computes has (`shape::fixed`), so a native value released unchanged (a
        // WCPQ fallback) is not told from a computed one by its sign.
        Ok(if number == 0.0 { 0.0 } else { number })
    } else {
        Err(Invalid::BadProbability)
    }
}

/// Longest model id the proxy releases.
pub const MAX_MODEL_ID_LEN: usize = 128;

/// Whether `id` is a model id the proxy can vouch for: 1 to `MAX_MODEL_ID_LEN` ASCII
/// characters, an ASCII letter or digit first, then letters, digits and `.`, `_`, `:`,
/// `/`, `-` (`jev-1.13.0`, `llama3:8b`, `accounts/acme/models/m`). Anything else
/// (spaces, quotes, control characters, non-ASCII, long strings) is text the provider
/// could use to talk to recipients.
pub fn is_model_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_MODEL_ID_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

/// Whether `text` is a real proleptic Gregorian calendar date written `YYYY-MM-DD`
/// (years 0001 to 9999; February 29 only in leap years).
pub fn is_calendar_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    let shape = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    if !shape {
        return false;
    }
    let number = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'))
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    year >= 1 && (1..=days).contains(&day)
}

/// Index of the largest value; ties go to the earliest index.
pub fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (index, value) in values.iter().enumerate() {
        if *value > values[best] {
            best = index;
        }
    }
    best
}
