//! The System One wire format as the release path needs it: checking a
//! request against a contract, and reading native answers into class vectors
//! aligned by class id (never by position).

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};

use crate::contract::{Contract, QuestionRule};
pub use answer::{
    BoxAnswer, BoxEdges, Invalid, MAX_MODEL_ID_LEN, ReadAnswers, argmax, is_calendar_date,
    is_model_id, parse_answer, parse_box, read_answers, sum_tolerance,
};
pub use canonical::{canonical_json, same_json};
pub use json::{Json, Node};
pub use known::{KnownQuestions, KnownRooms, check_bytes};
pub use request::RequestError;
pub use schema::{SchemaIssue, json_invalid};

mod answer;
pub mod assets;
mod canonical;
pub mod json;
mod known;
pub mod provider;
pub mod questions;
mod request;
mod schema;

/// The answer types a contract can release (a contract question's `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `choice`: labels from `criteria`.
    Choice,
    /// `score`: levels `"0".."N-1"`.
    Score,
    /// `noul`: outcomes `false`, `true`.
    Noul,
    /// `box`: where an object is in the request's image, as four edges (fractions of the
    /// image from its top-left corner) and a confidence; no classes.
    Box,
}

/// A request checked against a contract.
///
/// It holds the body that goes upstream in parts: the model (the contract's when it
/// pins one), the caller's `state` (and `assets`), and each question as its contract
/// states it (`Pinned::upstream`), shared with the contract when the text is the
/// contract's. [`Asked::upstream_bytes`] writes that body without building it as one
/// `Value`; [`Asked::upstream`] builds it on first use. The release path reads these,
/// never the caller's body.
#[derive(Debug, Clone)]
pub struct Asked {
    /// The requested model.
    pub model: String,
    /// The questions, in request order (shared with the contract's known question set
    /// the request's `questions` matched, if any: `KnownQuestions`).
    pub questions: Arc<[AskedQuestion]>,
    /// The upstream body's members before `questions`, in this order: the model that
    /// goes upstream (pinned or the caller's), then the caller's `state` and `assets`
    /// where present.
    upstream_model: String,
    /// The caller's `state` as it goes upstream: its bytes as written (`json::write`).
    state: Option<Vec<u8>>,
    /// The same `state` as a `Value`, read back from those bytes where one is read (a
    /// logistic posterior's public features, `upstream()`, the offline tools).
    state_value: OnceLock<Value>,
    assets: Option<Value>,
    /// Each question's upstream form, keyed by its id, in request order.
    upstream_questions: UpstreamQuestions,
    /// The whole upstream body, built from the parts on first use.
    upstream: OnceLock<Value>,
}

/// One question of a checked request.
#[derive(Debug, Clone)]
pub struct AskedQuestion {
    /// The caller's question id (covered by the contract).
    pub id: String,
    /// The question type.
    pub kind: Kind,
    /// For score questions, the legend echoed from the request's criteria (shared with
    /// the contract when its text is the contract's: the same for every request).
    pub legend: Option<Arc<Map<String, Value>>>,
}

// === impl Kind ===

impl Kind {
    /// The wire `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Choice => "choice",
            Kind::Score => "score",
            Kind::Noul => "noul",
            Kind::Box => "box",
        }
    }
}

/// Checks a request body against a contract and builds what goes upstream. First the
/// System One request schema (every violation is reported, as the real API's validation
/// does): `model` a string, `state` a string, object or array, `questions` a non-empty map
/// of well-formed questions. Then the contract: a model is named, every question is
/// covered, its type and classes match the contract, and its text is the contract's or
/// absent (`Pinned`). The upstream body is rebuilt from scratch: the model (pinned or the
/// caller's), `state` and `assets` as sent, and each question as its contract states it.
pub fn check_request(body: &Value, contract: &Contract) -> Result<Asked, RequestError> {
    let checked = check_body(&Json::from_value(body), contract, None)?;
    let state = body.get("state");
    let asked = checked.into_asked(state.map(json::write::to_vec), body.get("assets").cloned());
    if let Some(state) = state {
        let _ = asked.state_value.set(state.clone());
    }
    Ok(asked)
}

/// [`check_request`] on a body read straight from its bytes (`Json::parse`), as the proxy
/// reads a caller's request: the same checks and the same upstream body, without a
/// `Value` built for the whole request.
pub fn check_json(body: &Json<'_>, contract: &Contract) -> Result<Asked, RequestError> {
    check_sent(body, None, contract)
}

/// [`check_json`] with the caller's `state` as sent: `state` is the bytes of the body's
/// `state` member as they stood in the request ([`Json::parse_with_member`]), and they go
/// upstream byte for byte (a 30-digit integer, `-0` or `1e2` unchanged). Without them
/// (`None`), the state goes as this crate writes the document's value. Either way its
/// `Value` is made only where one is read (`Asked::state`), and seeded noise is keyed on
/// that value's canonical form, so no spelling of the same state draws other noise.
pub fn check_sent(
    body: &Json<'_>,
    state: Option<&[u8]>,
    contract: &Contract,
) -> Result<Asked, RequestError> {
    let checked = check_body(body, contract, None)?;
    Ok(with_content(checked, body, state))
}

/// The checked request with the caller's `state` (its bytes as sent where given, else
/// as written) and `assets`.
fn with_content(checked: Checked, body: &Json<'_>, state: Option<&[u8]>) -> Asked {
    let state = match state {
        Some(sent) => body.member("state").map(|_| sent.to_vec()),
        None => body.member("state").map(json::write::to_vec),
    };
    checked.into_asked(state, body.member("assets").map(Json::to_value))
}

/// Each question's upstream form, keyed by its id, in request order.
type UpstreamQuestions = Arc<[(String, Arc<UpstreamQuestion>)]>;

/// A request that passed every check, before the caller's content joins it.
struct Checked {
    model: String,
    questions: Arc<[AskedQuestion]>,
    upstream_questions: UpstreamQuestions,
    /// The model that goes upstream (pinned or the caller's).
    upstream_model: String,
}

impl Checked {
    /// The checked request with the caller's `state` (as written) and `assets` in its
    /// upstream body.
    fn into_asked(self, state: Option<Vec<u8>>, assets: Option<Value>) -> Asked {
        Asked {
            model: self.model,
            questions: self.questions,
            upstream_model: self.upstream_model,
            state,
            state_value: OnceLock::new(),
            assets,
            upstream_questions: self.upstream_questions,
            upstream: OnceLock::new(),
        }
    }
}

/// The checks of a request body; with `known`, its `questions` is a stand-in for that
/// value, checked before: its questions are taken as they were.
fn check_body(
    body: &Json<'_>,
    contract: &Contract,
    known: Option<&KnownQuestions>,
) -> Result<Checked, RequestError> {
    let issues = schema::json_schema_issues(body, known.is_some());
    if !issues.is_empty() {
        return Err(RequestError::Schema(issues));
    }
    let refuse = |message: String| RequestError::Contract(message);
    let model = match body.member("model") {
        Some(Json::String(model)) if !model.trim().is_empty() => model.to_string(),
        _ => return Err(refuse("`model` must name a model".into())),
    };
    // Checked here, not only in the provider's answer: a model id the proxy could not release
    // would otherwise cost a provider call and come back as a 502. A pinned model replaces it.
    if contract.model.is_none() && !is_model_id(&model) {
        return Err(refuse(format!(
            "`model` must be a plain model id: 1 to {MAX_MODEL_ID_LEN} ASCII letters, digits and `. _ : / -`, a letter or digit first"
        )));
    }
    let upstream_model = contract.model.clone().unwrap_or_else(|| model.clone());
    if let Some(known) = known {
        return Ok(Checked {
            upstream_model,
            model,
            questions: known.questions.clone(),
            upstream_questions: known.upstream_questions.clone(),
        });
    }
    let questions = body
        .member("questions")
        .and_then(Json::as_object)
        .ok_or_else(|| refuse("the request has no `questions`".into()))?;
    let mut asked = Vec::with_capacity(questions.len());
    let mut upstream_questions = Vec::with_capacity(questions.len());
    for (id, question) in questions.iter() {
        let rule = contract
            .questions
            .get(id)
            .ok_or_else(|| RequestError::NotReleased {
                question: id.to_string(),
                contract: contract.name.clone(),
            })?;
        let (checked, upstream) = request::check_question(id, question, rule)?;
        asked.push(checked);
        upstream_questions.push((id.to_string(), upstream));
    }
    Ok(Checked {
        upstream_model,
        model,
        questions: asked.into(),
        upstream_questions: upstream_questions.into(),
    })
}

impl Asked {
    /// Replaces the upstream body's `assets` with the checked and rebuilt ones
    /// (`assets::check`), or removes them when there are none.
    pub fn set_assets(&mut self, assets: Option<Value>) {
        self.assets = assets;
        self.upstream = OnceLock::new();
    }

    /// The body that goes upstream, as one `Value` (built on first use; the proxy's
    /// request path writes [`Asked::upstream_bytes`] instead).
    pub fn upstream(&self) -> &Value {
        self.upstream.get_or_init(|| {
            let mut body = Map::with_capacity(4);
            body.insert("model".into(), Value::String(self.upstream_model.clone()));
            if self.state.is_some() {
                body.insert("state".into(), self.state().clone());
            }
            if let Some(assets) = &self.assets {
                body.insert("assets".into(), assets.clone());
            }
            let questions = self
                .upstream_questions
                .iter()
                .map(|(id, question)| (id.clone(), question.value.clone()))
                .collect();
            body.insert("questions".into(), Value::Object(questions));
            Value::Object(body)
        })
    }

    /// The body that goes upstream as its bytes: exactly `upstream()` written by
    /// `json::write`, without building it.
    pub fn upstream_bytes(&self) -> Vec<u8> {
        use json::write::{Document, write_object, write_str};
        // Room for the questions and the state as written, and for assets of a few hundred
        // bytes: most bodies are written without growing the vector.
        let questions: usize = self
            .upstream_questions
            .iter()
            .map(|(id, q)| id.len() + q.bytes.len() + 4)
            .sum();
        let state = self.state.as_ref().map_or(0, Vec::len);
        let mut out = Vec::with_capacity(questions + state + self.upstream_model.len() + 1024);
        out.push(b'{');
        write_str("model", &mut out);
        out.push(b':');
        write_str(&self.upstream_model, &mut out);
        out.push(b',');
        if let Some(state) = &self.state {
            write_str("state", &mut out);
            out.push(b':');
            out.extend_from_slice(state);
            out.push(b',');
        }
        if let Some(assets) = &self.assets {
            write_str("assets", &mut out);
            out.push(b':');
            assets.write(&mut out);
            out.push(b',');
        }
        write_str("questions", &mut out);
        out.push(b':');
        let questions = self.upstream_questions.iter();
        write_object(questions.map(|(id, q)| (id.as_str(), &**q)), &mut out);
        out.push(b'}');
        out
    }

    /// The caller's `state` as it goes upstream (`null` when absent).
    ///
    /// Read back from the bytes that go upstream on first use: they are `json::write`'s
    /// writing of the caller's state, serde_json's own bytes for it, which serde_json
    /// reads back to the same value (finite floats in their shortest round-tripping
    /// form, nesting within its recursion limit, as the request's was).
    pub fn state(&self) -> &Value {
        self.state_value.get_or_init(|| {
            self.state
                .as_deref()
                .and_then(|bytes| serde_json::from_slice(bytes).ok())
                .unwrap_or(Value::Null)
        })
    }

    /// The caller's `assets` as they go upstream, if any.
    pub fn assets(&self) -> Option<&Value> {
        self.assets.as_ref()
    }
}

/// A question as it goes upstream: its `Value`, and the bytes `json::write` writes for
/// it, written once when the form is built (a pinned form once per contract) and copied
/// into every upstream body as they are.
#[derive(Debug)]
pub(crate) struct UpstreamQuestion {
    value: Value,
    bytes: Box<[u8]>,
}

impl UpstreamQuestion {
    fn new(value: Value) -> UpstreamQuestion {
        let bytes = json::write::to_vec(&value).into_boxed_slice();
        UpstreamQuestion { value, bytes }
    }
}

impl json::write::Document for UpstreamQuestion {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes);
    }
}

/// The contract's own text: the same upstream question (and score legend) for every
/// request, built once.
fn pinned_upstream(
    kind: Kind,
    rule: &QuestionRule,
) -> (Arc<UpstreamQuestion>, Option<Arc<Map<String, Value>>>) {
    let (upstream, legend) = rule.pinned_upstream.get_or_init(|| {
        let upstream = upstream_question(
            kind,
            &rule.classes,
            Text {
                instructions: rule.question.instructions.clone(),
                descriptions: rule.question.descriptions.clone(),
            },
        );
        let legend = legend_of(kind, &upstream);
        (Arc::new(UpstreamQuestion::new(upstream)), legend)
    });
    (Arc::clone(upstream), legend.clone())
}

/// A score question's legend (level → its text as sent upstream); `None` for other types.
fn legend_of(kind: Kind, upstream: &Value) -> Option<Arc<Map<String, Value>>> {
    match kind {
        Kind::Score => upstream
            .get("criteria")
            .and_then(Value::as_array)
            .map(|levels| {
                levels
                    .iter()
                    .enumerate()
                    .map(|(level, text)| (level.to_string(), text.clone()))
                    .collect()
            })
            .map(Arc::new),
        _ => None,
    }
}

/// A question's text: instructions and one description per class (contract order).
struct Text {
    instructions: Option<Value>,
    descriptions: Vec<Option<Value>>,
}

/// The question as it goes upstream: its type, its options in the contract's order
/// (score levels from 0 up), the instructions when there are any, and each option's
/// description or `null` ("interpreted by its name alone"). A score level cannot be
/// null on the wire, so a level without a description is sent as its name; a noul
/// question without any outcome description is sent without `criteria`.
fn upstream_question(kind: Kind, classes: &[String], text: Text) -> Value {
    let mut out = Map::with_capacity(3);
    out.insert("type".into(), Value::String(kind.as_str().into()));
    if let Some(instructions) = text.instructions {
        out.insert("instructions".into(), instructions);
    }
    let described = || classes.iter().zip(text.descriptions.iter().cloned());
    match kind {
        Kind::Choice => {
            let criteria = described()
                .map(|(class, description)| (class.clone(), description.unwrap_or(Value::Null)))
                .collect();
            out.insert("criteria".into(), Value::Object(criteria));
        }
        Kind::Score => {
            let mut levels: Vec<(usize, &String, Option<Value>)> = described()
                .map(|(class, description)| (class.parse().unwrap_or(0), class, description))
                .collect();
            levels.sort_by_key(|(level, _, _)| *level);
            let criteria = levels
                .into_iter()
                .map(|(_, class, description)| {
                    description.unwrap_or_else(|| Value::String(class.clone()))
                })
                .collect();
            out.insert("criteria".into(), Value::Array(criteria));
        }
        // A box question is its instructions alone.
        Kind::Box => {}
        Kind::Noul => {
            if text.descriptions.iter().any(Option::is_some) {
                let criteria = described()
                    .map(|(class, description)| (class.clone(), description.unwrap_or(Value::Null)))
                    .collect();
                out.insert("criteria".into(), Value::Object(criteria));
            }
        }
    }
    Value::Object(out)
}

/// Whether `classes` are the levels `"0".."N-1"` in some order (a score question's classes).
pub(crate) fn is_level_permutation(classes: &[String]) -> bool {
    let mut seen = vec![false; classes.len()];
    classes.iter().all(|class| match class.parse::<usize>() {
        Ok(level) if level < seen.len() && level.to_string() == *class && !seen[level] => {
            seen[level] = true;
            true
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests;
