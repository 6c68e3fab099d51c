//! Request handlers.

use std::time::{Instant, SystemTime};

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use super::error::Error;
use super::middleware::{Ids, RequestId, request_span};
use super::trace::{SpanIds, TraceId};
use super::{AppState, Live, body};
use std::sync::Arc;

use crate::otel;
use crate::upstream::{self, Reply};
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use releasegate_core::config::Provider;
use releasegate_core::contract::{Contract, ForwardHeader};
use releasegate_core::release;
use releasegate_core::rng::Rng;
use releasegate_core::wire;
use releasegate_core::wire::provider::ProviderError;

// The handlers take the whole request and split it: axum's `HeaderMap`
// extractor would clone every header.

/// `POST /v1/systemone`.
pub(super) async fn systemone(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let id = request_id(&state, &parts);
    serve_systemone(state, id, None, parts.headers, body).await
}

/// `POST /contracts/{contract}/v1/systemone`: the contract chosen by the path.
pub(super) async fn systemone_for(
    State(state): State<AppState>,
    contract: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let id = request_id(&state, &parts);
    match contract {
        Ok(Path(contract)) => serve_systemone(state, id, Some(contract), parts.headers, body).await,
        Err(_) => Error::NotFound.into_response(),
    }
}

/// `GET /v1/models`.
pub(super) async fn models(State(state): State<AppState>, request: Request) -> Response {
    let (parts, _body) = request.into_parts();
    let id = request_id(&state, &parts);
    serve_models(state, id, None, parts.headers).await
}

/// `GET /contracts/{contract}/v1/models`: the contract chosen by the path.
pub(super) async fn models_for(
    State(state): State<AppState>,
    contract: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, _body) = request.into_parts();
    let id = request_id(&state, &parts);
    match contract {
        Ok(Path(contract)) => serve_models(state, id, Some(contract), parts.headers).await,
        Err(_) => Error::NotFound.into_response(),
    }
}

/// The request id, trace id and span ids the router's middleware gave the request.
fn request_id(state: &AppState, parts: &axum::http::request::Parts) -> RequestIds {
    match parts.extensions.get::<Ids>() {
        Some(ids) => (ids.request_id.clone(), Some(ids.trace_id), Some(ids.spans)),
        None => (state.next_request_id(), None, None),
    }
}

/// A request's ids: its request id, trace id and span ids.
type RequestIds = (RequestId, Option<TraceId>, Option<SpanIds>);

async fn serve_systemone(
    state: AppState,
    (id, trace_id, spans): RequestIds,
    path_contract: Option<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let mut trail = Trail::new(&state, trace_id, spans);
    let selection = Selection::new(&headers, path_contract.as_deref());
    let result = answer(&state, selection, body, &mut trail).await;
    let body_read = trail.body_read;
    let mut response = finish(&state, "systemone", id, trail, started, result);
    if !body_read {
        // Refused before the body was read (authentication, rate limit, a declared length
        // over the cap, a body cut short): the connection cannot serve another request, and
        // saying so keeps a client from sending its next request on it.
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

async fn serve_models(
    state: AppState,
    (id, trace_id, spans): RequestIds,
    path_contract: Option<String>,
    headers: HeaderMap,
) -> Response {
    let started = Instant::now();
    let mut trail = Trail::new(&state, trace_id, spans);
    let selection = Selection::new(&headers, path_contract.as_deref());
    let result = list_models(&state, selection, &mut trail)
        .await
        .map(|models| wire::json::write::to_vec(&models));
    finish(&state, "models", id, trail, started, result)
}

/// Unknown public routes.
pub(super) async fn not_found() -> Response {
    Error::NotFound.into_response()
}

/// Known public routes called with another method (axum adds `Allow`).
pub(super) async fn method_not_allowed() -> Response {
    Error::MethodNotAllowed.into_response()
}

/// `GET /metrics` on the admin listener.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)],
        state.metrics().render(),
    )
        .into_response()
}

/// `GET /healthz`: the process is alive.
pub(super) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: serving and not shutting down.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    if state.inner.ready.load(std::sync::atomic::Ordering::SeqCst) {
        (StatusCode::OK, "ready").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
    }
}

/// What selects a request's contract: its headers and the optional path prefix.
#[derive(Clone, Copy)]
struct Selection<'r> {
    headers: &'r HeaderMap,
    path_contract: Option<&'r str>,
}

impl<'r> Selection<'r> {
    fn new(headers: &'r HeaderMap, path_contract: Option<&'r str>) -> Selection<'r> {
        Selection {
            headers,
            path_contract,
        }
    }
}

/// What a request learned on its way (for metrics, logs and the decision log).
#[derive(Default)]
struct Trail {
    /// The authenticated recipient's name.
    recipient: Option<String>,
    /// The selected contract.
    contract: Option<Arc<Contract>>,
    /// What happened to each released answer.
    answers: Vec<release::AnswerRecord>,
    /// The request's W3C trace id (for its log lines).
    trace_id: Option<TraceId>,
    /// Whether the request body was read to its end.
    body_read: bool,
    /// A sampled request's world for the contract's live capture, once its answer is released.
    capture: Option<crate::capture::Pending>,
    /// With span export on: the request's span ids, its SERVER span's id and start.
    spans: Option<(SpanIds, [u8; 8], SystemTime)>,
}

impl Trail {
    /// A request's trail before anything is known but its trace ids.
    fn new(state: &AppState, trace_id: Option<TraceId>, spans: Option<SpanIds>) -> Trail {
        let spans = spans
            .filter(|_| state.otel().is_some())
            .map(|spans| (spans, super::trace::new_span_id(), SystemTime::now()));
        Trail {
            trace_id,
            spans,
            ..Trail::default()
        }
    }

    /// The start of a child span: the clock is read only when spans are exported.
    fn clock(&self) -> Option<SystemTime> {
        self.spans.map(|_| SystemTime::now())
    }

    /// Exports a finished child span of the request's SERVER span (with export on);
    /// its attributes are built only then.
    fn child(
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
    fn upstream_span_id(&self) -> [u8; 8] {
        self.spans.map_or([0; 8], |(spans, _, _)| spans.upstream)
    }
}

/// The request's SERVER span, once its status is known (with export on).
fn export_server_span(
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
        name: if route == "models" {
            "GET /v1/models"
        } else {
            "POST /v1/systemone"
        },
        start: *start,
        end: SystemTime::now(),
        attributes,
        error: status >= 500,
    });
}

/// A JSON body (written by the core's JSON writer, serde_json's output byte for byte)
/// as its response.
fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, upstream::APPLICATION_JSON)], body).into_response()
}

fn finish(
    state: &AppState,
    route: &'static str,
    request_id: RequestId,
    trail: Trail,
    started: Instant,
    result: Result<Vec<u8>, Error>,
) -> Response {
    let contract_label = trail.contract.as_ref().map_or("none", |c| c.name());
    if let (Err(Error::RateLimited(_)), Some(recipient)) = (&result, &trail.recipient) {
        state
            .metrics()
            .rate_limited
            .with_label_values(&[recipient.as_str()])
            .inc();
    }
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
        Err(error) => {
            if let Error::UpstreamAuth { status } = &error {
                // The provider refused the proxy's own key: an operator must act, callers cannot.
                let provider = trail.contract.as_ref().map_or("none", |c| c.provider());
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
    };
    let status = response.status().as_u16();
    export_server_span(state, route, &request_id, &trail, status, outcome);
    let latency = started.elapsed();
    state.metrics().record_request(
        &state.inner.live.load().request_series,
        contract_label,
        route,
        status,
        latency.as_secs_f64(),
    );
    if access_log {
        crate::telemetry::access(&crate::telemetry::Access {
            request_id: &request_id,
            trace_id: trail
                .trace_id
                .as_ref()
                .map(|id| id as &dyn std::fmt::Display),
            recipient: trail.recipient.as_deref(),
            route,
            contract: contract_label,
            status,
            latency_ms: latency.as_secs_f64() * 1e3,
        });
    }
    // Only a released answer is captured, after the response is built: nothing of the
    // capture changes what the recipient gets.
    if let (Some(pending), Some(contract), true) =
        (trail.capture, &trail.contract, (200..300).contains(&status))
        && let Some(capture) = state.capture(contract.name())
    {
        capture.offer(request_id.to_string(), pending);
    }
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
        });
    }
    // The request id headers are stamped by the router's middleware.
    response
}

async fn select_contract<'l>(
    live: &'l Live,
    selection: Selection<'_>,
    trail: &mut Trail,
) -> Result<&'l std::sync::Arc<Contract>, Error> {
    let caller = live
        .keys
        .authenticate(selection.headers, selection.path_contract)?;
    let contract = live
        .config
        .contract(&caller.contract)
        .ok_or(Error::Internal)?;
    let limited = live.limits.check(&caller.recipient).await;
    trail.recipient = Some(caller.recipient);
    trail.contract = Some(contract.clone());
    // After authentication, before the body is read.
    limited.map_err(Error::RateLimited)?;
    Ok(contract)
}

async fn answer(
    state: &AppState,
    selection: Selection<'_>,
    body: Body,
    trail: &mut Trail,
) -> Result<Vec<u8>, Error> {
    let headers = selection.headers;
    let live = state.live();
    let contract = select_contract(&live, selection, trail).await?;
    let server = &state.inner.server;
    let received = body::read(headers, body, server).await?;
    trail.body_read = true;
    let (bytes, parts) = match received {
        body::Received::Json(bytes) => (bytes, Default::default()),
        body::Received::Multipart { bytes, boundary } => {
            let parts = super::multipart::parse(bytes, &boundary, server).await?;
            (parts.request, parts.others)
        }
    };
    // Like the real API (FastAPI), a body that is not JSON is a 422 `json_invalid`.
    let request = wire::Json::parse(&bytes).map_err(|error| {
        let reason = error.to_string();
        // serde_json appends " at line L column C"; the location goes into `loc`.
        let reason = reason.split(" at line ").next().unwrap_or("invalid JSON");
        wire::RequestError::Schema(vec![wire::json_invalid(
            &bytes,
            error.line(),
            error.column(),
            reason,
        )])
    })?;
    let mut asked = wire::check_json(&request, contract)?;
    drop(request);
    // Images: checked against the parts and rebuilt (inline ones re-encoded, parts
    // renamed `asset-N`); a request with part images goes upstream as multipart.
    let part_refs: std::collections::BTreeMap<String, wire::assets::Part<'_>> = parts
        .iter()
        .map(|(name, (content_type, bytes))| {
            (
                name.clone(),
                wire::assets::Part {
                    content_type: content_type.as_deref(),
                    bytes,
                },
            )
        })
        .collect();
    let checked = wire::assets::check(asked.assets(), &part_refs, server.asset_limits())?;
    asked.set_assets(checked.assets);
    // Never the caller's bytes: the contract's questions, the caller's content.
    let json = Bytes::from(asked.upstream_bytes());
    // Sampled for the live capture: keep the JSON request (a world's request; images are
    // not captured) and the answer (reference counts, no copies).
    let captured = state
        .capture(contract.name())
        .filter(|capture| capture.sample())
        .map(|_| json.clone());
    let (content_type, forward) = if checked.images.is_empty() {
        (upstream::APPLICATION_JSON, json.clone())
    } else {
        let (content_type, body) = super::multipart::build(&json, &checked.images)?;
        (
            header::HeaderValue::from_str(&content_type).map_err(|_| Error::Internal)?,
            body,
        )
    };
    drop(part_refs);
    let called = trail.clock();
    // The contract's `forward_headers` the caller switched on (`true`), counted by name.
    let switches: Vec<ForwardHeader> = contract
        .forward_headers()
        .iter()
        .copied()
        .filter(|switch| {
            headers
                .get(switch.lower())
                .is_some_and(|value| ForwardHeader::is_on(value.as_bytes()))
        })
        .collect();
    for switch in &switches {
        state
            .metrics()
            .forwarded_headers
            .with_label_values(&[contract.name(), switch.lower()])
            .inc();
    }
    let post = upstream::Post {
        body: &forward,
        content_type: &content_type,
        json: &json,
        sent: Some(&asked),
        headers,
        switches: &switches,
    };
    let reply = live
        .upstreams
        .systemone(contract.provider(), post)
        .await
        .map_err(|error| upstream_error(&live, contract, error));
    upstream_span(state, trail, contract, "upstream systemone", called, &reply);
    let reply = reply?;
    let captured = match (captured, &reply) {
        (Some(request), Reply::Success(response)) => Some(crate::capture::Pending {
            request,
            response: response.clone(),
        }),
        _ => None,
    };
    let native = success_body(reply)?;
    let releasing = trail.clock();
    let released = release_off_thread(contract, asked, native).await?;
    trail.child(
        state,
        (SpanKind::Internal, "release", super::trace::new_span_id()),
        releasing,
        || {
            vec![
                KeyValue::new("releasegate.contract", contract.name().to_string()),
                KeyValue::new(
                    "releasegate.outcome",
                    if released.is_ok() {
                        "released"
                    } else {
                        "rejected"
                    },
                ),
                KeyValue::new(
                    "releasegate.answers",
                    released.as_ref().map_or(0, |r| r.answers.len() as i64),
                ),
            ]
        },
        released.is_err(),
    );
    let released = released.map_err(|reason| reject(state, contract, reason))?;
    record_released(state, &live, contract, &released.answers);
    trail.answers = released.answers;
    trail.capture = captured;
    Ok(released.body)
}

/// A released body as the bytes that go out, and what happened to each answer.
struct Sent {
    body: Vec<u8>,
    answers: Vec<release::AnswerRecord>,
}

/// Runs the pure release path on the provider's answer (`native`, read as a borrowed
/// [`wire::Json`]: no `Value` is built for it); contracts whose mechanisms scan
/// codebooks per request run on the blocking pool so they never stall the async workers.
async fn release_off_thread(
    contract: &Arc<Contract>,
    asked: wire::Asked,
    native: Bytes,
) -> Result<Result<Sent, wire::Invalid>, Error> {
    let seed = if contract.needs_fresh_randomness() {
        releasegate_core::rng::os_seed().map_err(|_| Error::Internal)?
    } else {
        0
    };
    let run = {
        let contract = contract.clone();
        move || {
            let mut rng = Rng::new(seed);
            let mut options = release::Options {
                rng: &mut rng,
                evaluate: false,
            };
            let native = wire::Json::parse(&native).map_err(|_| wire::Invalid::NotJson)?;
            release::release(&contract, &asked, &native, &mut options).map(|released| Sent {
                body: released.to_bytes(),
                answers: released.answers,
            })
        }
    };
    if contract.is_heavy() {
        tokio::task::spawn_blocking(run)
            .await
            .map_err(|_| Error::Internal)
    } else {
        Ok(run())
    }
}

fn record_released(
    state: &AppState,
    live: &Live,
    contract: &Contract,
    answers: &[release::AnswerRecord],
) {
    for record in answers {
        state
            .metrics()
            .record_answer(&live.answer_series, contract.name(), record);
    }
}

async fn list_models(
    state: &AppState,
    selection: Selection<'_>,
    trail: &mut Trail,
) -> Result<Value, Error> {
    let live = state.live();
    let contract = select_contract(&live, selection, trail).await?;
    let called = trail.clock();
    let reply = live
        .upstreams
        .models(contract.provider())
        .await
        .map_err(|error| upstream_error(&live, contract, error));
    upstream_span(state, trail, contract, "upstream models", called, &reply);
    let reply = reply?;
    let native = success_json(state, contract, reply)?;
    let entries = native
        .get("models")
        .and_then(Value::as_array)
        .ok_or_else(|| reject(state, contract, wire::Invalid::MissingField))?;
    // Re-emit only what the proxy can vouch for: a plain model id, a real calendar date
    // and the proxy's own description (the provider's free text never goes out). An entry
    // failing either check is dropped and counted; with a pinned model only its entry shows.
    let mut names = std::collections::BTreeSet::new();
    let mut models = Vec::new();
    for entry in entries {
        let field = |key: &str| entry.get(key).and_then(Value::as_str);
        let (Some(name), Some(release_date), Some(_)) =
            (field("name"), field("release_date"), field("description"))
        else {
            count_rejected(state, contract, wire::Invalid::BadModelEntry);
            continue;
        };
        if !wire::is_model_id(name) || !wire::is_calendar_date(release_date) {
            count_rejected(state, contract, wire::Invalid::BadModelEntry);
            continue;
        }
        let shown = contract.model().is_none_or(|pinned| pinned == name);
        if shown && names.insert(name) {
            models.push(json!({"name": name, "description": MODEL_DESCRIPTION, "release_date": release_date}));
        }
    }
    Ok(json!({"models": models}))
}

/// A shed request (the provider's slots stayed busy) tells the client when to
/// come back: the provider's queue timeout rounded up to whole seconds, at
/// least 1, the time in which a slot would have had to free up.
/// The CLIENT span of an upstream call (with export on).
fn upstream_span(
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

fn upstream_error(live: &Live, contract: &Contract, error: upstream::Error) -> Error {
    match error {
        upstream::Error::Saturated => {
            let queue_timeout = match live.config.providers().get(contract.provider()) {
                Some(Provider::SystemOne(remote)) => remote.queue_timeout(),
                _ => std::time::Duration::ZERO,
            };
            Error::Saturated(retry_after_seconds(queue_timeout))
        }
        other => Error::Upstream(other),
    }
}

/// `retry-after` of a shed request: the queue timeout in whole seconds, rounded up, at least 1.
fn retry_after_seconds(queue_timeout: std::time::Duration) -> u64 {
    let millis = u64::try_from(queue_timeout.as_millis()).unwrap_or(u64::MAX);
    millis.div_ceil(1000).max(1)
}

/// The description every listed model gets: the provider's own is free text, a channel
/// from the provider to recipients, and is never released.
pub(super) const MODEL_DESCRIPTION: &str =
    "A System One decision model, served through releasegate.";

fn success_json(state: &AppState, contract: &Contract, reply: Reply) -> Result<Value, Error> {
    let bytes = success_body(reply)?;
    serde_json::from_slice(&bytes).map_err(|_| reject(state, contract, wire::Invalid::NotJson))
}

/// A 2xx answer's body; any other status becomes the error the client gets.
fn success_body(reply: Reply) -> Result<Bytes, Error> {
    match reply {
        // The provider refused the proxy's own key (counted in `upstream`, logged in `finish`).
        Reply::Status {
            status: status @ (401 | 403),
            ..
        } => Err(Error::UpstreamAuth { status }),
        Reply::Status {
            status,
            problem: Some(ProviderError::Kind(kind)),
            ..
        } => Err(Error::ProviderKind { status, kind }),
        Reply::Status {
            problem: Some(ProviderError::Validation(issues)),
            ..
        } => Err(Error::Request(wire::RequestError::Schema(issues))),
        Reply::Status {
            status,
            retry_after,
            retry_after_ms,
            problem: None,
        } => Err(Error::UpstreamStatus {
            status,
            retry_after,
            retry_after_ms,
        }),
        Reply::Success(bytes) => Ok(bytes),
    }
}

fn reject(state: &AppState, contract: &Contract, reason: wire::Invalid) -> Error {
    count_rejected(state, contract, reason);
    Error::InvalidAnswer(reason)
}

fn count_rejected(state: &AppState, contract: &Contract, reason: wire::Invalid) {
    state
        .metrics()
        .rejected_answers
        .with_label_values(&[contract.name(), &reason.to_string()])
        .inc();
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::retry_after_seconds;

    #[test]
    fn shed_requests_retry_after_the_queue_timeout_in_whole_seconds() {
        let cases = [(0, 1), (1, 1), (100, 1), (1000, 1), (1001, 2), (2500, 3)];
        for (millis, seconds) in cases {
            assert_eq!(retry_after_seconds(Duration::from_millis(millis)), seconds);
        }
    }
}
