//! The public router's outermost layer: every response, success or error,
//! from a handler, a fallback or this layer itself, carries the proxy's own
//! request id in `x-request-id` and `x-typesafe-request-id` (the header the
//! official SDKs read), and oversized header sections get a JSON 431.

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{AppState, Error, REQUEST_ID_HEADER};

/// The request id header the official System One SDKs read.
pub const SDK_REQUEST_ID_HEADER: &str = "x-typesafe-request-id";

/// Most bytes of header fields (names, values and `": "`/CRLF framing) a
/// request may carry; beyond it the proxy answers 431 in its JSON shape.
/// Far larger sections, or more than 100 fields, are refused by hyper itself
/// before any routing, with a bare 431 (see README, Errors).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// The proxy's request id, in the request's extensions for handlers and logs.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Assigns a fresh request id, refuses oversized header sections, and stamps
/// the id on whatever response comes back. A client-sent id is never reused.
pub(super) async fn request_id(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let id = state.next_request_id();
    let header_bytes: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    let mut response = if header_bytes > MAX_HEADER_BYTES {
        tracing::warn!(request_id = %id, header_bytes, "request header fields too large");
        Error::HeadersTooLarge(MAX_HEADER_BYTES).into_response()
    } else {
        request.extensions_mut().insert(RequestId(id.clone()));
        next.run(request).await
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        let headers = response.headers_mut();
        headers.insert(HeaderName::from_static(REQUEST_ID_HEADER), value.clone());
        headers.insert(HeaderName::from_static(SDK_REQUEST_ID_HEADER), value);
    }
    response
}
