//! `[contracts.NAME]` checked: the provider it names, its model, public fields, policy,
//! forwarded headers and questions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::RawContract;
use super::policy::build_policy;
use crate::config::Inputs;
use crate::contract::{Contract, ForwardHeader};

/// Checks the contract `name` (its `capture` is already taken out); `declared` are the
/// provider names configured, and the files its questions name go to `files`.
pub(super) fn validate_contract(
    name: String,
    raw: RawContract,
    declared: &BTreeSet<String>,
    base_dir: &Path,
    inputs: &Inputs<'_>,
    files: &mut Vec<PathBuf>,
    problems: &mut Vec<String>,
) -> Contract {
    let key = format!("contracts.{name}");
    // A declared but invalid provider has its own problem already.
    if !declared.contains(&raw.provider) {
        problems.push(format!(
            "{key}.provider: no provider named `{}` is configured",
            raw.provider
        ));
    }
    if raw.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
        problems.push(format!("{key}.model: must not be blank"));
    }
    check_public(&key, &raw, problems);
    if raw.questions.is_empty() {
        problems.push(format!(
            "{key}.questions: a contract must cover at least one question"
        ));
    }
    let policy = raw.policy.and_then(|policy| {
        build_policy(&format!("{key}.policy"), policy, &raw.questions, problems)
    });
    let forward_headers = forward_headers(&key, &raw.forward_headers, problems);
    let mut questions = BTreeMap::new();
    for (id, question) in raw.questions {
        files.extend(question.files(base_dir));
        if let Some(rule) = crate::config::build_question(
            &format!("{key}.questions.{id}"),
            question,
            base_dir,
            inputs,
            problems,
        ) {
            questions.insert(id, rule);
        }
    }
    Contract {
        name,
        provider: raw.provider,
        model: raw.model,
        usage: raw.usage,
        shape: raw.shape,
        questions,
        public: raw.public,
        policy,
        forward_headers,
    }
}

/// Every `public` field's pointer is a JSON pointer.
fn check_public(key: &str, raw: &RawContract, problems: &mut Vec<String>) {
    for (index, field) in raw.public.iter().enumerate() {
        if !(field.pointer.is_empty() || field.pointer.starts_with('/')) {
            problems.push(format!(
                "{key}.public[{index}].pointer: `{}` is not a JSON pointer (it must start with /)",
                field.pointer
            ));
        }
    }
}

/// `forward_headers`: known header names, each once.
fn forward_headers(key: &str, names: &[String], problems: &mut Vec<String>) -> Vec<ForwardHeader> {
    let mut forward_headers = Vec::new();
    for (index, name) in names.iter().enumerate() {
        match ForwardHeader::parse(name) {
            Some(header) if !forward_headers.contains(&header) => forward_headers.push(header),
            Some(_) => problems.push(format!(
                "{key}.forward_headers[{index}]: `{name}` is listed twice"
            )),
            None => problems.push(format!(
                "{key}.forward_headers[{index}]: `{name}` is not a header a contract can forward (one of: {})",
                ForwardHeader::ALL
                    .map(|header| header.name())
                    .join(", ")
            )),
        }
    }
    forward_headers
}
