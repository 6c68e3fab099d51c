//! `[[recipients]]` checked: names, key digests, bound contracts, rate limits and policies.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::policy::build_policy;
use super::{RawRateLimit, RawRecipient, check_range, limits};
use crate::config::Recipient;
use crate::contract::Contract;

fn validate_rate_limit(
    key: &str,
    raw: RawRateLimit,
    problems: &mut Vec<String>,
) -> crate::config::RateLimit {
    let (min, max) = limits::RATE_LIMIT_RPS;
    let rps = raw.requests_per_second;
    if !(rps.is_finite() && (min..=max).contains(&rps)) {
        problems.push(format!(
            "{key}.rate_limit.requests_per_second: must be between {min} and {max}, got {rps}"
        ));
    }
    let rps = if rps.is_finite() {
        rps.clamp(min, max)
    } else {
        1.0
    };
    // Within range, `ceil` is at most 1e6: the cast is exact.
    let burst = raw.burst.unwrap_or(rps.ceil().max(1.0) as u64);
    check_range(
        problems,
        &format!("{key}.rate_limit.burst"),
        burst,
        limits::RATE_LIMIT_BURST,
    );
    let (low, high) = limits::RATE_LIMIT_BURST;
    crate::config::RateLimit {
        requests_per_second: rps,
        burst: u32::try_from(burst.clamp(low, high)).unwrap_or(1),
    }
}

/// Checks every recipient against the contracts configured; each key binds one recipient.
pub(super) fn validate_recipients(
    raws: Vec<RawRecipient>,
    contracts: &BTreeMap<String, Arc<Contract>>,
    problems: &mut Vec<String>,
) -> Vec<Recipient> {
    let mut recipients = Vec::new();
    let mut digests = BTreeSet::new();
    let mut names = BTreeMap::new();
    for (index, raw) in raws.into_iter().enumerate() {
        let key = format!("recipients[{index}]");
        if raw.name.trim().is_empty() {
            problems.push(format!("{key}.name: must not be blank"));
        }
        // The name is the recipient's identity for its cache room, rate limit, in-flight
        // cap, connections, gate and logs: two keys under one name would share them all.
        let first = *names.entry(raw.name.clone()).or_insert(index);
        if first != index {
            problems.push(format!(
                "{key}.name: `{}` is also the name of recipients[{first}]; give every \
                 recipient a name of its own",
                raw.name
            ));
        }
        let Some(digest) = crate::config::parse_sha256_hex(&raw.key_sha256) else {
            problems.push(format!(
                "{key}.key_sha256: must be 64 hex digits (use `releasegate hash-key`)"
            ));
            continue;
        };
        if !digests.insert(digest) {
            problems.push(format!(
                "{key}.key_sha256: the same key is bound to two recipients"
            ));
        }
        recipients.push(validate_recipient(&key, raw, digest, contracts, problems));
    }
    recipients
}

/// One recipient whose key digest is read: its contracts, rate limit and policy.
fn validate_recipient(
    key: &str,
    raw: RawRecipient,
    digest: [u8; 32],
    contracts: &BTreeMap<String, Arc<Contract>>,
    problems: &mut Vec<String>,
) -> Recipient {
    if raw.contracts.is_empty() {
        problems.push(format!("{key}.contracts: bind at least one contract"));
    }
    for contract in &raw.contracts {
        if !contracts.contains_key(contract) {
            problems.push(format!("{key}.contracts: no contract named `{contract}`"));
        }
    }
    let rate_limit = raw
        .rate_limit
        .map(|limit| validate_rate_limit(key, limit, problems));
    if let Some(count) = raw.max_in_flight {
        check_range(
            problems,
            &format!("{key}.max_in_flight"),
            count,
            limits::MAX_IN_FLIGHT,
        );
    }
    let (_, most) = limits::MAX_IN_FLIGHT;
    let max_in_flight = raw
        .max_in_flight
        .map(|count| u32::try_from(count.clamp(1, most)).unwrap_or(1));
    let policy = raw.policy.and_then(|policy| {
        if !policy.keep.is_empty() {
            problems.push(format!(
                "{key}.policy.keep: KEEP is a contract's; a recipient's policy bounds what it learns (hide, max_recovery_gain)"
            ));
        }
        build_policy(
            &format!("{key}.policy"),
            policy,
            &BTreeMap::new(),
            problems,
        )
    });
    Recipient {
        name: raw.name,
        key_sha256: digest,
        contracts: raw.contracts,
        rate_limit,
        max_in_flight,
        policy,
    }
}
