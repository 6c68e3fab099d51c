//! One answer through the release path: coarsening, the mechanism (with the WCPQ
//! mapper's round trip through [`Form`]), the finite check and the encoding, and the
//! identity that keys seeded noise.

use std::borrow::Cow;
use std::cell::RefCell;

use serde_json::Value;

use super::{AnswerRecord, Evaluation, Form, Options, shape};
use crate::contract::{Coarsening, QuestionRule, Shape};
use crate::mechanism::{self, ClassVector, Context, Released};
use crate::wcpq::{Candidate, RoundTrip};
use crate::wire::json::Json;
use crate::wire::{self, Asked, AskedQuestion, Invalid, Node};
use crate::workflow;

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

/// The last candidate the WCPQ mapper round-tripped, with its encoding (a kept
/// codeword's borrowed from where it is kept).
type LastEncoded<'a> = RefCell<Option<(usize, Cow<'a, Released>, Option<Json<'a>>)>>;

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
    let last_encoded: LastEncoded<'a> = RefCell::new(None);
    let applied = if view.has_probabilities() || view.has_confidence() {
        apply_mechanism(rule, &form, &vector, asked, options, &last_encoded)
    } else {
        nothing_released()
    };
    let released = &applied.released;
    check_finite(released)?;
    let withheld = form.withheld(vector.choice);
    let value = encode_once(&form, vector.choice, released, last_encoded.take());
    let evaluation = match (&rule.workflows, options.evaluate, &value) {
        (Some(_), true, Some(value)) => native_reading(&form, &vector)
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

/// The native answer as the recipient would read it had it gone out unchanged (read
/// by WCPQ and by the evaluation only).
fn native_reading(form: &Form<'_>, vector: &ClassVector) -> Option<workflow::Release> {
    form.read_native(vector.choice, &vector.probabilities, vector.confidence)
}

/// Applies the rule's mechanism to `vector`, recording in `last_encoded` the last
/// candidate the WCPQ mapper round-tripped.
fn apply_mechanism<'a>(
    rule: &'a QuestionRule,
    form: &Form<'a>,
    vector: &ClassVector,
    asked: &Asked,
    options: &mut Options<'_>,
    last_encoded: &LastEncoded<'a>,
) -> mechanism::Applied {
    let question = form.question;
    let state = || asked.state();
    let identity = || identity_bytes(&question.id, asked.upstream());
    let roundtrip = Roundtrip {
        rule,
        form,
        last_encoded,
    };
    let native = || native_reading(form, vector);
    let tie_order = tie_order(vector.probabilities.len());
    let mut context = Context {
        state: &state,
        rng: options.rng,
        roundtrip: &roundtrip,
        native: &native,
        identity: &identity,
        tie_order: &tie_order,
        kind: question.kind,
        labels: rule.released_labels(),
    };
    rule.mechanism.apply(vector, &mut context)
}

/// The WCPQ mapper's round trip of one answer: each candidate encoded and read back (a
/// codeword's kept encoding, `Codewords`, where it has one), the last one recorded in
/// `last_encoded` with its encoding.
struct Roundtrip<'r, 'a> {
    rule: &'a QuestionRule,
    form: &'r Form<'a>,
    last_encoded: &'r LastEncoded<'a>,
}

impl RoundTrip for Roundtrip<'_, '_> {
    fn roundtrip(&self, candidate: Candidate<'_>) -> Option<workflow::Release> {
        let rule = self.rule;
        let encode = || encode_candidate(self.form, candidate.release);
        let kept = rule
            .codewords
            .get(&rule.mechanism, self.form, candidate, encode);
        if let Some(entry) = kept {
            self.last_encoded.replace(Some((
                candidate.release.choice,
                Cow::Borrowed(&entry.released),
                Some(Json::Written(&entry.written)),
            )));
            return entry.back.clone();
        }
        let (released, value) = encode_candidate(self.form, candidate.release);
        let back = value
            .as_ref()
            .and_then(|value| read_encoded(self.form, value));
        self.last_encoded.replace(Some((
            candidate.release.choice,
            Cow::Owned(released),
            value,
        )));
        back
    }
}

/// Ties follow the contract's class order (a choice question's options go upstream in
/// it). A longer vector than a contract can have (none reaches here) gets its own.
fn tie_order(n: usize) -> Cow<'static, [usize]> {
    match CLASS_ORDER.get(..n) {
        Some(order) => Cow::Borrowed(order),
        None => Cow::Owned((0..n).collect()),
    }
}

/// What a view with neither probabilities nor a confidence releases: nothing.
fn nothing_released() -> mechanism::Applied {
    mechanism::Applied {
        released: Released {
            probabilities: Vec::new(),
            confidence: None,
            deny: false,
        },
        outcome: mechanism::Outcome::Applied,
        mapping_seconds: None,
    }
}

/// Refuses a release with a non-finite probability or confidence.
fn check_finite(released: &Released) -> Result<(), Invalid> {
    let finite = released
        .probabilities
        .iter()
        .flatten()
        .all(|p| p.is_finite())
        && released.confidence.is_none_or(f64::is_finite);
    if !finite {
        return Err(Invalid::BadProbability);
    }
    Ok(())
}

/// The encoding of `released`: the mapper's last one when it is the same candidate,
/// else a fresh one.
fn encode_once<'a>(
    form: &Form<'a>,
    choice: usize,
    released: &Released,
    last: Option<(usize, Cow<'a, Released>, Option<Json<'a>>)>,
) -> Option<Json<'a>> {
    match last {
        Some((last_choice, candidate, value))
            if last_choice == choice && same_bits(&candidate, released) =>
        {
            value
        }
        _ => form.encode(choice, released),
    }
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

#[cfg(test)]
mod identity_tests {
    use super::*;
    use crate::config::Config;
    use crate::contract::Contract;

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
