//! The metrics of failover, circuits and the answer cache. Labels come from the
//! configuration (contract and provider names) and fixed lists (reasons).

use prometheus::{HistogramVec, IntCounterVec, IntGaugeVec, Registry};

use super::families::{Family, counters, gauges, histograms};

/// `releasegate_circuit_state{provider}`.
const CIRCUIT_STATE: Family = Family {
    name: "releasegate_circuit_state",
    help: "A provider's circuit: 0 closed, 1 open, 2 half-open (one trial request)",
    labels: &["provider"],
};

/// `releasegate_circuit_store_degraded`.
const CIRCUIT_STORE_DEGRADED: Family = Family {
    name: "releasegate_circuit_store_degraded",
    help: "1 while the Redis store does not answer, so circuits are per replica, else 0",
    labels: &[],
};

/// `releasegate_overhead_seconds{contract}`.
const OVERHEAD: Family = Family {
    name: "releasegate_overhead_seconds",
    help: "The proxy's own time per System One request: from the handler's start to the response, minus the wait for providers",
    labels: &["contract"],
};

/// Buckets of `releasegate_overhead_seconds`: tens of microseconds up to a second.
const OVERHEAD_BUCKETS: [f64; 16] = [
    1e-5, 2e-5, 3e-5, 5e-5, 7.5e-5, 1e-4, 1.5e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 0.1,
    1.0,
];

/// `releasegate_failovers_total{contract,provider,reason}`.
const FAILOVERS: Family = Family {
    name: "releasegate_failovers_total",
    help: "Requests moved past a provider to the contract's next one, by the provider passed and why",
    labels: &["contract", "provider", "reason"],
};

/// `releasegate_upstream_attempts{contract}`.
const ATTEMPTS: Family = Family {
    name: "releasegate_upstream_attempts",
    help: "Providers asked per request (0: every circuit open or every answer cached)",
    labels: &["contract"],
};

/// `releasegate_answered_total{contract,provider}`.
const ANSWERED: Family = Family {
    name: "releasegate_answered_total",
    help: "Requests answered by each provider of a contract (what recipients are never told)",
    labels: &["contract", "provider"],
};

/// `releasegate_cache_lookups_total{contract,result}`.
const CACHE_LOOKUPS: Family = Family {
    name: "releasegate_cache_lookups_total",
    help: "Answer cache lookups by contract and result (hit, miss, bypass)",
    labels: &["contract", "result"],
};

/// `releasegate_cache_evictions_total{contract}`.
const CACHE_EVICTIONS: Family = Family {
    name: "releasegate_cache_evictions_total",
    help: "Answer cache entries evicted (expired or over the size bound), by the contract that filled them",
    labels: &["contract"],
};

/// `releasegate_cache_bytes{contract}`.
const CACHE_BYTES: Family = Family {
    name: "releasegate_cache_bytes",
    help: "Bytes held by answer cache entries, by the contract that filled them",
    labels: &["contract"],
};

/// The handles.
#[derive(Clone, Debug)]
pub(crate) struct Routing {
    pub(crate) circuit_state: IntGaugeVec,
    pub(crate) circuit_store_degraded: prometheus::IntGauge,
    pub(crate) failovers: IntCounterVec,
    pub(crate) overhead: super::Sharded<HistogramVec>,
    pub(crate) attempts: HistogramVec,
    pub(crate) answered: IntCounterVec,
    pub(crate) cache_lookups: IntCounterVec,
    pub(crate) cache_evictions: IntCounterVec,
    pub(crate) cache_bytes: IntGaugeVec,
    /// The configuration generation whose answer cache `cache_bytes` shows (each
    /// generation takes the next number when it is made; an older one no longer sets the
    /// gauge). Held while the gauge is set, so that no older generation's update lands
    /// after a newer one has reset it.
    pub(crate) cache_generation: std::sync::Arc<std::sync::Mutex<u64>>,
}

impl Routing {
    pub(super) fn register(r: &Registry) -> Result<Routing, prometheus::Error> {
        Ok(Routing {
            circuit_state: gauges(r, &CIRCUIT_STATE)?,
            circuit_store_degraded: super::families::gauge(r, &CIRCUIT_STORE_DEGRADED)?,
            failovers: counters(r, &FAILOVERS)?,
            overhead: super::families::sharded_histograms(r, &OVERHEAD, &OVERHEAD_BUCKETS)?,
            attempts: histograms(r, &ATTEMPTS, &[0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0])?,
            answered: counters(r, &ANSWERED)?,
            cache_lookups: counters(r, &CACHE_LOOKUPS)?,
            cache_evictions: counters(r, &CACHE_EVICTIONS)?,
            cache_bytes: gauges(r, &CACHE_BYTES)?,
            cache_generation: Default::default(),
        })
    }
}
