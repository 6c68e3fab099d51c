//! The exact cache of native answers (`cache = { ttl_s, max_bytes, scope }` on a contract),
//! kept before the release: a hit is released afresh under the asking contract's own rules,
//! so one cached answer serves two contracts with two releases, and a hit's response is the
//! bytes a miss would have given (seeded noise is a function of the question; fresh noise is
//! fresh either way).
//!
//! A key is the canonical request that goes upstream: the provider, the System One body the
//! proxy rebuilt (model, the contract's pinned questions, the caller's `state` as sent, the
//! rebuilt `assets`), every image's bytes and the forwarded switches, hashed with SHA-256;
//! under `scope = "recipient"` (the default) also the recipient (its partition, below), so a
//! recipient can only hit entries its own requests filled and hit timing tells it nothing
//! about anyone else's questions. Under `scope = "provider"` entries are shared by every recipient whose contract
//! says so: a fast answer then tells a recipient that someone asked the same question within
//! the TTL (`docs/security.md`).
//!
//! Only answers the asking contract released go in; errors and refused answers never do. An
//! entry is served for at most the asking contract's `ttl_s` after it was filled, whatever
//! happens upstream. The cache is one per configuration generation, in partitions that
//! never share room: each recipient's own entries (`scope = "recipient"`), whose room is
//! its share of each of its recipient-scoped contracts' `max_bytes` (split evenly among the
//! recipients bound to the contract), so that no other recipient's traffic can evict them
//! (an eviction would show in the victim's hit timing), and the entries every
//! provider-scoped contract shares, bounded by the sum of theirs. A contract's entries so
//! take at most its `max_bytes` in all, as before partitions. moka evicts within a
//! partition by size and age; a partition keeps an entry at most its longest TTL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Each recipient's partition, made at its first fill from its bounds in `plans`.
    recipients: RwLock<HashMap<String, Entries>>,
    /// The room and TTL of each recipient's partition.
    plans: HashMap<String, Bounds>,
    /// The provider-scoped contracts' shared partition.
    shared: Option<Entries>,
    held: Arc<Held>,
    routing: crate::metrics::Routing,
}

/// One partition's entries.
type Entries = moka::sync::Cache<Key, Arc<Entry>>;

/// A partition's room in bytes and how long it keeps an entry.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    max_bytes: u64,
    ttl: Duration,
}

impl Bounds {
    /// Room for one more contract's entries.
    fn add(self, max_bytes: u64, ttl: Duration) -> Bounds {
        Bounds {
            max_bytes: self.max_bytes.saturating_add(max_bytes),
            ttl: self.ttl.max(ttl),
        }
    }
}

/// The bytes this generation holds for each contract, shown by `releasegate_cache_bytes`
/// while it is the newest generation.
#[derive(Debug)]
struct Held {
    generation: u64,
    by_contract: HashMap<String, Mutex<i64>>,
    routing: crate::metrics::Routing,
}

impl Held {
    /// Adds `bytes` (negative: removed) to `contract`'s total and shows it, unless a newer
    /// generation has taken the gauge (a reload drops this one's entries whole, and the
    /// gauge must not keep counting them). The generation is held meanwhile: a total is
    /// never set after a newer generation's reset, nor two updates' totals out of order.
    fn add(&self, contract: &str, bytes: i64) {
        let Some(total) = self.by_contract.get(contract) else {
            return;
        };
        let newest = self
            .routing
            .cache_generation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut total = total.lock().unwrap_or_else(PoisonError::into_inner);
        *total += bytes;
        if *newest == self.generation {
            self.routing
                .cache_bytes
                .with_label_values(&[contract])
                .set(*total);
        }
    }
}

/// Makes the next generation the one `releasegate_cache_bytes` shows, its `contracts` at
/// zero and no other contract's series left; returns its number.
fn take_gauge<'c>(
    routing: &crate::metrics::Routing,
    contracts: impl Iterator<Item = &'c str>,
) -> u64 {
    let mut newest = routing
        .cache_generation
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    *newest += 1;
    routing.cache_bytes.reset();
    for contract in contracts {
        routing.cache_bytes.with_label_values(&[contract]).set(0);
    }
    *newest
}

/// What an entry is found by within its partition (the recipient, under `scope =
/// "recipient"`, is the partition's).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    provider: String,
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
    /// The cache of `config`, or `None` when no contract configures one. Either way it
    /// takes `releasegate_cache_bytes` over from the previous generation's (every contract
    /// with a cache at zero, no other series).
    pub(crate) fn new(config: &Config, metrics: &Metrics) -> Option<AnswerCache> {
        let cached: Vec<(&String, &Contract)> = config
            .contracts()
            .iter()
            .filter(|(_, contract)| contract.cache().is_some())
            .map(|(name, contract)| (name, &**contract))
            .collect();
        let routing = metrics.routing.clone();
        let generation = take_gauge(&routing, cached.iter().map(|(name, _)| name.as_str()));
        if cached.is_empty() {
            return None;
        }
        let empty = Bounds {
            max_bytes: 0,
            ttl: Duration::ZERO,
        };
        let mut shared: Option<Bounds> = None;
        for (_, contract) in &cached {
            let spec = contract.cache()?;
            if spec.scope() == CacheScope::Provider {
                shared = Some(shared.unwrap_or(empty).add(spec.max_bytes(), spec.ttl()));
            }
        }
        // Each recipient's room: an even share of each recipient-scoped contract it is
        // bound to, so that a contract's entries take at most its `max_bytes` in all.
        let mut plans: HashMap<String, Bounds> = HashMap::new();
        for (name, contract) in &cached {
            let Some(spec) = contract
                .cache()
                .filter(|s| s.scope() == CacheScope::Recipient)
            else {
                continue;
            };
            let bound: Vec<&str> = config
                .recipients()
                .iter()
                .filter(|recipient| recipient.contracts.contains(name))
                .map(|recipient| recipient.name.as_str())
                .collect();
            let share = spec.max_bytes() / (bound.len().max(1) as u64);
            for recipient in bound {
                let bounds = plans.entry(recipient.to_string()).or_insert(empty);
                *bounds = bounds.add(share, spec.ttl());
            }
        }
        let held = Arc::new(Held {
            generation,
            by_contract: cached
                .iter()
                .map(|(name, _)| ((*name).clone(), Mutex::new(0)))
                .collect(),
            routing: routing.clone(),
        });
        let shared = shared.map(|bounds| partition(bounds, &held));
        Some(AnswerCache {
            inner: Arc::new(Inner {
                recipients: RwLock::new(HashMap::new()),
                plans,
                shared,
                held,
                routing,
            }),
        })
    }

    /// The partition that holds `contract`'s entries for `recipient`, made at its first use
    /// when `make`; `None` for a contract without a cache or a request without a recipient
    /// under `scope = "recipient"` (nothing is cached for it).
    fn partition(
        &self,
        contract: &Contract,
        recipient: Option<&str>,
        make: bool,
    ) -> Option<Entries> {
        match contract.cache()?.scope() {
            CacheScope::Provider => self.inner.shared.clone(),
            CacheScope::Recipient => {
                let recipient = recipient?;
                if let Some(entries) = self.inner.recipients.read().ok()?.get(recipient) {
                    return Some(entries.clone());
                }
                if !make {
                    return None;
                }
                let bounds = *self.inner.plans.get(recipient)?;
                let mut partitions = self.inner.recipients.write().ok()?;
                Some(
                    partitions
                        .entry(recipient.to_string())
                        .or_insert_with(|| partition(bounds, &self.inner.held))
                        .clone(),
                )
            }
        }
    }

    /// Counts a lookup's `result` (`hit`, `miss`, `bypass`) for `contract`.
    pub(crate) fn count(&self, contract: &Contract, result: &'static str) {
        self.inner
            .routing
            .cache_lookups
            .with_label_values(&[contract.name(), result])
            .inc();
    }

    /// The entry `provider` filled for `contract`'s request, no older than its TTL. The
    /// caller names the provider a miss would ask (`Upstreams::first_admitting`): an entry
    /// another provider filled (during an outage, or for another contract's failover
    /// order) is not the answer a miss would get.
    pub(crate) fn get(
        &self,
        contract: &Contract,
        recipient: Option<&str>,
        request: RequestDigest,
        provider: &str,
    ) -> Option<Arc<Entry>> {
        let ttl = contract.cache()?.ttl();
        let entries = self.partition(contract, recipient, false)?;
        let key = Key {
            provider: provider.to_string(),
            request: request.0,
        };
        entries
            .get(&key)
            .filter(|entry| fresh(entry.filled, ttl, Instant::now()))
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
        let Some(entries) = self.partition(contract, recipient, true) else {
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
        // the count below what is held.
        self.inner.held.add(contract.name(), i64::from(weight));
        let key = Key {
            provider: provider.to_string(),
            request: request.0,
        };
        entries.insert(key, Arc::new(entry));
    }
}

/// A partition of `bounds`, whose removals are counted in `held`.
fn partition(bounds: Bounds, held: &Arc<Held>) -> Entries {
    let held = held.clone();
    moka::sync::Cache::builder()
        .max_capacity(bounds.max_bytes)
        .weigher(|_key: &Key, entry: &Arc<Entry>| entry.weight)
        .time_to_live(bounds.ttl)
        .eviction_listener(move |_key, entry: Arc<Entry>, cause| {
            held.add(&entry.contract, -i64::from(entry.weight));
            if matches!(cause, RemovalCause::Expired | RemovalCause::Size) {
                held.routing
                    .cache_evictions
                    .with_label_values(&[&entry.contract])
                    .inc();
            }
        })
        .build()
}

/// Whether an entry filled at `filled` may still be served at `now` under `ttl`.
fn fresh(filled: Instant, ttl: Duration, now: Instant) -> bool {
    now.saturating_duration_since(filled) < ttl
}

#[cfg(test)]
mod tests;
