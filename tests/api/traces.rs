//! Spans exported over OTLP/HTTP (`[tracing] otlp_endpoint`) to a local receiver this test
//! starts: a SERVER span per request (the caller's span as parent), a CLIENT span per
//! upstream call (whose id is the parent the provider receives), an INTERNAL span for the
//! release; ids, names and outcomes only, never request or answer content.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message;

use super::helpers::{
    CLIENT_KEY, MULTI_KEY, TestConfig, recipient, request, spawn_upstream, start,
};

/// A local OTLP/HTTP receiver: every body posted to `/v1/traces`.
async fn receiver() -> (Arc<Mutex<Vec<Bytes>>>, String) {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    let app = Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(body);
                // An empty ExportTraceServiceResponse.
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (bodies, url)
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(text) => Some(text.clone()),
        AnyValue::IntValue(number) => Some(number.to_string()),
        other => Some(format!("{other:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_of_a_request_reach_the_collector_with_their_kinds_and_parents() {
    let (bodies, collector) = receiver().await;
    let (upstream, base_url) = spawn_upstream().await;
    let config = TestConfig {
        server: "shutdown_grace_ms = 500".into(),
        max_body_bytes: None,
        tables: format!(
            "[tracing]\notlp_endpoint = \"{collector}\"\nservice_name = \"releasegate-test\""
        ),
        provider_extra: "timeout_ms = 5000".into(),
        provider_key: false,
        recipients: vec![recipient("one", CLIENT_KEY, &["main"])],
        view: "choice".into(),
        other: false,
        ..TestConfig::default()
    }
    .load(&base_url);
    assert!(config.summary().contains("traces: OTLP/HTTP to"));
    let app = start(config, upstream.clone()).await;
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let body = serde_json::to_vec(&request()).unwrap();
    let response = app
        .post_raw(
            body.clone(),
            &[
                ("authorization", &format!("Bearer {CLIENT_KEY}")),
                (
                    "traceparent",
                    &format!("00-{caller_trace}-{caller_span}-01"),
                ),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let sent_upstream = upstream.last().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_string();
    // A request without a trace of its own, and one refused before the provider.
    let response = app
        .post_raw(
            body.clone(),
            &[("authorization", &format!("Bearer {CLIENT_KEY}"))],
        )
        .await;
    assert_eq!(response.status(), 200);
    let fresh_upstream = upstream.last().headers["traceparent"]
        .to_str()
        .unwrap()
        .to_string();
    let response = app
        .post_raw(body, &[("authorization", &format!("Bearer {MULTI_KEY}"))])
        .await;
    assert_eq!(response.status(), 401);
    // Stopping flushes the exporter: every span is at the receiver when `stop` returns.
    app.stop().await;

    let bodies = bodies.lock().unwrap().clone();
    assert!(!bodies.is_empty(), "no export reached the receiver");
    let mut spans = Vec::new();
    for body in &bodies {
        for text in ["late parcel", "UPSTREAM-SECRET", "Why?", CLIENT_KEY] {
            assert!(
                !body.windows(text.len()).any(|w| w == text.as_bytes()),
                "an export carries {text:?}"
            );
        }
        let export = ExportTraceServiceRequest::decode(body.as_ref()).unwrap();
        for resource in export.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| v.value.clone());
            assert_eq!(
                service,
                Some(AnyValue::StringValue("releasegate-test".into()))
            );
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    assert_eq!(spans.len(), 7, "3 SERVER, 2 CLIENT, 2 INTERNAL: {spans:#?}");
    let in_trace = |trace: &str| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| hex::encode(&s.trace_id) == trace)
            .collect()
    };

    // The caller's trace: SERVER under the caller's span; CLIENT and the release under it;
    // the provider's parent is the CLIENT span.
    let traced = in_trace(caller_trace);
    assert_eq!(traced.len(), 3, "{traced:#?}");
    let of_kind = |spans: &[&Span], kind: SpanKind| -> Span {
        let found: Vec<&&Span> = spans.iter().filter(|s| s.kind == kind as i32).collect();
        assert_eq!(found.len(), 1, "{kind:?} in {spans:#?}");
        (*found[0]).clone()
    };
    let server = of_kind(&traced, SpanKind::Server);
    let client = of_kind(&traced, SpanKind::Client);
    let release = of_kind(&traced, SpanKind::Internal);
    assert_eq!(server.name, "POST /v1/systemone");
    assert_eq!(hex::encode(&server.parent_span_id), caller_span);
    assert_eq!(
        hex::encode(&client.parent_span_id),
        hex::encode(&server.span_id)
    );
    assert_eq!(
        hex::encode(&release.parent_span_id),
        hex::encode(&server.span_id)
    );
    assert_ne!(server.span_id, client.span_id);
    assert_eq!(
        sent_upstream,
        format!("00-{caller_trace}-{}-01", hex::encode(&client.span_id)),
        "the provider's parent is the CLIENT span"
    );
    assert_eq!(
        attribute(&server, "releasegate.recipient").as_deref(),
        Some("one")
    );
    assert_eq!(
        attribute(&server, "releasegate.contract").as_deref(),
        Some("main")
    );
    assert_eq!(
        attribute(&server, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(
        attribute(&server, "releasegate.outcome").as_deref(),
        Some("ok")
    );
    assert!(attribute(&server, "releasegate.request_id").is_some_and(|id| id.starts_with("rg-")));
    assert_eq!(
        attribute(&client, "releasegate.provider").as_deref(),
        Some("up")
    );
    assert_eq!(
        attribute(&client, "releasegate.outcome").as_deref(),
        Some("ok")
    );
    assert_eq!(
        attribute(&release, "releasegate.outcome").as_deref(),
        Some("released")
    );
    assert_eq!(
        attribute(&release, "releasegate.answers").as_deref(),
        Some("3")
    );
    for span in [&server, &client, &release] {
        assert!(
            span.start_time_unix_nano > 0 && span.end_time_unix_nano >= span.start_time_unix_nano
        );
        assert!(server.start_time_unix_nano <= span.start_time_unix_nano);
        assert!(span.end_time_unix_nano <= server.end_time_unix_nano);
    }

    // A new trace: the SERVER span has no parent; its trace is the one the provider got.
    let fresh_trace = &fresh_upstream[3..35];
    let fresh = in_trace(fresh_trace);
    assert_eq!(fresh.len(), 3, "{fresh:#?}");
    let server = of_kind(&fresh, SpanKind::Server);
    assert!(server.parent_span_id.is_empty(), "{server:#?}");
    let client = of_kind(&fresh, SpanKind::Client);
    assert_eq!(&fresh_upstream[36..52], hex::encode(&client.span_id));

    // The refused request: its SERVER span alone, with the error's slug as its outcome.
    let refused: Vec<&Span> = spans
        .iter()
        .filter(|s| attribute(s, "http.response.status_code").as_deref() == Some("401"))
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].kind, SpanKind::Server as i32);
    assert_eq!(
        attribute(refused[0], "releasegate.outcome").as_deref(),
        Some("authentication_error")
    );
    assert_eq!(in_trace(&hex::encode(&refused[0].trace_id)).len(), 1);
}

#[test]
fn span_export_is_off_by_default_and_its_endpoint_is_validated() {
    let root = env!("CARGO_MANIFEST_DIR");
    let config = releasegate_proxy::load::load_offline(Some(std::path::Path::new(&format!(
        "{root}/config/releasegate.toml"
    ))))
    .unwrap();
    assert!(config.tracing().is_none());
    assert!(config.summary().contains("traces: not exported"));
    let text = TestConfig {
        tables: "[tracing]\notlp_endpoint = \"http://user:pw@collector:4318\"".into(),
        main: true,
        view: "choice".into(),
        ..TestConfig::bare()
    }
    .toml("");
    let error = releasegate_proxy::load::from_toml(&text)
        .unwrap_err()
        .to_string();
    assert!(error.contains("tracing.otlp_endpoint"), "{error}");
}
