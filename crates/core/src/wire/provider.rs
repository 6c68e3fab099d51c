//! A provider's error body as a recipient may see it: the kind of error from a fixed
//! list, never the provider's text. A 4xx body `{"detail": {"error_type": KIND, ...}}`
//! whose kind is in [`KNOWN_ERROR_TYPES`] keeps its `error_type` (and the proxy's own
//! message for it); a 422 list (FastAPI's `{"detail": [{"loc", "msg", "type", ...}]}`)
//! stays a 422 list whose entries carry a `loc` cut down to what the proxy itself sent,
//! a `type` from pydantic's slugs ([`VALIDATION_TYPES`]) and the proxy's own `msg` for
//! that type. Anything else is the generic `upstream_error`.
//!
//! Why `loc` is cut: the provider could put anything in it (the caller's data, an
//! answer's content, its own text). Each step of a released `loc` is a key or index of
//! the body the proxy sent upstream (`Asked::upstream`), or one of the schema's own
//! names ([`SCHEMA_NAMES`]) as the last step (a missing field); below a question only its
//! type tag, its schema fields, its classes and its score levels count (never the keys
//! of the contract's instructions or descriptions). The first step that is neither ends
//! the `loc`.

use serde_json::{Map, Value};

use super::SchemaIssue;

/// The provider `error_type` values a recipient receives as sent, each with the proxy's
/// own message (the provider's message text never goes out).
pub const KNOWN_ERROR_TYPES: [(&str, &str); 4] = [
    (
        "max_tokens_exceeded",
        "the request exceeds the model's token limit",
    ),
    (
        "tokens_exceeded",
        "the request exceeds the model's token limit",
    ),
    (
        "invalid_request",
        "the provider refused the request as invalid",
    ),
    (
        "timeout",
        "the provider did not finish the request in its own time limit",
    ),
];

/// pydantic's validation error types a released 422 entry may carry, each with the
/// proxy's message for it; any other type is released as `value_error`.
pub const VALIDATION_TYPES: [(&str, &str); 24] = [
    ("missing", "Field required"),
    ("string_type", "Input should be a valid string"),
    ("dict_type", "Input should be a valid dictionary"),
    ("list_type", "Input should be a valid list"),
    ("int_type", "Input should be a valid integer"),
    ("float_type", "Input should be a valid number"),
    ("bool_type", "Input should be a valid boolean"),
    ("too_short", "Input is too short"),
    ("too_long", "Input is too long"),
    ("string_too_short", "String is too short"),
    ("string_too_long", "String is too long"),
    ("greater_than", "Input is too small"),
    ("greater_than_equal", "Input is too small"),
    ("less_than", "Input is too large"),
    ("less_than_equal", "Input is too large"),
    ("literal_error", "Input is not one of the allowed values"),
    ("enum", "Input is not one of the allowed values"),
    ("extra_forbidden", "Extra inputs are not permitted"),
    (
        "union_tag_not_found",
        "Unable to extract tag using discriminator 'type'",
    ),
    (
        "union_tag_invalid",
        "Input tag does not match any of the expected tags",
    ),
    ("model_type", "Input should be a valid object"),
    ("model_attributes_type", "Input should be a valid object"),
    ("json_invalid", "Invalid JSON"),
    ("value_error", "Value error"),
];

/// Names of the System One request schema a `loc` may end with although the proxy did
/// not send them (a field the provider reports missing), and the union members pydantic
/// appends to a content field's location.
pub const SCHEMA_NAMES: [&str; 12] = [
    "model",
    "state",
    "questions",
    "assets",
    "type",
    "instructions",
    "criteria",
    "true",
    "false",
    "str",
    "dict[str,any]",
    "list[any]",
];

/// Most entries of a released 422 list (the provider's further entries are dropped).
pub const MAX_VALIDATION_ENTRIES: usize = 32;

/// Most steps of a released `loc`.
const MAX_LOC_STEPS: usize = 16;

/// What a recipient learns of a provider's error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderError {
    /// A known `error_type` (an entry of [`KNOWN_ERROR_TYPES`]).
    Kind(&'static str),
    /// A 422 validation list, rebuilt (never empty).
    Validation(Vec<SchemaIssue>),
}

impl ProviderError {
    /// The proxy's message for a known kind.
    pub fn message(kind: &str) -> &'static str {
        KNOWN_ERROR_TYPES
            .iter()
            .find(|(known, _)| *known == kind)
            .map_or("the provider refused the request", |(_, message)| message)
    }
}

/// Reads a provider's non-success body (`status`, bytes as received) against what the
/// proxy sent (`sent`). `None`: nothing the proxy passes on (any status but 4xx, 401,
/// 403 and 429 included, a body that is not JSON, an unknown kind).
pub fn provider_error(status: u16, body: &[u8], sent: &Value) -> Option<ProviderError> {
    if !(400..500).contains(&status) || matches!(status, 401 | 403 | 429) {
        return None;
    }
    let body: Value = serde_json::from_slice(body).ok()?;
    match body.get("detail")? {
        Value::Object(detail) => {
            let kind = detail.get("error_type")?.as_str()?;
            KNOWN_ERROR_TYPES
                .iter()
                .find(|(known, _)| *known == kind)
                .map(|(known, _)| ProviderError::Kind(known))
        }
        Value::Array(entries) if status == 422 => {
            let mut issues: Vec<SchemaIssue> = entries
                .iter()
                .filter_map(|entry| validation_entry(entry, sent))
                .take(MAX_VALIDATION_ENTRIES)
                .collect();
            issues.dedup();
            if issues.is_empty() {
                // A list without one usable entry is still a validation error.
                issues.push(issue(vec![Value::from("body")], "value_error"));
            }
            Some(ProviderError::Validation(issues))
        }
        _ => None,
    }
}

fn validation_entry(entry: &Value, sent: &Value) -> Option<SchemaIssue> {
    let entry = entry.as_object()?;
    let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
    let loc = entry.get("loc")?.as_array()?;
    Some(issue(released_loc(loc, sent), kind))
}

fn issue(loc: Vec<Value>, kind: &str) -> SchemaIssue {
    let (kind, msg) = VALIDATION_TYPES
        .iter()
        .find(|(known, _)| *known == kind)
        .copied()
        .unwrap_or(VALIDATION_TYPES[VALIDATION_TYPES.len() - 1]);
    SchemaIssue {
        loc,
        msg: msg.to_string(),
        kind,
    }
}

/// Where the walk through the sent body is.
enum At<'s> {
    /// Inside the caller's own content (`state`, `assets`): any sent key or index.
    Content(&'s Value),
    /// The top-level object.
    Top(&'s Map<String, Value>),
    /// The `questions` map.
    Questions(&'s Map<String, Value>),
    /// One question (its type tag may come next).
    Question(&'s Map<String, Value>),
    /// A question's fields, after its tag.
    Fields(&'s Map<String, Value>),
    /// A question's criteria: its classes or levels only.
    Criteria(&'s Value),
    /// Nothing may follow but a schema name.
    End,
}

/// The longest prefix of `loc` that names what the proxy sent (see the module's doc).
fn released_loc(loc: &[Value], sent: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut steps = loc.iter();
    if steps.next().and_then(Value::as_str) != Some("body") {
        return vec![Value::from("body")];
    }
    out.push(Value::from("body"));
    let Some(top) = sent.as_object() else {
        return out;
    };
    let mut at = At::Top(top);
    for step in steps.take(MAX_LOC_STEPS) {
        let key = step.as_str();
        let next = match (&at, step) {
            (At::Top(top), Value::String(key)) => match (key.as_str(), top.get(key)) {
                ("state" | "assets", Some(value)) => Some(At::Content(value)),
                ("questions", Some(Value::Object(questions))) => Some(At::Questions(questions)),
                ("model", Some(_)) => Some(At::End),
                _ => None,
            },
            (At::Content(Value::Object(map)), Value::String(key)) => map.get(key).map(At::Content),
            (At::Content(Value::Array(items)), Value::Number(index)) => index
                .as_u64()
                .and_then(|index| items.get(usize::try_from(index).ok()?))
                .map(At::Content),
            (At::Questions(questions), Value::String(id)) => match questions.get(id) {
                Some(Value::Object(question)) => Some(At::Question(question)),
                _ => None,
            },
            (At::Question(question), Value::String(tag))
                if question.get("type").and_then(Value::as_str) == Some(tag) =>
            {
                Some(At::Fields(question))
            }
            (At::Question(question) | At::Fields(question), Value::String(field)) => {
                match (field.as_str(), question.get(field)) {
                    ("criteria", Some(criteria)) => Some(At::Criteria(criteria)),
                    ("instructions" | "type", Some(_)) => Some(At::End),
                    _ => None,
                }
            }
            (At::Criteria(Value::Object(options)), Value::String(label))
                if options.contains_key(label) =>
            {
                Some(At::End)
            }
            (At::Criteria(Value::Array(levels)), Value::Number(index))
                if index
                    .as_u64()
                    .is_some_and(|index| (index as usize) < levels.len()) =>
            {
                Some(At::End)
            }
            _ => None,
        };
        match next {
            Some(next) => {
                out.push(step.clone());
                at = next;
            }
            None => {
                // A field the proxy did not send, named by the schema: the last step.
                if let Some(name) = key.filter(|name| SCHEMA_NAMES.contains(name)) {
                    out.push(Value::from(name));
                }
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sent() -> Value {
        json!({
            "model": "jev-1.13.0",
            "state": {"ticket": {"lines": ["a", "b"]}},
            "questions": {
                "cause": {"type": "choice", "instructions": {"hidden key": "pinned text"},
                          "criteria": {"A": null, "B": "desc"}},
                "level": {"type": "score", "criteria": ["x", "y"]},
            }
        })
    }

    fn locs(body: Value) -> Vec<Vec<Value>> {
        match provider_error(422, body.to_string().as_bytes(), &sent()) {
            Some(ProviderError::Validation(issues)) => {
                issues.into_iter().map(|issue| issue.loc).collect()
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn known_kinds_keep_their_type_and_get_the_proxys_message() {
        let body = br#"{"detail": {"error_type": "max_tokens_exceeded", "message": "SECRET"}}"#;
        assert_eq!(
            provider_error(400, body, &sent()),
            Some(ProviderError::Kind("max_tokens_exceeded"))
        );
        assert_eq!(
            provider_error(
                413,
                br#"{"detail":{"error_type":"invalid_request"}}"#,
                &sent()
            ),
            Some(ProviderError::Kind("invalid_request"))
        );
        assert!(!ProviderError::message("max_tokens_exceeded").contains("SECRET"));
        for (status, body) in [
            (400, &br#"{"detail": {"error_type": "made_up_kind"}}"#[..]),
            (400, br#"{"detail": {"error_type": 7}}"#),
            (400, b"not json"),
            (400, br#"{"detail": "text"}"#),
            (401, br#"{"detail": {"error_type": "invalid_request"}}"#),
            (429, br#"{"detail": {"error_type": "invalid_request"}}"#),
            (500, br#"{"detail": {"error_type": "invalid_request"}}"#),
            // A list is a validation error only with 422.
            (
                400,
                br#"{"detail": [{"loc": ["body"], "type": "missing"}]}"#,
            ),
        ] {
            assert_eq!(provider_error(status, body, &sent()), None, "{status}");
        }
    }

    #[test]
    fn validation_lists_keep_only_what_the_proxy_sent() {
        let got = locs(json!({"detail": [
            {"loc": ["body", "state", "ticket", "lines", 1], "msg": "SECRET", "type": "string_type", "input": "SECRET"},
            {"loc": ["body", "questions", "cause", "choice", "criteria", "B"], "type": "string_type"},
            {"loc": ["body", "questions", "level", "score", "criteria", 1], "type": "too_short"},
            {"loc": ["body", "questions", "level", "score", "criteria", 7], "type": "too_short"},
            {"loc": ["body", "questions", "cause", "choice", "instructions", "hidden key"], "type": "dict_type"},
            {"loc": ["body", "state", "SECRET-ANSWER"], "type": "missing"},
            {"loc": ["body", "questions", "SECRET", "choice"], "type": "missing"},
            {"loc": ["body", "assets"], "type": "missing"},
            {"loc": ["SECRET", "state"], "type": "missing"},
        ]}));
        assert_eq!(
            got,
            vec![
                vec![
                    json!("body"),
                    json!("state"),
                    json!("ticket"),
                    json!("lines"),
                    json!(1)
                ],
                vec![
                    json!("body"),
                    json!("questions"),
                    json!("cause"),
                    json!("choice"),
                    json!("criteria"),
                    json!("B")
                ],
                vec![
                    json!("body"),
                    json!("questions"),
                    json!("level"),
                    json!("score"),
                    json!("criteria"),
                    json!(1)
                ],
                vec![
                    json!("body"),
                    json!("questions"),
                    json!("level"),
                    json!("score"),
                    json!("criteria")
                ],
                vec![
                    json!("body"),
                    json!("questions"),
                    json!("cause"),
                    json!("choice"),
                    json!("instructions")
                ],
                vec![json!("body"), json!("state")],
                vec![json!("body"), json!("questions")],
                vec![json!("body"), json!("assets")],
                vec![json!("body")],
            ]
        );
    }

    #[test]
    fn validation_types_and_messages_are_the_proxys() {
        let body = json!({"detail": [
            {"loc": ["body", "model"], "msg": "SECRET", "type": "SECRET-type"},
            {"loc": ["body", "model"], "msg": "SECRET", "type": "string_type"},
            "not an entry",
            {"type": "missing"},
        ]});
        let Some(ProviderError::Validation(issues)) =
            provider_error(422, body.to_string().as_bytes(), &sent())
        else {
            panic!()
        };
        let kinds: Vec<&str> = issues.iter().map(|issue| issue.kind).collect();
        assert_eq!(kinds, ["value_error", "string_type"]);
        assert!(issues.iter().all(|issue| !issue.msg.contains("SECRET")));
        // Nothing usable: one generic entry, still a list.
        let empty = provider_error(422, br#"{"detail": []}"#, &sent());
        assert_eq!(
            empty,
            Some(ProviderError::Validation(vec![issue(
                vec![json!("body")],
                "value_error"
            )]))
        );
        // Long lists are cut.
        let many: Vec<Value> = (0..100)
            .map(|n| json!({"loc": ["body", "state", n], "type": "missing"}))
            .collect();
        let Some(ProviderError::Validation(issues)) = provider_error(
            422,
            json!({ "detail": many }).to_string().as_bytes(),
            &sent(),
        ) else {
            panic!()
        };
        assert!(issues.len() <= MAX_VALIDATION_ENTRIES);
    }
}
