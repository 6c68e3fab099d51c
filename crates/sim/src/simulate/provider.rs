//! The in-process `simulated` System One provider.
//!
//! It answers any valid System One request (choice, score and noul questions,
//! any labels, any number of questions) deterministically from the request
//! content. Each question is answered independently from the resolved model
//! name, the canonical state and the canonical question (sorted keys, so key
//! order and whitespace do not matter; the question id is not used, as on the
//! real service).
//!
//! When the state carries a diagnostic report with mechanism cues (see
//! [`super::evidence`]), the inferred mechanism shapes the answer:
//! coarse class labels get most of the mass, the mechanism's signature leans
//! the rest toward one other class and its sharpness moves the confidence.
//! Otherwise a hidden latent drawn from the request hash does.

use serde_json::{Map, Value, json};

use crate::simulate::Error;
use crate::simulate::evidence;
use crate::simulate::ontology::Located;
use releasegate_core::rng::Rng;

mod hashing;
mod validate;

use hashing::{canonical, digest, label_rng, seed_of};

use validate::{invalid, validate};

/// The versioned name the `latest` aliases resolve to.
pub const LATEST_MODEL: &str = "sim-jev-1.0";
/// The versioned name the `preview` aliases resolve to.
pub const PREVIEW_MODEL: &str = "sim-jev-1.1-preview";
/// Most choice candidates a question may have.
pub const MAX_CHOICES: usize = 255;
/// Most score levels a question may have.
pub const MAX_LEVELS: usize = 255;
/// Deepest JSON nesting the provider accepts.
pub(super) const MAX_DEPTH: usize = 256;

/// Probabilities are rounded to multiples of 1 / `UNITS` (4 decimals).
const UNITS: u64 = 10_000;

// Calibration of the evidence-driven ("TUPLE") mode; see docs/simulator.md.
/// Mean logit advantage of the inferred coarse class.
const CLASS_ADVANTAGE: f64 = 3.0;
/// Pair-level (public context) spread of that advantage.
const CLASS_ADVANTAGE_SD: f64 = 0.5;
/// Global scale of the mechanism leans.
const LEAN_SCALE: f64 = 0.2;
/// Per-label noise that depends on the whole state (private report included).
const WORLD_NOISE_SD: f64 = 0.65;
/// Per-label noise that depends only on the public part of the state.
const PAIR_NOISE_SD: f64 = 0.5;
/// Exponent applied to the mechanism sharpness (how strongly S moves confidence).
const SHARPNESS_POWER: f64 = 1.5;
/// Log-scale spread of the pair-level sharpness factor.
const PAIR_SHARPNESS_SD: f64 = 0.15;

enum Kind<'a> {
    Choice(Vec<&'a str>),
    Score(&'a [Value]),
    Noul,
    Box,
}

struct Question<'a> {
    id: &'a str,
    body: &'a Value,
    kind: Kind<'a>,
}

/// What the provider inferred from a diagnostic report.
struct Inferred {
    /// Detected mechanisms with weights summing to 1.
    weights: Vec<(Located, f64)>,
}

/// The two random streams of a question: one keyed by everything the model
/// sees, one keyed only by the public part (shared by counterfactual worlds).
struct Seeds {
    world: u64,
    pair: u64,
}

/// Answers a System One request body.
pub(super) fn respond(request: &Value) -> Result<Value, Error> {
    let input_len = serde_json::to_vec(request)
        .map(|bytes| bytes.len())
        .unwrap_or(0);
    answer(request, input_len)
}

/// Answers a raw System One request body (`usage.input_tokens` counts these bytes / 4).
#[cfg(test)]
pub(super) fn respond_bytes(body: &[u8]) -> Result<Value, Error> {
    let request: Value = serde_json::from_slice(body).map_err(Error::Json)?;
    answer(&request, body.len())
}

/// Resolves model aliases to the simulator's versioned names; other names echo.
pub(super) fn resolve_model(name: &str) -> &str {
    match name {
        "jev-latest" | "sim-jev-latest" | "latest" => LATEST_MODEL,
        "jev-preview" | "sim-jev-preview" | "preview" => PREVIEW_MODEL,
        other => other,
    }
}

fn answer(request: &Value, input_len: usize) -> Result<Value, Error> {
    let (model, state, questions) = validate(request)?;
    let model = resolve_model(model);
    // As a real provider: a model it does not serve is refused, never echoed back as if it
    // had answered.
    if model != LATEST_MODEL && model != PREVIEW_MODEL {
        return Err(invalid(
            &["model"],
            format!(
                "unknown model: this simulator serves jev-latest ({LATEST_MODEL}) and jev-preview ({PREVIEW_MODEL})"
            ),
        ));
    }
    let state_digest = digest(&[model.as_bytes(), &canonical(state)?]);
    let inferred = infer(state);
    let public_digest = match &inferred {
        Some(_) => digest(&[model.as_bytes(), &canonical(&public_part(state))?]),
        None => state_digest,
    };
    let mut answers = Map::new();
    for question in &questions {
        let question_bytes = canonical(question.body)?;
        let seeds = Seeds {
            world: seed_of(&[&state_digest, &question_bytes]),
            pair: seed_of(&[&public_digest, &question_bytes]),
        };
        let answer = match &question.kind {
            Kind::Choice(labels) => choice(labels, inferred.as_ref(), &seeds),
            Kind::Score(levels) => score(levels, inferred.as_ref(), &seeds),
            Kind::Noul => noul(inferred.as_ref(), &seeds),
            Kind::Box => bounding_box(&seeds),
        };
        answers.insert(question.id.to_string(), answer);
    }
    let input_tokens = (input_len / 4).max(1) as u64;
    let output_tokens = answers.values().map(written_tokens).sum::<u64>().max(1);
    Ok(json!({
        "model": model,
        "answers": answers,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }))
}

/// Tokens of what the model writes for one answer, as a model's output count follows it:
/// the chosen label of a choice answer, the number of a score or noul answer, the four
/// edges of a box; each text counts one token per 4 bytes started, at least 1.
fn written_tokens(answer: &Value) -> u64 {
    let tokens = |value: &Value| -> u64 {
        let len = match value {
            Value::String(text) => text.len(),
            other => other.to_string().len(),
        };
        len.div_ceil(4).max(1) as u64
    };
    match answer.get("type").and_then(Value::as_str) {
        Some("box") => answer
            .get("box")
            .and_then(Value::as_object)
            .map_or(1, |edges| edges.values().map(tokens).sum()),
        Some(kind) => answer.get(kind).map_or(1, tokens),
        None => 1,
    }
}

// --- evidence ---

fn infer(state: &Value) -> Option<Inferred> {
    let note = state
        .get("internal_report")
        .and_then(|r| r.get("diagnostic_note"))
        .and_then(Value::as_str)
        .or_else(|| state.as_str())?;
    let hits = evidence::detect(note);
    let total: u32 = hits.iter().map(|(_, n)| n).sum();
    if total == 0 {
        return None;
    }
    let weights = hits
        .into_iter()
        .map(|(l, n)| (l, f64::from(n) / f64::from(total)))
        .collect();
    Some(Inferred { weights })
}

/// The state without its private report: what both worlds of a pair share.
fn public_part(state: &Value) -> Value {
    match state {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "internal_report")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        // A bare-string state is all private report.
        Value::String(_) => Value::Null,
        other => other.clone(),
    }
}

impl Inferred {
    fn class_weight(&self, label: &str) -> f64 {
        self.weights
            .iter()
            .filter(|(l, _)| l.class.label.eq_ignore_ascii_case(label))
            .map(|(_, w)| w)
            .sum()
    }

    fn mechanism_weight(&self, label: &str) -> f64 {
        self.weights
            .iter()
            .filter(|(l, _)| l.mechanism.id.eq_ignore_ascii_case(label))
            .map(|(_, w)| w)
            .sum()
    }

    fn lean(&self, label: &str) -> f64 {
        self.weights
            .iter()
            .filter(|(l, _)| l.mechanism.lean.eq_ignore_ascii_case(label))
            .map(|(l, w)| w * l.mechanism.lean_strength)
            .sum()
    }

    fn sharpness(&self) -> f64 {
        self.weights
            .iter()
            .map(|(l, w)| w * l.mechanism.sharpness)
            .sum()
    }

    fn severity(&self) -> f64 {
        self.weights
            .iter()
            .map(|(l, w)| w * l.mechanism.severity)
            .sum()
    }
}

// --- answers ---

fn choice(labels: &[&str], inferred: Option<&Inferred>, seeds: &Seeds) -> Value {
    let relevant = inferred.filter(|inf| {
        labels
            .iter()
            .any(|l| inf.class_weight(l) > 0.0 || inf.mechanism_weight(l) > 0.0)
    });
    let logits: Vec<f64> = match relevant {
        Some(inf) => {
            let mut pair = Rng::new(seeds.pair);
            let advantage = CLASS_ADVANTAGE + CLASS_ADVANTAGE_SD * pair.normal();
            let kappa =
                inf.sharpness().powf(SHARPNESS_POWER) * (PAIR_SHARPNESS_SD * pair.normal()).exp();
            labels
                .iter()
                .map(|label| {
                    let base = advantage * (inf.class_weight(label) + inf.mechanism_weight(label))
                        + LEAN_SCALE * inf.lean(label);
                    let noise = WORLD_NOISE_SD * label_rng(seeds.world, label).normal()
                        + PAIR_NOISE_SD * label_rng(seeds.pair, label).normal();
                    kappa * (base + noise)
                })
                .collect()
        }
        None => {
            let mut latent = Rng::new(seeds.world);
            // The favourite is the label with the highest keyed draw, so it
            // does not depend on candidate order.
            let preference = |label: &str| label_rng(!seeds.world, label).uniform();
            let favourite = labels
                .iter()
                .copied()
                .max_by(|a, b| preference(a).total_cmp(&preference(b)))
                .unwrap_or_default();
            let strength = 0.8 + 2.8 * latent.uniform();
            let kappa = 0.7 + 0.8 * latent.uniform();
            labels
                .iter()
                .map(|label| {
                    let bump = if *label == favourite { strength } else { 0.0 };
                    kappa * (bump + 0.8 * label_rng(seeds.world, label).normal())
                })
                .collect()
        }
    };
    let units = round_units(&softmax(&logits));
    let best = argmax(&units);
    let k = labels.len() as f64;
    let p_max = units[best] as f64 / UNITS as f64;
    let confidence = round4(((p_max - 1.0 / k) / (1.0 - 1.0 / k)).clamp(0.0, 1.0));
    let probabilities: Map<String, Value> = labels
        .iter()
        .zip(&units)
        .map(|(label, u)| (label.to_string(), json!(*u as f64 / UNITS as f64)))
        .collect();
    json!({
        "type": "choice",
        "choice": labels[best],
        "confidence": confidence,
        "probabilities": probabilities,
    })
}

fn score(levels: &[Value], inferred: Option<&Inferred>, seeds: &Seeds) -> Value {
    let n = levels.len();
    let top = (n - 1) as f64;
    let mut world = Rng::new(seeds.world);
    let (centre, kappa) = match inferred {
        Some(inf) => {
            let mut pair = Rng::new(seeds.pair);
            let centre =
                inf.severity() * top + top * (0.12 * pair.normal() + 0.08 * world.normal());
            (centre, inf.sharpness())
        }
        None => (world.uniform() * top, 0.7 + 0.6 * world.uniform()),
    };
    let spread = (0.35 + 0.4 * world.uniform()) * (1.0 + top / 8.0) / kappa;
    let logits: Vec<f64> = (0..n)
        .map(|i| {
            let d = (i as f64 - centre) / spread;
            -0.5 * d * d + 0.3 * world.normal()
        })
        .collect();
    let units = round_units(&softmax(&logits));
    let best = argmax(&units);
    let weighted: u64 = units.iter().enumerate().map(|(i, u)| i as u64 * u).sum();
    let spread_here: u64 = units
        .iter()
        .enumerate()
        .map(|(i, u)| i.abs_diff(best) as u64 * u)
        .sum();
    let uniform_mad = (0..n).map(|i| i.abs_diff(best)).sum::<usize>() as f64 / n as f64;
    let confidence = if uniform_mad > 0.0 {
        let mad = spread_here as f64 / UNITS as f64;
        round4((1.0 - mad / uniform_mad).clamp(0.0, 1.0))
    } else {
        1.0
    };
    let legend: Map<String, Value> = levels
        .iter()
        .enumerate()
        .map(|(i, level)| (i.to_string(), level.clone()))
        .collect();
    let probabilities: Map<String, Value> = units
        .iter()
        .enumerate()
        .map(|(i, u)| (i.to_string(), json!(*u as f64 / UNITS as f64)))
        .collect();
    json!({
        "type": "score",
        "score": weighted as f64 / UNITS as f64,
        "confidence": confidence,
        "legend": legend,
        "probabilities": probabilities,
    })
}

fn noul(inferred: Option<&Inferred>, seeds: &Seeds) -> Value {
    let mut world = Rng::new(seeds.world);
    let logit = match inferred {
        Some(inf) => {
            let mut pair = Rng::new(seeds.pair);
            3.0 * (inf.severity() - 0.5) * inf.sharpness()
                + 0.6 * pair.normal()
                + 0.6 * world.normal()
        }
        None => 1.8 * world.normal(),
    };
    let p = 1.0 / (1.0 + (-logit).exp());
    let p = if p.is_finite() { p } else { 0.5 };
    json!({"type": "noul", "noul": round4(p.clamp(0.0, 1.0))})
}

/// A box somewhere in the image: edges drawn from the world's stream (the simulator
/// sees no pixels), ordered, with a confidence.
fn bounding_box(seeds: &Seeds) -> Value {
    let mut world = Rng::new(seeds.world);
    let (a, b) = (world.uniform(), world.uniform());
    let (c, d) = (world.uniform(), world.uniform());
    json!({
        "type": "box",
        "box": {
            "top": round4(a.min(b)), "bottom": round4(a.max(b)),
            "left": round4(c.min(d)), "right": round4(c.max(d)),
        },
        "confidence": round4(world.uniform()),
    })
}

// --- numerics ---

fn softmax(logits: &[f64]) -> Vec<f64> {
    let max = logits
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = logits
        .iter()
        .map(|x| if x.is_finite() { (x - max).exp() } else { 0.0 })
        .collect();
    let total: f64 = exps.iter().sum();
    if !(total.is_finite() && total > 0.0) {
        let n = logits.len().max(1) as f64;
        return vec![1.0 / n; logits.len()];
    }
    exps.iter().map(|e| e / total).collect()
}

/// Rounds a distribution to integer units summing exactly to `UNITS`
/// (largest remainder; ties go to the earlier entry).
fn round_units(p: &[f64]) -> Vec<u64> {
    let scaled: Vec<f64> = p.iter().map(|x| x.max(0.0) * UNITS as f64).collect();
    let mut units: Vec<u64> = scaled.iter().map(|x| x.floor() as u64).collect();
    let assigned: u64 = units.iter().sum();
    let missing = UNITS.saturating_sub(assigned) as usize;
    let mut order: Vec<usize> = (0..p.len()).collect();
    order.sort_by(|&a, &b| {
        let fa = scaled[a] - scaled[a].floor();
        let fb = scaled[b] - scaled[b].floor();
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &i in order.iter().cycle().take(missing) {
        units[i] += 1;
    }
    units
}

fn argmax(units: &[u64]) -> usize {
    let mut best = 0;
    for (i, u) in units.iter().enumerate() {
        if *u > units[best] {
            best = i;
        }
    }
    best
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

#[cfg(test)]
mod tests;
