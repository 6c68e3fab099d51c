//! What the provider replied, as the client's answer or error: a 2xx body, the error a
//! non-2xx status or a failed call becomes, and the count of a refused answer.

use bytes::Bytes;

use releasegate_core::config::Provider;
use releasegate_core::contract::Contract;
use releasegate_core::wire;
use releasegate_core::wire::provider::ProviderError;

use crate::server::error::Error;
use crate::server::{AppState, Live};
use crate::upstream::{self, Reply};

/// A provider's error as the client's: a shed request (the provider's slots stayed busy)
/// tells the client when to come back, the provider's queue timeout rounded up to whole
/// seconds, at least 1, the time in which a slot would have had to free up.
pub(super) fn upstream_error(live: &Live, contract: &Contract, error: upstream::Error) -> Error {
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

/// A 2xx answer's body; any other status becomes the error the client gets.
pub(super) fn success_body(reply: Reply) -> Result<Bytes, Error> {
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

/// Counts a provider answer the release path refused and makes it the client's error.
pub(super) fn reject(state: &AppState, contract: &Contract, reason: wire::Invalid) -> Error {
    count_rejected(state, contract, reason);
    Error::InvalidAnswer(reason)
}

/// Counts a provider answer (or a models entry) refused, by contract and reason.
pub(super) fn count_rejected(state: &AppState, contract: &Contract, reason: wire::Invalid) {
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
