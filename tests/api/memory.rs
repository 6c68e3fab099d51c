//! The budget on request bytes (`server.max_decoded_bytes_in_flight`) and per-recipient
//! `max_in_flight`: gzip multipart bombs (33 KB on the wire, two 16 MiB zero "PNG" images
//! decoded) against a slow provider get 503 with `retry-after` or an answer, never another
//! 5xx; small requests beside them too; the budget in use returns to 0; a request larger than
//! the whole budget is 413 at once; a recipient beyond its `max_in_flight` gets 429. And the
//! real binary, with the defaults, stays under 512 MB of peak RSS through 16 bombs at once.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use serde_json::{Value, json};

use super::binary::{Served, client, serve_command};
use super::helpers::{
    CLIENT_KEY, PATIENCE, Provider, TestConfig, error_of, native_answer, request,
};

/// Each image of a bomb: the PNG signature, then zeros, 16 MiB in all.
const IMAGE_BYTES: usize = 16 << 20;
const BOUNDARY: &str = "bomb0123456789abcdef";

/// The bomb: a gzip `multipart/form-data` body whose request names two part images of
/// 16 MiB each (a PNG signature and zeros), compressed as it is written (never held whole).
fn bomb() -> &'static [u8] {
    static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
    BOMB.get_or_init(|| {
        let mut body = request();
        body["state"] = json!({"ticket": "late parcel", "photo": "<image:a>", "label": "<image:b>"});
        body["assets"] = json!({
            "<image:a>": {"type": "image", "part": "asset-0"},
            "<image:b>": {"type": "image", "part": "asset-1"},
        });
        let json = serde_json::to_vec(&body).unwrap();
        let mut gzip =
            flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let head = |name: &str, content_type: &str| {
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\nContent-Type: {content_type}\r\n\r\n"
            )
        };
        gzip.write_all(head("request", "application/json").as_bytes())
            .unwrap();
        gzip.write_all(&json).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for name in ["asset-0", "asset-1"] {
            gzip.write_all(b"\r\n").unwrap();
            gzip.write_all(head(name, "image/png").as_bytes()).unwrap();
            gzip.write_all(b"\x89PNG\r\n\x1a\n").unwrap();
            let mut left = IMAGE_BYTES - 8;
            while left > 0 {
                let n = left.min(zeros.len());
                gzip.write_all(&zeros[..n]).unwrap();
                left -= n;
            }
        }
        gzip.write_all(format!("\r\n--{BOUNDARY}--\r\n").as_bytes())
            .unwrap();
        let wire = gzip.finish().unwrap();
        assert!(wire.len() < 100_000, "{} bytes on the wire", wire.len());
        wire
    })
}

/// The sizes of the bodies a provider received.
type Received = Arc<Mutex<Vec<usize>>>;

/// A System One provider that reads each request to its end (holding none of it, counting
/// its bytes) and answers after `delay`.
async fn slow_provider(delay: Duration) -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let received = Received::default();
    let sizes = received.clone();
    let app = Router::new().route(
        "/v1/systemone",
        post(move |body: Body| async move {
            let size = axum::body::to_bytes(body, usize::MAX)
                .await
                .map_or(0, |body| body.len());
            sizes.lock().unwrap().push(size);
            tokio::time::sleep(delay).await;
            axum::Json(native_answer())
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}"), received)
}

/// Sends the bomb; its status, `retry-after` and `error_type`.
async fn send_bomb(client: &reqwest::Client, base: &str) -> (u16, Option<String>, String) {
    let response = client
        .post(format!("{base}/v1/systemone"))
        .header("authorization", format!("Bearer {CLIENT_KEY}"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .header("content-encoding", "gzip")
        .body(bomb().to_vec())
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    outcome(response).await
}

/// Sends a small JSON request; its status, `retry-after` and `error_type`.
async fn send_small(client: &reqwest::Client, base: &str) -> (u16, Option<String>, String) {
    let response = client
        .post(format!("{base}/v1/systemone"))
        .header("authorization", format!("Bearer {CLIENT_KEY}"))
        .json(&request())
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    outcome(response).await
}

/// `count` bombs (or small requests) sent at once, each on its own task; their outcomes.
fn at_once(
    count: usize,
    client: &reqwest::Client,
    base: &str,
    bombs: bool,
) -> impl Future<Output = Vec<(u16, Option<String>, String)>> + use<> {
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let (client, base) = (client.clone(), base.to_string());
            tokio::spawn(async move {
                if bombs {
                    send_bomb(&client, &base).await
                } else {
                    send_small(&client, &base).await
                }
            })
        })
        .collect();
    async move {
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    }
}

async fn outcome(response: reqwest::Response) -> (u16, Option<String>, String) {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_string());
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let error_type = body["detail"]["error_type"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (status, retry_after, error_type)
}

/// An answer, or 503 `server_busy` with a `retry-after` of whole seconds: nothing else.
fn answered_or_shed((status, retry_after, error_type): &(u16, Option<String>, String)) -> bool {
    match status {
        200 => true,
        503 => {
            error_type == "server_busy"
                && retry_after
                    .as_deref()
                    .is_some_and(|seconds| seconds.parse::<u64>().is_ok_and(|s| s >= 1))
        }
        _ => false,
    }
}

/// The value of an unlabelled series, or of a labelled one (`name{labels}`), in `metrics`.
fn metric(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no series {series}"))
}

/// The default test configuration on a provider at `url`, with these `[server]` lines.
fn config(url: String, server: &str) -> TestConfig {
    TestConfig {
        server: format!("shutdown_grace_ms = 500\nworker_threads = 1\n{server}"),
        provider: Provider::Url(url),
        provider_extra: "timeout_ms = 30000".into(),
        ..TestConfig::default()
    }
}

#[tokio::test]
async fn bombs_and_small_requests_get_answers_or_503_and_the_budget_returns_to_zero() {
    let (url, received) = slow_provider(Duration::from_millis(1500)).await;
    // Room for one bomb's images (32 MiB and framing), not two.
    let app = config(
        url,
        "max_decoded_bytes_in_flight = 41943040\ndecoded_bytes_queue_timeout_ms = 300",
    )
    .spawn()
    .await;
    let bombs = at_once(4, &app.client, &app.address, true);
    let smalls = at_once(6, &app.client, &app.address, false);
    let (bombs, smalls) = (bombs.await, smalls.await);
    for outcome in bombs.iter().chain(&smalls) {
        assert!(answered_or_shed(outcome), "{outcome:?}");
    }
    assert!(
        bombs.iter().any(|(status, ..)| *status == 200),
        "one bomb fits the budget: {bombs:?}"
    );
    assert!(
        bombs.iter().any(|(status, ..)| *status == 503),
        "two bombs do not: {bombs:?}"
    );
    // Each bomb answered went upstream whole: both images and the framing, as segments.
    let whole = received
        .lock()
        .unwrap()
        .iter()
        .filter(|size| **size > 2 * IMAGE_BYTES)
        .count();
    assert_eq!(whole, bombs.iter().filter(|o| o.0 == 200).count());
    let metrics = app.metrics().await;
    assert_eq!(metric(&metrics, "releasegate_request_bytes_in_use"), 0.0);
    assert_eq!(
        metric(&metrics, "releasegate_request_bytes_limit"),
        41943040.0
    );
    let shed = bombs.iter().chain(&smalls).filter(|o| o.0 == 503).count();
    assert_eq!(
        metric(
            &metrics,
            "releasegate_requests_shed_total{reason=\"budget_timeout\"}"
        ),
        shed as f64
    );
    app.stop().await;
}

#[tokio::test]
async fn a_request_larger_than_the_whole_budget_is_refused_at_once() {
    let (url, _) = slow_provider(Duration::ZERO).await;
    // 8 MiB: less than one bomb's images; a queue timeout the test would notice.
    let app = config(
        url,
        "max_decoded_bytes_in_flight = 8388608\ndecoded_bytes_queue_timeout_ms = 3600000",
    )
    .spawn()
    .await;
    let response = tokio::time::timeout(PATIENCE, async {
        app.client
            .post(format!("{}/v1/systemone", app.address))
            .header("authorization", format!("Bearer {CLIENT_KEY}"))
            .header(
                "content-type",
                format!("multipart/form-data; boundary={BOUNDARY}"),
            )
            .header("content-encoding", "gzip")
            .body(bomb().to_vec())
            .send()
            .await
            .unwrap()
    })
    .await
    .expect("refused without waiting for the queue timeout");
    let (status, error_type, message) = error_of(response).await;
    assert_eq!((status, error_type.as_str()), (413, "request_too_large"));
    assert!(message.contains("8388608"), "{message}");
    // Small requests still pass.
    let (status, ..) = send_small(&app.client, &app.address).await;
    assert_eq!(status, 200);
    let metrics = app.metrics().await;
    assert_eq!(metric(&metrics, "releasegate_request_bytes_in_use"), 0.0);
    assert_eq!(
        metric(
            &metrics,
            "releasegate_requests_shed_total{reason=\"too_large_for_budget\"}"
        ),
        1.0
    );
    app.stop().await;
}

#[tokio::test]
async fn a_recipient_beyond_its_max_in_flight_gets_429() {
    let mut config = TestConfig::default();
    config.recipients[0].lines = "max_in_flight = 1".into();
    let app = config.spawn().await;
    app.upstream.close();
    let first = {
        let client = app.client.clone();
        let address = app.address.clone();
        tokio::spawn(async move { send_small(&client, &address).await })
    };
    app.upstream.arrived().await;
    let response = app
        .client
        .post(format!("{}/v1/systemone", app.address))
        .header("authorization", format!("Bearer {CLIENT_KEY}"))
        .json(&request())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap()),
        Some("1")
    );
    let (status, error_type, message) = error_of(response).await;
    assert_eq!((status, error_type.as_str()), (429, "rate_limited"));
    assert!(message.contains("in flight"), "{message}");
    app.upstream.open();
    assert_eq!(first.await.unwrap().0, 200);
    // The first request ended: its place is free again.
    let (status, ..) = send_small(&app.client, &app.address).await;
    assert_eq!(status, 200);
    let metrics = app.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "releasegate_in_flight_limited_total{recipient=\"one\"}"
        ),
        1.0
    );
    assert_eq!(
        metric(
            &metrics,
            "releasegate_requests_shed_total{reason=\"recipient_in_flight\"}"
        ),
        1.0
    );
    app.stop().await;
}

/// `VmHWM` (peak resident set) of process `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/PID/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

#[tokio::test]
async fn sixteen_bombs_leave_the_binary_under_512_mb_with_the_defaults() {
    let (url, _) = slow_provider(Duration::from_secs(3)).await;
    let dir = super::helpers::scratch("memory-bombs");
    let path = dir.join("releasegate.toml");
    let config = TestConfig {
        provider: Provider::Url(url.clone()),
        ..TestConfig::single()
    };
    std::fs::write(&path, config.toml(&url)).unwrap();
    let served = Served::start(serve_command(&path));
    let base = format!("http://{}", served.public);
    let client = client();
    let before = peak_rss(served.id());
    let bombs = at_once(16, &client, &base, true).await;
    let peak = peak_rss(served.id());
    for outcome in &bombs {
        assert!(answered_or_shed(outcome), "{outcome:?}");
    }
    let answered = bombs.iter().filter(|(status, ..)| *status == 200).count();
    eprintln!(
        "16 bombs: {answered} answered, {} shed; peak RSS {} MiB (at start {} MiB)",
        16 - answered,
        peak >> 20,
        before >> 20
    );
    assert!(answered >= 1, "{bombs:?}");
    assert!(peak < 512 << 20, "peak RSS {} MiB", peak >> 20);
    let metrics = served.metrics().await;
    assert_eq!(metric(&metrics, "releasegate_request_bytes_in_use"), 0.0);
    served.stop().await;
}
