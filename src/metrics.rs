//! Prometheus metrics on an owned registry. Labels come only from
//! configuration (contract, provider, question ids) and enums.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

/// Typed metric handles.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests by contract and status class.
    pub requests: IntCounterVec,
    /// Upstream latency by provider.
    pub upstream_latency: HistogramVec,
    /// Upstream failures by provider and kind.
    pub upstream_errors: IntCounterVec,
    /// Released answers by contract, question and view.
    pub released_answers: IntCounterVec,
    /// Rejected upstream answers by contract and reason.
    pub rejected_answers: IntCounterVec,
}

/// Errors building metrics (only on programming mistakes such as duplicate names).
pub type Error = prometheus::Error;

// === impl Metrics ===

impl Metrics {
    /// Registers every metric on a fresh registry.
    pub fn new() -> Result<Metrics, Error> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "releasegate_requests_total",
                "Requests by release contract and status class",
            ),
            &["contract", "status_class"],
        )?;
        let upstream_latency = HistogramVec::new(
            HistogramOpts::new(
                "releasegate_upstream_latency_seconds",
                "Upstream request latency by provider",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0,
            ]),
            &["provider"],
        )?;
        let upstream_errors = IntCounterVec::new(
            Opts::new(
                "releasegate_upstream_errors_total",
                "Upstream failures by provider and kind",
            ),
            &["provider", "kind"],
        )?;
        let released_answers = IntCounterVec::new(
            Opts::new(
                "releasegate_released_answers_total",
                "Released answers by contract, question and view",
            ),
            &["contract", "question", "view"],
        )?;
        let rejected_answers = IntCounterVec::new(
            Opts::new(
                "releasegate_rejected_upstream_answers_total",
                "Upstream answers rejected as invalid, by contract and reason",
            ),
            &["contract", "reason"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(upstream_latency.clone()))?;
        registry.register(Box::new(upstream_errors.clone()))?;
        registry.register(Box::new(released_answers.clone()))?;
        registry.register(Box::new(rejected_answers.clone()))?;
        Ok(Metrics {
            registry,
            requests,
            upstream_latency,
            upstream_errors,
            released_answers,
            rejected_answers,
        })
    }

    /// The registry (for registering further collectors).
    pub fn registry(&self) -> &Registry {
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

/// The status class label of an HTTP status.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}
