//! `[[recipients]]` as validated: the callers, identified by their key digest, with the
//! contracts they are bound to and their rate limits.

use super::limits;

/// A caller identified by its key.
#[derive(Debug, Clone)]
pub struct Recipient {
    /// The recipient's name (for logs).
    pub name: String,
    /// SHA-256 of its key.
    pub key_sha256: [u8; 32],
    /// The contracts the key is bound to.
    pub contracts: Vec<String>,
    /// Its request rate limit (on this replica, or across replicas with
    /// `[rate_limit_store]`), if any.
    pub rate_limit: Option<RateLimit>,
    /// Most of its requests in flight at once on this replica (`max_in_flight`), from
    /// admission to the end of the response; `None`: no limit.
    pub max_in_flight: Option<u32>,
    /// Its leakage budget over everything its contracts release together (`audit --recipient
    /// NAME --gate`); never read by the proxy at request time.
    pub policy: Option<crate::contract::LeakagePolicy>,
}

/// A token bucket: `burst` requests at once, refilled at `requests_per_second` (built by
/// validation only: both are in their ranges).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub(super) requests_per_second: f64,
    pub(super) burst: u32,
}

impl RateLimit {
    /// A rate limit, if both values are in their ranges (`limits::RATE_LIMIT_RPS`,
    /// `limits::RATE_LIMIT_BURST`).
    pub fn new(requests_per_second: f64, burst: u32) -> Option<RateLimit> {
        let (low, high) = limits::RATE_LIMIT_RPS;
        let (min, max) = limits::RATE_LIMIT_BURST;
        ((low..=high).contains(&requests_per_second) && (min..=max).contains(&u64::from(burst)))
            .then_some(RateLimit {
                requests_per_second,
                burst,
            })
    }

    /// Sustained rate (`limits::RATE_LIMIT_RPS`).
    pub fn requests_per_second(&self) -> f64 {
        self.requests_per_second
    }
    /// Bucket size (`limits::RATE_LIMIT_BURST`).
    pub fn burst(&self) -> u32 {
        self.burst
    }
}
