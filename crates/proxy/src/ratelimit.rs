//! Per-recipient request rate limits: one token bucket (GCRA, `governor`) per recipient
//! with a `rate_limit`, on this replica. Checked after authentication and before the
//! request body is read; a request over the limit gets 429 `rate_limited` with
//! `retry-after` in whole seconds.
//!
//! A reload keeps a recipient's bucket, and the tokens it has used, when its name and limit
//! are unchanged; a new or changed limit starts with a full bucket.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use releasegate_core::config::{RateLimit, Recipient};

/// One recipient's bucket and the limit it was built for.
#[derive(Debug)]
struct Bucket {
    limit: RateLimit,
    limiter: DefaultDirectRateLimiter,
}

/// The buckets of every limited recipient, by recipient name.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    buckets: HashMap<String, Arc<Bucket>>,
}

// === impl Limits ===

impl Limits {
    /// Builds the buckets of `recipients`, taking over those of `previous` whose recipient
    /// and limit are unchanged.
    pub(crate) fn new(recipients: &[Recipient], previous: Option<&Limits>) -> Limits {
        let buckets = recipients
            .iter()
            .filter_map(|recipient| {
                let limit = recipient.rate_limit?;
                let kept = previous
                    .and_then(|previous| previous.buckets.get(&recipient.name))
                    .filter(|bucket| bucket.limit == limit)
                    .cloned();
                let bucket = kept.unwrap_or_else(|| {
                    Arc::new(Bucket {
                        limit,
                        limiter: RateLimiter::direct(quota(limit)),
                    })
                });
                Some((recipient.name.clone(), bucket))
            })
            .collect();
        Limits { buckets }
    }

    /// Takes one token of `recipient`'s bucket; `Err(seconds)` when it is empty, with the
    /// whole seconds (at least 1) until a token is back.
    pub(crate) fn check(&self, recipient: &str) -> Result<(), u64> {
        let Some(bucket) = self.buckets.get(recipient) else {
            return Ok(());
        };
        bucket.limiter.check().map_err(|not_until| {
            retry_after_seconds(not_until.wait_time_from(DefaultClock::default().now()))
        })
    }
}

/// The bucket of `limit`: `burst` tokens, one back every 1/`requests_per_second` seconds.
fn quota(limit: RateLimit) -> Quota {
    let burst = NonZeroU32::new(limit.burst()).unwrap_or(NonZeroU32::MIN);
    // Validation keeps the rate in [0.001, 1e6]: the period is 1 µs to 1000 s.
    let period = Duration::from_secs_f64(1.0 / limit.requests_per_second().max(1e-3));
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(burst)
}

/// Whole seconds, rounded up, at least 1: a client retrying earlier would be refused again.
fn retry_after_seconds(wait: Duration) -> u64 {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    seconds.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipient(name: &str, limit: Option<(f64, u32)>) -> Recipient {
        Recipient {
            name: name.to_string(),
            key_sha256: [0; 32],
            contracts: vec!["c".to_string()],
            rate_limit: limit.map(|(rps, burst)| RateLimit::new(rps, burst).unwrap()),
            policy: None,
        }
    }

    #[test]
    fn a_burst_then_a_wait_in_whole_seconds() {
        // One token per 100 s: the test cannot run long enough to see one come back.
        let limits = Limits::new(
            &[recipient("a", Some((0.01, 3))), recipient("b", None)],
            None,
        );
        for _ in 0..3 {
            assert_eq!(limits.check("a"), Ok(()));
        }
        let wait = limits.check("a").unwrap_err();
        assert!((90..=100).contains(&wait), "{wait}");
        // Unlimited and unknown recipients pass.
        for _ in 0..100 {
            assert_eq!(limits.check("b"), Ok(()));
            assert_eq!(limits.check("nobody"), Ok(()));
        }
        assert!(limits.buckets.contains_key("a") && !limits.buckets.contains_key("b"));
    }

    #[test]
    fn a_reload_keeps_unchanged_buckets_and_refills_changed_ones() {
        let before = Limits::new(
            &[
                recipient("same", Some((0.01, 1))),
                recipient("changed", Some((0.01, 1))),
            ],
            None,
        );
        assert_eq!(before.check("same"), Ok(()));
        assert_eq!(before.check("changed"), Ok(()));
        assert!(before.check("same").is_err() && before.check("changed").is_err());
        let after = Limits::new(
            &[
                recipient("same", Some((0.01, 1))),
                recipient("changed", Some((0.01, 2))),
            ],
            Some(&before),
        );
        assert!(after.check("same").is_err(), "an unchanged bucket is kept");
        assert_eq!(
            after.check("changed"),
            Ok(()),
            "a changed limit starts full"
        );
    }

    #[test]
    fn retry_after_rounds_up_to_at_least_one_second() {
        let cases = [
            (0, 1),
            (1, 1),
            (999, 1),
            (1000, 1),
            (1001, 2),
            (99_999, 100),
        ];
        for (millis, seconds) in cases {
            assert_eq!(retry_after_seconds(Duration::from_millis(millis)), seconds);
        }
        assert_eq!(retry_after_seconds(Duration::from_nanos(1_000_000_001)), 2);
        assert_eq!(retry_after_seconds(Duration::from_micros(1_500_500)), 2);
    }
}
