//! Request handlers.

use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use super::error::Error;
use super::{AppState, REQUEST_ID_HEADER, body};
use std::sync::Arc;

use crate::contract::Contract;
use crate::mechanism;
use crate::metrics::status_class;
use crate::rng::Rng;
use crate::upstream::Reply;
use crate::{release, wire};

/// `POST /v1/systemone`.
pub(super) async fn systemone(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let started = Instant::now();
    let request_id = state.next_request_id();
    let mut contract_label: Option<String> = None;
    let result = answer(&state, &headers, body, &mut contract_label).await;
    finish(
        &state,
        "systemone",
        request_id,
        contract_label,
        started,
        result,
    )
}

/// `GET /v1/models`.
pub(super) async fn models(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let started = Instant::now();
    let request_id = state.next_request_id();
    let mut contract_label: Option<String> = None;
    let result = list_models(&state, &headers, &mut contract_label).await;
    finish(
        &state,
        "models",
        request_id,
        contract_label,
        started,
        result,
    )
}

/// Unknown public routes.
pub(super) async fn not_found() -> Response {
    let body = json!({"detail": {"error_type": "not_found", "message": "no such endpoint"}});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
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

fn finish(
    state: &AppState,
    route: &'static str,
    request_id: String,
    contract: Option<String>,
    started: Instant,
    result: Result<Value, Error>,
) -> Response {
    let contract_label = contract.as_deref().unwrap_or("none");
    let mut response = match result {
        Ok(body) => Json(body).into_response(),
        Err(error) => {
            tracing::warn!(
                %request_id, route, contract = contract_label,
                error_type = error.error_type(), error = %error.chain(), "request failed"
            );
            error.into_response()
        }
    };
    let status = response.status().as_u16();
    state
        .metrics()
        .requests
        .with_label_values(&[contract_label, status_class(status)])
        .inc();
    state
        .metrics()
        .request_duration
        .with_label_values(&[contract_label, route, status_class(status)])
        .observe(started.elapsed().as_secs_f64());
    tracing::info!(
        %request_id, route, contract = contract_label, status,
        latency_ms = started.elapsed().as_secs_f64() * 1e3, "request"
    );
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

fn select_contract<'s>(
    state: &'s AppState,
    headers: &HeaderMap,
    label: &mut Option<String>,
) -> Result<&'s std::sync::Arc<Contract>, Error> {
    let caller = state.inner.keys.authenticate(headers)?;
    let contract = state
        .inner
        .config
        .contract(&caller.contract)
        .ok_or(Error::Internal)?;
    *label = Some(contract.name.clone());
    Ok(contract)
}

async fn answer(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    label: &mut Option<String>,
) -> Result<Value, Error> {
    let contract = select_contract(state, headers, label)?;
    let bytes = body::read(headers, body, state.inner.config.server.max_body_bytes).await?;
    let mut request: Value = serde_json::from_slice(&bytes)
        .map_err(|error| Error::BadBody(format!("the request body is not valid JSON ({error})")))?;
    let asked = wire::check_request(&request, contract)?;
    let forward = match &contract.model {
        Some(model) => {
            request["model"] = Value::String(model.clone());
            Bytes::from(serde_json::to_vec(&request).map_err(|_| Error::Internal)?)
        }
        None => bytes,
    };
    let reply = state
        .inner
        .upstreams
        .systemone(&contract.provider, forward, headers)
        .await?;
    let native = success_json(state, contract, reply)?;
    let released = release_off_thread(contract, asked, request, native)
        .await?
        .map_err(|reason| reject(state, contract, reason))?;
    record_released(state, contract, &released);
    Ok(released.body)
}

/// Runs the pure release path; contracts whose mechanisms scan codebooks per
/// request run on the blocking pool so they never stall the async workers.
async fn release_off_thread(
    contract: &Arc<Contract>,
    asked: wire::Asked,
    request: Value,
    native: Value,
) -> Result<Result<release::Release, wire::Invalid>, Error> {
    let seed = if contract.needs_fresh_randomness() {
        crate::rng::os_seed().map_err(|_| Error::Internal)?
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
            release::release(&contract, &asked, &request, &native, &mut options)
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

fn record_released(state: &AppState, contract: &Contract, released: &release::Release) {
    let metrics = state.metrics();
    for record in &released.answers {
        let labels = [contract.name.as_str(), record.question.as_str()];
        metrics
            .released_answers
            .with_label_values(&[labels[0], labels[1], record.view.as_str()])
            .inc();
        match record.mechanism {
            mechanism::Outcome::Applied => {}
            mechanism::Outcome::Covered { .. } => {
                metrics
                    .wcpq_answers
                    .with_label_values(&[labels[0], labels[1], "covered"])
                    .inc();
            }
            mechanism::Outcome::Fallback(reason) => {
                metrics
                    .wcpq_answers
                    .with_label_values(&[labels[0], labels[1], "fallback"])
                    .inc();
                metrics
                    .wcpq_fallbacks
                    .with_label_values(&[labels[0], labels[1], reason.label()])
                    .inc();
            }
        }
        if let Some(seconds) = record.mapping_seconds {
            metrics
                .wcpq_mapping
                .with_label_values(&labels)
                .observe(seconds);
        }
    }
}

async fn list_models(
    state: &AppState,
    headers: &HeaderMap,
    label: &mut Option<String>,
) -> Result<Value, Error> {
    let contract = select_contract(state, headers, label)?;
    let reply = state.inner.upstreams.models(&contract.provider).await?;
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
        let shown = contract
            .model
            .as_deref()
            .is_none_or(|pinned| pinned == name);
        if shown && names.insert(name) {
            models.push(json!({"name": name, "description": MODEL_DESCRIPTION, "release_date": release_date}));
        }
    }
    Ok(json!({"models": models}))
}

/// The description every listed model gets: the provider's own is free text, a channel
/// from the provider to recipients, and is never released.
pub const MODEL_DESCRIPTION: &str = "A System One decision model, served through releasegate.";

fn success_json(state: &AppState, contract: &Contract, reply: Reply) -> Result<Value, Error> {
    match reply {
        // The provider refused the proxy's own key (counted and logged in `upstream`).
        Reply::Status {
            status: status @ (401 | 403),
            ..
        } => Err(Error::UpstreamAuth { status }),
        Reply::Status {
            status,
            retry_after,
            retry_after_ms,
        } => Err(Error::UpstreamStatus {
            status,
            retry_after,
            retry_after_ms,
        }),
        Reply::Success(bytes) => serde_json::from_slice(&bytes)
            .map_err(|_| reject(state, contract, wire::Invalid::NotJson)),
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
        .with_label_values(&[contract.name.as_str(), &reason.to_string()])
        .inc();
}
