//! A contract's or recipient's leakage `policy`, checked (`docs/gate.md`).

use std::collections::BTreeMap;

use super::{RawPolicy, RawQuestion};

/// Validates a contract's leakage policy (`docs/gate.md`).
pub(super) fn build_policy(
    key: &str,
    raw: RawPolicy,
    questions: &BTreeMap<String, RawQuestion>,
    problems: &mut Vec<String>,
) -> Option<crate::contract::LeakagePolicy> {
    use crate::contract::{Field, Hidden, KeepField, LeakagePolicy};
    let before = problems.len();
    let mut keep = Vec::new();
    for entry in &raw.keep {
        let (question, field) = match entry.rsplit_once('.') {
            Some((question, field)) => (Some(question.to_string()), field),
            None => (None, entry.as_str()),
        };
        let Some(field) = Field::parse(field) else {
            problems.push(format!(
                "{key}.keep: `{entry}` is not FIELD or QUESTION.FIELD with FIELD one of choice, probabilities, confidence"
            ));
            continue;
        };
        if let Some(question) = &question
            && !questions.contains_key(question)
        {
            problems.push(format!(
                "{key}.keep: `{entry}` names a question the contract does not cover"
            ));
            continue;
        }
        keep.push(KeepField { question, field });
    }
    let mut hide = Vec::new();
    for entry in &raw.hide {
        match entry.as_str() {
            "secret" => hide.push(Hidden::Secret),
            other => problems.push(format!(
                "{key}.hide: `{other}` is unknown (the audit measures `secret`)"
            )),
        }
    }
    let max_recovery_gain = match raw.max_recovery_gain {
        Some(gain) if !(gain.is_finite() && (0.0..=1.0).contains(&gain)) => {
            problems.push(format!(
                "{key}.max_recovery_gain: must be a number in [0, 1], got {gain}"
            ));
            0.0
        }
        Some(_) if hide.is_empty() => {
            problems.push(format!(
                "{key}.max_recovery_gain: bounds what `hide` names; add hide = [\"secret\"]"
            ));
            0.0
        }
        Some(gain) => gain,
        None => 0.0,
    };
    (problems.len() == before).then_some(LeakagePolicy {
        keep,
        hide,
        max_recovery_gain,
    })
}
