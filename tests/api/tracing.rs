//! Tracing: W3C trace context to the provider (strictly validated, our span id as parent),
//! (the span each request gets in the logs is checked on the real binary, `process.rs`).

use super::helpers::{CLIENT_KEY, request, spawn};

const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// `00-<32 hex>-<16 hex>-<2 hex>`, lower-case, ids not all zeros.
fn parts(traceparent: &str) -> (String, String, String) {
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    assert_eq!(fields[0], "00");
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && s.bytes().any(|b| b != b'0')
    };
    assert!(hex(fields[1], 32) && hex(fields[2], 16), "{traceparent}");
    assert_eq!(fields[3].len(), 2);
    (
        fields[1].to_string(),
        fields[2].to_string(),
        fields[3].to_string(),
    )
}

#[tokio::test]
async fn the_provider_gets_a_valid_traceparent_and_nothing_else_of_the_callers() {
    let app = spawn("choice", "").await;
    let body = serde_json::to_vec(&request()).unwrap();
    let auth = format!("Bearer {CLIENT_KEY}");
    let upstream_headers = |app: &super::helpers::TestApp| app.upstream.last().headers;

    // A valid traceparent: same trace and flags, our span as the parent; tracestate kept.
    let response = app
        .post_raw(
            body.clone(),
            &[
                ("authorization", &auth),
                ("traceparent", CALLER),
                ("tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
                ("baggage", "userId=alice"),
                ("x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7"),
                ("x-custom-secret", "CALLER-SECRET"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let seen = upstream_headers(&app);
    let (trace, parent, flags) = parts(seen["traceparent"].to_str().unwrap());
    assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_ne!(
        parent, "00f067aa0ba902b7",
        "the caller's span is not our parent"
    );
    assert_eq!(flags, "01");
    assert_eq!(
        seen["tracestate"],
        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    );
    for name in ["baggage", "x-b3-traceid", "x-custom-secret"] {
        assert!(seen.get(name).is_none(), "{name} was forwarded");
    }
    assert!(!format!("{seen:?}").contains("CALLER-SECRET"));

    // None: a new trace.
    let response = app
        .post_raw(body.clone(), &[("authorization", &auth)])
        .await;
    assert_eq!(response.status(), 200);
    let seen = upstream_headers(&app);
    let (fresh, _, flags) = parts(seen["traceparent"].to_str().unwrap());
    assert_ne!(fresh, trace);
    assert_eq!(flags, "00");
    assert!(seen.get("tracestate").is_none());

    // Invalid ones are dropped (a new trace), and so is their tracestate.
    for invalid in [
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-00",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "CALLER-SECRET",
    ] {
        let response = app
            .post_raw(
                body.clone(),
                &[
                    ("authorization", &auth),
                    ("traceparent", invalid),
                    ("tracestate", "congo=t61rcWkgMzE"),
                ],
            )
            .await;
        assert_eq!(response.status(), 200);
        let seen = upstream_headers(&app);
        let forwarded = seen["traceparent"].to_str().unwrap().to_string();
        let (trace_id, _, _) = parts(&forwarded);
        assert_ne!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736", "{invalid}");
        assert!(seen.get("tracestate").is_none(), "{invalid}");
        assert_eq!(seen.get_all("traceparent").iter().count(), 1);
    }

    // A tracestate over 512 bytes is dropped; the valid traceparent still continues.
    let long: Vec<String> = (0..30)
        .map(|i| format!("k{i}={}", "v".repeat(20)))
        .collect();
    let response = app
        .post_raw(
            body.clone(),
            &[
                ("authorization", &auth),
                ("traceparent", CALLER),
                ("tracestate", &long.join(",")),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let seen = upstream_headers(&app);
    assert_eq!(
        parts(seen["traceparent"].to_str().unwrap()).0,
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert!(seen.get("tracestate").is_none());
    app.stop().await;
}
