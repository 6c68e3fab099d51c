//! Applying a mechanism to one answer: the baselines' rewritten vectors and the WCPQ
//! mapper's codeword or fallback.

use serde_json::Value;

use super::{
    Applied, ClassVector, ConfidenceSource, Context, Fallback, Mechanism, Outcome, Released,
    WcpqMechanism,
};
use crate::baseline;
use crate::release::shape;
use crate::rng::Rng;
use crate::wcpq;
use crate::wire::Kind;
use crate::workflow;

impl Mechanism {
    /// Rewrites one answer's probability and confidence fields. `none` releases the
    /// vector it is given (the native one, or the coarse one with its own confidence); a
    /// baseline releases its vector in the fixed decimal form (`shape::fixed`) and a
    /// confidence computed from that vector (`ConfidenceSource::Derived`), never the
    /// native one unless the contract says `confidence = "native"`.
    pub fn apply(&self, native: &ClassVector, ctx: &mut Context<'_>) -> Applied {
        let kind = ctx.kind;
        let labels = ctx.labels;
        let plain = |probabilities: Vec<Option<f64>>, source: ConfidenceSource| {
            plain(native, kind, labels, probabilities, source)
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
                    .map(fixed_all)
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
                    .map(fixed_all)
                    .unwrap_or_else(|_| vec![None; p.len()]),
                *confidence,
            ),
            Mechanism::Gaussian {
                sigma,
                seed,
                confidence,
            } => {
                let noisy = gaussian(p, *sigma, *seed, ctx);
                plain(
                    noisy.map(fixed_all).unwrap_or_else(|_| vec![None; p.len()]),
                    *confidence,
                )
            }
            Mechanism::Wcpq(wcpq) => wcpq.apply(native, ctx),
        }
    }

    // === impl WcpqMechanism ===
}

/// A baseline's release: `probabilities` as given and the confidence from `source`. A
/// baseline that releases no probability (it failed closed) releases no confidence either.
fn plain(
    native: &ClassVector,
    kind: Kind,
    labels: &[String],
    probabilities: Vec<Option<f64>>,
    source: ConfidenceSource,
) -> Applied {
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
}

/// Every value in the fixed decimal form.
fn fixed_all(values: Vec<f64>) -> Vec<Option<f64>> {
    values
        .into_iter()
        .map(|p| Some(shape::fixed(p)))
        .collect::<Vec<_>>()
}

/// `p` with Gaussian noise: reproducible from `seed` and the request's identity when a seed
/// is set, else from the request's fresh randomness.
fn gaussian(
    p: &[f64],
    sigma: f64,
    seed: Option<u64>,
    ctx: &mut Context<'_>,
) -> Result<Vec<f64>, baseline::Error> {
    match seed {
        Some(seed) => {
            let mut material = seed.to_le_bytes().to_vec();
            material.extend_from_slice(&(ctx.identity)());
            baseline::gaussian(p, sigma, &mut Rng::from_bytes(&material))
        }
        None => baseline::gaussian(p, sigma, ctx.rng),
    }
}

impl WcpqMechanism {
    pub(super) fn apply(&self, native: &ClassVector, ctx: &mut Context<'_>) -> Applied {
        // A posterior that does not depend on the request never reads the state (its
        // public features are none): null stands in for it. Read before the clock
        // starts, as it was when every request's state was read with the request.
        static UNREAD: Value = Value::Null;
        let state = if self.mapper.reads_state() {
            (ctx.state)()
        } else {
            &UNREAD
        };
        let started = crate::timing::now();
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
        let mapping_seconds = Some(crate::timing::since(started).as_secs_f64());
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
                let released = self.fallback_release(d.as_ref(), n);
                (released, Outcome::Fallback(reason))
            }
        };
        Applied {
            released,
            outcome,
            mapping_seconds,
        }
    }

    /// What goes out when no codeword covers the answer: the contract's fallback, given `d`
    /// (the native answer as the recipient would read it) and `n` labels.
    fn fallback_release(&self, d: Option<&workflow::Release>, n: usize) -> Released {
        match self.fallback {
            Fallback::Native => Released {
                probabilities: d
                    .and_then(|d| d.probabilities.clone())
                    .map_or_else(|| vec![None; n], |p| p.into_iter().map(Some).collect()),
                confidence: d.and_then(|d| d.confidence),
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
        }
    }
}
