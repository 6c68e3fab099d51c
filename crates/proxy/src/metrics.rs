//! Prometheus metrics on an owned registry. Labels come only from
//! configuration (contract, provider, question ids) and enums.

use std::collections::HashMap;
use std::sync::OnceLock;

use foldhash::fast::FixedState;
use prometheus::{
    Encoder, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
    TextEncoder,
};

use releasegate_core::config::Config;
use releasegate_core::mechanism::Mechanism;

mod answers;
mod certified;
mod families;
mod routing;
mod sharded;

pub(crate) use answers::AnswerSeries;
pub(crate) use certified::Certified;
pub(crate) use routing::Routing;
pub(crate) use sharded::{PerShard, Sharded};

/// Histogram buckets of request and upstream latencies, in seconds.
const LATENCY_BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Typed metric handles.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests by contract and status class (counted per thread: [`Sharded`]).
    pub(crate) requests: Sharded<IntCounterVec>,
    /// The proxy's own request latency by contract, route and status class.
    pub(crate) request_duration: Sharded<HistogramVec>,
    /// Upstream latency by provider.
    pub(crate) upstream_latency: Sharded<HistogramVec>,
    /// Upstream failures by provider and kind.
    pub upstream_errors: IntCounterVec,
    /// Released answers by contract, question and view.
    pub(crate) released_answers: Sharded<IntCounterVec>,
    /// Rejected upstream answers by contract and reason.
    pub rejected_answers: IntCounterVec,
    /// WCPQ-mapped answers by contract, question and outcome (covered or fallback).
    pub(crate) wcpq_answers: Sharded<IntCounterVec>,
    /// WCPQ fallbacks by contract, question and reason.
    pub(crate) wcpq_fallbacks: Sharded<IntCounterVec>,
    /// Covered WCPQ answers by contract, question and codebook stage (`compact`, `strict`).
    pub(crate) wcpq_covered: Sharded<IntCounterVec>,
    /// Time spent in the WCPQ mapper by contract and question.
    pub(crate) wcpq_mapping: Sharded<HistogramVec>,
    /// One series per WCPQ question: the codebook's SHA-256 as a label, its codeword count as value.
    pub codebook_info: IntGaugeVec,
    /// Configuration reloads by result (`ok`, `error`).
    pub config_reloads: IntCounterVec,
    /// One series, value 1: the SHA-256 of the configuration text in force.
    pub config_info: IntGaugeVec,
    /// Decision log lines dropped, by reason (`queue_full`, `write_error`).
    pub decision_log_dropped: IntCounterVec,
    /// Requests refused by a recipient's rate limit, by recipient.
    pub rate_limited: IntCounterVec,
    /// Worlds written by a contract's live capture, by contract.
    pub captured: IntCounterVec,
    /// Worlds of a contract's live capture dropped, by contract and reason (`queue_full`,
    /// `write_error`).
    pub capture_dropped: IntCounterVec,
    /// One series, value 1: the version and source commit of this build.
    pub build_info: IntGaugeVec,
    /// 1 while the shared rate limit store does not answer (limits are per replica), else 0.
    pub rate_limit_store_degraded: IntGauge,
    /// Failed calls to the shared rate limit store, by kind (`timeout`, `error`).
    pub rate_limit_store_errors: IntCounterVec,
    /// Contract-allowed request headers forwarded to the provider, by contract and header.
    pub forwarded_headers: IntCounterVec,
    /// The bytes requests in flight hold now, as the budget counts them (KiB steps).
    pub request_bytes_in_use: IntGauge,
    /// The budget on the bytes requests in flight hold together.
    pub request_bytes_limit: IntGauge,
    /// Requests refused before their body was held, by reason (`server::budget::Shed`).
    pub requests_shed: IntCounterVec,
    /// Requests refused by a recipient's `max_in_flight`, by recipient.
    pub in_flight_limited: IntCounterVec,
    /// Whether each contract and recipient with a policy is certified.
    pub(crate) certified: Certified,
    /// Failover, circuits and the answer cache.
    pub(crate) routing: routing::Routing,
}

/// The source commit this binary was built from (`build.rs`): 12 hex digits, or "unknown".
pub(crate) const BUILD_COMMIT: &str = env!("RELEASEGATE_BUILD_COMMIT");

/// Errors building metrics (only on programming mistakes such as duplicate names).
pub(crate) type Error = prometheus::Error;

// === impl Metrics ===

impl Metrics {
    /// Registers every metric on a fresh registry.
    pub fn new() -> Result<Metrics, Error> {
        use families::*;
        let registry = Registry::new();
        let r = &registry;
        let metrics = Metrics {
            requests: sharded_counters(r, &REQUESTS)?,
            request_duration: sharded_histograms(r, &REQUEST_DURATION, &LATENCY_BUCKETS)?,
            upstream_latency: sharded_histograms(r, &UPSTREAM_LATENCY, &LATENCY_BUCKETS)?,
            upstream_errors: counters(r, &UPSTREAM_ERRORS)?,
            released_answers: sharded_counters(r, &RELEASED_ANSWERS)?,
            rejected_answers: counters(r, &REJECTED_ANSWERS)?,
            wcpq_answers: sharded_counters(r, &WCPQ_ANSWERS)?,
            wcpq_fallbacks: sharded_counters(r, &WCPQ_FALLBACKS)?,
            wcpq_covered: sharded_counters(r, &WCPQ_COVERED)?,
            wcpq_mapping: sharded_histograms(r, &WCPQ_MAPPING, &MAPPING_BUCKETS)?,
            codebook_info: gauges(r, &CODEBOOK_INFO)?,
            config_reloads: counters(r, &CONFIG_RELOADS)?,
            config_info: gauges(r, &CONFIG_INFO)?,
            decision_log_dropped: counters(r, &DECISION_LOG_DROPPED)?,
            rate_limited: counters(r, &RATE_LIMITED)?,
            forwarded_headers: counters(r, &FORWARDED_HEADERS)?,
            captured: counters(r, &CAPTURED)?,
            capture_dropped: counters(r, &CAPTURE_DROPPED)?,
            build_info: gauges(r, &BUILD_INFO)?,
            rate_limit_store_degraded: gauge(r, &RATE_LIMIT_STORE_DEGRADED)?,
            rate_limit_store_errors: counters(r, &RATE_LIMIT_STORE_ERRORS)?,
            request_bytes_in_use: gauge(r, &REQUEST_BYTES_IN_USE)?,
            request_bytes_limit: gauge(r, &REQUEST_BYTES_LIMIT)?,
            requests_shed: counters(r, &REQUESTS_SHED)?,
            in_flight_limited: counters(r, &IN_FLIGHT_LIMITED)?,
            certified: Certified::register(r)?,
            routing: routing::Routing::register(r)?,
            registry: registry.clone(),
        };
        for result in ["ok", "error"] {
            metrics.config_reloads.with_label_values(&[result]);
        }
        for reason in crate::server::Shed::ALL {
            metrics.requests_shed.with_label_values(&[reason.label()]);
        }
        metrics
            .build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), BUILD_COMMIT])
            .set(1);
        // process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds,
        // process_max_fds, process_start_time_seconds, ... (procfs; Linux only).
        #[cfg(target_os = "linux")]
        metrics.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        Ok(metrics)
    }

    /// Publishes the codebook of every WCPQ question and starts its series at zero;
    /// starts every provider's upstream error series and every contract's rejected-answer
    /// series (one per reason) at zero.
    pub fn describe(&self, config: &Config) {
        self.certified.describe(config);
        self.config_info
            .with_label_values(&[config.origin().sha256.as_str()])
            .set(1);
        if config.rate_limit_store().is_some() {
            for kind in ["timeout", "error"] {
                self.rate_limit_store_errors.with_label_values(&[kind]);
            }
        }
        for recipient in config.recipients() {
            if recipient.rate_limit.is_some() {
                self.rate_limited
                    .with_label_values(&[recipient.name.as_str()]);
            }
            if recipient.max_in_flight.is_some() {
                self.in_flight_limited
                    .with_label_values(&[recipient.name.as_str()]);
            }
        }
        for name in config.captures().keys() {
            self.captured.with_label_values(&[name.as_str()]);
            for reason in ["queue_full", "write_error"] {
                self.capture_dropped
                    .with_label_values(&[name.as_str(), reason]);
            }
        }
        for provider in config.providers().keys() {
            for kind in crate::upstream::ERROR_KINDS {
                self.upstream_errors
                    .with_label_values(&[provider.as_str(), kind]);
            }
        }
        for (name, contract) in config.contracts() {
            for header in contract.forward_headers() {
                self.forwarded_headers
                    .with_label_values(&[name.as_str(), header.lower()]);
            }
            for reason in releasegate_core::wire::Invalid::ALL {
                self.rejected_answers
                    .with_label_values(&[name.as_str(), &reason.to_string()]);
            }
            for (question, rule) in contract.questions() {
                if let Mechanism::Wcpq(wcpq) = &rule.mechanism() {
                    let count = i64::try_from(wcpq.mapper.codebook().len()).unwrap_or(i64::MAX);
                    self.codebook_info
                        .with_label_values(&[
                            name.as_str(),
                            question.as_str(),
                            wcpq.codebook_sha256.as_str(),
                        ])
                        .set(count);
                    // Its answer series are created by `answer_series`, which every
                    // configuration generation calls.
                }
            }
        }
    }

    /// After a reload from `old` to `new`: describes `new` and removes the series that
    /// described only `old` (its configuration hash, codebooks no longer in use). Counters
    /// keep their values: a question or provider that disappears keeps its history.
    pub fn redescribe(&self, old: &Config, new: &Config) {
        self.describe(new);
        self.certified.redescribe(old, new);
        if old.origin().sha256 != new.origin().sha256 {
            let _ = self
                .config_info
                .remove_label_values(&[old.origin().sha256.as_str()]);
        }
        let codebooks = |config: &Config| {
            let mut series = std::collections::BTreeSet::new();
            for (name, contract) in config.contracts() {
                for (question, rule) in contract.questions() {
                    if let Mechanism::Wcpq(wcpq) = &rule.mechanism() {
                        series.insert([
                            name.clone(),
                            question.clone(),
                            wcpq.codebook_sha256.clone(),
                        ]);
                    }
                }
            }
            series
        };
        let current = codebooks(new);
        for stale in codebooks(old).difference(&current) {
            let labels = [stale[0].as_str(), stale[1].as_str(), stale[2].as_str()];
            let _ = self.codebook_info.remove_label_values(&labels);
        }
    }

    /// The registry (for registering further collectors).
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Renders the text exposition format.
    pub fn render(&self) -> Vec<u8> {
        let mut buffer = Vec::new();
        // Encoding into a Vec cannot fail for well-formed families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buffer);
        buffer
    }
}

/// The routes whose request series [`RequestSeries`] keeps resolved.
const ROUTES: [&str; 3] = ["systemone", "models", "questions"];

/// A request's two series for one contract, route and status class:
/// `releasegate_requests_total` and `releasegate_request_duration_seconds`.
type RequestPair = (IntCounter, Histogram);

/// The request series per contract (and for requests that selected none, labelled
/// `none`), per route of [`ROUTES`] and status class, for one configuration generation
/// ([`Metrics::request_series`]). Each pair is resolved by label at its first request and
/// kept: a series appears with the first request it counts, as it does by label, and
/// counting a request then takes one map lookup instead of two label lookups.
#[derive(Debug, Default)]
pub struct RequestSeries {
    /// Per contract, each thread shard's pairs (of that shard's copy of the families).
    by_contract: HashMap<String, PerShard<ContractRequests>, FixedState>,
}

/// One contract's request pairs, by route (in [`ROUTES`] order) and status class (in
/// [`STATUS_CLASSES`] order), and its `releasegate_overhead_seconds` series.
#[derive(Debug, Default)]
struct ContractRequests {
    pairs: [[OnceLock<RequestPair>; STATUS_CLASSES.len()]; ROUTES.len()],
    overhead: OnceLock<Histogram>,
}

impl Metrics {
    /// The request series of `config`'s contracts and of requests without one (none
    /// created yet: see [`RequestSeries`]).
    pub fn request_series(&self, config: &Config) -> RequestSeries {
        let mut by_contract = HashMap::with_hasher(FixedState::default());
        for name in config
            .contracts()
            .keys()
            .map(String::as_str)
            .chain(["none"])
        {
            by_contract.entry(name.to_string()).or_default();
        }
        RequestSeries { by_contract }
    }

    /// Counts one finished request of `contract` (`none` when it selected none) on
    /// `route` with `status`, and its latency: through `series` where it keeps the pair,
    /// by label otherwise (the same series either way).
    pub fn record_request(
        &self,
        series: &RequestSeries,
        contract: &str,
        route: &str,
        status: u16,
        seconds: f64,
    ) {
        let class = status_class(status);
        let by_label = || {
            (
                self.requests.here().with_label_values(&[contract, class]),
                self.request_duration
                    .here()
                    .with_label_values(&[contract, route, class]),
            )
        };
        let kept = series
            .by_contract
            .get(contract)
            .map(PerShard::here)
            .zip(ROUTES.iter().position(|&known| known == route))
            .map(|(kept, at)| &kept.pairs[at][status_class_index(status)]);
        let owned;
        let (count, duration) = match kept {
            Some(pair) => pair.get_or_init(by_label),
            None => {
                owned = by_label();
                &owned
            }
        };
        count.inc();
        duration.observe(seconds);
    }

    /// Observes one `/v1/systemone` request's own time (its time minus the provider's)
    /// under `contract`: through `series` where it keeps the contract's series, by label
    /// otherwise (the same series either way; like the request pairs, it appears with the
    /// first request it counts).
    pub fn record_overhead(&self, series: &RequestSeries, contract: &str, seconds: f64) {
        let by_label = || self.routing.overhead.here().with_label_values(&[contract]);
        match series.by_contract.get(contract).map(PerShard::here) {
            Some(kept) => kept.overhead.get_or_init(by_label).observe(seconds),
            None => by_label().observe(seconds),
        }
    }
}

/// The status class labels, in [`status_class_index`] order.
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The position of an HTTP status's class in [`STATUS_CLASSES`] (anything outside
/// 100..=499 counts as `5xx`).
fn status_class_index(status: u16) -> usize {
    match status {
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 4,
    }
}

/// The status class label of an HTTP status.
pub(crate) fn status_class(status: u16) -> &'static str {
    STATUS_CLASSES[status_class_index(status)]
}

#[cfg(test)]
mod series_tests;
