//! An answer's fields as read, and the class vector `parse_answer` makes of them.

use super::Expected;
use crate::mechanism::ClassVector;
use crate::wire::Kind;
use crate::wire::answer::{argmax, sum_is_close};

/// The fields of an answer its class vector is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    Type,
    Choice,
    Score,
    Confidence,
    Probabilities,
}

impl Field {
    /// Each field by its name, the most frequent first.
    pub(super) const NAMES: [(Field, &'static str); 5] = [
        (Field::Type, "type"),
        (Field::Choice, "choice"),
        (Field::Confidence, "confidence"),
        (Field::Probabilities, "probabilities"),
        (Field::Score, "score"),
    ];

    pub(super) fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The fields of one answer, as read.
pub(super) struct Fields<'a> {
    /// The fields read so far, one bit each ([`Field::bit`]).
    pub(super) seen: u8,
    pub(super) kind: Option<&'a str>,
    /// The choice's class index, or its label where it is not plainly one of them.
    pub(super) choice: Option<Choice<'a>>,
    pub(super) score: bool,
    pub(super) confidence: Option<f64>,
    pub(super) probabilities: Option<Vec<f64>>,
}

/// An answer's `choice` as read.
pub(super) enum Choice<'a> {
    Class(usize),
    Label(&'a str),
}

/// The class vector of an answer's `fields`, as `parse_answer` makes it; `None` where it
/// refuses the answer.
pub(super) fn vector(question: &Expected<'_>, fields: Fields<'_>) -> Option<ClassVector> {
    if fields.kind? != question.kind.as_str() {
        return None;
    }
    let probabilities = fields.probabilities?;
    let choice = match question.kind {
        Kind::Choice => {
            let choice = match fields.choice? {
                Choice::Class(class) => class,
                Choice::Label(label) => question.classes.iter().position(|c| c == label)?,
            };
            let top = *probabilities.get(choice)?;
            if probabilities.iter().any(|&p| p > top) {
                return None;
            }
            choice
        }
        _ => {
            if !fields.score {
                return None;
            }
            argmax(&probabilities)
        }
    };
    sum_is_close(&probabilities).then_some(ClassVector {
        choice,
        probabilities,
        confidence: fields.confidence,
    })
}
