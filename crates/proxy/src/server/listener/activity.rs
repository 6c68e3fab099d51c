//! A connection's phase (waiting, head, busy) and its header and idle deadlines: the
//! [`Activity`] its socket, its service and its watchdog share.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Closed, Limits};

/// What a connection is doing, for its header and idle deadlines.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for the first byte of a request head (`fresh`: no request yet).
    Waiting { since: Instant, fresh: bool },
    /// A request head has started arriving.
    Head { since: Instant },
    /// Requests in progress: head parsed, response not yet fully written.
    Busy { requests: usize },
}

/// A connection's phase, shared by its socket, its service and its watchdog.
///
/// Phase changes (three per request) only update the phase: they neither wake
/// the watchdog nor touch a timer. The watchdog sleeps until the earliest
/// instant at which the connection could possibly expire ([`Activity::next_check`])
/// and looks again then, so a busy connection costs one timer per
/// `min(header_read_timeout, idle_timeout)`, not several per request.
#[derive(Debug)]
pub(super) struct Activity {
    phase: Mutex<Phase>,
}

impl Activity {
    pub(super) fn new() -> Activity {
        Activity {
            phase: Mutex::new(Phase::Waiting {
                since: crate::clock::coarse_tokio(),
                fresh: true,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Phase> {
        self.phase
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set(&self, mut phase: MutexGuard<'_, Phase>, next: Phase) {
        *phase = next;
    }

    /// Bytes arrived on the socket.
    pub(super) fn received(&self) {
        let phase = self.lock();
        if let Phase::Waiting { since, fresh } = *phase {
            // A new connection's head deadline counts from accept.
            let since = if fresh {
                since
            } else {
                crate::clock::coarse_tokio()
            };
            self.set(phase, Phase::Head { since });
        }
    }

    /// A request head was parsed; the guard ends the request when dropped.
    pub(super) fn begin_request(self: &Arc<Self>) -> RequestGuard {
        let phase = self.lock();
        let requests = match *phase {
            Phase::Busy { requests } => requests.saturating_add(1),
            _ => 1,
        };
        self.set(phase, Phase::Busy { requests });
        RequestGuard(self.clone())
    }

    fn end_request(&self) {
        let phase = self.lock();
        let next = match *phase {
            Phase::Busy { requests } if requests > 1 => Phase::Busy {
                requests: requests - 1,
            },
            _ => Phase::Waiting {
                since: crate::clock::coarse_tokio(),
                fresh: false,
            },
        };
        self.set(phase, next);
    }

    pub(super) fn deadline(&self, limits: Limits) -> Option<(Instant, Closed)> {
        match *self.lock() {
            Phase::Waiting { since, fresh: true } | Phase::Head { since } => {
                Some((since + limits.header_read_timeout, Closed::HeaderTimeout))
            }
            Phase::Waiting {
                since,
                fresh: false,
            } => Some((since + limits.idle_timeout, Closed::IdleTimeout)),
            Phase::Busy { .. } => None,
        }
    }

    /// The phase's deadline if it has passed at `now`, else the earliest
    /// instant at which the connection could expire, whatever happens meanwhile:
    ///
    /// - a new connection or a head in progress: its header deadline, or
    ///   `now + idle_timeout` if sooner (the request may start and end at once,
    ///   leaving the connection idle);
    /// - kept alive and waiting: its idle deadline, or `now + header_read_timeout`
    ///   if sooner (a request head may start at once);
    /// - busy: `now` plus the shorter timeout (the request may end at any moment).
    pub(super) fn next_check(&self, limits: Limits, now: Instant) -> Result<Instant, Closed> {
        let shortest = limits.header_read_timeout.min(limits.idle_timeout);
        match self.deadline(limits) {
            Some((at, reason)) if now >= at => Err(reason),
            Some((at, Closed::IdleTimeout)) => Ok(at.min(now + limits.header_read_timeout)),
            Some((at, _)) => Ok(at.min(now + limits.idle_timeout)),
            None => Ok(now + shortest),
        }
    }

    /// Resolves once the current phase outlives its deadline.
    pub(super) async fn expired(&self, limits: Limits) -> Closed {
        let sleep = tokio::time::sleep(Duration::ZERO);
        let mut sleep = std::pin::pin!(sleep);
        loop {
            match self.next_check(limits, Instant::now()) {
                Err(reason) => return reason,
                Ok(at) => {
                    sleep.as_mut().reset(at);
                    sleep.as_mut().await;
                }
            }
        }
    }
}

/// Ends its request when dropped (the response body is written or abandoned).
pub(super) struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.end_request();
    }
}
