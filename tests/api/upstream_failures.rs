//! Upstream failures: statuses, timeouts, invalid answers; bodies never leak.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{Provider, TestConfig};
use crate::helpers::{error_of, native_answer, request, spawn};

const SECRET: &str = "UPSTREAM-SECRET-BODY";

#[tokio::test]
async fn upstream_statuses_are_kept_without_echoing_bodies() {
    let app = spawn("full_native", "").await;
    let body = format!("{{\"detail\": \"{SECRET}\"}}").into_bytes();
    let cases: [(u16, u16, &str); 7] = [
        (400, 400, "upstream_error"),
        (422, 422, "upstream_error"),
        // The provider refused the proxy's key: not the caller's fault.
        (401, 502, "upstream_auth_error"),
        (403, 502, "upstream_auth_error"),
        (429, 429, "rate_limited"),
        (529, 529, "overloaded"),
        (500, 502, "upstream_error"),
    ];
    for (upstream_status, status, error_type) in cases {
        app.upstream.script(
            upstream_status,
            body.clone(),
            &[
                ("retry-after", "7"),
                ("retry-after-ms", "7000"),
                ("x-typesafe-request-id", "UP-ID"),
            ],
            Duration::ZERO,
        );
        let response = app.post(&request()).await;
        assert_eq!(response.status().as_u16(), status, "{upstream_status}");
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        assert!(!text.contains(SECRET), "{text}");
        // The request id headers are the proxy's own, never the provider's.
        assert_ne!(headers["x-typesafe-request-id"], "UP-ID");
        let detail: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            detail["detail"]["error_type"], error_type,
            "{upstream_status}"
        );
        let retry = headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        if upstream_status == 429 || upstream_status == 529 {
            assert_eq!(retry.as_deref(), Some("7"));
            assert_eq!(headers["retry-after-ms"], "7000");
        } else {
            assert_eq!(retry, None);
        }
    }
    app.stop().await;
}

#[tokio::test]
async fn invalid_answers_are_502_counted_and_never_forwarded() {
    let app = spawn("choice", "").await;
    let with = |path: &[&str], value: Value| {
        let mut native = native_answer();
        let mut slot = &mut native;
        for key in path {
            slot = &mut slot[*key];
        }
        *slot = value;
        serde_json::to_vec(&native).unwrap()
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (format!("<html>{SECRET}</html>").into_bytes(), "not_json"),
        (
            with(&["answers", "cause", "probabilities", "A"], json!(1.5)),
            "bad_probability",
        ),
        (
            with(&["answers", "cause", "probabilities", "A"], json!(-0.1)),
            "bad_probability",
        ),
        (
            with(&["answers", "cause", "probabilities", "A"], json!(0.5)),
            "probability_sum",
        ),
        (
            with(&["answers", "cause", "choice"], json!("Z")),
            "unknown_choice",
        ),
        (
            with(&["answers", "cause", "choice"], json!("A")),
            "choice_not_most_probable",
        ),
        (
            with(
                &["answers", "cause"],
                json!({"type": "choice", "choice": "A"}),
            ),
            "missing_field",
        ),
        (
            with(&["answers", "urgent"], json!({"type": "choice"})),
            "type_mismatch",
        ),
        (with(&["answers"], json!({})), "missing_answer"),
        (with(&["model"], json!(7)), "missing_field"),
    ];
    let mut counts = std::collections::BTreeMap::new();
    for (body, reason) in cases {
        let count = counts.entry(reason).or_insert(0);
        *count += 1;
        app.upstream.script(200, body, &[], Duration::ZERO);
        let (status, error_type, message) = error_of(app.post(&request()).await).await;
        assert_eq!(
            (status, error_type.as_str()),
            (502, "invalid_upstream_answer"),
            "{reason}"
        );
        assert!(!message.contains(SECRET));
        let metrics = app.metrics().await;
        assert!(
            metrics.contains(&format!(
                "releasegate_rejected_upstream_answers_total{{contract=\"main\",reason=\"{reason}\"}} {count}"
            )),
            "{reason}: {metrics}"
        );
    }
    app.stop().await;
}

#[tokio::test]
async fn timeouts_are_504_and_connection_failures_502() {
    let app = TestConfig {
        view: "choice".into(),
        provider_extra: "timeout_ms = 200".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    // The upstream holds the request until the test opens its gate: only the proxy's own
    // timeout can end it.
    app.upstream.close();
    let (status, error_type, _) = error_of(app.post(&request()).await).await;
    assert_eq!((status, error_type.as_str()), (504, "upstream_timeout"));
    app.upstream.open();
    app.stop().await;

    // A provider on a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://127.0.0.1:{}", closed.local_addr().unwrap().port());
    drop(closed);
    let app = TestConfig {
        view: "choice".into(),
        provider: Provider::Url(dead),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    let (status, error_type, _) = error_of(app.post(&request()).await).await;
    assert_eq!((status, error_type.as_str()), (502, "upstream_unavailable"));
    app.stop().await;
}

#[tokio::test]
async fn oversized_upstream_bodies_are_rejected() {
    let app = spawn("choice", "").await;
    let mut native = native_answer();
    native["padding"] = json!("x".repeat(9 * 1024 * 1024));
    app.upstream.script(
        200,
        serde_json::to_vec(&native).unwrap(),
        &[],
        Duration::ZERO,
    );
    let (status, error_type, _) = error_of(app.post(&request()).await).await;
    assert_eq!((status, error_type.as_str()), (502, "upstream_unavailable"));
    app.stop().await;
}

#[tokio::test]
async fn health_readiness_and_metrics_are_on_the_admin_port() {
    let app = spawn("choice", "").await;
    let get = |path: &str| app.client.get(format!("{}{path}", app.admin)).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    let _ = app.post(&request()).await;
    let metrics = app.metrics().await;
    for name in [
        "releasegate_requests_total{contract=\"main\",status_class=\"2xx\"} 1",
        "releasegate_upstream_latency_seconds_bucket{provider=\"up\"",
    ] {
        assert!(metrics.contains(name), "missing {name}");
    }
    // The public port does not serve metrics.
    let public = app
        .client
        .get(format!("{}/metrics", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(public.status(), 404);
    app.stop().await;
}

#[tokio::test]
async fn a_full_concurrency_limit_sheds_load_with_503() {
    let app = TestConfig {
        view: "choice".into(),
        provider_extra: "timeout_ms = 5000\nmax_concurrency = 1\nqueue_timeout_ms = 100".into(),
        ..TestConfig::default()
    }
    .spawn()
    .await;
    // The first request holds the only slot at the closed gate; the second waits for a slot
    // no longer than the queue timeout and is shed; then the first gets through.
    app.upstream.close();
    let body = request();
    let first = tokio::spawn({
        let (client, url) = (app.client.clone(), format!("{}/v1/systemone", app.address));
        let body = body.clone();
        async move {
            client
                .post(url)
                .bearer_auth(crate::helpers::CLIENT_KEY)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    });
    app.upstream.arrived().await;
    let (status, error_type, _) = error_of(app.post(&body).await).await;
    assert_eq!((status, error_type.as_str()), (503, "upstream_saturated"));
    app.upstream.open();
    assert_eq!(first.await.unwrap().status(), 200);
    app.stop().await;
}

/// A provider's known error kinds keep their `error_type` and status with the proxy's own
/// message; its 422 lists stay lists whose `loc` names only what the proxy sent.
#[tokio::test]
async fn provider_error_kinds_and_validation_lists_are_released_sanitized() {
    let app = spawn("full_native", "").await;
    for (status, kind) in [
        (400, "max_tokens_exceeded"),
        (413, "max_tokens_exceeded"),
        (400, "tokens_exceeded"),
        (400, "invalid_request"),
    ] {
        let body = json!({"detail": {"error_type": kind, "message": SECRET}});
        app.upstream
            .script(status, body.to_string().into_bytes(), &[], Duration::ZERO);
        let response = app.post(&request()).await;
        assert_eq!(response.status().as_u16(), status, "{kind}");
        let text = response.text().await.unwrap();
        assert!(!text.contains(SECRET), "{text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["detail"]["error_type"], kind);
        assert!(body["detail"]["message"].as_str().unwrap().len() > 10);
    }
    // An unknown kind is the generic upstream error.
    let body = json!({"detail": {"error_type": SECRET, "message": SECRET}});
    app.upstream
        .script(400, body.to_string().into_bytes(), &[], Duration::ZERO);
    let (status, error_type, _) = error_of(app.post(&request()).await).await;
    assert_eq!((status, error_type.as_str()), (400, "upstream_error"));

    let list = json!({"detail": [
        {"loc": ["body", "state", "ticket"], "msg": SECRET, "type": "string_type", "input": SECRET, "ctx": {"x": SECRET}},
        {"loc": ["body", "questions", "cause", "choice", "criteria", "B"], "msg": SECRET, "type": "too_long"},
        {"loc": ["body", "questions", "cause", "choice", "criteria", SECRET], "msg": SECRET, "type": "missing"},
        {"loc": ["body", "state", SECRET], "msg": SECRET, "type": SECRET},
    ]});
    app.upstream
        .script(422, list.to_string().into_bytes(), &[], Duration::ZERO);
    let response = app.post(&request()).await;
    assert_eq!(response.status().as_u16(), 422);
    let text = response.text().await.unwrap();
    assert!(!text.contains(SECRET), "{text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    let entries = body["detail"].as_array().unwrap();
    let locs: Vec<&Value> = entries.iter().map(|entry| &entry["loc"]).collect();
    assert_eq!(
        locs,
        [
            &json!(["body", "state", "ticket"]),
            &json!(["body", "questions", "cause", "choice", "criteria", "B"]),
            &json!(["body", "questions", "cause", "choice", "criteria"]),
            &json!(["body", "state"]),
        ]
    );
    let kinds: Vec<&str> = entries
        .iter()
        .map(|entry| entry["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["string_type", "too_long", "missing", "value_error"]);
    for entry in entries {
        let mut keys: Vec<&String> = entry.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["loc", "msg", "type"]);
    }
    app.stop().await;
}

/// A provider over raw TCP answering every request with the native answer; it closes a
/// connection after `per_connection` answers (saying so with `connection: close` when
/// `announce`). Returns its base URL and the count of connections it accepted.
async fn counting_provider(
    per_connection: usize,
    announce: bool,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let body = serde_json::to_vec(&native_answer()).unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                let (mut buffer, mut chunk, mut served) = (Vec::new(), [0u8; 8192], 0);
                loop {
                    // One whole request: its head, then `content-length` bytes.
                    let complete = buffer
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map(|end| {
                            let head = String::from_utf8_lossy(&buffer[..end]).to_lowercase();
                            let length = head
                                .lines()
                                .find_map(|line| line.strip_prefix("content-length:"))
                                .and_then(|n| n.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            end + 4 + length
                        })
                        .filter(|total| buffer.len() >= *total);
                    let Some(total) = complete else {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    buffer.drain(..total);
                    served += 1;
                    let last = served == per_connection;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}\r\n",
                        body.len(),
                        if last && announce {
                            "connection: close\r\n"
                        } else {
                            ""
                        }
                    );
                    let answer = [head.as_bytes(), &body].concat();
                    if stream.write_all(&answer).await.is_err() || last {
                        return;
                    }
                }
            });
        }
    });
    (base, accepted)
}

#[tokio::test]
async fn provider_connections_are_kept_open_and_replaced_once_closed() {
    use std::sync::atomic::Ordering;
    // (answers per connection (0: kept open), close announced, requests, connections):
    // kept open, sequential requests share one connection; closed after every answer,
    // announced or not, every request still gets its answer over a new connection.
    for (per_connection, announce, requests, connections) in
        [(0, false, 10, 1), (1, true, 5, 5), (1, false, 5, 5)]
    {
        let (base, accepted) = counting_provider(per_connection, announce).await;
        let app = TestConfig {
            view: "choice".into(),
            provider: Provider::Url(base),
            ..TestConfig::default()
        }
        .spawn()
        .await;
        for _ in 0..requests {
            assert_eq!(app.post(&request()).await.status(), 200);
            if per_connection > 0 && !announce {
                // An unannounced close must reach the proxy before its next request.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        assert_eq!(accepted.load(Ordering::SeqCst), connections);
        app.stop().await;
    }
}
