//! A contract's providers in priority order: a request goes to the first whose circuit
//! admits it, and moves to the next on a connection error, on a timeout before any byte of
//! it was written, or on a status in the contract's `failover_on`; at most one attempt per
//! provider. A request that may have reached a provider (it timed out or broke off after
//! being written) goes no further unless the contract says `retry_sent`: the provider may
//! have answered, and been paid. Which provider answered is returned to the caller for the
//! release, the decision log and the metrics; nothing in the response says it.

use std::time::Duration;

use crate::clock;

use releasegate_core::contract::{Contract, Failover};

use super::circuit::Admit;
use super::{Attempt, Error, Post, Reply, Upstreams};

/// What a contract's providers made of a request.
#[derive(Debug)]
pub(crate) struct Routed {
    /// The last provider's outcome (or `Saturated` when no circuit admitted the request).
    pub(crate) result: Result<Reply, Error>,
    /// The index in `Contract::providers` of the provider that gave `result`.
    pub(crate) provider: Option<usize>,
    /// The time spent in the providers' calls, all attempts together.
    pub(crate) waited: Duration,
}

impl Upstreams {
    /// The provider a request of `contract` would go to first now: the first whose circuit
    /// admits it (a provider without a circuit always does), or the contract's first when
    /// none does. The answer cache serves only this provider's entries, so that a hit is
    /// the answer a miss would get (another provider's values, codebooks and usage differ).
    pub(crate) fn first_admitting<'c>(&self, contract: &'c Contract) -> &'c str {
        let now = clock::coarse();
        let providers = contract.providers();
        providers
            .iter()
            .find(|provider| {
                self.breakers
                    .get(provider.as_str())
                    .is_none_or(|breaker| !breaker.refuses(now))
            })
            .or(providers.first())
            .map_or("", String::as_str)
    }

    /// Sends a System One request to `contract`'s providers in order (see the module).
    pub(crate) async fn route(
        &self,
        contract: &Contract,
        recipient: Option<&str>,
        post: Post<'_>,
    ) -> Routed {
        let routing = &self.metrics.routing;
        let mut last: Option<(usize, Attempt)> = None;
        let mut attempts = 0;
        let mut waited = Duration::ZERO;
        for (index, provider) in contract.providers().iter().enumerate() {
            let ticket = match self
                .breakers
                .get(provider)
                .map(|b| b.admit(clock::coarse()))
            {
                Some(Admit::Refused) => {
                    routing
                        .failovers
                        .with_label_values(&[contract.name(), provider, "circuit_open"])
                        .inc();
                    continue;
                }
                Some(Admit::Go(ticket)) => Some(ticket),
                None => None,
            };
            attempts += 1;
            let attempt = self.attempt(provider, recipient, post).await;
            waited += attempt.took;
            if let Some(ticket) = ticket {
                ticket.report(is_failure(&attempt.result), clock::coarse());
            }
            match move_on(contract.failover(), &attempt) {
                Some(reason) if index + 1 < contract.providers().len() => {
                    routing
                        .failovers
                        .with_label_values(&[contract.name(), provider, reason])
                        .inc();
                    last = Some((index, attempt));
                }
                _ => {
                    last = Some((index, attempt));
                    break;
                }
            }
        }
        routing
            .attempts
            .with_label_values(&[contract.name()])
            .observe(attempts as f64);
        match last {
            Some((index, attempt)) => {
                if matches!(attempt.result, Ok(Reply::Success(_))) {
                    routing
                        .answered
                        .with_label_values(&[contract.name(), &contract.providers()[index]])
                        .inc();
                }
                Routed {
                    result: attempt.result,
                    provider: Some(index),
                    waited,
                }
            }
            // Every circuit is open: nothing was sent anywhere.
            None => Routed {
                result: Err(Error::Saturated),
                provider: None,
                waited,
            },
        }
    }
}

/// Whether an outcome counts against the provider's circuit: it could not be reached, did
/// not answer in time, broke off, or answered 429 or 5xx.
fn is_failure(result: &Result<Reply, Error>) -> bool {
    match result {
        Err(Error::Connect(_) | Error::Timeout | Error::Transport(_)) => true,
        Err(Error::TooLarge | Error::Saturated | Error::Rejected(_)) => false,
        Ok(Reply::Status { status, .. }) => *status == 429 || *status >= 500,
        Ok(Reply::Success(_)) => false,
    }
}

/// Why an attempt moves the request to the next provider, if it does.
fn move_on(failover: &Failover, attempt: &Attempt) -> Option<&'static str> {
    let unsent_or_allowed = !attempt.sent || failover.retry_sent();
    match &attempt.result {
        Err(Error::Connect(_)) => Some("connect"),
        // The proxy's own queue for the provider was full: the request never left.
        Err(Error::Saturated) => Some("saturated"),
        Err(Error::Timeout) if unsent_or_allowed => Some("timeout"),
        Err(Error::Transport(_)) if unsent_or_allowed => Some("transport"),
        Ok(Reply::Status { status, .. }) if failover.on_status(*status) => Some("status"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(result: Result<Reply, Error>, sent: bool) -> Attempt {
        Attempt {
            result,
            sent,
            took: Duration::ZERO,
        }
    }

    fn status(status: u16) -> Result<Reply, Error> {
        Ok(Reply::Status {
            status,
            retry_after: None,
            retry_after_ms: None,
            problem: None,
        })
    }

    #[test]
    fn only_what_never_reached_the_provider_or_a_listed_status_moves_on() {
        let default = Failover::default();
        let connect = || Err(Error::Connect("refused".into()));
        assert_eq!(
            move_on(&default, &attempt(connect(), false)),
            Some("connect")
        );
        assert_eq!(
            move_on(&default, &attempt(Err(Error::Timeout), false)),
            Some("timeout")
        );
        // Written, then no answer: not sent again (it may have been answered and paid).
        assert_eq!(move_on(&default, &attempt(Err(Error::Timeout), true)), None);
        let broke = || Err(Error::Transport("reset".into()));
        assert_eq!(move_on(&default, &attempt(broke(), true)), None);
        for code in [429, 500, 502, 503, 504, 529] {
            assert_eq!(
                move_on(&default, &attempt(status(code), true)),
                Some("status")
            );
        }
        for code in [400, 401, 404, 413, 422, 501] {
            assert_eq!(
                move_on(&default, &attempt(status(code), true)),
                None,
                "{code}"
            );
        }
        let success = || Ok(Reply::Success(bytes::Bytes::new()));
        assert_eq!(move_on(&default, &attempt(success(), true)), None);
        assert_eq!(
            move_on(&default, &attempt(Err(Error::TooLarge), true)),
            None
        );
        assert!(is_failure(&status(503)) && is_failure(&status(429)));
        assert!(!is_failure(&status(422)) && !is_failure(&success()));
        assert!(is_failure(&Err(Error::Timeout)) && !is_failure(&Err(Error::Saturated)));
    }
}
