//! The System One request schema, checked as the real API's validation checks it: every
//! violation of a body is reported (422), in body order, as FastAPI's validation list.

use serde_json::Value;

use super::{Json, Node};

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

/// The question types of the System One schema (a tagged union on `type`).
const QUESTION_TAGS: [&str; 4] = ["noul", "choice", "score", "box"];

/// Every schema violation of a request body, in body order (empty when valid).
/// Unknown members are ignored, as the real API's models ignore them.
///
/// With `questions_known`, the body's `questions` is a stand-in for a value checked
/// before (`known`) and is not checked.
pub(super) fn json_schema_issues(body: &Json<'_>, questions_known: bool) -> Vec<SchemaIssue> {
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
        _ if questions_known => {}
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
pub(super) fn schema_message(issues: &[SchemaIssue]) -> String {
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
