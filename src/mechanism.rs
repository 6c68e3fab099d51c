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
//! | `wcpq` | the first codeword of a frozen codebook with the native behaviour signature (`wcpq`) | everything the frozen workflows do not act on |
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
use crate::contract::View;
use crate::rng::Rng;
use crate::wcpq::{self, Mapper};
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
        /// Position of the codeword in the codebook order.
        codeword_index: usize,
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
    /// The request's `state` (public request features of logistic posteriors).
    pub state: &'a Value,
    /// Fresh randomness for unseeded noise.
    pub rng: &'a mut Rng,
    /// Serializes a candidate exactly as it will be sent and parses it back.
    pub roundtrip: &'a dyn Fn(&workflow::Release) -> Option<workflow::Release>,
    /// Stable bytes identifying the request and question (seeded noise only,
    /// so computed on demand).
    pub identity: &'a dyn Fn() -> Vec<u8>,
    /// The released label positions in transmitted order (`wire::transmitted_order`):
    /// quantization ties go to the earlier one.
    pub tie_order: &'a [usize],
}

/// What WCPQ releases when no codeword is admissible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Release the native answer unchanged (keeps the utility guarantee).
    #[default]
    Native,
    /// Release the choice only.
    ChoiceOnly,
    /// Release no prediction field.
    Deny,
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
    },
    /// Keep the `k` largest probabilities.
    TopK {
        /// How many.
        k: usize,
    },
    /// Temperature scaling (invertible).
    Temperature {
        /// τ.
        tau: f64,
    },
    /// Additive Gaussian noise.
    Gaussian {
        /// σ.
        sigma: f64,
        /// Reproducible noise per request and question when set.
        seed: Option<u64>,
    },
}

/// The raw `mechanism = {kind = ...}` table of a contract question.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Raw {
    /// Release the native values unchanged.
    #[default]
    None,
    /// `{kind = "wcpq", codebook = "PATH", fallback = "native", confidence = "codeword"}`.
    Wcpq {
        /// Codebook artifact path (relative to the configuration file).
        codebook: String,
        /// Default `native`.
        #[serde(default)]
        fallback: Fallback,
        /// Default `codeword`.
        #[serde(default)]
        confidence: ConfidenceMode,
    },
    /// `{kind = "quantize", step = 0.1}`.
    Quantize {
        /// Default 0.1.
        #[serde(default = "default_step")]
        step: f64,
    },
    /// `{kind = "top_k", k = 2}`.
    TopK {
        /// Default 2.
        #[serde(default = "default_k")]
        k: usize,
    },
    /// `{kind = "temperature", tau = 2}`.
    Temperature {
        /// Default 2.
        #[serde(default = "default_tau")]
        tau: f64,
    },
    /// `{kind = "gaussian", sigma = 0.05, seed = 7}`.
    Gaussian {
        /// Default 0.05.
        #[serde(default = "default_sigma")]
        sigma: f64,
        /// Optional seed for reproducible replays.
        #[serde(default)]
        seed: Option<u64>,
    },
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
            Raw::Quantize { step } if baseline::step_nanos(step).is_some() => {
                Ok(Mechanism::Quantize { step })
            }
            Raw::Quantize { step } => Err(format!(
                "step must be a decimal in [1e-9, 1] with at most 9 decimal places, got {step}"
            )),
            Raw::TopK { k } if k >= 1 => Ok(Mechanism::TopK { k }),
            Raw::TopK { .. } => Err("k must be at least 1".to_string()),
            Raw::Temperature { tau } if tau.is_finite() && tau > 0.0 => {
                Ok(Mechanism::Temperature { tau })
            }
            Raw::Temperature { tau } => Err(format!("tau must be a positive number, got {tau}")),
            Raw::Gaussian { sigma, seed } if sigma.is_finite() && sigma >= 0.0 => {
                Ok(Mechanism::Gaussian { sigma, seed })
            }
            Raw::Gaussian { sigma, .. } => {
                Err(format!("sigma must be a non-negative number, got {sigma}"))
            }
            Raw::Wcpq {
                codebook,
                fallback,
                confidence,
            } => {
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
                let mapper = Mapper::new(artifact, spec.clone())
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

    /// Rewrites one answer's probability and confidence fields for `view`.
    pub fn apply(&self, native: &ClassVector, view: View, ctx: &mut Context<'_>) -> Applied {
        let plain = |probabilities: Vec<Option<f64>>| Applied {
            released: Released {
                probabilities,
                confidence: native.confidence,
                deny: false,
            },
            outcome: Outcome::Applied,
            mapping_seconds: None,
        };
        let all = |values: Vec<f64>| values.into_iter().map(Some).collect::<Vec<_>>();
        let p = &native.probabilities;
        match self {
            Mechanism::None => plain(all(p.clone())),
            // Baseline errors only arise from invalid parameters, which validation rejects;
            // fail closed to "no probabilities" rather than release native values.
            Mechanism::Quantize { step } => plain(
                baseline::quantize(p, *step, ctx.tie_order)
                    .map(all)
                    .unwrap_or_else(|_| vec![None; p.len()]),
            ),
            Mechanism::TopK { k } => plain(baseline::top_k(p, *k)),
            Mechanism::Temperature { tau } => plain(
                baseline::temperature(p, *tau)
                    .map(all)
                    .unwrap_or_else(|_| vec![None; p.len()]),
            ),
            Mechanism::Gaussian { sigma, seed } => {
                let noisy = match seed {
                    Some(seed) => {
                        let mut material = seed.to_le_bytes().to_vec();
                        material.extend_from_slice(&(ctx.identity)());
                        baseline::gaussian(p, *sigma, &mut Rng::from_bytes(&material))
                    }
                    None => baseline::gaussian(p, *sigma, ctx.rng),
                };
                plain(noisy.map(all).unwrap_or_else(|_| vec![None; p.len()]))
            }
            Mechanism::Wcpq(wcpq) => wcpq.apply(native, view, ctx),
        }
    }
}

// === impl WcpqMechanism ===

impl WcpqMechanism {
    fn apply(&self, native: &ClassVector, view: View, ctx: &mut Context<'_>) -> Applied {
        // D is the native answer restricted to the fields that will be released.
        let d = workflow::Release {
            choice: native.choice,
            probabilities: view
                .has_probabilities()
                .then(|| native.probabilities.clone()),
            confidence: native
                .confidence
                .filter(|_| view.has_confidence() && self.confidence == ConfidenceMode::Codeword),
        };
        let started = Instant::now();
        let outcome = self.mapper.map(&d, ctx.state, ctx.roundtrip);
        let mapping_seconds = Some(started.elapsed().as_secs_f64());
        let n = native.probabilities.len();
        let (released, outcome) = match outcome {
            wcpq::Outcome::Covered {
                release,
                codeword_index,
            } => (
                Released {
                    probabilities: release
                        .probabilities
                        .map_or_else(|| vec![None; n], |p| p.into_iter().map(Some).collect()),
                    confidence: release.confidence,
                    deny: false,
                },
                Outcome::Covered { codeword_index },
            ),
            wcpq::Outcome::Fallback(reason) => {
                let released = match self.fallback {
                    Fallback::Native => Released {
                        probabilities: d
                            .probabilities
                            .map_or_else(|| vec![None; n], |p| p.into_iter().map(Some).collect()),
                        confidence: d.confidence,
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
