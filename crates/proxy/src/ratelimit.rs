//! Per-recipient request rate limits, checked after authentication and before the request
//! body is read; a request over the limit gets 429 `rate_limited` with `retry-after` in whole
//! seconds.
//!
//! Without `[rate_limit_store]` each replica keeps one token bucket (GCRA, `governor`) per
//! recipient with a `rate_limit`: N replicas let N times the limit through. With
//! `[rate_limit_store] kind = "redis"` every replica sharing the store takes its tokens from
//! one bucket per recipient in Redis (`store`): a Lua script refills and takes a token
//! atomically on the store's own clock (`TIME`), so the replicas' clocks do not matter.
//! When a call to the store fails or takes longer than `timeout_ms`, the replica limits the
//! request with its own bucket (per replica, never unlimited), shows it in
//! `releasegate_rate_limit_store_degraded` and asks the store again after
//! `retry_interval_ms`. As soon as one call answers, every event loop of the replica takes
//! its tokens from the store again (`store`). Releases never depend on the store: it only
//! decides 429 or not.
//!
//! Tokens a replica grants from its own bucket while the store does not answer are owed to
//! the shared bucket: the recipient's first call to the store afterwards takes them too
//! (never below empty), less what the recipient's rate has refilled since the last of them,
//! and at most a burst per replica. So the local buckets add nothing on top of the shared
//! one once the store answers: a burst after an outage gets what the shared bucket holds
//! minus what the outage already granted, never more than the shared bucket alone would.
//! An outage itself still lets each replica grant up to its own bucket (N replicas, N
//! times the limit), as without a store.
//!
//! A reload keeps a recipient's local bucket, the tokens it has used and what it owes the
//! store, when its name and limit are unchanged; a new or changed limit starts with a full
//! bucket (in the store too: the limit is part of the bucket's key). The store connection
//! survives a reload that leaves `[rate_limit_store]` unchanged; a reload that replaces or
//! drops the store leaves the gauge to the new one.

mod in_flight;
pub(crate) mod store;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use releasegate_core::config::{RateLimit, RateLimitStore, Recipient};

pub(crate) use in_flight::{InFlight, Slot};
pub(crate) use store::Store;

/// One recipient's bucket and the limit it was built for.
#[derive(Debug)]
struct Bucket {
    limit: RateLimit,
    limiter: DefaultDirectRateLimiter,
    /// What `limiter` granted while the store did not answer, owed to the shared bucket.
    owed: Mutex<Owed>,
}

/// Tokens granted by a replica's own bucket while the store did not answer (at most a
/// burst), and when the last of them was.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Owed {
    tokens: u32,
    last: Option<Instant>,
}

/// Owed tokens taken out of a bucket for one call to the store; put back when the call
/// does not answer or is abandoned (a request dropped mid-call), so nothing owed is lost.
struct Settling<'a> {
    bucket: &'a Bucket,
    owed: Owed,
    settled: bool,
}

/// The buckets of every limited recipient, by recipient name, and the shared store if any.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    buckets: HashMap<String, Arc<Bucket>>,
    store: Option<Arc<Store>>,
}

// === impl Limits ===

impl Limits {
    /// Builds the buckets of `recipients`, taking over those of `previous` whose recipient
    /// and limit are unchanged, and its store when `store` is the same.
    pub(crate) fn new(
        recipients: &[Recipient],
        store: Option<(&RateLimitStore, &crate::metrics::Metrics, usize)>,
        previous: Option<&Limits>,
    ) -> Limits {
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
                        owed: Mutex::new(Owed::default()),
                    })
                });
                Some((recipient.name.clone(), bucket))
            })
            .collect();
        let kept = previous
            .and_then(|previous| previous.store.as_ref())
            .filter(|kept| store.is_some_and(|(settings, ..)| kept.serves(settings)))
            .cloned();
        // A store the reload drops or replaces gives the gauge up before the new one sets it.
        if kept.is_none()
            && let Some(previous) = previous.and_then(|previous| previous.store.as_ref())
        {
            previous.retire();
        }
        let store = store.map(|(settings, metrics, loops)| {
            kept.unwrap_or_else(|| Arc::new(Store::new(settings, metrics, loops)))
        });
        Limits { buckets, store }
    }

    /// Takes one token of `recipient`'s bucket: the store's when there is one and it
    /// answers (after what this replica owes it), else this replica's (then owed to the
    /// store); `Err(seconds)` when it is empty, with the whole seconds (at least 1) until a
    /// token is back.
    pub(crate) async fn check(&self, recipient: &str) -> Result<(), u64> {
        let Some(bucket) = self.buckets.get(recipient) else {
            return Ok(());
        };
        let Some(store) = &self.store else {
            return bucket.local();
        };
        let settling = bucket.settle();
        let due = settling.owed.due(bucket.limit, Instant::now());
        if let Some(verdict) = store.take(recipient, bucket.limit, due).await {
            settling.settled();
            return verdict.map_err(retry_after_seconds);
        }
        drop(settling);
        let verdict = bucket.local();
        if verdict.is_ok() {
            bucket.owe(Owed {
                tokens: 1,
                last: Some(Instant::now()),
            });
        }
        verdict
    }

    /// [`Limits::check`] on this replica's bucket alone.
    #[cfg(test)]
    fn local(&self, recipient: &str) -> Result<(), u64> {
        self.buckets
            .get(recipient)
            .map_or(Ok(()), |bucket| bucket.local())
    }
}

// === impl Bucket ===

impl Bucket {
    /// A token of this replica's own bucket.
    fn local(&self) -> Result<(), u64> {
        self.limiter.check().map_err(|not_until| {
            retry_after_seconds(not_until.wait_time_from(DefaultClock::default().now()))
        })
    }

    /// Adds `owed` to what this bucket owes the store.
    fn owe(&self, owed: Owed) {
        let mut current = self
            .owed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = current.plus(owed, self.limit.burst());
    }

    /// Takes what this bucket owes the store, for one call.
    fn settle(&self) -> Settling<'_> {
        let owed = std::mem::take(
            &mut *self
                .owed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        Settling {
            bucket: self,
            owed,
            settled: false,
        }
    }
}

// === impl Owed ===

impl Owed {
    /// Both debts, at most a burst, dated by the later of their last grants.
    fn plus(self, other: Owed, burst: u32) -> Owed {
        Owed {
            tokens: self.tokens.saturating_add(other.tokens).min(burst),
            last: self.last.max(other.last),
        }
    }

    /// What is still owed at `now`: the tokens (at most a burst) less what `limit`'s rate
    /// has refilled since the last of them, rounded up.
    fn due(self, limit: RateLimit, now: Instant) -> u32 {
        let Some(last) = self.last else {
            return 0;
        };
        let refilled =
            now.saturating_duration_since(last).as_secs_f64() * limit.requests_per_second();
        let due = f64::from(self.tokens.min(limit.burst())) - refilled;
        // Between 0 and a burst: the conversion neither truncates nor wraps.
        if due > 0.0 { due.ceil() as u32 } else { 0 }
    }
}

// === impl Settling ===

impl Settling<'_> {
    /// The store took what was owed.
    fn settled(mut self) {
        self.settled = true;
    }
}

impl Drop for Settling<'_> {
    fn drop(&mut self) {
        if !self.settled && self.owed != Owed::default() {
            self.bucket.owe(self.owed);
        }
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
            max_in_flight: None,
            policy: None,
        }
    }

    #[test]
    fn a_burst_then_a_wait_in_whole_seconds() {
        // One token per 100 s: the test cannot run long enough to see one come back.
        let limits = Limits::new(
            &[recipient("a", Some((0.01, 3))), recipient("b", None)],
            None,
            None,
        );
        for _ in 0..3 {
            assert_eq!(limits.local("a"), Ok(()));
        }
        let wait = limits.local("a").unwrap_err();
        assert!((90..=100).contains(&wait), "{wait}");
        // Unlimited and unknown recipients pass.
        for _ in 0..100 {
            assert_eq!(limits.local("b"), Ok(()));
            assert_eq!(limits.local("nobody"), Ok(()));
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
            None,
        );
        assert_eq!(before.local("same"), Ok(()));
        assert_eq!(before.local("changed"), Ok(()));
        assert!(before.local("same").is_err() && before.local("changed").is_err());
        let after = Limits::new(
            &[
                recipient("same", Some((0.01, 1))),
                recipient("changed", Some((0.01, 2))),
            ],
            None,
            Some(&before),
        );
        assert!(after.local("same").is_err(), "an unchanged bucket is kept");
        assert_eq!(
            after.local("changed"),
            Ok(()),
            "a changed limit starts full"
        );
    }

    #[test]
    fn what_is_owed_is_at_most_a_burst_and_refills_at_the_rate() {
        let limit = RateLimit::new(2.0, 3).unwrap();
        let start = Instant::now();
        assert_eq!(
            Owed::default().due(limit, start),
            0,
            "nothing granted locally"
        );
        let one = |at| Owed {
            tokens: 1,
            last: Some(at),
        };
        let mut owed = Owed::default();
        for _ in 0..5 {
            owed = owed.plus(one(start), limit.burst());
        }
        assert_eq!(owed.tokens, 3, "at most a burst");
        assert_eq!(owed.due(limit, start), 3);
        // Two tokens a second: 0.25 s refills half a token (still 3, rounded up), 0.5 s one.
        assert_eq!(owed.due(limit, start + Duration::from_millis(250)), 3);
        assert_eq!(owed.due(limit, start + Duration::from_millis(500)), 2);
        assert_eq!(owed.due(limit, start + Duration::from_millis(1400)), 1);
        assert_eq!(owed.due(limit, start + Duration::from_millis(1500)), 0);
        assert_eq!(owed.due(limit, start + Duration::from_secs(60)), 0);
        // A later grant dates the whole debt.
        let later = owed.plus(one(start + Duration::from_secs(60)), limit.burst());
        assert_eq!(later.due(limit, start + Duration::from_secs(60)), 3);
        assert_eq!(owed.plus(Owed::default(), limit.burst()), owed);
    }

    #[test]
    fn owed_tokens_taken_for_a_call_come_back_unless_it_settles() {
        let limits = Limits::new(&[recipient("a", Some((0.01, 5)))], None, None);
        let bucket = &limits.buckets["a"];
        let now = Instant::now();
        bucket.owe(Owed {
            tokens: 2,
            last: Some(now),
        });
        let settling = bucket.settle();
        assert_eq!(settling.owed.tokens, 2);
        assert_eq!(
            bucket.settle().owed,
            Owed::default(),
            "taken by one call only"
        );
        drop(settling);
        let settling = bucket.settle();
        assert_eq!(
            settling.owed.due(bucket.limit, now),
            2,
            "an unanswered call owes it still"
        );
        settling.settled();
        assert_eq!(
            bucket.settle().owed,
            Owed::default(),
            "a settled call paid it"
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
