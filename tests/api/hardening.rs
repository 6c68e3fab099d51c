//! Hardening: nothing the provider writes reaches a recipient unless the proxy can vouch for it.

use std::time::Duration;

use crate::helpers::{request, spawn};

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
