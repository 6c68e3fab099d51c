//! What of an answer goes out: the view's fields (`View`), the shape that completes them
//! (`Shape`), and the token counts (`Usage`).

use std::fmt;

use serde::Deserialize;

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
