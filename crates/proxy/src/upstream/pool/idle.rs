//! A pool's idle connections: a stack, the most recently used last, at most
//! [`super::MAX_IDLE`], each closed (dropped) once idle longer than the pool's
//! idle timeout, by the next request or by the sweep.

use std::sync::Weak;
use std::time::{Duration, Instant};

use super::{Connection, MAX_IDLE, Pool};

/// An idle connection and since when it is idle.
#[derive(Debug)]
pub(super) struct Idle {
    pub(super) connection: Connection,
    /// On the coarse clock (`clock::coarse`), as every reading compared with it.
    pub(super) since: Instant,
}

impl Pool {
    /// Keeps a connection whose answer was read to its end.
    pub(super) fn put(&self, connection: Connection) {
        let Ok(mut idle) = self.idle.lock() else {
            return;
        };
        let now = crate::clock::coarse();
        self.drop_expired(&mut idle, now);
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                connection,
                since: now,
            });
        }
    }

    /// The number of idle connections kept.
    #[cfg(test)]
    pub(super) fn idle(&self) -> usize {
        self.idle.lock().map_or(0, |idle| idle.len())
    }

    /// The most recently used idle connection.
    pub(super) fn take(&self) -> Option<Idle> {
        self.idle.lock().ok()?.pop()
    }

    /// Closes the idle connections older than the idle timeout (dropping one closes it).
    pub(super) fn expire(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            self.drop_expired(&mut idle, crate::clock::coarse());
        }
    }

    /// Drops the connections idle longer than the idle timeout at `now`.
    pub(super) fn drop_expired(&self, idle: &mut Vec<Idle>, now: Instant) {
        idle.retain(|entry| now.saturating_duration_since(entry.since) <= self.idle_timeout);
    }

    /// Expires idle connections every half idle timeout until the pool is dropped.
    pub(super) async fn sweep(pool: Weak<Pool>, every: Duration) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(pool) = pool.upgrade() else { return };
            pool.expire();
        }
    }
}
