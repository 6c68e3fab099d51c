//! `[contracts.NAME]` checked: the provider it names, its model, public fields, policy,
//! forwarded headers and questions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::policy::build_policy;
use super::{RawCache, RawContract};
use crate::config::Inputs;
use crate::contract::{CacheSpec, Contract, Failover, ForwardHeader};

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
    let providers = providers(&key, &raw, declared, problems);
    let failover = failover(&key, &raw, problems);
    let cache = raw
        .cache
        .as_ref()
        .and_then(|cache| build_cache(&key, cache, problems));
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
    let mut by_provider = BTreeMap::new();
    for (id, question) in raw.questions {
        files.extend(question.files(base_dir));
        if let Some((rule, others)) = crate::config::build_question(
            &format!("{key}.questions.{id}"),
            question,
            base_dir,
            inputs,
            &providers,
            problems,
        ) {
            if !others.is_empty() {
                by_provider.insert(id.clone(), others);
            }
            questions.insert(id, rule);
        }
    }
    Contract {
        known_questions: Default::default(),
        name,
        providers,
        failover,
        cache,
        model: raw.model,
        usage: raw.usage,
        shape: raw.shape,
        questions,
        public: raw.public,
        policy,
        forward_headers,
        released_for: 0,
        variants: Vec::new(),
    }
    .with_provider_mechanisms(&by_provider)
}

/// `provider = "x"` or `providers = ["x", ...]` (one of them): configured names, each once.
fn providers(
    key: &str,
    raw: &RawContract,
    declared: &BTreeSet<String>,
    problems: &mut Vec<String>,
) -> Vec<String> {
    let (field, names) = match (&raw.provider, &raw.providers) {
        (Some(one), None) => ("provider", vec![one.clone()]),
        (None, Some(list)) if !list.is_empty() => ("providers", list.clone()),
        (None, Some(_)) => {
            problems.push(format!("{key}.providers: name at least one provider"));
            return vec![String::new()];
        }
        (Some(_), Some(_)) => {
            problems.push(format!("{key}: set `provider` or `providers`, not both"));
            return vec![String::new()];
        }
        (None, None) => {
            problems.push(format!(
                "{key}: no provider (set `provider = \"NAME\"` or `providers = [\"NAME\", ...]`)"
            ));
            return vec![String::new()];
        }
    };
    for (index, name) in names.iter().enumerate() {
        // A declared but invalid provider has its own problem already.
        if !declared.contains(name) {
            problems.push(format!(
                "{key}.{field}: no provider named `{name}` is configured"
            ));
        }
        if names[..index].contains(name) {
            problems.push(format!("{key}.{field}: `{name}` is listed twice"));
        }
    }
    names
}

/// `failover_on` (HTTP error statuses, each once) and `retry_sent`.
fn failover(key: &str, raw: &RawContract, problems: &mut Vec<String>) -> Failover {
    let mut failover = Failover {
        retry_sent: raw.retry_sent,
        ..Failover::default()
    };
    if let Some(statuses) = &raw.failover_on {
        failover.on.clear();
        for status in statuses {
            match u16::try_from(*status) {
                Ok(status) if (400..=599).contains(&status) && !failover.on.contains(&status) => {
                    failover.on.push(status);
                }
                _ => problems.push(format!(
                    "{key}.failover_on: {status} is not an HTTP error status (400 to 599) listed once"
                )),
            }
        }
    }
    failover
}

/// `cache = { ttl_s, max_bytes, scope, store }`: a TTL of 1 s to a day, 1 KiB to 64 GiB.
fn build_cache(key: &str, raw: &RawCache, problems: &mut Vec<String>) -> Option<CacheSpec> {
    let before = problems.len();
    super::check_range(
        problems,
        &format!("{key}.cache.ttl_s"),
        raw.ttl_s,
        (1, 86_400),
    );
    super::check_range(
        problems,
        &format!("{key}.cache.max_bytes"),
        raw.max_bytes,
        (1024, 64 << 30),
    );
    if raw.store == crate::contract::CacheStore::Redis {
        problems.push(format!(
            "{key}.cache.store: \"redis\" is not supported yet; entries are kept per replica (\"memory\")"
        ));
    }
    (problems.len() == before).then(|| CacheSpec {
        ttl: std::time::Duration::from_secs(raw.ttl_s),
        max_bytes: raw.max_bytes,
        scope: raw.scope,
        store: raw.store,
    })
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
