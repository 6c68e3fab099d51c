//! The process-wide budget on the bytes requests hold (`server.max_decoded_bytes_in_flight`):
//! the wire bytes as they are read, the decoded body, the parsed parts and the upstream body
//! of every request in flight, counted in one `tokio::sync::Semaphore` of KiB permits.
//!
//! A request takes its share before it holds the bytes ([`Hold::grow`]) and gives it back as
//! it drops them ([`Hold::release`]) or, whatever way it ends (an answer, an error, a timeout,
//! a client that went away: the handler's future is dropped), when its [`Hold`] is dropped.
//! A request that cannot get its share waits, at most `server.decoded_bytes_queue_timeout_ms`
//! over all its waits, then gets 503 with `retry-after`; one whose bytes alone would exceed
//! the whole budget gets 413 at once.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus::{IntCounterVec, IntGauge};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::error::Error;

/// A permit's worth of bytes.
const KIB: usize = 1024;

/// Why a request was refused its share (the `reason` label of
/// `releasegate_requests_shed_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shed {
    /// Its share did not free up within the queue timeout (503).
    BudgetTimeout,
    /// Its bytes alone exceed the whole budget (413).
    TooLargeForBudget,
    /// Its recipient's `max_in_flight` was reached (429).
    RecipientInFlight,
}

impl Shed {
    /// Every reason, in label order.
    pub(crate) const ALL: [Shed; 3] = [
        Shed::BudgetTimeout,
        Shed::TooLargeForBudget,
        Shed::RecipientInFlight,
    ];

    /// Its label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Shed::BudgetTimeout => "budget_timeout",
            Shed::TooLargeForBudget => "too_large_for_budget",
            Shed::RecipientInFlight => "recipient_in_flight",
        }
    }
}

/// The budget, shared by every request of the process.
#[derive(Debug)]
pub(crate) struct Budget {
    permits: Arc<Semaphore>,
    /// The budget in bytes.
    limit: usize,
    queue_timeout: Duration,
    /// `releasegate_request_bytes_in_use`: the permits taken, in bytes.
    in_use: IntGauge,
    /// `releasegate_requests_shed_total{reason}`.
    shed: IntCounterVec,
}

/// One request's share of the budget; dropping it gives the share back.
#[derive(Debug)]
pub(crate) struct Hold<'b> {
    budget: &'b Budget,
    state: Mutex<State>,
}

/// What a hold has taken.
#[derive(Debug, Default)]
struct State {
    /// The bytes the request holds.
    bytes: usize,
    /// The permits (KiB) taken for them: `bytes` rounded up.
    permits: usize,
    /// How long the request has waited for permits so far.
    waited: Duration,
}

impl Budget {
    /// A budget of `limit` bytes; a request waits at most `queue_timeout` for its share.
    pub(crate) fn new(
        limit: usize,
        queue_timeout: Duration,
        in_use: IntGauge,
        shed: IntCounterVec,
    ) -> Budget {
        // At most 2^40 KiB (validation allows 1 TiB): far below `Semaphore::MAX_PERMITS`.
        let limit = limit.clamp(KIB, 1 << 50);
        Budget {
            permits: Arc::new(Semaphore::new(limit.div_ceil(KIB))),
            limit,
            queue_timeout,
            in_use,
            shed,
        }
    }

    /// The budget in bytes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// A budget no request reaches (1 TiB), counted nowhere: for parsers run outside a
    /// server (tests, the fuzz wrappers).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn unbounded() -> Budget {
        let in_use = IntGauge::new("unbounded_in_use", "unbounded").expect("a valid name");
        let shed = IntCounterVec::new(
            prometheus::Opts::new("unbounded_shed", "unbounded"),
            &["reason"],
        )
        .expect("a valid name");
        Budget::new(1 << 40, Duration::ZERO, in_use, shed)
    }

    /// An empty share for one request.
    pub(crate) fn hold(&self) -> Hold<'_> {
        Hold {
            budget: self,
            state: Mutex::new(State::default()),
        }
    }

    /// Counts a refusal.
    pub(crate) fn count(&self, reason: Shed) {
        self.shed.with_label_values(&[reason.label()]).inc();
    }

    /// The whole seconds a refused request is told to wait: the queue timeout rounded up,
    /// at least 1.
    fn retry_after(&self) -> u64 {
        let millis = u64::try_from(self.queue_timeout.as_millis()).unwrap_or(u64::MAX);
        millis.div_ceil(1000).max(1)
    }

    fn give_back(&self, permits: usize) {
        if permits > 0 {
            self.permits.add_permits(permits);
            self.in_use
                .sub(i64::try_from(permits * KIB).unwrap_or(i64::MAX));
        }
    }
}

impl Hold<'_> {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bytes this request holds.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.state().bytes
    }

    /// Takes `bytes` more before the request holds them: at once when the budget has them,
    /// else after waiting (at most what is left of the queue timeout). 413 when the request's
    /// bytes would exceed the whole budget, 503 when the wait runs out.
    pub(crate) async fn grow(&self, bytes: usize) -> Result<(), Error> {
        let budget = self.budget;
        let (needed, waited) = {
            let state = self.state();
            let total = state.bytes.saturating_add(bytes);
            if total > budget.limit {
                drop(state);
                budget.count(Shed::TooLargeForBudget);
                return Err(Error::TooLargeForBudget(budget.limit));
            }
            (
                total.div_ceil(KIB).saturating_sub(state.permits),
                state.waited,
            )
        };
        if needed > 0 {
            // At most the whole budget (checked above), far below u32::MAX KiB.
            let count = u32::try_from(needed).map_err(|_| Error::Internal)?;
            let permit = match budget.permits.try_acquire_many(count) {
                Ok(permit) => permit,
                Err(_) => {
                    let started = Instant::now();
                    let left = budget.queue_timeout.saturating_sub(waited);
                    let acquired =
                        tokio::time::timeout(left, budget.permits.acquire_many(count)).await;
                    self.state().waited += started.elapsed();
                    match acquired {
                        Ok(Ok(permit)) => permit,
                        _ => {
                            budget.count(Shed::BudgetTimeout);
                            return Err(Error::Busy(budget.retry_after()));
                        }
                    }
                }
            };
            permit.forget();
            budget
                .in_use
                .add(i64::try_from(needed * KIB).unwrap_or(i64::MAX));
        }
        let mut state = self.state();
        state.permits += needed;
        state.bytes = state.bytes.saturating_add(bytes);
        Ok(())
    }

    /// Gives back the share of `bytes` the request no longer holds.
    pub(crate) fn release(&self, bytes: usize) {
        let surplus = {
            let mut state = self.state();
            state.bytes = state.bytes.saturating_sub(bytes);
            let surplus = state.permits.saturating_sub(state.bytes.div_ceil(KIB));
            state.permits -= surplus;
            surplus
        };
        self.budget.give_back(surplus);
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let permits = std::mem::take(&mut self.state().permits);
        self.budget.give_back(permits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: usize, queue_timeout: Duration) -> Budget {
        let metrics = crate::metrics::Metrics::new().unwrap();
        Budget::new(
            limit,
            queue_timeout,
            metrics.request_bytes_in_use.clone(),
            metrics.requests_shed.clone(),
        )
    }

    fn shed(budget: &Budget, reason: Shed) -> u64 {
        budget.shed.with_label_values(&[reason.label()]).get()
    }

    #[tokio::test]
    async fn shares_are_taken_and_given_back() {
        let budget = budget(64 * KIB, Duration::from_millis(50));
        let hold = budget.hold();
        hold.grow(10 * KIB + 1).await.unwrap();
        assert_eq!(hold.bytes(), 10 * KIB + 1);
        assert_eq!(budget.in_use.get(), 11 * 1024);
        assert_eq!(budget.permits.available_permits(), 53);
        hold.release(KIB);
        assert_eq!(budget.in_use.get(), 10 * 1024);
        hold.release(usize::MAX);
        assert_eq!(hold.bytes(), 0);
        assert_eq!(budget.permits.available_permits(), 64);
        hold.grow(30 * KIB).await.unwrap();
        drop(hold);
        assert_eq!(budget.in_use.get(), 0);
        assert_eq!(budget.permits.available_permits(), 64);
    }

    #[tokio::test]
    async fn a_request_over_the_whole_budget_is_refused_at_once() {
        let budget = budget(64 * KIB, Duration::from_secs(3600));
        let hold = budget.hold();
        hold.grow(60 * KIB).await.unwrap();
        let refused = hold.grow(4 * KIB + 1).await;
        assert!(matches!(refused, Err(Error::TooLargeForBudget(limit)) if limit == 64 * KIB));
        assert_eq!(shed(&budget, Shed::TooLargeForBudget), 1);
        // What it had stays taken until it is dropped.
        assert_eq!(budget.in_use.get(), 60 * 1024);
        drop(hold);
        assert_eq!(budget.in_use.get(), 0);
    }

    #[tokio::test]
    async fn a_request_waits_for_a_share_then_gets_it() {
        let budget = Arc::new(budget(64 * KIB, Duration::from_secs(3600)));
        let first = budget.hold();
        first.grow(48 * KIB).await.unwrap();
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move {
                let second = budget.hold();
                second.grow(32 * KIB).await.map(|()| second.bytes())
            })
        };
        // It waits: nothing else frees the share.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished());
        drop(first);
        assert_eq!(waiting.await.unwrap().unwrap(), 32 * KIB);
        assert_eq!(budget.in_use.get(), 0);
        assert_eq!(shed(&budget, Shed::BudgetTimeout), 0);
    }

    #[tokio::test]
    async fn a_wait_past_the_queue_timeout_is_busy_and_the_waits_add_up() {
        let queue_timeout = Duration::from_millis(20);
        let budget = budget(64 * KIB, queue_timeout);
        let first = budget.hold();
        first.grow(60 * KIB).await.unwrap();
        let second = budget.hold();
        second.grow(2 * KIB).await.unwrap();
        assert!(matches!(second.grow(8 * KIB).await, Err(Error::Busy(1))));
        assert!(second.state().waited >= queue_timeout);
        // The queue timeout is spent: a second wait is refused too, and nothing was taken.
        assert!(matches!(second.grow(8 * KIB).await, Err(Error::Busy(1))));
        assert_eq!(shed(&budget, Shed::BudgetTimeout), 2);
        assert_eq!(budget.in_use.get(), 62 * 1024);
        // Growing within what is free still works.
        second.grow(KIB).await.unwrap();
        drop((first, second));
        assert_eq!(budget.in_use.get(), 0);
        assert_eq!(budget.permits.available_permits(), 64);
    }

    #[tokio::test]
    async fn a_request_dropped_while_waiting_gives_back_what_it_held() {
        let budget = Arc::new(budget(64 * KIB, Duration::from_secs(3600)));
        let first = budget.hold();
        first.grow(40 * KIB).await.unwrap();
        let task = {
            let budget = budget.clone();
            tokio::spawn(async move {
                let hold = budget.hold();
                hold.grow(20 * KIB).await.unwrap();
                // Never satisfied: the task is aborted while it waits (a client gone).
                hold.grow(20 * KIB).await
            })
        };
        while budget.in_use.get() < 60 * 1024 {
            tokio::task::yield_now().await;
        }
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(budget.in_use.get(), 40 * 1024);
        drop(first);
        assert_eq!(budget.permits.available_permits(), 64);
    }
}
