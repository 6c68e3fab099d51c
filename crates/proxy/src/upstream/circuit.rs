//! A provider's circuit breaker (`circuit = { failures, window_ms, cooldown_ms }`).
//!
//! Closed, it counts the provider's failures (no connection, a timeout, a broken exchange,
//! a 429 or a 5xx); `failures` of them within `window` open it. Open, it admits no request
//! until `cooldown` has passed; then it admits one trial request (half-open) and nobody
//! else while that trial runs: the trial's success closes the circuit, its failure opens it
//! for another cooldown, and a trial that ends without an outcome (the caller went away)
//! lets the next request try. The state is per replica and per configuration generation;
//! with a Redis store configured, openings are also shared across replicas (`shared`).

pub(crate) mod shared;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus::IntGauge;

use releasegate_core::config::Circuit;

/// The breaker of one provider.
#[derive(Debug)]
pub(crate) struct Breaker {
    spec: Circuit,
    state: Mutex<State>,
    /// `releasegate_circuit_state{provider}`: 0 closed, 1 open, 2 half-open.
    gauge: IntGauge,
    /// Until when (Unix milliseconds) another replica holds the circuit open (0: it does not).
    shared_until: AtomicU64,
    /// Until when this replica opened it, not yet written to the store (0: nothing to write).
    opening: AtomicU64,
}

#[derive(Debug)]
enum State {
    /// Failures within the window, oldest first.
    Closed(VecDeque<Instant>),
    /// No request until then.
    Open(Instant),
    /// One trial request is out.
    HalfOpen,
}

/// What the breaker says to a request.
#[derive(Debug)]
pub(crate) enum Admit {
    /// Go ahead; report the outcome.
    Go(Ticket),
    /// The circuit is open (or its one trial is out): ask another provider.
    Refused,
}

/// An admitted request's duty to report its outcome; dropped unreported, a half-open trial
/// gives the next request its turn.
#[derive(Debug)]
pub(crate) struct Ticket {
    breaker: Arc<Breaker>,
    trial: bool,
    reported: bool,
}

impl Breaker {
    pub(crate) fn new(spec: Circuit, gauge: IntGauge) -> Arc<Breaker> {
        gauge.set(0);
        Arc::new(Breaker {
            spec,
            state: Mutex::new(State::Closed(VecDeque::new())),
            gauge,
            shared_until: AtomicU64::new(0),
            opening: AtomicU64::new(0),
        })
    }

    /// Whether [`Breaker::admit`] would refuse a request at `now`, without changing the
    /// state (an open circuit past its cooldown would admit a trial).
    pub(crate) fn refuses(&self, now: Instant) -> bool {
        let Ok(state) = self.state.lock() else {
            return true;
        };
        match &*state {
            State::Closed(_) => shared::unix_millis() < self.shared_until.load(Ordering::Relaxed),
            State::Open(until) => now < *until,
            State::HalfOpen => true,
        }
    }

    /// Whether a request may go to the provider at `now`.
    pub(crate) fn admit(self: &Arc<Self>, now: Instant) -> Admit {
        let Ok(mut state) = self.state.lock() else {
            return Admit::Refused;
        };
        let trial = match &*state {
            State::Closed(_)
                if shared::unix_millis() < self.shared_until.load(Ordering::Relaxed) =>
            {
                return Admit::Refused;
            }
            State::Closed(_) => false,
            State::Open(until) if now >= *until => {
                *state = State::HalfOpen;
                self.gauge.set(2);
                true
            }
            State::Open(_) | State::HalfOpen => return Admit::Refused,
        };
        Admit::Go(Ticket {
            breaker: self.clone(),
            trial,
            reported: false,
        })
    }

    fn record(&self, trial: bool, failed: bool, now: Instant) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        match (&mut *state, trial, failed) {
            (State::HalfOpen, true, false) => self.close(&mut state),
            (State::HalfOpen, true, true) => self.open(&mut state, now),
            (State::Closed(failures), false, true) => {
                while failures
                    .front()
                    .is_some_and(|at| now.duration_since(*at) >= self.spec.window)
                {
                    failures.pop_front();
                }
                failures.push_back(now);
                if failures.len() >= self.spec.failures as usize {
                    self.open(&mut state, now);
                }
            }
            // Successes while closed, and outcomes of requests admitted before the circuit
            // opened, change nothing.
            _ => {}
        }
    }

    fn open(&self, state: &mut State, now: Instant) {
        *state = State::Open(now + self.spec.cooldown);
        self.gauge.set(1);
        let cooldown = u64::try_from(self.spec.cooldown.as_millis()).unwrap_or(u64::MAX);
        self.opening.store(
            shared::unix_millis().saturating_add(cooldown),
            Ordering::Relaxed,
        );
    }

    /// This replica's opening not yet written to the store, if any.
    pub(crate) fn take_opening(&self) -> Option<u64> {
        Some(self.opening.swap(0, Ordering::Relaxed)).filter(|until| *until != 0)
    }

    /// An opening the store did not take: written at the next chance (unless a newer one
    /// came meanwhile).
    pub(crate) fn retry_opening(&self, until: u64) {
        let _ = self
            .opening
            .compare_exchange(0, until, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// What the store says: open until `until` (Unix milliseconds; 0 or past: not open).
    pub(crate) fn set_shared(&self, until: u64) {
        self.shared_until.store(until, Ordering::Relaxed);
        if let Ok(state) = self.state.lock()
            && matches!(*state, State::Closed(_))
        {
            self.gauge.set(i64::from(shared::unix_millis() < until));
        }
    }

    fn close(&self, state: &mut State) {
        *state = State::Closed(VecDeque::new());
        self.gauge.set(0);
    }

    /// A trial that ended without an outcome: open with its cooldown already over, so the
    /// next request is the trial.
    fn abandon(&self, now: Instant) {
        if let Ok(mut state) = self.state.lock()
            && matches!(*state, State::HalfOpen)
        {
            *state = State::Open(now);
            self.gauge.set(1);
        }
    }
}

impl Ticket {
    /// Reports the request's outcome at `now`.
    pub(crate) fn report(mut self, failed: bool, now: Instant) {
        self.reported = true;
        self.breaker.record(self.trial, failed, now);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.trial && !self.reported {
            self.breaker.abandon(crate::clock::coarse());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn breaker() -> Arc<Breaker> {
        let gauge = IntGauge::new("g", "g").unwrap();
        Breaker::new(
            Circuit {
                failures: 3,
                window: Duration::from_secs(10),
                cooldown: Duration::from_secs(5),
            },
            gauge,
        )
    }

    fn go(breaker: &Arc<Breaker>, now: Instant) -> Ticket {
        match breaker.admit(now) {
            Admit::Go(ticket) => ticket,
            Admit::Refused => panic!("refused"),
        }
    }

    #[test]
    fn failures_within_the_window_open_the_circuit_until_one_trial_closes_it() {
        let b = breaker();
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        // Two failures, then a third outside the window of the first: still closed.
        go(&b, t0).report(true, t0);
        go(&b, t0).report(true, t0 + s);
        go(&b, t0).report(true, t0 + 10 * s);
        assert!(matches!(b.admit(t0 + 10 * s), Admit::Go(_)));
        assert_eq!(b.gauge.get(), 0);
        assert!(!b.refuses(t0 + 10 * s));
        // A third within the window of the second: open.
        go(&b, t0).report(true, t0 + 10 * s);
        assert_eq!(b.gauge.get(), 1);
        assert!(b.refuses(t0 + 14 * s));
        assert!(matches!(b.admit(t0 + 14 * s), Admit::Refused));
        // After the cooldown it would admit a trial; asking changes nothing.
        assert!(!b.refuses(t0 + 15 * s));
        assert_eq!(b.gauge.get(), 1);
        // One trial, nobody else meanwhile.
        let trial = go(&b, t0 + 15 * s);
        assert_eq!(b.gauge.get(), 2);
        assert!(b.refuses(t0 + 15 * s));
        assert!(matches!(b.admit(t0 + 15 * s), Admit::Refused));
        // The trial fails: open for another cooldown.
        trial.report(true, t0 + 16 * s);
        assert!(matches!(b.admit(t0 + 20 * s), Admit::Refused));
        let trial = go(&b, t0 + 21 * s);
        trial.report(false, t0 + 21 * s);
        assert_eq!(b.gauge.get(), 0);
        assert!(matches!(b.admit(t0 + 21 * s), Admit::Go(_)));
    }

    #[test]
    fn an_abandoned_trial_lets_the_next_request_try() {
        let b = breaker();
        let t0 = Instant::now();
        for _ in 0..3 {
            go(&b, t0).report(true, t0);
        }
        let later = t0 + Duration::from_secs(6);
        drop(go(&b, later));
        assert!(matches!(b.admit(Instant::now().max(later)), Admit::Go(_)));
    }
}
