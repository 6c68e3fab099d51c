//! The exact cache of native answers (`cache = { ttl_s, max_bytes, scope }` on a contract),
//! kept before the release: a hit is released afresh under the asking contract's own rules,
//! so one cached answer serves two contracts with two releases, and a hit's response is the
//! bytes a miss would have given (seeded noise is a function of the question; fresh noise is
//! fresh either way).
//!
//! A key is the canonical request that goes upstream: the provider, the System One body the
//! proxy rebuilt (model, the contract's pinned questions, the caller's `state` as sent, the
//! rebuilt `assets`), every image's bytes and the forwarded switches, hashed with SHA-256;
//! under `scope = "recipient"` (the default) also the recipient, so a recipient can only hit
//! entries its own requests filled and hit timing tells it nothing about anyone else's
//! questions. Under `scope = "provider"` entries are shared by every recipient whose contract
//! says so: a fast answer then tells a recipient that someone asked the same question within
//! the TTL (`docs/security.md`).
//!
//! Only answers the asking contract released go in; errors and refused answers never do. An
//! entry is served for at most the asking contract's `ttl_s` after it was filled, whatever
//! happens upstream. The cache is one per configuration generation, bounded by the sum of the
//! contracts' `max_bytes` (moka evicts by size and age).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use moka::notification::RemovalCause;
use sha2::{Digest, Sha256};

use crate::metrics::Metrics;
use releasegate_core::config::Config;
use releasegate_core::contract::{CacheScope, Contract};

/// The answer cache of a configuration generation.
#[derive(Clone, Debug)]
pub(crate) struct AnswerCache {
    entries: moka::sync::Cache<Key, Arc<Entry>>,
    routing: crate::metrics::Routing,
}

/// What an entry is found by.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    provider: String,
    /// The recipient whose request filled it (`scope = "recipient"`), or none (`provider`).
    recipient: Option<String>,
    request: [u8; 32],
}

/// A cached native answer.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The provider's validated answer, as it came.
    pub(crate) native: Bytes,
    /// The provider that gave it.
    pub(crate) provider: String,
    filled: Instant,
    /// The contract that filled it (the metrics' label).
    contract: String,
    weight: u32,
}

/// A request's digest, as the cache keys it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestDigest([u8; 32]);

impl RequestDigest {
    /// The digest of what goes upstream: the JSON body, each image and the switches.
    pub(crate) fn new<'a>(
        json: &[u8],
        images: impl Iterator<Item = &'a [u8]>,
        switches: &[&str],
    ) -> RequestDigest {
        let mut hash = Sha256::new();
        let mut part = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_le_bytes());
            hash.update(bytes);
        };
        part(b"releasegate answer cache v1");
        part(json);
        for image in images {
            part(image);
        }
        for switch in switches {
            part(switch.as_bytes());
        }
        RequestDigest(hash.finalize().into())
    }
}

/// What the caller's `Cache-Control` allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Allowed {
    /// Look up and fill.
    Both,
    /// `no-cache`: fill, but do not answer from the cache.
    FillOnly,
    /// `no-store`: neither.
    Neither,
}

impl Allowed {
    /// Reads the request's `Cache-Control` values.
    pub(crate) fn from_headers(headers: &axum::http::HeaderMap) -> Allowed {
        let mut allowed = Allowed::Both;
        for value in headers.get_all(axum::http::header::CACHE_CONTROL) {
            for directive in value.to_str().unwrap_or("no-store").split(',') {
                match directive.trim().to_ascii_lowercase().as_str() {
                    "no-store" => return Allowed::Neither,
                    "no-cache" | "max-age=0" => allowed = Allowed::FillOnly,
                    _ => {}
                }
            }
        }
        allowed
    }
}

impl AnswerCache {
    /// The cache of `config`, or `None` when no contract configures one.
    pub(crate) fn new(config: &Config, metrics: &Metrics) -> Option<AnswerCache> {
        let specs: Vec<_> = config
            .contracts()
            .values()
            .filter_map(|contract| contract.cache())
            .collect();
        let capacity: u64 = specs.iter().map(|spec| spec.max_bytes()).sum();
        let longest = specs.iter().map(|spec| spec.ttl()).max()?;
        let routing = metrics.routing.clone();
        let listener = routing.clone();
        let entries = moka::sync::Cache::builder()
            .max_capacity(capacity)
            .weigher(|_key: &Key, entry: &Arc<Entry>| entry.weight)
            .time_to_live(longest)
            .eviction_listener(move |_key, entry: Arc<Entry>, cause| {
                listener
                    .cache_bytes
                    .with_label_values(&[&entry.contract])
                    .sub(i64::from(entry.weight));
                if matches!(cause, RemovalCause::Expired | RemovalCause::Size) {
                    listener
                        .cache_evictions
                        .with_label_values(&[&entry.contract])
                        .inc();
                }
            })
            .build();
        Some(AnswerCache { entries, routing })
    }

    fn key(
        contract: &Contract,
        provider: &str,
        recipient: Option<&str>,
        request: RequestDigest,
    ) -> Option<Key> {
        let spec = contract.cache()?;
        Some(Key {
            provider: provider.to_string(),
            recipient: match spec.scope() {
                CacheScope::Recipient => Some(recipient?.to_string()),
                CacheScope::Provider => None,
            },
            request: request.0,
        })
    }

    /// Counts a lookup's `result` (`hit`, `miss`, `bypass`) for `contract`.
    pub(crate) fn count(&self, contract: &Contract, result: &'static str) {
        self.routing
            .cache_lookups
            .with_label_values(&[contract.name(), result])
            .inc();
    }

    /// An entry for `contract`'s request, from any of its providers (in order), no older
    /// than its TTL.
    pub(crate) fn get(
        &self,
        contract: &Contract,
        recipient: Option<&str>,
        request: RequestDigest,
    ) -> Option<Arc<Entry>> {
        let ttl = contract.cache()?.ttl();
        contract.providers().iter().find_map(|provider| {
            let key = AnswerCache::key(contract, provider, recipient, request)?;
            self.entries
                .get(&key)
                .filter(|entry| fresh(entry.filled, ttl, Instant::now()))
        })
    }

    /// Keeps `native`, the answer `provider` gave and `contract` released.
    pub(crate) fn fill(
        &self,
        contract: &Contract,
        recipient: Option<&str>,
        request: RequestDigest,
        provider: &str,
        native: Bytes,
    ) {
        let Some(key) = AnswerCache::key(contract, provider, recipient, request) else {
            return;
        };
        let weight = (native.len() + provider.len() + recipient.map_or(0, str::len) + 128)
            .try_into()
            .unwrap_or(u32::MAX);
        let entry = Entry {
            native,
            provider: provider.to_string(),
            filled: Instant::now(),
            contract: contract.name().to_string(),
            weight,
        };
        // Counted before the insert, so that an eviction (even of this entry) never takes
        // the gauge below what is held.
        self.routing
            .cache_bytes
            .with_label_values(&[contract.name()])
            .add(i64::from(weight));
        self.entries.insert(key, Arc::new(entry));
    }
}

/// Whether an entry filled at `filled` may still be served at `now` under `ttl`.
fn fresh(filled: Instant, ttl: Duration, now: Instant) -> bool {
    now.saturating_duration_since(filled) < ttl
}
