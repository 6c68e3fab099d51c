//! The shared store of `[rate_limit_store] kind = "redis"`: one token bucket per recipient
//! (and limit) in Redis, refilled and taken by one Lua script on the store's clock.
//!
//! Each event loop has its own connection (a `redis` connection manager, created on that
//! loop's runtime at its first call and reconnecting by itself), so a call never crosses
//! threads, like the upstream clients. Whether the store answers is the replica's, not a
//! loop's: one flag for all the loops. Every call is bounded by `timeout_ms`; a failure or a
//! timeout makes the replica limit on its own (`Limits::local`) and raises
//! `releasegate_rate_limit_store_degraded` until a call succeeds again: after a failure, one
//! request per `retry_interval_ms` tries the store while the others go straight to the local
//! bucket, so an unreachable store costs at most one timeout per interval.
//!
//! When that one call succeeds, every loop goes back to the store, including loops whose
//! connection died with the outage and was not used since (or whose last reconnection failed
//! during it): their first call finds the connection gone, and the manager's new one is tried
//! once more within the same `timeout_ms` before anything counts as a failure. Without that
//! retry, each such loop's first call would mark the whole replica degraded again and send
//! its requests to the local buckets while the store answers.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus::{IntCounterVec, IntGauge};
use redis::IntoConnectionInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use secrecy::ExposeSecret;

use releasegate_core::config::{RateLimit, RateLimitStore};

/// Refills the bucket `KEYS[1]` at `ARGV[1]` tokens per second up to `ARGV[2]` (its burst)
/// since its last use, by the store's own clock, takes the `ARGV[3]` tokens a replica owes
/// it (granted on its own while the store did not answer; never below empty), and takes one
/// token if there is one. Returns `{1, 0}` (taken) or `{0, µs until a token is back}`. Idle
/// buckets expire once they would be full again.
const TOKEN_BUCKET: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local owed = tonumber(ARGV[3]) or 0
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) * rate / 1000000)
  at = now
end
if owed > 0 then
  tokens = math.max(0, tokens - owed)
end
local taken = 0
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
  taken = 1
else
  wait = math.ceil((1 - tokens) * 1000000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'at', string.format('%d', at))
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(burst * 1000 / rate) + 1000))
return {taken, wait}
";

/// The store, its connections (one per event loop) and its health.
pub(crate) struct Store {
    settings: RateLimitStore,
    client: Option<redis::Client>,
    script: redis::Script,
    /// One connection per event loop, made at the loop's first call.
    connections: Vec<Mutex<Option<ConnectionManager>>>,
    /// Whether the last call failed (the replica limits on its own meanwhile).
    degraded: AtomicBool,
    /// Replaced or removed by a reload: the gauge is no longer this store's to set.
    retired: AtomicBool,
    /// While degraded: milliseconds since `epoch` before which nobody calls the store.
    retry_at: AtomicU64,
    epoch: Instant,
    gauge: IntGauge,
    errors: IntCounterVec,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.settings.url())
            .field("degraded", &self.degraded.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A client of the store `settings` names, with its password from the environment (read
/// at load). The rate limits and the shared circuits (`upstream::circuit::shared`) use it.
pub(crate) fn client(settings: &RateLimitStore) -> redis::RedisResult<redis::Client> {
    settings
        .url()
        .into_connection_info()
        .map(|info| match settings.password() {
            Some(password) => {
                let redis = info
                    .redis_settings()
                    .clone()
                    .set_password(password.expose_secret());
                info.set_redis_settings(redis)
            }
            None => info,
        })
        .and_then(redis::Client::open)
}

impl Store {
    /// A store for `settings` with one connection slot per event loop (nothing connects
    /// yet: an unreachable store never stops a start or a reload).
    pub(crate) fn new(
        settings: &RateLimitStore,
        metrics: &crate::metrics::Metrics,
        loops: usize,
    ) -> Store {
        let client = client(settings)
            .inspect_err(|error| {
                // Validation accepts only what parses; should it not, every call degrades.
                tracing::error!(%error, "rate_limit_store.url cannot be used: limits stay per replica");
            })
            .ok();
        metrics.rate_limit_store_degraded.set(0);
        Store {
            settings: settings.clone(),
            client,
            script: redis::Script::new(TOKEN_BUCKET),
            connections: (0..loops.max(1)).map(|_| Mutex::new(None)).collect(),
            degraded: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            retry_at: AtomicU64::new(0),
            epoch: Instant::now(),
            gauge: metrics.rate_limit_store_degraded.clone(),
            errors: metrics.rate_limit_store_errors.clone(),
        }
    }

    /// Whether this store was built for `settings` (a reload keeps it then).
    pub(crate) fn serves(&self, settings: &RateLimitStore) -> bool {
        let password = |s: &RateLimitStore| s.password().map(|p| p.expose_secret().to_string());
        self.settings.url() == settings.url()
            && password(&self.settings) == password(settings)
            && self.settings.timeout() == settings.timeout()
            && self.settings.retry_interval() == settings.retry_interval()
            && self.settings.key_prefix() == settings.key_prefix()
    }

    /// A reload replaced or removed this store: requests still in flight on it no longer
    /// move the gauge, which is the new store's (or 0 when there is none).
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
        self.gauge.set(0);
    }

    /// Takes a token of `recipient`'s shared bucket, after the `owed` tokens this replica
    /// granted on its own: `Some(Ok)`, `Some(Err(wait))` when it is empty, `None` when the
    /// store did not answer in time (the caller limits locally, and still owes `owed`).
    pub(crate) async fn take(
        &self,
        recipient: &str,
        limit: RateLimit,
        owed: u32,
    ) -> Option<Result<(), Duration>> {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        if self.degraded.load(Ordering::Acquire) {
            // One caller per interval probes the store; the others stay local.
            let at = self.retry_at.load(Ordering::Acquire);
            let next = now.saturating_add(
                u64::try_from(self.settings.retry_interval().as_millis()).unwrap_or(u64::MAX),
            );
            if now < at
                || self
                    .retry_at
                    .compare_exchange(at, next, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
            {
                return None;
            }
        }
        let call = self.call(recipient, limit, owed);
        match tokio::time::timeout(self.settings.timeout(), call).await {
            Ok(Ok((taken, wait_us))) => {
                self.healthy();
                Some(if taken == 1 {
                    Ok(())
                } else {
                    Err(Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)))
                })
            }
            Ok(Err(error)) => {
                let kind = if error.is_timeout() {
                    "timeout"
                } else {
                    "error"
                };
                self.failed(now, kind, &error);
                None
            }
            Err(_) => {
                self.failed(
                    now,
                    "timeout",
                    &"no answer within rate_limit_store.timeout_ms",
                );
                None
            }
        }
    }

    async fn call(
        &self,
        recipient: &str,
        limit: RateLimit,
        owed: u32,
    ) -> redis::RedisResult<(i64, i64)> {
        let mut connection = self.connection()?;
        let key = format!(
            "{}:rl:{recipient}:{}:{}",
            self.settings.key_prefix(),
            limit.requests_per_second(),
            limit.burst()
        );
        let mut invocation = self.script.key(key);
        invocation
            .arg(limit.requests_per_second().to_string())
            .arg(limit.burst())
            .arg(owed);
        match invocation.invoke_async(&mut connection).await {
            // The connection died with an outage this loop did not see end (or its last
            // reconnection failed during it): the manager has started a new one, tried once.
            // The first try took nothing unless the store ran the script and only its answer
            // was lost; the retry then takes its token (and what is owed) a second time:
            // refusing sooner, never later.
            Err(error) if connection_lost(&error) => invocation.invoke_async(&mut connection).await,
            result => result,
        }
    }

    /// This event loop's connection, made on first use (on this loop's runtime).
    fn connection(&self) -> redis::RedisResult<ConnectionManager> {
        let index = crate::upstream::event_loop().min(self.connections.len() - 1);
        let mut slot = self.connections[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let client = self.client.clone().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "unusable rate_limit_store.url"))
        })?;
        let timeout = self.settings.timeout();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            // No retries inside a call: the call's own timeout and retry_interval_ms decide.
            .set_number_of_retries(0);
        let connection = ConnectionManager::new_lazy_with_config(client, config)?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    fn healthy(&self) {
        if self.degraded.swap(false, Ordering::AcqRel) {
            if !self.retired.load(Ordering::Acquire) {
                self.gauge.set(0);
            }
            tracing::info!(
                url = self.settings.url(),
                "rate limit store reachable again: rate limits are shared across replicas"
            );
        }
    }

    fn failed(&self, now: u64, kind: &'static str, error: &dyn std::fmt::Display) {
        self.errors.with_label_values(&[kind]).inc();
        let next = now.saturating_add(
            u64::try_from(self.settings.retry_interval().as_millis()).unwrap_or(u64::MAX),
        );
        self.retry_at.fetch_max(next, Ordering::AcqRel);
        if !self.degraded.swap(true, Ordering::AcqRel) {
            if !self.retired.load(Ordering::Acquire) {
                self.gauge.set(1);
            }
            tracing::warn!(
                url = self.settings.url(),
                %error,
                "rate limit store unreachable: rate limits are per replica until it answers"
            );
        }
    }
}

/// Whether `error` says this loop's connection is gone (dropped, refused, or a reconnection
/// that failed earlier), after which the connection manager tries a new one: worth one more
/// call. A timeout is not (the call's time is spent).
fn connection_lost(error: &redis::RedisError) -> bool {
    error.is_io_error() && !error.is_timeout()
}
