//! Request handlers: the public routes (`systemone`: System One, `models`: the model
//! list, `questions`: the contract's questions), the admin ones, and the contract selection
//! they share.

mod finish;
mod models;
mod reply;
mod systemone;
mod trail;

use releasegate_core::timing;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::error::Error;
use super::middleware::{Ids, RequestId};
use super::trace::{SpanIds, TraceId};
use super::{AppState, Live};

use finish::finish;
use models::list_models;
use releasegate_core::contract::Contract;
use releasegate_core::wire;
use systemone::answer;
use trail::Trail;

// The handlers take the whole request and split it: axum's `HeaderMap`
// extractor would clone every header.

/// `POST /v1/systemone`.
pub(super) async fn systemone(State(state): State<AppState>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let id = request_id(&state, &parts);
    serve_systemone(state, id, None, parts.headers, body).await
}

/// `POST /v1/systemone` from the public listener's direct path, which ran the router's
/// layers' steps itself: their ids come as they are, not through the request's extensions.
pub(super) async fn systemone_admitted(state: AppState, request: Request, ids: Ids) -> Response {
    let (parts, body) = request.into_parts();
    let id = (ids.request_id, Some(ids.trace_id), Some(ids.spans));
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

/// `GET /v1/questions`.
pub(super) async fn questions(State(state): State<AppState>, request: Request) -> Response {
    let (parts, _body) = request.into_parts();
    let id = request_id(&state, &parts);
    serve_questions(state, id, None, parts.headers).await
}

/// `GET /contracts/{contract}/v1/questions`: the contract chosen by the path.
pub(super) async fn questions_for(
    State(state): State<AppState>,
    contract: Result<Path<String>, PathRejection>,
    request: Request,
) -> Response {
    let (parts, _body) = request.into_parts();
    let id = request_id(&state, &parts);
    match contract {
        Ok(Path(contract)) => serve_questions(state, id, Some(contract), parts.headers).await,
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
    let started = timing::now();
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
    let started = timing::now();
    let mut trail = Trail::new(&state, trace_id, spans);
    let selection = Selection::new(&headers, path_contract.as_deref());
    let result = list_models(&state, selection, &mut trail)
        .await
        .map(|models| wire::json::write::to_vec(&models));
    finish(&state, "models", id, trail, started, result)
}

/// The questions the caller's contract asks, in System One request form
/// (`wire::questions::pinned`): the contract's own text, which a client sends back as its
/// request's `questions`. Authenticated and rate limited as every public route; nothing is
/// asked upstream, and nothing depends on an answer.
async fn serve_questions(
    state: AppState,
    (id, trace_id, spans): RequestIds,
    path_contract: Option<String>,
    headers: HeaderMap,
) -> Response {
    let started = timing::now();
    let mut trail = Trail::new(&state, trace_id, spans);
    let selection = Selection::new(&headers, path_contract.as_deref());
    let live = state.live();
    let result = select_contract(&live, selection, &mut trail)
        .await
        .map(|contract| {
            let questions = wire::questions::pinned(contract);
            wire::json::write::to_vec(&serde_json::json!({ "questions": questions }))
        });
    finish(&state, "questions", id, trail, started, result)
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

/// Authenticates the caller, selects its contract and checks its rate limit and its
/// requests in flight (`max_in_flight`).
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
    // Held to the end of the response (`finish`).
    let recipient = trail.recipient.as_deref().unwrap_or_default();
    trail.in_flight = live
        .in_flight
        .admit(recipient)
        .map_err(|()| Error::InFlight)?;
    Ok(contract)
}
