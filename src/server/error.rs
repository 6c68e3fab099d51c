//! The one place a client-facing status is chosen. Bodies are
//! `{"detail": {"error_type": ..., "message": ...}}` and never carry upstream
//! bodies, keys, or whether a release mechanism covered an answer.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::{auth, upstream, wire};

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
    /// The body is not valid JSON or cannot be decompressed.
    #[error("{0}")]
    BadBody(String),
    /// The request does not fit its contract.
    #[error(transparent)]
    Request(#[from] wire::RequestError),
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
    /// The provider could not be used.
    #[error(transparent)]
    Upstream(#[from] upstream::Error),
    /// The provider's answer failed validation and was not released.
    #[error("{}", crate::release::invalid_answer_message(*.0))]
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
            Error::Auth(auth::Error::Forbidden) => StatusCode::FORBIDDEN,
            Error::Auth(auth::Error::Ambiguous(_)) => StatusCode::BAD_REQUEST,
            Error::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Error::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            Error::Unsupported(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::BadBody(_) | Error::Request(_) => StatusCode::BAD_REQUEST,
            Error::UpstreamStatus { status, .. } => match *status {
                400..=499 | 529 => StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY),
                _ => StatusCode::BAD_GATEWAY,
            },
            Error::Upstream(upstream::Error::Timeout) => StatusCode::GATEWAY_TIMEOUT,
            Error::Upstream(upstream::Error::Saturated) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Upstream(upstream::Error::Rejected(_)) => StatusCode::BAD_REQUEST,
            Error::Upstream(_) | Error::InvalidAnswer(_) => StatusCode::BAD_GATEWAY,
            Error::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `error_type` slug.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::Auth(auth::Error::Unauthenticated) => "authentication_error",
            Error::Auth(auth::Error::Forbidden) => "permission_denied",
            Error::Auth(auth::Error::Ambiguous(_)) => "contract_required",
            Error::TooLarge(_) => "request_too_large",
            Error::BodyTimeout(_) => "request_timeout",
            Error::Unsupported(_) => "unsupported_media_type",
            Error::BadBody(_) => "invalid_json",
            Error::Request(_) | Error::Upstream(upstream::Error::Rejected(_)) => "invalid_request",
            Error::UpstreamStatus { status: 429, .. } => "rate_limited",
            Error::UpstreamStatus { status: 529, .. } => "overloaded",
            Error::UpstreamStatus { .. } => "upstream_error",
            Error::Upstream(upstream::Error::Timeout) => "upstream_timeout",
            Error::Upstream(upstream::Error::Saturated) => "upstream_saturated",
            Error::Upstream(_) => "upstream_unavailable",
            Error::InvalidAnswer(_) => "invalid_upstream_answer",
            Error::Internal => "internal_error",
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = crate::release::error_body(self.error_type(), &self.to_string());
        let mut response = (status, axum::Json(body)).into_response();
        if let Error::UpstreamStatus {
            retry_after,
            retry_after_ms,
            ..
        } = self
        {
            if let Some(value) = retry_after {
                response.headers_mut().insert("retry-after", value);
            }
            if let Some(value) = retry_after_ms {
                response.headers_mut().insert("retry-after-ms", value);
            }
        }
        response
    }
}
