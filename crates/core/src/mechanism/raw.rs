//! A question's `mechanism` table as configured (or given on the command line), and its
//! validation into a [`Mechanism`]: parameters in range, and for WCPQ a codebook that matches
//! the question's frozen workflows and admissibility.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use super::{
    ConfidenceMode, ConfidenceSource, FALLBACK_REQUIRED, Fallback, Mechanism, WcpqMechanism,
};
use crate::baseline;
use crate::codebook::Codebook;
use crate::wcpq::{self, Mapper};
use crate::workflow::{self, Spec};

/// The raw `mechanism = {kind = ...}` table of a contract question.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Raw {
    /// Release the native values unchanged.
    #[default]
    None,
    /// `{kind = "wcpq", codebook = "PATH", codebooks = {PROVIDER = "PATH"}, fallback =
    /// "native", confidence = "codeword", admissibility = "strict"}`.
    Wcpq {
        /// Codebook artifact path (relative to the configuration file): the codebook of the
        /// contract's first provider, unless `codebooks` names that provider.
        #[serde(default)]
        codebook: Option<String>,
        /// Codebook artifact paths by provider: a provider's answers are released with the
        /// codebook built from its own answers (`config` resolves them per provider).
        #[serde(default)]
        codebooks: BTreeMap<String, String>,
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
                codebooks,
                admissibility,
                fallback,
                confidence,
            } => {
                // A contract resolves `codebooks` to one codebook per provider first.
                let codebook = match codebook {
                    Some(codebook) if codebooks.is_empty() => codebook,
                    _ => {
                        return Err(
                            "wcpq needs exactly one `codebook` here (a contract resolves `codebooks` per provider)"
                                .to_string(),
                        );
                    }
                };
                let fallback = fallback.ok_or_else(|| FALLBACK_REQUIRED.to_string())?;
                let admissibility = admissibility.validate()?;
                let spec = workflows.ok_or_else(|| {
                    "wcpq needs the question's frozen workflows: add a `workflows` table"
                        .to_string()
                })?;
                let path = base_dir.join(&codebook);
                let (artifact, bytes) = load_codebook(&path, spec, classes, read)?;
                let admissibility = guarded_admissibility(admissibility, &artifact);
                check_budget(admissibility, artifact.learned(), &path)?;
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
}

/// Reads the codebook at `path` and checks it matches the question's frozen workflows and
/// released labels; returns it with the bytes it was read from.
fn load_codebook(
    path: &Path,
    spec: &Spec,
    classes: &[String],
    read: &dyn Fn(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<(Codebook, Vec<u8>), String> {
    let bytes =
        read(path).map_err(|error| format!("cannot read codebook {}: {error}", path.display()))?;
    let artifact = Codebook::from_json(&bytes)
        .map_err(|error| format!("codebook {}: {error}", path.display()))?;
    artifact.check_matches(spec, classes).map_err(|error| {
        format!(
            "codebook {} does not match this question: {error}",
            path.display()
        )
    })?;
    Ok((artifact, bytes))
}

/// A strict contract needs a strict codebook, a contract of budget α one learned for α.
fn check_budget(
    admissibility: wcpq::Admissibility,
    learned: Option<crate::codebook::Learned>,
    path: &Path,
) -> Result<(), String> {
    match (admissibility, learned) {
        (wcpq::Admissibility::Strict, None) => {}
        (wcpq::Admissibility::Budget(alpha), Some(learned)) if alpha == learned.budget => {}
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
    Ok(())
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
