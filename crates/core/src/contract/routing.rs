//! How a contract reaches its providers: the priority order, when a request moves on to
//! the next provider (`Failover`), and the exact cache of native answers (`CacheSpec`).

use std::time::Duration;

/// The statuses that move a request to the next provider by default: rate limited,
/// server errors and overloaded.
pub const DEFAULT_FAILOVER_ON: [u16; 6] = [429, 500, 502, 503, 504, 529];

/// When a request moves on to the contract's next provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failover {
    /// Statuses of a provider's answer that move the request on (`failover_on`).
    pub(crate) on: Vec<u16>,
    /// Whether a request that reached a provider and then timed out or broke off is sent
    /// to the next one (`retry_sent`): the provider may have answered, and been paid.
    pub(crate) retry_sent: bool,
}

impl Default for Failover {
    fn default() -> Failover {
        Failover {
            on: DEFAULT_FAILOVER_ON.to_vec(),
            retry_sent: false,
        }
    }
}

impl Failover {
    /// Whether a provider's answer with `status` moves the request on.
    pub fn on_status(&self, status: u16) -> bool {
        self.on.contains(&status)
    }
    /// The statuses that move a request on.
    pub fn statuses(&self) -> &[u16] {
        &self.on
    }
    /// Whether a request the provider may have received is sent to the next one.
    pub fn retry_sent(&self) -> bool {
        self.retry_sent
    }
}

/// Who may hit a cache entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    /// Only the recipient whose request filled the entry (the default): hit timing tells a
    /// recipient nothing about anyone else's questions.
    Recipient,
    /// Every recipient of contracts on the same provider: a hit reveals that someone
    /// asked the same question within the TTL (a timing channel; `docs/security.md`).
    Provider,
}

impl CacheScope {
    /// The scope's configuration word (a metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            CacheScope::Recipient => "recipient",
            CacheScope::Provider => "provider",
        }
    }
}

/// Where cache entries live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheStore {
    /// In the replica's memory (the default).
    Memory,
    /// In the Redis of `[rate_limit_store]`, shared across replicas.
    Redis,
}

/// A contract's exact cache of validated native answers (`cache = { ... }`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSpec {
    pub(crate) ttl: Duration,
    pub(crate) max_bytes: u64,
    pub(crate) scope: CacheScope,
    pub(crate) store: CacheStore,
}

impl CacheSpec {
    /// How long an entry is served after it was filled.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
    /// Most bytes of entries kept (keys and answers).
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }
    /// Who may hit an entry.
    pub fn scope(&self) -> CacheScope {
        self.scope
    }
    /// Where entries live.
    pub fn store(&self) -> CacheStore {
        self.store
    }
}
