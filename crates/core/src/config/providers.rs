//! `[providers]` as validated: the System One endpoints (or the simulator) contracts ask.

use std::time::Duration;

use secrecy::SecretString;

/// A provider that answers System One requests.
#[derive(Debug)]
pub enum Provider {
    /// A remote System One endpoint.
    SystemOne(RemoteProvider),
    /// The in-process deterministic simulator (no network, no key).
    Simulated,
}

/// A remote System One provider (built by validation only: every value is in its range).
#[derive(Debug)]
pub struct RemoteProvider {
    pub(super) base_url: String,
    pub(super) api_key: Option<SecretString>,
    pub(super) timeout: Duration,
    pub(super) max_concurrency: usize,
    pub(super) queue_timeout: Duration,
    pub(super) circuit: Option<Circuit>,
}

/// A provider's circuit breaker (`circuit = { failures, window_ms, cooldown_ms }`): it opens
/// after `failures` failures within `window`, sends nothing while open, and after
/// `cooldown` lets one trial request through (half-open): its success closes the circuit,
/// its failure opens it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Circuit {
    /// Failures within the window that open the circuit (at least 1).
    pub failures: u32,
    /// The window failures are counted in.
    pub window: Duration,
    /// How long the circuit stays open before a trial request.
    pub cooldown: Duration,
}

impl RemoteProvider {
    /// Root URL; `/v1/systemone` and `/v1/models` are appended.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
    /// The provider key, read from the environment at load time.
    pub fn api_key(&self) -> Option<&SecretString> {
        self.api_key.as_ref()
    }
    /// Per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    /// Most requests in flight to this provider at once (within `limits::MAX_CONCURRENCY`,
    /// far below what a semaphore can hold).
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }
    /// How long a request waits for a free slot before it is shed with 503 (at most
    /// `timeout`).
    pub fn queue_timeout(&self) -> Duration {
        self.queue_timeout
    }
    /// The circuit breaker, when configured.
    pub fn circuit(&self) -> Option<Circuit> {
        self.circuit
    }
}
