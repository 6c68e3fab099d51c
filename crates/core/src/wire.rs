//! The System One wire format as the release path needs it: checking a
//! request against a contract, and reading native answers into class vectors
//! aligned by class id (never by position).

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use crate::contract::{Contract, QuestionRule};
use crate::mechanism::ClassVector;
pub use json::{Json, Node};

pub mod assets;
pub mod json;
pub mod provider;
pub mod questions;

/// Tolerance on the sum of a native probability vector.
pub const SUM_TOLERANCE: f64 = 1e-3;

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
    /// The questions, in request order.
    pub questions: Vec<AskedQuestion>,
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
    upstream_questions: Vec<(String, Arc<UpstreamQuestion>)>,
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

/// Why a request is refused.
///
/// A body that does not follow the System One request schema is a
/// [`RequestError::Schema`] (422, FastAPI's `{"detail": [{"loc", "msg", "type"}]}`
/// as the real API sends it); a well-formed request its contract cannot serve
/// is a [`RequestError::Contract`] (400, `{"detail": {"error_type", "message"}}`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Schema violations, in body order (never empty).
    #[error("{}", schema_message(.0))]
    Schema(Vec<SchemaIssue>),
    /// The request is well-formed but its contract cannot serve it: a
    /// question outside the contract, labels or levels that differ from the
    /// contract's classes, a type the contract cannot release, a blank model.
    #[error("{0}")]
    Contract(String),
    /// A question the contract does not release (it does not list it): 403
    /// `question_not_released`, naming the question. Typed clients get an error they can
    /// read instead of an answer missing from `answers`.
    #[error(
        "question `{question}` is not released by release contract `{contract}` (it is not covered)"
    )]
    NotReleased {
        /// The caller's question id.
        question: String,
        /// The contract's name.
        contract: String,
    },
    /// A question's instructions or a description differ from the text its contract
    /// pins (400 `question_text_mismatch`). Names the question and the field, never
    /// the text.
    #[error(
        "question `{question}`: `{field}` differs from the text its release contract asks; send the contract's text or leave it out"
    )]
    TextMismatch {
        /// The question id (a contract key).
        question: String,
        /// `instructions`, `criteria.LABEL` or `criteria[LEVEL]`.
        field: String,
    },
}

/// One schema violation, as a FastAPI validation error entry. It never echoes
/// the caller's input (no `input` member); `loc` names where, `kind` is
/// pydantic's error type slug (`missing`, `string_type`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaIssue {
    /// Path into the request: `"body"`, then keys (and the question type
    /// for a question's own fields, as pydantic's tagged unions do).
    pub loc: Vec<Value>,
    /// Human message.
    pub msg: String,
    /// Error type slug.
    pub kind: &'static str,
}

/// Why a native answer is rejected (a metrics label: keep it bounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// The body is not JSON.
    #[error("not_json")]
    NotJson,
    /// A required field is missing or has the wrong JSON type.
    #[error("missing_field")]
    MissingField,
    /// The answer's type differs from the question's.
    #[error("type_mismatch")]
    TypeMismatch,
    /// A probability or confidence is outside [0, 1] or not finite.
    #[error("bad_probability")]
    BadProbability,
    /// Probabilities do not sum to 1 within the tolerance.
    #[error("probability_sum")]
    ProbabilitySum,
    /// The probabilities do not cover exactly the question's classes.
    #[error("class_mismatch")]
    ClassMismatch,
    /// The selected choice is not one of the classes.
    #[error("unknown_choice")]
    UnknownChoice,
    /// The selected choice has a lower probability than another class: a choice is the
    /// class of highest probability (any of them on a tie).
    #[error("choice_not_most_probable")]
    ChoiceNotMostProbable,
    /// An asked question has no answer.
    #[error("missing_answer")]
    MissingAnswer,
    /// The answers name a question the request did not ask: the answer is not to this
    /// request (a provider answers exactly the questions asked).
    #[error("unasked_answer")]
    UnaskedAnswer,
    /// The answer's `model` is not a well-formed model id (`is_model_id`).
    #[error("bad_model")]
    BadModel,
    /// A `/v1/models` entry lacks a field or has one the proxy cannot vouch for
    /// (`is_model_id`, `is_calendar_date`); the entry is dropped.
    #[error("bad_model_entry")]
    BadModelEntry,
    /// A box whose top is below its bottom or whose left is right of its right edge.
    #[error("bad_box")]
    BadBox,
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

// === impl Invalid ===

impl Invalid {
    /// Every reason, for pre-registering metrics.
    pub const ALL: [Invalid; 13] = [
        Invalid::NotJson,
        Invalid::MissingField,
        Invalid::TypeMismatch,
        Invalid::BadProbability,
        Invalid::ProbabilitySum,
        Invalid::ClassMismatch,
        Invalid::UnknownChoice,
        Invalid::ChoiceNotMostProbable,
        Invalid::MissingAnswer,
        Invalid::UnaskedAnswer,
        Invalid::BadModel,
        Invalid::BadModelEntry,
        Invalid::BadBox,
    ];
}

/// Checks a request body against a contract and builds what goes upstream. First the
/// System One request schema (every violation is reported, as the real API's validation
/// does): `model` a string, `state` a string, object or array, `questions` a non-empty map
/// of well-formed questions. Then the contract: a model is named, every question is
/// covered, its type and classes match the contract, and its text is the contract's or
/// absent (`Pinned`). The upstream body is rebuilt from scratch: the model (pinned or the
/// caller's), `state` and `assets` as sent, and each question as its contract states it.
pub fn check_request(body: &Value, contract: &Contract) -> Result<Asked, RequestError> {
    let checked = check_body(&Json::from_value(body), contract)?;
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
    let checked = check_body(body, contract)?;
    let state = match state {
        Some(sent) => body.member("state").map(|_| sent.to_vec()),
        None => body.member("state").map(json::write::to_vec),
    };
    Ok(checked.into_asked(state, body.member("assets").map(Json::to_value)))
}

/// A request that passed every check, before the caller's content joins it.
struct Checked {
    model: String,
    questions: Vec<AskedQuestion>,
    upstream_questions: Vec<(String, Arc<UpstreamQuestion>)>,
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

fn check_body(body: &Json<'_>, contract: &Contract) -> Result<Checked, RequestError> {
    let issues = json_schema_issues(body);
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
        let (checked, upstream) = check_question(id, question, rule)?;
        asked.push(checked);
        upstream_questions.push((id.to_string(), upstream));
    }
    Ok(Checked {
        upstream_model: contract.model.clone().unwrap_or_else(|| model.clone()),
        model,
        questions: asked,
        upstream_questions,
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

/// The question types of the System One schema (a tagged union on `type`).
const QUESTION_TAGS: [&str; 4] = ["noul", "choice", "score", "box"];

/// Every schema violation of a request body, in body order (empty when valid).
/// Unknown members are ignored, as the real API's models ignore them.
fn json_schema_issues(body: &Json<'_>) -> Vec<SchemaIssue> {
    let mut issues = Vec::new();
    let at = |path: &[&str]| -> Vec<Value> {
        std::iter::once("body")
            .chain(path.iter().copied())
            .map(|key| Value::String(key.to_string()))
            .collect()
    };
    let Some(object) = body.as_object() else {
        issues.push(issue(at(&[]), Problem::NotAnObject));
        return issues;
    };
    match object.get("model") {
        None => issues.push(issue(at(&["model"]), Problem::Missing)),
        Some(Json::String(_)) => {}
        Some(_) => issues.push(issue(at(&["model"]), Problem::StringType)),
    }
    match object.get("state") {
        None => issues.push(issue(at(&["state"]), Problem::Missing)),
        Some(state) => content(state, false, || at(&["state"]), &mut issues),
    }
    match object.get("questions") {
        None => issues.push(issue(at(&["questions"]), Problem::Missing)),
        Some(Json::Object(questions)) if questions.is_empty() => {
            issues.push(issue(at(&["questions"]), Problem::TooShortDict));
        }
        Some(Json::Object(questions)) => {
            for (id, question) in questions.iter() {
                question_issues(&|| at(&["questions", id]), question, &mut issues);
            }
        }
        Some(_) => issues.push(issue(at(&["questions"]), Problem::DictType)),
    }
    issues
}

/// The issues of one question; `loc` builds its location (only when there is an issue: a
/// valid request allocates no paths).
fn question_issues(
    loc: &dyn Fn() -> Vec<Value>,
    question: &Json<'_>,
    issues: &mut Vec<SchemaIssue>,
) {
    let Some(object) = question.as_object() else {
        issues.push(issue(loc(), Problem::NotAnObject));
        return;
    };
    let tag = match object.get("type") {
        None => {
            issues.push(issue(loc(), Problem::TagNotFound));
            return;
        }
        Some(tag) => match tag.text().filter(|tag| QUESTION_TAGS.contains(tag)) {
            Some(tag) => tag,
            None => {
                issues.push(issue(loc(), Problem::TagInvalid));
                return;
            }
        },
    };
    let field = |name: &str| -> Vec<Value> {
        let mut path = loc();
        path.push(Value::String(tag.to_string()));
        path.push(Value::String(name.to_string()));
        path
    };
    let member = |name: &str, key: Value| {
        let mut path = field(name);
        path.push(key);
        path
    };
    if let Some(instructions) = object.get("instructions") {
        content(instructions, true, || field("instructions"), issues);
    }
    let criteria = object.get("criteria");
    match (tag, criteria) {
        ("choice", None) | ("score", None) => {
            issues.push(issue(field("criteria"), Problem::Missing))
        }
        ("choice", Some(Json::Object(options))) => {
            for (label, description) in options.iter() {
                let path = || member("criteria", Value::String(label.to_string()));
                content(description, true, path, issues);
            }
        }
        ("choice", Some(_)) => issues.push(issue(field("criteria"), Problem::DictType)),
        ("score", Some(Json::Array(levels))) if levels.is_empty() => {
            issues.push(issue(field("criteria"), Problem::TooShortList));
        }
        ("score", Some(Json::Array(levels))) => {
            // A null level stands for the contract's text (`Pinned`), as null does for
            // instructions and the other types' descriptions.
            for (level, description) in levels.iter().enumerate() {
                content(
                    description,
                    true,
                    || member("criteria", Value::from(level)),
                    issues,
                );
            }
        }
        ("score", Some(_)) => issues.push(issue(field("criteria"), Problem::ListType)),
        ("noul", Some(Json::Object(outcomes))) => {
            for outcome in ["true", "false"] {
                if let Some(description) = outcomes.get(outcome) {
                    let path = || member("criteria", Value::String(outcome.into()));
                    content(description, true, path, issues);
                }
            }
        }
        ("noul", Some(Json::Null) | None) => {}
        ("noul", Some(_)) => issues.push(issue(field("criteria"), Problem::ModelType)),
        _ => {}
    }
}

/// Content is `str | dict | list` (optionally `| None`): a value of another
/// type fails every member of the union, reported per member as pydantic does.
fn content(
    value: &Json<'_>,
    nullable: bool,
    loc: impl FnOnce() -> Vec<Value>,
    issues: &mut Vec<SchemaIssue>,
) {
    match value {
        Json::String(_) | Json::Object(_) | Json::Array(_) => {}
        Json::Null if nullable => {}
        _ => {
            let loc = loc();
            for (member, kind) in [
                ("str", Problem::StringType),
                ("dict[str,any]", Problem::DictType),
                ("list[any]", Problem::ListType),
            ] {
                let mut path = loc.clone();
                path.push(Value::String(member.into()));
                issues.push(issue(path, kind));
            }
        }
    }
}

/// The schema problems the request check reports.
#[derive(Debug, Clone, Copy)]
enum Problem {
    Missing,
    StringType,
    DictType,
    ListType,
    ModelType,
    TooShortDict,
    TooShortList,
    TagNotFound,
    TagInvalid,
    NotAnObject,
}

/// A schema issue with pydantic's type slug and message for its problem.
fn issue(loc: Vec<Value>, problem: Problem) -> SchemaIssue {
    let (kind, msg) = match problem {
        Problem::Missing => ("missing", "Field required"),
        Problem::StringType => ("string_type", "Input should be a valid string"),
        Problem::DictType => ("dict_type", "Input should be a valid dictionary"),
        Problem::ListType => ("list_type", "Input should be a valid list"),
        Problem::ModelType => (
            "model_type",
            "Input should be a valid dictionary or instance of NoulCriteria",
        ),
        Problem::TooShortDict => (
            "too_short",
            "Dictionary should have at least 1 item after validation, not 0",
        ),
        Problem::TooShortList => (
            "too_short",
            "List should have at least 1 item after validation, not 0",
        ),
        Problem::TagNotFound => (
            "union_tag_not_found",
            "Unable to extract tag using discriminator 'type'",
        ),
        Problem::TagInvalid => (
            "union_tag_invalid",
            "Input tag found using 'type' does not match any of the expected tags: 'noul', 'choice', 'score', 'box'",
        ),
        Problem::NotAnObject => (
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
        ),
    };
    SchemaIssue {
        loc,
        msg: msg.to_string(),
        kind,
    }
}

/// The issue of a body that is not JSON at all: `json_invalid` at the byte
/// offset where parsing failed (`line` and `column` as serde_json counts them).
pub fn json_invalid(bytes: &[u8], line: usize, column: usize, reason: &str) -> SchemaIssue {
    let line_start: usize = bytes
        .split(|byte| *byte == b'\n')
        .take(line.saturating_sub(1))
        .map(|text| text.len() + 1)
        .sum();
    let offset = (line_start + column.saturating_sub(1)).min(bytes.len());
    SchemaIssue {
        loc: vec![Value::String("body".into()), Value::from(offset)],
        msg: format!("JSON decode error: {reason}"),
        kind: "json_invalid",
    }
}

/// The SDKs' reading of a validation list: `loc: msg` joined by `; `, with
/// `body` left out of each location.
fn schema_message(issues: &[SchemaIssue]) -> String {
    issues
        .iter()
        .map(|issue| {
            let path: Vec<String> = issue
                .loc
                .iter()
                .filter(|item| item.as_str() != Some("body"))
                .map(|item| match item {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                })
                .collect();
            if path.is_empty() {
                issue.msg.clone()
            } else {
                format!("{}: {}", path.join("."), issue.msg)
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// === impl RequestError ===

impl RequestError {
    /// The response body: FastAPI's validation list for schema errors,
    /// `{"detail": {"error_type": "invalid_request", "message"}}` otherwise.
    pub fn body(&self) -> Value {
        match self {
            RequestError::Schema(issues) => {
                let detail: Vec<Value> = issues
                    .iter()
                    .map(|issue| {
                        serde_json::json!({"loc": issue.loc, "msg": issue.msg, "type": issue.kind})
                    })
                    .collect();
                serde_json::json!({ "detail": detail })
            }
            RequestError::Contract(message) => {
                serde_json::json!({"detail": {"error_type": "invalid_request", "message": message}})
            }
            RequestError::TextMismatch { .. } | RequestError::NotReleased { .. } => {
                serde_json::json!({"detail": {"error_type": self.error_type(), "message": self.to_string()}})
            }
        }
    }

    /// The `error_type` slug of the response body.
    pub fn error_type(&self) -> &'static str {
        match self {
            RequestError::Schema(_) => "validation_error",
            RequestError::Contract(_) => "invalid_request",
            RequestError::TextMismatch { .. } => "question_text_mismatch",
            RequestError::NotReleased { .. } => "question_not_released",
        }
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

fn check_question(
    id: &str,
    question: &Json<'_>,
    rule: &QuestionRule,
) -> Result<(AskedQuestion, Arc<UpstreamQuestion>), RequestError> {
    let kind = question_kind(id, question, rule)?;
    let caller = caller_texts(id, kind, question, rule)?;
    let instructions = question.member("instructions").filter(|v| !v.is_null());
    let (upstream, legend) = if rule.question.caller_text {
        let upstream = upstream_question(
            kind,
            &rule.classes,
            Text {
                instructions: instructions.map(Json::to_value),
                descriptions: caller.into_iter().map(|d| d.map(Json::to_value)).collect(),
            },
        );
        let legend = legend_of(kind, &upstream);
        (Arc::new(UpstreamQuestion::new(upstream)), legend)
    } else {
        check_pinned_text(id, kind, rule, instructions, &caller)?;
        pinned_upstream(kind, rule)
    };
    Ok((
        AskedQuestion {
            id: id.to_string(),
            kind,
            legend,
        },
        upstream,
    ))
}

/// A request's question that its contract refuses, with the reason.
fn contract_refusal(id: &str, reason: &str) -> RequestError {
    RequestError::Contract(format!("question `{id}`: {reason}"))
}

/// The question's type, which must be the one its contract asks.
fn question_kind(id: &str, question: &Json<'_>, rule: &QuestionRule) -> Result<Kind, RequestError> {
    let fail = |reason: &str| contract_refusal(id, reason);
    // The schema check guarantees a known tag and well-typed criteria.
    let kind = match question.member("type").and_then(Node::text) {
        Some("choice") => Kind::Choice,
        Some("score") => Kind::Score,
        Some("noul") => Kind::Noul,
        Some("box") => Kind::Box,
        Some(other) => {
            return Err(fail(&format!(
                "type `{other}` cannot be released under a contract (choice, score, noul or box only)"
            )));
        }
        None => return Err(fail("missing `type`")),
    };
    if kind != rule.question.kind {
        return Err(fail(&format!(
            "its release contract asks it as a {} question",
            rule.question.kind.as_str()
        )));
    }
    Ok(kind)
}

/// The caller's text per class, in the contract's class order (`None`: absent or null),
/// once the criteria are the contract's classes.
fn caller_texts<'q, 'a>(
    id: &str,
    kind: Kind,
    question: &'q Json<'a>,
    rule: &QuestionRule,
) -> Result<Vec<Option<&'q Json<'a>>>, RequestError> {
    let fail = |reason: &str| contract_refusal(id, reason);
    Ok(match kind {
        Kind::Choice => {
            let criteria = question
                .member("criteria")
                .and_then(Json::as_object)
                .ok_or_else(|| fail("a choice question needs a `criteria` object"))?;
            // The same labels: as many, and each class among them (one lookup per class).
            let texts = (criteria.len() == rule.classes.len())
                .then(|| {
                    rule.classes
                        .iter()
                        .map(|class| criteria.get(class))
                        .collect::<Option<Vec<&Json<'_>>>>()
                })
                .flatten()
                .ok_or_else(|| fail("its criteria labels differ from the contract's classes"))?;
            texts
                .into_iter()
                .map(|text| Some(text).filter(|v| !v.is_null()))
                .collect()
        }
        Kind::Score => {
            let criteria = question
                .member("criteria")
                .and_then(Json::as_array)
                .ok_or_else(|| fail("a score question needs a `criteria` array"))?;
            if criteria.len() != rule.classes.len() {
                return Err(fail(&format!(
                    "it has {} levels; its release contract asks {} (\"0\"..\"{}\")",
                    criteria.len(),
                    rule.classes.len(),
                    rule.classes.len().saturating_sub(1)
                )));
            }
            rule.classes
                .iter()
                .map(|class| {
                    class
                        .parse::<usize>()
                        .ok()
                        .and_then(|level| criteria.get(level))
                        .filter(|v| !v.is_null())
                })
                .collect()
        }
        Kind::Box => {
            if question.member("criteria").is_some_and(|c| !c.is_null()) {
                return Err(fail("a box question has no `criteria`"));
            }
            Vec::new()
        }
        Kind::Noul => {
            // Outcomes beyond `true` and `false` mean nothing and are never sent.
            let criteria = question.member("criteria").and_then(Json::as_object);
            rule.classes
                .iter()
                .map(|class| criteria.and_then(|c| c.get(class)).filter(|v| !v.is_null()))
                .collect()
        }
    })
}

/// The caller's text, where it sends any, is the contract's own, word for word.
fn check_pinned_text(
    id: &str,
    kind: Kind,
    rule: &QuestionRule,
    instructions: Option<&Json<'_>>,
    caller: &[Option<&Json<'_>>],
) -> Result<(), RequestError> {
    let pinned = &rule.question;
    let mismatch = |field: String| RequestError::TextMismatch {
        question: id.to_string(),
        field,
    };
    if let Some(sent) = instructions
        && !pinned
            .instructions
            .as_ref()
            .is_some_and(|own| same_text(own, sent))
    {
        return Err(mismatch("instructions".into()));
    }
    for ((class, sent), own) in rule.classes.iter().zip(caller).zip(&pinned.descriptions) {
        let Some(sent) = sent else { continue };
        let same = match (kind, own) {
            (_, Some(own)) => same_text(own, sent),
            // A score level without a description goes upstream as its name.
            (Kind::Score, None) => matches!(sent, Json::String(text) if text == class),
            (_, None) => false,
        };
        if !same {
            return Err(mismatch(match kind {
                Kind::Score => format!("criteria[{class}]"),
                _ => format!("criteria.{class}"),
            }));
        }
    }
    Ok(())
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

/// Whether the caller's `sent` text is the contract's `own`: [`same_json`] of the two,
/// without building either's canonical form when one is a string (nearly every
/// instruction and description). Two strings are the same exactly when their text is
/// (serde_json escapes each string one way, and distinct strings distinctly); a string
/// and anything else never are (a canonical string starts with `"`, nothing else does).
///
/// Two strings are compared in a time that does not depend on where they first differ
/// (their lengths aside): a caller probing the contract's text learns no more from the
/// timing than from the refusal.
fn same_text(own: &Value, sent: &Json<'_>) -> bool {
    match (own, sent) {
        (Value::String(own), Json::String(sent)) => same_string(own, sent),
        (Value::String(_), _) | (_, Json::String(_)) => false,
        _ => same_json(own, &sent.to_value()),
    }
}

/// Whether two strings are equal, in a time that depends on their length only: eight
/// bytes at a time through `subtle`'s constant-time comparison (a byte at a time costs
/// about ten instructions per byte), the last few bytes as one more word, padded alike
/// on both sides (the JSON scanner's words).
fn same_string(a: &str, b: &str) -> bool {
    use json::scan::{padded, word_at};
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (xs, ys) = (a.chunks_exact(8), b.chunks_exact(8));
    let rest = padded(xs.remainder()).ct_eq(&padded(ys.remainder()));
    let same = xs.zip(ys).fold(rest, |same, (x, y)| {
        same & word_at(x, 0).ct_eq(&word_at(y, 0))
    });
    bool::from(same)
}

/// Whether two JSON values are the same value: compared in canonical form (object key
/// order, whitespace and number spelling do not matter).
pub fn same_json(a: &Value, b: &Value) -> bool {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    canonical_json(a, &mut x);
    canonical_json(b, &mut y);
    x == y
}

/// Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace, strings
/// escaped by serde_json, integral numbers within ±2^53 written as integers (`1.0`
/// and `1e0` are `1`, `-0.0` is `0`), other numbers in Rust's shortest round-trip form.
pub fn canonical_json(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            let text = if let Some(u) = n.as_u64() {
                u.to_string()
            } else if let Some(i) = n.as_i64() {
                i.to_string()
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                    (f as i64).to_string()
                } else {
                    f.to_string()
                }
            };
            out.extend_from_slice(text.as_bytes());
        }
        Value::String(s) => {
            out.extend(serde_json::to_vec(s).unwrap_or_default());
        }
        Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                canonical_json(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                out.extend(serde_json::to_vec(key).unwrap_or_default());
                out.push(b':');
                canonical_json(item, out);
            }
            out.push(b'}');
        }
    }
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

/// Reads a native answer into a class vector in the rule's canonical class order.
pub fn parse_answer<N: Node>(
    kind: Kind,
    rule: &QuestionRule,
    answer: &N,
) -> Result<ClassVector, Invalid> {
    answer.object_len().ok_or(Invalid::MissingField)?;
    match answer.member("type").and_then(Node::text) {
        Some(t) if t == kind.as_str() => {}
        Some(_) => return Err(Invalid::TypeMismatch),
        None => return Err(Invalid::MissingField),
    }
    let classes = &rule.classes;
    let (probabilities, choice, confidence) = match kind {
        // A box answer has no class vector: `parse_box` reads it.
        Kind::Box => return Err(Invalid::TypeMismatch),
        Kind::Choice | Kind::Score => {
            let map = answer
                .member("probabilities")
                .filter(|map| map.object_len().is_some())
                .ok_or(Invalid::MissingField)?;
            if map.object_len() != Some(classes.len()) {
                return Err(Invalid::ClassMismatch);
            }
            let mut probabilities = Vec::with_capacity(classes.len());
            for class in classes {
                let value = map.member(class).ok_or(Invalid::ClassMismatch)?;
                probabilities.push(unit_number(value)?);
            }
            let choice = match kind {
                Kind::Choice => {
                    let label = answer
                        .member("choice")
                        .and_then(Node::text)
                        .ok_or(Invalid::MissingField)?;
                    let choice = classes
                        .iter()
                        .position(|c| c == label)
                        .ok_or(Invalid::UnknownChoice)?;
                    // A choice below another class's probability contradicts its own
                    // answer; released as a fallback it would also mark one (a covered
                    // answer's choice is always among its most probable classes).
                    if probabilities.iter().any(|&p| p > probabilities[choice]) {
                        return Err(Invalid::ChoiceNotMostProbable);
                    }
                    choice
                }
                _ => {
                    if !answer
                        .member("score")
                        .and_then(Node::number)
                        .is_some_and(f64::is_finite)
                    {
                        return Err(Invalid::MissingField);
                    }
                    argmax(&probabilities)
                }
            };
            let confidence = match answer.member("confidence") {
                None => None,
                Some(value) if value.is_null() => None,
                Some(value) => Some(unit_number(value)?),
            };
            (probabilities, choice, confidence)
        }
        Kind::Noul => {
            let p_true = unit_number(answer.member("noul").ok_or(Invalid::MissingField)?)?;
            let probabilities: Vec<f64> = classes
                .iter()
                .map(|class| {
                    if class == "true" {
                        p_true
                    } else {
                        1.0 - p_true
                    }
                })
                .collect();
            let choice = argmax(&probabilities);
            (probabilities, choice, None)
        }
    };
    let sum: f64 = probabilities.iter().sum();
    if (sum - 1.0).abs() > SUM_TOLERANCE {
        return Err(Invalid::ProbabilitySum);
    }
    Ok(ClassVector {
        choice,
        probabilities,
        confidence,
    })
}

/// A box answer's edges, fractions of the image measured from its top-left corner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoxEdges {
    pub top: f64,
    pub bottom: f64,
    pub left: f64,
    pub right: f64,
}

/// A provider's box answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoxAnswer {
    pub edges: BoxEdges,
    /// In [0, 1], or `None` when the provider sent `null` (or nothing).
    pub confidence: Option<f64>,
}

/// Validates a provider's box answer: `type` "box", four edges that are numbers in [0, 1]
/// with `top <= bottom` and `left <= right`, and a confidence in [0, 1] or null. Anything
/// else is invalid, and the answer never goes out.
pub fn parse_box<N: Node>(answer: &N) -> Result<BoxAnswer, Invalid> {
    answer.object_len().ok_or(Invalid::MissingField)?;
    match answer.member("type").and_then(Node::text) {
        Some("box") => {}
        Some(_) => return Err(Invalid::TypeMismatch),
        None => return Err(Invalid::MissingField),
    }
    let edges = answer
        .member("box")
        .filter(|edges| edges.object_len().is_some())
        .ok_or(Invalid::MissingField)?;
    let edge = |name: &str| unit_number(edges.member(name).ok_or(Invalid::MissingField)?);
    let edges = BoxEdges {
        top: edge("top")?,
        bottom: edge("bottom")?,
        left: edge("left")?,
        right: edge("right")?,
    };
    if edges.top > edges.bottom || edges.left > edges.right {
        return Err(Invalid::BadBox);
    }
    let confidence = match answer.member("confidence") {
        None => None,
        Some(value) if value.is_null() => None,
        Some(value) => Some(unit_number(value)?),
    };
    Ok(BoxAnswer { edges, confidence })
}

fn unit_number<N: Node>(value: &N) -> Result<f64, Invalid> {
    let number = value.number().ok_or(Invalid::MissingField)?;
    if number.is_finite() && (0.0..=1.0).contains(&number) {
        // `-0` is zero: it goes on as `0.0`, the one spelling of zero every number the
        // proxy computes has (`shape::fixed`), so a native value released unchanged (a
        // WCPQ fallback) is not told from a computed one by its sign.
        Ok(if number == 0.0 { 0.0 } else { number })
    } else {
        Err(Invalid::BadProbability)
    }
}

/// Longest model id the proxy releases.
pub const MAX_MODEL_ID_LEN: usize = 128;

/// Whether `id` is a model id the proxy can vouch for: 1 to `MAX_MODEL_ID_LEN` ASCII
/// characters, an ASCII letter or digit first, then letters, digits and `.`, `_`, `:`,
/// `/`, `-` (`jev-1.13.0`, `llama3:8b`, `accounts/acme/models/m`). Anything else
/// (spaces, quotes, control characters, non-ASCII, long strings) is text the provider
/// could use to talk to recipients.
pub fn is_model_id(id: &str) -> bool {
    let bytes = id.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_MODEL_ID_LEN
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

/// Whether `text` is a real proleptic Gregorian calendar date written `YYYY-MM-DD`
/// (years 0001 to 9999; February 29 only in leap years).
pub fn is_calendar_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    let shape = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    if !shape {
        return false;
    }
    let number = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'))
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    year >= 1 && (1..=days).contains(&day)
}

/// Index of the largest value; ties go to the earliest index.
pub fn argmax(values: &[f64]) -> usize {
    let mut best = 0;
    for (index, value) in values.iter().enumerate() {
        if *value > values[best] {
            best = index;
        }
    }
    best
}

#[cfg(test)]
mod tests;
