//! Circuits shared across replicas through the Redis of `[rate_limit_store]`.
//!
//! A replica that opens a provider's circuit writes when it reopens (`KEY_PREFIX:circuit:NAME`
//! = Unix milliseconds, expiring with the cooldown); every replica reads every provider's key
//! every [`EVERY`] and refuses requests to a provider another replica has opened until then
//! (so a circuit opened on one replica stops the others within twice that). The half-open
//! trial stays each replica's own. When the store does not answer, each replica keeps its own
//! circuits (they never stop working) and `releasegate_circuit_store_degraded` says so, until
//! the store answers again. One task per configuration generation; it ends with the breakers.

use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus::IntGauge;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::Breaker;
use releasegate_core::config::RateLimitStore;

/// How often the store is read (and a replica's openings written).
pub(crate) const EVERY: Duration = Duration::from_millis(250);

/// Milliseconds since the Unix epoch (the clock replicas share).
pub(crate) fn unix_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Starts the task sharing `breakers` (by provider name) through `settings`' store, on the
/// current runtime (none: nothing is shared).
pub(crate) fn start(
    settings: &RateLimitStore,
    breakers: &[(String, Arc<Breaker>)],
    degraded: IntGauge,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let client = crate::ratelimit::store::client(settings);
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(settings.timeout()))
        .set_response_timeout(Some(settings.timeout()))
        .set_number_of_retries(0);
    let Ok(connection) =
        client.and_then(|client| ConnectionManager::new_lazy_with_config(client, config))
    else {
        degraded.set(1);
        return;
    };
    let prefix = settings.key_prefix();
    let shared: Vec<(String, Weak<Breaker>)> = breakers
        .iter()
        .map(|(name, breaker)| (format!("{prefix}:circuit:{name}"), Arc::downgrade(breaker)))
        .collect();
    degraded.set(0);
    runtime.spawn(run(connection, shared, degraded, settings.timeout()));
}

async fn run(
    mut connection: ConnectionManager,
    breakers: Vec<(String, Weak<Breaker>)>,
    degraded: IntGauge,
    timeout: Duration,
) {
    let mut ticks = tokio::time::interval(EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let alive: Vec<(&str, Arc<Breaker>)> = breakers
            .iter()
            .filter_map(|(key, breaker)| Some((key.as_str(), breaker.upgrade()?)))
            .collect();
        if alive.is_empty() {
            return;
        }
        let exchanged = tokio::time::timeout(timeout * 2, exchange(&mut connection, &alive)).await;
        degraded.set(i64::from(!matches!(exchanged, Ok(Ok(())))));
    }
}

/// Writes this replica's new openings, then reads every provider's.
async fn exchange(
    connection: &mut ConnectionManager,
    breakers: &[(&str, Arc<Breaker>)],
) -> redis::RedisResult<()> {
    let now = unix_millis();
    for (key, breaker) in breakers {
        if let Some(until) = breaker.take_opening() {
            let ttl = until.saturating_sub(now).max(1);
            let written: redis::RedisResult<()> = redis::cmd("SET")
                .arg(key)
                .arg(until)
                .arg("PX")
                .arg(ttl)
                .query_async(connection)
                .await;
            if let Err(error) = written {
                // Written at the next tick instead.
                breaker.retry_opening(until);
                return Err(error);
            }
        }
    }
    let keys: Vec<&str> = breakers.iter().map(|(key, _)| *key).collect();
    let values: Vec<Option<u64>> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(connection)
        .await?;
    for ((_, breaker), until) in breakers.iter().zip(values) {
        breaker.set_shared(until.unwrap_or(0));
    }
    Ok(())
}
