//! Hardening: nothing the provider writes reaches a recipient unless the proxy can vouch for it.

use std::time::Duration;

use crate::helpers::{error_of, request, spawn};

#[tokio::test]
async fn retry_hints_are_rewritten_capped_or_dropped() {
    let app = spawn("choice", "").await;
    let cases: [(&str, &str, Option<&str>, Option<&str>); 4] = [
        ("99999999", "99999999999", Some("86400"), Some("86400000")),
        ("0042", "7000", Some("42"), Some("7000")),
        ("7; UPSTREAM", "7 000", None, None),
        ("Fri, 01 Jan 2100 00:00:00 GMT", "-5", Some("86400"), None),
    ];
    for (seconds, millis, want_seconds, want_millis) in cases {
        app.upstream.script(
            429,
            b"{}".to_vec(),
            &[("retry-after", seconds), ("retry-after-ms", millis)],
            Duration::ZERO,
        );
        let response = app.post(&request()).await;
        assert_eq!(response.status(), 429);
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_string())
        };
        assert_eq!(header("retry-after").as_deref(), want_seconds, "{seconds}");
        assert_eq!(header("retry-after-ms").as_deref(), want_millis, "{millis}");
    }
    app.stop().await;
}

#[tokio::test]
async fn provider_credential_failures_are_502_and_counted_as_auth() {
    let app = spawn("choice", "").await;
    for status in [401, 403] {
        app.upstream.script(
            status,
            b"{\"detail\": \"invalid api key\"}".to_vec(),
            &[],
            Duration::ZERO,
        );
        let (code, error_type, message) = error_of(app.post(&request()).await).await;
        assert_eq!((code, error_type.as_str()), (502, "upstream_auth_error"));
        assert!(!message.contains("invalid api key"), "{message}");
    }
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("releasegate_upstream_errors_total{kind=\"auth\",provider=\"up\"} 2"),
        "{metrics}"
    );
    app.stop().await;
}

#[tokio::test]
async fn upstream_statuses_are_counted_by_kind() {
    let app = spawn("choice", "").await;
    for status in [400, 404, 422, 429, 500, 503, 504, 529] {
        app.upstream
            .script(status, b"{}".to_vec(), &[], Duration::ZERO);
        let response = app.post(&request()).await;
        assert!(!response.status().is_success());
    }
    let metrics = app.metrics().await;
    for (kind, count) in [
        ("status_4xx", 3),
        ("status_429", 1),
        ("status_5xx", 3),
        ("status_529", 1),
        ("auth", 0),
        ("timeout", 0),
    ] {
        let series = format!(
            "releasegate_upstream_errors_total{{kind=\"{kind}\",provider=\"up\"}} {count}\n"
        );
        assert!(metrics.contains(&series), "{series}: {metrics}");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_proxys_own_latency_is_a_histogram_by_contract_route_and_status_class() {
    let app = spawn("choice", "").await;
    assert_eq!(app.post(&request()).await.status(), 200);
    app.upstream.script(500, b"{}".to_vec(), &[], Duration::ZERO);
    assert_eq!(app.post(&request()).await.status(), 502);
    let refused = app
        .client
        .get(format!("{}/v1/models", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let metrics = app.metrics().await;
    for series in [
        "releasegate_request_duration_seconds_count{contract=\"main\",route=\"systemone\",status_class=\"2xx\"} 1",
        "releasegate_request_duration_seconds_count{contract=\"main\",route=\"systemone\",status_class=\"5xx\"} 1",
        "releasegate_request_duration_seconds_count{contract=\"none\",route=\"models\",status_class=\"4xx\"} 1",
        "releasegate_request_duration_seconds_bucket{contract=\"main\",route=\"systemone\",status_class=\"2xx\",le=\"30\"} 1",
    ] {
        assert!(metrics.contains(series), "{series}: {metrics}");
    }
    app.stop().await;
}
