//! Release contracts: what each recipient may learn from each answer.
//!
//! A contract names its provider, optionally pins the model, decides whether
//! token usage goes out, and lists the questions it covers. Everything a
//! contract does not list is denied. This module holds the validated, typed
//! form; `config` builds it from the raw file and `release` applies it.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::mechanism::Mechanism;
use crate::wire::Kind;
use crate::workflow::Spec;

/// A validated release contract.
#[derive(Debug, Clone)]
pub struct Contract {
    /// The contract's name (a metrics label and the `X-Release-Contract` value).
    pub name: String,
    /// The provider that answers requests under this contract.
    pub provider: String,
    /// When set, replaces the caller's `model` in the forwarded request.
    pub model: Option<String>,
    /// Whether token usage counts go out.
    pub usage: Usage,
    /// Whether answers carry every field their type requires (`complete`) or only the view's.
    pub shape: Shape,
    /// The covered questions by id; any other question is denied.
    pub questions: BTreeMap<String, QuestionRule>,
    /// Request fields the recipient may see anyway (pointers into `state`):
    /// what the leakage audit's attacker is given besides the released answer.
    pub public: Vec<PublicField>,
    /// The contract's leakage budget, checked offline by `releasegate audit --gate`.
    pub policy: Option<LeakagePolicy>,
    /// System One request headers a caller may send through to the provider
    /// (`forward_headers`); every other caller header stays out.
    pub forward_headers: Vec<ForwardHeader>,
}

/// A System One request header a contract may let through (`forward_headers`), from a
/// fixed list: the provider's opt-in "Danger Zone" switches. Only the value `true` is
/// forwarded, written by the proxy (never the caller's bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ForwardHeader {
    /// `TypeSafe-Danger-Zone-Images: true`: requests with images or box questions.
    DangerZoneImages,
    /// `TypeSafe-Danger-Zone-Long-Context: true`: the 262k context.
    DangerZoneLongContext,
}

impl ForwardHeader {
    /// Every header a contract may forward.
    pub const ALL: [ForwardHeader; 2] = [
        ForwardHeader::DangerZoneImages,
        ForwardHeader::DangerZoneLongContext,
    ];

    /// The header's name as System One documents it.
    pub fn name(self) -> &'static str {
        match self {
            ForwardHeader::DangerZoneImages => "TypeSafe-Danger-Zone-Images",
            ForwardHeader::DangerZoneLongContext => "TypeSafe-Danger-Zone-Long-Context",
        }
    }

    /// The header's name in lower case (HTTP header names are case-insensitive; a
    /// metrics label).
    pub fn lower(self) -> &'static str {
        match self {
            ForwardHeader::DangerZoneImages => "typesafe-danger-zone-images",
            ForwardHeader::DangerZoneLongContext => "typesafe-danger-zone-long-context",
        }
    }

    /// The header a configuration names (any letter case).
    pub fn parse(name: &str) -> Option<ForwardHeader> {
        ForwardHeader::ALL
            .into_iter()
            .find(|header| header.name().eq_ignore_ascii_case(name))
    }

    /// Whether a caller's value switches the header on (`true`, any letter case, with
    /// surrounding blanks); any other value is not forwarded.
    pub fn is_on(value: &[u8]) -> bool {
        value.trim_ascii().eq_ignore_ascii_case(b"true")
    }
}

/// `policy = { keep = [...], hide = [...], max_recovery_gain = 0.05 }` of a contract: what the
/// recipient must receive, what it must not learn, and how much above no output it may learn
/// (`docs/gate.md`). Never read by the proxy at request time.
#[derive(Debug, Clone, PartialEq)]
pub struct LeakagePolicy {
    /// Fields the recipient must receive.
    pub keep: Vec<KeepField>,
    /// What the recipient must not learn.
    pub hide: Vec<Hidden>,
    /// Largest allowed recovery gain over no output (upper interval bound) for what `hide`
    /// names; 0 when `hide` is given without it.
    pub max_recovery_gain: f64,
}

/// One `keep` entry: `FIELD` (every question) or `QUESTION.FIELD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepField {
    /// The question, or None for every question of the contract.
    pub question: Option<String>,
    /// The field.
    pub field: Field,
}

/// A prediction field a `keep` entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The selected class (`choice`; `score`/`noul` answers carry it as their value).
    Choice,
    /// The probability vector.
    Probabilities,
    /// The provider's confidence.
    Confidence,
}

/// What a `hide` entry names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hidden {
    /// The audit's protected secret: which of a pair's two registered hypotheses holds.
    Secret,
}

// === impl Field ===

impl Field {
    /// Parses a field name.
    pub fn parse(name: &str) -> Option<Field> {
        match name {
            "choice" => Some(Field::Choice),
            "probabilities" => Some(Field::Probabilities),
            "confidence" => Some(Field::Confidence),
            _ => None,
        }
    }

    /// The field's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::Choice => "choice",
            Field::Probabilities => "probabilities",
            Field::Confidence => "confidence",
        }
    }
}

// === impl LeakagePolicy ===

impl LeakagePolicy {
    /// `keep` entries the contract's release drops, as `QUESTION.FIELD` (the view does not
    /// release the field, or the mechanism never sends it, e.g. WCPQ `confidence = "drop"`).
    pub fn dropped(&self, contract: &Contract) -> Vec<String> {
        let mut dropped = Vec::new();
        for keep in &self.keep {
            for (id, rule) in &contract.questions {
                if keep.question.as_ref().is_some_and(|q| q != id) {
                    continue;
                }
                if !rule.releases(keep.field) {
                    dropped.push(format!("{id}.{}", keep.field.as_str()));
                }
            }
        }
        dropped
    }
}

/// A request field declared public, for the leakage audit.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicField {
    /// RFC 6901 pointer into the request `state`.
    pub pointer: String,
    /// How the field becomes features.
    pub kind: PublicKind,
    /// Most categorical values or vocabulary tokens fitted on the train split
    /// (default 32 values, 64 tokens).
    #[serde(default)]
    pub max_features: Option<usize>,
}

/// How a public field becomes features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PublicKind {
    /// One indicator per value seen on the train split.
    Categorical,
    /// Counts of lower-cased `[a-z0-9]+` tokens of a vocabulary fitted on the train split.
    Tokens,
}

/// How one question's answers are released.
#[derive(Debug, Clone)]
pub struct QuestionRule {
    /// The canonical class order: probabilities are aligned to it by class id.
    pub classes: Vec<String>,
    /// The question as the contract asks it upstream.
    pub question: Pinned,
    /// Which prediction fields go out.
    pub view: View,
    /// Optional fine-to-coarse relabelling, applied before anything else.
    pub coarsen: Option<Coarsening>,
    /// Released labels whose selection withholds every other probability and the confidence.
    pub withhold: Vec<bool>,
    /// The mechanism that rewrites the probability and confidence fields.
    pub mechanism: Mechanism,
    /// The recipient's frozen downstream workflows over the released labels, when declared.
    pub workflows: Option<Spec>,
    /// The question as it goes upstream with the contract's own text, and its score
    /// legend: the same for every request, built on first use (`wire::check_request`)
    /// from `classes` and `question`, which nothing changes once a contract is built
    /// (`Contract::with_release` changes views and mechanisms only).
    pub(crate) pinned_upstream: PinnedUpstream,
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

/// Whether token usage goes out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Usage {
    /// Forward `usage.input_tokens` and `usage.output_tokens`.
    Keep,
    /// Release `usage` with both counts 0: schema-complete, and nothing of the input size
    /// (token counts reveal it).
    Drop,
    /// Forward `usage.input_tokens` (a function of what went upstream: the contract's
    /// question and the caller's state and assets) and release `output_tokens` as 0: the
    /// output count follows what the model wrote (the fine label it chose, say), which a
    /// coarsening, withholding or mechanism exists to hide.
    Input,
}

/// How released answers are shaped.
///
/// The official clients require every field of an answer's type (choice:
/// `choice`, `probabilities`, `confidence`; score: `score`, `legend`,
/// `probabilities`, `confidence`; noul: `noul`) and accept an answer that is
/// absent from `answers`. The complete shape satisfies them without
/// releasing more: each required field the view does not release is filled
/// with a deterministic function of the fields it does release
/// (`release::shape`), and an answer without a prediction is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// Every required field; fills for the fields the view does not release.
    #[default]
    Complete,
    /// Only the fields the view releases (clients that validate the schema reject it).
    Minimal,
}

/// The fields of an answer a recipient receives (what the view *releases*;
/// the complete shape adds fills computed from them, see `release::shape`).
///
/// | view | choice answers | score answers | noul answers |
/// |---|---|---|---|
/// | `no_output` | nothing | nothing | nothing |
/// | `choice` | `choice` | `score` = selected level, `legend` | `noul` = 0 or 1 (selected outcome) |
/// | `choice_confidence` | + `confidence` | + `confidence` | as `choice` (noul has no confidence) |
/// | `full_probabilities` | `choice`, `probabilities` | `score` = Σ level·p, `legend`, `probabilities` | `noul` = P(true) |
/// | `full_native` | + `confidence` | + `confidence` | as `full_probabilities` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    /// No prediction field.
    NoOutput,
    /// The selected class only.
    Choice,
    /// The selected class and the confidence.
    ChoiceConfidence,
    /// The selected class and the probabilities.
    FullProbabilities,
    /// Everything the provider sent: class, probabilities and confidence.
    FullNative,
}

/// Why a question's releases cannot be certified, if they cannot.
fn not_certifiable_because(rule: &QuestionRule) -> Option<&'static str> {
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

// === impl Contract ===

impl Contract {
    /// The same contract with every question released under `view` and, when
    /// given, `mechanism` (the leakage audit's candidate releases).
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_release(&self, view: View, mechanism: Option<&Mechanism>) -> Contract {
        let mut contract = self.clone();
        for rule in contract.questions.values_mut() {
            rule.view = view;
            if let Some(mechanism) = mechanism {
                rule.mechanism = mechanism.clone();
            }
        }
        contract
    }

    /// The questions no audit or gate certifies: those whose text the caller writes
    /// (`caller_text`: the caller can give any label any meaning), and box questions (the
    /// audit's attackers read class answers only, so what a box reveals is never measured).
    pub fn not_certifiable(&self) -> Vec<&str> {
        self.questions
            .iter()
            .filter(|(_, rule)| not_certifiable_because(rule).is_some())
            .map(|(id, _)| id.as_str())
            .collect()
    }

    /// Each question of [`Contract::not_certifiable`] with the reason, for messages.
    pub fn not_certifiable_reasons(&self) -> Vec<String> {
        self.questions
            .iter()
            .filter_map(|(id, rule)| {
                not_certifiable_because(rule).map(|why| format!("{id} ({why})"))
            })
            .collect()
    }

    /// Whether any mechanism draws fresh randomness per request.
    pub fn needs_fresh_randomness(&self) -> bool {
        self.questions
            .values()
            .any(|rule| rule.mechanism.needs_fresh_randomness())
    }

    /// Whether releasing may be slow enough to belong off the async threads.
    pub fn is_heavy(&self) -> bool {
        self.questions
            .values()
            .any(|rule| rule.mechanism.is_heavy())
    }
}

// === impl QuestionRule ===

impl QuestionRule {
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

// === impl View ===

impl View {
    /// Every view, in order of increasing disclosure.
    pub const ALL: [View; 5] = [
        View::NoOutput,
        View::Choice,
        View::ChoiceConfidence,
        View::FullProbabilities,
        View::FullNative,
    ];

    /// The view's configuration name (also its metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            View::NoOutput => "no_output",
            View::Choice => "choice",
            View::ChoiceConfidence => "choice_confidence",
            View::FullProbabilities => "full_probabilities",
            View::FullNative => "full_native",
        }
    }

    /// Parses a view name.
    pub fn parse(name: &str) -> Option<View> {
        View::ALL.into_iter().find(|view| view.as_str() == name)
    }

    /// Whether the selected class goes out.
    pub fn has_choice(self) -> bool {
        self != View::NoOutput
    }

    /// Whether the probabilities go out.
    pub fn has_probabilities(self) -> bool {
        matches!(self, View::FullProbabilities | View::FullNative)
    }

    /// Whether the confidence goes out.
    pub fn has_confidence(self) -> bool {
        matches!(self, View::ChoiceConfidence | View::FullNative)
    }
}

impl fmt::Display for View {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Shape ===

impl Shape {
    /// The shape's configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Complete => "complete",
            Shape::Minimal => "minimal",
        }
    }

    /// Parses a shape name.
    pub fn parse(name: &str) -> Option<Shape> {
        [Shape::Complete, Shape::Minimal]
            .into_iter()
            .find(|shape| shape.as_str() == name)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// === impl Usage ===

impl Usage {
    /// Whether both token counts go out as received.
    pub fn keeps(self) -> bool {
        self == Usage::Keep
    }

    /// Whether the provider's `input_tokens` goes out (`keep` and `input`).
    pub fn keeps_input(self) -> bool {
        matches!(self, Usage::Keep | Usage::Input)
    }

    /// The configuration's name of this setting.
    pub fn as_str(self) -> &'static str {
        match self {
            Usage::Keep => "keep",
            Usage::Drop => "drop",
            Usage::Input => "input",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_parse_and_expose_fields_as_documented() {
        let fields: Vec<(bool, bool, bool)> = View::ALL
            .iter()
            .map(|v| (v.has_choice(), v.has_probabilities(), v.has_confidence()))
            .collect();
        assert_eq!(
            fields,
            vec![
                (false, false, false),
                (true, false, false),
                (true, false, true),
                (true, true, false),
                (true, true, true),
            ]
        );
        for view in View::ALL {
            assert_eq!(View::parse(view.as_str()), Some(view));
        }
        assert_eq!(View::parse("everything"), None);
    }
}
