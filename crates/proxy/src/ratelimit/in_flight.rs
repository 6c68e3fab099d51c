//! Per-recipient `max_in_flight`: how many of a recipient's requests this replica serves at
//! once, from admission (after authentication and the rate limit) to the end of the
//! response. A request beyond it gets 429 `rate_limited` with `retry-after: 1`.
//!
//! A reload keeps a recipient's count (its requests in flight stay counted) and takes its
//! new limit; a recipient the reload removes keeps the count of its requests still in flight
//! until they end, unseen.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use releasegate_core::config::Recipient;

/// The counts of the recipients with a `max_in_flight`, by name.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    counts: HashMap<String, Arc<Count>>,
}

/// One recipient's limit and requests in flight.
#[derive(Debug)]
struct Count {
    limit: AtomicU32,
    current: AtomicU32,
}

/// One admitted request; dropping it ends it.
#[derive(Debug)]
pub(crate) struct Slot(Arc<Count>);

impl InFlight {
    /// The counts of `recipients`, keeping those of `previous` by name.
    pub(crate) fn new(recipients: &[Recipient], previous: Option<&InFlight>) -> InFlight {
        let counts = recipients
            .iter()
            .filter_map(|recipient| {
                let limit = recipient.max_in_flight?;
                let count = match previous.and_then(|p| p.counts.get(&recipient.name)) {
                    Some(kept) => {
                        kept.limit.store(limit, Ordering::Relaxed);
                        kept.clone()
                    }
                    None => Arc::new(Count {
                        limit: AtomicU32::new(limit),
                        current: AtomicU32::new(0),
                    }),
                };
                Some((recipient.name.clone(), count))
            })
            .collect();
        InFlight { counts }
    }

    /// Admits one request of `recipient`: `Ok(None)` when it has no limit, `Ok(Some(slot))`
    /// within it, `Err(())` when its limit is reached.
    pub(crate) fn admit(&self, recipient: &str) -> Result<Option<Slot>, ()> {
        let Some(count) = self.counts.get(recipient) else {
            return Ok(None);
        };
        let limit = count.limit.load(Ordering::Relaxed);
        count
            .current
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
                (current < limit).then_some(current + 1)
            })
            .map(|_| Some(Slot(count.clone())))
            .map_err(|_| ())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.current.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipient(name: &str, max_in_flight: Option<u32>) -> Recipient {
        Recipient {
            name: name.to_string(),
            key_sha256: [0; 32],
            contracts: vec![],
            rate_limit: None,
            max_in_flight,
            policy: None,
        }
    }

    #[test]
    fn requests_beyond_the_limit_are_refused_until_one_ends() {
        let in_flight = InFlight::new(&[recipient("a", Some(2)), recipient("b", None)], None);
        let first = in_flight.admit("a").unwrap().unwrap();
        let second = in_flight.admit("a").unwrap().unwrap();
        assert!(in_flight.admit("a").is_err());
        // Without a limit, or unknown: never counted.
        for _ in 0..10 {
            assert!(in_flight.admit("b").unwrap().is_none());
        }
        drop(first);
        let third = in_flight.admit("a").unwrap().unwrap();
        assert!(in_flight.admit("a").is_err());
        drop((second, third));
        assert!(in_flight.admit("a").unwrap().is_some());
    }

    #[test]
    fn a_reload_keeps_the_count_and_takes_the_new_limit() {
        let before = InFlight::new(&[recipient("a", Some(1))], None);
        let slot = before.admit("a").unwrap().unwrap();
        let after = InFlight::new(&[recipient("a", Some(2))], Some(&before));
        let second = after.admit("a").unwrap().unwrap();
        assert!(after.admit("a").is_err());
        drop((slot, second));
        let lowered = InFlight::new(&[recipient("a", Some(1))], Some(&after));
        let only = lowered.admit("a").unwrap();
        assert!(only.is_some());
        assert!(lowered.admit("a").is_err());
    }
}
