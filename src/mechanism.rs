//! Release mechanisms: how the probability and confidence fields are rewritten.
//!
//! A mechanism sees the native answer as a class vector in the released label
//! order and returns the values that may go out. Which of them actually go out
//! is the view's decision, not the mechanism's.

use serde::Deserialize;

/// A native or released answer as a class vector in canonical (or coarse) label order.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassVector {
    /// Index of the selected class.
    pub choice: usize,
    /// One probability per class.
    pub probabilities: Vec<f64>,
    /// The provider's confidence, when it sent one.
    pub confidence: Option<f64>,
}

/// The values a mechanism allows out for one answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Released {
    /// One entry per class; `None` means the class's probability is omitted.
    pub probabilities: Vec<Option<f64>>,
    /// The confidence that may go out, if any.
    pub confidence: Option<f64>,
}

/// A validated mechanism.
#[derive(Debug, Clone, Default)]
pub enum Mechanism {
    /// Release the native values unchanged.
    #[default]
    None,
}

/// The raw `mechanism = {kind = ...}` table of a contract question.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Raw {
    /// Release the native values unchanged.
    #[default]
    None,
}

// === impl Mechanism ===

impl Mechanism {
    /// Validates a raw mechanism table.
    pub fn from_raw(raw: Raw) -> Result<Mechanism, String> {
        match raw {
            Raw::None => Ok(Mechanism::None),
        }
    }

    /// The mechanism's kind (a metrics label).
    pub fn kind(&self) -> &'static str {
        match self {
            Mechanism::None => "none",
        }
    }

    /// Rewrites one answer's probability and confidence fields.
    pub fn apply(&self, native: &ClassVector) -> Released {
        match self {
            Mechanism::None => Released {
                probabilities: native.probabilities.iter().copied().map(Some).collect(),
                confidence: native.confidence,
            },
        }
    }
}
