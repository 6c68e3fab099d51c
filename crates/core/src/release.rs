//! Applies a release contract to a whole System One response.
//!
//! This is the one code path the proxy and the offline replay share. It is
//! pure: given the contract, the checked request and the native response, it
//! returns the response the recipient may see, or the reason the native
//! response is rejected. Nothing the contract does not name goes out: unknown
//! top-level fields, unknown answer types, unasked answers and unknown answer
//! fields are dropped, and probabilities are re-emitted in canonical order.
//! The contract's shape decides whether answers carry every field their type
//! requires (`shape`: fills computed from the released fields) or only the
//! view's.

pub mod bounding;
pub mod shape;

use std::borrow::Cow;

use serde_json::Value;

use crate::contract::{Coarsening, Contract, QuestionRule, Shape, Usage, View};
use crate::mechanism::{self, ClassVector, Context, Released};
use crate::rng::Rng;
use crate::wire::json::{Number, Object, write};
use crate::wire::{self, Asked, AskedQuestion, Invalid, Json, Kind, Node};
use crate::workflow;

/// A released response and what happened to each answer.
///
/// The body borrows its strings (labels, question ids, the model) from the contract,
/// the request and the native answer: building it allocates only its objects' member
/// lists, and [`Release::to_bytes`] writes it as serde_json would write the same `Value`.
#[derive(Debug, Clone)]
pub struct Release<'a> {
    /// The body the recipient receives.
    pub body: Json<'a>,
    /// One record per released answer, in request order.
    pub answers: Vec<AnswerRecord>,
}

/// What happened to one answer (for metrics and replay summaries).
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerRecord {
    /// The question id (a contract key, so a bounded label).
    pub question: String,
    /// The view it was released under.
    pub view: View,
    /// Whether a withheld label was selected.
    pub withheld: bool,
    /// What the mechanism did.
    pub mechanism: mechanism::Outcome,
    /// Time spent in the WCPQ mapper, if any.
    pub mapping_seconds: Option<f64>,
    /// Native and released forms as the frozen workflows read them (only when
    /// `Options::evaluate` is set and the question declares workflows).
    pub evaluation: Option<Box<Evaluation>>,
}

/// The two answers a frozen workflow would have acted on, both read by [`Form::read`].
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The native answer as the recipient would read it had it gone out
    /// without the mechanism (same view, withholding and shape).
    pub native: workflow::Release,
    /// The released answer, read back from its serialized form.
    pub released: workflow::Release,
}

impl Release<'_> {
    /// The body as the bytes the recipient receives.
    pub fn to_bytes(&self) -> Vec<u8> {
        write::to_vec(&self.body)
    }
}

/// Per-call options of the release path.
pub struct Options<'a> {
    /// Fresh randomness for unseeded noise mechanisms.
    pub rng: &'a mut Rng,
    /// Record native and released forms for workflow evaluation (offline tools).
    pub evaluate: bool,
}

/// The body of an error the recipient receives: `{"detail": {"error_type", "message"}}`.
pub fn error_body(error_type: &str, message: &str) -> Value {
    serde_json::json!({"detail": {"error_type": error_type, "message": message}})
}

/// The message a recipient gets when a native answer fails validation.
pub fn invalid_answer_message(reason: Invalid) -> String {
    format!("the provider's answer failed validation ({reason})")
}

/// The error body a recipient gets when a native answer fails validation.
pub fn invalid_answer_body(reason: Invalid) -> Value {
    error_body("invalid_upstream_answer", &invalid_answer_message(reason))
}

/// Releases `native` (the provider's response body) under `contract`. What it reads of
/// the request is what went upstream (`Asked::upstream`): its `state` feeds
/// request-dependent workflows, and seeded noise is keyed on it.
pub fn release<'a, N: Node>(
    contract: &'a Contract,
    asked: &'a Asked,
    native: &'a N,
    options: &mut Options<'_>,
) -> Result<Release<'a>, Invalid> {
    native.object_len().ok_or(Invalid::MissingField)?;
    let model = native
        .member("model")
        .and_then(Node::text)
        .ok_or(Invalid::MissingField)?;
    // Only a model the proxy can vouch for goes out: the contract's pinned model, else
    // the provider's id if it is a plain bounded id (`wire::is_model_id`).
    let model = match &contract.model {
        Some(pinned) => pinned.as_str(),
        None if wire::is_model_id(model) => model,
        None => return Err(Invalid::BadModel),
    };
    let answers = native
        .member("answers")
        .filter(|answers| answers.object_len().is_some())
        .ok_or(Invalid::MissingField)?;
    let usage = match native.member("usage") {
        None => None,
        Some(usage) if usage.is_null() => None,
        Some(usage) if usage.object_len().is_some() => Some(usage),
        Some(_) => return Err(Invalid::MissingField),
    };

    let mut released_answers = Object::with_capacity(asked.questions.len());
    let mut records = Vec::with_capacity(asked.questions.len());
    for question in &asked.questions {
        // `check_request` guarantees the contract covers every asked question.
        let rule = contract
            .questions
            .get(&question.id)
            .ok_or(Invalid::MissingAnswer)?;
        let answer = answers.member(&question.id).ok_or(Invalid::MissingAnswer)?;
        if question.kind == Kind::Box {
            let native = wire::parse_box(answer)?;
            released_answers.insert(
                Cow::Borrowed(&question.id),
                Json::from_owned(bounding::release_box(rule, contract.shape, &native)),
            );
            records.push(AnswerRecord {
                question: question.id.clone(),
                view: rule.view,
                withheld: false,
                mechanism: mechanism::Outcome::Applied,
                mapping_seconds: None,
                evaluation: None,
            });
            continue;
        }
        let native_vector = wire::parse_answer(question.kind, rule, answer)?;
        let (value, record) = release_answer(
            question,
            rule,
            contract.shape,
            &native_vector,
            asked,
            options,
        )?;
        if let Some(value) = value {
            released_answers.insert(Cow::Borrowed(&question.id), value);
        }
        records.push(record);
    }

    let mut body = Object::with_capacity(3);
    body.insert(Cow::Borrowed("model"), Json::text(model));
    body.insert(Cow::Borrowed("answers"), Json::Object(released_answers));
    body.insert(
        Cow::Borrowed("usage"),
        Json::Object(release_usage(contract, usage)?),
    );
    Ok(Release {
        body: Json::Object(body),
        answers: records,
    })
}

/// Everything needed to write and read one question's released answers. A
/// recipient knows all of it from its contract.
#[derive(Debug, Clone, Copy)]
pub struct Form<'a> {
    /// The asked question (type, score legend).
    pub question: &'a AskedQuestion,
    /// The released labels (coarse labels when coarsened).
    pub labels: &'a [String],
    /// The view.
    pub view: View,
    /// Whether a confidence goes out where the view has one (false when WCPQ drops it).
    pub confidence: bool,
    /// Released labels whose selection withholds the probabilities and the confidence.
    pub withhold: &'a [bool],
    /// Complete or minimal answers.
    pub shape: Shape,
}

// === impl Form ===

impl<'a> Form<'a> {
    /// The form of `question` under `rule` and `shape`.
    pub fn new(question: &'a AskedQuestion, rule: &'a QuestionRule, shape: Shape) -> Form<'a> {
        Form {
            question,
            labels: rule.released_labels(),
            view: rule.view,
            confidence: !rule.mechanism.drops_confidence(),
            withhold: &rule.withhold,
            shape,
        }
    }

    /// Whether selecting `choice` withholds the probabilities and the confidence.
    pub fn withheld(&self, choice: usize) -> bool {
        self.withhold.get(choice).copied().unwrap_or(false)
    }

    /// Whether the contract releases probabilities for an answer selecting `choice`.
    pub fn releases_probabilities(&self, choice: usize) -> bool {
        self.view.has_probabilities() && !self.withheld(choice)
    }

    /// Whether the contract releases a confidence for an answer selecting `choice`.
    pub fn releases_confidence(&self, choice: usize) -> bool {
        self.view.has_confidence()
            && self.confidence
            && self.question.kind != Kind::Noul
            && !self.withheld(choice)
    }

    /// Writes the released answer object in a fixed field order; `None` when
    /// the answer is left out of `answers` (no prediction in the complete shape).
    ///
    /// The view's fields come first (a withheld selection keeps only its own
    /// probability: residual scores leak it); the complete shape then fills
    /// every other required field (`shape::fill`).
    pub fn encode(&self, choice: usize, released: &Released) -> Option<Json<'a>> {
        // At most type, choice or score or noul, legend, probabilities, confidence.
        let mut out = Object::with_capacity(5);
        out.insert(
            Cow::Borrowed("type"),
            Json::text(self.question.kind.as_str()),
        );
        if !self.view.has_choice() || released.deny {
            return match self.shape {
                Shape::Complete => None,
                Shape::Minimal => Some(Json::Object(out)),
            };
        }
        let labels = self.labels;
        let k = labels.len();
        // A choice outside the labels cannot be written (the release path never makes one).
        let label = labels.get(choice)?;
        let withheld = self.withheld(choice);
        let entry = |i: usize| released.probabilities.get(i).copied().flatten();
        // Probabilities go out when the view has them and the mechanism released any
        // (a WCPQ `choice_only` fallback releases none).
        let show_probabilities =
            self.view.has_probabilities() && (0..k).any(|i| entry(i).is_some());
        let probabilities: Option<Vec<Option<f64>>> = show_probabilities.then(|| {
            (0..k)
                .map(|i| entry(i).filter(|_| !withheld || i == choice))
                .collect()
        });
        // The released entries with their classes (read by score and noul answers only).
        let present = || {
            probabilities
                .iter()
                .flatten()
                .enumerate()
                .filter_map(|(i, p)| p.map(|p| (i, p)))
        };
        let confidence = released
            .confidence
            .filter(|_| self.releases_confidence(choice));
        match self.question.kind {
            Kind::Noul => {
                let hard = if label == "true" { 1.0 } else { 0.0 };
                let p_true = labels
                    .iter()
                    .position(|l| l == "true")
                    .and_then(|t| present().find(|(i, _)| *i == t))
                    .map(|(_, p)| p);
                let noul = match p_true {
                    Some(p) if !withheld => p,
                    _ => hard,
                };
                out.insert(Cow::Borrowed("noul"), Json::float(noul));
                return Some(Json::Object(out));
            }
            Kind::Choice => {
                out.insert(Cow::Borrowed("choice"), Json::text(label));
            }
            // Box answers are released by `bounding`, never as a class vector.
            Kind::Box => return None,
            Kind::Score => {
                let level = |index: usize| labels[index].parse::<f64>().unwrap_or(0.0);
                let score = if show_probabilities && !withheld {
                    let mass: f64 = present().map(|(_, p)| p).sum();
                    let total: f64 = present().map(|(i, p)| level(i) * p).sum();
                    if present().count() == k || mass <= 0.0 {
                        total
                    } else {
                        total / mass
                    }
                } else {
                    label.parse::<f64>().unwrap_or(0.0)
                };
                // The fixed decimal form: no float noise of the weighted sum goes out.
                out.insert(Cow::Borrowed("score"), Json::float(shape::fixed(score)));
                if let Some(legend) = &self.question.legend {
                    out.insert(Cow::Borrowed("legend"), Json::from_map(legend));
                }
            }
        }
        let mut parts = shape::Parts {
            choice,
            probabilities,
            confidence,
        };
        if self.shape == Shape::Complete {
            shape::fill(self.question.kind, labels, &mut parts);
        }
        if let Some(entries) = &parts.probabilities {
            let mut map = Object::with_capacity(entries.len());
            for (p, label) in entries.iter().zip(labels) {
                if let Some(p) = p {
                    map.insert(Cow::Borrowed(label), Json::float(*p));
                }
            }
            out.insert(Cow::Borrowed("probabilities"), Json::Object(map));
        }
        if let Some(confidence) = parts.confidence {
            out.insert(Cow::Borrowed("confidence"), Json::float(confidence));
        }
        Some(Json::Object(out))
    }

    /// Reads a released answer the way a downstream consumer (the frozen
    /// workflows, the WCPQ round trip, replay, the audit's recipients) does:
    /// the selected class, and the probabilities and confidence **the contract
    /// releases** for it. Complete and minimal answers read the same: the
    /// answer is first completed with the complete shape's fills (so an absent
    /// vector reads as the one-hot of the choice, as the native posterior
    /// reads it anyway), then fields the contract does not release (fills,
    /// and everything but the choice of a withheld selection) are dropped. A
    /// partial probability map (top-k) reads as no probabilities.
    ///
    /// For score and noul answers, which carry no `choice` field, the selected
    /// class is the earliest most probable class when the contract releases
    /// probabilities and the map is full, else the released level (score) or
    /// outcome (noul). An answer left out of `answers` (`null`) reads as `None`.
    pub fn read<N: Node>(&self, answer: &N) -> Option<workflow::Release> {
        answer.object_len()?;
        let entries = self.entries(answer);
        let choice = self.choice(answer, entries.as_deref())?;
        if self.question.kind == Kind::Noul {
            let p_true = answer.member("noul")?.number()?;
            return Some(workflow::Release {
                choice,
                probabilities: self
                    .releases_probabilities(choice)
                    .then(|| noul_vector(self.labels, p_true)),
                confidence: None,
            });
        }
        let mut parts = shape::Parts {
            choice,
            probabilities: entries,
            confidence: answer.member("confidence").and_then(Node::number),
        };
        shape::fill(self.question.kind, self.labels, &mut parts);
        let probabilities = parts
            .probabilities
            .filter(|_| self.releases_probabilities(choice))
            .and_then(|entries| entries.into_iter().collect::<Option<Vec<f64>>>());
        let confidence = parts
            .confidence
            .filter(|_| self.releases_confidence(choice));
        Some(workflow::Release {
            choice,
            probabilities,
            confidence,
        })
    }

    /// What an attacker observes of a released answer: exactly the fields the
    /// contract releases for it, as they appear (no fills; an absent field stays
    /// absent, a partial map keeps its omitted entries as `None`; a withheld
    /// selection shows its own probability entry at most).
    pub fn observe<N: Node>(&self, answer: &N) -> Observed {
        if answer.object_len().is_none() {
            return Observed::default();
        }
        let entries = self.entries(answer);
        let Some(choice) = self.choice(answer, entries.as_deref()) else {
            return Observed::default();
        };
        let probabilities = if !self.view.has_probabilities() {
            None
        } else if self.question.kind == Kind::Noul {
            answer
                .member("noul")
                .and_then(Node::number)
                .filter(|_| !self.withheld(choice))
                .map(|p| noul_vector(self.labels, p).into_iter().map(Some).collect())
        } else if self.withheld(choice) {
            entries.map(|e| {
                e.iter()
                    .enumerate()
                    .map(|(i, p)| p.filter(|_| i == choice))
                    .collect()
            })
        } else {
            entries
        };
        Observed {
            choice: Some(choice),
            probabilities,
            confidence: answer
                .member("confidence")
                .and_then(Node::number)
                .filter(|_| self.releases_confidence(choice)),
        }
    }

    /// What an attacker observes when it also reads the complete shape's fills:
    /// every field of the answer completed with `shape::fill` (computed from
    /// the released fields, so a minimal and a complete answer observe the
    /// same), whatever the view releases.
    pub fn observe_with_fills<N: Node>(&self, answer: &N) -> Observed {
        if answer.object_len().is_none() {
            return Observed::default();
        }
        let entries = self.entries(answer);
        let Some(choice) = self.choice(answer, entries.as_deref()) else {
            return Observed::default();
        };
        if self.question.kind == Kind::Noul {
            let vector = answer
                .member("noul")
                .and_then(Node::number)
                .map(|p| noul_vector(self.labels, p).into_iter().map(Some).collect());
            return Observed {
                choice: Some(choice),
                probabilities: vector,
                confidence: None,
            };
        }
        let mut parts = shape::Parts {
            choice,
            probabilities: entries,
            confidence: answer.member("confidence").and_then(Node::number),
        };
        shape::fill(self.question.kind, self.labels, &mut parts);
        Observed {
            choice: Some(choice),
            probabilities: parts.probabilities,
            confidence: parts.confidence,
        }
    }

    /// The probability map in label order (`None` entries: omitted classes).
    fn entries<N: Node>(&self, answer: &N) -> Option<Vec<Option<f64>>> {
        let map = answer.member("probabilities")?;
        map.object_len()?;
        Some(
            self.labels
                .iter()
                .map(|l| map.member(l).and_then(Node::number))
                .collect(),
        )
    }

    /// The selected class of a released answer.
    fn choice<N: Node>(&self, answer: &N, entries: Option<&[Option<f64>]>) -> Option<usize> {
        let labels = self.labels;
        match self.question.kind {
            Kind::Choice => {
                let label = answer.member("choice")?.text()?;
                labels.iter().position(|l| l == label)
            }
            Kind::Score => {
                let full = entries
                    .filter(|_| self.view.has_probabilities())
                    .and_then(|e| e.iter().copied().collect::<Option<Vec<f64>>>());
                match full {
                    Some(p) => Some(wire::argmax(&p)),
                    None => {
                        let level = answer.member("score")?.number()?;
                        labels
                            .iter()
                            .position(|l| l.parse::<f64>().ok() == Some(level))
                    }
                }
            }
            Kind::Noul => {
                let p_true = answer.member("noul")?.number()?;
                Some(wire::argmax(&noul_vector(labels, p_true)))
            }
            Kind::Box => None,
        }
    }
}

/// The fields of a released answer as an attacker observes them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The selected class, if any.
    pub choice: Option<usize>,
    /// Released probabilities in label order (`None` entries: omitted classes).
    pub probabilities: Option<Vec<Option<f64>>>,
    /// The released confidence.
    pub confidence: Option<f64>,
}

fn noul_vector(labels: &[String], p_true: f64) -> Vec<f64> {
    labels
        .iter()
        .map(|l| if l == "true" { p_true } else { 1.0 - p_true })
        .collect()
}

/// `0, 1, 2, ...`: the contract's class order for as many classes as a contract has
/// ([`workflow::MAX_CLASSES`] at most), without building it for every answer.
static CLASS_ORDER: [usize; workflow::MAX_CLASSES + 1] = {
    let mut order = [0; workflow::MAX_CLASSES + 1];
    let mut i = 0;
    while i < order.len() {
        order[i] = i;
        i += 1;
    }
    order
};

/// Releases one parsed answer; returns the answer object (`None`: left out of
/// `answers`) and its record.
pub fn release_answer<'a>(
    question: &'a AskedQuestion,
    rule: &'a QuestionRule,
    shape: Shape,
    native: &ClassVector,
    asked: &Asked,
    options: &mut Options<'_>,
) -> Result<(Option<Json<'a>>, AnswerRecord), Invalid> {
    let vector = match &rule.coarsen {
        Some(coarsening) => Cow::Owned(coarsen(coarsening, native)),
        None => Cow::Borrowed(native),
    };
    let view = rule.view;
    let form = Form::new(question, rule, shape);
    // The last candidate the WCPQ mapper round-tripped, with its encoding: a covered
    // answer is exactly that candidate, and `encode` is a pure function of its inputs, so
    // that encoding goes out instead of a second one.
    let last_encoded: std::cell::RefCell<Option<(usize, Released, Option<Json<'a>>)>> =
        std::cell::RefCell::new(None);
    // The native answer as the recipient would read it had it gone out unchanged (read
    // by WCPQ and by the evaluation only).
    let native_reading = || {
        let native_released = Released {
            probabilities: vector.probabilities.iter().copied().map(Some).collect(),
            confidence: vector.confidence,
            deny: false,
        };
        form.encode(vector.choice, &native_released)
            .and_then(|value| form.read(&value))
    };
    let applied = if view.has_probabilities() || view.has_confidence() {
        let state = || asked.state();
        let identity = || identity_bytes(&question.id, asked.upstream());
        let roundtrip = |candidate: &workflow::Release| {
            let (released, value) = encode_candidate(&form, candidate);
            let back = value.as_ref().and_then(|value| read_encoded(&form, value));
            last_encoded.replace(Some((candidate.choice, released, value)));
            back
        };
        // Ties follow the contract's class order (a choice question's options go upstream in
        // it). A longer vector than a contract can have (none reaches here) gets its own.
        let n = vector.probabilities.len();
        let beyond: Vec<usize>;
        let tie_order: &[usize] = match CLASS_ORDER.get(..n) {
            Some(order) => order,
            None => {
                beyond = (0..n).collect();
                &beyond
            }
        };
        let mut context = Context {
            state: &state,
            rng: options.rng,
            roundtrip: &roundtrip,
            native: &native_reading,
            identity: &identity,
            tie_order,
            kind: question.kind,
            labels: rule.released_labels(),
        };
        rule.mechanism.apply(&vector, &mut context)
    } else {
        mechanism::Applied {
            released: Released {
                probabilities: Vec::new(),
                confidence: None,
                deny: false,
            },
            outcome: mechanism::Outcome::Applied,
            mapping_seconds: None,
        }
    };
    let released = &applied.released;
    let finite = released
        .probabilities
        .iter()
        .flatten()
        .all(|p| p.is_finite())
        && released.confidence.is_none_or(f64::is_finite);
    if !finite {
        return Err(Invalid::BadProbability);
    }
    let withheld = form.withheld(vector.choice);
    let value = match last_encoded.take() {
        Some((choice, candidate, value))
            if choice == vector.choice && same_bits(&candidate, released) =>
        {
            value
        }
        _ => form.encode(vector.choice, released),
    };
    let evaluation = match (&rule.workflows, options.evaluate, &value) {
        (Some(_), true, Some(value)) => native_reading()
            .zip(form.read(value))
            .map(|(native, released)| Box::new(Evaluation { native, released })),
        _ => None,
    };
    let record = AnswerRecord {
        question: question.id.clone(),
        view,
        withheld,
        mechanism: applied.outcome,
        mapping_seconds: applied.mapping_seconds,
        evaluation,
    };
    Ok((value, record))
}

/// Serializes a candidate exactly as it would be sent (view, withholding,
/// shape), parses the text back and reads it the way a consumer does (the
/// WCPQ mapper's round trip).
#[cfg(any(test, feature = "test-support"))]
pub fn roundtrip(form: &Form<'_>, candidate: &workflow::Release) -> Option<workflow::Release> {
    let (_, value) = encode_candidate(form, candidate);
    read_encoded(form, &value?)
}

/// A candidate as the release path would hand it to [`Form::encode`], and its encoding.
fn encode_candidate<'a>(
    form: &Form<'a>,
    candidate: &workflow::Release,
) -> (Released, Option<Json<'a>>) {
    let released = Released {
        probabilities: match &candidate.probabilities {
            Some(p) => p.iter().copied().map(Some).collect(),
            None => vec![None; form.labels.len()],
        },
        confidence: candidate.confidence,
        deny: false,
    };
    let value = form.encode(candidate.choice, &released);
    (released, value)
}

/// Reads an encoded answer as its recipient reads the bytes it is sent as.
fn read_encoded(form: &Form<'_>, value: &Json<'_>) -> Option<workflow::Release> {
    // Reading `value` is reading the bytes that go out: they are the writer's printing of
    // it (`wire::json::write`, serde_json's output byte for byte), and printing then
    // parsing gives `value` back exactly (finite floats print in the shortest form that
    // parses to the same f64, read with `float_roundtrip`; integers, strings, arrays and
    // ordered maps are reproduced as they are). So the text is not made here;
    // `tests::printing_then_parsing_an_encoded_answer_gives_it_back` checks the identity
    // on every view, shape, question type and confidence, with arbitrary floats.
    form.read(value)
}

/// Whether two releases are the same bit for bit (`-0.0` and `0.0` differ, as their
/// encodings do).
fn same_bits(a: &Released, b: &Released) -> bool {
    let bits = |p: &Option<f64>| p.map(f64::to_bits);
    a.deny == b.deny
        && bits(&a.confidence) == bits(&b.confidence)
        && a.probabilities.len() == b.probabilities.len()
        && a.probabilities
            .iter()
            .zip(&b.probabilities)
            .all(|(x, y)| bits(x) == bits(y))
}

/// Reads a released answer as a consumer does ([`Form::read`]).
pub fn read_released<N: Node>(form: &Form<'_>, answer: &N) -> Option<workflow::Release> {
    form.read(answer)
}

/// Stable bytes identifying a request's question (seeded noise): the canonical JSON
/// (`wire::canonical_json`) of exactly what went upstream for it: the question id (it
/// selects the contract rule, and a contract's ids are fixed by configuration), the
/// question as the contract asked it (`Pinned`), the `state` and `assets`, and the
/// `model` as forwarded (the pinned one when pinned).
///
/// Nothing else enters: not the caller's spelling of the question (its text is the
/// contract's, or absent, or refused), not key order, JSON whitespace or number spelling
/// (`1`, `1.0`, `1e0`), not unknown fields, not the other questions. So every variant of
/// the same question draws the same noise; only a different question, state, asset or
/// model does.
fn identity_bytes(question: &str, upstream: &Value) -> Vec<u8> {
    let part = |key: &str| upstream.get(key).cloned().unwrap_or(Value::Null);
    let identity = serde_json::json!({
        "id": question,
        "question": upstream.get("questions").and_then(|q| q.get(question)).cloned().unwrap_or(Value::Null),
        "state": part("state"),
        "assets": part("assets"),
        "model": part("model"),
    });
    let mut bytes = Vec::new();
    wire::canonical_json(&identity, &mut bytes);
    bytes
}

#[cfg(test)]
mod identity_tests {
    use super::*;
    use crate::config::Config;

    fn contract() -> std::sync::Arc<Contract> {
        let config = Config::from_toml(
            r#"
[providers.p]
kind = "simulated"
[contracts.c]
provider = "p"
[contracts.c.questions.q]
classes = ["A", "B"]
view = "full_native"
instructions = "Which?"
descriptions = { B = "b" }
[contracts.c.questions.u]
classes = ["false", "true"]
view = "full_native"
"#,
        )
        .unwrap();
        config.contract("c").unwrap().clone()
    }

    fn identity(text: &str) -> Vec<u8> {
        let asked = wire::check_request(&serde_json::from_str(text).unwrap(), &contract())
            .unwrap_or_else(|error| panic!("{text}: {error}"));
        identity_bytes("q", asked.upstream())
    }

    #[test]
    fn every_spelling_of_the_same_question_has_one_identity() {
        let base = identity(
            r#"{"model":"m","state":{"a":1,"b":[1.5,{"y":null,"x":-0.0}]},
                "questions":{"q":{"type":"choice","criteria":{"A":null,"B":null}}}}"#,
        );
        let same = [
            r#"{ "questions" : { "q" : { "criteria" : { "B" : "b" , "A" : null } , "type" : "choice",
                 "extra": 1 } , "u": {"type": "noul"} } , "state" : { "b" : [ 15e-1 , { "x" : 0 , "y" : null } ] ,
                 "a" : 1.0 } , "model" : "m", "unknown": true }"#,
            r#"{"model":"m","state":{"a":1e0,"b":[1.50,{"x":0.0,"y":null}]},
                "questions":{"q":{"type":"choice","instructions":null,"criteria":{"A":null,"B":"\u0062"}}}}"#,
            r#"{"model":"m","state":{"a":1,"b":[1.5,{"y":null,"x":0}]},
                "questions":{"q":{"type":"choice","instructions":"Which?","criteria":{"A":null,"B":"b"}}}}"#,
        ];
        for text in same {
            assert_eq!(identity(text), base, "{text}");
        }
        let different = [
            r#"{"model":"m2","state":{"a":1,"b":[1.5,{"y":null,"x":0}]},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":null}}}}"#,
            r#"{"model":"m","state":{"a":2,"b":[1.5,{"y":null,"x":0}]},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":null}}}}"#,
            r#"{"model":"m","state":{"a":1,"b":[{"y":null,"x":0},1.5]},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":null}}}}"#,
            r#"{"model":"m","state":{"a":1,"b":[1.5,{"y":null,"x":0}]},"assets":{"x":1},"questions":{"q":{"type":"choice","criteria":{"A":null,"B":null}}}}"#,
        ];
        for text in different {
            assert_ne!(identity(text), base, "{text}");
        }
        let request = serde_json::from_str(
            r#"{"model":"m","state":"s","questions":{"q":{"type":"choice","criteria":{"A":null,"B":null}},"u":{"type":"noul"}}}"#,
        )
        .unwrap();
        let asked = wire::check_request(&request, &contract()).unwrap();
        assert_ne!(
            identity_bytes("q", asked.upstream()),
            identity_bytes("u", asked.upstream())
        );
    }
}

/// Sums fine probabilities into coarse labels (a choice question's). Nothing of the fine
/// answer survives but the group sums: they are in the fixed decimal form
/// (`shape::fixed`, so `0.1 + 0.2` and `0.15 + 0.15` print alike), the choice is the most
/// probable coarse label (ties to the earlier label in the contract's order: the coarse
/// labels are ordered by their first member), and the confidence is the choice
/// confidence of the coarse vector, never the fine answer's.
pub fn coarsen(coarsening: &Coarsening, fine: &ClassVector) -> ClassVector {
    let mut probabilities = vec![0.0; coarsening.labels.len()];
    for (fine_index, p) in fine.probabilities.iter().enumerate() {
        if let Some(&coarse) = coarsening.map.get(fine_index) {
            probabilities[coarse] += p;
        }
    }
    for p in &mut probabilities {
        *p = shape::fixed(*p);
    }
    ClassVector {
        choice: wire::argmax(&probabilities),
        confidence: fine
            .confidence
            .map(|_| shape::fixed(shape::choice_confidence(&probabilities))),
        probabilities,
    }
}

fn release_usage<N: Node>(
    contract: &Contract,
    usage: Option<&N>,
) -> Result<Object<'static>, Invalid> {
    let mut out = Object::with_capacity(2);
    let zero = || Json::Number(Number::Unsigned(0));
    // `drop`: schema-complete and carrying nothing: the published schema and the SDKs'
    // strict models require both counts, and zero says nothing about the input.
    let keys: &[&'static str] = match contract.usage {
        Usage::Keep => &["input_tokens", "output_tokens"],
        Usage::Input => &["input_tokens"],
        Usage::Drop => &[],
    };
    if keys.is_empty() {
        out.insert(Cow::Borrowed("input_tokens"), zero());
    }
    for key in keys {
        match usage.and_then(|usage| usage.member(key)) {
            None => {}
            Some(count) if count.is_null() => {}
            Some(count) => {
                let count = count.unsigned().ok_or(Invalid::MissingField)?;
                out.insert(Cow::Borrowed(*key), Json::Number(Number::Unsigned(count)));
            }
        }
    }
    if !contract.usage.keeps() {
        // `input` and `drop`: the output count follows what the model wrote.
        out.insert(Cow::Borrowed("output_tokens"), zero());
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
