//! The end of every public request: its response, the failure's log lines, the request
//! metrics, the SERVER span, the access line, the live capture and the decision log.

use std::time::Duration;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use releasegate_core::timing::{self, Instant};

use super::trail::{Trail, export_server_span};
use crate::server::AppState;
use crate::server::error::Error;
use crate::server::middleware::{RequestId, request_span};
use crate::upstream;

/// A JSON body (written by the core's JSON writer, serde_json's output byte for byte)
/// as its response.
fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, upstream::APPLICATION_JSON)], body).into_response()
}

/// Ends a public request with `result`: its response, and everything recorded of it.
pub(super) fn finish(
    state: &AppState,
    route: &'static str,
    request_id: RequestId,
    mut trail: Trail,
    started: Instant,
    result: Result<Vec<u8>, Error>,
) -> Response {
    let contract_label = trail.contract.as_ref().map_or("none", |c| c.name());
    count_refused(state, &trail, &result);
    let in_flight = trail.in_flight.take();
    let access_log = state.inner.server.access_log();
    // A failure's lines go out in the request's span (see `request_span`); the access line
    // carries the same ids as its own fields, without the cost of a span per request.
    let span = result.is_err().then(|| {
        request_span(
            &request_id,
            trail.trace_id,
            trail.recipient.as_deref(),
            trail.contract.as_ref().map(|c| c.name()),
        )
    });
    let _entered = span.as_ref().map(tracing::Span::enter);
    let outcome = match &result {
        Ok(_) => "ok",
        Err(error) => error.error_type(),
    };
    let response = match result {
        Ok(body) => json_response(body),
        Err(error) => failure_response(&request_id, route, &trail, error),
    };
    let status = response.status().as_u16();
    export_server_span(state, route, &request_id, &trail, status, outcome);
    let latency = timing::since(started);
    let live = state.inner.live.load();
    if route == "systemone"
        && let Some(contract) = &trail.contract
    {
        state.metrics().record_overhead(
            &live.request_series,
            contract.name(),
            latency.saturating_sub(trail.upstream_wait).as_secs_f64(),
        );
    }
    state.metrics().record_request(
        &live.request_series,
        contract_label,
        route,
        status,
        latency.as_secs_f64(),
    );
    if access_log {
        log_access(&request_id, &trail, route, status, latency);
    }
    offer_capture(state, &request_id, &mut trail, status);
    record_decision(state, &request_id, route, trail, status, latency);
    // The request id headers are stamped by the router's middleware.
    match in_flight {
        None => response,
        // The recipient's request stays counted until its body is sent.
        Some(slot) => response.map(|body| axum::body::Body::new(Counted { body, _slot: slot })),
    }
}

/// Counts a request refused by its recipient's rate limit or `max_in_flight`.
fn count_refused(state: &AppState, trail: &Trail, result: &Result<Vec<u8>, Error>) {
    let metrics = state.metrics();
    match (result, &trail.recipient) {
        (Err(Error::RateLimited(_)), Some(recipient)) => {
            metrics
                .rate_limited
                .with_label_values(&[recipient.as_str()])
                .inc();
        }
        (Err(Error::InFlight), Some(recipient)) => {
            metrics
                .in_flight_limited
                .with_label_values(&[recipient.as_str()])
                .inc();
            state
                .inner
                .budget
                .count(crate::server::Shed::RecipientInFlight);
        }
        _ => {}
    }
}

/// A response body that holds its request's place in the recipient's `max_in_flight`
/// until it is sent (or dropped).
struct Counted {
    body: axum::body::Body,
    _slot: crate::ratelimit::Slot,
}

impl hyper::body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A failed request's response, its failure logged.
fn failure_response(
    request_id: &RequestId,
    route: &'static str,
    trail: &Trail,
    error: Error,
) -> Response {
    let contract_label = trail.contract.as_ref().map_or("none", |c| c.name());
    if let Error::UpstreamAuth { status } = &error {
        // The provider refused the proxy's own key: an operator must act, callers cannot.
        let provider = trail
            .provider
            .as_deref()
            .unwrap_or_else(|| trail.contract.as_ref().map_or("none", |c| c.provider()));
        tracing::error!(
            provider,
            status,
            "the provider refused the proxy's credentials; check the key named by api_key_env"
        );
    }
    tracing::warn!(
        %request_id, route, contract = contract_label,
        error_type = error.error_type(), error = %error.chain(), "request failed"
    );
    error.into_response()
}

/// The request's access line.
fn log_access(
    request_id: &RequestId,
    trail: &Trail,
    route: &'static str,
    status: u16,
    latency: Duration,
) {
    let trace_hex = trail
        .trace_id
        .as_ref()
        .map(super::super::trace::TraceId::hex);
    crate::telemetry::access(&crate::telemetry::Access {
        request_id: request_id.as_str(),
        trace_id: trace_hex
            .as_ref()
            .and_then(|hex| std::str::from_utf8(hex).ok()),
        recipient: trail.recipient.as_deref(),
        route,
        contract: trail.contract.as_ref().map_or("none", |c| c.name()),
        status,
        latency_ms: crate::telemetry::latency_ms(latency),
    });
}

/// Offers a sampled request's released answer to its contract's live capture. Only a
/// released answer is captured, after the response is built: nothing of the capture
/// changes what the recipient gets.
fn offer_capture(state: &AppState, request_id: &RequestId, trail: &mut Trail, status: u16) {
    if let (Some(pending), Some(contract), true) = (
        trail.capture.take(),
        &trail.contract,
        (200..300).contains(&status),
    ) && let Some(capture) = state.capture(contract.name())
    {
        capture.offer(request_id.to_string(), pending);
    }
}

/// The request's line in the decision log, when the server keeps one.
fn record_decision(
    state: &AppState,
    request_id: &RequestId,
    route: &'static str,
    trail: Trail,
    status: u16,
    latency: Duration,
) {
    if let Some(log) = state.inner.decisions.get() {
        log.record(crate::decisions::Record {
            time: std::time::SystemTime::now(),
            request_id: request_id.to_string(),
            route,
            recipient: trail.recipient,
            contract: trail.contract,
            status,
            latency,
            answers: trail.answers,
            provider: trail.provider,
            cache: trail.cache,
        });
    }
}
