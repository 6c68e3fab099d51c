//! One question's release rule (`QuestionRule`): the question the contract asks
//! (`Pinned`), its coarsening, view, withholding, mechanism and workflows.

use serde_json::Value;

use super::{Field, View};
use crate::mechanism::Mechanism;
use crate::wire::Kind;
use crate::workflow::Spec;

/// How one question's answers are released.
#[derive(Debug, Clone)]
pub struct QuestionRule {
    /// The canonical class order: probabilities are aligned to it by class id.
    pub(crate) classes: Vec<String>,
    /// Whether every class label is plain string content (`wire::json::is_plain`): a
    /// provider's answer then names each class with the label's own bytes, which
    /// `wire::read_answers` compares without reading the string first.
    pub(crate) plain_classes: bool,
    /// The question as the contract asks it upstream.
    pub(crate) question: Pinned,
    /// Which prediction fields go out.
    pub(crate) view: View,
    /// Optional fine-to-coarse relabelling, applied before anything else.
    pub(crate) coarsen: Option<Coarsening>,
    /// Released labels whose selection withholds every other probability and the confidence.
    pub(crate) withhold: Vec<bool>,
    /// The mechanism that rewrites the probability and confidence fields.
    pub(crate) mechanism: Mechanism,
    /// The recipient's frozen downstream workflows over the released labels, when declared.
    pub(crate) workflows: Option<Spec>,
    /// The question as it goes upstream with the contract's own text, and its score
    /// legend: the same for every request, built on first use (`wire::check_request`)
    /// from `classes` and `question`, which nothing changes once a contract is built
    /// (`Contract::with_release` changes views and mechanisms only).
    pub(crate) pinned_upstream: PinnedUpstream,
    /// The mechanism's WCPQ codewords as released answers, each written once on its
    /// first release (`release::Codewords`); empty in a clone.
    pub(crate) codewords: crate::release::Codewords,
}

/// A question's upstream form and score legend, built once (see `QuestionRule`).
pub(crate) type PinnedUpstream = std::sync::OnceLock<(
    std::sync::Arc<crate::wire::UpstreamQuestion>,
    Option<std::sync::Arc<serde_json::Map<String, Value>>>,
)>;

/// The question a contract asks: its type and its text. The proxy sends exactly this
/// upstream, whatever the caller wrote (`wire::check_request`): the model reads the text,
/// so whoever writes it decides what each label means. A request may leave the text out
/// or send the same text; any other text is refused, unless `caller_text` lets the
/// caller's through (an explicit risk: such a question is not certifiable).
#[derive(Debug, Clone, PartialEq)]
pub struct Pinned {
    /// The question type (`type`, or what the classes imply).
    pub kind: Kind,
    /// `instructions` (System One content: a string, an object or an array).
    pub instructions: Option<Value>,
    /// One description per class in `classes` order; `None`: interpreted by its name alone.
    pub descriptions: Vec<Option<Value>>,
    /// The caller's instructions and descriptions go upstream instead of the contract's.
    pub caller_text: bool,
}

/// A fine-to-coarse relabelling of a question's classes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coarsening {
    /// The released (coarse) labels, in order of first appearance in the canonical order.
    pub labels: Vec<String>,
    /// For each canonical class index, the index of its released label.
    pub map: Vec<usize>,
}

/// Why a question's releases cannot be certified, if they cannot.
pub(super) fn not_certifiable_because(rule: &QuestionRule) -> Option<&'static str> {
    if rule.question.caller_text {
        Some("the caller writes its text: caller_text")
    } else if rule.question.kind == crate::wire::Kind::Box {
        Some(
            "a box question: the audit does not read box answers, so what they reveal is not measured",
        )
    } else {
        None
    }
}

// === impl QuestionRule ===

impl QuestionRule {
    /// The canonical class order: probabilities are aligned to it by class id.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The question as the contract asks it upstream.
    pub fn question(&self) -> &Pinned {
        &self.question
    }

    /// Which prediction fields go out.
    pub fn view(&self) -> View {
        self.view
    }

    /// Optional fine-to-coarse relabelling, applied before anything else.
    pub fn coarsen(&self) -> Option<&Coarsening> {
        self.coarsen.as_ref()
    }

    /// Released labels whose selection withholds every other probability and the confidence.
    pub fn withhold(&self) -> &[bool] {
        &self.withhold
    }

    /// The mechanism that rewrites the probability and confidence fields.
    pub fn mechanism(&self) -> &Mechanism {
        &self.mechanism
    }

    /// The recipient's frozen downstream workflows over the released labels, when declared.
    pub fn workflows(&self) -> Option<&Spec> {
        self.workflows.as_ref()
    }

    /// Whether answers under this rule carry `field` (before any WCPQ fallback).
    pub fn releases(&self, field: Field) -> bool {
        match field {
            Field::Choice => self.view.has_choice(),
            Field::Probabilities => self.view.has_probabilities(),
            Field::Confidence => self.view.has_confidence() && !self.mechanism.drops_confidence(),
        }
    }

    /// The labels answers are released under (coarse labels when coarsened).
    pub fn released_labels(&self) -> &[String] {
        match &self.coarsen {
            Some(coarsening) => &coarsening.labels,
            None => &self.classes,
        }
    }
}
