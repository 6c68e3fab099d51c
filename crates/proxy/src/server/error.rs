//! The one place a client-facing status is chosen. Bodies are
//! `{"detail": {"error_type": ..., "message": ...}}`, except request schema
//! errors, which are 422 with FastAPI's `{"detail": [{"loc", "msg", "type"}]}`
//! as the real API sends them. No body carries upstream bodies, keys, or
//! whether a release mechanism covered an answer.

use axum::http::header::RETRY_AFTER;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::auth;
use crate::upstream;
use releasegate_core::wire;
use releasegate_core::wire::provider::ProviderError;

/// Errors a handler returns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Authentication or contract selection failed.
    #[error(transparent)]
    Auth(#[from] auth::Error),
    /// The body exceeds the limit, before or after decompression.
    #[error("the request body exceeds {0} bytes")]
    TooLarge(usize),
    /// The body did not arrive within its deadline.
    #[error("the request body did not arrive within {} ms", .0.as_millis())]
    BodyTimeout(std::time::Duration),
    /// The body's encoding or media type is not supported.
    #[error("{0}")]
    Unsupported(String),
    /// A header that must appear at most once appears several times (400).
    #[error("the {0} header appears more than once; send it once")]
    Repeated(&'static str),
    /// The body is not valid JSON or cannot be decompressed.
    #[error("{0}")]
    BadBody(String),
    /// A malformed `multipart/form-data` body (400 `invalid_multipart`).
    #[error("{0}")]
    BadMultipart(String),
    /// The request's image assets are refused (`wire::assets`).
    #[error(transparent)]
    Asset(#[from] wire::assets::AssetError),
    /// The request breaks the System One schema (422) or does not fit its contract (400).
    #[error(transparent)]
    Request(#[from] wire::RequestError),
    /// No public route has this path.
    #[error("no such endpoint")]
    NotFound,
    /// The route exists but not for this method.
    #[error("method not allowed on this endpoint")]
    MethodNotAllowed,
    /// The request's header fields exceed the proxy's limit.
    #[error("the request header fields exceed {0} bytes")]
    HeadersTooLarge(usize),
    /// hyper refused the request head before any routing, with this status (431: beyond
    /// its read buffer or field count, 414: a request target too long, 400: malformed).
    #[error("{}", head_refused_message(*.0))]
    HeadRefused(u16),
    /// The recipient's own rate limit on this proxy (429): retry after this many seconds.
    #[error("this key's request rate limit on the proxy is exhausted; retry after {0} s")]
    RateLimited(u64),
    /// The request's bytes alone exceed the budget of all requests' bytes (413).
    #[error("the request needs more memory than the proxy gives all requests together ({0} bytes)")]
    TooLargeForBudget(usize),
    /// The budget of all requests' bytes stayed spent (503): retry after this many seconds.
    #[error("the proxy is busy; retry after {0} s")]
    Busy(u64),
    /// The recipient's `max_in_flight` requests are in flight (429): retry after 1 s.
    #[error("this key has its most requests in flight on the proxy; retry after 1 s")]
    InFlight,
    /// The provider's concurrency slots stayed busy (503): retry after this many seconds.
    #[error("the provider is saturated; retry after {0} s")]
    Saturated(u64),
    /// The provider answered with a non-success status.
    #[error("the provider answered with status {status}")]
    UpstreamStatus {
        /// The upstream status, kept for the client.
        status: u16,
        /// Retry hints forwarded on 429/529.
        retry_after: Option<HeaderValue>,
        /// Retry hints forwarded on 429/529.
        retry_after_ms: Option<HeaderValue>,
    },
    /// The provider refused the request with a known error kind (`wire::provider`): its
    /// status and `error_type` are kept, the message is the proxy's own.
    #[error("{}", ProviderError::message(.kind))]
    ProviderKind {
        /// The upstream status (a 4xx).
        status: u16,
        /// The provider's `error_type`, one of `KNOWN_ERROR_TYPES`.
        kind: &'static str,
    },
    /// The provider refused the proxy's own credentials (401 or 403): the proxy's
    /// provider key is wrong, not the caller's (502, so SDKs do not blame the caller's key).
    #[error("the proxy could not authenticate with the provider")]
    UpstreamAuth {
        /// The upstream status (401 or 403), for logs only.
        status: u16,
    },
    /// The provider could not be used.
    #[error(transparent)]
    Upstream(#[from] upstream::Error),
    /// The provider's answer failed validation and was not released.
    #[error("{}", releasegate_core::release::invalid_answer_message(*.0))]
    InvalidAnswer(wire::Invalid),
    /// A bug or unexpected state.
    #[error("internal error")]
    Internal,
}

// === impl Error ===

impl Error {
    /// The client status.
    pub fn status(&self) -> StatusCode {
        match self {
            Error::Auth(auth::Error::Unauthenticated) => StatusCode::UNAUTHORIZED,
            Error::Auth(auth::Error::Forbidden | auth::Error::NoKey) => StatusCode::FORBIDDEN,
            Error::Auth(
                auth::Error::Ambiguous(_)
                | auth::Error::Conflict
                | auth::Error::Repeated(_)
                | auth::Error::KeyConflict,
            ) => StatusCode::BAD_REQUEST,
            Error::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Unsupported(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::Request(wire::RequestError::Schema(_)) => StatusCode::UNPROCESSABLE_ENTITY,
            Error::Request(wire::RequestError::NotReleased { .. }) => StatusCode::FORBIDDEN,
            Error::BadBody(_) | Error::Request(_) | Error::BadMultipart(_) | Error::Repeated(_) => {
                StatusCode::BAD_REQUEST
            }
            Error::Asset(wire::assets::AssetError::Invalid(_)) => StatusCode::BAD_REQUEST,
            Error::Asset(wire::assets::AssetError::TooLarge(_)) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::Asset(wire::assets::AssetError::Unsupported(_)) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            Error::NotFound => StatusCode::NOT_FOUND,
            Error::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Error::HeadersTooLarge(_) => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Error::HeadRefused(status) => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Error::Saturated(_) | Error::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::RateLimited(_) | Error::InFlight => StatusCode::TOO_MANY_REQUESTS,
            Error::TooLargeForBudget(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::ProviderKind { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST)
            }
            Error::UpstreamStatus { status, .. } => match *status {
                // The provider has no such route (or method): the proxy's own `base_url` is
                // wrong, which the caller cannot fix; its SDK would blame the caller's URL.
                404 | 405 => StatusCode::BAD_GATEWAY,
                400..=499 | 529 => StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY),
                _ => StatusCode::BAD_GATEWAY,
            },
            Error::Upstream(upstream::Error::Timeout) => StatusCode::GATEWAY_TIMEOUT,
            Error::Upstream(upstream::Error::Saturated) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Upstream(upstream::Error::Rejected(_)) => StatusCode::BAD_REQUEST,
            Error::UpstreamAuth { .. } | Error::Upstream(_) | Error::InvalidAnswer(_) => {
                StatusCode::BAD_GATEWAY
            }
            Error::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `error_type` slug.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::Auth(auth::Error::Unauthenticated | auth::Error::NoKey) => {
                "authentication_error"
            }
            Error::Auth(auth::Error::Forbidden) => "permission_denied",
            Error::Auth(auth::Error::Ambiguous(_)) => "contract_required",
            Error::Auth(auth::Error::Conflict) => "contract_conflict",
            Error::Auth(auth::Error::Repeated(_) | auth::Error::KeyConflict)
            | Error::Repeated(_) => "invalid_request",
            Error::Request(error) => error.error_type(),
            Error::NotFound => "not_found",
            Error::MethodNotAllowed => "method_not_allowed",
            Error::HeadersTooLarge(_) | Error::HeadRefused(431) => {
                "request_header_fields_too_large"
            }
            Error::HeadRefused(414) => "uri_too_long",
            Error::HeadRefused(_) => "invalid_request_head",
            Error::Saturated(_) => "upstream_saturated",
            Error::RateLimited(_) | Error::InFlight => "rate_limited",
            Error::Busy(_) => "server_busy",
            Error::TooLarge(_) | Error::TooLargeForBudget(_) => "request_too_large",
            Error::BodyTimeout(_) => "request_timeout",
            Error::Unsupported(_) => "unsupported_media_type",
            Error::BadBody(_) => "invalid_json",
            Error::BadMultipart(_) => "invalid_multipart",
            Error::Asset(wire::assets::AssetError::Invalid(_)) => "invalid_asset",
            Error::Asset(wire::assets::AssetError::TooLarge(_)) => "request_too_large",
            Error::Asset(wire::assets::AssetError::Unsupported(_)) => "unsupported_media_type",
            Error::Upstream(upstream::Error::Rejected(_)) => "invalid_request",
            Error::ProviderKind { kind, .. } => kind,
            Error::UpstreamStatus { status: 429, .. } => "rate_limited",
            Error::UpstreamStatus { status: 529, .. } => "overloaded",
            Error::UpstreamStatus { .. } => "upstream_error",
            Error::UpstreamAuth { .. } => "upstream_auth_error",
            Error::Upstream(upstream::Error::Timeout) => "upstream_timeout",
            Error::Upstream(upstream::Error::Saturated) => "upstream_saturated",
            Error::Upstream(_) => "upstream_unavailable",
            Error::InvalidAnswer(_) => "invalid_upstream_answer",
            Error::Internal => "internal_error",
        }
    }
}

/// The message of a head hyper refused.
fn head_refused_message(status: u16) -> String {
    use super::limits::{MAX_HEAD_BUFFER_BYTES, MAX_HEADER_BYTES, MAX_HEADER_FIELDS};
    match status {
        431 => format!(
            "the request head exceeds the proxy's limits ({} bytes of header fields, {MAX_HEADER_FIELDS} fields, {MAX_HEAD_BUFFER_BYTES} bytes in all)",
            MAX_HEADER_BYTES
        ),
        414 => "the request target is too long".to_string(),
        _ => "the request head is not valid HTTP/1.1".to_string(),
    }
}

impl Error {
    /// The error and its whole source chain, `: `-separated (operators' logs only: a
    /// refused connection, a TLS failure and a DNS failure all read "upstream unreachable"
    /// to the client).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            let next = error.to_string();
            // `transparent` variants repeat their inner error's text: say it once.
            if !text.ends_with(&next) {
                text.push_str(": ");
                text.push_str(&next);
            }
            source = error.source();
        }
        text
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match &self {
            Error::Request(error) => error.body(),
            _ => releasegate_core::release::error_body(self.error_type(), &self.to_string()),
        };
        // Error bodies are small maps, written once into a vector as released bodies are.
        let bytes = releasegate_core::wire::json::write::to_vec(&body);
        let mut response = (
            status,
            [(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("application/json"),
            )],
            bytes,
        )
            .into_response();
        match self {
            Error::UpstreamStatus {
                retry_after,
                retry_after_ms,
                ..
            } => {
                if let Some(value) = retry_after {
                    response.headers_mut().insert(RETRY_AFTER, value);
                }
                if let Some(value) = retry_after_ms {
                    response.headers_mut().insert("retry-after-ms", value);
                }
            }
            Error::Saturated(seconds) | Error::RateLimited(seconds) | Error::Busy(seconds) => {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(seconds));
            }
            Error::InFlight => {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn logs_get_the_whole_cause_chain_and_clients_a_generic_message() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/systemone", closed.local_addr().unwrap());
        drop(closed);
        let refused = reqwest::Client::new().get(&url).send().await.unwrap_err();
        assert!(refused.is_connect());
        let error = Error::Upstream(upstream::Error::Connect(Box::new(refused)));
        assert_eq!(error.to_string(), "upstream unreachable");
        let chain = error.chain();
        assert!(chain.starts_with("upstream unreachable: "), "{chain}");
        // Below reqwest's own text: hyper's connect error and the OS error.
        assert!(chain.matches(": ").count() >= 3, "{chain}");
        assert!(chain.to_lowercase().contains("refused"), "{chain}");
        // Errors without a source are their own text.
        assert_eq!(Error::Internal.chain(), "internal error");
        assert_eq!(
            Error::UpstreamAuth { status: 401 }.chain(),
            "the proxy could not authenticate with the provider"
        );
    }
}
