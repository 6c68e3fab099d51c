//! Release mechanisms: how the probability and confidence fields are rewritten.
//!
//! A mechanism sees the native answer as a class vector in the released label
//! order and returns the values that may go out. Which of them go out is the
//! view's decision: the WCPQ mapper is told the view so that the behaviour
//! signature is computed on exactly the fields that will be released.
//!
//! | kind | what it does | information removed |
//! |---|---|---|
//! | `none` | native values | nothing |
//! | `wcpq` | the first codeword of a frozen codebook with the native behaviour signature (`wcpq`), or under `admissibility = {budget = α}` the first that raises no frozen policy's realized cost by more than α·κ_j; when none is admissible, the contract's [`Fallback`] (what a recipient can tell of it is in its table) | everything the frozen workflows do not act on |
//! | `quantize` | multiples of `step`, largest remainders | sub-step detail |
//! | `top_k` | the `k` largest probabilities, the rest omitted | the tail |
//! | `temperature` | p^(1/τ), renormalized | **nothing**: it is invertible |
//! | `gaussian` | p + N(0, σ²), clipped, renormalized | little: fresh noise **averages away** over repeated queries of the same request; a fixed `seed` makes it reproducible (and then repeated queries see the same noise) |

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::contract::Shape;
use crate::rng::Rng;
use crate::wcpq::{self, Mapper};
use crate::wire::Kind;
use crate::workflow;

mod apply;
mod raw;

pub use raw::{AdmissibilityName, Raw, RawAdmissibility};

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
    /// The answer carries no prediction field at all (WCPQ `fallback = "deny"`).
    pub deny: bool,
}

/// What a mechanism did to one answer (operators see it in metrics, never recipients).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// A mechanism without coverage (none or a baseline).
    Applied,
    /// WCPQ released a codeword.
    Covered {
        /// Position of the codeword in its stage's codebook order.
        codeword_index: usize,
        /// The codebook stage that covered it (a learned codebook's compact codewords, or a
        /// strict codebook: a strict contract's, or a learned codebook's strict stage).
        stage: wcpq::Stage,
    },
    /// WCPQ fell back; the contract's fallback was applied.
    Fallback(wcpq::Reason),
}

/// The result of applying a mechanism.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The values that may go out.
    pub released: Released,
    /// What happened.
    pub outcome: Outcome,
    /// Time spent in the WCPQ mapper (for the latency histogram).
    pub mapping_seconds: Option<f64>,
}

/// Per-request inputs of a mechanism.
pub struct Context<'a> {
    /// The request's `state` (public request features of logistic posteriors), read
    /// on demand: only a mapper whose plans depend on the request reads it.
    pub state: &'a dyn Fn() -> &'a Value,
    /// Fresh randomness for unseeded noise.
    pub rng: &'a mut Rng,
    /// Serializes a candidate exactly as it will be sent (view, withholding,
    /// shape) and reads it back as the recipient does.
    pub roundtrip: &'a dyn crate::wcpq::RoundTrip,
    /// The native answer as the recipient would read it had it gone out
    /// unchanged: WCPQ's D, with the availability that will be released
    /// (computed on demand; `None` if it cannot be read back).
    pub native: &'a dyn Fn() -> Option<workflow::Release>,
    /// Stable bytes identifying the request and question (seeded noise only,
    /// so computed on demand).
    pub identity: &'a dyn Fn() -> Vec<u8>,
    /// The released label positions in the contract's class order (the order the
    /// options went upstream in): quantization ties go to the earlier one.
    pub tie_order: &'a [usize],
    /// The question type (which confidence definition applies).
    pub kind: Kind,
    /// The released labels (score levels for the score confidence).
    pub labels: &'a [String],
}

/// Where a baseline mechanism's released `confidence` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfidenceSource {
    /// Computed from the released vector with the definition the complete shape's fills
    /// use (`release::shape::confidence_of`): the mechanism releases only what it computed.
    #[default]
    Derived,
    /// The provider's confidence at full precision, as the TUPLE-Bench baselines release
    /// it (under Jev's definition it gives the native top probability back exactly): for
    /// audits that replicate the paper, never for serving; `check-config` names it.
    Native,
}

impl ConfidenceSource {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfidenceSource::Derived => "derived",
            ConfidenceSource::Native => "native",
        }
    }
}

/// What WCPQ releases when no codeword is admissible.
///
/// Every fallback has a covered answer's headers. What a recipient can see:
///
/// | fallback | field set and order | values |
/// |---|---|---|
/// | `native` | a covered answer's, in both shapes | the native values instead of a codeword's |
/// | `choice_only` | complete: a covered answer's; minimal: no `probabilities`, no `confidence` | complete: one-hot, confidence 1 |
/// | `deny` | complete: the answer is left out of `answers`; minimal: `type` only | none |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Release the native answer unchanged (keeps the utility guarantee).
    Native,
    /// Release the choice only.
    ChoiceOnly,
    /// Release no prediction field.
    Deny,
}

/// The error of a WCPQ mechanism that does not state its fallback.
pub const FALLBACK_REQUIRED: &str = "a wcpq mechanism must state its `fallback`, the release of an answer no codeword covers: \
     \"native\" (the native answer: keeps every workflow's decisions, and reveals the residual scores WCPQ exists to hide), \
     \"choice_only\" (the choice alone, one-hot with confidence 1: reveals the choice only, workflows that read scores may decide otherwise), \
     or \"deny\" (no prediction: the answer is left out, which a typed client must handle)";

// === impl Fallback ===

impl Fallback {
    /// The fallback's configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Native => "native",
            Fallback::ChoiceOnly => "choice_only",
            Fallback::Deny => "deny",
        }
    }

    /// What a recipient can tell of this fallback in `shape`, compared with a
    /// covered answer (for `check-config`).
    pub fn disclosure(self, shape: Shape) -> &'static str {
        match (self, shape) {
            (Fallback::Native, _) => {
                "same headers, fields and field order as a covered answer; only the values differ \
                 (native values instead of a codeword's)"
            }
            (Fallback::ChoiceOnly, Shape::Complete) => {
                "same headers, fields and field order as a covered answer; the values differ \
                 (probabilities one-hot on the choice, confidence 1)"
            }
            (Fallback::ChoiceOnly, Shape::Minimal) => {
                "visible: same headers, but the probabilities and the confidence are absent"
            }
            (Fallback::Deny, Shape::Complete) => {
                "visible: same headers, but the answer is left out of `answers`"
            }
            (Fallback::Deny, Shape::Minimal) => {
                "visible: same headers, but the answer carries only `type`"
            }
        }
    }

    /// What the fallback does to the official typed clients, when it breaks them (for
    /// `check-config` and the docs): `deny` leaves answers out or incomplete.
    pub fn typed_clients(self, shape: Shape) -> Option<&'static str> {
        match (self, shape) {
            (Fallback::Deny, Shape::Complete) => Some(
                "a denied answer is missing from `answers`: Python `response.answers[id]` raises \
                 KeyError, the JS SDK's `answers[id]` is undefined (reading a field throws \
                 TypeError); check for the id before reading it, or use fallback \"choice_only\"",
            ),
            _ => None,
        }
    }
}

/// Whether WCPQ releases the codeword's confidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfidenceMode {
    /// Release the codeword's confidence (when the view has one).
    #[default]
    Codeword,
    /// Never release a confidence.
    Drop,
}

impl ConfidenceMode {
    /// The configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            ConfidenceMode::Codeword => "codeword",
            ConfidenceMode::Drop => "drop",
        }
    }
}

/// A validated WCPQ mechanism.
#[derive(Debug)]
pub struct WcpqMechanism {
    /// The strict mapper (codebook + frozen workflows).
    pub mapper: Mapper,
    /// What to do when nothing is admissible.
    pub fallback: Fallback,
    /// Whether the confidence goes out.
    pub confidence: ConfidenceMode,
    /// The codebook artifact's SHA-256 (a metrics label).
    pub codebook_sha256: String,
}

/// A validated mechanism.
#[derive(Debug, Clone, Default)]
pub enum Mechanism {
    /// Release the native values unchanged.
    #[default]
    None,
    /// The WCPQ strict mapper.
    Wcpq(Arc<WcpqMechanism>),
    /// Quantize to multiples of `step`.
    Quantize {
        /// Grid step.
        step: f64,
        /// Where the released confidence comes from.
        confidence: ConfidenceSource,
    },
    /// Keep the `k` largest probabilities.
    TopK {
        /// How many.
        k: usize,
        /// Where the released confidence comes from.
        confidence: ConfidenceSource,
    },
    /// Temperature scaling (invertible).
    Temperature {
        /// τ.
        tau: f64,
        /// Where the released confidence comes from.
        confidence: ConfidenceSource,
    },
    /// Additive Gaussian noise.
    Gaussian {
        /// σ.
        sigma: f64,
        /// Reproducible noise per request and question when set.
        seed: Option<u64>,
        /// Where the released confidence comes from.
        confidence: ConfidenceSource,
    },
}

// === impl Mechanism ===

impl Mechanism {
    /// The mechanism's kind (a metrics label).
    pub fn kind(&self) -> &'static str {
        match self {
            Mechanism::None => "none",
            Mechanism::Wcpq(_) => "wcpq",
            Mechanism::Quantize { .. } => "quantize",
            Mechanism::TopK { .. } => "top_k",
            Mechanism::Temperature { .. } => "temperature",
            Mechanism::Gaussian { .. } => "gaussian",
        }
    }

    /// Whether applying it may take long enough to belong off the async threads
    /// (WCPQ with a request-dependent posterior scans the codebook per answer).
    pub fn is_heavy(&self) -> bool {
        matches!(self, Mechanism::Wcpq(w) if w.mapper.spec().posterior_estimator().is_request_dependent())
    }

    /// Whether it draws fresh randomness per request.
    pub fn needs_fresh_randomness(&self) -> bool {
        matches!(self, Mechanism::Gaussian { seed: None, .. })
    }

    /// Whether it withholds the confidence even where the view releases one
    /// (WCPQ with `confidence = "drop"`).
    pub fn drops_confidence(&self) -> bool {
        matches!(self, Mechanism::Wcpq(w) if w.confidence == ConfidenceMode::Drop)
    }

    /// Where a baseline's released confidence comes from (`None` for `none` and WCPQ).
    pub fn confidence_source(&self) -> Option<ConfidenceSource> {
        match self {
            Mechanism::None | Mechanism::Wcpq(_) => None,
            Mechanism::Quantize { confidence, .. }
            | Mechanism::TopK { confidence, .. }
            | Mechanism::Temperature { confidence, .. }
            | Mechanism::Gaussian { confidence, .. } => Some(*confidence),
        }
    }
}
