//! Per-recipient rate limits: a burst, then the proxy's own 429 with `retry-after`, before
//! the body is read; other recipients are unaffected.

use super::helpers::{
    CLIENT_KEY, MULTI_KEY, Recipient, TestConfig, error_of, recipient, request, spawn_upstream,
    start,
};

#[tokio::test]
async fn a_recipient_gets_its_burst_then_429_with_retry_after_and_others_are_unaffected() {
    let (upstream, base_url) = spawn_upstream().await;
    // One token per 100 s after a burst of 3: no token comes back during the test.
    let config = TestConfig {
        server: "shutdown_grace_ms = 500".into(),
        max_body_bytes: Some(4096),
        provider_extra: "timeout_ms = 5000".into(),
        provider_key: false,
        recipients: vec![
            Recipient {
                lines: "rate_limit = { requests_per_second = 0.01, burst = 3 }".into(),
                ..recipient("limited", CLIENT_KEY, &["main"])
            },
            recipient("free", MULTI_KEY, &["main"]),
        ],
        view: "choice".into(),
        other: false,
        ..TestConfig::default()
    };
    let app = start(config.load(&base_url), upstream.clone()).await;
    let body = serde_json::to_vec(&request()).unwrap();
    let limited = format!("Bearer {CLIENT_KEY}");
    let free = format!("Bearer {MULTI_KEY}");
    for _ in 0..3 {
        let response = app
            .post_raw(body.clone(), &[("authorization", &limited)])
            .await;
        assert_eq!(response.status(), 200);
    }
    let response = app
        .post_raw(body.clone(), &[("authorization", &limited)])
        .await;
    assert_eq!(response.status(), 429);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=100).contains(&retry_after), "{retry_after}");
    assert!(response.headers().contains_key("x-request-id"));
    let (_, error_type, message) = error_of(response).await;
    assert_eq!(error_type, "rate_limited");
    // Our own words, not the provider's 429 ("the provider answered with status 429").
    assert!(message.contains("rate limit on the proxy"), "{message}");
    assert!(!message.contains("provider"), "{message}");
    assert_eq!(
        upstream.seen.lock().unwrap().len(),
        3,
        "a refused request went upstream"
    );

    // Checked before the body is read: an oversized body is refused for the rate, not its size.
    let response = app
        .post_raw(vec![b' '; 64 * 1024], &[("authorization", &limited)])
        .await;
    assert_eq!(response.status(), 429);
    // A request without a valid key is refused for the key, and uses no token of anyone.
    let response = app
        .post_raw(body.clone(), &[("authorization", "Bearer wrong")])
        .await;
    assert_eq!(response.status(), 401);

    // Another recipient is unaffected.
    for _ in 0..10 {
        let response = app
            .post_raw(body.clone(), &[("authorization", &free)])
            .await;
        assert_eq!(response.status(), 200);
    }
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("releasegate_rate_limited_total{recipient=\"limited\"} 2\n"),
        "{metrics}"
    );
    assert!(!metrics.contains("releasegate_rate_limited_total{recipient=\"free\"}"));
    assert_eq!(upstream.seen.lock().unwrap().len(), 13);
    app.stop().await;
}
