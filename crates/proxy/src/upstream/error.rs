//! What a call to a provider ends in: its failures, counted by kind, and its replies.

use axum::http::HeaderValue;
use bytes::Bytes;

use releasegate_core::wire::provider::ProviderError;

/// A transport error with its cause chain (for logs only).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Upstream failures (each maps to one client status).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The provider did not answer in time (504).
    #[error("upstream timed out")]
    Timeout,
    /// The provider could not be reached (502).
    #[error("upstream unreachable")]
    Connect(#[source] BoxError),
    /// The connection failed mid-exchange (502).
    #[error("upstream transport failure")]
    Transport(#[source] BoxError),
    /// The provider's body exceeded the configured cap (502).
    #[error("upstream body too large")]
    TooLarge,
    /// Too many requests already in flight to this provider (503).
    #[error("upstream concurrency limit reached")]
    Saturated,
    /// The in-process simulator refused the request (400).
    #[error("{0}")]
    Rejected(String),
}

/// Every `kind` label of `releasegate_upstream_errors_total`: transport failures, then
/// non-2xx statuses by class (`auth` is 401 and 403: the provider refused the proxy's key).
pub(crate) const ERROR_KINDS: [&str; 12] = [
    "timeout",
    "connect",
    "transport",
    "too_large",
    "saturated",
    "rejected",
    "auth",
    "status_429",
    "status_529",
    "status_4xx",
    "status_5xx",
    "status_other",
];

// === impl Error ===

impl Error {
    /// The `kind` label this failure is counted under.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Timeout => "timeout",
            Error::Connect(_) => "connect",
            Error::Transport(_) => "transport",
            Error::TooLarge => "too_large",
            Error::Saturated => "saturated",
            Error::Rejected(_) => "rejected",
        }
    }
}

/// The `kind` label of a non-2xx upstream status.
pub(crate) fn status_kind(status: u16) -> &'static str {
    match status {
        401 | 403 => "auth",
        429 => "status_429",
        529 => "status_529",
        400..=499 => "status_4xx",
        500..=599 => "status_5xx",
        _ => "status_other",
    }
}

/// One provider's attempt at a request: its outcome, and whether the request may have
/// reached the provider (`false`: it certainly did not: no connection, no slot, or the
/// deadline passed before a byte of it was written).
#[derive(Debug)]
pub(crate) struct Attempt {
    pub(crate) result: Result<Reply, Error>,
    pub(crate) sent: bool,
    /// How long the call took (the provider's latency as its histogram counts it).
    pub(crate) took: std::time::Duration,
}

/// A provider's answer.
#[derive(Debug)]
pub(crate) enum Reply {
    /// A 2xx answer with a body (not yet validated; may not even be JSON).
    Success(Bytes),
    /// Any other status; the body is dropped here so it can never leak.
    Status {
        /// The upstream status.
        status: u16,
        /// `retry-after` in whole seconds (see `retry_after`), when sent with 429/529.
        retry_after: Option<HeaderValue>,
        /// `retry-after-ms` in whole milliseconds (see `retry_after_ms`), when sent with 429/529.
        retry_after_ms: Option<HeaderValue>,
        /// What the error body says that a recipient may learn (`wire::provider`).
        problem: Option<ProviderError>,
    },
}

/// Why the providers could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The TLS set-up (the platform's certificate verifier) failed.
    #[error("cannot set up TLS for the providers")]
    Tls(#[source] std::io::Error),
    /// A provider's `base_url` is not a valid URL.
    #[error("providers.{provider}.base_url: `{url}` is not a valid URL ({reason})")]
    BaseUrl {
        /// The provider.
        provider: String,
        /// The URL that failed to parse.
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// A provider key cannot be sent in an HTTP header.
    #[error(
        "providers.{provider}.api_key_env: the key contains characters not allowed in an HTTP header"
    )]
    ApiKey {
        /// The provider.
        provider: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_and_failure_has_a_listed_kind() {
        for status in 100..=999 {
            if !(200..300).contains(&status) {
                assert!(ERROR_KINDS.contains(&status_kind(status)), "{status}");
            }
        }
        assert_eq!(status_kind(401), "auth");
        assert_eq!(status_kind(403), "auth");
        assert_eq!(status_kind(404), "status_4xx");
        assert_eq!(status_kind(503), "status_5xx");
        for error in [
            Error::Timeout,
            Error::TooLarge,
            Error::Saturated,
            Error::Rejected(String::new()),
        ] {
            assert!(ERROR_KINDS.contains(&error.kind()));
        }
    }
}
