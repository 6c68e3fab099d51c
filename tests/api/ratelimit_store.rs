//! Rate limits shared across replicas through a real `redis-server` (Debian's package), which
//! these tests start and stop themselves on a free loopback port: two proxies sharing one
//! store hold the global limit; the store stopping mid-run degrades each replica to its own
//! limit (never to none) and raises the gauge; the store coming back restores the global
//! limit on every event loop of both replicas, and what the replicas granted on their own
//! meanwhile is paid to it. Skipped, saying why, only when `redis-server` is not installed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::helpers::{
    CLIENT_KEY, MULTI_KEY, Recipient, TestApp, TestConfig, error_of, recipient, request, scratch,
    spawn_upstream, start,
};

/// The key of "refill": one token every 500 ms, a burst of 1.
const REFILL_KEY: &str = "client-key-refill";

/// A `redis-server` of this test's own, without persistence, on 127.0.0.1.
pub(crate) struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    /// Starts one on a free port; `None` (saying so) when redis-server is not installed.
    pub(crate) fn start() -> Option<Redis> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Redis::start_on(port)
    }

    fn start_on(port: u16) -> Option<Redis> {
        let child = match Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                eprintln!(
                    "SKIPPED: redis-server is not installed (Debian package redis-server; .ci/run installs it)"
                );
                return None;
            }
            Err(error) => panic!("redis-server: {error}"),
        };
        let mut redis = Redis { child, port };
        // Bounded: a healthy redis-server answers within milliseconds.
        for _ in 0..200 {
            if redis.ping() {
                return Some(redis);
            }
            if let Ok(Some(status)) = redis.child.try_wait() {
                panic!("redis-server exited with {status} (port {port} taken?)");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = redis.child.kill();
        panic!("redis-server did not answer PING on port {port}");
    }

    fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops it at once (SIGKILL): the store vanishing mid-run.
    pub(crate) fn kill(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy whose recipient "limited" (CLIENT_KEY) has a burst of `burst` and no refill to
/// speak of (one token per 1000 s), and "probe" (MULTI_KEY) a large limit, all through the
/// store at `url`.
async fn proxy(
    base_url: &str,
    url: &str,
    burst: u32,
    upstream: super::helpers::Upstream,
) -> TestApp {
    proxy_with(base_url, url, burst, 2000, upstream).await
}

async fn proxy_with(
    base_url: &str,
    url: &str,
    burst: u32,
    timeout_ms: u64,
    upstream: super::helpers::Upstream,
) -> TestApp {
    let text = config(base_url, url, burst, timeout_ms);
    start(releasegate_proxy::load::from_toml(&text).unwrap(), upstream).await
}

/// The configuration of [`proxy_with`].
fn config(base_url: &str, url: &str, burst: u32, timeout_ms: u64) -> String {
    let refill = limited("refill", REFILL_KEY, "requests_per_second = 2, burst = 1");
    store_config(base_url, url, burst, timeout_ms, 2, Some(refill))
}

/// A recipient bound to "main" with the rate limit `rate_limit` (TOML inline table body).
fn limited(name: &'static str, key: &'static str, rate_limit: &str) -> Recipient {
    Recipient {
        lines: format!("rate_limit = {{ {rate_limit} }}"),
        ..recipient(name, key, &["main"])
    }
}

/// A proxy on `loops` event loops whose limits live in the store at `url`: "limited"
/// (CLIENT_KEY, `burst` tokens, next to no refill), `extra` when given, and "probe"
/// (MULTI_KEY, a large limit).
fn store_config(
    base_url: &str,
    url: &str,
    burst: u32,
    timeout_ms: u64,
    loops: usize,
    extra: Option<Recipient>,
) -> String {
    let mut recipients = vec![limited(
        "limited",
        CLIENT_KEY,
        &format!("requests_per_second = 0.001, burst = {burst}"),
    )];
    recipients.extend(extra);
    recipients.push(limited(
        "probe",
        MULTI_KEY,
        "requests_per_second = 1000, burst = 1000",
    ));
    TestConfig {
        server: format!("shutdown_grace_ms = 500\nworker_threads = {loops}"),
        max_body_bytes: None,
        tables: format!(
            "[rate_limit_store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout_ms = {timeout_ms}\nretry_interval_ms = 50"
        ),
        provider_extra: "timeout_ms = 5000".into(),
        provider_key: false,
        recipients,
        view: "choice".into(),
        other: false,
        ..TestConfig::default()
    }
    .toml(base_url)
}

/// Status of one request by `key` to `app`; a 200 carries the released answer.
async fn send(app: &TestApp, key: &str) -> u16 {
    let response = app
        .post_raw(
            serde_json::to_vec(&request()).unwrap(),
            &[("authorization", &format!("Bearer {key}"))],
        )
        .await;
    let status = response.status().as_u16();
    match status {
        200 => {
            let body: serde_json::Value = response.json().await.unwrap();
            assert!(body["answers"]["cause"]["choice"].is_string(), "{body}");
        }
        429 => {
            assert!(response.headers().contains_key("retry-after"));
            let (_, error_type, _) = error_of(response).await;
            assert_eq!(error_type, "rate_limited");
        }
        other => panic!("unexpected status {other}"),
    }
    status
}

fn gauge(metrics: &str) -> Option<i64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("releasegate_rate_limit_store_degraded "))
        .and_then(|value| value.trim().parse().ok())
}

/// Sends probe requests (whose own limit is never reached) until `app`'s gauge reads
/// `value`; a hang guard only bounds the loop.
async fn until_gauge(app: &TestApp, value: i64) {
    for _ in 0..400 {
        send(app, MULTI_KEY).await;
        if gauge(&app.metrics().await) == Some(value) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the degraded gauge never read {value}");
}

/// Alternates `n` requests of "limited" between the two proxies; the statuses in order.
async fn alternate(a: &TestApp, b: &TestApp, n: usize) -> Vec<u16> {
    let mut statuses = Vec::new();
    for i in 0..n {
        statuses.push(send(if i % 2 == 0 { a } else { b }, CLIENT_KEY).await);
    }
    statuses
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_limit_degrade_to_their_own_and_share_it_again() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let (upstream, base_url) = spawn_upstream().await;
    let a = proxy(&base_url, &redis.url(), 4, upstream.clone()).await;
    let b = proxy(&base_url, &redis.url(), 4, upstream.clone()).await;

    // One bucket for both: 4 of 10 requests go through, not 4 per replica.
    let statuses = alternate(&a, &b, 10).await;
    assert_eq!(count(&statuses, 200), 4, "{statuses:?}");
    assert_eq!(&statuses[..4], &[200; 4], "{statuses:?}");
    assert_eq!(count(&statuses, 429), 6);
    for app in [&a, &b] {
        assert_eq!(gauge(&app.metrics().await), Some(0));
    }
    let seen = upstream.seen.lock().unwrap().len();
    assert_eq!(seen, 4, "only allowed requests reach the provider");

    // The store stops: each replica limits on its own (its full local burst of 4), never
    // unlimited, and says so in its gauge.
    let port = redis.kill();
    for app in [&a, &b] {
        until_gauge(app, 1).await;
    }
    let statuses = alternate(&a, &b, 12).await;
    assert_eq!(count(&statuses, 200), 8, "4 per replica: {statuses:?}");
    assert_eq!(count(&statuses, 429), 4, "{statuses:?}");
    let metrics = a.metrics().await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("releasegate_rate_limit_store_errors_total{kind=")
                && !l.ends_with(" 0")
        ),
        "{metrics}"
    );

    // The store comes back (empty, on the same port): the replicas share one bucket again,
    // and each first pays it the 4 tokens it granted on its own: nothing is left.
    let redis = Redis::start_on(port).expect("redis-server ran a moment ago");
    for app in [&a, &b] {
        until_gauge(app, 0).await;
    }
    let statuses = alternate(&a, &b, 10).await;
    assert_eq!(count(&statuses, 429), 10, "{statuses:?}");
    for app in [&a, &b] {
        assert_eq!(gauge(&app.metrics().await), Some(0));
    }

    a.stop().await;
    b.stop().await;
    drop(redis);
}

#[tokio::test]
async fn an_unreachable_store_at_start_limits_per_replica_and_never_blocks_the_start() {
    // A port nothing listens on: the proxy starts, limits on its own and shows the gauge.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", closed.local_addr().unwrap());
    drop(closed);
    let (upstream, base_url) = spawn_upstream().await;
    let app = proxy(&base_url, &url, 3, upstream).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(send(&app, CLIENT_KEY).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    assert_eq!(gauge(&app.metrics().await), Some(1));
    app.stop().await;
}

#[tokio::test]
async fn a_store_that_never_answers_costs_a_timeout_and_limits_per_replica() {
    // Accepts connections (the kernel's backlog) and never answers a byte.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let (upstream, base_url) = spawn_upstream().await;
    let app = proxy_with(&base_url, &url, 2, 100, upstream).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(send(&app, CLIENT_KEY).await);
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    let metrics = app.metrics().await;
    assert_eq!(gauge(&metrics), Some(1));
    assert!(
        metrics.lines().any(|l| l
            .starts_with("releasegate_rate_limit_store_errors_total{kind=\"timeout\"}")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
    app.stop().await;
    drop(silent);
}

#[tokio::test]
async fn the_shared_bucket_refills_at_the_recipients_rate() {
    let Some(redis) = Redis::start() else {
        return;
    };
    let (upstream, base_url) = spawn_upstream().await;
    let a = proxy(&base_url, &redis.url(), 1, upstream.clone()).await;
    let b = proxy(&base_url, &redis.url(), 1, upstream).await;
    // Empty it (two tokens a second: some request soon finds it empty)...
    let mut refused = false;
    for i in 0..50 {
        if send(if i % 2 == 0 { &a } else { &b }, REFILL_KEY).await == 429 {
            refused = true;
            break;
        }
    }
    assert!(refused, "the bucket never ran empty");
    // ...and after more than one token's time, a token is back for either replica.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(send(&b, REFILL_KEY).await, 200);
    a.stop().await;
    b.stop().await;
}

/// A replica of the recovery scenario: `loops` event loops; "limited" (CLIENT_KEY) has
/// `burst` tokens and no refill to speak of (one token per 1000 s), "probe" (MULTI_KEY) a
/// large limit, both through the store at `url`.
async fn replica(
    base_url: &str,
    url: &str,
    burst: u32,
    loops: usize,
    upstream: super::helpers::Upstream,
) -> TestApp {
    let text = store_config(base_url, url, burst, 2000, loops, None);
    start(releasegate_proxy::load::from_toml(&text).unwrap(), upstream).await
}

/// `per_app` concurrent requests by `key` to each of `apps`, each on a connection of its own
/// (so they spread over every event loop); the statuses.
async fn burst(apps: &[&TestApp], per_app: usize, key: &str) -> Vec<u16> {
    let mut requests = tokio::task::JoinSet::new();
    for app in apps {
        for _ in 0..per_app {
            let address = app.address.clone();
            let authorization = format!("Bearer {key}");
            requests.spawn(async move {
                let client = reqwest::Client::builder()
                    .pool_max_idle_per_host(0)
                    .build()
                    .unwrap();
                let response = client
                    .post(format!("{address}/v1/systemone"))
                    .header("authorization", authorization)
                    .body(serde_json::to_vec(&request()).unwrap())
                    .send()
                    .await
                    .unwrap();
                response.status().as_u16()
            });
        }
    }
    let mut statuses = Vec::new();
    while let Some(status) = requests.join_next().await {
        let status = status.unwrap();
        assert!(status == 200 || status == 429, "unexpected status {status}");
        statuses.push(status);
    }
    statuses
}

fn errors(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix("releasegate_rate_limit_store_errors_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Stops the store, waits until both replicas limit on their own, lets each grant `spent`
/// requests of "limited" on its own, starts the store again on the same port (empty) and
/// waits until both say the limits are shared again; the new store and each replica's store
/// error count at that moment.
async fn outage(redis: Redis, a: &TestApp, b: &TestApp, spent: usize) -> (Redis, [u64; 2]) {
    let port = redis.kill();
    for app in [a, b] {
        until_gauge(app, 1).await;
    }
    for app in [a, b] {
        for _ in 0..spent {
            assert_eq!(send(app, CLIENT_KEY).await, 200, "the replica's own bucket");
        }
    }
    let redis = Redis::start_on(port).expect("redis-server ran a moment ago");
    for app in [a, b] {
        until_gauge(app, 0).await;
    }
    (
        redis,
        [errors(&a.metrics().await), errors(&b.metrics().await)],
    )
}

/// After the store comes back, both replicas still say the limits are shared, and no call
/// to the store failed since `errors` (a failure would have sent requests to a local bucket).
async fn still_shared(a: &TestApp, b: &TestApp, errors_then: [u64; 2]) {
    for (app, then) in [(a, errors_then[0]), (b, errors_then[1])] {
        let metrics = app.metrics().await;
        assert_eq!(gauge(&metrics), Some(0), "{metrics}");
        assert_eq!(errors(&metrics), then, "{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_store_comes_back_no_burst_exceeds_the_shared_bucket() {
    const BURST: usize = 5;
    let Some(redis) = Redis::start() else {
        return;
    };
    let (upstream, base_url) = spawn_upstream().await;
    // Three event loops each: a burst spreads over all of them.
    let a = replica(&base_url, &redis.url(), BURST as u32, 3, upstream.clone()).await;
    let b = replica(&base_url, &redis.url(), BURST as u32, 3, upstream.clone()).await;
    // Every event loop of both replicas has a connection to the store when it stops.
    burst(&[&a, &b], 12, MULTI_KEY).await;

    // An outage in which "limited" sends nothing: both local buckets stay full, the store
    // comes back empty. A burst on every loop of both replicas gets the shared bucket's
    // burst, not a local bucket's on top.
    let (redis, errors_then) = outage(redis, &a, &b, 0).await;
    let statuses = burst(&[&a, &b], 12, CLIENT_KEY).await;
    eprintln!(
        "round 1: {} of {} granted (shared bucket {BURST})",
        count(&statuses, 200),
        statuses.len()
    );
    assert_eq!(count(&statuses, 200), BURST, "{statuses:?}");
    still_shared(&a, &b, errors_then).await;

    // An outage in which each replica grants 2 on its own: the store comes back empty
    // (full buckets) and each replica's first call pays what it granted: 5 - 2 - 2 = 1 left,
    // for the first request; the burst after it gets nothing.
    let (redis, errors_then) = outage(redis, &a, &b, 2).await;
    let first = [send(&a, CLIENT_KEY).await, send(&b, CLIENT_KEY).await];
    assert_eq!(first, [200, 429]);
    let statuses = burst(&[&a, &b], 12, CLIENT_KEY).await;
    eprintln!(
        "round 2: {} then {} of {} granted (shared bucket {BURST}, 4 owed)",
        count(&first, 200),
        count(&statuses, 200),
        statuses.len()
    );
    assert_eq!(count(&statuses, 200), 0, "{statuses:?}");
    still_shared(&a, &b, errors_then).await;

    a.stop().await;
    b.stop().await;
    drop(redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_replaced_by_a_reload_leaves_the_gauge_to_the_new_one() {
    let Some(redis) = Redis::start() else {
        return;
    };
    // The first store accepts connections and never answers; its calls may wait 10 s.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_url = format!("redis://{}", silent.local_addr().unwrap());
    let (upstream, base_url) = spawn_upstream().await;
    let dir = scratch("store-reload");
    let path = dir.join("releasegate.toml");
    std::fs::write(&path, config(&base_url, &silent_url, 3, 10_000)).unwrap();
    let app = start(
        releasegate_proxy::load::load(Some(&path)).unwrap(),
        upstream,
    )
    .await;

    // A request waits on the silent store...
    let in_flight = {
        let (address, client) = (app.address.clone(), app.client.clone());
        tokio::spawn(async move {
            client
                .post(format!("{address}/v1/systemone"))
                .header("authorization", format!("Bearer {CLIENT_KEY}"))
                .body(serde_json::to_vec(&request()).unwrap())
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    let accepted = tokio::task::spawn_blocking(move || {
        let accepted = silent.accept().unwrap().0;
        (silent, accepted)
    })
    .await
    .unwrap();
    // ...while a reload replaces that store with a reachable one...
    std::fs::write(&path, config(&base_url, &redis.url(), 3, 2000)).unwrap();
    let state = app.state.clone();
    let reload = path.clone();
    tokio::task::spawn_blocking(move || state.reload_from(&reload))
        .await
        .unwrap()
        .unwrap();
    // ...then the old store fails that request (it is limited on the replica's own bucket).
    drop(accepted);
    assert_eq!(in_flight.await.unwrap(), 200);
    // The old store's failure is not the new store's: the gauge says shared, as it is.
    assert_eq!(gauge(&app.metrics().await), Some(0));
    assert_eq!(send(&app, CLIENT_KEY).await, 200);
    assert_eq!(gauge(&app.metrics().await), Some(0));
    app.stop().await;
}
