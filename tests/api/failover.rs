//! Several providers behind one contract: failover in priority order, circuits, and the
//! exact answer cache before the release.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{
    CLIENT_KEY, MULTI_KEY, PROVIDER_KEY, PROVIDER_KEY_ENV, TestApp, TestConfig, Upstream,
    native_answer, request, spawn_upstream, start,
};

/// The proxy with contract `main` on `providers = [first..., "up"]` (`up` the secondary, the
/// scriptable upstream returned), `extra` lines on `main`, `server` lines on `[server]`.
async fn behind(firsts: &[(&str, String)], extra: &str, server: &str) -> (TestApp, Upstream) {
    let (secondary, secondary_url) = spawn_upstream().await;
    let mut tables = String::new();
    let mut names = Vec::new();
    for (name, lines) in firsts {
        tables.push_str(&format!(
            "[providers.{name}]\nkind = \"systemone\"\n{lines}\n"
        ));
        names.push(format!("\"{name}\""));
    }
    names.push("\"up\"".into());
    let text = TestConfig {
        tables,
        server: format!("shutdown_grace_ms = 500\nworker_threads = 1\n{server}"),
        ..TestConfig::default()
    }
    .toml(&secondary_url)
    .replace(
        "[contracts.main]\nprovider = \"up\"\n",
        &format!(
            "[contracts.main]\nproviders = [{}]\n{extra}\n",
            names.join(", ")
        ),
    )
    .replace(
        "[contracts.other]\nprovider = \"up\"\n",
        &format!("[contracts.other]\nprovider = \"up\"\n{extra}\n"),
    );
    let env = |name: &str| (name == PROVIDER_KEY_ENV).then(|| PROVIDER_KEY.to_string());
    let config = releasegate_proxy::load::from_toml_with_env(&text, &env).unwrap();
    (start(config, secondary.clone()).await, secondary)
}

/// The same proxy with `main` on the secondary alone: what the failover must equal.
async fn secondary_alone() -> TestApp {
    TestConfig::default().spawn().await
}

fn seen(upstream: &Upstream) -> usize {
    upstream.seen.lock().unwrap().len()
}

async fn body_of(response: reqwest::Response) -> (u16, Vec<u8>) {
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

/// A provider that accepts connections and closes each at once, unanswered.
async fn closing_provider() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    format!("http://{address}")
}

#[tokio::test]
async fn a_failing_first_provider_hands_the_request_to_the_second_unseen() {
    let reference = secondary_alone().await;
    let (want_status, want) = body_of(reference.post(&request()).await).await;
    assert_eq!(want_status, 200);
    reference.stop().await;

    let (first, first_url) = spawn_upstream().await;
    first.script(
        503,
        b"{\"detail\": \"overloaded\"}".to_vec(),
        &[],
        Duration::ZERO,
    );
    let closing = closing_provider().await;
    // Nothing listens here: the connection is refused.
    let refused = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", socket.local_addr().unwrap())
    };
    for (name, url) in [
        ("unavailable", first_url),
        ("closing", closing),
        ("refused", refused),
    ] {
        let (app, secondary) = behind(&[("first", format!("base_url = \"{url}\""))], "", "").await;
        let response = app.post(&request()).await;
        let headers = format!("{:?}", response.headers()).to_ascii_lowercase();
        let (status, body) = body_of(response).await;
        // The secondary's release byte for byte, but for the model: a contract of several
        // providers releases the one the caller asked for (a provider's own would name it).
        let model = |value: &Value| format!("\"model\":{value}");
        let want = String::from_utf8_lossy(&want).replacen(
            &model(&native_answer()["model"]),
            &model(&request()["model"]),
            1,
        );
        assert_eq!(
            (status, String::from_utf8_lossy(&body)),
            (200, want.into()),
            "{name}"
        );
        // Nothing says which provider answered.
        assert!(
            !headers.contains("first") && !headers.contains("provider"),
            "{name}: {headers}"
        );
        assert_eq!(seen(&secondary), 1, "{name}");
        let metrics = app.metrics().await;
        assert!(
            metrics.contains("releasegate_answered_total{contract=\"main\",provider=\"up\"} 1"),
            "{name}: {metrics}"
        );
        assert!(
            metrics.contains("releasegate_failovers_total{contract=\"main\",provider=\"first\""),
            "{name}"
        );
        app.stop().await;
    }
    assert_eq!(seen(&first), 1);
}

/// Which provider answered is not in the release: each answers with a model id of its
/// own, and the recipient gets the model it asked for from both.
#[tokio::test]
async fn the_released_model_does_not_name_the_provider_that_answered() {
    let (first, first_url) = spawn_upstream().await;
    let (app, secondary) =
        behind(&[("first", format!("base_url = \"{first_url}\""))], "", "").await;
    let mut own = native_answer();
    own["model"] = Value::from("first-model-7b");
    first.answer(own);
    let mut bodies = Vec::new();
    for _ in 0..2 {
        let (status, body) = body_of(app.post(&request()).await).await;
        assert_eq!(status, 200);
        bodies.push(body);
        // The second time the first provider is down: the secondary answers.
        first.script(503, b"{}".to_vec(), &[], Duration::ZERO);
    }
    assert_eq!((seen(&first), seen(&secondary)), (2, 1));
    let first: Value = serde_json::from_slice(&bodies[0]).unwrap();
    assert_eq!(first["model"], request()["model"]);
    assert_eq!(
        bodies[0], bodies[1],
        "the same bytes whichever provider answered"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_request_the_first_provider_received_is_not_sent_again_unless_retry_sent() {
    let (first, first_url) = spawn_upstream().await;
    // The first provider holds every request past the proxy's timeout.
    first.close();
    let lines = format!("base_url = \"{first_url}\"\ntimeout_ms = 300");
    let (app, secondary) = behind(&[("first", lines.clone())], "", "").await;
    let (status, body) = body_of(app.post(&request()).await).await;
    assert_eq!(status, 504, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("upstream_timeout"));
    assert_eq!(seen(&secondary), 0);
    app.stop().await;

    let (app, secondary) = behind(&[("first", lines)], "retry_sent = true", "").await;
    assert_eq!(app.post(&request()).await.status(), 200);
    assert_eq!(seen(&secondary), 1);
    app.stop().await;
    first.open();
}

#[tokio::test]
async fn an_open_circuit_sends_nothing_to_its_provider_until_the_cooldown_ends() {
    let (first, first_url) = spawn_upstream().await;
    first.script(500, b"{}".to_vec(), &[], Duration::ZERO);
    let lines = format!(
        "base_url = \"{first_url}\"\ncircuit = {{ failures = 2, window_ms = 60000, cooldown_ms = 800 }}"
    );
    let (app, secondary) = behind(&[("first", lines)], "", "").await;
    for _ in 0..5 {
        assert_eq!(app.post(&request()).await.status(), 200);
    }
    // Two failures opened it: the three requests after went straight to the second.
    assert_eq!(seen(&first), 2);
    assert_eq!(seen(&secondary), 5);
    let metrics = app.metrics().await;
    assert!(
        metrics.contains("releasegate_circuit_state{provider=\"first\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains(
        "releasegate_failovers_total{contract=\"main\",provider=\"first\",reason=\"circuit_open\"} 3"
    ));
    // After the cooldown one trial goes to the first provider; it answers now, and closes it.
    first.answer(native_answer());
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(app.post(&request()).await.status(), 200);
    assert_eq!(seen(&first), 3);
    assert!(
        app.metrics()
            .await
            .contains("releasegate_circuit_state{provider=\"first\"} 0")
    );
    app.stop().await;
}

async fn post_as(
    app: &TestApp,
    key: &str,
    contract: &str,
    extra: &[(&str, &str)],
) -> (u16, Vec<u8>) {
    let authorization = format!("Bearer {key}");
    let mut headers = vec![
        ("authorization", authorization.as_str()),
        ("x-release-contract", contract),
    ];
    headers.extend_from_slice(extra);
    body_of(
        app.post_raw(serde_json::to_vec(&request()).unwrap(), &headers)
            .await,
    )
    .await
}

#[tokio::test]
async fn the_cache_answers_a_recipient_from_its_own_requests_released_afresh() {
    let cache = "cache = { ttl_s = 60, max_bytes = 1048576 }";
    let (app, upstream) = behind(&[], cache, "").await;
    let (status, first) = post_as(&app, CLIENT_KEY, "main", &[]).await;
    assert_eq!(status, 200);
    let (_, again) = post_as(&app, CLIENT_KEY, "main", &[]).await;
    // Hit and miss: the same bytes; the provider was asked once.
    assert_eq!(first, again);
    assert_eq!(seen(&upstream), 1);
    // Another recipient's identical request is its own: it goes upstream.
    let (_, other) = post_as(&app, MULTI_KEY, "main", &[]).await;
    assert_eq!(other, first);
    assert_eq!(seen(&upstream), 2);
    // The same recipient's other contract: one answer, released under that contract's rules.
    let (status, coarse) = post_as(&app, MULTI_KEY, "other", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(seen(&upstream), 2);
    let coarse: Value = serde_json::from_slice(&coarse).unwrap();
    let full: Value = serde_json::from_slice(&first).unwrap();
    assert_ne!(coarse, full);
    // `other` releases the choice alone (its probabilities are fills of the choice).
    assert_eq!(
        coarse["answers"]["cause"]["probabilities"]["B"], 1.0,
        "{coarse}"
    );
    // The caller's no-store and no-cache: asked again.
    post_as(&app, CLIENT_KEY, "main", &[("cache-control", "no-store")]).await;
    post_as(&app, CLIENT_KEY, "main", &[("cache-control", "no-cache")]).await;
    assert_eq!(seen(&upstream), 4);
    // Errors are never kept.
    upstream.script(503, b"{}".to_vec(), &[], Duration::ZERO);
    let question = serde_json::json!({"model": "jev-latest", "state": "new", "questions": request()["questions"]});
    for _ in 0..2 {
        let response = app
            .post_raw(
                serde_json::to_vec(&question).unwrap(),
                &[("authorization", &format!("Bearer {CLIENT_KEY}"))],
            )
            .await;
        assert_ne!(response.status(), 200);
    }
    assert_eq!(seen(&upstream), 6);
    let metrics = app.metrics().await;
    for line in [
        "releasegate_cache_lookups_total{contract=\"main\",result=\"hit\"} 1",
        "releasegate_cache_lookups_total{contract=\"main\",result=\"bypass\"} 2",
        "releasegate_cache_lookups_total{contract=\"other\",result=\"hit\"} 1",
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    app.stop().await;
}

/// A provider after a failover that refuses the proxy's key is the one the operators' logs
/// name, not the contract's first.
#[tokio::test]
async fn an_error_after_a_failover_is_logged_with_the_provider_that_gave_it() {
    let dir = crate::helpers::scratch("failover-log");
    let path = dir.join("decisions.jsonl");
    let (first, first_url) = spawn_upstream().await;
    first.script(503, b"{}".to_vec(), &[], Duration::ZERO);
    // The decision log's table rides after the first provider's lines.
    let lines = format!(
        "base_url = \"{first_url}\"\n[decision_log]\npath = \"{}\"",
        path.display()
    );
    let (app, secondary) = behind(&[("first", lines)], "", "").await;
    secondary.script(401, b"{}".to_vec(), &[], Duration::ZERO);
    let (status, body) = body_of(app.post(&request()).await).await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    assert_eq!((seen(&first), seen(&secondary)), (1, 1));
    app.stop().await;
    let text = std::fs::read_to_string(&path).unwrap();
    let line: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(
        (line["status"].as_u64(), line["provider"].as_str()),
        (Some(502), Some("up"))
    );
}

/// A hit is the answer a miss would get: the entry of the provider the request would go to
/// first now, never another provider's (its values, codebooks and usage differ).
#[tokio::test]
async fn the_cache_serves_only_the_entry_of_the_provider_a_miss_would_ask() {
    let (first, first_url) = spawn_upstream().await;
    first.script(500, b"{}".to_vec(), &[], Duration::ZERO);
    let lines = format!(
        "base_url = \"{first_url}\"\ncircuit = {{ failures = 2, window_ms = 60000, cooldown_ms = 800 }}"
    );
    let cache = "cache = { ttl_s = 60, max_bytes = 1048576 }";
    let (app, secondary) = behind(&[("first", lines)], cache, "").await;
    let asked = || (seen(&first), seen(&secondary));
    // The first provider fails, the second answers (and its answer is kept).
    assert_eq!(post_as(&app, CLIENT_KEY, "main", &[]).await.0, 200);
    assert_eq!(asked(), (1, 1));
    // The first provider's circuit still admits: its entry is looked for, not the second's.
    assert_eq!(post_as(&app, CLIENT_KEY, "main", &[]).await.0, 200);
    assert_eq!(asked(), (2, 2));
    // Now open: a miss would go to the second, so its entry answers.
    assert_eq!(post_as(&app, CLIENT_KEY, "main", &[]).await.0, 200);
    assert_eq!(asked(), (2, 2));
    // Past the cooldown the first provider would take the request again: asked, then kept.
    first.answer(native_answer());
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(post_as(&app, CLIENT_KEY, "main", &[]).await.0, 200);
    assert_eq!(asked(), (3, 2));
    assert_eq!(post_as(&app, CLIENT_KEY, "main", &[]).await.0, 200);
    assert_eq!(asked(), (3, 2));
    app.stop().await;
}

#[tokio::test]
async fn a_circuit_opened_on_one_replica_stops_the_other_through_the_store() {
    let Some(redis) = crate::ratelimit_store::Redis::start() else {
        return;
    };
    let store = format!(
        "[rate_limit_store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 200\n",
        redis.url()
    );
    let (first, first_url) = spawn_upstream().await;
    first.script(500, b"{}".to_vec(), &[], Duration::ZERO);
    let lines = format!(
        "base_url = \"{first_url}\"\ncircuit = {{ failures = 2, window_ms = 60000, cooldown_ms = 30000 }}\n{store}"
    );
    let (one, _) = behind(&[("first", lines.clone())], "", "").await;
    let (two, _) = behind(&[("first", lines)], "", "").await;
    // Two failures on replica one open its circuit.
    for _ in 0..2 {
        assert_eq!(one.post(&request()).await.status(), 200);
    }
    assert_eq!(seen(&first), 2);
    // Within a second the other replica sends it nothing either.
    tokio::time::sleep(Duration::from_millis(700)).await;
    for _ in 0..3 {
        assert_eq!(two.post(&request()).await.status(), 200);
    }
    assert_eq!(seen(&first), 2);
    let metrics = two.metrics().await;
    assert!(
        metrics.contains("releasegate_circuit_state{provider=\"first\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("releasegate_circuit_store_degraded 0"),
        "{metrics}"
    );
    // The store gone: each replica says so and keeps its own circuits.
    redis.kill();
    let mut degraded = false;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if two
            .metrics()
            .await
            .contains("releasegate_circuit_store_degraded 1")
        {
            degraded = true;
            break;
        }
    }
    assert!(degraded);
    one.stop().await;
    two.stop().await;
}

/// The value of the series `name` (a full series name with labels) in a metrics text.
fn series(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

#[tokio::test]
async fn the_overhead_histogram_leaves_out_the_providers_time() {
    let (app, upstream) = behind(&[], "", "").await;
    upstream.script(
        200,
        serde_json::to_vec(&native_answer()).unwrap(),
        &[],
        Duration::from_millis(300),
    );
    assert_eq!(app.post(&request()).await.status(), 200);
    let metrics = app.metrics().await;
    let count = series(
        &metrics,
        "releasegate_overhead_seconds_count{contract=\"main\"}",
    );
    let overhead = series(
        &metrics,
        "releasegate_overhead_seconds_sum{contract=\"main\"}",
    );
    let total = series(
        &metrics,
        "releasegate_request_duration_seconds_sum{contract=\"main\",route=\"systemone\",status_class=\"2xx\"}",
    );
    assert_eq!(count, 1.0);
    // The same request's time, less at least the provider's 300 ms.
    assert!(
        overhead >= 0.0 && overhead + 0.3 <= total,
        "{overhead} {total}"
    );
    app.stop().await;
}
