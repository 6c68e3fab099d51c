//! What a public request learned on its way (`Trail`), and the spans it exports: its
//! SERVER span, the CLIENT span of its upstream call and its other child spans.

use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use releasegate_core::contract::Contract;
use releasegate_core::release;

use crate::otel;
use crate::server::AppState;
use crate::server::error::Error;
use crate::server::middleware::RequestId;
use crate::server::trace::{SpanIds, TraceId};
use crate::upstream::Reply;

/// What a request learned on its way (for metrics, logs and the decision log).
#[derive(Default)]
pub(super) struct Trail {
    /// The authenticated recipient's name.
    pub(super) recipient: Option<String>,
    /// The selected contract.
    pub(super) contract: Option<Arc<Contract>>,
    /// What happened to each released answer.
    pub(super) answers: Vec<release::AnswerRecord>,
    /// The provider that answered (or gave the error), when not the contract's first (after
    /// a failover).
    pub(super) provider: Option<String>,
    /// The answer cache's part (`hit`, `miss`, `bypass`), when the contract has a cache.
    pub(super) cache: Option<&'static str>,
    /// How long the request waited in its providers' calls, every attempt together
    /// (`releasegate_overhead_seconds` is the rest of its time).
    pub(super) upstream_wait: std::time::Duration,
    /// The request's W3C trace id (for its log lines).
    pub(super) trace_id: Option<TraceId>,
    /// Whether the request body was read to its end.
    pub(super) body_read: bool,
    /// A sampled request's world for the contract's live capture, once its answer is released.
    pub(super) capture: Option<crate::capture::Pending>,
    /// The request's place in its recipient's `max_in_flight`, held to the end of the
    /// response.
    pub(super) in_flight: Option<crate::ratelimit::Slot>,
    /// With span export on: the request's span ids, its SERVER span's id and start.
    pub(super) spans: Option<(SpanIds, [u8; 8], SystemTime)>,
}

impl Trail {
    /// A request's trail before anything is known but its trace ids.
    pub(super) fn new(
        state: &AppState,
        trace_id: Option<TraceId>,
        spans: Option<SpanIds>,
    ) -> Trail {
        let spans = spans.filter(|_| state.otel().is_some()).map(|spans| {
            (
                spans,
                crate::server::trace::new_span_id(),
                SystemTime::now(),
            )
        });
        Trail {
            trace_id,
            spans,
            ..Trail::default()
        }
    }

    /// The start of a child span: the clock is read only when spans are exported.
    pub(super) fn clock(&self) -> Option<SystemTime> {
        self.spans.map(|_| SystemTime::now())
    }

    /// Exports a finished child span of the request's SERVER span (with export on);
    /// its attributes are built only then.
    pub(super) fn child(
        &self,
        state: &AppState,
        (kind, name, span_id): (SpanKind, &'static str, [u8; 8]),
        start: Option<SystemTime>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
        error: bool,
    ) {
        if let (Some(exporter), Some((spans, server, _)), Some(start)) =
            (state.otel(), &self.spans, start)
        {
            exporter.record(otel::Finished {
                ids: otel::Ids {
                    trace_id: spans.trace_id,
                    span_id,
                    parent: Some((*server, false)),
                },
                kind,
                name,
                start,
                end: SystemTime::now(),
                attributes: attributes(),
                error,
            });
        }
    }

    /// The span id of the upstream call's CLIENT span: the parent id the provider receives.
    pub(super) fn upstream_span_id(&self) -> [u8; 8] {
        self.spans.map_or([0; 8], |(spans, _, _)| spans.upstream)
    }
}

/// The request's SERVER span, once its status is known (with export on).
pub(super) fn export_server_span(
    state: &AppState,
    route: &'static str,
    request_id: &RequestId,
    trail: &Trail,
    status: u16,
    outcome: &'static str,
) {
    let (Some(exporter), Some((spans, server, start))) = (state.otel(), &trail.spans) else {
        return;
    };
    let mut attributes = vec![
        KeyValue::new("releasegate.request_id", request_id.to_string()),
        KeyValue::new("releasegate.route", route),
        KeyValue::new("http.response.status_code", i64::from(status)),
        KeyValue::new("releasegate.outcome", outcome),
    ];
    if let Some(recipient) = &trail.recipient {
        attributes.push(KeyValue::new("releasegate.recipient", recipient.clone()));
    }
    if let Some(contract) = &trail.contract {
        attributes.push(KeyValue::new(
            "releasegate.contract",
            contract.name().to_string(),
        ));
    }
    exporter.record(otel::Finished {
        ids: otel::Ids {
            trace_id: spans.trace_id,
            span_id: *server,
            parent: spans.caller.map(|caller| (caller, true)),
        },
        kind: SpanKind::Server,
        name: match route {
            "models" => "GET /v1/models",
            "questions" => "GET /v1/questions",
            _ => "POST /v1/systemone",
        },
        start: *start,
        end: SystemTime::now(),
        attributes,
        error: status >= 500,
    });
}

/// The CLIENT span of an upstream call (with export on).
pub(super) fn upstream_span(
    state: &AppState,
    trail: &Trail,
    contract: &Contract,
    name: &'static str,
    start: Option<SystemTime>,
    reply: &Result<Reply, Error>,
) {
    let outcome = match reply {
        Ok(_) => "ok",
        Err(error) => error.error_type(),
    };
    trail.child(
        state,
        (SpanKind::Client, name, trail.upstream_span_id()),
        start,
        || {
            vec![
                KeyValue::new("releasegate.provider", contract.provider().to_string()),
                KeyValue::new("releasegate.contract", contract.name().to_string()),
                KeyValue::new("releasegate.outcome", outcome),
            ]
        },
        reply.is_err(),
    );
}
