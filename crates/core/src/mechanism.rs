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

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Deserialize;
use serde_json::Value;

use crate::baseline;
use crate::codebook::Codebook;
use crate::contract::Shape;
use crate::release::shape;
use crate::rng::Rng;
use crate::wcpq::{self, Mapper};
use crate::wire::Kind;
use crate::workflow::{self, Spec};

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
    pub roundtrip: &'a dyn Fn(&workflow::Release) -> Option<workflow::Release>,
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

/// The raw `mechanism = {kind = ...}` table of a contract question.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Raw {
    /// Release the native values unchanged.
    #[default]
    None,
    /// `{kind = "wcpq", codebook = "PATH", fallback = "native", confidence = "codeword",
    /// admissibility = "strict"}`.
    Wcpq {
        /// Codebook artifact path (relative to the configuration file).
        codebook: String,
        /// `"strict"` (default) or `{budget = α}`.
        #[serde(default)]
        admissibility: RawAdmissibility,
        /// Required: what an answer no codeword covers becomes (no default: each option
        /// reveals something different, [`FALLBACK_REQUIRED`]).
        #[serde(default)]
        fallback: Option<Fallback>,
        /// Default `codeword`.
        #[serde(default)]
        confidence: ConfidenceMode,
    },
    /// `{kind = "quantize", step = 0.1}`.
    Quantize {
        /// Default 0.1.
        #[serde(default = "default_step")]
        step: f64,
        /// Default `derived`.
        #[serde(default)]
        confidence: ConfidenceSource,
    },
    /// `{kind = "top_k", k = 2}`.
    TopK {
        /// Default 2.
        #[serde(default = "default_k")]
        k: usize,
        /// Default `derived`.
        #[serde(default)]
        confidence: ConfidenceSource,
    },
    /// `{kind = "temperature", tau = 2}`.
    Temperature {
        /// Default 2.
        #[serde(default = "default_tau")]
        tau: f64,
        /// Default `derived`.
        #[serde(default)]
        confidence: ConfidenceSource,
    },
    /// `{kind = "gaussian", sigma = 0.05, seed = 7}`.
    Gaussian {
        /// Default 0.05.
        #[serde(default = "default_sigma")]
        sigma: f64,
        /// Optional seed for reproducible replays.
        #[serde(default)]
        seed: Option<u64>,
        /// Default `derived`.
        #[serde(default)]
        confidence: ConfidenceSource,
    },
}

/// The raw `admissibility` of a WCPQ mechanism: `"strict"` or `{budget = α}`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum RawAdmissibility {
    /// `"strict"`.
    Named(AdmissibilityName),
    /// `{budget = α}`.
    Budget {
        /// α ≥ 0, a fraction of each policy's wrong-route cost κ_j.
        budget: f64,
    },
}

/// The only named admissibility.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdmissibilityName {
    /// The strict rule.
    Strict,
}

impl Default for RawAdmissibility {
    fn default() -> RawAdmissibility {
        RawAdmissibility::Named(AdmissibilityName::Strict)
    }
}

impl RawAdmissibility {
    /// The validated rule.
    pub fn validate(self) -> Result<wcpq::Admissibility, String> {
        match self {
            RawAdmissibility::Named(AdmissibilityName::Strict) => Ok(wcpq::Admissibility::Strict),
            RawAdmissibility::Budget { budget } if budget.is_finite() && budget >= 0.0 => {
                Ok(wcpq::Admissibility::Budget(budget))
            }
            RawAdmissibility::Budget { budget } => Err(format!(
                "admissibility budget must be a finite number >= 0, got {budget}"
            )),
        }
    }
}

// === impl Raw ===

impl Raw {
    /// A baseline mechanism from its command-line form `kind[=value]` (`quantize[=step]`,
    /// `top_k[=k]`, `temperature[=tau]`, `gaussian[=sigma]`, seeded with `seed`), with the
    /// same defaults as the configuration's tables. `k` must be a whole number.
    pub fn from_spec(spec: &str, seed: u64) -> Result<Raw, String> {
        let (kind, value) = match spec.split_once('=') {
            Some((kind, value)) => {
                let value: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("`{spec}`: the parameter must be a number"))?;
                (kind.trim(), Some(value))
            }
            None => (spec.trim(), None),
        };
        let confidence = ConfidenceSource::Derived;
        Ok(match kind {
            "quantize" => Raw::Quantize {
                step: value.unwrap_or_else(default_step),
                confidence,
            },
            "top_k" => Raw::TopK {
                k: match value {
                    None => default_k(),
                    Some(k) if k.fract() == 0.0 && (0.0..=1e9).contains(&k) => k as usize,
                    Some(k) => return Err(format!("`{spec}`: k must be a whole number, got {k}")),
                },
                confidence,
            },
            "temperature" => Raw::Temperature {
                tau: value.unwrap_or_else(default_tau),
                confidence,
            },
            "gaussian" => Raw::Gaussian {
                sigma: value.unwrap_or_else(default_sigma),
                seed: Some(seed),
                confidence,
            },
            other => {
                return Err(format!(
                    "unknown mechanism `{other}` (quantize, top_k, temperature, gaussian)"
                ));
            }
        })
    }
}

/// The admissibility a codebook serves a contract under: the contract's own, except that a
/// strict codebook written by `build-codebook --budget α`'s guard (the bounded codebook was
/// not shown to leak less) serves a contract of budget α strictly, as the strict codebook it is.
fn guarded_admissibility(
    admissibility: wcpq::Admissibility,
    artifact: &Codebook,
) -> wcpq::Admissibility {
    match (admissibility, artifact.learned(), artifact.guard()) {
        (wcpq::Admissibility::Budget(alpha), None, Some(guard))
            if guard.chosen == crate::codebook::Chosen::Strict && guard.budget == alpha =>
        {
            wcpq::Admissibility::Strict
        }
        _ => admissibility,
    }
}

fn default_step() -> f64 {
    0.1
}
fn default_k() -> usize {
    2
}
fn default_tau() -> f64 {
    2.0
}
fn default_sigma() -> f64 {
    0.05
}

// === impl Mechanism ===

impl Mechanism {
    /// Validates a raw mechanism table for a question with `classes` released
    /// labels and (for WCPQ) its frozen workflows; paths resolve against `base_dir`.
    pub fn from_raw(
        raw: Raw,
        classes: &[String],
        workflows: Option<&Spec>,
        base_dir: &Path,
        read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
    ) -> Result<Mechanism, String> {
        match raw {
            Raw::None => Ok(Mechanism::None),
            Raw::Quantize { step, confidence } if baseline::step_nanos(step).is_some() => {
                Ok(Mechanism::Quantize { step, confidence })
            }
            Raw::Quantize { step, .. } => Err(format!(
                "step must be a decimal in [1e-9, 1] with at most 9 decimal places, got {step}"
            )),
            Raw::TopK { k, confidence } if k >= 1 => Ok(Mechanism::TopK { k, confidence }),
            Raw::TopK { .. } => Err("k must be at least 1".to_string()),
            Raw::Temperature { tau, confidence } if tau.is_finite() && tau > 0.0 => {
                Ok(Mechanism::Temperature { tau, confidence })
            }
            Raw::Temperature { tau, .. } => {
                Err(format!("tau must be a positive number, got {tau}"))
            }
            Raw::Gaussian {
                sigma,
                seed,
                confidence,
            } if sigma.is_finite() && sigma >= 0.0 => Ok(Mechanism::Gaussian {
                sigma,
                seed,
                confidence,
            }),
            Raw::Gaussian { sigma, .. } => {
                Err(format!("sigma must be a non-negative number, got {sigma}"))
            }
            Raw::Wcpq {
                codebook,
                admissibility,
                fallback,
                confidence,
            } => {
                let fallback = fallback.ok_or_else(|| FALLBACK_REQUIRED.to_string())?;
                let admissibility = admissibility.validate()?;
                let spec = workflows.ok_or_else(|| {
                    "wcpq needs the question's frozen workflows: add a `workflows` table"
                        .to_string()
                })?;
                let path = base_dir.join(&codebook);
                let bytes = read(&path)
                    .map_err(|error| format!("cannot read codebook {}: {error}", path.display()))?;
                let artifact = Codebook::from_json(&bytes)
                    .map_err(|error| format!("codebook {}: {error}", path.display()))?;
                artifact.check_matches(spec, classes).map_err(|error| {
                    format!(
                        "codebook {} does not match this question: {error}",
                        path.display()
                    )
                })?;
                let admissibility = guarded_admissibility(admissibility, &artifact);
                match (admissibility, artifact.learned()) {
                    (wcpq::Admissibility::Strict, None) => {}
                    (wcpq::Admissibility::Budget(alpha), Some(learned))
                        if alpha == learned.budget => {}
                    (wcpq::Admissibility::Strict, Some(learned)) => {
                        return Err(format!(
                            "codebook {} was learned for admissibility budget {}; a strict contract needs a strict codebook",
                            path.display(),
                            learned.budget
                        ));
                    }
                    (wcpq::Admissibility::Budget(alpha), learned) => {
                        return Err(format!(
                            "admissibility budget {alpha} needs a codebook learned for that budget (`build-codebook --budget {alpha}`); codebook {} is {}",
                            path.display(),
                            learned.map_or_else(
                                || "a strict codebook".to_string(),
                                |l| format!("learned for budget {}", l.budget)
                            )
                        ));
                    }
                }
                let mapper = Mapper::with_admissibility(artifact, spec.clone(), admissibility)
                    .map_err(|error| format!("codebook {}: {error}", path.display()))?;
                Ok(Mechanism::Wcpq(Arc::new(WcpqMechanism {
                    mapper,
                    fallback,
                    confidence,
                    codebook_sha256: workflow::sha256_hex(&bytes),
                })))
            }
        }
    }

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

    /// Rewrites one answer's probability and confidence fields. `none` releases the
    /// vector it is given (the native one, or the coarse one with its own confidence); a
    /// baseline releases its vector in the fixed decimal form (`shape::fixed`) and a
    /// confidence computed from that vector (`ConfidenceSource::Derived`), never the
    /// native one unless the contract says `confidence = "native"`.
    pub fn apply(&self, native: &ClassVector, ctx: &mut Context<'_>) -> Applied {
        let kind = ctx.kind;
        let labels = ctx.labels;
        // A baseline that releases no probability (it failed closed) releases no confidence either.
        let plain = |probabilities: Vec<Option<f64>>, source: ConfidenceSource| {
            let any = probabilities.iter().any(Option::is_some);
            let confidence = match source {
                ConfidenceSource::Native => native.confidence,
                ConfidenceSource::Derived => {
                    (kind != Kind::Noul).then(|| shape::confidence_of(kind, labels, &probabilities))
                }
            };
            Applied {
                released: Released {
                    confidence: confidence.filter(|_| any),
                    probabilities,
                    deny: false,
                },
                outcome: Outcome::Applied,
                mapping_seconds: None,
            }
        };
        let all = |values: Vec<f64>| {
            values
                .into_iter()
                .map(|p| Some(shape::fixed(p)))
                .collect::<Vec<_>>()
        };
        let p = &native.probabilities;
        match self {
            Mechanism::None => plain(
                p.iter().copied().map(Some).collect(),
                ConfidenceSource::Native,
            ),
            // Baseline errors only arise from invalid parameters, which validation rejects;
            // fail closed to "the choice only" rather than release native values.
            Mechanism::Quantize { step, confidence } => plain(
                baseline::quantize(p, *step, ctx.tie_order)
                    .map(all)
                    .unwrap_or_else(|_| vec![None; p.len()]),
                *confidence,
            ),
            Mechanism::TopK { k, confidence } => plain(
                baseline::top_k(p, *k)
                    .into_iter()
                    .map(|entry| entry.map(shape::fixed))
                    .collect(),
                *confidence,
            ),
            Mechanism::Temperature { tau, confidence } => plain(
                baseline::temperature(p, *tau)
                    .map(all)
                    .unwrap_or_else(|_| vec![None; p.len()]),
                *confidence,
            ),
            Mechanism::Gaussian {
                sigma,
                seed,
                confidence,
            } => {
                let noisy = match seed {
                    Some(seed) => {
                        let mut material = seed.to_le_bytes().to_vec();
                        material.extend_from_slice(&(ctx.identity)());
                        baseline::gaussian(p, *sigma, &mut Rng::from_bytes(&material))
                    }
                    None => baseline::gaussian(p, *sigma, ctx.rng),
                };
                plain(
                    noisy.map(all).unwrap_or_else(|_| vec![None; p.len()]),
                    *confidence,
                )
            }
            Mechanism::Wcpq(wcpq) => wcpq.apply(native, ctx),
        }
    }
}

// === impl WcpqMechanism ===

impl WcpqMechanism {
    fn apply(&self, native: &ClassVector, ctx: &mut Context<'_>) -> Applied {
        // A posterior that does not depend on the request never reads the state (its
        // public features are none): null stands in for it. Read before the clock
        // starts, as it was when every request's state was read with the request.
        static UNREAD: Value = Value::Null;
        let state = if self.mapper.reads_state() {
            (ctx.state)()
        } else {
            &UNREAD
        };
        let started = Instant::now();
        // D is the native answer as the recipient would read it: the fields the
        // contract releases (view, withholding, a dropped confidence), read back
        // from the bytes that would go out.
        let d = (ctx.native)();
        let outcome = match &d {
            Some(d) => self.mapper.map(d, state, ctx.roundtrip),
            None => wcpq::Outcome::Fallback(wcpq::Reason::InvalidNative(
                workflow::InvalidRelease::Choice,
            )),
        };
        let mapping_seconds = Some(started.elapsed().as_secs_f64());
        let n = native.probabilities.len();
        let (released, outcome) = match outcome {
            wcpq::Outcome::Covered {
                release,
                codeword_index,
                stage,
            } => (
                Released {
                    probabilities: release
                        .probabilities
                        .map_or_else(|| vec![None; n], |p| p.into_iter().map(Some).collect()),
                    confidence: release.confidence,
                    deny: false,
                },
                Outcome::Covered {
                    codeword_index,
                    stage,
                },
            ),
            wcpq::Outcome::Fallback(reason) => {
                let released = match self.fallback {
                    Fallback::Native => Released {
                        probabilities: d
                            .as_ref()
                            .and_then(|d| d.probabilities.clone())
                            .map_or_else(|| vec![None; n], |p| p.into_iter().map(Some).collect()),
                        confidence: d.as_ref().and_then(|d| d.confidence),
                        deny: false,
                    },
                    Fallback::ChoiceOnly => Released {
                        probabilities: vec![None; n],
                        confidence: None,
                        deny: false,
                    },
                    Fallback::Deny => Released {
                        probabilities: vec![None; n],
                        confidence: None,
                        deny: true,
                    },
                };
                (released, Outcome::Fallback(reason))
            }
        };
        Applied {
            released,
            outcome,
            mapping_seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_mechanisms_take_the_configuration_defaults() {
        assert!(
            matches!(Raw::from_spec("quantize", 1), Ok(Raw::Quantize { step, .. }) if step == default_step())
        );
        assert!(matches!(Raw::from_spec("top_k", 1), Ok(Raw::TopK { k, .. }) if k == default_k()));
        assert!(matches!(
            Raw::from_spec(" top_k = 3 ", 1),
            Ok(Raw::TopK { k: 3, .. })
        ));
        assert!(
            matches!(Raw::from_spec("temperature", 1), Ok(Raw::Temperature { tau, .. }) if tau == default_tau())
        );
        assert!(matches!(
            Raw::from_spec("gaussian=0.2", 9),
            Ok(Raw::Gaussian { sigma, seed: Some(9), .. }) if sigma == 0.2
        ));
    }

    #[test]
    fn a_fractional_or_unknown_command_line_mechanism_is_an_error() {
        for spec in ["top_k=2.5", "top_k=-1", "top_k=nan", "quantize=x", "median"] {
            assert!(Raw::from_spec(spec, 1).is_err(), "{spec}");
        }
    }
}
