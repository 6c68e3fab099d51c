//! The proxy's own metric families, one constant each (name, help text, label names),
//! and the helpers that register a family on a registry in one call, so a new metric is
//! one constant here and one line in `Metrics::new`. Names, help texts, labels and
//! buckets are what `/metrics` shows (tests and the dashboards in `deploy/` read them).

use prometheus::{
    HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use super::{Error, Sharded};

/// A metric family: its name, help text and label names.
#[derive(Clone, Copy, Debug)]
pub(super) struct Family {
    pub(super) name: &'static str,
    pub(super) help: &'static str,
    pub(super) labels: &'static [&'static str],
}

impl Family {
    /// Its name and help text as prometheus options.
    pub(super) fn opts(&self) -> Opts {
        Opts::new(self.name, self.help)
    }
}

/// Buckets of `releasegate_wcpq_mapping_seconds`: one answer's mapping, microseconds up.
pub(super) const MAPPING_BUCKETS: [f64; 11] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2, 0.1,
];

/// Registers `metric` on `registry` and returns it.
pub(super) fn register<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: M,
) -> Result<M, Error> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

/// The counter family `family`, registered on `registry`.
pub(super) fn counters(registry: &Registry, family: &Family) -> Result<IntCounterVec, Error> {
    register(registry, IntCounterVec::new(family.opts(), family.labels)?)
}

/// The gauge `family` (no labels), registered on `registry`.
pub(super) fn gauge(registry: &Registry, family: &Family) -> Result<IntGauge, Error> {
    register(registry, IntGauge::with_opts(family.opts())?)
}

/// The gauge family `family`, registered on `registry`.
pub(super) fn gauges(registry: &Registry, family: &Family) -> Result<IntGaugeVec, Error> {
    register(registry, IntGaugeVec::new(family.opts(), family.labels)?)
}

/// The histogram family `family` with `buckets`, registered on `registry`.
pub(super) fn histograms(
    registry: &Registry,
    family: &Family,
    buckets: &[f64],
) -> Result<HistogramVec, Error> {
    let opts = HistogramOpts::from(family.opts()).buckets(buckets.to_vec());
    register(registry, HistogramVec::new(opts, family.labels)?)
}

/// The counter family `family`, one copy per thread shard, registered on `registry`.
pub(super) fn sharded_counters(
    registry: &Registry,
    family: &Family,
) -> Result<Sharded<IntCounterVec>, Error> {
    register(
        registry,
        Sharded::new(|| IntCounterVec::new(family.opts(), family.labels))?,
    )
}

/// The histogram family `family` with `buckets`, one copy per thread shard, registered
/// on `registry`.
pub(super) fn sharded_histograms(
    registry: &Registry,
    family: &Family,
    buckets: &[f64],
) -> Result<Sharded<HistogramVec>, Error> {
    let opts = HistogramOpts::from(family.opts()).buckets(buckets.to_vec());
    register(
        registry,
        Sharded::new(|| HistogramVec::new(opts.clone(), family.labels))?,
    )
}

/// `releasegate_requests_total`.
pub(super) const REQUESTS: Family = Family {
    name: "releasegate_requests_total",
    help: "Requests by release contract and status class",
    labels: &["contract", "status_class"],
};

/// `releasegate_request_duration_seconds`.
pub(super) const REQUEST_DURATION: Family = Family {
    name: "releasegate_request_duration_seconds",
    help: "Time from request arrival to response, by release contract, route and status class",
    labels: &["contract", "route", "status_class"],
};

/// `releasegate_upstream_latency_seconds`.
pub(super) const UPSTREAM_LATENCY: Family = Family {
    name: "releasegate_upstream_latency_seconds",
    help: "Upstream request latency by provider",
    labels: &["provider"],
};

/// `releasegate_upstream_errors_total`.
pub(super) const UPSTREAM_ERRORS: Family = Family {
    name: "releasegate_upstream_errors_total",
    help: "Upstream failures by provider and kind",
    labels: &["provider", "kind"],
};

/// `releasegate_released_answers_total`.
pub(super) const RELEASED_ANSWERS: Family = Family {
    name: "releasegate_released_answers_total",
    help: "Released answers by contract, question and view",
    labels: &["contract", "question", "view"],
};

/// `releasegate_rejected_upstream_answers_total`.
pub(super) const REJECTED_ANSWERS: Family = Family {
    name: "releasegate_rejected_upstream_answers_total",
    help: "Upstream answers rejected as invalid, by contract and reason",
    labels: &["contract", "reason"],
};

/// `releasegate_wcpq_answers_total`.
pub(super) const WCPQ_ANSWERS: Family = Family {
    name: "releasegate_wcpq_answers_total",
    help: "Answers mapped by WCPQ, by contract, question and outcome (covered or fallback)",
    labels: &["contract", "question", "outcome"],
};

/// `releasegate_wcpq_fallbacks_total`.
pub(super) const WCPQ_FALLBACKS: Family = Family {
    name: "releasegate_wcpq_fallbacks_total",
    help: "WCPQ fallbacks by contract, question and reason",
    labels: &["contract", "question", "reason"],
};

/// `releasegate_wcpq_covered_total`.
pub(super) const WCPQ_COVERED: Family = Family {
    name: "releasegate_wcpq_covered_total",
    help: "Covered WCPQ answers by contract, question and codebook stage (compact: a learned codebook's codewords; strict: a strict codebook or a learned codebook's strict stage)",
    labels: &["contract", "question", "stage"],
};

/// `releasegate_wcpq_mapping_seconds`.
pub(super) const WCPQ_MAPPING: Family = Family {
    name: "releasegate_wcpq_mapping_seconds",
    help: "Time to map one answer with the WCPQ strict mapper",
    labels: &["contract", "question"],
};

/// `releasegate_codebook_info`.
pub(super) const CODEBOOK_INFO: Family = Family {
    name: "releasegate_codebook_info",
    help: "WCPQ codebook in use per contract question (value: codeword count)",
    labels: &["contract", "question", "sha256"],
};

/// `releasegate_config_reloads_total`.
pub(super) const CONFIG_RELOADS: Family = Family {
    name: "releasegate_config_reloads_total",
    help: "Configuration reloads (SIGHUP or file change) by result: ok or error",
    labels: &["result"],
};

/// `releasegate_config_info`.
pub(super) const CONFIG_INFO: Family = Family {
    name: "releasegate_config_info",
    help: "The configuration in force (value 1): SHA-256 of its text",
    labels: &["sha256"],
};

/// `releasegate_decision_log_dropped_total`.
pub(super) const DECISION_LOG_DROPPED: Family = Family {
    name: "releasegate_decision_log_dropped_total",
    help: "Decision log lines dropped, by reason: queue_full (the writer fell behind) or write_error",
    labels: &["reason"],
};

/// `releasegate_rate_limited_total`.
pub(super) const RATE_LIMITED: Family = Family {
    name: "releasegate_rate_limited_total",
    help: "Requests refused (429) by a recipient's rate limit on this replica, by recipient",
    labels: &["recipient"],
};

/// `releasegate_forwarded_headers_total`.
pub(super) const FORWARDED_HEADERS: Family = Family {
    name: "releasegate_forwarded_headers_total",
    help: "Requests that sent a contract-allowed header (forward_headers) to the provider, by contract and header",
    labels: &["contract", "header"],
};

/// `releasegate_captured_total`.
pub(super) const CAPTURED: Family = Family {
    name: "releasegate_captured_total",
    help: "Worlds (a native answer and its upstream request) written by a contract's live capture",
    labels: &["contract"],
};

/// `releasegate_capture_dropped_total`.
pub(super) const CAPTURE_DROPPED: Family = Family {
    name: "releasegate_capture_dropped_total",
    help: "Sampled worlds of a contract's live capture that were not written, by reason: \
                 queue_full (the writer fell behind) or write_error",
    labels: &["contract", "reason"],
};

/// `releasegate_build_info`.
pub(super) const BUILD_INFO: Family = Family {
    name: "releasegate_build_info",
    help: "The build serving (value 1): its version and source commit",
    labels: &["version", "commit"],
};

/// `releasegate_rate_limit_store_degraded` (no labels).
pub(super) const RATE_LIMIT_STORE_DEGRADED: Family = Family {
    name: "releasegate_rate_limit_store_degraded",
    help: "1 while the shared rate limit store does not answer and rate limits are per replica, else 0",
    labels: &[],
};

/// `releasegate_rate_limit_store_errors_total`.
pub(super) const RATE_LIMIT_STORE_ERRORS: Family = Family {
    name: "releasegate_rate_limit_store_errors_total",
    help: "Calls to the shared rate limit store that failed, by kind: timeout or error",
    labels: &["kind"],
};

/// `releasegate_request_bytes_in_use` (no labels).
pub(super) const REQUEST_BYTES_IN_USE: Family = Family {
    name: "releasegate_request_bytes_in_use",
    help: "Bytes of the budget on request bytes held now (server.max_decoded_bytes_in_flight), in KiB steps",
    labels: &[],
};

/// `releasegate_request_bytes_limit` (no labels).
pub(super) const REQUEST_BYTES_LIMIT: Family = Family {
    name: "releasegate_request_bytes_limit",
    help: "The budget on the bytes all requests in flight hold together (server.max_decoded_bytes_in_flight, or derived from the memory limit)",
    labels: &[],
};

/// `releasegate_requests_shed_total`.
pub(super) const REQUESTS_SHED: Family = Family {
    name: "releasegate_requests_shed_total",
    help: "Requests refused before their body was held, by reason: budget_timeout (503), too_large_for_budget (413) or recipient_in_flight (429)",
    labels: &["reason"],
};

/// `releasegate_in_flight_limited_total`.
pub(super) const IN_FLIGHT_LIMITED: Family = Family {
    name: "releasegate_in_flight_limited_total",
    help: "Requests refused (429) by a recipient's max_in_flight on this replica, by recipient",
    labels: &["recipient"],
};
