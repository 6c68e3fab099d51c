//! A question's released form: [`Form`] writes a released answer (`encode`) and reads
//! one back as a consumer (`read`) or an attacker (`observe`) does.

use std::borrow::Cow;

use super::shape;
use crate::contract::{QuestionRule, Shape, View};
use crate::mechanism::Released;
use crate::wire::json::Object;
use crate::wire::{self, AskedQuestion, Json, Kind, Node};
use crate::workflow;

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
        // A choice outside the labels cannot be written (the release path never makes one).
        let label = self.labels.get(choice)?;
        let withheld = self.withheld(choice);
        let probabilities = self.shown_probabilities(choice, released);
        let confidence = released
            .confidence
            .filter(|_| self.releases_confidence(choice));
        match self.question.kind {
            Kind::Noul => {
                let noul = noul_value(self.labels, label, withheld, probabilities.as_deref());
                out.insert(Cow::Borrowed("noul"), Json::float(noul));
                return Some(Json::Object(out));
            }
            Kind::Choice => {
                out.insert(Cow::Borrowed("choice"), Json::text(label));
            }
            // Box answers are released by `bounding`, never as a class vector.
            Kind::Box => return None,
            Kind::Score => self.write_score(&mut out, label, withheld, probabilities.as_deref()),
        }
        let parts = shape::Parts {
            choice,
            probabilities,
            confidence,
        };
        Some(Json::Object(self.write_parts(out, parts)))
    }

    /// What [`Form::read`] reads from [`Form::encode`]`(choice, released)`, computed
    /// without writing the answer: the same fields through the same fills and filters.
    /// For a choice answer of finite numbers (the native answer WCPQ maps, read once per
    /// answer); anything else is written and read. Equal to writing then reading on every
    /// view, shape and withholding (`tests::reading_an_encoding_is_reading_it_written`),
    /// because finite numbers print and parse back bit for bit and a contract's labels
    /// are distinct.
    pub fn read_encoding(&self, choice: usize, released: &Released) -> Option<workflow::Release> {
        let finite = released
            .probabilities
            .iter()
            .flatten()
            .chain(&released.confidence)
            .all(|x| x.is_finite());
        if self.question.kind != Kind::Choice || !finite {
            return self
                .encode(choice, released)
                .and_then(|value| self.read(&value));
        }
        // No `choice` field is written: nothing reads back.
        if !self.view.has_choice() || released.deny || choice >= self.labels.len() {
            return None;
        }
        let mut parts = shape::Parts {
            choice,
            probabilities: self.shown_probabilities(choice, released),
            confidence: released
                .confidence
                .filter(|_| self.releases_confidence(choice)),
        };
        // The complete shape's fills as written, then the reader's (a no-op on a
        // complete answer).
        shape::fill(self.question.kind, self.labels, &mut parts);
        Some(workflow::Release {
            choice,
            probabilities: parts
                .probabilities
                .filter(|_| self.releases_probabilities(choice))
                .and_then(|entries| entries.into_iter().collect::<Option<Vec<f64>>>()),
            confidence: parts
                .confidence
                .filter(|_| self.releases_confidence(choice)),
        })
    }

    /// [`Form::read_encoding`] of a provider's answer as read (`probabilities` in the
    /// labels' order, nothing denied), bit for bit the same reading. A choice answer of
    /// finite numbers whose every probability the form shows, with its confidence where
    /// the form shows one, reads as it stands (its vector copied once: the mapper reads
    /// every native answer); anything else goes through `read_encoding`.
    pub fn read_native(
        &self,
        choice: usize,
        probabilities: &[f64],
        confidence: Option<f64>,
    ) -> Option<workflow::Release> {
        let as_it_stands = self.question.kind == Kind::Choice
            && self.view.has_choice()
            && choice < self.labels.len()
            && probabilities.len() == self.labels.len()
            && self.releases_probabilities(choice)
            && probabilities
                .iter()
                .chain(&confidence)
                .all(|x| x.is_finite())
            && (confidence.is_some() || !self.releases_confidence(choice));
        if as_it_stands {
            return Some(workflow::Release {
                choice,
                probabilities: Some(probabilities.to_vec()),
                confidence: confidence.filter(|_| self.releases_confidence(choice)),
            });
        }
        let released = Released {
            probabilities: probabilities.iter().copied().map(Some).collect(),
            confidence,
            deny: false,
        };
        self.read_encoding(choice, &released)
    }

    /// The probabilities an answer selecting `choice` shows: when the view has them and
    /// the mechanism released any (a WCPQ `choice_only` fallback releases none); a
    /// withheld selection keeps only its own entry (residual scores leak it).
    fn shown_probabilities(&self, choice: usize, released: &Released) -> Option<Vec<Option<f64>>> {
        let k = self.labels.len();
        let withheld = self.withheld(choice);
        let entry = |i: usize| released.probabilities.get(i).copied().flatten();
        let show_probabilities =
            self.view.has_probabilities() && (0..k).any(|i| entry(i).is_some());
        show_probabilities.then(|| {
            (0..k)
                .map(|i| entry(i).filter(|_| !withheld || i == choice))
                .collect()
        })
    }

    /// Writes a score answer's `score` (the expected level under the shown
    /// probabilities, else the selected level) and its `legend`.
    fn write_score(
        &self,
        out: &mut Object<'a>,
        label: &str,
        withheld: bool,
        probabilities: Option<&[Option<f64>]>,
    ) {
        let labels = self.labels;
        let k = labels.len();
        let level = |index: usize| labels[index].parse::<f64>().unwrap_or(0.0);
        let score = if probabilities.is_some() && !withheld {
            let mass: f64 = present(probabilities).map(|(_, p)| p).sum();
            let total: f64 = present(probabilities).map(|(i, p)| level(i) * p).sum();
            if present(probabilities).count() == k || mass <= 0.0 {
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

    /// Writes the probabilities and the confidence, after the complete shape fills
    /// every other required field (`shape::fill`).
    fn write_parts(&self, mut out: Object<'a>, mut parts: shape::Parts) -> Object<'a> {
        let labels = self.labels;
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
        out
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

/// The released entries with their classes (read by score and noul answers only).
fn present(probabilities: Option<&[Option<f64>]>) -> impl Iterator<Item = (usize, f64)> + '_ {
    probabilities
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, p)| p.map(|p| (i, p)))
}

/// A noul answer's `noul`: the shown probability of `true`, else the hard outcome of
/// the selected label.
fn noul_value(
    labels: &[String],
    label: &str,
    withheld: bool,
    probabilities: Option<&[Option<f64>]>,
) -> f64 {
    let hard = if label == "true" { 1.0 } else { 0.0 };
    let p_true = labels
        .iter()
        .position(|l| l == "true")
        .and_then(|t| present(probabilities).find(|(i, _)| *i == t))
        .map(|(_, p)| p);
    match p_true {
        Some(p) if !withheld => p,
        _ => hard,
    }
}

fn noul_vector(labels: &[String], p_true: f64) -> Vec<f64> {
    labels
        .iter()
        .map(|l| if l == "true" { p_true } else { 1.0 - p_true })
        .collect()
}
