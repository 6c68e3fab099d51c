//! Span export over OTLP/HTTP (`[tracing] otlp_endpoint`; off by default).
//!
//! The proxy records its own spans, with the ids it already uses for the W3C trace context:
//! per System One or models request a SERVER span (the caller's span as parent when its
//! `traceparent` was accepted), a CLIENT span per upstream call whose span id is the parent
//! id the provider receives in `traceparent` (so the provider's spans hang under it), and an
//! INTERNAL span for the release. Finished spans go to the OpenTelemetry SDK's batch
//! processor (a thread of its own with a bounded queue: a full queue drops spans, never
//! waits) and its OTLP exporter (protobuf over HTTP, a blocking client on that thread).
//!
//! Attributes are ids, configuration names (recipient, contract, provider) and enum labels
//! (status, outcome, error type): never request content, answer values or provider text.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};

use releasegate_core::config::Tracing;

/// How long shutdown waits for the last spans to be exported.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The ids of one span.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ids {
    /// The request's W3C trace id.
    pub(crate) trace_id: [u8; 16],
    /// This span's id.
    pub(crate) span_id: [u8; 8],
    /// Its parent's id, and whether that parent is remote (the caller's).
    pub(crate) parent: Option<([u8; 8], bool)>,
}

/// One finished span.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) ids: Ids,
    pub(crate) kind: SpanKind,
    pub(crate) name: &'static str,
    pub(crate) start: SystemTime,
    pub(crate) end: SystemTime,
    pub(crate) attributes: Vec<KeyValue>,
    /// Whether it ended in an error (the span's status).
    pub(crate) error: bool,
}

/// The running exporter.
pub(crate) struct Exporter {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

impl Exporter {
    /// Starts the batch processor and the exporter to `{otlp_endpoint}/v1/traces`.
    pub(crate) fn start(settings: &Tracing) -> Result<Exporter, String> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", settings.otlp_endpoint()))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|error| error.to_string())?;
        let mut processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(8192)
                    .with_scheduled_delay(Duration::from_secs(2))
                    .build(),
            )
            .build();
        processor.set_resource(
            &Resource::builder_empty()
                .with_service_name(settings.service_name().to_string())
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        Ok(Exporter {
            processor,
            scope: InstrumentationScope::builder("releasegate")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        })
    }

    /// Queues `span` for export (never waits: a full queue drops it).
    pub(crate) fn record(&self, span: Finished) {
        let trace_id = TraceId::from_bytes(span.ids.trace_id);
        let (parent_span_id, parent_span_is_remote) = span
            .ids
            .parent
            .map_or((SpanId::INVALID, false), |(id, remote)| {
                (SpanId::from_bytes(id), remote)
            });
        self.processor.on_end(SpanData {
            span_context: SpanContext::new(
                trace_id,
                SpanId::from_bytes(span.ids.span_id),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id,
            parent_span_is_remote,
            span_kind: span.kind,
            name: Cow::Borrowed(span.name),
            start_time: span.start,
            end_time: span.end.max(span.start),
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: if span.error {
                Status::error("")
            } else {
                Status::Unset
            },
            instrumentation_scope: self.scope.clone(),
        });
    }

    /// Exports what is queued and stops (blocking: call it off the event loops).
    pub(crate) fn shutdown(&self) {
        if let Err(error) = self.processor.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
            tracing::warn!(%error, "the trace exporter did not shut down cleanly");
        }
    }
}
