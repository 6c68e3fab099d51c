//! The requests file of `releasegate collect`: one JSON object per line, a System One request
//! to ask a contract's provider and, optionally, the evaluator labels its world will carry
//! (`docs/collect.md`):
//!
//! ```json
//! {"id": "case-0001-a", "request": {"model": "...", "state": {...}, "questions": {...}},
//!  "pair_id": "case-0001", "split": "test", "domain": "loans",
//!  "question": "route", "coarse": "VERIFY", "secret": "income_gap", "hypotheses": ["employer_gap", "income_gap"]}
//! ```
//!
//! - `id` (a non-empty string, or an integer) becomes the world's `world_id`; ids are unique
//!   within a file;
//! - `pair_id` defaults to the id (a world of its own), `split` to `train` (so a file of
//!   unlabeled requests is training data for `build-codebook` as it is), `domain` to the
//!   contract's name;
//! - `coarse` (`T`), `secret` (`S`) and `hypotheses` come together or not at all;
//!   `hypotheses` are two distinct names containing `secret`, in any order (sorted on
//!   writing); `question` defaults to the request's only question;
//! - any other key is an error (a misspelt label is never dropped silently).

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::worlds::{Labels, Split, World};

/// One line of a requests file.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The world id.
    pub id: String,
    /// The System One request to ask.
    pub request: Value,
    /// The world's pair (defaults to `id`).
    pub pair_id: String,
    /// The world's split (defaults to `train`).
    pub split: Split,
    /// The world's domain (`None`: the contract's name).
    pub domain: Option<String>,
    /// Evaluator labels, when given.
    pub labels: Option<Labels>,
}

/// A line that cannot be used, with its 1-based number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct Error {
    /// 1-based line number.
    pub line: usize,
    /// The id, when the line had a usable one.
    pub id: Option<String>,
    /// What is wrong.
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    /// Read before (the id is validated on its own, so that errors can name it).
    #[serde(rename = "id")]
    _id: Value,
    request: Value,
    pair_id: Option<String>,
    split: Option<Split>,
    domain: Option<String>,
    question: Option<String>,
    coarse: Option<String>,
    secret: Option<String>,
    hypotheses: Option<[String; 2]>,
}

// === impl Line ===

impl Line {
    /// Parses one line (without its newline).
    pub fn parse(text: &str, line: usize) -> Result<Line, Error> {
        let fail = |id: Option<&str>, reason: String| Error {
            line,
            id: id.map(str::to_string),
            reason,
        };
        let value: Value = serde_json::from_str(text)
            .map_err(|error| fail(None, format!("not JSON ({error})")))?;
        // The id first, so that an error about any other key can name it.
        let id = line_id(&value);
        let raw: Raw = serde_json::from_value(value)
            .map_err(|error| fail(id.as_deref(), format!("not a request line ({error})")))?;
        let Some(id) = id else {
            return Err(fail(
                None,
                "`id` must be a non-empty string or an integer".into(),
            ));
        };
        let fail = |reason: String| fail(Some(&id), reason);
        if !raw.request.is_object() {
            return Err(fail("`request` must be a System One request object".into()));
        }
        if raw.pair_id.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Err(fail("`pair_id` must not be blank".into()));
        }
        let labels = labels(
            raw.question,
            (raw.coarse, raw.secret, raw.hypotheses),
            &raw.request,
            &fail,
        )?;
        Ok(Line {
            pair_id: raw.pair_id.unwrap_or_else(|| id.clone()),
            id,
            request: raw.request,
            split: raw.split.unwrap_or(Split::Train),
            domain: raw.domain,
            labels,
        })
    }

    /// The world of this line: `request` is what went upstream, `response` the native answer.
    pub fn world(&self, default_domain: &str, request: Value, response: Value) -> World {
        World {
            world_id: self.id.clone(),
            pair_id: self.pair_id.clone(),
            split: self.split,
            domain: self
                .domain
                .clone()
                .unwrap_or_else(|| default_domain.to_string()),
            request,
            response,
            labels: self.labels.clone(),
            provider: None,
            extra: Map::new(),
        }
    }
}
/// A line's `id`: a non-empty string or an integer.
fn line_id(value: &Value) -> Option<String> {
    match value.get("id") {
        Some(Value::String(id)) if !id.trim().is_empty() => Some(id.clone()),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => Some(n.to_string()),
        _ => None,
    }
}

/// A line's labels: none, or `coarse`, `secret` and `hypotheses` together (the
/// labels' `question` defaults to the request's only question).
fn labels(
    question: Option<String>,
    given: (Option<String>, Option<String>, Option<[String; 2]>),
    request: &Value,
    fail: &dyn Fn(String) -> Error,
) -> Result<Option<Labels>, Error> {
    match given {
        (None, None, None) => {
            if question.is_some() {
                return Err(fail(
                    "`question` names the question of the labels: give `coarse`, `secret` and `hypotheses` too".into(),
                ));
            }
            Ok(None)
        }
        (Some(t), Some(s), Some(mut hypotheses)) => {
            let question = match question {
                Some(question) => question,
                None => only_question(request).ok_or_else(|| {
                    fail("the request asks several questions: name the labels' `question`".into())
                })?,
            };
            hypotheses.sort();
            let labels = Labels {
                question,
                t,
                s,
                hypotheses,
                extra: Map::new(),
            };
            labels.check().map_err(fail)?;
            Ok(Some(labels))
        }
        _ => Err(fail(
            "labels come together: `coarse`, `secret` and `hypotheses` (or none of them)".into(),
        )),
    }
}

/// The id of the request's only question.
fn only_question(request: &Value) -> Option<String> {
    let questions = request.get("questions")?.as_object()?;
    match questions.keys().collect::<Vec<_>>().as_slice() {
        [only] => Some((*only).clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: &str = r#"{"model": "m", "state": {"x": 1}, "questions": {"route": {"type": "choice", "criteria": {"A": null, "B": null}}}}"#;

    fn parse(extra: &str) -> Result<Line, Error> {
        Line::parse(
            &format!(r#"{{"id": "w1", "request": {REQUEST}{extra}}}"#),
            7,
        )
    }

    #[test]
    fn an_unlabeled_line_is_a_training_world_of_its_own() {
        let line = parse("").unwrap();
        assert_eq!(
            (line.id.as_str(), line.pair_id.as_str(), line.split),
            ("w1", "w1", Split::Train)
        );
        assert!(line.labels.is_none());
        let world = line.world(
            "loans",
            serde_json::json!({"q": 1}),
            serde_json::json!({"a": 2}),
        );
        assert_eq!(world.domain, "loans");
        assert_eq!(world.request["q"], 1);
        let text = world.to_line().unwrap();
        assert_eq!(World::from_line(&text, 1).unwrap(), world);
        // Integer ids are ids too.
        let line = Line::parse(&format!(r#"{{"id": 12, "request": {REQUEST}}}"#), 1).unwrap();
        assert_eq!(line.id, "12");
    }

    #[test]
    fn labels_come_together_and_are_checked() {
        let line = parse(r#", "pair_id": "p1", "split": "test", "domain": "d", "coarse": "A", "secret": "s2", "hypotheses": ["s2", "s1"]"#).unwrap();
        let labels = line.labels.clone().unwrap();
        assert_eq!(labels.question, "route");
        assert_eq!(labels.hypotheses, ["s1".to_string(), "s2".to_string()]);
        assert_eq!((line.pair_id.as_str(), line.split), ("p1", Split::Test));
        let world = line.world("c", Value::Null, Value::Null);
        assert_eq!(world.domain, "d");
        assert_eq!(world.labels, Some(labels));

        for (extra, needle) in [
            (r#", "coarse": "A""#, "labels come together"),
            (
                r#", "coarse": "A", "secret": "s3", "hypotheses": ["s1", "s2"]"#,
                "not one of the hypotheses",
            ),
            (
                r#", "coarse": "A", "secret": "s1", "hypotheses": ["s1", "s1"]"#,
                "distinct",
            ),
            (r#", "question": "route""#, "give `coarse`"),
            (r#", "secrte": "s1""#, "unknown field `secrte`"),
            (r#", "split": "dev""#, "unknown variant `dev`"),
            (r#", "pair_id": " ""#, "blank"),
        ] {
            let error = parse(extra).unwrap_err();
            assert_eq!(error.line, 7);
            assert_eq!(error.id.as_deref(), Some("w1"), "{extra}");
            assert!(error.reason.contains(needle), "{extra}: {error}");
        }
    }

    #[test]
    fn a_line_without_a_usable_id_or_request_is_an_error() {
        for (text, needle) in [
            ("not json", "not JSON"),
            (r#"{"request": {}}"#, "missing field `id`"),
            (r#"{"id": "", "request": {}}"#, "`id` must be"),
            (r#"{"id": 1.5, "request": {}}"#, "`id` must be"),
            (r#"{"id": "a", "request": []}"#, "`request` must be"),
            (r#"{"id": "a"}"#, "missing field `request`"),
        ] {
            let error = Line::parse(text, 3).unwrap_err();
            assert!(error.reason.contains(needle), "{text}: {error}");
        }
        // Two questions need the labels' question named.
        let two = r#"{"id": "a", "request": {"questions": {"x": {}, "y": {}}}, "coarse": "A", "secret": "s1", "hypotheses": ["s1", "s2"]}"#;
        assert!(
            Line::parse(two, 1)
                .unwrap_err()
                .reason
                .contains("name the labels' `question`")
        );
    }
}
