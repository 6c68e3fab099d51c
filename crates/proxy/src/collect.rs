//! Asking one of a contract's providers (by default its first) for native answers, for
//! `releasegate collect`: the request
//! goes through the contract's request check (`wire::check_request`, so the contract's pinned
//! question text is what is asked) and to the provider through the proxy's own upstream
//! client (the provider's `timeout_ms`, `max_concurrency`, `queue_timeout_ms`, the server's
//! `max_upstream_body_bytes`, the key from the environment, TLS and no redirects, as under
//! `serve`); the answer must pass the release path's validation (`release::release`), so a
//! collected world is one the proxy would have released.
//!
//! Transient failures are retried (timeouts, unreachable or broken connections, a saturated
//! provider, 429, 529 and 5xx): after 0.5 s, doubling, or after the provider's `retry-after`
//! on 429/529, at most [`MAX_RETRY_WAIT`] each. Everything else fails at once.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use bytes::Bytes;
use serde_json::Value;

use crate::metrics::Metrics;
use crate::upstream::{self, Reply, Upstreams};
use releasegate_core::config::{Config, Provider};
use releasegate_core::contract::Contract;
use releasegate_core::release;
use releasegate_core::rng::Rng;
use releasegate_core::wire;

/// The longest wait before one retry (a longer `retry-after` is cut to it).
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// The first retry's wait when the provider gives no hint; each further one doubles it.
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(500);

/// One provider of a contract, as `serve` would call it.
#[derive(Debug)]
pub struct Collector {
    upstreams: Upstreams,
    contract: Arc<Contract>,
    /// The provider asked: one of the contract's.
    provider: String,
    retries: u32,
    max_concurrency: Option<usize>,
    /// The server's image limits, which `serve` applies to the same requests.
    asset_limits: wire::assets::Limits,
}

/// A native answer the provider gave and the proxy would release.
#[derive(Debug, Clone)]
pub struct Collected {
    /// What went upstream: the contract's questions, the request's `state` and `assets`.
    pub request: Value,
    /// The provider's answer body.
    pub response: Value,
    /// Calls made (1 without retries).
    pub attempts: u32,
}

/// Why a request yielded no world.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Failure {
    /// A fixed slug: `invalid_request`, an upstream kind (`timeout`, `connect`, `transport`,
    /// `too_large`, `saturated`, `rejected`, `auth`, `status_429`, `status_529`,
    /// `status_4xx`, `status_5xx`, `status_other`) or `invalid_answer`.
    pub kind: &'static str,
    /// The proxy's own description (never the provider's body).
    pub message: String,
    /// Calls made to the provider (0 when the request was refused before any).
    pub attempts: u32,
}

/// Why a collector cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// No contract of that name.
    #[error("no contract named `{name}` (known: {known})")]
    NoContract {
        /// The name asked for.
        name: String,
        /// The configured contracts.
        known: String,
    },
    /// The provider asked for is not one of the contract's.
    #[error("contract `{contract}` has no provider `{provider}` (its providers: {known})")]
    NoProvider {
        /// The contract.
        contract: String,
        /// The provider asked for.
        provider: String,
        /// The contract's providers, in order.
        known: String,
    },
    /// Metrics could not be registered.
    #[error("cannot register metrics")]
    Metrics(#[from] prometheus::Error),
    /// The providers could not be set up.
    #[error(transparent)]
    Upstream(#[from] upstream::SetupError),
}

// === impl Collector ===

impl Collector {
    /// The collector of contract `name` asking its provider `provider` (`None`: the first),
    /// retrying transient failures up to `retries` times.
    pub fn new(
        config: &Config,
        name: &str,
        provider: Option<&str>,
        retries: u32,
    ) -> Result<Collector, SetupError> {
        let contract = config
            .contract(name)
            .cloned()
            .ok_or_else(|| SetupError::NoContract {
                name: name.to_string(),
                known: config
                    .contracts()
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let provider = provider.unwrap_or(contract.provider()).to_string();
        if !contract.providers().contains(&provider) {
            return Err(SetupError::NoProvider {
                contract: name.to_string(),
                provider,
                known: contract.providers().join(", "),
            });
        }
        let max_concurrency = match config.providers().get(&provider) {
            Some(Provider::SystemOne(remote)) => Some(remote.max_concurrency()),
            _ => None,
        };
        let upstreams = Upstreams::new(config, Metrics::new()?)?;
        Ok(Collector {
            upstreams,
            contract,
            provider,
            retries,
            max_concurrency,
            asset_limits: config.server().asset_limits(),
        })
    }

    /// The provider asked (its name in the configuration).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The provider's `max_concurrency` (`None` for the in-process simulator): more requests
    /// in flight would only wait for its slots.
    pub fn max_concurrency(&self) -> Option<usize> {
        self.max_concurrency
    }

    /// Asks the provider one request; its answer is validated as the contract releases
    /// that provider's answers ([`Contract::for_provider`]).
    pub async fn collect(&self, request: &Value) -> Result<Collected, Failure> {
        let contract = self
            .contract
            .for_provider(&self.provider)
            .unwrap_or(&self.contract);
        let mut asked = wire::check_request(request, contract).map_err(|error| Failure {
            kind: "invalid_request",
            message: error.to_string(),
            attempts: 0,
        })?;
        // Images as `serve` takes them: inline entries checked (PNG or JPEG, within the
        // server's limits) and rebuilt; a requests file has no multipart parts, so an entry
        // that names one is refused.
        let no_parts = std::collections::BTreeMap::new();
        let checked =
            wire::assets::check(asked.assets(), &no_parts, self.asset_limits).map_err(|error| {
                Failure {
                    kind: "invalid_request",
                    message: error.to_string(),
                    attempts: 0,
                }
            })?;
        asked.set_assets(checked.assets);
        let body = Bytes::from(asked.upstream_bytes());
        let headers = HeaderMap::new();
        let json = axum::http::HeaderValue::from_static("application/json");
        let mut attempts = 0;
        let mut wait = FIRST_RETRY_WAIT;
        loop {
            attempts += 1;
            let post = upstream::Post {
                body: std::slice::from_ref(&body),
                content_type: &json,
                json: &body,
                sent: Some(&asked),
                headers: &headers,
                switches: &[],
            };
            let reply = self.upstreams.systemone(&self.provider, None, post).await;
            let (kind, message, hint) = match reply {
                Ok(Reply::Success(bytes)) => {
                    return answer(contract, &asked, &bytes).map_or_else(
                        |reason| {
                            Err(Failure {
                                kind: "invalid_answer",
                                message: format!(
                                    "the provider's answer fails validation: {reason}"
                                ),
                                attempts,
                            })
                        },
                        |response| {
                            Ok(Collected {
                                request: asked.upstream().clone(),
                                response,
                                attempts,
                            })
                        },
                    );
                }
                Ok(Reply::Status {
                    status,
                    retry_after,
                    retry_after_ms,
                    ..
                }) => {
                    let hint = retry_after_ms
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .map(Duration::from_millis)
                        .or_else(|| {
                            retry_after
                                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                                .map(Duration::from_secs)
                        });
                    (
                        upstream::status_kind(status),
                        format!("the provider answered {status}"),
                        hint,
                    )
                }
                Err(error) => (error.kind(), error_chain(&error), None),
            };
            if !retryable(kind) || attempts > self.retries {
                return Err(Failure {
                    kind,
                    message,
                    attempts,
                });
            }
            tokio::time::sleep(hint.unwrap_or(wait).min(MAX_RETRY_WAIT)).await;
            wait = wait.saturating_mul(2);
        }
    }
}

/// The answer body, when it parses and the release path accepts it.
fn answer(contract: &Contract, asked: &wire::Asked, bytes: &[u8]) -> Result<Value, wire::Invalid> {
    let native: Value = serde_json::from_slice(bytes).map_err(|_| wire::Invalid::NotJson)?;
    let mut rng = Rng::new(0);
    let mut options = release::Options {
        rng: &mut rng,
        evaluate: false,
    };
    release::release(contract, asked, &native, &mut options)?;
    Ok(native)
}

/// Failures worth another try: the provider may answer later.
fn retryable(kind: &str) -> bool {
    matches!(
        kind,
        "timeout"
            | "connect"
            | "transport"
            | "saturated"
            | "status_429"
            | "status_529"
            | "status_5xx"
    )
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::retryable;

    #[test]
    fn only_transient_failures_are_retried() {
        for kind in crate::upstream::ERROR_KINDS {
            let transient = !matches!(
                kind,
                "too_large" | "rejected" | "auth" | "status_4xx" | "status_other"
            );
            assert_eq!(retryable(kind), transient, "{kind}");
        }
        assert!(!retryable("invalid_answer"));
        assert!(!retryable("invalid_request"));
    }
}
